"""mltool pack, end to end against independent references: feature stores written with numpy
by hand (docs/formats.md#feature-store), shards read back with a pure-Python TFRecord reader
(every masked CRC-32C checked, CRC from a table built here) and a minimal protobuf decoder of
tf.train.Example, so nothing of mltool's own record code takes part in the checking.

    pack_test.py MLTOOL [MLTOOL_TESTGEN] [TEST...]   # TEST: check_* names without check_

MLTOOL_TESTGEN is accepted for symmetry with the other CLI tests and not used (the stores
are written with numpy). Each check prints "ok: NAME (seconds)"; all run, and the script
exits 1 if any failed.
"""
import collections
import csv
import hashlib
import json
import os
import random
import shutil
import sys

import numpy as np

from cli_common import (expect, run_checks, run_json, second_writer_refused, tmp,
                        write_feature_store)
from tfrecord_codec import decode_example, frames

mltool = os.path.abspath(sys.argv[1])
rest = sys.argv[2:]
if rest and os.path.sep in rest[0]:  # MLTOOL_TESTGEN (unused)
    rest = rest[1:]
only = set(rest)

SLIDES = 8
DIMS = 8

def read_dataset(d):
    """(manifest, {split: [[record dict per record] per shard]}), framing and .idx checked."""
    manifest = json.load(open(os.path.join(d, "dataset.json")))
    for k in ("format", "format_version", "created_by", "features", "labels", "unit",
              "record_features", "tile_store", "records", "seed", "shards_per_split",
              "splits", "group_split", "dedupe", "excluded"):
        expect(k in manifest, f"dataset.json lacks {k}")
    expect(manifest["format"] == "mltool.dataset" and manifest["format_version"] == 1,
           "dataset.json format")
    kinds = {"int64": "int64", "int64_list": "int64", "bytes": "bytes"}
    out, total = {}, 0
    for split, s in manifest["splits"].items():
        expect(len(s["shards"]) == manifest["shards_per_split"], f"{split}: shard count")
        shards = []
        hist_split = [0] * len(manifest["labels"]["names"])
        for i, sh in enumerate(s["shards"]):
            n = manifest["shards_per_split"]
            expect(sh["file"] == f"{split}-{i:05d}-of-{n:05d}.tfrecord", f"shard name {sh['file']}")
            path = os.path.join(d, sh["file"])
            fr = frames(path)
            expect(os.path.getsize(path) == sh["bytes"], f"{sh['file']}: bytes")
            expect(len(fr) == sh["records"], f"{sh['file']}: {len(fr)} records, manifest "
                   f"says {sh['records']}")
            idx = open(os.path.join(d, sh["index"])).read()
            expect(sh["index"] == sh["file"][:-len(".tfrecord")] + ".idx", "index name")
            want = "".join(f"{o} {n}\n" for o, n, _ in fr)
            expect(idx == want, f"{sh['index']} does not match the framing")
            recs = []
            hist = [0] * len(hist_split)
            for _, _, payload in fr:
                ex = decode_example(payload)
                expect(set(ex) == set(manifest["record_features"]),
                       f"record features {sorted(ex)} vs {sorted(manifest['record_features'])}")
                r = {}
                for name, (kind, values) in ex.items():
                    mk = manifest["record_features"][name]
                    expect(kind == kinds[mk], f"feature {name}: {kind}, manifest {mk}")
                    if mk == "int64_list":
                        r[name] = values
                    else:
                        expect(len(values) == 1, f"feature {name}: {len(values)} values")
                        r[name] = values[0].decode() if kind == "bytes" else values[0]
                hist[r["label"]] += 1
                recs.append(r)
            expect(hist == sh["label_histogram"], f"{sh['file']}: histogram {hist} vs "
                   f"{sh['label_histogram']}")
            hist_split = [a + b for a, b in zip(hist_split, hist)]
            shards.append(recs)
        counts = [len(r) for r in shards]
        expect(max(counts) - min(counts) <= 1, f"{split}: unbalanced shards {counts}")
        expect(counts == sorted(counts, reverse=True), f"{split}: bigger shards not first {counts}")
        for lab in range(len(hist_split)):
            per = [sh["label_histogram"][lab] for sh in s["shards"]]
            expect(max(per) - min(per) <= 1, f"{split}: label {lab} unbalanced over shards {per}")
        expect(sum(counts) == s["records"], f"{split}: records")
        expect(hist_split == s["label_histogram"], f"{split}: histogram")
        total += sum(counts)
        out[split] = shards
    expect(total == manifest["records"], f"records {total} vs {manifest['records']}")
    return manifest, out


