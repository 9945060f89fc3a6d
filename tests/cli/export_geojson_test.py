"""mltool export geojson, end to end: slides made by scripts/fixtures/make_slides.py (in a
child process), tiled by mltool tile, exported; the GeoJSON read back with shapely (every
geometry valid, exteriors counter-clockwise and holes clockwise as RFC 7946 has them), each
tile square compared with the store's records read by python-lmdb, the tissue outline with
the store's mask (decoded by Pillow) and with the tissue rectangles the slides were drawn
with.

    export_geojson_test.py MLTOOL [TEST...]     # TEST: check_* names without check_
"""
import base64
import io
import json
import os
import shutil
import sys

import lmdb
import numpy as np
from PIL import Image
from shapely.geometry import Point, box, shape
from shapely.ops import unary_union
from shapely.validation import explain_validity

from cli_common import expect, run, run_checks, run_json, tmp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "fixtures"))
import make_slides  # noqa: E402  (imports pyvips only in its child processes)

mltool = os.path.abspath(sys.argv[1])
only = set(sys.argv[2:])

# Level-0 pixels at 0.25 µm/px: at the default --mpp 0.5 a 256-px tile covers 512 × 512.
# B's tissue is a frame around glass: its outline has a hole.
SLIDES = {
    "A": ((4096, 3072), [(512, 512, 2048, 2048), (2560, 1024, 3584, 2560)]),
    "B": ((4096, 4096), [(512, 512, 3584, 1536), (512, 2560, 3584, 3584),
                         (512, 1536, 1536, 2560), (2560, 1536, 3584, 2560)]),
}


def make_fixtures():
    os.makedirs(tmp("slides"))
    make_slides.generate([["generic_tiff", [tmp("slides", f"{sid}.tif"), *size, 0.25, regions],
                           {"min_level": 256}] for sid, (size, regions) in SLIDES.items()])
    paths = [tmp("slides", f"{sid}.tif") for sid in SLIDES]
    code, _, err = run([mltool, "tile", *paths, "-o", tmp("tiles.lmdb")])
    expect(code == 0, f"mltool tile: exit {code}: {err}")
    code, _, err = run([mltool, "tile", *paths, "-o", tmp("none.lmdb"), "--tissue", "none",
                        "--mpp", "1"])
    expect(code == 0, f"mltool tile --tissue none: exit {code}: {err}")


def store_meta(path):
    """Every meta record of a store, JSON-decoded, by key."""
    env = lmdb.open(path, readonly=True, lock=False, max_dbs=8)
    meta = env.open_db(b"meta", create=False)
    with env.begin() as txn:
        out = {k.decode(): json.loads(v) for k, v in txn.cursor(db=meta)}
    env.close()
    return out


def export(*args):
    """mltool export geojson ARGS --json: (exit code, summary, stderr)."""
    return run_json([mltool, "export", "geojson", *args, "--json"])


def read_features(path):
    doc = json.load(open(path))
    expect(doc.get("type") == "FeatureCollection", f"{path}: not a FeatureCollection")
    for f in doc["features"]:
        expect(f.get("type") == "Feature", f"{path}: {f.get('type')} is no Feature")
        g = shape(f["geometry"])
        expect(g.geom_type == "Polygon", f"{path}: geometry {g.geom_type}")
        expect(g.is_valid, f"{path}: invalid {f['properties'].get('name')}: "
                           f"{explain_validity(g)}")
        expect(g.exterior.is_ccw and not any(r.is_ccw for r in g.interiors),
               f"{path}: {f['properties'].get('name')}: rings not oriented as RFC 7946")
        c = f["properties"].get("classification", {})
        expect(isinstance(c.get("name"), str) and len(c.get("color", [])) == 3,
               f"{path}: classification {c}")
    tissue = [f for f in doc["features"] if f["properties"]["objectType"] == "annotation"]
    tiles = [f for f in doc["features"] if f["properties"]["objectType"] != "annotation"]
    return tissue, tiles


