"""mltool view (issue 55): a site of deep-zoom slide pages, checked in real headless Chromium
(Debian's chromium, driven through its DevTools protocol: cdp.py) against OpenSlide 4
(openslide-python on openslide-bin) and the tile store (python-lmdb):

- each page loads over file:// and Chromium's network log holds no request that is not file://;
- the first view shows the whole slide: the screenshot over the slide matches its thumbnail;
- zoomed to the finest level, a region of the screenshot equals OpenSlide's level-0 read_region
  within JPEG error;
- hovering over a tile of the tile grid shows its key and tissue fraction in the DOM;
- the index lists every slide and each link opens its page;
- the slide named `a&b #1.svs` (HTML and URL syntax in its name) works throughout;
- a rerun resumes: finished pyramids are kept;
- a predict output directory (written here as predict writes one: predictions.csv,
  attention.csv, .predict/job.json naming the tile store) opens with its first label's heatmap
  on: each predicted tile's pixels are the slide's blended half and half with the colour bar's
  colour for its value; every layer is in the menu, hover shows the values, the index shows
  the call; a label that is HTML stays text; a value that is not a number is refused, naming
  the file and line;
- predict --view writes the site into the prediction, and its report.html links each slide to
  its page; train --view predicts the validation slides into the run with their site, and the
  run's report.html links each to its page.

    view_test.py MLTOOL [--screenshots DIR] [TEST...]

--screenshots DIR also writes the pictures docs/view.md shows (the same browser, same pages).
"""
import csv
import io
import json
import os
import shutil
import sys
import urllib.parse

import numpy as np
import openslide
from PIL import Image

from cdp import Browser, chromium
from cli_common import expect, run, run_checks, tmp
from store_refs import read_tile_store

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "fixtures"))
import make_slides  # noqa: E402  (imports pyvips only in its child processes)

args = sys.argv[1:]
mltool = os.path.abspath(args.pop(0))
shots = None
if "--screenshots" in args:
    i = args.index("--screenshots")
    shots = os.path.abspath(args[i + 1])
    del args[i:i + 2]
only = set(args)

SPECIAL = "a&b #1"  # tiled into a store, viewed from it
PLAIN = "plain"  # viewed directly
SIZE = {SPECIAL: (3000, 2100), PLAIN: (1700, 1300)}
W, H = 1000, 800  # the browser's viewport


def make_fixtures():
    make_slides.generate([
        ["aperio_svs", [tmp(SPECIAL + ".svs"), *SIZE[SPECIAL],
                        [(300, 250, 1800, 1500), (2000, 900, 2800, 1900)]], {"quality": 80}],
        ["generic_tiff", [tmp(PLAIN + ".tif"), *SIZE[PLAIN], 0.5, [(200, 200, 1400, 1100)]],
         {"compression": "jpeg", "quality": 85, "min_level": 256}],
    ])
    code, _, err = run([mltool, "tile", tmp(SPECIAL + ".svs"), "-o", tmp("store"),
                        "--tile-size", "224", "--mpp", "0.5"])
    expect(code == 0, f"tile: exit {code}: {err}")
    code, out, err = run([mltool, "view", tmp("store"), tmp(PLAIN + ".tif"), "-o", tmp("site"),
                          "--json"])
    expect(code == 0, f"view: exit {code}: {err}")
    global SITE_JSON
    SITE_JSON = json.loads(out)
    write_predictions(tmp("pred"))
    return f"site of {len(SITE_JSON['slides'])} slides"


EVIL = '<img src=x onerror="document.title=1">'  # a label from someone else's table
LABELS = ["benign", EVIL]


def prob(i):
    return (i % 7) / 6  # every tile's probability of "benign": 0, 1/6, ..., 1