# ---------------------------------------------------------------- fixtures

def write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)


STORE = {}  # keys, row_of, slide_rows, tile labels rows, patient of slide


def fixtures():
    rng = random.Random(7)
    keys = []
    for i in range(SLIDES):
        for t in range(6 + 3 * i):
            keys.append(f"S{i}/{t // 5:06d}_{t % 5:06d}")
    rng.shuffle(keys)  # rows of one slide are not contiguous: indices must be looked up
    mat = np.random.default_rng(1).standard_normal((len(keys), DIMS)).astype(np.float32)
    write_feature_store(tmp("feat"), mat, keys)
    row_of = {k: i for i, k in enumerate(keys)}
    slide_rows = collections.defaultdict(list)
    for k, i in row_of.items():
        slide_rows[k.rsplit("/", 1)[0]].append(i)
    # tile labels: ~80% of the tiles, a few with two labels (captions), patients of 2 slides
    rows = []
    for k in sorted(keys):
        if rng.random() < 0.8:
            rows.append((k, rng.choice(["tumor", "normal", "stroma"]),
                         f"P{int(k[1:k.index('/')]) // 2}"))
    extra = [(k, "necrosis" if lab != "necrosis" else "tumor", p) for k, lab, p in rows[:5]]
    rows += extra
    write_csv(tmp("labels.csv"), ["key", "label", "patient"], rows)
    # slide-level labels
    slides = [(f"S{i}", str(i % 3)) for i in range(SLIDES)]
    write_csv(tmp("slides.csv"), ["key", "label"], slides)
    # a labels key that is not in the store
    write_csv(tmp("missing.csv"), ["key", "label"], [r[:2] for r in rows[:10]] +
              [("S99/000000_000000", "tumor"), ("nope", "normal")])
    # dedupe store: rows 7 and 11 copies of row 3
    dmat = mat.copy()
    dmat[7] = dmat[3]
    dmat[11] = dmat[3]
    write_feature_store(tmp("dfeat"), dmat, keys)
    write_csv(tmp("dlabels.csv"), ["key", "label"], [(k, "a") for k in keys])
    STORE.update(keys=keys, row_of=row_of, slide_rows=slide_rows, rows=rows, slides=slides)
    return f"{len(keys)} rows, {len(rows)} tile labels, {SLIDES} slides"


def pack(*args):
    """mltool pack ARGS --json; (code, summary or None, stderr)."""
    return run_json([mltool, "pack", *args, "--json"])


def pack_ok(*args):
    code, summary, err = pack(*args)
    expect(code == 0, f"pack {' '.join(args)}: exit {code}: {err.strip()}")
    return summary


def all_records(splits):
    return [(split, r) for split, shards in splits.items() for recs in shards for r in recs]


def check_tile_records(out, manifest, splits, expected_pairs, group_of):
    names = manifest["labels"]["names"]
    seen = collections.Counter()
    for split, r in all_records(splits):
        expect(set(r) == {"index", "label", "slide"}, f"record features {sorted(r)}")
        key = STORE["keys"][r["index"]]
        seen[(key, names[r["label"]])] += 1
        expect(r["slide"] == key.rsplit("/", 1)[0], f"slide {r['slide']} for {key}")
        g = group_of(key, r)
        expect(manifest["group_split"].get(g) == split,
               f"group {g} in {split}, manifest says {manifest['group_split'].get(g)}")
    expect(set(seen) == expected_pairs, f"{len(expected_pairs - set(seen))} (key, label) "
           f"missing, {len(set(seen) - expected_pairs)} unexpected")
    twice = [p for p, n in seen.items() if n > 1]
    expect(not twice, f"packed more than once: {twice[:3]}")
    # groups never straddle splits
    split_of = {}
    for split, r in all_records(splits):
        g = group_of(STORE["keys"][r["index"]], r)
        expect(split_of.setdefault(g, split) == split, f"group {g} in two splits")
    for split, s in manifest["splits"].items():
        expect(s["groups"] == sum(1 for v in manifest["group_split"].values() if v == split),
               f"{split}: groups")


# ---------------------------------------------------------------- checks

