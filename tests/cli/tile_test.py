"""mltool tile, end to end against independent references: slides written by libvips
(scripts/fixtures/make_slides.py), read back with openslide-python (openslide-bin's
OpenSlide 4, not the Debian 3.4.1 that mltool links), the store read with python-lmdb,
tiles decoded with Pillow, the grid recomputed from the formulas of the spec.

    tile_test.py MLTOOL [TEST...]     # TEST: names of the check_* functions, without check_

Each check prints "ok: NAME (seconds)"; all run, and the script exits 1 if any failed.
"""
import io
import json
import math
import os
import signal
import subprocess
import sys
import time

import lmdb
import numpy as np
import openslide
from PIL import Image

from cli_common import Failure, expect, run, run_checks, run_json, run_with_sigterms, tmp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "fixtures"))
import make_slides  # noqa: E402  (imports pyvips only in its child processes)
import marked_slides  # noqa: E402  (numpy only here; pyvips in its own process)

mltool = os.path.abspath(sys.argv[1])
only = set(sys.argv[2:])
TS = 256


# ---------------------------------------------------------------- references

def rnd(v):
    """The spec's round(): half away from zero (std::round), not Python's half to even."""
    return math.floor(v + 0.5) if v >= 0 else -math.floor(-v + 0.5)


def plan(slide, tile_size=TS, mpp=None, level=None):
    """(t, level, level_downsample, r) from the spec for an openslide.OpenSlide."""
    ds = slide.level_downsamples
    if level is not None:
        return ds[level], level, ds[level], tile_size
    slide_mpp = float(slide.properties["openslide.mpp-x"])
    t = (0.5 if mpp is None else mpp) / slide_mpp
    lvl = max(i for i, d in enumerate(ds) if d <= t * (1 + 1e-3))
    return t, lvl, ds[lvl], rnd(tile_size * t / ds[lvl])


def grid(width, height, t, r, lds, tile_size=TS, overlap=0):
    """[(row, col, x, y)] of every tile of the spec's grid, in key order."""
    stride = (tile_size - overlap) * t
    extent = max(tile_size * t, r * lds)
    cols = 0
    while rnd(cols * stride) + extent <= width:
        cols += 1
    rows = 0
    while rnd(rows * stride) + extent <= height:
        rows += 1
    return [(row, col, rnd(col * stride), rnd(row * stride))
            for row in range(rows) for col in range(cols)], cols, rows, stride


def key(slide_id, row, col):
    return f"{slide_id}/{row:06d}_{col:06d}"


def inside(box, regions):
    """Whether the level-0 box (x0, y0, x1, y1) lies inside one of the regions."""
    return any(box[0] >= a and box[1] >= b and box[2] <= c and box[3] <= d
               for a, b, c, d in regions)


def read_ref(slide, x, y, level, size):
    """openslide-python's read_region composited on white, as an RGB uint8 array."""
    rgba = np.asarray(slide.read_region((x, y), level, (size, size))).astype(np.float64)
    a = rgba[..., 3:4] / 255.0
    return np.rint(rgba[..., :3] * a + 255.0 * (1.0 - a)).astype(np.uint8)


def lanczos(rgb, size):
    return np.asarray(Image.fromarray(rgb).resize((size, size), Image.LANCZOS))


def psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def decode(data, what, size=TS, fmt=None):
    img = Image.open(io.BytesIO(data))
    if fmt is not None:
        expect(img.format == fmt, f"{what}: encoded as {img.format}, expected {fmt}")
    expect(img.mode == "RGB", f"{what}: mode {img.mode}, expected RGB")
    expect(img.size == (size, size), f"{what}: size {img.size}, expected {size}x{size}")
    return np.asarray(img)


# ---------------------------------------------------------------- the store and the CLI

class Store:
    def __init__(self, path):
        expect(os.path.isdir(path), f"{path}: no store directory")
        env = lmdb.open(path, readonly=True, lock=False, max_dbs=8)
        try:
            with env.begin() as txn:
                self.tiles = dict(txn.cursor(db=env.open_db(b"tiles", txn=txn, create=False)))
                raw = dict(txn.cursor(db=env.open_db(b"meta", txn=txn, create=False)))
        finally:
            env.close()
        self.tiles = {k.decode("ascii"): bytes(v) for k, v in self.tiles.items()}
        self.meta = {k.decode(): json.loads(bytes(v).decode("utf-8")) for k, v in raw.items()}

    def keys(self, slide_id):
        return sorted(k for k in self.tiles if k.startswith(slide_id + "/"))

    def done(self):
        return {k[5:] for k in self.meta if k.startswith("done/")}

    def without_seconds(self):
        """meta with the run-dependent `seconds` of done/ markers removed."""
        out = {}
        for k, v in self.meta.items():
            if k.startswith("done/"):
                v = {kk: vv for kk, vv in v.items() if kk != "seconds"}
            out[k] = v
        return out


def tile(*args, stdin=None):
    """Runs mltool tile ARGS --json; returns (code, summary or None, stdout, stderr)."""
    code, out, err = run([mltool, "tile", *args, "--json"], stdin=stdin)
    summary = None
    if out.strip():
        try:
            summary = json.loads(out)
        except ValueError:
            raise Failure(f"stdout is not one JSON document: {out[:500]!r}")
        if code not in (0, 4):  # a failed run's summary: the error and the exit code
            expect(summary == {"command": "tile", "status": "stopped" if code == 75 else "failed",
                               "error": summary.get("error"), "exit_code": code}
                   and summary["error"] in err, f"the --json summary of a failed run: {summary}")
            return code, None, out, err
        for e in summary["slides"]:
            # A failed slide may have no grid or tissue to report (a missing file).
            fields = (("path", "id", "status", "error") if e.get("status") == "failed" else
                      ("path", "id", "status", "tiles", "grid_tiles", "tissue_fraction",
                       "seconds"))
            missing = [f for f in fields if f not in e]
            expect(not missing, f"summary entry {e.get('id')} lacks {missing}")
            expect(e["status"] in ("tiled", "skipped", "empty", "failed"), f"status {e}")
            expect((e["status"] == "failed") == ("error" in e),
                   f"'error' exactly on failed entries: {e}")
        for f in ("command", "store", "slides", "tiles", "failed", "empty"):
            expect(f in summary, f"summary lacks {f}")
    return code, summary, out, err


def by_id(summary):
    return {s["id"]: s for s in summary["slides"]}


def slide_id(path):
    return os.path.splitext(os.path.basename(path))[0]


# ---------------------------------------------------------------- fixtures

# Level-0 pixels; 0.25 µm/px, so at the default --mpp 0.5 one tile covers 512×512.
A_SIZE = (4096, 3072)
A_REGIONS = [(512, 512, 2048, 2048), (2560, 1024, 3584, 2560)]  # 3×3 + 2×3 tiles at 512
C_SIZE = (2048, 1536)
C_REGIONS = [(0, 0, 2048, 1280), (300, 1280, 1700, 1536)]
SMALL = (1024, 768)


def small_regions(i):
    return [(128 * (i % 3), 128, 128 * (i % 3) + 640, 640)]


# Pyramids end at levels of at least one TIFF tile (256) in both directions, as scanners'
# do; libvips' own pyramids (down to one partial tile, e.g. 256×192) are in check_small_levels.
SCANNER = {"min_level": 256}


