#!/usr/bin/env python3
"""The small TorchScript CNN of bench/run-extract-slides.sh and bench/run-trident.sh.

    small_cnn.py OUT.pt

A 4x4 convolution with stride 4 (a patchify stem, 3 -> 16 channels), then 3x3 convolutions
with stride 2 (16 -> 32 -> 64 -> 128), ReLU after each, a global average pool: 128 features a
tile, about 35 MFLOP for a 256-px tile (a ResNet-50 takes 4 GFLOP at 224 px), so the
pipelines around it (reading, decoding, batching) are what a benchmark with it measures.
Weights are torch's default initialisation under seed 0; saved with torch.jit.script, so
`mltool extract --model OUT.pt` and TRIDENT (torch.jit.load in its own venv) run the same
module. Written aside and renamed into place.
"""
import os
import sys

import torch
import torch.nn as nn


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        chans = [16, 32, 64, 128]
        layers = [nn.Conv2d(3, 16, 4, stride=4), nn.ReLU(inplace=True)]
        for cin, cout in zip(chans, chans[1:]):
            layers += [nn.Conv2d(cin, cout, 3, stride=2, padding=1), nn.ReLU(inplace=True)]
        self.features = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x).mean(dim=(2, 3))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    torch.manual_seed(0)
    module = torch.jit.script(SmallCNN().eval())
    tmp = f"{out}.partial"
    module.save(tmp)
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
