#!/usr/bin/env python3
"""mltool info, and the µm/px estimated from the tissue in tile (--mpp-from-content,
--check-mpp, --qc), against references that are not mltool's:

- the real Aperio slide in ../shared/slides read with openslide-python (levels, associated
  images, objective power, µm/px);
- that slide resampled with Pillow to known µm/px and written without any µm/px
  (scripts/fixtures/mpp_slides.py real): the estimate must be within ±15% of the truth
  (TOLERANCE, the issue's goal) and its interval must cover it;
- generated H&E-like slides of the same tissue drawn at several µm/px (mpp_slides.py
  generated): the same.

Checks that need the real slide print that they are skipped where it is absent.

    info_test.py MLTOOL [CHECK...]
"""
import json
import os
import subprocess
import sys

import numpy as np
import tifffile

from cli_common import expect, run, run_checks, tmp
from store_refs import read_tile_store

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "..", "scripts", "fixtures", "mpp_slides.py")
REAL_SVS = os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared", "slides",
                                         "CMU-1-Small-Region.svs"))
REAL_MPP = 0.499
SCALES = [0.25, 0.5, 1.0, 2.0]
# The accuracy goal, ±15%: docs/info.md measures the real slide at 0.25-2 µm/px within
# +13.9% (0.25 µm/px; +10.5% at 0.5, +9.0% for its SVS at 0.499).
TOLERANCE = 0.15

mltool = os.path.abspath(sys.argv[1])
only = set(sys.argv[2:])
have_svs = os.path.isfile(REAL_SVS)


def fixture(*args):
    p = subprocess.run([sys.executable, FIXTURE, *args], capture_output=True, text=True)
    expect(p.returncode == 0, f"mpp_slides.py {args[0]}: exit {p.returncode}: {p.stderr}")
    return json.loads(p.stdout)["slides"]


def make_fixtures():
    fixture("generated", tmp("gen"), *map(str, SCALES[:3]))
    # Stroma without a nucleus: pink with noise.
    rng = np.random.default_rng(3)
    pink = np.clip(np.array([235, 170, 200]) + rng.normal(0, 4, (1024, 1024, 3)), 0, 255)
    tifffile.imwrite(tmp("pink.tif"), pink.astype(np.uint8), tile=(256, 256),
                     compression="zlib", photometric="rgb")
    with open(tmp("notes.txt"), "w") as f:
        f.write("not a slide\n")
    # A tiled TIFF with the 72-dpi placeholder, which OpenSlide 4 turns into 352.8 µm/px.
    tifffile.imwrite(tmp("dpi72.tif"), tifffile.imread(tmp("gen", "gen-0.5.tif")),
                     tile=(256, 256), compression="zlib", photometric="rgb",
                     resolution=(72, 72), resolutionunit="INCH")
    if not have_svs:
        return f"real slides skipped: {REAL_SVS} is absent (see ../shared/slides/README.md)"
    fixture("real", REAL_SVS, tmp("real"), *map(str, SCALES))
    fixture("real-jpeg", REAL_SVS, tmp("real"), "0.5", "1", "2")
    # The SVS with a wrong µm/px in its metadata: half the truth.
    with open(REAL_SVS, "rb") as f:
        data = f.read()
    expect(data.count(b"MPP = 0.4990") >= 1, "the SVS's MPP key is not where expected")
    with open(tmp("wrong.svs"), "wb") as f:
        f.write(data.replace(b"MPP = 0.4990", b"MPP = 0.2495"))
    return "generated and real slides made"


def skipped():
    if not have_svs:
        print(f"  skipped: {REAL_SVS} is absent", flush=True)
    return not have_svs


def info(*paths, stdin=None):
    """mltool info PATHS --json: (exit code, the objects by path, stderr)."""
    code, out, err = run([mltool, "info", *paths, "--json"], stdin=stdin)
    docs = [json.loads(line) for line in out.splitlines() if line.strip()]
    return code, {d["path"]: d for d in docs}, err


def real(mpp):
    return tmp("real", f"real-{mpp:g}.tif")


