"""A model's safetensors weights, checked against the model before and after they load.

The header is compared tensor by tensor with a model built on the meta device before any
memory is spent on the weights; loading refuses anything but safetensors (never a pickle) and
weights that are not finite. checkpoint.load_model_dir reads a model directory through these.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from heedful.io import CheckpointError, regular_file

MAX_COMPUTED_BYTES = 256 << 20  # buffers computed on loading (the sinusoidal table)


def check_weights(model: nn.Module, path: Path) -> None:
    """Compare every tensor `model` holds with the safetensors header of `path`: names, shapes
    and dtypes. Reads the header only; given a model built on the meta device, a config.json
    that describes a huge model fails here, naming a tensor, before any memory is allocated.
    """
    from safetensors import SafetensorError, safe_open

    regular_file(path)
    try:
        with safe_open(str(path), framework="pt") as f:  # validates the header and the offsets
            header = {
                name: (f.get_slice(name).get_shape(), f.get_slice(name).get_dtype())
                for name in f.keys()
            }
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(
            f"{path}: not a valid safetensors file ({error}); refusing to load"
        ) from None
    expected = model.state_dict(keep_vars=True)
    aliases: dict[int, list[str]] = {}  # tied weights: save_model writes one name of each
    for name, tensor in expected.items():
        aliases.setdefault(id(tensor), []).append(name)
    for name, tensor in expected.items():  # shapes first: they say which sizes disagree
        want = (list(tensor.shape), _SAFETENSORS_DTYPES.get(tensor.dtype, str(tensor.dtype)))
        if name in header and (list(header[name][0]), header[name][1]) != want:
            shape, dtype = header[name]
            raise CheckpointError(
                f"{path}: tensor {name} is {dtype} {list(shape)} in the file, but config.json "
                f"describes {want[1]} {want[0]}; the weights and config.json do not belong "
                "together"
            )
    missing = [names[0] for names in aliases.values() if not any(n in header for n in names)]
    unexpected = sorted(set(header) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{path}: weights do not match the model config.json describes (missing "
            f"{sorted(missing)[:5]}, unexpected {unexpected[:5]})"
        )


_SAFETENSORS_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
                       torch.int64: "I64"}  # I64: BatchNorm's num_batches_tracked  # fmt: skip


def check_computed_buffers(model: nn.Module, config_path: Path) -> None:
    """Buffers the weights file does not hold (the sinusoidal table) are computed on loading:
    their size comes from config.json alone, so a checked header does not bound it."""
    saved = set(model.state_dict())
    for name, buffer in model.named_buffers():
        size = buffer.numel() * buffer.element_size()
        if name not in saved and size > MAX_COMPUTED_BYTES:
            raise CheckpointError(
                f"{config_path}: the model it describes computes {name} of shape "
                f"{list(buffer.shape)} on loading ({size / 2**30:.1f} GiB, more than "
                f"{MAX_COMPUTED_BYTES >> 20} MiB): check model.max_positions and model.d_model"
            )


def load_weights(model: nn.Module, path: Path) -> None:
    """Load safetensors weights into `model`; anything else (a pickle, say) is refused unread.

    NaN or infinite weights are refused too, naming the tensor: such a model (a diverged
    training run) translates every sentence into garbage without an error.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_model

    regular_file(path)
    try:
        missing, unexpected = load_model(model, str(path), strict=False)
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(
            f"{path}: not a valid safetensors file ({error}); refusing to load"
        ) from None
    if missing or unexpected:
        raise CheckpointError(
            f"{path}: weights do not match the model (missing {sorted(missing)[:5]}, "
            f"unexpected {sorted(unexpected)[:5]})"
        )
    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            count = int((~torch.isfinite(tensor)).sum())
            raise CheckpointError(
                f"{path}: tensor {name} holds {count} NaN or infinite values; refusing to load "
                "weights that cannot translate (did training diverge?)"
            )
