#!/usr/bin/env python3
"""Slides over DICOMweb against the same series read from local files, on a real DICOMweb
server this test starts on 127.0.0.1: Orthanc with its DICOMweb plugin (Debian's orthanc and
orthanc-dicomweb, installed with apt-get when root; exit 77, skipped, when they are missing
and cannot be). Orthanc is loaded through its REST API with the real slide of ../shared/slides
converted to DICOM WSI by wsidicomizer (scripts/fixtures/real_slides.py, as tile_real_test.py
does) and a pydicom-written series (scripts/fixtures/dicom_series.py, YBR_FULL_422).

- `tile` and `extract SLIDE` over DICOMweb equal the local series byte for byte (tiles passed
  through, tiles decoded and resampled, features); `info` reads the same levels and µm/px;
  `predict` on a store tiled over DICOMweb (its heatmaps read the slide through the token proxy
  with --dicomweb-token-file and --dicomweb-origin; without the latter the token does not go
  there) writes the same predictions and heatmaps as on the local one, and an image model
  predicts the same from a coordinates store's tiles read over DICOMweb, and trains the same
  from them (train's --dicomweb-token-file and --dicomweb-origin);
- the reference client dicomweb-client (PyPI) fetches the frames pydicom reads from the files,
  and the frames mltool stores;
- a token-protected server (a reverse proxy here in front of Orthanc): the token works from
  --dicomweb-token-file and from MLTOOL_DICOMWEB_TOKEN, a wrong or missing one stops the run
  with a message naming both, and the token appears in no output or record;
- faults (the proxy answers 503 and 429, drops connections and stalls past --dicomweb-timeout on
  a share of requests): the run retries and gives the same bytes; frames that always fail fail
  the slide (--keep-going: exit 4) naming the URL and the HTTP status;
- one frame that always fails (503 for every request that names it): with --keep-going exactly
  its tile is left out and listed in the done marker with the URL and the status, every other
  tile is the local run's; without it the run stops (exit 2) naming both, with the slide's other
  tiles and its failure committed; --allow-missing-tiles counts it as done (exit 0; a re-run
  asks for no frame); a later run without the fault fills the tile in, and each store then
  equals the local one;
- a run killed while it fetches resumes (from another address of the server) to the same tiles;
- TLS with a self-signed certificate (openssl, a TLS reverse proxy): verification refuses it
  naming --dicomweb-insecure, and --dicomweb-insecure reads the same tiles; a TLS proxy that
  speaks HTTP/2 only (the h2 library, PyPI: scripts/requirements-extra.txt) is answered over
  HTTP/2, as libcurl reports it (mltool -v), with the same tiles;
- a level of many frames is fetched in fewer, larger requests (Orthanc's plugin parses the whole
  instance for each), with the same tiles.

    dicomweb_test.py MLTOOL [CHECK ...]
"""
import http.client
import http.server
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from cli_common import expect, run, run_checks, run_json, tmp  # noqa: E402
from orthanc_server import Orthanc, require as require_orthanc  # noqa: E402
from store_refs import own_dicom_jpeg, read_tile_store  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts", "fixtures"))
SHARED_SLIDE = os.path.join(ROOT, "..", "shared", "slides", "CMU-1-Small-Region.svs")
TOKEN = "s3cret-token-4711"

MLTOOL = sys.argv[1]
SERVER = {}  # "orthanc": the process, "port"; "series": name → (url, local directory)


def fixtures():
    require_orthanc()
    series = {}
    import dicom_series  # pydicom, numpy, Pillow
    dicom_series.write(tmp("ycc"))
    series["ycc"] = tmp("ycc")
    if os.path.exists(SHARED_SLIDE):  # the real slide, as wsidicomizer converts it
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "fixtures", "real_slides.py"),
                        "--dicom", SHARED_SLIDE, tmp("real")], check=True, capture_output=True)
        series["real"] = tmp("real")
    orthanc = SERVER["orthanc"] = Orthanc(tmp("orthanc"))
    SERVER["port"] = orthanc.port
    SERVER["series"] = {name: (orthanc.upload(d), d) for name, d in series.items()}
    return f"Orthanc on port {SERVER['port']}, series {', '.join(series)}"


def teardown():
    if "orthanc" in SERVER:
        SERVER["orthanc"].stop()


def tiles_by_position(store):
    """{ROW_COL: bytes} of a store's one slide, its slides record, and every record."""
    meta, tiles = read_tile_store(store)
    slides = [v for k, v in meta.items() if k.startswith("slides/")]
    expect(len(slides) == 1, f"{store}: {len(slides)} slides")
    return {k.split("/", 1)[1]: v for k, v in tiles.items()}, slides[0], meta


def tile(slide, store, *args, env=None):
    code, summary, err = run_json([MLTOOL, "tile", slide, "-o", store, "--threads", "2", "--json",
                                   *args], env=env)
    expect(code == 0, f"tile {slide} exits 0 (got {code}): {err[-2000:]}")
    return summary, err


def same_tiles(url, directory, args, name):
    tile(directory, tmp(f"local-{name}"), *args)
    summary, _ = tile(url, tmp(f"web-{name}"), *args)
    local, local_rec, local_meta = tiles_by_position(tmp(f"local-{name}"))
    web, web_rec, web_meta = tiles_by_position(tmp(f"web-{name}"))
    expect(len(local) > 0 and sorted(local) == sorted(web),
           f"{name}: tiles {len(local)} vs {len(web)}")
    diff = [k for k in local if local[k] != web[k]]
    expect(not diff, f"{name}: {len(diff)} of {len(local)} tiles differ, e.g. {diff[:3]}")
    expect(web_rec["path"] == url and web_rec["id"] == url.rsplit("/", 1)[1] and
           web_rec["vendor"] == "dicomweb", f"{name}: record {web_rec['path']} {web_rec['id']}")
    for field in ("levels", "level", "mpp", "grid", "read_size", "thumbnail"):
        expect(local_rec[field] == web_rec[field],
               f"{name}: {field} {local_rec[field]} vs {web_rec[field]}")
    lid, wid = local_rec["id"], web_rec["id"]
    for kind in ("tiles", "mask"):
        if f"{kind}/{lid}" in local_meta:
            expect(local_meta[f"{kind}/{lid}"] == web_meta[f"{kind}/{wid}"],
                   f"{name}: {kind} record")
    return local_rec, web_rec, summary


