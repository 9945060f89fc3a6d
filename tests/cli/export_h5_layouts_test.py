"""mltool export h5 --layout trident|clam against the files TRIDENT's and CLAM's own writers
make of the same features (tests/cli/clam_trident_refs.py: their code, copied): the same
folders and file names, datasets, dtypes, shapes, chunks, maxshape and attributes (values
and types); CLAM's pt_files/ by torch.load; and import h5 of a TRIDENT job directory back
into the store.

    export_h5_layouts_test.py MLTOOL [TEST...]     # TEST: check_* names, without check_

The fixture: slides A (0.25 µm/px), A-2 (0.25) and B (0.499, which TRIDENT rates 20x) written
by libvips (scripts/fixtures/make_slides.py), tiled at 0.5 µm/px by `mltool tile`, features
by `mltool extract --model builtin:color-texture` on the CPU.
"""
import os
import shutil
import sys

import h5py
import numpy as np
import torch

import clam_trident_refs as ref
import h5_cli
from cli_common import expect, run, run_checks, tmp
from store_refs import by_slide, load_store, tile_geometry

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "fixtures"))
import make_slides  # noqa: E402  (imports pyvips only in its child processes)

mltool = os.path.abspath(sys.argv[1])
only = set(sys.argv[2:])
TS = 128
ENCODER = "color-texture"


def tile_and_extract(name, slides, *tile_args):
    store, features = tmp(name + ".lmdb"), tmp(name + "-features")
    code, _, err = run([mltool, "tile", *slides, "-o", store, *tile_args, "--format", "png",
                        "-q"])
    expect(code == 0, f"mltool tile {name} exits 0 (got {code}): {err}")
    code, _, err = run([mltool, "extract", store, "-o", features, "--device", "cpu",
                        "--threads", "2", "-q"])
    expect(code == 0, f"mltool extract {name} exits 0 (got {code}): {err}")
    return store, features


def make_fixtures():
    global STORE, FEATURES
    make_slides.generate(h5_cli.a_slides(tmp) + [
        ["generic_tiff", [tmp("B.tif"), 1024, 1024, 0.499, [(0, 0, 1024, 1024)]],
         {"min_level": 256}],
        ["generic_tiff", [tmp("C.tif"), 1024, 768, None, [(0, 0, 1024, 768)]],
         {"min_level": 256}],
    ])
    STORE, FEATURES = tile_and_extract("tiles", [tmp("A.tif"), tmp("A-2.tif"), tmp("B.tif")],
                                       "--mpp", "0.5", "--tile-size", str(TS))
    X, keys, _ = load_store(FEATURES)
    return f"{len(keys)} rows x {X.shape[1]}"


def export(features, out, *args, code_wanted=0):
    return h5_cli.export(mltool, features, out, *args, code_wanted=code_wanted)


def slides_of_store():
    """slide -> (features rows, coords int64, its slides/ record), store order."""
    X, keys, _ = load_store(FEATURES)
    geometry = tile_geometry(STORE)
    out = {}
    for slide, rows in by_slide(keys).items():
        info, xy = geometry[slide]
        out[slide] = (X[rows], np.array([xy[keys[r]] for r in rows], np.int64), info)
    return out


def expect_same_tree(ours, theirs, what):
    a, b = ref.tree(ours), ref.tree(theirs)
    expect(a == b, f"{what}: files {a} vs {b} (TRIDENT/CLAM's)")
    for f in a:
        if f.endswith(".h5"):
            da, db = ref.describe(os.path.join(ours, f), ours), ref.describe(
                os.path.join(theirs, f), theirs)
            expect(da == db, f"{what}: {f}:\n  ours   {da}\n  theirs {db}")
            with h5py.File(os.path.join(ours, f)) as x, h5py.File(os.path.join(theirs, f)) as y:
                for name in x:
                    expect(np.array_equal(x[name][:], y[name][:]), f"{what}: {f}: {name} values")


# ---------------------------------------------------------------- checks

def check_trident():
    out, theirs = tmp("exp_trident"), tmp("trident_ref")
    s, _ = export(FEATURES, out, "--layout", "trident")
    expect(s["layout"] == "trident" and s["encoder"] == ENCODER and s["dtype"] == "f32"
           and s["written"] == 3 and s["no_mpp"] == 0, f"summary {s}")
    for slide, (F, C, info) in slides_of_store().items():
        # What TRIDENT does for this slide: level 0 rated by its µm/px, patches at 20x.
        ref.trident_job(theirs, slide, C, F, patch_size=TS,
                        src_mag=ref.trident_fetch_magnification(info["mpp"]), target_mag=20,
                        width=info["width"], height=info["height"], overlap=0, encoder=ENCODER)
    expect_same_tree(out, theirs, "--layout trident")
    expect(os.path.isdir(tmp("exp_trident", "20x_128px_0px_overlap", "features_" + ENCODER)),
           "the job tree")
    # Again: nothing to do; a lost file is written again.
    s, _ = export(FEATURES, out, "--layout", "trident")
    expect(s["status"] == "skipped" and s["resumed"] == 3, f"again: {s}")
    os.remove(tmp("exp_trident", "20x_128px_0px_overlap", "patches", "B_patches.h5"))
    s, _ = export(FEATURES, out, "--layout", "trident")
    expect(s["written"] == 1 and s["resumed"] == 2, f"resume: {s}")
    expect_same_tree(out, theirs, "--layout trident, resumed")


