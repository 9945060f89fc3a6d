"""mltool extract, end to end against independent references: slides written by libvips
(scripts/fixtures/make_slides.py), tiled by `mltool tile --format png`, the tile store read
with python-lmdb, tiles decoded with Pillow, the documented preprocessing and the models run
in PyTorch (the venv's), the built-in extractor recomputed with numpy.

    extract_test.py MLTOOL [TEST...]     # TEST: names of the check_* functions, without check_

Each check prints "ok: NAME (seconds)"; all run, and the script exits 1 if any failed.
"""
import glob
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import lmdb
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image

from cli_common import (MATH_PATHS, OTHER_MACHINES, Failure, expect, rename_shim, run, run_checks, run_json,
                        run_with_sigterms,
                        second_writer_refused, tmp)
from store_refs import read_tiles
from torch_models import Linear1, Small

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "fixtures"))
import make_slides  # noqa: E402  (imports pyvips only in its child processes)

mltool = os.path.abspath(sys.argv[1])
only = set(sys.argv[2:])
TS = 128    # tile size of the fixture store
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
torch.set_num_threads(2)


# ---------------------------------------------------------------- models (fixed seeds)

# Small comes from torch_models.py (the GPU test uses it too).

class Slow(nn.Module):
    """Enough work per tile that a run lasts long enough to be killed in the middle."""

    def __init__(self, layers, width=24):
        super().__init__()
        self.inp = nn.Conv2d(3, width, 3, padding=1)
        self.body = nn.ModuleList([nn.Conv2d(width, width, 3, padding=1) for _ in range(layers)])
        self.fc = nn.Linear(width, 16)

    def forward(self, x):
        x = F.relu(self.inp(x))
        for conv in self.body:
            x = F.relu(conv(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class ReturnsTuple(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Small()

    def forward(self, x):
        y = self.inner(x)
        return y, y


class Transposed(nn.Module):
    """N×16 features, returned as 16×N: the batch is not the first dimension."""

    def __init__(self):
        super().__init__()
        self.inner = Small()

    def forward(self, x):
        return self.inner(x).t()


class Pooled(nn.Module):
    """Averages over the batch: [16], the batch dimension dropped."""

    def __init__(self):
        super().__init__()
        self.inner = Small()

    def forward(self, x):
        return self.inner(x).mean(0)


class FixedInput(nn.Module):
    """A linear layer over the flattened 3×96×96 input: fails on any other input size."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3 * 96 * 96, 4)

    def forward(self, x):
        return self.fc(x.flatten(1))


def seeded(cls, *args):
    torch.manual_seed(1234)
    return cls(*args).eval()


SMALL = None  # the eager Small model, the reference for m_script.pt and m_trace.pt


def save_models():
    global SMALL
    SMALL = seeded(Small)
    torch.jit.script(SMALL).save(tmp("m_script.pt"))
    with torch.no_grad():
        torch.jit.trace(SMALL, torch.rand(2, 3, 96, 96)).save(tmp("m_trace.pt"))
    torch.jit.script(seeded(ReturnsTuple)).save(tmp("bad_tuple.pt"))
    torch.jit.script(seeded(Transposed)).save(tmp("bad_transposed.pt"))
    torch.jit.script(seeded(Pooled)).save(tmp("bad_pooled.pt"))
    torch.jit.script(seeded(FixedInput)).save(tmp("fixed96.pt"))
    with open(tmp("not_a_model.pt"), "w") as f:
        f.write("this is not a TorchScript archive\n")


# ---------------------------------------------------------------- the tile store (reference reader)

def read_store(path):
    """(keys, uint8 N×TS×TS×3) of the complete slides of a tile store, in key order, as the
    spec says: slides with a done/ marker; each slide's keys sorted; slides in key order."""
    keys, images = read_tiles(path)
    for k, img in zip(keys, images):
        expect(img.mode == "RGB" and img.size == (TS, TS), f"{k}: {img.mode} {img.size}")
    return keys, np.stack([np.asarray(img) for img in images])


def put_tiles(path, items, meta=None):
    """Writes {key: bytes} into the store's tiles (and meta) databases with python-lmdb."""
    env = lmdb.open(path, max_dbs=8)
    try:
        with env.begin(write=True) as txn:
            tiles_db = env.open_db(b"tiles", txn=txn, create=False)
            for k, v in items.items():
                txn.put(k.encode(), v, db=tiles_db)
            if meta:
                meta_db = env.open_db(b"meta", txn=txn, create=False)
                for k, v in meta.items():
                    txn.put(k.encode(), v, db=meta_db)
    finally:
        env.close()


def get_tile(path, key):
    env = lmdb.open(path, readonly=True, lock=False, max_dbs=8)
    try:
        with env.begin() as txn:
            return bytes(txn.get(key.encode(), db=env.open_db(b"tiles", txn=txn, create=False)))
    finally:
        env.close()


STORE = None   # the fixture store
KEYS = None    # its keys, in key order of complete slides
PIXELS = None  # N×TS×TS×3 uint8
INCOMPLETE = ["B/000000_000000", "B/000000_000001"]  # a slide without a done/ marker


def make_fixtures():
    global STORE, KEYS, PIXELS
    # Two slides whose ids sort differently as ids and as keys ("C-2/" < "C/").
    make_slides.generate([
        ["generic_tiff", [tmp("C.tif"), 2048, 1536, 0.25,
                          [(0, 0, 2048, 1280), (300, 1280, 1700, 1536)]], {"min_level": 256}],
        ["generic_tiff", [tmp("C-2.tif"), 1024, 768, 0.25, [(0, 0, 1024, 768)]],
         {"min_level": 256}],
        ["blank_tiff", [tmp("W.tif"), 1024, 768, 0.25], {"min_level": 256}],
    ])
    STORE = tmp("tiles.lmdb")
    code, out, err = run([mltool, "tile", tmp("C.tif"), tmp("C-2.tif"), "-o", STORE, "--mpp",
                          "0.5", "--tile-size", str(TS), "--format", "png", "-q"])
    expect(code == 0, f"mltool tile exits 0 (got {code}): {err}")
    # An interrupted slide "B" (tiles, no done/ marker): extract must leave it out.
    good = get_tile(STORE, "C/000000_000000")
    put_tiles(STORE, {k: good for k in INCOMPLETE})
    KEYS, PIXELS = read_store(STORE)
    expect(40 <= len(KEYS) <= 150 and KEYS[0].startswith("C-2/") and KEYS[-1].startswith("C/"),
           f"fixture store: {len(KEYS)} tiles, {KEYS[:1]}..{KEYS[-1:]}")
    expect(not any(k.startswith("B/") for k in KEYS), "reference skips the incomplete slide")
    save_models()
    return f"{len(KEYS)} tiles"


# ---------------------------------------------------------------- running mltool extract

SUMMARY_FIELDS = ("command", "output", "status", "rows", "dims", "resumed_from", "invalid",
                  "devices", "model", "shard", "seconds", "tiles_per_second")


def extract(store, out, *args):
    """Runs mltool extract STORE -o OUT ARGS --json; returns (code, summary or None, err)."""
    code, summary, err = run_json([mltool, "extract", store, "-o", out, "--threads", "2", *args,
                                   "--json"])
    if summary is not None:
        missing = [f for f in SUMMARY_FIELDS if f not in summary]
        expect(not missing, f"summary lacks {missing}: {summary}")
        expect(summary["command"] == "extract", f"summary command: {summary}")
    return code, summary, err


def extract_ok(store, out, *args, code_wanted=0):
    code, summary, err = extract(store, out, *args)
    expect(code == code_wanted and summary is not None,
           f"extract {' '.join(args)} exits {code_wanted} (got {code}): {err[-2000:]}")
    return summary


def load_features(out):
    """(matrix, keys, manifest) of a feature store, checked against each other and the
    format (128-byte .npy header, keys ended by \\n, the manifest's fixed fields)."""
    expect(os.path.isfile(os.path.join(out, "features.json")), f"{out}: no features.json")
    expect(not os.path.exists(os.path.join(out, ".extract-partial")),
           f"{out}: .extract-partial is still there after a finished run")
    with open(os.path.join(out, "features.json")) as f:
        meta = json.load(f)
    with open(os.path.join(out, "features.npy"), "rb") as f:
        head = f.read(128)
    expect(head[:8] == b"\x93NUMPY\x01\x00" and head[8:10] == (118).to_bytes(2, "little")
           and head.endswith(b"\n"), f"{out}/features.npy: header {head!r}")
    X = np.load(os.path.join(out, "features.npy"))
    with open(os.path.join(out, "keys.txt"), "rb") as f:
        raw = f.read()
    expect(raw.endswith(b"\n"), f"{out}/keys.txt does not end with a newline")
    keys = raw.decode("ascii").split("\n")[:-1]
    for field, value in (("format", "mltool.features"), ("format_version", 1),
                         ("files", {"keys": "keys.txt", "matrix": "features.npy"})):
        expect(meta.get(field) == value, f"{out}/features.json {field}: {meta.get(field)}")
    expect(str(meta.get("created_by", "")).startswith("mltool "), f"created_by {meta}")
    expect(X.shape == (meta["rows"], meta["dims"]) and X.dtype == np.dtype(meta["dtype"]),
           f"{out}: matrix {X.shape} {X.dtype}, manifest {meta['rows']}x{meta['dims']} "
           f"{meta['dtype']}")
    expect(len(keys) == meta["rows"], f"{out}: {len(keys)} keys, {meta['rows']} rows")
    return X, keys, meta


def expect_source(meta, store):
    want = {"tile_store": os.path.realpath(store), "tiles": len(KEYS), "first_key": KEYS[0],
            "last_key": KEYS[-1], "tile_size": TS}
    expect(meta.get("source") == want, f"features.json source {meta.get('source')}, "
                                       f"expected {want}")


def files_of(out):
    got = {}
    for n in ("features.npy", "keys.txt", "features.json"):
        with open(os.path.join(out, n), "rb") as f:
            got[n] = f.read()
    return got


# ---------------------------------------------------------------- the reference

def preprocess(u8, size, mean=IMAGENET_MEAN, std=IMAGENET_STD):
    """The documented preprocessing: NCHW, /255, bilinear resize (antialiased when
    shrinking), minus mean, over std."""
    x = torch.from_numpy(u8).permute(0, 3, 1, 2).to(torch.float32) / 255
    if x.shape[-2:] != (size, size):
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False,
                          antialias=size < x.shape[-1])
    m = torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1)
    s = torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1)
    return (x - m) / s


