"""Hostile names on mltool's pages (issue 53 item 10): a labels column named like an <img> with
an onerror handler, slide ids holding '#', '?', '%', '&', '<', '"' and "'" (every byte a file
name may hold but '/' and control characters: io::slide_id_for). Cross-validation, its folds'
and predict's report.html and tile --qc's index.html are parsed with Python's html.parser: every element and attribute is
one the page means to write (no <img onerror>, no <script>, no on* attribute anywhere), the
hostile names come back as text, and every link and picture resolves (urllib.parse.unquote) to
a file that exists.

    html_escape_test.py MLTOOL [TEST...]   # TEST: check_* names without check_
"""
import csv
import html.parser
import os
import sys
import urllib.parse

import numpy as np

from cli_common import expect, run, run_checks, tmp, write_feature_store

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "fixtures"))
import make_slides  # noqa: E402
import tile_store  # noqa: E402

mltool = os.path.abspath(sys.argv[1])
only = set(sys.argv[2:])
HOSTILE_COLUMN = "x<img src=x onerror=alert(1)>"
LABELS = ["KRAS", HOSTILE_COLUMN]
SLIDES = ["a#1", "b?x=1", "c%41", "d<i>e", 'f"g', "h'i", "j&amp;k", "l m", "plain"]
TILES = 6  # per slide
# What the pages may hold: the elements lib/report/pages.cpp writes and those of its inline SVGs.
TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "b", "table", "tr", "th",
        "td", "ul", "li", "a", "img", "div", "span", "figure", "figcaption", "svg", "g", "rect", "line", "polyline", "path",
        "text", "circle", "polygon", "title", "defs", "tspan"}
ATTRIBUTES = {"lang", "charset", "class", "id", "href", "src", "alt", "width", "height", "xmlns", "viewbox",
              "font-family", "font-size", "font-weight", "fill", "stroke", "stroke-width", "stroke-dasharray",
              "x", "y", "x1", "y1", "x2", "y2", "cx", "cy", "r", "d", "points", "transform", "text-anchor",
              "opacity", "fill-opacity", "stroke-opacity", "stroke-linejoin", "dominant-baseline", "rx", "ry",
              "viewBox", "version"}


class Page(html.parser.HTMLParser):
    """Every start tag with its attributes, the text, and the links and pictures."""

    def __init__(self):
        super().__init__()
        self.tags, self.text, self.links = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        for name, value in attrs:
            if (tag, name) in (("a", "href"), ("img", "src")):
                self.links.append(value or "")

    def handle_data(self, data):
        self.text.append(data)


