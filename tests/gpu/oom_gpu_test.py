"""Out-of-memory recovery on a real GPU (ctest label gpu; docs/memory-modes.md#out-of-memory):
the CUDA caching allocator is capped with PYTORCH_CUDA_ALLOC_CONF=per_process_memory_fraction
(torch 2.11) below what the configured batch needs, measured first, and mltool extract,
predict and train must still finish, having split (features.json split_batches, the predict
summary's split_batches, run.json runtime.oom_retry), and equal an uncapped run:

  extract   a wide convolution net (TorchScript) on 224-px tiles, capped at about 35% of what
            the batch of 128 needs: features within 5e-3 of the largest magnitude (cuDNN may
            pick other algorithms, TF32, for other batch sizes)
  train     a TorchScript MLP with 4096-wide layers on 16384 samples, --batch 8192, capped
            between the fixed memory (feed, weights, optimizer) and 70% of the uncapped peak:
            the micro-batches doubled in run.json, and the weights no further from the
            uncapped run's (relative) than twice PyTorch's own difference between the same
            training in that many micro-batches and whole (torch_reference.py)
  predict   that run over 64 slides of 256 tiles, capped at its weights plus half of what the
            uncapped prediction measured above them (the summary's memory.device_peak_bytes;
            a slide's batch is its 256 tiles, whatever --batch says): predictions.csv's
            values within 1e-4

    oom_gpu_test.py MLTOOL [--cpu-smoke] [CHECK...]   # CHECK: check_* names without check_

Without a GPU visible to torch it prints "skip: ..." and exits 77 (ctest SKIP_RETURN_CODE).
--cpu-smoke runs the fixtures and every command on the CPU, uncapped (nothing splits there), and
reads what they write, so the commands, their summaries and files can be tried without a GPU
(with 2 x 2 tiles a slide and 256-wide layers, to keep it short).
"""
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "fixtures"))
sys.path.insert(0, os.path.join(HERE, "..", "cli"))
from cli_common import expect, run, run_checks, tmp, write_feature_store  # noqa: E402
import torch_reference as R  # noqa: E402

args = [a for a in sys.argv[1:] if not a.startswith("--")]
flags = [a for a in sys.argv[1:] if a.startswith("--")]
if not args or set(flags) - {"--cpu-smoke"}:
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    sys.exit(2)
mltool = os.path.abspath(args[0])
only = set(args[1:])
SMOKE = "--cpu-smoke" in flags
DEV = "cpu" if SMOKE else "cuda:0"

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

if __name__ == "__main__" and not SMOKE and not torch.cuda.is_available():
    print("skip: no CUDA GPU is visible to torch; the out-of-memory GPU test needs one")
    sys.exit(77)

TS = 224
MIB = 1 << 20
GRID = 2 if SMOKE else 8       # tiles a slide: GRID x GRID
WIDTH = 256 if SMOKE else 4096  # the MLP's hidden layers


