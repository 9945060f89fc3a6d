#!/usr/bin/env python3
"""The DeepZoomGenerator peer of bench/run-tile.sh: openslide-python's
DeepZoomGenerator(slide, tile_size, overlap=0, limit_bounds=False), every tile of the deepest
level (level 0 of the slide) in raster order, each encoded to JPEG with Pillow into memory,
in one process (the way people script it). Tiles are not written to disk, which favours the
peer slightly. Prints one JSON object.

    tile_deepzoom.py SLIDE [--tile-size 256] [--quality 90] [--max-tiles N]

With --max-tiles N below the level's tile count, a fixed subset is timed instead: every
k-th tile in raster order (k = ceil(total / N)), so the subset spans the whole slide
(background and tissue in their proportions); "subset": true and the whole-slide time is
extrapolated from the rate.
"""
import argparse
import io
import json
import math
import time

t_start = time.perf_counter()
import openslide  # noqa: E402  (the import is part of what a script pays)
from openslide.deepzoom import DeepZoomGenerator  # noqa: E402
import PIL  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("slide")
ap.add_argument("--tile-size", type=int, default=256)
ap.add_argument("--quality", type=int, default=90)
ap.add_argument("--max-tiles", type=int, default=0, help="0: every tile")
a = ap.parse_args()

slide = openslide.OpenSlide(a.slide)
dz = DeepZoomGenerator(slide, tile_size=a.tile_size, overlap=0, limit_bounds=False)
level = dz.level_count - 1
cols, rows = dz.level_tiles[level]
total = cols * rows
step = 1 if not a.max_tiles or total <= a.max_tiles else math.ceil(total / a.max_tiles)

t0 = time.perf_counter()
tiles = 0
nbytes = 0
for i in range(0, total, step):
    row, col = divmod(i, cols)
    buf = io.BytesIO()
    dz.get_tile(level, (col, row)).save(buf, format="JPEG", quality=a.quality)
    nbytes += buf.tell()
    tiles += 1
loop = time.perf_counter() - t0
rate = tiles / loop
print(json.dumps({
    "tiles": tiles, "level_tiles": total, "grid": [cols, rows], "subset": step > 1,
    "step": step, "loop_seconds": round(loop, 3),
    "setup_seconds": round(t0 - t_start, 3),
    "tiles_per_s": round(rate, 1),
    "whole_slide_seconds": round(total / rate + (t0 - t_start), 3),
    "jpeg_bytes": nbytes, "openslide": openslide.__library_version__,
    "openslide_python": openslide.__version__, "pillow": PIL.__version__,
}))
