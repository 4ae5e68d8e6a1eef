"""A frozen image encoder (model.encoder.freeze): which part is frozen, the module that computes
only that part (what data/features.py caches), and a model that reads the cached part in place
of pixels (data.source.feature_cache).

What is frozen is the trunk: the layers from the pixels to the region grid, whose output
(B, C, gh, gw) is a function of the image alone once they stop learning. For a CNN encoder
that is its conv blocks (fed the image and, with model.encoder.coords, its coordinate
channels); for a torchvision backbone, its stages up to the last feature map. What comes after
stays trainable: the projection of each cell to D, the 2-D positions added to it (a fixed
table) and a CNN's encoder layers over the cells. So a frozen pretrained backbone still learns
*how its regions are read*, as Show, Attend and Tell trains over a fixed VGG (Xu et al. 2015,
§4.3). A ViT has no such trunk: its patch embedding already is its projection to D.

Frozen means: no gradient (requires_grad False, so the optimizer never moves a trunk
parameter: AdamW skips, weight decay included, every parameter without a gradient) and eval
mode whatever the model's mode (a pretrained backbone's batch-norm statistics stay its own
and are not re-estimated from caption batches; dropout in a trunk stays off).

Shapes: B batch, C the trunk's channels, gh×gw its grid, S = gh·gw cells.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from heedful.models.vision import BackboneEncoder, CNNEncoder, coordinate_channels


def trunk_of(encoder: nn.Module) -> nn.Module:
    """The part of an image encoder that freezing stops: a CNN's conv blocks, a backbone's
    stages. A ViT has none (its patch embedding is its projection to D)."""
    if isinstance(encoder, CNNEncoder):
        return encoder.features
    if isinstance(encoder, BackboneEncoder):
        return encoder.trunk
    raise ValueError(
        f"{type(encoder).__name__} has no trunk to freeze: model.encoder.freeze takes "
        "model.encoder.kind cnn or torchvision:<name>"
    )


def _stay_in_eval(module: nn.Module, args) -> None:
    """Forward pre-hook: the trunk runs in eval mode even while the model trains."""
    module.eval()


def freeze_trunk(encoder: nn.Module) -> nn.Module:
    """Freeze `encoder`'s trunk in place (no gradients, always eval mode); returns the trunk."""
    trunk = trunk_of(encoder)
    trunk.requires_grad_(False)
    if not getattr(trunk, "heedful_frozen", False):  # one hook, however often it is called
        trunk.register_forward_pre_hook(_stay_in_eval)
        trunk.heedful_frozen = True
    return trunk


class Trunk(nn.Module):
    """An encoder's trunk alone: images (B, 3, H, W) -> cells (B, S, C), row-major as the
    encoder flattens them; the encoder function data/features.py caches. It holds the
    encoder's own modules (no copy), so its cache key is that of the encoder's trunk weights."""

    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.body = trunk_of(encoder)
        self.coords = bool(getattr(encoder, "coords", False))  # a CNN's CoordConv channels

    def extra_repr(self) -> str:
        return f"coords={self.coords}"  # part of the cache key: repr(encoder)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if self.coords:  # as CNNEncoder.forward: the channels go in with the pixels
            images = torch.cat([images, coordinate_channels(images)], 1)  # (B, 5, H, W)
        return self.body(images).flatten(2).transpose(1, 2)  # (B, C, gh, gw) -> (B, S, C)


def cells_to_map(cells: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """(S, C) cached cells of one image -> (C, gh, gw), the trunk's output as the encoder sees
    it, so that the encoder's own flattening gives the same (S, C) back."""
    return cells.transpose(0, 1).reshape(cells.size(1), *grid)


def _unchanged(feature_map: torch.Tensor) -> torch.Tensor:
    return feature_map


@contextmanager
def reading_cells(model: nn.Module) -> Iterator[nn.Module]:
    """Inside, `model` takes its trunk's output (B, C, gh, gw) where it takes images: the trunk
    (and a CNN's coordinate channels, its input) is passed over, and everything after it runs
    as ever, the very code of the encoder's forward. The model's modules and state dict do not
    change, so checkpoints written inside hold the whole model, which reads images again.

    How: an instance attribute `forward` shadows the trunk's class method (nn.Module calls
    self.forward), removed on the way out.
    """
    encoder = model.encoder  # a captioner's: pixels in
    trunk = trunk_of(encoder)
    coords = getattr(encoder, "coords", None)
    trunk.forward = _unchanged
    if coords is not None:
        encoder.coords = False
    try:
        yield model
    finally:
        del trunk.forward
        if coords is not None:
            encoder.coords = coords
