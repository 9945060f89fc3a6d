"""mltool inspect, end to end against independent references: TFRecord shards written and read
by a pure-Python TFRecord + tf.train.Example codec (CRC-32C from a table built here), and every
figure inspect reports about the interleave recomputed from an explicit round-robin simulation
in Python, so nothing of mltool's own code takes part in the checking.

    inspect_test.py MLTOOL [MLTOOL_TESTGEN] [TEST...]   # TEST: check_* names without check_

Each check prints "ok: NAME (seconds)"; all run, and the script exits 1 if any failed.
"""
import json
import math
import os
import shutil
import struct
import sys
import zlib

import numpy as np

from cli_common import expect, run, run_checks, run_json, tmp, write_feature_store
from tfrecord_codec import decode_example, example, frame, frames, read_varint, write_tfrecord

mltool = os.path.abspath(sys.argv[1])
rest = sys.argv[2:]
if rest and os.path.sep in rest[0]:  # MLTOOL_TESTGEN (unused)
    rest = rest[1:]
only = set(rest)

# ---------------------------------------------------------------- mltool pack records

def decode_tile_record(buf):
    """{name: int | bytes} of a tile record of mltool pack (canonical encoding only)."""
    out, pos = {}, 0
    _, pos = read_varint(buf, pos)
    n, pos = read_varint(buf, pos)
    end = pos + n
    while pos < end:
        _, pos = read_varint(buf, pos)
        n, pos = read_varint(buf, pos)
        entry, pos = buf[pos:pos + n], pos + n
        _, p = read_varint(entry, 0)
        kl, p = read_varint(entry, p)
        name, p = entry[p:p + kl].decode(), p + kl
        _, p = read_varint(entry, p)
        _, p = read_varint(entry, p)
        kind, p = read_varint(entry, p)
        _, p = read_varint(entry, p)
        _, p = read_varint(entry, p)
        ln, p = read_varint(entry, p)
        out[name] = entry[p:p + ln] if kind >> 3 == 1 else read_varint(entry, p)[0]
    return out


# ---------------------------------------------------------------- the reference interleave

def round_robin(labels_per_shard):
    """Explicit tf.data interleave(cycle_length = files, block_length 1) order:
    [(shard, label)] one record from each open shard in turn."""
    order, r = [], 0
    while True:
        got = False
        for i, labels in enumerate(labels_per_shard):
            if r < len(labels):
                order.append((i, labels[r]))
                got = True
        if not got:
            return order
        r += 1


