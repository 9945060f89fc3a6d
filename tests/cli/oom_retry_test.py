"""Out-of-memory recovery (docs/memory-modes.md#out-of-memory) through the test seam
MLTOOL_DEBUG_OOM (docs/development.md): the listed batches' (extract, predict) or steps'
(train) first attempt throws the c10::OutOfMemoryError a GPU throws. Each injected run must
finish and equal an uninjected one: extract's rows byte for byte outside the split batches and
within 1e-5 relative inside them (the split batches listed in features.json as the documented
rule says, computed here independently), a killed and resumed injected extraction the
un-killed injected run's bytes; train's weights within 1e-6 relative of the uninterrupted run,
with the doubled micro-batches in run.json, metrics.jsonl and a resumed run; predict's scores
likewise, the splits in its journal. --no-oom-retry fails as before.

    oom_retry_test.py MLTOOL [TEST...]   # TEST: check_* names without check_
"""
import glob
import json
import os
import signal
import struct
import subprocess
import sys

import numpy as np
import torch

import train_test as T  # also puts scripts/fixtures on sys.path
from cli_common import expect, rename_shim, run, run_checks, run_json, tmp
from torch_models import Linear1

import make_slides  # noqa: E402  (scripts/fixtures, on sys.path through train_test)

mltool = os.path.abspath(sys.argv[1])
only = set(sys.argv[2:])
RETRY_FULL_AFTER = 16  # docs/memory-modes.md: batches at the reduced size before --batch again
torch.set_num_threads(2)


def fixtures():
    what = T.fixtures()  # tiles 300 x 32 (ds), bags
    make_slides.generate([
        ["generic_tiff", [tmp("C.tif"), 2048, 1536, 0.25, [(0, 0, 2048, 1280), (300, 1280, 1700, 1536)]],
         {"min_level": 256}],
        ["generic_tiff", [tmp("D.tif"), 2048, 1024, 0.25, [(0, 0, 2048, 1024)]], {"min_level": 256}],
    ])
    code, _, err = run([mltool, "tile", tmp("C.tif"), tmp("D.tif"), "-o", tmp("tiles.lmdb"), "--mpp", "0.5",
                        "--tile-size", "64", "--format", "png", "-q"])
    expect(code == 0, f"mltool tile: exit {code}: {err}")
    torch.manual_seed(1234)
    torch.jit.script(Linear1().eval()).save(tmp("linear1.pt"))
    return what


# ---------------------------------------------------------------- extract

EXTRACT = ["--model", None, "--input-size", "32", "--device", "cpu", "--batch", "4", "--threads", "2",
           "--math-threads", "2"]


def extract_args(chunk_rows=1000):
    args = list(EXTRACT)
    args[1] = tmp("linear1.pt")
    return args + ["--chunk-rows", str(chunk_rows)]


def extract(out, env=None, *more, chunk_rows=1000):
    code, summary, err = run_json([mltool, "extract", tmp("tiles.lmdb"), "-o", out, *extract_args(chunk_rows),
                                   *more, "--json"], env=env)
    return code, summary, err


def extract_ok(out, env=None, *more, chunk_rows=1000):
    code, summary, err = extract(out, env, *more, chunk_rows=chunk_rows)
    expect(code == 0, f"extract {out} (env {env}): exit {code}: {err[-1500:]}")
    return summary


def expected_splits(rows, batch, injected):
    """The documented rule, independently: a batch whose first attempt runs out of memory is
    computed in pieces of half the size (rounded up) until it fits; the next RETRY_FULL_AFTER
    batches keep that size, then --batch is tried again. Returns features.json's split_batches."""
    out, size, streak = [], batch, 0
    batches = (rows + batch - 1) // batch
    for b in range(batches):
        n = min(batch, rows - b * batch)
        piece = min(size, n)
        oom = b in injected
        if oom:
            piece = (piece + 1) // 2  # the seam throws once: half of the first attempt fits
        if piece < n:
            out.append({"batch": b, "size": piece, "oom": oom, "first_row": b * batch, "rows": n})
        if oom:
            size, streak = piece, 0
        elif size < batch:
            streak += 1
            if streak >= RETRY_FULL_AFTER:
                size, streak = batch, 0
    return out


