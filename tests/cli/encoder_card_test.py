"""mltool extract with an encoder card (mltool.json inside the TorchScript file, as
scripts/encoders.py writes it), against independent references: the tile store read with
python-lmdb, each tile put through the model card's own transform — Pillow's resize
(torchvision.transforms.Resize on a PIL image), torchvision's CenterCrop, ToTensor and
Normalize — and the module run in PyTorch.

    encoder_card_test.py MLTOOL [TEST...]     # TEST: names of the check_* functions

The probe module averages 4×4 blocks of its input, so one uint8 step anywhere in the resized
tile moves a feature by about 1e-3: the features agree within 1e-6 only if mltool resizes
exactly as Pillow does.
"""
import json
import os
import sys

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image
from torchvision import transforms

from cli_common import Failure, expect, run, run_checks, run_json, tmp
from store_refs import read_tiles

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "fixtures"))
import make_slides  # noqa: E402

mltool = os.path.abspath(sys.argv[1])
only = set(sys.argv[2:])
TS = 128
H_OPTIMUS_MEAN = (0.707223, 0.578729, 0.703617)
H_OPTIMUS_STD = (0.211883, 0.230117, 0.177517)
torch.set_num_threads(2)


class Probe(nn.Module):
    """4×4 block means of the preprocessed input: the pixels themselves, nearly."""

    def forward(self, x):
        return F.avg_pool2d(x, 4).flatten(1)


class Tokens(nn.Module):
    """A ViT's unpooled output: N × 261 × 1280."""

    def forward(self, x):
        return x.mean((1, 2, 3)).view(-1, 1, 1).expand(-1, 261, 1280).contiguous()


class Strict(nn.Module):
    """Raises from inside the forward unless the input is 448 px, as a fixed-size ViT does."""

    def forward(self, x):
        if x.shape[2] != 448:
            raise RuntimeError(f"Input height ({x.shape[2]}) doesn't match model (448).")
        return x.mean((2, 3))


def read_store(path):
    """(keys, uint8 N×TS×TS×3) of the store's complete slides in key order."""
    keys, images = read_tiles(path)
    return keys, np.stack([np.asarray(img.convert("RGB")) for img in images])


