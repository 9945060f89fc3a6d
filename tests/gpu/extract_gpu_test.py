"""mltool extract on the GPU (ctest label gpu): CUDA features against PyTorch's own forward on
CUDA and against mltool's CPU run. Needs no `mltool tile`: the tile stores are written here
with python-lmdb and Pillow in the documented layout (scripts/fixtures/tile_store.py), one of
PNG tiles and one of JPEG Q90 tiles, 128 px, three complete slides and an interrupted one.

    extract_gpu_test.py MLTOOL [--cpu-smoke] [CHECK...]   # CHECK: names of the check_*
                                                           # functions, without check_
    extract_gpu_test.py --write-slides DIR                 # the slides of check_slides

Checks (each prints "ok: NAME (seconds)"; all run; exit 1 if any failed):
  decode         an identity TorchScript model gives back the decoded pixels: PNG tiles equal
                 Pillow's decode exactly, JPEG tiles within 2 levels (the reference below
                 then uses mltool's own decode); CUDA equals CPU within 1e-6, i.e. the pinned
                 buffers and side-stream copies deliver every tile, whole, to its row
  torchscript    (a) a small CNN, --input-size 96 (shrinking, antialiased) and 160
                 (enlarging): --device cuda = the same preprocessing + model in PyTorch on
                 CUDA within 1e-4, and = --device cpu within 1e-4 (or within twice PyTorch's
                 own CUDA-vs-CPU difference where that is larger: cuDNN runs float32
                 convolutions in TF32 by default, for mltool and PyTorch alike)
  color_texture  (b) builtin:color-texture, --device cuda = --device cpu within 1e-4 per
                 column group (same TF32 allowance, shown with a PyTorch port of the
                 extractor run with TF32 on and off); --device auto uses every GPU
  amp            (c) --amp bf16 runs, differs from float32 (autocast took effect) and is
                 within 5e-2 relative (Frobenius) of it, and close to PyTorch's autocast
  multi_gpu      (d) with >= 2 GPUs: --device cuda (one replica per GPU) = --device cuda:0
  slides         (e) extract SLIDE... (tiles read from the slide files by the reader threads
                 into the pinned pool) on the GPU = `tile --format png` + extract of that
                 store on the GPU within 1e-6 (the same tiles in the same batches), = the
                 CPU run within (a)'s allowance, on generated JPEG slides at --mpp 0.5 and
                 on ../shared's CMU-1-Small-Region.svs at --level 0 (its own JPEG tiles)

  nvjpeg         (f) --decode device: nvJPEG's pixels within a few levels of libjpeg-turbo's
                 (printed: mean and max), every tile decoded on the GPU, the decoder recorded;
                 PNG tiles refused; --merge across decoders refused naming --decode

Without a GPU visible to torch it fails (exit 1): the gpu label only runs where one is.
--cpu-smoke runs the store writing and the checks with every "GPU" run on the CPU instead
(other batch sizes), so the writer and the comparisons can be tried on a machine without one.

The slides of (e) are written with libvips (scripts/fixtures/make_slides.py). The GPU machine
has no pyvips: scripts/device/prepare.sh writes them here with --write-slides into
.device/fixtures, with the real slide, and run.sh names that directory in MLTOOL_GPU_SLIDES.
Without MLTOOL_GPU_SLIDES the check writes them itself.
"""
import contextlib
import io
import json
import os
import subprocess
import sys
import traceback
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "fixtures"))
sys.path.insert(0, os.path.join(HERE, "..", "cli"))
REAL_SVS = "CMU-1-Small-Region.svs"
# check_slides' generated slides (make_slides.generate calls, file names relative).
SLIDE_CALLS = [
    ["generic_tiff", ["G.tif", 2048, 1536, 0.25, [(0, 0, 2048, 1280), (300, 1280, 1700, 1536)]],
     {"min_level": 256, "compression": "jpeg"}],
    ["generic_tiff", ["G-2.tif", 1536, 1024, 0.25, [(200, 100, 1300, 900)]],
     {"min_level": 256, "compression": "jpeg", "tissue_class": "b"}],
]


def write_slides(directory):
    """Writes SLIDE_CALLS' slides into directory; returns their paths."""
    import make_slides
    os.makedirs(directory, exist_ok=True)
    calls = [[name, [os.path.join(directory, a[0])] + a[1:], kw] for name, a, kw in SLIDE_CALLS]
    make_slides.generate(calls)
    return [c[1][0] for c in calls]


if sys.argv[1:2] == ["--write-slides"] and len(sys.argv) == 3:
    print("\n".join(write_slides(sys.argv[2])))
    sys.exit(0)
import tile_store  # noqa: E402
from cli_common import Failure, expect, run_checks, run_json, tmp  # noqa: E402

