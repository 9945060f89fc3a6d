"""mltool extract SLIDE... -o FEATURES/: slides tiled on the fly into a coordinates store (no
pixels) and fed to the model, checked against the reference path `mltool tile --format png`
(lossless) + `mltool extract` of that store — features.npy and keys.txt equal byte for byte —
for the built-in extractor and TorchScript models, on generated slides (libvips,
scripts/fixtures/make_slides.py) and the real slide of ../shared/slides (skipped where absent);
the coordinates store read with python-lmdb against the tile store's records; the commands that
use a tile store run on it; resume after SIGTERM, --shard + --merge, --keep-going, a missing
slide file, refusals.

    extract_slides_test.py MLTOOL [TEST...]     # TEST: names of the check_* functions
"""
import json
import os
import random
import shutil
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from cli_common import MATH_PATHS, expect, run, run_checks, run_json, run_with_sigterms, tmp
from store_refs import read_tile_store
from torch_models import Linear1, Small

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "fixtures"))
import make_slides  # noqa: E402  (imports pyvips only in its child processes)

mltool = os.path.abspath(sys.argv[1])
only = set(sys.argv[2:])
REAL_SVS = os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared", "slides",
                                         "CMU-1-Small-Region.svs"))
GEOMETRY = ["--mpp", "0.5", "--tile-size", "128"]  # 0.25 µm/px slides: each tile resampled
torch.set_num_threads(2)


