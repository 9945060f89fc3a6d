"""--profile on train, extract and predict (docs/troubleshooting.md#reading-a-profile), and
what it lets a CPU-only machine check of a GPU step:

  train_trace     train --profile writes a Chrome trace of --profile-steps steps after
                  --profile-skip (ProfilerStep#N ranges, operators, memory events), published
                  whole (no partial file left)
  no_host_reads   a steady-state training step (tiles, bags; plain, --sections) runs no
                  operator that reads a value back to the host (aten::item,
                  _local_scalar_dense, nonzero, ...): on a GPU each one is a synchronisation.
                  Bags in micro-batches read their lengths once a step: counted, as a
                  control that the count can see one
  sections_memory --sections K lowers the peak of allocated bytes (memory.device_peak_bytes:
                  on the CPU, mltool's counting allocator) as K grows, on a residual CNN
                  whose activations dominate
  sections_vs_checkpoint  --sections K adds no more to the plain step's peak than PyTorch's
                  checkpoint_sequential over the same segments (bench/sections_bench.py's
                  step, its peak from torch.profiler's memory events), with sections that end
                  on a projecting residual unit
  extract_predict extract and predict --profile: batches as ProfilerStep ranges, the model's
                  operators inside; a run shorter than --profile-skip writes nothing and says so

    profile_test.py MLTOOL [CHECK...]   # CHECK: check_* names without check_
"""
import json
import os
import sys

import numpy as np

import train_test as T  # also puts scripts/fixtures on sys.path
from cli_common import expect, run, run_checks, tmp, write_feature_store

mltool = os.path.abspath(sys.argv[1])
only = set(sys.argv[2:])

# Operators that read a tensor's value back to the host: on CUDA, each waits for the device.
HOST_READS = {"aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero",
              "aten::equal", "aten::unique", "aten::_unique2", "aten::masked_select"}


def fixtures():
    what = T.fixtures()
    import tile_store
    tile_store.tile_pixels = T.tinted_pixels
    slides = [{"id": f"T{i:02d}", "rows": 4, "cols": 8} for i in range(8)]
    keys = tile_store.write_store(tmp("tiles.lmdb"), slides, 32, encoding="png")
    write_feature_store(tmp("imgfeat"), np.zeros((len(keys), 2)), keys, source={"tile_store": tmp("tiles.lmdb")})
    T.write_labels(tmp("imgs.csv"), [(f"T{i:02d}", "red" if i % 2 == 0 else "blue") for i in range(8)])
    T.pack(tmp("imgfeat"), tmp("imgs.csv"), tmp("imgds"), "--unit", "image", "--split", "train=0.75,val=0.25")
    # Full resolution through two stages of two units: the activations dominate memory.
    T.write_json(tmp("cnn.json"), {"family": "rescnn", "channels": [16, 16, 32], "blocks_per_stage": 2,
                                   "stem_stride": 1})
    return what + f"; {len(keys)} tiles of 32 px"


def trace(path):
    doc = json.load(open(path))
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    steps = sorted((e for e in events if e.get("name", "").startswith("ProfilerStep#") and e.get("ph") == "X"),
                   key=lambda e: e["ts"])
    return events, steps


def inside(events, step):
    """The complete events of the step's thread that start inside the step's range."""
    lo, hi = step["ts"], step["ts"] + step["dur"]
    return [e for e in events if e.get("ph") == "X" and e.get("tid") == step.get("tid")
            and e.get("pid") == step.get("pid") and lo <= e["ts"] < hi and e is not step]


def host_reads(path):
    events, steps = trace(path)
    expect(steps, f"{path}: no ProfilerStep ranges")
    return sum(1 for s in steps for e in inside(events, s) if e["name"] in HOST_READS), len(steps)


def profiled_train(name, ds, spec, *extra):
    out, prof = tmp("run_" + name), tmp(name + ".trace.json")
    s = T.train_ok(ds, "--model", tmp(spec), "-o", out, "--device", "cpu", "--log-every", "1000",
                   "--profile", prof, *extra)
    return s, prof