args = [a for a in sys.argv[1:] if not a.startswith("--")]
flags = [a for a in sys.argv[1:] if a.startswith("--")]
if not args or set(flags) - {"--cpu-smoke"}:
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    sys.exit(2)
SMOKE = "--cpu-smoke" in flags
mltool = os.path.abspath(args[0])
only = set(args[1:])

try:
    import lmdb  # noqa: F401  (tile_store imports it; fail early with a clear message)
except ImportError:
    print("FAIL: python-lmdb is missing (on the GPU machine scripts/device/run.sh installs it "
          "from .device/wheels into /tmp/site)", file=sys.stderr)
    sys.exit(1)
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from PIL import Image  # noqa: E402
from torch_models import Small  # noqa: E402

if not SMOKE and not torch.cuda.is_available():
    print("FAIL: no CUDA GPU is visible to torch; the gpu tests need one (--cpu-smoke runs "
          "the CPU half)", file=sys.stderr)
    sys.exit(1)

DEV = "cpu" if SMOKE else "cuda"
GPUS = 0 if SMOKE else torch.cuda.device_count()
TS = 128
THREADS = str(min(8, os.cpu_count() or 1))
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
torch.set_num_threads(min(4, os.cpu_count() or 1))

# Three complete slides whose ids sort differently as ids and as keys ("S-2/" < "S/"), with
# holes in their grids, and "B", interrupted (tiles, no done/ marker): 105 tiles, so batches
# of 16 end with a partial one and the pool's pinned buffers are reused several times.
SLIDES = [
    {"id": "S", "rows": 6, "cols": 9, "skip": {(0, 0), (2, 3), (5, 8)}},
    {"id": "S-2", "rows": 5, "cols": 7, "skip": {(4, 6)}},
    {"id": "T", "rows": 4, "cols": 5},
    {"id": "B", "rows": 2, "cols": 3, "complete": False},
]
N_TILES = 51 + 34 + 20


