"""mltool predict on runs of mltool train (the fixtures of train_test.py): its logits equal a
torch.nn.functional forward of the exported weights for the MLP (every tile) and ABMIL
(every slide's bag, and the attention), probabilities are their softmax, and it refuses runs
that are not finished and features of another dimension or extractor.

    predict_test.py MLTOOL [TEST...]   # TEST: check_* names without check_
"""
import csv
import json
import os
import shutil
import sys

import numpy as np
import torch

import train_test as T  # also puts scripts/fixtures on sys.path
from cli_common import expect, run, run_checks, tmp, write_feature_store

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
    code, out, err = run([mltool, "predict", *args, "-q", "--json"])
    return code, (json.loads(out) if code == 0 else None), err


def predict_ok(*args):
    code, summary, err = predict(*args)
    expect(code == 0, f"predict {' '.join(args)}: exit {code}: {err.strip()}")
    return summary


def rows_of(path):
    with open(path) as f:
        return list(csv.DictReader(f))


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
        preds = rows_of(os.path.join(out, "predictions.csv"))
        expect([p["sample"] for p in preds] == keys, "samples are not the store's keys in order")
        expect(all(p["slide"] == k.split("/")[0] for p, k in zip(preds, keys)), "slides")
        want = T.mlp_forward(weights(tmp("run_mlp"), file), X, spec)
        got = torch.tensor([[float(p[f"logit_{n}"]) for n in names] for p in preds])
        expect(torch.allclose(got, want, atol=1e-5, rtol=1e-5),
               f"{which}: logits differ from torch.nn.functional by {(got - want).abs().max().item()}")
        prob = torch.tensor([[float(p[f"prob_{n}"]) for n in names] for p in preds])
        expect(torch.allclose(prob, torch.softmax(got, 1), atol=1e-6), f"{which}: probabilities")
        expect(all(p["prediction"] == names[int(l.argmax())] for p, l in zip(preds, got)), "predictions")


def check_abmil():
    out = tmp("pred_bag")
    s = predict_ok(tmp("run_bag"), tmp("bagfeat"), "-o", out, "--weights", "final")
    sd = weights(tmp("run_bag"), "model.safetensors")
    X = torch.from_numpy(np.load(tmp("bagfeat", "features.npy")))
    keys = open(tmp("bagfeat", "keys.txt")).read().split()
    preds = rows_of(os.path.join(out, "predictions.csv"))
    slides = list(dict.fromkeys(k.split("/")[0] for k in keys))
    expect([p["sample"] for p in preds] == slides and s["samples"] == 40, f"bag samples, {s}")
    attention = rows_of(os.path.join(out, "attention.csv"))
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


def check_heatmaps():
    import tile_store
    # A tile store holding the tiles the synthetic features name: S00..S19, 15 rows of 1.
    tile_store.write_store(tmp("tiles.lmdb"), [{"id": f"S{i:02d}", "rows": 15, "cols": 1} for i in range(20)],
                           16, encoding="png")
    out = tmp("pred_heat")
    s = predict_ok(tmp("run_mlp"), tmp("feat"), "-o", out, "--tiles", tmp("tiles.lmdb"))
    expect(s["heatmaps"] == 20, f"summary {s}")
    preds = {p["sample"]: p for p in rows_of(os.path.join(out, "predictions.csv"))}
    from PIL import Image
    for i in range(20):
        img = np.asarray(Image.open(os.path.join(out, "heatmaps", f"S{i:02d}.png")).convert("RGB"))
        expect(max(img.shape[:2]) >= 1024, f"S{i:02d}.png is {img.shape}")
        # The tiles' colours differ where the model tells classes apart: many colours on top.
        top = img[: img.shape[0] // 2].reshape(-1, 3)
        expect(len(np.unique(top, axis=0)) >= 4, f"S{i:02d}.png: {len(np.unique(top, axis=0))} colours")
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
    att = {a["key"]: float(a["attention"]) for a in rows_of(tmp("pred_bag_heat", "attention.csv"))}
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
    refused([tmp("run_mlp"), tmp("feat_other"), "-o", tmp("p_bad")], 2, ["extractor", "another-extractor"])
    # A pixel (rescnn) run: not predicted on features.
    d = tmp("run_image")
    shutil.copytree(tmp("run_mlp"), d)
    doc = json.load(open(os.path.join(d, "run.json")))
    doc["dataset"]["unit"] = "image"
    json.dump(doc, open(os.path.join(d, "run.json"), "w"))
    refused([d, tmp("feat"), "-o", tmp("p_bad")], 1, ["unit 'image'"])
    refused([tmp("run_mlp"), tmp("feat"), "-o", tmp("p_bad"), "--label", "bone"], 1,
            ["--label bone", "normal, stroma, tumor"])
    expect(not os.path.exists(tmp("p_bad")), "a refused prediction wrote its output directory")


if __name__ == "__main__":
    run_checks("predict", [check_mlp, check_abmil, check_heatmaps, check_bad_input], only, fixtures)
