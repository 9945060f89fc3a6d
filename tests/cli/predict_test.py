"""mltool predict on runs of mltool train (the fixtures of train_test.py): its logits equal a
torch.nn.functional forward of the exported weights for the MLP (every tile), ABMIL (every
slide's bag, and the attention) and the residual CNN (every tile's pixels, from a tile store),
and the TorchScript module's own forward for runs of your own model (loaded in Python from the
run's model.script.pt: on features, bags, and a tile store's pixels); probabilities are their
softmax. With --stain-norm, the residual CNN's and a TorchScript CNN's logits equal the forward
of tiles normalised by torchstain. A killed prediction resumes to the
same bytes; one writer per output; it refuses runs that are not finished, inputs of the wrong
kind, features of another dimension or extractor, tiles of another size.

    predict_test.py MLTOOL [TEST...]   # TEST: check_* names without check_
"""
import json
import os
import shutil
import subprocess
import sys
import zlib

import numpy as np
import torch

import train_test as T  # also puts scripts/fixtures on sys.path
import torch.nn.functional as F
from cli_common import (command_json, command_ok, csv_rows, expect, rename_shim, run_checks,
                        run_with_sigterms, second_writer_refused, tmp, write_feature_store)

mltool = os.path.abspath(sys.argv[1])
only = set(sys.argv[2:])


def fixtures():
    what = T.fixtures()
    T.train_ok(tmp("ds"), "--model", tmp("mlp.json"), "-o", tmp("run_mlp"), "--epochs", "4",
               "--batch", "32", "--lr", "0.01")
    T.train_ok(tmp("bagds"), "--model", tmp("abmil.json"), "-o", tmp("run_bag"), "--epochs", "6",
               "--batch", "4", "--lr", "0.01")
    return what


def predict(*args):
    return command_json(mltool, "predict", *args)


def predict_ok(*args):
    return command_ok(mltool, "predict", *args)


def weights(run_dir, which):
    st, _ = T.read_safetensors(os.path.join(run_dir, which))
    return {k: torch.from_numpy(v.copy()) for k, v in st.items()}


def check_mlp():
    spec = json.load(open(tmp("run_mlp", "run.json")))["spec"]
    X = torch.from_numpy(np.load(tmp("feat", "features.npy")).astype(np.float32))
    keys = open(tmp("feat", "keys.txt")).read().split()
    names = ["normal", "stroma", "tumor"]
    for which, file in (("best", "best.safetensors"), ("final", "model.safetensors")):
        out = tmp(f"pred_mlp_{which}")
        s = predict_ok(tmp("run_mlp"), tmp("feat"), "-o", out, "--weights", which, "--batch", "7")
        expect(s["unit"] == "tile" and s["samples"] == len(keys) and s["weights"] == which, f"summary {s}")
        preds = csv_rows(os.path.join(out, "predictions.csv"))
        expect([p["sample"] for p in preds] == keys, "samples are not the store's keys in order")
        expect(all(p["slide"] == k.split("/")[0] for p, k in zip(preds, keys)), "slides")
        want = T.mlp_forward(weights(tmp("run_mlp"), file), X, spec)
        got = torch.tensor([[float(p[f"logit_{n}"]) for n in names] for p in preds])
        expect(torch.allclose(got, want, atol=1e-5, rtol=1e-5),
               f"{which}: logits differ from torch.nn.functional by {(got - want).abs().max().item()}")
        prob = torch.tensor([[float(p[f"prob_{n}"]) for n in names] for p in preds])
        expect(torch.allclose(prob, torch.softmax(got, 1), atol=1e-6), f"{which}: probabilities")
        expect(all(p["prediction"] == names[int(l.argmax())] for p, l in zip(preds, got)), "predictions")


def check_slides():
    """--slide: only those slides, in the store's order; '-' reads ids from stdin; an id the
    input lacks is refused."""
    keys = open(tmp("feat", "keys.txt")).read().split()
    s = predict_ok(tmp("run_mlp"), tmp("feat"), "-o", tmp("pred_some"), "--slide", "S03", "--slide", "S01")
    preds = csv_rows(tmp("pred_some", "predictions.csv"))
    want = [k for k in keys if k.split("/")[0] in ("S01", "S03")]
    expect([p["sample"] for p in preds] == want and s["slides"] == 2 and s["tiles"] == 30, f"--slide: {s}")
    # The store's first slide, kept where it is (it was once emptied by moving it onto itself).
    s = predict_ok(tmp("run_mlp"), tmp("feat"), "-o", tmp("pred_first"), "--slide", "S02", "--slide", "S00")
    first = [p["sample"] for p in csv_rows(tmp("pred_first", "predictions.csv"))]
    want = [k for k in keys if k.split("/")[0] in ("S00", "S02")]
    expect(first == want and s["slides"] == 2 and s["tiles"] == 30, f"--slide S00: {s}")
    # A slide's batches start at its first tile: the same bits whichever slides are predicted.
    predict_ok(tmp("run_mlp"), tmp("feat"), "-o", tmp("pred_every"))
    every = {p["sample"]: p for p in csv_rows(tmp("pred_every", "predictions.csv"))}
    expect(all(p == every[p["sample"]] for p in preds), "a slide's predictions depend on the others predicted")
    p = subprocess.run([mltool, "predict", tmp("run_mlp"), tmp("feat"), "-o", tmp("pred_stdin"), "--slide", "-",
                        "-q"], input="S02\n", capture_output=True, text=True)
    expect(p.returncode == 0 and len(csv_rows(tmp("pred_stdin", "predictions.csv"))) == 15, f"--slide -: {p.stderr}")
    c, _, err = predict(tmp("run_mlp"), tmp("feat"), "-o", tmp("pred_none"), "--slide", "S99")
    expect(c == 2 and "--slide S99" in err, f"exit {c}: {err.strip()}")


