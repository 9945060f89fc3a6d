"""Every patch-encoder preset, by name (scripts/encoders.py list shows them)."""
from .presets import CC_NC_ND, HOPTIMUS, IMAGENET, KAIKO, LUNIT, OPENAI_CLIP, Preset

SWIGLU = {"mlp_layer": "SwiGLUPacked", "act_layer": "SiLU"}

_UNI_CITE = "Chen et al., Towards a general-purpose foundation model for computational pathology, Nature Medicine 2024"
_CONCH_CITE = "Lu et al., A visual-language foundation model for computational pathology, Nature Medicine 2024"
_VIRCHOW_CITE = "Vorontsov et al., A foundation model for clinical-grade computational pathology and rare cancers detection, Nature Medicine 2024"
_VIRCHOW2_CITE = "Zimmermann et al., Virchow2: Scaling self-supervised mixed magnification models in pathology, arXiv:2408.00738"
_HOPT_CITE = "Saillard et al., H-optimus-0, Bioptimus 2024 (github.com/bioptimus/releases)"
_KAIKO_CITE = "Aben et al. (kaiko.ai), Towards large-scale training of pathology foundation models, arXiv:2404.15217"
_MIDNIGHT_CITE = "Karasikov et al. (kaiko.ai), Training state-of-the-art pathology foundation models with orders of magnitude less data, arXiv:2504.05186"

_NOT_ON_PYPI = ("its Hugging Face repository ships its own modeling code (trust_remote_code); "
                "that code is not on PyPI, so it cannot be imported without network access to the hub")