def make_fixtures():
    calls = [
        ["generic_tiff", [tmp("A.tif"), *A_SIZE, 0.25, A_REGIONS], SCANNER],
        ["generic_tiff", [tmp("C.tif"), *C_SIZE, 0.25, C_REGIONS], SCANNER],
        ["generic_tiff", [tmp("nompp", "N.tif"), *SMALL, None, [(0, 0, 768, 768)]], SCANNER],
        # resolution tags of 72 dpi read as µm/px: 352.78, no scanner's
        ["generic_tiff", [tmp("nompp", "P.tif"), *SMALL, 25400 / 72, [(0, 0, 768, 768)]],
         SCANNER],
        ["blank_tiff", [tmp("blank", "W.tif"), *SMALL, 0.25], SCANNER],
        ["aperio_svs", [tmp("svs", "AP.svs"), 2048, 1536, [(256, 256, 1536, 1280)]], SCANNER],
        ["not_a_slide", [tmp("bad", "text.svs")]],
        ["generic_tiff", [tmp("shard", "K.tif"), *SMALL, 0.25, [(0, 0, 768, 768)]], SCANNER],
        ["generic_tiff", [tmp("bad", "K.tif"), *SMALL, 0.25, [(256, 0, 1024, 768)]], SCANNER],
        # libvips' full pyramids: coarsest levels 256×192 (TA) and 256×192 (TK).
        ["generic_tiff", [tmp("small", "TA.tif"), *A_SIZE, 0.25, A_REGIONS]],
        ["generic_tiff", [tmp("small", "TK.tif"), *SMALL, 0.25, [(0, 0, 768, 768)]]],
    ]
    for i in range(5):
        calls.append(["generic_tiff", [tmp("shard", f"S{i}.tif"), *SMALL, 0.25,
                                       small_regions(i)], SCANNER])
    for d in ("nompp", "blank", "svs", "bad", "shard", "resume", "small"):
        os.makedirs(tmp(d), exist_ok=True)
    make_slides.generate(calls)
    make_slides.generate([
        ["truncated_copy", [tmp("A.tif"), tmp("bad", "trunc.tif"),
                            os.path.getsize(tmp("A.tif")) // 2]],
        # Level-0 tiles of the middle rows, through the tissue, undecodable.
        ["corrupt_tiles", [tmp("A.tif"), tmp("bad", "corrupt.tif")]],
    ])
    # The fixtures are what they claim to be, for OpenSlide 4 ...
    s = openslide.OpenSlide(tmp("A.tif"))
    expect(s.properties.get("openslide.vendor") == "generic-tiff", "A.tif is a generic TIFF")
    expect(float(s.properties["openslide.mpp-x"]) == 0.25, "OpenSlide 4 reads 0.25 µm/px")
    expect(s.level_dimensions == ((4096, 3072), (2048, 1536), (1024, 768), (512, 384)),
           f"A.tif levels {s.level_dimensions}")
    expect(openslide.OpenSlide(tmp("small", "TA.tif")).level_dimensions[-1] == (256, 192),
           "TA.tif's pyramid goes down to 256x192")
    expect("openslide.mpp-x" not in openslide.OpenSlide(tmp("nompp", "N.tif")).properties,
           "N.tif has no µm/px for OpenSlide 4")
    ap = openslide.OpenSlide(tmp("svs", "AP.svs")).properties
    expect(ap.get("openslide.vendor") == "aperio" and ap.get("openslide.mpp-x") == "0.25",
           f"AP.svs is Aperio at 0.25 µm/px: {ap.get('openslide.vendor')} {ap.get('openslide.mpp-x')}")
    # ... and for the system's OpenSlide (Debian 3.4.1, what mltool links), if installed:
    # no openslide.mpp-x for generic TIFF, only the resolution tags the spec falls back on.
    c = make_slides.c_openslide_properties(tmp("A.tif"))
    if c is not None:
        p = c["properties"]
        expect(p.get("tiff.ResolutionUnit") == "centimeter"
               and abs(float(p["tiff.XResolution"]) - 40000) < 1e-6,
               f"system OpenSlide {c['version']} sees 40000 px/cm: {p.get('tiff.XResolution')}")
        print(f"  (system OpenSlide {c['version']}: openslide.mpp-x = "
              f"{p.get('openslide.mpp-x')}, tiff.XResolution = {p['tiff.XResolution']} "
              f"{p['tiff.ResolutionUnit']})")


def assert_pixels(store, slide_path, sid, level, r, fmt, min_psnr=None, resize_to=None):
    """Every tile of `sid` equals read_region((x, y), level, (r, r)) (resized with Pillow's
    Lanczos to the tile size if resize_to): exactly, or by PSNR ≥ min_psnr. Returns the
    lowest PSNR seen."""
    slide = openslide.OpenSlide(slide_path)
    tm = store.meta[f"tiles/{sid}"]
    worst, total_se, n = float("inf"), 0.0, 0
    for i, k in enumerate(store.keys(sid)):
        got = decode(store.tiles[k], k, fmt=fmt)
        ref = read_ref(slide, tm["x"][i], tm["y"][i], level, r)
        if resize_to:
            ref = lanczos(ref, resize_to)
        if min_psnr is None:
            if not np.array_equal(got, ref):
                d = np.abs(got.astype(int) - ref.astype(int))
                raise Failure(f"{k} (x={tm['x'][i]}, y={tm['y'][i]}, level {level}, read {r}):"
                              f" not equal to read_region: {int((d > 0).sum())} values differ,"
                              f" max by {int(d.max())}, PSNR {psnr(got, ref):.1f} dB")
        else:
            p = psnr(got, ref)
            worst = min(worst, p)
            total_se += np.sum((got.astype(np.float64) - ref) ** 2)
            n += got.size
            expect(p >= min_psnr, f"{k}: PSNR {p:.2f} dB < {min_psnr} against read_region")
    overall = 10 * math.log10(255.0 ** 2 * n / total_se) if n and total_se else float("inf")
    return worst, overall


# ---------------------------------------------------------------- the checks

def check_grid():
    """a. keys = the spec's grid over tissue; tiles/<id>, slides/<id>, store, done/, JSON."""
    store = tmp("st_a")
    code, summary, out, err = tile(tmp("A.tif"), "-o", store)
    expect(code == 0, f"tile A.tif exits 0 (got {code}): {err}")
    s = by_id(summary)["A"]
    expect(summary["command"] == "tile" and summary["failed"] == 0 and summary["empty"] == 0,
           f"summary: {out}")
    expect(s["status"] == "tiled" and os.path.abspath(s["path"]) == tmp("A.tif"),
           f"summary entry: {s}")

    slide = openslide.OpenSlide(tmp("A.tif"))
    t, lvl, lds, r = plan(slide)  # default --mpp 0.5
    expect((t, lvl, r) == (2.0, 1, 256), "reference plan")
    cells, cols, rows, stride = grid(*A_SIZE, t, r, lds)
    size0 = TS * t
    want = [(row, col, x, y) for row, col, x, y in cells
            if inside((x, y, x + size0, y + size0), A_REGIONS)]
    expect(len(want) == 15, "reference: 15 tissue tiles")
    st = Store(store)
    keys = st.keys("A")
    expect(keys == [key("A", row, col) for row, col, _, _ in want],
           f"tile keys: got {len(keys)} {keys[:4]}..., expected {len(want)} "
           f"{[key('A', r_, c_) for r_, c_, _, _ in want][:4]}...")
    expect(s["tiles"] == len(want) and s["grid_tiles"] == cols * rows == 48,
           f"summary tiles {s['tiles']} / grid_tiles {s['grid_tiles']}, expected "
           f"{len(want)} / {cols * rows}")
    expect(summary["tiles"] == len(want), "summary total")

    tm = st.meta["tiles/A"]
    expect(tm["row"] == [w[0] for w in want] and tm["col"] == [w[1] for w in want],
           "tiles/A row, col in key order")
    expect(tm["x"] == [w[2] for w in want] and tm["y"] == [w[3] for w in want],
           f"tiles/A x, y = round(col·stride), round(row·stride): {tm['x'][:5]} {tm['y'][:5]}")
    expect(len(tm["tissue"]) == len(want), "one tissue fraction per tile")
    for (row, col, x, y), f in zip(want, tm["tissue"]):
        interior = inside((x - size0, y - size0, x + 2 * size0, y + 2 * size0), A_REGIONS)
        expect(f >= (0.99 if interior else 0.75) and f <= 1.0 + 1e-9,
               f"tissue fraction of {key('A', row, col)} is {f}, expected ≈1")
    done = st.meta["done/A"]
    expect(done["tiles"] == len(want), f"done/A: {done}")
    expect(abs(s["tissue_fraction"] - done["tissue_fraction"]) < 1e-9, "tissue_fraction agrees")
    area = sum((c - a) * (d - b) for a, b, c, d in A_REGIONS) / (A_SIZE[0] * A_SIZE[1])
    expect(abs(done["tissue_fraction"] - area) < 0.05,
           f"done/A tissue_fraction {done['tissue_fraction']:.3f}, regions cover {area:.3f}")

    sm = st.meta["slides/A"]
    expect(sm["id"] == "A" and sm["path"] == tmp("A.tif") and sm["vendor"] == "generic-tiff",
           f"slides/A id/path/vendor: {sm['id']} {sm['path']} {sm['vendor']}")
    expect((sm["width"], sm["height"]) == A_SIZE, "slides/A size")
    expect([(l["width"], l["height"]) for l in sm["levels"]] == list(slide.level_dimensions)
           and [l["downsample"] for l in sm["levels"]] == list(slide.level_downsamples),
           f"slides/A levels {sm['levels']} vs OpenSlide 4 {slide.level_dimensions}")
    expect(sm["mpp"] == 0.25, f"slides/A mpp {sm['mpp']} (from tiff.XResolution 40000/cm)")
    expect(sm["level"] == 1 and sm["level_downsample"] == 2.0 and sm["target_downsample"] == 2.0
           and sm["read_size"] == 256 and sm["tile_size"] == 256 and sm["overlap"] == 0,
           f"slides/A plan: {sm}")
    expect(sm["stride_level0"] == stride and sm["size_level0"] == size0, "slides/A stride/size")
    expect(sm["grid"] == {"cols": cols, "rows": rows}, f"slides/A grid {sm['grid']}")
    th = sm["thumbnail"]
    expect(th["width"] >= 1 and th["height"] >= 1 and th["downsample"] >= 1,
           f"slides/A thumbnail {th}")
    expect(isinstance(sm["tissue_threshold"], (int, float)) and sm["tissue_threshold"] >= 20,
           f"tissue_threshold {sm['tissue_threshold']} (floor 20)")
    want_store = {"format": "mltool.tile-store", "format_version": 1, "tile_size": 256,
                  "overlap": 0, "mpp": 0.5, "level": None, "encoding": "jpeg",
                  "quality": 90, "tissue": "otsu", "min_tissue": 0.5, "artifacts": "exclude", "pixels": True}
    expect(st.meta["store"] == want_store, f"store meta {st.meta['store']}")
    for k in keys:
        decode(st.tiles[k], k, fmt="JPEG")

    # Without --json nothing on stdout.
    code, out, err = run([mltool, "tile", tmp("A.tif"), "-o", tmp("st_a_quiet")])
    expect(code == 0 and out == "", f"without --json stdout is empty (code {code}): {out!r}")


def check_pixels():
    """b. tiles = read_region composited on white: exact for PNG, PSNR ≥ 35 dB for JPEG q90."""
    slide = openslide.OpenSlide(tmp("A.tif"))
    # Level 0 (0.25 µm/px on a 0.25 slide), PNG: exact.
    store = tmp("st_b_png")
    code, _, _, err = tile(tmp("A.tif"), "-o", store, "--mpp", "0.25", "--format", "png")
    expect(code == 0, f"--mpp 0.25 --format png exits 0 (got {code}): {err}")
    st = Store(store)
    t, lvl, lds, r = plan(slide, mpp=0.25)
    expect((lvl, r) == (0, 256), "reference plan at level 0")
    cells, _, _, _ = grid(*A_SIZE, t, r, lds)
    pos = {key("A", row, col): (x, y) for row, col, x, y in cells}
    tm = st.meta["tiles/A"]
    keys = st.keys("A")
    expect(len(keys) > 0 and all(k in pos for k in keys), "PNG store keys are on the grid")
    expect([pos[k] for k in keys] == list(zip(tm["x"], tm["y"])),
           "tiles/A x, y = the spec's formula")
    expect(st.meta["store"]["encoding"] == "png", "store encoding png")
    assert_pixels(st, tmp("A.tif"), "A", 0, 256, "PNG")
    # Level 1, JPEG quality 90 (the default format and quality).
    store = tmp("st_b_jpeg")
    code, _, _, err = tile(tmp("A.tif"), "-o", store, "--format", "jpeg", "--quality", "90")
    expect(code == 0, f"--format jpeg --quality 90 exits 0 (got {code}): {err}")
    worst, overall = assert_pixels(Store(store), tmp("A.tif"), "A", 1, 256, "JPEG", min_psnr=35)
    print(f"  JPEG q90 vs read_region: worst tile {worst:.2f} dB, overall {overall:.2f} dB")


def check_resample():
    """c. µm/px: --mpp 0.5 reads level 1 verbatim; --mpp 0.3 reads 307×307 at level 0 with
    stride 307.2 and resamples with Lanczos to 256; --overlap shortens the stride."""
    path = tmp("C.tif")
    slide = openslide.OpenSlide(path)
    # --mpp 0.5: level 1, read size 256, exact.
    store = tmp("st_c05")
    code, _, _, err = tile(path, "-o", store, "--mpp", "0.5", "--format", "png",
                           "--tissue", "none")
    expect(code == 0, f"--mpp 0.5 exits 0 (got {code}): {err}")
    st = Store(store)
    t, lvl, lds, r = plan(slide, mpp=0.5)
    cells, cols, rows, _ = grid(*C_SIZE, t, r, lds)
    expect((lvl, r, cols, rows) == (1, 256, 4, 3), "reference plan/grid at 0.5")
    expect(st.keys("C") == [key("C", a, b) for a, b, _, _ in cells], "--tissue none: every tile")
    expect(st.meta["tiles/C"]["tissue"] == [1] * len(cells), "--tissue none: fraction 1")
    sm = st.meta["slides/C"]
    expect(sm["level"] == 1 and sm["read_size"] == 256, f"--mpp 0.5 reads level 1 at 256: {sm}")
    assert_pixels(st, path, "C", 1, 256, "PNG")

    # --mpp 0.3: t = 1.2, level 0, r = round(307.2) = 307, stride 307.2.
    store = tmp("st_c03")
    code, _, _, err = tile(path, "-o", store, "--mpp", "0.3", "--format", "png",
                           "--tissue", "none")
    expect(code == 0, f"--mpp 0.3 exits 0 (got {code}): {err}")
    st = Store(store)
    t, lvl, lds, r = plan(slide, mpp=0.3)
    cells, cols, rows, stride = grid(*C_SIZE, t, r, lds)
    expect((lvl, r) == (0, 307) and abs(stride - 307.2) < 1e-9, "reference plan at 0.3")
    # 6 columns; 4 rows: the 5th row would start at 1229 and 1229 + 307.2 > 1536.
    expect((cols, rows) == (6, 4), f"reference grid {cols}x{rows}")
    sm = st.meta["slides/C"]
    expect(sm["level"] == 0 and sm["read_size"] == 307 and abs(sm["stride_level0"] - 307.2) < 1e-9
           and abs(sm["target_downsample"] - 1.2) < 1e-9 and abs(sm["size_level0"] - 307.2) < 1e-9,
           f"--mpp 0.3 plan in slides/C: level {sm['level']}, read_size {sm['read_size']}, "
           f"stride {sm['stride_level0']}, size {sm['size_level0']}")
    expect(sm["grid"] == {"cols": cols, "rows": rows}, f"grid {sm['grid']}, expected {cols}x{rows}")
    tm = st.meta["tiles/C"]
    expect(st.keys("C") == [key("C", a, b) for a, b, _, _ in cells], "keys at 0.3")
    expect(list(zip(tm["x"], tm["y"])) == [(x, y) for _, _, x, y in cells],
           f"x = round(col·307.2): got {tm['x'][:6]}, expected {[c[2] for c in cells[:6]]}")
    # Measured 53.3 dB (libvips 8.14 lanczos3 vs Pillow 13 LANCZOS); 48 leaves a margin
    # while still failing a different kernel (bilinear: ~35 dB) or a half-pixel shift.
    worst, overall = assert_pixels(st, path, "C", 0, 307, "PNG", min_psnr=48,
                                   resize_to=256)
    print(f"  vips lanczos3 vs Pillow LANCZOS (307→256): worst tile {worst:.2f} dB, "
          f"overall {overall:.2f} dB")

    # --overlap 64 at --mpp 0.5: stride (256 - 64)·2 = 384.
    store = tmp("st_cov")
    code, _, _, err = tile(path, "-o", store, "--mpp", "0.5", "--overlap", "64",
                           "--tissue", "none", "--format", "png")
    expect(code == 0, f"--overlap 64 exits 0 (got {code}): {err}")
    st = Store(store)
    t, lvl, lds, r = plan(slide, mpp=0.5)
    cells, cols, rows, stride = grid(*C_SIZE, t, r, lds, overlap=64)
    # Columns start at 0, 384, ..., 1536 (1536 + 512 = 2048 fits); rows at 0, 384, 768.
    expect(stride == 384 and (cols, rows) == (5, 3), f"reference overlap grid {cols}x{rows}")
    tm = st.meta["tiles/C"]
    expect(st.keys("C") == [key("C", a, b) for a, b, _, _ in cells]
           and list(zip(tm["x"], tm["y"])) == [(x, y) for _, _, x, y in cells],
           f"--overlap 64: keys/x/y on the 384 px grid: x {tm['x'][:4]}")
    expect(st.meta["store"]["overlap"] == 64 and st.meta["slides/C"]["stride_level0"] == 384,
           "overlap recorded")
    assert_pixels(st, path, "C", 1, 256, "PNG")


def _poll_partial(store, second, proc, deadline):
    """Polls the store until slide `second` has committed tiles but no done/ marker;
    returns the state seen: "partial", "done" (the marker came first), "exited", "timeout"."""
    prefix = f"{second}/".encode()
    while time.time() < deadline:
        if proc.poll() is not None:
            return "exited"
        if os.path.exists(os.path.join(store, "data.mdb")):
            try:
                # With the lock: this reader runs while mltool writes (docs/formats.md).
                env = lmdb.open(store, readonly=True, lock=True, max_dbs=8)
                try:
                    with env.begin() as txn:
                        meta = env.open_db(b"meta", txn=txn, create=False)
                        tiles = env.open_db(b"tiles", txn=txn, create=False)
                        if txn.get(f"done/{second}".encode(), db=meta) is not None:
                            return "done"
                        c = txn.cursor(db=tiles)
                        if c.set_range(prefix) and bytes(c.key()).startswith(prefix):
                            return "partial"
                finally:
                    env.close()
            except (lmdb.Error, KeyError):
                pass  # not created yet: look again
        time.sleep(0.01)
    return "timeout"


def check_resume():
    """d. SIGKILL mid-slide, re-run: the store equals one uninterrupted run."""
    first = tmp("resume", "R1.tif")
    make_slides.generate([["generic_tiff", [first, *SMALL, 0.25, [(0, 0, 1024, 768)]],
                           SCANNER]])
    for size in (4096, 6144, 8192):
        second = tmp("resume", f"R{size}.tif")
        make_slides.generate([["generic_tiff", [second, size, size, 0.25,
                                                [(0, 0, size, size)], "jpeg"], SCANNER]])
        sid = slide_id(second)
        args = [first, second, "--mpp", "0.25", "--tissue", "none", "--format", "png",
                "--commit-every", "16", "--threads", "2", "--json"]
        store = tmp(f"st_d_{size}")
        t0 = time.time()
        proc = subprocess.Popen([mltool, "tile", *args, "-o", store], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        state = _poll_partial(store, sid, proc, time.time() + 120)
        if state in ("partial", "timeout"):
            proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate()
        expect(state != "timeout", f"no tiles of {sid} after 120 s: {err.decode()[-500:]}")
        if state != "partial":
            expect(proc.returncode == 0, f"the run exited {proc.returncode}: "
                                         f"{err.decode()[-500:]}")
            print(f"  {size}x{size}: no partial state seen ({state} after "
                  f"{time.time() - t0:.1f} s); a bigger slide")
            continue
        st = Store(store)
        partial = len(st.keys(sid))
        if sid in st.done():
            print(f"  {size}x{size}: the slide completed before SIGKILL landed; a bigger slide")
            continue
        expect(partial > 0, "the killed run left a partial slide")
        r1_done = "R1" in st.done()
        print(f"  killed after {time.time() - t0:.1f} s with {partial} of {sid}'s "
              f"{(size // 256) ** 2} tiles committed, no done/{sid}")
        code, out, err = run([mltool, "tile", *args, "-o", store])
        expect(code == 0, f"the re-run exits 0 (got {code}): {err}")
        sts = by_id(json.loads(out))
        expect(sts["R1"]["status"] == ("skipped" if r1_done else "tiled")
               and sts[sid]["status"] == "tiled",
               f"re-run statuses: R1 {sts['R1']['status']} (done before: {r1_done}), "
               f"{sid} {sts[sid]['status']}")
        ref = tmp(f"st_d_{size}_ref")
        code, out, err = run([mltool, "tile", *args, "-o", ref])
        expect(code == 0, f"the uninterrupted run exits 0 (got {code}): {err}")
        a, b = Store(store), Store(ref)
        expect(a.tiles.keys() == b.tiles.keys(),
               f"resumed store has {len(a.tiles)} tiles, uninterrupted {len(b.tiles)}; "
               f"extra {sorted(a.tiles.keys() - b.tiles.keys())[:5]}, "
               f"missing {sorted(b.tiles.keys() - a.tiles.keys())[:5]}")
        differ = [k for k in a.tiles if a.tiles[k] != b.tiles[k]]
        expect(not differ, f"{len(differ)} tiles differ after resume, e.g. {differ[:3]}")
        for m in (f"tiles/{sid}", "tiles/R1", f"slides/{sid}", "store"):
            expect(a.meta[m] == b.meta[m], f"meta {m} differs after resume")
        expect(a.without_seconds() == b.without_seconds(), "meta differs after resume")
        return
    raise Failure("never caught the second slide partially committed, even at 8192x8192")


def check_bad_input():
    """e. missing / truncated / non-slide / undecodable tiles → exit 2 naming the file;
    --keep-going → 4 with the good slide complete; earlier slides survive a failed run."""
    good = tmp("shard", "K.tif")
    bad = {"missing": tmp("bad", "missing.svs"), "truncated": tmp("bad", "trunc.tif"),
           "text": tmp("bad", "text.svs"), "corrupt": tmp("bad", "corrupt.tif")}
    # --mpp 0.25 reads level 0, where corrupt.tif's tiles are undecodable (its thumbnail
    # levels are intact, so it opens and has tissue).
    for what, path in bad.items():
        store = tmp(f"st_e_{what}")
        code, out, err = run([mltool, "tile", path, "-o", store, "--mpp", "0.25"])
        expect(code == 2, f"{what} slide {path}: exit {code}, expected 2 ({err.strip()[-300:]})")
        expect(os.path.basename(path) in err, f"{what}: stderr names the file: {err!r}")
        if os.path.isdir(store):
            expect(slide_id(path) not in Store(store).done(), f"{what}: no done/ marker")

    store = tmp("st_e_kg")
    paths = [bad["missing"], bad["truncated"], good, bad["text"], bad["corrupt"]]
    code, summary, out, err = tile(*paths, "-o", store, "--mpp", "0.25", "--keep-going")
    expect(code == 4, f"--keep-going with bad slides: exit {code}, expected 4: {err}")
    st = Store(store)
    expect(st.done() == {"K"}, f"only the good slide is complete: {sorted(st.done())}")
    expect(st.meta["done/K"]["tiles"] == len(st.keys("K")) == 9,
           f"K.tif fully tiled (9 tiles): done/K {st.meta['done/K']}, {len(st.keys('K'))} keys")
    sts = by_id(summary)
    expect(summary["failed"] == 4 and sts["K"]["status"] == "tiled",
           f"summary: failed {summary['failed']}, K {sts['K']['status']}")
    expect([e["id"] for e in summary["slides"]] == [slide_id(p) for p in paths],
           f"summary lists the slides in input order: {[e['id'] for e in summary['slides']]}")
    for what, path in bad.items():
        e = sts.get(slide_id(path))
        expect(e is not None and e["status"] == "failed", f"{what}: status {e}")
        expect(os.path.basename(path) in e.get("error", ""),
               f"{what}: error names the file: {e.get('error')!r}")

    # A good slide committed first survives a later failing run.
    store = tmp("st_e_keep")
    code, _, _, err = tile(good, "-o", store, "--mpp", "0.25")
    expect(code == 0, f"good slide: exit {code}: {err}")
    before = Store(store)
    for path in (bad["truncated"], bad["corrupt"]):
        code, _, _, err = tile(path, "-o", store, "--mpp", "0.25")
        expect(code == 2, f"a failing run ({os.path.basename(path)}) into a store with a "
                          f"complete slide: exit {code}, expected 2")
        after = Store(store)
        expect("K" in after.done() and after.keys("K") == before.keys("K")
               and all(after.tiles[k] == before.tiles[k] for k in before.keys("K"))
               and after.meta["tiles/K"] == before.meta["tiles/K"],
               f"after a failed run of {os.path.basename(path)} the earlier slide is still "
               f"complete and unchanged")

    # Two different slides with the same id (K.tif in two folders): the second fails
    # ("already ..."), in one run and in a later run into the same store; the same path
    # again is skipped.
    other = tmp("bad", "K.tif")
    code, summary, out, err = tile(good, other, "-o", tmp("st_e_dup"), "--keep-going")
    entries = summary["slides"] if summary else []
    expect(len(entries) == 2 and entries[0]["status"] == "tiled"
           and entries[1]["status"] == "failed" and "already" in entries[1].get("error", ""),
           f"{other} after {good} in one run: the second K fails with 'already ...': {entries}")
    expect(code == 4, f"duplicate slide id with --keep-going: exit {code}, expected 4: {err}")
    code, summary, out, err = tile(other, "-o", tmp("st_e_dup"))
    expect(code == 2 and "already" in err and "K" in err,
           f"{other} into a store where K came from {good}: exit {code}, expected 2 with "
           f"'already' in stderr: {err!r}")
    code, summary, out, err = tile(good, "-o", tmp("st_e_dup"))
    expect(code == 0 and summary["slides"][0]["status"] == "skipped",
           f"the same path again: exit {code}, {summary and summary['slides']}")


def _run_same(a, b, what):
    expect(a.tiles.keys() == b.tiles.keys(), f"{what}: different tile keys "
           f"({len(a.tiles)} vs {len(b.tiles)})")
    differ = [k for k in a.tiles if a.tiles[k] != b.tiles[k]]
    expect(not differ, f"{what}: {len(differ)} tiles differ, e.g. {differ[:3]}")
    ma, mb = a.without_seconds(), b.without_seconds()
    differ = sorted(k for k in set(ma) | set(mb) if ma.get(k) != mb.get(k))
    expect(not differ, f"{what}: meta differs: "
           + "; ".join(f"{k}: {ma.get(k)} vs {mb.get(k)}" for k in differ)[:3000])


def check_stdin():
    """f. `-` reads paths from stdin (blank lines, # comments) = the same paths as arguments."""
    paths = [tmp("shard", f"S{i}.tif") for i in (0, 1)]
    code, _, _, err = tile(*paths, "-o", tmp("st_f_args"), "--mpp", "0.25")
    expect(code == 0, f"positional: exit {code}: {err}")
    listing = f"# slides for the test\n{paths[0]}\n\n   \n# another comment\n{paths[1]}\n"
    code, summary, _, err = tile("-", "-o", tmp("st_f_stdin"), "--mpp", "0.25", stdin=listing)
    expect(code == 0, f"stdin list: exit {code}: {err}")
    expect([s["id"] for s in summary["slides"]] == ["S0", "S1"],
           f"stdin: the two slides, in order: {[s['id'] for s in summary['slides']]}")
    _run_same(Store(tmp("st_f_args")), Store(tmp("st_f_stdin")), "stdin vs arguments")


def check_shard():
    """g. --shard I/3 over 5 slides: positions I, I+3; union = all; --merge = one run."""
    paths = [tmp("shard", f"S{i}.tif") for i in range(5)]
    seen = {}
    for i in range(3):
        code, summary, _, err = tile(*paths, "-o", tmp(f"st_g{i}"), "--shard", f"{i}/3",
                                     "--mpp", "0.25")
        expect(code == 0, f"--shard {i}/3: exit {code}: {err}")
        done = Store(tmp(f"st_g{i}")).done()
        want = {f"S{j}" for j in range(i, 5, 3)}
        expect(done == want, f"--shard {i}/3 tiled {sorted(done)}, expected {sorted(want)}")
        expect({s["id"] for s in summary["slides"]} == want, f"--shard {i}/3 summary")
        for s in done:
            expect(s not in seen, f"{s} in shards {seen.get(s)} and {i}")
            seen[s] = i
    expect(set(seen) == {f"S{j}" for j in range(5)}, "the shards cover all slides")
    code, _, _, err = tile(*paths, "-o", tmp("st_g_all"), "--mpp", "0.25")
    expect(code == 0, f"all 5: exit {code}: {err}")
    code, out, err = run([mltool, "tile", "--merge", tmp("st_g0"), tmp("st_g1"), tmp("st_g2"),
                          "-o", tmp("st_g_merged"), "--json"])
    expect(code == 0, f"--merge: exit {code}: {err}")
    json.loads(out)
    merged, single = Store(tmp("st_g_merged")), Store(tmp("st_g_all"))
    expect(merged.done() == single.done(), f"merged slides {sorted(merged.done())}")
    _run_same(merged, single, "merged shards vs one run")
    check_shard_records(paths)
    # Stores made with different settings do not merge.
    code, _, _, err = tile(paths[0], "-o", tmp("st_g_512"), "--tile-size", "512", "--mpp", "0.25")
    expect(code == 0, f"--tile-size 512: exit {code}: {err}")
    code, out, err = run([mltool, "tile", "--merge", tmp("st_g0"), tmp("st_g_512"),
                          "-o", tmp("st_g_bad"), "--allow-partial"])
    expect(code == 1, f"merging tile sizes 256 and 512: exit {code}, expected 1: {err}")
    expect("tile_size" in err or "tile-size" in err or "tile size" in err,
           f"the error names the setting: {err!r}")


def tile_env(env, *args):
    """mltool tile ARGS --json with `env` added: (code, summary or None, stderr)."""
    return run_json([mltool, "tile", *args, "--json"], env=env)


SLURM_UNSET = {k: "" for k in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN",
                               "SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_STEP",
                               "JOB_COMPLETION_INDEX")}


def check_shard_records(paths):
    """g2. each shard store records I/N, its slides and that it finished; --merge refuses a
    missing or unfinished shard (naming it) unless --allow-partial; --shard auto takes I/N from
    Slurm's array variables (stepped arrays; --shards N for a re-submitted task) or
    Kubernetes' JOB_COMPLETION_INDEX with --shards; a store of shard I/N refuses another I/N."""
    rec = Store(tmp("st_g0")).meta.get("shard")
    expect(rec == {"index": 0, "count": 3, "slides": ["S0", "S3"], "finished": True,
                   "failed": [], "incomplete": []}, f"meta 'shard' of shard 0/3: {rec}")
    # --array=0-4:2, task 4 → index 2 of 3; a re-submitted --array=1 with --shards 3 → 1/3
    for env, extra, want in [
            ({"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_MIN": "0",
              "SLURM_ARRAY_TASK_MAX": "4", "SLURM_ARRAY_TASK_STEP": "2"}, [], "st_g2"),
            ({"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_MIN": "1",
              "SLURM_ARRAY_TASK_MAX": "1", "SLURM_ARRAY_TASK_STEP": "1"}, ["--shards", "3"],
             "st_g1"),
            ({"JOB_COMPLETION_INDEX": "0"}, ["--shards", "3"], "st_g0")]:
        out = tmp(f"st_gauto_{want}")
        code, summary, err = tile_env(dict(SLURM_UNSET, **env), *paths, "-o", out, "--shard",
                                      "auto", *extra, "--mpp", "0.25")
        expect(code == 0, f"--shard auto with {env}: exit {code}: {err}")
        _run_same(Store(out), Store(tmp(want)), f"--shard auto with {env} vs {want}")
    for env, extra, words in [({}, [], ["SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX"]),
                              ({"JOB_COMPLETION_INDEX": "1"}, [], ["--shards"]),
                              ({"JOB_COMPLETION_INDEX": "3"}, ["--shards", "3"], ["0..N-1"])]:
        code, _, err = tile_env(dict(SLURM_UNSET, **env), *paths, "-o", tmp("st_gauto_bad"),
                                "--shard", "auto", *extra)
        expect(code == 1 and all(w in err for w in words),
               f"--shard auto {extra} with {env}: exit {code}, expected 1 naming {words}: {err}")
    code, _, _, err = tile(*paths, "-o", tmp("st_g0"), "--shard", "0/2", "--mpp", "0.25")
    expect(code == 1 and "0/3" in err and "--overwrite" in err,
           f"shard 0/3's store rerun as 0/2: exit {code}, expected 1 naming 0/3, --overwrite: {err}")
    code, out, err = run([mltool, "tile", "--merge", tmp("st_g0"), tmp("st_g2"),
                          "-o", tmp("st_g_part")])
    expect(code == 1 and "1/3" in err and "--allow-partial" in err,
           f"--merge without shard 1/3: exit {code}, expected 1 naming 1/3: {err}")
    code, out, err = run([mltool, "tile", "--merge", tmp("st_g0"), tmp("st_g2"),
                          "-o", tmp("st_g_part"), "--allow-partial"])
    expect(code == 0 and "1/3" in err, f"--allow-partial: exit {code}, naming 1/3: {err}")
    expect(Store(tmp("st_g_part")).done() == {"S0", "S2", "S3"},
           f"--allow-partial merged {sorted(Store(tmp('st_g_part')).done())}")
    # An unfinished shard: its second slide fails (no --keep-going) after its first is in.
    bad = [paths[0], paths[1], tmp("bad", "text.svs"), paths[3]]
    code, _, _, err = tile(*bad, "-o", tmp("st_gu0"), "--shard", "0/2", "--mpp", "0.25")
    expect(code == 2, f"shard 0/2 with a bad slide: exit {code}, expected 2: {err}")
    code, _, _, err = tile(*bad, "-o", tmp("st_gu1"), "--shard", "1/2", "--mpp", "0.25")
    expect(code == 0, f"shard 1/2: exit {code}: {err}")
    rec = Store(tmp("st_gu0")).meta.get("shard")
    expect(rec and rec["finished"] is False, f"the failed shard's record: {rec}")
    code, out, err = run([mltool, "tile", "--merge", tmp("st_gu0"), tmp("st_gu1"),
                          "-o", tmp("st_gu_merged")])
    expect(code == 1 and "0/2" in err and "unfinished" in err,
           f"--merge of an unfinished shard: exit {code}, expected 1 naming 0/2: {err}")
    code, summary, _, err = tile(*bad, "-o", tmp("st_gu0"), "--shard", "0/2", "--mpp", "0.25",
                                 "--keep-going")
    expect(code == 4, f"shard 0/2 again, --keep-going: exit {code}, expected 4: {err}")
    rec = Store(tmp("st_gu0")).meta.get("shard")
    expect(rec["finished"] is True and rec["failed"] == ["text"],
           f"finished with the failed slide listed: {rec}")
    code, out, err = run([mltool, "tile", "--merge", tmp("st_gu0"), tmp("st_gu1"),
                          "-o", tmp("st_gu_merged")])
    expect(code == 0 and "text" in err, f"--merge naming the failed slide: exit {code}: {err}")
    # More shards than slides: shard 2/3 of two slides is empty, finishes, and merges as nothing.
    for i in range(3):
        code, _, _, err = tile(*paths[:2], "-o", tmp(f"st_ge{i}"), "--shard", f"{i}/3",
                               "--mpp", "0.25")
        expect(code == 0, f"shard {i}/3 of 2 slides: exit {code}: {err}")
    code, out, err = run([mltool, "tile", "--merge", *(tmp(f"st_ge{i}") for i in range(3)),
                          "-o", tmp("st_ge_merged")])
    expect(code == 0, f"--merge with an empty shard: exit {code}: {err}")
    code, _, _, err = tile(*paths[:2], "-o", tmp("st_ge_all"), "--mpp", "0.25")
    expect(code == 0, f"the 2 slides in one run: exit {code}: {err}")
    _run_same(Store(tmp("st_ge_merged")), Store(tmp("st_ge_all")), "merged with an empty shard")


def check_sigterm():
    """g3. SIGTERM at random points (as Slurm's scancel or preemption sends it): each run
    finishes the slide in hand, commits it and exits 75; rerun, the store equals an
    uninterrupted run's."""
    import random
    paths = [tmp("shard", f"S{i}.tif") for i in range(5)]
    args = [*paths, "--mpp", "0.25", "--threads", "1"]
    t0 = time.time()
    code, _, _, err = tile(*args, "-o", tmp("st_sig_ref"))
    expect(code == 0, f"reference run: exit {code}: {err}")
    whole = time.time() - t0
    for seed in (1, 2):
        out = tmp(f"st_sig_{seed}")
        stopped = run_with_sigterms([mltool, "tile", *args, "-o", out], random.Random(seed),
                                    0.6 * whole)
        print(f"  stopped {stopped} time(s) by SIGTERM before finishing", flush=True)
        _run_same(Store(out), Store(tmp("st_sig_ref")),
                  f"seed {seed}: stopped {stopped} times by SIGTERM, then finished")


def check_empty():
    """h. an all-white slide completes with zero tiles: "empty", exit 4; re-run skips it."""
    store = tmp("st_h")
    path = tmp("blank", "W.tif")
    code, summary, _, err = tile(path, "-o", store)
    expect(code == 4, f"empty slide: exit {code}, expected 4: {err}")
    s = by_id(summary)["W"]
    expect(s["status"] == "empty" and s["tiles"] == 0 and summary["empty"] == 1
           and summary["failed"] == 0, f"summary of the empty slide: {summary}")
    st = Store(store)
    expect(st.meta.get("done/W", {}).get("tiles") == 0 and st.keys("W") == []
           and st.meta.get("tiles/W") == {"row": [], "col": [], "x": [], "y": [], "tissue": []},
           f"empty slide complete with no tiles: done {st.meta.get('done/W')}, "
           f"tiles/W {st.meta.get('tiles/W')}")
    code, summary, _, err = tile(path, "-o", store)
    expect(by_id(summary)["W"]["status"] == "skipped", f"re-run: {summary}")
    # Spec: 0 = "all slides tiled (or skipped as already complete)"; 4 = "some slide yielded
    # zero tiles". A skipped slide yields nothing in this run, so 0.
    expect(code == 0, f"re-run over a complete empty slide: exit {code}, expected 0")
    expect(Store(store).meta == st.meta, "the re-run left the store unchanged")


def check_no_mpp():
    """i. no µm/px: exit 2 naming the file and µm/px; --level 0 works."""
    path = tmp("nompp", "N.tif")
    code, out, err = run([mltool, "tile", path, "-o", tmp("st_i")])
    expect(code == 2, f"no µm/px: exit {code}, expected 2: {err}")
    expect("µm/px" in err and "N.tif" in err, f"stderr names the file and µm/px: {err!r}")
    expect("--slide-mpp" in err and "--level" in err, f"stderr names the way out: {err!r}")
    # a placeholder resolution (72 dpi: 352.78 µm/px) counts as none
    code, out, err = run([mltool, "tile", tmp("nompp", "P.tif"), "-o", tmp("st_ip")])
    expect(code == 2 and "P.tif" in err and "--slide-mpp" in err,
           f"72 dpi: exit {code}, expected 2 naming --slide-mpp: {err}")
    # --slide-mpp says what it is: tiled at --mpp 0.5 from 0.25 µm/px, recorded as an override
    code, summary, _, err = tile(path, "-o", tmp("st_is"), "--slide-mpp", "0.25")
    expect(code == 0, f"--slide-mpp 0.25: exit {code}: {err}")
    sm = Store(tmp("st_is")).meta["slides/N"]
    expect(sm["mpp"] == 0.25 and sm["mpp_source"] == "override" and sm["target_downsample"] == 2,
           f"slides/N with --slide-mpp: {sm}")
    expect(summary["slides"][0]["mpp_source"] == "override", f"--json: {summary['slides'][0]}")
    code, _, _, err = tile(path, "-o", tmp("st_ib"), "--slide-mpp", "500")
    expect(code == 1 and "--slide-mpp" in err, f"--slide-mpp 500: exit {code}: {err}")
    code, summary, _, err = tile(path, "-o", tmp("st_i0"), "--level", "0")
    expect(code == 0, f"--level 0: exit {code}: {err}")
    expect(summary["slides"][0]["mpp_source"] == "none", f"--level 0: {summary['slides'][0]}")
    st = Store(tmp("st_i0"))
    cells, _, _, _ = grid(*SMALL, 1.0, TS, 1.0)
    want = [key("N", r, c) for r, c, x, y in cells
            if inside((x, y, x + TS, y + TS), [(0, 0, 768, 768)])]
    expect(st.keys("N") == want, f"--level 0 keys {st.keys('N')}, expected {want}")
    sm = st.meta["slides/N"]
    expect(sm["mpp"] is None and sm["level"] == 0 and sm["target_downsample"] == 1,
           f"slides/N: mpp {sm['mpp']}, level {sm['level']}")
    expect(st.meta["store"]["mpp"] is None and st.meta["store"]["level"] == 0,
           f"store meta: {st.meta['store']}")
    code, _, _, err = tile(tmp("A.tif"), "-o", tmp("st_i1"), "--level", "1", "--format", "png")
    expect(code == 0, f"--level 1: exit {code}: {err}")
    st = Store(tmp("st_i1"))
    expect(st.meta["slides/A"]["level"] == 1 and st.meta["slides/A"]["read_size"] == 256,
           "--level 1 reads level 1 at tile size")
    expect(st.meta["slides/A"]["mpp_source"] == "metadata", f"slides/A: {st.meta['slides/A']}")
    assert_pixels(st, tmp("A.tif"), "A", 1, 256, "PNG")
    code, _, _, err = tile(tmp("A.tif"), "-o", tmp("st_i2"), "--level", "0", "--mpp", "0.5")
    expect(code == 1, f"--level with --mpp: exit {code}, expected 1 (usage)")


# ../shared/slides beside the checkout: a real scanner file for development (not in the repo).
REAL_SVS = os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared", "slides",
                                         "CMU-1-Small-Region.svs"))
