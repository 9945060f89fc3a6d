"""mltool export h5 / import h5 against independent references: h5py reads what mltool exports
and writes the TRIDENT- and CLAM-layout files it imports; python-lmdb reads the tile store's
geometry; torch.load reads the .pt files; numpy reads the feature stores.

    export_h5_test.py MLTOOL [TEST...]     # TEST: names of the check_* functions, without check_

The fixture: two slides written by libvips (scripts/fixtures/make_slides.py), tiled by
`mltool tile`, features by `mltool extract --model builtin:color-texture` on the CPU.
"""
import json
import os
import shutil
import sys

import h5py
import numpy as np
import torch

import h5_cli
from cli_common import Failure, expect, run, run_checks, run_json, tmp
from store_refs import by_slide, load_store, tile_geometry

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "fixtures"))
import make_slides  # noqa: E402  (imports pyvips only in its child processes)

mltool = os.path.abspath(sys.argv[1])
only = set(sys.argv[2:])
TS = 128


def make_fixtures():
    global STORE, FEATURES
    make_slides.generate(h5_cli.a_slides(tmp))
    STORE = tmp("tiles.lmdb")
    code, _, err = run([mltool, "tile", tmp("A.tif"), tmp("A-2.tif"), "-o", STORE, "--mpp", "0.5",
                        "--tile-size", str(TS), "--format", "png", "-q"])
    expect(code == 0, f"mltool tile exits 0 (got {code}): {err}")
    FEATURES = tmp("features")
    code, _, err = run([mltool, "extract", STORE, "-o", FEATURES, "--device", "cpu",
                        "--threads", "2", "-q"])
    expect(code == 0, f"mltool extract exits 0 (got {code}): {err}")
    X, keys, _ = load_store(FEATURES)
    return f"{len(keys)} rows x {X.shape[1]}"


# ---------------------------------------------------------------- references

def export(features, out, *args, code_wanted=0):
    return h5_cli.export(mltool, features, out, *args, code_wanted=code_wanted)


def import_h5(d, out, *args, code_wanted=0):
    return h5_cli.import_h5(mltool, d, out, *args, code_wanted=code_wanted)


def expect_export_matches(out, dtype=np.float32):
    """Every slide's file against the feature store (values, order) and the tile store."""
    X, keys, meta = load_store(FEATURES)
    geometry = tile_geometry(STORE)
    slides = by_slide(keys)
    files = sorted(f for f in os.listdir(out) if f.endswith(".h5"))
    expect(files == sorted(s + ".h5" for s in slides), f"{out}: files {files}, slides {slides}")
    for slide, rows in slides.items():
        info, xy = geometry[slide]
        with h5py.File(os.path.join(out, slide + ".h5"), "r") as f:
            F, C = f["features"][:], f["coords"][:]
            fa, ca = dict(f["features"].attrs), dict(f["coords"].attrs)
        expect(F.dtype == dtype and C.dtype == np.int64, f"{slide}: dtypes {F.dtype} {C.dtype}")
        want = X[rows].astype(dtype)
        expect(F.shape == want.shape and np.array_equal(F.view(np.uint8), want.view(np.uint8)),
               f"{slide}: features differ from the store's rows {rows[:3]}...")
        expect(np.array_equal(C, np.array([xy[keys[r]] for r in rows], np.int64)),
               f"{slide}: coords differ from the tile store's x, y")
        expect(ca["patch_size"] == TS and ca["patch_level"] == info["level"]
               and ca["patch_size_level0"] == round(info["size_level0"])
               and ca["level0_width"] == info["width"] and ca["name"] == slide
               and abs(ca["level0_magnification"] - 40) < 1e-9
               and abs(ca["target_magnification"] - 20) < 1e-9
               and list(ca["downsample"]) == [info["level_downsample"]] * 2,
               f"{slide}: coords attributes {ca} vs the slide {info}")
        expect(fa["encoder"] == "color-texture" and fa["name"] == slide, f"{slide}: {fa}")


# ---------------------------------------------------------------- checks

