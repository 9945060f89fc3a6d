"""Shared helpers of the reliability scripts (crash consistency, disk full): the fixture
(synthetic slides, labels, a model spec, a larger synthetic feature store for pack), the
commands, and readers that turn each product into something comparable."""

import hashlib
import json
import os
import subprocess
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAKE_SLIDES = os.path.join(REPO, "scripts", "fixtures", "make_slides.py")

# 4 slides of 4096 x 3072 px at 0.25 µm/px, tiled at 0.5 µm/px into 128-px tiles:
# 192 grid tiles a slide, a few hundred kept in all.
SLIDES = [(f"S{i}", "a" if i <= 2 else "b", 0.45 + 0.05 * (i % 4)) for i in range(1, 5)]
SLIDE_SIZE = "4096x3072"

# The synthetic store pack reads: big enough that a pack takes a few tenths of a second.
PACK_SLIDES, PACK_TILES_PER_SLIDE, PACK_DIMS = 240, 1000, 32


def log(*args):
    print(*args, flush=True)


def make_fixture(work):
    """Slides, labels, model spec and pack's feature store under WORK/input (kept between runs)."""
    inp = os.path.join(work, "input")
    os.makedirs(inp, exist_ok=True)
    for name, cls, fraction in SLIDES:
        path = os.path.join(inp, name + ".tif")
        if not os.path.exists(path):
            subprocess.run([sys.executable, MAKE_SLIDES, inp, "--size", SLIDE_SIZE,
                            "--tissue-fraction", f"{fraction:.2f}", "--mpp", "0.25",
                            "--tissue-class", cls, "--name", name + ".tif"],
                           check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(inp, "labels.csv"), "w") as f:
        f.write("key,label\n")
        for name, cls, _ in SLIDES:
            f.write(f"{name},{'normal' if cls == 'a' else 'tumor'}\n")
    with open(os.path.join(inp, "mlp.json"), "w") as f:
        json.dump({"family": "mlp", "hidden": [64], "dropout": 0.1, "batch_norm": True}, f)
    make_pack_store(os.path.join(inp, "pack-features"))
    with open(os.path.join(inp, "pack-labels.csv"), "w") as f:
        f.write("key,label,patient\n")
        for s in range(PACK_SLIDES):
            f.write(f"P{s:03d},{['normal', 'tumor', 'other'][s % 3]},patient{s // 2:03d}\n")
    return inp


def make_pack_store(d):
    """A feature store (formats.md) of PACK_SLIDES x PACK_TILES_PER_SLIDE rows, seeded."""
    if os.path.exists(os.path.join(d, "features.json")):
        return
    os.makedirs(d, exist_ok=True)
    rows = PACK_SLIDES * PACK_TILES_PER_SLIDE
    x = np.random.default_rng(7).standard_normal((rows, PACK_DIMS), dtype=np.float32)
    np.save(os.path.join(d, "features.npy"), x)
    with open(os.path.join(d, "keys.txt"), "w") as f:
        for s in range(PACK_SLIDES):
            for t in range(PACK_TILES_PER_SLIDE):
                f.write(f"P{s:03d}/{t // 40:06d}_{t % 40:06d}\n")
    meta = {"created_by": "scripts/reliability", "dims": PACK_DIMS, "dtype": "float32",
            "files": {"keys": "keys.txt", "matrix": "features.npy"}, "format": "mltool.features",
            "format_version": 1, "model": {"name": "synthetic"}, "rows": rows}
    with open(os.path.join(d, "features.json"), "w") as f:
        json.dump(meta, f, indent=2, sort_keys=True)


# --- the commands --------------------------------------------------------------------------

def tile_cmd(mltool, inp, out):
    return [mltool, "tile", *[os.path.join(inp, n + ".tif") for n, _, _ in SLIDES], "-o", out,
            "--mpp", "0.5", "--tile-size", "128", "--commit-every", "16", "--threads", "2", "-q"]


def extract_cmd(mltool, tiles, out):
    return [mltool, "extract", tiles, "-o", out, "--model", "builtin:color-texture",
            "--device", "cpu", "--chunk-rows", "32", "--batch", "32", "--threads", "2", "-q"]


def pack_cmd(mltool, features, labels, out, group_by=None):
    cmd = [mltool, "pack", features, "--labels", labels, "-o", out, "--shards", "8",
           "--seed", "1", "--threads", "2", "-q"]
    return cmd + (["--group-by", group_by] if group_by else [])


def train_pack_cmd(mltool, features, labels, out):
    """The (small) dataset train reads: the pipeline's own features, 2 slides per split."""
    return [mltool, "pack", features, "--labels", labels, "-o", out, "--split", "train=0.5,val=0.5",
            "--shards", "2", "--seed", "1", "-q"]


def train_cmd(mltool, dataset, spec, out, epochs=30):
    return [mltool, "train", dataset, "--model", spec, "-o", out, "--epochs", str(epochs),
            "--batch", "32", "--lr", "0.003", "--seed", "1", "--device", "cpu",
            "--checkpoint-every", "5", "--log-every", "5", "--threads", "2", "-q"]


# --- readers: products → comparable values -------------------------------------------------

