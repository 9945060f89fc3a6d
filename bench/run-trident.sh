#!/usr/bin/env bash
# `mltool extract SLIDES` with a small TorchScript CNN against TRIDENT's own patch-feature
# pipeline (github.com/mahmoodlab/TRIDENT: its Processor, OpenSlide read_region, the same CNN
# through its CustomInferenceEncoder hook), same slides, tile size, µm/px, CPU and cores, side
# by side in one run. Prints a markdown table and writes it to OUTDIR/trident.md (numbers in
# OUTDIR/trident.json, and the runs' files in OUTDIR/work-trident).
#
#   bench/run-trident.sh --trident DIR [--repeats N] [OUTDIR]
#
# --trident DIR  a checkout of TRIDENT (a repository, not a package); get the one measured with
#                  git clone https://github.com/mahmoodlab/TRIDENT DIR
#                  git -C DIR checkout a91fa8490e0210ebbbe58452c3babe009e0ab7ca
#                (default: $TRIDENT_DIR, which bench/run-all.sh passes on)
# --repeats N    runs of each side, order alternating, best reported (default 1)
# OUTDIR         default ${MLTOOL_CACHE:-~/.cache/mltool}/bench-extract-slides
#
# The cohort is bench/slide_cohort.sh's (12 generated slides at 0.25 µm/px, in OUTDIR/slides,
# made once). The model is bench/small_cnn.py's CNN (128 features). Side by side:
#   mltool extract SLIDES -o F --mpp 0.5 --tile-size 256 --min-tissue 0.5 --model cnn.pt
#          --input-size 256 --batch 256 --threads 2 --json
#   mltool tile SLIDES -o STORE (same geometry) + mltool extract STORE (same model): for
#          information, the path of before
#   bench/trident_bench.py in TRIDENT's venv: segmentation (its Otsu segmenter), patching at
#          20x (= 0.5 µm/px on these slides: TRIDENT takes 10 / magnification), 256 px,
#          min_tissue_proportion 0.5, features with the same CNN, batch 256; then its feature
#          stage again on mltool's own coordinates (mltool export h5 --layout trident), whose
#          features are compared with mltool's tile by tile.
# Each under /usr/bin/time -v (wall, peak RSS of the process; TRIDENT's DataLoader worker is a
# child process: GNU time reports the largest of them, not their sum).
#
# TRIDENT's venv: ${TRIDENT_VENV:-~/.cache/mltool/trident-venv}, made here on first use from
# PyPI with the pins below (what TRIDENT's pyproject.toml needs to import its Processor, its
# Otsu segmenter and its encoder hook; opencv-python-headless for opencv-python, the same cv2
# without GUI libraries; timm at TRIDENT's pin). Never the project's .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
source bench/slide_cohort.sh
bench_init trident extract
trident=${TRIDENT_DIR:-} repeats=1 out=
while [[ $# -gt 0 ]]; do
  case $1 in
    --trident) [[ $# -ge 2 ]] || die "--trident needs a directory"; trident=$2; shift 2 ;;
    --repeats) [[ $# -ge 2 ]] || die "--repeats needs a number"; repeats=$2; shift 2 ;;
    -h | --help) sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) out=$1; shift ;;
  esac
done
[[ -n $trident ]] || die "--trident DIR (or TRIDENT_DIR) is required: git clone https://github.com/mahmoodlab/TRIDENT DIR && git -C DIR checkout a91fa8490e0210ebbbe58452c3babe009e0ab7ca"
[[ -f $trident/trident/Processor.py ]] || die "$trident/trident/Processor.py missing: --trident names a TRIDENT checkout"
trident=$(cd "$trident" && pwd)
out=${out:-${MLTOOL_CACHE:-$HOME/.cache/mltool}/bench-extract-slides}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$out/work-trident
[[ -x /usr/bin/time ]] || die "/usr/bin/time missing: apt-get install time"

venv=${TRIDENT_VENV:-${MLTOOL_CACHE:-$HOME/.cache/mltool}/trident-venv}
trident_pins=(
  torch==2.11.0 torchvision==0.26.0 numpy==2.4.6 pandas==3.1.1 tqdm==4.70.1 h5py==3.16.0
  geopandas==1.2.0 shapely==2.2.0 opencv-python-headless==5.0.0.93 openslide-python==1.4.7
  openslide-bin==4.0.1.2 pillow==13.0.0 scikit-image==0.26.0 matplotlib==3.11.2
  requests==2.34.2 timm==0.9.16
)
if [[ ! -f $venv/.complete ]]; then
  echo "making TRIDENT's venv $venv (PyPI; torch is a large download) ..." >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "${trident_pins[@]}" || die "pip install into $venv failed"
  touch "$venv/.complete"
fi
tpy=$venv/bin/python
PYTHONPATH=$trident "$tpy" -c 'from trident import Processor' ||
  die "$tpy cannot import TRIDENT's Processor from $trident"

cohort_make "$out/slides"
rm -rf "$work"
mkdir -p "$work"
"$py" bench/small_cnn.py "$work/cnn.pt"
geometry=(--mpp 0.5 --tile-size 256 --min-tissue 0.5)
model=(--model "$work/cnn.pt" --input-size 256 --batch 256)
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores" >&2
load_before=$(cut -d' ' -f1 /proc/loadavg)
cc_max=0
note_cc() { local n; n=$(pgrep -c cc1plus || true); (( n > cc_max )) && cc_max=$n; return 0; }

run_mltool() {  # $1: repeat
  rm -rf "$work/f-slides"
  cohort_warm; note_cc
  /usr/bin/time -v -o "$work/slides-$1.time" "$mltool" extract "${cohort[@]}" -o "$work/f-slides" \
    "${geometry[@]}" "${model[@]}" --threads 2 --json > "$work/slides-$1.json" 2> "$work/slides-$1.err" ||
    { cat "$work/slides-$1.err" >&2; die "mltool extract SLIDES failed"; }
  rm -rf "$work/store" "$work/f-store"
  cohort_warm; note_cc
  /usr/bin/time -v -o "$work/tile-$1.time" "$mltool" tile "${cohort[@]}" -o "$work/store" \
    "${geometry[@]}" --threads 2 --json > "$work/tile-$1.json" 2> "$work/tile-$1.err" ||
    { cat "$work/tile-$1.err" >&2; die "mltool tile failed"; }
  /usr/bin/time -v -o "$work/store-$1.time" "$mltool" extract "$work/store" -o "$work/f-store" \
    "${model[@]}" --threads 2 --json > "$work/store-$1.json" 2> "$work/store-$1.err" ||
    { cat "$work/store-$1.err" >&2; die "mltool extract STORE failed"; }
  echo "  mltool repeat $1: SLIDES $(wall_of "$work/slides-$1.time") s, tile + STORE $(wall_of "$work/tile-$1.time") + $(wall_of "$work/store-$1.time") s" >&2
}

run_trident() {  # $1: repeat
  rm -rf "$work/trident-job" "$work/mltool-job"
  cohort_warm; note_cc
  PYTHONPATH=$trident /usr/bin/time -v -o "$work/trident-$1.time" "$tpy" bench/trident_bench.py \
    --trident "$trident" --slides-dir "$out/slides" --job "$work/trident-job" --model "$work/cnn.pt" \
    --out "$work/trident-$1.json" --mag 20 --patch-size 256 --min-tissue 0.5 --batch 256 \
    > /dev/null 2> "$work/trident-$1.err" ||
    { tail -20 "$work/trident-$1.err" >&2; die "TRIDENT's pipeline failed (log: $work/trident-$1.err)"; }
  # Its feature stage again, on mltool's tiles (a separate process), compared with mltool's.
  "$mltool" export h5 "$work/f-slides" -o "$work/mltool-job" --layout trident -q ||
    die "mltool export h5 --layout trident failed"
  cohort_warm
  PYTHONPATH=$trident /usr/bin/time -v -o "$work/tcoords-$1.time" "$tpy" bench/trident_bench.py \
    --trident "$trident" --slides-dir "$out/slides" --job "$work/trident-job" --model "$work/cnn.pt" \
    --out "$work/tcoords-$1.json" --mag 20 --patch-size 256 --batch 256 \
    --mltool-job "$work/mltool-job" --mltool-features "$work/f-slides" > /dev/null 2> "$work/tcoords-$1.err" ||
    { tail -20 "$work/tcoords-$1.err" >&2; die "TRIDENT's feature stage on mltool's tiles failed (log: $work/tcoords-$1.err)"; }
  echo "  TRIDENT repeat $1: $(wall_of "$work/trident-$1.time") s; on mltool's tiles $(wall_of "$work/tcoords-$1.time") s" >&2
}

for ((r = 0; r < repeats; r++)); do
  if (( r % 2 == 0 )); then run_mltool "$r"; run_trident "$r"; else run_trident "$r"; run_mltool "$r"; fi
done

: > "$work/runs.tsv"
for ((r = 0; r < repeats; r++)); do
  printf '%s' "$r" >> "$work/runs.tsv"
  for s in slides tile store trident tcoords; do
    printf '\t%s\t%s' "$(wall_of "$work/$s-$r.time")" "$(rss_of "$work/$s-$r.time")" >> "$work/runs.tsv"
  done
  echo >> "$work/runs.tsv"
done
"$py" - "$work" "$("$mltool" --version 2>&1 | head -1)" "load average $load_before before the runs, $(cut -d' ' -f1 /proc/loadavg) after; compilers (cc1plus) running at the starts: up to $cc_max" \
  "$(git -C "$trident" rev-parse HEAD 2>/dev/null || echo "commit unknown")" <<'PY' | tee "$out/trident.md"
import json, os, subprocess, sys
work, version, load, commit = sys.argv[1:5]
runs = []
for line in open(os.path.join(work, "runs.tsv")):
    f = line.rstrip("\n").split("\t")
    r = int(f[0])
    v = [float(x) for x in f[1:]]
    runs.append(dict(r=r, slides=v[0], slides_rss=v[1], tile=v[2], tile_rss=v[3], store=v[4],
                     store_rss=v[5], trident=v[6], trident_rss=v[7], tcoords=v[8],
                     tcoords_rss=v[9],
                     t=json.load(open(os.path.join(work, f"trident-{r}.json"))),
                     tc=json.load(open(os.path.join(work, f"tcoords-{r}.json"))),
                     s=json.load(open(os.path.join(work, f"slides-{r}.json"))),
                     tj=json.load(open(os.path.join(work, f"tile-{r}.json")))))
m = min(runs, key=lambda x: x["slides"])
ms = min(runs, key=lambda x: x["tile"] + x["store"])
t = min(runs, key=lambda x: x["trident"])
tt = t["t"]
machine = subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True, capture_output=True,
                         text=True).stdout.strip()
mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
rows = m["s"].get("rows")
print(f"Machine: {machine}, {os.cpu_count()} cores, {mem:.0f} GiB; {load}. {version}; TRIDENT "
      f"{commit[:12]} (torch {tt.get('torch_threads')} threads, {tt.get('loader_workers')} "
      f"DataLoader worker(s), its defaults here). Best of {len(runs)}.")
print()
print("| pipeline | tiles | wall s | tiles/s | peak RSS MiB | TRIDENT / it (wall) |")
print("|---|---|---|---|---|---|")
def row(name, tiles, wall, rss):
    print(f"| {name} | {tiles} | {wall:.1f} | {tiles / wall:.0f} | {rss / 1024:.0f} "
          f"| **{t['trident'] / wall:.2f}×** |" if name.startswith("mltool") else
          f"| {name} | {tiles} | {wall:.1f} | {tiles / wall:.0f} | {rss / 1024:.0f} | |")
row("mltool extract SLIDES", rows, m["slides"], m["slides_rss"])
row("mltool tile + extract STORE", ms["tj"]["tiles"], ms["tile"] + ms["store"],
    max(ms["tile_rss"], ms["store_rss"]))
row("TRIDENT (Otsu segmentation, patching, features), one process", tt["patches"], t["trident"],
    t["trident_rss"])
tc = min(runs, key=lambda x: x["tcoords"])
row("TRIDENT's feature stage on mltool's tiles, one process", tc["tc"]["patches"], tc["tcoords"],
    tc["tcoords_rss"])
print()
stages = ("import_s", "segmentation_s", "patching_s", "features_s")
print("TRIDENT's stages (s): " + ", ".join(f"{k[:-2]} {tt[k]:.1f}" for k in stages if k in tt)
      + f"; its patches: {tt['patches']} (Otsu), mltool's tiles: {rows}. Without its import "
      f"(Python, torch, geopandas: {tt['import_s']:.1f} s) TRIDENT takes "
      f"{t['trident'] - tt['import_s']:.1f} s, {(t['trident'] - tt['import_s']) / m['slides']:.2f}× "
      f"mltool; its feature stage alone {tt['features_s']:.1f} s, "
      f"{tt['features_s'] / m['slides']:.2f}× mltool's whole run, "
      f"{tt['patches'] / tt['features_s']:.0f} tiles/s against mltool's {rows / m['slides']:.0f}.")
print(f"On mltool's own tiles, TRIDENT's feature stage takes {tc['tc']['features_s']:.1f} s "
      f"(process {tc['tcoords']:.1f} s), {tc['tcoords'] / m['slides']:.2f}× mltool extract SLIDES; "
      f"its features against mltool's, tile by tile: {tc['tc'].get('vs_mltool')}.")
json.dump([{k: v for k, v in x.items()} for x in runs],
          open(os.path.join(os.path.dirname(work), "trident.json"), "w"), indent=1)
print("Every run (wall s): " + "; ".join(
    f"#{x['r']}: SLIDES {x['slides']:.1f}, tile+STORE {x['tile'] + x['store']:.1f}, "
    f"TRIDENT {x['trident']:.1f}, TRIDENT on mltool's tiles {x['tcoords']:.1f}"
    for x in runs) + ".")
PY
