"""Attention over images: encoders that turn a picture into a sequence of region vectors, the
memory the text models' own decoders read (a captioner is EncoderDecoder(pixel encoder,
decoder), built by build.py).

Show, Attend and Tell (Xu et al. 2015) captions an image with the RNN decoder of Bahdanau et al.
2014 attending over the cells of a CNN's last feature map instead of over source words; the
Vision Transformer (Dosovitskiy et al. 2021) cuts the image into patches and feeds them, with
positions, to the Transformer encoder. Either way the decoder sees what it sees for text: a
Memory of S vectors with a mask, here all true (no region is padding), and the grid.

Regions lie on a gh×gw grid and are flattened row-major: region s = i·gw + j covers image rows
[i·H/gh, (i+1)·H/gh) and columns [j·W/gw, (j+1)·W/gw).

Shapes: B batch, C channels, H×W image, gh×gw grid, S = gh·gw regions, D region width (the
Transformer's d_model, the RNN's hidden size N), T target length, L layers, H heads.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

from heedful.layers.dropout import Dropout
from heedful.layers.positional import sinusoidal_encoding
from heedful.models.base import Memory
from heedful.models.transformer import EncoderLayer, run_encoder_layers


class VisionError(ValueError):
    """An image encoder that cannot be made: torchvision missing or broken, an unknown
    backbone, a weights file that does not fit it."""


def sinusoidal_encoding_2d(
    grid_h: int, grid_w: int, d_model: int, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """(gh·gw, D): the first D/2 dimensions encode the row i, the other D/2 the column j, each
    the 1-D table of Vaswani et al. 2017, §3.5 (as in MAE, He et al. 2022), row-major."""
    if d_model % 2:
        raise ValueError(
            f"2-D positions split d_model in two halves: it must be even, got {d_model}"
        )
    half = d_model // 2
    rows = sinusoidal_encoding(grid_h, half, torch.float64)  # (gh, D/2)
    cols = sinusoidal_encoding(grid_w, half, torch.float64)  # (gw, D/2)
    table = torch.cat(
        [rows[:, None].expand(grid_h, grid_w, half), cols[None].expand(grid_h, grid_w, half)], -1
    )  # (gh, gw, D)
    return table.reshape(grid_h * grid_w, d_model).to(dtype)


def regions(states: torch.Tensor, grid, self_attention: torch.Tensor | None = None) -> Memory:
    """A pixel encoder's output as every decoder reads it: states (B, S, D) on the grid
    (gh, gw), the mask (B, 1, S) all true (every region may be attended to), no source ids and
    no final state (an RNN decoder starts from the mean region), and the encoder's own
    self-attention (B, L, H, S, S) when asked for and it has one."""
    mask = torch.ones(states.size(0), 1, states.size(1), dtype=torch.bool, device=states.device)
    return Memory(states, mask, self_attention=self_attention, grid=grid)


def no_length(images: torch.Tensor) -> torch.Tensor:
    """(B,) zeros: a picture has no length for an output limit to scale with (its limit is
    the offset alone); every pixel encoder's source_lengths."""
    return torch.zeros(images.size(0), dtype=torch.long, device=images.device)


