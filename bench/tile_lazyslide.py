#!/usr/bin/env python3
"""The LazySlide peer of bench/run-tile-lazyslide.sh: LazySlide's own tissue detection and
tiling, then every tile read, on one slide, in one process. Prints one JSON object.

    tile_lazyslide.py SLIDE [--mpp 0.5] [--tile-size 256] [--min-tissue 0.5]

What is timed (`seconds`), after every import, LazySlide's lazy ones included:

    wsi = wsidata.open_wsi(SLIDE, store=None)          # no zarr store written
    zs.pp.find_tissues(wsi)                             # defaults: level "auto", Otsu + artifacts
    zs.pp.tile_tissues(wsi, TILE, mpp=MPP, background_fraction=1 - MIN_TISSUE)
    for tile in wsi.iter.tile_images("tiles"): ...      # every tile's pixels, as numpy arrays

`background_fraction` drops a tile with more than that share of background, so
1 - --min-tissue keeps a tile with at least --min-tissue tissue, as mltool's --min-tissue.
Runs in the venv that bench/run-tile-lazyslide.sh makes (bench/requirements-lazyslide.txt),
never in the project's.
"""
import argparse
import json
import sys
import time

t_start = time.perf_counter()
import lazyslide as zs  # noqa: E402
import wsidata  # noqa: E402
from wsidata import open_wsi  # noqa: E402

# Imported by LazySlide on first use, not at `import lazyslide`: reading the first tile imports
# torch (wsidata's stain normaliser module, 7 s on 2 cores), open_wsi openslide and
# find_tissues Pillow's decoder.
# They are imports, so they are paid here, untimed; `imported_while_timed` lists any other.
import openslide  # noqa: E402,F401
import PIL.ImageFile  # noqa: E402,F401
import torch  # noqa: E402,F401
import wsidata._normalizer  # noqa: E402,F401

import_seconds = time.perf_counter() - t_start

ap = argparse.ArgumentParser()
ap.add_argument("slide")
ap.add_argument("--mpp", type=float, default=0.5)
ap.add_argument("--tile-size", type=int, default=256)
ap.add_argument("--min-tissue", type=float, default=0.5)
args = ap.parse_args()

modules = set(sys.modules)
t0 = time.perf_counter()
wsi = open_wsi(args.slide, store=None)
zs.pp.find_tissues(wsi)
t1 = time.perf_counter()
zs.pp.tile_tissues(wsi, args.tile_size, mpp=args.mpp, background_fraction=1 - args.min_tissue)
t2 = time.perf_counter()
tiles = 0
checksum = 0
shape = None
for tile in wsi.iter.tile_images("tiles"):
    tiles += 1
    checksum += int(tile.image[0, 0, 0])  # the pixels are there
    shape = list(tile.image.shape)
t3 = time.perf_counter()

import cv2  # noqa: E402

print(json.dumps({
    "tool": "lazyslide",
    "seconds": t3 - t0,
    "find_tissues": t1 - t0,
    "tile_tissues": t2 - t1,
    "read_tiles": t3 - t2,
    "tiles": tiles,
    "tile_shape": shape,
    "tissues": int(len(wsi["tissues"])) if "tissues" in wsi.shapes else 0,
    "checksum": checksum,
    "import_seconds": import_seconds,
    "imported_while_timed": sorted(m for m in set(sys.modules) - modules if "." not in m),
    "reader": type(wsi.reader).__name__,
    "versions": {"lazyslide": zs.__version__, "wsidata": wsidata.__version__,
                 "openslide": openslide.__library_version__, "opencv": cv2.__version__,
                 "torch": torch.__version__, "python": sys.version.split()[0]},
}))
