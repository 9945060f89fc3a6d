"""The cluster recipes of docs/scaling-out.md on a real Slurm: scripts/cluster/*.sbatch
submitted as printed to a one-node Slurm started here (local_slurm.py: munged, slurmctld,
slurmd on localhost), over a small cohort — the real slide of ../shared/slides/ under three
names (left out, with a message, where that folder is absent), generated slides, and an
all-white one that makes its tile task exit 4 — against single-process runs:

- tile: a 4-task array; one task stopped mid-slide and sent SIGTERM in its step alone (as
  `--signal=TERM@120` does): mltool exits 75 and the script requeues the task, which
  completes; another task stopped mid-slide and cancelled, so an `afterok` merge
  never runs (DependencyNeverSatisfied, even after the task is requeued) and an `afterany`
  merge runs and refuses, naming the missing shard; the exit 4 of the white slide's task is
  what Slurm records; the task requeued with `scontrol requeue` finishes, and the merge by
  hand equals one `mltool tile` of the whole list, tile for tile and byte for byte;
- extract: a 2-task array (`--gres=none`, the CPU variant) with one task requeued while it
  runs (a preemption) and an `afterok` merge job, which waits for the rerun: equal to one
  `mltool extract` byte for byte (features.npy, keys.txt);
- train: slurm-train.sbatch with 2 srun tasks (ranks over Gloo, MASTER_ADDR from scontrol)
  ends with the weights of one process within 1e-5 (docs/train.md#data-parallel) and with
  those of `--nproc 2` bit for bit;
- cross-validation: a 3-task slurm-cv.sbatch array and an `afterok` gather equal
  `train --folds all` in one process, fold by fold, bit for bit.

Resources the scripts ask for (8 CPUs, 8G, GPUs) are overridden on the sbatch command line,
as a user with smaller nodes would. Skipped (exit 77) where Slurm is not installed and cannot
be (not root, no apt-get).

    slurm_test.py MLTOOL [TEST...]   # TEST: check_* names without check_
"""
import csv
import glob
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "cli"))
sys.path.insert(0, os.path.join(REPO, "scripts", "fixtures"))
from cli_common import Failure, expect, rename_shim, run, run_checks, tmp  # noqa: E402
import local_slurm  # noqa: E402
import make_slides  # noqa: E402

mltool = os.path.abspath(sys.argv[1])
only = set(sys.argv[2:])
SCRIPTS = os.path.join(REPO, "scripts", "cluster")
REAL_SLIDE = os.path.join(REPO, "..", "shared", "slides", "CMU-1-Small-Region.svs")
SLURM = None  # the LocalSlurm while the checks run
STOPPED_TASK = 1  # the tile task stopped mid-slide and cancelled
SIGNALLED_TASK = 0  # the tile task stopped mid-slide and sent SIGTERM as --signal does
NODE = ["--cpus-per-task=1", "--mem=1G"]  # the scripts' 8 CPUs and 8G, on a 2-CPU machine


# ---------------------------------------------------------------- the cohort and the jobs

