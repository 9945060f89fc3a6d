#!/usr/bin/env python3
"""TRIDENT's own patch-feature pipeline on a cohort, on the CPU, stage by stage.
Run through bench/run-trident.sh, in TRIDENT's venv (not the project's), with TRIDENT's
repository on sys.path.

    trident_bench.py --trident DIR --slides-dir DIR --job DIR --model CNN.pt --out FILE.json
                     [--mag 20] [--patch-size 256] [--min-tissue 0.5] [--batch 256]
                     [--mltool-job DIR [--mltool-features DIR]]

What it runs is TRIDENT's Processor (trident/Processor.py) as its run_batch_of_slides.py
drives it, in one process:
  1. segmentation: run_segmentation_job with TRIDENT's OtsuSegmenter (its classical, CPU
     segmenter, no network weights), at the segmenter's own magnification, holes kept as
     tissue (run_batch_of_slides.py's defaults), batch 64;
  2. patching: run_patching_job(target_magnification=MAG, patch_size=PS, overlap=0,
     min_tissue_proportion=MIN, visualize=False);
  3. features: run_patch_feature_extraction_job with the TorchScript CNN wrapped in TRIDENT's
     CustomInferenceEncoder (its hook for your own encoder), transforms ToTensor + Normalize
     (ImageNet mean/std, no resize: the CNN sees the 256-px patch, as mltool's --input-size 256
     gives it), float32, device cpu, batch_limit BATCH. Patches are read by TRIDENT's
     WSIPatcherDataset (OpenSlide read_region at the best level, PIL) in a torch DataLoader
     with TRIDENT's own worker count (get_num_workers: 0.75 x the cores, at least 1).
  4. instead of 1-3, with --mltool-job: stage 3 alone, on the coordinates mltool chose (an `mltool export h5
     --layout trident` job directory, whose patches/ files TRIDENT reads as its own), so both
     tools compute the same tiles; its features are compared, tile by tile, with mltool's
     feature store (--mltool-features: features.npy and keys.txt, keys SLIDE/...). A separate
     process, so that the process's wall time of 1-3 is TRIDENT's pipeline alone.
Wall seconds of each stage (time.perf_counter), patch counts, and the comparison go to --out
as JSON. The time to import TRIDENT and torch is reported apart (import_s).
"""
import argparse
import json
import os
import sys
import time

T0 = time.perf_counter()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trident", required=True)
    ap.add_argument("--slides-dir", required=True)
    ap.add_argument("--job", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--mag", type=float, default=20)
    ap.add_argument("--patch-size", type=int, default=256)
    ap.add_argument("--min-tissue", type=float, default=0.5)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--mltool-job")
    ap.add_argument("--mltool-features")
    a = ap.parse_args()
    sys.path.insert(0, os.path.abspath(a.trident))

    import numpy as np
    import torch
    from torchvision import transforms
    from trident import Processor
    from trident.patch_encoder_models.load import CustomInferenceEncoder
    from trident.segmentation_models.load import segmentation_model_factory
    import trident.IO

    rec = {"import_s": time.perf_counter() - T0, "torch_threads": torch.get_num_threads(),
           "loader_workers": trident.IO.get_num_workers(a.batch), "cpu_count": os.cpu_count()}

    def save():
        with open(a.out + ".partial", "w") as f:
            json.dump(rec, f, indent=1)
        os.replace(a.out + ".partial", a.out)

    def encoder():
        model = torch.jit.load(a.model, map_location="cpu").eval()
        tf = transforms.Compose([transforms.ToTensor(),
                                 transforms.Normalize((0.485, 0.456, 0.406),
                                                      (0.229, 0.224, 0.225))])
        return CustomInferenceEncoder(enc_name="small_cnn", model=model, transforms=tf,
                                      precision=torch.float32)

    mag = int(a.mag) if a.mag == int(a.mag) else a.mag
    coords_dir = f"{mag:g}x_{a.patch_size}px_0px_overlap"
    if a.mltool_job:
        proc = Processor(job_dir=a.mltool_job, wsi_source=a.slides_dir, wsi_ext=[".tif"])
        t = time.perf_counter()
        feats_dir = proc.run_patch_feature_extraction_job(
            coords_dir=coords_dir, patch_encoder=encoder(), device="cpu", batch_limit=a.batch,
            saveto=os.path.join(coords_dir, "features_trident_small_cnn"))
        rec["features_s"] = time.perf_counter() - t
        rec["patches"] = count_rows(feats_dir)
        proc.release()
        if a.mltool_features:
            rec["vs_mltool"] = compare(feats_dir, a.mltool_features, np)
    else:
        t = time.perf_counter()
        proc = Processor(job_dir=a.job, wsi_source=a.slides_dir, wsi_ext=[".tif"])
        rec["processor_init_s"] = time.perf_counter() - t
        seg = segmentation_model_factory("otsu")
        t = time.perf_counter()
        proc.run_segmentation_job(seg, seg_mag=seg.target_mag, holes_are_tissue=True,
                                  batch_size=64, device="cpu")
        rec["segmentation_s"] = time.perf_counter() - t
        t = time.perf_counter()
        proc.run_patching_job(target_magnification=mag, patch_size=a.patch_size, overlap=0,
                              min_tissue_proportion=a.min_tissue, visualize=False)
        rec["patching_s"] = time.perf_counter() - t
        save()
        t = time.perf_counter()
        feats_dir = proc.run_patch_feature_extraction_job(coords_dir=coords_dir,
                                                          patch_encoder=encoder(), device="cpu",
                                                          batch_limit=a.batch)
        rec["features_s"] = time.perf_counter() - t
        rec["patches"] = count_rows(feats_dir)
        proc.release()
    rec["total_s"] = time.perf_counter() - T0
    save()
    print(json.dumps(rec, indent=1))


def count_rows(feats_dir):
    import h5py
    n = 0
    for f in sorted(os.listdir(feats_dir)):
        if f.endswith(".h5"):
            with h5py.File(os.path.join(feats_dir, f), "r") as h:
                n += h["features"].shape[0]
    return n


def compare(trident_dir, mltool_dir, np):
    """TRIDENT's per-slide features (on mltool's coordinates, in the patches files' order,
    which is the feature store's) against mltool's rows of the same slide."""
    import h5py
    feats = np.load(os.path.join(mltool_dir, "features.npy"), mmap_mode="r")
    keys = [k for k in open(os.path.join(mltool_dir, "keys.txt")).read().split("\n") if k]
    rows = {}
    for i, k in enumerate(keys):
        rows.setdefault(k.rsplit("/", 1)[0], []).append(i)
    worst, num, den, n = 0.0, 0.0, 0.0, 0
    for slide, idx in rows.items():
        with h5py.File(os.path.join(trident_dir, f"{slide}.h5"), "r") as h:
            t = np.asarray(h["features"], dtype=np.float64)
        m = np.asarray(feats[idx], dtype=np.float64)
        if t.shape != m.shape:
            return {"error": f"{slide}: TRIDENT {t.shape} vs mltool {m.shape}"}
        worst = max(worst, float(np.abs(t - m).max()))
        num += float(((t - m) ** 2).sum())
        den += float((m ** 2).sum())
        n += len(idx)
    return {"rows": n, "max_abs_diff": worst, "rel_diff": (num / max(den, 1e-30)) ** 0.5}


if __name__ == "__main__":
    main()
