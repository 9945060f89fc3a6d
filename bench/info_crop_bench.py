#!/usr/bin/env python3
"""The µm/px estimated from small images (`mltool info`): crops of the real Aperio slide of
../shared/slides (CMU-1-Small-Region, 0.499 µm/px) of 512-2048 px at several positions, saved
as PNG without any resolution (what a flat export is). Per crop size: how many crops, how
many of the intervals cover the truth, how many are `uncertain` (and why), the estimates'
errors, the whole nuclei they used. Prints the markdown table of docs/info.md (`--rows`:
first the rows of its accuracy table for the crops of 512-1024 px, with the wall-clock
seconds of `mltool info` on each, one run).

A crop is taken where at least half of it is stained (HSV saturation above 0.12, as the
estimate's pixels; a third from 1536 px on, the tissue being a narrow strip): POSITIONS
evenly spaced over those positions of a grid of stride size/4, in reading order.

With `--jpeg` the crops are JPEG quality 90 (Pillow's default 4:2:0 chroma subsampling), as
flat exports often are.

    info_crop_bench.py MLTOOL [OUTDIR] [--rows] [--jpeg]
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REAL_SVS = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "slides",
                                         "CMU-1-Small-Region.svs"))
TRUTH = 0.499
SIZES = [512, 768, 1024, 1536, 2048]
POSITIONS = 8


def level0():
    import openslide
    with openslide.OpenSlide(REAL_SVS) as s:
        rgba = np.asarray(s.read_region((0, 0), 0, s.dimensions)).astype(np.float64)
    alpha = rgba[..., 3:] / 255
    return (rgba[..., :3] * alpha + 255 * (1 - alpha)).round().astype(np.uint8)


def stained(rgb):
    hi, lo = rgb.max(axis=2).astype(int), rgb.min(axis=2).astype(int)
    return (hi >= 40) & (hi - lo > 0.12 * hi)


def crops(image, size):
    """(x, y) of up to POSITIONS crops of `size` px at least half stained, evenly spaced."""
    mask = stained(image)
    h, w = mask.shape
    step = size // 4
    ok = [(x, y) for y in range(0, h - size + 1, step) for x in range(0, w - size + 1, step)
          if mask[y:y + size, x:x + size].mean() >= (0.5 if size <= 1024 else 1 / 3)]
    if len(ok) <= POSITIONS:
        return ok
    return [ok[int((i + 0.5) * len(ok) / POSITIONS)] for i in range(POSITIONS)]


def make(image, out, jpeg=False):
    from PIL import Image
    made = []
    for size in SIZES:
        for x, y in crops(image, size):
            path = os.path.join(out, f"crop-{size}-{x}-{y}.{'jpg' if jpeg else 'png'}")
            crop = Image.fromarray(image[y:y + size, x:x + size])
            crop.save(path, **({"quality": 90} if jpeg else {}))
            made.append((size, x, y, path))
    return made


def table_row(name, e, seconds):
    """A row of docs/info.md's accuracy table (bench/info_bench.py's columns)."""
    if e["mpp"] is None:
        return f"| {name} | {TRUTH} | none | | | no | {e['why']} | 0 | | {seconds:.2f} |"
    covers = "yes" if e["low"] <= TRUTH <= e["high"] else "**no**"
    cores = e["from_cores"]
    cores = f"{cores:.3f} ({100 * (cores / TRUTH - 1):+.0f}%)" if cores else "(used)"
    return (f"| {name} | {TRUTH} | {e['mpp']:.3f} | {100 * (e['mpp'] / TRUTH - 1):+.1f}% | "
            f"{e['low']:.3f}–{e['high']:.3f} | {covers} | "
            f"{e['why'] if e['uncertain'] else ''} | {e['whole_nuclei']} | {cores} | "
            f"{seconds:.2f} |")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    rows = "--rows" in sys.argv
    if not os.path.isfile(REAL_SVS):
        print(f"skipped: {REAL_SVS} is absent")
        return
    mltool = os.path.abspath(args[0])
    out = args[1] if len(args) > 1 else tempfile.mkdtemp(prefix="info_crop_bench_")
    os.makedirs(out, exist_ok=True)
    made = make(level0(), out, jpeg="--jpeg" in sys.argv)
    by_size = {}
    for size, x, y, path in made:
        t0 = time.perf_counter()
        e = json.loads(subprocess.check_output([mltool, "info", "--json", path]))["estimated_mpp"]
        seconds = time.perf_counter() - t0
        by_size.setdefault(size, []).append(e)
        if rows and size <= 1024:
            print(table_row(f"real crop {size} px at ({x}, {y})", e, seconds))
    print("| crop (px) | crops | intervals covering 0.499 | uncertain | errors (median, range) "
          "| errors of the certain ones | whole nuclei | reasons given |")
    print("|---|---|---|---|---|---|---|---|")
    for size, es in by_size.items():
        got = [e for e in es if e["mpp"]]
        errs = sorted((e["mpp"] / TRUTH - 1) * 100 for e in got)
        sure = sorted((e["mpp"] / TRUTH - 1) * 100 for e in got if not e["uncertain"])
        cover = sum(1 for e in got if e["low"] <= TRUTH <= e["high"])
        unsure = sum(1 for e in es if e["uncertain"])
        whys = sorted({e["why"].split(" (")[0] for e in es if e["uncertain"]})
        nuclei = sorted(e["whole_nuclei"] for e in es)

        def span(v):
            return f"{np.median(v):+.0f}% ({v[0]:+.0f} to {v[-1]:+.0f})" if v else "-"

        print(f"| {size} | {len(es)} | {cover} | {unsure} | {span(errs)} | {span(sure)} "
              f"| {nuclei[0]}–{nuclei[-1]} | {'; '.join(whys)} |")


if __name__ == "__main__":
    main()
