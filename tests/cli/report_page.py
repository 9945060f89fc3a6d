"""Checks of report.html (docs/train.md#reporthtml): the page parsed by Python's html.parser
(its text, tables, inline SVGs, links; no script and nothing fetched from the network), and,
where Debian's `chromium` is installed (scripts/setup.sh installs it), loaded by headless
Chromium: it renders without an error to a screenshot whose charts are drawn (their curve's
colour is on it), and its DOM as Chromium built it holds the same text."""
import html.parser
import os
import shutil
import subprocess
import tempfile

CHART_BLUE = (31, 119, 180)  # the curves' and bars' colour in every chart


class Page(html.parser.HTMLParser):
    """The page's text, its <svg> count, links, scripts, external references and table rows."""

    def __init__(self):
        super().__init__()
        self.text, self.svgs, self.links, self.scripts, self.external = [], 0, [], 0, []
        self.rows, self._row, self._cell = [], None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg":
            self.svgs += 1
        elif tag == "script":
            self.scripts += 1
        elif tag == "a":
            self.links.append(a.get("href", ""))
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []
        for k in ("src", "href"):
            if (a.get(k) or "").startswith(("http:", "https:", "//")):
                self.external.append(a[k])

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.rows.append(self._row)
            self._row = None

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def parse(path):
    p = Page()
    with open(path, encoding="utf-8") as f:
        p.feed(f.read())
    p.all_text = " ".join(" ".join(p.text).split())
    return p


def chromium():
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


def render(path, expect, height=4000):
    """Headless Chromium loads `path`: exit 0, a screenshot, and the DOM it built. Returns
    (PIL image, DOM text) or None (with a message) where chromium is not installed."""
    browser = chromium()
    if browser is None:
        print(f"skipped: rendering {os.path.basename(path)} in a browser: chromium is not installed "
              "(scripts/setup.sh installs Debian's chromium)")
        return None
    from PIL import Image
    with tempfile.TemporaryDirectory() as d:
        shot = os.path.join(d, "shot.png")
        common = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--no-first-run", f"--user-data-dir={d}/profile", "--hide-scrollbars"]
        url = "file://" + os.path.abspath(path)
        p = subprocess.run(common + [f"--screenshot={shot}", f"--window-size=1200,{height}", url],
                           capture_output=True, text=True, timeout=120)
        expect(p.returncode == 0 and os.path.isfile(shot),
               f"chromium --screenshot: exit {p.returncode}: {p.stderr[-1500:]}")
        console = [l for l in p.stderr.splitlines() if "CONSOLE" in l or "Uncaught" in l]
        expect(not console, f"chromium reported errors: {console[:5]}")
        dom = subprocess.run(common + ["--dump-dom", url], capture_output=True, text=True, timeout=120)
        expect(dom.returncode == 0 and "</html>" in dom.stdout, f"chromium --dump-dom: exit {dom.returncode}")
        with Image.open(shot) as im:
            image = im.convert("RGB")
    return image, dom.stdout


def blue_pixels(image):
    """Pixels of the charts' blue (antialiasing aside)."""
    return sum(n for n, c in image.getcolors(1 << 24)
               if all(abs(a - b) <= 12 for a, b in zip(c, CHART_BLUE)))
