"""mltool extract --stain-norm macenko|reinhard --stain-reference IMAGE (issue 39) against
torchstain (PyPI, torch backend; scripts/requirements-extra.txt) on tiles of the real
CMU-1-Small-Region.svs in ../shared/slides: a TorchScript identity model with no mean/std
returns the normalised pixels themselves, compared tile by tile with torchstain's
normalize() after fit() on the same reference PNG (mean absolute difference <= 1 of 255, 99th
percentile <= 3). Tiles with too little stain pass through unchanged and are counted; the
method, the reference's SHA-256 and the fitted target are in features.json; a resume with
another reference is refused naming --overwrite, and one with the same resumes to an
uninterrupted run's bytes; slides as inputs give the store's rows; the reference may be a PNG,
TIFF or JPEG.
--stain-fit slide: each slide's estimate (features.json stain_fits) equals torchstain's fit() on
the slide's sampled tiles laid one under the other, and the tiles equal torchstain's
normalize() given that estimate in place of the tile's own; the bytes do not depend on the
math threads (with either fit), a resumed run's and a sharded, merged run's bytes equal one run's, a tile
normalised alone equals it normalised in a batch, and a resume with another --stain-fit is
refused naming it and --overwrite. The bytes are the same under the code paths another machine
would take (the math libraries', LibTorch's without AVX2, glibc's libm without FMA).
Where the SVS is absent every check prints that it is skipped.

    stain_test.py MLTOOL [TEST...]     # TEST: names of the check_* functions, without check_
"""
import glob
import hashlib
import io
import json
import os
import signal
import subprocess
import sys

import numpy as np
import openslide
import torch
from PIL import Image

from cli_common import OTHER_MACHINES, expect, rename_shim, run, run_checks, run_json, tmp
from store_refs import read_tile_store

HERE = os.path.dirname(os.path.abspath(__file__))
REAL_SVS = os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared", "slides",
                                         "CMU-1-Small-Region.svs"))
SID = "CMU-1-Small-Region"
TILE = 256
TILE_ARGS = ["--mpp", "0.499", "--tile-size", str(TILE), "--tissue", "none"]
# The model sees the decoded (normalised) tile as x / 255 with no resize, mean or std.
RAW = ["--input-size", str(TILE), "--mean", "0,0,0", "--std", "1,1,1", "--allow-wide-features",
       "--batch", "16"]
MIN_STAINED = 0.05  # features/stain.hpp kMinStainedFraction

mltool = os.path.abspath(sys.argv[1])
only = set(sys.argv[2:])
have_svs = os.path.isfile(REAL_SVS)
TILES = {}  # key -> uint8 H×W×3, the store's tiles


class Identity(torch.nn.Module):
    def forward(self, x):
        return x * 255.0


def make_fixtures():
    if not have_svs:
        return f"skipped: {REAL_SVS} is absent (see ../shared/slides/README.md)"
    torch.jit.script(Identity()).save(tmp("identity.pt"))
    code, _, err = run([mltool, "tile", REAL_SVS, "-o", tmp("st"), "--format", "png", "-q",
                        *TILE_ARGS])
    expect(code == 0, f"tile: exit {code}: {err}")
    _, tiles = read_tile_store(tmp("st"))
    for k, v in tiles.items():
        TILES[k] = np.asarray(Image.open(io.BytesIO(v)).convert("RGB"))
    # References: a region of stained tissue, tinted (so the target differs from the slide's
    # own stain), and another region untinted.
    with openslide.OpenSlide(REAL_SVS) as s:
        a = np.asarray(s.read_region((800, 1200), 0, (512, 512)).convert("RGB")).astype(float)
        b = np.asarray(s.read_region((1400, 1800), 0, (384, 384)).convert("RGB"))
    tinted = np.clip(a * np.array([0.85, 0.75, 1.0]), 0, 255).astype(np.uint8)
    Image.fromarray(tinted).save(tmp("ref_tinted.png"))
    Image.fromarray(b).save(tmp("ref_other.png"))
    return f"{len(TILES)} tiles of {TILE} px from {os.path.basename(REAL_SVS)}"


