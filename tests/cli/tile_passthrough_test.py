"""mltool tile --passthrough (issue 29): tiles that are exactly one of the slide's own JPEG
TIFF tiles are stored as those compressed bytes, made standalone. Against independent
references: the expected bytes rebuilt from the TIFF with tifffile (raw tile, JPEGTables,
Photometric), OpenSlide 4's read_region (openslide-python on openslide-bin) for the pixels,
decoded with Pillow and with mltool's own decoder (mltool_testgen decode-tiles, what extract
runs). Slides are written by libvips (scripts/fixtures/make_slides.py): YCbCr- and RGB-coded
generic TIFFs, Aperio-like SVS files, 256- and 512-px tiles; DICOM WSI series by pydicom and
Pillow (scripts/fixtures/dicom_series.py), their expected bytes rebuilt from the frames
pydicom reads: YBR_FULL_422 and RGB frames, several fragments per frame with a Basic or an
Extended Offset Table, and uncompressed, TILED_SPARSE and concatenated series that must not
pass through.

    tile_passthrough_test.py MLTOOL MLTOOL_TESTGEN [TEST...]
"""
import io
import json
import os
import sys

import numpy as np
import openslide
import tifffile
from PIL import Image

from cli_common import expect, run, run_checks, tmp
from store_refs import own_dicom_jpeg, own_tiff_jpeg, read_tile_store

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "fixtures"))
import dicom_series  # noqa: E402  (pydicom, numpy and Pillow)
import make_slides  # noqa: E402  (imports pyvips only in its child processes)

mltool = os.path.abspath(sys.argv[1])
testgen = os.path.abspath(sys.argv[2])
only = set(sys.argv[3:])

SIZE = (2560, 1792)  # 10 × 7 tiles of 256 at level 0
TISSUE = [(300, 260, 2200, 1500)]
# name → (generator, kwargs, TIFF tile size, Photometric the TIFF must have: 6 YCbCr, 2 RGB)
SLIDES = {
    "ycc.tif": ("generic_tiff", {"compression": "jpeg", "quality": 80}, 256, 6),
    "rgb.tif": ("generic_tiff", {"compression": "jpeg", "quality": 80, "rgbjpeg": True}, 256, 2),
    "t512.tif": ("generic_tiff", {"compression": "jpeg", "quality": 85, "tile": 512}, 512, 6),
    "ap.svs": ("aperio_svs", {"quality": 70}, 256, 6),
    "aprgb.svs": ("aperio_svs", {"quality": 70, "rgbjpeg": True}, 256, 2),
}
# DICOM series (directories; dicom_series.write's options): 2600 x 1800 at 0.25 µm/px and its
# 1300 x 900 level 1, 256-px frames.
DICOMS = {
    "dcm-ycc": {},
    "dcm-rgb": {"rgb": True},
    "dcm-bot": {"fragments": 3, "table": "bot"},
    "dcm-eot": {"table": "eot"},
    "dcm-raw": {"syntax": "raw"},
    "dcm-sparse": {"sparse": True},
    "dcm-cat": {"concatenation": True},
}


def make_fixtures():
    calls = []
    for name, (gen, kw, tile, _) in SLIDES.items():
        args = [tmp(name), *SIZE] + ([0.25] if gen == "generic_tiff" else []) + [TISSUE]
        calls.append([gen, args, dict(kw, tile=tile, min_level=256)])
    make_slides.generate(calls)
    for name, (gen, _, tile, photometric) in SLIDES.items():
        with tifffile.TiffFile(tmp(name)) as tf:
            page = tf.pages[0]
            expect(page.compression == 7 and int(page.photometric) == photometric
                   and page.tilewidth == tile,
                   f"{name}: JPEG tiles of {tile} px, Photometric {photometric}: "
                   f"{page.compression} {page.photometric} {page.tilewidth}")
        vendor = openslide.OpenSlide(tmp(name)).properties["openslide.vendor"]
        expect(vendor == ("aperio" if gen == "aperio_svs" else "generic-tiff"), f"{name}: {vendor}")
    for name, kw in DICOMS.items():
        dicom_series.write(tmp(name), **kw)
        vendor = openslide.OpenSlide(dicom_file(name, 1)).properties["openslide.vendor"]
        expect(vendor == "dicom", f"{name}: {vendor}")
    return f"{len(SLIDES)} slides, {len(DICOMS)} DICOM series"


