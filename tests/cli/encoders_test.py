"""scripts/encoders.py end to end: every exportable preset exported with seeded random weights
gives, on tiles of the real slide in ../shared/slides, the features of the model card's own
Python inference (tests/cli/encoder_refs.py: timm / transformers / conch and the card's
torchvision transform on Pillow tiles) — first the exported TorchScript run in Python on the
card-preprocessed tiles (isolates export bugs), then `mltool extract --model NAME.pt` with no
preprocessing flag (the card's resize/crop/mean/std), both within 1e-4 relative (Frobenius).
Also: hub-format weights (safetensors, pytorch_model.bin, a Hugging Face cache) load strictly;
a truncated or wrong file is refused (exit 2) naming the missing and unexpected keys; list.

    encoders_test.py MLTOOL [--giant] [TEST...]

--giant runs the ViT-H/ViT-g presets (2 tiles each) instead of the others.
"""
import gc
import hashlib
import io
import json
import os
import shutil
import sys

import lmdb
import numpy as np
import torch
from PIL import Image

from cli_common import Failure, expect, run, run_checks, tmp
import encoder_refs

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
SCRIPT = os.path.join(ROOT, "scripts", "encoders.py")
SLIDE = os.path.normpath(os.path.join(ROOT, "..", "shared", "slides", "CMU-1-Small-Region.svs"))
mltool = os.path.abspath(sys.argv[1])
GIANT = "--giant" in sys.argv[2:]
only = set(a for a in sys.argv[2:] if a != "--giant")
SEED = 7
TOL = 1e-4
torch.set_num_threads(2)

GIANTS = ["uni2-h", "h-optimus-0", "h-optimus-1", "gigapath", "virchow", "virchow2", "midnight"]
# The tile store each preset reads: (tile size, µm/px). 224-px tiles for CONCH v1 (resized up
# to 448) and GigaPath (up to 256, cropped to 224), 256-px ones for ResNet-50 and Phikon-v2
# (down to 224): the card's resize runs; the others see their input size as it is.
STORE_OF = {"conch-v1.5": (448, 1.5), "resnet50-trunc": (256, 2.0), "phikon-v2": (256, 2.0)}
STORES = {}     # (tile size, mpp) -> (store path or None, keys, PIL tiles)
OFFLINE = ["hibou-b", "hibou-l", "musk"]


def encoders(*args):
    return run([sys.executable, SCRIPT, *args])


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def have_mltool():
    return os.access(mltool, os.X_OK)


def tiles_of(size, mpp, n):
    """(store or None, keys, first n PIL tiles): the tile store mltool tile makes of the real
    slide (read back with python-lmdb + Pillow), or, without the binary, regions read with
    openslide-python (the Python-side check only)."""
    if (size, mpp) not in STORES:
        if have_mltool():
            store = tmp(f"tiles-{size}-{mpp}.lmdb")
            code, _, err = run([mltool, "tile", SLIDE, "-o", store, "--tile-size", str(size),
                                "--mpp", str(mpp), "--format", "png", "--tissue", "none", "-q"])
            expect(code == 0, f"mltool tile exits 0 (got {code}): {err}")
            env = lmdb.open(store, readonly=True, lock=False, max_dbs=8)
            with env.begin() as txn:
                db = env.open_db(b"tiles", txn=txn, create=False)
                items = sorted((bytes(k), bytes(v)) for k, v in txn.cursor(db=db))
            env.close()
            keys = [k.decode() for k, _ in items]
            imgs = [Image.open(io.BytesIO(v)).convert("RGB") for _, v in items]
        else:
            import openslide
            s = openslide.OpenSlide(SLIDE)
            store, keys = None, [f"region/{i}" for i in range(4)]
            imgs = [s.read_region((300 + 600 * i, 500 + 400 * i), 0, (size, size)).convert("RGB")
                    for i in range(4)]
        expect(len(imgs) >= 1, f"no tiles at {size} px, {mpp} µm/px")
        STORES[(size, mpp)] = (store, keys, imgs)
    store, keys, imgs = STORES[(size, mpp)]
    return store, keys, imgs[:n]


def export(name, *extra):
    out = tmp(f"{name}.pt")
    code, so, err = encoders("export", name, "-o", out, *extra)
    if code != 0:
        raise Failure(f"encoders.py export {name} exits 0 (got {code}): {err[-1500:]}")
    return out


def read_card(path):
    files = {"mltool.json": ""}
    m = torch.jit.load(path, map_location="cpu", _extra_files=files)
    return m, json.loads(files["mltool.json"])


