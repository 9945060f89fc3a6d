"""mltool train, data parallel (docs/train.md#data-parallel): two Gloo ranks (--nproc 2, and
two processes started here with torchrun-style RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT) end
with the weights of one process training on the same global batches (an MLP without dropout
or batch norm; SGD and AdamW; a batch the ranks split evenly and one they do not; a last
batch of one sample, which leaves a rank idle; buckets small enough that every all-reduce is
launched from a gradient hook during backward), rank 0 alone writes the run directory, a
stopped two-rank run with dropout resumes exactly, and a killed rank makes the other exit
with an error instead of waiting.

    train_dist_test.py MLTOOL [TEST...]   # TEST: check_* names without check_
"""
import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np

from cli_common import Failure, expect, run, run_checks, tmp, write_feature_store

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from train_test import read_safetensors  # noqa: E402  (the safetensors reader)

mltool = os.path.abspath(sys.argv[1])
only = set(sys.argv[2:])


def fixtures():
    rng = np.random.default_rng(7)
    centers = rng.standard_normal((2, 16)) * 1.5
    keys, rows, labels = [], [], []
    for s in range(10):
        for t in range(12):
            c = int(rng.integers(0, 2))
            keys.append(f"S{s:02d}/{t:06d}_000000")
            rows.append(centers[c] + rng.standard_normal(16))
            labels.append((keys[-1], ["normal", "tumor"][c]))
    d = tmp("feat")
    write_feature_store(d, np.array(rows), keys)
    with open(tmp("labels.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["key", "label"])
        w.writerows(labels)
    code, _, err = run([mltool, "pack", d, "--labels", tmp("labels.csv"), "-o", tmp("ds"),
                        "--seed", "1", "--split", "train=0.75,val=0.25"])
    expect(code == 0, f"pack: exit {code}: {err.strip()}")
    with open(tmp("mlp.json"), "w") as f:
        json.dump({"family": "mlp", "hidden": [32]}, f)
    return "120 x 16 tiles"


def args(out, *extra, epochs=2):
    return [mltool, "train", tmp("ds"), "--model", tmp("mlp.json"), "-o", out, "--epochs",
            str(epochs), "-q", *extra]


def ok(cmd, what):
    code, _, err = run(cmd)
    expect(code == 0, f"{what}: exit {code}: {err.strip()[-2000:]}")


def same_weights(a, b, tol=1e-5):
    ta, _ = read_safetensors(os.path.join(a, "model.safetensors"))
    tb, _ = read_safetensors(os.path.join(b, "model.safetensors"))
    expect(set(ta) == set(tb), f"tensors {sorted(ta)} vs {sorted(tb)}")
    worst = max(float(np.abs(ta[k].astype(np.float64) - tb[k]).max()) for k in ta)
    expect(worst <= tol, f"{a} vs {b}: weights differ by up to {worst} (> {tol})")
    changed = max(float(np.abs(ta[k]).max()) for k in ta)
    expect(changed > 0, f"{a}: all-zero weights")


def lines(run_dir):
    return [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]


def same_metrics(a, b):
    la, lb = lines(a), lines(b)
    expect(len(la) == len(lb), f"{a}: {len(la)} metrics lines, {b}: {len(lb)} (a second writer?)")
    for x, y in zip(la, lb):
        expect(x["event"] == y["event"] and x.get("step") == y.get("step"), f"{x} vs {y}")
        for k in ("loss", "train_loss", "val_loss"):
            if k in x:
                expect(abs(x[k] - y[k]) <= 1e-5, f"{k}: {x} vs {y}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env_ranks(cmd, world=2, port=None):
    port = port or free_port()
    procs = []
    for r in range(world):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    return procs


def check_nproc_matches_one_process():
    for name, opt, batch, more in (("sgd", "sgd", "16", []), ("adamw", "adamw", "15", []),
                                   ("weighted", "sgd", "15", ["--class-weights", "0.3,1.7"])):
        extra = ["--optimizer", opt, "--batch", batch, "--log-every", "1", *more]
        one, two = tmp(f"one_{name}"), tmp(f"two_{name}")
        ok(args(one, *extra), f"1 process, {name}")
        ok(args(two, *extra, "--nproc", "2"), f"--nproc 2, {name}")
        same_weights(one, two)
        same_metrics(one, two)
        doc = json.load(open(os.path.join(two, "run.json")))
        expect(doc["status"] == "complete", f"{two}: status {doc['status']}")
        expect(doc["runtime"].get("world_size") == 2, f"{two}: runtime {doc['runtime']}")
        expect(sorted(os.listdir(one)) == sorted(os.listdir(two)),
               f"{sorted(os.listdir(one))} vs {sorted(os.listdir(two))}")
    # Memory modes inside each rank: the all-reduce follows the part's backward.
    for mode in (["--micro-batches", "3"], ["--sections", "2"]):
        out = tmp("two_" + mode[0][2:])
        ok(args(out, "--optimizer", "sgd", "--batch", "16", "--log-every", "1", *mode,
                "--nproc", "2"), f"--nproc 2 {' '.join(mode)}")
        same_weights(tmp("one_sgd"), out)


def check_script_nproc():
    """A TorchScript module (--model MODEL.pt) trains data parallel to one process's weights."""
    import torch
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    path = tmp("mlp_script.pt")
    torch.jit.script(model).save(path)
    base = [mltool, "train", tmp("ds"), "--model", path, "--epochs", "2", "-q", "--log-every", "1"]
    for name, opt, batch in (("sgd", "sgd", "16"), ("adamw", "adamw", "15")):
        common = [*base, "--optimizer", opt, "--batch", batch]
        one, two = tmp(f"script_one_{name}"), tmp(f"script_two_{name}")
        ok([*common, "-o", one], f"TorchScript, 1 process, {name}")
        ok([*common, "-o", two, "--nproc", "2"], f"TorchScript, --nproc 2, {name}")
        same_weights(one, two)
        same_metrics(one, two)
    out = tmp("script_two_sections")
    ok([*base, "--optimizer", "sgd", "--batch", "16", "--sections", "2", "--nproc", "2", "-o", out],
       "TorchScript, --nproc 2 --sections 2")
    same_weights(tmp("script_one_sgd"), out)


def check_overlapped_buckets():
    # Buckets of ~100 bytes: each of the 4 tensors its own, every all-reduce launched from its
    # gradient's hook during backward; the weights are still one process's.
    out = tmp("two_buckets")
    code, stdout, err = run(args(out, "--optimizer", "sgd", "--batch", "16", "--log-every", "1",
                                 "--nproc", "2", "--dist-bucket-mb", "0.0001", "--json"))
    expect(code == 0, f"exit {code}: {err.strip()[-2000:]}")
    s = json.loads(stdout)
    expect(s["data_parallel"] == {"buckets": 4, "launched_in_backward": 4 * s["steps"]},
           f"data_parallel {s['data_parallel']}, {s['steps']} steps")
    same_weights(tmp("one_sgd"), out)
    code, stdout, _ = run(args(tmp("one_json"), "--batch", "16", "--json"))
    expect(code == 0 and json.loads(stdout)["data_parallel"] is None, "one process: data_parallel")


def check_uneven_last_batch():
    # 96 training samples in batches of 19: five full steps and a last of 1, which leaves
    # rank 1 nothing; kept (the default) or dropped, two ranks step as one process does.
    train = json.load(open(os.path.join(tmp("one_sgd"), "run.json")))["dataset"]["train_samples"]
    expect(train == 96, f"{train} training samples (the fixture changed?)")
    for last in ("keep", "drop"):
        extra = ["--optimizer", "sgd", "--batch", "19", "--log-every", "1", "--last-batch", last]
        one, two = tmp(f"one_last_{last}"), tmp(f"two_last_{last}")
        ok(args(one, *extra), f"1 process, --last-batch {last}")
        ok(args(two, *extra, "--nproc", "2"), f"--nproc 2, --last-batch {last}")
        same_weights(one, two)
        same_metrics(one, two)
        spe = json.load(open(os.path.join(two, "run.json")))["steps_per_epoch"]
        expect(spe == (6 if last == "keep" else 5), f"--last-batch {last}: {spe} steps per epoch")
    ok(args(tmp("three_last"), "--optimizer", "sgd", "--batch", "19", "--log-every", "1",
            "--nproc", "3"), "--nproc 3, a last batch of 1")
    same_weights(tmp("one_last_keep"), tmp("three_last"))


def check_resume():
    # Stopped after 7 steps and resumed, two ranks with dropout end as an uninterrupted run:
    # each rank's dropout masks are a function of (seed, step, rank).
    with open(tmp("mlp_drop.json"), "w") as f:
        json.dump({"family": "mlp", "hidden": [32], "dropout": 0.3}, f)
    def drop(out, *extra, nproc=2):
        return [mltool, "train", tmp("ds"), "--model", tmp("mlp_drop.json"), "-o", out, "--epochs",
                "3", "--batch", "15", "--log-every", "2", "-q", "--nproc", str(nproc), *extra]
    full, part = tmp("dp_full"), tmp("dp_part")
    ok(drop(full), "--nproc 2, uninterrupted")
    ok(drop(part, "--max-steps", "7"), "--nproc 2 --max-steps 7")
    expect(json.load(open(os.path.join(part, "run.json")))["status"] == "stopped", "stopped run")
    code, stdout, err = run(drop(part, "--resume", "--json"))
    expect(code == 0, f"--nproc 2 --resume: exit {code}: {err.strip()[-2000:]}")
    expect(json.loads(stdout)["resumed_from"] == 7, f"resumed from {json.loads(stdout)['resumed_from']}")
    same_weights(full, part, tol=0)
    strip = lambda l: {k: v for k, v in l.items() if k not in ("seconds", "samples_per_second")}
    expect([strip(l) for l in lines(full)] == [strip(l) for l in lines(part)],
           "resumed metrics.jsonl differs")
    # The same run in one process draws other masks (one rank's), so it differs.
    ok(drop(tmp("dp_one"), nproc=1), "1 process, dropout")
    ta, _ = read_safetensors(os.path.join(full, "model.safetensors"))
    tb, _ = read_safetensors(os.path.join(tmp("dp_one"), "model.safetensors"))
    expect(any(not np.array_equal(ta[k], tb[k]) for k in ta), "dropout: two ranks drew one process's masks")


def check_environment_launch():
    out = tmp("env_run")
    procs = env_ranks(args(out, "--batch", "15", "--optimizer", "adamw", "--log-every", "1"))
    for r, p in enumerate(procs):
        _, err = p.communicate(timeout=120)
        expect(p.returncode == 0, f"rank {r}: exit {p.returncode}: {err.strip()[-2000:]}")
    same_weights(tmp("one_adamw"), out)
    same_metrics(tmp("one_adamw"), out)


def check_group_of_one():
    # RANK=0 WORLD_SIZE=1 (torchrun --nproc-per-node 1): a Gloo group of one, one process's weights.
    out = tmp("group_one")
    procs = env_ranks(args(out, "--batch", "15", "--optimizer", "adamw", "--log-every", "1", "--json"), world=1)
    stdout, err = procs[0].communicate(timeout=120)
    expect(procs[0].returncode == 0, f"exit {procs[0].returncode}: {err.strip()[-2000:]}")
    expect(json.loads(stdout)["data_parallel"] is not None, "RANK/WORLD_SIZE=1 made no group")
    same_weights(tmp("one_adamw"), out)


def check_nproc_failure():
    # The run directory exists: rank 0 refuses, rank 1 hears it, the launcher names the rank.
    os.makedirs(tmp("taken"))
    open(tmp("taken", "keep.txt"), "w").close()
    code, _, err = run(args(tmp("taken"), "--batch", "16", "--nproc", "2"))
    expect(code == 1, f"exit {code}, expected 1 (usage): {err.strip()}")
    expect("--nproc: rank" in err and "rank 0: " in err, f"stderr: {err.strip()}")
    expect(os.listdir(tmp("taken")) == ["keep.txt"], f"{tmp('taken')}: {os.listdir(tmp('taken'))}")
    code, _, err = run(args(tmp("bad_batch"), "--batch", "1", "--nproc", "2"))
    expect(code == 1 and "at least the 2 processes" in err, f"exit {code}: {err.strip()}")
    expect(not os.path.exists(tmp("bad_batch")), "a run directory for a refused run")


def listening_addresses(pid):
    """The local addresses (hex ip:port as /proc/net/tcp{,6} writes them) that process `pid`'s
    TCP sockets listen on."""
    inodes = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = []
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:  # TCP_LISTEN
                    out.append(cols[1])
    return out


def children_of(pid):
    """The pids whose parent is `pid` (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
                out.append(int(entry))
    return out


def check_loopback_only():
    """--nproc 2 listens on the loopback interface only (the rendezvous store, Gloo): no
    socket of the ranks listens on another address while they train."""
    p = subprocess.Popen(args(tmp("loopback"), "--batch", "8", "--nproc", "2", epochs=400),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen, deadline = {}, time.time() + 60
    try:
        while time.time() < deadline and p.poll() is None:
            for child in children_of(p.pid):
                try:
                    for address in listening_addresses(child):
                        seen[address] = child
                except OSError:  # the rank ended meanwhile
                    pass
            if seen and os.path.exists(os.path.join(tmp("loopback"), "metrics.jsonl")):
                break
            time.sleep(0.05)
    finally:
        for child in children_of(p.pid):
            os.kill(child, signal.SIGKILL)
        p.kill()
        p.communicate()
    expect(seen, "no listening socket of the ranks seen")
    loopback = ("0100007F:", "00000000000000000000000001000000:")  # 127.0.0.1, ::1
    others = [a for a in seen if not a.startswith(loopback)]
    expect(not others, f"--nproc 2 listens beyond the loopback interface: {others} (all: {sorted(seen)})")


def check_killed_rank():
    out = tmp("killed")
    procs = env_ranks(args(out, "--batch", "8", "--dist-timeout", "10", epochs=1000))
    deadline = time.time() + 60
    metrics = os.path.join(out, "metrics.jsonl")
    while time.time() < deadline and not (os.path.exists(metrics) and os.path.getsize(metrics)):
        for r, p in enumerate(procs):
            if p.poll() is not None:
                raise Failure(f"rank {r} ended (exit {p.returncode}) before the kill: "
                              f"{p.communicate()[1].strip()[-2000:]}")
        time.sleep(0.05)
    expect(time.time() < deadline, "no metrics.jsonl line within 60 s")
    procs[1].send_signal(signal.SIGKILL)
    t0 = time.time()
    try:
        _, err = procs[0].communicate(timeout=40)
    except subprocess.TimeoutExpired:
        procs[0].kill()
        raise Failure("rank 0 still runs 40 s after rank 1 was killed")
    procs[1].communicate()
    expect(procs[0].returncode != 0, "rank 0 exited 0 after rank 1 was killed")
    expect("data parallel, rank 0 of 2" in err, f"rank 0's stderr: {err.strip()[-2000:]}")
    print(f"  rank 0 stopped {time.time() - t0:.1f} s after the kill", flush=True)
    expect(json.load(open(os.path.join(out, "run.json")))["status"] == "failed", "run.json status")


def check_hung_rank():
    # A stopped (not dead) rank: the other fails once --dist-timeout has passed.
    procs = env_ranks(args(tmp("hung"), "--batch", "8", "--dist-timeout", "3", epochs=1000))
    metrics = tmp("hung", "metrics.jsonl")
    deadline = time.time() + 60
    while time.time() < deadline and not (os.path.exists(metrics) and os.path.getsize(metrics)):
        time.sleep(0.05)
    procs[1].send_signal(signal.SIGSTOP)
    t0 = time.time()
    try:
        _, err = procs[0].communicate(timeout=40)
    except subprocess.TimeoutExpired:
        procs[0].kill()
        raise Failure("rank 0 still runs 40 s after rank 1 stopped (--dist-timeout 3)")
    finally:
        procs[1].kill()
        procs[1].communicate()
    took = time.time() - t0
    expect(procs[0].returncode == 3 and "--dist-timeout" in err, f"exit {procs[0].returncode}: {err}")
    expect(2.5 < took < 20, f"rank 0 stopped {took:.1f} s after rank 1 did (--dist-timeout 3)")


def check_nproc_killed_child():
    # --nproc: a child killed with SIGKILL; the launcher stops the other and names the rank.
    p = subprocess.Popen(args(tmp("spawn_kill"), "--batch", "8", "--nproc", "2", epochs=1000),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    children = f"/proc/{p.pid}/task/{p.pid}/children"
    kids, deadline = [], time.time() + 60
    while len(kids) < 2 and time.time() < deadline and p.poll() is None:
        kids = open(children).read().split() if os.path.exists(children) else []
        time.sleep(0.05)
    if len(kids) < 2:
        p.kill()
        p.communicate()
        print("note: nproc_killed_child: cannot see the launcher's children", flush=True)
        return
    time.sleep(1)
    os.kill(int(kids[1]), signal.SIGKILL)
    try:
        _, err = p.communicate(timeout=40)
    except subprocess.TimeoutExpired:
        p.kill()
        raise Failure("the launcher still runs 40 s after rank 1 was killed")
    expect(p.returncode != 0 and f"rank 1 (pid {kids[1]}) was killed by signal 9" in err,
           f"exit {p.returncode}: {err.strip()[-2000:]}")
    for k in kids:
        expect(not os.path.exists(f"/proc/{k}") or "zombie" in open(f"/proc/{k}/status").read().lower(),
               f"rank process {k} still runs")


if __name__ == "__main__":
    run_checks("train_dist", [check_nproc_matches_one_process, check_overlapped_buckets,
                              check_uneven_last_batch, check_resume, check_environment_launch,
                              check_group_of_one, check_loopback_only,
                              check_nproc_failure, check_killed_rank, check_hung_rank,
                              check_nproc_killed_child, check_script_nproc], only, fixtures)
