#!/usr/bin/env python3
"""A lying DICOMweb server (issue 53: its metadata and its frames): a proxy
(lying_server.LyingProxy) in front of a real Orthanc (orthanc_server.py, loaded with
pydicom-written series, scripts/fixtures/dicom_series.py) rewrites the answers of one series:

- metadata whose Rows x Columns overflows (Rows 1, Columns 6148914691236517461 wraps a signed
  64-bit size to 767 bytes; Rows = Columns = 2^32 to 0), a non-numeric Rows, and a
  SOPInstanceUID with "../" in it (`1.2/../../../../admin`: libcurl collapses the path, so a
  frames request would be the user's authenticated GET of /admin);
- frames of the wrong size: JPEG frames re-encoded at half size (read as regions, and passed
  through as tiles), and uncompressed frames one byte short.

For each, `mltool tile` exits 2 naming the server's URL, the tag and the value (or the frame's
size and the metadata's), is never killed by a signal, ends within its deadline with its peak
memory bounded (printed), and asks nothing outside the series. With --keep-going, an honest
series given beside the lying one is tiled and kept: exit 4, its tiles in the store, the QC
index written.

    dicomweb_lies_test.py MLTOOL [CHECK ...]
"""
import io
import json
import os
import re
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from cli_common import expect, run_checks, tmp  # noqa: E402
from lying_server import Answer, LyingProxy, bounded_run  # noqa: E402
from orthanc_server import Orthanc, require as require_orthanc  # noqa: E402
from store_refs import read_tile_store  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts", "fixtures"))

MLTOOL = sys.argv[1]
SERVER = {}  # "orthanc"; "series": name → Orthanc's series URL
DEADLINE_S = 120  # a hang guard: each run here takes seconds
MEMORY_MB = 512  # generous: these runs peak at 35–80 MB (VmHWM), an honest run below 200

ROWS, COLUMNS = "00280010", "00280011"
SOP_INSTANCE = "00080018"


def fixtures():
    require_orthanc()
    import dicom_series  # pydicom, numpy, Pillow
    dicom_series.write(tmp("honest"))
    dicom_series.write(tmp("lying"))
    dicom_series.write(tmp("raw"), syntax="raw")
    orthanc = SERVER["orthanc"] = Orthanc(tmp("orthanc"))
    SERVER["series"] = {name: orthanc.upload(tmp(name)) for name in ("honest", "lying", "raw")}
    return f"Orthanc on port {orthanc.port}"


def teardown():
    if "orthanc" in SERVER:
        SERVER["orthanc"].stop()


def series_path(name):
    return "/" + SERVER["series"][name].split("/", 3)[3]


def volumes(doc):
    return [ds for ds in doc if "VOLUME" in ds.get("00080008", {}).get("Value", [])]


def metadata_lie(name, change):
    """A lie(request) that passes everything through but series `name`'s metadata, whose
    VOLUME instances `change(dataset)` rewrites."""
    def lie(request):
        if request.path != series_path(name) + "/metadata":
            return None
        status, headers, body = request.upstream()
        doc = json.loads(body)
        for ds in volumes(doc):
            change(ds)
        return Answer(status, list(headers.items()), json.dumps(doc).encode())
    return lie


def set_value(key, value):
    def change(ds):
        ds[key]["Value"] = [value]
    return change


def multipart_parts(body, content_type):
    """(boundary, [(part headers, part bytes)]) of a multipart/related answer."""
    boundary = re.search(r'boundary="?([^";]+)"?', content_type).group(1).encode()
    parts = []
    for chunk in body.split(b"--" + boundary)[1:]:
        if chunk.startswith(b"--"):
            break
        headers, _, data = chunk[2:].partition(b"\r\n\r\n")
        parts.append((headers, data[:-2]))  # the CR LF before the next delimiter
    return boundary, parts