def skipped():
    if not have_svs:
        print(f"  skipped: {REAL_SVS} is absent")
    return not have_svs


def extract(inputs, out, *args, env=None):
    return run_json([mltool, "extract", *inputs, "-o", out, "--threads", "2",
                     "--model", tmp("identity.pt"), *RAW, *args, "--json"], env=env)


def pixels(out):
    """The stored rows as uint8 tiles N×H×W×3, their keys and features.json."""
    X = np.load(os.path.join(out, "features.npy"))
    keys = open(os.path.join(out, "keys.txt")).read().split("\n")[:-1]
    with open(os.path.join(out, "features.json")) as f:
        meta = json.load(f)
    u8 = np.rint(X.reshape(-1, 3, TILE, TILE).transpose(0, 2, 3, 1))
    expect(u8.min() >= 0 and u8.max() <= 255 and np.isfinite(X).all(),
           f"{out}: rows are pixels in 0..255")
    return u8.astype(np.uint8), keys, meta


def enough_stain(u8):
    od = -np.log((u8.reshape(-1, 3).astype(np.float32) + 1) / 240)
    return (od >= 0.15).all(axis=1).mean() >= MIN_STAINED


def chw(u8):
    return torch.from_numpy(np.ascontiguousarray(u8.transpose(2, 0, 1)))


def torchstain_reference(method, ref_png):
    import torchstain
    n = torchstain.normalizers.MacenkoNormalizer(backend="torch") if method == "macenko" \
        else torchstain.normalizers.ReinhardNormalizer(backend="torch")
    n.fit(chw(np.asarray(Image.open(ref_png).convert("RGB"))))

    def normalize(u8):
        if method == "macenko":
            out, _, _ = n.normalize(I=chw(u8), stains=False)
        else:
            out = n.normalize(I=chw(u8))
        return out.numpy().astype(np.uint8)
    return n, normalize


def macenko_float64(u8, Io=240, alpha=1, beta=0.15):
    """torchstain's Macenko fit of `u8` (its stain matrix and maximum concentrations: the
    same steps, percentiles taken as its kthvalue takes them) in float64 with numpy. The
    arbiter where torchstain's own float32 fit moves with the machine: its percentiles pick
    one order statistic of float32 angles, which another machine's log and atan2 reorder
    (on an AMD EPYC, 2026-11-28: up to 2.7e-4 off this, where mltool's fit was within 3e-7)."""
    def percentile(t, q):
        return np.partition(t.ravel(), round(.01 * q * (t.size - 1)))[round(.01 * q * (t.size - 1))]
    od = -np.log((u8.reshape(-1, 3).astype(np.float64) + 1) / Io)
    odhat = od[~np.any(od < beta, axis=1)]
    eig = np.linalg.eigh(np.cov(odhat.T))[1][:, [1, 2]]
    that = odhat @ eig
    phi = np.arctan2(that[:, 1], that[:, 0])
    lo, hi = percentile(phi, alpha), percentile(phi, 100 - alpha)
    v_min = eig @ np.array([np.cos(lo), np.sin(lo)])
    v_max = eig @ np.array([np.cos(hi), np.sin(hi)])
    he = np.stack([v_min, v_max], 1) if v_min[0] > v_max[0] else np.stack([v_max, v_min], 1)
    c = np.linalg.lstsq(he, od.T, rcond=None)[0]
    return {"stain_matrix": he, "max_concentrations": np.array([percentile(c[0], 99),
                                                                 percentile(c[1], 99)])}


