"""mltool tile --roi: regions of interest drawn in QuPath, end to end against shapely.

Slides are written by scripts/fixtures/make_slides.py; the regions are QuPath-style GeoJSON
written here (a polygon with a hole, a MultiPolygon, two classes, an unclassified region, a
self-intersecting bow-tie, points and lines, QuPath 0.2's bare array of features). Each kept
tile's share of its footprint inside the regions is recomputed with shapely
(box(x, y, x + s, y + s).intersection(union).area / s², the union of the features made valid
with shapely.make_valid) and must equal the store's within 1e-6, and the kept set must be
shapely's. Then --roi-class, --min-roi, --roi-missing, the refusals (file, feature, option
named; nothing written), the make-valid warning, resume, --shard/--merge, --keep-going, the
QC picture, and extract SLIDE... --roi.

    roi_test.py MLTOOL [TEST...]     # TEST: names of the check_* functions, without check_
"""
import copy
import hashlib
import json
import os
import sys

import numpy as np
import shapely
from PIL import Image
from shapely.geometry import box, shape

from cli_common import expect, run, run_checks, run_json, tmp
from store_refs import read_tile_store

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "fixtures"))
import make_slides  # noqa: E402  (imports pyvips only in its child processes)

mltool = os.path.abspath(sys.argv[1])
only = set(sys.argv[2:])
SIZE = (2048, 1536)
GEOMETRY = ["--mpp", "0.25", "--tile-size", "128", "--threads", "2"]  # 128 level-0 px a tile
SLIDES = ["R1", "R2", "R3", "R4"]
ORANGE = (255, 140, 0)


def feature(geometry, cls=None, fid="x"):
    props = {"objectType": "annotation", "isLocked": False}
    if cls:
        props["classification"] = {"name": cls, "color": [200, 0, 0]}
    return {"type": "Feature", "id": fid, "geometry": geometry, "properties": props}


def poly(*rings):
    return {"type": "Polygon", "coordinates": [list(map(list, r)) for r in rings]}


def rect(x0, y0, x1, y1):
    return [(x0, y0), (x1, y0), (x1, y1), (x0, y1), (x0, y0)]


R1_FEATURES = [
    # a tumour outline with a hole, off the tile grid
    feature(poly(rect(100.5, 90, 900, 700.25), rect(300, 300, 520, 450)), "Tumor", "t1"),
    # stroma: a MultiPolygon of a triangle and a rectangle overlapping the tumour
    feature({"type": "MultiPolygon", "coordinates": [
        [[[1000, 100], [1700, 150], [1200, 900], [1000, 100]]],
        [list(map(list, rect(800, 650, 1100, 1000)))]]}, "Stroma", "s1"),
    # unclassified
    feature(poly(rect(1500, 1100, 1900, 1400)), None, "u1"),
    # a self-intersecting bow-tie (Tumor): repaired with make-valid, and a warning
    feature(poly([(100, 900), (700, 1400), (700, 900), (100, 1400), (100, 900)]), "Tumor", "b1"),
    # no area: skipped with a note
    feature({"type": "Point", "coordinates": [50, 50]}, "Tumor", "p1"),
    feature({"type": "LineString", "coordinates": [[0, 0], [300, 300]]}, "Stroma", "l1"),
]


def write_json(path, doc):
    with open(path, "w") as f:
        json.dump(doc, f)