def level0_instance(name):
    """The SOPInstanceUID of series `name`'s level 0 (its largest VOLUME instance), as Orthanc
    says it."""
    req = urllib.request.Request(SERVER["series"][name] + "/metadata",
                                 headers={"Accept": "application/dicom+json"})
    doc = json.loads(urllib.request.urlopen(req, timeout=60).read())
    level0 = max(volumes(doc), key=lambda ds: ds["00480006"]["Value"][0])
    return level0[SOP_INSTANCE]["Value"][0]


def frames_lie(name, change, instance=""):
    """A lie(request) that passes everything through but series `name`'s frames (of `instance`
    only, if given), each of which `change(bytes)` rewrites."""
    def lie(request):
        if not (request.path.startswith(series_path(name) + "/instances/" + instance) and
                "/frames/" in request.path):
            return None
        status, headers, body = request.upstream()
        if status != 200:
            return Answer(status, list(headers.items()), body)
        content_type = next(v for k, v in headers.items() if k.lower() == "content-type")
        boundary, parts = multipart_parts(body, content_type)
        out = b"".join(b"--" + boundary + b"\r\n" + h + b"\r\n\r\n" + change(data) + b"\r\n"
                       for h, data in parts) + b"--" + boundary + b"--\r\n"
        return Answer(status, list(headers.items()), out)
    return lie