GREEN, BLUE = (0, 200, 0), (20, 60, 255)  # qc.hpp: kTissueOutline, kKeptOutline


def qc_size_of(width, height, long_side):
    """The slide's part of a QC picture: long_side on the longer side, the other in proportion."""
    m = max(width, height)
    return (max(1, math.floor(width * long_side / m + 0.5)),
            max(1, math.floor(height * long_side / m + 0.5)))


def assert_qc_picture(png, slide_size, long_side, outlines=True):
    """png holds the slide at long_side px over a caption strip (white, grey text); with
    `outlines`, a slide with tissue: its outline and the kept tiles in their colours."""
    expect(os.path.isfile(png), f"{png} written")
    img = Image.open(png)
    img.load()
    expect(img.format == "PNG" and img.mode == "RGB", f"{png}: {img.format} {img.mode}")
    w, h = qc_size_of(*slide_size, long_side)
    expect(img.width == w and img.height > h + 20,
           f"{png}: {img.size}, expected {w} wide and the slide's {h} rows over a caption")
    a = np.asarray(img).astype(int)
    if outlines:
        expect(a[:h].std() > 5, f"{png}: the slide part is not blank")
    strip = a[h + 1:]
    grey = (strip[..., 0] == strip[..., 1]) & (strip[..., 1] == strip[..., 2])
    white = (strip == 255).all(axis=2).mean()
    dark = (strip.max(axis=2) < 100).sum()
    expect(grey.all() and white > 0.7 and dark > 200,
           f"{png}: caption strip (rows {h + 1}-{img.height - 1}) not white with dark text: "
           f"grey {grey.mean():.3f}, white {white:.3f}, dark pixels {dark}")
    rows_with_text = (strip.min(axis=(1, 2)) < 100).sum()
    expect(rows_with_text >= 25, f"{png}: {rows_with_text} rows of text, expected 5 lines")
    if outlines:
        for name, colour in (("tissue outline", GREEN), ("kept tiles", BLUE)):
            n = (a[:h] == colour).all(axis=2).sum()
            expect(n > 50, f"{png}: {n} pixels of the {name} colour {colour}")