class Slow(nn.Module):
    """Enough work per tile that a run can be stopped in the middle."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Conv2d(3, 16, 3, padding=1)
        self.body = nn.ModuleList([nn.Conv2d(16, 16, 3, padding=1) for _ in range(4)])
        self.fc = nn.Linear(16, 8)

    def forward(self, x):
        x = F.relu(self.inp(x))
        for conv in self.body:
            x = F.relu(conv(x))
        return self.fc(x.mean((2, 3)))


def save(cls, name):
    torch.manual_seed(1234)
    path = tmp(name)
    torch.jit.script(cls().eval()).save(path)
    return path


SLIDES = []  # the generated slides, in an order that is not key order


def make_fixtures():
    # Ids that sort differently as ids and as keys ("C-2/" < "C/"), slides of several sizes.
    make_slides.generate([
        ["generic_tiff", [tmp("C.tif"), 2048, 1536, 0.25,
                          [(0, 0, 2048, 1280), (300, 1280, 1700, 1536)]],
         {"min_level": 256, "compression": "jpeg"}],
        ["generic_tiff", [tmp("C-2.tif"), 1024, 768, 0.25, [(0, 0, 1024, 768)]],
         {"min_level": 256}],
        ["generic_tiff", [tmp("A.tif"), 1536, 1024, 0.25, [(200, 100, 1300, 900)]],
         {"min_level": 256, "compression": "jpeg", "tissue_class": "b"}],
        ["not_a_slide", [tmp("bad.tif")]],
    ])
    SLIDES.extend([tmp("C.tif"), tmp("A.tif"), tmp("C-2.tif")])
    save(Small, "small.pt")
    save(Linear1, "linear1.pt")
    save(Slow, "slow.pt")
    return f"{len(SLIDES)} slides"


def files(out):
    got = {}
    for name in ("features.npy", "keys.txt"):
        with open(os.path.join(out, name), "rb") as f:
            got[name] = f.read()
    return got


def same_features(out, ref, what):
    a, b = files(out), files(ref)
    expect(a["keys.txt"] == b["keys.txt"], f"{what}: keys.txt differs from the reference's")
    if a["features.npy"] != b["features.npy"]:
        x, y = np.load(os.path.join(out, "features.npy")), np.load(os.path.join(ref, "features.npy"))
        detail = f"shapes {x.shape} {y.shape}" if x.shape != y.shape else \
            f"rows {list(np.where((x != y).any(1))[0][:8])}, max {np.abs(x - y).max():.3g}"
        raise AssertionError(f"{what}: features.npy differs from the reference's ({detail})")


def tile_png(slides, store, *geometry, env=None):
    code, _, err = run([mltool, "tile", *slides, "-o", store, "--format", "png", "--threads", "2",
                        "-q", *geometry], env=env)
    expect(code == 0, f"tile --format png exits 0 (got {code}): {err[-1500:]}")


def extract(inputs, out, *args, code_wanted=0, env=None):
    code, summary, err = run_json([mltool, "extract", *inputs, "-o", out, "--threads", "2", *args,
                                   "--json"], env=env)
    expect(code == code_wanted and summary is not None,
           f"extract {' '.join(args)} exits {code_wanted} (got {code}): {err[-2000:]}")
    return summary


def coordinates_like_tiles(coords, store):
    """The coordinates store holds the tile store's records (but for how pixels were stored)
    and no tiles; its settings say pixels false."""
    meta_c, tiles_c = read_tile_store(coords)
    meta_t, tiles_t = read_tile_store(store)
    expect(not tiles_c and tiles_t, f"{coords}: {len(tiles_c)} tiles in a coordinates store")
    expect(meta_c["store"]["pixels"] is False and meta_t["store"]["pixels"] is True,
           f"pixels flags {meta_c['store'].get('pixels')} {meta_t['store'].get('pixels')}")
    drop = {"store": ("pixels", "encoding", "quality"), "slides": ("passthrough", "reader",
            "reader_version"), "done": ("seconds", "passthrough", "reader")}
    expect(sorted(meta_c) == sorted(meta_t), f"records {sorted(meta_c)} vs {sorted(meta_t)}")
    for k in meta_t:
        a, b = dict(meta_c[k]), dict(meta_t[k])
        for field in drop.get(k.split("/")[0], ()):
            a.pop(field, None)
            b.pop(field, None)
        expect(a == b, f"record {k} differs: {a} vs {b}")
    expect(meta_c[next(k for k in meta_c if k.startswith("slides/"))]["passthrough"]["reason"]
           == "a coordinates store (no pixels)", "coordinates passthrough reason")


def check_exact():
    """Features of extract SLIDES equal tile --format png + extract, byte for byte: built-in
    and TorchScript models (a scripted CNN, and Linear1, whose sgemm bits depend on the batch),
    under two math code paths, with --batch not dividing the slides' tile counts."""
    store = tmp("png.lmdb")
    tile_png(SLIDES, store, *GEOMETRY)
    cases = [("builtin:color-texture", {}), (tmp("small.pt"), {}),
             (tmp("linear1.pt"), {}), (tmp("linear1.pt"), dict(MATH_PATHS)["ONEDNN_MAX_CPU_ISA=SSE41"])]
    for i, (model, env) in enumerate(cases):
        ref, out = tmp(f"ref{i}"), tmp(f"direct{i}")
        extract([store], ref, "--model", model, "--batch", "24", env=env)
        s = extract(SLIDES, out, "--model", model, "--batch", "24", *GEOMETRY, env=env)
        same_features(out, ref, f"{model} {env}")
        expect(s["tiling"]["slides"] and len(s["tiling"]["slides"]) == 3 and s["store"].endswith(
            "coordinates.lmdb") if "store" in s else True, f"tiling summary {s.get('tiling')}")
        expect(s["input_wait_seconds"] >= 0 and s["max_input_wait_seconds"] >= 0, f"{s}")
    coordinates_like_tiles(tmp("direct0", "coordinates.lmdb"), store)
    with open(tmp("direct0", "features.json")) as f:
        source = json.load(f)["source"]
    expect(source["tile_store"] == os.path.realpath(tmp("direct0", "coordinates.lmdb")),
           f"features.json source {source}")
    # Level 0, tile = the slide's own tile size: tiles are read as they are, no resampling.
    store0 = tmp("png0.lmdb")
    tile_png(SLIDES, store0, "--level", "0", "--tile-size", "256")
    extract([store0], tmp("ref_l0"), "--model", tmp("small.pt"), "--batch", "16")
    extract(SLIDES, tmp("direct_l0"), "--model", tmp("small.pt"), "--batch", "16",
            "--level", "0", "--tile-size", "256")
    same_features(tmp("direct_l0"), tmp("ref_l0"), "--level 0 --tile-size 256")
    # A second extraction from the coordinates store reads the slides again.
    extract([tmp("direct0", "coordinates.lmdb")], tmp("again"), "--model", tmp("small.pt"),
            "--batch", "24")
    same_features(tmp("again"), tmp("ref1"), "extract of the coordinates store")
    return f"{len(np.load(tmp('ref0', 'features.npy')))} tiles, {len(cases) + 2} runs"


