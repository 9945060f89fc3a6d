"""scripts/encoders.py's segmenter presets (grandqc-tissue, grandqc-artifact[-5x|-10x],
hest-tissue; docs/segmenters.md) against the networks as their own code builds them, written
here independently of scripts/mltool_encoders: segmentation_models_pytorch's UnetPlusPlus and
Unet with the timm-efficientnet-b0 encoder (GrandQC's wsi_tis_detect.py and main.py, TRIDENT's
GrandQC segmenters) and torchvision's deeplabv3_resnet50 with a 2-class head (HEST, TRIDENT),
each after the normalisation their code applies (x in [0, 1], ImageNet mean and std).

- export --random-weights --seed N: the TorchScript forward equals the reference built after
  torch.manual_seed(N), within 1e-5 relative (Frobenius), on one window at the input size and
  on three smaller windows (any batch, any size the network takes); mltool.json holds the
  contract (kind, mpp, input_size, classes, tissue, artifacts) with the right types and values;
- a checkpoint in each form the published files have loads: GrandQC's state dict
  (Tissue_Detection_MPP10.pth), GrandQC's whole pickled model (GrandQC_MPP15.pth, torch.save of
  the model), TRIDENT's state dict of the 10x network (GrandQC_MPP1_state_dict.pth), HEST's
  Lightning checkpoint (deeplabv3_seg_v4.ckpt: 'model.' prefix, auxiliary classifier); the card
  records the file's SHA-256; the tissue file is also read from a Hugging Face cache
  (--hf-cache, TRIDENT's copy in MahmoodLab/hest-tissue-seg);
- refused (exit 2) with a message naming the file: another network's checkpoint, a truncated
  file, another variant's file; no weights given; segmentation-models-pytorch missing (the
  message names the package); list shows the presets with their checkpoint files.

    segmenter_presets_test.py [MLTOOL] [TEST...]   (MLTOOL is not needed: nothing runs mltool)
"""
import hashlib
import json
import os
import shutil
import sys

import numpy as np
import torch

from cli_common import Failure, expect, run, run_checks, tmp

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
SCRIPT = os.path.join(ROOT, "scripts", "encoders.py")
ARGS = sys.argv[1:]
MLTOOL = None
if ARGS and os.path.sep in ARGS[0]:  # the mltool binary: each random export is run by tile
    MLTOOL, ARGS = os.path.abspath(ARGS[0]), ARGS[1:]
only = set(ARGS)
SEED = 5
TOL = 1e-5
torch.set_num_threads(2)

IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
ART_CLASSES = ["Unannotated", "Normal Tissue", "Fold", "Darkspot & Foreign Object",
               "PenMarking", "Edge & Air Bubble", "OOF", "Background"]
ARTIFACTS = ["Fold", "Darkspot & Foreign Object", "PenMarking", "Edge & Air Bubble", "OOF"]
# name -> (mpp, input size, classes, tissue, artifacts): GrandQC's README and code (tissue 0,
# background 1 at 10 um/px; artifact classes 1..7 of mask_to_geojson at 1.5, 1.0, 2.0 um/px),
# HEST's segment_tissue (1 um/px, 512 um windows; channel 1 tissue).
CONTRACT = {
    "grandqc-tissue": (10.0, 512, ["Tissue", "Background"], ["Tissue"], []),
    "grandqc-artifact": (1.5, 512, ART_CLASSES, ["Normal Tissue"], ARTIFACTS),
    "grandqc-artifact-10x": (1.0, 512, ART_CLASSES, ["Normal Tissue"], ARTIFACTS),
    "grandqc-artifact-5x": (2.0, 512, ART_CLASSES, ["Normal Tissue"], ARTIFACTS),
    "hest-tissue": (1.0, 512, ["Background", "Tissue"], ["Tissue"], []),
}


def encoders(*args, env=None):
    return run([sys.executable, SCRIPT, *args], env=env)


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


# --- the references: the networks as GrandQC, HEST and TRIDENT build them -------------------

