"""A lying DICOMweb server for the hostile-input tests (dicomweb_lies_test.py,
dicomweb_limits_test.py): a reverse proxy on 127.0.0.1 in front of the real Orthanc
(orthanc_server.py) that passes each request through or answers with a lie, and a way to run
mltool against it that measures what the run did: its exit, the signal that killed it, its
seconds and its peak memory.

    proxy = LyingProxy(orthanc.port, lie)   # lie(request) -> None (pass through) or Answer
    r = bounded_run([mltool, "tile", proxy.url(series_url), ...], deadline_s=60)
    r.code, r.signal, r.seconds, r.peak_rss_mb; proxy.outside(series_url) == []
"""
import http.client
import http.server
import os
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Answer:
    """What the proxy sends instead of the server's answer: `body` at once, or `chunks` one
    after another with `chunk_delay` seconds between them (a trickle). A `Content-Length` is
    sent when `length` is not None (for chunks: their total unless given)."""
    status: int = 200
    headers: list = field(default_factory=list)
    body: bytes = b""
    chunks: object = None  # an iterable of bytes
    chunk_delay: float = 0.0
    length: object = None


class Request:
    """One request the proxy got: its path and headers; upstream() asks Orthanc the same."""

    def __init__(self, handler, upstream_port):
        self.path = handler.path
        self.headers = handler.headers
        self._port = upstream_port

    def upstream(self):
        """(status, {header: value}, body) of the same GET sent to Orthanc."""
        conn = http.client.HTTPConnection("127.0.0.1", self._port, timeout=120)
        conn.request("GET", self.path, headers={"Accept": self.headers.get("Accept", "*/*")})
        r = conn.getresponse()
        body = r.read()
        headers = {k: v for k, v in r.getheaders() if k.lower() in ("content-type",)}
        conn.close()
        return r.status, headers, body


class LyingProxy(http.server.ThreadingHTTPServer):
    """Orthanc behind 127.0.0.1:PORT; `lie(request)` decides each answer. `paths` lists every
    request's path, `auth` every request's Authorization header ("" when none)."""
    daemon_threads = True

    def __init__(self, upstream_port, lie=None):
        self.upstream_port, self.lie = upstream_port, lie or (lambda request: None)
        self.lock = threading.Lock()
        self.paths, self.auth = [], []
        super().__init__(("127.0.0.1", 0), _Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def port(self):
        return self.server_address[1]

    def url(self, series_url):
        """`series_url` (Orthanc's) as this proxy serves it."""
        return series_url.replace(f"//127.0.0.1:{self.upstream_port}/",
                                  f"//127.0.0.1:{self.port}/")

    def outside(self, series_url):
        """The paths requested that are neither under the series nor the QIDO-RS query of its
        study (what mltool asks when a series is unknown)."""
        path = "/" + self.url(series_url).split("/", 3)[3]
        study = path.split("/series/")[0]
        root = study.split("/studies/")[0]
        uid = study.rsplit("/", 1)[1]
        allowed = (path + "/", path + "?")
        return [p for p in self.paths
                if not (p == path or p.startswith(allowed) or
                        p == f"{root}/studies?StudyInstanceUID={uid}")]

    def close(self):
        self.shutdown()
        self.server_close()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        p = self.server
        with p.lock:
            p.paths.append(self.path)
            p.auth.append(self.headers.get("Authorization", ""))
        request = Request(self, p.upstream_port)
        answer = p.lie(request)
        if answer is None:
            status, headers, body = request.upstream()
            answer = Answer(status, list(headers.items()), body)
        try:
            self._send(answer)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up: what a limit or a deadline should make it do

    def _send(self, a):
        self.send_response(a.status)
        for k, v in a.headers:
            self.send_header(k, v)
        if a.chunks is None:
            self.send_header("Content-Length", str(len(a.body) if a.length is None else a.length))
            self.end_headers()
            self.wfile.write(a.body)
            return
        if a.length is not None:
            self.send_header("Content-Length", str(a.length))
        else:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for chunk in a.chunks:
            if a.length is not None:
                self.wfile.write(chunk)
            else:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
            if a.chunk_delay:
                time.sleep(a.chunk_delay)
        if a.length is None:
            self.wfile.write(b"0\r\n\r\n")


@dataclass
class Result:
    code: int          # the exit status (-N when killed by signal N)
    out: str
    err: str
    seconds: float
    peak_rss_mb: float  # the program's peak resident memory (VmHWM, polled every 20 ms)
    signal: int         # the signal that killed it, or 0
    timed_out: bool     # killed by bounded_run at its deadline


def _hwm_kib(pid):
    """The process's peak resident memory so far (VmHWM: since its exec, unlike ru_maxrss,
    which keeps the forked test process's own), or 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def bounded_run(cmd, deadline_s, env=None):
    """Runs `cmd` with a deadline (SIGKILL past it): its exit, output, seconds, peak memory."""
    start = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out, err = [], []
    readers = [threading.Thread(target=lambda s, o: o.append(s.read()), args=(s, o), daemon=True)
               for s, o in ((p.stdout, out), (p.stderr, err))]
    for t in readers:
        t.start()
    timed_out, hwm = False, 0
    while True:
        # Polled while it runs: the last poll sees its peak but for the last 20 ms of growth.
        hwm = max(hwm, _hwm_kib(p.pid))
        pid, status = os.waitpid(p.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() - start > deadline_s:
            timed_out = True
            p.kill()
            pid, status = os.waitpid(p.pid, 0)
            break
        time.sleep(0.02)
    p.returncode = os.waitstatus_to_exitcode(status)
    for t in readers:
        t.join(10)
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
    return Result(p.returncode, (out or [b""])[0].decode(errors="replace"),
                  (err or [b""])[0].decode(errors="replace"), time.monotonic() - start,
                  hwm / 1024.0, sig, timed_out)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

