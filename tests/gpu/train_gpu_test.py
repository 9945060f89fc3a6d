"""mltool train on the GPU (ctest label gpu): the pinned, host and sync feeds on CUDA give the
same weights, CUDA training learns what CPU training learns, a run stopped and resumed on
CUDA ends with the weights of an uninterrupted one, and bags (padded batches gathered on the
device) agree between feeds. Data written with numpy and packed with `mltool pack`.

    train_gpu_test.py MLTOOL [--cpu-smoke] [CHECK...]   # CHECK: check_* names without check_

Checks (each prints "ok: NAME (seconds)" and the differences it measured; all run; exit 1 if
any failed):
  feeds     --feed pinned, host and sync on CUDA (same seed, dropout and batch norm on):
            identical weights expected; allowed up to 1e-6 (printed), as cuBLAS may pick
            other kernels between processes
  learns    CUDA reaches >= 95% validation accuracy; without dropout, a TorchScript MLP's
            CUDA and CPU weights are at most twice as far apart as PyTorch's own CUDA and CPU
            training of the same module on the same batches (torch_reference.py), and
            mltool's CPU training equals PyTorch's within 1e-5
  auto      --feed auto picks pinned on CUDA (the data fits), and --device auto picks cuda:0
  resume    --max-steps inside an epoch, then --resume: the weights of the uninterrupted
            run (the CUDA generator is restored from the checkpoint); up to 1e-6
  bags      attention MIL, pinned vs host on CUDA: up to 1e-6
  predict   mltool predict of a tile and a bag run on CUDA equals it on the CPU: logits and
            attention up to 1e-4 (float rounding), the same predictions

Without a GPU visible to torch it fails (exit 1): the gpu label only runs where one is.
--cpu-smoke runs every check with --device cpu instead, to try the script without one.
"""
import csv
import json
import os
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "cli"))
from cli_common import Failure, expect, run, run_checks, tmp  # noqa: E402
import torch_reference as R  # noqa: E402

args = [a for a in sys.argv[1:] if not a.startswith("--")]
flags = [a for a in sys.argv[1:] if a.startswith("--")]
if not args or set(flags) - {"--cpu-smoke"}:
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    sys.exit(2)
SMOKE = "--cpu-smoke" in flags
mltool = os.path.abspath(args[0])
only = set(args[1:])
DEVICE = "cpu" if SMOKE else "cuda"

if not SMOKE:
    import torch
    if not torch.cuda.is_available():
        print("FAIL: no CUDA device visible to torch (use --cpu-smoke to try the checks on the CPU)", file=sys.stderr)
        sys.exit(1)


def write_store(d, matrix, keys, dtype):
    os.makedirs(d, exist_ok=True)
    np.save(os.path.join(d, "features.npy"), np.ascontiguousarray(matrix, dtype="<f2" if dtype == "float16" else "<f4"))
    with open(os.path.join(d, "keys.txt"), "w") as f:
        f.writelines(k + "\n" for k in keys)
    json.dump({"created_by": "train_gpu_test.py", "dims": int(matrix.shape[1]), "dtype": dtype,
               "files": {"keys": "keys.txt", "matrix": "features.npy"}, "format": "mltool.features",
               "format_version": 1, "model": {"name": "synthetic"}, "rows": int(matrix.shape[0])},
              open(os.path.join(d, "features.json"), "w"))


def write_labels(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["key", "label"])
        w.writerows(rows)


def pack(features, labels, out, *extra):
    code, _, err = run([mltool, "pack", features, "--labels", labels, "-o", out, *extra])
    expect(code == 0, f"pack: exit {code}: {err.strip()}")