PATCH_PRESETS = {p.name: p for p in [
    Preset("uni", "UNI (ViT-L/16)", "v1", 1024, 224, 224, "bilinear", IMAGENET,
           "MahmoodLab/UNI", "pytorch_model.bin", CC_NC_ND, _UNI_CITE,
           arch="vit_large_patch16_224",
           kwargs={"img_size": 224, "patch_size": 16, "init_values": 1e-5, "num_classes": 0,
                   "dynamic_img_size": True}, amp="f16"),
    Preset("uni2-h", "UNI2-h (ViT-H/14, 8 registers, SwiGLU)", "v2", 1536, 224, 224, "bilinear",
           IMAGENET, "MahmoodLab/UNI2-h", "pytorch_model.bin", CC_NC_ND, _UNI_CITE,
           arch="vit_giant_patch14_224",
           kwargs={"img_size": 224, "patch_size": 14, "depth": 24, "num_heads": 24,
                   "init_values": 1e-5, "embed_dim": 1536, "mlp_ratio": 2.66667 * 2,
                   "num_classes": 0, "no_embed_class": True, "reg_tokens": 8,
                   "dynamic_img_size": True, **SWIGLU}, amp="bf16", giant=True),
    Preset("conch-v1", "CONCH (ViT-B/16 image tower, CoCa)", "v1", 512, 448, 448, "bicubic",
           OPENAI_CLIP, "MahmoodLab/CONCH", "pytorch_model.bin", CC_NC_ND, _CONCH_CITE,
           builder="conch", arch="conch_ViT-B-16", head="conch",
           notes="encode_image(proj_contrast=False, normalize=False), as TRIDENT"),
    Preset("conch-v1.5", "CONCH v1.5 (ViT-L/16 image tower of TITAN)", "v1.5", 768, 448, 448,
           "bilinear", IMAGENET, "MahmoodLab/conchv1_5", "pytorch_model_vision.bin", CC_NC_ND,
           "Ding et al., Multimodal whole slide foundation model for pathology (TITAN), arXiv:2411.19666",
           builder="conch15", head="timm", tile_size=512, amp="f16",
           notes="TRIDENT's CONCHVisionTower: trunk at 224 (the checkpoint's pos_embed resampled "
                 "to 14x14 as TRIDENT loads it), interpolated to 448 at run time, attention "
                 "pooling, LayerNorm"),
    Preset("virchow", "Virchow (ViT-H/14, SwiGLU)", "v1", 2560, 224, 224, "bicubic", IMAGENET,
           "paige-ai/Virchow", "pytorch_model.bin", "Apache-2.0", _VIRCHOW_CITE,
           arch="vit_huge_patch14_224",
           kwargs={"img_size": 224, "init_values": 1e-5, "num_classes": 0, "mlp_ratio": 5.3375,
                   "global_pool": "", "dynamic_img_size": True, **SWIGLU},
           head="cls+mean", skip=1, amp="f16", giant=True,
           notes="cat(class token, mean of the 256 patch tokens)"),
    Preset("virchow2", "Virchow2 (ViT-H/14, 4 registers, SwiGLU)", "v2", 2560, 224, 224, "bicubic",
           IMAGENET, "paige-ai/Virchow2", "pytorch_model.bin", CC_NC_ND, _VIRCHOW2_CITE,
           arch="vit_huge_patch14_224",
           kwargs={"img_size": 224, "init_values": 1e-5, "num_classes": 0, "reg_tokens": 4,
                   "mlp_ratio": 5.3375, "global_pool": "", "dynamic_img_size": True, **SWIGLU},
           head="cls+mean", skip=5, amp="f16", giant=True,
           notes="cat(class token, mean of the patch tokens after the 4 registers)"),
    Preset("h-optimus-0", "H-optimus-0 (ViT-g/14, 4 registers)", "v0", 1536, 224, 224, "bilinear",
           HOPTIMUS, "bioptimus/H-optimus-0", "pytorch_model.bin", "Apache-2.0", _HOPT_CITE,
           arch="vit_giant_patch14_reg4_dinov2",
           kwargs={"num_classes": 0, "img_size": 224, "global_pool": "token",
                   "init_values": 1e-5, "dynamic_img_size": False}, amp="f16", giant=True),
    Preset("h-optimus-1", "H-optimus-1 (ViT-g/14, 4 registers)", "v1", 1536, 224, 224, "bilinear",
           HOPTIMUS, "bioptimus/H-optimus-1", "pytorch_model.bin", "see the card (gated)",
           _HOPT_CITE, arch="vit_giant_patch14_reg4_dinov2",
           kwargs={"num_classes": 0, "img_size": 224, "global_pool": "token",
                   "init_values": 1e-5, "dynamic_img_size": False}, amp="f16", giant=True),
    Preset("h0-mini", "H0-mini (ViT-B/14, 4 registers, SwiGLU; distilled from H-optimus-1)", "v1",
           768, 224, 224, "bicubic", HOPTIMUS, "bioptimus/H0-mini", "model.safetensors",
           CC_NC_ND, "Filiot et al., Distilling foundation models for robust and efficient models in digital pathology, arXiv:2501.16239",
           arch="vit_base_patch14_reg4_dinov2",
           kwargs={"img_size": 224, "num_classes": 0, "global_pool": "", "init_values": 1e-5,
                   "dynamic_img_size": True, **SWIGLU}, head="cls", amp="f16",
           notes="class token (TRIDENT's default; the card also shows cat(cls, mean patch))"),
    Preset("gigapath", "Prov-GigaPath tile encoder (ViT-g/16)", "v1", 1536, 256, 224, "bicubic",
           IMAGENET, "prov-gigapath/prov-gigapath", "pytorch_model.bin", "Apache-2.0",
           "Xu et al., A whole-slide foundation model for digital pathology from real-world data, Nature 2024",
           arch="vit_giant_patch14_dinov2",
           kwargs={"img_size": 224, "in_chans": 3, "patch_size": 16, "embed_dim": 1536,
                   "depth": 40, "num_heads": 24, "init_values": 1e-5, "mlp_ratio": 5.33334,
                   "num_classes": 0}, amp="f16", giant=True),
    Preset("phikon", "Phikon (ViT-B/16, iBOT)", "v1", 768, 224, 224, "bilinear", IMAGENET,
           "owkin/phikon", "pytorch_model.bin", "Owkin non-commercial (see the card)",
           "Filiot et al., Scaling self-supervised learning for histopathology with masked image modeling, medRxiv 2023",
           builder="hf-vit",
           kwargs={"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                   "intermediate_size": 3072, "image_size": 224, "patch_size": 16,
                   "qkv_bias": True, "layer_norm_eps": 1e-12},
           head="hf-cls", ignore_unexpected=("pooler.",),
           notes="ViTModel(add_pooling_layer=False): last_hidden_state[:, 0]"),
    Preset("phikon-v2", "Phikon-v2 (ViT-L/16, DINOv2)", "v2", 1024, 224, 224, "bilinear",
           IMAGENET, "owkin/phikon-v2", "model.safetensors", "Owkin non-commercial (see the card)",
           "Filiot et al., Phikon-v2, a large and public feature extractor for biomarker prediction, arXiv:2409.09173",
           builder="hf-dinov2",
           kwargs={"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                   "patch_size": 16, "image_size": 224, "mlp_ratio": 4, "layerscale_value": 1e-5,
                   "layer_norm_eps": 1e-6, "use_swiglu_ffn": False},
           head="hf-cls", notes="Dinov2Model: last_hidden_state[:, 0]"),
    Preset("midnight", "Midnight-12k (ViT-g/14, DINOv2)", "12k", 3072, 224, 224, "bilinear", KAIKO,
           "kaiko-ai/midnight", "model.safetensors", "MIT", _MIDNIGHT_CITE,
           builder="hf-dinov2",
           kwargs={"hidden_size": 1536, "num_hidden_layers": 40, "num_attention_heads": 24,
                   "patch_size": 14, "image_size": 224, "mlp_ratio": 4, "layerscale_value": 1e-5,
                   "layer_norm_eps": 1e-6, "use_swiglu_ffn": True},
           head="hf-cls+mean", amp="f16", giant=True,
           notes="the card's classification embedding: cat(last_hidden_state[:, 0], mean of [:, 1:])"),
    Preset("lunit-vits8", "Lunit DINO ViT-S/8", "v1", 384, 224, 224, "bicubic", LUNIT,
           "1aurent/vit_small_patch8_224.lunit_dino", "model.safetensors",
           "Lunit non-commercial (see the card)",
           "Kang et al., Benchmarking self-supervised learning on diverse pathology datasets, CVPR 2023",
           arch="vit_small_patch8_224",
           kwargs={"img_size": 224, "num_classes": 0, "dynamic_img_size": True}),
    Preset("resnet50-trunc", "ResNet-50 (ImageNet) truncated after layer3, CLAM", "tv_in1k", 1024,
           224, 224, "bilinear", IMAGENET, "timm/resnet50.tv_in1k", "model.safetensors",
           "BSD-3-Clause (torchvision weights)",
           "He et al., Deep residual learning, CVPR 2016; Lu et al., CLAM, Nature BME 2021",
           arch="resnet50", kwargs={}, head="resnet-trunc", mpp=0.5, tile_size=256,
           notes="conv1..layer3 + adaptive average pool (the hub file's layer4 and fc are "
                 "loaded strictly and unused)"),
    Preset("hibou-b", "Hibou-B (ViT-B/14, registers)", "v1", 768, 224, 224, "bicubic",
           ((0.7068, 0.5755, 0.722), (0.195, 0.2316, 0.1816)), "histai/hibou-b",
           "model.safetensors", "Apache-2.0", "Nechaev et al., Hibou, arXiv:2406.05074",
           builder="none", offline=_NOT_ON_PYPI + " (AutoModel.from_pretrained('histai/hibou-b', "
           "trust_remote_code=True); PyPI's 'hibou' is an unrelated package)"),
    Preset("hibou-l", "Hibou-L (ViT-L/14, registers)", "v1", 1024, 224, 224, "bicubic",
           ((0.7068, 0.5755, 0.722), (0.195, 0.2316, 0.1816)), "histai/hibou-L",
           "model.safetensors", "Apache-2.0", "Nechaev et al., Hibou, arXiv:2406.05074",
           builder="none", offline=_NOT_ON_PYPI + " (AutoModel.from_pretrained('histai/hibou-L', "
           "trust_remote_code=True); PyPI's 'hibou' is an unrelated package)"),
    Preset("musk", "MUSK (BEiT-3 ViT-L/16 image tower)", "v1", 1024, 384, 384, "bicubic",
           ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)), "xiangjx/musk", "model.safetensors",
           CC_NC_ND, "Xiang et al., A vision-language foundation model for precision oncology, Nature 2025",
           builder="none", offline="its code (the 'musk' package: timm's musk_large_patch16_384 on "
           "torchscale/BEiT-3 with fairscale) is published only on GitHub "
           "(lilab-stanford/MUSK), not on PyPI (PyPI's 'musk' is an unrelated simulations "
           "package), so it cannot be installed offline"),
]}

for _name, _arch, _img, _dims in [("vits16", "vit_small_patch16_224", 224, 384),
                                  ("vits8", "vit_small_patch8_224", 224, 384),
                                  ("vitb16", "vit_base_patch16_224", 224, 768),
                                  ("vitb8", "vit_base_patch8_224", 224, 768),
                                  ("vitl14", "vit_large_patch14_reg4_dinov2", 518, 1024)]:
    PATCH_PRESETS[f"kaiko-{_name}"] = Preset(
        f"kaiko-{_name}", f"kaiko.ai {_name.upper()} (DINO/DINOv2)", "v1", _dims, 224, 224,
        "bilinear", KAIKO, f"1aurent/{_arch}.kaiko_ai_towards_large_pathology_fms",
        "model.safetensors", "see the card", _KAIKO_CITE, arch=_arch,
        kwargs={"num_classes": 0, "img_size": _img, "dynamic_img_size": True})
