#!/usr/bin/env python3
"""`mltool extract SLIDES` against `mltool tile` + `mltool extract STORE`, side by side.
Run through bench/run-extract-slides.sh, which makes the cohort and finds the binary.

    extract_slides_bench.py --mltool MLTOOL --out OUTDIR --work DIR --slides S1 S2 ...
                            [--case "NAME|GEOMETRY OPTIONS[|GLOB]" ...] [--threads 2] [--repeats 2]
                            [--model builtin:color-texture] [--model-args "..."]

For each case (a tile geometry: the options that tile and extract share; with GLOB, only the
slides whose file name matches it, e.g. 'biopsy-*'), --repeats times,
the order of (a) and (b) alternating between repeats, every slide read once right before:
  (a) mltool tile SLIDES -o WORK/store GEOMETRY --threads T --json    (default --format jpeg)
      mltool extract WORK/store -o WORK/f-store --model M --threads T --json
  (b) mltool extract SLIDES -o WORK/f-slides GEOMETRY --model M --threads T --json
each under /usr/bin/time -v (wall seconds, CPU seconds, peak RSS). The best repeat of each
is reported, with (b) / (a) for wall time (goal <= 0.6), for CPU seconds (the least of each
side's repeats: what other processes on the machine change least) and peak RSS. The two
feature stores are compared: same keys in the same order, and the largest difference of
their features (the tile store's tiles went through JPEG Q90 unless they passed through, so
they differ where tile re-encoded).
(b)'s --json summary is kept whole (OUTDIR/extract-slides.json) and every field in it that
names an idle gap or a wait is put in the table.

Prints a markdown table and writes it to OUTDIR/extract-slides.md; OUTDIR/extract-slides.json
holds every number and is rewritten after each measurement.
"""
import argparse
import fnmatch
import json
import os
import shlex
import shutil
import subprocess
import sys
import time

import numpy as np


def timed(cmd, log_base):
    """Runs cmd under /usr/bin/time -v; returns (wall s, peak RSS KiB, parsed --json or None,
    CPU s: user + system)."""
    tfile = f"{log_base}.time"
    with open(f"{log_base}.json", "w") as out, open(f"{log_base}.err", "w") as err:
        rc = subprocess.run(["/usr/bin/time", "-v", "-o", tfile] + cmd, stdout=out,
                            stderr=err).returncode
    if rc != 0:
        sys.stderr.write(open(f"{log_base}.err").read())
        raise SystemExit(f"extract_slides_bench: exit {rc}: {shlex.join(cmd)}")
    wall = rss = None
    cpu = 0.0
    for line in open(tfile):
        key, _, val = line.strip().partition(": ")
        if key in ("User time (seconds)", "System time (seconds)"):
            cpu += float(val)
        elif key == "Elapsed (wall clock) time (h:mm:ss or m:ss)":
            s = 0.0
            for part in val.split(":"):
                s = s * 60 + float(part)
            wall = s
        elif key == "Maximum resident set size (kbytes)":
            rss = int(val)
    try:
        summary = json.load(open(f"{log_base}.json"))
    except ValueError:
        summary = None
    return wall, rss, summary, cpu


def load_features(d):
    feats = np.load(os.path.join(d, "features.npy"), mmap_mode="r")
    keys = open(os.path.join(d, "keys.txt")).read().split("\n")
    return feats, [k for k in keys if k]


def compare(d1, d2):
    f1, k1 = load_features(d1)
    f2, k2 = load_features(d2)
    out = {"rows_store": len(k1), "rows_slides": len(k2), "same_keys": k1 == k2}
    if k1 == k2 and len(k1):
        a = np.asarray(f1, dtype=np.float64)
        b = np.asarray(f2, dtype=np.float64)
        out["max_abs_diff"] = float(np.abs(a - b).max())
        out["identical"] = bool(np.array_equal(a, b))
        out["rel_diff"] = float(np.linalg.norm(a - b) / max(np.linalg.norm(a), 1e-30))
    return out


