"""CLAM's and TRIDENT's own writers of per-slide HDF5 files, copied from their code, as the
reference export_h5_layouts_test.py holds `mltool export h5 --layout trident|clam` to.
Neither tool is on PyPI, so CI cannot run them; these functions are theirs line for line
(comments and the loops that feed them aside) at the commits docs/export.md names:

  TRIDENT a91fa8490e0210ebbbe58452c3babe009e0ab7ca (github.com/mahmoodlab/TRIDENT)
  CLAM    53e2409d4a8189c682c173382964a85f114f923c (github.com/mahmoodlab/CLAM)

and `describe` turns a file into what the test compares: dataset names, dtypes, shapes,
chunks, maxshape, and each attribute's value and type.
"""
import json
import os

import h5py
import numpy as np
import torch

TRIDENT_COMMIT = "a91fa8490e0210ebbbe58452c3babe009e0ab7ca"
CLAM_COMMIT = "53e2409d4a8189c682c173382964a85f114f923c"


# ---------------------------------------------------------------- TRIDENT

def trident_save_h5(save_path, assets, attributes=None, mode='w'):
    """trident/IO.py save_h5."""
    with h5py.File(save_path, mode) as file:
        for key, val in assets.items():
            data_shape = val.shape
            if key not in file:
                data_type = val.dtype
                chunk_shape = (1, ) + data_shape[1:]
                maxshape = (None, ) + data_shape[1:]
                dset = file.create_dataset(key, shape=data_shape, maxshape=maxshape,
                                           chunks=chunk_shape, dtype=data_type)
                dset[:] = val
                if attributes is not None:
                    if key in attributes.keys():
                        for attr_key, attr_val in attributes[key].items():
                            if isinstance(attr_val, dict):
                                attr_val = json.dumps(attr_val)
                            elif attr_val is None:
                                attr_val = 'None'
                            dset.attrs[attr_key] = attr_val
            else:
                dset = file[key]
                dset.resize(len(dset) + data_shape[0], axis=0)
                dset[-data_shape[0]:] = val


def trident_coords_to_h5(coords, save_path, patch_size, src_mag, target_mag, save_coords,
                         width, height, name, overlap):
    """trident/IO.py coords_to_h5."""
    coords_array = np.asarray(coords, dtype=np.int64)
    if coords_array.size == 0:
        coords_array = coords_array.reshape(0, 2)
    assets = {'coords': coords_array}
    attributes = {
        'patch_size': patch_size,
        'patch_size_level0': patch_size * src_mag // target_mag,
        'level0_magnification': src_mag,
        'target_magnification': target_mag,
        'overlap': overlap,
        'name': name,
        'savetodir': save_coords,
        'level0_width': width,
        'level0_height': height
    }
    trident_save_h5(save_path, assets=assets, attributes={'coords': attributes}, mode='w')


def trident_fetch_magnification(mpp_x):
    """trident/wsi_objects/WSI.py WSI._fetch_magnification (mpp given)."""
    if mpp_x < 0.16:
        return 80
    elif mpp_x < 0.2:
        return 60
    elif mpp_x < 0.3:
        return 40
    elif mpp_x < 0.6:
        return 20
    elif mpp_x < 1.2:
        return 10
    elif mpp_x < 2.4:
        return 5
    raise ValueError(f"Identified mpp is very low: mpp={mpp_x}.")


def trident_fmt_mag(mag):
    """trident/Processor.py run_patching_job's _fmt_mag."""
    m = float(mag)
    if abs(m - round(m)) < 1e-9:
        return str(int(round(m)))
    return f"{m:g}"


def trident_job(job_dir, slide, coords, features, *, patch_size, src_mag, target_mag, width,
                height, overlap, encoder):
    """One slide through Processor.run_patching_job (WSI.extract_tissue_coords) and
    run_patch_feature_extraction_job (WSI.extract_patch_features): the two files and the
    folders they go to. Returns the patching directory."""
    saveto = f"{trident_fmt_mag(target_mag)}x_{patch_size}px_{overlap}px_overlap"
    save_coords = os.path.join(job_dir, saveto)
    os.makedirs(os.path.join(save_coords, 'patches'), exist_ok=True)
    coords_path = os.path.join(save_coords, 'patches', str(slide) + '_patches.h5')
    trident_coords_to_h5(coords, coords_path, patch_size, src_mag, target_mag, save_coords,
                         width, height, slide, overlap)
    with h5py.File(coords_path, 'r') as f:  # IO.read_coords
        coords_attrs = dict(f['coords'].attrs)
        coords = f['coords'][:]
    save_features = os.path.join(save_coords, f'features_{encoder}')
    os.makedirs(save_features, exist_ok=True)
    trident_save_h5(os.path.join(save_features, f'{slide}.h5'),
                    assets={'features': features, 'coords': coords},
                    attributes={'features': {'name': slide, 'savetodir': save_features,
                                             'encoder': encoder},
                                'coords': coords_attrs},
                    mode='w')
    return save_coords


