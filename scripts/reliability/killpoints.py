"""Deterministic kill points: SIGKILL extract, pack and train just before each of their renames
(kill_at_rename.c, LD_PRELOAD), run the same command again (pack: --overwrite; train: --resume
when a run.json exists), and check the output against an uninterrupted run and for temporary
files left behind. Complements the random kill points of crash.py, which rarely land in the
microseconds between a temporary file being complete and its rename.
  killpoints.py --mltool PATH WORK     (WORK: crash.py's work directory, its ref/ and input/)"""

import argparse
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as c  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mltool", required=True)
    ap.add_argument("--every", type=int, default=7, help="of the per-chunk renames, probe every Nth")
    ap.add_argument("work")
    a = ap.parse_args()
    work = os.path.abspath(a.work)
    inp, ref = os.path.join(work, "input"), os.path.join(work, "ref")
    shim = os.path.join(work, "kill_at_rename.so")
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", shim, os.path.join(HERE, "kill_at_rename.c"), "-ldl"], check=True)
    jobs = {
        "extract": (lambda out: c.extract_cmd(a.mltool, os.path.join(ref, "tile"), out),
                    os.path.join(ref, "extract"),
                    lambda r, o: c.compare_bytes(r, o, ["features.npy", "keys.txt", "features.json"]), []),
        "pack": (lambda out: c.pack_cmd(a.mltool, os.path.join(inp, "pack-features"),
                                        os.path.join(inp, "pack-labels.csv"), out, group_by="patient"),
                 os.path.join(ref, "pack-ref", "ds"),
                 lambda r, o: c.compare_bytes(r, o, sorted(os.listdir(r))), ["--overwrite"]),
        "train": (lambda out: c.train_cmd(a.mltool, os.path.join(ref, "train-dataset"), os.path.join(inp, "mlp.json"), out),
                  os.path.join(ref, "train-ref", "out"),
                  lambda r, o: (c.compare_bytes(r, o, ["model.safetensors", "best.safetensors", "predictions.csv"])
                                + c.compare_metrics(os.path.join(r, "metrics.jsonl"), os.path.join(o, "metrics.jsonl"))), []),
    }
    failures = 0
    for name, (mk, reference, compare, rerun_extra) in jobs.items():
        d = os.path.join(work, "killpoints", name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        out = os.path.join(d, "out")
        env = dict(os.environ, LD_PRELOAD=shim, KILL_RENAME_LOG="1")
        p = subprocess.run(mk(out), env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        renames = [line.split(" -> ")[1] for line in p.stderr.splitlines() if line.startswith("rename ")]
        shutil.rmtree(out, ignore_errors=True)
        # Every rename that is not a chunk/checkpoint repeat, and every Nth of those.
        picks = [k for k, t in enumerate(renames, 1)
                 if not ("chunk-" in t or "checkpoints/" in t) or k % a.every == 0]
        bad = 0
        for k in picks:
            for n in os.listdir(d):
                shutil.rmtree(os.path.join(d, n), ignore_errors=True)
            env = dict(os.environ, LD_PRELOAD=shim, KILL_AT_RENAME=str(k))
            subprocess.run(mk(out), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            again = mk(out) + (rerun_extra if os.path.exists(out) else [])
            if name == "train" and os.path.exists(os.path.join(out, "run.json")):
                again += ["--resume"]
            r = subprocess.run(again, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            problems = [] if r.returncode == 0 else [f"re-run exit {r.returncode}: {r.stderr.strip()[-200:]}"]
            if r.returncode == 0:
                problems += compare(reference, out)
                litter = [f for f in c.files_of(out) if ".partial-" in f]
                litter += [f"../{n}" for n in os.listdir(d) if n != "out"]
                if litter:
                    problems.append(f"left behind: {litter}")
            bad += bool(problems)
            target = renames[k - 1]
            rel = ("the output itself (publication)" if os.path.normpath(target) == os.path.normpath(out)
                   else os.path.relpath(target, out) if target.startswith(out + "/")
                   else os.path.relpath(target, d))
            c.log(f"{name:7s} killed before rename {k:3d}/{len(renames)} (→ {rel}): "
                  + ("ok" if not problems else "FAIL: " + " | ".join(problems)))
        c.log(f"{name:7s} kill points {len(picks)} of {len(renames)} renames, failures {bad}")
        failures += bad
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
