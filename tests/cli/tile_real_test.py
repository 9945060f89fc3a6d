"""mltool tile on slides as users have them (issue 17), made from the real Aperio
CMU-1-Small-Region.svs in ../shared/slides by scripts/fixtures/real_slides.py with tools from
the package registries: a DICOM WSI series (wsidicomizer), placeholder and missing
resolutions, an SVS without µm/px, and flat PNG / strip TIFF / BigTIFF / JPEG copies. Tiles
are checked pixel for pixel against OpenSlide 4's read_region (openslide-python on the
openslide-bin wheel: SVS, DICOM) and against the image itself (Pillow, tifffile: flat files).
Where the SVS is absent every check prints that it is skipped.

    tile_real_test.py MLTOOL [TEST...]     # TEST: names of the check_* functions, without check_
"""
import io
import json
import os
import subprocess
import sys

import numpy as np
import openslide
import tifffile
from PIL import Image

from cli_common import Failure, expect, run, run_checks, tmp
from store_refs import own_dicom_jpeg, own_tiff_jpeg, read_tile_store

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "..", "scripts", "fixtures", "real_slides.py")
REAL_SVS = os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared", "slides",
                                         "CMU-1-Small-Region.svs"))
SID = "CMU-1-Small-Region"
MPP = 0.499  # the slide's; --mpp 0.499 reads level 0 at tile size: pixels compare exactly

mltool = os.path.abspath(sys.argv[1])
only = set(sys.argv[2:])
have_svs = os.path.isfile(REAL_SVS)


def make_fixtures():
    if not have_svs:
        return f"skipped: {REAL_SVS} is absent (see ../shared/slides/README.md)"
    code = subprocess.run([sys.executable, FIXTURE, REAL_SVS, tmp("real")],
                          capture_output=True, text=True)
    expect(code.returncode == 0, f"real_slides.py: exit {code.returncode}: {code.stderr}")
    return "slides made from " + os.path.basename(REAL_SVS)


def real(*parts):
    return os.path.join(tmp("real"), *parts)


def tile(*args):
    """mltool tile ARGS --json -q: (exit code, summary or None, stderr)."""
    code, out, err = run([mltool, "tile", *args, "--json", "-q"])
    return code, (json.loads(out) if out.strip() else None), err


def tiled(sid, *args):
    """Tiles into a new store (PNG, lossless): (meta, tiles, the slide's summary)."""
    st = tmp(f"st_{sid}_{len(os.listdir(tmp('.')))}")
    code, summary, err = tile(*args, "-o", st, "--format", "png")
    expect(code == 0, f"tile {' '.join(args)}: exit {code}: {err}")
    meta, tiles = read_tile_store(st)
    entry = next(s for s in summary["slides"] if s["id"] == sid)
    return meta, tiles, entry


def each_tile(meta, tiles, sid):
    """(key, x, y, pixels) of every tile of `sid`."""
    rec = meta[f"tiles/{sid}"]
    for r, c, x, y in zip(rec["row"], rec["col"], rec["x"], rec["y"]):
        k = f"{sid}/{r:06d}_{c:06d}"
        expect(k in tiles, f"{k} listed in tiles/{sid} but absent")
        yield k, x, y, np.asarray(Image.open(io.BytesIO(tiles[k])).convert("RGB"))


def read_ref(slide, x, y, size):
    """openslide-python's read_region at level 0 composited on white, as RGB uint8."""
    rgba = np.asarray(slide.read_region((x, y), 0, (size, size))).astype(np.float64)
    a = rgba[..., 3:4] / 255.0
    return np.rint(rgba[..., :3] * a + 255.0 * (1.0 - a)).astype(np.uint8)


def same(k, got, ref, what):
    if not np.array_equal(got, ref):
        d = np.abs(got.astype(int) - ref.astype(int))
        raise Failure(f"{k}: not equal to {what}: {int((d > 0).sum())} values differ, max by "
                      f"{int(d.max())}")


def decoded_by_mltool(store, size):
    """The store's tiles decoded by mltool's own decoder (mltool_testgen decode-tiles beside
    mltool, what extract runs) as an N x size x size x 3 array, or None where it is not built."""
    testgen = os.path.join(os.path.dirname(mltool), "mltool_testgen")
    if not os.access(testgen, os.X_OK):
        print(f"  (mltool's decoder not checked: {testgen} is not built)", flush=True)
        return None
    out = tmp(os.path.basename(store) + "-decoded.rgb")
    code, _, err = run([testgen, "decode-tiles", store, out])
    expect(code == 0, f"decode-tiles: {err}")
    return np.fromfile(out, dtype=np.uint8).reshape(-1, size, size, 3)


