#!/usr/bin/env python3
"""mltool extract side by side with a PyTorch DataLoader pipeline and with the model alone.
Run through bench/run-extract.sh, which finds the binary and the Python.

    extract_bench.py --mltool MLTOOL --out OUTDIR [--work DIR] [--tiles 20000]
                     [--tile-size 256] [--quality 90] [--batch 256] [--input-size 224]
                     [--device cuda] [--amps bf16,none] [--workers CORES] [--cpu-smoke]

1. A tile store of N synthetic 256-px JPEG Q90 tiles (scripts/fixtures/tile_store.py:
   python-lmdb + Pillow, the documented layout), kept in WORK and reused by later runs.
2. ResNet-50 as TorchScript: torchvision.models.resnet50(weights=None), fc = Identity, eval,
   torch.jit.script (2048 features). Without torchvision, the same architecture defined
   below (ResNet50, torchvision's layout: bottlenecks 3-4-6-3, stride on the 3x3 conv).
3. For each --amps setting (bf16, none = float32):
   (iii) model only: the TorchScript model on a random batch already on the GPU, same
         batch and autocast: the limit for any pipeline;
   (i)   mltool extract STORE -o F --model r50.pt --input-size 224 --batch 256
         --device cuda [--amp bf16] --json: tiles/s as it reports (reading, decoding and
         the model, after the model is loaded);
   (ii)  the Python baseline: torch.utils.data.DataLoader over the same LMDB (python-lmdb
         opened in each worker, Pillow decode), num_workers = the cores, pin_memory=True,
         the same batch; on the GPU the same preprocessing (resize to 224 bilinear with
         antialias, /255, ImageNet mean/std) and autocast; the model loaded and run once
         before the clock starts; features kept on the GPU and copied back at the end.
   The features of (i) and (ii) are compared (relative Frobenius difference).
4. A markdown table (stdout and OUTDIR/extract-bench.md) with the ratios mltool/baseline
   (goal >= 2x) and mltool/model-only (goal >= 90%); OUTDIR/extract-bench.json holds every
   number and is rewritten after each measurement, so a run cut short keeps what it got.

--decode (issue 50): with the first of --amps, mltool extract with --decode host and device
on every core and on 4 (taskset), against the model alone; the features' difference between
the decoders, and the pixels' (mean, max, share differing) over every tile, from a model that
gives back the decoded pixels. On the CPU --decode device is refused: run it on a GPU.

--cpu-smoke: the same steps on the CPU with a small CNN, 96 tiles, input 64, batch 32 (and a
check that the local ResNet-50 definition scripts and runs), to try the script without a GPU.
"""
import argparse
import io
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts", "fixtures"))
import tile_store  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


# ---------------------------------------------------------------- models

class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class ResNet50(nn.Module):
    """torchvision's resnet50 (v1.5) with fc = Identity: 2048 features."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        inplanes = 64
        layers = []
        for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            down = nn.Sequential(nn.Conv2d(inplanes, planes * 4, 1, stride=stride, bias=False),
                                 nn.BatchNorm2d(planes * 4))
            mods = [Bottleneck(inplanes, planes, stride, down)]
            inplanes = planes * 4
            mods += [Bottleneck(inplanes, planes) for _ in range(blocks - 1)]
            layers.append(nn.Sequential(*mods))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Identity()
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class Small(nn.Module):
    """The --cpu-smoke model: two convolutions, pooling, 32 features."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)

    def forward(self, x):
        x = F.relu(self.c2(F.relu(self.c1(x))))
        return F.adaptive_avg_pool2d(x, 1).flatten(1)


def resnet50():
    """(module, description): torchvision's when it is there, else the local definition."""
    try:
        import torchvision
    except ImportError:
        print("extract_bench: torchvision is not installed; using the local ResNet-50 "
              "definition (bench/extract_bench.py: ResNet50, same architecture)",
              file=sys.stderr)
        return ResNet50(), "ResNet-50 (local definition, torchvision missing), fc = Identity"
    m = torchvision.models.resnet50(weights=None)
    m.fc = nn.Identity()
    return m, f"torchvision {torchvision.__version__} resnet50(weights=None), fc = Identity"