def frame_size(directory):
    """The frame size of the series' level 0 (its largest VOLUME instance)."""
    import pydicom
    sets = [pydicom.dcmread(os.path.join(directory, n), stop_before_pixels=True)
            for n in sorted(os.listdir(directory))]
    volumes = [ds for ds in sets if ds.ImageType[2] == "VOLUME"]
    return int(max(volumes, key=lambda ds: ds.TotalPixelMatrixColumns).Columns)


def check_tile_passthrough():
    """--level 0 at the frames' own size: every kept tile is the frame passed through, the same
    bytes as from the local files."""
    for name, (url, directory) in SERVER["series"].items():
        args = ["--level", "0", "--tile-size", str(frame_size(directory))]
        local_rec, web_rec, summary = same_tiles(url, directory, args, f"pass-{name}")
        p = web_rec["passthrough"]
        expect(p["tiles"] > 0 and p["tiles"] == local_rec["passthrough"]["tiles"],
               f"{name}: passthrough {p} vs {local_rec['passthrough']}")
        expect(summary["slides"][0]["reader"] == "dicomweb", f"{name}: {summary['slides'][0]}")


def check_tile_decoded():
    """Tiles read as regions (resampled to --mpp 0.5, and at a tile size across frames): the
    frames decoded give the pixels OpenSlide gives from the files."""
    for name, (url, directory) in SERVER["series"].items():
        same_tiles(url, directory, ["--mpp", "0.5", "--tile-size", "192"], f"mpp-{name}")
        same_tiles(url, directory, ["--level", "0", "--tile-size", "300", "--passthrough", "never"],
                   f"l0-{name}")


def check_info():
    """info reads the same levels and µm/px over DICOMweb as from the files; a URL given on
    stdin is read too."""
    for name, (url, directory) in SERVER["series"].items():
        code, local, err = run_json([MLTOOL, "info", directory, "--json"])
        expect(code == 0, f"info {directory}: {err[-1000:]}")
        code, out, err = run([MLTOOL, "info", "-", "--json"], stdin=url + "\n")
        expect(code == 0, f"info {url}: {err[-1000:]}")
        web = json.loads(out)
        expect(local["levels"] == web["levels"],
               f"{name}: levels {local['levels']} vs {web['levels']}")
        expect(local["metadata_mpp"]["mpp"] == web["metadata_mpp"]["mpp"] and
               web["metadata_mpp"]["source"] == "DICOM PixelSpacing",
               f"{name}: metadata_mpp {local['metadata_mpp']} vs {web['metadata_mpp']}")
        expect(web["vendor"] == "dicomweb" and web["id"] == url.rsplit("/", 1)[1], f"{web}")


def check_extract():
    """extract SLIDE over DICOMweb: the same features as from the local files."""
    name = "real" if "real" in SERVER["series"] else "ycc"
    url, directory = SERVER["series"][name]
    outs = []
    for i, slide in enumerate((directory, url)):
        out = tmp(f"extract-{i}")
        code, _, err = run([MLTOOL, "extract", slide, "-o", out, "--model", "builtin:color-texture",
                            "--mpp", "0.5", "--tile-size", "224", "--threads", "2", "-q"])
        expect(code == 0, f"extract {slide} exits 0 (got {code}): {err[-2000:]}")
        outs.append(np.load(os.path.join(out, "features.npy")))
    expect(outs[0].shape == outs[1].shape and outs[0].shape[0] > 0 and
           np.array_equal(outs[0], outs[1]), f"features {outs[0].shape} vs {outs[1].shape}")