def check_svs():
    """The scanner's slide: what openslide-python reads, and the estimate agrees with it."""
    if skipped():
        return
    import openslide
    code, docs, err = info(REAL_SVS)
    expect(code == 0, f"exit {code}: {err}")
    d = docs[REAL_SVS]
    with openslide.OpenSlide(REAL_SVS) as s:
        levels = [{"width": w, "height": h, "downsample": ds}
                  for (w, h), ds in zip(s.level_dimensions, s.level_downsamples)]
        associated = {name: image.size for name, image in s.associated_images.items()}
        power = float(s.properties["openslide.objective-power"])
        mpp = float(s.properties["openslide.mpp-x"])
    expect(d["vendor"] == "aperio" and "SVS" in d["format"], f"{d['vendor']} {d['format']}")
    expect(d["levels"] == levels, f"levels {d['levels']}, openslide-python: {levels}")
    got = {a["name"]: (a["width"], a["height"]) for a in d["associated_images"]}
    expect(got == associated, f"associated {got}, openslide-python: {associated}")
    expect(d["objective_power"] == power, f"objective {d['objective_power']}, expected {power}")
    m = d["metadata_mpp"]
    expect(m["mpp"] == mpp and m["problem"] == "" and "openslide" in m["source"], f"{m}")
    e = d["estimated_mpp"]
    expect(abs(e["mpp"] / mpp - 1) <= TOLERANCE and e["low"] <= mpp <= e["high"],
           f"estimate {e}, truth {mpp}")
    expect(d["verdict"] == "agrees", f"verdict {d['verdict']}")
    expect(0.2 < d["tissue_fraction"] < 0.5, f"tissue {d['tissue_fraction']}")


def check_real_scales():
    """The real slide resampled to 0.25-2 µm/px, µm/px stripped: within TOLERANCE, covered,
    not uncertain."""
    if skipped():
        return
    paths = [real(m) for m in SCALES]
    code, docs, err = info(*paths)
    expect(code == 0, f"exit {code}: {err}")
    for mpp, path in zip(SCALES, paths):
        d = docs[path]
        expect(d["metadata_mpp"]["mpp"] is None and d["metadata_mpp"]["problem"] != "",
               f"{path}: metadata {d['metadata_mpp']}")
        expect(d["verdict"] == "no metadata", f"{path}: verdict {d['verdict']}")
        e = d["estimated_mpp"]
        expect(abs(e["mpp"] / mpp - 1) <= TOLERANCE and not e["uncertain"],
               f"{path}: estimate {e}, truth {mpp}")
        expect(e["low"] <= mpp <= e["high"], f"{path}: interval {e['low']}-{e['high']}")


def check_placeholder_dpi():
    """TIFFs at 72 dpi, tiled (OpenSlide's generic TIFF, which derives 352.8 µm/px from it)
    and flat: the metadata is named a placeholder, the tissue still measured."""
    code, docs, err = info(tmp("dpi72.tif"))
    d = docs[tmp("dpi72.tif")]
    expect(code == 0 and d["vendor"] == "generic-tiff", f"exit {code}: {err} {d}")
    expect(d["metadata_mpp"]["problem"] == "placeholder 72 dpi" and d["verdict"] == "no metadata",
           f"{d['metadata_mpp']} {d['verdict']}")
    if skipped():
        return
    path = tmp("real", "real-0.5-72dpi.tif")
    code, docs, err = info(path)
    d = docs[path]
    expect(code == 0 and d["vendor"] == "flat-tiff", f"exit {code}: {err} {d}")
    expect(d["metadata_mpp"]["problem"] == "placeholder 72 dpi", f"{d['metadata_mpp']}")
    expect(abs(d["estimated_mpp"]["mpp"] / 0.5 - 1) <= TOLERANCE, f"{d['estimated_mpp']}")