# ---------------------------------------------------------------- the Python baseline

def encoder_card(path):
    """The card (mltool.json) inside a file scripts/encoders.py exported."""
    files = {"mltool.json": ""}
    torch.jit.load(path, map_location="cpu", _extra_files=files)
    return json.loads(files["mltool.json"])


def card_transform(card):
    """The model card's transform as its users write it: torchvision on PIL images."""
    from torchvision import transforms
    p = card["preprocess"]
    mode = {"bicubic": transforms.InterpolationMode.BICUBIC,
            "bilinear": transforms.InterpolationMode.BILINEAR}[p["interpolation"]]
    return transforms.Compose([transforms.Resize(p["resize"], interpolation=mode),
                               transforms.CenterCrop(p["crop"]), transforms.ToTensor(),
                               transforms.Normalize(p["mean"], p["std"])])


class TileDataset(torch.utils.data.Dataset):
    """Tiles of an LMDB tile store by key: python-lmdb opened lazily in each worker, Pillow
    decode, HxWx3 uint8 tensors (or, given a card's transform, the model input)."""

    def __init__(self, path, keys, transform=None):
        self.path = path
        self.keys = [k.encode() for k in keys]
        self.env = None
        self.transform = transform

    def __len__(self):
        return len(self.keys)

    def __getitem__(self, i):
        import lmdb
        from PIL import Image
        if self.env is None:
            self.env = lmdb.open(self.path, readonly=True, lock=False, readahead=False,
                                 max_dbs=8)
            self.db = self.env.open_db(b"tiles", create=False)
        with self.env.begin(db=self.db, buffers=True) as txn:
            img = Image.open(io.BytesIO(txn.get(self.keys[i])))
            img.load()
        if img.mode != "RGB":
            img = img.convert("RGB")
        if self.transform is not None:
            return self.transform(img)
        return torch.from_numpy(np.array(img))  # a writable copy, as torchvision does


def preprocess(u8, size):
    """NHWC uint8 on the device -> the documented model input (as mltool does)."""
    x = u8.permute(0, 3, 1, 2).to(torch.float32).div(255.0)
    if x.shape[-2:] != (size, size):
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False,
                          antialias=size < x.shape[-1])
    m = torch.tensor(IMAGENET_MEAN, device=x.device).view(1, 3, 1, 1)
    s = torch.tensor(IMAGENET_STD, device=x.device).view(1, 3, 1, 1)
    return ((x - m) / s).contiguous()


def autocast(device, amp):
    if amp == "none":
        return torch.autocast(device_type=torch.device(device).type, enabled=False)
    return torch.autocast(device_type=torch.device(device).type,
                          dtype={"bf16": torch.bfloat16, "f16": torch.float16}[amp])


def sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def baseline(model, store, keys, a, amp):
    transform = card_transform(a.card) if a.card else None
    loader = torch.utils.data.DataLoader(
        TileDataset(store, keys, transform), batch_size=a.batch, shuffle=False, num_workers=a.workers,
        pin_memory=torch.device(a.device).type == "cuda", drop_last=False)
    with torch.inference_mode():  # the model once before the clock starts
        with autocast(a.device, amp):
            model(torch.rand(a.batch, 3, a.input_size, a.input_size, device=a.device))
    sync(a.device)
    outs = []
    t0 = time.perf_counter()
    first = None
    with torch.inference_mode():
        for u8 in loader:
            if first is None:
                first = time.perf_counter() - t0
            x = u8.to(a.device, non_blocking=True)
            x = x if transform else preprocess(x, a.input_size)
            with autocast(a.device, amp):
                outs.append(model(x).float())
        X = torch.cat(outs).cpu().numpy()
    seconds = time.perf_counter() - t0
    return X, {"seconds": seconds, "tiles_per_second": len(keys) / seconds,
               "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
               "first_batch_seconds": first, "workers": a.workers,
               "pin_memory": torch.device(a.device).type == "cuda"}