def skip_without_svs():
    if not have_svs:
        print(f"  skipped: {REAL_SVS} is absent", flush=True)
    return not have_svs


# ---------------------------------------------------------------- the checks

def check_version():
    """a. mltool --version names the OpenSlide that reads: 4.x, the one openslide-bin ships."""
    code, out, err = run([mltool, "--version"])
    expect(code == 0, f"--version: exit {code}: {err}")
    want = f"OpenSlide {openslide.__library_version__}"
    expect(openslide.__library_version__.startswith("4."),
           f"openslide-python loads OpenSlide {openslide.__library_version__}, not 4.x")
    expect(want in out, f"--version does not name {want}: {out!r}")
    if skip_without_svs():
        return
    # Debian's libvips loads Debian's OpenSlide 3.4.1 (libopenslide.so.0) for its own loader;
    # every openslide_* reference in the process, that one's included, must bind to 4.x.
    code, _, err = run([mltool, "tile", REAL_SVS, "-o", tmp("st_ld"), "-q", "--qc", tmp("qc_ld")],
                       env={"LD_DEBUG": "bindings"})
    expect(code == 0, f"tile under LD_DEBUG: exit {code}: {err[-2000:]}")
    targets = {line.split(" to ")[1].split(" [")[0] for line in err.splitlines()
               if "normal symbol `openslide_" in line}
    expect(targets and all(t.endswith("libopenslide.so.1") for t in targets),
           f"openslide_* symbols bind to {sorted(targets)}, expected only libopenslide.so.1")


def check_svs():
    """b. the real SVS: --reader openslide equals read_region exactly; the slide record names
    the reader and its version; --reader auto (libvips' TIFF decoder) too."""
    if skip_without_svs():
        return
    slide = openslide.OpenSlide(REAL_SVS)
    for reader, name, version in (("openslide", "openslide", "OpenSlide 4."),
                                  ("auto", "libvips-tiff", "libvips ")):
        meta, tiles, entry = tiled(SID, REAL_SVS, "--mpp", str(MPP), "--reader", reader)
        rec = meta[f"slides/{SID}"]
        expect(rec["reader"] == name and rec["reader_version"].startswith(version) and
               entry["reader"] == name and entry["reader_version"] == rec["reader_version"],
               f"--reader {reader}: slide record {rec.get('reader')} "
               f"{rec.get('reader_version')}, summary {entry}")
        expect(rec["vendor"] == "aperio" and rec["mpp_source"] == "metadata", f"{rec}")
        n = 0
        for k, x, y, got in each_tile(meta, tiles, SID):
            same(k, got, read_ref(slide, x, y, 256), f"read_region (--reader {reader})")
            n += 1
        expect(n >= 20, f"{n} tiles of the real SVS")


def check_dicom():
    """c. DICOM WSI: the series' directory and one of its .dcm files both tile, pixel-exact
    against OpenSlide 4's read_region of the series; at its own frame size, its frames pass
    through (check_dicom_passthrough)."""
    if skip_without_svs():
        return
    dcm = sorted(f for f in os.listdir(real("dicom")) if f.endswith(".dcm"))
    slide = openslide.OpenSlide(real("dicom", dcm[0]))
    expect(slide.properties["openslide.vendor"] == "dicom", "the fixture is not DICOM")
    dcm_id = os.path.splitext(dcm[0])[0]
    for path, sid in ((real("dicom"), "dicom"), (real("dicom", dcm[0]), dcm_id)):
        meta, tiles, entry = tiled(sid, path, "--mpp", str(MPP))
        rec = meta[f"slides/{sid}"]
        expect(rec["vendor"] == "dicom" and rec["reader"] == "openslide" and
               rec["reader_version"] == f"OpenSlide {openslide.__library_version__}",
               f"{path}: {rec['vendor']} read by {rec['reader']} {rec['reader_version']}")
        expect(rec["mpp"] == MPP and rec["mpp_source"] == "metadata", f"{path}: mpp {rec}")
        n = 0
        for k, x, y, got in each_tile(meta, tiles, sid):
            same(k, got, read_ref(slide, x, y, 256), "OpenSlide's read_region of the series")
            n += 1
        expect(n >= 20, f"{path}: {n} tiles")
    code, _, err = tile(tmp("real"), "-o", tmp("st_nodcm"))
    expect(code == 2 and "no .dcm file" in err, f"a directory without .dcm: {code} {err}")
    check_dicom_passthrough(slide)