def check_abmil():
    out = tmp("pred_bag")
    s = predict_ok(tmp("run_bag"), tmp("bagfeat"), "-o", out, "--weights", "final")
    sd = weights(tmp("run_bag"), "model.safetensors")
    X = torch.from_numpy(np.load(tmp("bagfeat", "features.npy")))
    keys = open(tmp("bagfeat", "keys.txt")).read().split()
    preds = csv_rows(os.path.join(out, "predictions.csv"))
    slides = list(dict.fromkeys(k.split("/")[0] for k in keys))
    expect([p["sample"] for p in preds] == slides and s["samples"] == 40, f"bag samples, {s}")
    attention = csv_rows(os.path.join(out, "attention.csv"))
    expect([a["key"] for a in attention] == keys, "attention.csv keys are not the store's")
    for p in preds:
        idx = [i for i, k in enumerate(keys) if k.startswith(p["sample"] + "/")]
        got = torch.tensor([float(p["logit_neg"]), float(p["logit_pos"])])
        want = T.abmil_forward(sd, X[idx])
        expect(torch.allclose(got, want, atol=1e-5), f"bag {p['sample']}: mltool {got.tolist()}, PyTorch {want.tolist()}")
        h = torch.relu(torch.nn.functional.linear(X[idx], sd["embed1.linear.weight"], sd["embed1.linear.bias"]))
        a = torch.tanh(torch.nn.functional.linear(h, sd["attention.V.weight"], sd["attention.V.bias"]))
        a = a * torch.sigmoid(torch.nn.functional.linear(h, sd["attention.U.weight"], sd["attention.U.bias"]))
        w = torch.softmax(torch.nn.functional.linear(a, sd["attention.w.weight"], sd["attention.w.bias"]).squeeze(-1), 0)
        mine = torch.tensor([float(attention[i]["attention"]) for i in idx])
        expect(torch.allclose(mine, w, atol=1e-6), f"bag {p['sample']}: attention differs")


def geojson_tiles(path):
    """{key: measurements} of the tile features of a heatmap GeoJSON."""
    doc = json.load(open(path))
    return {f["properties"]["key"]: f["properties"]["measurements"]
            for f in doc["features"] if f["properties"]["objectType"] == "tile"}


def expect_predict_page(out, preds):
    """report.html of a prediction: a row per slide with its samples and the majority of its
    tiles' predicted labels (counted here) and a thumbnail of its heatmap; the metrics, the run's
    labels table knowing every tile; no script, nothing from the network; headless Chromium
    renders it (where installed) with the thumbnails loaded."""
    import collections
    import report_page
    page = report_page.parse(os.path.join(out, "report.html"))
    expect(page.scripts == 0 and not page.external, f"scripts {page.scripts}, external {page.external}")
    rows = {r[0]: r for r in page.rows if r and r[0].startswith("S")}
    votes = collections.defaultdict(collections.Counter)
    for p in preds.values():
        votes[p["slide"]][p["prediction"]] += 1
    expect(sorted(rows) == sorted(votes), f"slide rows {sorted(rows)}")
    for slide, v in votes.items():
        call, n = v.most_common(1)[0]
        share = f"{call} ({100 * n / sum(v.values()):.0f}%)"
        expect(rows[slide][1] == str(sum(v.values())) and
               (rows[slide][2] == share or v.most_common(2)[-1][1] == n),  # a tie: either call
               f"{slide}: row {rows[slide]}, counted {dict(v)}")
    expect(all(f"heatmaps/{s}.png" in page.links for s in votes), "links to the heatmaps")
    # The run's labels table names every tile: balanced accuracy as scikit-learn's (the page
    # shows 4 significant digits) with an interval.
    import sklearn.metrics
    labels = {r["key"]: r["label"] for r in csv_rows(tmp("tiles.csv"))}
    bacc = sklearn.metrics.balanced_accuracy_score([labels[k] for k in preds], [p["prediction"] for p in preds.values()])
    metric = [r for r in page.rows if r and r[0] == "val_balanced_accuracy"]
    expect("Metrics" in page.all_text and len(metric) == 1 and abs(float(metric[0][1]) - bacc) <= 5e-4 * bacc and
           " – " in metric[0][2], f"metrics row {metric}, scikit-learn's balanced accuracy {bacc}")
    rendered = report_page.render(os.path.join(out, "report.html"), expect, height=6000)
    if rendered:
        image, dom = rendered
        colours = len(image.getcolors(1 << 24))
        expect(colours > 500 and dom.count("<img") == len(votes), f"{colours} colours, images in the DOM")


