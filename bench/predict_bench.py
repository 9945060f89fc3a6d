"""mltool predict on one 100,000-tile slide (docs/benchmarks.md, "mltool predict"): an MLP
run trained on 2,000 tiles of 1024-d float16 features, applied to a 100,000-tile slide's
features with its tile store (predictions.csv, the GeoJSON and PNG heatmaps), three times,
alternating with its Python peer (bench/predict_peer.py: torch + numpy + csv + json + Pillow)
doing the same; prints both and their ratio.

    .venv/bin/python bench/predict_bench.py build/bin/mltool WORKDIR
"""
import json, os, subprocess, sys, time
import numpy as np
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "cli"))
sys.path.insert(0, os.path.join(HERE, "..", "scripts", "fixtures"))
from cli_common import write_feature_store
import tile_store
M = os.path.abspath(sys.argv[1])
D = os.path.abspath(sys.argv[2])
os.makedirs(D, exist_ok=True)
rng = np.random.default_rng(0)
dims = 1024
# training features: 2,000 tiles of 2 classes, 20 slides
c = rng.standard_normal((2, dims))
keys, rows, labels = [], [], []
for s in range(20):
    for t in range(100):
        k = int(rng.integers(0, 2)); key = f"T{s:02d}/{t:06d}_000000"
        keys.append(key); rows.append(c[k] + rng.standard_normal(dims)); labels.append((key, ["a", "b"][k]))
write_feature_store(f"{D}/trainfeat", np.array(rows), keys, "float16")
with open(f"{D}/labels.csv", "w") as f:
    f.write("key,label\n" + "".join(f"{k},{l}\n" for k, l in labels))
subprocess.run([M, "pack", f"{D}/trainfeat", "--labels", f"{D}/labels.csv", "-o", f"{D}/ds", "--seed", "1", "--split", "train=0.7,val=0.3", "-q"], check=True)
json.dump({"family": "mlp", "hidden": [256], "dropout": 0.1}, open(f"{D}/mlp.json", "w"))
subprocess.run([M, "train", f"{D}/ds", "--model", f"{D}/mlp.json", "-o", f"{D}/run", "--epochs", "2", "-q"], check=True)
# one slide of 100,000 tiles (317 x 316 grid) and its features
slides = tile_store.bench_slides(100000, 1)
t0 = time.time()
keys = tile_store.write_store(f"{D}/tiles.lmdb", slides, 16, encoding="jpeg", workers=2)
print("tile store", len(keys), time.time() - t0, flush=True)
X = c[rng.integers(0, 2, len(keys))] + rng.standard_normal((len(keys), dims))
write_feature_store(f"{D}/feat", X, keys, "float16")
print("features", X.shape, flush=True)
peer = os.path.join(HERE, "predict_peer.py")
ours, theirs = [], []
for i in range(3):
    t0 = time.time()
    out = subprocess.run([M, "predict", f"{D}/run", f"{D}/feat", "-o", f"{D}/pred{i}", "--tiles",
                          f"{D}/tiles.lmdb", "--overwrite", "--json", "-q"], check=True, capture_output=True,
                         text=True)
    ours.append(time.time() - t0)
    t0 = time.time()
    subprocess.run([sys.executable, peer, f"{D}/run", f"{D}/feat", f"{D}/tiles.lmdb", f"{D}/peer{i}"], check=True)
    theirs.append(time.time() - t0)
    print(f"mltool predict: {ours[-1]:.2f} s wall ({json.loads(out.stdout)['seconds']:.2f} s in predict()); "
          f"Python peer: {theirs[-1]:.2f} s", flush=True)
# The same predictions: the peer's logits against ours.
a = np.loadtxt(f"{D}/pred0/predictions.csv", delimiter=",", skiprows=1, usecols=(3, 4))
b = np.loadtxt(f"{D}/peer0/predictions.csv", delimiter=",", skiprows=1, usecols=(3, 4))
print(f"logits differ by at most {np.abs(a - b).max():.2e}")
print(f"best of 3: mltool {min(ours):.2f} s, Python {min(theirs):.2f} s: {min(theirs) / min(ours):.1f}x")
