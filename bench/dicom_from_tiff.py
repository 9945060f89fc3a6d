#!/usr/bin/env python3
"""A JPEG-tiled pyramidal TIFF (bench/run-tile.sh's generated slides) as a DICOM WSI series,
its tiles copied as the frames without decoding (the JPEGTables merged in and a JFIF marker
put first, as wsidicomizer does for SVS files): one VL Whole Slide Microscopy Image instance
per pyramid level, TILED_FULL, JPEG baseline, YBR_FULL_422, one fragment per frame. For
bench/run-tile-dicom.sh.

    dicom_from_tiff.py SLIDE.tif OUTDIR [--mpp 0.25]
"""
import argparse
import os
import sys

import tifffile
from pydicom.encaps import encapsulate
from pydicom.uid import JPEGBaseline8Bit, generate_uid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts",
                                "fixtures"))
from dicom_series import wsi_dataset, wsi_image  # noqa: E402

JFIF = bytes([0xFF, 0xE0, 0, 16]) + b"JFIF\0" + bytes([1, 1, 0, 0, 1, 0, 1, 0, 0])


def frames(path, page):
    tables = page.jpegtables[2:-2] if page.jpegtables else b""
    with open(path, "rb") as f:
        for offset, count in zip(page.dataoffsets, page.databytecounts):
            f.seek(offset)
            raw = f.read(count)
            yield b"\xff\xd8" + JFIF + tables + raw[2:]


def instance(path, page, level, ids, mpp):
    ds = wsi_dataset(level, ids, page.imagewidth, page.imagelength, page.tilewidth,
                     JPEGBaseline8Bit)
    ds.Columns, ds.Rows = page.tilewidth, page.tilelength
    data = list(frames(path, page))
    wsi_image(ds, len(data), "YBR_FULL_422", "TILED_FULL", mpp * 2 ** level / 1000)
    ds.PixelData = encapsulate(data)
    ds["PixelData"].VR = "OB"
    return ds


def main():
    p = argparse.ArgumentParser()
    p.add_argument("slide")
    p.add_argument("out")
    p.add_argument("--mpp", type=float, default=0.25)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    ids = (generate_uid(), generate_uid(), generate_uid())
    with tifffile.TiffFile(args.slide) as tf:
        pages = [pg for pg in tf.pages if pg.is_tiled and pg.compression == 7]
        for level, page in enumerate(pages):
            if page.photometric != 6:
                raise SystemExit(f"{args.slide}: page {level} is not YCbCr JPEG")
            instance(args.slide, page, level, ids, args.mpp).save_as(
                os.path.join(args.out, f"level-{level}.dcm"), enforce_file_format=True)


if __name__ == "__main__":
    main()