def check_real_slide():
    """The real SVS (Aperio, JPEG): extract SLIDE equals tile --format png + extract."""
    if not os.path.isfile(REAL_SVS):
        return f"skipped: {REAL_SVS} is absent (see ../shared/slides/README.md)"
    store = tmp("real.lmdb")
    for geometry in (["--mpp", "1.0", "--tile-size", "224"], ["--level", "0", "--tile-size", "240"]):
        shutil.rmtree(store, ignore_errors=True)
        tile_png([REAL_SVS], store, *geometry)
        ref, out = tmp("real_ref"), tmp("real_direct")
        for d in (ref, out):
            shutil.rmtree(d, ignore_errors=True)
        extract([store], ref, "--model", tmp("small.pt"), "--batch", "32")
        extract([REAL_SVS], out, "--model", tmp("small.pt"), "--batch", "32", *geometry)
        same_features(out, ref, f"{os.path.basename(REAL_SVS)} {' '.join(geometry)}")
    return f"{len(np.load(tmp('real_ref', 'features.npy')))} tiles at level 0"


def check_downstream():
    """export h5, export geojson and pack work on the features and coordinates store of
    extract SLIDES as on a tile store's."""
    out = tmp("direct0")
    if not os.path.isdir(out):
        extract(SLIDES, out, "--batch", "24", *GEOMETRY)
    code, _, err = run([mltool, "export", "h5", out, "-o", tmp("h5"), "-q"])
    expect(code == 0, f"export h5 of extract SLIDES' features: {code} {err[-1500:]}")
    import h5py
    with h5py.File(tmp("h5", "C.h5")) as f:
        coords = f["coords"][:]
    meta, _ = read_tile_store(os.path.join(out, "coordinates.lmdb"))
    t = meta["tiles/C"]
    expect(np.array_equal(coords, np.stack([t["x"], t["y"]], 1)), "h5 coords against the record")
    code, _, err = run([mltool, "export", "geojson", os.path.join(out, "coordinates.lmdb"),
                        "-o", tmp("geo"), "-q"])
    expect(code == 0, f"export geojson of the coordinates store: {code} {err[-1500:]}")
    labels = tmp("labels.csv")
    with open(labels, "w") as f:
        f.write("slide,label\nC,tumor\nC-2,normal\nA,normal\n")
    code, _, err = run([mltool, "pack", out, "--labels", labels, "--key-column", "slide",
                        "--split", "train=0.5,val=0.5", "-o", tmp("packed"), "-q"])
    expect(code == 0, f"pack of extract SLIDES' features: {code} {err[-1500:]}")
    # Training on images reads the coordinates store's tiles from the slides: the weights
    # equal those trained on the tile store of tile --format png.
    store = tmp("png.lmdb")
    if not os.path.isdir(tmp("ref0")):
        tile_png(SLIDES, store, *GEOMETRY)
        extract([store], tmp("ref0"), "--batch", "24")
    with open(tmp("cnn.json"), "w") as f:
        json.dump({"family": "rescnn", "channels": [8, 16]}, f)
    weights = []
    for name, features in (("coords", out), ("png", tmp("ref0"))):
        code, _, err = run([mltool, "pack", features, "--labels", labels, "--key-column", "slide",
                            "--unit", "image", "--split", "train=0.5,val=0.5", "--seed", "3",
                            "-o", tmp(f"img_{name}"), "-q"])
        expect(code == 0, f"pack --unit image of {features}: {code} {err[-1500:]}")
        code, _, err = run([mltool, "train", tmp(f"img_{name}"), "--model", tmp("cnn.json"),
                            "--epochs", "1", "--batch", "16", "--feed", "host", "--threads", "2",
                            "-o", tmp(f"run_{name}"), "-q"])
        expect(code == 0, f"train on the images of {features}: {code} {err[-1500:]}")
        with open(tmp(f"run_{name}", "model.safetensors"), "rb") as f:
            weights.append(f.read())
    expect(weights[0] == weights[1], "training on the coordinates store's images gives other "
                                     "weights than on the png tile store's")
    return "export h5, export geojson, pack, train on images"


def check_sigterm_resume():
    """SIGTERM at random points (while tiling, while extracting), re-run until done: equal to
    an uninterrupted run byte for byte."""
    args = ["--model", tmp("slow.pt"), "--batch", "8", "--chunk-rows", "8", *GEOMETRY]
    extract(SLIDES, tmp("slow_ref"), *args)
    out = tmp("slow_stopped")
    stopped = run_with_sigterms([mltool, "extract", *SLIDES, "-o", out, "--threads", "2", *args],
                                random.Random(7), 4.0)
    same_features(out, tmp("slow_ref"), "stopped and resumed")
    return f"{stopped} runs stopped"


