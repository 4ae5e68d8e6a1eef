"""Several nn.Linear layers that read one input, multiplied as one: y = x [W_1; W_2; ..]ᵀ + b.

Decoding multiplies thin inputs (a 64-sentence batch is a (64, 256) matrix per step), where
each call costs about as much as its arithmetic: the Q, K and V projections of self-attention
as one product instead of three saves two calls per layer and step. Training stacks the
weights afresh at every call with torch.cat, whose backward hands each weight its own slice
of the gradient (3-4% faster steps on the Multi30k Transformer: benchmarks/profile_training.py).

Without autograd the stacked copy is kept on the module that owns the layers as a plain
attribute (not a parameter or buffer, so state dicts and parameter names stay as they are),
under a key of the weights' addresses and in-place versions; it holds their storages, so no
address is reused while the key is kept. load_state_dict, a new Parameter or .to() thus make a
new copy. The key alone is not enough: a fused optimizer (Adam(fused=True)) and writes through
`.data` change weights in place without bumping their versions, so every encode drops the
copies first (`forget_stacked`): a search's weights are fixed from its encode on, and the
copy is made once per search, not once per step.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.modules import module as hooks


def stacked_weights(owner: nn.Module, parts: dict[str, nn.Module]):
    """(weight (n·D_out, D_in), bias or None) of owner's Linear layers `parts` stacked in their
    order, the missing biases as zeros, kept on `owner` under the parts' names (owner declares
    them: MultiHeadAttention.parts); None when a layer is not a plain nn.Linear (int8 quantized
    layers multiply on their own) or has forward hooks (the viewer records Q, K and V with
    them), since one product would skip the layers' own calls."""
    names, layers = tuple(parts), list(parts.values())
    if any(type(x) is not nn.Linear or _hooked(x) for x in layers):
        return None
    if torch.is_grad_enabled():  # training: a fresh, differentiable stack every call
        return _stack(layers)
    tensors = [t for layer in layers for t in (layer.weight, layer.bias) if t is not None]
    key = [(t.data_ptr(), t._version, t.dtype, t.device, t.shape) for t in tensors]
    cache = owner.__dict__.setdefault("_stacked_weights", {})
    if names not in cache or cache[names][0] != key:
        held = [t.detach() for t in tensors]  # keeps the storages, hence the addresses
        cache[names] = (key, _stack(layers), held)
    return cache[names][1]


def forget_stacked(model: nn.Module) -> None:
    """Drop every stacked copy under `model` (the next call stacks the weights again)."""
    for module in model.modules():
        module.__dict__.pop("_stacked_weights", None)


def _stack(layers: list[nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    weight = torch.cat([layer.weight for layer in layers])  # (n·D_out, D_in)
    if all(layer.bias is None for layer in layers):
        return weight, None
    zeros = layers[0].weight.new_zeros  # the key projection has no bias
    return weight, torch.cat([zeros(x.out_features) if x.bias is None else x.bias for x in layers])


def _hooked(module: nn.Module) -> bool:
    """Whether calling the module runs hooks that multiplying by its weight would skip."""
    return bool(
        module._forward_hooks
        or module._forward_pre_hooks
        or hooks._global_forward_hooks
        or hooks._global_forward_pre_hooks
    )
