#!/usr/bin/env python3
"""Input for bench/run-pack.sh: a feature store (docs/formats.md#feature-store) of SLIDES x
TILES rows of DIMS float16 values, and a tile-level labels CSV (key,label) with one of four
labels per tile, or two for every fourth tile (captions-like: two records share one row).

    make_pack_input.py DIR SLIDES TILES DIMS
"""
import csv
import json
import os
import sys

import numpy as np

d, slides, tiles, dims = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
store = os.path.join(d, "features")
os.makedirs(store, exist_ok=True)
rows = slides * tiles
rng = np.random.default_rng(0)
mm = np.lib.format.open_memmap(os.path.join(store, "features.npy"), mode="w+", dtype="<f2", shape=(rows, dims))
for start in range(0, rows, 65536):
    stop = min(rows, start + 65536)
    mm[start:stop] = rng.standard_normal((stop - start, dims), dtype=np.float32).astype("<f2")
mm.flush()
del mm
keys = [f"slide-{s:05d}/{t // 100:06d}_{t % 100:06d}" for s in range(slides) for t in range(tiles)]
with open(os.path.join(store, "keys.txt"), "w", newline="\n") as f:
    f.writelines(k + "\n" for k in keys)
with open(os.path.join(store, "features.json"), "w") as f:
    json.dump({"format": "mltool.features", "format_version": 1, "created_by": "make_pack_input.py",
               "rows": rows, "dims": dims, "dtype": "float16",
               "files": {"keys": "keys.txt", "matrix": "features.npy"},
               "model": {"name": "numpy-random"}}, f, indent=2)
names = ["tumor", "stroma", "necrosis", "normal"]
labels = rng.integers(0, 4, size=rows)
with open(os.path.join(d, "labels.csv"), "w", newline="") as f:
    w = csv.writer(f, lineterminator="\n")
    w.writerow(["key", "label"])
    for i, k in enumerate(keys):
        w.writerow([k, names[labels[i]]])
        if i % 4 == 0:
            w.writerow([k, names[(labels[i] + 1) % 4]])
