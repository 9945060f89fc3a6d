#!/usr/bin/env bash
# The main job, end to end, on a built-in default. It grows with each subcommand that lands;
# today: set up, report the build, generate a synthetic whole-slide image (a pyramidal tiled
# TIFF at 0.25 µm/px with H&E-like tissue on glass), tile it into an LMDB tile store at
# 0.5 µm/px with a QC picture, read the store back with python-lmdb, extract features with the
# built-in extractor and read them with numpy, pack them with slide-level labels into
# index-based TFRecord shards with a slide-disjoint train/val split, and index a TFRecord file written by TensorFlow
# so NVIDIA DALI can read it by random access.
#   scripts/example.sh [WORKDIR]      (default: example-run/, git-ignored)
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-example-run}
scripts/setup.sh
mltool=build/bin/mltool
python=.venv/bin/python
mkdir -p "$work"
echo "== mltool --version"
"$mltool" --version

echo "== synthetic slides: 12288 x 9216 px and 3 smaller ones at 0.25 µm/px, H&E-like tissue on glass"
slides=()
for spec in example-slide:12288x9216:0.4 slide-b:6144x4608:0.5 slide-c:6144x4608:0.3 slide-d:6144x4608:0.6; do
  IFS=: read -r name size fraction <<<"$spec"
  [ -f "$work/$name.tif" ] ||
    "$python" scripts/fixtures/make_slides.py "$work" --size "$size" --tissue-fraction "$fraction" \
      --mpp 0.25 --name "$name.tif" >/dev/null
  slides+=("$work/$name.tif")
done

echo "== mltool tile (→ $work/tiles.lmdb, QC pictures in $work/qc/)"
rm -rf "$work/tiles.lmdb" "$work/qc"
"$mltool" tile "${slides[@]}" -o "$work/tiles.lmdb" --mpp 0.5 --qc "$work/qc" --json

echo "== the tile store, read with python-lmdb + Pillow"
"$python" - "$work/tiles.lmdb" <<'PY'
import io, json, sys
import lmdb
from PIL import Image
env = lmdb.open(sys.argv[1], readonly=True, max_dbs=8)
tiles, meta = env.open_db(b"tiles", create=False), env.open_db(b"meta", create=False)
with env.begin() as txn:
    print("store:", txn.get(b"store", db=meta).decode())
    for key, _ in txn.cursor(db=meta):
        if key.startswith(b"done/"):
            slide = key[5:].decode()
            info = json.loads(txn.get(b"slides/" + key[5:], db=meta))
            kept = json.loads(txn.get(b"tiles/" + key[5:], db=meta))
            print(f"{slide}: {len(kept['row'])} tiles of a {info['grid']['cols']}x{info['grid']['rows']} grid, "
                  f"read at level {info['level']} ({info['read_size']} px -> {info['tile_size']} px)")
            first = f"{slide}/{kept['row'][0]:06d}_{kept['col'][0]:06d}"
            image = Image.open(io.BytesIO(txn.get(first.encode(), db=tiles)))
            print(f"first tile {first}: {image.format} {image.size[0]}x{image.size[1]} {image.mode},"
                  f" level-0 corner ({kept['x'][0]}, {kept['y'][0]}), tissue {kept['tissue'][0]}")
PY

echo "== mltool extract (tiles → $work/features/ with the built-in colour/texture extractor, no weights)"
rm -rf "$work/features"
"$mltool" extract "$work/tiles.lmdb" -o "$work/features" --model builtin:color-texture --device cpu --json

echo "== the feature store, read with numpy"
"$python" - "$work/features" <<'PY'
import json, sys
import numpy as np
d = sys.argv[1]
x = np.load(f"{d}/features.npy", mmap_mode="r")
keys = open(f"{d}/keys.txt").read().splitlines()
meta = json.load(open(f"{d}/features.json"))
print(f"features.npy {x.shape} {x.dtype}; row 0 = {keys[0]}: mean RGB {np.round(x[0, :3], 3)}, "
      f"saturation {x[0, 57]:.3f}; model {meta['model']}")
PY

echo "== mltool pack (slide-level labels → index-based TFRecord shards in $work/dataset/)"
printf 'key,label\nexample-slide,tumor\nslide-b,normal\nslide-c,tumor\nslide-d,normal\n' > "$work/labels.csv"
"$mltool" pack "$work/features" --labels "$work/labels.csv" -o "$work/dataset" --split train=0.5,val=0.5 \
  --shards 2 --seed 1 --overwrite --json
echo "== dataset.json: splits"
"$python" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps(d["splits"], indent=1)[:1500])' \
  "$work/dataset/dataset.json"

echo "== mltool index (a TFRecord file written by TensorFlow → DALI index)"
cp tests/data/tf_written.tfrecord "$work/"
"$mltool" index "$work/tf_written.tfrecord" --json
echo "== first index entries ($work/tf_written.idx: offset size)"
head -n 3 "$work/tf_written.idx"