def fixtures():
    os.makedirs(tmp("slides"), exist_ok=True)
    os.makedirs(tmp("roi"), exist_ok=True)
    tissue = [(0, 0, SIZE[0], SIZE[1] // 2), (0, SIZE[1] // 2, SIZE[0] // 2, SIZE[1])]
    make_slides.generate([["generic_tiff", [tmp("slides", f"{s}.tif"), *SIZE, 0.25, tissue]]
                          for s in SLIDES])
    write_json(tmp("roi", "R1.geojson"), {"type": "FeatureCollection", "features": R1_FEATURES})
    # QuPath 0.2: a bare array of features; file named after the slide's file (R2.tif.geojson)
    write_json(tmp("roi", "R2.tif.geojson"),
               [feature(poly(rect(0, 0, 640, 640)), "Tumor"),
                feature(poly(rect(1300, 500, 2048, 1536)), "Tumor")])
    # R3: no file. R4: a bad one (a ring of 3 positions in feature 1).
    write_json(tmp("roi", "R4.geojson"), {"type": "FeatureCollection", "features": [
        feature(poly(rect(0, 0, 500, 500)), "Tumor"),
        feature(poly([(0, 0), (10, 0), (0, 0)]), "Tumor", "bad")]})
    return "4 slides, 3 ROI files"


def slide(name):
    return tmp("slides", f"{name}.tif")


def tile(slides, out, *args):
    """mltool tile SLIDES -o OUT GEOMETRY ARGS --json: (code, summary, stderr)."""
    return run_json([mltool, "tile", *[slide(s) for s in slides], "-o", tmp(out), *GEOMETRY,
                     *args, "--json"])


def tile_ok(slides, out, *args):
    code, summary, err = tile(slides, out, *args)
    expect(code == 0, f"tile {slides} {' '.join(args)}: exit {code}: {err[-2000:]}")
    return summary, err


def union_of(features, classes=None):
    """shapely's union of the Polygon/MultiPolygon features (of `classes`), made valid."""
    parts = []
    for f in features:
        g = f.get("geometry")
        cls = ((f.get("properties") or {}).get("classification") or {}).get("name", "")
        if not g or g["type"] not in ("Polygon", "MultiPolygon"):
            continue
        if classes and cls not in classes:
            continue
        s = shape(g)
        if not s.is_valid:
            s = shapely.make_valid(s)
        parts.append(s)
    return shapely.union_all(parts)


def store_tiles(store, sid):
    meta, _ = read_tile_store(store)
    t = meta[f"tiles/{sid}"]
    return meta, {(x, y): r for x, y, r in zip(t["x"], t["y"], t.get("roi", [None] * len(t["x"])))}


def expected(meta, sid, region, min_roi=0.5, candidates=None):
    """{(x, y): share} of the grid tiles (or `candidates`) shapely keeps at min_roi."""
    rec = meta[f"slides/{sid}"]
    s, stride = rec["size_level0"], rec["stride_level0"]
    cells = candidates or [(round(c * stride), round(r * stride))
                           for r in range(rec["grid"]["rows"]) for c in range(rec["grid"]["cols"])]
    out = {}
    for x, y in cells:
        share = box(x, y, x + s, y + s).intersection(region).area / (s * s)
        if share >= min_roi - 1e-9:
            out[(x, y)] = share
    return out


def same_tiles(got, want, what):
    expect(set(got) == set(want), f"{what}: kept {len(got)} tiles, shapely {len(want)}; only "
           f"mltool: {sorted(set(got) - set(want))[:5]}, only shapely: {sorted(set(want) - set(got))[:5]}")
    worst = max((abs(got[k] - want[k]) for k in want), default=0)
    expect(worst <= 1e-6, f"{what}: shares differ from shapely's by up to {worst}")


# ---------------------------------------------------------------- checks

def check_shares():
    """Every region, --tissue none: kept set and shares equal shapely's; records; warnings."""
    summary, err = tile_ok(["R1"], "st_all", "--roi", tmp("roi"), "--tissue", "none")
    meta, got = store_tiles(tmp("st_all"), "R1")
    region = union_of(R1_FEATURES)
    want = expected(meta, "R1", region)
    same_tiles(got, want, "R1, every region")
    expect(0 < len(want) < 192, f"R1 keeps {len(want)} of 192 tiles: a test that can fail")
    expect(any(0.5 <= v < 1 for v in want.values()), "some kept tiles are partly inside")
    expect(meta["store"]["roi"] == {"classes": [], "min_roi": 0.5, "missing": "refuse"},
           f"store settings: {meta['store'].get('roi')}")
    roi = meta["slides/R1"]["roi"]
    with open(tmp("roi", "R1.geojson"), "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    expect(roi["file"] == tmp("roi", "R1.geojson") and roi["sha256"] == sha,
           f"slide record's file and sha256: {roi}")
    expect(roi["regions"] == 4 and roi["skipped"] == 2, f"4 regions, 2 skipped: {roi}")
    expect(abs(roi["area"] - region.area) <= 1e-6 * region.area, f"area {roi['area']} vs {region.area}")
    expect(roi["classes"] == ["", "Stroma", "Tumor"], f"classes {roi['classes']}")
    expect("feature 3 (id b1, class 'Tumor')" in err and "make-valid" in err and "R1.geojson" in err,
           f"the bow-tie's warning names file and feature: {err[-1500:]}")
    expect("2 feature(s) without an area skipped" in err, f"the note on points and lines: {err[-800:]}")
    # QuPath 0.2's array, under the slide's file name
    tile_ok(["R2"], "st_r2", "--roi", tmp("roi"), "--tissue", "none")
    meta2, got2 = store_tiles(tmp("st_r2"), "R2")
    with open(tmp("roi", "R2.tif.geojson")) as f:
        same_tiles(got2, expected(meta2, "R2", union_of(json.load(f))), "R2 (array)")


def check_classes_and_min_roi():
    """--roi-class keeps those classes' regions; --min-roi moves the threshold."""
    tile_ok(["R1"], "st_tumor", "--roi", tmp("roi", "R1.geojson"), "--tissue", "none",
            "--roi-class", "Tumor")
    meta, got = store_tiles(tmp("st_tumor"), "R1")
    same_tiles(got, expected(meta, "R1", union_of(R1_FEATURES, {"Tumor"})), "--roi-class Tumor")
    expect(meta["slides/R1"]["roi"]["regions"] == 2, "2 Tumor regions")
    tile_ok(["R1"], "st_two", "--roi", tmp("roi"), "--tissue", "none", "--roi-class", "Tumor",
            "--roi-class", "Stroma")
    meta, got = store_tiles(tmp("st_two"), "R1")
    same_tiles(got, expected(meta, "R1", union_of(R1_FEATURES, {"Tumor", "Stroma"})), "two classes")
    expect(meta["store"]["roi"]["classes"] == ["Stroma", "Tumor"], "classes recorded sorted")
    for m in ("0.9", "0.1", "0"):
        tile_ok(["R1"], f"st_min{m}", "--roi", tmp("roi"), "--tissue", "none", "--min-roi", m)
        meta, got = store_tiles(tmp(f"st_min{m}"), "R1")
        same_tiles(got, expected(meta, "R1", union_of(R1_FEATURES), float(m)), f"--min-roi {m}")
    code, _, err = tile(["R1"], "st_bad_class", "--roi", tmp("roi"), "--roi-class", "Tumour")
    expect(code == 2 and "R1.geojson" in err and "'Tumour' (--roi-class)" in err
           and "'Tumor' (2)" in err, f"an absent class: exit {code}: {err[-800:]}")
    expect(not os.path.exists(tmp("st_bad_class", "data.mdb")) or
           not any(k.startswith("done/") for k in read_tile_store(tmp("st_bad_class"))[0]),
           "nothing tiled")


def check_with_tissue():
    """A tile is kept when it passes the tissue test and the ROI test."""
    tile_ok(["R1"], "st_tissue_only")
    tile_ok(["R1"], "st_tissue_roi", "--roi", tmp("roi"))
    meta_t, tissue = store_tiles(tmp("st_tissue_only"), "R1")
    meta, got = store_tiles(tmp("st_tissue_roi"), "R1")
    want = expected(meta, "R1", union_of(R1_FEATURES), candidates=list(tissue))
    same_tiles(got, want, "tissue and ROI")
    all_roi = expected(meta, "R1", union_of(R1_FEATURES))
    expect(set(want) < set(all_roi) and set(want) < set(tissue),
           "the tissue test and the ROI test each drop tiles the other keeps")


def check_missing():
    """A slide without a file: refused (before anything is written), skipped, or tiled whole."""
    code, _, err = tile(["R1", "R3"], "st_refuse", "--roi", tmp("roi"))
    expect(code == 2 and "R3" in err and "--roi-missing" in err,
           f"refused: exit {code}: {err[-800:]}")
    expect(not os.path.exists(tmp("st_refuse", "data.mdb")) or
           not any(k.startswith("done/") for k in read_tile_store(tmp("st_refuse"))[0]),
           "refused before R1 is tiled")
    summary, _ = tile_ok(["R1", "R3"], "st_skip", "--roi", tmp("roi"), "--roi-missing", "skip",
                         "--tissue", "none")
    status = {s["id"]: s["status"] for s in summary["slides"]}
    expect(status == {"R1": "tiled", "R3": "no_roi"}, f"statuses {status}")
    meta, _ = read_tile_store(tmp("st_skip"))
    expect("done/R3" not in meta and "slides/R3" not in meta, "R3 not in the store")
    tile_ok(["R1", "R3"], "st_whole", "--roi", tmp("roi"), "--roi-missing", "all",
            "--tissue", "none")
    meta, got = store_tiles(tmp("st_whole"), "R3")
    rec = meta["slides/R3"]
    expect(len(got) == rec["grid"]["rows"] * rec["grid"]["cols"] and rec["roi"] is None,
           f"R3 tiled whole: {len(got)} tiles, roi {rec.get('roi')}")
    expect(meta["store"]["roi"]["missing"] == "all", "the policy is recorded")


def bad(name, doc, raw=None):
    path = tmp("bad", name)
    os.makedirs(tmp("bad"), exist_ok=True)
    with open(path, "w") as f:
        f.write(raw if raw is not None else json.dumps(doc))
    return path


def check_errors():
    """Bad files are refused naming the file, the feature and the option; nothing is written."""
    ok = feature(poly(rect(0, 0, 500, 500)), "Tumor")
    cases = [
        (bad("trunc.geojson", None, '{"type": "FeatureCollection", "features": [{'),
         ["not valid JSON", "--roi"]),
        (bad("geom.geojson", {"type": "Polygon", "coordinates": []}),
         ["not a GeoJSON FeatureCollection", "--roi"]),
        (bad("ring.geojson", {"type": "FeatureCollection", "features": [
            ok, feature(poly([(0, 0), (10, 0), (0, 0)]), "Tumor", "r3")]}),
         ["feature 1 (id r3, class 'Tumor')", "ring 0 has 3 positions", "--roi-class"]),
        (bad("coord.geojson", {"type": "FeatureCollection", "features": [
            feature(poly([(0, 0), (10, 0), ("a", 5), (0, 0)]), "Tumor")]}),
         ["feature 0", "position 2 is not [x, y]", "--roi"]),
        (bad("gc.geojson", {"type": "FeatureCollection", "features": [
            ok, ok, feature({"type": "GeometryCollection", "geometries": []}, "Tumor")]}),
         ["feature 2", "GeometryCollection, not a Polygon or MultiPolygon", "--roi-class"]),
        (bad("lines.geojson", {"type": "FeatureCollection", "features": [
            feature({"type": "LineString", "coordinates": [[0, 0], [5, 5]]})]}),
         ["holds no region", "--roi"]),
        (tmp("bad", "none.geojson"), ["no such file", "--roi"]),
    ]
    for i, (path, parts) in enumerate(cases):
        code, _, err = tile(["R1"], f"st_err{i}", "--roi", path)
        expect(code == 2 and os.path.basename(path) in err and all(p in err for p in parts),
               f"{os.path.basename(path)}: exit {code}, expected 2 naming {parts}: {err[-800:]}")
        expect(not os.path.exists(tmp(f"st_err{i}", "data.mdb")) or
               not any(k.startswith("done/") for k in read_tile_store(tmp(f"st_err{i}"))[0]),
               f"{os.path.basename(path)}: nothing tiled")
    far = bad("far.geojson", {"type": "FeatureCollection", "features": [
        feature(poly(rect(10000, 10000, 11000, 11000)), "Tumor")]})
    code, summary, err = tile(["R1"], "st_far", "--roi", far)
    expect(code == 4 and summary["slides"][0]["status"] == "empty" and
           "lie outside the slide" in err and "far.geojson" in err,
           f"regions outside the slide: exit {code}, a warning: {err[-800:]}")
    code, _, err = tile(["R1", "R2"], "st_err_one", "--roi", tmp("roi", "R1.geojson"))
    expect(code == 1 and "one file" in err, f"one file, two slides: exit {code}: {err[-500:]}")
    code, _, err = tile(["R1"], "st_err_opt", "--roi-class", "Tumor")
    expect(code == 1 and "--roi-class needs --roi" in err, f"--roi-class alone: {code}: {err[-500:]}")
    code, _, err = tile(["R1"], "st_err_min", "--roi", tmp("roi"), "--min-roi", "1.5")
    expect(code == 1 and "--min-roi" in err, f"--min-roi 1.5: {code}: {err[-500:]}")


def check_resume():
    """A rerun skips; other --roi settings are refused; a changed ROI file is refused."""
    tile_ok(["R1"], "st_resume", "--roi", tmp("roi"))
    summary, _ = tile_ok(["R1"], "st_resume", "--roi", tmp("roi"))
    expect(summary["slides"][0]["status"] == "skipped", f"rerun: {summary['slides'][0]['status']}")
    code, _, err = tile(["R1"], "st_resume", "--roi", tmp("roi"), "--min-roi", "0.8")
    expect(code == 1 and "roi" in err, f"another --min-roi: exit {code}: {err[-500:]}")
    code, _, err = tile(["R1"], "st_resume")
    expect(code == 1 and "roi" in err, f"no --roi into an --roi store: exit {code}: {err[-500:]}")
    changed = tmp("roi2")
    os.makedirs(changed, exist_ok=True)
    doc = {"type": "FeatureCollection",
           "features": R1_FEATURES + [feature(poly(rect(0, 1200, 300, 1500)), "Tumor")]}
    write_json(os.path.join(changed, "R1.geojson"), doc)
    code, _, err = tile(["R1"], "st_resume", "--roi", changed)
    expect(code == 2 and "regions changed" in err and "R1.geojson" in err and "--overwrite" in err,
           f"a changed ROI file: exit {code}: {err[-800:]}")
    tile_ok(["R1"], "st_resume", "--roi", changed, "--overwrite")
    meta, got = store_tiles(tmp("st_resume"), "R1")
    expect(meta["slides/R1"]["roi"]["file"] == os.path.join(changed, "R1.geojson"),
           "--overwrite tiles with the new file")


def check_shard_merge():
    """--shard I/2 with --roi, merged, equals one run; a store without --roi does not merge."""
    for i in range(2):
        tile_ok(["R1", "R2"], f"st_sh{i}", "--roi", tmp("roi"), "--shard", f"{i}/2")
    tile_ok(["R1", "R2"], "st_sh_all", "--roi", tmp("roi"))
    code, _, err = run([mltool, "tile", "--merge", tmp("st_sh0"), tmp("st_sh1"), "-o",
                        tmp("st_sh_merged"), "-q"])
    expect(code == 0, f"--merge: exit {code}: {err}")
    merged, _ = read_tile_store(tmp("st_sh_merged"))
    single, _ = read_tile_store(tmp("st_sh_all"))
    for k in ("store", "tiles/R1", "tiles/R2"):
        expect(merged[k] == single[k], f"merged {k} differs from one run's")
    for sid in ("R1", "R2"):
        expect(merged[f"slides/{sid}"]["roi"] == single[f"slides/{sid}"]["roi"], f"{sid}'s roi")
    tile_ok(["R3"], "st_sh_plain")
    code, _, err = run([mltool, "tile", "--merge", tmp("st_sh_all"), tmp("st_sh_plain"), "-o",
                        tmp("st_sh_mixed"), "-q"])
    expect(code == 1 and "roi" in err, f"merging with and without --roi: exit {code}: {err}")


def check_keep_going():
    """--keep-going: the slide with a bad ROI file fails alone, the others are tiled."""
    code, summary, err = tile(["R1", "R4", "R2"], "st_kg", "--roi", tmp("roi"), "--keep-going")
    expect(code == 4 and summary is not None, f"exit {code}, expected 4: {err[-800:]}")
    status = {s["id"]: s["status"] for s in summary["slides"]}
    expect(status == {"R1": "tiled", "R4": "failed", "R2": "tiled"}, f"statuses {status}")
    r4 = next(s for s in summary["slides"] if s["id"] == "R4")
    expect("R4.geojson" in r4["error"] and "feature 1" in r4["error"], f"R4's error: {r4['error']}")


def check_qc():
    """The QC picture outlines the regions in orange, and says so in its caption."""
    tile_ok(["R1"], "st_qc", "--roi", tmp("roi"), "--qc", tmp("qc_roi"))
    tile_ok(["R1"], "st_qc_plain", "--qc", tmp("qc_plain"))
    def orange(path):
        a = np.asarray(Image.open(path).convert("RGB"))
        return int(np.all(a == ORANGE, axis=2).sum())
    n = orange(tmp("qc_roi", "R1.png"))
    expect(n > 500, f"{n} orange pixels in the QC picture with --roi")
    expect(orange(tmp("qc_plain", "R1.png")) == 0, "no orange without --roi")
    # the outline follows the tumour's left edge (x 100.5 of 2048, at 1024 px: about x 50)
    a = np.asarray(Image.open(tmp("qc_roi", "R1.png")).convert("RGB"))
    col = np.all(a[150:300, 48:53] == ORANGE, axis=2)
    expect(col.any(axis=1).mean() > 0.9, "the tumour's left edge is drawn")


def check_extract():
    """extract SLIDE... --roi: its coordinates store keeps the tiles tile keeps."""
    tile_ok(["R1", "R2"], "st_ex", "--roi", tmp("roi"))
    code, summary, err = run_json([mltool, "extract", slide("R1"), slide("R2"), "-o", tmp("ex"),
                                   "--model", "builtin:color-texture", *GEOMETRY, "--roi",
                                   tmp("roi"), "--json"])
    expect(code == 0, f"extract --roi: exit {code}: {err[-1500:]}")
    coords, _ = read_tile_store(tmp("ex", "coordinates.lmdb"))
    tiles, _ = read_tile_store(tmp("st_ex"))
    for k in ("tiles/R1", "tiles/R2"):
        expect(coords[k] == tiles[k], f"{k}: the coordinates store's differs from tile's")
    expect(coords["slides/R1"]["roi"] == tiles["slides/R1"]["roi"], "the roi record")
    rows = sum(len(coords[k]["x"]) for k in ("tiles/R1", "tiles/R2"))
    feats = np.load(tmp("ex", "features.npy"), mmap_mode="r")
    expect(feats.shape[0] == rows, f"{feats.shape[0]} feature rows for {rows} tiles")


run_checks("roi", [check_shares, check_classes_and_min_roi, check_with_tissue, check_missing,
                   check_errors, check_resume, check_shard_merge, check_keep_going, check_qc,
                   check_extract], only, fixtures)