def reference(labels_per_shard, names):
    """The interleave figures docs/inspect.md defines, computed from the explicit order."""
    order = round_robin(labels_per_shard)
    n = len(order)
    counts = [len(x) for x in labels_per_shard]
    bounds = [d * n // 10 for d in range(11)]
    overall = [sum(1 for _, l in order if l == name) / n for name in names]
    deciles, factors = [], [[None] * 10 for _ in counts]
    for d in range(10):
        part = order[bounds[d]:bounds[d + 1]]
        share = [sum(1 for _, l in part if l == name) / len(part) for name in names] if part else None
        deciles.append(max(abs(a - b) for a, b in zip(share, overall)) if part else None)
        for i, c in enumerate(counts):
            if part and c:
                factors[i][d] = (sum(1 for s, _ in part if s == i) / len(part)) / (c / n)
    exhausted = [(max(p for p, (s, _) in enumerate(order) if s == i) + 1) / n if c else None
                 for i, c in enumerate(counts)]
    return {"deciles": deciles, "factors": factors, "exhausted": exhausted,
            "drift": max(x for x in deciles if x is not None)}


def chi_square(table):
    rows = [sum(r) for r in table]
    cols = [sum(c) for c in zip(*table)]
    total = sum(rows)
    return sum((table[i][j] - rows[i] * cols[j] / total) ** 2 / (rows[i] * cols[j] / total)
               for i in range(len(rows)) for j in range(len(cols)) if rows[i] and cols[j])


def close(a, b, what, tol=1e-9):
    expect(a is not None and b is not None and abs(a - b) <= tol * max(1, abs(b)) or a == b,
           f"{what}: mltool says {a}, reference {b}")


def inspect(*args):
    """mltool inspect ARGS --json; (code, document or None, stderr)."""
    return run_json([mltool, "inspect", *args, "--json"])


# ---------------------------------------------------------------- fixtures

ROWS = 24000
NAMES = ["normal", "stroma", "tumor"]


def fixtures():
    store = tmp("feat")
    rng = np.random.default_rng(3)
    matrix = rng.standard_normal((ROWS, 4))
    keys = [f"S{i % 40}/{i // 100:06d}_{i % 100:06d}" for i in range(ROWS)]
    write_feature_store(store, matrix, keys)
    labels = rng.integers(0, 3, ROWS)
    with open(tmp("labels.csv"), "w") as f:
        f.write("key,label\n" + "".join(f"{k},{NAMES[l]}\n" for k, l in zip(keys, labels)))
    code, _, err = run([mltool, "pack", store, "--labels", tmp("labels.csv"), "-o", tmp("ds"),
                        "--split", "train=1", "--shards", "8", "-q"])
    expect(code == 0, f"pack: exit {code}: {err}")
    # Unbalanced files as one tool per slide would write them: 1000, 1000 and 100 records,
    # the big ones mostly "normal", the small one all "tumor" (bytes labels).
    skew = {"a": ["normal"] * 900 + ["tumor"] * 100, "b": ["normal"] * 950 + ["tumor"] * 50,
            "c": ["tumor"] * 100}
    for name, labels in skew.items():
        rng.shuffle(labels)
        write_tfrecord(tmp(f"{name}.tfrecord"),
                       [example({"label": l, "slide": name, "index": i}) for i, l in enumerate(labels)])
    SKEW.update(skew)
    return f"{ROWS} packed records, files of {[len(v) for v in skew.values()]} records"


SKEW = {}

# ---------------------------------------------------------------- checks


def check_balanced_dataset():
    code, doc, err = inspect(tmp("ds"), "--check")
    expect(code == 0, f"exit {code} on a balanced dataset: {err.strip()}")
    expect(doc["command"] == "inspect" and doc["records"] == ROWS, f"records {doc['records']}")
    expect(doc["labels"] == NAMES, f"labels {doc['labels']}")
    (g,) = doc["groups"]
    counts = [s["records"] for s in g["shards"]]
    expect(len(counts) == 8 and sum(counts) == ROWS, f"shard records {counts}")
    expect(g["max_min_ratio"] <= 1 + 1 / min(counts), f"max/min {g['max_min_ratio']} for {counts}")
    close(g["max_min_ratio"], max(counts) / min(counts), "max/min")
    mean = sum(counts) / 8
    close(g["cv"], math.sqrt(sum((c - mean) ** 2 for c in counts) / 8) / mean, "cv")
    expect(doc["checks"]["violations"] == [], f"violations {doc['checks']['violations']}")
    # the per-shard label histograms are the records' labels, read independently
    per_shard = []
    for s in g["shards"]:
        labels = [NAMES[decode_tile_record(p)["label"]] for _, _, p in frames(tmp("ds", s["file"]))]
        per_shard.append(labels)
        expect(s["label_histogram"] == [labels.count(n) for n in NAMES], f"{s['file']}: histogram")
    ref = reference(per_shard, NAMES)
    close(g["decile_drift"], ref["drift"], "decile drift")
    close(g["chi_square"]["statistic"], chi_square([s["label_histogram"] for s in g["shards"]]), "chi-square")
    code, deep, err = inspect(tmp("ds"), "--deep")
    expect(code == 0 and deep["deep"], f"--deep: exit {code}: {err.strip()}")


def check_unbalanced_files():
    files = [tmp(f"{n}.tfrecord") for n in SKEW]
    code, doc, err = inspect(*files, "--check")
    expect(code == 4, f"--check on unbalanced shards: exit {code}, expected 4")
    for name in ("max-ratio", "cv", "oversample", "decile-drift", "chi2-p"):
        expect(f"check failed: files: {name} " in err, f"stderr does not list {name}: {err}")
    (g,) = doc["groups"]
    expect(doc["labels"] == ["normal", "tumor"], f"labels {doc['labels']}")
    ref = reference(list(SKEW.values()), ["normal", "tumor"])
    for i, s in enumerate(g["shards"]):
        for d in range(10):
            close(s["decile_factors"][d], ref["factors"][i][d], f"{s['file']} decile {d} factor")
        close(s["oversample"], max(f for f in ref["factors"][i] if f is not None), f"{s['file']} oversample")
        close(s["exhausted_at"], ref["exhausted"][i], f"{s['file']} exhausted_at")
    # the small shard is read at 1/3 of the epoch while it lasts: 7x its 100/2100 share
    close(g["max_oversample"], (1 / 3) / (100 / 2100), "max oversample")
    expect(g["oversampled_shard"] == files[2], f"oversampled shard {g['oversampled_shard']}")
    for d in range(10):
        close(g["deciles"][d]["max_deviation"], ref["deciles"][d], f"decile {d} deviation")
    close(g["decile_drift"], ref["drift"], "decile drift")
    stat = chi_square([s["label_histogram"] for s in g["shards"]])
    close(g["chi_square"]["statistic"], stat, "chi-square")
    expect(g["chi_square"]["dof"] == 2, "dof")
    close(g["chi_square"]["p_value"], math.exp(-stat / 2), "p-value (dof 2: e^-x/2)", 1e-6)
    code, _, err = inspect(*files, "--check", "max-ratio=11,cv=off,oversample=7.5,decile-drift=off,chi2-p=off")
    expect(code == 0, f"loose thresholds: exit {code}: {err}")
    code, _, err = run([mltool, "inspect", "-", "--check=oversample=6.9,max-ratio=off,cv=off,"
                        "decile-drift=off,chi2-p=off", "-q"], stdin="\n".join(files) + "\n")
    expect(code == 4 and "oversample 7 exceeds 6.9" in err, f"stdin list + one threshold: exit {code}: {err}")
    code, _, err = inspect(*files, "--check", "ratio=2")
    expect(code == 1 and "unknown threshold 'ratio'" in err, f"bad threshold: exit {code}: {err}")


def check_corrupt_shard():
    d = tmp("corrupt")
    shutil.copytree(tmp("ds"), d)
    shard = os.path.join(d, "train-00003-of-00008.tfrecord")
    fr = frames(shard)
    offset, _, payload = fr[1234]
    data = bytearray(open(shard, "rb").read())
    data[offset + 12 + len(payload) // 2] ^= 0x01  # inside record 1234's data
    open(shard, "wb").write(data)
    code, _, err = inspect(d, "--deep")
    expect(code == 2, f"--deep on a corrupt shard: exit {code}")
    expect(f"{shard}: byte {offset}: data CRC mismatch" in err, f"stderr: {err.strip()}")
    data[offset + 12 + len(payload) // 2] ^= 0x01
    offset = fr[77][0]
    data[offset + 3] ^= 0x40  # record 77's length field
    open(shard, "wb").write(data)
    for mode in ([], ["--deep"]):
        code, _, err = inspect(d, *mode)
        expect(code == 2 and f"{shard}: byte {offset}: " in err, f"bad length {mode}: exit {code}: {err.strip()}")
    code, _, err = inspect(tmp("missing.tfrecord"))
    expect(code == 2 and "missing.tfrecord: cannot open" in err, f"missing file: exit {code}: {err.strip()}")


def check_index_beyond_the_store():
    d = tmp("badindex")
    shutil.copytree(tmp("ds"), d)
    name = "train-00005-of-00008.tfrecord"
    shard = os.path.join(d, name)
    records = [decode_tile_record(p) for _, _, p in frames(shard)]
    payloads = [example(r) for r in records]
    expect(b"".join(frame(p) for p in payloads) == open(shard, "rb").read(),
           "the Python encoder does not reproduce mltool's shard byte for byte")
    records[10]["index"] = ROWS  # one past the last row
    payloads[10] = example(records[10])
    write_tfrecord(shard, payloads)
    meta = json.load(open(os.path.join(d, "dataset.json")))
    for s in meta["splits"]["train"]["shards"]:
        if s["file"] == name:
            s["bytes"] = os.path.getsize(shard)
    json.dump(meta, open(os.path.join(d, "dataset.json"), "w"), indent=2, sort_keys=True)
    code, _, err = inspect(d)
    expect(code == 0, f"without --deep indices are not checked: exit {code}: {err.strip()}")
    code, _, err = inspect(d, "--deep")
    expect(code == 2 and f"{shard}: record 10 " in err and f"holds row {ROWS}, but the feature store has {ROWS} rows"
           in err, f"--deep: exit {code}: {err.strip()}")
    # dataset.json that disagrees with its shards
    meta["splits"]["train"]["shards"][0]["records"] += 1
    json.dump(meta, open(os.path.join(d, "dataset.json"), "w"), indent=2, sort_keys=True)
    code, _, err = inspect(d)
    expect(code == 2 and "/splits/train/shards/0/records" in err, f"manifest: exit {code}: {err.strip()}")


def check_text_and_plot():
    code, out, err = run([mltool, "inspect", tmp("ds"), "--plot", tmp("plot.png")])
    expect(code == 0, f"exit {code}: {err}")
    expect("train: 8 shards, 24000 records" in out and "train-00007-of-00008.tfrecord" in out,
           f"text report: {out[:400]}")
    png = open(tmp("plot.png"), "rb").read()
    expect(png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature")
    length, kind, width, height = struct.unpack(">I4sII", png[8:24])
    expect(kind == b"IHDR" and width == 1000 and 200 < height < 2000, f"IHDR {kind} {width}x{height}")
    expect(zlib.crc32(png[12:29]) == struct.unpack(">I", png[29:33])[0], "IHDR CRC")
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(tmp("plot.png")) as im:
        im.load()
        expect(im.size == (width, height) and im.mode == "RGB", f"Pillow reads {im.size} {im.mode}")
        colours = {c for _, c in im.getcolors(1 << 20)}
        expect(len(colours) >= 5, f"{len(colours)} colours: is anything drawn?")
    check_plot_svg(tmp("plot.svg"), (width, height))


def check_plot_svg(path, size):
    """The SVG beside the PNG: well-formed XML (ElementTree), the PNG's size, DejaVu Sans, the
    label names and the split as text in their own case, the shard axis at round numbers, and
    one bar segment per non-empty (shard, label) cell."""
    import xml.etree.ElementTree as ET
    ns = "{http://www.w3.org/2000/svg}"
    root = ET.parse(path).getroot()
    expect(root.tag == ns + "svg" and (int(root.get("width")), int(root.get("height"))) == size,
           f"{path}: {root.tag} {root.get('width')}x{root.get('height')}, PNG {size}")
    expect("DejaVu Sans" in root.get("font-family", ""), f"font {root.get('font-family')}")
    texts = [t.text or "" for t in root.iter(ns + "text")]
    for name in NAMES + ["train", "All", "Dataset " + tmp("ds")]:
        expect(name in texts, f"{name!r} not among the SVG's texts {texts[:40]}")
    doc = json.loads(run([mltool, "inspect", tmp("ds"), "--json"])[1])
    (g,) = doc["groups"]
    most = max(s["records"] for s in g["shards"])
    ticks = [float(t.text) for t in root.iter(ns + "text")  # the tick labels end at the axis
             if t.get("text-anchor") == "end" and (t.text or "").replace(".", "", 1).isdigit()]
    steps = {round(b - a, 9) for a, b in zip(ticks, ticks[1:]) if b > a}
    expect(ticks and ticks[0] == 0 and max(ticks) >= most and len(steps) >= 1 and
           all(str(int(s)).strip("0") in ("1", "2", "5") for s in steps if s >= 1),
           f"shard axis ticks {ticks} for {most} records")
    shards = [grp for grp in root.iter(ns + "g") if grp.get("class") == "shards"]
    cells = sum(1 for s in g["shards"] for c in s["label_histogram"] if c > 0)
    expect(len(shards) == 1 and len(list(shards[0].iter(ns + "rect"))) == cells,
           f"{len(shards)} shard groups; {cells} non-empty (shard, label) cells")


# ---------------------------------------------------------------- outcomes (issue 27)

def hypergeom_p(population, successes, draws, x):
    """Two-sided: min(1, 2 min(P(X <= x), P(X >= x))), from scipy."""
    from scipy.stats import hypergeom
    h = hypergeom(population, successes, draws)
    return min(1.0, 2 * min(h.cdf(x), h.sf(x - 1)))


def shard_outcomes(d, doc, feature):
    """[[values of `feature`] per shard] of the only split, decoded here."""
    return [[decode_example(p)[feature][1][0] for _, _, p in frames(os.path.join(d, s["file"]))]
            for s in doc["groups"][0]["shards"]]


def expect_outcome_figures(doc, per_shard, task):
    (g,) = doc["groups"]
    values = [v for shard in per_shard for v in shard]
    n, mean = len(values), sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / n
    close(g["outcome"]["mean"], mean, "split outcome mean")
    ps = []
    for s, vals in zip(g["shards"], per_shard):
        m = sum(vals) / len(vals)
        close(s["outcome"]["mean"], m, f"{s['file']}: outcome mean")
        if task == "survival":
            p = hypergeom_p(n, round(sum(values)), len(vals), round(sum(vals)))
        else:
            se = math.sqrt(var / len(vals) * (n - len(vals)) / (n - 1))
            p = math.erfc(abs(m - mean) / se / math.sqrt(2))
        close(s["outcome"]["p_value"], p, f"{s['file']}: outcome p", 1e-6)
        ps.append(p)
    close(g["outcome"]["p_value"], min(1.0, min(ps) * len(ps)), "split outcome p", 1e-6)
    if task == "regression":
        close(g["outcome"]["sd"], math.sqrt(var * n / (n - 1)), "split target sd")


def rewrite_shards(d, per_shard_payloads):
    """New shard files with these records; dataset.json's bytes and records updated (the
    DALI indexes are left stale: no --deep on the result)."""
    m = json.load(open(os.path.join(d, "dataset.json")))
    (split,) = m["splits"].values()
    for sh, payloads in zip(split["shards"], per_shard_payloads):
        path = os.path.join(d, sh["file"])
        write_tfrecord(path, payloads)
        sh["bytes"], sh["records"] = os.path.getsize(path), len(payloads)
    json.dump(m, open(os.path.join(d, "dataset.json"), "w"), indent=2, sort_keys=True)


def check_outcome_datasets():
    rng = np.random.default_rng(11)
    with open(tmp("outcomes.csv"), "w") as f:
        f.write("key,os,status,tmb\n")
        for i in range(40):
            f.write(f"S{i},{rng.uniform(1, 50):.2f},{['alive', 'dead'][i % 3 == 0]},"
                    f"{rng.normal(4, 2):.3f}\n")
    for task, args, feature in (
            ("survival", ["--time-column", "os", "--event-column", "status"], "event"),
            ("regression", ["--target-column", "tmb"], "target")):
        d = tmp(f"ds_{task}")
        code, _, err = run([mltool, "pack", tmp("feat"), "--labels", tmp("outcomes.csv"), "-o", d,
                            "--task", task, *args, "--split", "train=1", "--shards", "4", "-q"])
        expect(code == 0, f"pack {task}: exit {code}: {err}")
        code, doc, err = inspect(d, "--check", "--deep")
        expect(code == 0, f"inspect --check --deep of a packed {task} dataset: exit {code}: {err}")
        expect(doc["task"] == task and doc["labels"] == [] and doc["checks"]["violations"] == [],
               f"{task}: {doc['task']} {doc['labels']} {doc['checks']['violations']}")
        expect(doc["groups"][0]["outcome"]["figure"] ==
               {"survival": "event_rate", "regression": "target_mean"}[task], "outcome figure")
        per_shard = shard_outcomes(d, doc, feature)
        expect_outcome_figures(doc, per_shard, task)
        code, out, _ = run([mltool, "inspect", d])
        figure = {"survival": "event rate", "regression": "target mean"}[task]
        expect(code == 0 and f"outcome: {figure}" in out and "shards compared by" in out,
               f"text report: {out[:600]}")
        # The same records dealt by outcome: the first shard gets the largest values.
        payloads = sorted((p for sh in doc["groups"][0]["shards"]
                           for _, _, p in frames(os.path.join(d, sh["file"]))),
                          key=lambda p: -decode_example(p)[feature][1][0])
        counts = [s["records"] for s in doc["groups"][0]["shards"]]
        starts = np.cumsum([0] + counts)
        rewrite_shards(d, [payloads[a:b] for a, b in zip(starts[:-1], starts[1:])])
        code, doc, err = inspect(d, "--check")
        expect(code == 4 and [v["check"] for v in doc["checks"]["violations"]] == ["outcome-p"],
               f"{task} shards sorted by outcome: exit {code}, {doc['checks']['violations']}")
        expect(f"train: outcome-p" in err and figure in err, f"message: {err.strip()}")
        expect_outcome_figures(doc, shard_outcomes(d, doc, feature), task)
    # dataset.json's outcome_stats disagreeing with the shards.
    d = tmp("ds_survival")
    m = json.load(open(os.path.join(d, "dataset.json")))
    m["splits"]["train"]["outcome_stats"]["events"] += 1
    json.dump(m, open(os.path.join(d, "dataset.json"), "w"), indent=2, sort_keys=True)
    code, _, err = inspect(d)
    expect(code == 2 and "/splits/train/outcome_stats/events: " in err and "events" in err,
           f"outcome_stats off by one event: exit {code}: {err.strip()}")
    m["splits"]["train"]["outcome_stats"]["events"] -= 1
    json.dump(m, open(os.path.join(d, "dataset.json"), "w"), indent=2, sort_keys=True)
    # A record whose event is neither 0 nor 1.
    bad = example({"event": 2.0, "time": 3.0, "index": 0, "slide": "S0"})
    first = [p for _, _, p in frames(os.path.join(d, "train-00000-of-00004.tfrecord"))]
    rest = [[p for _, _, p in frames(os.path.join(d, f"train-0000{i}-of-00004.tfrecord"))]
            for i in range(1, 4)]
    rewrite_shards(d, [first[:5] + [bad] + first[5:]] + rest)
    code, _, err = inspect(d)
    expect(code == 2 and "train-00000-of-00004.tfrecord: record 5" in err and
           "event 2" in err and "neither 0 nor 1" in err, f"bad event: exit {code}: {err.strip()}")


run_checks("inspect", [check_balanced_dataset, check_unbalanced_files, check_corrupt_shard,
                       check_index_beyond_the_store, check_text_and_plot,
                       check_outcome_datasets], only, fixtures)
