#!/usr/bin/env python3
"""The peer for bench_tfrecord: TensorFlow's own TFRecord writer and reader on the same
workload (64 MiB of random records of 1 KiB and 100 KiB, written with fsync, read back
with CRC checks, counted inside tf.data). Prints one JSON object: MB/s per case, best of REPEATS.

    tfrecord_tensorflow.py [REPEATS]      (TensorFlow venv: scripts/fixtures/tf_interop.sh)
"""
import json
import os
import sys
import tempfile
import time

import numpy as np
import tensorflow as tf

FILE_BYTES = 64 << 20
repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
out = {"tensorflow": tf.__version__}
with tempfile.TemporaryDirectory() as tmp:
    for size in (1 << 10, 100 << 10):
        record = np.random.default_rng(size).bytes(size)
        n = FILE_BYTES // size
        path = os.path.join(tmp, f"tf-{size}.tfrecord")
        best_w = best_r = 0.0
        for _ in range(repeats):
            t = time.perf_counter()
            with tf.io.TFRecordWriter(path) as w:
                for _ in range(n):
                    w.write(record)
            fd = os.open(path, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
            best_w = max(best_w, n * size / (time.perf_counter() - t) / 1e6)
            t = time.perf_counter()
            # Counted inside the tf.data graph, so Python's per-record cost is not measured.
            count = tf.data.TFRecordDataset(path, buffer_size=8 << 20).reduce(
                np.int64(0), lambda c, _: c + 1)
            assert int(count) == n
            best_r = max(best_r, n * size / (time.perf_counter() - t) / 1e6)
        out[f"write_{size // 1024}KiB_MBps"] = round(best_w, 1)
        out[f"read_{size // 1024}KiB_MBps"] = round(best_r, 1)
print(json.dumps(out))