def features(out):
    meta = json.load(open(os.path.join(out, "features.json")))
    return np.load(os.path.join(out, "features.npy")), meta


def files_of(out):
    return {n: open(os.path.join(out, n), "rb").read() for n in ("features.npy", "keys.txt", "features.json")}


def check_extract():
    extract_ok(tmp("f_clean"))
    s = extract_ok(tmp("f_oom"), {"MLTOOL_DEBUG_OOM": "2,5"})
    X0, m0 = features(tmp("f_clean"))
    X1, m1 = features(tmp("f_oom"))
    rows = m0["rows"]
    expect(rows > 4 * (6 + RETRY_FULL_AFTER + 2), f"fixture too small: {rows} rows")
    want = expected_splits(rows, 4, {2, 5})
    expect(m1.get("split_batches") == want, f"split_batches {m1.get('split_batches')}, expected {want}")
    expect("split_batches" not in m0, "an uninjected run lists split batches")
    split = np.zeros(rows, bool)
    for e in want:
        split[e["first_row"]:e["first_row"] + e["rows"]] = True
    expect(split.any() and not split.all(), "some rows split, some not")
    expect(X0.tobytes() != b"" and (X1[~split] == X0[~split]).all(), "rows outside split batches differ")
    rel = np.abs(X1[split].astype(np.float64) - X0[split]).max() / np.abs(X0).max()
    expect(rel <= 1e-5, f"rows of split batches: max relative difference {rel}")
    expect(open(os.path.join(tmp("f_oom"), "keys.txt")).read() == open(os.path.join(tmp("f_clean"), "keys.txt")).read(),
           "keys differ")
    expect(s["rows"] == rows, f"summary {s}")


def check_extract_log_once():
    code, _, err = extract(tmp("f_log"), {"MLTOOL_DEBUG_OOM": "1"})
    expect(code == 0, f"exit {code}: {err}")
    lines = [l for l in err.splitlines() if "out of memory" in l]
    expect(len(lines) == 1 and "batch 1" in lines[0] and "4 tiles" in lines[0] and "2 tiles" in lines[0],
           f"one log line naming the batch and both sizes: {lines}")


