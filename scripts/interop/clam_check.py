"""Manual check, not in CI (CLAM is not on PyPI): CLAM's own readers on what `mltool export h5`
writes (docs/export.md, "Manual check with CLAM and TRIDENT", has a run's output).

    clam_check.py CLAM_CHECKOUT FEAT_DIR PATCHES_DIR SLIDES_DIR TILE_STORE

FEAT_DIR is an export with --layout clam (a labels.csv is written into it), PATCHES_DIR one
with --layout flat (CLAM's patches/), SLIDES_DIR holds the slides as <id>.tif, TILE_STORE is
the store the features came from. It runs, unchanged: Generic_MIL_Dataset on pt_files/ and
h5_files/ (what main.py trains on) and CLAM_SB's forward pass on those features (and on
float16 ones, which it cannot take); Whole_Slide_Bag_FP (what extract_features_fp.py reads
patches with) on the flat files, its pixels compared with mltool's tiles.
"""
import os, sys
import numpy as np, h5py, torch, openslide
sys.path.insert(0, sys.argv[1])  # CLAM checkout
feat_dir, patches_dir, slides_dir, store = sys.argv[2:6]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "cli"))
from store_refs import tile_geometry, read_tiles
from dataset_modules.dataset_h5 import Whole_Slide_Bag_FP
from dataset_modules.dataset_generic import Generic_MIL_Dataset
from models.model_clam import CLAM_SB

slides = sorted(f[:-3] for f in os.listdir(os.path.join(feat_dir, "h5_files")))
csv = os.path.join(feat_dir, "labels.csv")
with open(csv, "w") as f:
    f.write("case_id,slide_id,label\n" + "".join(f"c{i},{s},{'a' if i % 2 else 'b'}\n"
                                                  for i, s in enumerate(slides)))
ds = Generic_MIL_Dataset(csv_path=csv, data_dir=feat_dir, shuffle=False, print_info=False,
                         label_dict={"a": 0, "b": 1}, patient_strat=False, ignore=[])
dims = None
for i, s in enumerate(slides):
    features, label = ds[i]                              # pt_files/, torch.load
    ds.load_from_h5(True)
    h5_features, _, coords = ds[i]                       # h5_files/
    ds.load_from_h5(False)
    dims = features.shape[1]
    print("Generic_MIL_Dataset", s, tuple(features.shape), features.dtype,
          "pt == h5:", bool(torch.equal(features, h5_features)), "coords", coords.dtype)
model = CLAM_SB(gate=True, size_arg="small", dropout=0.25, k_sample=8, n_classes=2,
                embed_dim=dims)
logits, Y_prob, Y_hat, _, _ = model(ds[0][0])
print("CLAM_SB forward on pt_files features:", tuple(logits.shape))
try:
    model(ds[0][0].half())
    print("CLAM_SB forward on float16 features: ran")
except RuntimeError as e:
    print("CLAM_SB forward on float16 features:", str(e).splitlines()[0])

keys, images = read_tiles(store)
tiles = dict(zip(keys, images))
for slide, (info, xy) in sorted(tile_geometry(store).items()):
    at = {v: k for k, v in xy.items()}
    wsi = openslide.open_slide(os.path.join(slides_dir, slide + ".tif"))
    bag = Whole_Slide_Bag_FP(file_path=os.path.join(patches_dir, slide + ".h5"), wsi=wsi,
                             img_transforms=lambda im: np.asarray(im, np.float32))
    diff = max(float(np.abs(bag[i]["img"] - np.asarray(tiles[at[tuple(bag[i]["coord"])]]
                                                        .convert("RGB"), np.float32)).max())
               for i in range(len(bag)))
    print("Whole_Slide_Bag_FP", slide, len(bag), "patches, patch_level", bag.patch_level,
          "patch_size", bag.patch_size, "read_size", info["read_size"],
          "max |CLAM's pixels - mltool's tile|", diff)