def tile_store_content(path):
    """Logical content of an LMDB tile store: the set of keys of the main database (the names of
    the named databases) and every key/value of every named database. Excluded: the values of the
    main database's entries for the named databases (LMDB's own B-tree bookkeeping: root page,
    depth, page counts — physical layout, which depends on the history of writes) and the
    `seconds` member of each `meta` `done/<id>` marker (the wall time the slide took)."""
    import lmdb
    env = lmdb.open(path, readonly=True, lock=False, max_dbs=16, subdir=True)
    out = {"main_keys": [], "dbs": {}}
    try:
        with env.begin() as txn:
            names = [k for k, _ in txn.cursor()]
        out["main_keys"] = names
        for name in names:
            try:
                db = env.open_db(name, create=False)
            except lmdb.Error:
                continue  # a plain key of the main database: its value is compared below
            items = {}
            with env.begin(db=db) as txn:
                for k, v in txn.cursor():
                    if name == b"meta" and k.startswith(b"done/"):
                        doc = json.loads(v)
                        doc.pop("seconds", None)
                        v = json.dumps(doc, sort_keys=True).encode()
                    items[k] = v
            out["dbs"][name] = items
        with env.begin() as txn:
            for k, v in txn.cursor():
                if k not in out["dbs"]:
                    out["dbs"].setdefault(b"<main>", {})[k] = v
    finally:
        env.close()
    return out


def tile_store_state(path, slides=len(SLIDES)):
    """After a kill: (state, detail): none | partial | complete."""
    if not os.path.exists(os.path.join(path, "data.mdb")):
        return "none", "no store"
    import lmdb
    try:
        env = lmdb.open(path, readonly=True, lock=False, max_dbs=16)
    except lmdb.Error as e:
        return "none", f"unreadable: {e}"
    try:
        try:
            tiles = env.open_db(b"tiles", create=False)
            meta = env.open_db(b"meta", create=False)
        except lmdb.Error:
            return "none", "no databases yet"
        with env.begin() as txn:
            n = txn.stat(tiles)["entries"]
            done = sum(1 for k, _ in txn.cursor(db=meta) if k.startswith(b"done/"))
    finally:
        env.close()
    if done == slides:
        return "complete", f"{done} slides done, {n} tiles"
    if n == 0 and done == 0:
        return "none", "no tiles committed"
    return "partial", f"{done}/{slides} slides done, {n} tiles committed"


def compare_tile_stores(ref, out):
    a, b = tile_store_content(ref), tile_store_content(out)
    diffs = []
    if a["main_keys"] != b["main_keys"]:
        diffs.append(f"main database keys {a['main_keys']} vs {b['main_keys']}")
    for name in sorted(set(a["dbs"]) | set(b["dbs"])):
        da, db = a["dbs"].get(name, {}), b["dbs"].get(name, {})
        missing = sorted(set(da) - set(db))
        extra = sorted(set(db) - set(da))
        changed = sorted(k for k in set(da) & set(db) if da[k] != db[k])
        for what, keys in (("missing", missing), ("extra", extra), ("different", changed)):
            if keys:
                diffs.append(f"db {name.decode()}: {len(keys)} {what} keys, e.g. "
                             + ", ".join(k.decode(errors="replace") for k in keys[:3]))
    return diffs


def files_of(d):
    """Relative paths of every file and directory under d (sorted)."""
    out = []
    for root, dirs, files in os.walk(d):
        rel = os.path.relpath(root, d)
        for n in dirs + files:
            out.append(n if rel == "." else os.path.join(rel, n))
    return sorted(out)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def compare_bytes(ref, out, names):
    diffs = []
    for n in names:
        a, b = os.path.join(ref, n), os.path.join(out, n)
        if not os.path.exists(b):
            diffs.append(f"{n}: missing")
        elif os.path.getsize(a) != os.path.getsize(b) or sha256(a) != sha256(b):
            diffs.append(f"{n}: bytes differ ({os.path.getsize(a)} vs {os.path.getsize(b)} bytes)")
    return diffs


def compare_json(ref, out, drop=()):
    """drop: JSON paths ("a/b") removed from both before comparing."""
    def load(p):
        with open(p) as f:
            doc = json.load(f)
        for path in drop:
            parts = path.split("/")
            node = doc
            for p_ in parts[:-1]:
                node = node.get(p_, {}) if isinstance(node, dict) else {}
            if isinstance(node, dict):
                node.pop(parts[-1], None)
        return doc
    if not os.path.exists(out):
        return [f"{os.path.basename(out)}: missing"]
    a, b = load(ref), load(out)
    return [] if a == b else [f"{os.path.basename(out)}: differs{' (beyond ' + ', '.join(drop) + ')' if drop else ''}"]


METRICS_RUN_SPECIFIC = ("seconds", "samples_per_second")


def compare_metrics(ref, out):
    """metrics.jsonl line by line, without `seconds` and `samples_per_second` (train.md: wall
    times, the only members a resumed run may change)."""
    def lines(p):
        with open(p) as f:
            docs = [json.loads(line) for line in f if line.strip()]
        for d in docs:
            for k in METRICS_RUN_SPECIFIC:
                d.pop(k, None)
        return docs
    if not os.path.exists(out):
        return ["metrics.jsonl: missing"]
    a, b = lines(ref), lines(out)
    if len(a) != len(b):
        return [f"metrics.jsonl: {len(a)} lines vs {len(b)}"]
    bad = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    return [f"metrics.jsonl: {len(bad)} lines differ, first line {bad[0] + 1}: {a[bad[0]]} vs {b[bad[0]]}"] if bad else []