def check_export():
    out = tmp("exp")
    s, _ = export(FEATURES, out)
    expect(s["status"] == "exported" and s["written"] == s["slides"] == 2 and s["resumed"] == 0
           and s["coordinates"] == os.path.realpath(STORE), f"summary {s}")
    expect_export_matches(out)
    # Again: nothing to do.
    s, _ = export(FEATURES, out)
    expect(s["status"] == "skipped" and s["resumed"] == 2 and s["written"] == 0, f"again: {s}")
    # A file lost (an interrupted run): only it is written again.
    os.remove(os.path.join(out, "A.h5"))
    s, _ = export(FEATURES, out)
    expect(s["written"] == 1 and s["resumed"] == 1, f"resume: {s}")
    expect_export_matches(out)
    # Other settings into the same directory: refused, naming it.
    s, err = export(FEATURES, out, "--dtype", "f16", code_wanted=1)
    expect(out in err, f"the refusal names {out}: {err}")


def check_export_f16():
    out = tmp("exp16")
    export(FEATURES, out, "--dtype", "f16")
    expect_export_matches(out, np.float16)


def check_export_pt():
    out = tmp("pt_files")
    s, _ = export(FEATURES, out, "--format", "pt")
    X, keys, _ = load_store(FEATURES)
    for slide, rows in by_slide(keys).items():
        t = torch.load(os.path.join(out, slide + ".pt"), weights_only=True)
        expect(isinstance(t, torch.Tensor) and t.dtype == torch.float32
               and np.array_equal(t.numpy(), X[rows]), f"{slide}.pt: {type(t)} differs")
    out16 = tmp("pt16")
    export(FEATURES, out16, "--format", "pt", "--dtype", "f16")
    t = torch.load(os.path.join(out16, "A.pt"), weights_only=True)
    expect(t.dtype == torch.float16 and np.array_equal(
        t.numpy(), X[by_slide(keys)["A"]].astype(np.float16)), "A.pt in float16")


def check_tiles_moved():
    moved = tmp("moved.lmdb")
    shutil.move(STORE, moved)
    try:
        _, err = export(FEATURES, tmp("exp_moved"), code_wanted=2)
        expect(STORE in err and "--tiles" in err, f"the message names the store and --tiles: {err}")
        export(FEATURES, tmp("exp_moved"), "--tiles", moved)
    finally:
        shutil.move(moved, STORE)
    for f in ("A.h5", "A-2.h5"):
        with h5py.File(tmp("exp", f)) as a, h5py.File(tmp("exp_moved", f)) as b:
            expect(np.array_equal(a["coords"][:], b["coords"][:]), f"{f}: coords with --tiles")


def trident_file(path, features, coords, encoder="uni_v1"):
    with h5py.File(path, "w") as f:
        d = f.create_dataset("features", data=features, maxshape=(None,) + features.shape[1:],
                             chunks=(1,) + features.shape[1:])
        d.attrs.update({"name": os.path.basename(path)[:-3], "savetodir": "/x",
                        "encoder": encoder})
        c = f.create_dataset("coords", data=coords.astype(np.int64), maxshape=(None, 2),
                             chunks=(1, 2))
        c.attrs.update({"patch_size": 256, "patch_size_level0": 512,
                        "level0_magnification": 40, "target_magnification": 20, "overlap": 0,
                        "name": os.path.basename(path)[:-3], "savetodir": "/x",
                        "level0_width": 10000, "level0_height": 8000})


