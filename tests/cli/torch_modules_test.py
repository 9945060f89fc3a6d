"""The two LibTorch modules of a build with CUDA (apps/CMakeLists.txt): mltool-torch.so, all of
LibTorch, and mltool-torch-cpu.so, the same commands linked without libtorch_cuda (and the
cuDNN, cuBLAS, NCCL it loads), which the program loads where no NVIDIA driver is installed.

  selection   `mltool --version` names the module: the CPU one where libcuda.so.1 does not
              load, the full one where it does; MLTOOL_TORCH_MODULE chooses either
  loads       the dynamic loader (LD_DEBUG=files) opens libtorch_cuda for the full module and
              not for the CPU one, and the CPU one's peak RSS is under half the full one's
  same_bytes  extract (builtin:color-texture and a TorchScript CNN), train (an MLP) and
              predict write the same bytes with either module

    torch_modules_test.py MLTOOL [CHECK...]

Skips (exit 77) in a build without CUDA, which has one module only.
"""
import ctypes
import os
import subprocess
import sys

import numpy as np
import torch

from cli_common import expect, run, run_checks, tmp, write_feature_store
from torch_models import Small

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "fixtures"))
import tile_store  # noqa: E402

mltool = os.path.abspath(sys.argv[1])
only = set(sys.argv[2:])
LIB = os.path.join(os.path.dirname(os.path.dirname(mltool)), "lib")
MODULES = {"full": os.path.join(LIB, "mltool-torch.so"),
           "cpu": os.path.join(LIB, "mltool-torch-cpu.so")}
if not os.path.exists(MODULES["cpu"]):
    print(f"skip: no {MODULES['cpu']} (a build without CUDA has one module)")
    sys.exit(77)


def with_module(name):
    return {"MLTOOL_TORCH_MODULE": MODULES[name]}


def driver_installed():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def fixtures():
    tile_store.write_store(tmp("tiles.lmdb"), [{"id": "A", "rows": 4, "cols": 5},
                                               {"id": "B", "rows": 3, "cols": 3}], 96,
                           encoding="png")
    torch.manual_seed(3)
    torch.jit.script(Small().eval()).save(tmp("small.pt"))
    rng = np.random.default_rng(5)
    keys = [f"S{s:02d}/{t:06d}_000000" for s in range(20) for t in range(30)]
    labels = rng.integers(0, 3, len(keys))
    rows = rng.standard_normal((3, 24))[labels] + rng.standard_normal((len(keys), 24))
    write_feature_store(tmp("feat"), rows, keys)
    with open(tmp("labels.csv"), "w") as f:
        f.write("key,label\n" + "".join(f"{k},c{y}\n" for k, y in zip(keys, labels)))
    code, _, err = run([mltool, "pack", tmp("feat"), "--labels", tmp("labels.csv"), "-o",
                        tmp("ds"), "--seed", "1", "--split", "train=0.8,val=0.2"])
    expect(code == 0, f"pack: {err}")
    with open(tmp("mlp.json"), "w") as f:
        f.write('{"family": "mlp", "hidden": [32], "dropout": 0.1}')
    return "a tile store of 29 tiles, 600 x 24 features"


def version(env=None):
    code, out, err = run([mltool, "--version"], env=env)
    expect(code == 0, f"mltool --version: exit {code}: {err}")
    lines = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    return lines.get("module")


def check_selection():
    want = "mltool-torch.so" if driver_installed() else "mltool-torch-cpu.so"
    got = version()
    expect(got == want, f"mltool --version names module {got!r}; with"
                        f"{'' if driver_installed() else 'out'} an NVIDIA driver it is {want}")
    for name, path in MODULES.items():
        got = version(with_module(name))
        expect(got == os.path.basename(path), f"MLTOOL_TORCH_MODULE={path}: module {got!r}")
    print(f"  default: {want}; MLTOOL_TORCH_MODULE chooses either")


def peak_rss_kib(env):
    """Peak RSS of `mltool --version` alone, from a fresh Python that runs only it."""
    code = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, "
            "capture_output=True); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    p = subprocess.run([sys.executable, "-c", code, mltool, "--version"], capture_output=True,
                       text=True, env=dict(os.environ, **env), timeout=120)
    expect(p.returncode == 0, p.stderr)
    return int(p.stdout)


def check_loads():
    opened = {}
    for name in MODULES:
        p = subprocess.run([mltool, "--version"], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, LD_DEBUG="files", **with_module(name)))
        opened[name] = [line.split("file=", 1)[1].split()[0] for line in p.stderr.splitlines()
                        if "file=" in line and "needed by" in line]
    expect(any("libtorch_cuda" in f for f in opened["full"]),
           f"the full module does not load libtorch_cuda: {opened['full']}")
    cuda = [f for f in opened["cpu"] if "torch_cuda" in f or "cudnn" in f or "cublas" in f]
    expect(not cuda, f"the CPU module loads {cuda}")
    rss = {name: peak_rss_kib(with_module(name)) for name in MODULES}
    print(f"  peak RSS of mltool --version: full {rss['full'] // 1024} MiB, cpu "
          f"{rss['cpu'] // 1024} MiB; libraries opened: {len(opened['full'])} / "
          f"{len(opened['cpu'])}")
    expect(rss["cpu"] < rss["full"] / 2, f"the CPU module's peak RSS {rss['cpu']} KiB is not "
                                         f"under half the full one's {rss['full']} KiB")


def outputs(name):
    """The files each command writes with module `name`."""
    env = with_module(name)
    d = tmp(name)
    runs = [["extract", tmp("tiles.lmdb"), "-o", f"{d}/ct", "--model", "builtin:color-texture"],
            ["extract", tmp("tiles.lmdb"), "-o", f"{d}/cnn", "--model", tmp("small.pt"),
             "--input-size", "64", "--batch", "7"],
            ["train", tmp("ds"), "-o", f"{d}/run", "--model", tmp("mlp.json"), "--epochs", "3",
             "--batch", "64", "--seed", "2"],
            ["predict", f"{d}/run", tmp("feat"), "-o", f"{d}/pred"]]
    for argv in runs:
        code, _, err = run([mltool, *argv, "-q"], env=env)
        expect(code == 0, f"{name}: mltool {' '.join(argv[:2])}: exit {code}: {err[-1500:]}")
    files = ["ct/features.npy", "cnn/features.npy", "run/model.safetensors",
             "pred/predictions.csv"]
    return {f: open(os.path.join(d, f), "rb").read() for f in files}


def check_same_bytes():
    full, cpu = outputs("full"), outputs("cpu")
    differ = [f for f in full if full[f] != cpu[f]]
    expect(not differ, f"the modules write different bytes: {differ}")
    print(f"  equal: {', '.join(full)}")


if __name__ == "__main__":
    run_checks("torch modules", [check_selection, check_loads, check_same_bytes], only, fixtures)
