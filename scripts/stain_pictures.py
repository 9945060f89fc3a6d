#!/usr/bin/env python3
"""Makes the before/after pictures of docs/stain.md with mltool itself, from the real slide
CMU-1-Small-Region.svs (../shared/slides).

    scripts/stain_pictures.py MLTOOL [OUTDIR]     (default docs/img/stain)

1. A 1024 × 1024 region of the slide at level 0 (the "first site"), and the same region
   re-stained as a second site: in optical density (Beer–Lambert, OD = -ln((I + 1) / 240)),
   each channel's density scaled by (0.75, 1.25, 0.9) — more red and blue absorbed less, green
   more: paler haematoxylin, deeper eosin — and I' = 240 exp(-OD') - 1. Both written as flat
   PNG images, which `mltool tile` reads with libvips.
2. The reference (--stain-reference): another 512 × 512 region of the slide, untinted: the
   target is the first site's stain.
3. Each image tiled (mltool tile --slide-mpp 0.5 --mpp 0.5 --tile-size 256 --tissue none) and
   extracted with a TorchScript identity model (x * 255, no resize, mean 0, std 1), so the
   rows of features.npy are the normalised tiles' pixels, put back in place here.
4. One PNG strip per comparison, each panel 256 px (the 1024-px region resized by Pillow,
   Lanczos; the strip reduced to 256 colours, to keep the files small): before.png (first site | second site), macenko.png (second site normalised:
   --stain-fit tile | --stain-fit slide) and reinhard.png (likewise).
"""
import io
import os
import subprocess
import sys
import tempfile

import numpy as np
import openslide
import torch
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SVS = os.path.normpath(os.path.join(ROOT, "..", "shared", "slides", "CMU-1-Small-Region.svs"))
sys.path.insert(0, os.path.join(ROOT, "tests", "cli"))
from store_refs import read_tile_store  # noqa: E402

REGION, REF, SIZE, PANEL = (600, 900), (1400, 1800), 1024, 256
OD_SCALE = np.array([0.75, 1.25, 0.9])


class Identity(torch.nn.Module):
    def forward(self, x):
        return x * 255.0


def sh(args):
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(args)}: exit {p.returncode}: {p.stderr[-2000:]}")


def restain(u8):
    od = -np.log((u8.astype(np.float64) + 1) / 240) * OD_SCALE
    return np.clip(np.rint(240 * np.exp(-od) - 1), 0, 255).astype(np.uint8)


def normalised(mltool, work, image, name, *args):
    """The image as mltool extract --stain-norm ... leaves its tiles, put back together."""
    store, out = os.path.join(work, name + ".lmdb"), os.path.join(work, name + ".features")
    sh([mltool, "tile", image, "-o", store, "--slide-mpp", "0.5", "--mpp", "0.5",
        "--tile-size", "256", "--tissue", "none", "--format", "png", "-q"])
    if not args:
        _, tiles = read_tile_store(store)
        keys = sorted(tiles)
        rows = [np.asarray(Image.open(io.BytesIO(tiles[k])).convert("RGB")) for k in keys]
    else:
        sh([mltool, "extract", store, "-o", out, "--model", os.path.join(work, "identity.pt"),
            "--input-size", "256", "--mean", "0,0,0", "--std", "1,1,1",
            "--allow-wide-features", "--batch", "16", *args, "-q"])
        x = np.load(os.path.join(out, "features.npy"))
        keys = open(os.path.join(out, "keys.txt")).read().split("\n")[:-1]
        rows = np.rint(x.reshape(-1, 3, 256, 256).transpose(0, 2, 3, 1)).astype(np.uint8)
    # Keys end in the tile's row and column (docs/formats.md#tile-store).
    places = [tuple(int(v) for v in k.split("/")[-1].split("_")) for k in keys]
    grid = np.zeros((256 * (1 + max(p[0] for p in places)),
                     256 * (1 + max(p[1] for p in places)), 3), np.uint8)
    for (r, c), t in zip(places, rows):
        grid[256 * r:256 * r + 256, 256 * c:256 * c + 256] = t
    return grid


def strip(panels, path):
    small = [Image.fromarray(p).resize((PANEL, PANEL), Image.LANCZOS) for p in panels]
    out = Image.new("RGB", (PANEL * len(small) + 8 * (len(small) - 1), PANEL), "white")
    for i, p in enumerate(small):
        out.paste(p, (i * (PANEL + 8), 0))
    out.quantize(256, dither=Image.Dither.NONE).save(path, optimize=True)  # a small PNG
    print(f"{path}: {os.path.getsize(path)} bytes")


def main():
    mltool = os.path.abspath(sys.argv[1])
    outdir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "docs", "img", "stain")
    os.makedirs(outdir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="stain-pictures-")
    torch.jit.script(Identity()).save(os.path.join(work, "identity.pt"))
    with openslide.OpenSlide(SVS) as s:
        first = np.asarray(s.read_region(REGION, 0, (SIZE, SIZE)).convert("RGB"))
        ref = np.asarray(s.read_region(REF, 0, (512, 512)).convert("RGB"))
    second = restain(first)
    paths = {}
    for name, u8 in (("first", first), ("second", second), ("reference", ref)):
        paths[name] = os.path.join(work, name + ".png")
        Image.fromarray(u8).save(paths[name])
    before = [normalised(mltool, work, paths[n], n) for n in ("first", "second")]
    strip(before, os.path.join(outdir, "before.png"))
    for method in ("macenko", "reinhard"):
        panels = [normalised(mltool, work, paths["second"], f"{method}_{fit}", "--stain-norm",
                             method, "--stain-reference", paths["reference"], "--stain-fit", fit)
                  for fit in ("tile", "slide")]
        strip(panels, os.path.join(outdir, f"{method}.png"))


main()
