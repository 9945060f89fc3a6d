"""The peer of `mltool predict` in bench/predict_bench.py: what a user glues together in Python
today for the same job — the run's state dict (torch.load of model.pt), the features through
numpy's memory map, the MLP's forward in torch (4096 rows at a time), predictions.csv with the
csv module, a QuPath GeoJSON of one square per tile with its probabilities (json), and a PNG
heatmap of the tiles' probability on a 1024-px canvas with a colour bar (Pillow). The tile
coordinates come from the tile store's meta record (python-lmdb).

    python bench/predict_peer.py RUN FEATURES TILES.lmdb OUT
"""
import csv
import json
import os
import sys

import lmdb
import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, ImageDraw

run, feat, tiles, out = sys.argv[1:5]
os.makedirs(os.path.join(out, "heatmaps"), exist_ok=True)
sd = torch.load(os.path.join(run, "model.pt"))
labels = json.load(open(os.path.join(run, "run.json")))["dataset"]["labels"]
X = np.load(os.path.join(feat, "features.npy"), mmap_mode="r")
keys = open(os.path.join(feat, "keys.txt")).read().split()
hidden = sorted({k.split(".")[0] for k in sd if k.startswith("hidden")})
parts = []
with torch.no_grad():
    for b in range(0, len(X), 4096):
        h = torch.from_numpy(np.asarray(X[b:b + 4096], dtype=np.float32))
        for name in hidden:
            h = F.relu(F.linear(h, sd[f"{name}.linear.weight"], sd[f"{name}.linear.bias"]))
        parts.append(F.linear(h, sd["head.linear.weight"], sd["head.linear.bias"]))
logits = torch.cat(parts)
probs = torch.softmax(logits, 1).numpy()
logits = logits.numpy()
with open(os.path.join(out, "predictions.csv"), "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["sample", "slide", "prediction"] + [f"logit_{n}" for n in labels] + [f"prob_{n}" for n in labels])
    for k, l, p in zip(keys, logits, probs):
        w.writerow([k, k.split("/")[0], labels[int(l.argmax())]] + [f"{v:.9g}" for v in l] + [f"{v:.9g}" for v in p])

env = lmdb.open(tiles, readonly=True, lock=False, max_dbs=8)
meta = env.open_db(b"meta", create=False)
row_of = {k: i for i, k in enumerate(keys)}
for slide in sorted({k.split("/")[0] for k in keys}):
    with env.begin() as txn:
        rec = json.loads(txn.get(f"slides/{slide}".encode(), db=meta))
        t = json.loads(txn.get(f"tiles/{slide}".encode(), db=meta))
    size = rec["size_level0"]
    features, squares = [], []
    for r, c, x, y in zip(t["row"], t["col"], t["x"], t["y"]):
        i = row_of.get(f"{slide}/{r:06d}_{c:06d}")
        if i is None:
            continue
        ring = [[x, y], [x + size, y], [x + size, y + size], [x, y + size], [x, y]]
        features.append({"type": "Feature", "geometry": {"type": "Polygon", "coordinates": [ring]},
                         "properties": {"objectType": "tile",
                                        "measurements": {f"prob_{n}": float(probs[i, j]) for j, n in enumerate(labels)}}})
        squares.append((x, y, float(probs[i, -1])))
    with open(os.path.join(out, "heatmaps", f"{slide}.geojson"), "w") as f:
        json.dump({"type": "FeatureCollection", "features": features}, f)
    scale = 1024 / max(rec["width"], rec["height"])
    W, H = max(1, round(rec["width"] * scale)), max(1, round(rec["height"] * scale))
    canvas = Image.new("RGB", (W, H + 60), (235, 235, 235))
    overlay = Image.new("RGBA", canvas.size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(overlay)
    for x, y, v in squares:  # blue (0) to red (1)
        draw.rectangle([x * scale, y * scale, (x + size) * scale, (y + size) * scale],
                       fill=(int(255 * v), 0, int(255 * (1 - v)), 128))
    for px in range(W):  # the colour bar
        v = px / max(1, W - 1)
        draw.line([(px, H + 10), (px, H + 30)], fill=(int(255 * v), 0, int(255 * (1 - v)), 255))
    Image.alpha_composite(canvas.convert("RGBA"), overlay).convert("RGB").save(
        os.path.join(out, "heatmaps", f"{slide}.png"))