def kill_at_chunk(out, chunks, env, chunk_rows):
    e = dict(os.environ, **env, LD_PRELOAD=rename_shim(), KILL_RENAME_MATCH=".json",
             KILL_AT_RENAME=str(chunks + 2))
    p = subprocess.run([mltool, "extract", tmp("tiles.lmdb"), "-o", out, *extract_args(chunk_rows)], env=e,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    expect(p.returncode == -signal.SIGKILL, f"killed before chunk {chunks}: exit {p.returncode}: {p.stderr[-800:]}")
    got = len(glob.glob(os.path.join(out, ".extract-partial", "chunk-*.json")))
    expect(got == chunks, f"killed with {got} committed chunks, not {chunks}")


def check_extract_resume():
    env = {"MLTOOL_DEBUG_OOM": "2,5"}
    # chunks of 6 rows: kills in the middle of batches, before, inside and after the splits
    for chunk_rows, chunks in ((6, 1), (6, 2), (6, 3), (6, 5), (10, 4)):
        ref = tmp(f"f_ref{chunk_rows}")
        if not os.path.exists(ref):
            extract_ok(ref, env, chunk_rows=chunk_rows)
        out = tmp(f"f_kill{chunk_rows}_{chunks}")
        kill_at_chunk(out, chunks, env, chunk_rows)
        s = extract_ok(out, env, chunk_rows=chunk_rows)
        expect(s["resumed_from"] == chunks * chunk_rows, f"resumed from {s['resumed_from']}")
        a, b = files_of(out), files_of(ref)
        for n in a:
            if a[n] != b[n]:
                detail = ""
                if n == "features.json":
                    detail = f": {json.loads(a[n]).get('split_batches')} vs {json.loads(b[n]).get('split_batches')}"
                expect(False, f"killed after {chunks} chunks of {chunk_rows}, resumed: {n} differs{detail}")


def check_extract_merge():
    """Shards split their own batches; --merge renumbers their split rows as the merged store
    has them (rows of one entry stay one stretch unless other shards' slides come between)."""
    env = {"MLTOOL_DEBUG_OOM": "1,7"}
    parts = []
    for i in range(2):
        out = tmp(f"f_shard{i}")
        extract_ok(out, env, "--shard", f"{i}/2")
        parts.append(out)
    code, _, err = run([mltool, "extract", "--merge", *parts, "-o", tmp("f_merged")])
    expect(code == 0, f"merge: exit {code}: {err}")
    X, meta = features(tmp("f_merged"))
    shard_rows = sum(e["rows"] for p in parts for e in features(p)[1].get("split_batches", []))
    merged = meta.get("split_batches", [])
    expect(shard_rows > 0 and sum(e["rows"] for e in merged) == shard_rows,
           f"merged split rows {merged} vs the shards' {shard_rows}")
    keys = open(tmp("f_merged", "keys.txt")).read().split()
    for p in parts:
        pk = open(os.path.join(p, "keys.txt")).read().split()
        PX, pm = features(p)
        where = {k: i for i, k in enumerate(keys)}
        for e in pm.get("split_batches", []):
            rows = [where[pk[r]] for r in range(e["first_row"], e["first_row"] + e["rows"])]
            covered = any(m["batch"] == e["batch"] and m["first_row"] <= rows[0] < m["first_row"] + m["rows"]
                          for m in merged)
            expect(covered and (X[rows] == PX[e["first_row"]:e["first_row"] + e["rows"]]).all(),
                   f"{p}: split batch {e} not found in the merged store's {merged}")


def check_extract_refusals():
    code, _, err = extract(tmp("f_noretry"), {"MLTOOL_DEBUG_OOM": "2"}, "--no-oom-retry")
    expect(code == 3 and "out of memory" in err.lower(), f"--no-oom-retry: exit {code}: {err[-500:]}")
    expect(not os.path.exists(os.path.join(tmp("f_noretry"), "features.json")), "a failed run published")
    args = extract_args()
    args[args.index("--batch") + 1] = "1"
    code, _, err = run([mltool, "extract", tmp("tiles.lmdb"), "-o", tmp("f_one"), *args],
                       env={"MLTOOL_DEBUG_OOM": "0"})
    expect(code == 3 and "one tile" in err and "linear1.pt" in err and "input size 32" in err and "free" in err,
           f"one tile that does not fit: exit {code}: {err[-500:]}")
    code, _, err = extract(tmp("f_bad"), {"MLTOOL_DEBUG_OOM": "2,x"})
    expect(code == 2 and "MLTOOL_DEBUG_OOM" in err, f"a bad MLTOOL_DEBUG_OOM: exit {code}: {err[-300:]}")


# ---------------------------------------------------------------- train

TRAIN = None


def train_args():
    T.write_json(tmp("mlp_plain.json"), {"family": "mlp", "hidden": [32]})
    return [tmp("ds"), "--model", tmp("mlp_plain.json"), "--epochs", "2", "--batch", "16", "--log-every", "3",
            "--feed", "host"]


def train_env(env, *args):
    code, summary, err = run_json([mltool, "train", *args, "--json", "-q"], env=env)
    expect(code == 0, f"train {' '.join(args)} (env {env}): exit {code}: {err[-1500:]}")
    return summary


def oom_lines(run_dir):
    return [l for l in T.metrics(run_dir) if l.get("event") == "oom"]


def check_train_redo_exact():
    """Batch norm and dropout: the first attempt of a step moves the statistics and draws masks;
    the redo must put them back, so a run whose step 0 ran out with --micro-batches 2 (and went
    on with 4) has the bytes of a --micro-batches 4 run. --feed host: no feed fallback."""
    args = [tmp("ds"), "--model", tmp("mlp.json"), "--epochs", "2", "--batch", "16", "--feed", "host",
            "--micro-batches", "2"]
    T.train_ok(*args[:-1], "4", "-o", tmp("run_bn_mb4"))
    train_env({"MLTOOL_DEBUG_OOM": "0"}, *args, "-o", tmp("run_bn_oom0"))
    expect(open(tmp("run_bn_oom0", "model.safetensors"), "rb").read() ==
           open(tmp("run_bn_mb4", "model.safetensors"), "rb").read(),
           "an error in step 0 redone with 4 micro-batches: other weights than --micro-batches 4")


def check_train_feed_fallback():
    """--feed auto picks the pinned feed; an error in the first epoch drops it for the host
    feed, which serves the same batches: the weights are the clean run's bytes (batch norm and
    dropout on, the redone step draws the same masks)."""
    args = [tmp("ds"), "--model", tmp("mlp.json"), "--epochs", "2", "--batch", "16"]
    T.train_ok(*args, "-o", tmp("run_f_clean"))
    s = train_env({"MLTOOL_DEBUG_OOM": "1"}, *args, "-o", tmp("run_f_oom"))
    expect(s["feed"] == "host", f"feed {s['feed']}")
    expect(open(tmp("run_f_oom", "model.safetensors"), "rb").read() ==
           open(tmp("run_f_clean", "model.safetensors"), "rb").read(), "the host feed fallback: other weights")
    lines = oom_lines(tmp("run_f_oom"))
    expect([(l["step"], l.get("feed")) for l in lines] == [(2, "host")], f"oom lines {lines}")
    expect(json.load(open(tmp("run_f_oom", "run.json")))["runtime"]["feed"] == "host", "run.json runtime.feed")
    other = [l for l in T.metrics(tmp("run_f_oom")) if l.get("event") != "oom"]
    expect(other == T.metrics(tmp("run_f_clean")), "metrics.jsonl differs beyond the oom line")


def check_train():
    args = train_args()
    T.train_ok(*args, "-o", tmp("run_clean"))
    s = train_env({"MLTOOL_DEBUG_OOM": "3,7"}, *args, "-o", tmp("run_oom"))
    T.tensors_close(tmp("run_oom", "model.safetensors"), tmp("run_clean", "model.safetensors"), 1e-6)
    expect(s["memory"]["micro_batches"] == 4 and s["memory"]["mode"] == "micro_batches", f"memory {s['memory']}")
    run_json_doc = json.load(open(tmp("run_oom", "run.json")))
    expect(run_json_doc["runtime"].get("oom_retry") == {"micro_batches": 4, "sections": 1},
           f"run.json runtime {run_json_doc['runtime']}")
    lines = oom_lines(tmp("run_oom"))
    expect([(l["step"], l["micro_batches"]) for l in lines] == [(4, 2), (8, 4)], f"metrics.jsonl oom lines {lines}")
    # The step lines' losses: equal to the clean run's within the tolerance.
    a = [l for l in T.metrics(tmp("run_oom")) if l.get("event") == "step"]
    b = [l for l in T.metrics(tmp("run_clean")) if l.get("event") == "step"]
    expect(len(a) == len(b) and all(abs(x["loss"] - y["loss"]) <= 1e-5 * abs(y["loss"]) for x, y in zip(a, b)),
           "step losses differ")
    # Stopped after the first change, resumed without the seam: continues with 2 micro-batches,
    # as the uninterrupted run with the same injection did until its next error.
    train_env({"MLTOOL_DEBUG_OOM": "3"}, *args, "-o", tmp("run_oom3"))
    train_env({"MLTOOL_DEBUG_OOM": "3"}, *args, "-o", tmp("run_part"), "--max-steps", "5")
    s = train_env({}, *args, "-o", tmp("run_part"), "--resume")
    expect(s["resumed_from"] == 5 and s["memory"]["micro_batches"] == 2, f"resumed {s['resumed_from']}, {s['memory']}")
    expect(open(tmp("run_part", "model.safetensors"), "rb").read() ==
           open(tmp("run_oom3", "model.safetensors"), "rb").read(), "a resumed run of an oom run: other weights")
    expect(json.load(open(tmp("run_part", "run.json")))["runtime"].get("oom_retry", {}).get("micro_batches") == 2,
           "run.json of the resumed run")


def check_train_sections():
    # --batch 2: 2 micro-batches of one sample are the end; then sections of one block each.
    args = [tmp("ds"), "--model", tmp("mlp_plain.json"), "--epochs", "1", "--batch", "2", "--feed", "host",
            "--max-steps", "12"]
    T.write_json(tmp("mlp_plain.json"), {"family": "mlp", "hidden": [32]})
    T.train_ok(*args, "-o", tmp("run_s_clean"))
    s = train_env({"MLTOOL_DEBUG_OOM": "1,4"}, *args, "-o", tmp("run_s_oom"))
    expect(s["memory"]["mode"] == "sections" and s["memory"]["sections"] == [["hidden1"], ["head"]],
           f"memory {s['memory']}")
    lines = oom_lines(tmp("run_s_oom"))
    expect([(l["step"], l["micro_batches"], l["sections"]) for l in lines] == [(2, 2, 1), (5, 1, 2)],
           f"oom lines {lines}")
    expect(json.load(open(tmp("run_s_oom", "run.json")))["runtime"]["oom_retry"] == {"micro_batches": 1, "sections": 2},
           "run.json oom_retry")
    # Weights: the stopped run's last.pt is not exported; compare the clean and injected
    # runs by resuming both to the end of the epoch.
    T.train_ok(*args[:-2], "-o", tmp("run_s_clean"), "--resume")
    train_env({"MLTOOL_DEBUG_OOM": "1,4"}, *args[:-2], "-o", tmp("run_s_oom"), "--resume")
    T.tensors_close(tmp("run_s_oom", "model.safetensors"), tmp("run_s_clean", "model.safetensors"), 1e-6)
    # --sections 2 of a three-block model: one block a section after an error, kept on resume.
    T.write_json(tmp("mlp3.json"), {"family": "mlp", "hidden": [32, 32]})
    args3 = [tmp("ds"), "--model", tmp("mlp3.json"), "--epochs", "1", "--batch", "8", "--feed", "host",
             "--sections", "2"]
    T.train_ok(*args3, "-o", tmp("run_s3_clean"))
    train_env({"MLTOOL_DEBUG_OOM": "2"}, *args3, "-o", tmp("run_s3_part"), "--max-steps", "4")
    s = train_env({}, *args3, "-o", tmp("run_s3_part"), "--resume")
    expect(s["memory"]["sections"] == [["hidden1"], ["hidden2"], ["head"]], f"memory {s['memory']}")
    expect([(l["step"], l["sections"]) for l in oom_lines(tmp("run_s3_part"))] == [(3, 3)], "oom lines")
    T.tensors_close(tmp("run_s3_part", "model.safetensors"), tmp("run_s3_clean", "model.safetensors"), 1e-6)
    # One block and one sample a micro-batch: nothing smaller; the error names what was tried.
    T.write_json(tmp("linear.json"), {"family": "mlp", "hidden": []})
    code, _, err = run([mltool, "train", tmp("ds"), "--model", tmp("linear.json"), "--epochs", "1", "--batch", "1",
                        "--feed", "host", "-o", tmp("run_s_none"), "-q"], env={"MLTOOL_DEBUG_OOM": "2"})
    expect(code == 3 and "step 3" in err and "1 micro-batch" in err and "free" in err,
           f"nothing smaller left: exit {code}: {err[-600:]}")


def check_train_no_retry():
    args = train_args()
    code, _, err = run([mltool, "train", *args, "-o", tmp("run_noretry"), "--no-oom-retry", "-q"],
                       env={"MLTOOL_DEBUG_OOM": "3"})
    expect(code == 3 and "out of memory" in err.lower(), f"--no-oom-retry: exit {code}: {err[-500:]}")
    doc = json.load(open(tmp("run_noretry", "run.json")))
    expect(doc["runtime"].get("no_oom_retry") is True and "oom_retry" not in doc["runtime"], f"run.json {doc['runtime']}")


# ---------------------------------------------------------------- predict

def journal(out):
    """{slide: (logits, split_batches or None)} of a prediction's journal (.predict/)."""
    found = {}
    for path in sorted(glob.glob(os.path.join(out, ".predict", "*.safetensors"))):
        tensors, meta = T.read_safetensors(path)
        splits = json.loads(meta["mltool.split_batches"]) if "mltool.split_batches" in meta else None
        found[os.path.basename(path)[:-len(".safetensors")]] = (tensors["logits"], splits)
    return found


def journal_splits(out):
    return {k: v[1] for k, v in journal(out).items() if v[1] is not None}


def predictions(out):
    import csv
    with open(os.path.join(out, "predictions.csv")) as f:
        return list(csv.reader(f))


def check_predict():
    args = train_args()
    if not os.path.exists(tmp("run_clean", "model.safetensors")):
        T.train_ok(*args, "-o", tmp("run_clean"))
    base = [mltool, "predict", tmp("run_clean"), tmp("feat"), "--batch", "4", "--device", "cpu", "-q", "--json"]
    code, s0, err = run_json([*base, "-o", tmp("p_clean")])
    expect(code == 0, f"predict: exit {code}: {err}")
    # 20 slides of 15 tiles: 4 batches a slide; batch 5 is slide S01's second, 9 its S02's second.
    code, s1, err = run_json([*base, "-o", tmp("p_oom")], env={"MLTOOL_DEBUG_OOM": "5,9"})
    expect(code == 0 and s1["split_batches"] == 6 and s0["split_batches"] == 0, f"exit {code}: {s1} {err[-800:]}")
    want = {"S01": [{"batch": 5, "size": 2, "oom": True, "first_row": 4, "rows": 4},
                    {"batch": 6, "size": 2, "oom": False, "first_row": 8, "rows": 4},
                    {"batch": 7, "size": 2, "oom": False, "first_row": 12, "rows": 3}],
            "S02": [{"batch": 9, "size": 2, "oom": True, "first_row": 4, "rows": 4},
                    {"batch": 10, "size": 2, "oom": False, "first_row": 8, "rows": 4},
                    {"batch": 11, "size": 2, "oom": False, "first_row": 12, "rows": 3}]}
    got = journal_splits(tmp("p_oom"))
    expect(got == want, f"journal splits {got}, expected {want} (each slide starts at --batch)")
    a, b = predictions(tmp("p_oom")), predictions(tmp("p_clean"))
    expect(len(a) == len(b) and [r[:2] for r in a] == [r[:2] for r in b], "predictions' rows")
    ja, jb = journal(tmp("p_oom")), journal(tmp("p_clean"))
    expect(set(ja) == set(jb) and len(ja) == 20, f"journaled slides {sorted(ja)}")
    for slide in ja:
        la, lb = ja[slide][0], jb[slide][0]
        if slide in want:
            rel = float(np.abs(la.astype(np.float64) - lb).max() / np.abs(lb).max())
            expect(rel <= 1e-5, f"{slide}: logits differ by {rel} relative")
        else:
            expect(la.tobytes() == lb.tobytes(), f"{slide}: no split, but other logits")
    # Killed and resumed with the same injection: the un-killed injected run's bytes.
    out = tmp("p_kill")
    env = dict(os.environ, MLTOOL_DEBUG_OOM="5,9", LD_PRELOAD=rename_shim(), KILL_AT_RENAME="3")
    p = subprocess.run([*base[:-1], "-o", out], env=env, capture_output=True, text=True)
    expect(p.returncode == -9, f"not killed: exit {p.returncode} {p.stderr[-500:]}")
    code, s, err = run_json([*base, "-o", out], env={"MLTOOL_DEBUG_OOM": "5,9"})
    expect(code == 0 and s["resumed"] > 0, f"resumed: exit {code} {s} {err[-500:]}")
    expect(open(os.path.join(out, "predictions.csv"), "rb").read() ==
           open(tmp("p_oom", "predictions.csv"), "rb").read(), "killed and resumed: other predictions")
    expect(journal_splits(out) == got, f"killed and resumed: journal splits {journal_splits(out)}")
    code, _, err = run([*base, "-o", tmp("p_noretry"), "--no-oom-retry"], env={"MLTOOL_DEBUG_OOM": "5"})
    expect(code == 3 and "out of memory" in err.lower(), f"--no-oom-retry: exit {code}: {err[-500:]}")


if __name__ == "__main__":
    run_checks("oom retry", [check_extract, check_extract_log_once, check_extract_resume, check_extract_merge,
                             check_extract_refusals,
                             check_train, check_train_redo_exact, check_train_feed_fallback, check_train_sections, check_train_no_retry, check_predict], only, fixtures)
