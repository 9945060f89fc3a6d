#!/usr/bin/env bash
# Runs HERE (the build machine): packs what the GPU machine needs to run the gpu tests and the
# GPU benchmarks without compiling anything there, so that the session's few minutes of device
# time go to the GPU. This machine builds with the same PyPI torch 2.11.0+cu130 wheel that the
# GPU machine's python3 holds, and with nvcc 13.0 for sm_90 (H100 and H200). Into .device/
# (git-ignored; the device tool carries it: `carry: [".device"]`, 64 MiB at most):
#   build.tar.xz  build/'s programs (mltool, the test programs), its libraries and its ctest
#                 files, as build-device/; beside them, in build-device/lib/deps, every library
#                 they load that is not glibc's, libstdc++, libgcc or LibTorch's (libvips and
#                 its dependencies, OpenSlide 4 from the openslide-bin wheel, LMDB, protobuf,
#                 libjpeg-turbo, HDF5, ...), with RUNPATHs that find them there. LibTorch comes
#                 from the GPU machine's own torch (run.sh puts its lib/ on LD_LIBRARY_PATH).
#   manifest      where build/ was made (the paths run.sh rewrites in the ctest files) and the
#                 torch it linked (run.sh refuses another)
#   wheels/       python-lmdb for the GPU machine's CPython 3.12 (the gpu tests and the
#                 benchmarks write tile stores with it)
#   fixtures/     the slides of the gpu test's `slides` check (pyvips writes them here; the
#                 GPU machine has none) and ../shared's real slide where there is one
#
#   scripts/device/prepare.sh        # builds build/ first (scripts/setup.sh when unconfigured)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
build=build
dir=.device
py=$root/.venv/bin/python
[ -f "$build/build.ninja" ] || scripts/setup.sh
CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache} cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" -N > /dev/null   # gtest discovery writes the *_tests.cmake lists
command -v patchelf > /dev/null || apt-get install -y -qq patchelf > /dev/null
torch_version=$("$py" -c 'import torch; print(torch.__version__)')
[[ $torch_version == 2.11.0+cu130 ]] ||
  { echo "device: build/ links torch $torch_version; the GPU machine has 2.11.0+cu130" >&2; exit 1; }
grep -q 'MLTOOL_HAVE_CUDA' "$build/build.ninja" ||
  { echo "device: build/ has no CUDA kernels (no nvcc at configure time)" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
out=$stage/build-device
mkdir -p "$out/bin" "$out/lib/deps" "$out/tests"
programs=()  # build/'s own, whose RUNPATHs still resolve their libraries for ldd
for f in "$build"/bin/*; do [ -x "$f" ] && [ -f "$f" ] && programs+=("$f"); done
cp -p "${programs[@]}" "$out/bin/"
cp -p "$build"/lib/*.so "$out/lib/"
programs+=("$build"/lib/*.so)
(cd "$build" && find . -path ./CMakeFiles -prune -o \( -name CTestTestfile.cmake -o \
  -name '*_include.cmake' -o -name '*_tests.cmake' \) -print | tar -cf - -T -) | tar -C "$out" -xf -

# The libraries the programs load, less what every Linux has (glibc, libstdc++, libgcc) and
# LibTorch with its CUDA libraries (the GPU machine's torch brings its own, the same version).
system_libs=" $(dpkg -L libc6 libstdc++6 libgcc-s1 | grep -E '\.so' | xargs -n1 basename | tr '\n' ' ') "
ldd "${programs[@]}" 2> /dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  while read -r lib; do
    real=$(readlink -f "$lib")
    case "$real" in "$root/$build"/* | */torch/lib/* | */nvidia/* | */cuda*/lib*/libcudart.so*) continue ;; esac
    [[ $system_libs == *" $(basename "$lib") "* ]] && continue
    cp -L "$lib" "$out/lib/deps/$(basename "$lib")"
  done
# nvJPEG (extract --decode device) is loaded with dlopen, so ldd does not list it: carried
# into deps/, which the module's RUNPATH names, unless the GPU machine's torch has its own.
nvjpeg=$(sed -n 's/^MLTOOL_NVJPEG_LIBRARY:FILEPATH=//p' "$build/CMakeCache.txt")
if [ -n "$nvjpeg" ] && [ -f "$nvjpeg" ]; then
  cp -L "$nvjpeg" "$out/lib/deps/"
else
  echo "device: no nvJPEG library found at configure time: --decode device will be refused there" >&2
fi
for f in "$out"/bin/*; do patchelf --set-rpath '$ORIGIN/../lib:$ORIGIN/../lib/deps' "$f"; done
for f in "$out"/lib/*.so; do patchelf --set-rpath '$ORIGIN:$ORIGIN/deps' "$f"; done
for f in "$out"/lib/deps/*; do chmod u+w "$f" && patchelf --set-rpath '$ORIGIN' "$f"; done
# patchelf made the programs newer than the gtest lists: make the lists newer again, else
# ctest would rediscover with this machine's CMake module path.
find "$out/tests" -name '*_tests.cmake' -exec touch {} +

rm -rf "$dir"
mkdir -p "$dir/wheels" "$dir/fixtures"
XZ_OPT="-6 -T0" tar -C "$stage" -cJf "$dir/build.tar.xz" build-device
{
  echo "root=$root"
  echo "build=$root/$build"
  echo "python=$root/.venv/bin/python"
  echo "torch=$torch_version"
  echo "commit=$(git rev-parse HEAD)$(git diff --quiet HEAD -- lib apps tests || echo +changes)"
  echo "deps=$(ls "$out/lib/deps" | wc -l)"
} > "$dir/manifest"

# python-lmdb for the GPU machine's python3 (CPython 3.12); run.sh installs it into /tmp/site.
lmdb_version=$(sed -n 's/^lmdb==\([0-9][0-9.]*\).*/\1/p' scripts/requirements.txt)
[ -n "$lmdb_version" ] || { echo "device: no lmdb==VERSION line in scripts/requirements.txt" >&2; exit 1; }
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$dir/wheels" "lmdb==$lmdb_version"
ls "$dir"/wheels/lmdb-"$lmdb_version"-cp312-*.whl > /dev/null ||
  { echo "device: no CPython 3.12 manylinux wheel of lmdb $lmdb_version in $dir/wheels" >&2; exit 1; }

# The slides of the gpu test's `slides` check.
"$py" tests/gpu/extract_gpu_test.py --write-slides "$dir/fixtures"
[ ! -f ../shared/slides/CMU-1-Small-Region.svs ] || cp ../shared/slides/CMU-1-Small-Region.svs "$dir/fixtures/"

carried=$(du -sm "$dir" | cut -f1)
tree=$(( ($(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1) + 1048575) / 1048576 ))
echo "device: $dir holds ${carried} MiB ($(cat "$dir/manifest" | tr '\n' ' ')), the tree ${tree} MiB (limit 64 together)"
(( carried + tree <= 64 )) || { echo "device: too large to carry" >&2; exit 1; }