def expect_macenko_fit(what, got, torchstain_fit, u8, rtol):
    """mltool's Macenko fit `got` equals torchstain's float32 fit within `rtol`, or, where
    torchstain's float32 fit strays (another machine's vector code), the float64 arbiter's
    within 1e-4 as closely as torchstain's own fit does."""
    arbiter = macenko_float64(u8)
    for name, value in torchstain_fit.items():
        mine, theirs, exact = (np.array(x, np.float64) for x in (got[name], value, arbiter[name]))
        if np.allclose(mine, theirs, rtol=rtol, atol=rtol / 10):
            continue
        off_mine, off_theirs = np.abs(mine - exact).max(), np.abs(theirs - exact).max()
        expect(off_mine <= max(1e-4, off_theirs) and np.allclose(mine, exact, rtol=1e-3),
               f"{what}: {name} {mine.tolist()}, torchstain's {theirs.tolist()}, float64 "
               f"{exact.tolist()}: {off_mine:.2g} from float64 (torchstain {off_theirs:.2g})")
        print(f"  {what}: {name}: torchstain's float32 fit is {off_theirs:.2g} from the float64 "
              f"arbiter here, mltool's {off_mine:.2g}")


def compare(method, ref_png, env=None, name=""):
    out = tmp(f"f_{method}{name}")
    code, summary, err = extract([tmp("st")], out, "--stain-norm", method, "--stain-reference",
                                 ref_png, env=env)
    expect(code == 0, f"extract --stain-norm {method}: exit {code}: {err[-2000:]}")
    got, keys, meta = pixels(out)
    fitted, normalize = torchstain_reference(method, ref_png)
    diffs, unchanged = [], []
    for row, k in enumerate(keys):
        tile = TILES[k]
        if not enough_stain(tile):
            unchanged.append(k)
            expect(np.array_equal(got[row], tile), f"{method}: {k} (background) is unchanged")
            continue
        diffs.append(np.abs(got[row].astype(np.int16) - normalize(tile).astype(np.int16)).ravel())
    d = np.concatenate(diffs)
    mean, p99 = d.mean(), np.percentile(d, 99)
    print(f"  {method}{name}: {len(diffs)} tiles normalised, {len(unchanged)} unchanged; against "
          f"torchstain: mean |diff| {mean:.6f}, p99 {p99:.0f}, max {d.max()} (of 255), "
          f"{np.count_nonzero(d)} of {d.size} values differ")
    expect(mean <= 1 and p99 <= 3, f"{method}: mean |diff| {mean:.3f} <= 1, p99 {p99} <= 3")
    expect(len(diffs) > 10 and unchanged, f"{method}: stained and background tiles both seen")
    expect(summary["stain_unchanged"] == len(unchanged),
           f"{method}: stain_unchanged {summary['stain_unchanged']}, want {len(unchanged)}")
    model = meta["model"]
    sha = hashlib.sha256(open(ref_png, "rb").read()).hexdigest()
    expect(model.get("stain_norm") == method and model["stain_reference"]["sha256"] == sha
           and model["stain_reference"]["fit"] == "tile", f"features.json model: {model}")
    target = model["stain_reference"]["target"]
    if method == "macenko":
        want = {"stain_matrix": fitted.HERef.tolist(),
                "max_concentrations": fitted.maxCRef.tolist()}
        expect_macenko_fit(f"macenko{name}: target", target, want,
                           np.asarray(Image.open(ref_png).convert("RGB")), 1e-5)
        want = {}  # checked
    else:
        want = {"lab_means": fitted.target_means.tolist(), "lab_stds": fitted.target_stds.tolist()}
    for name, value in want.items():
        expect(np.allclose(np.array(target[name]), np.array(value), rtol=1e-5, atol=1e-6),
               f"{method}: target {name} {target[name]}, torchstain's {value}")
    return out


def check_macenko():
    if not skipped():
        compare("macenko", tmp("ref_tinted.png"))


def check_reinhard():
    if not skipped():
        compare("reinhard", tmp("ref_tinted.png"))


def check_tensor_path():
    """The GPU's tensor path (lib/features/stain_math.cpp), run on the CPU by the test seam
    MLTOOL_STAIN_TENSORS=1, agrees with torchstain as the CPU path does, with either method."""
    if not skipped():
        for method in ("macenko", "reinhard"):
            compare(method, tmp("ref_tinted.png"), env={"MLTOOL_STAIN_TENSORS": "1"},
                    name=" (tensor path)")