def max_diff(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        raise Failure(f"shapes differ: {a.shape} vs {b.shape}")
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def rel_diff(a, b):
    """||a - b|| / ||b|| (Frobenius)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


# ---------------------------------------------------------------- models (fixed seeds)

# Small comes from tests/cli/torch_models.py (extract_test.py uses it too).

class Identity(nn.Module):
    """The preprocessed input, flattened: with --mean 0,0,0 --std 1,1,1 and no resize, the
    decoded pixels / 255."""

    def forward(self, x):
        return x.flatten(1)


# ---------------------------------------------------------------- fixtures

STORES = {}     # encoding -> store path
KEYS = None     # keys of the complete slides, in the store's order (both stores)
PIXELS = {}     # encoding -> N×TS×TS×3 uint8, Pillow's decode of the stored tiles
REF = {}        # encoding -> the pixels the references use (mltool's decode for JPEG if
                # it differs from Pillow's; see check_decode)


def make_fixtures():
    global KEYS
    for enc in ("png", "jpeg"):
        path = tmp(f"tiles-{enc}.lmdb")
        keys = tile_store.write_store(path, SLIDES, TS, encoding=enc, quality=90,
                                      workers=min(4, os.cpu_count() or 1))
        read_keys, values = tile_store.read_store(path)
        expect(read_keys == keys, f"{enc}: python-lmdb reads back {read_keys[:3]}..., the "
                                  f"writer says {keys[:3]}...")
        expect(len(keys) == N_TILES and keys[0].startswith("S-2/") and keys[-1].startswith("T/")
               and not any(k.startswith("B/") for k in keys),
               f"{enc} store: {len(keys)} tiles, {keys[:1]}..{keys[-1:]}")
        images = []
        for k, v in zip(keys, values):
            img = Image.open(io.BytesIO(v))
            expect(img.format == enc.upper() and img.mode == "RGB" and img.size == (TS, TS),
                   f"{k}: {img.format} {img.mode} {img.size}")
            images.append(np.asarray(img.convert("RGB")))
        PIXELS[enc] = np.stack(images)
        REF[enc] = PIXELS[enc]
        STORES[enc] = path
        if KEYS is None:
            KEYS = keys
        expect(keys == KEYS, "both stores have the same keys")
    torch.manual_seed(1234)
    torch.jit.script(Small().eval()).save(tmp("small.pt"))
    torch.jit.script(Identity().eval()).save(tmp("identity.pt"))


def fixtures():
    """make_fixtures for run_checks, any error in them reported with its traceback."""
    try:
        make_fixtures()
    except Exception as e:
        raise Failure(f"{e}\n{traceback.format_exc()}") from e
    return f"2 stores of {N_TILES} tiles"


def small():
    return torch.jit.load(tmp("small.pt"), map_location="cpu").eval()


# ---------------------------------------------------------------- running mltool extract

def extract(store, out, *a):
    p = subprocess.run([mltool, "extract", store, "-o", out, "--threads", THREADS, *a,
                        "--json"], capture_output=True, text=True, timeout=600)
    summary = None
    if p.stdout.strip():
        try:
            summary = json.loads(p.stdout)
        except ValueError:
            raise Failure(f"stdout is not one JSON document: {p.stdout[:500]!r}")
    return p.returncode, summary, p.stderr


_runs = {}


def features(enc, device, *a):
    """Runs extract on the store of `enc` (cached by arguments); returns (X, summary, meta).
    JPEG is decoded on the host (libjpeg-turbo) unless `a` says otherwise with --decode: the
    checks compare devices and models on the same pixels; check_nvjpeg compares decoders."""
    if "--decode" not in a:
        a = a + ("--decode", "host")
    key = (enc, device) + a
    if key not in _runs:
        out = tmp("f%d" % len(_runs))
        code, s, err = extract(STORES[enc], out, "--device", device, *a)
        expect(code == 0 and s is not None and s.get("status") == "extracted",
               f"extract {enc} --device {device} {' '.join(a)} exits 0 (got {code}): "
               f"{err[-2000:]}")
        with open(os.path.join(out, "features.json")) as f:
            meta = json.load(f)
        X = np.load(os.path.join(out, "features.npy"))
        with open(os.path.join(out, "keys.txt")) as f:
            keys = f.read().split("\n")[:-1]
        expect(keys == KEYS, f"{out}: keys.txt is not the key order of the complete slides")
        expect(X.shape == (N_TILES, meta["dims"]) and s["rows"] == N_TILES,
               f"{out}: {X.shape}, summary rows {s['rows']}")
        _runs[key] = (X, s, meta)
    return _runs[key]


def gpu_devices():
    return ["cpu"] if SMOKE else [f"cuda:{i}" for i in range(GPUS)]


def dev_batch(b):
    """The batch of a "GPU" run: in --cpu-smoke another batch than the CPU run's, so the two
    runs being compared are not the same computation."""
    return str(b + 5) if SMOKE else str(b)


@contextlib.contextmanager
def tf32(enabled):
    """cuDNN convolutions (and matmuls) with TF32 allowed or not."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        saved = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
        torch.backends.cudnn.allow_tf32 = enabled
        torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


# ---------------------------------------------------------------- references

def preprocess(u8, size, device, mean=IMAGENET_MEAN, std=IMAGENET_STD):
    """The documented preprocessing, on `device`: NCHW, /255, bilinear resize (antialiased
    when shrinking), minus mean, over std."""
    x = torch.from_numpy(u8).to(device).permute(0, 3, 1, 2).to(torch.float32).div(255.0)
    if x.shape[-2:] != (size, size):
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False,
                          antialias=size < x.shape[-1])
    m = torch.tensor(mean, dtype=torch.float32, device=device).view(1, 3, 1, 1)
    s = torch.tensor(std, dtype=torch.float32, device=device).view(1, 3, 1, 1)
    return ((x - m) / s).contiguous()


def reference(u8, size, device, amp=None, batch=None):
    """The small model in PyTorch on the documented preprocessing, in batches of `batch`
    rows from row 0 as mltool forms them (the same shapes, so cuDNN picks the same
    algorithms), under autocast(amp) if given."""
    model = small().to(device)
    batch = batch or len(u8)
    out = []
    with torch.inference_mode():
        for i in range(0, len(u8), batch):
            x = preprocess(u8[i:i + batch], size, device)
            with torch.autocast(device_type=torch.device(device).type,
                                dtype=amp or torch.bfloat16, enabled=amp is not None):
                y = model(x)
            out.append(y.reshape(y.shape[0], -1).float().cpu())
    return torch.cat(out).numpy()


