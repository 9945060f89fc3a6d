"""Tissue and artifact segmenters (card kind 'segmenter') for `mltool tile --tissue MODEL.pt`:
the published networks built as their own code builds them, the model card's normalisation
inside, traced to TorchScript with the card as the extra file mltool.json.

The contract (issue 52): forward(x) takes float32 N x 3 x S x S RGB in [0, 1] and returns
N x C x S x S class scores (logits: each pixel takes the arg-max class); mltool.json holds
{"kind": "segmenter", "mpp": M, "input_size": S, "classes": [names in channel order],
"tissue": [...], "artifacts": [...]}; any other class counts as background.

Where the values come from (read in each project's source):
- GrandQC (github cpath-ukk/grandqc, 01_WSI_inference_OPENSLIDE_QC): the tissue detector is
  smp.UnetPlusPlus(encoder_name='timm-efficientnet-b0', classes=2) loaded from the state dict
  Tissue_Detection_MPP10.pth, run on 512-px windows of a 10 um/px thumbnail (channel 0 tissue,
  1 background, as its README and TRIDENT's GrandQCSegmenter read it); the artifact networks
  are whole pickled smp.Unet(encoder_name='timm-efficientnet-b0', classes=8) models,
  GrandQC_MPP15.pth (1.5 um/px, '7x', its default), GrandQC_MPP1.pth (1.0, '10x') and
  GrandQC_MPP2.pth (2.0, '5x'), run on 512-px windows; classes 1..7 as its mask_to_geojson
  names them (channel 0 is never annotated: LazySlide calls it 'Unannotated'). Both use
  smp.encoders.get_preprocessing_fn('timm-efficientnet-b0', 'imagenet'): x / 255, ImageNet
  mean and std. TRIDENT (trident/segmentation_models/load.py) builds the same networks
  (GrandQCSegmenter at 'magnification 1' = 10 um/px, GrandQCArtifactSegmenter from
  GrandQC_MPP1_state_dict.pth, a state dict of the 10x network, at 1 um/px).
- HEST (mahmoodlab/HEST segment_tissue: target_pxl_size 1, patch_size_um 512; TRIDENT's
  HESTSegmenter, LazySlide's HESTTissueSegmentation): torchvision deeplabv3_resnet50 with
  classifier[4] replaced by Conv2d(256, 2, 1), from the PyTorch Lightning checkpoint
  deeplabv3_seg_v4.ckpt ({'state_dict': {'model.*'}}, the 'model.' prefix stripped and the
  auxiliary classifier's keys dropped), 512-px windows at 1 um/px, ImageNet mean and std;
  output 'out', channel 1 tissue.
"""
import _compat_pickle
import copyreg
import collections
import os
import pickle
import sys
import types
import warnings
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from .common import (WeightsError, library_versions, load_strict, save_encoder, sha256_file,
                     state_dict_sha256)
from .export import ExportError

IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
SMP_PIN = "segmentation-models-pytorch==0.5.0"
CARD_FORMAT = "mltool.segmenter"
CARD_VERSION = 1

GRANDQC_CITE = ("Weng et al., GrandQC: a comprehensive solution to quality control problem in "
                "digital pathology, Nature Communications 15, 10685 (2024), "
                "doi:10.1038/s41467-024-54769-y")
HEST_CITE = ("Jaume et al., HEST-1k: a dataset for spatial transcriptomics and histology image "
             "analysis, NeurIPS 2024 (Datasets and Benchmarks)")
GRANDQC_URL = "https://github.com/cpath-ukk/grandqc"
HEST_URL = "https://huggingface.co/MahmoodLab/hest-tissue-seg"
GRANDQC_LICENSE = "CC-BY-NC-SA-4.0"

# GrandQC's artifact classes in channel order: 1..7 as grandqc's mask_to_geojson names them;
# channel 0 is the label of unannotated pixels (LazySlide's name), never a class of its own.
GRANDQC_ARTIFACT_CLASSES = ["Unannotated", "Normal Tissue", "Fold", "Darkspot & Foreign Object",
                            "PenMarking", "Edge & Air Bubble", "OOF", "Background"]
GRANDQC_ARTIFACTS = ["Fold", "Darkspot & Foreign Object", "PenMarking", "Edge & Air Bubble", "OOF"]


