"""Crash consistency of tile, extract, pack and train: SIGKILL at a random point, run again,
compare with an uninterrupted run. Driven by scripts/crash-consistency.sh (see there)."""

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as c  # noqa: E402


def run(cmd, timeout=600):
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout)
    return p.returncode, time.monotonic() - t0, p.stderr


def run_and_kill(cmd, delay):
    """Start cmd in its own process group, SIGKILL the group after `delay` s. Returns
    (finished_before_kill, returncode, seconds run)."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    try:
        p.wait(timeout=delay)
        return True, p.returncode, time.monotonic() - t0
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    rc = p.wait()
    # It may have exited on its own between the timeout and the signal.
    return rc != -signal.SIGKILL, rc, time.monotonic() - t0


class Job:
    """One subcommand under test. out(trial_dir) is the output path; first/rerun the commands."""
    name = ""

    def __init__(self, a, inp, refs):
        self.a, self.inp, self.refs = a, inp, refs

    def out(self, d):
        return os.path.join(d, "out")

    def first(self, out):
        raise NotImplementedError

    def rerun(self, out):
        return self.first(out)

    def state(self, out):
        raise NotImplementedError

    def compare(self, ref, out):
        raise NotImplementedError

    def stray(self, ref, out):
        """Entries of the output that the reference does not have (temp files left published)."""
        extra = sorted(set(c.files_of(out)) - set(c.files_of(ref)))
        return extra

    def extra_checks(self, out):
        return []


class Tile(Job):
    name = "tile"

    def first(self, out):
        return c.tile_cmd(self.a.mltool, self.inp, out)

    def state(self, out):
        return c.tile_store_state(out)

    def compare(self, ref, out):
        return c.compare_tile_stores(ref, out)

    def stray(self, ref, out):
        return sorted(set(os.listdir(out)) - {"data.mdb", "lock.mdb"})


class Extract(Job):
    name = "extract"

    def first(self, out):
        return c.extract_cmd(self.a.mltool, self.refs["tiles"], out)

    def state(self, out):
        if os.path.exists(os.path.join(out, "features.json")):
            return "complete", "features.json published"
        part = os.path.join(out, ".extract-partial")
        if not os.path.isdir(part):
            return "none", "no output"
        names = os.listdir(part)
        chunks = [n for n in names if n != "config.json" and not n.startswith(".")]
        if not chunks:
            return "none", f".extract-partial holds {sorted(names)}"
        return "partial", f".extract-partial holds {len(names)} files"

    def compare(self, ref, out):
        # features.json too: nothing in it is run-specific for the same inputs (model, dims,
        # rows, the source tile store's path and key range), so bytes are compared.
        return c.compare_bytes(ref, out, ["features.npy", "keys.txt", "features.json"])


class Pack(Job):
    """A fresh output; the re-run is the same command with --overwrite (pack.md: an existing
    output is refused otherwise, and a kill after the rename leaves a complete one)."""
    name = "pack"

    def out(self, d):
        return os.path.join(d, "ds")

    def first(self, out):
        return c.pack_cmd(self.a.mltool, os.path.join(self.inp, "pack-features"),
                          os.path.join(self.inp, "pack-labels.csv"), out, group_by="patient")

    def rerun(self, out):
        return self.first(out) + ["--overwrite"]

    def state(self, out):
        parent = os.path.dirname(out)
        side = sorted(n for n in os.listdir(parent) if n != os.path.basename(out))
        if os.path.exists(out):
            done = os.path.exists(os.path.join(out, "dataset.json"))
            return ("complete" if done else "partial"), (
                "published" if done else "PUBLISHED WITHOUT dataset.json") + (f"; beside: {side}" if side else "")
        if side:
            files = sum(len(os.listdir(os.path.join(parent, s))) for s in side
                        if os.path.isdir(os.path.join(parent, s)))
            return "partial", f"{', '.join(side)} ({files} files)"
        return "none", "no output"

    def compare(self, ref, out):
        names = sorted(os.listdir(ref))
        diffs = c.compare_bytes(ref, out, names)
        return diffs

    def stray(self, ref, out):
        extra = sorted(set(c.files_of(out)) - set(c.files_of(ref)))
        return extra

    def leftovers(self, out):
        parent = os.path.dirname(out)
        return sorted(n for n in os.listdir(parent) if n != os.path.basename(out))

    def extra_checks(self, out):
        rc, _, err = run([self.a.mltool, "inspect", out, "--deep", "-q"])
        return [] if rc == 0 else [f"inspect --deep exit {rc}: {err.strip()[-300:]}"]


class Train(Job):
    """A fresh run directory; the re-run adds --resume when the run directory holds a run.json
    (train.md: --resume refuses a directory without one, "there is no run here"), else it is
    the same command."""
    name = "train"

    def first(self, out):
        return c.train_cmd(self.a.mltool, self.refs["dataset"], os.path.join(self.inp, "mlp.json"), out)

    def rerun(self, out):
        resume = os.path.exists(os.path.join(out, "run.json"))
        return self.first(out) + (["--resume"] if resume else [])

    def state(self, out):
        if not os.path.exists(out):
            return "none", "no run directory"
        if os.path.exists(os.path.join(out, "model.safetensors")):
            return "complete", "model.safetensors published"
        last = os.path.join(out, "checkpoints", "last.pt")
        if not os.path.exists(os.path.join(out, "run.json")):
            return "none", f"no run.json; holds {c.files_of(out)}"
        if not os.path.exists(last):
            return "none", "run.json, no checkpoint"
        return "partial", "checkpoint written"

    def compare(self, ref, out):
        diffs = c.compare_bytes(ref, out, ["model.safetensors", "best.safetensors", "predictions.csv"])
        diffs += c.compare_metrics(os.path.join(ref, "metrics.jsonl"), os.path.join(out, "metrics.jsonl"))
        # run.json: runtime.resumed_from is the step the re-run resumed at (0 uninterrupted).
        diffs += c.compare_json(os.path.join(ref, "run.json"), os.path.join(out, "run.json"),
                                drop=("runtime/resumed_from",))
        return diffs


def train_start_probe(a, inp, refs, work, results):
    """Targeted: SIGKILL train the moment its run directory appears (before run.json, the window
    random kills rarely hit), then run the same command again, and with --resume."""
    d = os.path.join(work, "trials", "train-start")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    out = os.path.join(d, "out")
    cmd = c.train_cmd(a.mltool, refs["dataset"], os.path.join(inp, "mlp.json"), out)
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    while p.poll() is None and not os.path.exists(out):
        time.sleep(0.0002)
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    left = c.files_of(out) if os.path.exists(out) else []
    has_run = os.path.exists(os.path.join(out, "run.json"))
    rc_plain, _, err_plain = run(cmd)
    rc_resume, err_resume = None, ""
    if rc_plain != 0:
        rc_resume, _, err_resume = run(cmd + ["--resume"])
    ok = rc_plain == 0 or rc_resume == 0
    diffs = Train(a, inp, refs).compare(os.path.join(work, "ref", "train-ref", "out"), out) if ok else []
    c.log(f"train   start probe: killed as the run directory appeared, leaving {left}"
          f"{' (run.json written)' if has_run else ' (no run.json)'}; same command exit {rc_plain}"
          + (f" ({err_plain.strip()})" if rc_plain else "")
          + (f"; with --resume exit {rc_resume}" + (f" ({err_resume.strip()})" if rc_resume else "")
             if rc_resume is not None else "")
          + ("; " + ("identical" if not diffs else "FAIL: " + " | ".join(diffs)) if ok else "; FAIL: no re-run succeeds without --overwrite"))
    results["train_start_probe"] = {"left": left, "run_json": has_run, "same_command_exit": rc_plain,
                                    "same_command_error": err_plain.strip(), "resume_exit": rc_resume,
                                    "resume_error": err_resume.strip(), "differences": diffs}
    return 0 if ok and not diffs else 1


JOBS = {"tile": Tile, "extract": Extract, "pack": Pack, "train": Train}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mltool", required=True)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--commands", default="tile,extract,pack,train")
    ap.add_argument("--trial", type=int, default=None, help="replay only this trial (1-based)")
    ap.add_argument("work")
    a = ap.parse_args()
    a.mltool = os.path.abspath(a.mltool) if os.sep in a.mltool else a.mltool
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "little")
    c.log(f"== crash consistency: seed {seed} (replay: --seed {seed} [--commands C --trial K]), "
          f"{a.trials} trials, work {a.work}")
    work = os.path.abspath(a.work)
    inp = c.make_fixture(work)
    refs_dir = os.path.join(work, "ref")
    shutil.rmtree(refs_dir, ignore_errors=True)
    os.makedirs(refs_dir)

    # Upstream products every trial reads: built once, uninterrupted.
    refs = {"tiles": os.path.join(refs_dir, "tile"), "features": os.path.join(refs_dir, "extract"),
            "dataset": os.path.join(refs_dir, "train-dataset")}
    for cmd in (c.tile_cmd(a.mltool, inp, refs["tiles"]),
                c.extract_cmd(a.mltool, refs["tiles"], refs["features"]),
                c.train_pack_cmd(a.mltool, refs["features"], os.path.join(inp, "labels.csv"), refs["dataset"])):
        rc, _, err = run(cmd)
        if rc != 0:
            sys.exit(f"fixture command failed ({rc}): {' '.join(cmd)}\n{err}")

    failures = 0
    results = {"seed": seed, "trials": a.trials, "commands": {}}
    for name in a.commands.split(","):
        job = JOBS[name](a, inp, refs)
        ref = job.out(os.path.join(refs_dir, name + "-ref"))
        os.makedirs(os.path.dirname(ref), exist_ok=True)
        # The reference: for tile and extract the upstream product is re-made here so its
        # duration is measured on its own; a second, control run checks the comparison itself
        # (an uninterrupted run must compare equal to another).
        rc, ref_seconds, err = run(job.first(ref))
        if rc != 0:
            sys.exit(f"{name}: reference run failed ({rc}): {err}")
        control = job.out(os.path.join(refs_dir, name + "-control"))
        os.makedirs(os.path.dirname(control), exist_ok=True)
        rc, control_seconds, err = run(job.first(control))
        control_diffs = (job.compare(ref, control) if rc == 0 else [f"exit {rc}: {err}"])
        control_diffs += job.extra_checks(control) if name == "pack" else []
        c.log(f"-- {name}: reference {ref_seconds:.2f} s, control {control_seconds:.2f} s, "
              f"control {'identical' if not control_diffs else 'DIFFERS: ' + '; '.join(control_diffs)}")
        if control_diffs:
            failures += 1
        rng = random.Random(f"{seed}/{name}")
        # The kill window: the run's duration, the shorter of the two uninterrupted runs (on a
        # shared machine a run slowed by a neighbour would put many kills after the end).
        span = min(ref_seconds, control_seconds)
        delays = [rng.uniform(0, span) for _ in range(a.trials)]
        stats = {"reference_seconds": ref_seconds, "control_seconds": control_seconds, "kill_window": span, "control_identical": not control_diffs,
                 "states": {"none": 0, "partial": 0, "complete": 0, "finished": 0},
                 "identical": 0, "failures": 0, "leftovers": 0, "trials": []}
        for k, delay in enumerate(delays, 1):
            if a.trial is not None and k != a.trial:
                continue
            d = os.path.join(work, "trials", name, f"{k:02d}")
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            out = job.out(d)
            finished, rc_killed, ran = run_and_kill(job.first(out), delay)
            if finished:
                st, detail = "finished", f"exited {rc_killed} before the kill"
            else:
                st, detail = job.state(out)
            stats["states"][st] += 1
            problems = []
            if finished and rc_killed != 0:
                problems.append(f"the run before the kill exited {rc_killed}")
            if name == "pack" and os.path.exists(out) and not os.path.exists(os.path.join(out, "dataset.json")):
                problems.append("published a dataset without dataset.json")
            rc, rerun_seconds, err = run(job.rerun(out))
            if rc != 0:
                problems.append(f"re-run exit {rc}: {err.strip()[-400:]}")
            else:
                problems += job.compare(ref, out)
                stray = job.stray(ref, out)
                if stray:
                    problems.append(f"stray files in the output: {stray}")
                problems += job.extra_checks(out)
            left = job.leftovers(out) if hasattr(job, "leftovers") else []
            if left:
                stats["leftovers"] += 1
            listing = sorted(os.listdir(out)) if os.path.isdir(out) else []
            if not problems:
                stats["identical"] += 1
            else:
                stats["failures"] += 1
            stats["trials"].append({"trial": k, "delay": round(delay, 4), "state": st, "detail": detail,
                                    "rerun_exit": rc, "rerun_seconds": round(rerun_seconds, 3),
                                    "problems": problems, "leftovers": left, "listing": listing})
            c.log(f"{name:7s} trial {k:2d}/{a.trials} kill at {delay:6.3f} s: {st:8s} ({detail}); "
                  f"re-run exit {rc} in {rerun_seconds:.2f} s; "
                  + ("identical" if not problems else "FAIL: " + " | ".join(problems))
                  + (f"; left beside the output: {left}" if left else ""))
            if not problems:
                shutil.rmtree(d, ignore_errors=True)  # keep failing trials for a look
        failures += stats["failures"]
        results["commands"][name] = stats
    if "train" in a.commands.split(",") and a.trial is None:
        failures += train_start_probe(a, inp, refs, work, results)
    c.log("")
    c.log("== summary (seed %d)" % seed)
    for name, s in results["commands"].items():
        st = s["states"]
        n = sum(st.values())
        c.log(f"{name:7s} trials {n}, killed before first output {st['none']}, mid-run {st['partial']}, "
              f"after output complete {st['complete']}, finished before the kill {st['finished']}; "
              f"identical {s['identical']}, failures {s['failures']}"
              + (f", runs that left files beside the output {s['leftovers']}" if s["leftovers"] else "")
              + f" (kill window {s['kill_window']:.2f} s)")
    with open(os.path.join(work, "crash-results.json"), "w") as f:
        json.dump(results, f, indent=1)
    c.log(f"details: {os.path.join(work, 'crash-results.json')}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
