"""mltool extract --slide-encoder against independent references: numpy's mean of a slide's rows
(the mean preset), the same TorchScript module called in Python on coordinates read from the
tile store with python-lmdb, h5py on export h5's files, pack and train on the output.

    slide_encode_test.py MLTOOL [TEST...]     # TEST: names of the check_* functions, without check_

The fixture: six small slides written by libvips (scripts/fixtures/make_slides.py), tiled by
`mltool tile`, features by `mltool extract` with a tiny patch encoder that carries a card
(name tiny-patch, 8 dims) so the slide encoders' patch_encoder can be checked.
"""
import csv
import json
import math
import os
import sys

import h5py
import numpy as np
import torch

from cli_common import expect, rename_shim, run, run_checks, run_json, tmp
from store_refs import by_slide, load_store, tile_geometry

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "fixtures"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import make_slides  # noqa: E402
from mltool_encoders import common, slide as slide_presets  # noqa: E402

mltool = os.path.abspath(sys.argv[1])
only = set(sys.argv[2:])
TS = 128
DIMS = 8
SLIDES = [f"S{i}" for i in range(6)]
SUMMARY = ("command", "output", "status", "rows", "dims", "resumed_from", "input_rows",
           "dropped_invalid", "skipped_slides", "invalid", "device", "model", "seconds")