def model_only(model, a, amp, n_tiles):
    x = torch.randn(a.batch, 3, a.input_size, a.input_size, device=a.device)
    with torch.inference_mode(), autocast(a.device, amp):
        for _ in range(3):
            model(x)
        sync(a.device)
        t0 = time.perf_counter()
        model(x)
        sync(a.device)
        per = time.perf_counter() - t0
        iters = max(5, min(math.ceil(n_tiles / a.batch), int(10 / max(per, 1e-6))))
        t0 = time.perf_counter()
        for _ in range(iters):
            y = model(x)
        sync(a.device)
        seconds = time.perf_counter() - t0
    return {"iterations": iters, "seconds": seconds,
            "tiles_per_second": iters * a.batch / seconds, "dims": int(y.shape[1])}


def rate_text(v):
    """A rate as the table shows it: whole numbers from 100 on, else 3 significant digits."""
    return f"{v:.0f}" if v >= 100 else f"{v:.3g}"


# ---------------------------------------------------------------- mltool

def run_mltool(a, store, model_path, amp, out):
    shutil.rmtree(out, ignore_errors=True)
    cmd = [a.mltool, "extract", store, "-o", out, "--model", model_path, "--batch",
           str(a.batch), "--device", a.device]
    if not a.card:  # an encoder's card sets the preprocessing
        cmd += ["--input-size", str(a.input_size)]
    cmd += ["--amp", amp]  # always: without it an encoder card's precision would apply
    cmd.append("--json")
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        p = subprocess.Popen(cmd, stdout=stdout, stderr=stderr, text=True)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        stdout.seek(0), stderr.seek(0)
        out_text, err_text = stdout.read(), stderr.read()
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}\n{err_text[-3000:]}")
    s = json.loads(out_text)
    X = np.load(os.path.join(out, "features.npy"))
    return X, {"command": " ".join(["mltool"] + cmd[1:]), "wall_seconds": wall,
               "seconds": s["seconds"], "tiles_per_second": s["tiles_per_second"],
               "steady_tiles_per_second": s.get("steady_tiles_per_second"),
               "first_batch_seconds": s.get("first_batch_seconds"),
               "peak_rss_mib": usage.ru_maxrss / 1024,
               "devices": s["devices"], "rows": s["rows"], "dims": s["dims"]}


# ---------------------------------------------------------------- --stain (issue 39)

class MeanPixel(torch.nn.Module):
    """A model that does next to nothing: each tile's mean pixel (3 features)."""

    def forward(self, x):
        return x.mean(dim=(2, 3))


