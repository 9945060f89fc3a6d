#!/usr/bin/env python3
"""Why the µm/px estimated from the tissue moves with the pixel size: per slide of known µm/px
(scripts/fixtures/mpp_slides.py, as bench/info_bench.py), the whole nuclei's median diameter
in µm (nucleus_px × the true µm/px) measured by `mltool info` three ways:

- `default`: the regions info reads by default (8 boxes of 768 px: 154 µm a side at
  0.2 µm/px, the whole slide from 1 µm/px on), so the tissue read changes with the scale;
- `all tissue`: every region of the slide (--regions 64), the whole tissue at every scale;
- `same box`: one crop of the slide, the same µm at every scale (x 384-768, y 0-1344 µm: the
  tissue the 0.5-µm/px row reads by default), every region of it (--regions 64), stored
  losslessly.

A measurement that does not depend on the pixel size gives the same µm in a column; the
columns differ by the tissue read. Prints the markdown table of docs/info.md.

    info_scale_bench.py MLTOOL [OUTDIR]
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import info_bench  # noqa: E402  (its slides() and REAL_SVS)

SAME_BOX_UM = (384, 0, 384, 1344)  # x, y, width, height in µm


def nucleus_um(mltool, path, mpp, regions=None):
    args = [mltool, "info", "--json", path] + (["--regions", str(regions)] if regions else [])
    e = json.loads(subprocess.check_output(args))["estimated_mpp"]
    if not e["whole_nuclei"]:
        return "none"
    return (f"{e['nucleus_px'] * mpp:.2f} µm ({100 * (e['mpp'] / mpp - 1):+.1f}%, "
            f"{e['regions']} r, {e['whole_nuclei']} n)")


def same_box(path, mpp, out):
    import tifffile
    pixels = tifffile.imread(path)
    x, y, w, h = (round(v / mpp) for v in SAME_BOX_UM)
    crop = os.path.join(out, "box-" + os.path.basename(path))
    tifffile.imwrite(crop, pixels[y:y + h, x:x + w], tile=(256, 256), compression="zlib",
                     photometric="rgb")
    return crop


def main():
    mltool = os.path.abspath(sys.argv[1])
    out = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="info_scale_bench_")
    print("| slide | truth µm/px | default regions | all tissue | same box |")
    print("|---|---|---|---|---|")
    for s in info_bench.slides(out):
        if s["kind"] not in ("real", "realjpeg", "generated"):
            continue
        box = same_box(s["path"], s["mpp"], out)
        print(f"| {s['kind']} | {s['mpp']:g} | {nucleus_um(mltool, s['path'], s['mpp'])} | "
              f"{nucleus_um(mltool, s['path'], s['mpp'], 64)} | "
              f"{nucleus_um(mltool, box, s['mpp'], 64)} |", flush=True)


if __name__ == "__main__":
    main()