def check_reference_client():
    """dicomweb-client fetches from Orthanc the frames pydicom reads from the files, and a
    YBR_FULL_422 frame is the tile mltool stored, byte for byte."""
    from dicomweb_client.api import DICOMwebClient
    url, directory = SERVER["series"]["ycc"]
    base, rest = url.split("/studies/")
    study, series = rest.split("/series/")
    client = DICOMwebClient(base)
    instances = client.search_for_instances(study, series)
    store = tmp("web-pass-ycc")
    web, _, _ = tiles_by_position(store) if os.path.exists(store) else ({}, None, None)
    checked = 0
    for inst in instances:
        sop = inst["00080018"]["Value"][0]
        meta = client.retrieve_instance_metadata(study, series, sop)
        size = (meta["00480006"]["Value"][0], meta["00480007"]["Value"][0])
        numbers = [1, 26, 39] if size[0] == 2600 else [1, 8, 14]  # level 0: tissue frames
        frames = client.retrieve_instance_frames(study, series, sop, frame_numbers=numbers,
                                                 media_types=(("application/octet-stream", "*"),))
        for number, frame in zip(numbers, frames):
            across = -(-size[0] // 256)
            col, row = (number - 1) % across, (number - 1) // across
            want, raw, _ = own_dicom_jpeg(directory, size, col, row)
            expect(frame == raw, f"frame {number} of {sop}: {len(frame)} bytes vs {len(raw)}")
            key = f"{row:06d}_{col:06d}"
            if size[0] == 2600 and web and key in web:
                expect(web[key] == want, f"stored tile {key} is not the frame")
                checked += 1
    expect(len(instances) == 2, f"{len(instances)} instances")
    expect(checked > 0 or not web, "no stored tile was among the frames compared")


class Proxy(http.server.ThreadingHTTPServer):
    """A reverse proxy on 127.0.0.1 in front of Orthanc: with `token`, it answers 401 unless
    the request carries it; `faults`: every `every`-th request gets the next of 503, 429, a
    dropped connection and a stall of `stall` seconds; `always`: requests whose path holds it
    get 503; every request waits `delay` seconds; `single`: a list of frame numbers gets 400
    (a server that takes one frame a request); `tls`: (certificate, key) files, served as https;
    `bad_frame`: (SOPInstanceUID, frame number): every frames request that names it gets 503."""
    daemon_threads = True

    def __init__(self, token=None, every=0, stall=3.0, always=None, delay=0.0, single=False,
                 tls=None, bad_frame=None):
        self.token, self.every, self.stall, self.always = token, every, stall, always
        self.delay, self.single, self.bad_frame = delay, single, bad_frame
        self.count, self.faults, self.lock, self.seen = 0, 0, threading.Lock(), []
        self.paths = []
        super().__init__(("127.0.0.1", 0), ProxyHandler)
        self.scheme = "http"
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.socket = context.wrap_socket(self.socket, server_side=True)
            self.scheme = "https"
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def url(self, series_url):
        return series_url.replace(f"http://127.0.0.1:{SERVER['port']}/",
                                  f"{self.scheme}://127.0.0.1:{self.server_address[1]}/")


class ProxyHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        p = self.server
        with p.lock:
            p.count += 1
            n = p.count
            p.seen.append(self.headers.get("Authorization", ""))
            p.paths.append(self.path)
        if p.token and self.headers.get("Authorization") != f"Bearer {p.token}":
            return self.reply(401, b"unauthorized")
        if p.always and p.always in self.path:
            return self.reply(503, b"unavailable")
        if p.bad_frame and f"/instances/{p.bad_frame[0]}/frames/" in self.path and \
                str(p.bad_frame[1]) in self.path.rsplit("/", 1)[1].split(","):
            return self.reply(503, b"this frame cannot be read")
        if p.single and "/frames/" in self.path and "," in self.path:
            return self.reply(400, b"one frame a request")
        if p.every and n % p.every == 0:
            with p.lock:
                fault = p.faults % 4
                p.faults += 1
            if fault == 0:
                return self.reply(503, b"busy")
            if fault == 1:
                return self.reply(429, b"slow down", [("Retry-After", "0")])
            if fault == 2:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            time.sleep(p.stall)
        time.sleep(p.delay)
        conn = http.client.HTTPConnection("127.0.0.1", SERVER["port"], timeout=60)
        conn.request("GET", self.path, headers={"Accept": self.headers.get("Accept", "*/*")})
        r = conn.getresponse()
        body = r.read()
        conn.close()
        try:
            self.reply(r.status, body, [("Content-Type", r.getheader("Content-Type", ""))])
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up on a stalled answer


def check_token():
    """A token-protected server: the token from a file and from MLTOOL_DICOMWEB_TOKEN works; a
    missing or wrong one stops the run at once (even with --keep-going) naming the options; the
    token is in no output or record."""
    url, directory = SERVER["series"]["ycc"]
    proxy = Proxy(token=TOKEN)
    try:
        purl = proxy.url(url)
        args = ["--level", "0", "--tile-size", "256"]
        with open(tmp("token"), "w") as f:
            f.write(TOKEN + "\n")
        summary, err = tile(purl, tmp("tok-file"), "--dicomweb-token-file", tmp("token"), *args)
        summary2, err2 = tile(purl, tmp("tok-env"), *args, env={"MLTOOL_DICOMWEB_TOKEN": TOKEN})
        a, _, _ = tiles_by_position(tmp("tok-file"))
        b, _, _ = tiles_by_position(tmp("tok-env"))
        local, _, _ = tiles_by_position(tmp("local-pass-ycc")) if os.path.exists(
            tmp("local-pass-ycc")) else (a, None, None)
        expect(a == b == local and a, "tiles through the token proxy differ")
        for store in ("tok-file", "tok-env"):
            for root, _, files in os.walk(tmp(store)):
                for fn in files:
                    with open(os.path.join(root, fn), "rb") as f:
                        expect(TOKEN.encode() not in f.read(), f"the token is in {store}/{fn}")
        expect(TOKEN not in json.dumps(summary) + err + json.dumps(summary2) + err2,
               "the token is in the output")
        for env, extra in (({}, []), ({"MLTOOL_DICOMWEB_TOKEN": "wrong"}, ["--keep-going"])):
            code, out, err = run([MLTOOL, "tile", purl, directory, "-o", tmp("tok-bad"), *args,
                                  *extra], env=env)
            expect(code == 2 and "401" in err and "--dicomweb-token-file" in err and
                   "MLTOOL_DICOMWEB_TOKEN" in err, f"bad token: exit {code}: {err[-1500:]}")
            expect("wrong" not in err and TOKEN not in err, "a token is in the message")
    finally:
        proxy.shutdown()
        proxy.server_close()


def check_faults():
    """503, 429, dropped connections and stalled answers on a share of requests: retried (and
    logged), the same tiles as without faults; frames that always fail fail the slide naming the
    URL and the status."""
    url, directory = SERVER["series"]["ycc"]
    proxy = Proxy(every=2, stall=3.0)
    logs = ""
    try:
        for i, args in enumerate((["--level", "0", "--tile-size", "256"],
                                  ["--level", "1", "--tile-size", "256"],
                                  ["--mpp", "0.5", "--tile-size", "192"])):
            _, err = tile(proxy.url(url), tmp(f"faults{i}"), *args, "--dicomweb-timeout", "1")
            logs += err
            tile(url, tmp(f"faults-ref{i}"), *args)
            a, _, _ = tiles_by_position(tmp(f"faults{i}"))
            b, _, _ = tiles_by_position(tmp(f"faults-ref{i}"))
            expect(a == b and a, f"{args}: tiles with faults differ ({len(a)} vs {len(b)})")
        expect(proxy.faults >= 4, f"{proxy.faults} faults injected in {proxy.count} requests")
        for what in ("HTTP 503", "HTTP 429", "trying again", "no byte for "
                     "--dicomweb-timeout 1 s", "Retry-After: 0", "Empty reply"):
            expect(what in logs, f"'{what}' not logged: {logs[-3000:]}")
    finally:
        proxy.shutdown()
        proxy.server_close()
    proxy = Proxy(always="/frames/")
    try:
        code, out, err = run([MLTOOL, "tile", proxy.url(url), directory, "-o", tmp("fail"),
                              "--level", "0", "--tile-size", "256", "--keep-going", "--json",
                              "--dicomweb-timeout", "1"])
        expect(code == 4, f"always failing frames: exit {code} (not 4): {err[-1500:]}")
        failed = [s for s in json.loads(out)["slides"] if s["status"] == "failed"]
        expect(len(failed) == 1 and "HTTP 503" in failed[0]["error"] and
               proxy.url(url) in failed[0]["error"], f"{failed}")
    finally:
        proxy.shutdown()
        proxy.server_close()


def level0(directory):
    """(SOPInstanceUID, TotalPixelMatrixColumns) of the series' level 0."""
    import pydicom
    sets = [pydicom.dcmread(os.path.join(directory, n), stop_before_pixels=True)
            for n in sorted(os.listdir(directory))]
    ds = max((d for d in sets if d.ImageType[2] == "VOLUME"),
             key=lambda d: d.TotalPixelMatrixColumns)
    return ds.SOPInstanceUID, int(ds.TotalPixelMatrixColumns)


def check_failed_tile():
    """One level-0 frame that always fails (503): with --keep-going exactly its tile is left out,
    listed with the URL and the status, the other tiles are the local run's bytes (its batch was
    asked again in smaller requests), exit 4; a run that still meets the fault keeps it listed;
    without --keep-going the run stops naming both, the slide's other tiles and its failure
    committed; --allow-missing-tiles counts the slide as done; a run without the fault fills it in, and
    the store then equals the local one."""
    url, directory = SERVER["series"]["ycc"]
    sop, width = level0(directory)
    args = ["--level", "0", "--tile-size", "256"]
    tile(directory, tmp("ft-local"), *args)
    local, _, local_meta = tiles_by_position(tmp("ft-local"))
    keys = sorted(local)
    bad = keys[len(keys) // 2]  # not the first: that one is compared with its decoded frame
    row, col = (int(v) for v in bad.split("_"))
    number = row * -(-width // 256) + col + 1
    uid = url.rsplit("/", 1)[1]
    proxy = Proxy(bad_frame=(sop, number))
    try:
        purl = proxy.url(url)
        for attempt in range(2):  # the second: a re-run that meets the fault again
            code, out, err = run([MLTOOL, "tile", purl, "-o", tmp("ft-web"), *args, "--json",
                                  "--keep-going", "--threads", "2"])
            expect(code == 4, f"a failing frame, --keep-going: exit {code} (not 4): {err[-2000:]}")
            s = json.loads(out)["slides"][0]
            failed = s["failed_tiles"]
            expect(s["status"] == "incomplete" and len(failed) == 1 and
                   failed[0]["key"] == f"{uid}/{bad}" and failed[0]["status"] == 503 and
                   f"/instances/{sop}/frames/{number}" in failed[0]["url"] and
                   failed[0]["url"].startswith(purl), f"run {attempt}: {s}")
            expect(f"/frames/{number}: HTTP 503" in err, f"not logged: {err[-2000:]}")
            web, _, meta = tiles_by_position(tmp("ft-web"))
            expect(sorted(web) == [k for k in keys if k != bad] and
                   all(web[k] == local[k] for k in web), f"run {attempt}: tiles {len(web)}")
            done = meta[f"done/{uid}"]
            expect(done["tiles"] == len(keys) - 1 and len(done["failed_tiles"]) == 1 and
                   (done["failed_tiles"][0]["row"], done["failed_tiles"][0]["col"]) == (row, col)
                   and done["failed_tiles"][0]["status"] == 503 and
                   done["failed_tiles"][0]["url"] == failed[0]["url"], f"done {done}")
            lid = next(k for k in local_meta if k.startswith("tiles/"))
            want = {c: [v for i, v in enumerate(local_meta[lid][c]) if i != keys.index(bad)]
                    for c in local_meta[lid]}
            expect(meta[f"tiles/{uid}"] == want, "the tiles record lists the failed tile")
        # Without --keep-going the run stops (exit 2) naming the frame, but the slide's other
        # tiles and its failure are committed: the next run fetches only the failed tile.
        code, _, err = run([MLTOOL, "tile", purl, "-o", tmp("ft-stop"), *args])
        expect(code == 2 and f"/frames/{number}: HTTP 503" in err and purl in err and
               "--allow-missing-tiles" in err, f"without --keep-going: exit {code}: {err[-2000:]}")
        stopped, _, stopped_meta = tiles_by_position(tmp("ft-stop"))
        expect(sorted(stopped) == [k for k in keys if k != bad] and
               len(stopped_meta[f"done/{uid}"]["failed_tiles"]) == 1,
               f"without --keep-going: {len(stopped)} tiles committed, done "
               f"{stopped_meta.get(f'done/{uid}')}")
        # --allow-missing-tiles: the slide counts as done without it (exit 0, status tiled,
        # the tile still listed), and a re-run with it asks the server for no frame.
        code, out, err = run([MLTOOL, "tile", purl, "-o", tmp("ft-allow"), *args, "--json",
                              "--allow-missing-tiles"])
        s = json.loads(out)["slides"][0] if code == 0 else {}
        expect(code == 0 and s.get("status") == "tiled" and len(s.get("failed_tiles", [])) == 1,
               f"--allow-missing-tiles: exit {code}: {s} {err[-1500:]}")
        asked = len(proxy.paths)
        code, out, err = run([MLTOOL, "tile", purl, "-o", tmp("ft-allow"), *args, "--json",
                              "--allow-missing-tiles"])
        frames_asked = [p for p in proxy.paths[asked:] if "/frames/" in p]
        expect(code == 0 and json.loads(out)["slides"][0]["status"] == "skipped" and
               not frames_asked, f"--allow-missing-tiles again: exit {code}, {frames_asked[:3]}")
    finally:
        proxy.shutdown()
        proxy.server_close()
    for store in ("ft-web", "ft-stop", "ft-allow"):  # each fills in its one failed tile
        summary, _ = tile(url, tmp(store), *args)
        expect(summary["slides"][0]["status"] == "tiled" and summary["incomplete"] == 0,
               f"the filling run of {store}: {summary['slides'][0]}")
        filled, _, filled_meta = tiles_by_position(tmp(store))
        expect(filled == local and "failed_tiles" not in filled_meta[f"done/{uid}"],
               f"{store} filled: {len(filled)} tiles vs {len(local)}, or other bytes")
    web, _, meta = tiles_by_position(tmp("ft-web"))
    expect(web == local, f"filled: {len(web)} tiles vs {len(local)}, or other bytes")
    lid = next(k for k in local_meta if k.startswith("tiles/"))
    expect(meta[f"tiles/{uid}"] == local_meta[lid] and
           "failed_tiles" not in meta[f"done/{uid}"], "filled: the records")


def check_one_frame_a_request():
    """A server that answers a list of frame numbers with 400 is asked one frame a request:
    the same tiles."""
    url, _ = SERVER["series"]["ycc"]
    proxy = Proxy(single=True)
    try:
        for i, args in enumerate((["--level", "0", "--tile-size", "256"],
                                  ["--mpp", "0.5", "--tile-size", "192"])):
            tile(proxy.url(url), tmp(f"single{i}"), *args)
            tile(url, tmp(f"single-ref{i}"), *args)
            a, _, _ = tiles_by_position(tmp(f"single{i}"))
            b, _, _ = tiles_by_position(tmp(f"single-ref{i}"))
            expect(a == b and a, f"{args}: tiles one frame a request differ")
    finally:
        proxy.shutdown()
        proxy.server_close()


def check_resume():
    """A run killed (SIGKILL) while it fetches resumes like a local one, from another server
    address of the same series (its id is the series UID): the same tiles as an uninterrupted
    run."""
    url, directory = SERVER["series"]["real" if "real" in SERVER["series"] else "ycc"]
    size = str(frame_size(directory))
    proxy = Proxy(delay=0.4)
    try:
        args = ["--level", "0", "--tile-size", size, "--commit-every", "16"]
        p = subprocess.Popen([MLTOOL, "tile", proxy.url(url), "-o", tmp("killed"), *args, "-q",
                              "--threads", "2"],
                             stderr=subprocess.DEVNULL)
        time.sleep(1.2)
        p.kill()
        expect(p.wait() == -9, f"the run to kill ended first (exit {p.returncode})")
    finally:
        proxy.shutdown()
        proxy.server_close()
    tile(url, tmp("killed"), *args)
    tile(url, tmp("unkilled"), *args)
    a, rec, _ = tiles_by_position(tmp("killed"))
    b, _, _ = tiles_by_position(tmp("unkilled"))
    expect(a == b and a and rec["path"] == url,
           f"resumed: {len(a)} tiles vs {len(b)}, {rec['path']}")


def self_signed():
    """A certificate for 127.0.0.1 and its key, made by openssl: (certificate, key) files."""
    cert, key = tmp("tls-cert.pem"), tmp("tls-key.pem")
    if not os.path.exists(cert):
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", key, "-out", cert], check=True, capture_output=True)
    return cert, key


def check_tls():
    """A server whose certificate is self-signed (made here by openssl): the run stops naming
    the URL, the certificate problem and --dicomweb-insecure; with --dicomweb-insecure it reads
    the same tiles as over plain HTTP (HTTP/1.1: this proxy offers nothing else). The token
    goes over TLS as over HTTP."""
    url, directory = SERVER["series"]["ycc"]
    proxy = Proxy(token=TOKEN, tls=self_signed())
    try:
        secure = proxy.url(url)
        expect(secure.startswith("https://127.0.0.1:"), secure)
        args = ["--level", "0", "--tile-size", str(frame_size(directory))]
        env = {"MLTOOL_DICOMWEB_TOKEN": TOKEN}
        code, _, err = run([MLTOOL, "tile", secure, "-o", tmp("tls-refused"), *args], env=env)
        expect(code != 0 and secure + "/metadata" in err and "certificate" in err and
               "--dicomweb-insecure" in err, f"exit {code}: {err[-1500:]}")
        _, err = tile(secure, tmp("tls"), *args, "--dicomweb-insecure", "-v", env=env)
        expect("answered over HTTP/1.1" in err, f"protocol: {err[-1500:]}")
        tile(url, tmp("tls-ref"), *args)
        a, rec, _ = tiles_by_position(tmp("tls"))
        b, _, _ = tiles_by_position(tmp("tls-ref"))
        expect(a == b and a and rec["path"] == secure, f"over TLS: {len(a)} tiles vs {len(b)}")
    finally:
        proxy.shutdown()
        proxy.server_close()


class H2Proxy:
    """A TLS reverse proxy on 127.0.0.1 in front of Orthanc that offers HTTP/2 only (ALPN h2;
    the h2 library's state machine): each stream's GET goes to Orthanc over HTTP/1.1 and its
    answer back on the stream, within the client's flow-control window. `protocols`: what each
    connection negotiated."""

    def __init__(self, cert, key):
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.context.set_alpn_protocols(["h2"])
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.protocols = []
        threading.Thread(target=self.serve, daemon=True).start()

    def url(self, series_url):
        return series_url.replace(f"http://127.0.0.1:{SERVER['port']}/",
                                  f"https://127.0.0.1:{self.sock.getsockname()[1]}/")

    def close(self):
        self.sock.close()

    def serve(self):
        while True:
            try:
                raw, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.connection, args=(raw,), daemon=True).start()

    def connection(self, raw):
        import h2.config
        import h2.connection
        import h2.events
        try:
            conn = self.context.wrap_socket(raw, server_side=True)
        except OSError:
            raw.close()
            return
        self.protocols.append(conn.selected_alpn_protocol())
        h2c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False,
                                                                   header_encoding="utf-8"))
        h2c.initiate_connection()
        requests, ended = {}, []

        def receive():
            data = conn.recv(1 << 16)
            if not data:
                raise ConnectionError("closed")
            for event in h2c.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    requests[event.stream_id] = dict(event.headers)
                elif isinstance(event, h2.events.StreamEnded):
                    ended.append(event.stream_id)
            conn.sendall(h2c.data_to_send())

        try:
            conn.sendall(h2c.data_to_send())
            while True:
                receive()
                while ended:
                    stream = ended.pop(0)
                    self.answer(conn, h2c, stream, requests.pop(stream), receive)
        except (OSError, ConnectionError):
            pass
        finally:
            conn.close()

    def answer(self, conn, h2c, stream, headers, receive):
        up = http.client.HTTPConnection("127.0.0.1", SERVER["port"], timeout=60)
        up.request("GET", headers[":path"], headers={"Accept": headers.get("accept", "*/*")})
        r = up.getresponse()
        body = r.read()
        up.close()
        h2c.send_headers(stream, [(":status", str(r.status)),
                                  ("content-type", r.getheader("Content-Type", "")),
                                  ("content-length", str(len(body)))])
        at = 0
        while at < len(body):
            n = min(h2c.local_flow_control_window(stream), h2c.max_outbound_frame_size,
                    len(body) - at)
            if n <= 0:  # wait for the client's WINDOW_UPDATE
                conn.sendall(h2c.data_to_send())
                receive()
                continue
            h2c.send_data(stream, body[at:at + n])
            at += n
        h2c.end_stream(stream)
        conn.sendall(h2c.data_to_send())


