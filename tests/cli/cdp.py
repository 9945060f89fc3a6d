"""Headless Chromium driven through its DevTools protocol over a pipe (--remote-debugging-pipe:
commands on fd 3, answers and events on fd 4, each a JSON message ended by a NUL byte), so no
port is opened and no websocket client is needed. One page; its network requests and script
exceptions are recorded.

    with Browser(width, height) as b:
        b.open("file:///.../page.html")
        png = b.screenshot()
"""
import base64
import fcntl
import json
import os
import subprocess
import tempfile
import time

from report_page import chromium  # the one lookup of the browser


class Browser:
    def __init__(self, width=1000, height=800):
        self.width, self.height = width, height
        self.requests, self.exceptions, self.console = [], [], []
        self._id, self._buffer, self._events = 0, b"", []

    def __enter__(self):
        self._profile = tempfile.TemporaryDirectory()
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        # The child's ends moved above 3 and 4 first, so that the dup2s cannot clobber them.
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_child_r, from_child_w)]
        for fd in (to_child_r, from_child_w):
            os.close(fd)
        to_child_r, from_child_w = high

        def fds():
            os.dup2(to_child_r, 3)  # dup2 leaves the copies inheritable
            os.dup2(from_child_w, 4)

        self._proc = subprocess.Popen(
            [chromium(), "--headless=new", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--remote-debugging-pipe", "--no-first-run",
             "--hide-scrollbars", "--force-device-scale-factor=1",
             f"--user-data-dir={self._profile.name}", "about:blank"],
            pass_fds=(3, 4), preexec_fn=fds,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child_r)
        os.close(from_child_w)
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target,
                                 flatten=True)["sessionId"]
        for domain in ("Page", "Network", "Runtime"):
            self.call(domain + ".enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=self.width,
                  height=self.height, deviceScaleFactor=1, mobile=False)
        return self

    def __exit__(self, *exc):
        try:
            self.call("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        os.close(self._to_child)
        os.close(self._from_child)
        self._profile.cleanup()

    # --------------------------------------------------------------- protocol
    def _read(self, timeout):
        import select
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._from_child], [], [], timeout)
            if not ready:
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed its DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def _note(self, m):
        method, p = m.get("method"), m.get("params", {})
        if method == "Network.requestWillBeSent":
            self.requests.append(p["request"]["url"])
        elif method == "Runtime.exceptionThrown":
            self.exceptions.append(json.dumps(p["exceptionDetails"])[:500])
        elif method == "Runtime.consoleAPICalled" and p.get("type") == "error":
            self.console.append(json.dumps(p.get("args"))[:300])
        self._events.append(m)

    def call(self, method, session=False, timeout=60, **params):
        self._id += 1
        message = {"id": self._id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        deadline = time.time() + timeout
        while True:
            m = self._read(max(0.1, deadline - time.time()))
            if m.get("id") == self._id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self._note(m)

    def wait_event(self, method, timeout=60):
        deadline = time.time() + timeout
        while True:
            for i, m in enumerate(self._events):
                if m.get("method") == method:
                    del self._events[: i + 1]
                    return m
            self._note(self._read(max(0.1, deadline - time.time())))

    # --------------------------------------------------------------- page
    def eval(self, expression, timeout=60):
        r = self.call("Runtime.evaluate", session=True, timeout=timeout, expression=expression,
                      returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression[:80]}: {json.dumps(r['exceptionDetails'])[:400]}")
        return r["result"].get("value")

    def open(self, url, ready="true", timeout=60):
        """Loads `url`, then waits until the JavaScript `ready` is true and no image is
        loading."""
        self._events.clear()
        self.call("Page.navigate", session=True, url=url)
        self.wait_event("Page.loadEventFired", timeout)
        self.settle(ready, timeout)

    def settle(self, ready="true", timeout=60):
        deadline = time.time() + timeout
        check = (f"!!({ready}) && Array.from(document.images).every(i => i.complete) && "
                 "document.querySelectorAll('img.leaflet-tile:not(.leaflet-tile-loaded)')"
                 ".length === 0")
        while not self.eval(check):
            if time.time() > deadline:
                raise TimeoutError(f"the page did not settle: {ready}")
            time.sleep(0.1)
        time.sleep(0.4)  # Leaflet's fade-in of new tiles (0.2 s)

    def screenshot(self):
        """The viewport as PNG bytes."""
        r = self.call("Page.captureScreenshot", session=True, format="png")
        return base64.b64decode(r["data"])

    def mouse(self, x, y, kind="mouseMoved"):
        self.call("Input.dispatchMouseEvent", session=True, type=kind, x=x, y=y,
                  button="none" if kind == "mouseMoved" else "left", clickCount=1)
