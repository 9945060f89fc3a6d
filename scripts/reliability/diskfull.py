"""Disk full: tile, extract, pack and train writing into a small file system (a tmpfs that
scripts/disk-full.sh mounts) that runs out of space at several points of each output. Checks:
a non-zero exit, an error on stderr that says "No space left on device" and names a file in the
file system, nothing published half-written, and — once space is freed — that running the same
command again (train: --resume when a run.json exists) finishes with the reference's output."""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as c  # noqa: E402

# Free space left for the output, as fractions of the reference output's size.
LEVELS = (0.0, 0.1, 0.5, 0.9)


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    return p.returncode, p.stderr


def du(path):
    if os.path.isfile(path):
        return os.stat(path).st_blocks * 512
    total = 0
    for root, _, files in os.walk(path):
        for n in files:
            total += os.stat(os.path.join(root, n)).st_blocks * 512
    return total


def fill(mount, leave):
    """A filler file so that about `leave` bytes stay free."""
    filler = os.path.join(mount, ".filler")
    if os.path.exists(filler):
        os.remove(filler)
    st = os.statvfs(mount)
    free = st.f_bavail * st.f_frsize
    size = max(0, free - leave)
    with open(filler, "wb") as f:
        chunk = b"\0" * (1 << 20)
        left = size
        try:
            while left > 0:
                n = f.write(chunk[:min(left, len(chunk))])
                left -= n
            f.flush()
        except OSError:
            pass
    return filler


def clear(mount):
    for n in os.listdir(mount):
        p = os.path.join(mount, n)
        shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.remove(p)


def check_tile(out, ref):
    """Published half-written = a slide with a done/ marker whose listed tiles are not all there."""
    notes = []
    if not os.path.exists(os.path.join(out, "data.mdb")):
        return notes, "no store"
    import lmdb
    env = lmdb.open(out, readonly=True, lock=False, max_dbs=16)
    try:
        try:
            tiles, meta = env.open_db(b"tiles", create=False), env.open_db(b"meta", create=False)
        except lmdb.Error:
            return notes, "store without databases"
        with env.begin() as txn:
            done = [k[5:].decode() for k, _ in txn.cursor(db=meta) if k.startswith(b"done/")]
            n = txn.stat(tiles)["entries"]
            for s in done:
                info = json.loads(txn.get(f"tiles/{s}".encode(), db=meta))
                for r, col in zip(info["row"], info["col"]):
                    if txn.get(f"{s}/{r:06d}_{col:06d}".encode(), db=tiles) is None:
                        notes.append(f"slide {s} marked done but tile {r},{col} missing")
                        break
    finally:
        env.close()
    return notes, f"{len(done)}/{len(c.SLIDES)} slides done, {n} tiles committed"


def check_extract(out, ref):
    notes = []
    if os.path.exists(os.path.join(out, "features.json")):
        notes += [f"features.json published over an incomplete store: {d}"
                  for d in c.compare_bytes(ref, out, ["features.npy", "keys.txt", "features.json"])]
        return notes, "features.json published"
    names = sorted(os.listdir(out)) if os.path.isdir(out) else []
    part = os.path.join(out, ".extract-partial")
    chunks = len(os.listdir(part)) if os.path.isdir(part) else 0
    return notes, f"output holds {names}; .extract-partial {chunks} files"


def check_pack(out, ref):
    notes = []
    parent = os.path.dirname(out)
    beside = sorted(n for n in os.listdir(parent) if n not in (os.path.basename(out), ".filler"))
    if beside:
        notes.append(f"left beside the output: {beside}")
    if os.path.exists(out):
        notes += [f"published dataset incomplete: {d}" for d in c.compare_bytes(ref, out, sorted(os.listdir(ref)))]
        return notes, "dataset published"
    return notes, "no dataset published" + (f"; beside: {beside}" if beside else "")


