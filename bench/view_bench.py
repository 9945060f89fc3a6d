#!/usr/bin/env python3
"""`mltool view` side by side with libvips' dzsave (pyvips), in one run: the tables of
docs/benchmarks.md, "mltool view (issue 55)". Two cases:

  - the real slide ../shared/slides/CMU-1-Small-Region.svs (2220 x 2967, 240-px JPEG tiles;
    left out, with a message, where absent):
        mltool view SLIDE -o SITE                   (--tile-size 256 --quality 85)
        mltool view SLIDE -o SITE --tile-size 240   (the scanner's tiles pass through)
        pyvips dzsave(tile_size=256, overlap=0, suffix='.jpeg[Q=85]')
  - a generated SIZE x SIZE generic TIFF (scripts/fixtures/make_slides.py, through
    tile_lazyslide_bench.generated_slide: 256-px JPEG tiles q80, 0.25 µm/px, ~30% tissue):
        mltool view SLIDE -o SITE                   (--passthrough auto)
        mltool view SLIDE -o SITE --passthrough never   (left out above 30000 px: minutes)
        pyvips dzsave, as above

    view_bench.py MLTOOL [--size 20000] [--out DIR] [--repeats 1] [--keep]

Each run is its own process, started warm (the slide read, mltool and pyvips started once
right before it); its wall seconds, user and sys CPU seconds and peak RSS are the child's
own (os.wait4's rusage). DeepZoom tiles and levels are counted on disk (mltool's --json gives
the tiles passed through, and its pyramid_tiles must equal the count); the output's size is
every file the run wrote (mltool: the whole site), against the slide file's. With --repeats
N the wall time is given as the range and the other figures are the fastest run's (peak
memory: the largest). Fails (exit 1) where mltool's pyramid and dzsave's at the same tile
size differ in levels or tiles. Prints the markdown table and writes it to DIR/view.md.

DIR defaults to ${MLTOOL_CACHE:-~/.cache/mltool}/bench-view; the generated slide, the sites
and dzsave's pyramids are made under it and deleted at the end (view.md stays) unless --keep,
with which a later run reuses the slide (--size 100000: 1.7 GB, about 3 min to make).
Exit 77 (skipped) where there is no slide to run: no real slide and --size 0.
"""
import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from tile_lazyslide_bench import CACHE, REAL, generated_slide, log  # noqa: E402

PY = sys.executable  # dzsave's: ctest and bench/run-view.sh run this with the venv's python
NEVER_MAX = 30000  # --passthrough never above this side: many minutes on 2 cores
DZSAVE = ("import sys, pyvips; pyvips.Image.new_from_file(sys.argv[1]).dzsave("
          "sys.argv[2], tile_size=256, overlap=0, suffix='.jpeg[Q=85]')")


def measure(cmd, logs):
    """Runs CMD as its own process: wall seconds, CPU seconds and peak RSS (MiB) from its
    rusage, and its stdout."""
    with open(logs + ".out", "wb") as out, open(logs + ".err", "wb") as err:
        t = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=err)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        tail = open(logs + ".err", errors="replace").read()[-3000:]
        sys.exit(f"view_bench: exit {p.returncode}: {' '.join(cmd)}\n{tail}")
    return {"wall": wall, "user": ru.ru_utime, "sys": ru.ru_stime, "rss": ru.ru_maxrss / 1024,
            "stdout": open(logs + ".out").read()}


def pyramid(files_dir):
    """(levels, tiles) of a DeepZoom NAME_files directory: numbered level folders of .jpeg."""
    levels = [d for d in os.listdir(files_dir) if d.isdigit()]
    tiles = sum(sum(f.endswith(".jpeg") for f in os.listdir(os.path.join(files_dir, d)))
                for d in levels)
    return len(levels), tiles


