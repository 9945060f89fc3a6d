#!/usr/bin/env bash
# Installs everything mltool needs on a bare Debian 12 machine and builds it (Release,
# binary at build/bin/mltool). Idempotent: a second run with nothing changed takes seconds.
#
#   scripts/setup.sh                 # packages + venv + configure + build
#   MLTOOL_BUILD_DIR=build-x scripts/setup.sh
#   MLTOOL_SETUP_FOR=example scripts/setup.sh   # what scripts/example.sh needs, no more: no
#                                    # test-only packages or references, mltool alone built
#                                    # (tests and benchmarks configured off where the build is
#                                    # new; a later plain setup turns them on and builds them)
#
# Caches live outside the clone so a fresh clone on the same machine rebuilds fast:
#   ~/.cache/mltool/venv-<hash>  the Python venv (torch), linked as .venv; keyed by
#                                scripts/requirements.txt; scripts/requirements-extra.txt's
#                                test references are added to it (marker .extra-<hash>)
#   ~/.cache/ccache              compiled objects (ccache)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=${MLTOOL_BUILD_DIR:-build}
cache=${MLTOOL_CACHE:-$HOME/.cache/mltool}

sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)

log() { printf 'setup: %s\n' "$*" >&2; }
for_example=0
case ${MLTOOL_SETUP_FOR:-all} in
  all) ;;
  example) for_example=1 ;;
  *) echo "setup: MLTOOL_SETUP_FOR is all or example, not '${MLTOOL_SETUP_FOR}'" >&2; exit 1 ;;
esac