def check_tiles_and_outline(sid, meta, tissue, tiles, object_type="tile"):
    slide, rec, done = meta[f"slides/{sid}"], meta[f"tiles/{sid}"], meta[f"done/{sid}"]
    size = slide["size_level0"]
    expect(len(tiles) == len(rec["row"]) == done["tiles"] > 0,
           f"{sid}: {len(tiles)} tile features, the store keeps {len(rec['row'])}")
    for f, row, col, x, y, t in zip(tiles, rec["row"], rec["col"], rec["x"], rec["y"],
                                    rec["tissue"]):
        p = f["properties"]
        key = f"{sid}/{row:06d}_{col:06d}"
        expect(p["objectType"] == object_type, f"{key}: objectType {p['objectType']}")
        expect(p["name"] == key and p["key"] == key and (p["row"], p["col"]) == (row, col),
               f"{key}: properties {p}")
        expect(p["classification"]["name"] == "Tile", f"{key}: class {p['classification']}")
        expect(p["measurements"]["Tissue fraction"] == t == p["tissue"],
               f"{key}: tissue {p['measurements']} vs {t}")
        g = shape(f["geometry"])
        expect(np.allclose(g.bounds, (x, y, x + size, y + size), atol=0.01),
               f"{key}: {g.bounds} is not the tile at ({x}, {y}) of side {size}")
        expect(abs(g.area - size * size) < 1, f"{key}: area {g.area}")
    if not tissue:
        return None
    for i, f in enumerate(tissue):
        p = f["properties"]
        expect(p["classification"]["name"] == "Tissue" and p["name"] == f"Tissue {i + 1}",
               f"{sid}: outline properties {p}")
    outline = unary_union([shape(f["geometry"]) for f in tissue])
    # The outline is the mask, exactly: its area is the mask's tissue pixels times their size.
    m = meta[f"mask/{sid}"]
    png = np.array(Image.open(io.BytesIO(base64.b64decode(m["png"]))))
    expect(png.shape == (m["height"], m["width"]) and set(np.unique(png)) <= {0, 255},
           f"{sid}: mask PNG {png.shape} {np.unique(png)}")
    thumb = slide["thumbnail"]
    expect((m["width"], m["height"]) == (thumb["width"], thumb["height"]),
           f"{sid}: mask {m['width']}x{m['height']}, thumbnail {thumb}")
    dx, dy = m["downsample"]
    want = (png > 0).sum() * dx * dy
    expect(abs(outline.area - want) <= 1e-4 * want,
           f"{sid}: outline area {outline.area:.0f}, mask {want:.0f}")
    expect(abs((png > 0).mean() - done["tissue_fraction"]) < 1e-9,
           f"{sid}: mask tissue share {(png > 0).mean()} vs done {done['tissue_fraction']}")
    # ... and it is where the slide's tissue was drawn.
    drawn = unary_union([box(*r) for r in SLIDES[sid][1]])
    iou = outline.intersection(drawn).area / outline.union(drawn).area
    expect(iou > 0.9, f"{sid}: outline vs drawn tissue IoU {iou:.3f}")
    inside = sum(outline.contains(Point(x + size / 2, y + size / 2))
                 for x, y in zip(rec["x"], rec["y"]))
    expect(inside >= 0.95 * len(rec["x"]), f"{sid}: {inside}/{len(rec['x'])} tile centres "
                                           "inside the outline")
    return outline


def check_export():
    out = tmp("geo")
    code, summary, err = export(tmp("tiles.lmdb"), "-o", out)
    expect(code == 0, f"exit {code}: {err}")
    expect(summary["command"] == "export geojson" and summary["written"] == 2
           and summary["skipped"] == 0 and summary["without_mask"] == 0,
           f"summary {summary}")
    meta = store_meta(tmp("tiles.lmdb"))
    total = 0
    for s in summary["slides"]:
        sid = s["id"]
        expect(s["file"] == os.path.join(out, f"{sid}.geojson") and s["status"] == "written",
               f"summary entry {s}")
        tissue, tiles = read_features(s["file"])
        outline = check_tiles_and_outline(sid, meta, tissue, tiles)
        expect(outline is not None and s["outline_polygons"] == len(tissue),
               f"{sid}: {len(tissue)} outline polygons, summary {s['outline_polygons']}")
        total += len(tiles)
        if sid == "B":
            expect(sum(len(list(shape(f["geometry"]).interiors)) for f in tissue) >= 1,
                   "B's frame of tissue has a hole")
    expect(summary["tiles"] == total, f"summary tiles {summary['tiles']} vs {total}")
    expect(sorted(os.listdir(out)) == ["A.geojson", "B.geojson"], f"DIR holds {os.listdir(out)}")


