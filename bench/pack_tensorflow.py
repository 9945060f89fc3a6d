#!/usr/bin/env python3
"""The peer for `mltool pack` (bench/run-pack.sh): TensorFlow's Python tf.train.Example +
tf.io.TFRecordWriter writing the same examples that mltool pack writes for a tile-unit
dataset: int64 `index`, int64 `label`, bytes `slide`, one record per (tile, label), spread
round-robin over the same number of shard files. The record list is given to it ready made
(the labels table already joined with keys.txt, outside the timing), so its figure covers
only building, serializing and writing the records; mltool's covers the whole pack (reading
and validating the labels, the split, the SHA-256 of features.npy, writing and the DALI
indexes). Prints one JSON object.

    pack_tensorflow.py STORE LABELS.csv OUTDIR SHARDS REPEATS
"""
import csv
import json
import os
import shutil
import sys
import time

import tensorflow as tf

store, labels_path, out, shards, repeats = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
with open(os.path.join(store, "keys.txt")) as f:
    row_of = {k.rstrip("\n"): i for i, k in enumerate(f)}
names = {}
records = []
with open(labels_path, newline="") as f:
    for r in csv.DictReader(f):
        label = names.setdefault(r["label"], len(names))
        key = r["key"]
        records.append((row_of[key], label, key.rsplit("/", 1)[0].encode()))

best = None
for _ in range(repeats):
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    t = time.perf_counter()
    writers = [tf.io.TFRecordWriter(os.path.join(out, f"train-{i:05d}-of-{shards:05d}.tfrecord"))
               for i in range(shards)]
    for n, (index, label, slide) in enumerate(records):
        ex = tf.train.Example(features=tf.train.Features(feature={
            "index": tf.train.Feature(int64_list=tf.train.Int64List(value=[index])),
            "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
            "slide": tf.train.Feature(bytes_list=tf.train.BytesList(value=[slide])),
        }))
        writers[n % shards].write(ex.SerializeToString())
    for w in writers:
        w.close()
    seconds = time.perf_counter() - t
    best = seconds if best is None else min(best, seconds)
size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
print(json.dumps({"tensorflow": tf.__version__, "records": len(records), "bytes": size, "seconds": best}))
