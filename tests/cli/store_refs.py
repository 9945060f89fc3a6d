"""Independent readers of mltool's stores for the CLI tests: python-lmdb and Pillow for the
tile store, numpy for the feature store, as docs/formats.md describes them; tifffile for the
JPEG tiles a slide's TIFF holds and pydicom for the frames of a DICOM WSI level, as tile
--passthrough must store them."""
import io
import json
import os

import lmdb
import numpy as np
from PIL import Image

from cli_common import expect


def read_tiles(path):
    """(keys, [PIL images]) of the complete slides of a tile store, in key order: slides with
    a done/ marker, each slide's keys sorted, slides in key order."""
    env = lmdb.open(path, readonly=True, lock=False, max_dbs=8)
    try:
        with env.begin() as txn:
            tiles_db = env.open_db(b"tiles", txn=txn, create=False)
            meta_db = env.open_db(b"meta", txn=txn, create=False)
            done = [k[5:] for k, _ in txn.cursor(db=meta_db) if k.startswith(b"done/")]
            tiles = {bytes(k): bytes(v) for k, v in txn.cursor(db=tiles_db)}
    finally:
        env.close()
    keys = sorted(k for k in tiles if any(k.startswith(d + b"/") for d in done))
    return [k.decode("ascii") for k in keys], [Image.open(io.BytesIO(tiles[k])) for k in keys]


def read_tile_store(path):
    """(meta, tiles) of a tile store, every record and tile, complete or not: meta decoded
    as JSON, tiles as bytes, in key order."""
    env = lmdb.open(path, readonly=True, lock=False, max_dbs=8)
    try:
        with env.begin() as txn:
            tiles = dict(txn.cursor(db=env.open_db(b"tiles", txn=txn, create=False)))
            meta = dict(txn.cursor(db=env.open_db(b"meta", txn=txn, create=False)))
    finally:
        env.close()
    return ({k.decode(): json.loads(bytes(v)) for k, v in meta.items()},
            {k.decode(): bytes(v) for k, v in sorted(tiles.items())})


JFIF = bytes([0xFF, 0xE0, 0, 16]) + b"JFIF\0" + bytes([1, 1, 0, 0, 1, 0, 1, 0, 0])
ADOBE_RGB = bytes([0xFF, 0xEE, 0, 14]) + b"Adobe" + bytes([0, 100, 0, 0, 0, 0, 0])


