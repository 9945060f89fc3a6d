#!/usr/bin/env python3
"""The seed-003 case (partialflow): a residual CNN on 28x28 single-channel images with a
large batch, trained plain and in K sections (mltool train --sections K), against PyTorch's
torch.utils.checkpoint.checkpoint_sequential over the same segments, in one run on one GPU.

For each mode it reports the peak of the CUDA caching allocator's allocated bytes over the
steps and the median step time; then, optionally (--largest), the largest batch that trains
without running out of memory, plain and with the most sections, found by bisection.

  - mltool: `mltool train DS --model cnn.json --device cuda --feed pinned --batch B
    --sections K --max-steps S --log-every 1 --json`; the peak is the summary's
    memory.device_peak_bytes, the step time the median gap between metrics.jsonl step lines
    after the first two (warm-up, cuDNN's algorithm search).
  - PyTorch: the same architecture (stem, stages of residual units, pool, head; the blocks
    of mltool's rescnn) in Python, the images resident on the GPU as uint8 like mltool's
    pinned feed, AdamW, cross-entropy; plain steps, and checkpoint_sequential with one
    segment per mltool section (the block names mltool reports), use_reentrant=False.

The images: two classes of 28x28 grey blobs (a disc or a ring, noise), replicated to three
channels because rescnn's stem reads RGB tiles; written as a tile store (PNG) with
scripts/fixtures/tile_store.py, packed by mltool pack --unit image.

  sections_bench.py --mltool build/bin/mltool --out OUT --work WORK [--batch 7500]
                    [--sections 2,4,8] [--steps 8] [--largest] [--cpu-smoke]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts", "fixtures"))
import tile_store  # noqa: E402


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def blob(key, size):
    """A disc (class 0) or a ring (class 1) of grey, at a random place, with noise."""
    slide = int(key[1:key.index("/")])
    rng = np.random.default_rng(zlib.crc32(key.encode()))  # hash() changes between processes
    yy, xx = np.mgrid[0:size, 0:size]
    cy, cx = rng.uniform(9, size - 9, 2)
    r = np.hypot(yy - cy, xx - cx)
    shape = (r < 6) if slide % 2 == 0 else ((r > 4) & (r < 7))
    g = np.clip(40 + 170 * shape + rng.normal(0, 20, (size, size)), 0, 255).astype(np.uint8)
    return np.repeat(g[:, :, None], 3, axis=2)


def make_dataset(mltool, work, tiles, slides):
    ds = os.path.join(work, f"ds-{tiles}")
    if os.path.exists(os.path.join(ds, "dataset.json")):
        return ds
    os.makedirs(work, exist_ok=True)
    per = -(-tiles // slides)
    cols = 50
    store = os.path.join(work, f"tiles-{tiles}.lmdb")
    tile_store.tile_pixels = blob
    t = time.time()
    keys = tile_store.write_store(store, [{"id": f"S{i:04d}", "rows": -(-per // cols), "cols": cols}
                                          for i in range(slides)], 28, encoding="png")
    log(f"tile store: {len(keys)} tiles of 28x28 in {time.time() - t:.1f} s")
    feat = os.path.join(work, f"feat-{tiles}")
    os.makedirs(feat, exist_ok=True)
    np.save(os.path.join(feat, "features.npy"), np.zeros((len(keys), 1), "<f4"))
    with open(os.path.join(feat, "keys.txt"), "w", newline="\n") as f:
        f.writelines(k + "\n" for k in keys)
    with open(os.path.join(feat, "features.json"), "w") as f:
        json.dump({"created_by": "sections_bench.py", "dims": 1, "dtype": "float32",
                   "files": {"keys": "keys.txt", "matrix": "features.npy"},
                   "format": "mltool.features", "format_version": 1,
                   "model": {"name": "none"}, "rows": len(keys),
                   "source": {"tile_store": store}}, f)
    labels = os.path.join(work, f"labels-{tiles}.csv")
    with open(labels, "w") as f:
        f.write("key,label\n")
        f.writelines(f"S{i:04d},{'disc' if i % 2 == 0 else 'ring'}\n" for i in range(slides))
    subprocess.run([mltool, "pack", feat, "--labels", labels, "-o", ds, "--unit", "image",
                    "--split", "train=0.9,val=0.1", "-q"], check=True)
    return ds


def mltool_run(mltool, ds, spec, out, batch, sections, steps, device, graph=False):
    """Eager steps, as PyTorch's (graph: plain steps replayed from a CUDA graph, mltool's default)."""
    cmd = [mltool, "train", ds, "--model", spec, "-o", out, "--overwrite", "--device", device,
           "--feed", "pinned", "--batch", str(batch), "--sections", str(sections), "--epochs", "1",
           "--max-steps", str(steps), "--log-every", "1", "--json", "-q", *([] if graph else ["--no-cuda-graph"])]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return None, p.stderr.strip()
    s = json.loads(p.stdout)
    lines = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    t = [l["seconds"] for l in lines if l["event"] == "step"]
    gaps = [b - a for a, b in zip(t[1:], t[2:])] or [t[-1]]
    return {"peak_bytes": s["memory"]["device_peak_bytes"],
            "activation_bytes": s["memory"]["activation_bytes"],
            "step_seconds": statistics.median(gaps), "sections": s["memory"]["sections"]}, ""


def torch_model(spec, classes):
    import torch
    from torch import nn

    def conv(i, o, k, s):
        return nn.Conv2d(i, o, k, stride=s, padding=k // 2, bias=False)

    class Stem(nn.Module):
        def __init__(self, out, stride):
            super().__init__()
            self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
            self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))
            self.conv, self.norm = conv(3, out, 3, stride), nn.BatchNorm2d(out)

        def forward(self, x):
            x = (x.permute(0, 3, 1, 2).float() / 255.0 - self.mean) / self.std
            return torch.relu(self.norm(self.conv(x)))

    class Residual(nn.Module):
        def __init__(self, i, o, s):
            super().__init__()
            self.conv1, self.norm1 = conv(i, o, 3, s), nn.BatchNorm2d(o)
            self.conv2, self.norm2 = conv(o, o, 3, 1), nn.BatchNorm2d(o)
            self.shortcut = nn.Sequential(conv(i, o, 1, s), nn.BatchNorm2d(o)) if i != o or s != 1 else None

        def forward(self, x):
            y = self.norm2(self.conv2(torch.relu(self.norm1(self.conv1(x)))))
            return torch.relu(y + (self.shortcut(x) if self.shortcut is not None else x))

    class Pool(nn.Module):
        def forward(self, x):
            return x.mean((2, 3))

    ch, units = spec["channels"], spec.get("blocks_per_stage", 1)
    blocks = {"stem": Stem(ch[0], spec.get("stem_stride", 2))}
    width = ch[0]
    for s, c in enumerate(ch):
        blocks[f"stage{s + 1}"] = nn.Sequential(*[Residual(width if u == 0 else c, c, (1 if s == 0 else 2) if u == 0 else 1)
                                                  for u in range(units)])
        width = c
    blocks["pool"] = Pool()
    blocks["head"] = nn.Linear(width, classes)
    return blocks


def torch_run(spec, images, labels, batch, segments, steps, device, trace=None):
    """segments: lists of block names (None: plain). Returns peak bytes and median step time.
    trace: a path for a Chrome trace (torch.profiler, memory included) of one more step, the
    counterpart of mltool's --profile trace, to see where the two peaks part."""
    import torch
    from torch import nn
    from torch.utils.checkpoint import checkpoint_sequential
    torch.manual_seed(0)
    blocks = torch_model(spec, 2)
    names = list(blocks)
    if segments is None:
        model = nn.Sequential(*[blocks[n] for n in names]).to(device)
    else:
        # A segment names blocks, or a stage's residual units where mltool cut inside it
        # ("stage1.0": unit 0 of stage1's Sequential).
        def module(name):
            if name in blocks:
                return blocks[name]
            block, unit = name.rsplit(".", 1)
            return blocks[block][int(unit)]
        model = nn.Sequential(*[nn.Sequential(*[module(n) for n in seg]) for seg in segments]).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x_all, y_all = images.to(device), labels.to(device)
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    def one_step():  # its seconds
        idx = torch.randint(0, x_all.shape[0], (batch,), device=device)
        x, y = x_all[idx], y_all[idx]
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if segments is None:
            out = model(x)
        else:
            out = checkpoint_sequential(model, len(segments), x, use_reentrant=False)
        nn.functional.cross_entropy(out, y).backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - t

    times = [one_step() for _ in range(steps)]
    peak = torch.cuda.max_memory_allocated() if cuda else None
    if trace:
        from torch.profiler import ProfilerActivity, profile, record_function
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=activities, profile_memory=True) as prof:
            with record_function("ProfilerStep#0"):
                one_step()
        prof.export_chrome_trace(trace)
    model = opt = x_all = y_all = None  # freed before empty_cache (one_step holds the same cells)
    if cuda:
        torch.cuda.empty_cache()
    return {"peak_bytes": peak, "step_seconds": statistics.median(times[2:] or times)}