def check_tile():
    s = pack_ok(tmp("feat"), "--labels", tmp("labels.csv"), "-o", tmp("ds_tile"),
                "--shards", "3", "--split", "train=0.6,val=0.2,test=0.2", "--seed", "5")
    manifest, splits = read_dataset(tmp("ds_tile"))
    expect(manifest["unit"] == "tile" and manifest["tile_store"] is None, "unit/tile_store")
    expect(manifest["record_features"] == {"index": "int64", "label": "int64", "slide": "bytes"},
           f"record_features {manifest['record_features']}")
    expect(sorted(manifest["labels"]["names"]) == manifest["labels"]["names"] and
           set(manifest["labels"]["names"]) == {r[1] for r in STORE["rows"]}, "label map")
    expect(manifest["labels"]["group_column"] is None, "group_column")
    pairs = {(k, lab) for k, lab, _ in STORE["rows"]}
    check_tile_records(tmp("ds_tile"), manifest, splits, pairs,
                       lambda key, r: key.rsplit("/", 1)[0])
    expect(s["records"] == len(pairs) == manifest["records"], f"summary records {s['records']}")
    expect(len(s["shards"]) == 9, "summary shards")
    for k in ("missing_keys", "invalid_rows", "duplicate_labels", "duplicate_rows",
              "empty_bags"):
        expect(s[k] == 0 and manifest["excluded"].get(k, manifest["dedupe"].get(k)) == 0,
               f"{k} = {s[k]}")
    expect(len(set(manifest["group_split"].values())) >= 2, "every slide in one split")