def color_texture_torch(u8, device):
    """builtin:color-texture with the same torch ops as lib/features/extractor.cpp, float32,
    16 tiles at a time."""
    out = []
    with torch.inference_mode():
        x = torch.from_numpy(u8).to(device)
        for i in range(0, x.shape[0], 16):
            rgb = x[i:i + 16].permute(0, 3, 1, 2).to(torch.float32).div(255.0)
            n = rgb.shape[0]
            flat = rgb.flatten(2)
            parts = [flat.mean(2), flat.std(2, correction=0)]
            bins = (flat * 16).floor().clamp(0, 15).to(torch.long)
            hist = torch.zeros(n, 3, 16, device=device).scatter_add_(2, bins, torch.ones_like(flat))
            parts.append((hist / float(flat.shape[2])).flatten(1))
            parts.append((-torch.log10((flat + 1.0 / 255) / (1.0 + 1.0 / 255))).mean(2))
            mx, mn = rgb.max(1).values, rgb.min(1).values
            sat = torch.where(mx > 0, (mx - mn) / mx.clamp_min(1e-12), torch.zeros_like(mx)).flatten(1)
            parts += [sat.mean(1, keepdim=True), sat.std(1, correction=0, keepdim=True)]
            w = torch.tensor([0.299, 0.587, 0.114], device=device).view(1, 3, 1, 1)
            luma = (rgb * w).sum(1, keepdim=True)
            sx = torch.tensor([-1., 0, 1, -2, 0, 2, -1, 0, 1], device=device).view(1, 1, 3, 3)
            sy = sx.transpose(2, 3).contiguous()
            lap = torch.tensor([0., 1, 0, 1, -4, 1, 0, 1, 0], device=device).view(1, 1, 3, 3)
            gx, gy = F.conv2d(luma, sx), F.conv2d(luma, sy)
            mag = (gx * gx + gy * gy).sqrt().flatten(1)
            parts += [mag.mean(1, keepdim=True), mag.std(1, correction=0, keepdim=True),
                      F.conv2d(luma, lap).abs().flatten(1).mean(1, keepdim=True)]
            out.append(torch.cat(parts, 1))
    return torch.cat(out).cpu().numpy()


CT_GROUPS = [("mean RGB", 0, 3), ("std RGB", 3, 6), ("histograms", 6, 54),
             ("optical density", 54, 57), ("saturation", 57, 59), ("Sobel magnitude", 59, 61),
             ("|Laplacian|", 61, 62)]


# ---------------------------------------------------------------- the checks

def check_decode():
    """Identity model: mltool's decoded pixels = Pillow's (PNG exactly, JPEG within 2
    levels); the GPU run = the CPU run within 1e-6."""
    ident = ["--model", tmp("identity.pt"), "--input-size", str(TS), "--mean", "0,0,0",
             "--std", "1,1,1", "--allow-wide-features"]  # the pixels: 3 × 128² values a tile
    for enc in ("png", "jpeg"):
        X, s, _ = features(enc, "cpu", *ident, "--batch", "7")
        expect(X.shape[1] == TS * TS * 3, f"identity dims {X.shape}")
        got = X.reshape(N_TILES, 3, TS, TS).transpose(0, 2, 3, 1) * 255.0
        dec = np.rint(got)
        expect(max_diff(got, dec) < 1e-3, f"{enc}: identity features are not k/255")
        d = max_diff(dec, PIXELS[enc])
        n = int((dec != PIXELS[enc]).sum())
        if enc == "png":
            expect(d == 0, f"png: mltool's decode differs from Pillow's by up to {d} levels "
                           f"({n} values)")
        else:
            expect(d <= 2, f"jpeg: mltool's decode differs from Pillow's by up to {d} levels "
                           f"({n} values)")
            if n:
                REF["jpeg"] = dec.astype(np.uint8)  # the references use mltool's decode
        print(f"  {enc}: mltool's decode vs Pillow's: max {d:.0f} levels, {n} values differ")
        Xg, sg, _ = features(enc, DEV, *ident, "--batch", dev_batch(16))
        expect(sg["devices"] == gpu_devices(), f"--device {DEV}: devices {sg['devices']}, "
                                               f"expected {gpu_devices()}")
        # Within 1e-6, not bit for bit: CUDA may divide by the scalar 255 as a multiplication
        # by its reciprocal (an ulp); a tile in the wrong row or a torn copy is >= 1/255 off.
        rows = np.where((np.abs(Xg - X) > 1e-6).any(1))[0]
        expect(len(rows) == 0, f"{enc}: identity on {DEV} differs from cpu in rows "
                               f"{rows[:10].tolist()} (max {max_diff(Xg, X):.3g})")
        same = "bit for bit" if np.array_equal(Xg, X) else f"max |diff| {max_diff(Xg, X):.2g}"
        print(f"  {enc}: identity on {DEV} (batch {dev_batch(16)}) = cpu (batch 7): {same}")