def check_resume():
    out = tmp("resume")
    expect(export(tmp("tiles.lmdb"), "-o", out)[0] == 0, "first export")
    a = open(os.path.join(out, "A.geojson"), "rb").read()
    os.remove(os.path.join(out, "B.geojson"))
    stale = os.path.join(out, "B.geojson.partial-4194303-0")  # a killed writer's leftover
    open(stale, "w").write("{")
    code, summary, err = export(tmp("tiles.lmdb"), "-o", out)
    expect(code == 0, f"exit {code}: {err}")
    status = {s["id"]: s["status"] for s in summary["slides"]}
    expect(status == {"A": "skipped", "B": "written"} and summary["written"] == 1,
           f"rerun: {status}")
    expect(not os.path.exists(stale), "a stale partial file is removed")
    expect(open(os.path.join(out, "A.geojson"), "rb").read() == a, "A.geojson untouched")
    code, summary, err = export(tmp("tiles.lmdb"), "-o", out, "--overwrite")
    expect(code == 0 and summary["written"] == 2, f"--overwrite: {summary} {err}")
    expect(open(os.path.join(out, "A.geojson"), "rb").read() == a, "the same bytes again")


def check_without_mask():
    # A store written before masks were kept: the same store without its mask records.
    old = tmp("old.lmdb")
    shutil.copytree(tmp("tiles.lmdb"), old)
    env = lmdb.open(old, max_dbs=8)
    meta = env.open_db(b"meta", create=False)
    with env.begin(write=True) as txn:
        for sid in SLIDES:
            txn.delete(f"mask/{sid}".encode(), db=meta)
    env.close()
    for store in (old, tmp("none.lmdb")):
        out = tmp("nomask-" + os.path.basename(store))
        code, summary, err = export(store, "-o", out, "--tile-object", "detection")
        expect(code == 0, f"{store}: exit {code}: {err}")
        expect(summary["without_mask"] == 2 and
               all(s["outline_polygons"] is None for s in summary["slides"]),
               f"{store}: summary {summary}")
        expect("no tissue mask" in err, f"{store}: no warning: {err}")
        meta = store_meta(store)
        for sid in SLIDES:
            tissue, tiles = read_features(os.path.join(out, f"{sid}.geojson"))
            expect(not tissue, f"{store}: {sid} has outline features without a mask")
            check_tiles_and_outline(sid, meta, tissue, tiles, object_type="detection")


def check_noisy_mask():
    # Masks with every awkward shape: pixels meeting at corners, holes touching exteriors,
    # islands in lakes. GEOS (shapely) must find every polygon valid, the polygons must not
    # overlap, and together they must cover the mask exactly.
    store = tmp("noisy.lmdb")
    shutil.copytree(tmp("tiles.lmdb"), store)
    rng = np.random.default_rng(7)
    env = lmdb.open(store, max_dbs=8)
    meta = env.open_db(b"meta", create=False)
    masks = {}
    with env.begin(write=True) as txn:
        for sid, p in (("A", 0.5), ("B", 0.75)):
            m = json.loads(txn.get(f"mask/{sid}".encode(), db=meta))
            png = (rng.random((m["height"], m["width"])) < p).astype(np.uint8) * 255
            buf = io.BytesIO()
            Image.fromarray(png, "L").save(buf, format="PNG")
            m["png"] = base64.b64encode(buf.getvalue()).decode()
            txn.put(f"mask/{sid}".encode(), json.dumps(m).encode(), db=meta)
            masks[sid] = (png, m["downsample"])
    env.close()
    code, summary, err = export(store, "-o", tmp("noisy"))
    expect(code == 0, f"exit {code}: {err}")
    for sid, (png, (dx, dy)) in masks.items():
        tissue, _ = read_features(tmp("noisy", f"{sid}.geojson"))  # each one valid
        polygons = [shape(f["geometry"]) for f in tissue]
        union = unary_union(polygons)
        want = (png > 0).sum() * dx * dy
        total = sum(p.area for p in polygons)
        expect(abs(total - want) <= 1e-4 * want and abs(union.area - want) <= 1e-4 * want,
               f"{sid}: {len(polygons)} polygons of area {total:.0f} (union {union.area:.0f}), "
               f"mask {want:.0f}")
        holes = sum(len(p.interiors) for p in polygons)
        expect(holes > 0 and len(polygons) > 10, f"{sid}: {len(polygons)} polygons, {holes} holes")