def build(name):
    """The bare network, built after torch.manual_seed by the caller."""
    if name == "hest-tissue":
        from torchvision.models.segmentation import deeplabv3_resnet50
        m = deeplabv3_resnet50(weights=None, weights_backbone=None)
        m.classifier[4] = torch.nn.Conv2d(256, 2, kernel_size=1, stride=1)
        return m.eval()
    import segmentation_models_pytorch as smp
    if name == "grandqc-tissue":
        return smp.UnetPlusPlus(encoder_name="timm-efficientnet-b0", encoder_weights=None,
                                classes=2, activation=None).eval()
    return smp.Unet(encoder_name="timm-efficientnet-b0", encoder_weights=None, classes=8,
                    activation=None).eval()


def forward(name, model, x):
    """The model card's inference on x in [0, 1]: ImageNet normalisation (smp's
    get_preprocessing_fn for timm-efficientnet-b0/imagenet after x / 255; torchvision's
    Normalize in HEST and TRIDENT), the network, HEST's 'out'."""
    mean = torch.tensor(IMAGENET[0]).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET[1]).view(1, 3, 1, 1)
    with torch.no_grad():
        y = model((x - mean) / std)
    return y["out"] if name == "hest-tissue" else y


def windows(n, size, seed):
    return torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(seed))


def export(name, *extra, env=None):
    out = tmp(f"{name}.pt")
    code, _, err = encoders("export", name, "-o", out, *extra, env=env)
    if code != 0:
        raise Failure(f"encoders.py export {name} exits 0 (got {code}): {err[-1500:]}")
    return out


def read(path):
    files = {"mltool.json": ""}
    m = torch.jit.load(path, map_location="cpu", _extra_files=files)
    return m, json.loads(files["mltool.json"])


def check_card(card, name, weights_sha=None):
    mpp, size, classes, tissue, artifacts = CONTRACT[name]
    expect(card["kind"] == "segmenter" and card["name"] == name, f"{name}: card {card}")
    expect(isinstance(card["mpp"], (int, float)) and not isinstance(card["mpp"], bool)
           and card["mpp"] == mpp, f"{name}: mpp {card['mpp']!r}, want {mpp}")
    expect(type(card["input_size"]) is int and card["input_size"] == size,
           f"{name}: input_size {card['input_size']!r}, want {size}")
    for key, want in (("classes", classes), ("tissue", tissue), ("artifacts", artifacts)):
        got = card[key]
        expect(isinstance(got, list) and all(isinstance(c, str) for c in got) and got == want,
               f"{name}: {key} {got!r}, want {want!r}")
    expect(set(card["tissue"]) | set(card["artifacts"]) <= set(card["classes"])
           and not set(card["tissue"]) & set(card["artifacts"]),
           f"{name}: tissue and artifacts are distinct classes of 'classes'")
    for key in ("license", "reference", "title"):
        expect(isinstance(card.get(key), str) and card[key], f"{name}: card {key} {card.get(key)}")
    if weights_sha is None:
        expect(card["weights"] == "random" and card["seed"] == SEED,
               f"{name}: weights {card['weights']!r}, seed {card.get('seed')}")
    else:
        expect(card["weights"] == weights_sha, f"{name}: weights {card['weights']!r}, the "
                                               f"file's sha256 {weights_sha}")


def compare(name, module, model, n, size, seed, what):
    x = windows(n, size, seed)
    with torch.no_grad():
        got = module(x)
    want = forward(name, model, x)
    c = len(CONTRACT[name][2])
    expect(tuple(got.shape) == (n, c, size, size),
           f"{name} {what}: output {tuple(got.shape)} for {n} windows of {size}, want "
           f"{(n, c, size, size)}")
    e = rel(got.numpy(), want.numpy())
    expect(e < TOL, f"{name} {what}: the export differs from the reference by {e:.2e} "
                    f"({n} x {size} px)")
    return e


def check_random(name):
    pt = export(name, "--random-weights", "--seed", str(SEED))
    module, card = read(pt)
    check_card(card, name)
    torch.manual_seed(SEED)
    model = build(name)
    size = CONTRACT[name][1]
    e1 = compare(name, module, model, 1, size, 1, "random weights")
    e3 = compare(name, module, model, 3, 128, 2, "random weights")
    print(f"  {name}: 1 x {size} px {e1:.1e}, 3 x 128 px {e3:.1e}", flush=True)
    if MLTOOL:
        tile_with(name, pt)
    os.unlink(pt)


