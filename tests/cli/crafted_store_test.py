"""Stores crafted by hand (issue 53 item 11): a tile store whose keys carry a slide id that
slide_id_for never makes — "done/../../outside", "slides/../x", ids with '/', NUL, a line
break, "..", the empty id — and feature stores whose keys do the same. `export geojson`,
`export h5` (every --layout) and `predict` with heatmaps refuse each with exit 2, naming the
store and the key, and write nothing outside -o (the whole temporary directory is compared
before and after).

    crafted_store_test.py MLTOOL [TEST...]   # TEST: check_* names without check_
"""
import csv
import json
import os
import sys

import lmdb
import numpy as np

from cli_common import expect, run, run_checks, tmp, write_feature_store

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "fixtures"))
import tile_store  # noqa: E402

mltool = os.path.abspath(sys.argv[1])
only = set(sys.argv[2:])
PLACEHOLDER = "EVILSLIDE"
# Slide ids a store may be made to carry: each a name the checks must refuse.
HOSTILE = {"up2": "../../outside", "up1": "../x", "slash": "a/b", "nul": "x\0y", "newline": "x\ny",
           "dotdot": "..", "empty": ""}
# A feature store's keys.txt cannot hold a key with a line break (it ends the key): no case.
FEATURE_CASES = [c for c in HOSTILE if c != "newline"]
TILES = 4
DIMS = 8


def files_under(d):
    """Every file and directory under `d`, relative."""
    out = set()
    for root, dirs, files in os.walk(d):
        out.update(os.path.relpath(os.path.join(root, n), d) for n in dirs + files)
    return out


def rename_slide(path, old, new):
    """Renames slide `old` of the tile store `path` to `new` in every key of both databases,
    as someone editing the store with python-lmdb would."""
    env = lmdb.open(path, max_dbs=8, subdir=True)
    with env.begin(write=True) as txn:
        for name in (b"meta", b"tiles"):
            db = env.open_db(name, txn=txn)
            for k, v in list(txn.cursor(db=db)):
                if old.encode() in k:
                    txn.delete(k, db=db)
                    txn.put(k.replace(old.encode(), new.encode()), v, db=db)
    env.close()


def fixtures():
    rng = np.random.default_rng(7)
    slides = ["S1", "S2", PLACEHOLDER]
    keys = [tile_store.tile_key(s, t, 0) for s in slides for t in range(TILES)]
    matrix = rng.standard_normal((len(keys), DIMS))
    write_feature_store(tmp("features"), matrix, keys)
    with open(tmp("labels.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["key", "label"])
        w.writerows([k, "ab"[i % 2]] for i, k in enumerate(keys))
    code, _, err = run([mltool, "pack", tmp("features"), "--labels", tmp("labels.csv"), "-o", tmp("ds"),
                        "--split", "train=0.5,val=0.5", "--seed", "1"])
    expect(code == 0, f"pack: exit {code}: {err.strip()}")
    with open(tmp("mlp.json"), "w") as f:
        json.dump({"family": "mlp", "hidden": [8]}, f)
    code, _, err = run([mltool, "train", tmp("ds"), "--model", tmp("mlp.json"), "-o", tmp("run"), "--epochs", "1",
                        "--device", "cpu", "-q"])
    expect(code == 0, f"train: exit {code}: {err.strip()}")
    for case, sid in HOSTILE.items():
        d = tmp("cases", case)
        os.makedirs(d)
        store = os.path.join(d, "tiles.lmdb")
        tile_store.write_store(store, [{"id": s, "rows": TILES, "cols": 1} for s in slides], 16, encoding="png")
        rename_slide(store, PLACEHOLDER, sid)
        if case in FEATURE_CASES:
            write_feature_store(os.path.join(d, "features"), matrix, [k.replace(PLACEHOLDER, sid) for k in keys],
                                source={"tile_store": store})
    return f"{len(HOSTILE)} crafted tile and feature stores"


def expect_refused(case, args, store, key):
    """`mltool ARGS` (its -o inside the case's directory) exits 2 naming `store` and `key`
    (JSON-quoted, as mltool quotes keys) and leaves the temporary directory as it was, but for
    the case's output directory."""
    before = files_under(tmp())
    code, _, err = run([mltool, *args])
    expect(code == 2, f"{case}: {' '.join(args[:2])}: exit {code}, want 2: {err.strip()}")
    quoted = json.dumps(key)
    expect(store in err and quoted in err and "not written by mltool, or was altered" in err,
           f"{case}: the message names neither {store} nor the key {quoted}: {err.strip()}")
    out = os.path.relpath(tmp("cases", case, "out"), tmp())
    lock = os.path.join(os.path.dirname(out), ".out.lock")  # -o's lock (util::OutputLock), beside it
    added = {p for p in files_under(tmp()) - before if p not in (out, lock) and not p.startswith(out + os.sep)}
    expect(not added, f"{case}: {' '.join(args[:2])} wrote outside -o: {sorted(added)}")


def check_export_geojson():
    """export geojson of each crafted tile store: refused naming its done/ key."""
    for case, sid in HOSTILE.items():
        store = tmp("cases", case, "tiles.lmdb")
        expect_refused(case, ["export", "geojson", store, "-o", tmp("cases", case, "out")], store, "done/" + sid)


def check_export_h5():
    """export h5 of each crafted feature store, in every layout: refused naming the store's key."""
    for case in FEATURE_CASES:
        sid = HOSTILE[case]
        features = tmp("cases", case, "features")
        for layout in ("flat", "trident", "clam"):
            expect_refused(case, ["export", "h5", features, "-o", tmp("cases", case, "out"), "--layout", layout],
                           features, tile_store.tile_key(sid, 0, 0))


def check_predict_heatmaps():
    """predict with heatmaps (--tiles) on each crafted feature store: refused naming its key
    before any heatmap is drawn."""
    for case in FEATURE_CASES:
        sid = HOSTILE[case]
        features = tmp("cases", case, "features")
        store = tmp("cases", case, "tiles.lmdb")
        expect_refused(case, ["predict", tmp("run"), features, "-o", tmp("cases", case, "out"), "--tiles", store,
                              "--device", "cpu"], features, tile_store.tile_key(sid, 0, 0))


if __name__ == "__main__":
    run_checks("crafted stores", [check_export_geojson, check_export_h5, check_predict_heatmaps], only, fixtures)