def check_slides_as_inputs():
    """The slide itself as input, tiled on the fly: the store's rows, bit for bit. Its QC
    picture (--qc) shows the slide and, beside it, the slide normalised: the right half is
    mltool's normalisation of the left half's slide picture (its stain estimated on it), and
    the caption says so."""
    if skipped():
        return
    args = ["--stain-norm", "macenko", "--stain-reference", tmp("ref_other.png")]
    code, _, err = extract([tmp("st")], tmp("s_store"), *args)
    expect(code == 0, f"extract of the store: exit {code}: {err[-2000:]}")
    code, _, err = extract([REAL_SVS], tmp("s_slide"), *args, *TILE_ARGS, "--qc", tmp("s_qc"),
                           "--qc-size", "512")
    expect(code == 0, f"extract of the slide: exit {code}: {err[-2000:]}")
    a = np.load(tmp("s_store", "features.npy"))
    b = np.load(tmp("s_slide", "features.npy"))
    expect(a.shape == b.shape and np.array_equal(a, b), "slide and store give the same rows")
    qc = np.asarray(Image.open(tmp("s_qc", f"{SID}.png")).convert("RGB")).astype(int)
    with openslide.OpenSlide(REAL_SVS) as s:
        width, height = s.dimensions
    w = 512 if width >= height else round(512 * width / height)
    gap = max(4, w // 64)
    expect(qc.shape[1] == 2 * w + gap, f"QC picture {qc.shape[1]} px wide, want 2 x {w} + {gap}")
    left, right = qc[:400, :w], qc[:400, w + gap:]
    moved = np.abs(left - right).mean()
    expect(moved > 2, f"the right half differs from the left by {moved:.2f} levels on average")


def check_reference_formats():
    """The reference as a TIFF (the PNG's pixels: the same target) or a JPEG (the target
    torchstain fits on Pillow's decoding of it); features.json names each file's SHA-256."""
    if skipped():
        return
    pixels_png = np.asarray(Image.open(tmp("ref_other.png")).convert("RGB"))
    Image.fromarray(pixels_png).save(tmp("ref_other.tif"))
    Image.fromarray(pixels_png).save(tmp("ref_other.jpg"), quality=95)
    targets = {}
    for ext in ("png", "tif", "jpg"):
        ref = tmp(f"ref_other.{ext}")
        out = tmp(f"fmt_{ext}")
        code, _, err = extract([tmp("st")], out, "--stain-norm", "macenko", "--stain-reference",
                               ref)
        expect(code == 0, f"reference .{ext}: exit {code}: {err[-1000:]}")
        with open(os.path.join(out, "features.json")) as f:
            stain = json.load(f)["model"]["stain_reference"]
        expect(stain["sha256"] == hashlib.sha256(open(ref, "rb").read()).hexdigest(),
               f".{ext}: sha256 {stain['sha256']}")
        targets[ext] = stain["target"]
    expect(targets["tif"] == targets["png"], f"TIFF and PNG of the same pixels: {targets}")
    fitted, _ = torchstain_reference("macenko", tmp("ref_other.jpg"))
    expect(np.allclose(targets["jpg"]["stain_matrix"], fitted.HERef.tolist(), rtol=1e-4,
                       atol=1e-5), f"JPEG: {targets['jpg']}, torchstain {fitted.HERef.tolist()}")


def check_resume_other_reference():
    """A partial run resumed with another reference image is refused, naming --overwrite."""
    if skipped():
        return
    out = tmp("r")
    args = ["--stain-norm", "reinhard", "--stain-reference", tmp("ref_tinted.png"),
            "--chunk-rows", "16"]
    e = dict(os.environ, LD_PRELOAD=rename_shim(), KILL_RENAME_MATCH=".json", KILL_AT_RENAME="3")
    p = subprocess.run([mltool, "extract", tmp("st"), "-o", out, "--threads", "2", "--model",
                        tmp("identity.pt"), *RAW, *args], env=e, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    expect(p.returncode == -signal.SIGKILL, f"killed run: {p.returncode}: {p.stderr[-1000:]}")
    expect(glob.glob(os.path.join(out, ".extract-partial", "chunk-*.json")), "a chunk committed")
    other = args.copy()
    other[3] = tmp("ref_other.png")
    code, _, err = extract([tmp("st")], out, *other)
    expect(code == 1 and "--stain-reference" in err and "--overwrite" in err,
           f"resume with another reference: exit 1 naming --stain-reference and --overwrite "
           f"(got {code}): {err[-1000:]}")
    code, _, err = extract([tmp("st")], out, "--stain-norm", "macenko", *args[2:])
    expect(code == 1 and "--stain-norm" in err and "--overwrite" in err,
           f"resume with another method: exit 1 (got {code}): {err[-1000:]}")
    code, summary, err = extract([tmp("st")], out, *args)
    expect(code == 0 and summary["resumed_from"] == 16,
           f"the same reference resumes (got {code}): {err[-1000:]}")
    whole = tmp("r_whole")
    code, _, err = extract([tmp("st")], whole, *args)
    expect(code == 0, f"uninterrupted run: exit {code}: {err[-1000:]}")
    for name in ("features.npy", "keys.txt"):
        expect(open(os.path.join(out, name), "rb").read() ==
               open(os.path.join(whole, name), "rb").read(),
               f"the resumed store's {name} equals an uninterrupted run's byte for byte")
    code, _, err = extract([tmp("st")], out, *other, "--overwrite")
    expect(code == 0, f"--overwrite with another reference starts over (got {code}): {err[-500:]}")


def check_refusals():
    """Each option needs the other; a reference without stain is refused, naming it."""
    if skipped():
        return
    white = tmp("white.png")
    Image.fromarray(np.full((64, 64, 3), 250, np.uint8)).save(white)
    for args, words in ((["--stain-norm", "macenko"], ["--stain-norm", "--stain-reference"]),
                        (["--stain-reference", tmp("ref_other.png")], ["--stain-reference"]),
                        (["--stain-norm", "reinhard", "--stain-reference", white],
                         [white, "too little stain"]),
                        (["--stain-norm", "reinhard", "--stain-reference", tmp("absent.png")],
                         [tmp("absent.png")]),
                        (["--stain-norm", "vahadane", "--stain-reference", white],
                         ["--stain-norm"])):
        out = tmp("refused")
        code, _, err = extract([tmp("st")], out, *args)
        expect(code in (1, 2) and all(w in err for w in words),
               f"{args}: refused naming {words} (got {code}): {err[-500:]}")


SLIDE_FIT_TILES, SLIDE_FIT_PIXELS = 64, 1 << 22  # features/slide_stain.hpp


def slide_fit_sample(rows):
    """The offsets of a slide's tiles its --stain-fit slide estimate is made from."""
    k = min(rows, SLIDE_FIT_TILES, max(1, SLIDE_FIT_PIXELS // (TILE * TILE)))
    return [(2 * i + 1) * rows // (2 * k) for i in range(k)]


def two_slide_store():
    """The real slide twice, under two slide ids (a link): a store of two slides."""
    store = tmp("st2")
    if not os.path.isdir(store):
        link = tmp("CMU-1-Small-Region-copy.svs")
        if not os.path.lexists(link):
            os.symlink(REAL_SVS, link)
        code, _, err = run([mltool, "tile", REAL_SVS, link, "-o", store, "--format", "png", "-q",
                            *TILE_ARGS])
        expect(code == 0, f"tile of two slides: exit {code}: {err}")
    return store


def slide_mosaic(keys, sid):
    """The slide's sampled tiles with enough stain, as one image (what --stain-fit slide fits)."""
    rows = [k for k in keys if k.split("/")[0] == sid]
    sample = [TILES[rows[i]] for i in slide_fit_sample(len(rows))]
    return np.concatenate([t for t in sample if enough_stain(t)], axis=0)


def slide_fit_reference(method, ref_png, keys, sid):
    """torchstain fitted on the reference, and on the slide's sampled tiles as one image."""
    mosaic = slide_mosaic(keys, sid)
    source, _ = torchstain_reference(method, ref_png)
    target, _ = torchstain_reference(method, ref_png)
    source.fit(chw(mosaic))
    return target, source


def normalize_with(method, target, source, u8):
    """torchstain's normalize() of one tile with the source estimate in place of its own."""
    import torchstain.torch.normalizers.reinhard as reinhard
    if method == "macenko":
        he, max_c = source.HERef, source.maxCRef

        def matrices(I, Io, alpha, beta):
            od = -torch.log((I.permute(1, 2, 0).reshape(-1, 3).float() + 1) / Io)
            return he, torch.linalg.lstsq(he, od.T)[0], max_c
        target._TorchMacenkoNormalizer__compute_matrices = matrices
        out, _, _ = target.normalize(I=chw(u8), stains=False)
        return out.numpy().astype(np.uint8)
    stats = iter(zip(source.target_means.tolist(), source.target_stds.tolist()))
    plain = reinhard.get_mean_std
    reinhard.get_mean_std = lambda x: next(stats)
    try:
        return target.normalize(I=chw(u8)).numpy().astype(np.uint8)
    finally:
        reinhard.get_mean_std = plain


def slide_fit_run(out, *args, method="macenko", ref=None):
    code, summary, err = extract([two_slide_store()], out, "--stain-norm", method,
                                 "--stain-reference", ref or tmp("ref_tinted.png"),
                                 "--stain-fit", "slide", *args)
    expect(code == 0, f"extract --stain-fit slide {args}: exit {code}: {err[-2000:]}")
    return summary


def compare_slide_fit(method):
    out = tmp(f"sf_{method}")
    summary = slide_fit_run(out, method=method)
    got, keys, meta = pixels(out)
    for k in keys:  # the link's tiles are the slide's
        TILES.setdefault(k, TILES.get(SID + k[k.index("/"):]))
    fits = meta.get("stain_fits", {})
    expect(meta["model"]["stain_reference"]["fit"] == "slide" and sorted(fits) ==
           sorted({k.split("/")[0] for k in keys}), f"{method}: stain_fits {list(fits)}")
    diffs, unchanged = [], 0
    # The link's tiles are the slide's pixels: its estimate must be the slide's, and its tiles
    # are compared (and counted) as the slide's are, without running torchstain again.
    expect(fits[SID + "-copy"] == fits[SID], f"{method}: the copy's estimate is the slide's")
    for sid, fit in list(fits.items())[:1]:
        target, source = slide_fit_reference(method, tmp("ref_tinted.png"), keys, sid)
        want = ({"stain_matrix": source.HERef.tolist(), "max_concentrations":
                 source.maxCRef.tolist()} if method == "macenko" else
                {"lab_means": source.target_means.tolist(), "lab_stds":
                 source.target_stds.tolist()})
        if method == "macenko":
            expect_macenko_fit(f"macenko {sid}: slide fit", fit, want, slide_mosaic(keys, sid),
                               1e-4)
            want = {}  # checked
        for name, value in want.items():
            expect(np.allclose(np.array(fit[name]), np.array(value), rtol=1e-4, atol=1e-5),
                   f"{method} {sid}: slide fit {name} {fit[name]}, torchstain's {value}")
        for row, k in enumerate(keys):
            if k.split("/")[0] != sid:
                other = keys.index(sid + k[k.index("/"):])
                expect(np.array_equal(got[row], got[other]), f"{method}: {k} as the slide's")
                continue
            tile = TILES[k]
            if not enough_stain(tile):
                unchanged += 1
                expect(np.array_equal(got[row], tile), f"{method}: {k} (background) unchanged")
                continue
            d = np.abs(got[row].astype(np.int16) -
                       normalize_with(method, target, source, tile).astype(np.int16))
            diffs.append(d.ravel())
    d = np.concatenate(diffs)
    mean, p99 = d.mean(), np.percentile(d, 99)
    print(f"  {method} --stain-fit slide: {len(diffs)} tiles normalised, {unchanged} unchanged; "
          f"against torchstain with the slide's estimate: mean |diff| {mean:.6f}, p99 {p99:.0f}, "
          f"max {d.max()} (of 255)")
    expect(mean <= 1 and p99 <= 3, f"{method}: mean |diff| {mean:.3f} <= 1, p99 {p99} <= 3")
    expect(summary["stain_unchanged"] == 2 * unchanged,
           f"{method}: stain_unchanged {summary['stain_unchanged']}, want {unchanged}")
    return out


def same_bytes(a, b, what):
    for name in ("features.npy", "keys.txt"):
        expect(open(os.path.join(a, name), "rb").read() == open(os.path.join(b, name), "rb").read(),
               f"{what}: {name} equal byte for byte")
    fits = [json.load(open(os.path.join(d, "features.json"))).get("stain_fits") for d in (a, b)]
    expect(fits[0] == fits[1] and fits[0], f"{what}: the same stain_fits")


def check_slide_fit_macenko():
    if not skipped():
        compare_slide_fit("macenko")


def check_slide_fit_reinhard():
    if not skipped():
        compare_slide_fit("reinhard")


def check_slide_fit_deterministic():
    """The same bytes run again, on one math thread or two, and sharded then merged."""
    if skipped():
        return
    one, two, again = tmp("sfd_1"), tmp("sfd_2"), tmp("sfd_again")
    slide_fit_run(one, "--math-threads", "1")
    slide_fit_run(two, "--math-threads", "2")
    slide_fit_run(again, "--math-threads", "2")
    same_bytes(two, again, "run again")
    same_bytes(one, two, "--math-threads 1 and 2")
    shards = []
    for i in range(2):
        shards.append(tmp(f"sfd_shard{i}"))
        slide_fit_run(shards[-1], "--math-threads", "2", "--shard", f"{i}/2")
        fits = json.load(open(os.path.join(shards[-1], "features.json")))["stain_fits"]
        expect(len(fits) == 1, f"shard {i}/2 records its one slide's fit: {list(fits)}")
    merged = tmp("sfd_merged")
    code, _, err = run([mltool, "extract", "--merge", *shards, "-o", merged])
    expect(code == 0, f"--merge: exit {code}: {err[-1000:]}")
    same_bytes(two, merged, "shards 0/2 and 1/2 merged against one run")


def check_slide_fit_resume():
    """A killed --stain-fit slide run resumes to one run's bytes with the recorded estimates;
    a resume with --stain-fit tile is refused naming --stain-fit and --overwrite."""
    if skipped():
        return
    out, whole = tmp("sfr"), tmp("sfr_whole")
    args = ["--stain-norm", "macenko", "--stain-reference", tmp("ref_tinted.png"),
            "--stain-fit", "slide", "--chunk-rows", "16", "--math-threads", "2"]
    e = dict(os.environ, LD_PRELOAD=rename_shim(), KILL_RENAME_MATCH=".json", KILL_AT_RENAME="3")
    p = subprocess.run([mltool, "extract", two_slide_store(), "-o", out, "--threads", "2",
                        "--model", tmp("identity.pt"), *RAW, *args], env=e,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    expect(p.returncode == -signal.SIGKILL, f"killed run: {p.returncode}: {p.stderr[-1000:]}")
    config = json.load(open(os.path.join(out, ".extract-partial", "config.json")))
    expect(len(config["note"].get("stain_fits", {})) == 2, "the partial run records the fits")
    tile_args = [a if a != "slide" else "tile" for a in args]
    code, _, err = extract([two_slide_store()], out, *tile_args)
    expect(code == 1 and "--stain-fit" in err and "--overwrite" in err,
           f"resume with --stain-fit tile: exit 1 naming --stain-fit and --overwrite (got {code}): "
           f"{err[-1000:]}")
    code, summary, err = extract([two_slide_store()], out, *args)
    expect(code == 0 and summary["resumed_from"] > 0 and "as the partial run recorded" in err,
           f"the same settings resume with the recorded fits (got {code}): {err[-1000:]}")
    code, _, err = extract([two_slide_store()], whole, *args)
    expect(code == 0, f"uninterrupted run: exit {code}: {err[-1000:]}")
    same_bytes(out, whole, "resumed against uninterrupted")


def check_batch_composition():
    """A tile normalised alone (--batch 1) equals it normalised among others (--batch 16, 7),
    with either fit."""
    if skipped():
        return
    for fit in ("tile", "slide"):
        outs = []
        for batch in ("1", "16", "7"):
            outs.append(tmp(f"bc_{fit}_{batch}"))
            code, _, err = run_json([mltool, "extract", two_slide_store(), "-o", outs[-1],
                                     "--threads", "2", "--model", tmp("identity.pt"), *RAW[:-2],
                                     "--batch", batch, "--stain-norm", "macenko",
                                     "--stain-reference", tmp("ref_tinted.png"), "--stain-fit",
                                     fit, "--json"])
            expect(code == 0, f"--batch {batch} --stain-fit {fit}: exit {code}: {err[-1000:]}")
        a = np.load(os.path.join(outs[0], "features.npy"))
        for o in outs[1:]:
            expect(np.array_equal(a, np.load(os.path.join(o, "features.npy"))),
                   f"--stain-fit {fit}: {o} equals --batch 1's rows")


def check_math_threads():
    """--stain-fit tile: one math thread or two give the same bytes, with either method (the
    rows of a store written with 2 threads, as check_macenko's and check_reinhard's are)."""
    if skipped():
        return
    for method in ("macenko", "reinhard"):
        outs = []
        for threads in ("1", "2"):
            outs.append(tmp(f"mt_{method}_{threads}"))
            code, _, err = extract([two_slide_store()], outs[-1], "--stain-norm", method,
                                   "--stain-reference", tmp("ref_tinted.png"), "--math-threads",
                                   threads)
            expect(code == 0, f"--math-threads {threads}: exit {code}: {err[-1000:]}")
        for name in ("features.npy", "keys.txt"):
            expect(open(os.path.join(outs[0], name), "rb").read() ==
                   open(os.path.join(outs[1], name), "rb").read(),
                   f"{method}: --math-threads 1 and 2 give the same {name} byte for byte")


def check_math_paths():
    """With either method, the normalised pixels are the same bytes under each of the code
    paths another machine would take (cli_common.OTHER_MACHINES) as by default."""
    if skipped():
        return
    for method in ("macenko", "reinhard"):
        want = None
        for name, env in [("default", {}), *OTHER_MACHINES]:
            out = tmp(f"mp_{method}")
            code, _, err = extract([two_slide_store()], out, "--stain-norm", method,
                                   "--stain-reference", tmp("ref_tinted.png"), "--math-threads",
                                   "2", "--overwrite", env=env)
            expect(code == 0, f"{name}: exit {code}: {err[-1000:]}")
            got = open(os.path.join(out, "features.npy"), "rb").read()
            want = want or got
            expect(got == want, f"{method}: {name} gives the default run's features.npy byte "
                   "for byte")


CHECKS = [check_macenko, check_reinhard, check_tensor_path, check_slides_as_inputs, check_reference_formats,
          check_resume_other_reference, check_refusals, check_slide_fit_macenko,
          check_slide_fit_reinhard, check_slide_fit_deterministic, check_slide_fit_resume,
          check_batch_composition, check_math_threads, check_math_paths]


def main():
    run_checks("mltool extract --stain-norm", CHECKS, only, make_fixtures)


main()