def check_torchscript():
    """(a) small CNN on the GPU = PyTorch on the GPU (1e-4) = mltool on the CPU (1e-4, or
    TF32's allowance)."""
    problems = []
    for enc, size in (("png", 96), ("jpeg", 96), ("png", 160)):
        common = ["--model", tmp("small.pt"), "--input-size", str(size)]
        Xg, s, meta = features(enc, DEV, *common, "--batch", dev_batch(16))
        Xc, _, _ = features(enc, "cpu", *common, "--batch", "7")
        expect(Xg.shape == (N_TILES, 16) and Xg.dtype == np.float32, f"features {Xg.shape}")
        expect(s["devices"] == gpu_devices() and meta["model"].get("amp") == "none",
               f"summary devices {s['devices']}, model {meta['model']}")
        ref_g = reference(REF[enc], size, DEV, batch=int(dev_batch(16)))
        ref_c = reference(REF[enc], size, "cpu")
        d_ref = max_diff(Xg, ref_g)
        d_cpu = max_diff(Xg, Xc)
        d_py = max_diff(ref_g, ref_c)
        note = ""
        if not SMOKE:
            with tf32(False):
                d_py_ieee = max_diff(reference(REF[enc], size, DEV, batch=16), ref_c)
            note = (f"; PyTorch's own {DEV} vs cpu: {d_py:.2g} (TF32 default), "
                    f"{d_py_ieee:.2g} (TF32 off)")
        tol = max(1e-4, 2 * d_py)
        print(f"  {enc} {size} px: |{DEV} - PyTorch {DEV}| {d_ref:.2g}, |{DEV} - cpu| "
              f"{d_cpu:.2g} (allowed {tol:.2g}), |cpu - PyTorch cpu| "
              f"{max_diff(Xc, ref_c):.2g}{note}")
        if d_ref > 1e-4:
            problems.append(f"{enc} {size} px: max |mltool {DEV} - PyTorch {DEV}| = "
                            f"{d_ref:.3g} > 1e-4")
        if d_cpu > tol:
            problems.append(f"{enc} {size} px: max |mltool {DEV} - mltool cpu| = {d_cpu:.3g}"
                            f" > {tol:.3g}{note}")
        if max_diff(Xc, ref_c) > 1e-4:
            problems.append(f"{enc} {size} px: max |mltool cpu - PyTorch cpu| = "
                            f"{max_diff(Xc, ref_c):.3g} > 1e-4")
    expect(not problems, "; ".join(problems))


def check_color_texture():
    """(b) builtin:color-texture on the GPU = on the CPU within 1e-4 per column group."""
    problems = []
    for enc in ("png", "jpeg"):
        Xg, s, meta = features(enc, DEV, "--model", "builtin:color-texture", "--batch",
                               dev_batch(16))
        Xc, _, _ = features(enc, "cpu", "--model", "builtin:color-texture", "--batch", "32")
        expect(Xg.shape == (N_TILES, 62) and meta["model"] == {"kind": "builtin",
                                                                "name": "color-texture"},
               f"color-texture {Xg.shape} {meta['model']}")
        expect(np.isfinite(Xg).all() and Xg[:, 0:3].std() > 0, "features finite and varying")
        port_c = color_texture_torch(REF[enc], "cpu")
        ports = {}
        if not SMOKE:
            with tf32(True):
                ports["TF32 on"] = color_texture_torch(REF[enc], DEV)
            with tf32(False):
                ports["TF32 off"] = color_texture_torch(REF[enc], DEV)
        cols = []
        for name, lo, hi in CT_GROUPS:
            d = max_diff(Xg[:, lo:hi], Xc[:, lo:hi])
            d_port = max_diff(Xc[:, lo:hi], port_c[:, lo:hi])
            d_py = max((max_diff(p[:, lo:hi], port_c[:, lo:hi]) for p in ports.values()),
                       default=0.0)
            tol = max(1e-4, 2 * d_py)
            extra = "".join(f", PyTorch {DEV} {k} vs cpu {max_diff(p[:, lo:hi], port_c[:, lo:hi]):.1g}"
                            for k, p in ports.items())
            cols.append(f"{lo}-{hi - 1} {d:.1g}")
            if d > tol:
                problems.append(f"{enc}: columns {lo}-{hi - 1} ({name}): max |{DEV} - cpu| "
                                f"{d:.3g} > {tol:.3g}{extra}")
            if d_port > 1e-4:
                problems.append(f"{enc}: columns {lo}-{hi - 1} ({name}): the PyTorch port "
                                f"differs from mltool cpu by {d_port:.3g}")
            if extra and d > 1e-4:
                print(f"  {enc} {name}: |{DEV} - cpu| {d:.2g}{extra}")
        print(f"  {enc}: max |{DEV} - cpu| by columns: {', '.join(cols)}")
    if not SMOKE:
        # --device auto (the default) takes every GPU.
        code, s, err = extract(STORES["png"], tmp("f_auto"), "--model", "builtin:color-texture")
        expect(code == 0 and s and s["devices"] == gpu_devices(),
               f"--device auto: exit {code}, devices {s and s['devices']}: {err[-500:]}")
        X = np.load(tmp("f_auto", "features.npy"))
        Xc, _, _ = features("png", "cpu", "--model", "builtin:color-texture", "--batch", "32")
        print(f"  --device auto: devices {s['devices']}, max |auto - cpu| {max_diff(X, Xc):.2g}")
    expect(not problems, "; ".join(problems))