def check_qc():
    """j. --qc DIR writes DIR/<id>.png: the slide at 1024 px (--qc-size N: N) on its long
    side, the tissue outline and kept tiles, a caption strip; DIR/index.html lists the run."""
    qc = tmp("qc")
    code, _, _, err = tile(tmp("A.tif"), "-o", tmp("st_j"), "--qc", qc)
    expect(code == 0, f"--qc: exit {code}: {err}")
    assert_qc_picture(os.path.join(qc, "A.png"), A_SIZE, 1024)
    # The tissue thumbnail stays small: ≈ tile_size·t/8 = 64 here, and its size follows.
    th = Store(tmp("st_j")).meta["slides/A"]["thumbnail"]
    expect(32 <= th["downsample"] <= 128, f"thumbnail downsample {th['downsample']} ≈ 64")
    expect(abs(th["width"] - A_SIZE[0] / th["downsample"]) <= 1
           and abs(th["height"] - A_SIZE[1] / th["downsample"]) <= 1,
           f"thumbnail {th['width']}x{th['height']} = slide / {th['downsample']}")
    code, _, _, err = tile(tmp("C.tif"), "-o", tmp("st_j2"), "--qc", qc, "--qc-size", "600")
    expect(code == 0, f"--qc-size 600: exit {code}: {err}")
    assert_qc_picture(os.path.join(qc, "C.png"), C_SIZE, 600)
    code, _, _, err = tile(tmp("C.tif"), "-o", tmp("st_j3"), "--qc", qc, "--qc-size", "100")
    expect(code == 1 and "--qc-size" in err, f"--qc-size 100: exit {code}: {err}")
    real = REAL_SVS
    if not os.path.isfile(real):
        print(f"  (skipped the real SVS: {os.path.normpath(real)} is absent)")
        return
    size = openslide.OpenSlide(real).dimensions
    for extra, long_side in (([], 1024), (["--qc-size", "1500"], 1500)):
        out = tmp(f"qc_real{long_side}")
        code, _, _, err = tile(real, "-o", tmp(f"st_jr{long_side}"), "--qc", out, *extra)
        expect(code == 0, f"CMU-1-Small-Region.svs {extra}: exit {code}: {err}")
        assert_qc_picture(os.path.join(out, "CMU-1-Small-Region.png"), size, long_side)