def check_train_trace():
    s, prof = profiled_train("trace", tmp("ds"), "mlp.json", "--epochs", "2", "--batch", "16",
                             "--profile-skip", "2", "--profile-steps", "5")
    expect(s["status"] == "complete", f"summary {s}")
    events, steps = trace(prof)
    names = [e["name"] for e in steps]
    expect(names == [f"ProfilerStep#{i}" for i in range(2, 7)], f"steps in the trace: {names}")
    ops = {e["name"] for s_ in steps for e in inside(events, s_)}
    for op in ("aten::addmm", "aten::mm", "aten::linear"):
        if op in ops:
            break
    else:
        expect(False, f"no matrix product inside the steps: {sorted(ops)[:40]}")
    expect(any(e.get("name") == "[memory]" for e in events), "no memory events in the trace")
    leftovers = [f for f in os.listdir(os.path.dirname(prof)) if ".partial-" in f]
    expect(not leftovers, f"partial files left: {leftovers}")


def check_no_host_reads():
    common = ["--epochs", "1", "--profile-skip", "2", "--profile-steps", "6"]
    for name, ds, spec, extra in [
            ("reads_tiles", "ds", "mlp.json", ["--batch", "16"]),
            ("reads_bags", "bagds", "abmil.json", ["--batch", "4"]),
            ("reads_sections", "imgds", "cnn.json", ["--batch", "16", "--sections", "3"]),
            ("reads_micro", "ds", "mlp.json", ["--batch", "16", "--micro-batches", "2"])]:
        _, prof = profiled_train(name, tmp(ds), spec, *common, *extra)
        n, steps = host_reads(prof)
        print(f"  {name}: {n} host reads in {steps} steps")
        expect(n == 0, f"{name}: {n} operators read values back to the host in {steps} steady-state steps")
    # The control: bags in micro-batches cut each part's padding at its longest bag, read back.
    _, prof = profiled_train("reads_bag_micro", tmp("bagds"), "abmil.json", *common, "--batch", "4",
                             "--micro-batches", "2")
    n, steps = host_reads(prof)
    print(f"  bags in micro-batches: {n} host reads in {steps} steps")
    expect(n >= steps, f"bags in micro-batches: {n} host reads in {steps} steps; the count sees none")


def check_sections_memory():
    peaks = {}
    for k in (1, 2, 4):
        s = T.train_ok(tmp("imgds"), "--model", tmp("cnn.json"), "-o", tmp(f"run_sec{k}"), "--device", "cpu",
                       "--batch", "64", "--epochs", "1", "--max-steps", "2", "--sections", str(k),
                       "--math-threads", "1")
        peaks[k] = s["memory"]["device_peak_bytes"]
        print(f"  --sections {k}: peak {peaks[k] / 2**20:.1f} MiB, activations "
              f"{s['memory']['activation_bytes'] / 2**20:.1f} MiB, sections {s['memory']['sections']}")
    expect(all(isinstance(v, int) and v > 0 for v in peaks.values()), f"peaks {peaks}")
    expect(peaks[2] < peaks[1] and peaks[4] < peaks[2], f"the peak does not fall as K grows: {peaks}")


def torch_sections_peak(segments, images, labels, batch, steps):
    """The peak of PyTorch's allocated CPU bytes over bench/sections_bench.py's torch_run (plain,
    or checkpoint_sequential over `segments`), from the profiler's memory events: its model, its
    optimizer and its steps are all allocated inside the profiled range."""
    from torch.profiler import ProfilerActivity, profile
    import sections_bench
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, acc_events=True) as prof:
        sections_bench.torch_run(SECTIONS_SPEC, images, labels, batch, segments, steps, "cpu")
    path = tmp("checkpoint.trace.json")
    prof.export_chrome_trace(path)
    events, _ = trace(path)
    return max(e["args"]["Total Allocated"] for e in events if e.get("name") == "[memory]")


# Stage 2 projects 8 channels to 64 at half the resolution: its first unit's shortcut output is
# the size of the largest activations, and --sections 3 and 4 end sections on that unit.
SECTIONS_SPEC = {"family": "rescnn", "channels": [8, 64], "blocks_per_stage": 2, "stem_stride": 1}


