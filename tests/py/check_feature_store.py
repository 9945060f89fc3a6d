#!/usr/bin/env python3
"""Check a feature store written with the test formula, using numpy as the reader.

Usage: check_feature_store.py DIR

Opens DIR/features.npy with np.load(mmap_mode="r") -- proving numpy reads what
mltool writes -- checks its shape and dtype against DIR/features.json and the
line count of DIR/keys.txt, and compares every value with the formula of
tests/unit/feature_store_fixture.hpp:
    row i, column j = ((i * 31 + j * 7) % 1000) / 100.0 - 5.0
computed in float64 and rounded to float32 (then to float16 for f16 stores, as
the writer rounds the float32 rows it is given). Prints "ok: N rows x D (dtype)"
and exits 0, or prints what differs and exits 1. Reads in blocks of rows, so
memory stays bounded for large stores.
"""

import json
import os
import sys

import numpy as np

BLOCK_ROWS = 1 << 16


def fail(message):
    print("check_feature_store.py: " + message, file=sys.stderr)
    sys.exit(1)


def expected_block(start, stop, dims, dtype):
    i = np.arange(start, stop, dtype=np.int64)[:, None]
    j = np.arange(dims, dtype=np.int64)[None, :]
    values = ((i * 31 + j * 7) % 1000) / 100.0 - 5.0
    return values.astype(np.float32).astype(dtype)


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    store = argv[1]
    manifest_path = os.path.join(store, "features.json")
    matrix_path = os.path.join(store, "features.npy")
    keys_path = os.path.join(store, "keys.txt")

    with open(manifest_path, encoding="utf-8") as f:
        manifest = json.load(f)
    for field in ("format", "format_version", "rows", "dims", "dtype", "files"):
        if field not in manifest:
            fail("%s: missing field %r" % (manifest_path, field))
    if manifest["format"] != "mltool.features":
        fail("%s: format is %r, expected 'mltool.features'" % (manifest_path, manifest["format"]))
    if manifest["files"] != {"matrix": "features.npy", "keys": "keys.txt"}:
        fail("%s: unexpected files %r" % (manifest_path, manifest["files"]))
    rows, dims, dtype = manifest["rows"], manifest["dims"], np.dtype(manifest["dtype"])

    matrix = np.load(matrix_path, mmap_mode="r", allow_pickle=False)
    if matrix.shape != (rows, dims):
        fail("%s: shape %s, but features.json says (%d, %d)" % (matrix_path, matrix.shape, rows, dims))
    if matrix.dtype != dtype or matrix.dtype.byteorder not in ("<", "=", "|"):
        fail("%s: dtype %s, but features.json says %s" % (matrix_path, matrix.dtype.str, dtype))
    if not matrix.flags.c_contiguous:
        fail("%s: not C-contiguous" % matrix_path)

    with open(keys_path, "rb") as f:
        keys = f.read().split(b"\n")
    if keys and keys[-1] == b"":
        keys.pop()
    if len(keys) != rows:
        fail("%s: %d keys, but features.json says rows = %d" % (keys_path, len(keys), rows))
    for n, key in enumerate(keys, 1):
        if not key or b"\r" in key:
            fail("%s: line %d: empty key or carriage return" % (keys_path, n))
    if len(set(keys)) != len(keys):
        fail("%s: duplicate keys" % keys_path)

    for start in range(0, rows, BLOCK_ROWS):
        stop = min(rows, start + BLOCK_ROWS)
        got = np.asarray(matrix[start:stop])
        want = expected_block(start, stop, dims, dtype)
        bad = np.argwhere(got.view(np.uint8).reshape(got.shape[0], -1)
                          != want.view(np.uint8).reshape(want.shape[0], -1))
        if bad.size:
            r, c = bad[0]
            r += start
            c //= dtype.itemsize
            fail("%s: row %d, column %d is %r, expected %r (%d mismatching bytes in rows %d..%d)"
                 % (matrix_path, r, c, float(matrix[r, c]), float(want[r - start, c]), len(bad), start, stop - 1))

    print("ok: %d rows x %d (%s)" % (rows, dims, dtype.name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