def fixtures():
    rng = np.random.default_rng(11)
    centers = rng.standard_normal((4, 128)) * 0.5
    keys, rows, labels = [], [], []
    for s in range(40):
        for t in range(100):
            c = int(rng.integers(0, 4))
            keys.append(f"S{s:02d}/{t:06d}_000000")
            rows.append(centers[c] + rng.standard_normal(128))
            labels.append((keys[-1], f"c{c}"))
    write_store(tmp("feat"), np.array(rows), keys, "float16")
    write_labels(tmp("tiles.csv"), labels)
    pack(tmp("feat"), tmp("tiles.csv"), tmp("ds"), "--split", "train=0.8,val=0.2")
    json.dump({"family": "mlp", "hidden": [256, 64], "batch_norm": True, "dropout": 0.2}, open(tmp("mlp.json"), "w"))
    u = rng.standard_normal(32)
    u /= np.linalg.norm(u)
    keys, rows, slides = [], [], []
    for s in range(60):
        n = int(rng.integers(5, 60))
        x = rng.standard_normal((n, 32))
        if s % 2:
            x[rng.choice(n, 2, replace=False)] += 5 * u
        keys += [f"B{s:02d}/{t:06d}_000000" for t in range(n)]
        rows += list(x)
        slides.append((f"B{s:02d}", "pos" if s % 2 else "neg"))
    write_store(tmp("bagfeat"), np.array(rows), keys, "float32")
    write_labels(tmp("bags.csv"), slides)
    pack(tmp("bagfeat"), tmp("bags.csv"), tmp("bagds"), "--unit", "bag", "--split", "train=0.7,val=0.3")
    json.dump({"family": "abmil", "hidden": [64], "attention": 32, "dropout": 0.1}, open(tmp("abmil.json"), "w"))
    return "4000 tiles x 128 (float16), 60 bags" + (" [cpu smoke]" if SMOKE else "")


def train(out, *extra, device=DEVICE, dataset="ds", spec="mlp.json"):
    code, stdout, err = run([mltool, "train", tmp(dataset), "--model", tmp(spec), "-o", tmp(out), "--device", device,
                             "--json", "-q", *extra])
    expect(code == 0, f"train {out}: exit {code}: {err.strip()}")
    return json.loads(stdout)


def weights(out):
    data = open(tmp(out, "model.safetensors"), "rb").read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    out_ = {}
    for name, h in header.items():
        b, e = h["data_offsets"]
        dt = {"F32": "<f4", "I64": "<i8"}[h["dtype"]]
        out_[name] = np.frombuffer(data[8 + n + b:8 + n + e], dt).astype(np.float64)
    return out_


def max_diff(a, b):
    wa, wb = weights(a), weights(b)
    expect(set(wa) == set(wb), f"{a} and {b} hold other tensors")
    return max(float(np.abs(wa[k] - wb[k]).max()) if wa[k].size else 0.0 for k in wa)


def check_feeds():
    common = ["--epochs", "3", "--batch", "64", "--seed", "3"]
    for feed in ("pinned", "host", "sync"):
        s = train(f"feeds_{feed}", *common, "--feed", feed)
        expect(s["feed"] == feed, f"--feed {feed} ran {s['feed']}")
    for other in ("host", "sync"):
        d = max_diff("feeds_pinned", f"feeds_{other}")
        print(f"  pinned vs {other}: max |weight difference| {d:.3g}")
        expect(d <= 1e-6, f"pinned and {other} feeds differ by {d}")


def check_learns():
    s = train("learn_gpu", "--epochs", "6", "--batch", "128", "--lr", "0.003")
    expect(s["validation"]["val_accuracy"] >= 0.95, f"{DEVICE}: validation {s['validation']}")
    c = train("learn_cpu", "--epochs", "6", "--batch", "128", "--lr", "0.003", device="cpu")
    d = max_diff("learn_gpu", "learn_cpu")
    print(f"  {DEVICE} vs cpu: max |weight difference| {d:.3g}; val accuracy {s['validation']['val_accuracy']:.4f} "
          f"vs {c['validation']['val_accuracy']:.4f}")
    # Without dropout (whose masks come from another generator on CUDA), bounded by PyTorch's
    # own CUDA-vs-CPU difference for the same training (tests/gpu/torch_reference.py): a
    # TorchScript MLP from the same weights, the same batches in the same order.
    module = R.script_mlp(tmp("mlp_script.pt"), 128, [256, 64], 4, seed=5)
    common = ["--epochs", "2", "--batch", "128", "--lr", "0.001", "--schedule", "constant", "--seed", "7",
              "--val-split", "train"]
    train("script_dev", *common, spec="mlp_script.pt")
    train("script_cpu", *common, spec="mlp_script.pt", device="cpu")
    x, y = R.training_split(tmp("script_cpu"), np.load(tmp("feat", "features.npy")))
    ref_dev = R.train(module, x, y, 7, 2, 128, 0.001, DEVICE)
    ref_cpu = R.train(module, x, y, 7, 2, 128, 0.001, "cpu")
    tool_dev, tool_cpu = weights("script_dev"), weights("script_cpu")
    d_tool, d_ref = R.max_abs(tool_dev, tool_cpu), R.max_abs(ref_dev, ref_cpu)
    print(f"  without dropout: mltool {DEVICE} vs cpu {d_tool:.3g}; PyTorch {DEVICE} vs cpu {d_ref:.3g}; "
          f"mltool vs PyTorch on {DEVICE} {R.max_abs(tool_dev, ref_dev):.3g}, on cpu {R.max_abs(tool_cpu, ref_cpu):.3g}")
    expect(R.max_abs(tool_cpu, ref_cpu) <= 1e-5, "mltool's CPU training is not PyTorch's")
    expect(d_tool <= 2 * d_ref + 1e-6,
           f"CUDA and CPU training differ by {d_tool} in mltool, by {d_ref} in PyTorch (bound: twice PyTorch's)")