def reference(model, size, mean=IMAGENET_MEAN, std=IMAGENET_STD, pixels=None):
    pixels = PIXELS if pixels is None else pixels
    with torch.inference_mode():
        y = model.eval()(preprocess(pixels, size, mean, std))
    return y.reshape(y.shape[0], -1).numpy()


_RUNS = {}


def clean_run():
    """The store through m_script.pt at 96 px, batch 7 (shared by several checks)."""
    if "clean" not in _RUNS:
        out = tmp("f_clean")
        extract_ok(STORE, out, "--model", tmp("m_script.pt"), "--input-size", "96",
                   "--device", "cpu", "--batch", "7")
        _RUNS["clean"] = out
    return _RUNS["clean"]


def max_diff(a, b):
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


# ---------------------------------------------------------------- the checks

def check_torchscript():
    """a. features = the documented preprocessing + the model in PyTorch, within 1e-4:
    scripted and traced, resized (96 px, batch 7) and not (128 px, other mean/std)."""
    expect(len(KEYS) % 7 != 0, "batch 7 does not divide the tile count")
    ref = reference(SMALL, 96)
    for name in ("m_script.pt", "m_trace.pt"):
        if name == "m_script.pt":
            out = clean_run()
        else:
            out = tmp("f_trace")
            s = extract_ok(STORE, out, "--model", tmp(name), "--input-size", "96", "--device",
                           "cpu", "--batch", "7")
        X, keys, meta = load_features(out)
        expect(keys == KEYS, f"{name}: keys.txt is not the key order of the complete slides: "
                             f"{keys[:3]}... vs {KEYS[:3]}...")
        expect(X.dtype == np.float32 and X.shape == (len(KEYS), 16),
               f"{name}: features {X.shape} {X.dtype}")
        d = max_diff(X, ref)
        expect(d <= 1e-4, f"{name}: max |mltool - torch| = {d:.3g} > 1e-4")
        print(f"  {name} at 96 px: max |diff| {d:.2g}")
        model = meta["model"]
        expect(meta["rows"] == len(KEYS) and meta["dims"] == 16 and meta["dtype"] == "float32",
               f"features.json rows/dims/dtype {meta['rows']} {meta['dims']} {meta['dtype']}")
        expect(model.get("kind") == "torchscript" and model.get("path") == tmp(name)
               and model.get("input_size") == 96 and model.get("amp") == "none"
               and np.allclose(model.get("mean"), IMAGENET_MEAN, atol=1e-6)
               and np.allclose(model.get("std"), IMAGENET_STD, atol=1e-6),
               f"features.json model {model}")
        expect(not meta.get("invalid_rows"), f"no invalid rows: {meta.get('invalid_rows')}")
        expect_source(meta, STORE)
        if name == "m_trace.pt":
            expect(s["status"] == "extracted" and s["rows"] == len(KEYS) and s["dims"] == 16
                   and s["resumed_from"] == 0 and s["invalid"] == 0 and s["devices"] == ["cpu"]
                   and s["model"] == model and os.path.abspath(s["output"]) == out,
                   f"summary {s}")

    # Input size = tile size (no resize), non-default mean/std, a batch larger than the store.
    mean, std = (0.5, 0.25, 0.75), (0.2, 0.3, 0.4)
    out = tmp("f_norm")
    extract_ok(STORE, out, "--model", tmp("m_script.pt"), "--input-size", str(TS), "--mean",
               "0.5,0.25,0.75", "--std", "0.2,0.3,0.4", "--device", "cpu", "--batch", "500")
    X, keys, meta = load_features(out)
    ref = reference(SMALL, TS, mean, std)
    d = max_diff(X, ref)
    expect(keys == KEYS, "keys.txt with --input-size 128")
    expect(d <= 1e-4, f"--input-size {TS} --mean/--std: max |mltool - torch| = {d:.3g} > 1e-4")
    expect(np.allclose(meta["model"]["mean"], mean, atol=1e-6)
           and np.allclose(meta["model"]["std"], std, atol=1e-6)
           and meta["model"]["input_size"] == TS, f"features.json model {meta['model']}")
    # The reference does depend on what is checked: other mean/std give other features.
    expect(max_diff(ref, reference(SMALL, TS)) > 1e-2, "mean/std change the reference")
    print(f"  {TS} px, mean {mean} std {std}: max |diff| {d:.2g}")

    # A complete store made with other settings is replaced, not skipped.
    out = tmp("f_over")
    shutil.copytree(clean_run(), out)
    s = extract_ok(STORE, out, "--model", tmp("m_script.pt"), "--input-size", str(TS),
                   "--device", "cpu", "--batch", "7")
    X, keys, meta = load_features(out)
    d = max_diff(X, reference(SMALL, TS))
    expect(s["status"] == "extracted" and s["resumed_from"] == 0 and keys == KEYS
           and meta["model"]["input_size"] == TS and d <= 1e-4,
           f"a store with --input-size 96 re-extracted at {TS}: {s['status']}, "
           f"input_size {meta['model']['input_size']}, max |diff| {d:.3g}")

    # Enlarging (160 px > the tile): bilinear without antialias.
    out = tmp("f_up")
    extract_ok(STORE, out, "--model", tmp("m_script.pt"), "--input-size", "160", "--device",
               "cpu", "--batch", "16")
    X, _, _ = load_features(out)
    d = max_diff(X, reference(SMALL, 160))
    expect(d <= 1e-4, f"--input-size 160 (enlarging): max |mltool - torch| = {d:.3g} > 1e-4")


