"""Independent readers of mltool's stores for the CLI tests: python-lmdb and Pillow for the
tile store, numpy for the feature store, as docs/formats.md describes them; tifffile for the
JPEG tiles a slide's TIFF holds, as tile --passthrough must store them."""
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
