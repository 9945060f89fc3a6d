"""The model cards' own inference, written for the encoder tests independently of
scripts/mltool_encoders: each preset's constructor (timm / transformers / conch with the card's
values), its torchvision transform on a PIL tile, and its forward. Random weights come from
torch.manual_seed(seed) before the constructor, as `encoders.py export --random-weights --seed`
promises (CONCH v1.5 takes the exported module's tensors instead: its constructor is ours)."""
import json

import torch
from torchvision import transforms as T

IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
OPENAI = ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711))
HOPT = ((0.707223, 0.578729, 0.703617), (0.211883, 0.230117, 0.177517))
HALF = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
LUNIT = ((0.70322989, 0.53606487, 0.66096631), (0.21716536, 0.26081574, 0.20723464))
BIL, BIC = T.InterpolationMode.BILINEAR, T.InterpolationMode.BICUBIC


def transform(resize, crop, interp, norm):
    return T.Compose([T.Resize(resize, interpolation=interp), T.CenterCrop(crop), T.ToTensor(),
                      T.Normalize(*norm)])


def _timm(name, **kw):
    def build():
        import timm
        return timm.create_model(name, pretrained=False, **kw)
    return build


def _swiglu():
    import timm
    return {"mlp_layer": timm.layers.SwiGLUPacked, "act_layer": torch.nn.SiLU}


def _cls_mean(skip):
    return lambda m, x: torch.cat([m(x)[:, 0], m(x)[:, skip:].mean(1)], dim=-1)


def _plain(m, x):
    return m(x)


def _hf(kind, **cfg):
    def build():
        import transformers
        if kind == "vit":
            return transformers.ViTModel(transformers.ViTConfig(**cfg), add_pooling_layer=False)
        return transformers.Dinov2Model(transformers.Dinov2Config(**cfg))
    return build


def _conch():
    from conch.open_clip_custom import factory
    cfg = json.loads((factory.CFG_DIR / "conch_ViT-B-16.json").read_text())
    cfg.pop("custom_text", None)
    return factory.CoCa(**cfg)


def _resnet_trunc(m, x):
    return torch.nn.functional.adaptive_avg_pool2d(m(x)[0], 1).flatten(1)


def _kaiko(arch, img):
    return (_timm(arch, num_classes=0, img_size=img, dynamic_img_size=True), _plain,
            transform(224, 224, BIL, HALF))


def refs():
    """name -> (build() -> model, forward(model, x) -> N x D, PIL transform)."""
    sw = _swiglu()
    giant_h = dict(img_size=224, init_values=1e-5, num_classes=0, mlp_ratio=5.3375,
                   global_pool="", dynamic_img_size=True, **sw)
    hopt = dict(num_classes=0, img_size=224, global_pool="token", init_values=1e-5,
                dynamic_img_size=False)
    r = {
        "uni": (_timm("vit_large_patch16_224", img_size=224, patch_size=16, init_values=1e-5,
                      num_classes=0, dynamic_img_size=True), _plain,
                transform(224, 224, BIL, IMAGENET)),
        "uni2-h": (_timm("vit_giant_patch14_224", img_size=224, patch_size=14, depth=24,
                         num_heads=24, init_values=1e-5, embed_dim=1536, mlp_ratio=2.66667 * 2,
                         num_classes=0, no_embed_class=True, reg_tokens=8,
                         dynamic_img_size=True, **sw), _plain,
                   transform(224, 224, BIL, IMAGENET)),
        "conch-v1": (_conch, lambda m, x: m.encode_image(x, proj_contrast=False, normalize=False),
                     transform(448, 448, BIC, OPENAI)),
        "virchow": (_timm("vit_huge_patch14_224", **giant_h), _cls_mean(1),
                    transform(224, 224, BIC, IMAGENET)),
        "virchow2": (_timm("vit_huge_patch14_224", reg_tokens=4, **giant_h), _cls_mean(5),
                     transform(224, 224, BIC, IMAGENET)),
        "h-optimus-0": (_timm("vit_giant_patch14_reg4_dinov2", **hopt), _plain,
                        transform(224, 224, BIL, HOPT)),
        "h-optimus-1": (_timm("vit_giant_patch14_reg4_dinov2", **hopt), _plain,
                        transform(224, 224, BIL, HOPT)),
        "h0-mini": (_timm("vit_base_patch14_reg4_dinov2", img_size=224, num_classes=0,
                          global_pool="", init_values=1e-5, dynamic_img_size=True, **sw),
                    lambda m, x: m(x)[:, 0], transform(224, 224, BIC, HOPT)),
        "gigapath": (_timm("vit_giant_patch14_dinov2", img_size=224, in_chans=3, patch_size=16,
                           embed_dim=1536, depth=40, num_heads=24, init_values=1e-5,
                           mlp_ratio=5.33334, num_classes=0), _plain,
                     T.Compose([T.Resize(256, interpolation=BIC), T.CenterCrop(224),
                                T.ToTensor(), T.Normalize(*IMAGENET)])),
        "phikon": (_hf("vit", hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                       intermediate_size=3072, image_size=224, patch_size=16, qkv_bias=True,
                       layer_norm_eps=1e-12),
                   lambda m, x: m(pixel_values=x).last_hidden_state[:, 0, :],
                   transform(224, 224, BIL, IMAGENET)),
        "phikon-v2": (_hf("dinov2", hidden_size=1024, num_hidden_layers=24,
                          num_attention_heads=16, patch_size=16, image_size=224, mlp_ratio=4,
                          layerscale_value=1e-5, layer_norm_eps=1e-6, use_swiglu_ffn=False),
                      lambda m, x: m(x).last_hidden_state[:, 0, :],
                      transform(224, 224, BIL, IMAGENET)),
        "midnight": (_hf("dinov2", hidden_size=1536, num_hidden_layers=40,
                         num_attention_heads=24, patch_size=14, image_size=224, mlp_ratio=4,
                         layerscale_value=1e-5, layer_norm_eps=1e-6, use_swiglu_ffn=True),
                     lambda m, x: (lambda o: torch.cat([o[:, 0, :], o[:, 1:, :].mean(1)], -1))(
                         m(x).last_hidden_state),
                     transform(224, 224, BIL, HALF)),
        "lunit-vits8": (_timm("vit_small_patch8_224", img_size=224, num_classes=0,
                              dynamic_img_size=True), _plain, transform(224, 224, BIC, LUNIT)),
        # TRIDENT's features_only ResNet-50 (its num_classes=0 left out: the hub file has the
        # classifier, and building it keeps the seeded initialisation the export's).
        "resnet50-trunc": (_timm("resnet50", features_only=True, out_indices=[3]),
                           _resnet_trunc, transform(224, 224, BIL, IMAGENET)),
        "conch-v1.5": (None, None, transform(448, 448, BIL, IMAGENET)),
    }
    for n, arch, img in [("vits16", "vit_small_patch16_224", 224),
                         ("vits8", "vit_small_patch8_224", 224),
                         ("vitb16", "vit_base_patch16_224", 224),
                         ("vitb8", "vit_base_patch8_224", 224),
                         ("vitl14", "vit_large_patch14_reg4_dinov2", 518)]:
        r[f"kaiko-{n}"] = _kaiko(arch, img)
    return r