def check_f16():
    """b. --dtype f16 = the float32 rows rounded with numpy's astype(np.float16)."""
    f32, _, _ = load_features(clean_run())
    out = tmp("f_f16")
    s = extract_ok(STORE, out, "--model", tmp("m_script.pt"), "--input-size", "96", "--device",
                   "cpu", "--batch", "7", "--dtype", "f16")
    X, keys, meta = load_features(out)
    expect(X.dtype == np.float16 and meta["dtype"] == "float16", f"dtype {X.dtype} {meta}")
    with open(os.path.join(out, "features.npy"), "rb") as f:
        expect(b"'descr': '<f2'" in f.read(128), "descr '<f2'")
    expect(keys == KEYS and s["rows"] == len(KEYS), "f16 keys")
    want = f32.astype(np.float16)
    if not np.array_equal(X.view(np.uint16), want.view(np.uint16)):
        ulps = np.abs(X.view(np.uint16).astype(np.int32) - want.view(np.uint16).astype(np.int32))
        expect(int(ulps.max()) <= 1 and np.array_equal(np.sign(X), np.sign(want)),
               f"f16 differs from astype(float16) of the f32 run by up to {int(ulps.max())} ulp")
        print(f"  {int((ulps > 0).sum())} values 1 ulp off astype(float16)")
    else:
        print("  bit-identical to astype(np.float16)")


def color_texture_ref(u8):
    """Columns 0-61 of builtin:color-texture from the documented definitions, in float64.
    The convolutions are taken over the interior (no padding): the docs don't say."""
    v = u8.astype(np.float64) / 255                    # N×H×W×3
    n = v.shape[0]
    flat = v.reshape(n, -1, 3)
    cols = [flat.mean(1), flat.std(1)]
    bins = np.minimum(np.floor(flat * 16), 15).astype(np.int64)
    hist = np.stack([np.stack([np.bincount(bins[i, :, c], minlength=16) for c in range(3)])
                     for i in range(n)]) / flat.shape[1]
    cols.append(hist.reshape(n, 48))
    cols.append((-np.log10((flat + 1 / 255) / (1 + 1 / 255))).mean(1))
    mx, mn = v.max(-1), v.min(-1)
    sat = np.where(mx > 0, (mx - mn) / np.maximum(mx, 1e-12), 0).reshape(n, -1)
    cols += [sat.mean(1)[:, None], sat.std(1)[:, None]]
    luma = v @ np.array([0.299, 0.587, 0.114])        # N×H×W

    def corr(img, k):  # valid cross-correlation, 3×3
        h, w = img.shape[1] - 2, img.shape[2] - 2
        return sum(k[a, b] * img[:, a:a + h, b:b + w] for a in range(3) for b in range(3))

    sx = np.array([[-1, 0, 1], [-2, 0, 2], [-1, 0, 1]], float)
    lap = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], float)
    mag = np.sqrt(corr(luma, sx) ** 2 + corr(luma, sx.T) ** 2).reshape(n, -1)
    cols += [mag.mean(1)[:, None], mag.std(1)[:, None],
             np.abs(corr(luma, lap)).reshape(n, -1).mean(1)[:, None]]
    return np.concatenate(cols, 1)


def check_color_texture():
    """c. builtin:color-texture: 62 columns, deterministic (also on the code paths another
    machine would take), = numpy from the decoded tiles."""
    outs = [tmp("f_ct1"), tmp("f_ct2")]
    s = extract_ok(STORE, outs[0], "--device", "cpu", "--batch", "7")  # the default model
    extract_ok(STORE, outs[1], "--model", "builtin:color-texture", "--device", "cpu", "--batch",
               "32", "--input-size", "64")  # built-ins ignore --input-size
    a, b = files_of(outs[0]), files_of(outs[1])
    expect(a["features.npy"] == b["features.npy"] and a["keys.txt"] == b["keys.txt"],
           "two builtin:color-texture runs give byte-identical features.npy/keys.txt")
    # The same bytes on the code paths another machine would take (MKL's sqrt and log10 are
    # not the same on each).
    for name, env in OTHER_MACHINES:
        out = tmp("f_ct_other")
        code, _, err = run([mltool, "extract", STORE, "-o", out, "--overwrite", "--device", "cpu",
                            "--batch", "7"], env=env)
        expect(code == 0, f"{name}: exit {code}: {err[-1000:]}")
        expect(files_of(out)["features.npy"] == a["features.npy"],
               f"{name}: builtin:color-texture gives the default path's features.npy")
    X, keys, meta = load_features(outs[0])
    expect(X.shape == (len(KEYS), 62) and keys == KEYS, f"color-texture {X.shape}")
    expect(meta["model"] == {"kind": "builtin", "name": "color-texture"}
           and s["model"] == meta["model"], f"model {meta['model']}")
    expect_source(meta, STORE)
    expect(np.isfinite(X).all(), "color-texture features are finite")
    ref = color_texture_ref(PIXELS)
    groups = [("mean RGB", 0, 3, 1e-5), ("std RGB", 3, 6, 1e-5), ("histograms", 6, 54, 1e-5),
              ("optical density", 54, 57, 1e-5), ("saturation", 57, 59, 1e-5),
              ("Sobel magnitude", 59, 61, 1e-4), ("|Laplacian|", 61, 62, 1e-4)]
    diffs = []
    for name, lo, hi, tol in groups:
        d = max_diff(X[:, lo:hi], ref[:, lo:hi])
        expect(d <= tol, f"color-texture columns {lo}-{hi - 1} ({name}): max |mltool - numpy| "
                         f"{d:.3g} > {tol}")
        diffs.append(f"{lo}-{hi - 1} {d:.1g}")
    print(f"  max |mltool - numpy| by columns: {', '.join(diffs)}")
    expect(np.allclose(X[:, 6:54].reshape(-1, 3, 16).sum(-1), 1, atol=1e-5),
           "each histogram sums to 1")
    expect(X[:, 6:54].std() > 0 and X[:, 0:3].std() > 0, "features vary across tiles")