def own_tiff_jpeg(path, level_size, col, row):
    """(the standalone JPEG tile --passthrough must store for TIFF tile (col, row) of the
    directory of size `level_size`, whether the TIFF codes it RGB): SOI, the colour marker
    (Adobe transform 0 for Photometric RGB, JFIF for YCbCr), the JPEGTables tag without its
    SOI/EOI, the raw tile after its SOI — rebuilt with tifffile."""
    import tifffile  # only the tests of passthrough need it
    with tifffile.TiffFile(path) as tf:
        page = next(p for p in tf.pages if (p.imagewidth, p.imagelength) == tuple(level_size))
        i = row * -(-page.imagewidth // page.tilewidth) + col
        with open(path, "rb") as f:
            f.seek(page.dataoffsets[i])
            raw = f.read(page.databytecounts[i])
        tables = page.jpegtables or b""
        rgb = int(page.photometric) == 2
    expect(raw[:2] == b"\xff\xd8" and raw[2:4] not in (b"\xff\xe0", b"\xff\xee"),
           f"{path}: raw tile {i}: SOI and no JFIF/Adobe segment expected")
    marker = ADOBE_RGB if rgb else JFIF
    return b"\xff\xd8" + marker + (tables[2:-2] if tables else b"") + raw[2:], rgb


def jpeg_colour(jpeg):
    """How libjpeg-turbo (and Pillow) read a 3-component JPEG's colour from its own markers:
    JFIF means YCbCr, else Adobe APP14's transform (0 RGB, 1 YCbCr), else component ids 1, 2, 3
    YCbCr and 'R', 'G', 'B' RGB; None where it would only guess, or JFIF and Adobe disagree."""
    pos, jfif, adobe, ids = 2, False, None, b""
    while jpeg[pos + 1] not in (0xDA, 0xD9):
        marker, n = jpeg[pos + 1], int.from_bytes(jpeg[pos + 2:pos + 4], "big")
        body = jpeg[pos + 4:pos + 2 + n]
        jfif |= marker == 0xE0 and body.startswith(b"JFIF")
        if marker == 0xEE and body.startswith(b"Adobe"):
            adobe = body[11]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            ids = bytes(body[6 + 3 * c] for c in range(body[5]))
        pos += 2 + n
    if len(ids) != 3 or (jfif and adobe is not None):
        return None
    if jfif or adobe == 1 or (adobe is None and ids == b"\x01\x02\x03"):
        return "ycbcr"
    if adobe == 0 or (adobe is None and ids == b"RGB"):
        return "rgb"
    return None


def own_dicom_jpeg(directory, level_size, col, row):
    """(the JPEG tile --passthrough must store for frame (col, row) of the DICOM WSI level of
    size `level_size` in `directory`, the frame as pydicom reads it, the instance's dataset):
    the frame itself where its markers say the colour PhotometricInterpretation gives
    (YBR_FULL_422 YCbCr, RGB RGB), else SOI, the marker (JFIF, Adobe transform 0) and the
    frame after its SOI without its JFIF/Adobe segments."""
    import pydicom  # only the DICOM checks need it
    from pydicom.encaps import get_frame
    for name in sorted(os.listdir(directory)):
        ds = pydicom.dcmread(os.path.join(directory, name))
        if (ds.ImageType[2] == "VOLUME" and
                (ds.TotalPixelMatrixColumns, ds.TotalPixelMatrixRows) == tuple(level_size)):
            break
    else:
        raise AssertionError(f"{directory}: no instance of {level_size}")
    across = -(-ds.TotalPixelMatrixColumns // ds.Columns)
    eot = ds.get("ExtendedOffsetTable")
    frame = get_frame(ds.PixelData, row * across + col, number_of_frames=int(ds.NumberOfFrames),
                      extended_offsets=(eot, ds.ExtendedOffsetTableLengths) if eot else None)
    want = "rgb" if ds.PhotometricInterpretation == "RGB" else "ycbcr"
    if jpeg_colour(frame) == want:
        return frame, frame, ds
    out, pos = bytearray(b"\xff\xd8" + (ADOBE_RGB if want == "rgb" else JFIF)), 2
    while frame[pos + 1] != 0xDA:
        end = pos + 2 + int.from_bytes(frame[pos + 2:pos + 4], "big")
        body = frame[pos + 4:end]
        if not ((frame[pos + 1] == 0xE0 and body.startswith(b"JFIF")) or
                (frame[pos + 1] == 0xEE and body.startswith(b"Adobe"))):
            out += frame[pos:end]
        pos = end
    return bytes(out + frame[pos:]), frame, ds


def load_store(d):
    """(matrix, keys, features.json) of a feature store, checked against each other."""
    meta = json.load(open(os.path.join(d, "features.json")))
    X = np.load(os.path.join(d, "features.npy"))
    keys = open(os.path.join(d, "keys.txt")).read().split("\n")[:-1]
    expect(X.shape == (meta["rows"], meta["dims"]) and len(keys) == meta["rows"],
           f"{d}: matrix {X.shape}, {len(keys)} keys, manifest {meta['rows']}")
    return X, keys, meta


def by_slide(keys):
    """slide -> its rows, in store order (the slide of a key is the part before its last /)."""
    out = {}
    for i, k in enumerate(keys):
        out.setdefault(k.rsplit("/", 1)[0], []).append(i)
    return out


def tile_geometry(store):
    """slide -> (its slides/ record, {key: (x, y)}), read with python-lmdb."""
    env = lmdb.open(store, readonly=True, max_dbs=8, lock=False)
    meta = env.open_db(b"meta", create=False)
    out = {}
    with env.begin(db=meta) as txn:
        for k, v in txn.cursor():
            if k.startswith(b"slides/"):
                slide = k[7:].decode()
                t = json.loads(txn.get(b"tiles/" + k[7:]))
                xy = {f"{slide}/{r:06d}_{c:06d}": (x, y)
                      for r, c, x, y in zip(t["row"], t["col"], t["x"], t["y"])}
                out[slide] = (json.loads(v), xy)
    env.close()
    return out