def conch15_forward(sd, x):
    """CONCH v1.5's tower (TRIDENT's conchv1_5 with einops) on the tensors `sd` (keys
    trunk.*, attn_pool_contrast.*, ln_contrast.*): patch embedding, class token, the
    position embedding interpolated with the DINO scale factor (+0.1), the blocks of a timm
    ViT-L/16 (layer scale), final norm, one-query attentional pooling, LayerNorm."""
    import math
    import timm
    from einops import rearrange, repeat
    F = torch.nn.functional
    trunk = timm.create_model("vit_large_patch16_224", pretrained=False, init_values=1.0,
                              num_classes=0)
    trunk.load_state_dict({k[6:]: v for k, v in sd.items() if k.startswith("trunk.")})
    trunk.eval()
    B, _, w, h = x.shape
    t = rearrange(F.conv2d(x, sd["trunk.patch_embed.proj.weight"],
                           sd["trunk.patch_embed.proj.bias"], stride=16), "b d h w -> b (h w) d")
    t = torch.cat([sd["trunk.cls_token"].expand(B, -1, -1), t], 1)
    pos = sd["trunk.pos_embed"]
    N = pos.shape[1] - 1
    w0, h0 = w // 16 + 0.1, h // 16 + 0.1
    grid = F.interpolate(rearrange(pos[:, 1:], "o (a b) d -> o d a b", a=int(math.sqrt(N))),
                         scale_factor=(w0 / math.sqrt(N), h0 / math.sqrt(N)), mode="bicubic")
    t = t + torch.cat([pos[:, :1], rearrange(grid, "o d a b -> o (a b) d")], 1)
    t = trunk.norm(trunk.blocks(t))
    p = "attn_pool_contrast."
    ln = lambda z, n: F.layer_norm(z, z.shape[-1:], sd[n + ".weight"], sd[n + ".bias"])  # noqa
    xk = ln(rearrange(t, "b n d -> b 1 n d"), p + "ln_k")
    q = ln(repeat(sd[p + "query"], "n d -> b m n d", b=B, m=1), p + "ln_q")
    q = q @ sd[p + "to_q.weight"].T
    k, v = (xk @ sd[p + "to_kv.weight"].T).chunk(2, dim=-1)
    q, k, v = (rearrange(z, "b t n (h d) -> b h t n d", h=8) for z in (q, k, v))
    sim = torch.einsum("...id,...jd->...ij", q * (96 ** -0.5), k)
    attn = (sim - sim.amax(dim=-1, keepdim=True)).softmax(dim=-1)
    out = rearrange(torch.einsum("...ij,...jd->...id", attn, v), "b h t n d -> b t n (h d)")
    out = (out @ sd[p + "to_out.weight"].T).squeeze(1)[:, 0]
    return ln(out, "ln_contrast")