def check_amp():
    """(c) --amp bf16: runs, differs from f32 (autocast took effect), within 5e-2 relative of
    it, and close to PyTorch's autocast(bfloat16) forward."""
    problems = []
    for enc in ("png", "jpeg"):
        common = ["--model", tmp("small.pt"), "--input-size", "96"]
        X32, _, _ = features(enc, DEV, *common, "--batch", dev_batch(16))
        Xbf, s, meta = features(enc, DEV, *common, "--batch", dev_batch(16), "--amp", "bf16")
        expect(meta["model"].get("amp") == "bf16" and Xbf.dtype == np.float32,
               f"features.json model {meta['model']}, dtype {Xbf.dtype}")
        expect(np.isfinite(Xbf).all(), "bf16 features are finite")
        r = rel_diff(Xbf, X32)
        ref_bf = reference(REF[enc], 96, DEV, amp=torch.bfloat16, batch=int(dev_batch(16)))
        r_ref = rel_diff(Xbf, ref_bf)
        print(f"  {enc}: bf16 vs f32: relative {r:.3g}, max |diff| {max_diff(Xbf, X32):.3g} "
              f"(max |f32| {np.abs(X32).max():.3g}); vs PyTorch autocast bf16: relative "
              f"{r_ref:.3g}")
        if max_diff(Xbf, X32) == 0:
            problems.append(f"{enc}: --amp bf16 gives exactly the float32 features: autocast "
                            f"had no effect")
        if r > 5e-2:
            problems.append(f"{enc}: --amp bf16 is {r:.3g} (relative) from float32 > 5e-2")
        if r_ref > 1e-2:
            problems.append(f"{enc}: --amp bf16 is {r_ref:.3g} (relative) from PyTorch's "
                            f"autocast(bfloat16) forward > 1e-2")
    expect(not problems, "; ".join(problems))


def check_multi_gpu():
    """(d) with two or more GPUs: --device cuda (one replica each) = --device cuda:0."""
    if GPUS < 2:
        print(f"  skipped: {GPUS} GPU(s) visible")
        return
    common = ["--model", tmp("small.pt"), "--input-size", "96", "--batch", "8"]
    Xa, sa, _ = features("png", "cuda", *common)
    X0, s0, _ = features("png", "cuda:0", *common)
    expect(sa["devices"] == gpu_devices() and s0["devices"] == ["cuda:0"],
           f"devices {sa['devices']} / {s0['devices']}")
    d = max_diff(Xa, X0)
    expect(d <= 1e-5, f"--device cuda ({GPUS} GPUs) vs cuda:0: max |diff| {d:.3g} > 1e-5")
    print(f"  {GPUS} GPUs vs cuda:0: max |diff| {d:.2g}"
          f"{' (bit-identical)' if np.array_equal(Xa, X0) else ''}")


def check_encoder_card():
    """(f) an encoder card's resize rule on the device: Pillow's uint8 resampling computed
    there with exact float64 integer sums, so the device's preprocessed tiles equal the CPU's
    and the card's own Pillow + torchvision transform (Identity model: the input itself)."""
    from torchvision import transforms
    problems = []
    for mode, resize, crop in (("bicubic", TS + 32, TS), ("bilinear", TS - 32, TS - 47)):
        card = {"format": "mltool.encoder", "format_version": 1, "kind": "patch",
                "name": f"identity-{mode}", "version": "test", "dims": 3 * crop * crop,
                "license": "test", "weights": {"sha256": "0" * 64, "random": True},
                "preprocess": {"resize": resize, "crop": crop, "interpolation": mode,
                               "antialias": True, "mean": [0.5, 0.5, 0.5],
                               "std": [0.25, 0.25, 0.25]}}
        path = tmp(f"identity-{mode}.pt")
        torch.jit.save(torch.jit.script(Identity().eval()), path,
                       _extra_files={"mltool.json": json.dumps(card)})
        wide = "--allow-wide-features"  # the pixels themselves: 3 × crop² values a tile
        Xg, _, meta = features("png", DEV, "--model", path, "--batch", dev_batch(16), wide)
        Xc, _, _ = features("png", "cpu", "--model", path, "--batch", "7", wide)
        interp = {"bicubic": transforms.InterpolationMode.BICUBIC,
                  "bilinear": transforms.InterpolationMode.BILINEAR}[mode]
        t = transforms.Compose([transforms.Resize(resize, interpolation=interp),
                                transforms.CenterCrop(crop), transforms.ToTensor(),
                                transforms.Normalize([0.5] * 3, [0.25] * 3)])
        ref = torch.stack([t(Image.fromarray(u8)) for u8 in REF["png"]]).flatten(1).numpy()
        for name, X in ((DEV, Xg), ("cpu", Xc)):
            if max_diff(X, ref) > 1e-6:
                problems.append(f"{mode}: max |mltool {name} - Pillow| = {max_diff(X, ref):.3g}")
        if meta["model"].get("encoder", {}).get("name") != card["name"]:
            problems.append(f"{mode}: features.json model.encoder {meta['model'].get('encoder')}")
    expect(not problems, "; ".join(problems))


