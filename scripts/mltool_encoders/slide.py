"""The slide-encoder presets: modules that `mltool extract --slide-encoder` runs on a slide's
patch features. Each exported file is TorchScript whose forward is

    forward(features: float32 N x D, coords: int64 N x 2 (level-0 px, top-left),
            tile_size: int64 0-dim (the tile's side in level-0 px),
            mpp: float64 0-dim (level-0 micrometres per pixel; NaN when unknown))
        -> float32 [dims] (or [1, dims])

with its card (schemas/encoder.schema.json, kind "slide") as the extra file mltool.json, naming
the patch encoder whose features it takes (`mltool extract --slide-encoder` refuses others).

Only what can be built exactly from PyPI packages, offline, is exportable. TRIDENT
(mahmoodlab/TRIDENT, trident/slide_encoder_models/load.py) lists the field's slide encoders;
where each one's code lives decides it (see `reason`):

- mean: mean pooling, no weights. One preset for every patch encoder: the patch encoder's name
  and width are given at export (`patch_encoder=`, `patch_dims=`; scripts/encoders.py
  `--patch-encoder NAME --patch-dims D`), as TRIDENT's mean-<encoder> names do per encoder.
- feather, titan, prism, chief, gigapath-slide: listed with the reason they are not.
"""
import os
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from . import common


class MeanPool(torch.nn.Module):
    """The mean of a slide's patch features, summed in float64 (so the result does not depend
    on the order of the sum) and rounded once to float32."""

    def forward(self, features: torch.Tensor, coords: torch.Tensor, tile_size: torch.Tensor,
                mpp: torch.Tensor) -> torch.Tensor:
        return features.to(torch.float64).mean(dim=0).to(torch.float32)


def _build_mean(preset, patch_dims, weights, hf_cache, random_weights, seed):
    if weights or hf_cache:
        raise ValueError("the mean preset has no weights: give neither --weights nor --hf-cache")
    module = torch.jit.script(MeanPool().eval())
    sd = {}
    return module, patch_dims, {"sha256": common.state_dict_sha256(sd), "random": False,
                                "source": "none (mean pooling has no parameters)"}


@dataclass
class SlidePreset:
    name: str
    title: str
    version: str
    dims: Optional[int]            # None: the patch encoder's width (mean pooling)
    patch_encoder: Optional[str]   # None: any, given at export
    patch_dims: Optional[int]
    license: str
    citation: str
    hub: str
    exportable: bool
    reason: str = ""               # why it cannot be exported offline ("" when it can)
    builder: Optional[Callable] = field(default=None, repr=False)

    @property
    def kind(self):
        return "slide"

    def describe(self):
        """The list entry (JSON-ready)."""
        d = {"name": self.name, "kind": "slide", "title": self.title, "version": self.version,
             "dims": self.dims if self.dims is not None else "the patch encoder's",
             "patch_encoder": self.patch_encoder or "any (--patch-encoder)",
             "patch_dims": self.patch_dims if self.patch_dims is not None else "--patch-dims",
             "license": self.license, "hub": self.hub, "exportable": self.exportable}
        if self.reason:
            d["offline_reason"] = self.reason
        return d

    def card(self, dims, patch_encoder, patch_dims, weights):
        return {"format": common.CARD_FORMAT, "format_version": common.CARD_VERSION,
                "kind": "slide", "name": self.name, "title": self.title,
                "version": self.version, "dims": dims, "patch_encoder": patch_encoder,
                "patch_dims": patch_dims, "weights": weights, "license": self.license,
                "citation": self.citation, "hub": self.hub,
                "exported_with": common.library_versions()}

    def export(self, out_path, weights=None, hf_cache=None, random_weights=False, seed=0,
               patch_encoder=None, patch_dims=None):
        """Writes the TorchScript file with its card (mltool.json), aside and renamed. Returns
        the card. ValueError for a preset that cannot be exported (its reason) or a missing
        --patch-encoder/--patch-dims."""
        if not self.exportable:
            raise ValueError(f"{self.name} cannot be exported offline: {self.reason}")
        patch_encoder = patch_encoder or self.patch_encoder
        patch_dims = patch_dims or self.patch_dims
        if not patch_encoder or not patch_dims:
            raise ValueError(f"{self.name} takes the features of any patch encoder: give its "
                             "name and width (--patch-encoder NAME --patch-dims D)")
        if self.patch_encoder and patch_encoder != self.patch_encoder:
            raise ValueError(f"{self.name} takes features of {self.patch_encoder}, "
                             f"not {patch_encoder}")
        torch.manual_seed(seed)
        module, dims, weight_info = self.builder(self, int(patch_dims), weights, hf_cache,
                                                 random_weights, seed)
        card = self.card(int(dims), patch_encoder, int(patch_dims), weight_info)
        common.save_encoder(module, out_path, card)
        return card


