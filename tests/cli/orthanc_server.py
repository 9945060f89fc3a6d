"""A DICOMweb server for tests and benchmarks: Orthanc with its DICOMweb plugin (Debian's
orthanc and orthanc-dicomweb), on a free port of 127.0.0.1, with its configuration and storage
in a directory of the caller's, loaded through its REST API (tests/cli/dicomweb_test.py,
bench/dicomweb_bench.py)."""
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

ORTHANC = "/usr/sbin/Orthanc"
PLUGIN = "/usr/share/orthanc/plugins/libOrthancDicomWeb.so"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def available():
    """None when Orthanc and its DICOMweb plugin are installed or could be installed now (with
    apt-get, as root); else the reason, for a skip message."""
    if os.path.exists(ORTHANC) and os.path.exists(PLUGIN):
        return None
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return ("orthanc and orthanc-dicomweb are not installed, and not root to install them "
                "(apt-get install orthanc orthanc-dicomweb)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", "orthanc", "orthanc-dicomweb"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:  # a stale package list: update it once
        subprocess.run(["apt-get", "update"], capture_output=True, env=env)
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if not (os.path.exists(ORTHANC) and os.path.exists(PLUGIN)):
        return f"apt-get install orthanc orthanc-dicomweb failed: {(p.stderr or p.stdout)[-500:]}"
    return None


def require():
    """Returns when Orthanc is there (or installed now); else prints why and exits 77, which
    the tests' ctest entries take as a skip (SKIP_RETURN_CODE 77)."""
    why = available()
    if why:
        print(f"skipped: {why}")
        sys.exit(77)


class Orthanc:
    """Orthanc serving DICOMweb at http://127.0.0.1:PORT/dicom-web; state in `directory`."""

    def __init__(self, directory):
        self.directory = directory
        self.port = free_port()
        os.makedirs(directory, exist_ok=True)
        config = {"Name": "mltool-test", "StorageDirectory": os.path.join(directory, "db"),
                  "IndexDirectory": os.path.join(directory, "db"), "HttpPort": self.port,
                  "DicomServerEnabled": False, "RemoteAccessAllowed": False,
                  "AuthenticationEnabled": False, "KeepAlive": True, "HttpThreadsCount": 16,
                  "Plugins": [PLUGIN], "DicomWeb": {"Enable": True, "Root": "/dicom-web/"}}
        with open(os.path.join(directory, "orthanc.json"), "w") as f:
            json.dump(config, f)
        self.log = os.path.join(directory, "orthanc.log")
        with open(self.log, "w") as log:
            self.process = subprocess.Popen([ORTHANC, os.path.join(directory, "orthanc.json")],
                                            stdout=log, stderr=log)
        for _ in range(300):
            try:
                urllib.request.urlopen(f"{self.root()}/studies", timeout=1)
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"Orthanc did not start: {open(self.log).read()[-2000:]}")

    def root(self):
        return f"http://127.0.0.1:{self.port}/dicom-web"

    def upload(self, series_dir):
        """POSTs a series' files; returns its DICOMweb series URL."""
        import pydicom
        for name in sorted(os.listdir(series_dir)):
            path = os.path.join(series_dir, name)
            with open(path, "rb") as f:
                req = urllib.request.Request(f"http://127.0.0.1:{self.port}/instances",
                                             data=f.read(), method="POST")
            urllib.request.urlopen(req, timeout=120).read()
            ds = pydicom.dcmread(path, stop_before_pixels=True)
        return f"{self.root()}/studies/{ds.StudyInstanceUID}/series/{ds.SeriesInstanceUID}"

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