def slide_inputs():
    """[(name, slide paths, geometry)]: the generated slides at --mpp 0.5 (every tile
    resampled) and the real slide at --level 0 --tile-size 240 (its own JPEG tiles), where
    there is one."""
    given = os.environ.get("MLTOOL_GPU_SLIDES")
    if given:
        paths = [os.path.join(given, c[1][0]) for c in SLIDE_CALLS]
        missing = [p for p in paths if not os.path.exists(p)]
        expect(not missing, f"MLTOOL_GPU_SLIDES={given} lacks {missing} (scripts/device/"
                            f"prepare.sh writes them)")
        real = os.path.join(given, REAL_SVS)
    else:
        paths = write_slides(tmp("slides"))
        real = os.path.join(HERE, "..", "..", "..", "shared", "slides", REAL_SVS)
    runs = [("generated", paths, ["--mpp", "0.5", "--tile-size", "128"])]
    if os.path.exists(real):
        runs.append(("CMU-1", [real], ["--level", "0", "--tile-size", "240"]))
    else:
        print(f"  {REAL_SVS} not found (../shared/slides): the real slide is skipped")
    return runs


def mltool_json(*argv):
    """The --json summary of a run of mltool that must succeed."""
    code, doc, err = run_json([mltool, *argv, "--threads", THREADS, "--json"])
    expect(code == 0 and doc is not None, f"mltool {' '.join(argv)} exits 0 (got {code}): "
                                          f"{err[-2000:]}")
    return doc


def extracted(out):
    with open(os.path.join(out, "keys.txt")) as f:
        return np.load(os.path.join(out, "features.npy")), f.read().split("\n")[:-1]


def check_slides():
    """(e) extract SLIDE... on the GPU = tile + extract STORE on the GPU (1e-6) = the CPU run
    (the torchscript check's allowance)."""
    if subprocess.run([mltool, "help", "tile"], capture_output=True).returncode != 0:
        print("  skipped: this mltool has no tile (built with MLTOOL_WITH_SLIDE=OFF)")
        return
    model = ["--model", tmp("small.pt"), "--input-size", "96"]
    problems = []
    for name, slides, geometry in slide_inputs():
        store = tmp(f"slides-{name}.lmdb")
        mltool_json("tile", *slides, "-o", store, "--format", "png", *geometry)
        runs = {}
        for label, inputs, dev, batch, extra in (
                ("store", [store], DEV, dev_batch(16), []),
                ("slides", slides, DEV, dev_batch(16), geometry),
                ("slides cpu", slides, "cpu", "7", geometry)):
            out = tmp(f"fs-{name}-{label.replace(' ', '-')}")
            s = mltool_json("extract", *inputs, "-o", out, "--device", dev, "--batch", batch,
                            "--decode", "host", *model, *extra)
            runs[label] = extracted(out) + (s,)
        Xs, keys, _ = runs["store"]
        Xf, kf, sf = runs["slides"]
        Xc, kc, _ = runs["slides cpu"]
        expect(len(keys) > 0 and kf == keys and kc == keys,
               f"{name}: keys.txt of the slide runs differ from the tile store's "
               f"({len(kf)}/{len(kc)} vs {len(keys)} rows)")
        expect(sf["devices"] == gpu_devices() and sf.get("tiling"),
               f"{name}: summary devices {sf['devices']}, tiling {sf.get('tiling')}")
        u8 = np.stack([np.asarray(Image.open(io.BytesIO(v)).convert("RGB"))
                       for v in tile_store.read_store(store)[1]])
        d_py = max_diff(reference(u8, 96, DEV, batch=int(dev_batch(16))), reference(u8, 96, "cpu"))
        d_store, d_cpu = max_diff(Xf, Xs), max_diff(Xf, Xc)
        tol = max(1e-4, 2 * d_py)
        print(f"  {name}: {len(keys)} tiles of {u8.shape[1]} px; |slides {DEV} - store {DEV}| "
              f"{d_store:.2g}, |slides {DEV} - slides cpu| {d_cpu:.2g} (allowed {tol:.2g}); "
              f"reader wait {sf['input_wait_seconds']:.2f} s")
        if d_store > 1e-6:
            problems.append(f"{name}: max |extract SLIDES - extract STORE| on {DEV} = "
                            f"{d_store:.3g} > 1e-6")
        if d_cpu > tol:
            problems.append(f"{name}: max |{DEV} - cpu| = {d_cpu:.3g} > {tol:.3g}")
    expect(not problems, "; ".join(problems))


