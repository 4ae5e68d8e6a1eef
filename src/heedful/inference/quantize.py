"""Dynamic int8 quantization of a model's Linear layers, on the CPU (Translator.load)."""

from __future__ import annotations

import warnings

import torch
from torch import nn

QUANTIZE = ("int8",)  # Translator.load(quantize=...): dynamic int8 nn.Linear weights, CPU only


def check_quantize(quantize: str | None, device: str | torch.device = "cpu") -> None:
    """Refuse a quantization we do not offer, or one asked for off the CPU (both engines)."""
    if quantize is not None and quantize not in QUANTIZE:
        raise ValueError(f"unknown quantization {quantize!r}; choose one of {', '.join(QUANTIZE)}")
    if quantize is not None and torch.device(device).type != "cpu":
        raise ValueError(
            f"--quantize {quantize} runs on the CPU only (torch's dynamic quantization has "
            f"no {torch.device(device).type} kernels); load on device 'cpu' or drop it"
        )


def quantize_int8(model: nn.Module) -> nn.Module:
    """The model with its nn.Linear layers as dynamically quantized int8 ones (CPU only).

    quantize_dynamic (Jacob et al. 2018's scheme, applied after training) stores each Linear's
    weights as int8 with one scale per output row and quantizes the activations per batch on
    the fly, so a matrix product runs in int8 and is rescaled to float: the weights shrink 4x
    and the Linear-heavy decoding loop speeds up on CPU. Embeddings, norms and attention stay
    float32. A Linear whose `.weight` is read directly (Luong's concat score slices W_a) is
    kept float, since a quantized Linear has no `.weight` tensor to slice.
    """
    names = {
        name
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and not _weight_is_read(model, name)
    }
    with warnings.catch_warnings():
        # torch 2.13 marks torch.ao.quantization and quantize_per_tensor as deprecated in favour
        # of the separate torchao package; the eager API still works, so only these two
        # warnings are silenced, and only for this call.
        warnings.filterwarnings("ignore", "torch.ao.quantization is deprecated", DeprecationWarning)
        warnings.filterwarnings("ignore", "torch.quantize_per_tensor", UserWarning)
        # One scale per output row (per channel), not one per matrix: on a small model the
        # per-matrix scale moved a float32 decision that led by 2.3 nats, per row 0.7 at most
        # (tests/test_quantize.py); on Multi30k both stay within 0.5 BLEU of float32 and per
        # row runs at 0.94-1.04x the per-matrix speed (benchmarks/int8_per_cpu.py).
        # Activations are quantized to 7 bits on every CPU (reduce_range), so AVX2's 16-bit
        # sums cannot saturate (heedful.cpu).
        qconfig = torch.ao.quantization.per_channel_dynamic_qconfig
        return torch.ao.quantization.quantize_dynamic(
            model, dict.fromkeys(names, qconfig), dtype=torch.qint8
        )


def _weight_is_read(model: nn.Module, name: str) -> bool:
    """Whether Linear `name`'s parent reads its .weight itself, as its `weights_read` declares
    (an attention score of rnn_attention.py: Luong's concat slices W_a)."""
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    return child in getattr(parent, "weights_read", ())