def check_slide_option():
    out = tmp("one")
    code, summary, err = export(tmp("tiles.lmdb"), "-o", out, "--slide", "B")
    expect(code == 0 and [s["id"] for s in summary["slides"]] == ["B"], f"{summary} {err}")
    expect(os.listdir(out) == ["B.geojson"], f"DIR holds {os.listdir(out)}")
    code, _, err = export(tmp("tiles.lmdb"), "-o", tmp("none-out"), "--slide", "Z")
    expect(code == 2 and "Z" in err and "tiles.lmdb" in err and "no such slide" in err,
           f"--slide Z: exit {code}: {err}")
    code, _, err = run([mltool, "export", "geojson", tmp("tiles.lmdb"), "-o", tmp("stdin-out"),
                        "--slide", "-"], stdin="# ids\nA\n\n")
    expect(code == 0 and os.listdir(tmp("stdin-out")) == ["A.geojson"], f"--slide -: {err}")


def check_bad_input():
    os.makedirs(tmp("emptydir"))
    open(tmp("plain.txt"), "w").write("not a store")
    for store, what in ((tmp("emptydir"), "emptydir"), (tmp("plain.txt"), "plain.txt"),
                        (tmp("missing.lmdb"), "missing.lmdb")):
        code, out, err = run([mltool, "export", "geojson", store, "-o", tmp("bad-out")])
        expect(code == 2 and what in err and "error" in err and not out,
               f"{what}: exit {code}: {err}")
    # An LMDB that is no tile store.
    env = lmdb.open(tmp("other.lmdb"), max_dbs=8)
    env.open_db(b"tiles"), env.open_db(b"meta")
    env.close()
    code, _, err = run([mltool, "export", "geojson", tmp("other.lmdb"), "-o", tmp("bad-out")])
    expect(code == 2 and "not a tile store" in err, f"other.lmdb: exit {code}: {err}")
    code, _, err = run([mltool, "export", "geojson", tmp("tiles.lmdb")])
    expect(code == 1 and "--output" in err, f"without -o: exit {code}: {err}")
    code, _, err = run([mltool, "export", "geojson", tmp("tiles.lmdb"), "-o", tmp("x"),
                        "--tile-object", "cell"])
    expect(code == 1 and "tile-object" in err, f"--tile-object cell: exit {code}: {err}")


def check_help():
    code, out, _ = run([mltool, "export", "geojson", "--help"])
    expect(code == 0 and "mltool export geojson" in out and "--tile-object" in out,
           f"export geojson --help: {code} {out}")
    code2, out2, _ = run([mltool, "help", "export", "geojson"])
    expect(code2 == 0 and out2 == out, "mltool help export geojson is the same text")
    code, out, _ = run([mltool, "export", "geojson"])
    expect(code == 1 and "--output" in out, f"export geojson alone: usage, exit 1: {code}")
    code, out, _ = run([mltool, "export"])
    expect(code == 1 and "geojson" in out, f"export alone: usage, exit 1: {code} {out}")
    code, out, _ = run([mltool, "help", "export", "geojson", "--json"])
    names = {n for o in json.loads(out) for n in o["names"]}
    expect({"--output", "--slide", "--tile-object", "--overwrite"} <= names, f"{names}")
    code, out, _ = run([mltool, "--help"])
    expect("export" in out, "mltool --help lists export")


run_checks("export geojson", [check_export, check_resume, check_without_mask, check_noisy_mask,
                              check_slide_option, check_bad_input, check_help],
           only, fixtures=make_fixtures)
