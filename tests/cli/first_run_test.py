"""A failed first run never blocks the corrected one (docs/reliability.md): for every command
that writes an output, a first run into OUTPUT that is refused (a bad option), fails (a bad
input) or is killed (SIGKILL at a random point) is followed by the corrected run into the same
OUTPUT, which must succeed and equal a clean run into a fresh directory.

    first_run_test.py MLTOOL [CHECK...]
"""
import csv
import filecmp
import json
import os
import random
import signal
import subprocess
import sys

from cli_common import expect, rename_shim, run, run_checks, tmp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "fixtures"))
import make_slides  # noqa: E402
from store_refs import read_tile_store  # noqa: E402

mltool = os.path.abspath(sys.argv[1])
only = set(sys.argv[2:])
RNG = random.Random(int(os.environ.get("MLTOOL_TEST_SEED", "28")))


def mltool_ok(*args, what=""):
    code, out, err = run([mltool, *args])
    expect(code == 0, f"{what or ' '.join(args[:2])}: exit {code}: {err.strip()[-1500:]}")
    return out


def refused(args, codes, what):
    code, _, err = run([mltool, *args])
    expect(code in codes, f"{what}: exit {code}, expected one of {codes}: {err.strip()[-800:]}")


def killed(args, most_delay):
    """Runs mltool ARGS and SIGKILLs it after a random delay (0 to most_delay s)."""
    p = subprocess.Popen([mltool, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        p.wait(timeout=RNG.uniform(0, most_delay))
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGKILL)
        p.wait()


def store_content(path):
    """(tiles, meta) of a tile store, the run-dependent `seconds` of done/ markers removed."""
    meta, tiles = read_tile_store(path)
    for k, doc in meta.items():
        if k.startswith("done/"):
            doc.pop("seconds", None)
    return tiles, meta


def same_store(a, b, what):
    ta, ma = store_content(a)
    tb, mb = store_content(b)
    expect(ta == tb, f"{what}: tiles differ ({len(ta)} vs {len(tb)})")
    differ = sorted(k for k in set(ma) | set(mb) if ma.get(k) != mb.get(k))
    expect(not differ, f"{what}: meta differs: {differ[:5]}")


def same_files(a, b, names, what):
    for n in names:
        pa, pb = os.path.join(a, n), os.path.join(b, n)
        expect(os.path.exists(pa), f"{what}: {pa} missing")
        expect(filecmp.cmp(pa, pb, shallow=False), f"{what}: {n} differs from a clean run's")


def fixtures():
    os.makedirs(tmp("slides"))
    calls = [["generic_tiff", [tmp("slides", f"S{i}.tif"), 1024, 768, 0.25,
                               [(0, 0, 1024 - 128 * i, 768)]]] for i in range(4)]
    make_slides.generate(calls)
    slides = [tmp("slides", f"S{i}.tif") for i in range(4)]
    mltool_ok("tile", *slides, "-o", tmp("tiles.lmdb"), "--mpp", "0.5", what="tile")
    mltool_ok("extract", tmp("tiles.lmdb"), "-o", tmp("feat"), "--model", "builtin:color-texture",
              "--device", "cpu", "--math-threads", "1", what="extract")
    keys = open(tmp("feat", "keys.txt")).read().split()
    with open(tmp("labels.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["key", "label"])
        for k in keys:
            w.writerow([k, "tumor" if k.split("/")[0] in ("S0", "S2") else "normal"])
    with open(tmp("bad_labels.csv"), "w") as f:
        f.write("slide,diagnosis\n" + keys[0] + ",tumor\n")  # no key, label columns
    mltool_ok("pack", tmp("feat"), "--labels", tmp("labels.csv"), "-o", tmp("ds"), "--seed", "1",
              "--split", "train=0.5,val=0.5", what="pack")
    with open(tmp("mlp.json"), "w") as f:
        json.dump({"family": "mlp", "hidden": [8]}, f)
    with open(tmp("bad.json"), "w") as f:
        json.dump({"family": "no-such-family"}, f)
    mltool_ok("train", tmp("ds"), "--model", tmp("mlp.json"), "-o", tmp("run"), "--epochs", "2",
              "--device", "cpu", "--math-threads", "1", what="train")
    return f"4 slides, {len(keys)} tiles"


def check_tile():
    slides = [tmp("slides", f"S{i}.tif") for i in range(4)]
    good = [*slides, "--mpp", "0.5"]
    mltool_ok("tile", *good, "-o", tmp("t_clean"))
    for name, first, codes in [
            ("--mpp finer than level 0", [*slides, "--mpp", "0.1"], (1, 2)),
            ("a missing slide first", [tmp("slides", "nope.tif"), *slides, "--mpp", "0.75"], (2,)),
            ("a bad --tissue", [*slides, "--tissue", "bogus"], (1,))]:
        out = tmp(f"t_{len(name)}")
        refused(["tile", *first, "-o", out], codes, f"tile, {name}")
        mltool_ok("tile", *good, "-o", out, what=f"tile after {name}")
        same_store(out, tmp("t_clean"), f"tile after {name}")
    # Killed at random points with other settings, then corrected: it must succeed unless the
    # killed run finished a slide (then its settings are the store's, and the refusal names
    # --overwrite, which replaces it).
    for i in range(3):
        out = tmp(f"t_kill{i}")
        killed(["tile", *slides, "--mpp", "1.0", "-o", out], 1.5)
        code, _, err = run([mltool, "tile", *good, "-o", out])
        if code != 0:
            expect(code == 1 and "--overwrite" in err, f"tile after a kill: exit {code}: {err}")
            mltool_ok("tile", *good, "-o", out, "--overwrite", what="tile --overwrite")
        same_store(out, tmp("t_clean"), f"tile after a kill ({i})")


def check_extract():
    good = [tmp("tiles.lmdb"), "--model", "builtin:color-texture", "--device", "cpu",
            "--math-threads", "1"]
    for name, first, codes in [
            ("a missing model", [tmp("tiles.lmdb"), "--model", tmp("nope.pt"), "--device", "cpu"],
             (2,)),
            ("a bad --batch", [*good, "--batch", "0"], (1,)),
            ("a missing store", [tmp("nope.lmdb"), *good[1:]], (2,))]:
        out = tmp(f"f_{len(name)}")
        refused(["extract", *first, "-o", out], codes, f"extract, {name}")
        mltool_ok("extract", *good, "-o", out, what=f"extract after {name}")
        same_files(out, tmp("feat"), ["features.npy", "keys.txt"], f"extract after {name}")
    # Killed after its first chunk with other settings (--batch 3 --chunk-rows 2), so a partial
    # extraction is there: the default run is refused naming --overwrite, which starts over.
    out = tmp("f_partial")
    env = dict(os.environ, LD_PRELOAD=rename_shim(), KILL_AT_RENAME="3")
    p = subprocess.run([mltool, "extract", *good, "--batch", "3", "--chunk-rows", "2", "-o", out],
                       env=env, capture_output=True, text=True)
    expect(p.returncode == -signal.SIGKILL, f"extract killed at its 3rd rename: {p.returncode}")
    code, _, err = run([mltool, "extract", *good, "-o", out])
    expect(code == 1 and "--overwrite" in err and "--batch" in err,
           f"a run over another's partial extraction: exit {code}, naming --overwrite: {err}")
    mltool_ok("extract", *good, "--overwrite", "-o", out, what="extract --overwrite")
    same_files(out, tmp("feat"), ["features.npy", "keys.txt"], "extract --overwrite")
    out = tmp("f_kill")
    killed(["extract", *good, "--batch", "3", "-o", out], 1.0)
    code, _, err = run([mltool, "extract", *good, "-o", out])
    if code != 0:  # a partial run with --batch 3: its refusal must say how to start over
        expect(code == 1 and "--overwrite" in err, f"extract after a kill: {err}")
        mltool_ok("extract", *good, "--overwrite", "-o", out, what="extract --overwrite")
    same_files(out, tmp("feat"), ["features.npy", "keys.txt"], "extract after a kill")


def check_pack():
    good = [tmp("feat"), "--labels", tmp("labels.csv"), "--seed", "1", "--split", "train=0.5,val=0.5"]
    for name, first, codes in [
            ("bad labels", [tmp("feat"), "--labels", tmp("bad_labels.csv"), "--seed", "1"], (1, 2)),
            ("a bad --split", [*good[:-1], "train=2"], (1,))]:
        out = tmp(f"p_{len(name)}")
        refused(["pack", *first, "-o", out], codes, f"pack, {name}")
        mltool_ok("pack", *good, "-o", out, what=f"pack after {name}")
        names = sorted(n for n in os.listdir(tmp("ds")) if n != "dataset.json")
        same_files(out, tmp("ds"), names, f"pack after {name}")
        a, b = (json.load(open(os.path.join(d, "dataset.json"))) for d in (out, tmp("ds")))
        expect(a["splits"] == b["splits"], f"pack after {name}: dataset.json splits differ")


def check_train():
    good = [tmp("ds"), "--model", tmp("mlp.json"), "--epochs", "2", "--device", "cpu",
            "--math-threads", "1"]
    for name, first, codes in [
            ("a bad model spec", [tmp("ds"), "--model", tmp("bad.json"), "--epochs", "2"], (1, 2)),
            ("a missing dataset", [tmp("nope"), *good[1:]], (2,)),
            ("a bad --lr", [*good, "--lr", "-1"], (1,))]:
        out = tmp(f"r_{len(name)}")
        refused(["train", *first, "-o", out], codes, f"train, {name}")
        mltool_ok("train", *good, "-o", out, what=f"train after {name}")
        same_files(out, tmp("run"), ["model.safetensors"], f"train after {name}")


def check_predict():
    good = [tmp("run"), tmp("feat"), "--device", "cpu", "--math-threads", "1"]
    mltool_ok("predict", *good, "-o", tmp("pr_clean"))
    for name, first, codes in [
            ("an unknown --slide", [*good, "--slide", "NOPE"], (1, 2)),
            ("a missing run", [tmp("nope"), *good[1:]], (2,))]:
        out = tmp(f"pr_{len(name)}")
        refused(["predict", *first, "-o", out], codes, f"predict, {name}")
        mltool_ok("predict", *good, "-o", out, what=f"predict after {name}")
        same_files(out, tmp("pr_clean"), ["predictions.csv"], f"predict after {name}")


def check_export_import():
    mltool_ok("export", "h5", tmp("feat"), "-o", tmp("h5_clean"))
    out = tmp("h5_after")
    refused(["export", "h5", tmp("nope"), "-o", out], (2,), "export h5 of a missing store")
    mltool_ok("export", "h5", tmp("feat"), "-o", out, what="export h5 after a failure")
    names = sorted(os.listdir(tmp("h5_clean")))
    for n in names:
        if os.path.isdir(os.path.join(tmp("h5_clean"), n)):
            same_files(os.path.join(out, n), os.path.join(tmp("h5_clean"), n),
                       sorted(os.listdir(os.path.join(tmp("h5_clean"), n))), "export h5")
    # An export of other settings in DIR: refused naming --overwrite, which re-exports.
    mltool_ok("export", "h5", tmp("feat"), "-o", tmp("h5_other"), "--dtype", "f16")
    code, _, err = run([mltool, "export", "h5", tmp("feat"), "-o", tmp("h5_other")])
    expect(code == 1 and "--overwrite" in err, f"export h5 over another export: {code}: {err}")
    mltool_ok("export", "h5", tmp("feat"), "-o", tmp("h5_other"), "--overwrite")
    for n in names:
        if os.path.isdir(os.path.join(tmp("h5_clean"), n)):
            same_files(os.path.join(tmp("h5_other"), n), os.path.join(tmp("h5_clean"), n),
                       sorted(os.listdir(os.path.join(tmp("h5_clean"), n))), "export h5 --overwrite")
    mltool_ok("export", "geojson", tmp("tiles.lmdb"), "-o", tmp("gj_clean"))
    refused(["export", "geojson", tmp("nope.lmdb"), "-o", tmp("gj_after")], (2,),
            "export geojson of a missing store")
    mltool_ok("export", "geojson", tmp("tiles.lmdb"), "-o", tmp("gj_after"))
    same_files(tmp("gj_after"), tmp("gj_clean"), sorted(os.listdir(tmp("gj_clean"))),
               "export geojson after a failure")
    mltool_ok("import", "h5", tmp("h5_clean"), "-o", tmp("imp_clean"))
    refused(["import", "h5", tmp("nope"), "-o", tmp("imp_after")], (1, 2), "import h5 of nothing")
    mltool_ok("import", "h5", tmp("h5_clean"), "-o", tmp("imp_after"))
    same_files(tmp("imp_after"), tmp("imp_clean"), ["features.npy", "keys.txt"],
               "import h5 after a failure")
    # A feature store that is not this import's: refused naming --overwrite, which replaces it.
    import shutil
    shutil.copytree(tmp("feat"), tmp("feat_other"))
    code, _, err = run([mltool, "import", "h5", tmp("h5_clean"), "-o", tmp("feat_other")])
    expect(code == 1 and "--overwrite" in err, f"import h5 over another store: {code}: {err}")
    mltool_ok("import", "h5", tmp("h5_clean"), "-o", tmp("feat_other"), "--overwrite")
    same_files(tmp("feat_other"), tmp("imp_clean"), ["features.npy", "keys.txt"],
               "import h5 --overwrite")


if __name__ == "__main__":
    run_checks("first runs", [check_tile, check_extract, check_pack, check_train, check_predict,
                              check_export_import], only, fixtures)
