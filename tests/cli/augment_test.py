"""mltool train --augment (docs/train.md#augmentation): each transform against numpy from the
parameters the augmenter drew (augment_probe: train::Augmenter on raw tiles) — HED jitter
with skimage.color's rgb2hed/hed2rgb written out in numpy (the Ruifrok matrix and its
numpy.linalg.inv; scikit-image is not in the venv), brightness, contrast and saturation as
torchvision's blends, flips and quarter turns as numpy's — the draws' ranges, a sample's pixels
independent of its batch and its position in it; then training a rescnn on tinted tiles: the
augmented pixels (MLTOOL_DEBUG_AUGMENT's per-sample CRCs) of --feed host, --micro-batches,
--sections, --nproc 2, a resumed run and runs on the code paths another machine would take
equal the plain run's, and the weights where the mode gives the plain run's weights without
augmentation (the feeds, resume).

    augment_test.py MLTOOL AUGMENT_PROBE [TEST...]   # TEST: check_* names without check_
"""
import csv
import json
import os
import sys

import numpy as np

from cli_common import OTHER_MACHINES, expect, run, run_checks, tmp, write_feature_store
from train_test import tinted_pixels  # the tinted tiles of train_test.check_image

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "fixtures"))

mltool = os.path.abspath(sys.argv[1])
probe = os.path.abspath(sys.argv[2])
only = set(sys.argv[3:])

# skimage.color.colorconv's rgb_from_hed and hed_from_rgb.
RGB_FROM_HED = np.array([[0.65, 0.70, 0.29], [0.07, 0.99, 0.11], [0.27, 0.57, 0.78]])
HED_FROM_RGB = np.linalg.inv(RGB_FROM_HED)


def rgb2hed(rgb):
    """skimage.color.separate_stains(rgb, hed_from_rgb) on float RGB in [0, 1]."""
    rgb = np.maximum(rgb, 1e-6)
    return np.maximum((np.log(rgb) / np.log(1e-6)) @ HED_FROM_RGB, 0)


def hed2rgb(stains):
    """skimage.color.combine_stains(stains, rgb_from_hed)."""
    return np.clip(np.exp(-(stains * -np.log(1e-6)) @ RGB_FROM_HED), 0, 1)


def gray(x):
    return x[..., 0] * 0.299 + x[..., 1] * 0.587 + x[..., 2] * 0.114


def reference(tile, items):
    """One uint8 H×W×3 tile through `items` [(text, parameters)], in float64."""
    x, unit = tile, False
    for text, p in items:
        kind = text.split(":")[0]
        if kind == "flip":
            x = x[:, ::-1] if p[0] else x
            x = x[::-1] if p[1] else x
            continue
        if kind == "rot90":
            x = np.rot90(x, int(p[0]), axes=(0, 1))
            continue
        if not unit:
            x, unit = x.astype(np.float64) / 255, True
        if kind == "hed":
            x = hed2rgb(rgb2hed(x) * np.array(p[:3]) + np.array(p[3:]))
        elif kind == "brightness":
            x = np.clip(x * p[0], 0, 1)
        elif kind == "contrast":
            x = np.clip(p[0] * x + (1 - p[0]) * gray(x).mean(), 0, 1)
        else:
            x = np.clip(p[0] * x + (1 - p[0]) * gray(x)[..., None], 0, 1)
    return np.clip(np.round(x * 255), 0, 255).astype(np.uint8) if unit else np.ascontiguousarray(x)


def he_tiles(n, size):
    import tile_store
    return np.stack([tile_store.tile_pixels(f"P{i:02d}/000000_000000", size) for i in range(n)])


def augment(tiles, items, seed, step, ids, name, env=None):
    src, out, params = tmp(name + ".in"), tmp(name + ".out"), tmp(name + ".json")
    tiles.tofile(src)
    n, h, w, _ = tiles.shape
    code, _, err = run([probe, src, str(n), str(h), str(w), out, params, items, str(seed), str(step),
                        ",".join(map(str, ids))], env=env)
    expect(code == 0, f"augment_probe {items}: exit {code}: {err.strip()}")
    got = np.fromfile(out, np.uint8).reshape(tiles.shape)
    return got, json.load(open(params))