def write_predictions(out, bad=False):
    """A predict output directory of a tile model, as predict writes one."""
    meta, _ = read_tile_store(tmp("store"))
    rec = meta[f"tiles/{SPECIAL}"]
    keys = [f"{SPECIAL}/{r:06d}_{c:06d}" for r, c in zip(rec["row"], rec["col"])]
    os.makedirs(os.path.join(out, ".predict"), exist_ok=True)
    with open(os.path.join(out, ".predict", "job.json"), "w") as f:
        json.dump({"heatmaps": tmp("store"), "label": ""}, f)
    with open(os.path.join(out, "predictions.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["sample", "slide", "prediction"] + [f"logit_{x}" for x in LABELS]
                   + [f"prob_{x}" for x in LABELS])
        for i, k in enumerate(keys):
            p = prob(i)
            w.writerow([k, SPECIAL, LABELS[0] if p >= 0.5 else EVIL, 0, 0,
                        "nan" if bad and i == 3 else f"{p:.9g}", f"{1 - p:.9g}"])
    with open(os.path.join(out, "attention.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["key", "slide", "attention"])
        for i, k in enumerate(keys):
            w.writerow([k, SPECIAL, (i + 1) / len(keys)])
    return keys


SITE_JSON = None


def url(name, site="site"):
    return "file://" + urllib.parse.quote(tmp(site, name))


def slide_of(id_):
    return openslide.OpenSlide(tmp(id_ + (".svs" if id_ == SPECIAL else ".tif")))


def page_point(b, x, y):
    """Level-0 pixel (x, y) as a point of the viewport."""
    return b.eval(f"(() => {{ const r = document.getElementById('map').getBoundingClientRect();"
                  f" const p = mltoolView.toContainer({x}, {y});"
                  f" return [p.x + r.left, p.y + r.top]; }})()")


def png(data):
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).astype(np.int32)


def only_file_requests(b, what):
    others = [u for u in b.requests if not u.startswith("file://")]
    expect(b.requests, f"{what}: no request recorded")
    expect(not others, f"{what}: requests that are not file://: {others[:5]}")
    expect(not b.exceptions, f"{what}: script exceptions: {b.exceptions[:3]}")


def save(name, data):
    """A screenshot for docs/view.md (--screenshots DIR), in 256 colours to keep it small."""
    if shots:
        os.makedirs(shots, exist_ok=True)
        Image.open(io.BytesIO(data)).convert("RGB").quantize(256).save(
            os.path.join(shots, name), optimize=True)


# ---------------------------------------------------------------- checks

def check_site_files():
    ids = [s["id"] for s in SITE_JSON["slides"]]
    expect(ids == [SPECIAL, PLAIN], f"slides {ids}")
    for id_ in ids:
        for name in (id_ + ".html", id_ + ".data.js", id_ + ".dzi", id_ + "_files/0/0_0.jpeg"):
            expect(os.path.isfile(tmp("site", name)), f"{name} missing")
    for name in ("index.html", "viewer.js", "viewer.css", "leaflet/leaflet.js"):
        expect(os.path.isfile(tmp("site", name)), f"{name} missing")
    special = SITE_JSON["slides"][0]
    expect(special["tiles"] >= 8 and special["levels"] == 13, f"{special}")
    page = open(tmp("site", SPECIAL + ".html"), encoding="utf-8").read()
    expect("a&amp;b #1" in page and 'src="a%26b%20%231.data.js"' in page, "escaping in the page")


def check_first_view_and_level0():
    for id_ in (SPECIAL, PLAIN):
        with Browser(W, H) as b:
            b.open(url(id_ + ".html"), "window.mltoolView")
            only_file_requests(b, id_)
            shot = png(b.screenshot())
            if id_ == SPECIAL:
                save("first.png", b.screenshot())
            sw, sh = SIZE[id_]
            (x0, y0), (x1, y1) = page_point(b, 0, 0), page_point(b, sw, sh)
            expect(x1 - x0 > 300 and y1 - y0 > 200, f"{id_}: the slide covers {x0, y0, x1, y1}")
            ix0, iy0, ix1, iy1 = (int(round(v)) for v in (x0, y0, x1, y1))
            seen = shot[iy0 + 2:iy1 - 2, ix0 + 2:ix1 - 2]
            thumb = slide_of(id_).get_thumbnail((ix1 - ix0, iy1 - iy0)).convert("RGB")
            ref = np.asarray(thumb.resize((ix1 - ix0, iy1 - iy0), Image.BILINEAR)).astype(np.int32)
            ref = ref[2:-2, 2:-2]
            diff = np.abs(seen - ref).mean()
            expect(diff < 6, f"{id_}: first view against the thumbnail: mean |diff| {diff:.2f}")
            expect(ref.std() > 20, f"{id_}: thumbnail without tissue")
            check_level0(b, id_)


def check_level0(b, id_):
    levels = b.eval("mltoolView.levels")
    cx, cy = (800, 700) if id_ == SPECIAL else (700, 600)
    b.eval(f"mltoolView.setView({cx}, {cy}, {levels - 1})")
    b.settle()
    shot = png(b.screenshot())
    px, py = page_point(b, cx - 150, cy - 100)
    expect(abs(px - round(px)) < 0.01 and abs(py - round(py)) < 0.01, f"{id_}: {px, py}")
    px, py = int(round(px)), int(round(py))
    seen = shot[py:py + 200, px:px + 300]
    ref = np.asarray(slide_of(id_).read_region((cx - 150, cy - 100), 0, (300, 200))
                     .convert("RGB")).astype(np.int32)
    diff = np.abs(seen - ref).mean()
    expect(ref.std() > 20, f"{id_}: the level-0 region has no tissue")
    expect(diff < 5, f"{id_}: level 0 against read_region: mean |diff| {diff:.2f}")


def check_hover_shows_tile():
    meta, tiles = read_tile_store(tmp("store"))
    with Browser(W, H) as b:
        b.open(url(SPECIAL + ".html"), "window.mltoolView")
        expect(b.eval("mltoolView.names().sort().join(',')") ==
               "Tile grid,Tissue outline", "overlays")
        b.eval("mltoolView.show('Tile grid', true); mltoolView.show('Tissue outline', true)")
        b.settle()
        rec = meta[f"tiles/{SPECIAL}"]
        i = len(rec["row"]) // 2
        size = meta[f"slides/{SPECIAL}"]["size_level0"]
        x, y = page_point(b, rec["x"][i] + size / 2, rec["y"][i] + size / 2)
        b.mouse(x, y)
        key = f"{SPECIAL}/{rec['row'][i]:06d}_{rec['col'][i]:06d}"
        shown = b.eval("document.getElementById('tileinfo').dataset.key || ''")
        text = b.eval("document.getElementById('tileinfo').textContent")
        expect(shown == key, f"hovered tile: {shown!r}, expected {key!r}")
        expect(key in text and f"{rec['tissue'][i]:.3f}" in text, f"tile info: {text!r}")
        save("tooltip.png", b.screenshot())
        b.eval("mltoolView.show('Tile grid', false)")
        expect(b.eval("document.getElementById('tileinfo').hidden"), "info hidden with the grid")


def check_index_links_open():
    with Browser(W, H) as b:
        b.open(url("index.html"))
        only_file_requests(b, "index.html")
        rows = b.eval("Array.from(document.querySelectorAll('a.slide'))"
                      ".map(a => [a.textContent, a.href])")
        expect([r[0] for r in rows] == [SPECIAL, PLAIN], f"index rows {rows}")
        thumbs = b.eval("Array.from(document.querySelectorAll('img.thumb'))"
                        ".map(i => i.naturalWidth)")
        expect(len(thumbs) == 2 and all(w > 50 for w in thumbs), f"thumbnails {thumbs}")
        for name, href in rows:
            b.open(href, "window.mltoolView")
            expect(b.eval("document.querySelector('#bar .id').textContent") == name,
                   f"link {href} opened another page")
            only_file_requests(b, href)


def check_resume_keeps_pyramids():
    before = os.stat(tmp("site", SPECIAL + "_files", "0", "0_0.jpeg")).st_mtime_ns
    code, out, err = run([mltool, "view", tmp("store"), tmp(PLAIN + ".tif"), "-o", tmp("site"),
                          "--json"])
    expect(code == 0, f"rerun: exit {code}: {err}")
    expect(all(s["reused"] for s in json.loads(out)["slides"]), f"rerun: {out}")
    after = os.stat(tmp("site", SPECIAL + "_files", "0", "0_0.jpeg")).st_mtime_ns
    expect(before == after, "a finished pyramid was rewritten")
    expect(not [n for n in os.listdir(tmp("site")) if n.endswith(".partial")], "partials left")


def check_refusals():
    code, _, err = run([mltool, "view", tmp(PLAIN + ".tif"), "-o", tmp("nolib"),
                        "--leaflet", tmp("none")])
    expect(code != 0 and "--leaflet" in err and "libjs-leaflet" in err, f"no Leaflet: {err}")
    code, _, err = run([mltool, "view", tmp(PLAIN + ".tif"), tmp(PLAIN + ".tif"), "-o",
                        tmp("twice")])
    expect(code == 1 and "'plain'" in err, f"one id twice: exit {code}: {err}")


def check_predictions_heatmap():
    code, out, err = run([mltool, "view", tmp("pred"), "-o", tmp("psite"), "--json"])
    expect(code == 0, f"view PRED: exit {code}: {err}")
    doc = json.loads(out)["slides"]
    n = len(read_tile_store(tmp("store"))[0][f"tiles/{SPECIAL}"]["row"])
    wins = sum(prob(i) >= 0.5 for i in range(n))
    call = LABELS[0] if wins * 2 >= n else EVIL
    expect([s["id"] for s in doc] == [SPECIAL] and doc[0]["call"] == call, f"summary {doc}")
    meta, _ = read_tile_store(tmp("store"))
    rec, size = meta[f"tiles/{SPECIAL}"], meta[f"slides/{SPECIAL}"]["size_level0"]
    with Browser(W, H) as b:
        b.open(url(SPECIAL + ".html", "psite"), "window.mltoolView")
        only_file_requests(b, "predictions page")
        expect(b.eval("document.title") != "1" and not b.eval("document.querySelector("
                                                             "'img[src=x]')"), "a label ran")
        options = b.eval("Array.from(document.querySelectorAll('#heatmap option'))"
                         ".map(o => o.textContent)")
        want = ["none"] + [f"probability of {x}" for x in LABELS] + ["attention"]
        expect(options == want, f"menu {options}")
        expect(b.eval("mltoolView.heatmapShown()") == "probability of benign", "first label on")
        palette = b.eval("MLTOOL_VIEW.palette")
        on = png(b.screenshot())
        save("heatmap.png", b.screenshot())
        bar = b.eval("(() => { const r = document.querySelector('#colourbar canvas')"
                     ".getBoundingClientRect(); return [r.left, r.top, r.height]; })()")
        b.eval("mltoolView.heatmap('none')")
        b.settle()
        off = png(b.screenshot())
        worst, checked = 0, 0
        for i in range(n):
            x, y = (int(round(v)) for v in page_point(b, rec["x"][i] + size / 2,
                                                       rec["y"][i] + size / 2))
            if not (0 <= x < W and 40 <= y < H):
                continue
            colour = np.array([int(palette[round(prob(i) * 255)][k:k + 2], 16) for k in (1, 3, 5)])
            expected = (off[y - 3:y + 4, x - 3:x + 4] + colour) / 2
            worst = max(worst, np.abs(on[y - 3:y + 4, x - 3:x + 4] - expected).max())
            bx = int(bar[0] + round(prob(i) * 255) + 0.5)
            seen_bar = on[int(bar[1] + bar[2] / 2), bx]
            expect(np.abs(seen_bar - colour).max() <= 3,
                   f"colour bar at {prob(i):.3f}: {seen_bar}, palette {colour}")
            checked += 1
        expect(checked >= 5 and worst <= 4, f"{checked} tiles, largest error {worst}")
        b.eval("mltoolView.heatmap('attention')")
        x, y = page_point(b, rec["x"][2] + size / 2, rec["y"][2] + size / 2)
        b.mouse(x, y)
        text = b.eval("document.getElementById('tileinfo').textContent")
        expect(f"probability of benign: {prob(2):.4g}" in text.replace("0.0000", "0")
               and "attention" in text and EVIL in text, f"tile info {text!r}")
    with Browser(W, H) as b:
        b.open(url("index.html", "psite"))
        cell = b.eval("document.querySelector('td.call').textContent")
        expect(cell.startswith(call), f"index call {cell!r}")
        expect(not b.eval("document.querySelector('img[src=x]')"), "a label ran in the index")


def mltool_ok(*argv):
    code, out, err = run([mltool, *argv])
    expect(code == 0, f"{argv[0]}: exit {code}: {err}")
    return out


def check_predict_view():
    """predict --view on a real run (tile -> extract -> pack -> train of both slides): the site
    of the slides predicted in PRED/view/, report.html linking each slide's id to its page (in
    Chromium: the link opens the page with its first label's heatmap on, over file:// only),
    the site's index linking back to the report; a rerun without --view keeps the links and the
    pyramids; a prediction with no tile store to show is refused before it writes anything."""
    mltool_ok("tile", tmp(SPECIAL + ".svs"), tmp(PLAIN + ".tif"), "-o", tmp("pv_tiles"),
              "--tile-size", "224", "--mpp", "0.5", "-q")
    mltool_ok("extract", tmp("pv_tiles"), "-o", tmp("pv_feat"), "--model", "builtin:color-texture", "-q")
    with open(tmp("pv_labels.csv"), "w", newline="") as f:
        csv.writer(f).writerows([["key", "label"], [SPECIAL, "tumour"], [PLAIN, "stroma"]])
    mltool_ok("pack", tmp("pv_feat"), "--labels", tmp("pv_labels.csv"), "-o", tmp("pv_ds"),
              "--split", "train=0.5,val=0.5", "--seed", "1", "-q")
    with open(tmp("pv_mlp.json"), "w") as f:
        json.dump({"family": "mlp", "hidden": [8]}, f)
    mltool_ok("train", tmp("pv_ds"), "--model", tmp("pv_mlp.json"), "-o", tmp("pv_run"),
              "--epochs", "2", "--view", "-q")
    # train --view: the validation slide predicted into RUN/validation/ with its site, and the
    # run's report.html linking it to its page.
    split = json.load(open(tmp("pv_ds", "dataset.json")))["group_split"]
    val = [g for g, sp in split.items() if sp == "val"]
    expect(len(val) == 1, f"validation groups {split}")
    site = os.listdir(tmp("pv_run", "validation", "view"))
    expect(val[0] + ".html" in site and len([n for n in site if n.endswith(".html")]) == 2,
           f"train --view's site: {site}")
    import report_page
    links = report_page.parse(tmp("pv_run", "report.html")).links
    expect("validation/view/" + urllib.parse.quote(val[0]) + ".html" in links and
           "validation/report.html" in links, f"run report links {links}")
    # view RUN: the validation slides train --view predicted; a run without them is refused.
    doc = json.loads(mltool_ok("view", tmp("pv_run"), "-o", tmp("pv_runsite"), "--json"))["slides"]
    expect([s["id"] for s in doc] == val and doc[0]["call"], f"view RUN: {doc}")
    os.makedirs(tmp("pv_bare_run"), exist_ok=True)
    shutil.copy(tmp("pv_run", "run.json"), tmp("pv_bare_run", "run.json"))
    code, _, err = run([mltool, "view", tmp("pv_bare_run"), "-o", tmp("pv_baresite")])
    expect(code == 2 and "--view" in err and "pv_bare_run" in err, f"view of a run without validation/: {err}")
    pred = tmp("pv_pred")
    s = json.loads(mltool_ok("predict", tmp("pv_run"), tmp("pv_feat"), "-o", pred, "--slide", SPECIAL,
                             "--view", "--json"))
    expect(s["view"] == os.path.join(pred, "view", "index.html"), f"summary {s}")
    site = os.listdir(os.path.join(pred, "view"))
    expect(SPECIAL + ".html" in site and PLAIN + ".html" not in site, f"site of the slides predicted: {site}")
    page = report_page.parse(os.path.join(pred, "report.html"))
    link = urllib.parse.quote(SPECIAL) + ".html"
    expect("view/" + link in page.links and "view/index.html" in page.links, f"report links {page.links}")
    with Browser(W, H) as b:
        b.open("file://" + urllib.parse.quote(os.path.join(pred, "report.html")))
        href = b.eval(f"Array.from(document.querySelectorAll('a')).map(a => a.href)"
                      f".find(h => h.endsWith('/view/{link}'))")
        expect(href, "no link to the slide's page in the DOM")
        b.open(href, "window.mltoolView")
        only_file_requests(b, "the page report.html links")
        shown = b.eval("mltoolView.heatmapShown()")
        expect(b.eval("document.querySelector('#bar .id').textContent") == SPECIAL and
               shown == "probability of stroma", f"page opened: heatmap {shown!r}")
        b.open("file://" + urllib.parse.quote(os.path.join(pred, "view", "index.html")))
        back = b.eval("document.querySelector('td.call a').href")
        expect(back == "file://" + urllib.parse.quote(os.path.join(pred, "report.html")),
               f"index's link to the report: {back}")
    tile = os.path.join(pred, "view", SPECIAL + "_files", "0", "0_0.jpeg")
    before = os.stat(tile).st_mtime_ns
    s = json.loads(mltool_ok("predict", tmp("pv_run"), tmp("pv_feat"), "-o", pred, "--slide", SPECIAL,
                             "--json"))
    expect(s["view"] is None and s["resumed"] == 1, f"rerun summary {s}")
    expect("view/" + link in report_page.parse(os.path.join(pred, "report.html")).links,
           "a rerun without --view dropped the links to the site it has")
    expect(os.stat(tile).st_mtime_ns == before, "the rerun rewrote the pyramid")
    os.rename(tmp("pv_tiles"), tmp("pv_tiles_moved"))
    try:
        code, _, err = run([mltool, "predict", tmp("pv_run"), tmp("pv_feat"), "-o", tmp("pv_none"), "--view"])
    finally:
        os.rename(tmp("pv_tiles_moved"), tmp("pv_tiles"))
    expect(code == 1 and "--view" in err and "--tiles" in err and not os.path.exists(tmp("pv_none")),
           f"no tile store: exit {code}: {err}")
    # train --view without it: refused before training.
    os.rename(tmp("pv_tiles"), tmp("pv_tiles_moved"))
    try:
        code, _, err = run([mltool, "train", tmp("pv_ds"), "--model", tmp("pv_mlp.json"), "-o",
                            tmp("pv_run_none"), "--epochs", "1", "--view"])
    finally:
        os.rename(tmp("pv_tiles_moved"), tmp("pv_tiles"))
    expect(code == 1 and "--view" in err and not os.path.exists(tmp("pv_run_none")),
           f"train --view, no tile store: exit {code}: {err}")


ROI = [(400, 300, 900, 700)]  # level-0 box of PLAIN's region of interest


def write_roi(path, boxes, cls="Tumor"):
    feats = [{"type": "Feature", "properties": {"classification": {"name": cls}},
              "geometry": {"type": "Polygon", "coordinates": [[[x0, y0], [x1, y0], [x1, y1],
                                                               [x0, y1], [x0, y0]]]}}
             for x0, y0, x1, y1 in boxes]
    with open(path, "w") as f:
        json.dump({"type": "FeatureCollection", "features": feats}, f)


def outline_drawn(b, name, x, y, colour):
    """Whether switching overlay `name` on turns the pixel at level-0 (x, y) to `colour`."""
    px, py = (int(round(v)) for v in page_point(b, x, y))
    before = png(b.screenshot())[py - 1:py + 2, px - 1:px + 2]
    b.eval(f"mltoolView.show({json.dumps(name)}, true)")
    b.settle()
    after = png(b.screenshot())[py - 1:py + 2, px - 1:px + 2]
    near = np.abs(after - np.array(colour)).sum(axis=2).min()
    return near < 60 and np.abs(before - np.array(colour)).sum(axis=2).min() > 60


def check_roi_overlay():
    write_roi(tmp("roi.geojson"), ROI)
    code, _, err = run([mltool, "view", tmp(PLAIN + ".tif"), "-o", tmp("rsite"),
                        "--roi", tmp("roi.geojson")])
    expect(code == 0, f"view --roi: exit {code}: {err}")
    with Browser(W, H) as b:
        b.open(url(PLAIN + ".html", "rsite"), "window.mltoolView")
        expect(b.eval("mltoolView.names().join(',')") == "Regions of interest", "overlays")
        x0, y0, x1, y1 = ROI[0]
        expect(outline_drawn(b, "Regions of interest", x0, (y0 + y1) // 2 + 3, (224, 0, 224)),
               "the ROI's left edge is not drawn in its colour")
    code, _, err = run([mltool, "view", tmp(PLAIN + ".tif"), tmp(SPECIAL + ".svs"), "-o",
                        tmp("rsite2"), "--roi", tmp("roi.geojson")])
    expect(code == 1 and "directory" in err, f"one --roi file for two slides: {code} {err}")
    write_roi(tmp("bad.geojson"), [(0, 0, float("nan"), 5)])
    code, _, err = run([mltool, "view", tmp(PLAIN + ".tif"), "-o", tmp("rsite3"),
                        "--roi", tmp("bad.geojson")])
    expect(code != 0 and "bad.geojson" in err, f"a NaN in the ROI: {code} {err}")


def check_store_roi_and_artifacts():
    """A store tiled with --roi draws its regions; a segmenter's artifact classes (the class
    map of its mask record, written here as tile --tissue MODEL.pt writes it) are overlays."""
    import base64
    import shutil
    import lmdb
    write_roi(tmp("sroi.geojson"), [(500, 400, 1500, 1300)])
    code, _, err = run([mltool, "tile", tmp(SPECIAL + ".svs"), "-o", tmp("rstore"),
                        "--tile-size", "224", "--mpp", "0.5", "--roi", tmp("sroi.geojson")])
    expect(code == 0, f"tile --roi: {err}")
    env = lmdb.open(tmp("rstore"), max_dbs=8)
    with env.begin(write=True) as txn:
        meta = env.open_db(b"meta", txn=txn, create=False)
        key = f"mask/{SPECIAL}".encode()
        rec = json.loads(bytes(txn.get(key, db=meta)))
        classes = np.zeros((rec["height"], rec["width"]), np.uint8)
        classes[: rec["height"] // 3, : rec["width"] // 3] = 1
        buf = io.BytesIO()
        Image.fromarray(classes, "L").save(buf, format="PNG")
        rec["classes"] = {"names": ["tissue", EVIL], "tissue": ["tissue"], "artifacts": [EVIL],
                          "png": base64.b64encode(buf.getvalue()).decode()}
        txn.put(key, json.dumps(rec).encode(), db=meta)
    env.close()
    code, _, err = run([mltool, "view", tmp("rstore"), "-o", tmp("ssite")])
    expect(code == 0, f"view a store with ROI and artifacts: {err}")
    with Browser(W, H) as b:
        b.open(url(SPECIAL + ".html", "ssite"), "window.mltoolView")
        names = b.eval("mltoolView.names()")
        expect(names == ["Tissue outline", "Regions of interest", "Artifact: " + EVIL,
                         "Tile grid"], f"overlays {names}")
        labels = b.eval("Array.from(document.querySelectorAll('.leaflet-control-layers label'))"
                        ".map(l => l.textContent.trim())")
        expect(("Artifact: " + EVIL) in labels and not b.eval("document.querySelector("
                                                              "'img[src=x]')"), f"{labels}")
        expect(outline_drawn(b, "Regions of interest", 500, 850, (224, 0, 224)),
               "the store's ROI is not drawn")
        b.eval("mltoolView.show('Artifact: ' + " + json.dumps(EVIL) + ", true)")
        b.settle()
        save("artifacts.png", b.screenshot())


REAL_SVS = os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared", "slides",
                                        "CMU-1-Small-Region.svs"))


def blocks(a, k=4):
    h, w = a.shape[0] // k * k, a.shape[1] // k * k
    return a[:h, :w].reshape(h // k, k, w // k, k, 3).mean(axis=(1, 3))


def check_real_slide():
    """The scanner's slide (../shared/slides, where present): first view and level 0."""
    if not os.path.exists(REAL_SVS):
        print(f"skipped: real_slide: {REAL_SVS} is absent (see ../shared/slides/README.md)")
        return
    # 240 px: the scanner's own tile size, so its JPEG tiles pass through (interior ones).
    code, out, err = run([mltool, "view", REAL_SVS, "-o", tmp("real"), "--tile-size", "240",
                          "--json"])
    expect(code == 0, f"view the real slide: {err}")
    summary = json.loads(out)["slides"][0]
    expect(summary["passthrough"] >= 90, f"real slide: {summary}")
    ref_slide = openslide.OpenSlide(REAL_SVS)
    sw, sh = ref_slide.dimensions
    with Browser(W, H) as b:
        b.open(url("CMU-1-Small-Region.html", "real"), "window.mltoolView")
        only_file_requests(b, "the real slide")
        shot = png(b.screenshot())
        (x0, y0), (x1, y1) = page_point(b, 0, 0), page_point(b, sw, sh)
        ix0, iy0, ix1, iy1 = (int(round(v)) for v in (x0, y0, x1, y1))
        ref = np.asarray(ref_slide.get_thumbnail((ix1 - ix0, iy1 - iy0)).convert("RGB")
                         .resize((ix1 - ix0, iy1 - iy0), Image.BILINEAR)).astype(np.int32)
        # The browser and OpenSlide resample differently; fine detail (a scanner's JPEG at
        # quality 30) differs pixel by pixel, so compare 4 × 4 blocks' means.
        diff = np.abs(blocks(shot[iy0 + 2:iy1 - 2, ix0 + 2:ix1 - 2]) - blocks(ref[2:-2, 2:-2]))
        expect(diff.mean() < 5, f"real slide, first view: mean |diff| of 4x4 blocks "
                                f"{diff.mean():.2f}")
        b.eval(f"mltoolView.setView(1100, 1500, {b.eval('mltoolView.levels') - 1})")
        b.settle()
        shot = png(b.screenshot())
        px, py = (int(round(v)) for v in page_point(b, 950, 1400))
        ref = np.asarray(ref_slide.read_region((950, 1400), 0, (300, 200)).convert("RGB"))
        diff = np.abs(shot[py:py + 200, px:px + 300] - ref.astype(np.int32)).mean()
        expect(diff < 8, f"real slide, level 0: mean |diff| {diff:.2f}")


def check_passthrough():
    """A level's own JPEG tiles are the pyramid's where a DeepZoom tile is exactly one: the
    same bytes as the TIFF's (made standalone, as tile --passthrough stores them), so the same
    pixels as OpenSlide's; --passthrough never decodes and encodes every tile."""
    runs = {}
    for mode in ("auto", "never"):
        code, out, err = run([mltool, "view", tmp(PLAIN + ".tif"), "-o", tmp("pt-" + mode),
                              "--passthrough", mode, "--json"])
        expect(code == 0, f"--passthrough {mode}: {err}")
        runs[mode] = json.loads(out)["slides"][0]
    auto, never = runs["auto"], runs["never"]
    expect(never["passthrough"] == 0 and auto["passthrough"] > 20
           and auto["pyramid_tiles"] == never["pyramid_tiles"], f"{auto} {never}")
    ref = slide_of(PLAIN)
    top = auto["levels"] - 1
    for name in ("1_1.jpeg", "2_2.jpeg"):
        c, r = (int(v) for v in name[:-5].split("_"))
        seen = np.asarray(Image.open(tmp("pt-auto", PLAIN + "_files", str(top), name))
                          .convert("RGB")).astype(np.int32)
        want = np.asarray(ref.read_region((c * 256, r * 256), 0, (256, 256)).convert("RGB"))
        diff = np.abs(seen - want.astype(np.int32)).max()
        expect(diff <= 2, f"passed-through tile {name}: largest |diff| {diff}")


def check_bad_predictions_refused():
    write_predictions(tmp("badpred"), bad=True)
    code, _, err = run([mltool, "view", tmp("badpred"), "-o", tmp("badsite")])
    expect(code != 0 and "predictions.csv" in err and "line 5" in err and "nan" in err,
           f"a NaN probability: exit {code}: {err}")


if __name__ == "__main__":
    if chromium() is None:
        print("skipped: mltool view's pages need a browser: chromium is not installed "
              "(scripts/setup.sh installs Debian's chromium)")
        sys.exit(0)
    checks = [check_site_files, check_first_view_and_level0, check_hover_shows_tile,
              check_index_links_open, check_resume_keeps_pyramids, check_refusals,
              check_predictions_heatmap, check_bad_predictions_refused, check_predict_view,
              check_roi_overlay,
              check_store_roi_and_artifacts, check_passthrough, check_real_slide]
    sys.exit(run_checks("mltool view", checks, only, fixtures=make_fixtures))
