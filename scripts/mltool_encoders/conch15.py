"""CONCH v1.5's image tower as TRIDENT builds it (trident/patch_encoder_models/model_zoo/
conchv1_5): an iBOT-style ViT-L/16 trunk (layer scale 1.0) built at 224 px whose position
embedding is interpolated at run time (bicubic, the DINO '+0.1' scale factor), an attentional
pooler with one query, and a LayerNorm. The trunk is timm's VisionTransformer, whose state-dict
names are those of the published pytorch_model_vision.bin ('trunk.*', 'attn_pool_contrast.*',
'ln_contrast.*'); the forward below is written after TRIDENT's, not imported from it (TRIDENT
is not on PyPI)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class AttentionalPooler(nn.Module):
    """Cross-attention of n_queries learned queries over the tokens (CoCa's pooler)."""

    def __init__(self, d_model=768, context_dim=1024, n_head=8, n_queries=1):
        super().__init__()
        self.query = nn.Parameter(torch.randn(n_queries, d_model))
        self.heads = n_head
        dim_head = d_model // n_head
        self.scale = dim_head ** -0.5
        inner = dim_head * n_head
        self.ln_k = nn.LayerNorm(context_dim)
        self.ln_q = nn.LayerNorm(d_model)
        self.to_q = nn.Linear(d_model, inner, bias=False)
        self.to_kv = nn.Linear(context_dim, inner * 2, bias=False)
        self.to_out = nn.Linear(inner, d_model, bias=False)

    def forward(self, x):
        b, n, _ = x.shape
        x = self.ln_k(x)
        q = self.to_q(self.ln_q(self.query)).unsqueeze(0).expand(b, -1, -1)
        k, v = self.to_kv(x).chunk(2, dim=-1)
        h = self.heads

        def split(t):
            return t.reshape(b, t.shape[1], h, -1).transpose(1, 2)

        q, k, v = split(q), split(k), split(v)
        sim = (q * self.scale) @ k.transpose(-2, -1)
        sim = sim - sim.amax(dim=-1, keepdim=True).detach()
        out = sim.softmax(dim=-1) @ v
        out = out.transpose(1, 2).reshape(b, -1, h * out.shape[-1])
        return self.to_out(out)


class CONCHVisionTower(nn.Module):
    """forward(x): N x 3 x S x S (S a multiple of 16; the card: 448) -> N x 768."""

    def __init__(self):
        super().__init__()
        import timm
        self.trunk = timm.create_model("vit_large_patch16_224", pretrained=False, img_size=224,
                                       init_values=1.0, num_classes=0)
        self.attn_pool_contrast = AttentionalPooler(768, 1024, 8, 1)
        self.ln_contrast = nn.LayerNorm(768)

    def adapt_state_dict(self, sd):
        """As TRIDENT's create_model_from_pretrained: the checkpoint's trunk.pos_embed
        resampled (bilinear, no antialias) to the 224-px trunk's 14 x 14 grid."""
        from timm.layers import resample_abs_pos_embed
        pos = sd.get("trunk.pos_embed")
        if pos is not None and pos.shape != self.trunk.pos_embed.shape:
            sd = dict(sd)
            sd["trunk.pos_embed"] = resample_abs_pos_embed(
                pos, new_size=self.trunk.patch_embed.grid_size, num_prefix_tokens=1,
                interpolation="bilinear", antialias=False, verbose=False)
        return sd

    def _pos(self, npatch: int, w: int, h: int):
        pos = self.trunk.pos_embed
        n = pos.shape[1] - 1
        if npatch == n and w == h:
            return pos
        side = int(math.sqrt(n))
        p = self.trunk.patch_embed.patch_size[0]
        w0, h0 = w // p + 0.1, h // p + 0.1
        grid = pos[:, 1:].reshape(1, side, side, -1).permute(0, 3, 1, 2)
        grid = F.interpolate(grid, scale_factor=(w0 / side, h0 / side), mode="bicubic")
        grid = grid.permute(0, 2, 3, 1).reshape(1, -1, pos.shape[-1])
        return torch.cat([pos[:, :1], grid], dim=1)

    def forward(self, x):
        w, h = int(x.shape[2]), int(x.shape[3])  # constants in the trace: the card's input size
        t = self.trunk.patch_embed.proj(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.trunk.cls_token.expand(t.shape[0], -1, -1), t], dim=1)
        t = t + self._pos(t.shape[1] - 1, w, h)
        t = self.trunk.norm(self.trunk.blocks(t))
        return self.ln_contrast(self.attn_pool_contrast(t)[:, 0])