def check_auto():
    s = train("auto", "--epochs", "1", "--feed", "auto", device="auto")
    expect(s["feed"] == "pinned", f"--feed auto chose {s['feed']}")
    expect(s["device"] == ("cpu" if SMOKE else "cuda:0"), f"--device auto chose {s['device']}")


def check_resume():
    common = ["--epochs", "3", "--batch", "64", "--log-every", "5"]
    train("resume_full", *common)
    s = train("resume_part", *common, "--max-steps", "70")
    expect(s["status"] == "stopped", f"status {s['status']}")
    s = train("resume_part", *common, "--resume")
    expect(s["resumed_from"] == 70 and s["status"] == "complete", f"resumed {s}")
    d = max_diff("resume_full", "resume_part")
    print(f"  resumed vs uninterrupted: max |weight difference| {d:.3g}")
    expect(d <= 1e-6, f"the resumed run differs by {d}")


def check_graph():
    """Steps replayed from a CUDA graph train as eager steps do, bit for bit: dropout, batch
    norm, clipping, a warmup and a cosine schedule, and the last batch of each epoch (another
    size) eager between the replays; --no-cuda-graph runs every step eagerly."""
    common = ["--epochs", "3", "--batch", "60", "--last-batch", "keep", "--seed", "3", "--warmup", "5",
              "--schedule", "cosine", "--clip-norm", "1"]
    code, _, err = run([mltool, "train", tmp("ds"), "--model", tmp("mlp.json"), "-o", tmp("graph_on"),
                        "--device", DEVICE, "--json", *common])
    expect(code == 0, f"train graph_on: exit {code}: {err.strip()}")
    captured = "CUDA graph: steps of 60 samples replay" in err
    expect(captured != SMOKE, f"captured a CUDA graph: {captured} on {DEVICE}: {err[-1500:]}")
    expect("could not be captured" not in err, f"the capture failed: {err[-1500:]}")
    train("graph_off", *common, "--no-cuda-graph")
    d = max_diff("graph_on", "graph_off")
    print(f"  graph replays vs eager steps: max |weight difference| {d:.3g}")
    expect(d == 0.0, f"replayed steps differ from eager ones by {d}")


def check_bags():
    common = ["--epochs", "4", "--batch", "8", "--lr", "0.003"]
    p = train("bags_pinned", *common, "--feed", "pinned", dataset="bagds", spec="abmil.json")
    train("bags_host", *common, "--feed", "host", dataset="bagds", spec="abmil.json")
    d = max_diff("bags_pinned", "bags_host")
    print(f"  bags, pinned vs host: max |weight difference| {d:.3g}; val {p['validation']}")
    expect(d <= 1e-6, f"bag feeds differ by {d}")