def check_transforms():
    tiles = he_tiles(24, 32)
    ids = [int(i) for i in np.random.default_rng(3).permutation(1000)[:24]]
    lists = ["flip", "rot90", "hed:0.05", "hed:0.3", "brightness:0.3", "contrast:0.4", "saturation:0.5",
             "flip,rot90,hed:0.1,brightness:0.2,contrast:0.2,saturation:0.2", "saturation:0.3,rot90,hed:0.05"]
    for items in lists:
        got, params = augment(tiles, items, 11, 7, ids, "t")
        expect([p["item"] for p in params] == items.split(","), f"{items}: items {[p['item'] for p in params]}")
        want = np.stack([reference(tiles[i], [(p["item"], p["parameters"][i]) for p in params])
                         for i in range(len(tiles))])
        diff = np.abs(got.astype(int) - want)
        exact = float((diff == 0).mean())
        print(f"  {items}: max |diff| {diff.max()}, {exact:.4%} equal to numpy", flush=True)
        geometric = all(i in ("flip", "rot90") for i in items.split(","))
        expect(diff.max() == 0 if geometric else diff.max() <= 1 and exact >= 0.99,
               f"{items}: max |diff| {diff.max()}, {exact:.4%} equal")
        expect(not np.array_equal(got, tiles), f"{items}: nothing changed")


def check_draws():
    """Ranges of every parameter; all four quarter turns and both flips drawn."""
    tiles = he_tiles(64, 8)
    ids = list(range(64))
    _, params = augment(tiles, "flip,rot90,hed:0.2,brightness:0.3,contrast:1,saturation:0.5", 5, 0, ids, "d")
    p = {q["item"]: np.array(q["parameters"], dtype=np.float64) for q in params}
    expect(set(np.unique(p["flip"])) == {0, 1} and 0.3 < p["flip"].mean() < 0.7, f"flips {p['flip'].mean()}")
    expect(set(np.unique(p["rot90"])) == {0, 1, 2, 3}, f"rot90 {np.unique(p['rot90'])}")
    hed = p["hed:0.2"]
    expect(np.all(np.abs(hed[:, :3] - 1) <= 0.2) and np.all(np.abs(hed[:, 3:]) <= 0.2)
           and hed[:, :3].std() > 0.05 and hed[:, 3:].std() > 0.05, f"hed {hed.min(0)} {hed.max(0)}")
    for item, lo, hi in (("brightness:0.3", 0.7, 1.3), ("contrast:1", 0, 2), ("saturation:0.5", 0.5, 1.5)):
        f = p[item]
        expect(f.min() >= lo and f.max() <= hi and f.max() - f.min() > (hi - lo) / 2, f"{item}: {f.min()}..{f.max()}")


def check_by_sample():
    """A sample's pixels depend on the seed, the step and its id: not on its batch or place."""
    tiles = he_tiles(6, 16)
    items = "flip,rot90,hed:0.1,contrast:0.3"
    ids = [4, 9, 2, 31, 7, 5]
    whole, _ = augment(tiles, items, 1, 12, ids, "w")
    order = [3, 0, 5, 1]
    part, _ = augment(tiles[order], items, 1, 12, [ids[i] for i in order], "p")
    expect(np.array_equal(part, whole[order]), "a sample's pixels changed with its batch")
    for name, seed, step, other in (("step", 1, 13, ids), ("seed", 2, 12, ids), ("id", 1, 12, [i + 100 for i in ids])):
        moved, _ = augment(tiles, items, seed, step, other, "o")
        expect(not np.array_equal(moved, whole), f"another {name} drew the same pixels")


def check_other_machines():
    """The colour transforms give the same pixels on the code paths another machine would take
    (cli_common.OTHER_MACHINES): float32's log and exp on the CPU are MKL's, whose last bit
    changes with the CPU, so HED jitter takes them in double. A last bit moves a rounded pixel
    about once in 10^5 values: 2.4 million of them make it show."""
    tiles = he_tiles(12, 256)
    ids = list(range(12))
    items = "hed:0.3,brightness:0.2,contrast:0.3,saturation:0.3"
    want, _ = augment(tiles, items, 3, 1, ids, "m")
    for name, env in OTHER_MACHINES:
        got, _ = augment(tiles, items, 3, 1, ids, "m", env=env)
        expect(np.array_equal(got, want), f"{name}: {(got != want).sum()} of {got.size} pixel "
               "values differ from the default path's")


# ---------------------------------------------------------------- training