def check_qc_index():
    """j2. DIR/index.html after a run: every slide of the call (tiled, empty, failed, then
    skipped on a re-run) with its counts and picture, the empty and failed ones marked."""
    qc = tmp("qc_index")
    paths = [tmp("A.tif"), tmp("blank", "W.tif"), tmp("bad", "text.svs")]
    code, summary, _, err = tile(*paths, "-o", tmp("st_jx"), "--qc", qc, "--keep-going")
    expect(code == 4, f"a run with an empty and a failed slide: exit {code}, expected 4: {err}")
    s = by_id(summary)

    def cards():
        html = open(os.path.join(qc, "index.html"), encoding="utf-8").read()
        found = {}
        for part in html.split('<div class="card')[1:]:
            sid = part.split('id="', 1)[1].split('"', 1)[0]
            found[sid] = part.split('<div class="card', 1)[0]
        expect(list(found) == ["A", "W", "text"], f"index.html cards {list(found)}")
        return found

    c = cards()
    expect(f"tiles {s['A']['tiles']} / {s['A']['grid_tiles']} grid" in c["A"]
           and '<img src="A.png"' in c["A"] and "(metadata)" in c["A"],
           f"A's card: {c['A']}")
    expect(c["W"].startswith(' empty"') and "NO TILES" in c["W"]
           and f"tiles 0 / {s['W']['grid_tiles']} grid" in c["W"] and 'src="W.png"' in c["W"],
           f"W's card marks it empty: {c['W']}")
    expect(c["text"].startswith(' failed"') and 'class="error"' in c["text"]
           and "<img" not in c["text"], f"text's card marks it failed: {c['text']}")
    assert_qc_picture(os.path.join(qc, "W.png"), SMALL, 1024, outlines=False)
    before = open(os.path.join(qc, "A.png"), "rb").read()
    code, summary, _, err = tile(*paths, "-o", tmp("st_jx"), "--qc", qc, "--keep-going")
    expect(by_id(summary)["A"]["status"] == "skipped", f"re-run: {summary}")
    c = cards()
    expect('<img src="A.png"' in c["A"] and "skipped" in c["A"]
           and f"tiles {s['A']['tiles']} / {s['A']['grid_tiles']} grid" in c["A"],
           f"a skipped slide keeps its card and picture: {c['A']}")
    expect(open(os.path.join(qc, "A.png"), "rb").read() == before,
           "a skipped slide's picture is the earlier run's")