def make_cohort():
    """slides.txt: the real slide as A, B, C (if present), generated G1, G2, an all-white W;
    shards of 4: 0 = A G1, 1 = B G2, 2 = W, 3 = C."""
    os.makedirs(tmp("slides"))
    region = [(256, 256, 2816, 1792)]
    calls = [["generic_tiff", [tmp("slides", f"G{i}.tif"), 3072, 2048, 0.25, region]]
             for i in (1, 2)]
    calls.append(["blank_tiff", [tmp("slides", "W.tif"), 2048, 1536, 0.25]])
    if os.path.exists(REAL_SLIDE):
        names = []
        for n in "ABC":
            os.symlink(os.path.realpath(REAL_SLIDE), tmp("slides", f"{n}.svs"))
            names.append(f"{n}.svs")
        note = "the real slide as A, B, C"
    else:
        print(f"note: {REAL_SLIDE} is absent: generated slides only", flush=True)
        calls += [["generic_tiff", [tmp("slides", f"{n}.tif"), 2048, 1536, 0.25,
                                    [(0, 0, 1536, 1024)]]] for n in "ABC"]
        names = ["A.tif", "B.tif", "C.tif"]
        note = "generated A, B, C"
    make_slides.generate(calls)
    order = [names[0], names[1], "W.tif", names[2], "G1.tif", "G2.tif"]
    with open(tmp("slides.txt"), "w") as f:
        f.writelines(tmp("slides", n) + "\n" for n in order)
    with open(tmp("labels.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["key", "label"])
        for n, label in zip(order, ["normal", "tumor", "normal", "normal", "tumor", "tumor"]):
            if n != "W.tif":
                w.writerow([n.split(".")[0], label])
    return note


def stopping_wrapper():
    """bin/mltool: the real mltool, except in the first run of array tasks STOP_TASK of a job
    submitted with STOP_COMMAND (tile, extract) in its environment, which kill_at_rename.c
    stops (SIGSTOP) just before its first rename to a name containing STOP_MATCH: mid-run,
    with work committed, so the test can cancel or requeue it there."""
    os.makedirs(tmp("bin"))
    path = tmp("bin", "mltool")
    with open(path, "w") as f:
        f.write(f"""#!/bin/bash
if [ -n "${{STOP_COMMAND:-}}" ] && [ "$1" = "$STOP_COMMAND" ] &&
   [[ " $STOP_TASK " == *" ${{SLURM_ARRAY_TASK_ID:-}} "* ]] && [ "${{SLURM_RESTART_COUNT:-0}}" = 0 ]; then
  export LD_PRELOAD={rename_shim()} KILL_AT_RENAME=1 KILL_SIGNAL=STOP KILL_RENAME_MATCH=$STOP_MATCH
fi
exec {mltool} "$@"
""")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


def job_env(**extra):
    """The submitting shell's environment (sbatch passes it on): mltool on PATH, node-local
    files under TMPDIR, the scripts' variables."""
    env = {"PATH": tmp("bin") + os.pathsep + os.environ["PATH"], "TMPDIR": tmp("node-local")}
    env.update(extra)
    return env


def sbatch(args, **extra):
    return SLURM.sbatch(args, cwd=tmp("work"), env=job_env(**extra))


def log_of(pattern):
    paths = glob.glob(tmp("work", "logs", pattern))
    return "".join(open(p, errors="replace").read()[-3000:] for p in sorted(paths))


def finished(job, what, ok_codes=("0:0",)):
    """Waits for every task of `job`; each must have completed with an exit in ok_codes."""
    jobs = SLURM.wait(job)
    bad = {k: (v["JobState"], v["ExitCode"]) for k, v in jobs.items()
           if v["ExitCode"] not in ok_codes}
    expect(not bad, f"{what}: {bad}\n{log_of('*')}")
    return jobs


def ok(cmd, what):
    code, out, err = run(cmd)
    expect(code == 0, f"{what}: exit {code}: {err.strip()[-2000:]}")
    return out


def fixtures():
    global SLURM
    note = make_cohort()
    stopping_wrapper()
    for d in ("work/logs", "node-local", "shared"):
        os.makedirs(tmp(d))
    t0 = time.time()
    SLURM = local_slurm.LocalSlurm(tmp("slurm"))
    try:
        SLURM.start()
    except RuntimeError as e:
        raise Failure(f"starting Slurm: {e}")
    return f"{note}, G1, G2, W; Slurm up in {time.time() - t0:.1f} s"


# ---------------------------------------------------------------- the checks

def _stopped_pid(job, task, marker, deadline):
    """The pid of array task `task`'s mltool (its command line holding `marker`) once it is
    stopped (state T)."""
    while time.time() < deadline:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if marker.encode() not in f.read():
                        continue
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "T":
                        return int(pid)
            except OSError:
                continue
        state = SLURM.jobs(job).get(f"{job}_{task}")
        if state and state["JobState"] in local_slurm.FINAL:
            break
        time.sleep(0.2)
    raise Failure(f"task {job}_{task} never stopped mid-run:\n{log_of('*')}")


def _rerun(job, task):
    """Waits until `job`'s task `task` has run again (Restarts ≥ 1) and ended; its fields."""
    def done(jobs):
        t = jobs.get(f"{job}_{task}")
        return t and t["JobState"] in local_slurm.FINAL and int(t.get("Restarts", 0)) >= 1
    try:
        return SLURM.wait(job, until=done)[f"{job}_{task}"]
    except RuntimeError as e:
        raise Failure(f"{e}\n{log_of(f'*-{job}_{task}.out')}")


def _merge_refused(job, missing):
    jobs = SLURM.wait(job)
    (j,) = jobs.values()
    log = log_of(f"tile-merge-any-{job}.out")
    expect(j["JobState"] == "FAILED" and j["ExitCode"] in ("1:0", "2:0"),
           f"afterany merge with shard {missing} cancelled: {j['JobState']} {j['ExitCode']}, "
           f"expected FAILED with exit 1 or 2 (a refusal): {log}")
    expect(re.search(rf"\b{missing}\b", log) and "shard" in log,
           f"the refusal names shard {missing}: {log}")


def check_tile():
    """A tile array with a task cancelled mid-slide and requeued; both merges' fates; the
    merge by hand against one run."""
    shared = tmp("shared")
    env = dict(SHARDS="4", SLIDES=tmp("slides.txt"), STORES=f"{shared}/stores", QC=f"{shared}/qc")
    tile = sbatch(NODE + ["--array=0-3", f"{SCRIPTS}/slurm-tile.sbatch"], **env,
                  STOP_COMMAND="tile", STOP_TASK=f"{SIGNALLED_TASK} {STOPPED_TASK}",
                  STOP_MATCH=".png")
    merge = f"mltool tile --merge {shared}/stores/tiles-*.lmdb -o {shared}/tiles.lmdb --json"
    ok_merge = sbatch(NODE + [f"--dependency=afterok:{tile}", "--job-name=tile-merge",
                              "--output=logs/%x-%j.out", "--wrap", merge])
    any_merge = sbatch(NODE + [f"--dependency=afterany:{tile}", "--job-name=tile-merge-any",
                               "--output=logs/%x-%j.out", "--wrap", merge])
    pids = {task: _stopped_pid(tile, task, f"tiles-{tile}-{task}.lmdb", time.time() + 120)
            for task in (SIGNALLED_TASK, STOPPED_TASK)}
    # SIGTERM to the step's mltool alone, as --signal=TERM@120 sends it before the time limit
    # (not to the batch shell): mltool commits its slide and exits 75, and the script
    # requeues the task.
    os.kill(pids[SIGNALLED_TASK], signal.SIGTERM)
    os.kill(pids[SIGNALLED_TASK], signal.SIGCONT)
    again = _rerun(tile, SIGNALLED_TASK)
    log = log_of(f"tile-{tile}_{SIGNALLED_TASK}.out")
    expect(again["ExitCode"] == "0:0" and "exit code 75" in log,
           f"task {SIGNALLED_TASK}, signalled: its step exits 75, the script requeues it, and "
           f"it completes: {again['JobState']} {again['ExitCode']}\n{log}")
    SLURM.command(["scancel", f"{tile}_{STOPPED_TASK}"])
    jobs = SLURM.wait(tile)
    states = {k: (v["JobState"], v["ExitCode"]) for k, v in jobs.items()}
    expect(states[f"{tile}_{STOPPED_TASK}"][0] == "CANCELLED", f"tasks: {states}")
    expect(states[f"{tile}_2"] == ("FAILED", "4:0"),
           f"task 2 (the all-white slide: exit 4 under --keep-going) is what Slurm records: "
           f"{states}\n{log_of(f'tile-{tile}_2.out')}")
    for i in (SIGNALLED_TASK, 3):
        expect(states[f"{tile}_{i}"] == ("COMPLETED", "0:0"), f"task {i}: {states}")
    _merge_refused(any_merge, STOPPED_TASK)
    expect(not os.path.exists(f"{shared}/tiles.lmdb"), "the refused merge wrote its output")
    never = lambda j: all(v["Reason"] == "DependencyNeverSatisfied" for v in j.values())
    SLURM.wait(ok_merge, until=never, timeout=60)
    # Requeue the cancelled task: it resumes (its node-local store is still there).
    SLURM.command(["scontrol", "requeue", f"{tile}_{STOPPED_TASK}"])
    again = _rerun(tile, STOPPED_TASK)
    expect(again["ExitCode"] == "0:0", f"the requeued task: {again['JobState']} "
           f"{again['ExitCode']}\n{log_of(f'tile-{tile}_{STOPPED_TASK}.out')}")
    logs = {i: tmp("work", "logs", f"tile-{tile}_{i}.out") for i in range(4)}
    expect(all(os.path.exists(p) for p in logs.values()), f"logs/%x-%A_%a.out: {logs}")
    first_run = open(logs[STOPPED_TASK]).read()
    expect("CANCELLED" in first_run,
           "the requeued task's log still has its first run's end (--open-mode=append)")
    (m,) = SLURM.jobs(ok_merge).values()
    expect(m["JobState"] == "PENDING" and m["Reason"] == "DependencyNeverSatisfied",
           f"the afterok merge, after a cancelled (and requeued) task and an exit 4: "
           f"{m['JobState']} {m['Reason']}, expected PENDING DependencyNeverSatisfied")
    SLURM.command(["scancel", ok_merge])  # it never recovers: cancel it, merge by hand
    ok(["bash", "-c", merge.replace("mltool", mltool, 1)], "the merge by hand")
    _same_tile_stores(f"{shared}/tiles.lmdb", _one_tile_run())


def _one_tile_run():
    """One `mltool tile` of slides.txt, made once."""
    out = tmp("tiles-one.lmdb")
    if not os.path.isdir(out):
        code, _, err = run([mltool, "tile", "-", "-o", out, "--mpp", "0.5", "--keep-going",
                            "--threads", "1"], stdin=open(tmp("slides.txt")).read())
        expect(code == 4, f"one tile run over the list (W has no tissue): exit {code}: {err}")
    return out


def _same_tile_stores(a, b):
    sa, sb = _read_store(a), _read_store(b)
    expect(sa["tiles"].keys() == sb["tiles"].keys(),
           f"tile keys: {len(sa['tiles'])} merged vs {len(sb['tiles'])} in one run")
    expect(len(sa["tiles"]) > 0, "no tiles at all")
    differ = [k for k in sa["tiles"] if sa["tiles"][k] != sb["tiles"][k]]
    expect(not differ, f"{len(differ)} tiles differ, e.g. {differ[:3]}")
    ma, mb = sa["meta"], sb["meta"]
    differ = sorted(k for k in set(ma) | set(mb) if ma.get(k) != mb.get(k))
    expect(not differ, "meta differs: "
           + "; ".join(f"{k}: {ma.get(k)} vs {mb.get(k)}" for k in differ)[:3000])


def _read_store(path):
    """Every record of a tile store (python-lmdb); done/ markers without their `seconds`."""
    import lmdb
    env = lmdb.open(path, readonly=True, lock=False, max_dbs=8)
    out = {}
    try:
        with env.begin() as txn:
            for name in (b"tiles", b"meta"):
                db = env.open_db(name, txn=txn, create=False)
                out[name.decode()] = {bytes(k): bytes(v) for k, v in txn.cursor(db=db)}
    finally:
        env.close()
    for k, v in out["meta"].items():
        if k.startswith(b"done/"):
            doc = json.loads(v)
            doc.pop("seconds", None)
            out["meta"][k] = doc
    return out


def check_extract():
    """A 2-task extract array on the CPU (--gres=none), one task requeued while it runs (as
    a preemption does: SIGTERM, back in the queue); it runs again, and the afterok merge,
    which waited for it, = one run."""
    shared = tmp("shared")
    if not os.path.isdir(f"{shared}/tiles.lmdb"):
        run([mltool, "tile", "-", "-o", f"{shared}/tiles.lmdb", "--mpp", "0.5", "--keep-going"],
            stdin=open(tmp("slides.txt")).read())
    env = dict(SHARDS="2", TILES=f"{shared}/tiles.lmdb", FEATURE_SHARDS=f"{shared}/fshards")
    job = sbatch(NODE + ["--gres=none", "--array=0-1", f"{SCRIPTS}/slurm-extract.sbatch"], **env,
                 STOP_COMMAND="extract", STOP_TASK="0", STOP_MATCH="config.json")
    merge = sbatch(NODE + [f"--dependency=afterok:{job}", "--job-name=extract-merge",
                           "--output=logs/%x-%j.out", "--wrap",
                           f"mltool extract --merge {shared}/fshards/shard-* "
                           f"-o {shared}/features --json"])
    _stopped_pid(job, 0, f"{shared}/fshards/shard-0", time.time() + 120)
    SLURM.command(["scontrol", "requeue", f"{job}_0"])
    again = _rerun(job, 0)
    expect(again["ExitCode"] == "0:0", f"the requeued extract task: {again['JobState']} "
           f"{again['ExitCode']}\n{log_of(f'extract-{job}_0.out')}")
    finished(job, "the extract array")
    finished(merge, "the extract merge, after a task was requeued")
    ok([mltool, "extract", f"{shared}/tiles.lmdb", "-o", tmp("features-one"), "--threads", "1",
        "--math-threads", "1", "--device", "auto"], "one extract run")
    _same_features(f"{shared}/features", tmp("features-one"))


def _pod_script(name, shared, local, model=None):
    """The container script of scripts/cluster/NAME with /shared and /local made directories
    of the test and the model file made `model`; the Job's completions."""
    import yaml
    job = yaml.safe_load(open(os.path.join(SCRIPTS, name)))
    script = job["spec"]["template"]["spec"]["containers"][0]["args"][0]
    if model:
        script = script.replace("/shared/model.pt", model)
    script = script.replace("/shared/", shared + "/").replace("/local/", local + "/")
    return script, job["spec"]["completions"]


def _run_pods(name, shared, env, model=None):
    """Runs each index of an indexed Job one after the other, as its pods would; returns
    {index: exit status}."""
    codes = {}
    for i in range(_pod_script(name, shared, "")[1]):
        script, _ = _pod_script(name, shared, tmp("k8s", f"local-{i}"), model)
        os.makedirs(tmp("k8s", f"local-{i}"), exist_ok=True)
        p = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                           env=dict(os.environ, **env, JOB_COMPLETION_INDEX=str(i)))
        codes[i] = p.returncode
        expect(p.returncode in (0, 4), f"{name}, index {i}: exit {p.returncode}: {p.stderr}")
    return codes


def check_kubernetes():
    """The indexed Jobs' pod scripts, run here index by index with JOB_COMPLETION_INDEX
    (/shared and /local made directories of the test): 16 tile shards and 8 extract shards
    of 6 slides, most of them empty; the merged tile store and features equal one run's."""
    shared = tmp("k8s", "shared")
    os.makedirs(shared)
    shutil.copy(tmp("slides.txt"), f"{shared}/slides.txt")
    env = job_env()
    codes = _run_pods("k8s-tile.yaml", shared, env)
    expect(sorted(i for i, c in codes.items() if c == 4) == [2],
           f"exit 4 from the all-white slide's index (2) alone: {codes}")
    ok([mltool, "tile", "--merge", *sorted(glob.glob(f"{shared}/stores/tiles-*.lmdb")), "-o",
        f"{shared}/tiles.lmdb"], "merging the tile Job's stores")
    _same_tile_stores(f"{shared}/tiles.lmdb", _one_tile_run())
    _run_pods("k8s-extract.yaml", shared, env, model="builtin:color-texture")
    ok([mltool, "extract", "--merge", *sorted(glob.glob(f"{shared}/feature-shards/shard-*")),
        "-o", f"{shared}/features"], "merging the extract Job's stores")
    ok([mltool, "extract", f"{shared}/tiles.lmdb", "-o", tmp("k8s", "features-one"),
        "--math-threads", "16"], "one extract run")
    _same_features(f"{shared}/features", tmp("k8s", "features-one"))


def _dataset(name, *pack_args):
    """A dataset packed from the merged features (one extract run's if check_extract did not
    run) and labels.csv."""
    features = tmp("shared", "features")
    if not os.path.isdir(features):
        if not os.path.isdir(tmp("shared", "tiles.lmdb")):
            run([mltool, "tile", "-", "-o", tmp("shared", "tiles.lmdb"), "--mpp", "0.5",
                 "--keep-going"], stdin=open(tmp("slides.txt")).read())
        ok([mltool, "extract", tmp("shared", "tiles.lmdb"), "-o", features], "extract")
    out = tmp("shared", name)
    if not os.path.isdir(out):
        ok([mltool, "pack", features, "--labels", tmp("labels.csv"), "-o", out, "--seed", "1",
            *pack_args], f"pack {name}")
    return out


def _mlp_spec(name, hidden):
    spec = tmp("shared", name)
    with open(spec, "w") as f:
        json.dump({"family": "mlp", "hidden": [hidden]}, f)
    return spec


def _same_features(merged, one):
    """features.npy and keys.txt of two feature stores, byte for byte."""
    for name in ("features.npy", "keys.txt"):
        a = open(os.path.join(merged, name), "rb").read()
        b = open(os.path.join(one, name), "rb").read()
        expect(a == b, f"{name}: the merged store's ({len(a)} bytes) differs from one run's "
               f"({len(b)} bytes)")


def _weights(run_dir):
    from train_test import read_safetensors
    tensors, _ = read_safetensors(os.path.join(run_dir, "model.safetensors"))
    return tensors


def check_train():
    """slurm-train.sbatch with 2 srun tasks = one process (1e-5) = --nproc 2 (bit for bit)."""
    ds = _dataset("ds", "--split", "train=0.7,val=0.3")
    spec = _mlp_spec("mlp.json", 16)
    run_dir = tmp("shared", "run")
    job = sbatch(["--nodes=1", "--ntasks-per-node=2", "--gres=none", "--cpus-per-task=1",
                  "--mem=2G", f"{SCRIPTS}/slurm-train.sbatch"],
                 DATASET=ds, MODEL_SPEC=spec, RUN=run_dir)
    finished(job, "the 2-rank training job")
    info = json.load(open(os.path.join(run_dir, "run.json")))
    expect(info["runtime"]["world_size"] == 2, f"run.json's world_size: {info['runtime']}")
    # The flags of slurm-train.sbatch, in one process and in --nproc 2.
    flags = ["--epochs", "20", "--batch", "1024", "--seed", "1", "--threads", "1",
             "--math-threads", "1", "-q"]
    ok([mltool, "train", ds, "--model", spec, "-o", tmp("run-one"), *flags], "one process")
    ok([mltool, "train", ds, "--model", spec, "-o", tmp("run-nproc"), "--nproc", "2", *flags],
       "--nproc 2")
    srun, one = _weights(run_dir), _weights(tmp("run-one"))
    expect(set(srun) == set(one), f"tensors {sorted(srun)} vs {sorted(one)}")
    worst = max(float(np.abs(srun[k].astype(np.float64) - one[k]).max()) for k in one)
    expect(worst <= 1e-5, f"srun's 2 ranks vs one process: weights differ by up to {worst}")
    a = open(os.path.join(run_dir, "model.safetensors"), "rb").read()
    b = open(tmp("run-nproc", "model.safetensors"), "rb").read()
    expect(a == b, "srun's 2 ranks vs --nproc 2: model.safetensors differ")


def check_cv():
    """A 3-task slurm-cv.sbatch array and its afterok gather = --folds all in one process."""
    ds = _dataset("ds-cv", "--folds", "3")
    spec = _mlp_spec("mlp-cv.json", 8)
    cv = tmp("shared", "cv")
    job = sbatch(NODE + ["--gres=none", "--array=0-2", f"{SCRIPTS}/slurm-cv.sbatch"],
                 DATASET=ds, MODEL_SPEC=spec, CV=cv)
    gather = sbatch(NODE + [f"--dependency=afterok:{job}", "--job-name=cv-gather",
                            "--output=logs/%x-%j.out", "--wrap",
                            f"mltool train {ds} --model {spec} --folds all --gather-only "
                            f"-o {cv} --json"], DATASET=ds, MODEL_SPEC=spec, CV=cv)
    finished(job, "the cross-validation array")
    finished(gather, "the gather")
    ok([mltool, "train", ds, "--model", spec, "--folds", "all", "-o", tmp("cv-one"), "--epochs",
        "20", "--batch", "32", "--seed", "1", "--threads", "1", "--math-threads", "1", "-q"],
       "--folds all in one process")
    for i in range(3):
        a = open(os.path.join(cv, f"fold-{i}", "model.safetensors"), "rb").read()
        b = open(tmp("cv-one", f"fold-{i}", "model.safetensors"), "rb").read()
        expect(a == b, f"fold {i}: the array task's weights differ from --folds all's")
    got, want = json.load(open(f"{cv}/cv.json")), json.load(open(tmp("cv-one", "cv.json")))
    expect(got["mean"] == want["mean"] and got["sd"] == want["sd"],
           f"cv.json: mean {got['mean']} sd {got['sd']} vs {want['mean']} {want['sd']}")


def stop_slurm():
    if SLURM is not None:
        SLURM.stop()


if __name__ == "__main__":
    why = local_slurm.available()
    if why:
        print(f"skipped: {why}")
        sys.exit(77)
    run_checks("slurm", [check_tile, check_extract, check_train, check_cv, check_kubernetes],
               only, fixtures,
               teardown=stop_slurm)
