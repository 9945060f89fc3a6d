#!/usr/bin/env python3
"""Pathology foundation models as TorchScript files that carry their model card's
preprocessing (mltool.json inside; schemas/encoder.schema.json), for `mltool extract --model`;
and tissue/artifact segmenters (kind segmenter) for `mltool tile --tissue MODEL.pt`.

    encoders.py list [--json]
    encoders.py export NAME -o NAME.pt [--weights FILE | --hf-cache DIR] [--random-weights]
                       [--seed N]
    encoders.py export grandqc-tissue | grandqc-artifact[-5x|-10x] | hest-tissue -o FILE.pt
                       [--weights FILE | --hf-cache DIR | --random-weights [--seed N]]

Segmenters (docs/segmenters.md): GrandQC's tissue and artifact networks (need the package
segmentation-models-pytorch, pinned in scripts/requirements-extra.txt) and HEST's DeepLabV3;
forward takes float32 N x 3 x S x S RGB in [0, 1] and returns N x C x S x S logits; their
checkpoint files (Tissue_Detection_MPP10.pth, GrandQC_MPP15.pth, deeplabv3_seg_v4.ckpt, ...)
come from the user with --weights, nothing is downloaded.

export builds the architecture as the model's card does (timm / transformers / conch), loads the
file the hub repository publishes strictly (its key names; missing or unexpected keys are named
and refused), wraps the card's inference forward and traces it. Weights come from --weights FILE,
from a Hugging Face cache without network (--hf-cache DIR), or from the hub. --random-weights:
the same architecture with seeded random weights (tests, benchmarks; the card says so).

Exit status: 0 done, 1 unexpected error, 2 refused (unknown preset, weights that do not fit, not
exportable offline, bad arguments).
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mltool_encoders.table import PATCH_PRESETS  # noqa: E402


def slide_presets():
    """mltool_encoders.slide.SLIDE_PRESETS (name -> preset) when that module exists."""
    import importlib.util
    if importlib.util.find_spec("mltool_encoders.slide") is None:
        return {}
    from mltool_encoders import slide
    return dict(getattr(slide, "SLIDE_PRESETS", {}))


def segmenter_presets():
    """mltool_encoders.segmenters.SEGMENTER_PRESETS (name -> preset)."""
    from mltool_encoders.segmenters import SEGMENTER_PRESETS
    return dict(SEGMENTER_PRESETS)


def all_presets():
    presets = dict(PATCH_PRESETS)
    for name, p in list(slide_presets().items()) + list(segmenter_presets().items()):
        presets.setdefault(name, p)
    return presets


def describe(name, p):
    if hasattr(p, "describe"):
        return p.describe()
    if isinstance(p, dict):
        return dict(p, name=name)
    import dataclasses
    if dataclasses.is_dataclass(p):
        return dict(dataclasses.asdict(p), name=name)
    return {"name": name, "kind": getattr(p, "kind", "slide")}


def _mean_std(pre):
    return "/".join(f"{m:g}" for m in pre["mean"]) + " ± " + "/".join(f"{s:g}" for s in pre["std"])


def cmd_list(args):
    rows = [describe(n, p) for n, p in all_presets().items()]
    if args.json:
        json.dump(rows, sys.stdout, indent=2, sort_keys=True)
        print()
        return 0
    for r in rows:
        if r.get("kind") == "segmenter":
            print(f"{r['name']}  [segmenter] {r['title']}  input {r['input_size']} at "
                  f"{r['mpp']:g} µm/px\n"
                  f"    {r['arch']}; mean/std {_mean_std(r['preprocess'])}\n"
                  f"    classes: {', '.join(r['classes'])}; tissue: {', '.join(r['tissue'])}; "
                  f"artifacts: {', '.join(r['artifacts']) or 'none'}\n"
                  f"    checkpoints: " + "; ".join(f"{f} ({how})" for f, how in r["files"].items())
                  + f"\n    license {r['license']}")
            continue
        if r.get("kind", "patch") != "patch":
            print(f"{r['name']}  [{r.get('kind')}] {r.get('title', '')}  dims {r.get('dims', '?')}"
                  + ("" if r.get("exportable", True) else
                     f"\n    NOT EXPORTABLE OFFLINE: {r.get('offline_reason', '')}"))
            continue
        pre = r["preprocess"]
        print(f"{r['name']}  {r['title']}  dims {r['dims']}  input {r['input']}\n"
              f"    resize: {r['resize_rule']}; mean/std {_mean_std(pre)}\n"
              f"    tiles: {r['tile_size']} px at {r['mpp']} µm/px; license {r['license']}; "
              f"weights hf:{r['hub']}/{r['file']}")
        if r.get("offline_reason"):
            print(f"    NOT EXPORTABLE OFFLINE: {r['offline_reason']}")
    return 0


def cmd_export(args):
    from mltool_encoders.export import ExportError, export_patch
    from mltool_encoders.common import WeightsError
    presets = all_presets()
    p = presets.get(args.name)
    if p is None:
        print(f"encoders.py: unknown preset {args.name!r}; known: {', '.join(presets)}",
              file=sys.stderr)
        return 2
    if args.weights and args.hf_cache:
        print("encoders.py: --weights and --hf-cache exclude each other", file=sys.stderr)
        return 2
    t0 = time.time()
    try:
        kw = dict(weights=args.weights, hf_cache=args.hf_cache,
                  random_weights=args.random_weights, seed=args.seed)
        log = lambda m: print(m, file=sys.stderr)  # noqa: E731
        if getattr(p, "kind", "patch") == "patch" and hasattr(p, "build"):
            card = export_patch(p, args.output, log=log, **kw)
        elif getattr(p, "kind", "") == "segmenter":
            card = p.export(args.output, log=log, **kw)
        elif hasattr(p, "export"):  # a slide preset exports itself
            if args.patch_encoder:  # mean pooling: the patch encoder whose features it takes
                patch = PATCH_PRESETS.get(args.patch_encoder)
                kw["patch_encoder"] = args.patch_encoder
                kw["patch_dims"] = args.patch_dims or (patch.dims if patch else None)
            card = p.export(args.output, **kw)
        else:
            print(f"encoders.py: preset {args.name!r} has no export", file=sys.stderr)
            return 2
    except (ExportError, WeightsError, ValueError) as e:
        print(f"encoders.py: {e}", file=sys.stderr)
        return 2
    summary = {"output": os.path.abspath(args.output), "seconds": round(time.time() - t0, 1)}
    if isinstance(card, dict):
        summary.update({k: card[k] for k in ("name", "dims", "weights", "kind") if k in card})
    print(json.dumps(summary, sort_keys=True))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="encoders.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    ls = sub.add_parser("list", help="every preset: dims, input, preprocessing, weights, license")
    ls.add_argument("--json", action="store_true", help="one JSON array")
    ex = sub.add_parser("export", help="a preset as TorchScript with mltool.json inside "
                        "(encoders; segmenters: grandqc-tissue, grandqc-artifact[-5x|-10x], "
                        "hest-tissue)")
    ex.add_argument("name")
    ex.add_argument("-o", "--output", required=True, help="the .pt file to write")
    ex.add_argument("--weights", metavar="FILE",
                    help="the hub's weights file (pytorch_model.bin / *.safetensors); "
                         "segmenters: their checkpoint (list names them)")
    ex.add_argument("--hf-cache", metavar="DIR",
                    help="a Hugging Face cache holding the hub file (no network)")
    ex.add_argument("--random-weights", action="store_true",
                    help="seeded random weights (tests, benchmarks; features mean nothing)")
    ex.add_argument("--seed", type=int, default=0, help="torch.manual_seed for --random-weights")
    ex.add_argument("--patch-encoder", metavar="NAME",
                    help="slide encoders that take any patch encoder's features (mean): its "
                         "preset name, as features.json records it")
    ex.add_argument("--patch-dims", type=int, metavar="D",
                    help="the width of those features (default: the patch preset's dims)")
    args = ap.parse_args(argv)
    return cmd_list(args) if args.cmd == "list" else cmd_export(args)


if __name__ == "__main__":
    sys.exit(main())