def check_sections():
    # On the device: sectioned training equals plain (no dropout, so the generators do not
    # matter), the allocator's peak falls, and --offload-boundaries changes nothing but memory.
    # Tracked activations are block outputs: 8 blocks in 4 sections keep 3 boundaries and one
    # section's 2 outputs, 5 of plain's 8 (an MLP of 4 blocks in 3 sections would keep all 4).
    json.dump({"family": "mlp", "hidden": [512] * 8, "batch_norm": True},
              open(tmp("mlp_deep.json"), "w"))
    common = ["--epochs", "2", "--batch", "512", "--seed", "5"]
    p = train("sec_plain", *common, spec="mlp_deep.json")
    k = train("sec_k3", *common, "--sections", "4", spec="mlp_deep.json")
    o = train("sec_k3_off", *common, "--sections", "4", "--offload-boundaries", spec="mlp_deep.json")
    d, d_off = max_diff("sec_plain", "sec_k3"), max_diff("sec_k3", "sec_k3_off")
    print(f"  sections 4 vs plain: max |weight difference| {d:.3g}; offloaded vs not {d_off:.3g}; "
          f"activation bytes {p['memory']['activation_bytes']} / {k['memory']['activation_bytes']} / "
          f"{o['memory']['activation_bytes']}; device peak {p['memory']['device_peak_bytes']} / "
          f"{k['memory']['device_peak_bytes']} / {o['memory']['device_peak_bytes']}")
    expect(d <= 1e-4 and d_off <= 1e-6, f"sections differ from plain by {d}, offloaded by {d_off}")
    expect(k["memory"]["activation_bytes"] < p["memory"]["activation_bytes"], "sections keep no less")
    if not SMOKE:
        expect(k["memory"]["device_peak_bytes"] < p["memory"]["device_peak_bytes"],
               "the CUDA allocator's peak is no lower with --sections 4")
    if not SMOKE:
        expect(k["memory"]["device_peak_bytes"] < p["memory"]["device_peak_bytes"],
               "the allocator's peak is not lower with sections")


def check_nccl_one_rank():
    # The NCCL path run with one rank: RANK/WORLD_SIZE=1 in the environment (torchrun
    # --nproc-per-node 1) make a group of one, NCCL on CUDA; the weights equal the run
    # without a group.
    if SMOKE:
        return
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    json.dump({"family": "mlp", "hidden": [256, 64], "batch_norm": True}, open(tmp("mlp_nodrop.json"), "w"))
    common = ["--epochs", "2", "--batch", "128", "--seed", "9"]
    env = dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port))
    p = subprocess.run([mltool, "train", tmp("ds"), "--model", tmp("mlp_nodrop.json"), "-o", tmp("nccl1"),
                        "--device", DEVICE, "--json", "-q", *common], env=env, capture_output=True, text=True)
    expect(p.returncode == 0, f"NCCL, one rank: exit {p.returncode}: {p.stderr.strip()[-2000:]}")
    s = json.loads(p.stdout)
    expect(s["data_parallel"] is not None and s["data_parallel"]["buckets"] >= 1, f"no group: {s}")
    train("nccl1_plain", *common, spec="mlp_nodrop.json")
    d = max_diff("nccl1", "nccl1_plain")
    print(f"  NCCL one rank vs no group: max |weight difference| {d:.3g}; {s['data_parallel']}")
    expect(d <= 1e-5, f"one NCCL rank differs from no group by {d}")


def predict_csv(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return rows, np.array([[float(v) for k, v in r.items() if k.startswith(("logit_", "attention"))] for r in rows])


def check_predict():
    json.dump({"family": "mlp", "hidden": [256, 64], "batch_norm": True}, open(tmp("mlp_pred.json"), "w"))
    train("pred_tiles", "--epochs", "2", "--batch", "64", "--seed", "4", spec="mlp_pred.json")
    train("pred_bags", "--epochs", "2", "--batch", "8", dataset="bagds", spec="abmil.json")
    for run_dir, feat, files in (("pred_tiles", "feat", ["predictions.csv"]),
                                 ("pred_bags", "bagfeat", ["predictions.csv", "attention.csv"])):
        for device, out in ((DEVICE, "dev"), ("cpu", "cpu")):
            code, _, err = run([mltool, "predict", tmp(run_dir), tmp(feat), "-o", tmp(f"{run_dir}_{out}"),
                                "--device", device, "-q"])
            expect(code == 0, f"predict {run_dir} on {device}: exit {code}: {err.strip()}")
        for name in files:
            a, x = predict_csv(tmp(f"{run_dir}_dev", name))
            b, y = predict_csv(tmp(f"{run_dir}_cpu", name))
            d = float(np.abs(x - y).max())
            print(f"  predict {run_dir} {name}: {DEVICE} vs cpu max |difference| {d:.3g}")
            expect(d <= 1e-4, f"{run_dir} {name}: {DEVICE} and cpu differ by {d}")
            if name == "predictions.csv":
                same = sum(r["prediction"] == s["prediction"] for r, s in zip(a, b))
                expect(same == len(a), f"{run_dir}: {len(a) - same} predictions differ between devices")


if __name__ == "__main__":
    run_checks("train gpu" + (" (cpu smoke)" if SMOKE else ""),
               [check_feeds, check_learns, check_auto, check_resume, check_graph, check_bags, check_sections,
                check_nccl_one_rank, check_predict], only, fixtures)