def dicom_file(name, level=0):
    return os.path.join(tmp(name), f"level-{level}.dcm")


# ---------------------------------------------------------------- references

def tile(slide, out, *args):
    code, stdout, stderr = run([mltool, "tile", slide, "-o", out, "--json", *args])
    expect(code == 0, f"tile {slide} {args}: exit {code}: {stderr}")
    summary = json.loads(stdout)["slides"][0]
    meta, tiles = read_tile_store(out)
    return summary, meta, tiles


def reference(slide, x, y, level, size):
    return np.asarray(slide.read_region((x, y), level, (size, size)).convert("RGB"))


def decoded_by_mltool(store_path, n, size):
    out = tmp("decoded.rgb")
    code, _, stderr = run([testgen, "decode-tiles", store_path, out])
    expect(code == 0, f"decode-tiles: {stderr}")
    data = np.fromfile(out, dtype=np.uint8)
    expect(data.size == n * size * size * 3, f"decode-tiles gave {data.size} bytes for {n} tiles")
    return data.reshape(n, size, size, 3)


def assert_passed_through(name, store_path, tiles, meta, size, level=0):
    """Every tile is the slide's own JPEG byte for byte (the TIFF's tile, or the DICOM
    series' frame), and decodes (Pillow and mltool) to OpenSlide's read_region of it exactly."""
    path = tmp(name)
    sid = os.path.splitext(name)[0]
    slide = openslide.OpenSlide(dicom_file(name) if name in DICOMS else path)
    ds = slide.level_downsamples[level]
    rec = meta["tiles/" + sid]
    ours = decoded_by_mltool(store_path, len(tiles), size)
    for i, (key, data) in enumerate(tiles.items()):
        x, y = rec["x"][i], rec["y"][i]
        expect(key == f"{sid}/{rec['row'][i]:06d}_{rec['col'][i]:06d}", f"{key}: order")
        col, row = round(x / ds) // size, round(y / ds) // size
        own = own_dicom_jpeg if name in DICOMS else own_tiff_jpeg
        want = own(path, slide.level_dimensions[level], col, row)[0]
        expect(data == want, f"{name} {key}: not the slide's own tile {col},{row} "
                             f"({len(data)} bytes, expected {len(want)})")
        ref = reference(slide, x, y, level, size)
        pil = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        expect(np.array_equal(pil, ref), f"{name} {key}: Pillow's decoding differs from "
               f"OpenSlide's read_region by up to {np.abs(pil.astype(int) - ref).max()}")
        expect(np.array_equal(ours[i], ref), f"{name} {key}: mltool's decoding differs from "
               f"OpenSlide's read_region by up to {np.abs(ours[i].astype(int) - ref).max()}")


def record(meta, summary, sid):
    """The passthrough record of slide `sid`, checked to agree with done/ and --json."""
    p = meta["slides/" + sid]["passthrough"]
    expect(meta["done/" + sid]["passthrough"] == p["tiles"] == summary["passthrough"],
           f"{sid}: passthrough counts disagree: {p}, {meta['done/' + sid]}, {summary}")
    return p


# ---------------------------------------------------------------- checks

def check_exact():
    """Native level and tile size: every kept tile passes through, and is exact."""
    for name, (_, _, size, photometric) in SLIDES.items():
        out = tmp("exact-" + name + ".lmdb")
        summary, meta, tiles = tile(tmp(name), out, "--level", "0", "--tile-size", str(size))
        sid = os.path.splitext(name)[0]
        p = record(meta, summary, sid)
        expect(summary["tiles"] > 0 and p["tiles"] == summary["tiles"] == len(tiles),
               f"{name}: {p['tiles']} of {summary['tiles']} tiles passed through")
        expect(p["tiff_directory"] == 0, f"{name}: {p}")
        expect(p["colour"] == ("rgb" if photometric == 2 else "ycbcr"), f"{name}: {p}")
        assert_passed_through(name, out, tiles, meta, size)