def check_dicom_passthrough(slide):
    """The series' level 0 at its own 240-px frames (wsidicomizer keeps the SVS's RGB-coded
    JPEG tiles, their tables merged in and an Adobe APP14 of transform 0 added, so the frames
    say RGB themselves): every kept tile is the frame as pydicom reads it, byte for byte, and
    decodes (Pillow, mltool) to OpenSlide 4's read_region exactly."""
    size = int(slide.properties["openslide.level[0].tile-width"])
    st = tmp("st_dicom_passthrough")
    code, summary, err = tile(real("dicom"), "-o", st, "--level", "0", "--tile-size", str(size))
    expect(code == 0, f"exit {code}: {err}")
    meta, tiles = read_tile_store(st)
    p = meta["slides/dicom"]["passthrough"]
    _, _, ds = own_dicom_jpeg(real("dicom"), slide.dimensions, 0, 0)
    expect(p == {"tiles": len(tiles), "colour": "rgb", "dicom_instance": ds.SOPInstanceUID,
                 "dicom_file": os.path.basename(ds.filename)} and
           len(tiles) == summary["slides"][0]["passthrough"] >= 20, f"{p}, {len(tiles)} tiles")
    ours = decoded_by_mltool(st, size)
    for i, (k, x, y, got) in enumerate(each_tile(meta, tiles, "dicom")):
        want, frame, _ = own_dicom_jpeg(real("dicom"), slide.dimensions, x // size, y // size)
        expect(tiles[k] == want == frame, f"{k}: not the frame byte for byte")
        ref = read_ref(slide, x, y, size)
        same(k, got, ref, "read_region (Pillow's decoding)")
        if ours is not None:
            same(k, ours[i], ref, "read_region (mltool's decoding)")


def check_flat():
    """d. flat PNG, strip TIFF, BigTIFF, JPEG: read by libvips, tiles equal to the image's own
    pixels (the JPEG to Pillow's decoding of it), µm/px from the file's resolution, and about
    the tissue the pyramid has."""
    if skip_without_svs():
        return
    _, _, svs = tiled(SID, REAL_SVS)
    refs = {
        "flat.png": lambda p: np.asarray(Image.open(p).convert("RGB")),
        "strip.tif": tifffile.imread,
        "big.tif": tifffile.imread,
        "flat.jpg": lambda p: np.asarray(Image.open(p).convert("RGB")),
    }
    for name, read in refs.items():
        path, sid = real(name), os.path.splitext(name)[0]
        meta, tiles, entry = tiled(sid, path, "--mpp", str(MPP))
        rec = meta[f"slides/{sid}"]
        fmt = {"png": "png", "tif": "tiff", "jpg": "jpeg"}[name.rsplit(".", 1)[1]]
        expect(rec["vendor"] == "flat-" + fmt and rec["reader"] == "libvips-flat" and
               rec["reader_version"].startswith("libvips ") and len(rec["levels"]) == 1,
               f"{name}: {rec['vendor']}, {rec['reader']}, {len(rec['levels'])} levels")
        expect(abs(rec["mpp"] - MPP) < 1e-3 and rec["mpp_source"] == "metadata",
               f"{name}: mpp {rec['mpp']} from {rec['mpp_source']}")
        image = read(path)
        n = 0
        for k, x, y, got in each_tile(meta, tiles, sid):
            same(k, got, image[y:y + 256, x:x + 256], f"{name}'s pixels")
            n += 1
        expect(abs(n - svs["tiles"]) <= 2,
               f"{name}: {n} tiles kept, the SVS {svs['tiles']}: tissue detection differs")


def check_no_usable_mpp():
    """e. a 72-dpi placeholder and a resolution unit of none count as no µm/px: exit 2 naming
    --slide-mpp and --level; --slide-mpp-table gives each slide's (by id or by path)."""
    if skip_without_svs():
        return
    for name in ("dpi72.tif", "nores.tif"):
        code, _, err = tile(real(name), "-o", tmp(f"st_no_{name}"))
        expect(code == 2 and name in err and "--slide-mpp" in err and "--level" in err,
               f"{name}: exit {code}, expected 2 naming the file, --slide-mpp, --level: {err}")
    table = tmp("mpp.csv")
    with open(table, "w") as f:
        f.write(f'scanner,slide,mpp\nX,dpi72,{MPP}\nY,"{real("nores.tif")}",0.5\n')
    st = tmp("st_table")
    code, summary, err = tile(real("dpi72.tif"), real("nores.tif"), "-o", st,
                              "--slide-mpp-table", table, "--slide-mpp", "0.3")
    expect(code == 0, f"--slide-mpp-table: exit {code}: {err}")
    meta, _ = read_tile_store(st)
    for sid, mpp in (("dpi72", MPP), ("nores", 0.5)):
        rec = meta[f"slides/{sid}"]
        expect(rec["mpp"] == mpp and rec["mpp_source"] == "table",
               f"{sid}: mpp {rec['mpp']} from {rec['mpp_source']}, expected {mpp} from table")
    expect({s["mpp_source"] for s in summary["slides"]} == {"table"}, f"{summary}")
    with open(table, "w") as f:
        f.write(f"slide,mpp\ndpi72,{MPP}\nnores,72\n")
    code, _, err = tile(real("dpi72.tif"), "-o", tmp("st_bad_table"), "--slide-mpp-table", table)
    expect(code != 0 and f"{table}:3" in err and "mpp" in err,
           f"an implausible mpp on line 3: exit {code}: {err}")


def check_power():
    """f. an SVS without µm/px but with its objective power: refused unless --mpp-from-power
    (10 / 20 = 0.5 µm/px, recorded as "power"); --mag 20 is --mpp 0.5."""
    if skip_without_svs():
        return
    code, _, err = tile(real("nompp.svs"), "-o", tmp("st_pow0"))
    expect(code == 2 and "--mpp-from-power" in err, f"no µm/px: exit {code}: {err}")
    meta, _, entry = tiled("nompp", real("nompp.svs"), "--mpp-from-power")
    rec = meta["slides/nompp"]
    expect(rec["mpp"] == 0.5 and rec["mpp_source"] == "power" and entry["mpp_source"] == "power",
           f"--mpp-from-power: mpp {rec['mpp']} from {rec['mpp_source']}")
    meta, _, _ = tiled(SID, REAL_SVS, "--mag", "20")
    expect(meta["store"]["mpp"] == 0.5, f"--mag 20: store mpp {meta['store']['mpp']}")
    code, _, err = tile(REAL_SVS, "-o", tmp("st_mag2"), "--mag", "20", "--mpp", "0.5")
    expect(code == 1 and "--mag" in err, f"--mag with --mpp: exit {code}: {err}")


def check_passthrough():
    """g. the real SVS at its native level and tile size (240-px, RGB-coded JPEG tiles): every
    kept tile is the slide's own JPEG tile byte for byte, and decodes (Pillow; mltool's own
    decoder through mltool_testgen beside mltool, where built) to read_region exactly."""
    if skip_without_svs():
        return
    slide = openslide.OpenSlide(REAL_SVS)
    size = int(slide.properties["openslide.level[0].tile-width"])
    st = tmp("st_passthrough")
    code, summary, err = tile(REAL_SVS, "-o", st, "--level", "0", "--tile-size", str(size))
    expect(code == 0, f"exit {code}: {err}")
    meta, tiles = read_tile_store(st)
    p = meta[f"slides/{SID}"]["passthrough"]
    expect(p["tiles"] == len(tiles) == summary["slides"][0]["passthrough"] >= 20 and
           p["colour"] == "rgb" and meta[f"done/{SID}"]["passthrough"] == p["tiles"],
           f"{p}, {len(tiles)} tiles, {summary['slides'][0]}")
    ours = decoded_by_mltool(st, size)
    for i, (k, x, y, got) in enumerate(each_tile(meta, tiles, SID)):
        want, rgb = own_tiff_jpeg(REAL_SVS, slide.dimensions, x // size, y // size)
        expect(rgb and tiles[k] == want, f"{k}: not the slide's own tile")
        ref = read_ref(slide, x, y, size)
        same(k, got, ref, "read_region (Pillow's decoding)")
        if ours is not None:
            same(k, ours[i], ref, "read_region (mltool's decoding)")


CHECKS = [check_version, check_svs, check_dicom, check_flat, check_no_usable_mpp, check_power,
          check_passthrough]


def main():
    run_checks("mltool tile on real slides", CHECKS, only, make_fixtures, timed=False)


if __name__ == "__main__":
    main()
