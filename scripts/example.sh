#!/usr/bin/env bash
# The main job, end to end: set up, report the build, then
#   tile (0.5 µm/px, QC pictures) → extract (built-in colour/texture features, no weights)
#   → pack (patient- or slide-grouped train/val split) → inspect (shard balance) → train (an
#   MLP; the pinned feed on a GPU when there is one, the host feed otherwise)
# reading each product back with its reference reader (python-lmdb + Pillow, numpy), and
# → predict (the trained MLP on the validation slides: per-tile predictions, heatmaps, a viewer)
# → survival (Cox attention MIL cross-validated in 3 folds: C-index with its 95% interval, a
# Kaplan–Meier picture, report.html) — on the built-in cohort a synthetic cohort's tile
# features packed as patient bags, named synthetic in the summary; on your cohort your table's
# time and event columns (--time-column, --event-column), and left out without them
# indexing a TFRecord file written by TensorFlow for NVIDIA DALI. Ends with a summary: tiles,
# features, records, the balance verdict, validation accuracy and AUROC with its interval,
# the validation slides' calls and where their heatmaps are, the survival C-index and
# Kaplan–Meier picture, each step's report.html, and the time of each stage.
#
# By default it runs on a built-in cohort: synthetic whole-slide images (pyramidal tiled TIFFs
# at 0.25 µm/px) with two tissue classes — H&E-like "normal" stroma with sparse nuclei,
# tumour-like tissue with dense nuclei — two slides per patient, and a labels table. With
# --slides and --labels it runs the same journey on your own cohort.
#
#   scripts/example.sh [WORKDIR]                                (default WORKDIR: example-run/, git-ignored)
#   scripts/example.sh --slides DIR --labels CSV [--time-column COL --event-column COL]
#                      [--work WORKDIR | WORKDIR]
#
# --slides DIR   every file in DIR (not in its subdirectories) with an extension OpenSlide 3.4
#                reads: .svs .tif .tiff .ndpi .vms .vmu .scn .mrxs .svslide .bif (any case);
#                a file OpenSlide cannot open after all is reported and skipped.
# --labels CSV   a table in `mltool pack`'s format with a header key,label[,patient]: key is a
#                slide id — the file name without its last extension (DIR/S1.svs → S1) — or a
#                tile key (S1/000012_000034); with a patient column, patients are kept whole in
#                one split (else each slide is its own group). Slides without a label are tiled
#                and extracted but not packed. The split is train=0.67,val=0.33, so the cohort
#                needs at least two groups (patients or slides), and both labels in train.
# --time-column COL, --event-column COL   columns of the labels table with each slide's (or
#                patient's) follow-up time and event (1) or censoring (0): the survival step
#                cross-validates a Cox model on them. Without them it is left out.
# --work WORKDIR where everything is written (the same as the positional WORKDIR).
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "example.sh: $*" >&2; exit 1; }
usage() {
  echo "usage: scripts/example.sh [WORKDIR]" >&2
  echo "       scripts/example.sh --slides DIR --labels CSV [--time-column COL --event-column COL] [--work WORKDIR | WORKDIR]" >&2
  exit 1
}
work= slides_dir= labels_in= time_column= event_column=
while [ $# -gt 0 ]; do
  case $1 in
    --slides | --labels | --work | --time-column | --event-column)
      [ $# -ge 2 ] || { echo "example.sh: $1 needs a value" >&2; usage; }
      case $1 in
        --slides) slides_dir=$2 ;; --labels) labels_in=$2 ;; --work) work=$2 ;;
        --time-column) time_column=$2 ;; --event-column) event_column=$2 ;;
      esac
      shift 2 ;;
    --slides=*) slides_dir=${1#*=}; shift ;;
    --labels=*) labels_in=${1#*=}; shift ;;
    --work=*) work=${1#*=}; shift ;;
    --time-column=*) time_column=${1#*=}; shift ;;
    --event-column=*) event_column=${1#*=}; shift ;;
    -h | --help) sed -n '2,38p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "example.sh: unknown option $1" >&2; usage ;;
    *) [ -z "$work" ] || die "two work directories given: $work and $1"; work=$1; shift ;;
  esac
done
work=${work:-example-run}