def check_aperio():
    """k. Aperio SVS: vendor aperio, µm/px from the description, tiles = read_region."""
    path = tmp("svs", "AP.svs")
    store = tmp("st_k")
    code, _, _, err = tile(path, "-o", store, "--mpp", "0.25", "--format", "png")
    expect(code == 0, f"Aperio SVS: exit {code}: {err}")
    st = Store(store)
    sm = st.meta["slides/AP"]
    expect(sm["vendor"] == "aperio" and sm["mpp"] == 0.25,
           f"slides/AP vendor {sm['vendor']}, mpp {sm['mpp']}")
    cells, _, _, _ = grid(2048, 1536, 1.0, 256, 1.0)
    want = [key("AP", r, c) for r, c, x, y in cells
            if inside((x, y, x + 256, y + 256), [(256, 256, 1536, 1280)])]
    expect(st.keys("AP") == want, f"AP keys: {len(st.keys('AP'))}, expected {len(want)}")
    # OpenSlide 3.4.1 and 4.0.1 decode these JPEG tiles identically (checked when this
    # test was written), so the strictest true statement is equality.
    assert_pixels(st, path, "AP", 0, 256, "PNG")
    code, _, _, err = tile(path, "-o", tmp("st_k1"), "--format", "png")
    expect(code == 0, f"Aperio SVS at 0.5: exit {code}: {err}")
    expect(Store(tmp("st_k1")).meta["slides/AP"]["level"] == 1, "0.5 µm/px reads level 1")
    assert_pixels(Store(tmp("st_k1")), path, "AP", 1, 256, "PNG")