# --- Debian packages -------------------------------------------------------------------
# OpenSlide is not among them: mltool links OpenSlide 4 from the openslide-bin wheel (below,
# scripts/requirements.txt); Debian's 3.4.1 comes in only as libvips-dev's dependency.
packages=(
  build-essential cmake ninja-build ccache pkg-config git python3 python3-venv python3-pip
  libcli11-dev nlohmann-json3-dev liblmdb-dev lmdb-utils libprotobuf-dev protobuf-compiler
  libvips-dev libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev libhdf5-dev libtiff-dev
  fonts-dejavu-core  # the font of the QC captions (vips_text) and the charts; named, not left to chance
  librsvg2-2  # libvips' svgload, which renders the charts' SVG to PNG (a libvips42 dependency today)
  libcurl4-openssl-dev  # slides over DICOMweb (HTTP, TLS with the system CA store)
  libgeos-dev  # GEOS (C API): tile --roi's QuPath regions, their union and the tile shares
  libjs-leaflet  # the viewer library mltool view copies into each site (CRS.Simple deep zoom)
)
# What only the tests, the benchmarks and the format check use: not for the example.
(( for_example )) || packages+=(
  libgtest-dev libgmock-dev libbenchmark-dev clang-format
  chromium  # headless, for the tests that load report.html in a real browser
  orthanc orthanc-dicomweb  # the DICOMweb server tests/cli/dicomweb_test.py serves slides from
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- Python venv with torch (shared across clones, keyed by the requirements) -----------
python=${MLTOOL_PYTHON:-python3}
req_hash=$( (cat scripts/requirements.txt; "$python" -c 'import sys; print(sys.version)') | sha256sum | cut -c1-16)
venv="$cache/venv-$req_hash"
if [ ! -f "$venv/.complete" ]; then
  log "creating $venv (torch wheel download on first run)"
  rm -rf "$venv"
  mkdir -p "$cache"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
  "$venv/bin/pip" install -q -r scripts/requirements.txt
  touch "$venv/.complete"
fi
# Test references that need not key the venv (scripts/requirements-extra.txt): installed into
# it when the marker of this file's hash is missing, so a second run costs nothing and
# changing the list never rebuilds the venv (nor, through torch's path, the build).
# nvJPEG's header and library (extract --decode device; the library is loaded at run time):
# before configuring, whatever else is installed, so that every build of this venv has it.
nvjpeg_wheel=nvidia-nvjpeg==13.0.4.44
if [ ! -f "$venv/.nvjpeg-${nvjpeg_wheel##*==}" ]; then
  log "installing $nvjpeg_wheel into $venv"
  "$venv/bin/pip" install -q "$nvjpeg_wheel"
  touch "$venv/.nvjpeg-${nvjpeg_wheel##*==}"
fi
extra_hash=$(sha256sum scripts/requirements-extra.txt | cut -c1-16)
if (( ! for_example )) && [ ! -f "$venv/.extra-$extra_hash" ]; then
  log "installing scripts/requirements-extra.txt into $venv"
  "$venv/bin/pip" install -q -r scripts/requirements-extra.txt
  touch "$venv/.extra-$extra_hash"
fi
if [ ! -e .venv ] || { [ -L .venv ] && [ "$(readlink .venv)" != "$venv" ]; }; then
  rm -f .venv
  ln -s "$venv" .venv
fi
torch_prefix=$(.venv/bin/python -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')

# --- CUDA toolkit ------------------------------------------------------------------------
# LibTorch's CMake config needs a CUDA 13 toolkit (the wheel is a CUDA build). Where the
# machine has none (a bare Debian 12), assemble one from PyPI: nvcc, nvvm, cccl and crt
# wheels on top of the runtime and math libraries torch already pulled in.
cuda_args=()
if [ -n "${MLTOOL_CUDA_FROM_PYPI:-}" ] || { ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; }; then
  cuda_root="$cache/cuda-13.0"
  if [ ! -f "$cuda_root/.complete" ]; then
    log "no nvcc here: assembling a CUDA 13.0 toolkit from PyPI in $cuda_root"
    site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    wheels=$(mktemp -d)
    .venv/bin/pip install -q --no-deps --target "$wheels" \
      "nvidia-cuda-nvcc==13.0.*" "nvidia-nvvm==13.0.*" "nvidia-cuda-cccl==13.0.*" "nvidia-cuda-crt==13.0.*"
    rm -rf "$cuda_root"
    mkdir -p "$cuda_root"
    cp -as "$site/nvidia/cu13/." "$cuda_root/"
    cp -a "$wheels/nvidia/cu13/." "$cuda_root/"
    rm -rf "$wheels"
    ln -sfn lib "$cuda_root/lib64"
    (cd "$cuda_root/lib" && for f in *.so.*; do b=${f%%.so.*}.so; [ -e "$b" ] || ln -s "$f" "$b"; done)
    touch "$cuda_root/.complete"
  fi
  cuda_args=(-DCMAKE_CUDA_COMPILER="$cuda_root/bin/nvcc" -DCUDAToolkit_ROOT="$cuda_root"
             -DCUDA_TOOLKIT_ROOT_DIR="$cuda_root")
fi

# --- Configure and build ----------------------------------------------------------------
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
launcher="env;CCACHE_DIR=$CCACHE_DIR;CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime;CCACHE_BASEDIR=$root;ccache"
# The example configures a new build without tests and benchmarks (GoogleTest and Google
# Benchmark are not installed for it); a plain setup turns them on in a build that has them off.
parts=(-DMLTOOL_BUILD_TESTS=ON -DMLTOOL_BUILD_BENCH=ON)
(( for_example )) && parts=(-DMLTOOL_BUILD_TESTS=OFF -DMLTOOL_BUILD_BENCH=OFF)
if [ -f "$build/build.ninja" ] && (( ! for_example )) &&
   grep -q '^MLTOOL_BUILD_TESTS:BOOL=OFF' "$build/CMakeCache.txt"; then
  log "configuring $build with the tests and benchmarks"
  cmake -S . -B "$build" "${parts[@]}" --log-level=ERROR >/dev/null
fi
if [ ! -f "$build/build.ninja" ]; then
  log "configuring $build"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${parts[@]}" \
    -DCMAKE_PREFIX_PATH="$torch_prefix" \
    -DPython3_EXECUTABLE="$root/.venv/bin/python" \
    -DCMAKE_C_COMPILER_LAUNCHER="$launcher" -DCMAKE_CXX_COMPILER_LAUNCHER="$launcher" \
    -DCMAKE_CUDA_COMPILER_LAUNCHER="$launcher" "${cuda_args[@]}" \
    --log-level=ERROR ${MLTOOL_CMAKE_ARGS:-} >/dev/null
fi
jobs=${MLTOOL_JOBS:-$(nproc)}
targets=()
(( for_example )) && targets=(--target mltool)  # the program and its LibTorch modules
cmake --build "$build" -j "$jobs" "${targets[@]}"
log "built $build/bin/mltool"