def stain_runs(a, store, model_path, amp, log):
    """--stain-norm macenko on the device: mltool extract with the benchmark's model with and
    without it (goal: >= 90% of the rate without), and with a do-nothing model (MeanPixel)
    with and without it, whose difference is the normalisation's own time (goal: >= 20,000
    tiles/s of 256 px on a GPU). The reference: a synthetic H&E tile of 512 px. Returns
    ({name: seconds}, markdown lines)."""
    from PIL import Image
    ref = os.path.join(a.work, "stain-ref.png")
    Image.fromarray(tile_store.tile_pixels("REF/000000_000000", 512)).save(ref)
    mean_pixel = os.path.join(a.work, "mean-pixel.pt")
    torch.jit.script(MeanPixel()).save(mean_pixel)
    stain = ["--stain-norm", "macenko", "--stain-reference", ref]
    bare = ["--input-size", str(a.tile_size), "--mean", "0,0,0", "--std", "1,1,1"]
    runs = {"model": (model_path, ["--input-size", str(a.input_size)]),
            "model_stain": (model_path, ["--input-size", str(a.input_size), *stain]),
            "bare": (mean_pixel, bare), "bare_stain": (mean_pixel, [*bare, *stain])}
    seconds, summary = {}, {}
    for name, (model, extra) in runs.items():
        s = extract_json(a, store, os.path.join(a.work, "features-stain"), model,
                         ["--amp", amp, *extra])
        seconds[name], summary[name] = s["seconds"], s
        log(f"[{amp}] stain {name}: {s['tiles_per_second']:.0f} tiles/s")
    shutil.rmtree(os.path.join(a.work, "features-stain"), ignore_errors=True)
    norm = seconds["bare_stain"] - seconds["bare"]
    keep = seconds["model"] / seconds["model_stain"]
    rate = a.tiles / norm if norm > 0 else float("inf")
    lines = ["", f"--stain-norm macenko ({amp}; reference: a synthetic 512-px H&E tile):", "",
             "| run | seconds | tiles/s |", "|---|---:|---:|"]
    for name, label in (("model", "extract, the model"),
                        ("model_stain", "extract --stain-norm macenko, the model"),
                        ("bare", "extract, a do-nothing model (mean pixel)"),
                        ("bare_stain", "extract --stain-norm macenko, a do-nothing model")):
        lines.append(f"| {label} | {seconds[name]:.2f} | {a.tiles / seconds[name]:.0f} |")
    unchanged = summary["model_stain"].get("stain_unchanged", 0)
    lines += ["", f"- the normalisation alone: {rate:.0f} tiles/s of {a.tile_size} px (goal >= "
              f"20,000: {'met' if rate >= 20000 else 'MISSED'}); {unchanged} of {a.tiles} "
              "tiles had too little stain and passed through",
              f"- extract with it / without it: {100 * keep:.0f}% (goal >= 90%: "
              f"{'met' if keep >= 0.9 else 'MISSED'}); stain_seconds "
              f"{summary['model_stain'].get('stain_seconds', 0):.2f} of "
              f"{summary['model_stain']['seconds']:.2f} s"]
    return {"seconds": seconds, "normalisation_tiles_per_second": rate,
            "rate_kept": keep}, lines


# ---------------------------------------------------------------- --decode (issue 50)

class PackedPixels(torch.nn.Module):
    """Each tile's pixels as the integers r * 65536 + g * 256 + b, exact in float32: with
    --mean 0,0,0 --std 1,1,1 at the tile's own size, the decoded pixels, 4 bytes a pixel."""

    def forward(self, x):
        p = torch.round(x * 255.0)
        return (p[:, 0] * 65536.0 + p[:, 1] * 256.0 + p[:, 2]).flatten(1)