def tree_bytes(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def warm(slide, mltool):
    """This VM pages out memory idle for ~30 s (bench/run-tile.sh): read the slide and start
    each tool once, untimed, right before a timed run."""
    with open(slide, "rb") as f:
        while f.read(1 << 24):
            pass
    subprocess.run([mltool, "--version"], capture_output=True, check=True)
    subprocess.run([PY, "-c", "import pyvips"], capture_output=True, check=True)


def run_view(mltool, slide, work, args):
    site = os.path.join(work, "site")
    shutil.rmtree(site, ignore_errors=True)
    r = measure([mltool, "view", slide, "-o", site, "--json", *args], site)
    s = json.loads(r.pop("stdout"))["slides"][0]
    r["levels"], r["tiles"] = pyramid(os.path.join(site, s["id"] + "_files"))
    if s["pyramid_tiles"] != r["tiles"]:
        sys.exit(f"view_bench: mltool view {' '.join(args)} says pyramid_tiles "
                 f"{s['pyramid_tiles']}, {r['tiles']} on disk")
    r["passthrough"], r["bytes"] = s["passthrough"], tree_bytes(site)
    return r


def run_dzsave(slide, work):
    out = os.path.join(work, "dz")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    r = measure([PY, "-c", DZSAVE, slide, os.path.join(out, "slide")], out)
    r.pop("stdout")
    r["levels"], r["tiles"] = pyramid(os.path.join(out, "slide_files"))
    r["passthrough"] = None
    r["bytes"] = tree_bytes(os.path.join(out, "slide_files")) + os.path.getsize(
        os.path.join(out, "slide.dzi"))
    return r


def cases(args):
    """[(slide label, path, [(run label, mltool arguments or None for dzsave)])]."""
    out = []
    if os.path.exists(REAL):
        out.append(("CMU-1-Small-Region.svs, real Aperio scan, 2220 × 2967, 240-px JPEG tiles",
                    REAL, [("`view`", []), ("`view --tile-size 240`", ["--tile-size", "240"]),
                           ("`dzsave`", None)]))
    else:
        log(f"view_bench: {REAL} absent: the real slide's rows are left out")
    if args.size:
        runs = [("`view` (passthrough auto)", [])]
        if args.size <= NEVER_MAX:
            runs.append(("`view --passthrough never`", ["--passthrough", "never"]))
        else:
            log(f"view_bench: --passthrough never left out: --size {args.size} > {NEVER_MAX}")
        runs.append(("`dzsave`", None))
        slide = generated_slide(args.out, args.size)
        out.append((f"generated {args.size} × {args.size} generic TIFF, 256-px JPEG tiles q80",
                    slide, runs))
    return out


def run_case(mltool, slide, runs, work, repeats):
    """{run label: [result per repeat]}, the runs alternating within each repeat."""
    results = {label: [] for label, _ in runs}
    for rep in range(repeats):
        for label, view_args in runs:
            log(f"{os.path.basename(slide)}: {label} ({rep + 1}/{repeats}) ...")
            warm(slide, mltool)
            if view_args is None:
                results[label].append(run_dzsave(slide, work))
            else:
                results[label].append(run_view(mltool, slide, work, view_args))
    return results


def best_of(rs):
    b = dict(min(rs, key=lambda r: r["wall"]))
    b["rss"] = max(r["rss"] for r in rs)
    lo, hi = b["wall"], max(r["wall"] for r in rs)
    b["wall_text"] = f"{lo:.2f} s" if len(rs) == 1 else f"{lo:.2f}–{hi:.2f} s"
    return b


def check(slide_label, runs, best):
    """Mismatches between dzsave's pyramid and mltool's at its tile size (256)."""
    dz = best["`dzsave`"]
    bad = []
    for label, view_args in runs:
        if view_args is None or "--tile-size" in view_args:
            continue
        m = best[label]
        if (m["levels"], m["tiles"]) != (dz["levels"], dz["tiles"]):
            bad.append(f"{slide_label}: {label} wrote {m['levels']} levels, {m['tiles']} tiles; "
                       f"dzsave {dz['levels']} levels, {dz['tiles']} tiles")
    return bad


def rows(slide_label, slide, runs, best):
    size = os.path.getsize(slide)
    dz = best["`dzsave`"]
    out = []
    for i, (label, view_args) in enumerate(runs):
        r = best[label]
        tiles = f"{r['tiles']}" if view_args is None else f"{r['tiles']} ({r['passthrough']})"
        ratio_wall = ratio_cpu = ""
        if view_args is not None:
            ratio_wall = f"{r['wall'] / dz['wall']:.2f}"
            ratio_cpu = f"{(r['user'] + r['sys']) / (dz['user'] + dz['sys']):.2f}"
        name = f"{slide_label} ({size / 1e6:.2f} MB)" if i == 0 else "same"
        out.append(f"| {name} | {label} | {r['wall_text']} | {r['user']:.2f} + {r['sys']:.2f} s "
                   f"| {r['rss']:.0f} MiB | {tiles} | {r['bytes'] / 1e6:.2f} MB "
                   f"({r['bytes'] / size:.2f}×) | {ratio_wall} | {ratio_cpu} |")
    return out


def header(mltool, load_before, repeats):
    cpu = subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True,
                         capture_output=True, text=True).stdout.strip()
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    version = subprocess.run([mltool, "--version"], capture_output=True, text=True).stdout
    vips = subprocess.run([PY, "-c", "import pyvips; print(pyvips.__version__, "
                           "'.'.join(str(pyvips.version(i)) for i in range(3)))"],
                          capture_output=True, text=True, check=True).stdout.split()
    load_after = open("/proc/loadavg").read().split()[0]
    return (f"{datetime.date.today()}, {cpu}, {os.cpu_count()} cores, {mem:.0f} GiB; load "
            f"average {load_before} before the runs, {load_after} after. "
            f"{' '.join(version.split()[:2])}; libvips {vips[1]} (pyvips {vips[0]}). "
            f"Each run its own process, started warm; "
            + ("one run each." if repeats == 1 else f"{repeats} runs each, wall as the range, "
               "the rest the fastest run's (peak memory: the largest)."))


