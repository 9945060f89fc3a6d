"""What every encoder export shares: weights files read with their hub key names and loaded
strictly, hashes, and the TorchScript file written with its card (mltool.json) inside."""
import hashlib
import json
import os
import sys
import tempfile

import torch

CARD_FORMAT = "mltool.encoder"
CARD_VERSION = 1


class WeightsError(Exception):
    """A weights file that does not fit the architecture (the message names the keys)."""


def sha256_file(path):
    """SHA-256 (hex) of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def state_dict_sha256(sd):
    """SHA-256 (hex) of a state dict's tensors: each key (sorted), its dtype, shape and the
    tensor's bytes (contiguous, CPU, native little-endian)."""
    h = hashlib.sha256()
    for k in sorted(sd):
        t = sd[k].detach().cpu().contiguous()
        h.update(f"{k}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        t = t.reshape(-1)
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def read_weights(path):
    """A state dict from a hub weights file: *.safetensors with safetensors, anything else
    with torch.load(weights_only=True). Checkpoints that wrap the weights ({'state_dict': ...},
    {'model': ...}) or prefix them with 'module.' (DataParallel) are unwrapped."""
    if path.endswith(".safetensors"):
        from safetensors.torch import load_file
        try:
            sd = load_file(path, device="cpu")
        except Exception as e:  # a truncated or foreign file
            raise WeightsError(f"{path}: not a readable safetensors file ({e})") from e
    else:
        try:
            sd = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # a truncated or foreign file
            raise WeightsError(f"{path}: not a readable PyTorch weights file ({e})") from e
    for wrapper in ("state_dict", "model"):
        if isinstance(sd, dict) and isinstance(sd.get(wrapper), dict):
            sd = sd[wrapper]
    if not isinstance(sd, dict) or not all(torch.is_tensor(v) for v in sd.values()):
        raise WeightsError(f"{path}: not a state dict (a mapping of names to tensors)")
    if sd and all(k.startswith("module.") for k in sd):
        sd = {k[len("module."):]: v for k, v in sd.items()}
    return sd


def _short(keys, n=64):
    keys = sorted(keys)
    more = f" (+{len(keys) - n} more)" if len(keys) > n else ""
    return ", ".join(keys[:n]) + more if keys else "none"


def load_strict(model, sd, what):
    """model.load_state_dict(sd, strict=True), with an error that names the missing and the
    unexpected keys and the tensors whose shapes differ."""
    own = model.state_dict()
    missing = set(own) - set(sd)
    unexpected = set(sd) - set(own)
    shapes = [f"{k} {tuple(sd[k].shape)} (the model has {tuple(own[k].shape)})"
              for k in sorted(set(own) & set(sd)) if own[k].shape != sd[k].shape]
    if missing or unexpected or shapes:
        raise WeightsError(
            f"{what} does not fit the architecture: missing keys: {_short(missing)}; "
            f"unexpected keys: {_short(unexpected)}"
            + (f"; shapes differ: {'; '.join(shapes[:5])}" if shapes else ""))
    model.load_state_dict(sd, strict=True)


def library_versions():
    """The versions of the libraries an export used (the card's exported_with)."""
    out = {"torch": torch.__version__, "python": sys.version.split()[0]}
    for mod in ("timm", "transformers", "open_clip", "torchvision", "huggingface_hub"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:
            pass
    return out


def card_json(card):
    """The card as mltool.json holds it: JSON, sorted keys."""
    return json.dumps(card, sort_keys=True, indent=1)


def save_encoder(module, path, card):
    """Saves a TorchScript module (scripted or traced) with `card` as its extra file
    mltool.json (sorted keys), atomically: written to a temporary file in the same folder,
    flushed, then renamed over `path`."""
    card = dict(card)
    card.setdefault("format", CARD_FORMAT)
    card.setdefault("format_version", CARD_VERSION)
    d = os.path.dirname(os.path.abspath(path))
    fd, part = tempfile.mkstemp(prefix=os.path.basename(path) + ".partial-", dir=d)
    try:
        os.close(fd)
        torch.jit.save(module, part, _extra_files={"mltool.json": card_json(card)})
        with open(part, "rb") as f:
            os.fsync(f.fileno())
        os.replace(part, path)
    except BaseException:
        if os.path.exists(part):
            os.unlink(part)
        raise


def read_card(path):
    """The card (dict) inside an exported file, or None when it has none."""
    files = {"mltool.json": ""}
    torch.jit.load(path, map_location="cpu", _extra_files=files)
    return json.loads(files["mltool.json"]) if files["mltool.json"] else None