def gap_fields(summary, prefix=""):
    """Fields of a --json summary that speak of idle time between slides or waiting."""
    found = {}
    if isinstance(summary, dict):
        for k, v in summary.items():
            name = f"{prefix}{k}"
            if any(w in k.lower() for w in ("gap", "idle", "wait", "stall", "starv")):
                found[name] = v
            elif isinstance(v, dict):
                found.update(gap_fields(v, f"{name}."))
    return found


def cc1plus():
    p = subprocess.run(["pgrep", "-c", "cc1plus"], capture_output=True, text=True)
    return int(p.stdout.strip() or 0)


def machine():
    model = subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True,
                           capture_output=True, text=True).stdout.strip()
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{model}, {os.cpu_count()} cores, {mem:.0f} GiB, kernel {os.uname().release}"


def run_case(a, name, geometry, slides, record, save):
    work = a.work
    store, f_store, f_slides = (os.path.join(work, n) for n in ("store", "f-store", "f-slides"))
    model = ["--model", a.model] + shlex.split(a.model_args)
    common = ["--threads", str(a.threads)]
    runs = {"a_tile": [], "a_extract": [], "b": []}
    for rep in range(a.repeats):
        order = ["a", "b"] if rep % 2 == 0 else ["b", "a"]
        for which in order:
            for d in (store, f_store, f_slides):
                if os.path.exists(d) and (which == "a") == (d != f_slides):
                    shutil.rmtree(d)
            subprocess.run(["cat"] + slides, stdout=subprocess.DEVNULL, check=True)
            record["max_cc1plus"] = max(record.get("max_cc1plus", 0), cc1plus())
            log = os.path.join(work, f"{name}-{rep}")
            if which == "a":
                t = timed([a.mltool, "tile"] + slides + ["-o", store] + geometry + common +
                          ["--json"], f"{log}-tile")
                e = timed([a.mltool, "extract", store, "-o", f_store] + model + common +
                          ["--json"], f"{log}-extract")
                runs["a_tile"].append(t)
                runs["a_extract"].append(e)
            else:
                runs["b"].append(timed([a.mltool, "extract"] + slides + ["-o", f_slides] +
                                       geometry + model + common + ["--json"], f"{log}-slides"))
            print(f"  {name} repeat {rep} ({which}) done", file=sys.stderr)
    a_walls = [t[0] + e[0] for t, e in zip(runs["a_tile"], runs["a_extract"])]
    best_a = int(np.argmin(a_walls))
    best_b = int(np.argmin([r[0] for r in runs["b"]]))
    tile_sum = runs["a_tile"][best_a][2] or {}
    c = {
        "geometry": shlex.join(geometry), "slides": len(slides),
        "a_walls": a_walls, "b_walls": [r[0] for r in runs["b"]],
        "a_tile_wall": runs["a_tile"][best_a][0], "a_extract_wall": runs["a_extract"][best_a][0],
        "a_tile_rss_kib": max(t[1] for t in runs["a_tile"]),
        "a_extract_rss_kib": max(e[1] for e in runs["a_extract"]),
        "b_wall": runs["b"][best_b][0], "b_rss_kib": max(r[1] for r in runs["b"]),
        "tiles": tile_sum.get("tiles"),
        "passthrough": sum(s.get("passthrough", 0) or 0 for s in tile_sum.get("slides", [])),
        "store_mib": du_mib(store),
        "b_summary": runs["b"][best_b][2], "b_gaps": gap_fields(runs["b"][best_b][2]),
        "compare": compare(f_store, f_slides),
    }
    c["ratio"] = c["b_wall"] / (c["a_tile_wall"] + c["a_extract_wall"])
    # CPU seconds, which the load of other processes changes far less than wall time.
    c["a_cpu"] = [t[3] + e[3] for t, e in zip(runs["a_tile"], runs["a_extract"])]
    c["b_cpu"] = [r[3] for r in runs["b"]]
    c["cpu_ratio"] = min(c["b_cpu"]) / min(c["a_cpu"])
    record["cases"][name] = c
    save()


def du_mib(path):
    total = 0
    for root, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total / 2**20


