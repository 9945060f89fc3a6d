#!/usr/bin/env python3
"""One line per --profile trace (a Chrome trace written by mltool train|extract|predict
--profile): the recorded steps and their mean wall time (each one's too, up to 8), the share of that time the GPU spent
in kernels (the union of kernel intervals inside the steps, over the steps' total), the host
synchronisations inside the steps (CUDA runtime calls that wait: cudaStreamSynchronize,
cudaDeviceSynchronize, cudaEventSynchronize, cudaMemcpy; and operators that read a value back:
aten::item, aten::_local_scalar_dense, aten::nonzero), the kernel launches a step, and the peak
of allocated bytes in the memory events, per device. What scripts/device/run.sh's profiling
pass prints, and the figures docs/benchmarks.md quotes from traces.

    trace_summary.py TRACE.json...
"""
import json
import sys

SYNC_CALLS = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy"}
SYNC_OPS = {"aten::item", "aten::_local_scalar_dense", "aten::nonzero"}


def union(intervals):
    total, end = 0.0, float("-inf")
    for lo, hi in sorted(intervals):
        if hi <= end:
            continue
        total += hi - max(lo, end)
        end = hi
    return total


def summarize(path):
    doc = json.load(open(path))
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    steps = [e for e in events if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#")
             and e.get("cat") != "gpu_user_annotation"]
    if not steps:
        return f"{path}: no ProfilerStep ranges"
    spans = sorted((s["ts"], s["ts"] + s["dur"]) for s in steps)

    def within(e):
        return any(lo <= e["ts"] < hi for lo, hi in spans)

    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel" and within(e)]
    busy = union([(k["ts"], k["ts"] + k["dur"]) for k in kernels])
    wall = sum(hi - lo for lo, hi in spans)
    syncs = sum(1 for e in events if e.get("ph") == "X" and within(e) and
                (e.get("name") in SYNC_CALLS or (e.get("cat") == "cpu_op" and e.get("name") in SYNC_OPS)))
    peaks = {}
    for e in events:
        if e.get("name") == "[memory]" and "Total Allocated" in e.get("args", {}):
            a = e["args"]
            key = "cuda" if a.get("Device Type") == 1 else "cpu"
            peaks[key] = max(peaks.get(key, 0), a["Total Allocated"])
    memory = ", ".join(f"{k} peak {v / 2**30:.2f} GiB" for k, v in sorted(peaks.items())) or "no memory events"
    gpu = f"GPU kernels {100 * busy / wall:.0f}% of step time, {len(kernels) / len(steps):.0f} kernels a step" \
        if kernels else "no GPU kernels"
    each = f" ({', '.join(f'{(hi - lo) / 1000:.1f}' for lo, hi in spans)} ms)" if len(spans) <= 8 else ""
    return (f"{path}: {len(steps)} steps, {wall / len(steps) / 1000:.2f} ms a step{each}; {gpu}; "
            f"{syncs} host synchronisations in the steps; {memory}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for p in sys.argv[1:]:
        try:
            print(summarize(p))
        except (OSError, ValueError, KeyError) as e:
            print(f"{p}: unreadable ({e})")
