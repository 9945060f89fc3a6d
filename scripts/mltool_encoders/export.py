"""export NAME: the card's architecture, its weights loaded strictly (or seeded random ones),
its inference forward traced to TorchScript, saved with the card (mltool.json) inside."""
import os
import warnings

import torch

from .common import (WeightsError, library_versions, load_strict, read_weights, save_encoder,
                     sha256_file, state_dict_sha256)


class ExportError(Exception):
    """A refusal the user can act on (exit 2): unknown preset, not exportable offline, ..."""


def weights_path(preset, weights=None, hf_cache=None):
    """(local path of the weights file, its source for the card): --weights FILE as given;
    --hf-cache DIR through huggingface_hub without network (HF_HUB_OFFLINE semantics); else
    the hub (needs access to the repository: huggingface-cli login for gated models)."""
    if weights:
        if not os.path.isfile(weights):
            raise ExportError(f"--weights {weights}: no such file")
        return weights, os.path.abspath(weights)
    from huggingface_hub import hf_hub_download
    if hf_cache:
        try:
            path = hf_hub_download(preset.hub, preset.file, cache_dir=hf_cache,
                                   local_files_only=True)
        except Exception as e:
            raise ExportError(f"--hf-cache {hf_cache}: {preset.hub}/{preset.file} is not in "
                              f"that cache ({type(e).__name__}: {e})") from e
        return path, f"hf-cache:{preset.hub}/{preset.file}"
    try:
        path = hf_hub_download(preset.hub, preset.file)
    except Exception as e:
        raise ExportError(f"downloading {preset.hub}/{preset.file} failed ({type(e).__name__}: "
                          f"{e}); gated repositories need access and a token (huggingface-cli "
                          f"login), or pass --weights FILE / --hf-cache DIR") from e
    return path, f"hf:{preset.hub}/{preset.file}"


def load_weights(preset, model, path):
    """The hub file's state dict, loaded strictly into `model` (WeightsError naming the missing
    and unexpected keys otherwise). Keys the card's own loader drops (ignore_unexpected
    prefixes, e.g. Phikon's pooler) are dropped; a transformers file saved from a model with a
    head ('vit.', 'dinov2.' prefixes) has the prefix removed, as from_pretrained does."""
    sd = read_weights(path)
    prefix = getattr(model, "base_model_prefix", "")
    if prefix and sd and all(k.startswith(prefix + ".") for k in sd):
        sd = {k[len(prefix) + 1:]: v for k, v in sd.items()}
    sd = {k: v for k, v in sd.items()
          if not any(k.startswith(p) for p in preset.ignore_unexpected)}
    if hasattr(model, "adapt_state_dict"):
        sd = model.adapt_state_dict(sd)
    load_strict(model, sd, path)


def example_input(preset, n):
    g = torch.Generator().manual_seed(1234 + n)
    return torch.randn(n, 3, preset.crop, preset.crop, generator=g)


def trace(preset, wrapped):
    """torch.jit.trace on a batch of 2, checked against the Python forward on a batch of 1 (a
    batch size baked into the graph would show there; torch's own check_trace re-traces and
    compares graphs, which costs two more forwards and says less). Returns the traced module."""
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        x = example_input(preset, 2)
        traced = torch.jit.trace(wrapped, x, check_trace=False)
        for n in (1,):
            xi = example_input(preset, n)
            want, got = wrapped(xi), traced(xi)
            if tuple(got.shape) != (n, preset.dims):
                raise ExportError(f"{preset.name}: the traced forward gives {tuple(got.shape)} "
                                  f"for {n} tiles, not {n} x {preset.dims}")
            err = ((got - want).norm() / want.norm().clamp_min(1e-30)).item()
            if not err < 1e-5:
                raise ExportError(f"{preset.name}: the traced forward differs from the Python "
                                  f"one by {err:.2e} (relative) on {n} tiles")
    return traced


def card(preset, sha, random, seed, source):
    c = {"kind": "patch", "name": preset.name, "version": preset.version, "title": preset.title,
         "dims": preset.dims, "preprocess": preset.preprocess(), "mpp": preset.mpp,
         "tile_size": preset.tile_size or preset.resize, "license": preset.license,
         "citation": preset.citation, "hub": f"https://huggingface.co/{preset.hub}",
         "exported_with": library_versions(),
         "weights": {"sha256": sha, "random": random, "source": source, "file": preset.file}}
    if random:
        c["weights"]["seed"] = seed
    if preset.amp:
        c["amp"] = preset.amp
    return c


def export_patch(preset, out, weights=None, hf_cache=None, random_weights=False, seed=0,
                 log=print):
    """Builds, loads, wraps, traces and saves `preset`; returns the card written."""
    if preset.offline:
        raise ExportError(f"{preset.name} cannot be exported offline: {preset.offline}")
    if random_weights and (weights or hf_cache):
        raise ExportError("--random-weights excludes --weights and --hf-cache")
    path = source = None
    if not random_weights:
        path, source = weights_path(preset, weights, hf_cache)
    torch.manual_seed(seed)
    model = preset.build().eval()
    if random_weights:
        sha = state_dict_sha256(model.state_dict())
        source = f"random (torch.manual_seed({seed}))"
    else:
        load_weights(preset, model, path)
        sha = sha256_file(path)
        log(f"{preset.name}: loaded {path} strictly ({len(model.state_dict())} tensors)")
    wrapped = preset.wrap(model).eval()
    traced = trace(preset, wrapped)
    c = card(preset, sha, random_weights, seed, source)
    save_encoder(traced, out, c)
    return c


__all__ = ["ExportError", "WeightsError", "export_patch"]