def synthetic(seed, n, dims, dtype):
    rng = np.random.default_rng(seed)
    coords = np.stack([np.arange(n) % 8 * 512, np.arange(n) // 8 * 512], 1)  # a grid, row-major
    return rng.standard_normal((n, dims)).astype(dtype), coords


def pack_bags(features, slides):
    labels = tmp(os.path.basename(features) + "-labels.csv")
    with open(labels, "w") as f:
        f.write("key,label\n" + "".join(f"{s},{i % 2}\n" for i, s in enumerate(slides)))
    out = features + "-ds"
    code, s, err = run_json([mltool, "pack", features, "--labels", labels, "--unit", "bag",
                             "--split", "train=0.5,val=0.5", "-o", out, "--json"])
    expect(code == 0 and s["records"] == len(slides), f"pack --unit bag: {code} {s} {err}")


def check_import_trident():
    d = tmp("trident_feats")
    os.makedirs(d)
    files = {"S2": synthetic(1, 30, 16, np.float32), "S1": synthetic(2, 20, 16, np.float32),
             "S3": synthetic(3, 10, 16, np.float32)}
    for slide, (F, C) in files.items():
        trident_file(os.path.join(d, slide + ".h5"), F, C)
    out = tmp("imported_trident")
    s, _ = import_h5(d, out)
    expect(s["layout"] == "trident" and s["encoder"] == "uni_v1" and s["dtype"] == "float32"
           and s["slides"] == 3 and s["rows"] == 60, f"summary {s}")
    X, keys, meta = load_store(out)
    at = 0
    for slide in sorted(files):  # files in name order, rows in file order
        F, C = files[slide]
        expect(np.array_equal(X[at:at + len(F)], F), f"{slide}: values")
        expect(keys[at:at + len(F)] == [f"{slide}/x{x}_y{y}" for x, y in C], f"{slide}: keys")
        at += len(F)
    expect(meta["model"]["encoder"] == "uni_v1"
           and meta["source"]["slides"]["S1"]["coords_attrs"]["patch_size_level0"] == 512,
           f"features.json: {meta['model']} {meta['source']['slides']['S1']}")
    pack_bags(out, sorted(files))
    # float16 files make a float16 store, bit for bit.
    d16 = tmp("trident16")
    os.makedirs(d16)
    F, C = synthetic(4, 12, 8, np.float16)
    trident_file(os.path.join(d16, "H.h5"), F, C)
    s, _ = import_h5(d16, tmp("imported16"))
    X, _, _ = load_store(tmp("imported16"))
    expect(s["dtype"] == "float16" and X.dtype == np.float16
           and np.array_equal(X.view(np.uint16), F.view(np.uint16)), "float16 kept")


def check_import_clam():
    d = tmp("clam_feats")
    os.makedirs(os.path.join(d, "h5_files"))
    os.makedirs(os.path.join(d, "pt_files"))
    slides = {}
    for i, slide in enumerate(["TCGA-01", "TCGA-02"]):
        F, C = synthetic(10 + i, 15 + i, 32, np.float32)
        with h5py.File(os.path.join(d, "h5_files", slide + ".h5"), "w") as f:
            f.create_dataset("features", data=F)
            f.create_dataset("coords", data=C.astype(np.int32))
        slides[slide] = (F, C)
    out = tmp("imported_clam")
    s, _ = import_h5(d, out)
    expect(s["layout"] == "clam" and s["encoder"] is None and s["slides"] == 2, f"summary {s}")
    X, keys, _ = load_store(out)
    expect(np.array_equal(X, np.concatenate([slides[s][0] for s in sorted(slides)])), "values")
    pack_bags(out, sorted(slides))


def check_round_trip():
    exp = tmp("rt_exp")
    export(FEATURES, exp)
    imp = tmp("rt_imp")
    import_h5(exp, imp)
    X, keys, _ = load_store(FEATURES)
    Y, ykeys, meta = load_store(imp)
    geometry = tile_geometry(STORE)
    # Import reads files in name order ("A-2.h5" < "A.h5", as the tile store's keys sort).
    slides = by_slide(keys)
    order = [r for slide in sorted(slides, key=lambda s: s + ".h5") for r in slides[slide]]
    expect(np.array_equal(Y.view(np.uint32), X[order].view(np.uint32)), "every value kept")
    want = []
    for r in order:
        slide = keys[r].rsplit("/", 1)[0]
        x, y = geometry[slide][1][keys[r]]
        want.append(f"{slide}/x{x}_y{y}")
    expect(ykeys == want, f"keys {ykeys[:2]} vs {want[:2]}")
    expect(meta["model"]["encoder"] == "color-texture", f"encoder {meta['model']}")
    # And back out again, from the keys: the same files' data and attributes.
    exp2 = tmp("rt_exp2")
    s, _ = export(imp, exp2)
    expect(s["coordinates"] == "keys", f"summary {s}")
    for f in os.listdir(exp):
        if not f.endswith(".h5"):
            continue
        with h5py.File(os.path.join(exp, f)) as a, h5py.File(os.path.join(exp2, f)) as b:
            expect(np.array_equal(a["features"][:], b["features"][:])
                   and np.array_equal(a["coords"][:], b["coords"][:]), f"{f}: data")
            ca, cb = dict(a["coords"].attrs), dict(b["coords"].attrs)
            for k in ("patch_size", "patch_level", "patch_size_level0", "level0_magnification"):
                expect(ca[k] == cb[k], f"{f}: attribute {k}: {ca[k]} vs {cb[k]}")


def bad_dir(name, write):
    d = tmp("bad", name)
    os.makedirs(d)
    write(d)
    return d


def check_bad_inputs():
    F, C = synthetic(5, 6, 4, np.float32)

    def no_coords(d):
        with h5py.File(os.path.join(d, "S.h5"), "w") as f:
            f.create_dataset("features", data=F)

    def wrong_shape(d):
        with h5py.File(os.path.join(d, "S.h5"), "w") as f:
            f.create_dataset("features", data=F)
            f.create_dataset("coords", data=np.zeros((6, 3), np.int64))

    def collision(d):
        trident_file(os.path.join(d, "S.h5"), F, C)
        trident_file(os.path.join(d, "S.hdf5"), F, C)

    def not_hdf5(d):
        open(os.path.join(d, "S.h5"), "w").write("not hdf5")

    def repeated(d):
        trident_file(os.path.join(d, "S.h5"), F, np.zeros((6, 2), np.int64))

    cases = [("no_coords", no_coords, ["S.h5", "'coords'", "rows x 2"]),
             ("wrong_shape", wrong_shape, ["S.h5", "'coords'", "(6, 3)", "(6, 2)"]),
             ("collision", collision, ["S.h5", "S.hdf5", "'S'"]),
             ("not_hdf5", not_hdf5, ["S.h5", "not an HDF5 file"]),
             ("repeated", repeated, ["S.h5", "'coords' row 1 repeats"])]
    problems = []
    for name, write, words in cases:
        d = bad_dir(name, write)
        out = tmp("bad_out_" + name)
        code, s, err = run_json([mltool, "import", "h5", d, "-o", out, "--json"])
        if code != 2:
            problems.append(f"{name}: exit {code}, not 2: {err[-500:]}")
        elif any(w not in err for w in words):
            problems.append(f"{name}: the message names {words}: {err.strip()[-500:]}")
        if os.path.exists(os.path.join(out, "features.json")):
            problems.append(f"{name}: a store was published")
        print(f"  {name}: {err.strip().splitlines()[-1][:200]}")
    expect(not problems, "; ".join(problems))


def check_help():
    code, a, _ = run([mltool, "export", "h5", "--help"])
    code2, b, _ = run([mltool, "help", "export", "h5"])
    expect(code == code2 == 0 and a == b and "--tiles" in a and "mltool export h5" in a,
           f"export h5 --help and help export h5 agree: {a[:300]}")
    code, out, _ = run([mltool, "export"])
    expect(code == 1 and "h5" in out, f"mltool export alone: usage, exit 1 (got {code}): {out}")
    code, out, _ = run([mltool, "import", "h5"])
    expect(code == 1 and "--output" in out, f"mltool import h5 alone: usage, exit 1: {out}")


CHECKS = [check_export, check_export_f16, check_export_pt, check_tiles_moved,
          check_import_trident, check_import_clam, check_round_trip, check_bad_inputs,
          check_help]


def main():
    run_checks("mltool export/import h5", CHECKS, only, make_fixtures)


main()
