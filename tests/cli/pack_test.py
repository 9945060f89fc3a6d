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
from schema_subset import validate
from tfrecord_codec import decode_example, frames

mltool = os.path.abspath(sys.argv[1])
rest = sys.argv[2:]
if rest and os.path.sep in rest[0]:  # MLTOOL_TESTGEN (unused)
    rest = rest[1:]
only = set(rest)

SLIDES = 8
DIMS = 8
SCHEMA = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                     "schemas", "dataset.schema.json")))

def read_dataset(d):
    """(manifest, {split: [[record dict per record] per shard]}), framing and .idx checked."""
    manifest = json.load(open(os.path.join(d, "dataset.json")))
    for k in ("format", "format_version", "created_by", "features", "labels", "unit",
              "record_features", "tile_store", "records", "seed", "shards_per_split",
              "splits", "group_split", "dedupe", "excluded"):
        expect(k in manifest, f"dataset.json lacks {k}")
    expect(manifest["format"] == "mltool.dataset" and manifest["format_version"] == 1,
           "dataset.json format")
    problems = validate(manifest, SCHEMA)
    expect(not problems, f"{d}/dataset.json breaks schemas/dataset.schema.json: {problems[:3]}")
    kinds = {"int64": "int64", "int64_list": "int64", "bytes": "bytes", "float": "float",
             "float_list": "float"}
    out, total = {}, 0
    for split, s in manifest["splits"].items():
        expect(len(s["shards"]) == manifest["shards_per_split"], f"{split}: shard count")
        shards = []
        # multilabel: names are the label columns, and there is no label histogram
        hist_split = [0] * (0 if manifest.get("task") == "multilabel" else
                            len(manifest["labels"]["names"]))
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
                    if mk.endswith("_list"):
                        r[name] = values
                    else:
                        expect(len(values) == 1, f"feature {name}: {len(values)} values")
                        r[name] = values[0].decode() if kind == "bytes" else values[0]
                if "label" in r:
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
    outcome_fixtures(rng)
    return f"{len(keys)} rows, {len(rows)} tile labels, {SLIDES} slides"


