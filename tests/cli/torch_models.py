"""PyTorch models the extract tests share (extract_test.py, oom_retry_test.py,
tests/gpu/extract_gpu_test.py): they save them as TorchScript for mltool and run them as the
reference. Not in cli_common, which the tests without torch import."""
import torch.nn as nn
import torch.nn.functional as F


class Small(nn.Module):
    """conv(3→8, 3×3) + ReLU + conv(8→8, stride 2) + ReLU + avg pool + linear → 16."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.fc = nn.Linear(8, 16)

    def forward(self, x):
        x = F.relu(self.c1(x))
        x = F.relu(self.c2(x))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


class Linear1(nn.Module):
    """A convolution, then a Linear layer: MKL's sgemm, whose bits for a row can depend on
    the batch it is in, the row's place in it and the threads."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Conv2d(3, 24, 3, padding=1)
        self.fc = nn.Linear(24, 40)

    def forward(self, x):
        return self.fc(F.relu(self.inp(x)).mean((2, 3)))