# ---------------------------------------------------------------- CLAM

def clam_save_hdf5(output_path, asset_dict, attr_dict=None, mode='a', chunk_size=32):
    """utils/file_utils.py save_hdf5 (what extract_features_fp.py writes h5_files/ with)."""
    with h5py.File(output_path, mode) as file:
        for key, val in asset_dict.items():
            data_shape = val.shape
            if key not in file:
                data_type = val.dtype
                chunk_shape = (chunk_size, ) + data_shape[1:]
                maxshape = (None, ) + data_shape[1:]
                dset = file.create_dataset(key, shape=data_shape, maxshape=maxshape,
                                           chunks=chunk_shape, dtype=data_type)
                dset[:] = val
                if attr_dict is not None:
                    if key in attr_dict.keys():
                        for attr_key, attr_val in attr_dict[key].items():
                            dset.attrs[attr_key] = attr_val
            else:
                dset = file[key]
                dset.resize(len(dset) + data_shape[0], axis=0)
                dset[-data_shape[0]:] = val
    return output_path


def clam_patch_file(save_path, slide, coords, patch_size, patch_level, level_downsample,
                    level_dim):
    """wsi_core/WholeSlideImage.py process_contours / process_contour: create_patches_fp.py's
    patches/<slide>.h5, written by wsi_core/wsi_utils.py save_hdf5 (chunks (1, 2)).
    `level_downsample` and `level_dim` are that level's entries of level_downsamples
    ((d, d) floats) and level_dim ((w, h) ints)."""
    asset_dict = {'coords': np.asarray(coords)}
    attr = {'patch_size': patch_size,
            'patch_level': patch_level,
            'downsample': level_downsample,
            'downsampled_level_dim': tuple(np.array(level_dim)),
            'level_dim': level_dim,
            'name': slide,
            'save_path': save_path}
    path = os.path.join(save_path, str(slide) + '.h5')
    with h5py.File(path, 'w') as file:  # wsi_utils.save_hdf5, mode 'w'
        for key, val in asset_dict.items():
            dset = file.create_dataset(key, shape=val.shape, maxshape=(None, ) + val.shape[1:],
                                       chunks=(1, ) + val.shape[1:], dtype=val.dtype)
            dset[:] = val
            for attr_key, attr_val in attr.items():
                dset.attrs[attr_key] = attr_val
    return path


def clam_feat_dir(feat_dir, slide, coords, features, batch_size=256):
    """extract_features_fp.py for one slide: compute_w_loader's batches (features float32,
    coords int32, mode 'w' then 'a') into h5_files/, then torch.save into pt_files/."""
    os.makedirs(os.path.join(feat_dir, 'pt_files'), exist_ok=True)
    os.makedirs(os.path.join(feat_dir, 'h5_files'), exist_ok=True)
    output_path = os.path.join(feat_dir, 'h5_files', slide + '.h5')
    mode = 'w'
    for at in range(0, len(features), batch_size):
        asset_dict = {'features': features[at:at + batch_size].astype(np.float32),
                      'coords': coords[at:at + batch_size].astype(np.int32)}
        clam_save_hdf5(output_path, asset_dict, attr_dict=None, mode=mode)
        mode = 'a'
    with h5py.File(output_path, "r") as file:
        features = file['features'][:]
    torch.save(torch.from_numpy(features), os.path.join(feat_dir, 'pt_files', slide + '.pt'))


# ---------------------------------------------------------------- comparison

def _attr(attrs, key, root):
    """An attribute as (HDF5 type, shape, value): its stored type (a string's encoding and
    length: variable-length UTF-8 as h5py writes a str), scalar or array, and the value;
    paths under `root` (savetodir, save_path) are made relative, as two trees live in two
    places."""
    a = attrs.get_id(key)
    string = h5py.check_string_dtype(a.dtype)
    kind = f"string {string.encoding} {string.length}" if string else str(a.dtype)
    value = attrs[key]
    if isinstance(value, str):
        value = os.path.relpath(value, root) if value.startswith(root) else value
    elif isinstance(value, np.ndarray):
        value = value.tolist()
    elif hasattr(value, "item"):
        value = value.item()
    return (kind, a.shape, value)


def describe(path, root):
    """Every dataset of an HDF5 file: dtype, shape, chunks, maxshape, attributes."""
    out = {}
    with h5py.File(path, "r") as f:
        for name, d in f.items():
            out[name] = {"dtype": str(d.dtype), "shape": d.shape, "chunks": d.chunks,
                         "maxshape": d.maxshape,
                         "attrs": {k: _attr(d.attrs, k, root) for k in d.attrs}}
    return out


def tree(root):
    """The files under `root` (relative paths), dot files left out."""
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith(".")]
        out += [os.path.relpath(os.path.join(d, f), root) for f in files if not f.startswith(".")]
    return sorted(out)