def check_real_jpeg():
    """The real slide as 4:2:0 JPEG tiles (colour at half resolution, as most scanners store
    it): found so; within ±15%, covered and not uncertain at 0.5, 1 and 2 µm/px."""
    if skipped():
        return
    paths = {m: tmp("real", f"realjpeg-{m:g}.tif") for m in (0.5, 1.0, 2.0)}
    code, docs, err = info(*paths.values())
    expect(code == 0, f"exit {code}: {err}")
    for mpp, path in paths.items():
        e = docs[path]["estimated_mpp"]
        expect(e["chroma_subsampled"], f"{path}: 4:2:0 not found: {e}")
        expect(e["low"] <= mpp <= e["high"], f"{path}: interval {e['low']}-{e['high']}, truth {mpp}")
        expect(abs(e["mpp"] / mpp - 1) <= 0.15 and not e["uncertain"], f"{path}: {e}")
    code, docs, err = info(real(0.5))
    expect(not docs[real(0.5)]["estimated_mpp"]["chroma_subsampled"], "lossless taken as 4:2:0")


def check_generated_scale():
    """Generated tissue at 0.25-1 µm/px: within ±15%, covered, not uncertain (the whole-nucleus
    ruler is the literature's lymphocyte, not fitted to these nuclei)."""
    paths = [tmp("gen", f"gen-{m:g}.tif") for m in SCALES[:3]]
    code, docs, err = info(*paths)
    expect(code == 0, f"exit {code}: {err}")
    for path, mpp in zip(paths, SCALES):
        e = docs[path]["estimated_mpp"]
        expect(abs(e["mpp"] / mpp - 1) <= 0.15 and e["low"] <= mpp <= e["high"]
               and not e["uncertain"], f"{path}: {e}, truth {mpp}")


def check_no_nuclei():
    """Stroma without nuclei: no estimate, and it says why."""
    code, docs, err = info(tmp("pink.tif"))
    d = docs[tmp("pink.tif")]
    expect(code == 0, f"exit {code}: {err}")
    e = d["estimated_mpp"]
    expect(e["mpp"] is None or e["uncertain"], f"estimate {e}")
    expect(e["why"] != "", f"no reason given: {e}")


def check_bad_input():
    """An unreadable slide is reported with its error and the others go on: exit 4; every
    slide bad: exit 2. Text output: one block a slide."""
    good = tmp("gen", "gen-0.5.tif")
    missing = tmp("missing.svs")
    code, docs, err = info(missing, good, tmp("notes.txt"))
    expect(code == 4, f"exit {code}, expected 4: {err}")
    expect(docs[missing]["status"] == "failed" and missing in docs[missing]["error"],
           f"{docs[missing]}")
    expect(docs[good]["status"] == "ok", f"{docs[good]}")
    expect(docs[tmp("notes.txt")]["status"] == "failed", f"{docs[tmp('notes.txt')]}")
    code, _, _ = info(missing)
    expect(code == 2, f"every slide bad: exit {code}, expected 2")
    code, out, err = run([mltool, "info", good, missing])
    blocks = out.strip().split("\n\n")
    expect(code == 4 and len(blocks) == 2, f"exit {code}, {len(blocks)} blocks: {out}")
    expect("estimated µm/px:" in blocks[0] and "verdict:" in blocks[0], blocks[0])
    expect("error:" in blocks[1], blocks[1])


def check_stdin():
    """'-' reads the paths from stdin."""
    good = tmp("gen", "gen-1.tif")
    code, docs, err = info("-", stdin=f"# a list\n{good}\n\n")
    expect(code == 0 and list(docs) == [good], f"exit {code}: {docs.keys()} {err}")


def tile(*args):
    code, out, err = run([mltool, "tile", *args, "--json"])
    return code, (json.loads(out) if out.strip() else None), err


