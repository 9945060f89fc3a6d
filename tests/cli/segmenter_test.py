"""mltool tile --tissue MODEL.pt: tissue and artifacts found by a segmentation model, against
a Python reference that runs the same TorchScript module (torch) over the same image
(OpenSlide 4 through openslide-python; libvips' Lanczos3 where mltool resamples), stitches the
windows as docs/tile.md says, and keeps tiles from its class map.

The segmenter is written by the test (scripts/fixtures/segmenters.py): FoldNet calls grey
pixels background, dark coloured ones a "fold" (an artifact) and the rest tissue. The slide has
tissue with a dark fold across it: Otsu keeps the fold's tiles, FoldNet drops them.

    segmenter_test.py MLTOOL [CHECK...]
"""
import base64
import io
import json
import math
import os
import subprocess
import sys

import numpy as np
import openslide
import torch
from PIL import Image

from cli_common import Failure, expect, run, run_checks, run_json, tmp
from store_refs import read_tile_store

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "fixtures"))
import make_slides  # noqa: E402
import segmenters  # noqa: E402

mltool = os.path.abspath(sys.argv[1])
only = set(sys.argv[2:])
SHARED = os.path.join(HERE, "..", "..", "..", "shared", "slides")
W, H, MPP = 2048, 1536, 0.5
FOLD = (896, 0, 1280, H)  # level-0 x0, y0, x1, y1 of the fold band
TISSUE = (256, 128, 1792, 1408)


# ---------------------------------------------------------------- fixtures

def fold_slide_array():
    """White glass, tissue texture in TISSUE, and the fold: the tissue at 40% brightness."""
    rgb = np.full((H, W, 3), 255, np.uint8)
    tex = make_slides.tissue_texture(size=512)
    x0, y0, x1, y1 = TISSUE
    reps = np.tile(tex, (math.ceil((y1 - y0) / 512), math.ceil((x1 - x0) / 512), 1))
    rgb[y0:y1, x0:x1] = reps[:y1 - y0, :x1 - x0]
    fx0, _, fx1, _ = FOLD
    band = rgb[y0:y1, fx0:fx1].astype(np.float32) * 0.4
    rgb[y0:y1, fx0:fx1] = np.rint(band).astype(np.uint8)
    return rgb


def fixtures():
    os.makedirs(tmp("slides"))
    np.save(tmp("fold.npy"), fold_slide_array())
    make_slides.generate([["tiff_from_npy", [tmp("slides", "fold.tif"), tmp("fold.npy"), MPP]],
                          ["tiff_from_npy", [tmp("slides", "fold2.tif"), tmp("fold.npy"), MPP]]])
    segmenters.write(tmp("fold.pt"), mpp=2.0, size=128)          # level 2 as it is
    segmenters.write(tmp("fold15.pt"), mpp=1.5, size=96)         # level 1 resampled
    segmenters.write(tmp("fold-other.pt"), mpp=2.0, size=160)    # another file, same classes
    for v in ("no-contract", "encoder", "bad-tissue", "wrong-channels", "not-torchscript"):
        segmenters.write(tmp(f"{v}.pt"), variant=v)
    return "a 2048 x 1536 slide with a fold, FoldNet segmenters"


# ---------------------------------------------------------------- references

def classify(module, img, size):
    """mltool's windows over an H x W x 3 image (docs/tile.md#tissue-found-by-a-model): S x S
    windows every S - S/4 pixels from -S/8, white beyond the image, each pixel's class from
    the window whose central part holds it."""
    h, w, _ = img.shape
    m = size // 8
    t = size - 2 * m
    nx, ny = math.ceil(w / t), math.ceil(h / t)
    padded = np.full((ny * t + 2 * m, nx * t + 2 * m, 3), 255, np.uint8)
    padded[m:m + h, m:m + w] = img
    out = np.zeros((ny * t, nx * t), np.uint8)
    with torch.no_grad():
        for j in range(ny):
            wins = np.stack([padded[j * t:j * t + size, i * t:i * t + size] for i in range(nx)])
            x = torch.from_numpy(wins).permute(0, 3, 1, 2).float() / 255.0
            cls = module(x).argmax(1).numpy().astype(np.uint8)
            for i in range(nx):
                out[j * t:(j + 1) * t, i * t:(i + 1) * t] = cls[i, m:m + t, m:m + t]
    return out[:h, :w]


