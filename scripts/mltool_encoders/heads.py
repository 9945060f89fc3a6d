"""The model cards' inference forwards around a bare model (whose state dict has the hub file's
key names): which tokens a card keeps, how it pools, what it concatenates."""
import torch
import torch.nn as nn


class TimmOut(nn.Module):
    """model(x) as it is: timm models built with num_classes=0 and the card's global_pool
    (the class token after the final norm, or an average) return N x D."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)


class ClsToken(nn.Module):
    """The class token of a timm model built with global_pool='' (tokens out): out[:, 0]."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)[:, 0]


class ClsMeanTokens(nn.Module):
    """Virchow's and Virchow2's output: cat(class token, mean of the patch tokens), the patch
    tokens being those after the `skip` prefix tokens (class token, registers)."""

    def __init__(self, model, skip):
        super().__init__()
        self.model = model
        self.skip = skip

    def forward(self, x):
        out = self.model(x)
        return torch.cat([out[:, 0], out[:, self.skip:].mean(1)], dim=-1)


class HfCls(nn.Module):
    """transformers ViTModel / Dinov2Model: last_hidden_state[:, 0] (Phikon, Phikon-v2)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(pixel_values=x).last_hidden_state[:, 0]


class HfClsMean(nn.Module):
    """Midnight's card: cat(last_hidden_state[:, 0], last_hidden_state[:, 1:].mean(1))."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        out = self.model(pixel_values=x).last_hidden_state
        return torch.cat([out[:, 0], out[:, 1:].mean(1)], dim=-1)


class ConchImage(nn.Module):
    """CONCH v1: model.encode_image(x, proj_contrast=False, normalize=False) (the attention-
    pooled image embedding before the contrastive projection), as TRIDENT uses it."""

    def __init__(self, model):
        super().__init__()
        self.visual = model.visual

    def forward(self, x):
        return self.visual.forward_no_head(x, normalize=False)


class ResNetTrunc(nn.Module):
    """CLAM's resnet50_trunc: a ResNet-50 up to layer3, adaptive average pool -> N x 1024."""

    def __init__(self, model):
        super().__init__()
        self.stem = nn.Sequential(model.conv1, model.bn1, model.act1, model.maxpool)
        self.layers = nn.Sequential(model.layer1, model.layer2, model.layer3)
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        return self.pool(self.layers(self.stem(x))).flatten(1)