def fixtures():
    rng = np.random.default_rng(3)
    keys, rows, labels = [], [], []
    for i, sid in enumerate(SLIDES):
        kras, other = i % 2, (i // 2) % 2
        for t in range(TILES):
            keys.append(tile_store.tile_key(sid, t, 0))
            rows.append(rng.standard_normal(8) + 2 * np.array([kras, other, 0, 0, 0, 0, 0, 0]))
        labels.append([sid, kras, other])
    write_feature_store(tmp("features"), np.array(rows), keys)
    with open(tmp("labels.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["slide", *LABELS])
        w.writerows(labels)
    tile_store.write_store(tmp("tiles.lmdb"), [{"id": s, "rows": TILES, "cols": 1} for s in SLIDES], 16,
                           encoding="png")
    code, _, err = run([mltool, "pack", tmp("features"), "--labels", tmp("labels.csv"), "-o", tmp("ds"),
                        "--task", "multilabel", "--label-columns", ",".join(LABELS), "--key-column", "slide",
                        "--unit", "tile", "--group-by", "slide", "--folds", "3", "--seed", "1"])
    expect(code == 0, f"pack: exit {code}: {err.strip()}")
    with open(tmp("mlp.json"), "w") as f:
        f.write('{"family": "mlp", "hidden": [8]}')
    return f"{len(SLIDES)} slides, labels {LABELS}"


def expect_safe_page(path, pictures="heatmaps/"):
    """`path` parsed: only TAGS and ATTRIBUTES, no script, no event handler, no <img> but those
    whose src starts with `pictures`; every link and picture resolves to a file; returns the
    page."""
    page = Page()
    with open(path, encoding="utf-8") as f:
        page.feed(f.read())
    page.close()
    for tag, attrs in page.tags:
        expect(tag in TAGS, f"{path}: an element the page does not write: <{tag} {attrs}>")
        unexpected = [a for a in attrs if a not in ATTRIBUTES or a.startswith("on")]
        expect(not unexpected, f"{path}: <{tag}> has attributes {unexpected}")
        if tag == "img":
            expect(attrs.get("src", "").startswith(pictures), f"{path}: an <img> not of {pictures}: {attrs}")
    base = os.path.dirname(path)
    for link in page.links:
        parts = urllib.parse.urlsplit(link)
        expect(not parts.scheme and not parts.netloc and not parts.query and not parts.fragment,
               f"{path}: link {link!r} is not a plain path (scheme, host, query or fragment)")
        target = os.path.join(base, urllib.parse.unquote(parts.path))
        expect(os.path.exists(target), f"{path}: link {link!r} resolves to {target}, which is not there")
    page.all_text = "".join(page.text)
    return page


def check_cross_validation_report():
    """train --folds all with the hostile column: cv's and every fold's report.html hold its
    metric val_auc_<column> as text, write no element or attribute of it, and their links
    (the folds' pages, the charts, the files) resolve."""
    code, _, err = run([mltool, "train", tmp("ds"), "--model", tmp("mlp.json"), "--folds", "all", "-o", tmp("cv"),
                        "--epochs", "2", "--batch", "8", "--device", "cpu", "--bootstrap", "20", "-q"],
                       env={"SLURM_ARRAY_TASK_ID": "", "JOB_COMPLETION_INDEX": ""})
    expect(code == 0, f"train --folds all: exit {code}: {err.strip()}")
    page = expect_safe_page(tmp("cv", "report.html"))
    expect(f"val_auc_{HOSTILE_COLUMN}" in page.all_text, "the hostile metric's name is not on the cv page as text")
    expect(len([link for link in page.links if link.endswith("/report.html")]) == 3, f"fold links {page.links}")
    for fold in range(3):
        page = expect_safe_page(tmp("cv", f"fold-{fold}", "report.html"))
        expect(HOSTILE_COLUMN in page.all_text, f"fold-{fold}: the hostile label is not on the page as text")


def check_predict_report():
    """predict with heatmaps on slides with hostile ids: each slide's row names it as text, its
    heatmap link and picture resolve to heatmaps/<id>.png, and nothing else is added."""
    out = tmp("pred")
    code, _, err = run([mltool, "predict", tmp("cv", "fold-0"), tmp("features"), "-o", out, "--tiles",
                        tmp("tiles.lmdb"), "--device", "cpu", "-q"])
    expect(code == 0, f"predict: exit {code}: {err.strip()}")
    page = expect_safe_page(os.path.join(out, "report.html"))
    for sid in SLIDES:
        expect(os.path.isfile(os.path.join(out, "heatmaps", sid + ".png")), f"{sid}.png missing")
        expect(sid in page.all_text, f"slide {sid!r} is not on the page as text")
        want = os.path.join(out, "heatmaps", sid + ".png")
        expect(any(os.path.join(out, urllib.parse.unquote(link)) == want for link in page.links),
               f"no link resolves to {want}: {page.links}")
    expect(sum(tag == "img" for tag, _ in page.tags) == len(SLIDES), "one heatmap picture per slide")


def check_qc_index():
    """tile --qc on slide files named with the hostile ids: index.html's cards name each slide
    as text, and each card's link and picture resolve to its QC picture <id>.png."""
    os.makedirs(tmp("slides"))
    first = tmp("slides", SLIDES[0] + ".tif")
    make_slides.generate([["generic_tiff", [first, 1024, 1024, 0.5, [(128, 128, 896, 896)]]]])
    for sid in SLIDES[1:]:
        os.link(first, tmp("slides", sid + ".tif"))
    code, _, err = run([mltool, "tile", *(tmp("slides", s + ".tif") for s in SLIDES), "-o", tmp("qc.lmdb"),
                        "--qc", tmp("qc"), "--tile-size", "256", "--mpp", "1", "-q"])
    expect(code == 0, f"tile --qc: exit {code}: {err.strip()}")
    page = expect_safe_page(tmp("qc", "index.html"), pictures="")
    for sid in SLIDES:
        want = tmp("qc", sid + ".png")
        expect(os.path.isfile(want) and sid in page.all_text, f"{sid!r}: no QC picture, or not on the page")
        expect(any(os.path.join(tmp("qc"), urllib.parse.unquote(link)) == want for link in page.links),
               f"no link resolves to {want}: {page.links}")
    expect(sum(tag == "img" for tag, _ in page.tags) == len(SLIDES), "one QC picture per slide")


if __name__ == "__main__":
    run_checks("html escaping", [check_cross_validation_report, check_predict_report, check_qc_index], only,
               fixtures)