def check_group_by_patient():
    pack_ok(tmp("feat"), "--labels", tmp("labels.csv"), "-o", tmp("ds_pat"), "--shards", "2",
            "--group-by", "patient", "--seed", "3")
    manifest, splits = read_dataset(tmp("ds_pat"))
    expect(manifest["labels"]["group_column"] == "patient", "group_column")
    expect(set(manifest["group_split"]) == {f"P{i}" for i in range(SLIDES // 2)},
           f"groups {sorted(manifest['group_split'])}")
    pairs = {(k, lab) for k, lab, _ in STORE["rows"]}
    check_tile_records(tmp("ds_pat"), manifest, splits, pairs,
                       lambda key, r: f"P{int(key[1:key.index('/')]) // 2}")


def check_bag():
    pack_ok(tmp("feat"), "--labels", tmp("slides.csv"), "-o", tmp("ds_bag"), "--unit", "bag",
            "--shards", "2", "--split", "train=0.5,val=0.25,test=0.25")
    manifest, splits = read_dataset(tmp("ds_bag"))
    expect(manifest["record_features"] == {"indices": "int64_list", "label": "int64",
                                           "slide": "bytes"},
           f"record_features {manifest['record_features']}")
    names = manifest["labels"]["names"]
    expect(names == ["0", "1", "2"], f"names {names}")
    recs = all_records(splits)
    expect(len(recs) == SLIDES, f"{len(recs)} bags")
    want = dict(STORE["slides"])
    for split, r in recs:
        slide = r["slide"]
        expect(r["indices"] == sorted(STORE["slide_rows"][slide]),
               f"{slide}: indices {r['indices']} vs {sorted(STORE['slide_rows'][slide])}")
        expect(names[r["label"]] == want.pop(slide), f"{slide}: label")
        expect(manifest["group_split"][slide] == split, f"{slide}: split")
    expect(not want, f"bags missing: {want}")
    # slide-level labels in tile mode expand to every row of the slide
    pack_ok(tmp("feat"), "--labels", tmp("slides.csv"), "-o", tmp("ds_slide_tiles"))
    manifest, splits = read_dataset(tmp("ds_slide_tiles"))
    got = sorted(r["index"] for _, r in all_records(splits))
    expect(got == list(range(len(STORE["keys"]))), "slide labels do not reach every row once")


def check_errors():
    code, s, err = pack(tmp("feat"), "--labels", tmp("missing.csv"), "-o", tmp("ds_miss"))
    expect(code == 2, f"missing keys: exit {code}: {err.strip()}")
    expect("S99/000000_000000" in err and '"nope"' in err and "2 labels rows" in err,
           f"missing keys message: {err.strip()}")
    expect(not os.path.exists(tmp("ds_miss")), "output left behind by a failed pack")
    expect(not [f for f in os.listdir(tmp()) if ".partial-" in f], "partial directory left")
    s = pack_ok(tmp("feat"), "--labels", tmp("missing.csv"), "-o", tmp("ds_miss"),
                "--skip-missing")
    expect(s["missing_keys"] == 2 and s["records"] == 10, f"skip-missing summary {s}")
    manifest, _ = read_dataset(tmp("ds_miss"))
    expect(manifest["excluded"]["missing_keys"] == 2, "dataset.json missing_keys")
    # existing output
    code, s, err = pack(tmp("feat"), "--labels", tmp("slides.csv"), "-o", tmp("ds_miss"))
    expect(code == 1 and "exist" in err, f"existing output: exit {code}: {err.strip()}")
    expect(read_dataset(tmp("ds_miss"))[0]["records"] == 10, "existing output modified")
    s = pack_ok(tmp("feat"), "--labels", tmp("slides.csv"), "-o", tmp("ds_miss"),
                "--overwrite")
    manifest, _ = read_dataset(tmp("ds_miss"))
    expect(manifest["records"] == len(STORE["keys"]) and manifest["excluded"]["missing_keys"]
           == 0, "overwrite did not replace the dataset")
    expect(sorted(os.listdir(tmp("ds_miss"))) == sorted(
        ["dataset.json"] + [f"{sp}-00000-of-00001.{e}" for sp in ("train", "val", "test")
                            for e in ("tfrecord", "idx")]), "stale files after --overwrite")
    expect(not [f for f in os.listdir(tmp()) if f.startswith("ds_miss") and f != "ds_miss"],
           "the old directory was not removed")
    # bad splits
    for bad in ("train=0.5,val=0.4", "train=0.5,train=0.5", "tr ain=1", "train=x", "=1",
                "train=1.5,val=-0.5"):
        code, _, err = pack(tmp("feat"), "--labels", tmp("labels.csv"), "-o", tmp("ds_bad"),
                            "--split", bad)
        expect(code == 1, f"--split {bad}: exit {code}: {err.strip()}")
        expect(not os.path.exists(tmp("ds_bad")), f"--split {bad}: output written")
    code, _, err = pack(tmp("feat"), "--labels", tmp("labels.csv"), "-o", tmp("ds_bad"),
                        "--shards", "0")
    expect(code == 1, f"--shards 0: exit {code}: {err.strip()}")


def check_dedupe():
    s = pack_ok(tmp("dfeat"), "--labels", tmp("dlabels.csv"), "-o", tmp("ds_dd"), "--dedupe",
                "--split", "all=1")
    expect(s["duplicate_rows"] == 2, f"duplicate_rows {s['duplicate_rows']}")
    manifest, splits = read_dataset(tmp("ds_dd"))
    expect(manifest["dedupe"] == {"enabled": True, "duplicate_rows": 2}, f"{manifest['dedupe']}")
    idx = collections.Counter(r["index"] for _, r in all_records(splits))
    expect(idx[3] == 3 and 7 not in idx and 11 not in idx, f"rows 3/7/11: {idx[3]} "
           f"{idx.get(7)} {idx.get(11)}")
    expect(sum(idx.values()) == len(STORE["keys"]), "records")
    # without --dedupe every row is its own
    s = pack_ok(tmp("dfeat"), "--labels", tmp("dlabels.csv"), "-o", tmp("ds_nodd"),
                "--split", "all=1")
    expect(s["duplicate_rows"] == 0, "duplicate_rows without --dedupe")
    # bags keep their length
    pack_ok(tmp("dfeat"), "--labels", tmp("slides.csv"), "-o", tmp("ds_ddbag"), "--dedupe",
            "--unit", "bag", "--split", "all=1")
    _, splits = read_dataset(tmp("ds_ddbag"))
    for _, r in all_records(splits):
        want = sorted(STORE["slide_rows"][r["slide"]])
        want_d = [3 if i in (7, 11) else i for i in want]
        expect(r["indices"] == want_d, f"{r['slide']}: dedupe bag {r['indices']} vs {want_d}")


def check_determinism():
    def digest(d):
        h = hashlib.sha256()
        for f in sorted(os.listdir(d)):
            if f.endswith((".tfrecord", ".idx")):
                h.update(f.encode() + open(os.path.join(d, f), "rb").read())
        return h.hexdigest()

    args = ["--labels", tmp("labels.csv"), "--shards", "3", "--seed", "11"]
    pack_ok(tmp("feat"), *args, "-o", tmp("det1"))
    pack_ok(tmp("feat"), *args, "-o", tmp("det2"), "--threads", "1")
    expect(digest(tmp("det1")) == digest(tmp("det2")), "same seed, different shards")
    m1 = json.load(open(tmp("det1", "dataset.json")))
    m2 = json.load(open(tmp("det2", "dataset.json")))
    expect(m1["splits"] == m2["splits"] and m1["group_split"] == m2["group_split"],
           "same seed, different dataset.json")
    # a store copied elsewhere gives the same shards
    shutil.copytree(tmp("feat"), tmp("feat2"))
    pack_ok(tmp("feat2"), *args, "-o", tmp("det3"))
    expect(digest(tmp("det1")) == digest(tmp("det3")), "shards depend on the store path")


def check_invalid_rows_and_gather():
    keys, s0 = STORE["keys"], sorted(STORE["slide_rows"]["S0"])
    s1 = sorted(STORE["slide_rows"]["S1"])
    mat = np.load(tmp("feat", "features.npy"))
    write_feature_store(tmp("ifeat"), mat, keys, invalid=s0)  # every row of S0 invalid
    write_csv(tmp("il.csv"), ["key", "label"], [("S0", "a"), ("S1", "b"), (keys[s0[0]], "c")])
    s = pack_ok(tmp("ifeat"), "--labels", tmp("il.csv"), "-o", tmp("ds_ib"), "--unit", "bag",
                "--split", "all=1")
    got = (s["records"], s["invalid_rows"], s["empty_bags"])
    expect(got == (1, len(s0) + 1, 2), f"bag (records, invalid_rows, empty_bags) = {got}")
    s = pack_ok(tmp("ifeat"), "--labels", tmp("il.csv"), "-o", tmp("ds_it"), "--split", "all=1")
    got = (s["records"], s["invalid_rows"])
    expect(got == (len(s1), len(s0) + 1), f"tile (records, invalid_rows) = {got}")
    _, splits = read_dataset(tmp("ds_it"))
    expect(sorted(r["index"] for _, r in all_records(splits)) == s1, "invalid rows packed")
    # tile labels of one slide gather into its bag; the slide label brings every row
    write_csv(tmp("g.csv"), ["key", "label"], [(keys[i], "x") for i in s1[:3]] +
              [(keys[s1[0]], "x"), ("S1", "x"), (keys[s0[1]], "x"), (keys[s0[0]], "x")])
    s = pack_ok(tmp("feat"), "--labels", tmp("g.csv"), "-o", tmp("ds_g"), "--unit", "bag",
                "--split", "all=1")
    expect(s["duplicate_labels"] == 4, f"duplicate_labels {s['duplicate_labels']}")
    _, splits = read_dataset(tmp("ds_g"))
    bags = {r["slide"]: r["indices"] for _, r in all_records(splits)}
    expect(bags == {"S1": s1, "S0": sorted(s0[:2])}, f"bags {bags}")


def check_one_writer():
    """Two packs to one output: the second exits 3 at once naming the output and the first's
    pid and host; the first publishes what a single run does."""
    args = [tmp("feat"), "--labels", tmp("labels.csv"), "--shards", "3", "--seed", "5"]
    pack_ok(*args, "-o", tmp("w_ref"))
    out = tmp("w_out")
    code, err = second_writer_refused([mltool, "pack", *args, "-o", out],
                                      [mltool, "pack", *args, "-o", out], out)
    expect(code == 0, f"the first pack exits 0 ({code}): {err}")
    m1, m2 = (json.load(open(os.path.join(d, "dataset.json"))) for d in (tmp("w_ref"), out))
    expect(m1["splits"] == m2["splits"], "the first pack's dataset.json differs from a single run's")
    expect(sorted(os.listdir(out)) == sorted(os.listdir(tmp("w_ref"))),
           f"the first pack's files {sorted(os.listdir(out))} differ from a single run's")
    shards = [f for f in os.listdir(out) if f.endswith((".tfrecord", ".idx"))]
    for f in shards:
        expect(open(os.path.join(out, f), "rb").read() == open(tmp("w_ref", f), "rb").read(),
               f"{f} differs from a single run's")


if __name__ == "__main__":
    run_checks("pack", [check_tile, check_group_by_patient, check_bag, check_errors,
                        check_dedupe, check_determinism,
                        check_invalid_rows_and_gather, check_one_writer], only, fixtures)
