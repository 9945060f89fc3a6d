#!/usr/bin/env python3
"""`mltool tile` of a DICOM WSI series over DICOMweb against the same series from local files,
side by side in one run (issue 41): Orthanc with its DICOMweb plugin on 127.0.0.1
(tests/cli/orthanc_server.py) serves a generated all-tissue series (SIZE x SIZE at 0.25 µm/px,
256-px JPEG baseline frames, Q80, 257 distinct ones repeated; levels down to 1/4;
scripts/fixtures/dicom_series.py's headers), and both runs pass the frames through:

    mltool tile SERIES -o STORE --level 0 --tile-size 256 --threads $(nproc)   (local files)
    mltool tile URL    -o STORE --level 0 --tile-size 256 --threads $(nproc)   (DICOMweb)

the URL with the default --dicomweb-connections. Best wall time of REPEATS each; the stores'
tiles are checked equal; prints a markdown table with the ratio, the peak RSS of each run
(/usr/bin/time -v, where installed) and the machine.

    dicomweb_bench.py MLTOOL [--size 16384] [--repeats 3] [--out DIR]

Exit 77 (skipped) without Orthanc. About a minute on 2 cores at the default size.
"""
import argparse
import io
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts", "fixtures"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "cli"))
from dicom_series import wsi_dataset, wsi_image  # noqa: E402
from orthanc_server import Orthanc, available  # noqa: E402
from store_refs import read_tile_store  # noqa: E402

TILE = 256


def frames(size, seed, distinct=257):
    """`size` x `size` of textured pink tissue as 256-px JPEG frames (row-major): `distinct`
    frames drawn once, then repeated in a shuffled order (encoding every frame of a 32768²
    level in Python would take longer than the runs measured; what the runs cost depends on
    the frames' count and size, not on their being all different)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:TILE, 0:TILE]
    drawn = []
    for i in range(min(distinct, (size // TILE) ** 2)):
        phase = rng.uniform(0, 6.28, 3)
        rgb = np.stack([200 + 40 * np.sin(xx / 7.0 + phase[0]) * np.cos(yy / 11.0),
                        90 + 50 * np.sin((xx + yy) / 13.0 + phase[1]),
                        170 + 40 * np.cos(xx / 17.0 - yy / 5.0 + phase[2])], -1)
        rgb += rng.normal(0, 12, rgb.shape)
        buf = io.BytesIO()
        Image.fromarray(rgb.clip(0, 255).astype(np.uint8)).save(buf, "JPEG", quality=80)
        drawn.append(buf.getvalue())
    return [drawn[i] for i in rng.integers(0, len(drawn), (size // TILE) ** 2)]


def write_series(out, size):
    from pydicom.encaps import encapsulate
    from pydicom.uid import JPEGBaseline8Bit, generate_uid
    os.makedirs(out, exist_ok=True)
    ids = (generate_uid(), generate_uid(), generate_uid())
    for level in range(3):
        side = size >> level
        ds = wsi_dataset(level, ids, side, side, TILE, JPEGBaseline8Bit)
        data = frames(side, level)
        wsi_image(ds, len(data), "YBR_FULL_422", "TILED_FULL", 0.00025 * 2 ** level)
        ds.PixelData = encapsulate(data)
        ds["PixelData"].VR = "OB"
        ds.save_as(os.path.join(out, f"level-{level}.dcm"), enforce_file_format=True)


def tile(mltool, slide, store, threads):
    """(wall seconds, peak RSS MiB or None) of one tile run (RSS by /usr/bin/time -v)."""
    shutil.rmtree(store, ignore_errors=True)
    timed = ["/usr/bin/time", "-v", "-o", store + ".time"] if os.path.exists("/usr/bin/time") else []
    t0 = time.perf_counter()
    subprocess.run([*timed, mltool, "tile", slide, "-o", store, "--level", "0", "--tile-size",
                    str(TILE), "--threads", str(threads), "-q"], check=True)
    wall = time.perf_counter() - t0
    rss = None
    if timed:
        for line in open(store + ".time"):
            if "Maximum resident set size" in line:
                rss = int(line.rsplit(":", 1)[1]) / 1024
    return wall, rss


def machine():
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                  if line.startswith("model name")), platform.processor())
    return f"{model}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mltool")
    p.add_argument("--size", type=int, default=16384)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out")
    args = p.parse_args()
    why = available()
    if why:
        print(f"skipped: {why}")
        sys.exit(77)
    threads = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as d:
        write_series(os.path.join(d, "series"), args.size)
        server = Orthanc(os.path.join(d, "orthanc"))
        try:
            url = server.upload(os.path.join(d, "series"))
            times = {}
            for label, slide in (("local files", os.path.join(d, "series")), ("DICOMweb", url)):
                tile(args.mltool, slide, os.path.join(d, "warm"), threads)  # caches warm
                runs = [tile(args.mltool, slide, os.path.join(d, label), threads)
                        for _ in range(args.repeats)]
                times[label] = min(runs)
            a = read_tile_store(os.path.join(d, "local files"))[1]
            b = read_tile_store(os.path.join(d, "DICOMweb"))[1]
            same = sorted(v for v in a.values()) == sorted(v for v in b.values())
        finally:
            server.stop()
    n = (args.size // TILE) ** 2
    lines = [f"machine: {machine()}; {threads} threads; Orthanc 1.10 + DICOMweb plugin 1.7 "
             f"on 127.0.0.1; {args.size} x {args.size} series, {n} frames at level 0; best of "
             f"{args.repeats}; tiles equal: {same}", "",
             "| input | tiles | wall s | tiles/s | peak RSS MiB |", "|---|---:|---:|---:|---:|"]
    for label, (t, rss) in times.items():
        lines.append(f"| {label} | {n} | {t:.2f} | {n / t:.0f} | "
                     f"{'' if rss is None else f'{rss:.0f}'} |")
    ratio = times["local files"][0] / times["DICOMweb"][0]
    lines += ["", f"DICOMweb rate / local rate: {ratio:.2f}x"]
    text = "\n".join(lines)
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "dicomweb-bench.md"), "w") as f:
            f.write(text + "\n")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