# Your own cohort: check the inputs before anything is installed or built.
if [ -n "$time_column$event_column" ] && [ -z "$slides_dir$labels_in" ]; then
  die "--time-column and --event-column name columns of your labels table (--slides, --labels); the built-in cohort's survival step is synthetic"
fi
own=0
extensions='svs|tif|tiff|ndpi|vms|vmu|scn|mrxs|svslide|bif'
if [ -n "$slides_dir$labels_in" ]; then
  own=1
  [ -n "$slides_dir" ] || die "--labels needs --slides DIR (the slides the labels are for)"
  [ -n "$labels_in" ] || die "--slides needs --labels CSV (header key,label[,patient]; key = slide file name without extension)"
  [ -e "$slides_dir" ] || die "--slides $slides_dir: no such directory"
  [ -d "$slides_dir" ] || die "--slides $slides_dir: not a directory"
  [ -e "$labels_in" ] || die "--labels $labels_in: no such file"
  { [ -f "$labels_in" ] && [ -r "$labels_in" ]; } || die "--labels $labels_in: not a readable file"
  [[ ${labels_in,,} == *.csv ]] || die "--labels $labels_in: expected a .csv file (header key,label[,patient])"
  if [ -n "$time_column$event_column" ] && { [ -z "$time_column" ] || [ -z "$event_column" ]; }; then
    die "--time-column and --event-column go together (the survival step needs both)"
  fi
  slides_dir=$(cd "$slides_dir" && pwd)
  labels_in=$(cd "$(dirname "$labels_in")" && pwd)/$(basename "$labels_in")
  slides=()
  while IFS= read -r -d '' f; do
    name=${f##*/} ext=${f##*.}
    if [[ $name == *.* && ${ext,,} =~ ^($extensions)$ ]]; then slides+=("$f"); fi
  done < <(find "$slides_dir" -mindepth 1 -maxdepth 1 \( -type f -o -type l \) -print0 | sort -z)
  [ ${#slides[@]} -gt 0 ] ||
    die "--slides $slides_dir: no slide files in it (extensions ${extensions//|/ }; subdirectories are not searched)"
fi

MLTOOL_SETUP_FOR=example scripts/setup.sh  # mltool alone: no test programs, no test references
mltool=build/bin/mltool
python=.venv/bin/python
mkdir -p "$work"
summary=()
stage_start=$SECONDS
stage_done() { summary+=("$(printf '%-8s %4ds  %s' "$1" $((SECONDS - stage_start)) "$2")"); stage_start=$SECONDS; }
echo "== mltool --version"
"$mltool" --version

if (( own )); then
  echo "== your cohort: ${#slides[@]} slide files in $slides_dir, labels in $labels_in"
  # The labels table: its header, and every key naming a slide found in DIR. Prints the
  # grouping column (patient, or nothing).
  group_column=$(TIME_COLUMN=$time_column EVENT_COLUMN=$event_column "$python" - "$labels_in" "${slides[@]}" <<'PY'
import csv, os, sys
path, slide_files = sys.argv[1], sys.argv[2:]
ids = {os.path.basename(f).rsplit(".", 1)[0] for f in slide_files}
def fail(message):
    sys.exit(f"example.sh: {path}: {message}")
try:
    with open(path, newline="", encoding="utf-8-sig") as f:
        rows = [r for r in csv.reader(f) if any(c.strip() for c in r)]
except (UnicodeDecodeError, csv.Error) as e:
    fail(f"not a readable CSV file: {e}")
if not rows:
    fail("empty; expected a header key,label[,patient] and a row per slide")
header = [c.strip() for c in rows[0]]
for column in ("key", "label"):
    if column not in header:
        fail(f"no '{column}' column in the header '{','.join(header)}' (expected key,label[,patient])")
for option, column in (("--time-column", os.environ["TIME_COLUMN"]), ("--event-column", os.environ["EVENT_COLUMN"])):
    if column and column not in header:
        fail(f"{option} {column}: no such column in the header '{','.join(header)}'")
if len(rows) < 2:
    fail("no rows below the header")
k, l = header.index("key"), header.index("label")
p = header.index("patient") if "patient" in header else None
unknown, labelled = [], set()
for line, r in enumerate(rows[1:], 2):
    if len(r) != len(header):
        fail(f"line {line}: {len(r)} fields, but the header has {len(header)}")
    key = r[k].strip()
    if not key or not r[l].strip() or (p is not None and not r[p].strip()):
        fail(f"line {line}: an empty key, label or patient")
    slide = key.rsplit("/", 1)[0]
    if slide not in ids:
        unknown.append(f"'{key}' (line {line})")
    labelled.add(slide)
if unknown:
    more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
    fail(f"{len(unknown)} key(s) name no slide of the slides directory: {', '.join(unknown[:5])}{more}; "
         "a key is a slide's file name without its extension (S1 for S1.svs), or a tile key S1/RRRRRR_CCCCCC")
unlabelled = sorted(ids - labelled)
if unlabelled:
    print(f"example.sh: warning: {len(unlabelled)} slide(s) have no label and will not be packed: "
          + ", ".join(unlabelled[:10]) + (" ..." if len(unlabelled) > 10 else ""), file=sys.stderr)
print("patient" if p is not None else "")
PY
)
  cp "$labels_in" "$work/labels.csv"
  if [ -n "$group_column" ]; then
    group_args=(--group-by patient) grouping="patients kept whole in one split"
  else
    group_args=() grouping="each slide whole in one split"
  fi
  stage_done slides "${#slides[@]} slide files in $slides_dir, labels in $work/labels.csv"
else
  group_args=(--group-by patient) grouping="patients kept whole in one split"
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
fi

echo "== mltool tile (→ $work/tiles.lmdb, QC pictures in $work/qc/)"
rm -rf "$work/tiles.lmdb" "$work/qc"
# --keep-going: a slide that fails (or, in your cohort, a file OpenSlide cannot open) or yields
# no tiles is named and the others go on; exit 4 says some did.
set +e
"$mltool" tile "${slides[@]}" -o "$work/tiles.lmdb" --mpp 0.5 --qc "$work/qc" --keep-going --json | tee "$work/tile.json"
tile_code=${PIPESTATUS[0]}
set -e
(( tile_code == 0 || tile_code == 4 )) || exit "$tile_code"
tile_result=$("$python" - "$work/tile.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
tiled = sum(s["status"] == "tiled" for s in t["slides"])
note = "".join(f", {n} {what}" for n, what in ((t["failed"], "failed"), (t["empty"], "without tiles")) if n)
print(f'{t["tiles"]} tiles from {tiled} slides{note}')
if not t["tiles"]:
    sys.exit("example.sh: no tiles at all: see the log above and docs/troubleshooting.md (zero tiles)")
PY
)
stage_done tile "$tile_result"

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

# Your cohort: labels of slides that failed or yielded no tiles (named by the tile stage) are
# skipped and counted; the built-in cohort has none.
skip_args=()
if (( own )); then skip_args=(--skip-missing); fi
echo "== mltool pack (labels from $work/labels.csv, $grouping → $work/dataset/)"
"$mltool" pack "$work/features" --labels "$work/labels.csv" -o "$work/dataset" "${group_args[@]}" \
  --split train=0.67,val=0.33 --shards 2 --seed 1 "${skip_args[@]}" --overwrite --json | tee "$work/pack.json"
"$python" - "$work/dataset/dataset.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
names = d["labels"]["names"]
kind = "patients" if d["labels"]["group_column"] else "slides"
for split, s in d["splits"].items():
    groups = sorted(g for g, sp in d["group_split"].items() if sp == split)
    mix = ", ".join(f"{names[i]} {n}" for i, n in enumerate(s["label_histogram"]))
    print(f"{split}: {s['records']} records in {len(s['shards'])} shards, {kind} {' '.join(groups)}; {mix}")
if d["excluded"]["missing_keys"]:
    print(f"example.sh: warning: {d['excluded']['missing_keys']} labels row(s) skipped: their slides failed or "
          "yielded no tiles (see the tile stage)", file=sys.stderr)
PY
stage_done pack "$("$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["records"], "records")' "$work/dataset/dataset.json")"

echo "== mltool inspect --deep --check (shard balance; exit 4 would mean a threshold is exceeded)"
set +e
"$mltool" inspect "$work/dataset" --deep --check --plot "$work/balance.png"
inspect_code=$?
set -e
(( inspect_code == 0 || inspect_code == 4 )) || exit "$inspect_code"
verdict=$([ "$inspect_code" = 0 ] && echo "balanced" || echo "UNBALANCED (see above)")
stage_done inspect "$verdict; chart in $work/balance.png"

echo "== mltool train (an MLP on the features; --feed auto: pinned on a GPU, host otherwise)"
echo '{"family": "mlp", "hidden": [64], "dropout": 0.1}' > "$work/mlp.json"
"$mltool" train "$work/dataset" --model "$work/mlp.json" -o "$work/run" --epochs 30 --batch 32 --lr 0.003 \
  --seed 1 --device auto --feed auto --overwrite --json | tee "$work/train.json"
accuracy=$("$python" - "$work/run/metrics.jsonl" "$work/run/run.json" <<'PY'
import json, sys
epochs = [e for e in map(json.loads, open(sys.argv[1])) if e.get("event") == "epoch"]
last = epochs[-1]
intervals = json.load(open(sys.argv[2]))["result"].get("intervals") or {}
auc = intervals.get("metrics", {}).get("val_auc")
ci = (f"; AUROC {auc['estimate']:.3f} (95% CI {auc['low']:.3f}–{auc['high']:.3f}, "
      f"{intervals['groups']} {intervals['unit']}s)" if auc and auc["low"] is not None else
      f"; AUROC {auc['estimate']:.3f} (no interval: {auc['not_estimable']})"
      if auc and auc.get("not_estimable") and auc["estimate"] is not None else "")
print(f"validation accuracy {last['val_accuracy']:.3f} (balanced {last['val_balanced_accuracy']:.3f}) "
      f"after {last['epoch']} epochs{ci}")
PY
)
echo "$accuracy"
echo "the run's page (metrics with intervals, ROC, PR, calibration, confusion): $work/run/report.html"
stage_done train "$accuracy; $work/run/report.html"

echo "== mltool predict (the run's best weights on the validation slides → $work/pred/)"
# The validation split's slides: its groups (patients, or slides) from dataset.json, their
# slides from the labels table.
"$python" - "$work/dataset/dataset.json" "$work/labels.csv" > "$work/val_slides.txt" <<'PY'
import csv, json, sys
d = json.load(open(sys.argv[1]))
val = {g for g, split in d["group_split"].items() if split == "val"}
column = d["labels"]["group_column"]
for row in csv.DictReader(open(sys.argv[2], newline="", encoding="utf-8-sig")):
    slide = row["key"].strip().split("/")[0]
    if (row[column].strip() if column else slide) in val:
        print(slide)
PY
sort -u -o "$work/val_slides.txt" "$work/val_slides.txt"
"$mltool" predict "$work/run" "$work/features" -o "$work/pred" --slide - --view --device auto --overwrite \
  --json < "$work/val_slides.txt" | tee "$work/predict.json"
calls=$("$python" - "$work/pred/predictions.csv" "$work/labels.csv" "$work/predict.json" <<'PY'
import collections, csv, json, sys
truth = {r["key"].strip().split("/")[0]: r["label"].strip()
         for r in csv.DictReader(open(sys.argv[2], newline="", encoding="utf-8-sig"))}
votes = collections.defaultdict(collections.Counter)
for r in csv.DictReader(open(sys.argv[1], newline="")):
    votes[r["slide"]][r["prediction"]] += 1
right = 0
for slide, v in sorted(votes.items()):
    call, n = v.most_common(1)[0]
    right += call == truth.get(slide)
    print(f"{slide}: {call} ({n} of {sum(v.values())} tiles), labelled {truth.get(slide, '?')}", file=sys.stderr)
s = json.load(open(sys.argv[3]))
print(f"{len(votes)} validation slides, {s['tiles']} tiles: {right} of {len(votes)} slide calls "
      f"(the tiles' majority) right; {s['heatmaps']} heatmaps")
PY
)
echo "$calls"
echo "heatmaps (PNG on each slide, GeoJSON for QuPath): $work/pred/heatmaps/"
echo "the slides at every level with their heatmaps, in a browser, offline: $work/pred/view/index.html"
stage_done predict "$calls in $work/pred/heatmaps/; $work/pred/report.html; viewer $work/pred/view/index.html"

# Survival, cross-validated: on the built-in cohort a synthetic one (named so in the summary);
# on your cohort your table's time and event columns, or nothing without them.
survival=$work/survival
if (( own )) && [ -z "$time_column" ]; then
  echo "== survival: left out (your labels table has no --time-column and --event-column)"
  stage_done survival "left out: give --time-column COL --event-column COL to cross-validate a survival model on your table"
else
  if (( own )); then
    echo "== survival, cross-validated on your cohort: $time_column and $event_column of $work/labels.csv"
    echo "   → pack --task survival --unit bag (${group_column:-slide} bags) --folds 3 → train --folds all"
    bag_args=()
    [ -z "$group_column" ] || bag_args=(--bag-by patient)
    rm -rf "$survival" && mkdir -p "$survival"
    "$mltool" pack "$work/features" --labels "$work/labels.csv" --task survival --time-column "$time_column" \
      --event-column "$event_column" --unit bag "${bag_args[@]}" --folds 3 --skip-missing --seed 1 \
      -o "$survival/dataset" --overwrite
    cohort="your cohort"
  else
    echo "== survival, cross-validated: a synthetic cohort of 120 patients' tile features (hazard along"
    echo "   one feature direction) → pack --task survival --bag-by patient --folds 3 → train --folds all"
    "$python" scripts/fixtures/outcome_cohort.py "$survival"
    "$mltool" pack "$survival/features" --labels "$survival/clinical.csv" --key-column slide \
      --task survival --time-column time --event-column event --unit bag --bag-by patient --folds 3 \
      --seed 1 -o "$survival/dataset" --overwrite
    cohort="synthetic cohort"
  fi
  echo '{"family": "abmil", "hidden": [16], "attention": 8}' > "$survival/abmil.json"
  "$mltool" train "$survival/dataset" --model "$survival/abmil.json" --folds all \
    -o "$survival/cv" --epochs 15 --batch 8 --lr 0.005 --seed 1 --device auto --overwrite
  cindex=$("$python" - "$survival/cv/cv.json" "$cohort" <<'PY'
import json, sys
cv, cohort = json.load(open(sys.argv[1])), sys.argv[2]
km = cv["pictures"]["km"]
ci = cv.get("intervals", {}).get("metrics", {}).get("val_c_index")
oof = (f"out of fold {ci['estimate']:.3f} (95% CI {ci['low']:.3f}–{ci['high']:.3f}, "
       f"{cv['intervals']['groups']} {cv['intervals']['unit']}s)" if ci and ci["low"] is not None else
       f"out of fold {ci['estimate']:.3f} (no interval: {ci['not_estimable']})"
       if ci and ci.get("not_estimable") and ci["estimate"] is not None else "")
p = "n/a" if km["logrank_p"] is None else f"{km['logrank_p']:.2g}"
mean, sd = cv["mean"].get("val_c_index"), cv["sd"].get("val_c_index")
# A fold without a comparable pair has no C-index, and then there is no mean.
folds = (f"C-index {mean:.3f} ± {sd:.3f} over {cv['folds']} folds" if mean is not None and sd is not None
         else f"C-index undefined in some of {cv['folds']} folds (too few events)")
print(f"{cohort}: {folds}{'; ' + oof if oof else ''}; log-rank p {p} (high {km['high']} vs low {km['low']} risk)")
PY
)
  echo "$cindex"
  echo "Kaplan–Meier of the out-of-fold risk halves: $survival/cv/km.png; the page: $survival/cv/report.html"
  stage_done survival "$cindex; $survival/cv/report.html"
fi

echo "== mltool index (a TFRecord file written by TensorFlow → DALI index)"
cp tests/data/tf_written.tfrecord "$work/"
"$mltool" index "$work/tf_written.tfrecord" --json
echo "== first index entries ($work/tf_written.idx: offset size)"
head -n 3 "$work/tf_written.idx"
stage_done index "DALI index of a TensorFlow-written file"

echo
echo "== summary ($work/)"
printf '%s\n' "${summary[@]}"