def check_heatmaps():
    import tile_store
    # A tile store holding the tiles the synthetic features name: S00..S19, 15 rows of 1.
    tile_store.write_store(tmp("tiles.lmdb"), [{"id": f"S{i:02d}", "rows": 15, "cols": 1} for i in range(20)],
                           16, encoding="png")
    out = tmp("pred_heat")
    s = predict_ok(tmp("run_mlp"), tmp("feat"), "-o", out, "--tiles", tmp("tiles.lmdb"))
    expect(s["heatmaps"] == 20, f"summary {s}")
    preds = {p["sample"]: p for p in csv_rows(os.path.join(out, "predictions.csv"))}
    from PIL import Image
    for i in range(20):
        img = np.asarray(Image.open(os.path.join(out, "heatmaps", f"S{i:02d}.png")).convert("RGB"))
        expect(max(img.shape[:2]) >= 1024, f"S{i:02d}.png is {img.shape}")
        # The tiles' colours differ where the model tells classes apart: many colours on top.
        top = img[: img.shape[0] // 2].reshape(-1, 3)
        expect(len(np.unique(top, axis=0)) >= 4, f"S{i:02d}.png: {len(np.unique(top, axis=0))} colours")
    expect_predict_page(out, preds)
    small = predict_ok(tmp("run_mlp"), tmp("feat"), "-o", tmp("pred_small"), "--tiles", tmp("tiles.lmdb"),
                       "--heatmap-size", "300", "--label", "normal")
    img = Image.open(tmp("pred_small", "heatmaps", "S00.png"))
    expect(img.size[0] < 300 and img.size[1] > 300, f"--heatmap-size 300 gives {img.size}")
    for i in range(20):
        tiles = geojson_tiles(os.path.join(out, "heatmaps", f"S{i:02d}.geojson"))
        expect(len(tiles) == 15, f"S{i:02d}: {len(tiles)} tiles in the heatmap")
        for key, m in tiles.items():
            for n in ("normal", "stroma", "tumor"):
                expect(abs(m[f"prob_{n}"] - float(preds[key][f"prob_{n}"])) < 1e-6, f"{key}: prob_{n}")
            expect("Tissue fraction" in m, f"{key}: measurements {m}")
    # Bags: the attention per tile, for the slides of the tile store only (B.. has none).
    tile_store.write_store(tmp("bagtiles.lmdb"), [{"id": "B00", "rows": 20, "cols": 1}], 16, encoding="png")
    s = predict_ok(tmp("run_bag"), tmp("bagfeat"), "-o", tmp("pred_bag_heat"), "--tiles", tmp("bagtiles.lmdb"))
    expect(s["heatmaps"] == 1, f"summary {s}")
    att = {a["key"]: float(a["attention"]) for a in csv_rows(tmp("pred_bag_heat", "attention.csv"))}
    tiles = geojson_tiles(tmp("pred_bag_heat", "heatmaps", "B00.geojson"))
    expect(set(tiles) == {k for k in att if k.startswith("B00/")}, f"B00 heatmap tiles {sorted(tiles)}")
    expect(all(abs(m["attention"] - att[k]) < 1e-6 for k, m in tiles.items()), "attention in the heatmap")
    expect(os.path.isfile(tmp("pred_bag_heat", "heatmaps", "B00.png")), "B00.png missing")
    # No tile store: no heatmaps directory.
    predict_ok(tmp("run_mlp"), tmp("feat"), "-o", tmp("pred_plain"))
    expect(not os.path.exists(tmp("pred_plain", "heatmaps")), "heatmaps without a tile store")


def check_bad_input():
    def refused(args, code, words):
        c, _, err = predict(*args)
        expect(c == code and all(w in err for w in words), f"predict {args}: exit {c}, {err.strip()}")

    # A run that is not finished: status running, then failed.
    for status in ("running", "failed"):
        d = tmp(f"run_{status}")
        shutil.copytree(tmp("run_mlp"), d)
        doc = json.load(open(os.path.join(d, "run.json")))
        doc["status"] = status
        json.dump(doc, open(os.path.join(d, "run.json"), "w"))
        refused([d, tmp("feat"), "-o", tmp("p_bad")], 2, [f"'{status}'", "finished"])
    # Features of another dimension, and of another extractor.
    write_feature_store(tmp("feat16"), np.zeros((4, 16)), [f"S00/{i:06d}_000000" for i in range(4)])
    refused([tmp("run_mlp"), tmp("feat16"), "-o", tmp("p_bad")], 2, ["16 dims", "32-dim"])
    shutil.copytree(tmp("feat"), tmp("feat_other"))
    m = json.load(open(tmp("feat_other", "features.json")))
    m["model"] = {"name": "another-extractor"}
    json.dump(m, open(tmp("feat_other", "features.json"), "w"))
    refused([tmp("run_mlp"), tmp("feat_other"), "-o", tmp("p_bad")], 2,
            ["another extractor", "name another-extractor (the run's: synthetic)"])
    # Features normalised to a stain reference, the run's were not: said in words, no JSON
    # (issue 51).
    shutil.copytree(tmp("feat"), tmp("feat_stain"))
    m = json.load(open(tmp("feat_stain", "features.json")))
    m["model"] = dict(m["model"] or {}, stain_norm="macenko",
                      stain_reference={"sha256": "ab" * 32, "fit": "tile",
                                       "target": {"stain_matrix": [[0.5, 0.1]] * 3, "max_c": [1.9, 1.0]}})
    json.dump(m, open(tmp("feat_stain", "features.json"), "w"))
    c, _, err = predict(tmp("run_mlp"), tmp("feat_stain"), "-o", tmp("p_bad"))
    want = ("features normalised with macenko with reference sha256 abababababab (--stain-fit tile), "
            "but the run was trained on features normalised with none: extract them again without "
            "--stain-norm")
    expect(c == 2 and want in err and "{" not in err, f"stain: exit {c}, {err.strip()}")
    # A pixel (rescnn) run is given features; a feature run a tile store.
    d = tmp("run_image")
    shutil.copytree(tmp("run_mlp"), d)
    doc = json.load(open(os.path.join(d, "run.json")))
    doc["dataset"]["unit"] = "image"
    json.dump(doc, open(os.path.join(d, "run.json"), "w"))
    refused([d, tmp("feat"), "-o", tmp("p_bad")], 2, ["a feature store", "an image model (rescnn, or a TorchScript module", "tile store"])
    import tile_store
    tile_store.write_store(tmp("onetile.lmdb"), [{"id": "S00", "rows": 2, "cols": 1}], 16, encoding="png")
    refused([tmp("run_mlp"), tmp("onetile.lmdb"), "-o", tmp("p_bad")], 2, ["a tile store", "mltool extract"])
    refused([tmp("run_mlp"), tmp("feat"), "-o", tmp("p_bad"), "--label", "bone"], 1,
            ["--label bone", "normal, stroma, tumor"])
    expect(not os.path.exists(tmp("p_bad")), "a refused prediction wrote its output directory")


# ---------------------------------------------------------------- image models (tile store)

def tint_pixels(key, size):
    """Slide T<i>'s tiles are reddish for even i, bluish for odd: the label is the tint."""
    rng = np.random.default_rng(zlib.crc32(key.encode()))
    red = int(key[1:key.index("/")]) % 2 == 0
    base = np.array([200, 90, 90] if red else [90, 90, 200], np.float32)
    return np.clip(base + rng.normal(0, 25, (size, size, 3)), 0, 255).astype(np.uint8)


def rescnn_forward(sd, x, spec):
    """lib/train/models/rescnn.cpp in torch.nn.functional (eval mode): uint8 N x H x W x 3."""
    def norm(h, p):
        return F.batch_norm(h, sd[p + ".running_mean"], sd[p + ".running_var"], sd[p + ".weight"], sd[p + ".bias"],
                            training=False, eps=1e-5)
    h = (x.permute(0, 3, 1, 2).float() / 255.0 - sd["stem.mean"]) / sd["stem.std"]
    h = F.relu(norm(F.conv2d(h, sd["stem.conv.weight"], stride=spec.get("stem_stride", 2), padding=1), "stem.norm"))
    for s, _ in enumerate(spec["channels"], 1):
        for u in range(spec.get("blocks_per_stage", 1)):
            p, stride = f"stage{s}.{u}.", 2 if s > 1 and u == 0 else 1
            y = F.relu(norm(F.conv2d(h, sd[p + "conv1.weight"], stride=stride, padding=1), p + "norm1"))
            y = norm(F.conv2d(y, sd[p + "conv2.weight"], padding=1), p + "norm2")
            skip = norm(F.conv2d(h, sd[p + "shortcut.weight"], stride=stride), p + "shortcut_norm") \
                if p + "shortcut.weight" in sd else h
            h = F.relu(y + skip)
    return F.linear(h.mean((2, 3)), sd["head.linear.weight"], sd["head.linear.bias"])


def check_image():
    """A residual CNN trained on a tile store's pixels predicts on a tile store: logits equal
    the functional forward of its weights on the same pixels; heatmaps per slide; a store of
    another tile size is refused."""
    import tile_store
    plain, tile_store.tile_pixels = tile_store.tile_pixels, tint_pixels
    try:
        check_image_run(tile_store)
    finally:
        tile_store.tile_pixels = plain


def check_image_run(tile_store):
    slides = [{"id": f"T{i:02d}", "rows": 3, "cols": 4} for i in range(12)]
    keys = tile_store.write_store(tmp("imgtiles.lmdb"), slides, 16, encoding="png")
    write_feature_store(tmp("imgfeat"), np.zeros((len(keys), 2)), keys, source={"tile_store": tmp("imgtiles.lmdb")})
    T.write_labels(tmp("imgs.csv"), [(f"T{i:02d}", "red" if i % 2 == 0 else "blue") for i in range(12)])
    T.pack(tmp("imgfeat"), tmp("imgs.csv"), tmp("imgds"), "--unit", "image", "--split", "train=0.5,val=0.5")
    spec = {"family": "rescnn", "channels": [8, 16]}
    T.write_json(tmp("cnn.json"), spec)
    T.train_ok(tmp("imgds"), "--model", tmp("cnn.json"), "-o", tmp("run_img"), "--epochs", "4", "--batch", "8",
               "--lr", "0.01")
    # New slides of the same kind (tinted by their number): predicted from their pixels.
    new = [{"id": f"T{i:02d}", "rows": 2, "cols": 3} for i in range(20, 26)]
    new_keys = tile_store.write_store(tmp("newtiles.lmdb"), new, 16, encoding="png")
    out = tmp("pred_img")
    s = predict_ok(tmp("run_img"), tmp("newtiles.lmdb"), "-o", out, "--batch", "5", "--weights", "final")
    expect(s["unit"] == "image" and s["samples"] == len(new_keys) and s["heatmaps"] == 6, f"summary {s}")
    preds = csv_rows(os.path.join(out, "predictions.csv"))
    expect([p["sample"] for p in preds] == new_keys, "samples are not the tile store's keys in order")
    x = torch.from_numpy(np.stack([tint_pixels(k, 16) for k in new_keys]))
    want = rescnn_forward(weights(tmp("run_img"), "model.safetensors"), x, spec)
    got = torch.tensor([[float(p["logit_blue"]), float(p["logit_red"])] for p in preds])
    expect(torch.allclose(got, want, atol=1e-4, rtol=1e-4),
           f"logits differ from torch.nn.functional by {(got - want).abs().max().item()}")
    right = sum(p["prediction"] == ("red" if int(p["slide"][1:]) % 2 == 0 else "blue") for p in preds)
    expect(right >= 0.9 * len(preds), f"{right} of {len(preds)} new tiles right")
    for sl in new:
        expect(os.path.isfile(os.path.join(out, "heatmaps", sl["id"] + ".png")), f"{sl['id']}.png missing")
        expect(len(geojson_tiles(os.path.join(out, "heatmaps", sl["id"] + ".geojson"))) == 6, f"{sl['id']} tiles")
    check_image_stain(new_keys, spec)
    # Tiles of another size than the run's.
    tile_store.write_store(tmp("bigtiles.lmdb"), new[:1], 24, encoding="png")
    c, _, err = predict(tmp("run_img"), tmp("bigtiles.lmdb"), "-o", tmp("p_big"))
    expect(c == 2 and "24 px tiles" in err and "16 px tiles" in err, f"exit {c}: {err.strip()}")


def stain_reference():
    """tmp/stain_ref.png (once): a 64 x 64 pink-purple reference for --stain-norm."""
    from PIL import Image
    if not os.path.exists(tmp("stain_ref.png")):
        rng = np.random.default_rng(7)
        ref = np.clip(np.array([170, 100, 185]) + rng.normal(0, 30, (64, 64, 3)), 0, 255)
        Image.fromarray(ref.astype(np.uint8)).save(tmp("stain_ref.png"))
    return tmp("stain_ref.png")


def torchstain_tiles(method, x):
    """Tiles x (uint8 N x H x W x 3) normalised by torchstain 1.4.1 (torch backend) fitted on
    stain_reference(), a tile with too little stain passed as it is (mltool's rule), and the
    number passed."""
    import torchstain
    from PIL import Image
    ref = np.asarray(Image.open(stain_reference()).convert("RGB"))
    n = torchstain.normalizers.MacenkoNormalizer(backend="torch") if method == "macenko" \
        else torchstain.normalizers.ReinhardNormalizer(backend="torch")
    n.fit(torch.from_numpy(ref.transpose(2, 0, 1).copy()))
    normalised, unchanged = [], 0
    for tile in x:
        od = -np.log((tile.reshape(-1, 3).astype(np.float32) + 1) / 240)
        if (od >= 0.15).all(axis=1).mean() < 0.05:
            normalised.append(tile)
            unchanged += 1
            continue
        chw = torch.from_numpy(tile.transpose(2, 0, 1).copy())
        y = n.normalize(I=chw, stains=False)[0] if method == "macenko" else n.normalize(I=chw)
        normalised.append(y.numpy().astype(np.uint8))
    return np.stack(normalised), unchanged


def check_image_stain(keys, spec):
    """predict --stain-norm on the image run: its logits equal the functional forward of the
    run's weights on the same tiles normalised by torchstain 1.4.1 (torch backend, fitted on the
    same reference), a tile with too little stain passed as it is (mltool's rule), to 1e-3:
    mltool's normalised pixels may differ from torchstain's by one level in a few values (a
    rounding before the truncation to integers; issue 39's bounds are a mean |diff| <= 1 of
    255 and p99 <= 3: tests/cli/stain_test.py), and one such value moves these logits by about
    1.3e-4. The normalisation must move the logits (by more than 0.05) for the check to mean
    anything. These noise tiles are ill-posed for Macenko (their stain angles straddle ±π),
    so they also check that mltool takes LAPACK's eigenvector signs as torchstain does: with
    others, 2 of the 36 tiles differ by up to 146 levels."""
    x = np.stack([tint_pixels(k, 16) for k in keys])
    for method in ("macenko", "reinhard"):
        out = tmp(f"pred_img_{method}")
        predict_ok(tmp("run_img"), tmp("newtiles.lmdb"), "-o", out, "--batch", "5", "--weights",
                   "final", "--stain-norm", method, "--stain-reference", stain_reference())
        normalised, unchanged = torchstain_tiles(method, x)
        want = rescnn_forward(weights(tmp("run_img"), "model.safetensors"), torch.from_numpy(normalised), spec)
        preds = csv_rows(os.path.join(out, "predictions.csv"))
        got = torch.tensor([[float(p["logit_blue"]), float(p["logit_red"])] for p in preds])
        plain = csv_rows(os.path.join(tmp("pred_img"), "predictions.csv"))
        moved = max(abs(float(a["logit_red"]) - float(b["logit_red"])) for a, b in zip(preds, plain))
        gap = (got - want).abs().max().item()
        print(f"  {method}: {len(keys) - unchanged} of {len(keys)} tiles normalised; logits against "
              f"torchstain + torch.nn.functional: max |diff| {gap:.2e} (normalisation moved them "
              f"by up to {moved:.2f})")
        expect(len(keys) - unchanged > len(keys) // 2 and moved > 0.05,
               f"{method}: the normalisation changed the predictions")
        expect(gap <= 1e-3, f"{method}: logits differ from torchstain's tiles' by {gap}")


# ---------------------------------------------------------------- your own TorchScript model

class MILWithAttention(T.ScriptMIL):
    """T.ScriptMIL with an attention(bag) method, which predict writes to attention.csv."""

    @torch.jit.export
    def attention(self, bag):
        return torch.softmax(self.score(torch.relu(self.embed(bag))), dim=0).squeeze(-1)

    def forward(self, bag):
        h = torch.relu(self.embed(bag))
        return self.head((self.attention(bag).unsqueeze(-1) * h).sum(0, keepdim=True))


def check_script_tiles():
    """A run of a TorchScript MLP: predict's logits are those of its model.script.pt loaded in
    Python (final weights), and of the module with best.safetensors loaded (best)."""
    torch.manual_seed(11)
    path = T.script_file("pred_mlp_script.pt", T.ScriptMLP())
    T.train_ok(tmp("ds"), "--model", path, "-o", tmp("run_smlp"), "--epochs", "3", "--batch", "32", "--lr", "0.01")
    X = torch.from_numpy(np.load(tmp("feat", "features.npy")).astype(np.float32))
    names = ["normal", "stroma", "tumor"]
    for which, file in (("final", None), ("best", "best.safetensors")):
        out = tmp(f"pred_smlp_{which}")
        predict_ok(tmp("run_smlp"), tmp("feat"), "-o", out, "--weights", which, "--batch", "64")
        module = torch.jit.load(tmp("run_smlp", "model.script.pt"))
        if file:
            module.load_state_dict(weights(tmp("run_smlp"), file))
        with torch.no_grad():
            want = module(X)
        preds = csv_rows(os.path.join(out, "predictions.csv"))
        got = torch.tensor([[float(p[f"logit_{n}"]) for n in names] for p in preds])
        expect(torch.allclose(got, want, atol=1e-5, rtol=1e-5),
               f"{which}: logits differ from model.script.pt's by {(got - want).abs().max().item()}")


def check_script_image():
    """A TorchScript CNN trained on an image dataset predicts on a tile store: logits equal its
    model.script.pt's forward in Python on the same tiles (x / 255, N x 3 x H x W) to 1e-5,
    with heatmaps per slide; with --stain-norm, the forward of the tiles torchstain normalises
    (to 1e-3, as check_image_stain explains)."""
    import tile_store
    ds = T.image_dataset("simg")
    path = T.script_file("pred_cnn_script.pt", T.script_cnn(4))
    run = tmp("run_simg")
    T.train_ok(ds, "--model", path, "-o", run, "--epochs", "4", "--batch", "8", "--lr", "0.01")
    plain, tile_store.tile_pixels = tile_store.tile_pixels, tint_pixels
    try:
        new = [{"id": f"T{i:02d}", "rows": 2, "cols": 3} for i in range(20, 26)]
        keys = tile_store.write_store(tmp("snewtiles.lmdb"), new, 16, encoding="png")
    finally:
        tile_store.tile_pixels = plain
    x = np.stack([tint_pixels(k, 16) for k in keys])
    module = torch.jit.load(os.path.join(run, "model.script.pt"))

    def forward(tiles):
        with torch.no_grad():
            return module(torch.from_numpy(tiles).permute(0, 3, 1, 2).float() / 255.0)

    def logits(out):
        return torch.tensor([[float(p["logit_blue"]), float(p["logit_red"])]
                             for p in csv_rows(os.path.join(out, "predictions.csv"))])
    s = predict_ok(run, tmp("snewtiles.lmdb"), "-o", tmp("pred_simg"), "--batch", "5", "--weights", "final")
    expect(s["unit"] == "image" and s["samples"] == len(keys) and s["heatmaps"] == 6, f"summary {s}")
    preds = csv_rows(os.path.join(tmp("pred_simg"), "predictions.csv"))
    expect([p["sample"] for p in preds] == keys, "samples are not the tile store's keys in order")
    got, want = logits(tmp("pred_simg")), forward(x)
    expect(torch.allclose(got, want, atol=1e-5, rtol=1e-5),
           f"logits differ from model.script.pt's by {(got - want).abs().max().item()}")
    right = sum(p["prediction"] == ("red" if int(p["slide"][1:]) % 2 == 0 else "blue") for p in preds)
    expect(right >= 0.9 * len(preds), f"{right} of {len(preds)} new tiles right")
    for sl in new:
        expect(os.path.isfile(os.path.join(tmp("pred_simg"), "heatmaps", sl["id"] + ".png")), f"{sl['id']}.png")
    predict_ok(run, tmp("snewtiles.lmdb"), "-o", tmp("pred_simg_stain"), "--batch", "5", "--weights", "final",
               "--stain-norm", "macenko", "--stain-reference", stain_reference())
    stained = logits(tmp("pred_simg_stain"))
    gap, moved = (stained - forward(torchstain_tiles("macenko", x)[0])).abs().max().item(), \
        (stained - got).abs().max().item()
    expect(moved > 0.05 and gap <= 1e-3, f"--stain-norm: logits {gap} from torchstain's tiles', moved {moved}")


def check_script_bags():
    """A TorchScript attention-MIL run: logits per slide are model.script.pt's forward of the
    slide's bag; its attention(bag) goes to attention.csv and the heatmaps. A bag module
    without attention(bag) predicts without them."""
    import tile_store
    keys = open(tmp("bagfeat", "keys.txt")).read().split()
    X = torch.from_numpy(np.load(tmp("bagfeat", "features.npy")))
    for name, cls in (("att", MILWithAttention), ("plain", T.ScriptMIL)):
        torch.manual_seed(12)
        path = T.script_file(f"pred_mil_{name}.pt", cls())
        T.train_ok(tmp("bagds"), "--model", path, "-o", tmp(f"run_smil_{name}"), "--epochs", "3", "--batch", "4",
                   "--lr", "0.01")
        if not os.path.exists(tmp("bagtiles.lmdb")):
            tile_store.write_store(tmp("bagtiles.lmdb"), [{"id": "B00", "rows": 20, "cols": 1}], 16, encoding="png")
        out = tmp(f"pred_smil_{name}")
        s = predict_ok(tmp(f"run_smil_{name}"), tmp("bagfeat"), "-o", out, "--weights", "final",
                       "--tiles", tmp("bagtiles.lmdb"))
        module = torch.jit.load(tmp(f"run_smil_{name}", "model.script.pt"))
        preds = csv_rows(os.path.join(out, "predictions.csv"))
        attention = {a["key"]: float(a["attention"]) for a in csv_rows(os.path.join(out, "attention.csv"))} \
            if name == "att" else {}
        for p in preds:
            idx = [i for i, k in enumerate(keys) if k.startswith(p["sample"] + "/")]
            with torch.no_grad():
                want = module(X[idx]).reshape(-1)
                w = module.attention(X[idx]) if name == "att" else None
            got = torch.tensor([float(p["logit_neg"]), float(p["logit_pos"])])
            expect(torch.allclose(got, want, atol=1e-5), f"{name} bag {p['sample']}: {got.tolist()} vs {want.tolist()}")
            if w is not None:
                mine = torch.tensor([attention[keys[i]] for i in idx])
                expect(torch.allclose(mine, w, atol=1e-6), f"bag {p['sample']}: attention differs")
        has = os.path.exists(os.path.join(out, "attention.csv"))
        expect(has == (name == "att") and s["heatmaps"] == (1 if name == "att" else 0),
               f"{name}: attention.csv {has}, summary {s}")


# ---------------------------------------------------------------- resume, one writer

def files_of(d):
    return {os.path.relpath(os.path.join(r, f), d): open(os.path.join(r, f), "rb").read()
            for r, _, fs in os.walk(d) for f in fs if ".predict" not in r}


def check_resume():
    """A prediction killed (SIGKILL before its N-th rename) and run again resumes from the
    slides it had journaled and publishes the same bytes as one uninterrupted run; a finished
    one run again predicts nothing; other settings into it are refused without --overwrite."""
    import tile_store
    if not os.path.exists(tmp("tiles.lmdb")):
        tile_store.write_store(tmp("tiles.lmdb"), [{"id": f"S{i:02d}", "rows": 15, "cols": 1} for i in range(20)],
                               16, encoding="png")
    args = [tmp("run_mlp"), tmp("feat"), "--tiles", tmp("tiles.lmdb"), "--batch", "4"]
    predict_ok(*args, "-o", tmp("pred_once"))
    out = tmp("pred_kill")
    env = dict(os.environ, LD_PRELOAD=rename_shim(), KILL_AT_RENAME="20")
    p = subprocess.run([mltool, "predict", *args, "-o", out, "-q"], env=env, capture_output=True, text=True)
    expect(p.returncode == -9, f"the run was not killed at its 20th rename: exit {p.returncode} {p.stderr[-500:]}")
    expect(not os.path.exists(os.path.join(out, "predictions.csv")), "a killed run published predictions.csv")
    s = predict_ok(*args, "-o", out)
    expect(0 < s["resumed"] < 20, f"resumed {s['resumed']} of 20 slides")
    expect(files_of(out) == files_of(tmp("pred_once")), "a killed and resumed prediction differs from one run")
    s = predict_ok(*args, "-o", out)
    expect(s["resumed"] == 20, f"a finished prediction run again: {s}")
    expect(files_of(out) == files_of(tmp("pred_once")), "a prediction run again changed its files")
    c, _, err = predict(*args, "-o", out, "--weights", "final")
    expect(c == 1 and "other settings" in err and "--overwrite" in err, f"other settings: exit {c}: {err.strip()}")
    s = predict_ok(*args, "-o", out, "--weights", "final", "--overwrite")
    expect(s["resumed"] == 0 and s["weights"] == "final", f"--overwrite: {s}")
    # One writer: a second prediction into the output while the first holds it exits 3.
    code, err = second_writer_refused([mltool, "predict", *args, "-o", tmp("pred_two")],
                                      [mltool, "predict", *args, "-o", tmp("pred_two")], tmp("pred_two"))
    expect(code == 0, f"the first prediction failed: {err[-500:]}")


def check_sigterm():
    """SIGTERM at random points: each run journals the slide in hand and exits 75; rerun,
    the output equals one uninterrupted run's byte for byte."""
    import random
    import time
    import tile_store
    if not os.path.exists(tmp("tiles.lmdb")):
        tile_store.write_store(tmp("tiles.lmdb"), [{"id": f"S{i:02d}", "rows": 15, "cols": 1} for i in range(20)],
                               16, encoding="png")
    args = [tmp("run_mlp"), tmp("feat"), "--tiles", tmp("tiles.lmdb"), "--batch", "4"]
    t0 = time.time()
    predict_ok(*args, "-o", tmp("pred_sig_ref"))
    whole = time.time() - t0
    for seed in (1, 2):
        out = tmp(f"pred_sig_{seed}")
        stopped = run_with_sigterms([mltool, "predict", *args, "-o", out, "-q"], random.Random(seed), 0.6 * whole)
        print(f"  stopped {stopped} time(s) by SIGTERM before finishing", flush=True)
        expect(files_of(out) == files_of(tmp("pred_sig_ref")),
               f"seed {seed}: stopped {stopped} times by SIGTERM, then: other files")


if __name__ == "__main__":
    run_checks("predict", [check_mlp, check_slides, check_abmil, check_heatmaps, check_bad_input, check_image,
                           check_script_image, check_script_tiles, check_script_bags, check_resume, check_sigterm], only, fixtures)