def check_tile_from_content():
    """--mpp-from-content: a slide without µm/px is read at the estimate (recorded with its
    interval); without it the slide fails naming the option; --qc shows both values."""
    path = tmp("gen", "gen-0.5.tif")
    code, _, err = tile(path, "-o", tmp("st_none"), "--mpp", "1", "--tile-size", "128")
    expect(code == 2 and "--mpp-from-content" in err, f"exit {code}: {err}")
    st, qc = tmp("st_content"), tmp("qc")
    code, summary, err = tile(path, "-o", st, "--mpp", "1", "--tile-size", "128",
                              "--mpp-from-content", "--qc", qc)
    expect(code == 0, f"exit {code}: {err}")
    meta, tiles = read_tile_store(st)
    rec = meta["slides/gen-0.5"]
    e = rec["mpp_estimate"]
    expect(rec["mpp_source"] == "content" and rec["mpp"] == e["mpp"], f"{rec}")
    expect(e["low"] < e["mpp"] < e["high"] and not e["uncertain"], f"{e}")
    expect(summary["slides"][0]["mpp_source"] == "content", f"{summary}")
    expect(len(tiles) > 0, "no tiles")
    # The tile grid follows the estimate: level-0 pixels per tile = 128 * 1 / estimate.
    expect(abs(rec["size_level0"] - 128 / e["mpp"]) < 1e-6, f"{rec['size_level0']}")
    with open(os.path.join(qc, "index.html")) as f:
        html = f.read()
    # The metadata as the sheet shows it: "none" when missing, else why it is unusable.
    _, docs, _ = info(path)
    problem = docs[path]["metadata_mpp"]["problem"]
    metadata = "none" if problem == "missing" else f"unusable: {problem}"
    shown = f'<div class="mpp">metadata {metadata}; tissue {round(e["mpp"], 3):g} µm/px ('
    expect(shown in html, f"index.html does not show {shown!r}")
    expect(os.path.isfile(os.path.join(qc, "gen-0.5.png")), "no QC picture")
    expect("seconds" not in e, f"a timing in the store's record: {e}")
    # An estimate made only for the QC pictures stays out of the store: the record is the same
    # with --qc as without it.
    recs = []
    for name, extra in (("st_qc", ["--qc", tmp("qc2")]), ("st_noqc", [])):
        code, _, err = tile(path, "-o", tmp(name), "--mpp", "1", "--tile-size", "128", "--slide-mpp", "0.5", *extra)
        expect(code == 0, f"exit {code}: {err}")
        recs.append(read_tile_store(tmp(name))[0]["slides/gen-0.5"])
    expect("mpp_estimate" not in recs[0] and recs[0] == recs[1], f"records differ with --qc: {recs}")


def check_check_mpp():
    """Metadata that disagrees with the tissue (an SVS claiming 0.2495 µm/px): refused with
    --check-mpp refuse (nothing written, both values and the overriding options named),
    tiled with a warning under warn, tiled silently by default."""
    if skipped():
        return
    wrong = tmp("wrong.svs")
    code, docs, _ = info(wrong)
    expect(docs[wrong]["verdict"] == "disagrees", f"info: {docs[wrong]['verdict']}")
    st = tmp("st_refuse")
    code, _, err = tile(wrong, "-o", st, "--check-mpp", "refuse")
    expect(code == 2 and f"{wrong}: its metadata says 0.2495" in err and "--slide-mpp" in err
           and "--check-mpp" in err,
           f"refuse: exit {code}: {err}")
    if os.path.isdir(st):
        meta, tiles = read_tile_store(st)
        expect(not tiles and "slides/wrong" not in meta, "a refused slide was written")
    code, summary, err = tile(wrong, "-o", tmp("st_warn"), "--check-mpp", "warn")
    expect(code == 0 and "0.2495" in err and "tissue" in err, f"warn: exit {code}: {err}")
    code, summary, err = tile(wrong, "-o", tmp("st_off"))
    expect(code == 0 and "tissue says" not in err, f"off: exit {code}: {err}")
    code, summary, err = tile(REAL_SVS, "-o", tmp("st_right"), "--check-mpp", "refuse")
    expect(code == 0, f"a right µm/px refused: exit {code}: {err}")


CHECKS = [check_svs, check_real_scales, check_placeholder_dpi, check_real_jpeg,
          check_generated_scale,
          check_no_nuclei, check_bad_input, check_stdin, check_tile_from_content, check_check_mpp]


def main():
    run_checks("mltool info", CHECKS, only, make_fixtures, timed=False)


if __name__ == "__main__":
    main()