def check_matching_mpp():
    """--mpp 0.5 on a 0.25 µm/px slide is level 1 as it is: its tiles pass through."""
    out = tmp("mpp.lmdb")
    summary, meta, tiles = tile(tmp("rgb.tif"), out, "--mpp", "0.5")
    p = record(meta, summary, "rgb")
    expect(meta["slides/rgb"]["level"] == 1, "level 1 read")
    expect(p["tiles"] == len(tiles) > 0 and p["tiff_directory"] == 1, f"{p}, {len(tiles)} tiles")
    assert_passed_through("rgb.tif", out, tiles, meta, 256, level=1)


def check_never():
    """--passthrough never: the same tiles decoded and encoded at --quality, as before."""
    auto = tile(tmp("ycc.tif"), tmp("auto.lmdb"), "--level", "0")
    never = tile(tmp("ycc.tif"), tmp("never.lmdb"), "--level", "0", "--passthrough", "never")
    p = record(never[1], never[0], "ycc")
    expect(p == {"tiles": 0, "reason": "--passthrough never"}, f"{p}")
    expect(list(auto[2]) == list(never[2]), "the same tiles kept (tissue detection unchanged)")
    strip = lambda m: {k: ({kk: vv for kk, vv in v.items() if kk not in ("seconds", "passthrough")}
                           if isinstance(v, dict) else v) for k, v in m.items()}
    expect(strip(auto[1]) == strip(never[1]), "the same records, but for passthrough")
    # Pillow's quality-90 tables (libjpeg's, as libjpeg-turbo's): what today's encoder writes.
    buf = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buf, "JPEG", quality=90)
    q90 = Image.open(buf).quantization
    slide = openslide.OpenSlide(tmp("ycc.tif"))
    rec = never[1]["tiles/ycc"]
    for i, (key, data) in enumerate(never[2].items()):
        img = Image.open(io.BytesIO(data))
        expect(img.quantization == q90, f"{key}: not encoded at quality 90")
        expect(auto[2][key] != data, f"{key}: the slide's own bytes with --passthrough never")
        ref = reference(slide, rec["x"][i], rec["y"][i], 0, 256).astype(float)
        mse = np.mean((np.asarray(img.convert("RGB")).astype(float) - ref) ** 2)
        expect(mse < 10, f"{key}: re-encoded tile far from OpenSlide's pixels (MSE {mse:.1f})")


def check_not_aligned():
    """A grid that is not the TIFF's, resampled tiles and PNG pass nothing through."""
    cases = [
        (["--level", "0", "--tile-size", "224"], "224"),
        (["--level", "0", "--overlap", "32"], "--overlap"),
        (["--mpp", "0.6"], "resampled"),
        (["--level", "0", "--format", "png"], "png"),
        (["--level", "0", "--tile-size", "256"], "512x512"),  # t512.tif: TIFF tiles of 512
    ]
    for i, (args, why) in enumerate(cases):
        name = "t512.tif" if why == "512x512" else "ycc.tif"
        summary, meta, tiles = tile(tmp(name), tmp(f"na{i}.lmdb"), *args)
        sid = os.path.splitext(name)[0]
        p = record(meta, summary, sid)
        expect(len(tiles) > 0 and p["tiles"] == 0 and why in p["reason"],
               f"{args}: {p} ({len(tiles)} tiles)")


def check_resume_counts():
    """A slide skipped as complete reports the count its store recorded."""
    out = tmp("resume.lmdb")
    first, _, _ = tile(tmp("ap.svs"), out, "--level", "0")
    again, _, _ = tile(tmp("ap.svs"), out, "--level", "0")
    expect(again["status"] == "skipped" and again["passthrough"] == first["passthrough"] > 0,
           f"{first} then {again}")