def check_rerun():
    """l. the same command on a complete store: all "skipped", exit 0, unchanged;
    different settings into it → exit 1."""
    store = tmp("st_l")
    paths = [tmp("shard", f"S{i}.tif") for i in (2, 3)]
    code, _, _, err = tile(*paths, "-o", store, "--mpp", "0.25")
    expect(code == 0, f"first run: exit {code}: {err}")
    before = Store(store)
    code, summary, _, err = tile(*paths, "-o", store, "--mpp", "0.25")
    expect(code == 0, f"re-run: exit {code}: {err}")
    expect([s["status"] for s in summary["slides"]] == ["skipped", "skipped"],
           f"re-run statuses: {[s['status'] for s in summary['slides']]}")
    after = Store(store)
    expect(after.tiles == before.tiles and after.meta == before.meta,
           "the re-run left the store unchanged")
    for extra in (["--mpp", "0.25", "--tile-size", "512"], ["--mpp", "0.25", "--format", "png"],
                  ["--mpp", "1.0"]):
        code, _, _, err = tile(*paths, "-o", store, *extra)
        expect(code == 1, f"re-run with {' '.join(extra)}: exit {code}, expected 1: {err}")
    last = Store(store)
    expect(last.tiles == before.tiles and last.meta == before.meta,
           "refused runs left the store unchanged")


def check_refused_run_leaves_no_settings():
    """A first run refused before it finishes a slide (--mpp finer than level 0) records no
    settings: the corrected run is accepted and its store equals a clean run's (issue 28)."""
    paths = [tmp("shard", f"S{i}.tif") for i in (2, 3)]
    code, _, _, err = tile(*paths, "-o", tmp("st_refused"), "--mpp", "0.1")
    expect(code != 0 and "finer than the slide's level 0" in err, f"first run: exit {code}: {err}")
    code, _, _, err = tile(*paths, "-o", tmp("st_refused"), "--mpp", "0.5")
    expect(code == 0, f"corrected run: exit {code}: {err}")
    code, _, _, err = tile(*paths, "-o", tmp("st_clean"), "--mpp", "0.5")
    expect(code == 0, f"clean run: exit {code}: {err}")
    a, b = Store(tmp("st_refused")), Store(tmp("st_clean"))
    expect(a.tiles == b.tiles, "the corrected run's tiles differ from a clean run's")
    expect("store" in a.meta and a.meta["store"] == b.meta["store"], "the corrected run's settings differ")