def tile_with(name, pt):
    """mltool tile accepts the export as --tissue and segments a 1024 x 1024 slide at 0.5 µm/px
    at the preset's µm/px (the class map's size says so)."""
    slide = tmp("slide.tif")
    if not os.path.exists(slide):
        sys.path.insert(0, os.path.join(ROOT, "scripts", "fixtures"))
        import make_slides
        make_slides.generate([["generic_tiff", [slide, 1024, 1024, 0.5, [[200, 200, 800, 900]]]]])
    store = tmp(f"{name}.lmdb")
    code, out, err = run([MLTOOL, "tile", slide, "-o", store, "--tissue", pt, "--device", "cpu",
                          "--json", "-q"])
    # random weights may find no tissue: the slide is then empty (exit 4), not refused
    expect(code in (0, 4) and out.strip(), f"mltool tile --tissue {name}: exit {code}: {err[-1500:]}")
    s = json.loads(out)["slides"][0]
    side = -(-1024 * 0.5 // CONTRACT[name][0])  # ceil
    expect(set(s["class_fractions"]) == set(CONTRACT[name][2]),
           f"{name}: class_fractions {s['class_fractions']}")
    print(f"  {name}: tile --tissue: {s['tiles']} tiles, segmenting {s['segment_seconds']:.2f} s "
          f"of {s['seconds']:.2f} s ({side:.0f} px a side at {CONTRACT[name][0]} µm/px)",
          flush=True)


def _make(name):
    def check():
        check_random(name)
    check.__name__ = "check_" + name.replace("-", "_")
    return check


# --- checkpoints ---------------------------------------------------------------------------

def sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def seeded(name, seed=11):
    torch.manual_seed(seed)
    return build(name)


def _loads(name, path, model):
    pt = export(name, "--weights", path)
    module, card = read(pt)
    check_card(card, name, sha256(path))
    compare(name, module, model, 1, 128, 3, os.path.basename(path))
    os.unlink(pt)


def check_weights_grandqc():
    # GrandQC's tissue detector: a state dict (its wsi_tis_detect.py: load_state_dict).
    tissue = seeded("grandqc-tissue")
    path = tmp("Tissue_Detection_MPP10.pth")
    torch.save(tissue.state_dict(), path)
    _loads("grandqc-tissue", path, tissue)
    # The same file in a Hugging Face cache of MahmoodLab/hest-tissue-seg (TRIDENT's copy).
    repo = os.path.join(tmp("hf"), "models--MahmoodLab--hest-tissue-seg")
    os.makedirs(os.path.join(repo, "snapshots", "0" * 40))
    os.makedirs(os.path.join(repo, "refs"))
    open(os.path.join(repo, "refs", "main"), "w").write("0" * 40)
    shutil.copy(path, os.path.join(repo, "snapshots", "0" * 40, os.path.basename(path)))
    pt = export("grandqc-tissue", "--hf-cache", tmp("hf"))
    check_card(read(pt)[1], "grandqc-tissue", sha256(path))
    os.unlink(pt)
    # GrandQC's artifact networks: the whole model pickled (its main.py: torch.load(path)).
    art = seeded("grandqc-artifact")
    path = tmp("GrandQC_MPP15.pth")
    torch.save(art, path)
    _loads("grandqc-artifact", path, art)
    # TRIDENT's state dict of the 10x network; and the same with DataParallel's prefix.
    path = tmp("GrandQC_MPP1_state_dict.pth")
    torch.save(art.state_dict(), path)
    _loads("grandqc-artifact-10x", path, art)
    path = tmp("dataparallel.pth")
    torch.save({"state_dict": {"module." + k: v for k, v in art.state_dict().items()}}, path)
    _loads("grandqc-artifact-5x", path, art)


def check_weights_hest():
    model = seeded("hest-tissue")
    sd = {"model." + k: v for k, v in model.state_dict().items()}
    # the auxiliary FCN head HEST trained with (TRIDENT and LazySlide drop 'aux' keys)
    sd["model.aux_classifier.0.weight"] = torch.zeros(256, 1024, 3, 3)
    sd["model.aux_classifier.4.weight"] = torch.zeros(2, 256, 1, 1)
    path = tmp("deeplabv3_seg_v4.ckpt")
    torch.save({"epoch": 3, "global_step": 1200, "pytorch-lightning_version": "2.1.0",
                "state_dict": sd, "hyper_parameters": {"lr": 1e-4}}, path)
    _loads("hest-tissue", path, model)


def _refused(name, args, *needles, env=None):
    out = tmp("refused.pt")
    code, _, err = encoders("export", name, "-o", out, *args, env=env)
    expect(code == 2 and all(n in err for n in needles) and "Traceback" not in err,
           f"export {name} {' '.join(args)}: refused (2) naming {needles}: exit {code}, {err[-800:]}")
    expect(not os.path.exists(out), f"export {name}: nothing written on refusal")
    return err


def check_refused():
    hest = tmp("deeplabv3_seg_v4.ckpt")
    torch.save({"state_dict": {"model." + k: v for k, v in
                               seeded("hest-tissue").state_dict().items()}}, hest)
    _refused("grandqc-tissue", ["--weights", hest], hest, "missing keys",
             "decoder.blocks.x_0_0.conv1.0.weight", "unexpected keys", "backbone.conv1.weight")
    tissue = tmp("Tissue_Detection_MPP10.pth")
    torch.save(seeded("grandqc-tissue").state_dict(), tissue)
    _refused("hest-tissue", ["--weights", tissue], tissue, "missing keys")
    _refused("grandqc-artifact", ["--weights", tissue], tissue, "shapes differ",
             "segmentation_head.0.weight")
    data = open(tissue, "rb").read()
    cut = tmp("cut.pth")
    open(cut, "wb").write(data[:len(data) // 2])
    _refused("grandqc-tissue", ["--weights", cut], cut, "not a readable PyTorch checkpoint")
    other = tmp("GrandQC_MPP1.pth")
    torch.save(seeded("grandqc-artifact"), other)
    _refused("grandqc-artifact", ["--weights", other], other, "grandqc-artifact-10x")
    _refused("hest-tissue", [], "--weights FILE", "deeplabv3_seg_v4.ckpt", "nothing is downloaded")
    _refused("hest-tissue", ["--weights", tmp("absent.ckpt")], tmp("absent.ckpt"), "no such file")


def check_smp_missing():
    fake = tmp("no-smp", "segmentation_models_pytorch")
    os.makedirs(fake)
    open(os.path.join(fake, "__init__.py"), "w").write(
        "raise ImportError(\"No module named 'segmentation_models_pytorch'\")\n")
    env = {"PYTHONPATH": os.pathsep.join([tmp("no-smp"), os.environ.get("PYTHONPATH", "")])}
    _refused("grandqc-tissue", ["--random-weights"], "segmentation-models-pytorch",
             "requirements-extra.txt", env=env)
    code, out, err = encoders("list", env=env)  # list needs no smp
    expect(code == 0 and "grandqc-artifact" in out, f"list without smp: {code} {err[-500:]}")


def check_list():
    code, out, err = encoders("list", "--json")
    expect(code == 0, f"list --json exits 0: {err}")
    rows = {r["name"]: r for r in json.loads(out)}
    files = {"grandqc-tissue": "Tissue_Detection_MPP10.pth",
             "grandqc-artifact": "GrandQC_MPP15.pth", "grandqc-artifact-10x": "GrandQC_MPP1.pth",
             "grandqc-artifact-5x": "GrandQC_MPP2.pth", "hest-tissue": "deeplabv3_seg_v4.ckpt"}
    for name, (mpp, size, classes, tissue, artifacts) in CONTRACT.items():
        r = rows.get(name)
        expect(r is not None and r["kind"] == "segmenter" and r["mpp"] == mpp
               and r["input_size"] == size and r["classes"] == classes
               and r["tissue"] == tissue and r["artifacts"] == artifacts
               and files[name] in r["files"], f"list --json: {name}: {r}")
    code, out, _ = encoders("list")
    expect(code == 0 and all(f in out for f in files.values()) and "[segmenter]" in out
           and "uni" in out, f"list as text names the segmenters and their files: {out[-2000:]}")


def fixtures():
    try:
        import segmentation_models_pytorch as smp
    except ImportError as e:
        raise Failure(f"segmentation_models_pytorch is not installed ({e}): .venv/bin/pip "
                      f"install -r scripts/requirements-extra.txt")
    return f"segmentation-models-pytorch {smp.__version__}"


CHECKS = [check_list, _make("grandqc-tissue"), _make("grandqc-artifact"), _make("hest-tissue"),
          check_weights_grandqc, check_weights_hest, check_refused, check_smp_missing]

if __name__ == "__main__":
    run_checks("segmenter presets", CHECKS, only, fixtures)