def check_nvjpeg():
    """--decode device: JPEG tiles decoded by nvJPEG into the batch's device tensor. The
    identity model gives its pixels: within a few levels of libjpeg-turbo's (another IDCT,
    not another picture: a swapped channel or a tile in the wrong row is far off), every
    tile decoded on the GPU, the decoder recorded in features.json and the summary; a PNG
    store is refused; --merge of shards decoded differently is refused naming --decode. In
    --cpu-smoke: auto = host bit for bit, device refused (no GPU)."""
    ident = ["--model", tmp("identity.pt"), "--input-size", str(TS), "--mean", "0,0,0",
             "--std", "1,1,1", "--allow-wide-features", "--batch", dev_batch(16)]
    Xh, sh, _ = features("jpeg", DEV, *ident, "--decode", "host")
    expect(sh["decoder"] == "libjpeg-turbo", f"--decode host: decoder {sh['decoder']}")
    if SMOKE:
        Xa, sa, meta = features("jpeg", DEV, *ident, "--decode", "auto")
        expect(np.array_equal(Xa, Xh) and sa["decoder"] == "libjpeg-turbo"
               and "decode" not in meta["model"], "--decode auto on the CPU = host")
        code, s, err = extract(STORES["jpeg"], tmp("f-nvjpeg-cpu"), "--device", "cpu",
                               "--decode", "device")
        expect(code == 1 and "--decode" in err, f"--decode device on the CPU exits 1 naming "
                                                f"--decode (got {code}): {err[-500:]}")
        print("  cpu: auto = host bit for bit; device refused")
        return
    Xd, sd, meta = features("jpeg", DEV, *ident, "--decode", "device")
    expect(sd["decoder"].startswith("nvjpeg-") and meta["model"].get("decode") == sd["decoder"],
           f"decoder {sd['decoder']}, features.json model.decode {meta['model'].get('decode')}")
    expect(sd["device_decoded"] == N_TILES, f"{sd['device_decoded']} of {N_TILES} tiles "
                                            f"decoded by nvJPEG")
    ph = np.rint(Xh * 255.0)
    pd = np.rint(Xd * 255.0)
    diff = np.abs(pd - ph)
    print(f"  {sd['decoder']}: pixels vs libjpeg-turbo over {N_TILES} tiles: mean "
          f"{diff.mean():.4f}, max {diff.max():.0f} levels, {(diff > 0).mean() * 100:.2f}% "
          f"of values differ")
    expect(diff.mean() < 1.0 and diff.max() <= 48,
           f"nvJPEG's pixels are another picture: mean {diff.mean():.3f}, max {diff.max()}")
    code, s, err = extract(STORES["png"], tmp("f-nvjpeg-png"), "--device", DEV,
                           "--decode", "device")
    expect(code == 1 and "PNG" in err, f"--decode device on PNG tiles exits 1 (got {code}): "
                                       f"{err[-300:]}")
    shards = []
    for i, mode in enumerate(("device", "host")):
        out = tmp(f"f-nvjpeg-shard{i}")
        code, s, err = extract(STORES["jpeg"], out, "--device", DEV, "--shard", f"{i}/2",
                               "--decode", mode, *ident[:-2])
        expect(code == 0, f"--shard {i}/2 --decode {mode} exits 0 (got {code}): {err[-500:]}")
        shards.append(out)
    p = subprocess.run([mltool, "extract", "--merge", *shards, "-o", tmp("f-nvjpeg-merged")],
                       capture_output=True, text=True, timeout=600)
    expect(p.returncode == 1 and "--decode" in p.stderr,
           f"--merge across decoders exits 1 naming --decode (got {p.returncode}): "
           f"{p.stderr[-500:]}")


CHECKS = [check_decode, check_torchscript, check_color_texture, check_amp, check_multi_gpu,
          check_encoder_card, check_slides, check_nvjpeg]


def main():
    where = "CPU smoke run (no GPU used)" if SMOKE else \
        f"{GPUS} GPU(s): {', '.join(torch.cuda.get_device_name(i) for i in range(GPUS))}"
    print(f"mltool extract GPU checks: {where}; torch {torch.__version__}", flush=True)
    run_checks(f"mltool extract on {'cpu (smoke)' if SMOKE else 'the GPU'}", CHECKS, only,
               fixtures)


if __name__ == "__main__":
    main()