def table(mltool, load_before, args, done):
    lines = [header(mltool, load_before, args.repeats), "",
             "| slide | run | wall | CPU (user + sys) | peak memory "
             "| DeepZoom tiles (own JPEG passed) | output (× the slide) "
             "| mltool / dzsave wall | mltool / dzsave CPU |",
             "|---|---|---|---|---|---|---|---|---|"]
    for slide_label, slide, runs, best in done:
        lines += rows(slide_label, slide, runs, best)
    if args.size > NEVER_MAX:
        lines += ["", f"`--passthrough never` not run on the {args.size}² slide "
                      f"(above {NEVER_MAX} px: many minutes)."]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mltool")
    ap.add_argument("--size", type=int, default=20000, help="the generated slide's side (0: none)")
    ap.add_argument("--out", default=os.path.join(CACHE, "bench-view"))
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help="keep the slide, sites and pyramids")
    args = ap.parse_args()
    mltool = os.path.abspath(args.mltool)
    args.out = os.path.abspath(args.out)
    work = os.path.join(args.out, "work")
    os.makedirs(work, exist_ok=True)
    load_before = open("/proc/loadavg").read().split()[0]
    if subprocess.run([PY, "-c", "import pyvips"], capture_output=True).returncode:
        sys.exit(f"view_bench: {PY} has no pyvips: run this with the venv's python (.venv)")
    todo = cases(args)
    if not todo:
        log("view_bench: no slide to run: skipped")
        sys.exit(77)
    done, bad = [], []
    for slide_label, slide, runs in todo:
        best = {k: best_of(v) for k, v in run_case(mltool, slide, runs, work, args.repeats).items()}
        done.append((slide_label, slide, runs, best))
        bad += check(slide_label, runs, best)
    text = table(mltool, load_before, args, done)
    print(text)
    with open(os.path.join(args.out, "view.md"), "w") as f:
        f.write(text)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(os.path.join(args.out, "slides"), ignore_errors=True)
    if bad:
        sys.exit("view_bench: mltool's and dzsave's pyramids differ:\n  " + "\n  ".join(bad))


if __name__ == "__main__":
    main()
