#!/usr/bin/env python3
"""The µm/px estimated from the tissue (`mltool info`), its error and its speed, on slides of
known µm/px with none in their metadata (scripts/fixtures/mpp_slides.py): the real Aperio
slide of ../shared/slides resampled to 0.2-2 µm/px (lossless, and JPEG quality 90), and
generated H&E-like slides. Prints the markdown tables of docs/info.md and
docs/benchmarks.md: per slide the truth, the estimate, its error, its interval and whether it
covers the truth, the whole nuclei it measured, the nuclear cores' own estimate (the ruler
it replaced, for comparison) and the wall-clock seconds of `mltool info` for the slide
(best of 3).

    info_bench.py MLTOOL [OUTDIR]
"""
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "scripts", "fixtures", "mpp_slides.py")
REAL_SVS = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "slides",
                                         "CMU-1-Small-Region.svs"))
SCALES = ["0.2", "0.25", "0.35", "0.5", "0.75", "1", "1.5", "2"]


def slides(out):
    made = []
    for kind in (["real", "real-jpeg"] if os.path.isfile(REAL_SVS) else []):
        made += json.loads(subprocess.check_output(
            [sys.executable, FIXTURE, kind, REAL_SVS, out, *SCALES]))["slides"]
    made += json.loads(subprocess.check_output(
        [sys.executable, FIXTURE, "generated", out, *SCALES]))["slides"]
    made.append({"path": REAL_SVS, "mpp": 0.499, "kind": "svs (scanner's)"})
    return [s for s in made if os.path.exists(s["path"])]


def measure(mltool, path):
    best, doc = None, None
    for _ in range(3):
        t0 = time.perf_counter()
        out = subprocess.check_output([mltool, "info", "--json", path])
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
        doc = json.loads(out)
    return doc, best


def main():
    mltool = os.path.abspath(sys.argv[1])
    out = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="info_bench_")
    print("| slide | truth µm/px | estimate | error | interval | covers | uncertain | nuclei "
          "| cores' estimate (error) | s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for s in slides(out):
        doc, seconds = measure(mltool, s["path"])
        e = doc["estimated_mpp"]
        if e["mpp"] is None:
            print(f"| {s['kind']} | {s['mpp']} | none | | | no | {e['why']} | 0 | | {seconds:.2f} |")
            continue
        err = 100 * (e["mpp"] / s["mpp"] - 1)
        covers = "yes" if e["low"] <= s["mpp"] <= e["high"] else "**no**"
        unc = e["why"] if e["uncertain"] else ""
        cores = e["from_cores"]
        cores = f"{cores:.3f} ({100 * (cores / s['mpp'] - 1):+.0f}%)" if cores else "(used)"
        print(f"| {s['kind']} | {s['mpp']:g} | {e['mpp']:.3f} | {err:+.1f}% | "
              f"{e['low']:.3f}–{e['high']:.3f} | {covers} | {unc} | {e['whole_nuclei']} | "
              f"{cores} | {seconds:.2f} |")


if __name__ == "__main__":
    main()
