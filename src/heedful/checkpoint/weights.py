"""A model's safetensors weights, checked against the model before and after they load.

The header is compared tensor by tensor with a model built on the meta device before any
memory is spent on the weights; loading refuses anything but safetensors (never a pickle) and
weights that are not finite. checkpoint.load_model_dir reads a model directory through these.
Both read a file's tensor names through names.py, so files written under earlier names load.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from heedful.checkpoint.names import current_names
from heedful.io import CheckpointError, regular_file

MAX_COMPUTED_BYTES = 256 << 20  # buffers computed on loading (the sinusoidal table)


def weights_header(path: Path) -> dict[str, tuple[list[int], str]]:
    """{tensor name as the file has it: (shape, dtype)}, from the safetensors header alone."""
    from safetensors import SafetensorError, safe_open

    regular_file(path)
    try:
        with safe_open(str(path), framework="pt") as f:  # validates the header and the offsets
            return {
                name: (f.get_slice(name).get_shape(), f.get_slice(name).get_dtype())
                for name in f.keys()
            }
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(
            f"{path}: not a valid safetensors file ({error}); refusing to load"
        ) from None


def _aliases(expected: dict[str, torch.Tensor]) -> dict[int, list[str]]:
    """Tied weights: every name of each tensor the model holds (save_model writes one)."""
    aliases: dict[int, list[str]] = {}
    for name, tensor in expected.items():
        aliases.setdefault(id(tensor), []).append(name)
    return aliases


def check_weights(model: nn.Module, path: Path) -> None:
    """Compare every tensor `model` holds with the safetensors header of `path`: names, shapes
    and dtypes. Reads the header only; given a model built on the meta device, a config.json
    that describes a huge model fails here, naming a tensor, before any memory is allocated.
    """
    header = weights_header(path)
    named = current_names(header, path)  # {file's name: today's}
    header = {named[name]: (entry, name) for name, entry in header.items()}
    expected = model.state_dict(keep_vars=True)
    for name, tensor in expected.items():  # shapes first: they say which sizes disagree
        want = (list(tensor.shape), _SAFETENSORS_DTYPES.get(tensor.dtype, str(tensor.dtype)))
        if name in header and (list(header[name][0][0]), header[name][0][1]) != want:
            (shape, dtype), in_file = header[name]
            called = name if in_file == name else f"{in_file} (today {name})"
            raise CheckpointError(
                f"{path}: tensor {called} is {dtype} {list(shape)} in the file, but config.json "
                f"describes {want[1]} {want[0]}; the weights and config.json do not belong "
                "together"
            )
    aliases = _aliases(expected)
    missing = [names[0] for names in aliases.values() if not any(n in header for n in names)]
    unexpected = sorted(header[name][1] for name in set(header) - set(expected))
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
    """Load safetensors weights into `model`, under today's names; anything else (a pickle,
    say) is refused unread.

    NaN or infinite weights are refused too, naming the tensor: such a model (a diverged
    training run) translates every sentence into garbage without an error.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    regular_file(path)
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(
            f"{path}: not a valid safetensors file ({error}); refusing to load"
        ) from None
    named = current_names(tensors, path)
    tensors = {named[name]: tensor for name, tensor in tensors.items()}
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    aliases = _aliases(model.state_dict(keep_vars=True))
    tied = {name: names for names in aliases.values() for name in names}
    missing = [name for name in missing if not any(n in tensors for n in tied[name])]
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