def _to_regions(feature_map: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
    """(B, C, gh, gw) -> (B, S, C) row-major, and the grid."""
    grid = (feature_map.size(2), feature_map.size(3))
    return feature_map.flatten(2).transpose(1, 2), grid


class CNNEncoder(nn.Module):
    """A few conv blocks, each conv 3×3 → GroupNorm → ReLU → max-pool 2×2, halving the image;
    the last feature map is the grid, each cell projected to D with 2-D positions added, then
    optionally `num_layers` of the Transformer's EncoderLayers over the cells.

    GroupNorm (Wu & He 2018) rather than BatchNorm: a region's vector then does not depend on
    the other images of its batch, so a caption is the same searched alone or in a batch.
    Positions are added because both decoders see the regions as a set: without them "left of"
    could only be read from the zero padding at the borders.

    Why the two options: a cell of the last map sees less than half the canvas, so no region
    vector holds two shapes, and a decoder that attends to one shape at a time must compare
    positions across steps to tell "left of" from "above". `coords` concatenates the pixel's
    column and row (x, y in [-1, 1]) to the image as two more input channels (CoordConv, Liu et
    al. 2018), so features carry absolute position before the nonlinearities; the encoder
    layers let every cell attend to every other (36 tokens on a 48-pixel scene: cheap), so a
    shape's vector can say where the other shapes lie relative to it.
    """

    def __init__(
        self,
        d_model: int,
        channels: int = 32,
        blocks: int = 3,
        coords: bool = False,
        num_layers: int = 0,
        num_heads: int = 4,
        d_ff: int | None = None,
    ):
        super().__init__()
        layers, c_in = [], 3 + 2 * coords
        for b in range(blocks):
            c_out = channels * 2**b
            layers += [
                nn.Conv2d(c_in, c_out, 3, padding=1),
                nn.GroupNorm(min(8, c_out), c_out),
                nn.ReLU(),
                nn.MaxPool2d(2),
            ]
            c_in = c_out
        self.blocks, self.coords = blocks, coords
        self.features = nn.Sequential(*layers)
        self.project = nn.Linear(c_in, d_model)
        self.d_model = d_model
        stack = ViTEncoder.stack(d_model, num_layers, num_heads, d_ff or 4 * d_model)
        self.layers = stack if num_layers else nn.ModuleList()  # no final LayerNorm alone

    def grid(self, image_size: int) -> tuple[int, int]:
        side = image_size
        for _ in range(self.blocks):
            side //= 2  # each max-pool floors
        return side, side

    source_lengths = staticmethod(no_length)

    def forward(self, images: torch.Tensor, need_weights: bool = False) -> Memory:
        """images (B, 3, H, W) -> regions (B, S, D), with self-attention (B, L, H, S, S) when
        it has encoder layers and need_weights"""
        if self.coords:
            images = torch.cat([images, coordinate_channels(images)], 1)  # (B, 5, H, W)
        cells, grid = _to_regions(self.features(images))  # (B, S, C)
        pe = sinusoidal_encoding_2d(*grid, self.d_model).to(cells.device, cells.dtype)
        x = self.project(cells) + pe  # (B, S, D)
        x, weights = ViTEncoder.run(self.layers, x, need_weights)
        return regions(x, grid, weights)


def coordinate_channels(images: torch.Tensor) -> torch.Tensor:
    """(B, 2, H, W): channel 0 the pixel centre's column x, channel 1 its row y, each mapped
    linearly from the image's edges to [-1, 1] (x = (2j + 1)/W − 1)."""
    b, _, h, w = images.shape
    x = (2 * torch.arange(w, dtype=images.dtype, device=images.device) + 1) / w - 1  # (W,)
    y = (2 * torch.arange(h, dtype=images.dtype, device=images.device) + 1) / h - 1  # (H,)
    planes = torch.stack([x[None, :].expand(h, w), y[:, None].expand(h, w)])  # (2, H, W)
    return planes[None].expand(b, 2, h, w)


class ViTEncoder(nn.Module):
    """Patches of P×P pixels embedded by one conv of stride P (a linear map of each patch,
    Dosovitskiy et al. 2021, §3.1), positions added, then the Transformer's own EncoderLayers
    over all patches (mask all true)."""

    def __init__(
        self,
        image_size: int,
        patch_size: int,
        d_model: int,
        num_heads: int,
        num_layers: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_first: bool = True,
        positional: str = "sinusoidal",
        attention_dropout: float = 0.0,
    ):
        super().__init__()
        self.patch_size, self.d_model = patch_size, d_model
        self.embed = nn.Conv2d(3, d_model, patch_size, stride=patch_size)
        side = image_size // patch_size
        if positional == "learned":
            self.positions = nn.Parameter(torch.randn(side * side, d_model) * 0.02)
        else:  # computed, not saved: a function of the grid alone
            table = sinusoidal_encoding_2d(side, side, d_model)
            self.register_buffer("positions", table, persistent=False)
        self.dropout = Dropout(dropout)
        self.layers = self.stack(
            d_model, num_layers, num_heads, d_ff, dropout, norm_first, attention_dropout
        )

    @staticmethod
    def stack(
        d_model, num_layers, num_heads, d_ff, dropout=0.0, norm_first=True, attention_dropout=0.0
    ) -> nn.ModuleList:
        """The Transformer's own EncoderLayers; a pre-norm stack ends with a LayerNorm."""
        layer = (d_model, num_heads, d_ff, dropout, norm_first, attention_dropout)
        layers = [EncoderLayer(*layer) for _ in range(num_layers)]
        return nn.ModuleList(layers + ([nn.LayerNorm(d_model)] if norm_first else []))

    @staticmethod
    def run(layers: nn.ModuleList, x: torch.Tensor, need_weights: bool):
        """x (B, S, D) through the stack (and its final LayerNorm), every region attending to
        all -> x, weights (B, L, H, S, S) or None."""
        mask = torch.ones(x.size(0), 1, x.size(1), dtype=torch.bool, device=x.device)  # (B, 1, S)
        norm = len(layers) > 0 and isinstance(layers[-1], nn.LayerNorm)
        x, weights = run_encoder_layers(layers[:-1] if norm else layers, x, mask, need_weights)
        return (layers[-1](x) if norm else x), weights

    def grid(self, image_size: int) -> tuple[int, int]:
        return image_size // self.patch_size, image_size // self.patch_size

    source_lengths = staticmethod(no_length)

    def forward(self, images: torch.Tensor, need_weights: bool = False) -> Memory:
        """images (B, 3, H, W) -> regions (B, S, D), with self-attention (B, L, H, S, S)"""
        x, grid = _to_regions(self.embed(images))  # (B, S, D)
        if x.size(1) != self.positions.size(0):
            raise ValueError(
                f"images of {images.size(2)}×{images.size(3)} pixels make a {grid[0]}×{grid[1]} "
                f"grid of patches, but this encoder has positions for {self.positions.size(0)}"
            )
        x = self.dropout(x + self.positions.to(x.dtype))
        x, weights = self.run(self.layers, x, need_weights)
        return regions(x, grid, weights)


class BackboneEncoder(nn.Module):
    """Any convolutional trunk, images (B, 3, H, W) -> feature map (B, C, h, w), whose last map
    is the grid, each cell projected to D with 2-D positions added: how a torchvision backbone
    (torchvision_trunk) becomes an encoder."""

    def __init__(self, trunk: nn.Module, channels: int, d_model: int):
        super().__init__()
        self.trunk, self.d_model = trunk, d_model
        self.project = nn.Linear(channels, d_model)

    def grid(self, image_size: int) -> tuple[int, int]:
        """Run a shapeless (meta) image through the trunk: strides vary between backbones."""
        probe = torch.empty(1, 3, image_size, image_size, device="meta")
        shape = _meta_shape(self.trunk, probe)  # (1, C, h, w)
        return shape[2], shape[3]

    source_lengths = staticmethod(no_length)

    def forward(self, images: torch.Tensor, need_weights: bool = False) -> Memory:
        """images (B, 3, H, W) -> regions (B, S, D); a trunk has no attention to return"""
        cells, grid = _to_regions(self.trunk(images))  # (B, S, C)
        pe = sinusoidal_encoding_2d(*grid, self.d_model).to(cells.device, cells.dtype)
        return regions(self.project(cells) + pe, grid)


def _meta_shape(module: nn.Module, probe: torch.Tensor) -> tuple[int, ...]:
    """The output shape of `module` for `probe`, computed on a meta copy (no memory, no FLOPs)."""
    import copy

    return tuple(copy.deepcopy(module).to("meta")(probe).shape)


def torchvision_trunk(name: str) -> tuple[nn.Module, int]:
    """torchvision.models.<name> without its classifier: (trunk, channels of its last map).

    Random weights; the caller loads a local file (pretrained.py), never a download.
    """
    try:
        import torchvision.models as models
    except (ImportError, RuntimeError, OSError) as error:  # a CUDA build beside a CPU torch
        raise VisionError(
            f"model.encoder torchvision:{name} needs torchvision matching torch "
            f"{torch.__version__} (pip install 'heedful[vision]'); importing it failed: {error}"
        ) from None
    if name.startswith("_") or not callable(getattr(models, name, None)):
        raise VisionError(f"model.encoder: torchvision has no model named {name!r}")
    net = models.__dict__[name](weights=None)
    if hasattr(net, "fc") and hasattr(net, "avgpool"):  # ResNet, ResNeXt, RegNet
        # the children before avgpool and fc, under their own names (conv1, layer1, ...), so
        # that the trunk's weights have the names of torchvision's files
        stages = [(n, m) for n, m in net.named_children() if n not in ("avgpool", "fc")]
        return nn.Sequential(OrderedDict(stages)), net.fc.in_features
    if hasattr(net, "features"):  # VGG, MobileNet, EfficientNet, DenseNet, ConvNeXt
        sizes = [m.out_channels for m in net.features.modules() if isinstance(m, nn.Conv2d)]
        norms = [m.num_features for m in net.features.modules() if hasattr(m, "num_features")]
        return net.features, (norms or sizes)[-1]
    raise VisionError(
        f"model.encoder torchvision:{name}: heedful knows no feature map of it (it reads "
        "ResNet-like models' last stage and other models' .features)"
    )