def table(record):
    lines = [f"Machine: {record['machine']}; {record['load']}; {record['version']}.",
             f"Cohort: {record['cohort']}. Model `{record['model']}`, `--threads "
             f"{record['threads']}`, best of {record['repeats']} (order of (a) and (b) "
             "alternating), every slide read once before each run.", "",
             "| case | geometry | slides | tiles (passed through) | (a) tile s | (a) extract s | (a) total s "
             "| (b) extract SLIDES s | (b) / (a) wall | (b) / (a) CPU s | peak RSS MiB: tile / "
             "extract STORE / extract SLIDES | features (a) vs (b) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, c in record["cases"].items():
        cmp_ = c["compare"]
        if not cmp_["same_keys"]:
            feat = f"keys differ ({cmp_['rows_store']} vs {cmp_['rows_slides']} rows)"
        elif cmp_.get("identical"):
            feat = "identical"
        else:
            feat = f"rel. diff {cmp_['rel_diff']:.1e}"
        total = c["a_tile_wall"] + c["a_extract_wall"]
        lines.append(
            f"| {name} | `{c['geometry']}` | {c['slides']} | {c['tiles']} ({c['passthrough']}) "
            f"| {c['a_tile_wall']:.2f} | {c['a_extract_wall']:.2f} | {total:.2f} "
            f"| {c['b_wall']:.2f} | **{c['ratio']:.2f}** | {c['cpu_ratio']:.2f} "
            f"| {c['a_tile_rss_kib'] / 1024:.0f} / "
            f"{c['a_extract_rss_kib'] / 1024:.0f} / {c['b_rss_kib'] / 1024:.0f} | {feat} |")
    lines.append("")
    for name, c in record["cases"].items():
        if c["b_gaps"]:
            lines.append(f"- {name}: (b)'s --json idle/wait fields: {json.dumps(c['b_gaps'])}")
        lines.append(f"- {name}: every repeat, (a) {', '.join(f'{w:.2f}' for w in c['a_walls'])} s; "
                     f"(b) {', '.join(f'{w:.2f}' for w in c['b_walls'])} s; CPU s (a) "
                     f"{', '.join(f'{w:.1f}' for w in c['a_cpu'])}, (b) "
                     f"{', '.join(f'{w:.1f}' for w in c['b_cpu'])}; tile store "
                     f"{c['store_mib']:.0f} MiB")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mltool", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--slides", nargs="+", required=True)
    ap.add_argument("--case", action="append", help="NAME|GEOMETRY OPTIONS[|GLOB]")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--model", default="builtin:color-texture")
    ap.add_argument("--model-args", default="", help="more extract options (--input-size ...)")
    ap.add_argument("--cohort", default="", help="a line describing the slides, for the table")
    a = ap.parse_args()
    cases = a.case or ["level 1 as is|--mpp 0.5"]
    os.makedirs(a.out, exist_ok=True)
    os.makedirs(a.work, exist_ok=True)
    version = subprocess.run([a.mltool, "--version"], capture_output=True,
                             text=True).stdout.strip().splitlines()
    load0 = os.getloadavg()[0]
    record = {"machine": machine(), "version": version[0] if version else "", "cohort": a.cohort,
              "model": " ".join([a.model, a.model_args]).strip(), "threads": a.threads,
              "repeats": a.repeats, "slides": a.slides, "cases": {},
              "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    path = os.path.join(a.out, "extract-slides.json")

    def save():
        tmp = f"{path}.partial"
        with open(tmp, "w") as f:
            json.dump(record, f, indent=1)
        os.replace(tmp, path)

    for spec in cases:
        name, geometry, pattern = (spec.split("|") + [""])[:3]
        slides = [p for p in a.slides if fnmatch.fnmatch(os.path.basename(p), pattern or "*")]
        if not slides:
            raise SystemExit(f"extract_slides_bench: case {name}: no slide matches {pattern}")
        print(f"case {name}: {geometry} ({len(slides)} slides)", file=sys.stderr)
        run_case(a, name, shlex.split(geometry), slides, record, save)
    record["load"] = (f"load average {load0:.2f} before the runs, {os.getloadavg()[0]:.2f} after; "
                      f"compilers (cc1plus) running at the starts: up to {record['max_cc1plus']}")
    save()
    text = table(record)
    print(text)
    with open(os.path.join(a.out, "extract-slides.md"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
