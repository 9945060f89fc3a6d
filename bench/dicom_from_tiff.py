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

import tifffile
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.encaps import encapsulate
from pydicom.uid import JPEGBaseline8Bit, generate_uid

WSI = "1.2.840.10008.5.1.4.1.1.77.1.6"
JFIF = bytes([0xFF, 0xE0, 0, 16]) + b"JFIF\0" + bytes([1, 1, 0, 0, 1, 0, 1, 0, 0])


def frames(path, page):
    tables = page.jpegtables[2:-2] if page.jpegtables else b""
    with open(path, "rb") as f:
        for offset, count in zip(page.dataoffsets, page.databytecounts):
            f.seek(offset)
            raw = f.read(count)
            yield b"\xff\xd8" + JFIF + tables + raw[2:]


def instance(path, page, level, ids, mpp):
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = WSI
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = JPEGBaseline8Bit
    ds = Dataset()
    ds.file_meta = meta
    ds.SOPClassUID, ds.SOPInstanceUID = WSI, meta.MediaStorageSOPInstanceUID
    ds.StudyInstanceUID, ds.SeriesInstanceUID, ds.FrameOfReferenceUID = ids
    ds.Modality = "SM"
    ds.ImageType = ["ORIGINAL", "PRIMARY" if level == 0 else "DERIVED", "VOLUME", "NONE"]
    ds.TotalPixelMatrixColumns, ds.TotalPixelMatrixRows = page.imagewidth, page.imagelength
    ds.Columns, ds.Rows = page.tilewidth, page.tilelength
    data = list(frames(path, page))
    ds.NumberOfFrames = len(data)
    ds.SamplesPerPixel, ds.PlanarConfiguration = 3, 0
    ds.PhotometricInterpretation = "YBR_FULL_422"
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 8, 8, 7, 0
    ds.TotalPixelMatrixFocalPlanes, ds.NumberOfOpticalPaths = 1, 1
    ds.DimensionOrganizationType = "TILED_FULL"
    spacing = mpp * 2 ** level / 1000
    measures = Dataset()
    measures.PixelSpacing = [spacing, spacing]
    measures.SliceThickness = 0.001
    shared = Dataset()
    shared.PixelMeasuresSequence = [measures]
    ds.SharedFunctionalGroupsSequence = [shared]
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