def check_clam():
    out, theirs = tmp("exp_clam"), tmp("clam_ref")
    s, _ = export(FEATURES, out, "--layout", "clam")
    expect(s["layout"] == "clam" and s["dtype"] == "f32", f"summary {s}")
    slides = slides_of_store()
    for slide, (F, C, _) in slides.items():
        ref.clam_feat_dir(theirs, slide, C, F)
    expect_same_tree(out, theirs, "--layout clam")
    for slide, (F, _, _) in slides.items():
        t = torch.load(tmp("exp_clam", "pt_files", slide + ".pt"), weights_only=True)
        r = torch.load(tmp("clam_ref", "pt_files", slide + ".pt"), weights_only=True)
        expect(isinstance(t, torch.Tensor) and t.dtype == torch.float32 == r.dtype
               and tuple(t.shape) == F.shape and torch.equal(t, r)
               and np.array_equal(t.numpy(), F), f"pt_files/{slide}.pt: {t.dtype} {t.shape}")


def check_flat_as_clam_patches():
    # --layout flat into DIR/patches is what CLAM's extract_features_fp.py reads as
    # --data_h5_dir DIR (Whole_Slide_Bag_FP: coords, attributes patch_level and patch_size):
    # CLAM's patching attributes, their values and types as create_patches_fp.py has them.
    out, theirs = tmp("clam_job", "patches"), tmp("clam_patches_ref")
    export(FEATURES, out)
    os.makedirs(theirs)
    for slide, (_, C, info) in slides_of_store().items():
        level = info["level"]
        dims = info["levels"][level]
        ref.clam_patch_file(theirs, slide, C, TS, level, (info["level_downsample"],) * 2,
                            (dims["width"], dims["height"]))
        ours = ref.describe(os.path.join(out, slide + ".h5"), out)["coords"]
        want = ref.describe(os.path.join(theirs, slide + ".h5"), theirs)["coords"]
        picked = {k: ours["attrs"].get(k) for k in want["attrs"]}
        picked["save_path"] = want["attrs"]["save_path"]  # each its own directory
        expect(ours["dtype"] == want["dtype"] and picked == want["attrs"],
               f"{slide}: coords {ours['dtype']} {picked}\n  CLAM's {want}")


def check_import_trident_job():
    out = tmp("exp_trident_rt")
    export(FEATURES, out, "--layout", "trident")
    s, err = h5_cli.import_h5(mltool, out, tmp("rt"))
    features_dir = os.path.join(out, "20x_128px_0px_overlap", "features_" + ENCODER)
    expect(s["input"] == features_dir and s["layout"] == "trident"
           and s["encoder"] == ENCODER and features_dir in err, f"import: {s} {err}")
    X, keys, _ = load_store(FEATURES)
    Y, ykeys, meta = load_store(tmp("rt"))
    geometry = tile_geometry(STORE)
    slides = by_slide(keys)
    order = [r for slide in sorted(slides, key=lambda x: x + ".h5") for r in slides[slide]]
    expect(np.array_equal(Y.view(np.uint32), X[order].view(np.uint32)), "every value kept")
    want = [f"{k.rsplit('/', 1)[0]}/x{x}_y{y}" for k in (keys[r] for r in order)
            for x, y in [geometry[k.rsplit("/", 1)[0]][1][k]]]
    expect(ykeys == want, f"keys {ykeys[:2]} vs {want[:2]}")
    # And out again from the imported store: the same tree, from the keys and attributes.
    again = tmp("exp_trident_rt2")
    s2, _ = export(tmp("rt"), again, "--layout", "trident")
    expect(s2["coordinates"] == "keys" and s2["encoder"] == ENCODER, f"summary {s2}")
    expect_same_tree(again, out, "imported and exported again")
    # Two encoders: import asks which, --encoder picks one.
    other = os.path.join(out, "20x_128px_0px_overlap", "features_other")
    shutil.copytree(features_dir, other)
    for f in os.listdir(other):
        with h5py.File(os.path.join(other, f), "a") as h:
            h["features"].attrs["encoder"] = "other"
    code, _, err = run([mltool, "import", "h5", out, "-o", tmp("rt_two")])
    expect(code == 1 and "--encoder" in err and "features_other" in err
           and "features_" + ENCODER in err, f"two encoders: exit {code}: {err}")
    s, err = h5_cli.import_h5(mltool, out, tmp("rt_other"), "--encoder", "other")
    expect(s["encoder"] == "other" and s["input"] == other, f"{s} {err}")
    code, _, err = run([mltool, "import", "h5", out, "-o", tmp("rt_none"), "--encoder", "uni"])
    expect(code == 2 and "features_uni" in err and "features_other" in err, f"{code}: {err}")