class Wide(nn.Module):
    """Activations of 64 x 224 x 224 floats a tile (12.8 MB a layer): a batch fills memory fast."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 64, 3, padding=1)
        self.b = nn.Conv2d(64, 64, 3, padding=1)
        self.fc = nn.Linear(64, 32)

    def forward(self, x):
        x = F.relu(self.b(F.relu(self.a(x))))
        return self.fc(x.mean((2, 3)))


def capped(limit_bytes):
    """The environment that caps the caching allocator at `limit_bytes` of device 0 (none in
    --cpu-smoke)."""
    if SMOKE:
        return None
    total = torch.cuda.get_device_properties(0).total_memory
    fraction = max(limit_bytes / total, 1e-4)
    return {"PYTORCH_CUDA_ALLOC_CONF": f"per_process_memory_fraction:{fraction:.6f}"}


def run_ok(cmd, env=None):
    code, out, err = run(cmd, env=env)
    expect(code == 0, f"{' '.join(cmd[:3])}... (env {env}): exit {code}: {err[-2000:]}")
    return json.loads(out) if out.strip().startswith("{") else None, err


def peak_of(fn):
    """Bytes the caching allocator peaked at while `fn()` ran (after a clean start); 0 in
    --cpu-smoke."""
    if SMOKE:
        fn()
        return 0
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def fixtures():
    import tile_store
    tile_store.write_store(tmp("tiles.lmdb"), [{"id": f"S{i}", "rows": GRID, "cols": GRID} for i in range(4)], TS,
                           encoding="jpeg")
    torch.manual_seed(7)
    torch.jit.script(Wide().eval()).save(tmp("wide.pt"))
    rng = np.random.default_rng(3)
    centers = rng.standard_normal((2, 512))
    labels = rng.integers(0, 2, 16384)
    rows = centers[labels] + rng.standard_normal((16384, 512))
    # 64 slides of 256 tiles: pack splits by slide, so val gets about 6 of them
    keys = [f"S{i // 256:02d}/{i % 256:06d}_000000" for i in range(16384)]
    write_feature_store(tmp("feat"), rows, keys)
    with open(tmp("labels.csv"), "w") as f:
        f.write("key,label\n" + "".join(f"{k},{'ab'[l]}\n" for k, l in zip(keys, labels)))
    code, _, err = run([mltool, "pack", tmp("feat"), "--labels", tmp("labels.csv"), "-o", tmp("ds"), "--seed", "1",
                        "--split", "train=0.9,val=0.1"])
    expect(code == 0, f"pack: {err}")
    return f"{4 * GRID * GRID} tiles of 224 px, 16384 x 512 features, MLP {WIDTH} wide"


def check_extract():
    base = [mltool, "extract", tmp("tiles.lmdb"), "--model", tmp("wide.pt"), "--input-size", str(TS),
            "--device", DEV, "--batch", "128", "--json", "-q"]
    run_ok([*base, "-o", tmp("f_free")])
    model = torch.jit.load(tmp("wide.pt"), map_location=DEV)
    x = torch.rand(128, 3, TS, TS, device=DEV)
    with torch.inference_mode():
        need = peak_of(lambda: model(x))
    del x
    weights = sum(p.numel() * 4 for p in model.parameters())
    # The decoded batch (uint8) and its preprocessed copy come along; 35% of the forward's peak.
    limit = weights + 128 * TS * TS * 3 * 5 + int(0.35 * need) + 64 * MIB
    run_ok([*base, "-o", tmp("f_capped")], env=capped(limit))
    a = np.load(tmp("f_capped", "features.npy"))
    b = np.load(tmp("f_free", "features.npy"))
    meta = json.load(open(tmp("f_capped", "features.json")))
    expect(SMOKE or meta.get("split_batches"), f"capped at {limit / MIB:.0f} MiB (the batch needs {need / MIB:.0f}): "
                                      "no batch was split")
    rel = float(np.abs(a.astype(np.float64) - b).max() / np.abs(b).max())
    print(f"extract: {len(meta.get('split_batches') or [])} split batches, max relative difference {rel:.2e}")
    expect(rel <= 5e-3, f"capped features differ by {rel} relative")


def safetensors(path):
    data = open(path, "rb").read()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    return {k: np.frombuffer(data[8 + n + h["data_offsets"][0]:8 + n + h["data_offsets"][1]], "<f4")
            for k, h in header.items() if h["dtype"] == "F32"}


def check_train():
    # A TorchScript MLP, so that PyTorch can train the same weights (torch_reference.py).
    module = R.script_mlp(tmp("mlp.pt"), 512, [WIDTH, WIDTH], 2, seed=9)
    base = [mltool, "train", tmp("ds"), "--model", tmp("mlp.pt"), "--epochs", "2", "--batch", "8192",
            "--schedule", "constant", "--lr", "0.001", "--seed", "1", "--val-split", "train",
            "--device", DEV, "--feed", "pinned", "--json", "-q"]
    free, _ = run_ok([*base, "-o", tmp("run_free")])
    peak = free["memory"]["device_peak_bytes"]
    params = 512 * WIDTH + WIDTH * WIDTH + WIDTH * 2 + 2 * WIDTH + 2
    fixed = 16384 * 512 * 4 + params * 4 * 4 + 64 * MIB  # feed, weights + grads + AdamW's two
    expect(SMOKE or peak > fixed, f"the uncapped peak {peak} is below the fixed memory {fixed}")
    limit = fixed + int(0.7 * (peak - fixed))
    capped_run, _ = run_ok([*base, "-o", tmp("run_capped")], env=capped(limit))
    runtime = json.load(open(tmp("run_capped", "run.json")))["runtime"]
    parts = capped_run["memory"]["micro_batches"]
    expect(SMOKE or "oom_retry" in runtime and parts > 1,
           f"capped at {limit / MIB:.0f} MiB (peak {peak / MIB:.0f}): no retry ({runtime}, {capped_run['memory']})")
    a, b = safetensors(tmp("run_capped", "model.safetensors")), safetensors(tmp("run_free", "model.safetensors"))
    worst = max(float(np.abs(a[k].astype(np.float64) - b[k]).max() / max(np.abs(b[k]).max(), 1e-30)) for k in b)
    # The bound: PyTorch's own difference between the same training in `parts` micro-batches
    # and whole, on the same device (the sums of the parts round otherwise).
    x, y = R.training_split(tmp("run_free"), np.load(tmp("feat", "features.npy")))
    whole = R.train(module, x, y, 1, 2, 8192, 0.001, DEV)
    split = R.train(module, x, y, 1, 2, 8192, 0.001, DEV, parts=parts)
    ref = R.max_rel(split, whole)
    print(f"train: {runtime.get('oom_retry')}, max relative difference {worst:.2e}; PyTorch in {parts} "
          f"micro-batches vs whole {ref:.2e}")
    expect(worst <= 2 * ref + 1e-6, f"capped weights differ by {worst} relative; PyTorch's own {ref} (bound: twice)")


def check_predict():
    if not os.path.exists(tmp("run_free", "model.safetensors")):
        check_train()
    # The same rows in 4 slides of 4,096 tiles: a slide's tiles are one batch (up to --batch),
    # so a batch's activations (4,096 x WIDTH floats a layer) outweigh what no split can shed
    # (the weights, cuBLAS's workspace, the allocator's rounding), which slides of 256 tiles
    # measure.
    if not os.path.exists(tmp("feat_big", "features.npy")):
        keys = [f"B{i // 4096}/{i % 4096:06d}_000000" for i in range(16384)]
        write_feature_store(tmp("feat_big"), np.load(tmp("feat", "features.npy")), keys)
    base = [mltool, "predict", tmp("run_free"), "--batch", "4096", "--device", DEV, "--weights", "final",
            "--json", "-q"]
    small, _ = run_ok([*base, tmp("feat"), "-o", tmp("p_small")])
    free, _ = run_ok([*base, tmp("feat_big"), "-o", tmp("p_free")])
    # The cap from the two measured peaks: what a batch of 256 tiles needs stays, half of what
    # 4,096 tiles need beyond it goes.
    fixed, peak = small["memory"]["device_peak_bytes"], free["memory"]["device_peak_bytes"]
    expect(SMOKE or peak - fixed >= 64 * MIB,
           f"the peak of slides of 4,096 tiles ({peak / MIB:.0f} MiB) is not 64 MiB above that of 256 "
           f"({fixed / MIB:.0f}): no room to cap between them")
    limit = fixed + (peak - fixed) // 2
    summary, _ = run_ok([*base, tmp("feat_big"), "-o", tmp("p_capped")], env=capped(limit))
    expect(SMOKE or summary["split_batches"] > 0,
           f"capped at {limit / MIB:.0f} MiB (the uncapped run peaked at {peak / MIB:.0f}): no split")
    import csv
    rows = [list(csv.reader(open(tmp(d, "predictions.csv")))) for d in ("p_capped", "p_free")]
    expect(len(rows[0]) == len(rows[1]) == 16385, "predictions.csv rows")
    worst = 0.0
    for ra, rb in zip(rows[0][1:], rows[1][1:]):
        for u, v in zip(ra[2:], rb[2:]):
            try:
                worst = max(worst, abs(float(u) - float(v)))
            except ValueError:
                expect(u == v, f"{u} vs {v}")
    print(f"predict: {summary['split_batches']} split batches (capped at {limit / MIB:.0f} MiB; peaks: 256-tile "
          f"slides {fixed / MIB:.0f}, 4,096-tile {peak / MIB:.0f}), max difference {worst:.2e}")
    expect(worst <= 1e-4, f"capped predictions differ by {worst}")


if __name__ == "__main__":
    run_checks("oom gpu", [check_extract, check_train, check_predict], only, fixtures)