def check_shard_merge():
    """--shard I/N over slides, then --merge: the single run's bytes."""
    args = ["--model", tmp("linear1.pt"), "--batch", "24", *GEOMETRY]
    extract(SLIDES, tmp("single"), *args)
    parts = []
    for i in range(2):
        parts.append(tmp(f"part{i}"))
        s = extract(SLIDES, parts[-1], *args, "--shard", f"{i}/2")
        expect(s["shard"] == f"{i}/2", f"shard summary {s['shard']}")
    code, _, err = run([mltool, "extract", "--merge", *parts, "-o", tmp("merged"), "-q"])
    expect(code == 0, f"merge: {code} {err[-1500:]}")
    same_features(tmp("merged"), tmp("single"), "--shard 0/2 + 1/2 merged")
    return "2 shards"


def check_keep_going_and_missing():
    """A file that is not a slide: exit 2 naming it; with --keep-going exit 4 and the other
    slides' features. A slide file gone after tiling: extract of the coordinates store exits 2
    naming the slide and the file; with --keep-going its rows are invalid (exit 4)."""
    code, _, err = run([mltool, "extract", *SLIDES, tmp("bad.tif"), "-o", tmp("kg"), *GEOMETRY])
    expect(code == 2 and "bad.tif" in err, f"a bad slide: exit {code}: {err[-800:]}")
    s = extract(SLIDES + [tmp("bad.tif")], tmp("kg"), "--keep-going", *GEOMETRY, code_wanted=4)
    expect(s["tiling"]["failed"] == 1 and s["invalid"] == 0, f"keep-going summary {s['tiling']}")
    extract(SLIDES, tmp("kg_ref"), *GEOMETRY)
    same_features(tmp("kg"), tmp("kg_ref"), "--keep-going past a bad slide")
    moved = tmp("A-moved.tif")
    os.rename(tmp("A.tif"), moved)
    try:
        coords = tmp("kg", "coordinates.lmdb")
        code, _, err = run([mltool, "extract", coords, "-o", tmp("gone")])
        expect(code == 2 and "'A'" in err and "A.tif" in err,
               f"a missing slide file: exit {code}: {err[-800:]}")
        s = extract([coords], tmp("gone_kg"), "--keep-going", code_wanted=4)
        X = np.load(tmp("gone_kg", "features.npy"))
        with open(tmp("gone_kg", "keys.txt")) as f:
            keys = f.read().split()
        bad = np.isnan(X).all(1)
        expect(s["invalid"] == bad.sum() and all(bad[i] == k.startswith("A/") for i, k in
                                                 enumerate(keys)),
               f"invalid rows {s['invalid']} are slide A's")
    finally:
        os.rename(moved, tmp("A.tif"))
    return "ok"


def check_refusals():
    """Tile options with a tile store: exit 1; a tile store among slides: exit 1; a rerun into
    the output with fewer slides: exit 1 naming --overwrite, which then replaces it."""
    store = tmp("png.lmdb")
    if not os.path.isdir(store):
        tile_png(SLIDES, store, *GEOMETRY)
    for option in (["--mpp", "0.5"], ["--tissue", "none"]):
        code, _, err = run([mltool, "extract", store, "-o", tmp("r1"), *option])
        expect(code == 1 and option[0] in err, f"{option} with a tile store: {code} {err[-500:]}")
    code, _, err = run([mltool, "extract", store, SLIDES[0], "-o", tmp("r2")])
    expect(code == 1 and "tile store" in err, f"a store among slides: {code} {err[-500:]}")
    extract(SLIDES, tmp("r3"), *GEOMETRY)
    code, _, err = run([mltool, "extract", *SLIDES[:2], "-o", tmp("r3"), *GEOMETRY])
    expect(code == 1 and "--overwrite" in err and "C-2" in err,
           f"fewer slides into the same output: {code} {err[-500:]}")
    s = extract(SLIDES[:2], tmp("r3"), "--overwrite", *GEOMETRY)
    expect(s["status"] == "extracted" and len(s["tiling"]["slides"]) == 2, f"{s['tiling']}")
    s = extract(SLIDES[:2], tmp("r3"), *GEOMETRY)
    expect(s["status"] == "skipped", f"a complete rerun: {s['status']}")
    return "ok"


if __name__ == "__main__":
    run_checks("mltool extract SLIDE...", [check_exact, check_real_slide, check_downstream,
                                          check_sigterm_resume, check_shard_merge,
                                          check_keep_going_and_missing, check_refusals],
               only, fixtures=make_fixtures)