def outcome_fixtures(rng):
    """Slide-level outcome tables of the store (patient P(i//2) has slides S(2i), S(2i+1)),
    and a cohort store of 60 slides, 30 patients, for folds."""
    spell = {1: ["1", "dead", "TRUE", "yes", "1.0"], 0: ["0", "alive", "False", "NO", "0.0"]}
    patients = {}
    for p in range(SLIDES // 2):
        patients[f"P{p}"] = (round(rng.uniform(0.5, 60), 3), p % 2, round(rng.uniform(-5, 20), 4))
    tmb, clinical = [], []
    for i in range(SLIDES):
        p = f"P{i // 2}"
        time, event, target = patients[p]
        tmb.append((f"S{i}", p, target))
        clinical.append((f"S{i}", p, time, rng.choice(spell[event])))
    write_csv(tmp("tmb.csv"), ["key", "patient", "tmb"], tmb)
    write_csv(tmp("clinical.csv"), ["key", "patient", "os", "status"], clinical)
    keys, cohort = [], []
    for i in range(60):
        keys += [f"C{i}/{t // 5:06d}_{t % 5:06d}" for t in range(2 + i % 3)]
    for i in range(0, 60, 2):
        time, event = round(rng.uniform(1, 100), 2), int(rng.random() < 0.45)
        target, label = round(rng.gauss(3, 2), 3), rng.choice(["a", "b", "c"])
        for slide in (f"C{i}", f"C{i + 1}"):
            cohort.append((slide, f"Q{i // 2}", time, event, target, label))
    write_feature_store(tmp("cfeat"), np.random.default_rng(3).standard_normal(
        (len(keys), DIMS)).astype(np.float32), keys)
    write_csv(tmp("cohort.csv"), ["key", "patient", "os", "status", "tmb", "label"], cohort)
    STORE.update(patients=patients, cohort=cohort, cohort_keys=keys)


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
    expect((manifest["task"], manifest["outcome"], manifest["folds"]) ==
           ("classification", None, None), "classification: task, outcome, folds")
    expect(all(sp["outcome_stats"] is None for sp in manifest["splits"].values()),
           "classification: outcome_stats")


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


# ---------------------------------------------------------------- outcomes (issue 27)

def close(a, b, what, rel=1e-9):
    expect(a is not None and abs(a - b) <= rel * max(1.0, abs(b)), f"{what}: {a} vs {b}")


def expect_outcome_stats(manifest, splits, task):
    """outcome_stats of every split against numpy over the records as TensorFlow-free decoding
    read them (float32 values)."""
    for split, shards in splits.items():
        st = manifest["splits"][split]["outcome_stats"]
        recs = [r for recs in shards for r in recs]
        expect(st["count"] == len(recs), f"{split}: outcome_stats count {st['count']}")
        if not recs:
            continue
        if task == "regression":
            t = np.array([r["target"] for r in recs], dtype=np.float64)
            close(st["mean"], t.mean(), f"{split}: mean")
            close(st["min"], t.min(), f"{split}: min")
            close(st["max"], t.max(), f"{split}: max")
            if len(t) > 1:
                close(st["sd"], t.std(ddof=1), f"{split}: sd")
            else:
                expect(st["sd"] is None, f"{split}: sd of one record")
        else:
            times = np.array([r["time"] for r in recs], dtype=np.float64)
            events = sum(r["event"] for r in recs)
            expect(st["events"] == events, f"{split}: events {st['events']} vs {events}")
            close(st["event_rate"], events / len(recs), f"{split}: event_rate")
            for q in (25, 50, 75):
                close(st["time_quantiles"][f"q{q}"], float(np.quantile(times, q / 100)),
                      f"{split}: q{q}")


def check_regression():
    targets = {slide: np.float32(t) for slide, _, t in csv.reader(open(tmp("tmb.csv")))
               if slide != "key"}
    for unit in ("tile", "bag"):
        out = tmp(f"ds_reg_{unit}")
        pack_ok(tmp("feat"), "--labels", tmp("tmb.csv"), "--task", "regression",
                "--target-column", "tmb", "--unit", unit, "--shards", "2", "-o", out)
        manifest, splits = read_dataset(out)
        rows = "index" if unit == "tile" else "indices"
        kinds = {rows: "int64" if unit == "tile" else "int64_list", "target": "float",
                 "slide": "bytes"}
        expect(manifest["record_features"] == kinds, f"{unit}: {manifest['record_features']}")
        expect((manifest["task"], manifest["outcome"], manifest["folds"]) ==
               ("regression", {"target_column": "tmb"}, None), f"{unit}: task, outcome, folds")
        lab = manifest["labels"]
        expect(lab["names"] == [] and lab["label_column"] is None, f"{unit}: labels {lab}")
        n = 0
        for _, r in all_records(splits):
            expect(np.float32(r["target"]) == targets[r["slide"]],
                   f"{r['slide']}: target {r['target']} vs {targets[r['slide']]}")
            n += 1
        expect(n == (len(STORE["keys"]) if unit == "tile" else SLIDES), f"{unit}: {n} records")
        expect_outcome_stats(manifest, splits, "regression")
        expect(all(s["label_histogram"] == [] for s in manifest["splits"].values()),
               "label_histogram of a regression dataset")


def check_survival_bag_by_patient():
    out = tmp("ds_surv")
    s = pack_ok(tmp("feat"), "--labels", tmp("clinical.csv"), "--task", "survival",
                "--time-column", "os", "--event-column", "status", "--unit", "bag",
                "--bag-by", "patient", "--split", "train=0.5,test=0.5", "-o", out)
    manifest, splits = read_dataset(out)
    expect(manifest["record_features"] == {"indices": "int64_list", "time": "float",
                                           "event": "float", "slide": "bytes"},
           f"record_features {manifest['record_features']}")
    expect(manifest["outcome"] == {"time_column": "os", "event_column": "status"}, "outcome")
    expect(manifest["labels"]["bag_column"] == "patient" and
           manifest["labels"]["group_column"] is None, f"labels {manifest['labels']}")
    expect(set(manifest["group_split"]) == set(STORE["patients"]), "groups are the patients")
    recs = all_records(splits)
    expect(len(recs) == SLIDES // 2 and s["records"] == SLIDES // 2, f"{len(recs)} bags")
    for split, r in recs:
        p = r["slide"]
        i = int(p[1:])
        want = sorted(STORE["slide_rows"][f"S{2 * i}"] + STORE["slide_rows"][f"S{2 * i + 1}"])
        expect(r["indices"] == want, f"{p}: indices {r['indices']} vs {want}")
        time, event, _ = STORE["patients"][p]
        expect(np.float32(r["time"]) == np.float32(time) and r["event"] == event,
               f"{p}: time {r['time']}, event {r['event']} vs {time}, {event}")
        expect(manifest["group_split"][p] == split, f"{p}: split")
    expect_outcome_stats(manifest, splits, "survival")
    # A patient with a slide the store lacks: refused naming the key and its bag, or the
    # whole bag dropped under --skip-missing.
    rows = list(csv.reader(open(tmp("clinical.csv"))))
    write_csv(tmp("clinical_missing.csv"), rows[0], rows[1:] + [["S99", "P1"] + rows[3][2:]])
    args = [tmp("feat"), "--labels", tmp("clinical_missing.csv"), "--task", "survival",
            "--time-column", "os", "--event-column", "status", "--unit", "bag",
            "--bag-by", "patient", "--split", "all=1"]
    code, _, err = pack(*args, "-o", tmp("ds_surv_miss"))
    expect(code == 2 and '"S99" (line 10, bag "P1")' in err and "--skip-missing" in err,
           f"a bag's missing slide: exit {code}: {err.strip()}")
    s = pack_ok(*args, "--skip-missing", "-o", tmp("ds_surv_miss"))
    manifest, splits = read_dataset(tmp("ds_surv_miss"))
    got = sorted(r["slide"] for _, r in all_records(splits))
    expect(got == ["P0", "P2", "P3"], f"bags {got}")
    expect(s["incomplete_bags"] == 1 and manifest["excluded"]["incomplete_bags"] == 1 and
           s["missing_keys"] == 1, f"incomplete_bags {s}")


def cohort_strata():
    """patient -> (event x time tertile, event), tertiles as numpy cuts them."""
    per_patient = {p: (float(np.float32(t)), int(e)) for _, p, t, e, _, _ in STORE["cohort"]}
    times = np.array([t for t, _ in per_patient.values()])
    cuts = np.quantile(times, [1 / 3, 2 / 3])
    return {p: (3 * e + int((t > cuts).sum()), e) for p, (t, e) in per_patient.items()}


def check_folds():
    args = [tmp("cfeat"), "--labels", tmp("cohort.csv"), "--task", "survival", "--time-column",
            "os", "--event-column", "status", "--unit", "bag", "--bag-by", "patient"]
    pack_ok(*args, "--folds", "4", "--split", "test=0.2", "--seed", "3", "-o", tmp("ds_cv"))
    manifest, splits = read_dataset(tmp("ds_cv"))
    folds = [f"fold-{i}" for i in range(4)]
    expect(manifest["folds"] == {"k": 4, "splits": folds, "group_column": "patient",
                                 "stratify": "event_time_tertile"}, f"folds {manifest['folds']}")
    expect(set(manifest["splits"]) == set(folds) | {"test"}, f"splits {list(manifest['splits'])}")
    for f in folds:
        close(manifest["splits"][f]["fraction"], 0.2, f"{f}: fraction")
    strata = cohort_strata()
    expect(set(manifest["group_split"]) == set(strata), "every patient in one split")
    seen = collections.Counter(r["slide"] for _, r in all_records(splits))
    expect(set(seen) == set(strata) and max(seen.values()) == 1, "a patient in two splits")
    events = sum(e for _, e in strata.values())
    for split in folds + ["test"]:
        got = sum(strata[p][1] for p, sp in manifest["group_split"].items() if sp == split)
        expect(abs(got - events * 0.2) <= 1.5, f"{split}: {got} events of {events}")
        n = sum(1 for sp in manifest["group_split"].values() if sp == split)
        expect(abs(n - 6) <= 1, f"{split}: {n} patients of 30")
    # Deterministic for the seed; another seed still a valid assignment.
    pack_ok(*args, "--folds", "4", "--split", "test=0.2", "--seed", "3", "-o", tmp("ds_cv2"))
    again = json.load(open(tmp("ds_cv2", "dataset.json")))
    expect(again["group_split"] == manifest["group_split"], "same seed, other folds")
    # Without --split: folds only; classification and regression stratify by label / quartile.
    pack_ok(tmp("cfeat"), "--labels", tmp("cohort.csv"), "--folds", "3", "--group-by",
            "patient", "-o", tmp("ds_cv_cls"))
    m = read_dataset(tmp("ds_cv_cls"))[0]
    expect(list(m["splits"]) == ["fold-0", "fold-1", "fold-2"] and
           m["folds"]["stratify"] == "label" and m["folds"]["group_column"] == "patient",
           f"classification folds {m['folds']}")
    pack_ok(tmp("cfeat"), "--labels", tmp("cohort.csv"), "--task", "regression",
            "--target-column", "tmb", "--folds", "5", "-o", tmp("ds_cv_reg"))
    m, sp = read_dataset(tmp("ds_cv_reg"))
    expect(m["folds"]["stratify"] == "target_quantile" and m["folds"]["group_column"] is None,
           f"regression folds {m['folds']}")
    expect_outcome_stats(m, sp, "regression")


def check_group_keeps_unit_outcome():
    """--group-by keeps a patient's slides in one split; each record keeps its own slide's
    outcome (issue 51): per-slide regression targets, per-block panels, per-slide survival (with
    a warning: survival is the patient's in practice)."""
    patient = {f"S{i}": f"P{i // 2}" for i in range(SLIDES)}
    purity = {f"S{i}": round(0.1 + 0.1 * i, 2) for i in range(SLIDES)}
    write_csv(tmp("purity.csv"), ["key", "patient", "purity"],
              [(sl, patient[sl], purity[sl]) for sl in patient])
    panel = {f"S{i}": (str(i % 2), "" if i % 3 == 0 else str((i // 2) % 2)) for i in range(SLIDES)}
    write_csv(tmp("panel.csv"), ["key", "patient", "KRAS", "BRAF"],
              [(sl, patient[sl], *panel[sl]) for sl in patient])
    runs = [("regression", "purity.csv", ["--task", "regression", "--target-column", "purity"]),
            ("multilabel", "panel.csv", ["--task", "multilabel", "--label-columns", "KRAS,BRAF"])]
    for task, table, args in runs:
        for unit in ("tile", "bag"):
            out = tmp(f"ds_gk_{task}_{unit}")
            pack_ok(tmp("feat"), "--labels", tmp(table), *args, "--unit", unit, "--group-by",
                    "patient", "--split", "train=0.5,test=0.5", "--seed", "2", "-o", out)
            manifest, splits = read_dataset(out)
            expect(set(manifest["group_split"]) == set(patient.values()),
                   f"{task} {unit}: groups {sorted(manifest['group_split'])}")
            n = 0
            for split, r in all_records(splits):
                sl = r["slide"]
                expect(manifest["group_split"][patient[sl]] == split,
                       f"{task} {unit}: {sl} in {split}, its patient in "
                       f"{manifest['group_split'][patient[sl]]}")
                if task == "regression":
                    expect(np.float32(r["target"]) == np.float32(purity[sl]),
                           f"{unit}: {sl} target {r['target']} vs {purity[sl]}")
                else:
                    want = [(float(v) if v else 0.0, 1 if v else 0) for v in panel[sl]]
                    expect(list(zip(r["labels"], r["label_mask"])) == want,
                           f"{unit}: {sl} labels {r['labels']} mask {r['label_mask']} vs {want}")
                n += 1
            expect(n == (len(STORE["keys"]) if unit == "tile" else SLIDES),
                   f"{task} {unit}: {n} records")
    # Survival per slide: packed as the table says, and a warning naming the first group.
    surv = ["--task", "survival", "--time-column", "os", "--event-column", "status"]
    write_csv(tmp("surv_slides.csv"), ["key", "patient", "os", "status"],
              [(sl, patient[sl], 10 + i, i % 2) for i, sl in enumerate(patient)])
    code, _, err = pack(tmp("feat"), "--labels", tmp("surv_slides.csv"), *surv, "--unit", "bag",
                        "--group-by", "patient", "--split", "all=1", "-o", tmp("ds_gk_surv"))
    want = (f'{tmp("surv_slides.csv")}: 4 --group-by patient groups give their records '
            'different outcomes (line 3: group "P0" has time 11, event 1, but line 2 gave it '
            'time 10, event 0): each record keeps its own')
    expect(code == 0 and want in err, f"per-slide survival: exit {code}: {err.strip()}")
    times = sorted(r["time"] for _, r in all_records(read_dataset(tmp("ds_gk_surv"))[1]))
    expect(times == list(range(10, 10 + SLIDES)), f"per-slide survival: times {times}")
    # A true conflict stays refused: one bag (--bag-by patient) with two outcomes.
    code, _, err = pack(tmp("feat"), "--labels", tmp("purity.csv"), *runs[0][2], "--unit", "bag",
                        "--bag-by", "patient", "--split", "all=1", "-o", tmp("ds_gk_bag"))
    want = (f'{tmp("purity.csv")}: line 3: bag "P0" has target 0.2, but line 2 gave it '
            'target 0.1')
    expect(code == 2 and want in err, f"a bag with two targets: exit {code}: {err.strip()}")
    expect(not os.path.exists(tmp("ds_gk_bag")), "a bag with two targets: output written")


def check_outcome_errors():
    """Every bad row: exit 2 naming file:line, the column and the option; bad options exit 1."""
    surv = ["--task", "survival", "--time-column", "os", "--event-column", "status"]
    reg = ["--task", "regression", "--target-column", "tmb"]
    bad_rows = [
        (reg, "key,tmb\nS0,1\nS1,nan\n",
         'line 3: column "tmb" holds "nan": a target must be a finite number (the column of '
         '--target-column)'),
        (reg, "key,tmb\nS0,inf\n", 'line 2: column "tmb" holds "inf"'),
        (reg, "key,tmb\nS0,1\nS1,\n", 'line 3: column "tmb" is empty (or missing)'),
        (reg, "key,tmb\nS0,12a\n", 'column "tmb" holds "12a"'),
        (reg, "key,tmb\nS0/000000_000000,1\nS0,2\n--unit=bag",
         'line 3: bag "S0" has target 2, but line 2 gave it target 1; a bag has one outcome'),
        (surv, "key,os,status\nS0,0,1\n",
         'line 2: column "os" holds "0": a time must be a finite number > 0 (the column of '
         '--time-column)'),
        (surv, "key,os,status\nS0,-3.5,1\n", 'line 2: column "os" holds "-3.5"'),
        (surv, "key,os,status\nS0,3,maybe\n",
         'line 2: column "status" holds "maybe": an event must be 1 or 0 (also 1.0/0.0, '
         'true/false, yes/no, dead/alive) (the column of --event-column)'),
        (surv, "key,os,status\nS0,3,2\n", 'column "status" holds "2"'),
        (surv, "key,os,status\nS0,3,\n", 'line 2: column "status" is empty (or missing)'),
        (reg + ["--group-by", "patient"], "key,tmb,patient\nS0,1,P0\nS1,2,P0\nS0,3,P0\n",
         'line 4: key "S0" has target 3, but line 2 gave it target 1'),
        (surv + ["--unit", "bag", "--bag-by", "patient"],
         "key,os,status,patient\nS0,3,1,P0\nS1,3,0,P0\n",
         'line 3: bag "P0" has time 3, event 0, but line 2 gave it time 3, event 1'),
        (surv, "key,os,status\nS0,3,1\nS0,3,0\n",
         'line 3: key "S0" has time 3, event 0, but line 2 gave it time 3, event 1'),
    ]
    for i, (args, text, want) in enumerate(bad_rows):
        extra = []
        if "\n--unit=bag" in text:
            text, extra = text.split("\n--unit=bag")[0] + "\n", ["--unit", "bag"]
        path = tmp(f"bad{i}.csv")
        open(path, "w").write(text)
        code, _, err = pack(tmp("feat"), "--labels", path, *args, *extra, "--split", "all=1",
                            "-o", tmp(f"ds_bad{i}"))
        expect(code == 2 and f"{path}: line " in err and want in err,
               f"bad row {text!r}: exit {code}: {err.strip()} (want {want!r})")
        expect(not os.path.exists(tmp(f"ds_bad{i}")), f"bad row {text!r}: output written")
    usage = [
        (reg + ["--label-column", "diagnosis"], "--label-column is for --task classification"),
        (["--task", "regression"], "--task regression needs --target-column"),
        (["--task", "survival", "--time-column", "os"], "needs --event-column"),
        (["--target-column", "tmb"], "--target-column is for --task regression"),
        (surv + ["--bag-by", "patient"], "--bag-by makes bags: it needs --unit bag"),
        (surv + ["--folds", "1"], "--folds"),
        (surv + ["--folds", "3", "--split", "test=0.5,val=0.5"], "leave records for the folds"),
        (surv + ["--folds", "3", "--split", "fold-0=0.2"], "fold-I are the folds'"),
        (["--task", "ordinal"], "ordinal"),
    ]
    for args, want in usage:
        code, _, err = pack(tmp("feat"), "--labels", tmp("clinical.csv"), *args,
                            "-o", tmp("ds_usage"))
        expect(code == 1 and want in err, f"{args}: exit {code}: {err.strip()} (want {want!r})")
        expect(not os.path.exists(tmp("ds_usage")), f"{args}: output written")


if __name__ == "__main__":
    run_checks("pack", [check_tile, check_group_by_patient, check_bag, check_errors,
                        check_dedupe, check_determinism,
                        check_invalid_rows_and_gather, check_one_writer, check_regression,
                        check_survival_bag_by_patient, check_folds, check_group_keeps_unit_outcome,
                        check_outcome_errors],
               only, fixtures)
