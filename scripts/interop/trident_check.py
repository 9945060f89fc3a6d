"""Manual check, not in CI (TRIDENT is not on PyPI): TRIDENT's own Processor on the job tree
`mltool export h5 --layout trident` writes (docs/export.md, "Manual check with CLAM and
TRIDENT", has a run's output).

    trident_check.py TRIDENT_CHECKOUT JOB_DIR SLIDES_DIR TILE_STORE

JOB_DIR is a copy of the export (TRIDENT writes into it), with one <mag>x_<ps>px_<ov>px_overlap/
and one features_<encoder>/; SLIDES_DIR holds the slides as <id>.tif; TILE_STORE is the store
the features came from. It runs, unchanged: Processor.run_slide_feature_extraction_job with
the mean slide encoder (mean-<encoder>: TRIDENT's slide encoders read our features, coords
and attributes), and run_patch_feature_extraction_job with an "encoder" that returns the
pixels, which are compared with mltool's tiles (TRIDENT's patcher reads our patches files).
"""
import os, sys, types, io, json
import numpy as np, h5py, torch
# Modules TRIDENT imports but does not use on these paths (segmentation, visualization) and
# that are not installed here: empty stand-ins, whose every attribute is a dummy class.
import importlib.abc, importlib.machinery
STUBS = ("cv2", "geopandas", "skimage", "matplotlib")
class _Stub(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"): raise AttributeError(name)
        return type(name, (), {})
class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in STUBS:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
    def create_module(self, spec): return _Stub(spec.name)
    def exec_module(self, module): module.__path__ = []
sys.meta_path.insert(0, _Finder())
sys.path.insert(0, sys.argv[1])  # TRIDENT checkout
job, slides_dir, store = sys.argv[2], sys.argv[3], sys.argv[4]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "cli"))
from store_refs import tile_geometry, read_tiles
from trident import Processor
from trident.slide_encoder_models.load import MeanSlideEncoder

coords_dir, = [d for d in os.listdir(job) if d.endswith("px_overlap")]
features_dir, = [d for d in os.listdir(os.path.join(job, coords_dir)) if d.startswith("features_")]
encoder = features_dir[len("features_"):]
p = Processor(job_dir=job, wsi_source=slides_dir, wsi_ext=[".tif"], skip_errors=False)
enc = MeanSlideEncoder(model_name="mean-" + encoder)
p.run_slide_feature_extraction_job(slide_encoder=enc, coords_dir=coords_dir, device="cpu")
for f in sorted(os.listdir(os.path.join(job, coords_dir, features_dir))):
    with h5py.File(os.path.join(job, coords_dir, features_dir, f)) as a, \
         h5py.File(os.path.join(job, coords_dir, "slide_features_mean-" + encoder, f)) as b:
        want = torch.from_numpy(a["features"][:]).float().mean(0).numpy()
        got = b["features"][:]
        print("slide encoder", f, got.shape, "max |diff|", float(np.abs(got - want).max()))

class Pixels(torch.nn.Module):
    """A patch 'encoder' that returns the patch's pixels, to see what TRIDENT read."""
    enc_name = "pixels"
    def __init__(self):
        super().__init__()
        self.eval_transforms = lambda im: torch.from_numpy(np.asarray(im.convert("RGB"), np.float32))
    def forward(self, x):
        return x.reshape(x.shape[0], -1)

p.run_patch_feature_extraction_job(coords_dir=coords_dir, patch_encoder=Pixels(), device="cpu",
                                   batch_limit=64)
keys, images = read_tiles(store)
tiles = dict(zip(keys, images))
geometry = tile_geometry(store)
for slide, (info, xy) in sorted(geometry.items()):
    at = {v: k for k, v in xy.items()}
    with h5py.File(os.path.join(job, coords_dir, "features_pixels", slide + ".h5")) as f:
        X, C = f["features"][:], f["coords"][:]
    ts = info["tile_size"]
    diff = max(float(np.abs(X[i].reshape(ts, ts, 3) -
                            np.asarray(tiles[at[tuple(C[i])]].convert("RGB"), np.float32)).max())
               for i in range(len(C)))
    print("patch read", slide, len(C), "patches; max |TRIDENT's pixels - mltool's tile|", diff)