def kill_at_chunk(store, out, args, chunks, env=None):
    """Runs extract with the rename shim (scripts/reliability/kill_at_rename.c) so that it is
    SIGKILLed just before it commits chunk number `chunks`: exactly `chunks` chunks (of
    --chunk-rows rows) are committed, wherever the batches end. Renames counted: config.json,
    then each chunk's manifest."""
    e = dict(os.environ, **(env or {}), LD_PRELOAD=rename_shim(), KILL_RENAME_MATCH=".json",
             KILL_AT_RENAME=str(chunks + 2))
    p = subprocess.run([mltool, "extract", store, "-o", out, "--threads", "2", *args],
                       env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    expect(p.returncode == -signal.SIGKILL,
           f"the run to be killed before chunk {chunks} exits by SIGKILL ({p.returncode}): "
           f"{p.stderr[-1000:]}")
    expect(not os.path.exists(os.path.join(out, "features.json")),
           "a killed run left features.json")
    got = len(glob.glob(os.path.join(out, ".extract-partial", "chunk-*.json")))
    expect(got == chunks, f"killed with {got} committed chunks, not {chunks}")
    return got


def differing_rows(out, ref_out):
    """None if the two stores' files are identical, else what differs."""
    got, want = files_of(out), files_of(ref_out)
    for n in ("features.npy", "keys.txt"):
        if got[n] != want[n]:
            detail = ""
            if n == "features.npy":
                a, b = np.load(os.path.join(out, n)), np.load(os.path.join(ref_out, n))
                rows = np.where((a != b).any(1))[0] if a.shape == b.shape else []
                detail = f" (rows differing: {list(rows)[:10]}, max {max_diff(a, b):.3g})" \
                    if a.shape == b.shape else f" (shapes {a.shape} {b.shape})"
            return f"{n} differs{detail}"
    if json.loads(got["features.json"]) != json.loads(want["features.json"]):
        return "features.json differs"
    return None


def check_resume():
    """d. SIGKILL after some chunks, re-run: resumes (resumed_from > 0) and the store equals
    an uninterrupted run's byte for byte; complete → skipped; other settings → exit 1."""
    layers = 4
    model = tmp(f"slow{layers}.pt")
    torch.jit.script(seeded(Slow, layers)).save(model)
    args = ["--model", model, "--input-size", str(TS), "--device", "cpu", "--batch", "7",
            "--chunk-rows", "8"]
    out = tmp(f"f_resume{layers}")
    chunks = kill_at_chunk(STORE, out, args, 3)
    partial = os.path.join(out, ".extract-partial")

    # Other settings while the partial run exists: refused, naming the directory, untouched.
    before = sorted(os.listdir(partial))
    threads = json.load(open(os.path.join(partial, "config.json")))["run"]["math_threads"]
    for other in (["--input-size", "96"], ["--dtype", "f16"], ["--batch", "8"],
                  ["--math-threads", str(threads + 1)], ["--amp", "bf16"]):
        changed = list(args)
        if other[0] in changed:
            changed[changed.index(other[0]) + 1] = other[1]
        else:
            changed += other
        code, s, err = extract(STORE, out, *changed)
        expect(code == 1, f"{' '.join(other)} over a partial run exits 1 (got {code}): {err}")
        expect(out in err and other[0] in err, f"the error names {out} and {other[0]}: {err}")
        expect(sorted(os.listdir(partial)) == before,
               f"a refused run changed {partial}: {before} -> {sorted(os.listdir(partial))}")

    # Same settings: resumes after the committed chunks.
    s = extract_ok(STORE, out, *args)
    expect(s["status"] == "extracted" and s["resumed_from"] == chunks * 8 and s["rows"] == len(KEYS),
           f"resumed run: resumed_from {s['resumed_from']} (expected {chunks * 8}), {s}")
    expect(not os.path.exists(partial), ".extract-partial is removed")
    ref_out = tmp(f"f_resume{layers}_ref")
    extract_ok(STORE, ref_out, *args)
    diff = differing_rows(out, ref_out)
    if diff:
        raise Failure(f"resumed store vs an uninterrupted run's: {diff}")
    got = files_of(out)
    X, keys, _ = load_features(out)
    d = max_diff(X, reference(seeded(Slow, layers), TS))
    expect(keys == KEYS and d <= 1e-4, f"resumed features vs torch: max |diff| {d:.3g}")

    # Complete with these settings: skipped, nothing rewritten.
    mtimes = {n: os.stat(os.path.join(out, n)).st_mtime_ns for n in got}
    s = extract_ok(STORE, out, *args)
    expect(s["status"] == "skipped" and s["rows"] == len(KEYS), f"re-run on a complete store: {s}")
    expect(files_of(out) == got
           and {n: os.stat(os.path.join(out, n)).st_mtime_ns for n in got} == mtimes,
           "a skipped run leaves the store as it was")
    expect(not os.path.exists(partial), "a skipped run leaves no .extract-partial")


def check_sigterm():
    """SIGTERM at random points: each run commits the rows written so far as a (partial)
    chunk and exits 75; rerun, the store equals an uninterrupted run's byte for byte."""
    import random
    model = tmp("slow_sig.pt")
    torch.jit.script(seeded(Slow, 4)).save(model)
    args = ["--model", model, "--input-size", str(TS), "--device", "cpu", "--batch", "7",
            "--chunk-rows", "1000", "--math-threads", "1"]
    t0 = time.time()
    extract_ok(STORE, tmp("f_sig_ref"), *args)
    whole = time.time() - t0
    for seed in (1, 2):
        out = tmp(f"f_sig_{seed}")
        stopped = run_with_sigterms([mltool, "extract", STORE, "-o", out, "--threads", "2", *args],
                                    random.Random(seed), 0.6 * whole)
        print(f"  stopped {stopped} time(s) by SIGTERM before finishing", flush=True)
        diff = differing_rows(out, tmp("f_sig_ref"))
        expect(diff is None, f"seed {seed}: stopped {stopped} times by SIGTERM, then: {diff}")


def check_resume_anywhere():
    """A kill at any row count, resumed, gives the uninterrupted run's bytes on every math code
    path: batches start at multiples of --batch (7, not dividing --chunk-rows), so a resume
    re-forms the same batches, including kills that would leave a 1-row batch if batches
    started at the resume point. The math threads are the partial run's unless given. Same
    for --keep-going and the built-in extractor."""
    model = tmp("linear1.pt")
    torch.jit.script(seeded(Linear1)).save(model)
    n, batch = len(KEYS), 7
    base = ["--model", model, "--input-size", "64", "--device", "cpu", "--batch", str(batch)]
    # (chunk rows, chunks committed at the kill): mid-batch resume points, one leaving a
    # single row after it (N - 1), one whose rest would start with a 1-row batch.
    one_left = next(k for k in range(1, n // 12) if (n - 12 * k) % batch == 1) \
        if any((n - 12 * k) % batch == 1 for k in range(1, n // 12)) else 2
    kills = [(12, 1), (12, one_left), (n - 1, 1), (5, 3)]
    problems = []
    for name, env in MATH_PATHS:
        ref = tmp(f"f_any_ref_{len(problems)}_{name}")
        code, _, err = run([mltool, "extract", STORE, "-o", ref, "--threads", "2", *base,
                            "--chunk-rows", "12"], env=env)
        expect(code == 0, f"{name}: the uninterrupted run exits 0 ({code}): {err}")
        for chunk_rows, k in kills:
            out = tmp(f"f_any_{name}_{chunk_rows}_{k}")
            args = base + ["--chunk-rows", str(chunk_rows)]
            kill_at_chunk(STORE, out, args, k, env)
            code, _, err = run([mltool, "extract", STORE, "-o", out, "--threads", "2", *args],
                               env=env)
            expect(code == 0, f"{name}: the resumed run exits 0 ({code}): {err}")
            diff = differing_rows(out, ref)
            if diff:
                problems.append(f"{name}, killed after {k * chunk_rows} of {n} rows: {diff}")
        shutil.rmtree(ref)
    # Killed with one math-thread count, resumed where OMP_NUM_THREADS says another: the
    # partial run's count is used, and the result is the first count's uninterrupted one.
    args = base + ["--chunk-rows", "12"]
    for first, second in (("1", "2"), ("2", "1")):
        ref, out = tmp(f"f_thr_ref{first}"), tmp(f"f_thr{first}")
        code, _, err = run([mltool, "extract", STORE, "-o", ref, "--threads", "2", *args],
                           env={"OMP_NUM_THREADS": first})
        expect(code == 0, f"OMP_NUM_THREADS={first}: exits 0 ({code}): {err}")
        kill_at_chunk(STORE, out, args, 2, {"OMP_NUM_THREADS": first})
        code, _, err = run([mltool, "extract", STORE, "-o", out, "--threads", "2", *args],
                           env={"OMP_NUM_THREADS": second})
        expect(code == 0 and f"--math-threads {first}" in err,
               f"resumed under OMP_NUM_THREADS={second}: exits 0 and says it uses the partial "
               f"run's --math-threads {first} ({code}): {err}")
        diff = differing_rows(out, ref)
        if diff:
            problems.append(f"killed with {first} math threads, resumed under "
                            f"OMP_NUM_THREADS={second}: {diff}")
    # --keep-going over an undecodable tile, and the built-in extractor.
    store = corrupt_store("bad_any.lmdb", {KEYS[9]: b"not an image"})
    for label, st, extra, wanted in (("--keep-going", store, ["--keep-going"], 4),
                                     ("builtin:color-texture", STORE,
                                      ["--model", "builtin:color-texture"], 0)):
        args = (base if extra[0] != "--model" else base[2:]) + ["--chunk-rows", "12"] + extra
        ref, out = tmp(f"f_kg_ref{wanted}"), tmp(f"f_kg{wanted}")
        code, _, err = run([mltool, "extract", st, "-o", ref, "--threads", "2", *args])
        expect(code == wanted, f"{label}: exits {wanted} ({code}): {err}")
        kill_at_chunk(st, out, args, one_left)
        code, _, err = run([mltool, "extract", st, "-o", out, "--threads", "2", *args])
        expect(code == wanted, f"{label}, resumed: exits {wanted} ({code}): {err}")
        diff = differing_rows(out, ref)
        if diff:
            problems.append(f"{label}, killed after {one_left * 12} rows: {diff}")
    # How much batching matters on this machine (information: the test above must pass either way).
    outs = []
    for b in ("1", "7"):
        outs.append(tmp(f"f_batch{b}"))
        run([mltool, "extract", STORE, "-o", outs[-1], "--threads", "2", "--model", model,
             "--input-size", "64", "--device", "cpu", "--batch", b])
    a, b = np.load(os.path.join(outs[0], "features.npy")), np.load(os.path.join(outs[1], "features.npy"))
    print(f"  here, --batch 1 and --batch 7 differ in {int((a != b).any(1).sum())} of {n} rows")
    expect(not problems, "; ".join(problems))


# ---------------------------------------------------------------- --shard and --merge

def shard_store():
    """The fixture store plus four slides made of its tiles ("A", "C-3", "D", "E": 5, 9, 13
    and 1 tiles), so that 2 and 3 shards each get several slides, in id order (A, C, C-2,
    C-3, D, E) and key order (A, C-2, C-3, C, D, E) alike."""
    store = tmp("tiles_shards.lmdb")
    if os.path.exists(store):
        return store
    shutil.copytree(STORE, store)
    tiles, meta, start = {}, {}, 0
    for slide, n in (("A", 5), ("C-3", 9), ("D", 13), ("E", 1)):
        for i, key in enumerate(KEYS[start:start + n]):
            tiles[f"{slide}/{i:06d}_000000"] = get_tile(STORE, key)
        meta[f"done/{slide}"] = json.dumps({"tiles": n, "tissue_fraction": None,
                                            "seconds": 0, "reader": "test"}).encode()
        start += n
    put_tiles(store, tiles, meta)
    return store


def merge(out, *inputs):
    return run_json([mltool, "extract", "--merge", *inputs, "-o", out, "--json"])


def sharded_runs(store, args, name, count):
    """The stores of `extract --shard I/count` for every I."""
    outs = []
    for i in range(count):
        outs.append(tmp(f"f_{name}_{i}of{count}"))
        s = extract_ok(store, outs[-1], *args, "--shard", f"{i}/{count}")
        expect(s["shard"] == f"{i}/{count}" and s["rows"] > 0, f"shard summary {s}")
    return outs


def check_shard_merge():
    """e. --shard I/N for N = 2 and 3, joined by --merge in several orders: the same
    features.npy and keys.txt as one run, byte for byte, for the built-in extractor and a
    TorchScript model with a Linear layer (whose bits may depend on the batch a row is in);
    the manifest lists the shards."""
    store = shard_store()
    keys, _ = read_store(store)
    model = tmp("linear1_s.pt")
    torch.jit.script(seeded(Linear1)).save(model)
    problems = []
    for name, args in (("ct", ["--device", "cpu", "--batch", "5"]),
                       ("lin", ["--model", model, "--input-size", "64", "--device", "cpu",
                                "--batch", "7", "--dtype", "f16"])):
        one = tmp(f"f_{name}_one")
        s = extract_ok(store, one, *args)
        expect(s["rows"] == len(keys) and s["shard"] is None, f"one run: {s}")
        for count, orders in ((2, [(0, 1), (1, 0)]), (3, [(0, 1, 2), (2, 0, 1), (1, 2, 0)])):
            shards = sharded_runs(store, args, name, count)
            rows = [json.load(open(os.path.join(d, "features.json")))["rows"] for d in shards]
            expect(sum(rows) == len(keys), f"{count} shards hold {rows} rows of {len(keys)}")
            for order in orders:
                out = tmp(f"f_{name}_merged{count}_{''.join(map(str, order))}")
                code, m, err = merge(out, *[shards[i] for i in order])
                expect(code == 0 and m and m["status"] == "merged" and m["rows"] == len(keys),
                       f"merge of {count} shards in order {order} exits 0 ({code}): {m} {err}")
                diff = differing_rows(out, one) if m else "no store"
                if diff and diff != "features.json differs":
                    problems.append(f"{name}, {count} shards merged in order {order}: {diff}")
                _, _, meta = load_features(out)
                src = dict(meta["source"])
                merged_from = src.pop("merged_from")
                expect(src == load_features(one)[2]["source"], f"merged source {meta['source']}")
                expect([f["shard"] for f in merged_from] == [f"{i}/{count}" for i in range(count)]
                       and [f["path"] for f in merged_from] == [os.path.realpath(d) for d in shards],
                       f"merged_from lists the shards by index: {merged_from}")
            # Run again on the merged output's settings: one run would find it complete.
            s = extract_ok(store, tmp(f"f_{name}_merged{count}_{''.join(map(str, orders[0]))}"), *args)
            expect(s["status"] == "skipped", f"extract over a merged store: {s}")
    expect(not problems, "; ".join(problems))


def check_shard_refusals():
    """A shard missing from the merge, a shard (so its slides) given twice, stores of another
    model, of another shard count, an unsharded store: exit 1 naming what is wrong, nothing
    written. A partial shard resumes only with its --shard, and then gives the bytes of an
    uninterrupted shard."""
    store = shard_store()
    args = ["--device", "cpu", "--batch", "5"]
    s = sharded_runs(store, args, "r", 3)
    other = tmp("f_r_other")
    extract_ok(store, other, *args, "--shard", "1/3", "--model", tmp("m_script.pt"),
               "--input-size", "64")
    two = tmp("f_r_two")
    extract_ok(store, two, *args, "--shard", "1/2")
    one = tmp("f_r_one")
    extract_ok(store, one, *args)
    dup = tmp("f_r_dup")
    shutil.copytree(s[1], dup)
    out = tmp("f_r_merged")
    for inputs, words in (([s[0], s[2]], ["1/3", "missing"]),
                          ([s[0], s[1], dup, s[2]], [dup, "shard 1/3", "twice"]),
                          ([s[0], other, s[2]], [other, "--model", "m_script.pt"]),
                          ([s[0], two], [two, "--shard 1/2", "0/3"]),
                          ([s[0], s[1], s[2], one], [one, "--shard"])):
        code, m, err = merge(out, *inputs)
        expect(code == 1 and m is None and all(w in err for w in words),
               f"merge of {inputs}: exits 1 naming {words} ({code}): {err}")
        expect(not os.path.exists(out), f"a refused merge wrote {out}")
    code, _, err = run([mltool, "extract", "--merge", s[0], s[1], s[2], "-o", s[1]])
    expect(code == 1 and "both an input and the output" in err, f"merge into an input: {err}")

    # Resume: killed with --shard 1/3, refused with another or none, resumed with it.
    ref = s[1]
    part = tmp("f_r_partial")
    kill_at_chunk(store, part, args + ["--shard", "1/3", "--chunk-rows", "4"], 2)
    for changed, recorded in ((["--shard", "2/3"], "--shard 1/3 (now 2/3)"),
                              ([], "--shard 1/3 (now unset)")):
        code, _, err = extract(store, part, *args, *changed)
        expect(code == 1 and recorded in err and part in err,
               f"resume with {changed or 'no --shard'}: exits 1 naming {recorded} ({code}): {err}")
    r = extract_ok(store, part, *args, "--shard", "1/3")
    expect(r["resumed_from"] == 8, f"the shard resumed after 8 rows: {r}")
    diff = differing_rows(part, ref)
    expect(diff is None, f"resumed shard vs an uninterrupted one: {diff}")


def check_one_writer():
    """Two extracts into one output (a re-queued job): the second exits 3 at once naming the
    output and the first's pid and host, and the first finishes with a single run's store."""
    model = tmp("linear1_w.pt")
    torch.jit.script(seeded(Linear1)).save(model)
    args = ["--model", model, "--input-size", "64", "--device", "cpu", "--batch", "7",
            "--chunk-rows", "12", "--threads", "2"]
    out, ref = tmp("f_writers"), tmp("f_writers_ref")
    code, _, err = run([mltool, "extract", STORE, "-o", ref, *args])
    expect(code == 0, f"the single run exits 0 ({code}): {err}")
    code, err = second_writer_refused([mltool, "extract", STORE, "-o", out, *args],
                                      [mltool, "extract", STORE, "-o", out, *args], out)
    expect(code == 0, f"the first run exits 0 ({code}): {err}")
    diff = differing_rows(out, ref)
    expect(diff is None, f"the first run's store vs a single run's: {diff}")


def check_changed_inputs():
    """A model file replaced by another model at the same path: a complete store is
    extracted again (not "skipped" with the old model's features), a partial run refused;
    a partial run from a tile store that has grown since: refused."""
    path = tmp("m_changing.pt")
    args = ["--model", path, "--input-size", "96", "--device", "cpu", "--batch", "7"]

    def save(seed, mtime):
        torch.manual_seed(seed)
        model = Small().eval()
        torch.jit.script(model).save(path)
        os.utime(path, (mtime, mtime))  # whole seconds apart, whatever the clock's resolution
        return model

    now = int(time.time())
    save(1, now - 100)
    out = tmp("f_changing")
    extract_ok(STORE, out, *args)
    new = save(2, now - 50)
    s = extract_ok(STORE, out, *args)
    X, keys, _ = load_features(out)
    d = max_diff(X, reference(new, 96))
    problems = []  # both halves run; the check fails at the end with all that went wrong
    if not (s["status"] == "extracted" and d <= 1e-4):
        problems.append(f"after {path} was replaced by another model, a re-run says status "
                        f"{s['status']!r} and its features differ from the new model's by "
                        f"{d:.3g}")

    # A partial run (a corrupt tile stopped it), then the model replaced: refused.
    store = corrupt_store("bad_changing.lmdb", {KEYS[10]: b"not an image"})
    out = tmp("f_changing_partial")
    save(1, now - 100)
    code, _, err = extract(store, out, *args)
    expect(code == 2 and os.path.isdir(os.path.join(out, ".extract-partial")),
           f"the run stopped by a corrupt tile exits 2 and leaves a partial run ({code}): {err}")
    save(2, now - 50)
    code, _, err = extract(store, out, *args, "--keep-going")
    if not (code == 1 and out in err):
        problems.append(f"a partial run made with another model file: exit 1 naming {out} "
                        f"(got {code}): {err}")

    # A partial run, then a slide added to the tile store: refused.
    store = corrupt_store("bad_grown.lmdb", {KEYS[10]: b"not an image"})
    out = tmp("f_grown_partial")
    code, _, err = extract(store, out, *args)
    expect(code == 2, f"the run stopped by a corrupt tile exits 2 ({code}): {err}")
    shutil.copy(tmp("C-2.tif"), tmp("E.tif"))
    code, _, err = run([mltool, "tile", tmp("E.tif"), "-o", store, "--mpp", "0.5",
                        "--tile-size", str(TS), "--format", "png", "-q"])
    expect(code == 0, f"adding E.tif to the store exits 0 ({code}): {err}")
    code, _, err = extract(store, out, *args, "--keep-going")
    if not (code == 1 and out in err):
        problems.append(f"a partial run made from the tile store before a slide was added: "
                        f"exit 1 naming {out} (got {code}): {err}")
    expect(not problems, "; ".join(problems))


def corrupt_store(name, bad):
    """A copy of the fixture store with the tiles {key: bytes} overwritten (python-lmdb,
    after the store is complete)."""
    path = tmp(name)
    shutil.copytree(STORE, path)
    put_tiles(path, bad)
    return path


def check_corrupt_tile():
    """e. an undecodable tile: exit 2 naming the key; --keep-going: exit 4, NaN row listed in
    invalid_rows, every other row = the clean run; a resume after the failure agrees."""
    png_key, jpg_key, junk_key = KEYS[10], KEYS[40], KEYS[len(KEYS) - 3]
    png = get_tile(STORE, png_key)
    buf = io.BytesIO()
    Image.fromarray(PIXELS[40]).save(buf, "JPEG", quality=90)
    jpg = buf.getvalue()
    bad = {png_key: png[:len(png) // 2], jpg_key: jpg[:len(jpg) // 2],
           junk_key: b"neither a JPEG nor a PNG"}
    args = ["--model", tmp("m_script.pt"), "--input-size", "96", "--device", "cpu",
            "--batch", "7"]
    clean, _, _ = load_features(clean_run())

    fails = {}
    for i, (k, v) in enumerate(bad.items()):
        store = corrupt_store(f"bad{i}.lmdb", {k: v})
        out = tmp(f"f_bad{i}")
        code, s, err = extract(store, out, *args)
        expect(code == 2, f"a corrupt tile ({k}, {v[:4]!r}...) exits 2 (got {code}): {err}")
        expect(k in err and store in err, f"the error names the store and the tile key {k}: "
                                          f"{err}")
        expect(not os.path.exists(os.path.join(out, "features.json")),
               "no features.json after a failed run")
        fails[k] = (store, out)
        print(f"  {k}: {err.strip().splitlines()[-1][:160]}")

    store = corrupt_store("bad_all.lmdb", bad)
    out = tmp("f_bad_keep")
    s = extract_ok(store, out, *args, "--keep-going", code_wanted=4)
    X, keys, meta = load_features(out)
    rows = sorted(KEYS.index(k) for k in bad)
    expect(keys == KEYS, "--keep-going keeps every key")
    expect(meta.get("invalid_rows") == rows, f"invalid_rows {meta.get('invalid_rows')}, "
                                             f"expected {rows}")
    expect(s["invalid"] == len(rows) and s["rows"] == len(KEYS), f"summary {s}")
    expect(np.isnan(X[rows]).all(), f"invalid rows are NaN: {X[rows][:, :4]}")
    valid = np.ones(len(KEYS), bool)
    valid[rows] = False
    expect(np.isfinite(X[valid]).all(), "the other rows are finite")
    d = max_diff(X[valid], clean[valid])
    expect(d == 0, f"the other rows equal the clean run's: max |diff| {d:.3g}")

    # --keep-going with --dtype f16: NaN stays NaN, the rest = the clean rows in float16.
    out = tmp("f_bad_keep16")
    extract_ok(store, out, *args, "--keep-going", "--dtype", "f16", code_wanted=4)
    X16, _, meta16 = load_features(out)
    expect(X16.dtype == np.float16 and meta16.get("invalid_rows") == rows
           and np.isnan(X16[rows]).all()
           and np.array_equal(X16[valid], clean[valid].astype(np.float16)),
           f"--keep-going --dtype f16: invalid_rows {meta16.get('invalid_rows')}")

    # The failed run (truncated PNG at row 10) kept its committed rows; a re-run with
    # --keep-going resumes it and equals the fresh --keep-going run on that store.
    store, out = fails[png_key]
    s = extract_ok(store, out, *args, "--keep-going", code_wanted=4)
    X2, keys2, meta2 = load_features(out)
    expect(keys2 == KEYS and meta2.get("invalid_rows") == [10] and np.isnan(X2[10]).all(),
           f"resumed --keep-going: invalid_rows {meta2.get('invalid_rows')}")
    valid = np.ones(len(KEYS), bool)
    valid[10] = False
    d = max_diff(X2[valid], clean[valid])
    expect(d == 0, f"resumed --keep-going run, other rows vs the clean run: {d:.3g}")
    print(f"  re-run with --keep-going after the failure: resumed_from {s['resumed_from']}")


def check_bad_model():
    """f. models refused before the run: a tuple, no batch-first output, the wrong input
    size (exit 1 naming the file); missing or not TorchScript (exit 2); builtin:nope (exit 1)."""
    cases = [("bad_tuple.pt", 1, "96"), ("bad_transposed.pt", 1, "96"),
             ("bad_pooled.pt", 1, "96"), ("fixed96.pt", 1, "64"),
             ("missing.pt", 2, "96"), ("not_a_model.pt", 2, "96")]
    problems = []  # every case runs; the check fails at the end with all that went wrong
    for name, want, size in cases:
        out = tmp(f"f_{name}")
        t0 = time.time()
        code, s, err = extract(STORE, out, "--model", tmp(name), "--input-size", size,
                               "--device", "cpu")
        try:
            expect(code == want, f"--model {name} --input-size {size} exits {want} (got {code}):"
                                 f" {err.strip().splitlines()[0][:300] if err.strip() else ''}")
            expect(tmp(name) in err, f"--model {name}: the error names the file: {err[:300]}")
            expect(s is None or (s["status"] == "failed" and s["exit_code"] == want),
                   f"--model {name}: no summary on failure but the error's: {s}")
            expect(not os.path.exists(os.path.join(out, "features.json"))
                   and not glob.glob(os.path.join(out, ".extract-partial", "chunk-*")),
                   f"--model {name}: nothing extracted")
        except Failure as e:
            problems.append(str(e))
            continue
        print(f"  {name}: exit {code} ({time.time() - t0:.1f} s): "
              f"{err.strip().splitlines()[-1][:200]}")
    # The right input size for fixed96.pt works (so the refusal above was the size).
    extract_ok(STORE, tmp("f_fixed96"), "--model", tmp("fixed96.pt"), "--input-size", "96",
               "--device", "cpu")

    code, s, err = extract(STORE, tmp("f_nope"), "--model", "builtin:nope", "--device", "cpu")
    expect(code == 1 and "builtin:nope" in err and "builtin:color-texture" in err,
           f"--model builtin:nope exits 1 listing the built-ins (got {code}): {err}")
    expect(not problems, "; ".join(problems))


def check_not_a_store():
    """g. not a tile store / no complete slides: exit 2 with a clear message, nothing written."""
    # A plain directory, a missing one, a file.
    os.makedirs(tmp("plain"))
    with open(tmp("plain", "notes.txt"), "w") as f:
        f.write("not a store\n")
    with open(tmp("file.lmdb"), "w") as f:
        f.write("not a store\n")
    # An LMDB that is not a tile store (other databases), and one with the databases but no
    # 'store' record.
    env = lmdb.open(tmp("other.lmdb"), max_dbs=8)
    with env.begin(write=True) as txn:
        txn.put(b"k", b"v", db=env.open_db(b"images", txn=txn))
    env.close()
    env = lmdb.open(tmp("nostore.lmdb"), max_dbs=8)
    with env.begin(write=True) as txn:
        txn.put(b"S/000000_000000", get_tile(STORE, KEYS[0]), db=env.open_db(b"tiles", txn=txn))
        txn.put(b"done/S", b'{"tiles": 1}', db=env.open_db(b"meta", txn=txn))
    env.close()
    # Tile stores without a complete slide: a blank slide (no tissue, no tiles), and one whose
    # only slide was interrupted (tiles without done/).
    code, _, err = run([mltool, "tile", tmp("W.tif"), "-o", tmp("blank.lmdb"), "--tile-size",
                        str(TS), "-q"])
    expect(os.path.isfile(tmp("blank.lmdb", "data.mdb")), f"blank store made ({code}): {err}")
    shutil.copytree(tmp("blank.lmdb"), tmp("interrupted.lmdb"))
    put_tiles(tmp("interrupted.lmdb"), {k: get_tile(STORE, KEYS[0]) for k in INCOMPLETE})

    cases = [("missing", tmp("missing.lmdb"), ("no such file or directory",)),
             ("plain dir", tmp("plain"), ("not an LMDB",)),
             ("plain file", tmp("file.lmdb"), ("LMDB",)),
             ("other LMDB", tmp("other.lmdb"), ("not a tile store", "'tiles' does not exist")),
             ("no store record", tmp("nostore.lmdb"), ("not a tile store",)),
             ("blank slide", tmp("blank.lmdb"), ("no complete slide",)),
             ("interrupted slide", tmp("interrupted.lmdb"), ("no complete slide",))]
    for what, store, phrases in cases:
        out = tmp(f"f_store_{what.replace(' ', '_')}")
        code, s, err = extract(store, out, "--device", "cpu")
        expect(code == 2, f"{what}: exits 2 (got {code}): {err}")
        expect(store in err and any(p in err for p in phrases),
               f"{what}: the message names {store} and says one of {phrases}: {err}")
        expect(not os.path.exists(out), f"{what}: {out} was created")
        print(f"  {what}: {err.strip().splitlines()[-1][:200]}")

    # --device cuda without a GPU: exit 3 (only where torch sees none).
    if not torch.cuda.is_available():
        code, s, err = extract(STORE, tmp("f_cuda"), "--device", "cuda")
        expect(code == 3 and "cuda" in err.lower(), f"--device cuda without a GPU exits 3 "
                                                    f"(got {code}): {err}")


def check_bad_options():
    """Malformed settings: exit 1 before anything is read or written."""
    problems = []
    for args in (["--mean", "0.5,0.5"], ["--std", "0.2,0,0.2"], ["--batch", "0"],
                 ["--input-size", "0"], ["--chunk-rows", "0"], ["--dtype", "f64"],
                 ["--amp", "f8"], ["--device", "tpu"], ["--shard", "3/3"], ["--shard", "1"],
                 ["--decode", "gpu"]):
        out = tmp("f_opts")
        code, s, err = extract(STORE, out, "--device", "cpu", *args)
        what = " ".join(args)
        if code != 1 or s is not None:
            problems.append(f"{what} exits 1 (got {code}): {err.strip()[:300]}")
        elif args[0] not in err:
            problems.append(f"{what}: the message names {args[0]}: {err.strip()[:300]}")
        if os.path.exists(out):
            problems.append(f"{what}: {out} was created")
            shutil.rmtree(out)
    expect(not problems, "; ".join(problems))


def check_decode_choice():
    """--decode on the CPU: a store of JPEG tiles decoded with auto gives the bytes of
    --decode host (libjpeg-turbo) and records no decoder in features.json; --decode device
    (nvJPEG) needs a GPU: refused with exit 1 naming --decode, before anything is written."""
    store = tmp("tiles-jpeg.lmdb")
    if not os.path.isdir(store):
        code, _, err = run([mltool, "tile", tmp("C.tif"), "-o", store, "--mpp", "0.5",
                            "--tile-size", str(TS), "--format", "jpeg", "-q"])
        expect(code == 0, f"mltool tile --format jpeg exits 0 (got {code}): {err}")
    runs = {}
    for mode in ("host", "auto"):
        out = tmp(f"f_decode_{mode}")
        s = extract_ok(store, out, "--device", "cpu", "--batch", "7", "--decode", mode)
        expect(s["decoder"] == "libjpeg-turbo" and s["device_decoded"] == 0,
               f"--decode {mode} on the CPU: decoder {s['decoder']}, "
               f"{s['device_decoded']} tiles on a device")
        _, _, meta = load_features(out)
        expect("decode" not in meta["model"], f"--decode {mode}: features.json model "
                                              f"{meta['model']}")
        runs[mode] = files_of(out)["features.npy"]
    expect(runs["host"] == runs["auto"], "--decode auto on the CPU = --decode host, byte for byte")
    out = tmp("f_decode_device")
    code, s, err = extract(store, out, "--device", "cpu", "--decode", "device")
    expect(code == 1 and s is None and "--decode device" in err and "GPU" in err,
           f"--decode device on the CPU exits 1 naming it (got {code}): {err[-500:]}")
    expect(not os.path.exists(out), f"--decode device on the CPU: {out} was created")


CHECKS = [check_torchscript, check_f16, check_color_texture, check_resume, check_resume_anywhere,
          check_shard_merge, check_shard_refusals, check_one_writer, check_changed_inputs,
          check_corrupt_tile,
          check_bad_model, check_bad_options, check_not_a_store, check_sigterm,
          check_decode_choice]


def main():
    run_checks("mltool extract", CHECKS, only, make_fixtures)


main()
