#!/usr/bin/env python3
"""The DICOMweb transport against servers that lie (issue 53: limits, deadlines, credentials,
Retry-After), on a real Orthanc (orthanc_server.py; exit 77, skipped, when it is missing and
cannot be installed) behind lying_server.LyingProxy, with a pydicom-written series
(scripts/fixtures/dicom_series.py). Every run is bounded_run: it must end with an error naming
the server and the problem, never by a signal, never past its deadline, with bounded peak
memory (printed), and ask nothing outside the series (proxy.outside).

- a gzip bomb as the series' metadata (Content-Encoding: gzip, 4 GiB of zeros inflated) stops
  at the metadata limit (256 MiB) naming the URL and the limit;
- metadata trickled a byte a second: --dicomweb-timeout 3 is the whole metadata request's deadline;
- a frames answer far larger than its frames can be (no Content-Length, or a lying one);
- a 429 with Retry-After: 2 is tried again after at least that (the log says so); a
  Retry-After longer than --dicomweb-timeout fails at once naming the wait asked;
- a redirect is not followed (the token and the password go nowhere a server sends them);
- the token: a coordinates store whose slide record names another server sends it no token
  (refused naming the store, the slide, the origin and --dicomweb-origin), and sends it with
  --dicomweb-origin; plain http:// to a non-loopback address is refused before connecting;
- a URL's user name and password are in no record, log, QC index or summary.

    dicomweb_limits_test.py MLTOOL [CHECK ...]
"""
import os
import sys
import time
import zlib

import lmdb

sys.path.insert(0, os.path.dirname(__file__))
from cli_common import expect, run_checks, tmp  # noqa: E402
from lying_server import Answer, LyingProxy, bounded_run  # noqa: E402
from orthanc_server import Orthanc, require as require_orthanc  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts", "fixtures"))
MLTOOL = sys.argv[1]
TOKEN = "tok-53-never-leaks"
SERVER = {}  # "orthanc", "url" (the series on Orthanc)
MEMORY_MB = 640  # generous: the metadata limit is 256 MiB (the bomb peaks near 300 MB)


def fixtures():
    require_orthanc()
    import dicom_series  # pydicom, numpy, Pillow
    dicom_series.write(tmp("ycc"))
    orthanc = SERVER["orthanc"] = Orthanc(tmp("orthanc"))
    SERVER["url"] = orthanc.upload(tmp("ycc"))
    with open(tmp("token"), "w") as f:
        f.write(TOKEN + "\n")
    return f"Orthanc on port {orthanc.port}"


def teardown():
    if "orthanc" in SERVER:
        SERVER["orthanc"].stop()


def attack(name, proxy, cmd, deadline_s, series=None):
    """bounded_run of `cmd`: ended by itself within `deadline_s`, no signal, memory bounded,
    nothing asked outside the series. Prints what it measured."""
    r = bounded_run([MLTOOL, *cmd], deadline_s)
    print(f"  {name}: exit {r.code} in {r.seconds:.1f} s, peak RSS {r.peak_rss_mb:.0f} MB",
          flush=True)
    expect(not r.timed_out, f"{name}: still running after {deadline_s} s: {r.err[-1500:]}")
    expect(r.signal == 0, f"{name}: killed by signal {r.signal}: {r.err[-1500:]}")
    expect(r.peak_rss_mb < MEMORY_MB, f"{name}: peak RSS {r.peak_rss_mb:.0f} MB")
    r.text = r.out + r.err  # info reports a slide's error on stdout, the others on stderr
    if proxy is not None:
        outside = proxy.outside(series or SERVER["url"])
        expect(not outside, f"{name}: requests outside the series: {outside[:5]}")
    expect(TOKEN not in r.out + r.err, f"{name}: the token is in the output")
    return r


def metadata_path(request):
    return request.path.split("?")[0].endswith("/metadata")


def bomb_file():
    """gzip of 4 GiB of zeros (some 4 MB), made once, streaming."""
    path = tmp("bomb.gz")
    if not os.path.exists(path):
        c = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: gzip framing
        zeros = bytes(64 << 20)
        with open(path, "wb") as f:
            for _ in range(64):
                f.write(c.compress(zeros))
            f.write(c.flush())
    with open(path, "rb") as f:
        return f.read()


def check_gzip_bomb():
    """Metadata inflating to 4 GiB: stopped at the 256 MiB limit, named, not retried."""
    bomb = bomb_file()
    lie = lambda q: Answer(200, [("Content-Type", "application/dicom+json"),  # noqa: E731
                                 ("Content-Encoding", "gzip")], bomb) if metadata_path(q) else None
    proxy = LyingProxy(SERVER["orthanc"].port, lie)
    try:
        url = proxy.url(SERVER["url"])
        r = attack("gzip bomb", proxy, ["info", url], 120)
        expect(r.code == 2 and url + "/metadata" in r.text and "larger than 256 MiB" in r.text,
               f"gzip bomb: exit {r.code}: {r.text[-1500:]}")
        expect(len(proxy.paths) == 1, f"gzip bomb: {len(proxy.paths)} requests (retried?)")
    finally:
        proxy.close()