def check_sections_vs_checkpoint():
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
    torch.set_num_threads(1)
    T.write_json(tmp("cnn_wide.json"), SECTIONS_SPEC)
    batch, steps = 64, 2
    # The pixels as rescnn's stem sees them on the CPU (pixels_to_float: contiguous N x 3 x H x W):
    # the bench's stem permutes N x H x W x 3, here a view of that layout.
    images = torch.randint(0, 256, (192, 3, 32, 32), dtype=torch.uint8).permute(0, 2, 3, 1)
    labels = torch.randint(0, 2, (192,))
    peaks = {}
    for k in (1, 3, 4):
        s = T.train_ok(tmp("imgds"), "--model", tmp("cnn_wide.json"), "-o", tmp(f"run_ckpt{k}"), "--device", "cpu",
                       "--batch", str(batch), "--epochs", "1", "--max-steps", str(steps), "--sections", str(k),
                       "--math-threads", "1")
        segments = s["memory"]["sections"]
        ours = s["memory"]["device_peak_bytes"]
        theirs = torch_sections_peak(None if k == 1 else segments, images, labels, batch, steps)
        peaks[k] = (ours, theirs)
        print(f"  --sections {k} {segments}: peak {ours} bytes; checkpoint_sequential {theirs}")
        expect(k == 1 or any(seg[-1] == "stage2.0" for seg in segments),
               f"--sections {k}: no section ends on the projecting unit stage2.0: {segments}")
    # Each process holds its own things besides the step (the dataset, the feed): compare what
    # sectioning changes from each one's plain step. One activation of the largest size is 4 MiB;
    # the sections' generator states are a few KiB each.
    for k in (3, 4):
        ours, theirs = peaks[k][0] - peaks[1][0], peaks[k][1] - peaks[1][1]
        expect(ours <= theirs + 64 * 1024,
               f"--sections {k}: peak {ours:+} bytes from plain's; checkpoint_sequential over the same segments "
               f"{theirs:+} ({ours - theirs} bytes more)")


def check_extract_predict():
    prof = tmp("extract.trace.json")
    code, out, err = run([mltool, "extract", tmp("tiles.lmdb"), "-o", tmp("feat_prof"), "--device", "cpu",
                          "--batch", "32", "--profile", prof, "--profile-skip", "1", "--profile-steps", "3",
                          "-q", "--json"])
    expect(code == 0, f"extract --profile: exit {code}: {err}")
    events, steps = trace(prof)
    expect([e["name"] for e in steps] == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"],
           f"extract steps {[e['name'] for e in steps]}")
    expect(any(e["name"].startswith("aten::") for s in steps for e in inside(events, s)),
           "extract: no operators inside the batches")
    T.train_ok(tmp("ds"), "--model", tmp("mlp.json"), "-o", tmp("run_for_predict"), "--epochs", "1")
    prof = tmp("predict.trace.json")
    code, out, err = run([mltool, "predict", tmp("run_for_predict"), tmp("feat"), "-o", tmp("pred_prof"),
                          "--device", "cpu", "--batch", "4", "--profile", prof, "--profile-skip", "0",
                          "--profile-steps", "2", "-q", "--json"])
    expect(code == 0, f"predict --profile: exit {code}: {err}")
    summary = json.loads(out)
    expect(summary["memory"]["device_peak_bytes"] > 0, f"predict memory {summary.get('memory')}")
    events, steps = trace(prof)
    expect(len(steps) == 2 and any(e["name"].startswith("aten::") for s in steps for e in inside(events, s)),
           f"predict: {len(steps)} steps")
    # Fewer batches than --profile-skip: nothing written, and a warning that says why.
    prof = tmp("nothing.trace.json")
    code, out, err = run([mltool, "predict", tmp("run_for_predict"), tmp("feat"), "-o", tmp("pred_prof2"),
                          "--device", "cpu", "--profile", prof, "--profile-skip", "1000"])
    expect(code == 0 and not os.path.exists(prof) and "lower --profile-skip" in err,
           f"a run shorter than --profile-skip: exit {code}, {err}")


if __name__ == "__main__":
    run_checks("profile", [check_train_trace, check_no_host_reads, check_sections_memory,
                          check_sections_vs_checkpoint, check_extract_predict],
               only, fixtures)
