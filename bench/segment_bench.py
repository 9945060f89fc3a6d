#!/usr/bin/env python3
"""What a segmenter costs `mltool tile` (issue 52's goal: on the CPU its share of tile's time at
most 25%, on a GPU at most 10%), side by side in one run: `tile --mpp 0.5` with `--tissue otsu`
and with each preset exported with random weights (scripts/encoders.py export NAME
--random-weights), on the real slide and on a large generated one. The share is the summary's
`segment_seconds` (reading the windows and running the model) over the slide's `seconds`; the
run's wall time (`run s`) adds the process's start and the segmenter's loading and check (once a
run, whatever the number of slides).

    segment_bench.py MLTOOL [--presets grandqc-tissue,hest-tissue] [--device cpu]
                     [--large 16384] [--work DIR] [--repeat 2]

Prints a Markdown table for docs/benchmarks.md and the machine (lscpu's model name, cores).
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts", "fixtures"))
import make_slides  # noqa: E402
REAL = os.path.join(ROOT, "..", "shared", "slides", "CMU-1-Small-Region.svs")


def machine():
    model = "?"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        model = next(l.split(":", 1)[1].strip() for l in out.splitlines()
                     if l.startswith("Model name"))
    except (OSError, StopIteration):
        pass
    return f"{model}, {len(os.sched_getaffinity(0))} cores"


def export(name, out):
    if not os.path.exists(out):
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "encoders.py"), "export",
                        name, "-o", out, "--random-weights"], check=True)
    return out


def tile(mltool, slide, store, tissue, device):
    args = [mltool, "tile", slide, "-o", store, "--mpp", "0.5", "--overwrite", "--json", "-q",
            "--tissue", tissue]
    if tissue not in ("otsu", "none"):
        args += ["--device", device]
    start = time.perf_counter()
    p = subprocess.run(args, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if p.returncode not in (0, 4):
        raise RuntimeError(f"{' '.join(args)}: {p.returncode} {p.stderr}")
    s = json.loads(p.stdout)["slides"][0]
    return s["seconds"], s.get("segment_seconds") or 0.0, s["tiles"], wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mltool")
    ap.add_argument("--presets", default="grandqc-tissue,hest-tissue")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--large", type=int, default=16384, help="side of the generated slide")
    ap.add_argument("--work", default="/tmp/mltool-segment-bench")
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    slides = []
    if os.path.exists(REAL):
        slides.append(("CMU-1-Small-Region (2220 x 2967, 0.499 µm/px)", REAL))
    large = os.path.join(a.work, f"large-{a.large}.tif")
    if not os.path.exists(large):
        regions = make_slides.regions_for_fraction(a.large, a.large, 0.4)
        make_slides.generate([["generic_tiff", [large, a.large, a.large, 0.25, regions],
                               {"compression": "jpeg"}]])
    slides.append((f"generated {a.large} x {a.large}, 0.25 µm/px, 40% tissue", large))
    models = {n: export(n, os.path.join(a.work, f"{n}.pt")) for n in a.presets.split(",")}
    print(f"machine: {machine()}; device {a.device}\n")
    print("| slide | tissue | slide s | segmenter s | share | x otsu | tiles | run s |")
    print("|---|---|---|---|---|---|---|---|")
    for label, path in slides:
        store = os.path.join(a.work, "s.lmdb")
        base = min(tile(a.mltool, path, store, "otsu", a.device) for _ in range(a.repeat))
        print(f"| {label} | otsu | {base[0]:.2f} | | | 1.00 | {base[2]} | {base[3]:.2f} |",
              flush=True)
        for name, pt in models.items():
            runs = [tile(a.mltool, path, store, pt, a.device) for _ in range(a.repeat)]
            secs, seg, tiles, wall = min(runs)
            print(f"| {label} | {name} | {secs:.2f} | {seg:.2f} | {100 * seg / secs:.0f}% | "
                  f"{secs / base[0]:.2f} | {tiles} | {wall:.2f} |", flush=True)


if __name__ == "__main__":
    main()