def level_image(path, level):
    with openslide.OpenSlide(path) as s:
        w, h = s.level_dimensions[level]
        rgba = np.asarray(s.read_region((0, 0), level, (w, h)))
    a = rgba[..., 3:4].astype(np.float32) / 255
    return np.rint(rgba[..., :3] * a + 255 * (1 - a)).astype(np.uint8)


def stored(store, sid):
    """(slides record, tiles record, class map as an array, mask record) of slide `sid`."""
    meta, _ = read_tile_store(store)
    mask = meta[f"mask/{sid}"]
    classes = np.asarray(Image.open(io.BytesIO(base64.b64decode(mask["classes"]["png"]))))
    return meta[f"slides/{sid}"], meta[f"tiles/{sid}"], classes, mask


def kept_reference(classes, level0_per_px, size0, min_tissue=0.5, max_artifact=0.1,
                   tissue=(1,), artifacts=(2,)):
    """{(row, col): tissue share} of the grid's tiles a class map (one cell a model pixel)
    keeps, tile footprints in whole model pixels (as in these slides)."""
    side = size0 / level0_per_px
    expect(abs(side - round(side)) < 1e-9, f"tile side {side} model px is not whole")
    side = int(round(side))
    rows, cols = H // size0, W // size0
    out = {}
    for r in range(rows):
        for c in range(cols):
            y0, x0 = int(round(r * size0 / level0_per_px)), int(round(c * size0 / level0_per_px))
            box = classes[y0:y0 + side, x0:x0 + side]
            t = np.isin(box, tissue).sum() / side ** 2
            a = np.isin(box, artifacts).sum() / side ** 2
            if t >= min_tissue - 1e-9 and a <= max_artifact + 1e-9:
                out[(r, c)] = t
    return out


def kept_of(tiles):
    return {(r, c): t for r, c, t in zip(tiles["row"], tiles["col"], tiles["tissue"])}


def tile(*args, env=None):
    return run_json([mltool, "tile", *args, "--json", "-q"], env=env)


# ---------------------------------------------------------------- checks