def check_trickle():
    """Metadata a byte a second: --dicomweb-timeout 3 ends each try after 3 s."""
    def lie(q):
        if not metadata_path(q):
            return None
        status, headers, body = q.upstream()
        return Answer(status, list(headers.items()), chunks=(body[i:i + 1] for i in
                                                             range(len(body))), chunk_delay=1.0)
    proxy = LyingProxy(SERVER["orthanc"].port, lie)
    try:
        url = proxy.url(SERVER["url"])
        r = attack("trickle", proxy, ["info", url, "--dicomweb-timeout", "3"], 40)
        expect(r.code == 2 and url + "/metadata" in r.text and "--dicomweb-timeout 3" in r.text,
               f"trickle: exit {r.code}: {r.text[-1500:]}")
    finally:
        proxy.close()


def check_oversized_frames():
    """Frames answers far larger than their frames can be: an endless stream without a
    Content-Length, and one announcing 100 GB. The tiles fail naming the limit."""
    for name, length in (("stream", None), ("announced", 100 << 30)):
        def lie(q, length=length):
            if "/frames/" not in q.path:
                return None
            return Answer(200, [("Content-Type", "multipart/related; type=\"application/"
                                 "octet-stream\"; boundary=xyz")],
                          chunks=(b"\0" * (1 << 20) for _ in range(4096)), length=length)
        proxy = LyingProxy(SERVER["orthanc"].port, lie)
        try:
            url = proxy.url(SERVER["url"])
            r = attack(f"oversized frames ({name})", proxy,
                       ["tile", url, "-o", tmp(f"big-{name}"), "--tile-size", "64", "--mpp", "0.5",
                        "--threads", "2"], 240)
            expect(r.code in (2, 4) and "/frames/" in r.err and "is larger than" in r.err and
                   f"127.0.0.1:{proxy.port}" in r.err,
                   f"oversized frames ({name}): exit {r.code}: {r.err[-1500:]}")
        finally:
            proxy.close()


def check_retry_after():
    """429 with Retry-After: 2 is tried again 2 s later or more, as the log says; a Retry-After
    of an hour (past --dicomweb-timeout) fails at once, naming the wait."""
    seen = []

    def lie(q):
        if not metadata_path(q):
            return None
        seen.append(time.monotonic())
        return Answer(429, [("Retry-After", "2")]) if len(seen) == 1 else None
    proxy = LyingProxy(SERVER["orthanc"].port, lie)
    try:
        url = proxy.url(SERVER["url"])
        r = attack("Retry-After 2", proxy, ["info", url], 60)
        expect(r.code == 0 and "trying again in 2.00 s (the server's Retry-After: 2)" in r.text
               and "429" in r.text,
               f"Retry-After 2: exit {r.code}: {r.err[-1500:]}")
        expect(len(seen) == 2 and seen[1] - seen[0] >= 1.9,
               f"Retry-After 2: tried again after {seen[1:] and seen[1] - seen[0]} s")
    finally:
        proxy.close()
    lie = lambda q: Answer(429, [("Retry-After", "3600")]) if metadata_path(q) else None  # noqa
    proxy = LyingProxy(SERVER["orthanc"].port, lie)
    try:
        url = proxy.url(SERVER["url"])
        r = attack("Retry-After 3600", proxy, ["info", url, "--dicomweb-timeout", "10"], 30)
        expect(r.code == 2 and "3600 s (Retry-After)" in r.text and "--dicomweb-timeout" in r.text
               and url in r.text, f"Retry-After 3600: exit {r.code}: {r.text[-1500:]}")
        expect(len(proxy.paths) == 1, f"Retry-After 3600: {len(proxy.paths)} requests")
    finally:
        proxy.close()


def token_lie(q):
    """A token-checking server."""
    return None if q.headers.get("Authorization") == f"Bearer {TOKEN}" else Answer(401)


def check_redirect():
    """A redirect to another server is not followed: the run fails naming it."""
    other = LyingProxy(SERVER["orthanc"].port)
    lie = lambda q: (Answer(302, [("Location", other.url(SERVER["url"]) + "/metadata")])  # noqa
                     if metadata_path(q) else token_lie(q))
    proxy = LyingProxy(SERVER["orthanc"].port, lie)
    try:
        url = proxy.url(SERVER["url"])
        r = attack("redirect", proxy, ["info", url, "--dicomweb-token-file", tmp("token")], 60)
        expect(r.code == 2 and "302" in r.text and "not followed" in r.text,
               f"redirect: exit {r.code}: {r.text[-1500:]}")
        expect(other.paths == [], f"redirect: followed: {other.paths}")
    finally:
        proxy.close()
        other.close()


