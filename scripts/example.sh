#!/usr/bin/env bash
# The main job, end to end, on a built-in default: set up, report the build, generate a small
# cohort of synthetic whole-slide images (pyramidal tiled TIFFs at 0.25 µm/px) with two tissue
# classes — H&E-like "normal" stroma with sparse nuclei, tumour-like tissue with dense nuclei —
# two slides per patient, and a labels table; then
#   tile (0.5 µm/px, QC pictures) → extract (built-in colour/texture features, no weights)
#   → pack (patient-grouped train/val split) → inspect (shard balance) → train (an MLP; the
#   pinned feed on a GPU when there is one, the host feed otherwise)
# reading each product back with its reference reader (python-lmdb + Pillow, numpy), and
# indexing a TFRecord file written by TensorFlow for NVIDIA DALI. Ends with a summary: tiles,
# features, records, the balance verdict, validation accuracy and the time of each stage.
#   scripts/example.sh [WORKDIR]      (default: example-run/, git-ignored)
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-example-run}
scripts/setup.sh
mltool=build/bin/mltool
python=.venv/bin/python
mkdir -p "$work"
summary=()
stage_start=$SECONDS
stage_done() { summary+=("$(printf '%-8s %4ds  %s' "$1" $((SECONDS - stage_start)) "$2")"); stage_start=$SECONDS; }
echo "== mltool --version"
"$mltool" --version

echo "== a synthetic cohort: 6 patients x 2 slides of 6144 x 4608 px at 0.25 µm/px; P1-P3 tumour, P4-P6 normal"
slides=()
printf 'key,label,patient\n' > "$work/labels.csv"
for patient in 1 2 3 4 5 6; do
  if (( patient <= 3 )); then label=tumor class=b; else label=normal class=a; fi
  for n in 1 2; do
    name=P$patient-S$n
    fraction=$(awk -v p=$patient -v n=$n 'BEGIN { printf "%.2f", 0.45 + 0.05 * ((p + n) % 4) }')
    [ -f "$work/$name.tif" ] ||
      "$python" scripts/fixtures/make_slides.py "$work" --size 6144x4608 --tissue-fraction "$fraction" \
        --mpp 0.25 --tissue-class "$class" --name "$name.tif" >/dev/null
    slides+=("$work/$name.tif")
    printf '%s,%s,P%s\n' "$name" "$label" "$patient" >> "$work/labels.csv"
  done
done
stage_done slides "${#slides[@]} slides, labels in $work/labels.csv"

echo "== mltool tile (→ $work/tiles.lmdb, QC pictures in $work/qc/)"
rm -rf "$work/tiles.lmdb" "$work/qc"
"$mltool" tile "${slides[@]}" -o "$work/tiles.lmdb" --mpp 0.5 --qc "$work/qc" --json | tee "$work/tile.json"
stage_done tile "$("$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["tiles"], "tiles")' "$work/tile.json")"

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
"$mltool" extract "$work/tiles.lmdb" -o "$work/features" --model builtin:color-texture --device auto --json

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

stage_done extract "$("$python" -c 'import numpy,sys; x=numpy.load(sys.argv[1], mmap_mode="r"); print("features", x.shape)' "$work/features/features.npy")"

echo "== mltool pack (slide-level labels, patients kept whole in one split → $work/dataset/)"
"$mltool" pack "$work/features" --labels "$work/labels.csv" -o "$work/dataset" --group-by patient \
  --split train=0.67,val=0.33 --shards 2 --seed 1 --overwrite --json | tee "$work/pack.json"
"$python" - "$work/dataset/dataset.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
names = d["labels"]["names"]
for split, s in d["splits"].items():
    patients = sorted(g for g, sp in d["group_split"].items() if sp == split)
    mix = ", ".join(f"{names[i]} {n}" for i, n in enumerate(s["label_histogram"]))
    print(f"{split}: {s['records']} records in {len(s['shards'])} shards, patients {' '.join(patients)}; {mix}")
PY
stage_done pack "$("$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["records"], "records")' "$work/dataset/dataset.json")"

echo "== mltool inspect --deep --check (shard balance; exit 4 would mean a threshold is exceeded)"
set +e
"$mltool" inspect "$work/dataset" --deep --check max-ratio=1.1,oversample=1.25,decile-drift=off,chi2-p=off --plot "$work/balance.png"
inspect_code=$?
set -e
(( inspect_code == 0 || inspect_code == 4 )) || exit "$inspect_code"
verdict=$([ "$inspect_code" = 0 ] && echo "balanced" || echo "UNBALANCED (see above)")
stage_done inspect "$verdict; chart in $work/balance.png"

echo "== mltool train (an MLP on the features; --feed auto: pinned on a GPU, host otherwise)"
echo '{"family": "mlp", "hidden": [64], "dropout": 0.1}' > "$work/mlp.json"
"$mltool" train "$work/dataset" --model "$work/mlp.json" -o "$work/run" --epochs 30 --batch 32 --lr 0.003 \
  --seed 1 --device auto --feed auto --overwrite --json | tee "$work/train.json"
accuracy=$("$python" - "$work/run/metrics.jsonl" <<'PY'
import json, sys
epochs = [e for e in map(json.loads, open(sys.argv[1])) if e.get("event") == "epoch"]
last = epochs[-1]
print(f"validation accuracy {last['val_accuracy']:.3f} (balanced {last['val_balanced_accuracy']:.3f}) after {last['epoch']} epochs")
PY
)
echo "$accuracy"
stage_done train "$accuracy"

echo "== mltool index (a TFRecord file written by TensorFlow → DALI index)"
cp tests/data/tf_written.tfrecord "$work/"
"$mltool" index "$work/tf_written.tfrecord" --json
echo "== first index entries ($work/tf_written.idx: offset size)"
head -n 3 "$work/tf_written.idx"
stage_done index "DALI index of a TensorFlow-written file"

echo
echo "== summary ($work/)"
printf '%s\n' "${summary[@]}"
