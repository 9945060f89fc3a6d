"""mltool inspect --check, property test of its defaults: a dataset `mltool pack` has just
written passes them at every cohort size, and biased shard sets fail them. decile_p is held
against an independent Python reference (the hypergeometric pmf from math.lgamma, summed over
the whole support; checked itself against exact integer binomials) on hand-made shard sets.

    inspect_property_test.py MLTOOL [MLTOOL_TESTGEN] [TEST...]   # TEST: check_* names

COHORTS (environment, default 150) sets how many random cohorts check_fresh_packs_pass packs;
SEED (default 14) their generator. Each check prints "ok: NAME (seconds)"; all run, and the
script exits 1 if any failed.
"""
import csv
import json
import math
import os
import random
import shutil
import sys

import numpy as np

from cli_common import expect, run, run_checks, run_json, tmp, write_feature_store
from tfrecord_codec import decode_example, example, frames, write_tfrecord

mltool = os.path.abspath(sys.argv[1])
rest = sys.argv[2:]
if rest and os.path.sep in rest[0]:  # MLTOOL_TESTGEN (unused)
    rest = rest[1:]
only = set(rest)

COHORTS = int(os.environ.get("COHORTS", "150"))
SEED = int(os.environ.get("SEED", "14"))
DEFAULT_DECILE_P = 1e-6  # docs/inspect.md#--check


# ---------------------------------------------------------------- the reference

def log_choose(n, k):
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def hypergeometric_p(n, k, m, x):
    """min(1, 2 min(P(X <= x), P(X >= x))) for X ~ hypergeometric(population n, successes k,
    draws m): every pmf term of the support, from lgamma."""
    lo, hi = max(0, m - (n - k)), min(m, k)
    if lo == hi:
        return 1.0
    base = log_choose(n, m)
    pmf = [math.exp(log_choose(k, j) + log_choose(n - k, m - j) - base) for j in range(lo, hi + 1)]
    lower = math.fsum(pmf[:x - lo + 1])
    upper = math.fsum(pmf[x - lo:])
    return min(1.0, 2 * min(lower, upper))


def hypergeometric_p_exact(n, k, m, x):
    """The same from exact integer binomials (small populations)."""
    lo, hi = max(0, m - (n - k)), min(m, k)
    if lo == hi:
        return 1.0
    terms = [math.comb(k, j) * math.comb(n - k, m - j) for j in range(lo, hi + 1)]
    total = math.comb(n, m)
    return min(1.0, 2 * min(sum(terms[:x - lo + 1]), sum(terms[x - lo:])) / total)


def round_robin_labels(labels_per_shard):
    """Labels in the order of a uniform interleave (one record from each open shard in turn)."""
    order = []
    for r in range(max((len(s) for s in labels_per_shard), default=0)):
        order.extend(s[r] for s in labels_per_shard if r < len(s))
    return order