def check_card(card, name, dims, random=True):
    schema = json.load(open(os.path.join(ROOT, "schemas", "encoder.schema.json")))
    missing = [k for k in schema["required"] if k not in card]
    expect(not missing, f"{name}: card misses {missing}")
    expect(card["format"] == "mltool.encoder" and card["kind"] == "patch" and card["name"] == name,
           f"{name}: card identity {card}")
    expect(card["dims"] == dims, f"{name}: card dims {card['dims']}, the forward gives {dims}")
    pre = card["preprocess"]
    expect(set(pre) == set(schema["properties"]["preprocess"]["required"]),
           f"{name}: preprocess fields {sorted(pre)}")
    expect(card["weights"]["random"] is random and len(card["weights"]["sha256"]) == 64,
           f"{name}: weights {card['weights']}")
    if random:
        expect(card["weights"]["seed"] == SEED, f"{name}: seed {card['weights']}")


def reference(name, module, imgs):
    """(card-preprocessed batch, the card's features) on the PIL tiles."""
    build, forward, tf = encoder_refs.refs()[name]
    x = torch.stack([tf(im) for im in imgs])
    with torch.no_grad():
        if name == "conch-v1.5":
            sd = {k[len("model."):]: v for k, v in module.state_dict().items()}
            return x, encoder_refs.conch15_forward(sd, x).numpy()
        torch.manual_seed(SEED)
        model = build().eval()
        want = forward(model, x).numpy()
        del model
    return x, want


def check_preset(name):
    size, mpp = STORE_OF.get(name, (224, 3.0 if GIANT else 2.0))
    if GIANT and name == "gigapath":
        size = 224  # resized up to 256 and cropped to 224
    store, keys, imgs = tiles_of(size, mpp, 2 if GIANT else 4)
    pt = export(name, "--random-weights", "--seed", str(SEED))
    module, card = read_card(pt)
    x, want = reference(name, module, imgs)
    with torch.no_grad():
        got = module(x).numpy()
    check_card(card, name, got.shape[1])
    e = rel(got, want)
    expect(e < TOL, f"{name}: the export in Python differs from the card's inference by {e:.2e}")
    del module
    gc.collect()
    if store is None:
        print(f"note: {name}: no mltool binary at {mltool}; mltool extract not compared",
              flush=True)
    else:
        feats = tmp(f"feat-{name}")
        code, _, err = run([mltool, "extract", store, "-o", feats, "--model", pt, "--device",
                            "cpu", "--batch", "4", "-q"])
        expect(code == 0, f"{name}: mltool extract exits 0 (got {code}): {err[-1500:]}")
        f = np.load(os.path.join(feats, "features.npy"))
        fkeys = open(os.path.join(feats, "keys.txt")).read().split()
        rows = [fkeys.index(k) for k in keys[:len(imgs)]]
        e = rel(f[rows], want)
        expect(e < TOL, f"{name}: mltool extract differs from the card's inference by {e:.2e} "
                        f"(Python export {rel(got, want):.2e})")
        shutil.rmtree(feats)
        print(f"  {name}: {len(imgs)} tiles of {size} px, relative error python "
              f"{rel(got, want):.1e}, mltool {e:.1e}", flush=True)
    os.unlink(pt)


def check_list():
    code, out, err = encoders("list", "--json")
    expect(code == 0, f"list --json exits 0: {err}")
    rows = {r["name"]: r for r in json.loads(out)}
    want = set(encoder_refs.refs()) | set(OFFLINE)
    expect(want <= set(rows), f"list misses {sorted(want - set(rows))}")
    for n in OFFLINE:
        expect(not rows[n]["exportable"] and rows[n].get("offline_reason"),
               f"{n}: listed as not exportable with a reason: {rows[n]}")
        code, _, err = encoders("export", n, "-o", tmp("x.pt"), "--random-weights")
        expect(code == 2 and "offline" in err, f"export {n} refused (2) with the reason: {err}")
    code, out, _ = encoders("list")
    expect(code == 0 and "virchow2" in out and "NOT EXPORTABLE OFFLINE" in out, "list as text")


def _hub_file(name, kind):
    """A hub-format weights file of `name` built with the card's library (seeded): kaiko
    ViT-S/16's model.safetensors (timm keys), Phikon's pytorch_model.bin (ViTModel keys plus
    the pooler the hub file has and the card's add_pooling_layer=False drops)."""
    build, forward, _ = encoder_refs.refs()[name]
    torch.manual_seed(11)
    model = build().eval()
    sd = {k: v.contiguous() for k, v in model.state_dict().items()}
    path = tmp(kind)
    if kind.endswith(".safetensors"):
        from safetensors.torch import save_file
        save_file(sd, path)
    else:
        sd["pooler.dense.weight"] = torch.zeros(768, 768)
        sd["pooler.dense.bias"] = torch.zeros(768)
        torch.save(sd, path)
    return path, model, forward