def _not_offline(name, title, version, dims, patch_encoder, patch_dims, license, citation,
                 hub, reason):
    return SlidePreset(name, title, version, dims, patch_encoder, patch_dims, license, citation,
                       hub, exportable=False, reason=reason)


NC_ND = "CC-BY-NC-ND-4.0"

SLIDE_PRESETS = {p.name: p for p in [
    SlidePreset(
        "mean", "Mean pooling of the patch features", "1", None, None, None, "MIT",
        "baseline (TRIDENT's mean-<encoder> slide encoders)", "", exportable=True,
        builder=_build_mean),
    _not_offline(
        "feather", "FEATHER (ABMIL, CONCH v1.5 features)", "pc108-24k", 512, "conch-v1.5", 768,
        NC_ND, "Shao et al., 2025 (FEATHER)", "MahmoodLab/abmil.base.conch_v15.pc108-24k",
        "its architecture is the Python file inside its Hugging Face repository "
        "(trust_remote_code; TRIDENT loads it with snapshot_download + AutoModel); neither that "
        "code nor TRIDENT's ABMIL block is on PyPI, so it cannot be built exactly offline"),
    _not_offline(
        "titan", "TITAN", "1", 768, "conch-v1.5", 768, NC_ND,
        "Ding et al., 2024 (TITAN)", "MahmoodLab/TITAN",
        "its model code ships only in the Hugging Face repository (AutoModel.from_pretrained "
        "with trust_remote_code, encode_slide_from_patch_features); TRIDENT builds it with "
        "pretrained=True only; no PyPI package holds the architecture"),
    _not_offline(
        "prism", "PRISM", "1", 1280, "virchow", 2560, NC_ND,
        "Shaikovski et al., 2024 (PRISM)", "paige-ai/Prism",
        "its model code (a Perceiver slide aggregator with a BioGPT decoder) ships only in the "
        "Hugging Face repository (trust_remote_code) and pins transformers 4.42.4, environs and "
        "sacremoses; no PyPI package holds the architecture"),
    _not_offline(
        "chief", "CHIEF", "1", 768, "ctranspath", 768, "AGPL-3.0",
        "Wang et al., 2024 (CHIEF)", "github: hms-dbmi/CHIEF",
        "its code is a GitHub repository imported from a local clone (models/CHIEF.py), not a "
        "PyPI package, and its weights (CHIEF_pretraining.pth, Text_emdding.pth) are on Google "
        "Drive; its patch encoder CTransPath needs a patched timm as well"),
    _not_offline(
        "gigapath-slide", "Prov-GigaPath slide encoder (LongNet)", "1", 768, "gigapath", 1536,
        "Apache-2.0", "Xu et al., 2024 (Prov-GigaPath)", "prov-gigapath/prov-gigapath",
        "gigapath.slide_encoder is installable from GitHub only, with its own vendored "
        "torchscale (LongNet, dilated attention): PyPI's torchscale 0.3.0 has no LongNet; and "
        "its dilated attention calls flash_attn 2.5.8, a CUDA-only build, so it can neither be "
        "built offline from PyPI nor scripted for the CPU"),
]}


def describe_all():
    """Every slide preset's list entry."""
    return [p.describe() for p in SLIDE_PRESETS.values()]


def export(name, out_path, **kwargs):
    """Exports preset `name` (see SlidePreset.export)."""
    if name not in SLIDE_PRESETS:
        raise KeyError(f"no slide-encoder preset {name!r}; presets: {', '.join(SLIDE_PRESETS)}")
    return SLIDE_PRESETS[name].export(out_path, **kwargs)


if __name__ == "__main__":  # python3 -m mltool_encoders.slide NAME OUT [PATCH_ENCODER PATCH_DIMS]
    import sys
    args = sys.argv[1:]
    if len(args) < 2:
        import json
        print(json.dumps(describe_all(), indent=1))
        sys.exit(0)
    extra = {"patch_encoder": args[2], "patch_dims": int(args[3])} if len(args) >= 4 else {}
    export(args[0], os.path.abspath(args[1]), **extra)
    print(args[1])