def decile_p(labels_per_shard, names):
    """docs/inspect.md: per cell (decile with labeled records x label with records) the
    hypergeometric p of its count; the smallest times the number of cells, at most 1. None
    (alongside labels) is an unlabeled record."""
    order = round_robin_labels(labels_per_shard)
    n = len(order)
    bounds = [d * n // 10 for d in range(11)]
    labeled = [l for l in order if l is not None]
    total = {name: labeled.count(name) for name in names}
    smallest, cells = 1.0, 0
    for d in range(10):
        part = [l for l in order[bounds[d]:bounds[d + 1]] if l is not None]
        if not part:
            continue
        for name in names:
            if total[name]:
                smallest = min(smallest, hypergeometric_p(len(labeled), total[name], len(part),
                                                          part.count(name)))
                cells += 1
    return min(1.0, smallest * cells) if cells else None


def inspect(*args):
    return run_json([mltool, "inspect", *args, "--json"])


# ---------------------------------------------------------------- cohorts


def make_cohort(name, rng, patients, slides, tiles, labels, weights, level):
    """A feature store and a labels table: `patients` patients of 1..`slides` slides of
    1..`tiles` tiles, labels drawn with `weights` per patient, slide or tile (`level`).
    Returns (store, labels.csv)."""
    keys, rows = [], []
    nprng = np.random.default_rng(rng.getrandbits(32))
    s = 0
    for p in range(patients):
        patient_label = rng.choices(range(labels), weights)[0]
        for _ in range(rng.randint(1, slides)):
            slide, s = f"{name}S{s}", s + 1
            slide_label = patient_label if level == "patient" else rng.choices(range(labels), weights)[0]
            count = rng.randint(1, tiles)
            for t in range(count):
                keys.append(f"{slide}/{t // 100:06d}_{t % 100:06d}")
                if level == "tile":
                    rows.append((keys[-1], f"L{rng.choices(range(labels), weights)[0]}", f"P{p}"))
            if level != "tile":
                rows.append((slide, f"L{slide_label}", f"P{p}"))
    store = tmp(name + "-features")
    write_feature_store(store, nprng.standard_normal((len(keys), 2)), keys)
    table = tmp(name + "-labels.csv")
    with open(table, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["key", "label", "patient"])
        w.writerows(rows)
    return store, table


def pack(store, table, out, *args):
    code, _, err = run([mltool, "pack", store, "--labels", table, "-o", out, "-q", *args])
    expect(code == 0, f"pack {' '.join(args)}: exit {code}: {err.strip()}")


SPLITS = ["train=0.7,val=0.15,test=0.15", "train=0.8,val=0.1,test=0.1",
          "train=0.6,val=0.2,test=0.2", "train=0.5,val=0.5", "train=1"]

FIGURES = {"groups": 0, "old_fail": 0, "min_p": 1.0, "min_p_at": None, "records": [],
           "below_5pc": 0, "min_chi2_p": 1.0}


def fresh_pack_passes(name, store, table, args):
    out = tmp(name + "-ds")
    pack(store, table, out, *args)
    code, doc, err = inspect(out, "--deep", "--check")
    expect(code == 0, f"{name} (pack {' '.join(args)}): inspect --check exit {code}: {err.strip()}")
    for g in doc["groups"]:
        if g["records"] == 0:
            continue
        FIGURES["groups"] += 1
        FIGURES["records"].append(g["records"])
        labeled = g["records"] - g["unlabeled"]
        expect((g["decile_p"] is None) == (labeled == 0), f"{name} {g['name']}: decile_p {g['decile_p']}")
        if g["chi_square"] is not None:
            FIGURES["min_chi2_p"] = min(FIGURES["min_chi2_p"], g["chi_square"]["p_value"])
        FIGURES["below_5pc"] += g["decile_p"] is not None and g["decile_p"] < 0.05
        if g["decile_p"] is not None and g["decile_p"] < FIGURES["min_p"]:
            FIGURES["min_p"], FIGURES["min_p_at"] = g["decile_p"], f"{name}/{g['name']} ({g['records']} records)"
    code, _, _ = run([mltool, "inspect", out, "--check=decile-p=off", "-q"])
    FIGURES["old_fail"] += code == 4
    return doc


def check_fresh_packs_pass():
    """Random cohorts, every pack passes the defaults; plus the cases of issue 14."""
    rng = random.Random(SEED)
    # issue 14: 37 patients, 3 labels, about 2,000 tiles, 70/15/15 by patient, 4 shards
    store, table = make_cohort("issue", random.Random(37), 37, 2, 54, 3, [1, 1, 1], "patient")
    fresh_pack_passes("issue", store, table, ["--group-by", "patient", "--shards", "4",
                                               "--split", "train=0.7,val=0.15,test=0.15"])
    # 3 bags into 4 shards; a test split of 5 tile records
    store, table = make_cohort("bags3", random.Random(3), 3, 1, 5, 2, [1, 1], "slide")
    fresh_pack_passes("bags3", store, table, ["--unit", "bag", "--shards", "4", "--split", "train=1"])
    store, table = make_cohort("five", random.Random(5), 12, 1, 5, 2, [1, 1], "slide")
    fresh_pack_passes("five", store, table, ["--shards", "4"])
    packs = 3
    for c in range(COHORTS):
        labels = rng.randint(2, 5)
        weights = [rng.uniform(0.1, 1) for _ in range(labels)]
        level = rng.choice(["patient", "slide", "tile"])
        unit = rng.choice(["tile", "tile", "bag"])
        tiles = rng.choice([3, 10, 40, 120]) if unit == "tile" else rng.choice([3, 20])
        store, table = make_cohort(f"c{c}", rng, rng.randint(3, 60), rng.randint(1, 3), tiles,
                                   labels, weights, level)
        args = ["--unit", unit, "--shards", str(rng.randint(1, 8)), "--split", rng.choice(SPLITS),
                "--seed", str(rng.randint(0, 1000))]
        if rng.random() < 0.5:
            args += ["--group-by", "patient"]
        fresh_pack_passes(f"c{c}", store, table, args)
        for path in (store, table, tmp(f"c{c}-ds")):
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
        packs += 1
    r = FIGURES["records"]
    print(f"  {packs} fresh packs, {FIGURES['groups']} non-empty splits of {min(r)}..{max(r)} "
          f"records: all pass the defaults; smallest decile_p {FIGURES['min_p']:.3g} "
          f"({FIGURES['min_p_at']}), {FIGURES['below_5pc']} below 0.05; smallest chi2 p "
          f"{FIGURES['min_chi2_p']:.3g}; with decile-p=off {FIGURES['old_fail']} of {packs} "
          f"packs would fail", flush=True)


# ---------------------------------------------------------------- biased shard sets

def labelled_files(prefix, labels_per_file):
    files = []
    for i, labels in enumerate(labels_per_file):
        path = tmp(f"{prefix}{i}.tfrecord")
        write_tfrecord(path, [example({"label": l, "index": j}) for j, l in enumerate(labels)])
        files.append(path)
    return files


def fails(what, args, want):
    code, doc, err = inspect(*args)
    expect(code == 4, f"{what}: exit {code}, expected 4: {err.strip()}")
    found = {v["check"] for v in doc["checks"]["violations"]}
    expect(want <= found, f"{what}: violations {sorted(found)}, expected {sorted(want)}")
    g = doc["groups"][0]
    print(f"  {what}: fails {', '.join(sorted(found))}; decile_drift {g['decile_drift']:.3f}, "
          f"decile_p {g['decile_p']:.3g}, chi2 p {g['chi_square']['p_value']:.3g}", flush=True)
    return doc


def check_biased_sets_fail():
    # seed-002: files of 100, 1000 and 3000 records, one label per file (TensorFlow-like)
    files = labelled_files("seed002-", [[0] * 100, [1] * 1000, [2] * 3000])
    doc = fails("100/1000/3000 records, one label per file", [*files, "--deep", "--check"],
                {"max-ratio", "cv", "oversample", "decile-drift", "chi2-p"})
    expect(doc["groups"][0]["decile_p"] < 1e-50, "decile_p of the seed-002 case")
    # one label per shard, equal sizes: the interleave mixes them evenly, chi-square does not
    files = labelled_files("perlabel-", [[l] * 250 for l in range(4)])
    fails("4 x 250 records, one label per shard", [*files, "--check"], {"chi2-p"})
    # a fresh pack, then each shard rewritten sorted by label (a writer that does not shuffle):
    # sizes and label counts per shard are perfect, the order is not
    rng = random.Random(1000)
    store, table = make_cohort("sorted", rng, 30, 2, 80, 3, [1, 1, 1], "slide")
    ds = tmp("sorted-ds")
    pack(store, table, ds, "--shards", "4", "--split", "train=1")
    meta = json.load(open(os.path.join(ds, "dataset.json")))
    for s in meta["splits"]["train"]["shards"]:
        path = os.path.join(ds, s["file"])
        payloads = [p for _, _, p in frames(path)]
        payloads.sort(key=lambda p: decode_example(p)["label"][1][0])
        write_tfrecord(path, payloads)
    expect(meta["records"] >= 1000, f"sorted: only {meta['records']} records")
    doc = fails(f"a pack of {meta['records']} records sorted by label within its shards",
                [ds, "--deep", "--check"], {"decile-drift"})
    found = {v["check"] for v in doc["checks"]["violations"]}
    expect(found == {"decile-drift"}, f"sorted shards: violations {found}")
    msg = doc["checks"]["violations"][0]["message"]
    expect("decile-p" in msg and "is below 1e-06" in msg, f"message: {msg}")


def check_decile_p_against_the_reference():
    # the Python reference against exact integer binomials
    r = random.Random(2)
    for _ in range(300):
        n = r.randint(1, 60)
        k, m = r.randint(0, n), r.randint(0, n)
        x = r.randint(max(0, m - (n - k)), min(m, k))
        a, b = hypergeometric_p(n, k, m, x), hypergeometric_p_exact(n, k, m, x)
        expect(abs(a - b) <= 1e-12 + 1e-9 * b, f"reference H({n}, {k}, {m}) at {x}: {a} vs {b}")
    r = random.Random(3)
    mixed = [[r.choice([0, 1, 2, None]) for _ in range(c)] for c in (37, 41, 12)]
    big = [[0 if r.random() < 0.5 + 0.08 * (j < 600) else 1 for j in range(6000)] for _ in range(3)]
    cases = {
        "ten-ten-two": [[0] * 10, [0] * 10, [1, 1]],
        "one-record": [[1]],
        "sorted": [sorted(r.choice([0, 1, 2]) for _ in range(200)) for _ in range(3)],
        "random-with-unlabeled": mixed,
        "three-into-four": [[0], [1], [1], []],
        "mild-bias-18000": big,
    }
    for name, shards in cases.items():
        names = sorted({l for s in shards for l in s if l is not None})
        files = []
        for i, labels in enumerate(shards):
            path = tmp(f"ref-{name}-{i}.tfrecord")
            write_tfrecord(path, [example({"index": j} if l is None else {"index": j, "label": l})
                                  for j, l in enumerate(labels)])
            files.append(path)
        code, doc, err = inspect(*files)
        expect(code == 0, f"{name}: exit {code}: {err.strip()}")
        got, want = doc["groups"][0]["decile_p"], decile_p(shards, names)
        expect(got is not None and abs(got - want) <= 1e-300 + 1e-8 * want,
               f"{name}: decile_p {got}, reference {want}")
        print(f"  {name}: decile_p {got:.6g} (reference {want:.6g})", flush=True)
    # the check uses both numbers: the ten-ten-two drift (0.41) is large but not significant
    files = [tmp(f"ref-ten-ten-two-{i}.tfrecord") for i in range(3)]
    code, doc, err = inspect(*files, "--check=max-ratio=off,cv=off,oversample=off,chi2-p=off")
    expect(code == 0, f"ten-ten-two, decile-drift with decile-p: exit {code}: {err.strip()}")
    code, doc, err = inspect(*files, "--check=max-ratio=off,cv=off,oversample=off,chi2-p=off,decile-p=off")
    expect(code == 4 and "decile-drift 0.4091 exceeds 0.05 (label" in err,
           f"ten-ten-two, decile-p=off: exit {code}: {err.strip()}")
    expect(doc["checks"]["thresholds"]["decile-p"] is None, "decile-p off in the JSON")


run_checks("inspect property", [check_decile_p_against_the_reference, check_biased_sets_fail,
                                check_fresh_packs_pass], only)