def card(name, resize, crop, interpolation="bicubic", antialias=True, mean=H_OPTIMUS_MEAN,
         std=H_OPTIMUS_STD, kind="patch", dims=None, **extra):
    c = {"format": "mltool.encoder", "format_version": 1, "kind": kind, "name": name,
         "version": "v1", "dims": dims or 3 * (crop // 4) ** 2, "license": "test",
         "weights": {"sha256": "0" * 64, "random": True, "seed": 0}}
    if kind == "patch":
        c["preprocess"] = {"resize": resize, "crop": crop, "interpolation": interpolation,
                           "antialias": antialias, "mean": list(mean), "std": list(std)}
    c.update(extra)
    return c


def save(module, path, the_card=None):
    files = {"mltool.json": json.dumps(the_card)} if the_card else {}
    torch.jit.save(torch.jit.script(module.eval()), path, _extra_files=files)
    return path


def card_transform(c):
    """The model card's transform, as the cards write it with torchvision on PIL images."""
    p = c["preprocess"]
    mode = {"bicubic": transforms.InterpolationMode.BICUBIC,
            "bilinear": transforms.InterpolationMode.BILINEAR}[p["interpolation"]]
    return transforms.Compose([transforms.Resize(p["resize"], interpolation=mode),
                               transforms.CenterCrop(p["crop"]), transforms.ToTensor(),
                               transforms.Normalize(p["mean"], p["std"])])


def reference(c, module):
    t = card_transform(c)
    x = torch.stack([t(Image.fromarray(tile)) for tile in PIXELS])
    with torch.no_grad():
        return module(x).numpy()


def extract(model, out, *flags, expect_code=0):
    code, doc, err = run_json([mltool, "extract", STORE, "-o", tmp(out), "--model", model,
                               "--device", "cpu", "--batch", "7", "--json", *flags])
    expect(code == expect_code, f"extract {model} {flags}: exit {code}, wanted {expect_code}: "
                                f"{err[-1500:]}")
    return doc, err


def features(out):
    return np.load(tmp(os.path.join(out, "features.npy")))


STORE = None
KEYS = None
PIXELS = None


def make_fixtures():
    global STORE, KEYS, PIXELS
    make_slides.generate([
        ["generic_tiff", [tmp("E.tif"), 1024, 768, 0.25, [(0, 0, 1024, 768)]],
         {"min_level": 256}],
    ])
    STORE = tmp("tiles.lmdb")
    code, _, err = run([mltool, "tile", tmp("E.tif"), "-o", STORE, "--mpp", "0.5",
                        "--tile-size", str(TS), "--format", "png", "-q"])
    expect(code == 0, f"mltool tile exits 0 (got {code}): {err}")
    KEYS, PIXELS = read_store(STORE)
    expect(len(KEYS) >= 8, f"fixture store: {len(KEYS)} tiles")
    return f"{len(KEYS)} tiles"


# The rules the cards use: up-sampling then cropping (GigaPath on smaller tiles), shrinking
# with an odd crop margin (half to even), bilinear, and float interpolation without
# antialiasing.
RULES = [("up-bicubic", 160, 128, "bicubic", True), ("down-bilinear", 96, 81, "bilinear", True),
         ("down-bicubic", 100, 100, "bicubic", True), ("same-size", 128, 112, "bicubic", True)]


def check_card_preprocessing():
    """Features equal the card's Pillow/torchvision transform + forward, per resize rule."""
    problems = []
    for name, resize, crop, mode, aa in RULES:
        c = card("probe-" + name, resize, crop, mode, aa)
        path = save(Probe(), tmp(f"probe-{name}.pt"), c)
        doc, err = extract(path, f"f-{name}")
        got, want = features(f"f-{name}"), reference(c, Probe())
        if got.shape != want.shape or not np.allclose(got, want, rtol=0, atol=1e-6):
            diff = np.abs(got - want).max() if got.shape == want.shape else "shapes differ"
            problems.append(f"{name}: {got.shape} vs {want.shape}, max |diff| {diff}")
        enc = json.load(open(tmp(f"f-{name}/features.json")))["model"].get("encoder", {})
        if enc.get("name") != c["name"] or enc.get("weights_sha256") != "0" * 64:
            problems.append(f"{name}: features.json's model.encoder is {enc}")
    expect(not problems, "; ".join(problems))


def check_float_interpolation():
    """antialias false: torch.nn.functional.interpolate on floats, as a tensor transform."""
    c = card("probe-float", 112, 112, "bicubic", False)
    path = save(Probe(), tmp("probe-float.pt"), c)
    extract(path, "f-float")
    x = torch.from_numpy(PIXELS).permute(0, 3, 1, 2).float().div(255)
    x = F.interpolate(x, size=[112, 112], mode="bicubic", align_corners=False, antialias=False)
    x = (x - torch.tensor(H_OPTIMUS_MEAN).view(1, 3, 1, 1)) / torch.tensor(H_OPTIMUS_STD).view(
        1, 3, 1, 1)
    want = Probe()(x).numpy()
    got = features("f-float")
    expect(np.allclose(got, want, rtol=0, atol=1e-5),
           f"max |diff| {np.abs(got - want).max()}")


def check_flags_agree_and_override():
    """No flags equals the card's values given as flags byte for byte; a flag that
    disagrees wins, with a warning naming both values."""
    c = card("probe-flags", 96, 81, "bilinear", True)
    path = save(Probe(), tmp("probe-flags.pt"), c)
    _, err_plain = extract(path, "f-plain")
    mean = ",".join(str(v) for v in H_OPTIMUS_MEAN)
    std = ",".join(str(v) for v in H_OPTIMUS_STD)
    _, err_flags = extract(path, "f-flags", "--mean", mean, "--std", std, "--input-size", "81",
                           "--dtype", "f32")
    a = open(tmp("f-plain/features.npy"), "rb").read()
    b = open(tmp("f-flags/features.npy"), "rb").read()
    expect(a == b, "the card's values as flags give other bytes than no flags")
    expect("overrides" not in err_plain + err_flags, f"agreeing flags warned: {err_flags}")
    _, err = extract(path, "f-imagenet", "--mean", "0.485,0.456,0.406")
    expect("--mean 0.485,0.456,0.406 overrides the encoder card's 0.707223,0.578729,0.703617"
           in err, f"no warning naming both means: {err}")
    mine = features("f-imagenet")
    expect(not np.array_equal(mine, features("f-plain")), "--mean was not applied")


def check_wide_outputs():
    """Unpooled tokens are refused naming the shape; --allow-wide-features keeps them."""
    path = save(Tokens(), tmp("tokens.pt"))
    _, err = extract(path, "f-tokens", expect_code=1)
    expect("[2, 261, 1280]" in err and "--allow-wide-features" in err and "pooling" in err,
           f"refusal does not name the shape, the cause and the flag: {err}")
    expect(not os.path.exists(tmp("f-tokens/features.json")), "a refused run wrote features")
    doc, _ = extract(path, "f-tokens", "--allow-wide-features")
    expect(doc["dims"] == 261 * 1280, f"dims {doc['dims']}")


def check_error_cause():
    """An error raised inside the forward reaches the user whole."""
    path = save(Strict(), tmp("strict.pt"))
    _, err = extract(path, "f-strict", "--input-size", "224", expect_code=1)
    expect("Input height (224) doesn't match model (448)." in err,
           f"the forward's own message is lost: {err}")


def check_slide_card_refused():
    """A slide encoder given to --model is refused, pointing at --slide-encoder."""
    c = card("mean-test", 0, 0, kind="slide", dims=4, patch_encoder="uni")
    path = save(Probe(), tmp("slide.pt"), c)
    _, err = extract(path, "f-slide", expect_code=1)
    expect("slide encoder" in err and "--slide-encoder" in err, err)


def check_bad_card():
    """A card that breaks its schema is refused naming the file and the field."""
    c = card("probe-bad", 96, 128)  # crop larger than resize
    path = save(Probe(), tmp("bad-card.pt"), c)
    _, err = extract(path, "f-bad", expect_code=2)
    expect("mltool.json" in err and "preprocess.crop" in err and "bad-card.pt" in err, err)


def check_export_h5_encoder():
    """export h5 writes the card's name as TRIDENT's `encoder` attribute (and directory), and
    the file's stem for a TorchScript file without a card."""
    c = card("probe-h5", 128, 128)
    path = save(Probe(), tmp("probe-h5.pt"), c)
    extract(path, "f-h5")
    code, _, err = run([mltool, "export", "h5", tmp("f-h5"), "-o", tmp("h5")])
    expect(code == 0, f"export h5: {err}")
    files = [f for f in os.listdir(tmp("h5")) if f.endswith(".h5")]
    expect(files, f"no h5 files in {os.listdir(tmp('h5'))}")
    with h5py.File(os.path.join(tmp("h5"), files[0]), "r") as f:
        got = f["features"].attrs.get("encoder")
    got = got.decode() if isinstance(got, bytes) else got
    expect(got == "probe-h5", f"encoder attribute {got!r}")
    code, _, err = run([mltool, "export", "h5", tmp("f-h5"), "-o", tmp("h5-trident"),
                        "--layout", "trident"])
    expect(code == 0 and sorted(os.listdir(tmp("h5-trident", "20x_128px_0px_overlap")))
           == ["features_probe-h5", "patches"], f"trident tree: {err}")
    plain = save(Probe(), tmp("plain-probe.v2.pt"))
    extract(plain, "f-plain", "--input-size", str(TS))
    code, s, err = run_json([mltool, "export", "h5", tmp("f-plain"), "-o", tmp("h5-plain"),
                             "--json"])
    with h5py.File(os.path.join(tmp("h5-plain"), files[0]), "r") as f:
        got = f["features"].attrs.get("encoder")
    expect(code == 0 and got == "plain-probe.v2" == s["encoder"],
           f"encoder attribute of a TorchScript without a card: {got!r} {s} {err}")


CHECKS = [check_card_preprocessing, check_float_interpolation, check_flags_agree_and_override,
          check_wide_outputs, check_error_cause, check_slide_card_refused, check_bad_card,
          check_export_h5_encoder]


def main():
    run_checks("mltool extract (encoder cards)", CHECKS, only, make_fixtures)


main()
