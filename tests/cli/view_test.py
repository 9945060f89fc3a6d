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
- a rerun resumes: finished pyramids are kept.

    view_test.py MLTOOL [--screenshots DIR] [TEST...]

--screenshots DIR also writes the pictures docs/view.md shows (the same browser, same pages).
"""
import io
import json
import os
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
    return f"site of {len(SITE_JSON['slides'])} slides"


SITE_JSON = None


def url(name):
    return "file://" + urllib.parse.quote(tmp("site", name))


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
        expect(b.eval("Object.keys(mltoolView.overlays).sort().join(',')") ==
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


if __name__ == "__main__":
    if chromium() is None:
        print("skipped: mltool view's pages need a browser: chromium is not installed "
              "(scripts/setup.sh installs Debian's chromium)")
        sys.exit(0)
    checks = [check_site_files, check_first_view_and_level0, check_hover_shows_tile,
              check_index_links_open, check_resume_keeps_pyramids, check_refusals]
    sys.exit(run_checks("mltool view", checks, only, fixtures=make_fixtures))