def check_small_levels():
    """m. libvips' own pyramids end with a level smaller than one TIFF tile (256×192 here).
    Debian's OpenSlide 3.4.1 with libtiff 4.5 misreads such a level (rows shifted down by
    256 - 192, the rest of the tile buffer left uninitialised), OpenSlide 4 reads it right.
    The tissue found must not depend on that: same tiles as the scanner-like pyramid of the
    same picture (A.tif, check_grid), and the same store on a second run."""
    slide = openslide.OpenSlide(tmp("small", "TA.tif"))
    last = slide.level_count - 1
    lds = slide.level_downsamples[last]
    rgb = np.asarray(slide.read_region((0, 0), last, slide.level_dimensions[last]))[..., :3]
    sat = rgb.max(axis=2).astype(int) - rgb.min(axis=2) > 20
    ys, xs = np.nonzero(sat)
    bbox = (xs.min() * lds, ys.min() * lds, (xs.max() + 1) * lds, (ys.max() + 1) * lds)
    expect(bbox == (512, 512, 3584, 2560),
           f"the fixture: OpenSlide 4 sees TA.tif's tissue at {bbox} on its last level")

    runs = []
    for n, args in enumerate(([tmp("small", "TA.tif")], [tmp("small", "TK.tif"), "--mpp", "0.25"],
                              [tmp("small", "TA.tif")])):
        code, summary, _, err = tile(*args, "-o", tmp(f"st_m{n}"))
        expect(code == 0, f"full libvips pyramid, {args}: exit {code}: {err}")
        runs.append(Store(tmp(f"st_m{n}")))
    problems = []
    t, lvl, lds, r = plan(slide)
    cells, _, _, _ = grid(*A_SIZE, t, r, lds)
    want = [key("TA", row, col) for row, col, x, y in cells
            if inside((x, y, x + TS * t, y + TS * t), A_REGIONS)]
    got = runs[0].keys("TA")
    if got != want:
        problems.append(f"TA.tif (thumbnail {runs[0].meta['slides/TA']['thumbnail']}): "
                        f"{len(got)} tiles {got}, expected {len(want)} {want} (those of "
                        f"A.tif; rows shifted down = the smallest level misread)")
    cells, _, _, _ = grid(*SMALL, 1.0, TS, 1.0)
    want = [key("TK", row, col) for row, col, x, y in cells
            if inside((x, y, x + TS, y + TS), [(0, 0, 768, 768)])]
    got = runs[1].keys("TK")
    if got != want:
        problems.append(f"TK.tif at --mpp 0.25 (thumbnail "
                        f"{runs[1].meta['slides/TK']['thumbnail']}): {len(got)} tiles {got}, "
                        f"expected {len(want)} {want}")
    try:
        _run_same(runs[0], runs[2], "TA.tif, two runs of the same command")
    except Failure as e:
        problems.append(str(e))
    expect(not problems, "\n    ".join(problems))


# ---------------------------------------------------------------- artifacts, on a real slide

# The real Aperio slide beside the checkout (../shared/slides/README.md); absent in a user's
# clone, where the checks below skip with a message.
_marked = {}


def marked():
    """The copies of REAL_SVS with pen strokes and a black border (scripts/fixtures/
    marked_slides.py, in a child process), made once: the fixture's JSON plus "dir"; None
    (after saying so) when REAL_SVS is absent."""
    if not os.path.isfile(REAL_SVS):
        print(f"  skipped: {REAL_SVS} is absent (see ../shared/slides/README.md)", flush=True)
        return None
    if not _marked:
        out = tmp("marked")
        code, text, err = run([sys.executable, marked_slides.__file__, REAL_SVS, out])
        expect(code == 0, f"marked_slides.py: exit {code}: {err}")
        _marked.update(json.loads(text), dir=out)
    return _marked


def tile_both(path, name):
    """`mltool tile PATH` with --artifacts exclude and keep: {value: (Store, summary entry)}."""
    out = {}
    for value in ("exclude", "keep"):
        store = tmp(f"st_art_{name}_{value}")
        code, summary, _, err = tile(path, "-o", store, "--artifacts", value)
        expect(code == 0, f"{name} --artifacts {value}: exit {code}: {err}")
        st = Store(store)
        expect(st.meta["store"]["artifacts"] == value, f"store record {st.meta['store']}")
        out[value] = (st, summary["slides"][0])
    return out


def kept_boxes(st, sid):
    """[(key, (x0, y0, x1, y1))] of the kept tiles of `sid`, level-0 boxes."""
    tm, size = st.meta[f"tiles/{sid}"], st.meta[f"slides/{sid}"]["size_level0"]
    return [(k, (x, y, x + size, y + size)) for k, x, y in zip(st.keys(sid), tm["x"], tm["y"])]


def coverage(mask, box):
    x0, y0, x1, y1 = (int(round(v)) for v in box)
    return float(mask[y0:y1, x0:x1].mean())


def tissue_pixels(path):
    """A level-0 mask of stained pixels of an unmarked slide, read with openslide-python:
    HSV saturation above 0.15 on pixels not dark (an independent, cruder rule)."""
    s = openslide.OpenSlide(path)
    rgb = np.asarray(s.read_region((0, 0), 0, s.dimensions))[..., :3].astype(int)
    hi, lo = rgb.max(axis=2), rgb.min(axis=2)
    return (hi - lo > 0.15 * hi) & (hi >= 60)


def check_artifacts_real():
    """n. the real SVS, unmarked: --artifacts exclude keeps (nearly) the tiles keep keeps,
    and removes well under 1% of what the unfiltered mask calls tissue."""
    if marked() is None:
        return
    for path, sid in ((REAL_SVS, "CMU-1-Small-Region"),
                      (os.path.join(marked()["dir"], "plain.tif"), "plain")):
        runs = tile_both(path, sid)
        ex, keep = (set(runs[v][0].keys(sid)) for v in ("exclude", "keep"))
        expect(len(ex ^ keep) <= 1 and len(keep) >= 20,
               f"{sid}: {len(keep)} tiles with keep, {len(ex)} with exclude, differing in "
               f"{sorted(ex ^ keep)}")
        f_ex, f_keep = (runs[v][1]["tissue_fraction"] for v in ("exclude", "keep"))
        lost = (f_keep - f_ex) / f_keep
        print(f"  {sid}: tissue fraction {f_keep:.4f} (keep) → {f_ex:.4f} (exclude): "
              f"{100 * lost:.2f}% of the tissue removed", flush=True)
        expect(lost < 0.01, f"{sid}: the artifact rules remove {100 * lost:.2f}% of the tissue")


def check_artifacts_pen():
    """o. blue, green and black pen strokes over glass: no tile on ink alone is kept by
    default, and each ink has such tiles with --artifacts keep (it would be tissue); tiles
    of the unmarked copy that no stroke touches are kept on the marked one too."""
    m = marked()
    if m is None:
        return
    w, h = m["size"]
    tissue = tissue_pixels(os.path.join(m["dir"], "plain.tif"))
    inks = {s["ink"]: marked_slides.stroke_mask(w, h, s) for s in m["strokes"]}
    runs = tile_both(os.path.join(m["dir"], "pen.tif"), "pen")

    def ink_only(box):
        """The ink whose stroke covers at least half of the box over glass, or None."""
        if coverage(tissue, box) > 0.02:
            return None
        return next((ink for ink, mask in inks.items() if coverage(mask, box) >= 0.5), None)

    on_ink = {v: [(k, ink_only(b)) for k, b in kept_boxes(runs[v][0], "pen") if ink_only(b)]
              for v in runs}
    expect(not on_ink["exclude"], f"default: tiles on ink alone kept: {on_ink['exclude']}")
    seen = {ink for _, ink in on_ink["keep"]}
    expect(seen == set(inks), f"--artifacts keep keeps ink-only tiles of {sorted(seen)} only, "
                              f"expected all of {sorted(inks)}: {on_ink['keep']}")
    plain = tile_both(os.path.join(m["dir"], "plain.tif"), "pen_plain")["exclude"][0]
    clean = {k.split("/")[1] for k, b in kept_boxes(plain, "plain")
             if all(coverage(mask, b) == 0 for mask in inks.values())}
    got = {k.split("/")[1] for k in runs["exclude"][0].keys("pen")}
    expect(len(clean - got) <= 1, f"tissue tiles away from the ink lost: {sorted(clean - got)}")
    print(f"  pen: {len(on_ink['keep'])} ink-only tiles with keep, 0 by default; "
          f"{len(clean & got)}/{len(clean)} ink-free tissue tiles kept", flush=True)


def check_artifacts_border():
    """p. a black border band (dark noise, 15..45) around the real slide: no tile lying on
    it alone is kept by default; with --artifacts keep it is called tissue."""
    m = marked()
    if m is None:
        return
    w, h, band = *m["size"], m["border"]
    runs = tile_both(os.path.join(m["dir"], "border.tif"), "border")

    def on_border(box):  # the box lies outside the slide's own pixels
        x0, y0, x1, y1 = box
        return x1 <= band or y1 <= band or x0 >= band + w or y0 >= band + h

    found = {v: [k for k, b in kept_boxes(runs[v][0], "border") if on_border(b)] for v in runs}
    expect(not found["exclude"], f"default: tiles on the border kept: {found['exclude']}")
    expect(len(found["keep"]) >= 10,
           f"--artifacts keep: {len(found['keep'])} border tiles kept, expected the border "
           f"to be called tissue (10 or more)")
    print(f"  border: {len(found['keep'])} border tiles with keep, 0 by default", flush=True)


CHECKS = [check_grid, check_pixels, check_resample, check_resume, check_bad_input,
          check_stdin, check_shard, check_sigterm, check_empty, check_no_mpp, check_qc, check_qc_index,
          check_aperio, check_rerun, check_refused_run_leaves_no_settings, check_small_levels, check_artifacts_real,
          check_artifacts_pen, check_artifacts_border]


def main():
    run_checks("mltool tile", CHECKS, only, make_fixtures, timed=False)


main()