def rewrite_slide_paths(store, old, new):
    """Every slides/ record of `store` with `old` replaced by `new` in its path."""
    env = lmdb.open(store, max_dbs=8, subdir=os.path.isdir(store))
    with env.begin(write=True) as txn:
        meta = env.open_db(b"meta", txn=txn, create=False)
        for k, v in list(txn.cursor(db=meta)):
            if k.startswith(b"slides/"):
                txn.put(k, bytes(v).replace(old.encode(), new.encode()), db=meta)
    env.close()


def check_token_origins():
    """extract on a coordinates store whose slide record names another server: no token goes
    there unless --dicomweb-origin names it."""
    proxy = LyingProxy(SERVER["orthanc"].port, token_lie)
    other = LyingProxy(SERVER["orthanc"].port, token_lie)
    try:
        url = proxy.url(SERVER["url"])
        web = ["--dicomweb-token-file", tmp("token")]
        model = ["--model", "builtin:color-texture", "--threads", "2", "-q"]
        r = attack("extract SLIDE", proxy, ["extract", url, "-o", tmp("coords"), "--mpp", "0.5",
                                            "--tile-size", "32", *model, *web], 240)
        expect(r.code == 0, f"extract SLIDE: exit {r.code}: {r.err[-1500:]}")
        store = tmp("coords", "coordinates.lmdb")
        here, there = f"//127.0.0.1:{proxy.port}/", f"//127.0.0.1:{other.port}/"
        rewrite_slide_paths(store, here, there)
        origin = f"http://127.0.0.1:{other.port}"
        r = attack("store names another server", other,
                   ["extract", store, "-o", tmp("coords-out"), *model, *web], 120)
        expect(r.code == 2 and "--dicomweb-origin " + origin in r.err and store in r.err and
               SERVER["url"].rsplit("/", 1)[1] in r.err,
               f"store names another server: exit {r.code}: {r.err[-1500:]}")
        expect(other.paths == [], f"the other server was asked: {other.paths[:3]}")
        r = attack("--dicomweb-origin", other, ["extract", store, "-o", tmp("coords-out"), *model,
                                                *web, "--dicomweb-origin", origin], 240)
        expect(r.code == 0, f"--dicomweb-origin: exit {r.code}: {r.err[-1500:]}")
        expect(other.auth and all(a == f"Bearer {TOKEN}" for a in other.auth),
               f"--dicomweb-origin: the other server got {set(other.auth)}")
        # Plain http:// to a host that is not a loopback address: refused before connecting.
        far = "http://10.255.255.1/dicom-web/studies/1.2.3/series/4.5.6"
        r = attack("plain http", None, ["tile", far, "-o", tmp("far"), *web], 30)
        expect(r.code == 2 and "https://" in r.err and "http://10.255.255.1:80" in r.err,
               f"plain http: exit {r.code}: {r.err[-1500:]}")
        expect(r.seconds < 10, f"plain http: {r.seconds:.1f} s (connected?)")
    finally:
        proxy.close()
        other.close()


def check_credentials():
    """http://USER:PASSWORD@... is sent to the server as Basic auth, and written nowhere."""
    password = "pw-53-secret"
    proxy = LyingProxy(SERVER["orthanc"].port)
    try:
        url = proxy.url(SERVER["url"]).replace("http://", f"http://reader:{password}@")
        out, qc = tmp("cred-store"), tmp("cred-qc")
        r = attack("credentials", proxy, ["tile", url, "-o", out, "--qc", qc, "--json",
                                          "--tile-size", "64", "--mpp", "0.5", "-v"], 240)
        expect(r.code == 0, f"credentials: exit {r.code}: {r.err[-1500:]}")
        expect(any(a.startswith("Basic ") for a in proxy.auth), f"no Basic auth: {proxy.auth[:2]}")
        expect(password not in r.out + r.err, "the password is in the output")
        for d in (out, qc):
            for base, _, files in os.walk(d):
                for name in files:
                    with open(os.path.join(base, name), "rb") as f:
                        expect(password.encode() not in f.read(),
                               f"the password is in {os.path.join(base, name)}")
        # A URL with a query (a token there) is refused naming it without its value.
        r = attack("query", None, ["info", SERVER["url"] + "?access_token=" + password], 30)
        expect(r.code != 0 and password not in r.text and "access_token=REDACTED" in r.text,
               f"query: exit {r.code}: {r.text[-1500:]}")
    finally:
        proxy.close()


CHECKS = [check_gzip_bomb, check_trickle, check_oversized_frames, check_retry_after,
          check_redirect, check_token_origins, check_credentials]

if __name__ == "__main__":
    run_checks("dicomweb_limits", CHECKS, sys.argv[2:], fixtures=fixtures, teardown=teardown)