class TinyPatch(torch.nn.Module):
    """A patch encoder: per-channel mean and standard deviation of the tile, mixed."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.w = torch.nn.Parameter(torch.randn(6, DIMS, generator=g))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        stats = torch.cat([x.mean(dim=(2, 3)), x.std(dim=(2, 3))], dim=1)
        return stats @ self.w


class Geo(torch.nn.Module):
    """A slide encoder that uses every input: attention by position (coords in tiles), and the
    tile size, µm/px and tile count as values."""

    def forward(self, features: torch.Tensor, coords: torch.Tensor, tile_size: torch.Tensor,
                mpp: torch.Tensor) -> torch.Tensor:
        c = coords.to(torch.float64) / tile_size.to(torch.float64)
        w = torch.softmax(-(c[:, 0] + 2.0 * c[:, 1]) / 3.0, dim=0)
        pooled = (features.to(torch.float64) * w[:, None]).sum(dim=0)
        extra = torch.stack([c[:, 0].max(), c[:, 1].max(), mpp * tile_size.to(torch.float64),
                             torch.tensor(float(features.shape[0]), dtype=torch.float64)])
        return torch.cat([pooled, extra]).to(torch.float32).unsqueeze(0)


def slide_card(name, dims, patch_encoder="tiny-patch", patch_dims=DIMS):
    return {"kind": "slide", "name": name, "version": "1", "dims": dims,
            "patch_encoder": patch_encoder, "patch_dims": patch_dims,
            "weights": {"sha256": "0" * 64, "random": False}, "license": "MIT"}


def make_fixtures():
    global STORE, FEATURES
    make_slides.generate([
        ["generic_tiff", [tmp(f"{s}.tif"), 768 + 128 * i, 512, 0.25, [(0, 0, 768 + 128 * i, 512)]],
         {"min_level": 256}] for i, s in enumerate(SLIDES)])
    STORE = tmp("tiles.lmdb")
    code, _, err = run([mltool, "tile", *[tmp(f"{s}.tif") for s in SLIDES], "-o", STORE,
                        "--mpp", "0.5", "--tile-size", str(TS), "--format", "png",
                        "--tissue", "none", "-q"])
    expect(code == 0, f"mltool tile exits 0 (got {code}): {err}")
    common.save_encoder(torch.jit.script(TinyPatch().eval()), tmp("patch.pt"), {
        "kind": "patch", "name": "tiny-patch", "version": "1", "dims": DIMS,
        "preprocess": {"resize": TS, "interpolation": "bilinear", "antialias": True, "crop": TS,
                       "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]},
        "weights": {"sha256": "0" * 64, "random": True}, "license": "MIT"})
    FEATURES = tmp("features")
    code, _, err = run([mltool, "extract", STORE, "-o", FEATURES, "--model", tmp("patch.pt"),
                        "--device", "cpu", "--threads", "2", "-q"])
    expect(code == 0, f"mltool extract exits 0 (got {code}): {err}")
    slide_presets.export("mean", tmp("mean.pt"), patch_encoder="tiny-patch", patch_dims=DIMS)
    common.save_encoder(torch.jit.script(Geo().eval()), tmp("geo.pt"), slide_card("geo", DIMS + 4))
    X, keys, _ = load_store(FEATURES)
    return f"{len(keys)} tiles x {X.shape[1]}"


def encode(encoder, out, *args, code_wanted=0, env=None):
    code, s, err = run_json([mltool, "extract", "--slide-encoder", encoder, FEATURES, "-o", out,
                             "--device", "cpu", "--json", *args], env=env)
    expect(code == code_wanted, f"extract --slide-encoder {os.path.basename(encoder)} "
                                f"{' '.join(args)} exits {code_wanted} (got {code}): {err[-1500:]}")
    if code == 0:
        missing = [f for f in SUMMARY if f not in s]
        expect(not missing, f"summary lacks {missing}: {s}")
    return s, err


def check_mean():
    s, _ = encode(tmp("mean.pt"), tmp("mean"))
    X, keys, _ = load_store(FEATURES)
    Y, skeys, meta = load_store(tmp("mean"))
    slides = by_slide(keys)
    expect(skeys == list(slides), f"keys {skeys}, slides {list(slides)}")
    expect(s["rows"] == len(slides) and s["dims"] == DIMS and s["status"] == "encoded", f"{s}")
    for i, (name, rows) in enumerate(slides.items()):
        want = X[rows].astype(np.float64).mean(axis=0).astype(np.float32)
        expect(np.all(np.abs(Y[i] - want) <= np.spacing(np.abs(want))),
               f"{name}: {Y[i]} vs numpy's mean {want}")
    expect(meta["model"]["kind"] == "slide-encoder" and meta["model"]["encoder"]["name"] == "mean"
           and meta["source"]["patch_encoder"] == "tiny-patch"
           and meta["source"]["features"] == FEATURES, f"features.json: {meta}")
    s2, _ = encode(tmp("mean.pt"), tmp("mean"))
    expect(s2["status"] == "skipped", f"a second run skips: {s2}")


def check_f16():
    """A float16 store: its rows widened to float32 before the encoder sees them."""
    code, _, err = run([mltool, "extract", STORE, "-o", tmp("feat16"), "--model", tmp("patch.pt"),
                        "--device", "cpu", "--threads", "2", "--dtype", "f16", "-q"])
    expect(code == 0, f"extract --dtype f16: exit {code}: {err}")
    code, s, err = run_json([mltool, "extract", "--slide-encoder", tmp("mean.pt"), tmp("feat16"),
                             "-o", tmp("mean16"), "--device", "cpu", "--json"])
    expect(code == 0, f"slide encoder on f16: exit {code}: {err}")
    X, keys, _ = load_store(tmp("feat16"))
    Y, _, meta = load_store(tmp("mean16"))
    expect(X.dtype == np.float16 and meta["dtype"] == "float32", f"{X.dtype} {meta['dtype']}")
    for i, rows in enumerate(by_slide(keys).values()):
        want = X[rows].astype(np.float64).mean(axis=0).astype(np.float32)
        expect(np.all(np.abs(Y[i] - want) <= np.spacing(np.abs(want))), f"row {i}: {Y[i]}")


def check_coords():
    encode(tmp("geo.pt"), tmp("geo"))
    Y, skeys, _ = load_store(tmp("geo"))
    X, keys, _ = load_store(FEATURES)
    geometry = tile_geometry(STORE)
    module = torch.jit.load(tmp("geo.pt"))
    for i, (name, rows) in enumerate(by_slide(keys).items()):
        info, xy = geometry[name]
        coords = torch.tensor([xy[keys[r]] for r in rows], dtype=torch.int64)
        want = module(torch.from_numpy(X[rows]), coords,
                      torch.tensor(round(info["size_level0"]), dtype=torch.int64),
                      torch.tensor(info["mpp"], dtype=torch.float64))[0].numpy()
        expect(np.array_equal(Y[i], want), f"{name}: {Y[i]} vs Python's {want}")
        expect(want[-2] == 0.25 * 256 and want[-1] == len(rows), f"{name}: geometry {want[-4:]}")


def check_groups():
    with open(tmp("patients.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["slide", "patient"])
        w.writerows([("S0", "P1"), ("S1", "P1"), ("S2", "P2"), ("S3", "P3"), ("S4", "P3")])
    _, err = encode(tmp("mean.pt"), tmp("pmiss"), "--group-table", tmp("patients.csv"),
                    "--group-column", "patient", code_wanted=1)
    expect("S5" in err and "--skip-missing" in err, f"a slide not in the table: {err}")
    s, _ = encode(tmp("mean.pt"), tmp("patients"), "--group-table", tmp("patients.csv"),
                  "--group-column", "patient", "--skip-missing")
    X, keys, _ = load_store(FEATURES)
    Y, pkeys, _ = load_store(tmp("patients"))
    slides = by_slide(keys)
    expect(pkeys == ["P1", "P2", "P3"] and s["skipped_slides"] == 1, f"{pkeys}, {s}")
    for i, members in enumerate([["S0", "S1"], ["S2"], ["S3", "S4"]]):
        rows = [r for m in members for r in slides[m]]
        want = X[rows].astype(np.float64).mean(axis=0).astype(np.float32)
        expect(np.all(np.abs(Y[i] - want) <= np.spacing(np.abs(want))), f"{pkeys[i]}: {Y[i]}")


def check_refusals():
    torch.jit.script(Geo().eval()).save(tmp("nocard.pt"))
    _, err = encode(tmp("nocard.pt"), tmp("r1"), code_wanted=1)
    expect("card" in err and "nocard.pt" in err, f"no card: {err}")
    common.save_encoder(torch.jit.script(Geo().eval()), tmp("other.pt"),
                        slide_card("other", DIMS + 4, patch_encoder="uni"))
    _, err = encode(tmp("other.pt"), tmp("r2"), code_wanted=1)
    expect("'uni'" in err and "'tiny-patch'" in err, f"another patch encoder: {err}")
    common.save_encoder(torch.jit.script(Geo().eval()), tmp("wide.pt"),
                        slide_card("wide", DIMS + 4, patch_dims=DIMS + 1))
    _, err = encode(tmp("wide.pt"), tmp("r3"), code_wanted=1)
    expect(f"{DIMS + 1} values" in err and f"holds {DIMS}" in err, f"other dims: {err}")
    _, err = encode(tmp("patch.pt"), tmp("r4"), code_wanted=1)
    expect("patch encoder" in err, f"a patch encoder as slide encoder: {err}")
    _, err = encode(tmp("mean.pt"), tmp("r5"), "--batch", "7", code_wanted=1)
    expect("--batch" in err, f"an extract option that does not apply: {err}")
    common.save_encoder(torch.jit.script(Geo().eval()), tmp("lying.pt"), slide_card("lying", 5))
    _, err = encode(tmp("lying.pt"), tmp("r6"), code_wanted=1)
    expect("[5]" in err and "shape" in err, f"an output unlike the card's dims: {err}")
    import shutil
    shutil.copytree(FEATURES, tmp("untiled"))
    meta = json.load(open(tmp("untiled", "features.json")))
    del meta["source"]["tile_store"]
    json.dump(meta, open(tmp("untiled", "features.json"), "w"))
    code, _, err = run([mltool, "extract", "--slide-encoder", tmp("mean.pt"), tmp("untiled"),
                        "-o", tmp("r7"), "--device", "cpu"])
    expect(code == 2 and "names no tile store" in err, f"no tile store: exit {code}: {err}")
    meta["source"]["tile_store"] = tmp("moved.lmdb")
    json.dump(meta, open(tmp("untiled", "features.json"), "w"))
    code, _, err = run([mltool, "extract", "--slide-encoder", tmp("mean.pt"), tmp("untiled"),
                        "-o", tmp("r7"), "--device", "cpu"])
    expect(code == 2 and "moved.lmdb" in err, f"a moved tile store: exit {code}: {err}")
    for d in ("r1", "r2", "r3", "r4", "r5", "r6", "r7"):
        expect(not os.path.exists(tmp(d, "features.json")), f"{d}: a refused run published")


def check_resume():
    encode(tmp("geo.pt"), tmp("whole"))
    env = {"LD_PRELOAD": rename_shim(), "KILL_AT_RENAME": "8"}
    code, _, err = run([mltool, "extract", "--slide-encoder", tmp("geo.pt"), FEATURES, "-o",
                        tmp("killed"), "--device", "cpu", "-q"], env=env)
    expect(code != 0 and not os.path.exists(tmp("killed", "features.json")),
           f"the killed run (exit {code}) published nothing: {err[-500:]}")
    s, _ = encode(tmp("geo.pt"), tmp("killed"))
    expect(0 < s["resumed_from"] < len(SLIDES), f"resumed after a part: {s}")
    for f in ("features.npy", "keys.txt"):
        a = open(tmp("whole", f), "rb").read()
        b = open(tmp("killed", f), "rb").read()
        expect(a == b, f"{f}: the resumed run differs from the uninterrupted one")


def check_pack_train():
    encode(tmp("mean.pt"), tmp("slides"))
    with open(tmp("labels.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["key", "label"])
        w.writerows([(s, "a" if i % 2 else "b") for i, s in enumerate(SLIDES)])
    code, _, err = run([mltool, "pack", tmp("slides"), "--labels", tmp("labels.csv"), "-o",
                        tmp("ds"), "--unit", "tile", "--split", "train=0.5,val=0.5", "--seed", "1"])
    expect(code == 0, f"pack --unit tile: exit {code}: {err}")
    ds = json.load(open(tmp("ds", "dataset.json")))
    expect(ds["records"] == len(SLIDES), f"one record per slide: {ds['records']} records")
    with open(tmp("mlp.json"), "w") as f:
        json.dump({"family": "mlp", "hidden": [8]}, f)
    code, out, err = run([mltool, "train", tmp("ds"), "--model", tmp("mlp.json"), "-o",
                          tmp("run"), "--epochs", "2", "--batch", "2", "--device", "cpu",
                          "--json"])
    expect(code == 0, f"train on the slide features: exit {code}: {err[-1500:]}")


def check_export_h5():
    encode(tmp("mean.pt"), tmp("slides_h5"))
    Y, keys, _ = load_store(tmp("slides_h5"))
    code, s, err = run_json([mltool, "export", "h5", tmp("slides_h5"), "-o", tmp("h5"), "--json"])
    expect(code == 0, f"export h5: exit {code}: {err}")
    for i, k in enumerate(keys):
        with h5py.File(tmp("h5", k + ".h5"), "r") as f:
            F = f["features"][:]
            attrs = dict(f["features"].attrs)
        expect(F.shape == (1, DIMS) and np.array_equal(F[0], Y[i]), f"{k}: {F}")
        expect(attrs["encoder"] == "mean" and attrs["name"] == k, f"{k}: {attrs}")


def check_help():
    code, out, _ = run([mltool, "help", "extract"])
    expect(code == 0 and "--slide-encoder" in out and "--group-table" in out, f"help: {out}")


CHECKS = [check_mean, check_f16, check_coords, check_groups, check_refusals, check_resume,
          check_pack_train, check_export_h5, check_help]


def main():
    run_checks("mltool extract --slide-encoder", CHECKS, only, make_fixtures)


main()
