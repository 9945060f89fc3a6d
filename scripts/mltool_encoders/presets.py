"""The patch-encoder presets: each model card's constructor (the library and keyword arguments
its card or TRIDENT's encoder factory uses), its transform, its inference forward, and where its
weights live. Values marked 'TRIDENT' follow mahmoodlab/TRIDENT's
trident/patch_encoder_models/load.py; the others the model's card."""
from dataclasses import dataclass, field

import torch

from . import heads

IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
OPENAI_CLIP = ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711))
HOPTIMUS = ((0.707223, 0.578729, 0.703617), (0.211883, 0.230117, 0.177517))
KAIKO = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
LUNIT = ((0.70322989, 0.53606487, 0.66096631), (0.21716536, 0.26081574, 0.20723464))

CC_NC_ND = "CC-BY-NC-ND-4.0"


@dataclass
class Preset:
    name: str
    title: str
    version: str
    dims: int
    resize: int
    crop: int
    interpolation: str            # bilinear | bicubic (PIL resampling on uint8: antialias true)
    norm: tuple                   # (mean, std)
    hub: str
    file: str                     # the weights file the hub repository publishes
    license: str
    citation: str
    builder: str = "timm"         # timm | hf-vit | hf-dinov2 | conch | conch15
    arch: str = ""                # timm model name / conch config name
    kwargs: dict = field(default_factory=dict)
    head: str = "timm"            # see HEADS
    skip: int = 1                 # prefix tokens skipped by the cls+mean head
    mpp: float = 0.5
    tile_size: int = 0            # 0: resize
    amp: str = ""                 # the card's GPU precision ("" none)
    giant: bool = False           # ViT-H/ViT-g: tested in the 'giant' label
    ignore_unexpected: tuple = () # hub keys the card's own loader drops (prefixes)
    offline: str = ""             # why it cannot be exported offline ("" it can)
    notes: str = ""

    @property
    def kind(self):
        return "patch"

    def preprocess(self):
        return {"resize": self.resize, "interpolation": self.interpolation, "antialias": True,
                "crop": self.crop, "mean": list(self.norm[0]), "std": list(self.norm[1])}

    def describe(self):
        """The list entry (JSON-ready)."""
        d = {"name": self.name, "kind": "patch", "title": self.title, "version": self.version,
             "dims": self.dims, "input": self.crop, "preprocess": self.preprocess(),
             "resize_rule": resize_rule(self), "mpp": self.mpp,
             "tile_size": self.tile_size or self.resize, "license": self.license,
             "hub": self.hub, "file": self.file, "exportable": not self.offline,
             "giant": self.giant}
        if self.offline:
            d["offline_reason"] = self.offline
        if self.amp:
            d["amp"] = self.amp
        if self.notes:
            d["notes"] = self.notes
        return d

    def build(self):
        """The bare architecture with fresh (seeded by the caller) weights, key names as the
        hub's file."""
        return BUILDERS[self.builder](self)

    def wrap(self, model):
        """The card's inference forward around the bare model."""
        if self.head == "cls+mean":
            return heads.ClsMeanTokens(model, self.skip)
        return HEADS[self.head](model)


def resize_rule(p):
    return (f"shorter side to {p.resize} ({p.interpolation}, PIL), "
            f"centre crop {p.crop}")


HEADS = {"timm": heads.TimmOut, "cls": heads.ClsToken, "hf-cls": heads.HfCls,
         "hf-cls+mean": heads.HfClsMean, "conch": heads.ConchImage,
         "resnet-trunc": heads.ResNetTrunc}


def _timm(p):
    import timm
    kw = dict(p.kwargs)
    for k in ("mlp_layer", "act_layer"):
        if isinstance(kw.get(k), str):
            kw[k] = {"SwiGLUPacked": timm.layers.SwiGLUPacked, "SiLU": torch.nn.SiLU}[kw[k]]
    return timm.create_model(p.arch, pretrained=False, **kw)


def _hf(cls_name, cfg_name):
    def build(p):
        import transformers
        cfg = getattr(transformers, cfg_name)(**p.kwargs)
        extra = {"add_pooling_layer": False} if cls_name == "ViTModel" else {}
        return getattr(transformers, cls_name)(cfg, **extra)
    return build


def _conch(p):
    """conch's create_model without a checkpoint (its create_model requires one): the CoCa of
    the bundled config, as conch.open_clip_custom.factory builds it."""
    import json
    from conch.open_clip_custom import factory
    cfg = json.loads((factory.CFG_DIR / f"{p.arch}.json").read_text())
    cfg.pop("custom_text", None)
    return factory.CoCa(**cfg)


def _conch15(p):
    from .conch15 import CONCHVisionTower
    return CONCHVisionTower()


BUILDERS = {"timm": _timm, "hf-vit": _hf("ViTModel", "ViTConfig"),
            "hf-dinov2": _hf("Dinov2Model", "Dinov2Config"), "conch": _conch,
            "conch15": _conch15}