def import_smp():
    """segmentation_models_pytorch, or an ExportError that names the package to install."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import segmentation_models_pytorch as smp
    except ImportError as e:
        raise ExportError(
            f"the GrandQC presets need the Python package segmentation-models-pytorch, which is "
            f"not installed ({e}); install it into mltool's venv: .venv/bin/pip install "
            f"'{SMP_PIN}' (scripts/requirements-extra.txt pins it; scripts/test.sh installs "
            f"that file)") from e
    return smp


class Segmenter(nn.Module):
    """forward(x: float32 N x 3 x S x S, RGB in [0, 1]) -> N x C x S x S logits: the card's
    normalisation ((x - mean) / std per channel), then the network."""

    def __init__(self, model, mean, std):
        super().__init__()
        self.model = model
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1))

    def forward(self, x):
        return self.model((x - self.mean) / self.std)


class TorchvisionSegmenter(Segmenter):
    """A torchvision segmentation model (its forward returns {'out': ..., 'aux': ...})."""

    def forward(self, x):
        return self.model((x - self.mean) / self.std)["out"]


# --- checkpoints ---------------------------------------------------------------------------

class _Stub:
    """Stands for any class a pickled model names: takes whatever it is given and keeps the
    object's state (an nn.Module's _parameters, _buffers, _modules), running none of its code."""

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        if isinstance(state, tuple) and len(state) == 2:
            merged = dict(state[0] or {})
            merged.update(state[1] or {})
            state = merged
        if isinstance(state, dict):
            self.__dict__.update(state)


_STUBS = {}
_ALLOWED = {("collections", "OrderedDict"): collections.OrderedDict,
            ("builtins", "set"): set, ("builtins", "frozenset"): frozenset,
            ("builtins", "object"): object, ("builtins", "slice"): slice,
            ("copyreg", "_reconstructor"): copyreg._reconstructor,
            ("torch._utils", "_rebuild_tensor_v2"): torch._utils._rebuild_tensor_v2,
            ("torch._utils", "_rebuild_parameter"): torch._utils._rebuild_parameter,
            ("torch._utils", "_rebuild_parameter_with_state"):
                torch._utils._rebuild_parameter_with_state,
            ("torch._tensor", "_rebuild_from_type_v2"): torch._tensor._rebuild_from_type_v2,
            ("torch", "Size"): torch.Size, ("torch", "device"): torch.device}


class _StubUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        # Python 2 names that protocol-2 pickles (torch.save's) carry, as pickle maps them
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        if (module, name) in _ALLOWED:
            return _ALLOWED[(module, name)]
        if module == "torch" and isinstance(getattr(torch, name, None),
                                            (torch.dtype, torch.layout, torch.memory_format)):
            return getattr(torch, name)
        key = f"{module}.{name}"
        if key not in _STUBS:
            _STUBS[key] = type(name, (_Stub,), {"pickled_as": key})
        return _STUBS[key]


_STUB_PICKLE = types.SimpleNamespace(
    __name__="mltool_stub_pickle", Unpickler=_StubUnpickler,
    load=lambda f, **kw: _StubUnpickler(f, **kw).load())


def _module_tensors(obj, prefix, out):
    """The state dict of a pickled nn.Module read by _StubUnpickler: parameters and persistent
    buffers by their dotted names, as nn.Module.state_dict names them."""
    d = obj.__dict__
    for k, v in (d.get("_parameters") or {}).items():
        if v is not None:
            out[prefix + k] = v.detach()
    skip = d.get("_non_persistent_buffers_set") or set()
    for k, v in (d.get("_buffers") or {}).items():
        if v is not None and k not in skip:
            out[prefix + k] = v
    for k, m in (d.get("_modules") or {}).items():
        if m is not None:
            _module_tensors(m, prefix + k + ".", out)
    return out


def _is_module(obj):
    return isinstance(obj, _Stub) and "_modules" in obj.__dict__ and "_parameters" in obj.__dict__


def read_checkpoint(path):
    """(state dict, format) from a checkpoint file in any of the forms the presets' files have:
    a state dict (torch.load(weights_only=True)), one wrapped as {'state_dict': ...} or
    {'model': ...} (PyTorch Lightning), or a whole pickled nn.Module (GrandQC's artifact
    networks, saved with torch.save(model)). A pickled module is read without importing or
    running its classes: every class it names is a stand-in that keeps its state, and only the
    tensors are taken. A 'module.' prefix (DataParallel) is removed."""
    try:
        obj, form = torch.load(path, map_location="cpu", weights_only=True), "state dict"
    except Exception as first:  # not plain tensors: a pickled module, or not a checkpoint
        try:
            obj = torch.load(path, map_location="cpu", weights_only=False,
                             pickle_module=_STUB_PICKLE)
            form = "pickled model"
        except Exception:
            raise WeightsError(f"{path}: not a readable PyTorch checkpoint "
                               f"({type(first).__name__}: {str(first).splitlines()[0][:300]})")
    for wrapper in ("state_dict", "model", "model_state_dict"):
        if isinstance(obj, dict) and (isinstance(obj.get(wrapper), dict) or
                                      _is_module(obj.get(wrapper))):
            obj, form = obj[wrapper], f"{form} ({wrapper!r} entry)"
    if _is_module(obj):
        obj, form = _module_tensors(obj, "", collections.OrderedDict()), "pickled model"
    elif isinstance(obj, nn.Module):
        obj = obj.state_dict()
    if not isinstance(obj, dict) or not obj or not all(torch.is_tensor(v) for v in obj.values()):
        raise WeightsError(f"{path}: neither a state dict (names to tensors) nor a pickled "
                           f"model (got {type(obj).__name__})")
    if all(k.startswith("module.") for k in obj):
        obj = {k[len("module."):]: v for k, v in obj.items()}
    return dict(obj), form


def _lightning_deeplab(sd):
    """HEST's deeplabv3_seg_v4.ckpt as TRIDENT and LazySlide load it: the LightningModule's
    'model.' prefix removed, the auxiliary classifier (trained, unused at inference) dropped."""
    if sd and all(k.startswith("model.") for k in sd):
        sd = {k[len("model."):]: v for k, v in sd.items()}
    return {k: v for k, v in sd.items() if not k.startswith("aux_classifier.")}


# --- builders ------------------------------------------------------------------------------

def _smp(arch, classes):
    def build():
        smp = import_smp()
        cls = {"Unet": smp.Unet, "UnetPlusPlus": smp.UnetPlusPlus}[arch]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return cls(encoder_name="timm-efficientnet-b0", encoder_weights=None,
                       classes=classes, activation=None)
    return build


def _deeplab():
    from torchvision.models.segmentation import deeplabv3_resnet50
    model = deeplabv3_resnet50(weights=None, weights_backbone=None)
    model.classifier[4] = nn.Conv2d(256, 2, kernel_size=1, stride=1)
    return model


@dataclass
class SegPreset:
    name: str
    title: str
    version: str
    arch: str                     # the constructor, in words (list, docs)
    builder: object = field(repr=False)
    wrapper: type
    classes: list
    tissue: list
    artifacts: list
    mpp: float
    input_size: int
    files: dict                   # accepted checkpoint file name -> its format and source
    license: str
    reference: str
    url: str
    norm: tuple = IMAGENET
    adapt: object = None          # state dict -> state dict (checkpoint conventions)
    variant_files: tuple = ()     # file names of the other variants (refused here)
    hub: str = ""                 # Hugging Face repository holding one accepted file
    notes: str = ""

    @property
    def kind(self):
        return "segmenter"

    def describe(self):
        d = {"name": self.name, "kind": "segmenter", "title": self.title,
             "version": self.version, "arch": self.arch, "classes": self.classes,
             "tissue": self.tissue, "artifacts": self.artifacts, "mpp": self.mpp,
             "input_size": self.input_size,
             "preprocess": {"mean": list(self.norm[0]), "std": list(self.norm[1])},
             "files": self.files, "license": self.license, "reference": self.reference,
             "url": self.url, "exportable": True}
        if self.notes:
            d["notes"] = self.notes
        return d

    def card(self, weights, source, seed=None):
        c = {"format": CARD_FORMAT, "format_version": CARD_VERSION, "kind": "segmenter",
             "name": self.name, "title": self.title, "version": self.version,
             "mpp": self.mpp, "input_size": self.input_size, "classes": list(self.classes),
             "tissue": list(self.tissue), "artifacts": list(self.artifacts),
             "preprocess": {"mean": list(self.norm[0]), "std": list(self.norm[1]),
                            "input": "float32 RGB in [0, 1]"},
             "output": "logits, N x C x S x S (arg-max per pixel)",
             "weights": weights, "weights_source": source, "license": self.license,
             "reference": self.reference, "url": self.url, "arch": self.arch,
             "exported_with": library_versions()}
        if seed is not None:
            c["seed"] = seed
        if self.notes:
            c["notes"] = self.notes
        return c

    def load(self, model, path, log):
        base = os.path.basename(path)
        if base in self.variant_files:
            other = [p.name for p in SEGMENTER_PRESETS.values() if base in p.files]
            raise WeightsError(f"{path}: {base} is the checkpoint of "
                               f"{' / '.join(other) or 'another preset'}, not of {self.name} "
                               f"({self.mpp} um/px); export it under that name")
        sd, form = read_checkpoint(path)
        if self.adapt is not None:
            sd = self.adapt(sd)
        load_strict(model, sd, f"{path} ({form})")
        log(f"{self.name}: loaded {path} ({form}) strictly ({len(sd)} tensors)")

    def export(self, out, weights=None, hf_cache=None, random_weights=False, seed=0,
               log=None, **_ignored):
        """Builds, loads (strictly) or seeds, wraps, traces and saves; returns the card."""
        log = log or (lambda m: print(m, file=sys.stderr))
        if random_weights and (weights or hf_cache):
            raise ExportError("--random-weights excludes --weights and --hf-cache")
        if not random_weights:
            weights = self._weights_path(weights, hf_cache)
        torch.manual_seed(seed)
        model = self.builder().eval()
        if random_weights:
            sha, source = "random", f"random (torch.manual_seed({seed}))"
        else:
            self.load(model, weights, log)
            sha, source = sha256_file(weights), os.path.abspath(weights)
        wrapped = self.wrapper(model, *self.norm).eval()
        traced = trace(self, wrapped)
        c = self.card(sha, source, seed if random_weights else None)
        if random_weights:
            c["state_dict_sha256"] = state_dict_sha256(model.state_dict())
        save_encoder(traced, out, c)
        return c

    def _weights_path(self, weights, hf_cache):
        if weights:
            if not os.path.isfile(weights):
                raise ExportError(f"--weights {weights}: no such file")
            return weights
        names = ", ".join(self.files)
        if hf_cache:
            hub_files = [f for f, how in self.files.items() if self.hub and "huggingface" in how]
            if not hub_files:
                raise ExportError(f"{self.name}: no Hugging Face repository publishes its "
                                  f"checkpoint ({names}); pass --weights FILE")
            from huggingface_hub import hf_hub_download
            try:
                return hf_hub_download(self.hub, hub_files[0], cache_dir=hf_cache,
                                       local_files_only=True)
            except Exception as e:
                raise ExportError(f"--hf-cache {hf_cache}: {self.hub}/{hub_files[0]} is not in "
                                  f"that cache ({type(e).__name__})") from e
        raise ExportError(f"{self.name}: give its checkpoint with --weights FILE ({names}; "
                          f"nothing is downloaded), or --random-weights")


def example_input(size, n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 3, size, size, generator=g)


def trace(preset, wrapped):
    """torch.jit.trace on a batch of 2 windows of 128 px (the networks are convolutional: the
    graph holds no size; tracing at the input size costs 16 times as much on a CPU), checked
    against the Python forward on one window at the input size (a batch or window size baked
    into the graph would show there)."""
    s, c = preset.input_size, len(preset.classes)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(wrapped, example_input(min(s, 128), 2, 1234),
                                 check_trace=False)
        x = example_input(s, 1, 1235)
        want, got = wrapped(x), traced(x)
    if tuple(got.shape) != (1, c, s, s):
        raise ExportError(f"{preset.name}: the traced forward gives {tuple(got.shape)} for one "
                          f"window, not 1 x {c} x {s} x {s}")
    err = ((got - want).norm() / want.norm().clamp_min(1e-30)).item()
    if not err < 1e-5:
        raise ExportError(f"{preset.name}: the traced forward differs from the Python one by "
                          f"{err:.2e} (relative)")
    return traced


_ZENODO_ART = "zenodo.org/records/14041538 (GrandQC's artifact models)"
_HEST_HUB = "huggingface MahmoodLab/hest-tissue-seg"
_GQC_NOTE = ("GrandQC's networks were trained on 512-px windows resized with Lanczos from the "
             "slide's level 0")


def _artifact(name, mpp, mag, file, default=False, extra_files=None):
    files = {file: f"pickled smp.Unet (torch.save(model)), {_ZENODO_ART}"}
    files.update(extra_files or {})
    all_art = ("GrandQC_MPP1.pth", "GrandQC_MPP15.pth", "GrandQC_MPP2.pth",
               "GrandQC_MPP1_state_dict.pth")
    return SegPreset(
        name, f"GrandQC artifact segmentation, {mag} ({mpp:g} um/px)"
        + (" (GrandQC's default)" if default else ""), f"{mag}",
        "smp.Unet(encoder_name='timm-efficientnet-b0', classes=8, activation=None)",
        _smp("Unet", 8), Segmenter, GRANDQC_ARTIFACT_CLASSES, ["Normal Tissue"],
        GRANDQC_ARTIFACTS, mpp, 512, files, GRANDQC_LICENSE, GRANDQC_CITE, GRANDQC_URL,
        variant_files=tuple(f for f in all_art if f not in files),
        hub="MahmoodLab/hest-tissue-seg" if extra_files else "",
        notes=_GQC_NOTE + "; channel 0 ('Unannotated') was never a training label and counts "
                          "as background (TRIDENT counts it as tissue)")


SEGMENTER_PRESETS = {p.name: p for p in [
    SegPreset(
        "grandqc-tissue", "GrandQC tissue detection (10 um/px)", "MPP10",
        "smp.UnetPlusPlus(encoder_name='timm-efficientnet-b0', classes=2, activation=None)",
        _smp("UnetPlusPlus", 2), Segmenter, ["Tissue", "Background"], ["Tissue"], [], 10.0, 512,
        {"Tissue_Detection_MPP10.pth": "state dict, zenodo.org/records/14507273 (GrandQC's "
                                       "tissue model) or " + _HEST_HUB},
        GRANDQC_LICENSE, GRANDQC_CITE, GRANDQC_URL, hub="MahmoodLab/hest-tissue-seg",
        notes="GrandQC, TRIDENT and LazySlide re-encode the 10 um/px thumbnail as JPEG "
              "(quality 80, OpenCV) before the network, as it was trained on JPEG-compressed "
              "thumbnails; that step is not inside the module"),
    _artifact("grandqc-artifact", 1.5, "7x", "GrandQC_MPP15.pth", default=True),
    _artifact("grandqc-artifact-10x", 1.0, "10x", "GrandQC_MPP1.pth", extra_files={
        "GrandQC_MPP1_state_dict.pth": f"state dict of GrandQC_MPP1.pth, {_HEST_HUB} "
                                       "(TRIDENT's grandqc_artifact)"}),
    _artifact("grandqc-artifact-5x", 2.0, "5x", "GrandQC_MPP2.pth"),
    SegPreset(
        "hest-tissue", "HEST tissue segmentation (DeepLabV3, ResNet-50)", "v4",
        "torchvision deeplabv3_resnet50(weights=None, weights_backbone=None), classifier[4] = "
        "Conv2d(256, 2, 1); output 'out'",
        _deeplab, TorchvisionSegmenter, ["Background", "Tissue"], ["Tissue"], [], 1.0, 512,
        {"deeplabv3_seg_v4.ckpt": "PyTorch Lightning checkpoint ({'state_dict': {'model.*'}}), "
                                  + _HEST_HUB},
        "CC-BY-NC-SA-4.0", HEST_CITE, HEST_URL, adapt=_lightning_deeplab,
        hub="MahmoodLab/hest-tissue-seg",
        notes="HEST runs it on 512-um windows at 1 um/px; TRIDENT at 'magnification 10' (1 um/px) "
              "in float16"),
]}


__all__ = ["SEGMENTER_PRESETS", "SegPreset", "ExportError", "read_checkpoint", "import_smp"]