def check_magnifications():
    # B, 0.499 µm/px at 0.5 in 256-pixel tiles: TRIDENT rates it 20x, the tiles 20x, and
    # each tile covers 256 * 0.5 / 0.499 = 256.5 level-0 pixels.
    store, features = tile_and_extract("b256", [tmp("B.tif")], "--mpp", "0.5",
                                       "--tile-size", "256")
    s, _ = export(features, tmp("exp_b256"))
    with h5py.File(tmp("exp_b256", "B.h5")) as f:
        a = dict(f["coords"].attrs)
    expect(a["patch_size"] == 256 and a["patch_level"] == 0 and a["patch_size_level0"] == 257
           and isinstance(a["level0_magnification"], np.int64)
           and a["level0_magnification"] == 20 and a["target_magnification"] == 20
           and isinstance(a["target_magnification"], np.int64), f"B at 256: {a}")
    # C, no µm/px, tiled at level 1 (downsample 2): level 0 taken for 40x, the tiles 20x.
    store, features = tile_and_extract("c", [tmp("C.tif")], "--level", "1", "--tile-size",
                                       str(TS))
    s, err = export(features, tmp("exp_c"), "--layout", "trident")
    expect(s["no_mpp"] == 1 and "no µm/px" in err and "--slide-mpp" in err, f"{s} {err}")
    with h5py.File(tmp("exp_c", "20x_128px_0px_overlap", "patches", "C_patches.h5")) as f:
        a = dict(f["coords"].attrs)
    expect(a["level0_magnification"] == 40 and a["target_magnification"] == 20
           and a["patch_size_level0"] == 256, f"C without µm/px: {a}")


def check_dtypes():
    # A float16 store (TRIDENT's float16 files imported): exported as float16 unless
    # --layout clam, whose default is float32.
    d = tmp("f16_files")
    os.makedirs(d)
    rng = np.random.default_rng(4)
    F = rng.standard_normal((12, 8)).astype(np.float16)
    C = np.stack([np.arange(12) % 4 * 512, np.arange(12) // 4 * 512], 1)
    ref.trident_job(tmp("f16_job"), "H", C, F, patch_size=256, src_mag=40, target_mag=20,
                    width=4096, height=4096, overlap=0, encoder="uni_v1")
    s, err = h5_cli.import_h5(mltool, tmp("f16_job"), tmp("f16"))
    expect(s["dtype"] == "float16", f"import: {s} {err}")
    s, _ = export(tmp("f16"), tmp("f16_flat"))
    with h5py.File(tmp("f16_flat", "H.h5")) as f:
        expect(s["dtype"] == "f16" and f["features"].dtype == np.float16
               and np.array_equal(f["features"][:].view(np.uint16), F.view(np.uint16)),
               f"flat: the store's float16: {s}")
    s, _ = export(tmp("f16"), tmp("f16_clam"), "--layout", "clam")
    t = torch.load(tmp("f16_clam", "pt_files", "H.pt"), weights_only=True)
    with h5py.File(tmp("f16_clam", "h5_files", "H.h5")) as f:
        expect(s["dtype"] == "f32" and f["features"].dtype == np.float32
               and t.dtype == torch.float32 and np.array_equal(t.numpy(), F.astype(np.float32)),
               f"clam: float32: {s}")
    s, _ = export(tmp("f16"), tmp("f16_clam32"), "--layout", "trident", "--dtype", "f32")
    expect(s["dtype"] == "f32", f"--dtype f32: {s}")
    # The imported TRIDENT job exported again: TRIDENT's own files, float16 as they were.
    export(tmp("f16"), tmp("f16_trident"), "--layout", "trident")
    expect_same_tree(tmp("f16_trident"), tmp("f16_job"), "imported float16 job, exported")


def check_refusals():
    _, err = export(FEATURES, tmp("bad1"), "--layout", "trident", "--format", "pt",
                    code_wanted=1)
    expect("--format pt" in err and "--layout flat" in err, err)
    # A store imported from CLAM's files has no magnifications for TRIDENT's tree.
    d = tmp("clam_only")
    F = np.ones((3, 4), np.float32)
    ref.clam_feat_dir(d, "S", np.array([[0, 0], [256, 0], [512, 0]]), F)
    code, _, err = run([mltool, "import", "h5", d, "-o", tmp("clam_store")])
    expect(code == 0, err)
    _, err = export(tmp("clam_store"), tmp("bad2"), "--layout", "trident", code_wanted=2)
    expect("'S'" in err and "target_magnification" in err and "--layout flat" in err, err)


CHECKS = [check_trident, check_clam, check_flat_as_clam_patches, check_import_trident_job, check_magnifications,
          check_dtypes, check_refusals]


def main():
    run_checks("mltool export h5 --layout trident|clam", CHECKS, only, make_fixtures)


main()