def check_fold_dropped():
    """Otsu keeps the fold's tiles; the segmenter drops them; mltool's class map is the Python
    reference's pixel for pixel (level 2 read as it is), and so is the set of kept tiles."""
    slide = tmp("slides", "fold.tif")
    code, otsu, err = tile(slide, "-o", tmp("otsu.lmdb"), "--tile-size", "128")
    expect(code == 0, f"otsu run: {code} {err}")
    code, doc, err = tile(slide, "-o", tmp("seg.lmdb"), "--tile-size", "128",
                          "--tissue", tmp("fold.pt"), "--device", "cpu")
    expect(code == 0, f"segmenter run: {code} {err}")
    rec, tiles, classes, mask = stored(tmp("seg.lmdb"), "fold")
    module = torch.jit.load(tmp("fold.pt"))
    ref = classify(module, level_image(slide, 2), 128)
    expect(classes.shape == ref.shape, f"class map {classes.shape}, reference {ref.shape}")
    same = (classes == ref).mean()
    expect(same == 1.0, f"class map equals the reference on {same:.6f} of pixels")
    expect(mask["classes"]["names"] == ["background", "tissue", "fold"], mask["classes"])
    expect(mask["downsample"] == [4.0, 4.0], mask["downsample"])
    want = kept_reference(ref, 4.0, 128 * 1)  # tiles of 128 px at 0.5 µm/px: 128 level-0 px
    got = kept_of(tiles)
    expect(set(got) == set(want), f"kept {sorted(set(got) ^ set(want))[:10]} differ "
                                  f"({len(got)} against {len(want)})")
    for k, v in want.items():
        expect(abs(got[k] - v) <= 1e-4, f"tile {k}: tissue {got[k]} against {v}")
    _, otsu_tiles, _, _ = stored_otsu(tmp("otsu.lmdb"))
    cols_in_fold = {c for c in range(W // 128) if c * 128 >= FOLD[0] and (c + 1) * 128 <= FOLD[2]}
    otsu_fold = [k for k in kept_of(otsu_tiles) if k[1] in cols_in_fold]
    seg_fold = [k for k in got if k[1] in cols_in_fold]
    expect(len(otsu_fold) >= 10, f"Otsu keeps only {len(otsu_fold)} tiles of the fold")
    expect(not seg_fold, f"the segmenter keeps fold tiles {seg_fold}")
    areas = rec["class_areas"]
    expect(set(areas) == {"background", "tissue", "fold"} and areas["fold"]["fraction"] > 0.05,
           f"class areas {areas}")
    s = doc["slides"][0]
    expect(abs(s["tissue_fraction"] - areas["tissue"]["fraction"]) < 1e-6, f"summary {s}")


def stored_otsu(store):
    meta, _ = read_tile_store(store)
    return meta["slides/fold"], meta["tiles/fold"], None, meta["mask/fold"]


def check_resampled():
    """A segmenter between levels: level 1 resampled by 1.5 (libvips Lanczos3, window by
    window in mltool, the whole level in the reference): the arg-max agrees on >= 99.9%."""
    import pyvips
    slide = tmp("slides", "fold.tif")
    code, _, err = tile(slide, "-o", tmp("r.lmdb"), "--tissue", tmp("fold15.pt"), "--device", "cpu")
    expect(code == 0, f"{code} {err}")
    _, _, classes, mask = stored(tmp("r.lmdb"), "fold")
    lvl = level_image(slide, 1)
    img = pyvips.Image.new_from_memory(lvl.tobytes(), lvl.shape[1], lvl.shape[0], 3, "uchar")
    small = img.resize(1 / 1.5, kernel="lanczos3")
    ref_img = np.ndarray(buffer=small.write_to_memory(), dtype=np.uint8,
                         shape=(small.height, small.width, 3))
    want_h, want_w = math.ceil(H / 3), math.ceil(W / 3)
    expect(classes.shape == (want_h, want_w), f"class map {classes.shape}")
    ref = classify(torch.jit.load(tmp("fold15.pt")), ref_img[:want_h, :want_w], 96)
    h, w = min(ref.shape[0], want_h), min(ref.shape[1], want_w)
    same = (classes[:h, :w] == ref[:h, :w]).mean()
    expect(same >= 0.999, f"arg-max equal on {same:.5f} of pixels")
    expect(abs(mask["downsample"][0] - 3.0) < 1e-9, mask["downsample"])


def check_contract_refused():
    """A file that breaks the contract is refused before any slide is read: the message names
    the file and what is wrong; nothing is created."""
    slide = tmp("slides", "fold.tif")
    cases = {
        "no-contract.pt": "has no mltool.json",
        "encoder.pt": "'kind'",
        "bad-tissue.pt": "'stroma'",
        "wrong-channels.pt": "not 2 x 3 x 128 x 128",
        "not-torchscript.pt": "not a TorchScript",
    }
    for name, says in cases.items():
        out = tmp(f"refused-{name}.lmdb")
        code, _, err = run([mltool, "tile", slide, "-o", out, "--tissue", tmp(name)])
        expect(code == 2, f"{name}: exit {code}, {err}")
        expect(tmp(name) in err and says in err, f"{name}: message {err!r}")
        expect(not os.path.exists(out), f"{name}: {out} was created")
    code, _, err = run([mltool, "tile", slide, "-o", tmp("typo.lmdb"), "--tissue", "otsuu"])
    expect(code == 1 and "otsu, none or a TorchScript segmenter" in err, f"{code} {err}")
    code, _, err = run([mltool, "tile", slide, "-o", tmp("typo.lmdb"), "--tissue", tmp("fold.pt"),
                        "--max-artifact", "1.5"])
    expect(code == 1 and "--max-artifact" in err, f"{code} {err}")


def check_resume_shards_merge():
    """Two slides in two shards merged equal one run; a rerun skips both; another segmenter
    is refused for the same store (naming --tissue); --keep-going goes past a bad slide."""
    slides = [tmp("slides", "fold.tif"), tmp("slides", "fold2.tif")]
    args = ["--tissue", tmp("fold.pt"), "--device", "cpu"]
    code, _, err = tile(*slides, "-o", tmp("one.lmdb"), *args)
    expect(code == 0, err)
    for i in range(2):
        code, _, err = tile(*slides, "-o", tmp(f"part{i}.lmdb"), "--shard", f"{i}/2", *args)
        expect(code == 0, err)
    code, _, err = run([mltool, "tile", "--merge", tmp("part0.lmdb"), tmp("part1.lmdb"),
                        "-o", tmp("merged.lmdb")])
    expect(code == 0, err)
    one, _ = read_tile_store(tmp("one.lmdb"))
    merged, _ = read_tile_store(tmp("merged.lmdb"))
    for key in ("store", "tiles/fold", "tiles/fold2", "mask/fold", "mask/fold2"):
        expect(one[key] == merged[key], f"{key} differs after --merge")
    expect(one["store"]["segmenter"]["file"] == "fold.pt" and
           len(one["store"]["segmenter"]["sha256"]) == 64, one["store"])
    code, doc, err = tile(*slides, "-o", tmp("one.lmdb"), *args)
    expect(code == 0 and all(s["status"] == "skipped" for s in doc["slides"]), f"{code} {doc}")
    code, _, err = run([mltool, "tile", *slides, "-o", tmp("one.lmdb"), "--tissue",
                        tmp("fold-other.pt"), "--device", "cpu"])
    expect(code == 1 and "fold-other.pt" in err and "--tissue" in err, f"{code} {err}")
    code, _, err = run([mltool, "tile", "--merge", tmp("one.lmdb"), "-o", tmp("merged.lmdb")])
    expect(code == 0, f"merging the same segmenter's store: {code} {err}")
    with open(tmp("broken.tif"), "wb") as f:
        f.write(b"II*\0garbage")
    code, doc, err = tile(tmp("broken.tif"), slides[0], "-o", tmp("kg.lmdb"), "--keep-going", *args)
    expect(code == 4 and [s["status"] for s in doc["slides"]] == ["failed", "tiled"],
           f"{code} {doc and doc['slides']}")


def check_oom_split():
    """A batch of windows that runs out of memory is split and retried: the same class map."""
    args = ["--tile-size", "128", "--tissue", tmp("fold.pt"), "--device", "cpu"]
    code, _, err = tile(tmp("slides", "fold.tif"), "-o", tmp("oom.lmdb"), *args,
                        env={"MLTOOL_DEBUG_OOM": "1,2"})
    expect(code == 0, err)
    code, _, err = tile(tmp("slides", "fold.tif"), "-o", tmp("plain.lmdb"), *args)
    expect(code == 0, err)
    a, b = read_tile_store(tmp("oom.lmdb"))[0], read_tile_store(tmp("plain.lmdb"))[0]
    expect(a["mask/fold"] == b["mask/fold"] and a["tiles/fold"] == b["tiles/fold"],
           "an OOM split changed the result")


def check_qc_and_geojson():
    """The QC picture tints each class and has a legend; export geojson writes each tissue and
    artifact class's regions as annotations classified by the class name."""
    code, _, err = tile(tmp("slides", "fold.tif"), "-o", tmp("qc.lmdb"), "--tissue",
                        tmp("fold.pt"), "--device", "cpu", "--qc", tmp("qc"), "--qc-size", "512")
    expect(code == 0, err)
    pic = np.asarray(Image.open(tmp("qc", "fold.png")).convert("RGB")).astype(int)
    # the fold band's middle: tinted toward the fold colour (230, 60, 40): red over blue
    x = (FOLD[0] + FOLD[2]) // 2 * 512 // W
    y = 700 * 512 // W
    r, g, b = pic[y, x]
    expect(r > b + 20, f"fold not tinted: {pic[y, x]}")
    expect(pic.shape[0] > 512 * H // W + 40, f"no caption and legend: {pic.shape}")
    out = tmp("geo")
    code, _, err = run([mltool, "export", "geojson", tmp("qc.lmdb"), "-o", out])
    expect(code == 0, err)
    with open(os.path.join(out, "fold.geojson")) as f:
        feats = json.load(f)["features"]
    names = {f["properties"]["classification"]["name"] for f in feats
             if f["properties"].get("objectType") == "annotation"}
    expect(names == {"tissue", "fold"}, f"annotation classes {names}")
    from shapely.geometry import shape
    fold_area = sum(shape(f["geometry"]).area for f in feats
                    if f["properties"]["classification"]["name"] == "fold")
    want = (FOLD[2] - FOLD[0]) * (TISSUE[3] - TISSUE[1])
    expect(abs(fold_area - want) / want < 0.1, f"fold annotations {fold_area} px², band {want}")


def check_info():
    """info --tissue MODEL.pt: the tissue share and class shares tile records for the slide."""
    code, _, err = tile(tmp("slides", "fold.tif"), "-o", tmp("i.lmdb"), "--tissue", tmp("fold.pt"),
                        "--device", "cpu")
    expect(code == 0, err)
    rec = read_tile_store(tmp("i.lmdb"))[0]["slides/fold"]
    code, out, err = run([mltool, "info", tmp("slides", "fold.tif"), "--tissue", tmp("fold.pt"),
                          "--device", "cpu", "--json"])
    expect(code == 0, f"{code} {err}")
    doc = json.loads(out)
    expect(doc["tissue_by"] == "fold.pt", doc)
    for name, area in rec["class_areas"].items():
        expect(abs(doc["class_fractions"][name] - area["fraction"]) < 2e-6,
               f"{name}: info {doc['class_fractions'][name]}, tile {area['fraction']}")
    expect(abs(doc["tissue_fraction"] - rec["class_areas"]["tissue"]["fraction"]) < 2e-6, doc)
    code, out, err = run([mltool, "info", tmp("slides", "fold.tif"), "--tissue", "none"])
    expect(code == 1 and "--tissue takes otsu or a TorchScript segmenter" in err, f"{code} {err}")
    code, out, err = run([mltool, "info", tmp("slides", "fold.tif"), "--tissue", tmp("encoder.pt")])
    expect(code == 2 and "encoder.pt" in err, f"{code} {err}")


def check_extract_slides():
    """extract SLIDE... --tissue MODEL.pt keeps the tiles tile keeps."""
    args = ["--tile-size", "128", "--tissue", tmp("fold.pt")]
    code, _, err = tile(tmp("slides", "fold.tif"), "-o", tmp("t.lmdb"), *args, "--device", "cpu")
    expect(code == 0, err)
    code, _, err = run([mltool, "extract", tmp("slides", "fold.tif"), "-o", tmp("feat"),
                        "--model", "builtin:color-texture", "--device", "cpu", *args, "-q"])
    expect(code == 0, err)
    a = read_tile_store(tmp("t.lmdb"))[0]["tiles/fold"]
    b = read_tile_store(os.path.join(tmp("feat"), "coordinates.lmdb"))[0]["tiles/fold"]
    expect(a == b, "extract SLIDE... kept other tiles than tile")


def check_real_slide():
    """On the real scanner slide: the kept tiles equal those the Python reference keeps from
    mltool's class map, and the class map agrees with the module run over the slide's image
    resampled to 2 µm/px (libvips Lanczos3) on >= 99.9% of pixels."""
    import pyvips
    path = os.path.join(SHARED, "CMU-1-Small-Region.svs")
    if not os.path.exists(path):
        print(f"skip: real_slide: {path} is absent", flush=True)
        return
    code, doc, err = tile(path, "-o", tmp("real.lmdb"), "--tissue", tmp("fold.pt"),
                          "--device", "cpu", "--min-tissue", "0.3")
    expect(code == 0, f"{code} {err}")
    rec, tiles, classes, mask = stored(tmp("real.lmdb"), "CMU-1-Small-Region")
    f = mask["downsample"][0]
    with openslide.OpenSlide(path) as s:
        w0, h0 = s.dimensions
        side = 256 * 0.5 / float(s.properties["openslide.mpp-x"])
    # tiles from the class map (one cell a model pixel): exact area shares of each tile box
    integ = lambda m: np.pad(m.astype(np.float64).cumsum(0).cumsum(1), ((1, 0), (1, 0)))
    ti, ai = integ(classes == 1), integ(classes == 2)

    def area(tab, x0, y0, x1, y1):
        def f_(x, y):
            x, y = min(max(x, 0), classes.shape[1]), min(max(y, 0), classes.shape[0])
            ix, iy = min(int(x), classes.shape[1] - 1), min(int(y), classes.shape[0] - 1)
            fx, fy = min(x - ix, 1), min(y - iy, 1)
            return (tab[iy, ix] * (1 - fx) * (1 - fy) + tab[iy, ix + 1] * fx * (1 - fy) +
                    tab[iy + 1, ix] * (1 - fx) * fy + tab[iy + 1, ix + 1] * fx * fy)
        return f_(x1, y1) - f_(x0, y1) - f_(x1, y0) + f_(x0, y0)

    want = set()
    for r, c, x, y in zip(rec_rows(rec), *grid_of(rec)):
        box = (x / f, y / f, (x + side) / f, (y + side) / f)
        n = (box[2] - box[0]) * (box[3] - box[1])
        if area(ti, *box) / n >= 0.3 - 1e-9 and area(ai, *box) / n <= 0.1 + 1e-9:
            want.add((r, c))
    got = set(kept_of(tiles))
    expect(got == want, f"kept tiles differ: {sorted(got ^ want)[:10]} ({len(got)}/{len(want)})")
    model = torch.jit.load(tmp("fold.pt"))
    ref = classify_windows(model, path, 0, 1.0, f, classes.shape[1], classes.shape[0], 128)
    same = (classes == ref).mean()
    expect(same >= 0.999, f"class map equals the reference on {same:.5f} of pixels")


def llround(v):
    return math.floor(v + 0.5) if v >= 0 else -math.floor(-v + 0.5)


def classify_windows(module, path, level, ds, f, w, h, size):
    """classify() with each window read as docs/tile.md says mltool reads it: the level's
    pixels under the window's part inside the image (whole level pixels, rounded), resized
    to that part's size with libvips' Lanczos3 (pyvips), white around."""
    import pyvips
    m = size // 8
    t = size - 2 * m
    r = f / ds
    with openslide.OpenSlide(path) as s:
        lw_all, lh_all = s.level_dimensions[level]
        nx, ny = math.ceil(w / t), math.ceil(h / t)
        out = np.zeros((ny * t, nx * t), np.uint8)
        for j in range(ny):
            wins = []
            for i in range(nx):
                ox, oy = i * t - m, j * t - m
                cx0, cy0 = max(ox, 0), max(oy, 0)
                cx1, cy1 = min(ox + size, w), min(oy + size, h)
                lx, ly = llround(cx0 * r), llround(cy0 * r)
                lw = min(llround(cx1 * r), lw_all) - lx
                lh = min(llround(cy1 * r), lh_all) - ly
                win = np.full((size, size, 3), 255, np.uint8)
                rgba = np.asarray(s.read_region((llround(lx * ds), llround(ly * ds)), level,
                                                (lw, lh)))
                a = rgba[..., 3:4].astype(np.float32) / 255
                px = np.rint(rgba[..., :3] * a + 255 * (1 - a)).astype(np.uint8)
                ww = min(cx1 - cx0, llround(lw / r))
                hh = min(cy1 - cy0, llround(lh / r))
                if (ww, hh) != (lw, lh):
                    im = pyvips.Image.new_from_memory(np.ascontiguousarray(px).tobytes(), lw, lh,
                                                      3, "uchar")
                    im = im.resize(ww / lw, vscale=hh / lh, kernel="lanczos3")
                    im = im.embed(0, 0, ww, hh, extend="copy")
                    px = np.ndarray(buffer=im.write_to_memory(), dtype=np.uint8,
                                    shape=(hh, ww, 3))
                win[cy0 - oy:cy0 - oy + hh, cx0 - ox:cx0 - ox + ww] = px
                wins.append(win)
            x = torch.from_numpy(np.stack(wins)).permute(0, 3, 1, 2).float() / 255.0
            with torch.no_grad():
                cls = module(x).argmax(1).numpy().astype(np.uint8)
            for i in range(nx):
                out[j * t:(j + 1) * t, i * t:(i + 1) * t] = cls[i, m:m + t, m:m + t]
    return out[:h, :w]


def rec_rows(rec):
    cols, rows = rec["grid"]["cols"], rec["grid"]["rows"]
    return [r for r in range(rows) for _ in range(cols)]


def grid_of(rec):
    cols, rows, stride = rec["grid"]["cols"], rec["grid"]["rows"], rec["stride_level0"]
    rnd = lambda v: math.floor(v + 0.5)
    return ([c for _ in range(rows) for c in range(cols)],
            [rnd(c * stride) for _ in range(rows) for c in range(cols)],
            [rnd(r * stride) for r in range(rows) for _ in range(cols)])


if __name__ == "__main__":
    checks = [check_fold_dropped, check_resampled, check_contract_refused,
              check_resume_shards_merge, check_oom_split, check_qc_and_geojson, check_info,
              check_extract_slides, check_real_slide]
    run_checks("segmenter", checks, only, fixtures)