def largest(fits, start):
    """The largest batch for which fits(batch) holds, doubling from `start` then bisecting."""
    lo, hi = 0, start
    while fits(hi):
        lo, hi = hi, hi * 2
    while hi - lo > max(64, lo // 50):
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mltool", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--batch", type=int, default=7500)
    ap.add_argument("--sections", default="2,4,8")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--tiles", type=int, default=40000, help="images in the dataset (>= batch / 0.9)")
    ap.add_argument("--channels", default="32,64,128,128,256,256")
    ap.add_argument("--largest", action="store_true", help="also bisect the largest batch that fits")
    ap.add_argument("--largest-tiles", type=int, default=240000)
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny, on the CPU: checks the script")
    ap.add_argument("--torch-traces", help="a directory for PyTorch's trace of one step at K = "
                    "--torch-trace-k (pytorch-kK.json), beside mltool's --profile traces")
    ap.add_argument("--torch-trace-k", type=int, default=4)
    a = ap.parse_args()
    import torch
    device = "cuda" if torch.cuda.is_available() and not a.cpu_smoke else "cpu"
    if a.cpu_smoke:
        a.batch, a.tiles, a.steps, a.channels, a.largest = 64, 400, 4, "4,8,8,8,8,8", False
    elif device == "cpu":
        sys.exit("sections_bench.py: no CUDA GPU (use --cpu-smoke to try the script on the CPU)")
    os.makedirs(a.out, exist_ok=True)
    spec = {"family": "rescnn", "channels": [int(c) for c in a.channels.split(",")],
            "blocks_per_stage": 2, "stem_stride": 1}
    spec_path = os.path.join(a.work, "cnn.json")
    os.makedirs(a.work, exist_ok=True)
    json.dump(spec, open(spec_path, "w"))
    ds = make_dataset(a.mltool, a.work, a.tiles, max(20, a.tiles // 2000))
    runs = os.path.join(a.work, "runs")

    results = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
               "batch": a.batch, "spec": spec, "steps": a.steps, "modes": []}
    # The images PyTorch trains on: the same tiles, decoded once.
    keys, raw = tile_store.read_store(os.path.join(a.work, f"tiles-{a.tiles}.lmdb"))
    from PIL import Image
    import io
    images = torch.from_numpy(np.stack([np.asarray(Image.open(io.BytesIO(b)).convert("RGB")) for b in raw]))
    labels = torch.tensor([int(k[1:k.index("/")]) % 2 for k in keys])

    for k in [1] + [int(s) for s in a.sections.split(",")]:
        m, err = mltool_run(a.mltool, ds, spec_path, os.path.join(runs, f"k{k}"), a.batch, k, a.steps, device)
        if m is None:
            log(f"mltool --sections {k}: failed: {err[-500:]}")
            results["modes"].append({"sections": k, "mltool": None, "error": err[-500:]})
            continue
        trace = None
        if a.torch_traces and k == a.torch_trace_k:
            os.makedirs(a.torch_traces, exist_ok=True)
            trace = os.path.join(a.torch_traces, f"pytorch-k{k}.json")
        p = torch_run(spec, images, labels, a.batch, None if k == 1 else m["sections"], a.steps, device, trace)
        results["modes"].append({"sections": k, "segments": m["sections"], "mltool": m, "pytorch": p})
        log(f"K={k}: mltool peak {m['peak_bytes']}, {m['step_seconds'] * 1e3:.1f} ms/step; "
            f"PyTorch peak {p['peak_bytes']}, {p['step_seconds'] * 1e3:.1f} ms/step")

    # mltool's default for plain steps on CUDA: replayed from a graph (docs/train.md#cuda-graphs).
    g, err = mltool_run(a.mltool, ds, spec_path, os.path.join(runs, "k1-graph"), a.batch, 1, a.steps, device, True)
    results["plain_graph"] = g
    if g:
        log(f"K=1, CUDA graph: mltool peak {g['peak_bytes']}, {g['step_seconds'] * 1e3:.1f} ms/step")

    if a.largest:
        big = make_dataset(a.mltool, a.work, a.largest_tiles, a.largest_tiles // 2000)
        kmax = max(int(s) for s in a.sections.split(","))
        for k in (1, kmax):
            def fits(b, k=k):
                r, _ = mltool_run(a.mltool, big, spec_path, os.path.join(runs, f"largest{k}"), b, k, 2, device)
                log(f"  --sections {k} --batch {b}: {'fits' if r else 'does not fit'}")
                return r is not None
            results[f"largest_batch_k{k}"] = largest(fits, a.batch)

    plain = next(m for m in results["modes"] if m["sections"] == 1)
    rows = ["| mode | mltool peak (GiB) | PyTorch peak (GiB) | mltool / PyTorch | mltool step (ms) | PyTorch step (ms) | mltool overhead vs plain |",
            "|---|---|---|---|---|---|---|"]
    gib = lambda b: f"{b / 2 ** 30:.2f}" if b else "n/a"
    for m in results["modes"]:
        if not m.get("mltool"):
            rows.append(f"| sections {m['sections']} | failed | | | | | |")
            continue
        mm, pp = m["mltool"], m["pytorch"]
        ratio = f"{mm['peak_bytes'] / pp['peak_bytes']:.2f}" if mm["peak_bytes"] and pp["peak_bytes"] else "n/a"
        over = (mm["step_seconds"] / plain["mltool"]["step_seconds"] - 1) * 100 if plain.get("mltool") else float("nan")
        name = "plain" if m["sections"] == 1 else f"{m['sections']} sections"
        rows.append(f"| {name} | {gib(mm['peak_bytes'])} | {gib(pp['peak_bytes'])} | {ratio} | "
                    f"{mm['step_seconds'] * 1e3:.1f} | {pp['step_seconds'] * 1e3:.1f} | {over:+.0f}% |")
    if g:
        rows.append("")
        rows.append(f"Plain steps replayed from a CUDA graph (mltool's default; the rows above are eager, as "
                    f"PyTorch's): peak {gib(g['peak_bytes'])} GiB, {g['step_seconds'] * 1e3:.1f} ms a step.")
    if a.largest:
        kmax = max(int(s) for s in a.sections.split(","))
        l1, lk = results["largest_batch_k1"], results[f"largest_batch_k{kmax}"]
        rows.append("")
        rows.append(f"Largest batch that fits: plain {l1}, {kmax} sections {lk} ({lk / max(1, l1):.1f}x).")
    table = "\n".join([f"Device: {results['device']}; batch {a.batch}; rescnn {spec}", ""] + rows)
    print(table)
    open(os.path.join(a.out, "sections-bench.md"), "w").write(table + "\n")
    json.dump(results, open(os.path.join(a.out, "sections-bench.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