def fixtures():
    import tile_store
    tile_store.tile_pixels = tinted_pixels
    slides = [{"id": f"T{i:02d}", "rows": 3, "cols": 4} for i in range(12)]
    keys = tile_store.write_store(tmp("tiles.lmdb"), slides, 16, encoding="png")
    write_feature_store(tmp("imgfeat"), np.zeros((len(keys), 2)), keys, source={"tile_store": tmp("tiles.lmdb")})
    with open(tmp("imgs.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["key", "label"])
        w.writerows((f"T{i:02d}", "red" if i % 2 == 0 else "blue") for i in range(12))
    code, _, err = run([mltool, "pack", tmp("imgfeat"), "--labels", tmp("imgs.csv"), "-o", tmp("imgds"),
                        "--seed", "1", "--unit", "image", "--split", "train=0.5,val=0.5"])
    expect(code == 0, f"pack: exit {code}: {err.strip()}")
    with open(tmp("cnn.json"), "w") as f:
        json.dump({"family": "rescnn", "channels": [8, 16]}, f)
    return f"{len(keys)} tiles of 16 px"


AUGMENT = "flip,rot90,hed:0.05,brightness:0.2,contrast:0.2,saturation:0.2"


def train(out, *extra, env=None, augment=AUGMENT):
    os.makedirs(tmp("log", out), exist_ok=True)
    env = dict(env or {}, MLTOOL_DEBUG_AUGMENT=tmp("log", out))
    args = [mltool, "train", tmp("imgds"), "--model", tmp("cnn.json"), "-o", tmp(out), "--epochs", "2",
            "--batch", "8", "--lr", "0.01", "-q", *extra]
    if augment:
        args += ["--augment", augment]
    code, _, err = run(args, env=env)
    expect(code == 0, f"train {out} {' '.join(extra)}: exit {code}: {err.strip()[-2000:]}")


def augmented(*outs):
    """The (step, sample, CRC) lines the runs' ranks logged, sorted."""
    lines = []
    for out in outs:
        d = tmp("log", out)
        for name in os.listdir(d):
            lines += open(os.path.join(d, name)).read().split("\n")
    return sorted(l for l in lines if l)


def weights(out):
    return open(tmp(out, "model.safetensors"), "rb").read()


def check_train_modes():
    train("plain", "--feed", "pinned")
    plain = augmented("plain")
    doc = json.load(open(tmp("plain", "run.json")))
    samples, steps = doc["dataset"]["train_samples"] * 2, doc["total_steps"]
    expect(len(plain) == samples and len({l.split()[0] for l in plain}) == steps,
           f"{len(plain)} augmented samples logged in {len({l.split()[0] for l in plain})} steps; "
           f"expected {samples} in {steps}")
    expect(doc["options"]["augment"] == AUGMENT.split(","), f"run.json options.augment {doc['options'].get('augment')}")
    train("host", "--feed", "host")
    expect(augmented("host") == plain, "--feed host: other augmented pixels")
    expect(weights("host") == weights("plain"), "--feed host: other weights")
    train("part", "--feed", "pinned", "--max-steps", "3")
    train("part", "--feed", "pinned", "--resume")
    expect(augmented("part") == plain, "resumed: other augmented pixels")
    expect(weights("part") == weights("plain"), "resumed: other weights")
    # Batch norm sees each part (or rank) alone, so these modes' weights differ from the plain
    # run's with or without augmentation; the pixels they train on do not.
    for name, extra in (("micro", ["--micro-batches", "3"]), ("sections", ["--sections", "2"]),
                        ("nproc", ["--nproc", "2"])):
        train(name, *extra)
        expect(augmented(name) == plain, f"{' '.join(extra)}: other augmented pixels")
    # The code paths another machine would take give the same pixels (check_other_machines
    # checks the colour transforms' last bits).
    for i, (name, env) in enumerate(OTHER_MACHINES):
        train(f"other{i}", "--feed", "pinned", env=env)
        expect(augmented(f"other{i}") == plain, f"{name}: other augmented pixels")
    train("none", augment=None)
    expect(augmented("none") == [] and weights("none") != weights("plain"), "--augment had no effect")


def check_refusals():
    code, _, err = run([mltool, "train", tmp("imgds"), "--model", tmp("cnn.json"), "-o", tmp("bad"),
                        "--augment", "flip,blur"])
    expect(code == 1 and "--augment item must be" in err and "blur" in err, f"blur: exit {code}: {err.strip()}")
    for bad, why in (("hed", "needs an amount"), ("flip:0.5", "takes no amount"), ("hed:2", "(0, 1]"),
                     ("contrast:-1", "(0, 1]")):
        code, _, err = run([mltool, "train", tmp("imgds"), "--model", tmp("cnn.json"), "-o", tmp("bad"),
                            "--augment", bad])
        expect(code == 1 and why in err, f"--augment {bad}: exit {code}: {err.strip()}")
    # A feature dataset has no pixels to augment.
    write_feature_store(tmp("feat"), np.random.default_rng(1).standard_normal((24, 4)),
                        [f"T{i:02d}/{t:06d}_000000" for i in range(12) for t in range(2)])
    code, _, err = run([mltool, "pack", tmp("feat"), "--labels", tmp("imgs.csv"), "-o", tmp("featds"),
                        "--seed", "1", "--split", "train=0.5,val=0.5"])
    expect(code == 0, f"pack: {err.strip()}")
    with open(tmp("mlp.json"), "w") as f:
        json.dump({"family": "mlp"}, f)
    code, _, err = run([mltool, "train", tmp("featds"), "--model", tmp("mlp.json"), "-o", tmp("bad"),
                        "--augment", "flip"])
    expect(code == 1 and "--augment applies to the tile pixels" in err, f"tile dataset: exit {code}: {err.strip()}")
    expect(not os.path.exists(tmp("bad")), "a refused run left a directory")


def check_stain():
    """--stain-norm on train: recorded in run.json, another reference refused on --resume
    naming --overwrite; predict applies the run's by default and refuses another reference
    unless --stain-norm names the method."""
    import hashlib
    from PIL import Image
    import tile_store
    Image.fromarray(he_tiles(1, 64)[0]).save(tmp("ref.png"))
    Image.fromarray(he_tiles(2, 64)[1]).save(tmp("ref2.png"))
    stain = ["--stain-norm", "reinhard", "--stain-reference", tmp("ref.png")]
    train("stain", *stain, "--max-steps", "3", augment=None)
    doc = json.load(open(tmp("stain", "run.json")))
    rec = doc.get("stain_norm", {})
    expect(doc["options"]["stain_norm"] == "reinhard" and rec.get("method") == "reinhard" and
           rec.get("sha256") == hashlib.sha256(open(tmp("ref.png"), "rb").read()).hexdigest() and
           rec.get("fit") == "tile" and len(rec["target"]["lab_means"]) == 3, f"run.json stain_norm {rec}")
    code, _, err = run([mltool, "train", tmp("imgds"), "--model", tmp("cnn.json"), "-o", tmp("stain"), "--epochs", "2",
                        "--batch", "8", "--lr", "0.01", "-q", "--resume", "--stain-norm", "reinhard",
                        "--stain-reference", tmp("ref2.png")])
    expect(code == 1 and "--overwrite" in err and "stain" in err, f"resume, other reference: exit {code}: {err.strip()}")
    train("stain", *stain, "--resume", augment=None)
    train("plain_stain", augment=None)
    expect(weights("plain_stain") != weights("stain"), "--stain-norm changed nothing")
    code, _, err = run([mltool, "predict", tmp("stain"), tmp("tiles.lmdb"), "-o", tmp("pred"), "-q"])
    expect(code == 0, f"predict: exit {code}: {err.strip()[-1500:]}")
    job = json.load(open(tmp("pred", ".predict", "job.json")))
    expect(job.get("stain_norm", {}).get("sha256") == rec["sha256"], f"predict's job.json {job.get('stain_norm')}")
    code, _, err = run([mltool, "predict", tmp("stain"), tmp("tiles.lmdb"), "-o", tmp("pred2"), "-q",
                        "--stain-reference", tmp("ref2.png")])
    expect(code == 1 and "--stain-norm METHOD" in err, f"predict, another reference: exit {code}: {err.strip()}")
    code, _, err = run([mltool, "predict", tmp("stain"), tmp("tiles.lmdb"), "-o", tmp("pred2"),
                        "--stain-norm", "reinhard", "--stain-reference", tmp("ref2.png")])
    expect(code == 0 and "not to the run's" in err, f"predict, another reference on purpose: exit {code}: {err.strip()[-1500:]}")
    expect(open(tmp("pred2", "predictions.csv")).read() != open(tmp("pred", "predictions.csv")).read(),
           "another reference gave the same predictions")


if __name__ == "__main__":
    run_checks("augment", [check_transforms, check_draws, check_by_sample, check_other_machines, check_train_modes, check_refusals,
                           check_stain],
               only, fixtures)
