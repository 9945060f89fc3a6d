#!/usr/bin/env bash
# Runs set-up (packages, venv, build) and then the test suite through ctest.
#   scripts/test.sh              # labels unit + cli, about 10 min on 2 cores once built
#   scripts/test.sh -L slurm     # the cluster recipes on a one-node Slurm, which the test
#                                # installs with apt-get as root, else skips (about 2 min)
#   scripts/test.sh -L dicomweb  # slides over DICOMweb from a real Orthanc on 127.0.0.1
#                                # (installed the same way; about 1.5 min)
#   scripts/test.sh -L signals   # train and extract stopped by SIGTERM and killed at random
#                                # points, resumed (about 2.5 min)
#   scripts/test.sh -L smoke     # the gpu tests' CPU halves (about 4 min)
#   scripts/test.sh -L stain     # stain normalisation against torchstain on the real slide
#                                # (about 2.5 min)
#   scripts/test.sh -L encoders  # the encoder presets against timm/transformers/open_clip on
#                                # the real slide (about 10 min on 2 cores)
#   scripts/test.sh -L heads     # CLAM, DSMIL and TransMIL against their reference PyTorch
#                                # ports, in every memory and parallel mode (a few minutes)
#   scripts/test.sh -L giant     # the ViT-H/ViT-g encoder presets, 2 tiles each (about 15 min
#                                # on 2 cores); CI runs all these labels after the default
#                                # ones, through .ci/run
#   scripts/test.sh -L gpu       # any ctest arguments replace the default label selection
set -euo pipefail
cd "$(dirname "$0")/.."
build=${MLTOOL_BUILD_DIR:-build}
scripts/setup.sh
scripts/check-format.sh
python3 scripts/check-function-length.py
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(-L 'unit|cli')
cd "$build"
ctest --output-on-failure -j "$(nproc)" "${args[@]}"