def check_train(out, ref):
    notes = []
    if not os.path.exists(out):
        return notes, "no run directory"
    files = c.files_of(out)
    temps = [f for f in files if ".partial-" in f]
    if temps:
        notes.append(f"temporary files left: {temps}")
    for n in ("model.safetensors", "best.safetensors", "model.pt", "predictions.csv"):
        p = os.path.join(out, n)
        if os.path.exists(p) and n != "model.pt" and os.path.getsize(p) != os.path.getsize(os.path.join(ref, n)):
            notes.append(f"{n} published with {os.path.getsize(p)} bytes, the reference has {os.path.getsize(os.path.join(ref, n))}")
    status = None
    if os.path.exists(os.path.join(out, "run.json")):
        try:
            status = json.load(open(os.path.join(out, "run.json"))).get("status")
        except ValueError as e:
            notes.append(f"run.json unreadable: {e}")
    return notes, f"holds {[f for f in files if '/' not in f]}; run.json status {status}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mltool", required=True)
    ap.add_argument("--mount", required=True)
    ap.add_argument("work")
    a = ap.parse_args()
    work = os.path.abspath(a.work)
    mount = os.path.abspath(a.mount)
    inp = c.make_fixture(work)
    refs = os.path.join(work, "ref")
    shutil.rmtree(refs, ignore_errors=True)
    os.makedirs(refs)
    R = {"tile": os.path.join(refs, "tiles"), "extract": os.path.join(refs, "features"),
         "dataset": os.path.join(refs, "train-dataset"), "pack": os.path.join(refs, "pack"),
         "train": os.path.join(refs, "run")}
    mk = {
        "tile": lambda out: c.tile_cmd(a.mltool, inp, out),
        "extract": lambda out: c.extract_cmd(a.mltool, R["tile"], out),
        "pack": lambda out: c.pack_cmd(a.mltool, os.path.join(inp, "pack-features"),
                                       os.path.join(inp, "pack-labels.csv"), out, group_by="patient"),
        "train": lambda out: c.train_cmd(a.mltool, R["dataset"], os.path.join(inp, "mlp.json"), out),
    }
    for cmd in (mk["tile"](R["tile"]), mk["extract"](R["extract"]),
                c.train_pack_cmd(a.mltool, R["extract"], os.path.join(inp, "labels.csv"), R["dataset"]),
                mk["pack"](R["pack"]), mk["train"](R["train"])):
        rc, err = run(cmd)
        if rc != 0:
            sys.exit(f"reference command failed ({rc}): {' '.join(cmd)}\n{err}")
    checks = {"tile": check_tile, "extract": check_extract, "pack": check_pack, "train": check_train}
    compare = {
        "tile": lambda ref, out: c.compare_tile_stores(ref, out),
        "extract": lambda ref, out: c.compare_bytes(ref, out, ["features.npy", "keys.txt", "features.json"]),
        "pack": lambda ref, out: c.compare_bytes(ref, out, sorted(os.listdir(ref))),
        "train": lambda ref, out: (c.compare_bytes(ref, out, ["model.safetensors", "best.safetensors", "predictions.csv"])
                                   + c.compare_metrics(os.path.join(ref, "metrics.jsonl"), os.path.join(out, "metrics.jsonl"))),
    }
    st = os.statvfs(mount)
    c.log(f"== disk full: a {st.f_blocks * st.f_frsize // 1024} KiB file system at {mount}; "
          f"free space left for each output: {', '.join(f'{int(l * 100)}%' for l in LEVELS)} of its size")
    failures = 0
    rows = []
    for name in ("tile", "extract", "pack", "train"):
        size = du(R[name])
        for level in LEVELS:
            clear(mount)
            out = os.path.join(mount, "out")
            fill(mount, int(size * level))
            st = os.statvfs(mount)
            free = st.f_bavail * st.f_frsize
            rc, err = run(mk[name](out))
            problems = []
            msg = " ".join(err.strip().splitlines()[-3:]) if err.strip() else ""
            if rc == 0:
                problems.append("exit 0 on a full file system")
            else:
                if "No space left on device" not in err:
                    problems.append("stderr does not say \"No space left on device\"")
                if not re.search(re.escape(mount) + r"/\S+", err):
                    problems.append("stderr names no file in the full file system")
            notes, state = checks[name](out, R[name])
            problems += notes
            # Space again: the same command (train: --resume if there is a run.json) must finish
            # with the reference's output.
            os.remove(os.path.join(mount, ".filler"))
            again = mk[name](out)
            if name == "pack" and os.path.exists(out):
                again += ["--overwrite"]
            if name == "train" and os.path.exists(os.path.join(out, "run.json")):
                again += ["--resume"]
            rc2, err2 = run(again)
            if rc2 != 0:
                problems.append(f"re-run with space: exit {rc2}: {err2.strip()[-300:]}")
            else:
                problems += [f"re-run with space: {d}" for d in compare[name](R[name], out)]
            failures += bool(problems)
            rows.append({"command": name, "free_bytes": free, "exit": rc, "stderr": msg,
                         "state": state, "rerun_exit": rc2, "problems": problems})
            c.log(f"{name:7s} free {free // 1024:6d} KiB ({int(level * 100):2d}% of {size // 1024} KiB): exit {rc}; "
                  f"{state}; re-run with space exit {rc2}; "
                  + ("ok" if not problems else "FAIL: " + " | ".join(problems)))
            c.log(f"        stderr: {msg[:400]}")
    clear(mount)
    with open(os.path.join(work, "diskfull-results.json"), "w") as f:
        json.dump(rows, f, indent=1)
    c.log(f"== disk full: {len(rows)} runs, {failures} with problems; details {os.path.join(work, 'diskfull-results.json')}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