def half_size_jpeg(data):
    from PIL import Image
    img = Image.open(io.BytesIO(data))
    buf = io.BytesIO()
    img.resize((img.width // 2, img.height // 2)).save(buf, "JPEG", quality=80)
    return buf.getvalue()


def one_byte_short(data):
    return data[:-1]


def tile_through(lie, name, *args, slides=None):
    """mltool tile of series `name` through a proxy telling `lie`: (result, proxy URL, proxy)."""
    proxy = LyingProxy(SERVER["orthanc"].port, lie)
    url = proxy.url(SERVER["series"][name])
    store = tmp(f"store-{len(os.listdir(tmp()))}")
    try:
        r = bounded_run([MLTOOL, "tile", *(slides or []), url, "-o", store, "--threads", "2",
                         *args], DEADLINE_S)
    finally:
        proxy.close()
    print(f"  {name} {args}: exit {r.code} in {r.seconds:.1f} s, peak RSS {r.peak_rss_mb:.0f} MB")
    expect(not r.signal and not r.timed_out,
           f"killed by signal {r.signal} (timed out: {r.timed_out}): {r.err[-1500:]}")
    expect(r.peak_rss_mb < MEMORY_MB, f"peak RSS {r.peak_rss_mb:.0f} MB")
    outside = proxy.outside(SERVER["series"][name])
    expect(not outside, f"requests outside the series: {outside[:5]}")
    return r, url, store


def refused(lie, name, says, *args):
    """The run through `lie` exits 2 with a message naming the URL and each of `says`."""
    r, url, _ = tile_through(lie, name, "--mpp", "0.5", "--tile-size", "128", *args)
    expect(r.code == 2, f"exit {r.code}, not 2: {r.err[-1500:]}")
    for part in [url, *says]:
        expect(part in r.err, f"the error does not name {part!r}: {r.err[-1500:]}")
    expect("terminate called" not in r.err, r.err[-1500:])
    return r


def check_overflowing_size():
    """Rows x Columns that wraps 64 bits (to 767 bytes, and to 0): refused as out of range."""
    def wraps(ds):
        ds[ROWS]["Value"], ds[COLUMNS]["Value"] = [1], [6148914691236517461]
    refused(metadata_lie("lying", wraps), "lying",
            ["(0028,0011) Columns", "6148914691236517461", "65535"])

    def zero(ds):
        ds[ROWS]["Value"] = ds[COLUMNS]["Value"] = [4294967296]
    refused(metadata_lie("lying", zero), "lying", ["(0028,0010) Rows", "4294967296"])


def check_non_numeric_rows():
    """A Rows that is no number: a FormatError naming the tag and the value, not "stoll"."""
    r = refused(metadata_lie("lying", set_value(ROWS, "many")), "lying",
                ["(0028,0010) Rows", '"many"'])
    expect("stoll" not in r.err, r.err[-1000:])


def check_instance_uid_traversal():
    """A SOPInstanceUID with "../": refused before any frame is asked for; no request leaves
    the series (tile_through checks what the proxy saw)."""
    refused(metadata_lie("lying", set_value(SOP_INSTANCE, "1.2/../../../../admin")), "lying",
            ["(0008,0018) SOPInstanceUID", "1.2/../../../../admin", "not a DICOM UID"])


def check_half_size_jpeg_frames():
    """JPEG frames of half the metadata's size: refused, read as regions (decoded), and passed
    through as tiles (only level 0's frames lie: the thumbnail, read from level 1, is honest)."""
    refused(frames_lie("lying", half_size_jpeg), "lying",
            ["(Columns 256, Rows 256 in the metadata): the image is 128 x 128 pixels, "
             "not 256 x 256"])
    lie = frames_lie("lying", half_size_jpeg, level0_instance("lying"))
    r, url, _ = tile_through(lie, "lying", "--level", "0", "--tile-size", "256")
    expect(r.code == 2, f"passed through: exit {r.code}, not 2: {r.err[-1500:]}")
    for part in (url, "the frame is 128 x 128 pixels, not Columns 256 x Rows 256"):
        expect(part in r.err, f"passed through: the error does not name {part!r}: {r.err[-1500:]}")


def check_short_uncompressed_frames():
    """Uncompressed frames one byte short of Rows x Columns x 3: refused, naming both sizes.
    (The honest uncompressed series is read first: the refusal is the lie's.)"""
    r, _, _ = tile_through(None, "raw", "--mpp", "0.5", "--tile-size", "128")
    expect(r.code == 0, f"the honest uncompressed series: exit {r.code}: {r.err[-1500:]}")
    refused(frames_lie("raw", one_byte_short), "raw",
            ["an uncompressed frame of 196607 bytes, not Rows 256 x Columns 256 x 3 = 196608"])


def check_keep_going():
    """--keep-going: the honest series beside a lying one is tiled and kept (exit 4), the QC
    index written; the lying one is listed as failed with the reason."""
    for lie, why in ((set_value(ROWS, "many"), '(0028,0010) Rows is "many"'),
                     (set_value(SOP_INSTANCE, "1.2/../../../../admin"), "not a DICOM UID")):
        qc = tmp(f"qc-{len(os.listdir(tmp()))}")
        honest = SERVER["series"]["honest"]
        r, url, store = tile_through(metadata_lie("lying", lie), "lying", "--mpp", "0.5",
                                     "--tile-size", "128", "--keep-going", "--qc", qc,
                                     "--json", slides=[honest])
        expect(r.code == 4, f"exit {r.code}, not 4: {r.err[-1500:]}")
        expect(url in r.err and why in r.err, f"the error names {url} and {why!r}: {r.err[-1500:]}")
        summary = json.loads(r.out)
        status = {s["path"]: s["status"] for s in summary["slides"]}
        expect(status.get(honest) == "tiled" and status.get(url) == "failed", f"{status}")
        _, tiles = read_tile_store(store)
        honest_id = honest.rsplit("/", 1)[1]
        kept = [k for k in tiles if k.startswith(honest_id + "/")]
        expect(kept and len(kept) == len(tiles), f"{len(kept)} of {len(tiles)} tiles are the "
                                                 "honest series'")
        expect(os.path.exists(os.path.join(qc, "index.html")), f"no QC index in {qc}")


CHECKS = [check_overflowing_size, check_non_numeric_rows, check_instance_uid_traversal,
          check_half_size_jpeg_frames, check_short_uncompressed_frames, check_keep_going]

if __name__ == "__main__":
    run_checks("dicomweb lies", CHECKS, sys.argv[2:], fixtures=fixtures, teardown=teardown)