def extract_json(a, store, out, model, extra, cores=None):
    """mltool extract STORE -o OUT --model MODEL EXTRA --json, on the first `cores` cores
    (taskset, --threads) when given; returns its summary."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [a.mltool, "extract", store, "-o", out, "--model", model, "--batch", str(a.batch),
           "--device", a.device, *extra, "--json"]
    if cores:
        cmd = ["taskset", "-c", f"0-{cores - 1}", *cmd, "--threads", str(cores)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stderr[-3000:]}")
    return json.loads(p.stdout)


def pixel_difference(a, store, log):
    """nvJPEG's pixels against libjpeg-turbo's over every tile of the store: PackedPixels
    extracted with --decode host and --decode device, compared in chunks. Returns the
    figures (mean and max |difference| in levels over every value, the share of values that
    differ, the decoder)."""
    model = os.path.join(a.work, "packed-pixels.pt")
    torch.jit.script(PackedPixels().eval()).save(model)
    extra = ["--input-size", str(a.tile_size), "--mean", "0,0,0", "--std", "1,1,1", "--amp",
             "none", "--dtype", "f32", "--allow-wide-features"]
    outs, decoder = {}, None
    for mode in ("host", "device"):
        outs[mode] = os.path.join(a.work, f"pixels-{mode}")
        s = extract_json(a, store, outs[mode], model, [*extra, "--decode", mode])
        decoder = s["decoder"] if mode == "device" else decoder
        log(f"pixels --decode {mode}: {s['tiles_per_second']:.0f} tiles/s ({s['decoder']})")
    H = np.load(os.path.join(outs["host"], "features.npy"), mmap_mode="r")
    D = np.load(os.path.join(outs["device"], "features.npy"), mmap_mode="r")
    total, count, differ, worst = 0.0, 0, 0, 0
    for i in range(0, H.shape[0], 512):
        h = H[i:i + 512].astype(np.int64)
        d = D[i:i + 512].astype(np.int64)
        diff = np.stack([np.abs((h >> k & 255) - (d >> k & 255)) for k in (16, 8, 0)])
        total += float(diff.sum())
        count += diff.size
        differ += int((diff > 0).sum())
        worst = max(worst, int(diff.max()))
    del H, D
    for out in outs.values():
        shutil.rmtree(out, ignore_errors=True)
    return {"decoder": decoder, "tiles": a.tiles, "mean_levels": total / count,
            "max_levels": worst, "share_differing": differ / count}


def decode_runs(a, store, model_path, amp, model_rate, log):
    """--decode device (nvJPEG) against host (libjpeg-turbo): extract with the benchmark's
    model on every core and on 4 (taskset; issue 50's goal: device on 4 cores >= 90% of the
    model alone), the features' difference the decoder makes, and the pixels' over every
    tile. Returns (figures, markdown lines)."""
    runs, feats = {}, {}
    for decode, cores in (("host", None), ("host", 4), ("device", 4), ("device", None)):
        name = f"{decode}-{cores or 'all'}"
        out = os.path.join(a.work, "features-decode")
        runs[name] = extract_json(a, store, out, model_path, ["--input-size", str(a.input_size),
                                                              "--amp", amp, "--decode", decode],
                                  cores)
        if cores is None:
            feats[decode] = np.load(os.path.join(out, "features.npy")).astype(np.float64)
        log(f"[{amp}] --decode {decode} on {cores or 'all'} cores: "
            f"{runs[name]['tiles_per_second']:.0f} tiles/s ({runs[name]['decoder']})")
    shutil.rmtree(os.path.join(a.work, "features-decode"), ignore_errors=True)
    diff = feats["device"] - feats["host"]
    agreement = {"relative": float(np.linalg.norm(diff) / max(np.linalg.norm(feats["host"]), 1e-30)),
                 "max_abs": float(np.abs(diff).max())}
    del feats, diff
    pixels = pixel_difference(a, store, log)
    lines = ["", f"JPEG decoding ({amp}): --decode host (libjpeg-turbo) against device "
             f"({runs['device-all']['decoder']}), {a.tiles} tiles, host cores by taskset:", "",
             "| --decode | host cores | tiles/s | steady tiles/s | / model only | steady / model only |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, r in runs.items():
        decode, cores = name.split("-")
        st = r.get("steady_tiles_per_second") or 0
        lines.append(f"| {decode} | {cores if cores != 'all' else os.cpu_count()} | "
                     f"{r['tiles_per_second']:.0f} | {st:.0f} | "
                     f"{100 * r['tiles_per_second'] / model_rate:.0f}% | {100 * st / model_rate:.0f}% |")
    goal = runs["device-4"]["tiles_per_second"] / model_rate
    lines += ["", f"- device on 4 cores / model only: {100 * goal:.0f}% (goal >= 90%: "
              f"{'met' if goal >= 0.9 else 'MISSED'}); host on 4 cores: "
              f"{100 * runs['host-4']['tiles_per_second'] / model_rate:.0f}%",
              f"- features, device vs host decode: {agreement['relative']:.2e} relative "
              f"(Frobenius), max |diff| {agreement['max_abs']:.3g}",
              f"- pixels, {pixels['decoder']} vs libjpeg-turbo over {pixels['tiles']} tiles: mean "
              f"{pixels['mean_levels']:.4f} levels, max {pixels['max_levels']}, "
              f"{100 * pixels['share_differing']:.2f}% of values differ"]
    return {"runs": runs, "features": agreement, "pixels": pixels, "goal_ratio": goal}, lines


# ---------------------------------------------------------------- main

def machine():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mltool", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default=os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                                   "mltool-extract-bench"))
    ap.add_argument("--tiles", type=int)
    ap.add_argument("--tile-size", type=int, default=256)
    ap.add_argument("--quality", type=int, default=90)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--input-size", type=int)
    ap.add_argument("--device")
    ap.add_argument("--amps", default="bf16,none")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--cpu-smoke", action="store_true")
    ap.add_argument("--stain", action="store_true",
                    help="also --stain-norm macenko with the model and with a do-nothing model "
                    "(the first of --amps; issue 39's device goals)")
    ap.add_argument("--decode", action="store_true",
                    help="also --decode device (nvJPEG) against host on every core and on 4, "
                    "and the pixel and feature differences (the first of --amps; issue 50)")
    ap.add_argument("--encoder", help="a file scripts/encoders.py exported (its card's "
                    "preprocessing: mltool with no flags, the baseline with the card's "
                    "Pillow/torchvision transform in its workers) instead of ResNet-50")
    a = ap.parse_args()
    smoke = a.cpu_smoke
    a.tiles = a.tiles or (96 if smoke else 20000)
    a.batch = a.batch or (32 if smoke else 256)
    a.card = encoder_card(a.encoder) if a.encoder else None
    if a.card:
        a.input_size = a.card["preprocess"]["crop"]
    a.input_size = a.input_size or (64 if smoke else 224)
    a.device = a.device or ("cpu" if smoke else "cuda")
    amps = [x for x in a.amps.split(",") if x]
    a.mltool = os.path.abspath(a.mltool)
    os.makedirs(a.out, exist_ok=True)
    os.makedirs(a.work, exist_ok=True)
    if a.device == "cpu":
        torch.set_num_threads(os.cpu_count() or 1)  # the baseline's and model-only's math threads
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("extract_bench: --device cuda but torch sees no GPU (--cpu-smoke runs on the CPU)")

    results = {"machine": machine(), "torch": torch.__version__,
               "mltool_version": subprocess.run([a.mltool, "--version"], capture_output=True,
                                                text=True).stdout.strip(),
               "tiles": a.tiles, "tile_size": a.tile_size, "quality": a.quality,
               "batch": a.batch, "input_size": a.input_size, "cpu_smoke": smoke, "runs": {}}
    json_path = os.path.join(a.out, "extract-bench.json")

    def save():
        with open(json_path, "w") as f:
            json.dump(results, f, indent=1)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    # 1. The tile store (reused when a complete one with these parameters exists).
    store = os.path.join(a.work, f"tiles-{a.tiles}-{a.tile_size}px-q{a.quality}.lmdb")
    marker = store + ".complete"
    if not os.path.exists(marker):
        shutil.rmtree(store, ignore_errors=True)
        log(f"writing {a.tiles} tiles into {store} ...")
        t0 = time.perf_counter()
        tile_store.write_store(store, tile_store.bench_slides(a.tiles), a.tile_size, "jpeg",
                               a.quality, workers=os.cpu_count() or 1)
        results["store_seconds"] = time.perf_counter() - t0
        open(marker, "w").close()
    keys = tile_store.store_keys(store)
    assert len(keys) == a.tiles, (len(keys), a.tiles)
    results["store_mib"] = os.path.getsize(os.path.join(store, "data.mdb")) / 2**20
    # CUDA only now: the store's writer forks its workers.
    results["device"] = torch.cuda.get_device_name() if a.device.startswith("cuda") else "cpu"
    results["gpus"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
    log(f"store: {len(keys)} tiles, data.mdb {results['store_mib']:.0f} MiB")

    # 2. The model.
    module = None
    if a.card:
        desc = (f"{a.card['name']} {a.card['version']} (scripts/encoders.py export"
                f"{', random weights' if a.card['weights']['random'] else ''}), "
                f"{a.card['dims']} features")
    elif smoke:
        torch.manual_seed(0)
        module, desc = Small(), "small CNN (--cpu-smoke), 32 features"
        r50 = torch.jit.script(ResNet50().eval())  # the fallback scripts and runs
        with torch.inference_mode():
            dims = r50(torch.rand(1, 3, 64, 64)).shape
        assert tuple(dims) == (1, 2048), dims
        log("local ResNet-50 definition: scripted, 1x3x64x64 -> 1x2048")
    else:
        torch.manual_seed(0)
        module, desc = resnet50()
    model_path = os.path.abspath(a.encoder) if a.card else os.path.join(a.work, "model.pt")
    if module is not None:
        torch.jit.script(module.eval()).save(model_path)
    results["model"] = desc
    model = torch.jit.load(model_path, map_location=a.device).eval()
    save()

    # 3. Model only, mltool, baseline; a measurement that fails is recorded, the rest go on.
    def measure(r, name, fn):
        log(f"[{amp}] {name} ...")
        try:
            X, r[name] = fn()
        except Exception as e:  # noqa: BLE001  (reported in the table and the JSON)
            r[name] = {"error": f"{type(e).__name__}: {e}"[-2000:]}
            log(f"[{amp}] {name}: FAILED: {r[name]['error']}")
            X = None
        else:
            log(f"[{amp}] {name}: {rate_text(r[name]['tiles_per_second'])} tiles/s")
        save()
        if torch.device(a.device).type == "cuda":
            torch.cuda.empty_cache()
        return X

    failed = 0
    for amp in amps:
        r = results["runs"].setdefault(amp, {})
        measure(r, "model_only", lambda: (None, model_only(model, a, amp, a.tiles)))
        X_m = measure(r, "mltool", lambda: run_mltool(a, store, model_path, amp,
                                                      os.path.join(a.work, "features")))
        X_b = measure(r, "baseline", lambda: baseline(model, store, keys, a, amp))
        if X_m is not None and X_b is not None:
            diff = X_m.astype(np.float64) - X_b
            r["agreement"] = {"relative": float(np.linalg.norm(diff) /
                                                max(np.linalg.norm(X_b), 1e-30)),
                              "max_abs": float(np.abs(diff).max())}
            del diff
        del X_m, X_b
        failed += sum("error" in r[k] for k in ("model_only", "mltool", "baseline"))
        save()
    shutil.rmtree(os.path.join(a.work, "features"), ignore_errors=True)
    stain_lines = []
    if a.stain and amps:
        try:
            results["stain"], stain_lines = stain_runs(a, store, model_path, amps[0], log)
        except Exception as e:  # noqa: BLE001  (reported in the table and the JSON)
            results["stain"] = {"error": f"{type(e).__name__}: {e}"[-2000:]}
            stain_lines = ["", f"--stain-norm runs FAILED: {results['stain']['error'][-600:]}"]
            failed += 1
        save()

    decode_lines = []
    model_rate = results["runs"].get(amps[0], {}).get("model_only", {}).get("tiles_per_second") \
        if amps else None
    if a.decode and model_rate:
        try:
            results["decode"], decode_lines = decode_runs(a, store, model_path, amps[0],
                                                          model_rate, log)
        except Exception as e:  # noqa: BLE001  (reported in the table and the JSON)
            results["decode"] = {"error": f"{type(e).__name__}: {e}"[-2000:]}
            decode_lines = ["", f"--decode runs FAILED: {results['decode']['error'][-600:]}"]
            failed += 1
        save()

    # 4. The table.
    def rate(r, name):
        return r[name].get("tiles_per_second")

    lines = []
    w = lines.append
    used = next((r["mltool"]["devices"] for r in results["runs"].values()
                 if "devices" in r.get("mltool", {})), ["?"])
    w(f"Device: {results['device']}" + (f" ({results['gpus']} GPUs visible; mltool used "
                                         f"{', '.join(used)})" if results["gpus"] > 1 else "")
      + f"; host {results['machine']}; torch {results['torch']}; "
      + (results["mltool_version"].splitlines() or ["mltool ?"])[0] + ".")
    w(f"Workload: {a.tiles} synthetic {a.tile_size}-px JPEG Q{a.quality} tiles in an LMDB tile "
      f"store ({results['store_mib']:.0f} MiB, page cache warm), {desc}, input {a.input_size} px "
      f"(resized on the device, antialiased), batch {a.batch}, device {a.device}."
      + (" CPU SMOKE RUN: the figures say nothing about GPU speed." if smoke else ""))
    w("")
    w("| amp | mltool extract tiles/s | Python DataLoader tiles/s | model only tiles/s "
      "| mltool / DataLoader | mltool / model only | mltool steady tiles/s | steady / model only "
      "| mltool to first batch (s) | features, mltool vs DataLoader (rel.) |")
    w("|---|---|---|---|---|---|---|---|---|---|")
    goals = []
    for amp in amps:
        r = results["runs"][amp]
        m, b, o = rate(r, "mltool"), rate(r, "baseline"), rate(r, "model_only")
        label = "bf16 autocast" if amp == "bf16" else ("f16 autocast" if amp == "f16" else
                                                     "none (float32)")
        cell = lambda v: rate_text(v) if v else "FAILED"  # noqa: E731
        rb = f"{m / b:.2f}x" if m and b else "-"
        ro = f"{100 * m / o:.0f}%" if m and o else "-"
        ag = f"{r['agreement']['relative']:.1e}" if "agreement" in r else "-"
        st = r["mltool"].get("steady_tiles_per_second")
        fb = r["mltool"].get("first_batch_seconds")
        rs = f"{100 * st / o:.0f}%" if st and o else "-"
        w(f"| {label} | {cell(m)} | {cell(b)} | {cell(o)} | {rb} | {ro} | {cell(st) if st else '-'} | {rs} "
          f"| {f'{fb:.1f}' if fb is not None else '-'} | {ag} |")
        goals.append((label, m / b if m and b else None, m / o if m and o else None))
    w("")
    rss = "; ".join(f"{amp}: mltool {results['runs'][amp]['mltool'].get('peak_rss_mib', 0):.0f} MiB, "
                    f"Python {results['runs'][amp]['baseline'].get('peak_rss_mib', 0):.0f} MiB"
                    for amp in amps)
    w(f"Peak RSS (mltool's process; the Python process without its DataLoader workers): {rss}.")
    w("")
    walls = ", ".join(f"{amp} {results['runs'][amp]['mltool']['wall_seconds']:.1f} s"
                      for amp in amps if "wall_seconds" in results["runs"][amp]["mltool"])
    pin = torch.device(a.device).type == "cuda"
    w(f"mltool: tiles/s as `--json` reports it (from the first tile read to the last row "
      f"written, model loaded); steady: `steady_tiles_per_second`, the rate after the first "
      f"batch; to first batch: `first_batch_seconds`, from the command's start (model load and "
      f"the device's first-batch set-up included); every column runs the row's precision "
      f"(`--amp` always given); process wall times incl. start-up and model load: {walls}. "
      f"DataLoader: num_workers {a.workers}, pin_memory {pin}, python-lmdb per worker, Pillow "
      "decode, the same preprocessing and autocast on the device, timed from creating the "
      "iterator to the features on the host (model warmed up first). Model only: the same "
      "TorchScript module on a random batch already on the device, same batch and autocast.")
    for amp in amps:
        for k in ("model_only", "mltool", "baseline"):
            if "error" in results["runs"][amp][k]:
                w(f"\n{amp} {k} FAILED: {results['runs'][amp][k]['error'][-600:]}")
    w("")
    w("Goals:")
    w("")
    for label, rb, ro in goals:
        g1 = f"{rb:.2f}x (goal >= 2x): {'met' if rb >= 2 else 'MISSED'}" if rb else "not measured"
        g2 = f"{100 * ro:.0f}% (goal >= 90%): {'met' if ro >= 0.9 else 'MISSED'}" if ro else \
            "not measured"
        w(f"- {label}: mltool / DataLoader {g1}; mltool / model only {g2}")
    lines += stain_lines + decode_lines
    text = "\n".join(lines) + "\n"
    with open(os.path.join(a.out, "extract-bench.md"), "w") as f:
        f.write(text)
    results["done"] = True
    save()
    print(text, end="")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
