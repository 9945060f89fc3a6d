#!/usr/bin/env bash
# Runs HERE (the build machine, which reaches Debian's mirror and PyPI): downloads the Debian
# packages the GPU build needs and the GPU machine lacks, unpacked into .device/prefix, and the
# python-lmdb wheel for its python3 into .device/wheels (git-ignored, carried to the GPU
# machine by the device tool: `carry: [".device"]`, 64 MiB at most).
# The GPU machine brings its own CUDA, cmake, ninja and python3 with torch 2.11.0+cu130.
# OpenSlide and libvips (with their dozens of dependencies) do not fit: the GPU build is
# configured with MLTOOL_WITH_SLIDE=OFF.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=.device
packages=(
  liblmdb0 liblmdb-dev
  libprotobuf32 libprotobuf-dev libprotoc32 protobuf-compiler
  nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark1debian libbenchmark-dev
  zlib1g-dev
  libturbojpeg0 libturbojpeg0-dev libpng16-16 libpng-dev
)
rm -rf "$dir"
mkdir -p "$dir/debs" "$dir/prefix"
[ -n "$(ls /var/lib/apt/lists/ 2>/dev/null | grep -v lock)" ] || apt-get update -qq
(cd "$dir/debs" && apt-get download -qq "${packages[@]}")
for deb in "$dir"/debs/*.deb; do dpkg-deb -x "$deb" "$dir/prefix"; done
rm -rf "$dir/debs" "$dir/prefix/usr/share/doc" "$dir/prefix/usr/share/man"
# Absolute symlinks would point into the GPU machine's /usr; make them relative.
find "$dir/prefix" -type l | while read -r link; do
  target=$(readlink "$link")
  case "$target" in /*) ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$dir/prefix$target")" "$link" ;; esac
done
# python-lmdb for the GPU machine's python3 (CPython 3.12): the gpu test and the extract
# benchmark write tile stores with it. run.sh installs it into /tmp/site (PYTHONPATH).
lmdb_version=$(sed -n 's/^lmdb==\([0-9][0-9.]*\).*/\1/p' scripts/requirements.txt)
[ -n "$lmdb_version" ] || { echo "device: no lmdb==VERSION line in scripts/requirements.txt" >&2; exit 1; }
pip_python=python3
python3 -m pip --version > /dev/null 2>&1 || pip_python=.venv/bin/python
mkdir -p "$dir/wheels"
"$pip_python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$dir/wheels" "lmdb==$lmdb_version"
ls "$dir"/wheels/lmdb-"$lmdb_version"-cp312-*.whl > /dev/null ||
  { echo "device: no CPython 3.12 manylinux wheel of lmdb $lmdb_version in $dir/wheels" >&2; exit 1; }
size=$(du -sm "$dir" | cut -f1)
echo "device: $dir holds ${size} MiB (limit 64)"
[ "$size" -le 64 ] || { echo "device: too large to carry" >&2; exit 1; }