def check_dicom():
    """DICOM WSI series at each level's own frame size: every kept tile passes through, is the
    level's frame (as pydicom reads it; a YBR_FULL_422 frame byte for byte, an RGB one with
    the Adobe marker its PhotometricInterpretation implies), and is exact; the series is found
    from its directory or from any of its files; the grid never holds an edge frame."""
    for name in ("dcm-ycc", "dcm-rgb", "dcm-bot", "dcm-eot"):
        for level in (0, 1):
            out = tmp(f"{name}-{level}.lmdb")
            summary, meta, tiles = tile(tmp(name), out, "--level", str(level), "--tile-size", "256")
            p = record(meta, summary, name)
            rec = meta["slides/" + name]
            lw, lh = rec["levels"][level]["width"], rec["levels"][level]["height"]
            expect(rec["grid"] == {"cols": lw // 256, "rows": lh // 256},
                   f"{name} level {level}: grid {rec['grid']} of a {lw}x{lh} level")
            instance = own_dicom_jpeg(tmp(name), (lw, lh), 0, 0)[2].SOPInstanceUID
            colour = "rgb" if name == "dcm-rgb" else "ycbcr"
            expect(summary["tiles"] > 0 and p == {"tiles": summary["tiles"], "colour": colour,
                                                   "dicom_file": f"level-{level}.dcm",
                                                   "dicom_instance": instance},
                   f"{name} level {level}: {p}, {summary['tiles']} tiles")
            assert_passed_through(name, out, tiles, meta, 256, level)
            for key, data in tiles.items():
                _, frame, _ = own_dicom_jpeg(tmp(name), (lw, lh), *map(int, key.split("/")[1]
                                                                        .split("_")[::-1]))
                expect((data == frame) == (colour == "ycbcr"),
                       f"{name} {key}: the frame {'changed' if colour == 'ycbcr' else 'kept'}")
            if colour == "rgb":  # the marker matters: the bare frame decodes as YCbCr
                bare = np.asarray(Image.open(io.BytesIO(frame)).convert("RGB"))
                stored = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
                expect(not np.array_equal(bare, stored), f"{name}: the bare frame decodes the same")
    # One file of the series opens all of it: level 1 from level-1.dcm, the id its name's.
    summary, meta, tiles = tile(dicom_file("dcm-rgb", 1), tmp("dcm-file.lmdb"), "--level", "1")
    p = record(meta, summary, "level-1")
    expect(p["tiles"] == len(tiles) > 0 and p["dicom_file"] == "level-1.dcm", f"{p}")
    summary, meta, tiles = tile(dicom_file("dcm-ycc", 1), tmp("dcm-file0.lmdb"), "--level", "0")
    p = record(meta, summary, "level-1")
    expect(p["tiles"] == len(tiles) > 0 and p["dicom_file"] == "level-0.dcm", f"{p}")


def check_dicom_not_passed():
    """DICOM series that take the usual path, saying why: uncompressed and TILED_SPARSE
    frames, a level split into a concatenation, frames not of the tile size, resampled
    tiles."""
    cases = [
        ("dcm-raw", ["--level", "0"], "not JPEG baseline (uncompressed, transfer syntax "
                                      "1.2.840.10008.1.2.1)"),
        ("dcm-sparse", ["--level", "0"], "TILED_SPARSE, not TILED_FULL"),
        ("dcm-cat", ["--level", "0"], "the level is a concatenation of DICOM instances"),
        ("dcm-ycc", ["--level", "0", "--tile-size", "224"], "frames are 256x256, not the tile "
                                                            "size 224"),
        ("dcm-ycc", ["--mpp", "0.3"], "resampled"),
    ]
    for i, (name, args, why) in enumerate(cases):
        out = tmp(f"dcm-na{i}.lmdb")
        summary, meta, tiles = tile(tmp(name), out, *args)
        p = record(meta, summary, name)
        expect(len(tiles) > 0 and p["tiles"] == 0 and why in p["reason"],
               f"{name} {args}: {p} ({len(tiles)} tiles)")
    # The usual path reads the same pixels: PNG tiles of the uncompressed series equal
    # read_region.
    summary, meta, tiles = tile(tmp("dcm-raw"), tmp("dcm-raw-png.lmdb"), "--level", "0",
                                "--format", "png")
    slide = openslide.OpenSlide(dicom_file("dcm-raw"))
    rec = meta["tiles/dcm-raw"]
    for i, data in enumerate(tiles.values()):
        got = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        expect(np.array_equal(got, reference(slide, rec["x"][i], rec["y"][i], 0, 256)),
               f"dcm-raw tile {i}: not read_region")


CHECKS = [check_exact, check_matching_mpp, check_never, check_not_aligned, check_resume_counts,
          check_dicom, check_dicom_not_passed]


def main():
    run_checks("mltool tile --passthrough", CHECKS, only, make_fixtures, timed=False)


main()