def check_weights_strict():
    _, _, imgs = tiles_of(224, 2.0, 2)
    for name, file in [("kaiko-vits16", "model.safetensors"), ("phikon", "pytorch_model.bin")]:
        path, model, forward = _hub_file(name, file)
        x = torch.stack([encoder_refs.refs()[name][2](im) for im in imgs])
        with torch.no_grad():
            want = forward(model, x).numpy()
        sha = hashlib.sha256(open(path, "rb").read()).hexdigest()
        # --weights FILE, and the same file in a Hugging Face cache (no network).
        repo = {"kaiko-vits16": "1aurent/vit_small_patch16_224.kaiko_ai_towards_large_pathology_fms",
                "phikon": "owkin/phikon"}[name]
        cache = tmp(f"hf-{name}")
        snap = os.path.join(cache, "models--" + repo.replace("/", "--"), "snapshots", "0" * 40)
        os.makedirs(snap)
        shutil.copy(path, os.path.join(snap, file))
        os.makedirs(os.path.join(os.path.dirname(os.path.dirname(snap)), "refs"))
        open(os.path.join(os.path.dirname(os.path.dirname(snap)), "refs", "main"), "w").write("0" * 40)
        for how in (["--weights", path], ["--hf-cache", cache]):
            pt = export(name, *how)
            module, card = read_card(pt)
            check_card(card, name, want.shape[1], random=False)
            expect(card["weights"]["sha256"] == sha and card["weights"]["file"] == file,
                   f"{name} {how[0]}: weights {card['weights']} (file sha256 {sha})")
            with torch.no_grad():
                e = rel(module(x).numpy(), want)
            expect(e < TOL, f"{name} {how[0]}: features differ from the file's model by {e:.2e}")
            os.unlink(pt)


def check_weights_refused():
    path, model, _ = _hub_file("kaiko-vits16", "model.safetensors")
    from safetensors.torch import save_file
    sd = {k: v.contiguous() for k, v in model.state_dict().items()}
    del sd["blocks.11.mlp.fc2.weight"]
    sd["blocks.12.attn.qkv.weight"] = torch.zeros(3)
    save_file(sd, tmp("wrong.safetensors"))
    code, _, err = encoders("export", "kaiko-vits16", "-o", tmp("w.pt"), "--weights",
                            tmp("wrong.safetensors"))
    expect(code == 2 and "blocks.11.mlp.fc2.weight" in err and "blocks.12.attn.qkv.weight" in err
           and "missing" in err and "unexpected" in err,
           f"a wrong file is refused (2) naming the missing/unexpected keys: {code} {err[-800:]}")
    data = open(path, "rb").read()
    for trunc, fname in [(data[:len(data) // 2], "cut.safetensors")]:
        open(tmp(fname), "wb").write(trunc)
        code, _, err = encoders("export", "kaiko-vits16", "-o", tmp("w.pt"), "--weights",
                                tmp(fname))
        expect(code == 2 and "Traceback" not in err, f"a truncated file is refused (2): {err[-800:]}")
    torch.save({k: v for k, v in list(model.state_dict().items())[:10]}, tmp("short.bin"))
    code, _, err = encoders("export", "kaiko-vits16", "-o", tmp("w.pt"), "--weights",
                            tmp("short.bin"))
    expect(code == 2 and "missing keys: blocks.0.mlp.fc1.bias" in err and "more)" in err,
           f"a partial state dict names missing keys: {err}")
    expect(not os.path.exists(tmp("w.pt")), "nothing written on refusal")


def fixtures():
    if not os.path.exists(SLIDE):
        print(f"skipped: {SLIDE} is absent (see ../shared/slides/README.md)")
        sys.exit(0)
    return "mltool compared" if have_mltool() else f"no mltool at {mltool}: Python checks only"


def _make(name):
    def check():
        check_preset(name)
    check.__name__ = "check_" + name
    return check


NAMES = [n for n in encoder_refs.refs() if (n in GIANTS) == GIANT]
CHECKS = [] if GIANT else [check_list, check_weights_strict, check_weights_refused]
CHECKS += [_make(n) for n in NAMES]

if __name__ == "__main__":
    run_checks("encoders (giant)" if GIANT else "encoders", CHECKS, only, fixtures)