def check_http2():
    """Where the server offers HTTP/2 (a TLS proxy offering h2 only), libcurl speaks it: mltool
    -v reports the answer's protocol as libcurl gives it; the tiles equal those over plain
    HTTP."""
    url, directory = SERVER["series"]["ycc"]
    proxy = H2Proxy(*self_signed())
    try:
        args = ["--level", "0", "--tile-size", str(frame_size(directory))]
        _, err = tile(proxy.url(url), tmp("h2"), *args, "--dicomweb-insecure", "-v")
        expect("answered over HTTP/2" in err, f"protocol: {err[-1500:]}")
        expect(proxy.protocols and set(proxy.protocols) == {"h2"}, f"ALPN {proxy.protocols}")
        tile(url, tmp("h2-ref"), *args)
        a, _, _ = tiles_by_position(tmp("h2"))
        b, _, _ = tiles_by_position(tmp("h2-ref"))
        expect(a == b and a, f"over HTTP/2: {len(a)} tiles vs {len(b)}")
    finally:
        proxy.close()


def many_frames_series(out, side=5120, frame=64):
    """A two-level all-tissue series whose level 0 holds (side / frame)² frames: 6400 by default,
    more than 16 requests of 256 (lib/slide/dicomweb_slide.hpp's kDicomwebRequestsPerLevel)."""
    import io
    from PIL import Image
    from dicom_series import wsi_dataset, wsi_image
    from pydicom.encaps import encapsulate
    from pydicom.uid import JPEGBaseline8Bit, generate_uid
    rng = np.random.default_rng(41)
    pool = []
    for _ in range(97):  # distinct frames, repeated: a prime count so rows differ
        rgb = rng.normal((200, 110, 170), 20, (frame, frame, 3)).clip(0, 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(rgb).save(buf, "JPEG", quality=80)
        pool.append(buf.getvalue())
    os.makedirs(out, exist_ok=True)
    ids = (generate_uid(), generate_uid(), generate_uid())
    for level in range(2):
        n = side >> level
        count = (n // frame) ** 2
        ds = wsi_dataset(level, ids, n, n, frame, JPEGBaseline8Bit)
        wsi_image(ds, count, "YBR_FULL_422", "TILED_FULL", 0.00025 * 2 ** level)
        ds.PixelData = encapsulate([pool[(i * 7 + level) % len(pool)] for i in range(count)])
        ds["PixelData"].VR = "OB"
        ds.save_as(os.path.join(out, f"level-{level}.dcm"), enforce_file_format=True)
    return count * 4  # level 0's frames


def check_large_level_batches():
    """A level of 6400 frames is asked for in about 16 requests of 400 frames, not 25 of 256
    (Orthanc's DICOMweb plugin reads and parses the whole instance for every request, so the
    number of requests, not their size, sets the server's work); the tiles equal the local
    series'."""
    directory = tmp("many")
    frames = many_frames_series(directory)
    url = SERVER["orthanc"].upload(directory)
    proxy = Proxy()
    try:
        args = ["--level", "0", "--tile-size", "64"]
        same_tiles(proxy.url(url), directory, args, "many")
    finally:
        proxy.shutdown()
        proxy.server_close()
    sizes = [len(p.rsplit("/frames/", 1)[1].split(",")) for p in proxy.paths if "/frames/" in p]
    expect(max(sizes) == frames // 16, f"largest request {max(sizes)} frames, not {frames // 16}")
    expect(sum(sizes) >= frames and len(sizes) <= 2 * 16 + 4,
           f"{len(sizes)} frame requests for {sum(sizes)} frames: {sorted(sizes)[-20:]}")


def check_bad_url():
    """A URL that is not a series URL, and a series the server does not have, are named: the
    study or the series UID it does not know, or a root that is not its DICOMweb root; https://
    against a server without TLS says so."""
    code, _, err = run([MLTOOL, "info", f"http://127.0.0.1:{SERVER['port']}/dicom-web/studies/1.2"])
    expect(code == 1 and "not a DICOMweb series URL" in err, f"exit {code}: {err[-500:]}")
    missing = f"http://127.0.0.1:{SERVER['port']}/dicom-web/studies/1.2/series/3.4"
    code, out, err = run([MLTOOL, "info", missing])  # info reports a slide's error on stdout
    expect(code == 2 and missing + "/metadata: HTTP 404" in out, f"exit {code}: {out}{err[-500:]}")
    # Which UID the server does not know (issue 51): the study, or the series of a known study.
    expect(f"the server knows no study 1.2: list its studies with curl -H 'Accept: "
           f"application/dicom+json' {SERVER['orthanc'].root()}/studies" in out,
           f"an unknown study: {out}")
    url = SERVER["series"]["ycc"][0]
    study = url.split("/studies/")[1].split("/")[0]
    code, out, err = run([MLTOOL, "info", url.rsplit("/", 1)[0] + "/1.2.3.4"])
    expect(code == 2 and "HTTP 404" in out and f"the server's study {study} has no series 1.2.3.4: "
           f"list the study's series with curl -H 'Accept: application/dicom+json' "
           f"{SERVER['orthanc'].root()}/studies/{study}/series" in out,
           f"an unknown series: exit {code}: {out}{err[-500:]}")
    code, _, err = run([MLTOOL, "tile", url.replace("/dicom-web/", "/dicomweb/"), "-o",
                        tmp("bad-root.lmdb")])
    expect(code == 2 and f"is http://127.0.0.1:{SERVER['port']}/dicomweb the server's DICOMweb "
           "root?" in err, f"a wrong root: exit {code}: {err[-800:]}")
    # https:// against a server without TLS: said so, with the http:// to use.
    code, _, err = run([MLTOOL, "tile", url.replace("http://", "https://"), "-o",
                        tmp("no-tls.lmdb")])
    expect(code == 2 and f"the server at 127.0.0.1:{SERVER['port']} does not speak TLS (it "
           f"answers plain HTTP there): give the URL with http:// (http://127.0.0.1:"
           f"{SERVER['port']}/...), not https://" in err,
           f"https against http: exit {code}: {err[-800:]}")


def check_predict():
    """predict reads a DICOMweb slide too (the heatmaps' picture), with the --dicomweb-* options:
    an mlp trained on the local series' features predicts the same, with the same heatmaps
    (PNG and GeoJSON), from the store tiled over DICOMweb (through the token proxy) as from the
    one tiled from the files. The local directory is named by the SeriesInstanceUID, so both
    slides have the same id."""
    url, directory = SERVER["series"]["ycc"]
    uid = url.rsplit("/", 1)[1]
    local = tmp("pred-src", uid + ".d")  # slide id: the name without its extension
    if not os.path.exists(local):
        shutil.copytree(directory, local)
    proxy = Proxy(token=TOKEN)
    try:
        purl = proxy.url(url)
        with open(tmp("pred-token"), "w") as f:
            f.write(TOKEN + "\n")
        web_opts = ["--dicomweb-token-file", tmp("pred-token"), "--dicomweb-connections", "2"]
        args = ["--mpp", "0.5", "--tile-size", "64"]
        tile(local, tmp("pred-tiles-local"), *args)
        tile(purl, tmp("pred-tiles-web"), *args, *web_opts)
        # The store's record names the server, not the user: predict sends the token there
        # only when --dicomweb-origin names it.
        origin = f"http://127.0.0.1:{proxy.server_address[1]}"
        predict_opts = [*web_opts, "--dicomweb-origin", origin]
        for side in ("local", "web"):
            code, _, err = run([MLTOOL, "extract", tmp(f"pred-tiles-{side}"), "-o",
                                tmp(f"pred-feat-{side}"), "--model", "builtin:color-texture",
                                "--threads", "2", "-q"])
            expect(code == 0, f"extract {side}: exit {code}: {err[-2000:]}")
        with open(tmp("pred-feat-local", "keys.txt")) as f:
            keys = f.read().split()
        expect(len(keys) >= 4, f"{len(keys)} tiles")
        with open(tmp("pred-labels.csv"), "w") as f:  # groups of tiles, so one slide splits
            f.write("key,label,group\n" + "".join(
                f"{k},{'ab'[i % 2]},{i % 4}\n" for i, k in enumerate(keys)))
        with open(tmp("pred-mlp.json"), "w") as f:
            json.dump({"family": "mlp", "hidden": [8]}, f)
        for cmd in (["pack", tmp("pred-feat-local"), "--labels", tmp("pred-labels.csv"),
                     "--group-by", "group", "--split", "train=0.5,val=0.5", "-o", tmp("pred-ds")],
                    ["train", tmp("pred-ds"), "--model", tmp("pred-mlp.json"), "-o",
                     tmp("pred-run"), "--epochs", "1", "--seed", "1"]):
            code, _, err = run([MLTOOL, *cmd, "-q"])
            expect(code == 0, f"{cmd[0]}: exit {code}: {err[-2000:]}")
        outs = {}
        for side, extra in (("local", []), ("web", predict_opts)):
            out = outs[side] = tmp(f"pred-out-{side}")
            code, summary, err = run_json([MLTOOL, "predict", tmp("pred-run"),
                                           tmp(f"pred-feat-{side}"), "-o", out,
                                           "--heatmap-size", "256", "--json", *extra])
            expect(code == 0 and summary["heatmaps"] == 1,
                   f"predict {side}: exit {code}: {summary} {err[-2000:]}")
            expect("blank picture" not in err and TOKEN not in err + json.dumps(summary),
                   f"predict {side}: {err[-1500:]}")
        for name in ("predictions.csv", f"heatmaps/{uid}.png", f"heatmaps/{uid}.geojson"):
            with open(os.path.join(outs["local"], name), "rb") as a, \
                    open(os.path.join(outs["web"], name), "rb") as b:
                expect(a.read() == b.read(), f"predict: {name} differs over DICOMweb")
        # Without --dicomweb-origin the token does not go to the store's server: a blank
        # picture, with a warning naming the option and the origin; the server is not asked.
        asked = len(proxy.paths)
        code, _, err = run([MLTOOL, "predict", tmp("pred-run"), tmp("pred-feat-web"), "-o",
                            tmp("pred-out-noorigin"), *web_opts])
        expect(code == 0 and "blank picture" in err and f"--dicomweb-origin {origin}" in err,
               f"predict without --dicomweb-origin: exit {code}: {err[-1500:]}")
        expect(len(proxy.paths) == asked, "predict without --dicomweb-origin asked the server")
        # Without the token the slide cannot be read: a blank picture, with a warning.
        code, _, err = run([MLTOOL, "predict", tmp("pred-run"), tmp("pred-feat-web"), "-o",
                            tmp("pred-out-notoken")])
        expect(code == 0 and "blank picture" in err and "401" in err,
               f"predict without the token: exit {code}: {err[-1500:]}")
    finally:
        proxy.shutdown()
        proxy.server_close()


def check_predict_image():
    """An image model on coordinates stores (extract SLIDE): predict reads the tiles' pixels
    from the series over DICOMweb (--dicomweb-token-file, through the token proxy), the same
    logits as from the local files. Runs after check_predict (its copy named by the UID)."""
    url, directory = SERVER["series"]["ycc"]
    uid = url.rsplit("/", 1)[1]
    local = tmp("pred-src", uid + ".d")
    if not os.path.exists(local):
        shutil.copytree(directory, local)
    proxy = Proxy(token=TOKEN)
    try:
        web_opts = ["--dicomweb-token-file", tmp("pred-token")]
        with open(tmp("pred-token"), "w") as f:
            f.write(TOKEN + "\n")
        # predict reads the store's slides: their server named with --dicomweb-origin.
        origin = ["--dicomweb-origin", f"http://127.0.0.1:{proxy.server_address[1]}"]
        for side, slide, extra in (("local", local, []), ("web", proxy.url(url), web_opts)):
            code, _, err = run([MLTOOL, "extract", slide, "-o", tmp(f"img-feat-{side}"), "--model",
                                "builtin:color-texture", "--mpp", "0.5", "--tile-size", "32",
                                "--threads", "2", "-q", *extra])
            expect(code == 0, f"extract {side}: exit {code}: {err[-2000:]}")
        with open(tmp("img-feat-local", "keys.txt")) as f:
            keys = f.read().split()
        with open(tmp("img-labels.csv"), "w") as f:
            f.write("key,label,group\n" + "".join(
                f"{k},{'ab'[i % 2]},{i % 4}\n" for i, k in enumerate(keys)))
        with open(tmp("img-cnn.json"), "w") as f:
            json.dump({"family": "rescnn", "channels": [4, 8]}, f)
        for cmd in (["pack", tmp("img-feat-local"), "--labels", tmp("img-labels.csv"), "--unit",
                     "image", "--group-by", "group", "--split", "train=0.5,val=0.5", "-o",
                     tmp("img-ds")],
                    ["train", tmp("img-ds"), "--model", tmp("img-cnn.json"), "-o", tmp("img-run"),
                     "--epochs", "1", "--batch", "16", "--seed", "1"]):
            code, _, err = run([MLTOOL, *cmd, "-q"])
            expect(code == 0, f"{cmd[0]}: exit {code}: {err[-2000:]}")
        for side, extra in (("local", []), ("web", web_opts)):
            code, summary, err = run_json([MLTOOL, "predict", tmp("img-run"),
                                           tmp(f"img-feat-{side}", "coordinates.lmdb"), "-o",
                                           tmp(f"img-out-{side}"), "--heatmap-size", "128",
                                           "--threads", "2", "--json", *extra,
                                           *(origin if extra else [])])
            expect(code == 0 and summary["samples"] == len(keys),
                   f"predict {side}: exit {code}: {summary} {err[-2000:]}")
        for name in ("predictions.csv", f"heatmaps/{uid}.png"):
            with open(tmp("img-out-local", name), "rb") as a, \
                    open(tmp("img-out-web", name), "rb") as b:
                expect(a.read() == b.read(), f"predict (image model): {name} differs over DICOMweb")
        code, _, err = run([MLTOOL, "predict", tmp("img-run"),  # the pixels come from the server
                            tmp("img-feat-web", "coordinates.lmdb"), "-o", tmp("img-out-notoken")])
        expect(code != 0 and "401" in err, f"predict without the token: exit {code}: {err[-1500:]}")
        # train reads a coordinates store's tiles over DICOMweb with the same options: the
        # token from --dicomweb-token-file, to the server --dicomweb-origin names; without it
        # the server's 401 names the option.
        code, _, err = run([MLTOOL, "pack", tmp("img-feat-web"), "--labels", tmp("img-labels.csv"),
                            "--unit", "image", "--group-by", "group", "--split",
                            "train=0.5,val=0.5", "-o", tmp("img-ds-web"), "-q"])
        expect(code == 0, f"pack (web): exit {code}: {err[-2000:]}")
        train_web = [MLTOOL, "train", tmp("img-ds-web"), "--model", tmp("img-cnn.json"), "--epochs",
                     "1", "--batch", "16", "--seed", "1", "-q"]
        code, _, err = run([*train_web, "-o", tmp("img-run-notoken")])
        expect(code == 2 and "401" in err and "--dicomweb-token-file" in err,
               f"train without the token: exit {code}: {err[-1500:]}")
        code, _, err = run([*train_web, "-o", tmp("img-run-web"), *web_opts, *origin])
        expect(code == 0, f"train over DICOMweb with the token: exit {code}: {err[-2000:]}")
        with open(tmp("img-run", "metrics.jsonl"), "rb") as a, \
                open(tmp("img-run-web", "metrics.jsonl"), "rb") as b:
            strip = [json.loads(line) for line in a], [json.loads(line) for line in b]
        same = [{k: v for k, v in r.items() if "second" not in k and k != "time"}
                for r in strip[0]] == [{k: v for k, v in r.items() if "second" not in k and
                                         k != "time"} for r in strip[1]]
        expect(same, f"train over DICOMweb: metrics differ from the local run: {strip}")
    finally:
        proxy.shutdown()
        proxy.server_close()


CHECKS = [check_tile_passthrough, check_tile_decoded, check_info, check_extract, check_predict,
          check_predict_image,
          check_reference_client, check_token, check_faults, check_failed_tile,
          check_one_frame_a_request,
          check_resume, check_tls, check_http2, check_large_level_batches, check_bad_url]

if __name__ == "__main__":
    run_checks("dicomweb", CHECKS, sys.argv[2:], fixtures=fixtures, teardown=teardown)
