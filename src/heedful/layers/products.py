"""The products of nn.Linear layers at inference: stacked, and packed for oneDNN on the CPU.

Stacked: several layers that read one input multiplied as one, y = x [W_1; W_2; ..]ᵀ + b.
Decoding multiplies thin inputs (a 64-sentence batch is a (64, 256) matrix per step), where
each call costs about as much as its arithmetic: the Q, K and V projections of self-attention
as one product instead of three saves two calls per layer and step. Training stacks the
weights afresh at every call with torch.cat, whose backward hands each weight its own slice
of the gradient (3-4% faster steps on the Multi30k Transformer: benchmarks/profile_training.py).

Packed: torch multiplies float32 through the BLAS it was built with (MKL on x86), which on
CPUs other than Intel's ran decoding's thin products at two thirds of the rate oneDNN reaches
with the weight reordered once into its own blocked layout (a 64 x 256 x 8,000 output layer
on an AMD EPYC: 76 against 108 GFLOP/s, 8 rows 51 against 99; benchmarks/decode_gemm.py).
CTranslate2 makes the same choice: MKL on Intel's CPUs, oneDNN elsewhere. On an AVX2-only
AMD CPU numpy's OpenBLAS ran them faster still, from a copy of the weight transposed once
(openblas.py), so `product_way` picks one of three per CPU. Packed products have no backward,
so only a product without autograd (search, a no_grad forward) takes them.

Without autograd the copies (stacked, packed) are kept for the module that owns the layers, in
a table beside it (not on it: a packed tensor can be neither copied nor saved, and state dicts
and parameter names stay as they are), under a key of the weights' addresses and in-place
versions; the entry holds the weights' storages, so no address is reused while it is kept.
load_state_dict, a new Parameter or .to() thus make new copies. The key alone is not enough:
a fused optimizer (Adam(fused=True)) and writes through `.data` change weights in place
without bumping their versions, so every encode drops the copies first (`forget_products`):
a search's weights are fixed from its encode on, and the copies are made once per search.
A model whose weights are fixed for good (`keep_products`: a Translator's model, loaded from
a directory) keeps them from one search to the next, until it is put in training mode.
"""

from __future__ import annotations

import functools
import os
import platform
import weakref

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as hooks

from heedful.cpu import cpu_flags, cpu_vendor
from heedful.layers import openblas

CHOICE = "HEEDFUL_CPU_PRODUCTS"  # onednn | openblas | blas: the user's over product_way's own
_copies: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # owner -> {names: entry}
_kept: weakref.WeakSet = weakref.WeakSet()  # models whose copies outlive a search
PACKED_ROWS = 64  # the row count oneDNN chooses the weight's layout for: a decoding batch
MOST_ROWS = 512  # packed products up to this many rows (beam 5 of 64 sentences: 320)
# Smaller weights keep the BLAS: a 256 x 256 product ran at the same rate packed (92 against
# 93 GFLOP/s at 64 rows, decode_gemm.py) and at 1 row took twice as long (24 against 11 µs),
# where 256 x 768 gained 1.19x and 256 x 8,000 1.34x in decoding's profile.
PACKED_MIN_WEIGHTS = 1 << 17
# OpenBLAS multiplies 2 to 8 rows slowly: the 256 x 8,000 output layer at 2-8 rows took 0.8-1.4
# ms on one thread of the Zen 3 EPYC, where oneDNN's packed copy took 0.29-0.61 (1 row: 0.19
# against 0.29). OpenBLAS's way sends such rows to oneDNN, unpadded (5 rows padded to 8: 0.78),
# at the cost of a second copy of the weights and a kernel per row count (decoding's peak memory
# +15-23 MiB for the recipe's Transformer). Beam 5 of one sentence at a time, 5 rows a step,
# ran 1.11-1.13x as fast, batches of 64 level (docs/benchmarks.md, "Session 34").
FEW_ROWS = 8


def product(owner: nn.Module, parts: dict[str, nn.Module], x: torch.Tensor, relu=False):
    """x [W_1; ..]ᵀ + b for owner's Linear layers `parts` in their order (the missing biases
    as zeros), through the copies kept for owner without autograd, then max(0, ·) with relu
    (in the same pass where packed); None where one product would skip a layer's own call
    (`stacked_weights`), for the caller to call the layers."""
    if torch.is_grad_enabled():
        stacked = stacked_weights(owner, parts)
        return None if stacked is None else _blas_product(x, *stacked, relu)
    if (entry := _entry(owner, parts)) is None:
        return None
    if not _may_pack(x, entry["stacked"][0]):
        return _blas_product(x, *entry["stacked"], relu)
    return _packed_product(entry, x, relu)


def _blas_product(x: torch.Tensor, weight, bias, relu: bool) -> torch.Tensor:
    """x Wᵀ + b through torch's own F.linear (autograd, autocast, other devices), then
    max(0, ·) with relu."""
    y = F.linear(x, weight, bias)
    return F.relu(y) if relu else y


class Product:
    """`product` of owner's Linear layers `parts` for the rest of a search, its checks made
    once: the layers are plain and unhooked, their copies made (`planned` makes one, or None).
    A search's weights are fixed from its encode on, so only what a call's input decides is
    left to decide per call: packed or the BLAS. Why: a decoding step of one sentence makes 19
    products of a few microseconds of arithmetic each, and `apply`'s checks and lookups took
    longer than the arithmetic (models/transformer_step.py)."""

    def __init__(self, entry: dict):
        self.entry = entry  # _copies' entry: the stacked weight and bias, and the packed copy
        self.weight, self.bias = entry["stacked"]
        self.packable = _packable(self.weight)
        # numpy's OpenBLAS for step_numpy.py, small weights included (`numpy`)
        self.openblas = _way_here() == "openblas" and _packable(self.weight, least=0)

    def __call__(self, x: torch.Tensor, relu: bool = False) -> torch.Tensor:
        """x [W_1; ..]ᵀ + b, then max(0, ·) with relu, as `product` computes it."""
        if self.packable and _input_fits(x):
            return _packed_product(self.entry, x, relu)
        return _blas_product(x, self.weight, self.bias, relu)

    def by_numpy(self, rows: int) -> bool:
        """Whether `numpy` multiplies `rows` rows by numpy's OpenBLAS (else through torch)."""
        return self.openblas and (rows == 1 or rows > FEW_ROWS) and _call_fits()

    def numpy(self, x, relu: bool = False):
        """`__call__` of numpy rows x (N, D_in) float32 -> (N, D_out), for models/step_numpy.py:
        numpy's OpenBLAS where OpenBLAS's way takes the rows (one, or more than FEW_ROWS),
        whatever the weight's size; else `__call__` through torch.

        Why the small weights too: at one row, numpy's OpenBLAS multiplied the 256 x 256
        weights of the Multi30k recipe's Transformer, nine a step, in 273 µs against 483 µs
        through torch's F.linear (one thread of the Zen 3 EPYC, 2026-12-07)."""
        if self.by_numpy(x.shape[0]):
            if self.entry["transposed"] is None:  # Wᵀ (D_in, D_out) and b, made once
                self.entry["transposed"] = openblas.operands(*self.entry["stacked"])
            return openblas.multiply(x, *self.entry["transposed"], relu)
        return self(torch.from_numpy(x), relu).numpy()


def planned(owner: nn.Module, parts: dict[str, nn.Module]) -> Product | None:
    """owner's layers `parts` as a Product, without autograd; None where `product` would give
    None (a layer not a plain nn.Linear, or hooked). Names as `apply` and `product` use them
    (attribute names), so that the three share one copy of the weights."""
    entry = None if torch.is_grad_enabled() else _entry(owner, parts)
    return None if entry is None else Product(entry)


def _packed_product(entry: dict, x: torch.Tensor, relu: bool):
    """`product` through a packed copy of entry's stacked weight (made on first use), once
    _may_pack has said yes: oneDNN's, rows padded to rows_bucket's count, or Wᵀ for OpenBLAS,
    whose way sends 2 to FEW_ROWS rows to oneDNN's copy unpadded."""
    rows = x.numel() // x.size(-1)
    if _way_here() != "openblas":
        return _onednn_product(entry, x, relu, rows_bucket(rows))
    if 1 < rows <= FEW_ROWS and _packing_ops():
        return _onednn_product(entry, x, relu, rows)
    if entry["transposed"] is None:  # Wᵀ (D_in, D_out), as OpenBLAS reads it, and b
        entry["transposed"] = openblas.operands(*entry["stacked"])
    return openblas.linear(x, *entry["transposed"], relu)


def _onednn_product(entry: dict, x: torch.Tensor, relu: bool, padded_rows: int):
    """x Wᵀ + b by oneDNN's packed copy of entry's weight, x's rows padded with zeros to
    `padded_rows` (whose products are dropped): oneDNN keeps a kernel for every row count."""
    weight, bias = entry["stacked"]
    if entry["packed"] is None:
        entry["packed"] = torch.ops.mkldnn._reorder_linear_weight(weight, PACKED_ROWS)
    post = "relu" if relu else "none"  # oneDNN's post-op, applied as each block is written
    rows, width = x.numel() // x.size(-1), x.size(-1)
    if padded_rows == rows:
        return torch.ops.mkldnn._linear_pointwise(x, entry["packed"], bias, post, [], "")
    padded = x.new_zeros(padded_rows, width)
    padded[:rows] = x.reshape(rows, width)
    y = torch.ops.mkldnn._linear_pointwise(padded, entry["packed"], bias, post, [], "")
    return y[:rows].view(*x.shape[:-1], y.size(-1))


def rows_bucket(rows: int) -> int:
    """The row count a packed product of `rows` rows runs at: the next power of two up to 8,
    multiple of 8 up to 64, multiple of 64 above (up to MOST_ROWS), 18 counts in all.

    oneDNN compiles a kernel for every row count it multiplies and keeps it, about 0.6 MiB each
    (in two caches of 1,024 entries: torch's ideep's and oneDNN's own), and decoding meets a
    row count for every number of unfinished sentences. Without buckets greedy decoding of 500
    Multi30k sentences peaked at 549 MiB (BLAS: 390) and beam 5 at 753 (552); with powers of
    two to 64 at 414 and 578 (2 threads on the Zen 4 EPYC, 2026-12-06). The padded rows cost
    their arithmetic (52 rows padded to 64: 23% more), so the steps below 64 are finer; a few
    rows are bound by reading the weight rather than by arithmetic, hence powers of two."""
    if rows <= 8:
        return 1 << (rows - 1).bit_length() if rows > 1 else rows
    step = 8 if rows <= PACKED_ROWS else PACKED_ROWS
    return -(-rows // step) * step


def apply(owner: nn.Module, name: str, x: torch.Tensor, relu=False) -> torch.Tensor:
    """owner's Linear layer `name` (an attribute of owner) applied to x, then max(0, ·) with
    relu, as `product` does it where it can, else by calling the layer."""
    layer = getattr(owner, name)
    if (
        type(layer) is nn.Linear  # int8 layers multiply on their own
        and not torch.is_grad_enabled()
        and _may_pack(x, layer.weight)
        and not _hooked(layer)
    ):  # the checks product() would make again: straight to the packed product
        return _packed_product(_entry(owner, {name: layer}), x, relu)  # made or checked
    return F.relu(layer(x)) if relu else layer(x)  # the layer's own call, as fast as before


def stacked_weights(owner: nn.Module, parts: dict[str, nn.Module]):
    """(weight (n·D_out, D_in), bias or None) of owner's Linear layers `parts` stacked in their
    order, the missing biases as zeros, kept for `owner` under the parts' names (owner declares
    them: MultiHeadAttention.parts); None when a layer is not a plain nn.Linear (int8 quantized
    layers multiply on their own) or has forward hooks (the viewer records Q, K and V with
    them), since one product would skip the layers' own calls."""
    if not torch.is_grad_enabled():
        entry = _entry(owner, parts)
        return None if entry is None else entry["stacked"]
    layers = list(parts.values())  # training: a fresh, differentiable stack every call
    return _stack(layers) if _plain(layers) else None


def _entry(owner: nn.Module, parts: dict[str, nn.Module]) -> dict | None:
    """The copies kept for owner's layers `parts` without autograd (made where missing or
    stale), None where stacked_weights says None. Callers use the entry itself, never a second
    lookup: a search side by side with another on a model not kept (cpu.in_streams) may drop
    owner's table at its own encode (forget_products) between the two, where the entry held
    stays whole (a KeyError in the demo's evaluation once encodes made plans too)."""
    names, layers = tuple(parts), list(parts.values())
    if not _plain(layers):
        return None
    tensors = [t for layer in layers for t in (layer.weight, layer.bias) if t is not None]
    key = [(t.data_ptr(), t._version, t.dtype, t.device, t.shape) for t in tensors]
    kept = _copies.setdefault(owner, {})
    entry = kept.get(names)
    if entry is None or entry["key"] != key:
        held = [t.detach() for t in tensors]  # keeps the storages, hence the addresses
        entry = kept[names] = {
            "key": key,
            "stacked": _stack(layers),
            "held": held,
            "packed": None,  # oneDNN's packed copy, made on first use
            "transposed": None,  # OpenBLAS's Wᵀ and b (numpy arrays), made on first use
        }
    return entry


def forget_products(model: nn.Module) -> None:
    """Drop every copy kept for `model`'s modules (the next call makes them again), unless
    `keep_products` fixed its weights."""
    if model not in _kept:
        for module in model.modules():
            _copies.pop(module, None)


def keep_products(model: nn.Module, keep: bool = True) -> None:
    """Whether the copies of `model` and its modules (an ensemble's members too) are kept from
    one search to the next: its weights will not change in place (a Translator's model).
    keep=False drops them, as training mode does. Reads HEEDFUL_CPU_PRODUCTS: a value it does
    not know is refused here, when a model is loaded, not in the middle of a search."""
    _way_here()
    for module in model.modules():
        if keep:
            _kept.add(module)
        else:
            _kept.discard(module)
            _copies.pop(module, None)


def _may_pack(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether this product goes through a packed copy of its weight: float32 on the CPU, a
    weight large enough to pay for the call's fixed costs, outside autocast (whose lower
    precision the packed product would skip), where `product_way` chose oneDNN, or OpenBLAS
    and torch runs this thread's operators on one thread (decoding's streams, `--threads 1`).
    OpenBLAS runs on one thread of its own (openblas.py): with more, its threads and torch's,
    which spin between operators, would share the cores (a single batch on two threads
    decoded 10x slower), so a single batch on several threads keeps the BLAS."""
    return _packable(weight) and _input_fits(x)


def _packable(weight: torch.Tensor, least: int | None = None) -> bool:
    """What `_may_pack` asks of the weight alone (fixed for a search: Product asks once);
    least: the fewest weights [PACKED_MIN_WEIGHTS] (Product.numpy's OpenBLAS takes all)."""
    return (
        _way_here() in ("onednn", "openblas")
        and weight.device.type == "cpu"
        and weight.dtype == torch.float32
        and weight.numel() >= (PACKED_MIN_WEIGHTS if least is None else least)
    )


def _input_fits(x: torch.Tensor) -> bool:
    """What `_may_pack` asks of this call: its input, and `_call_fits`."""
    return (
        x.device.type == "cpu"
        and x.dtype == torch.float32
        and x.numel() <= MOST_ROWS * x.size(-1)  # above: an encoder's batch, the BLAS
        and _call_fits()
    )


def _call_fits() -> bool:
    """What `_may_pack` asks of any call: the threads, autocast, oneDNN's switch."""
    return (
        (_way_here() == "onednn" or torch.get_num_threads() == 1)
        and not torch.is_autocast_enabled("cpu")
        and torch.backends.mkldnn.enabled
    )


def product_way(environ=None, vendor=None, machine=None, flags=None, openblas_ok=None) -> str:
    """Where float32 products without autograd go here: "onednn" (packed weights), "openblas"
    (numpy's, openblas.py) or "blas" (torch's own F.linear), as HEEDFUL_CPU_PRODUCTS says
    where it is set, else by the CPU. Intel's CPUs keep MKL, their vendor's own library (and
    CTranslate2's choice there): on an Intel Xeon with AVX-512 and AMX, one thread, oneDNN's
    way decoded batches of 64 0.94x as fast greedy and 0.98x at beam 5, OpenBLAS's 0.84x /
    0.94x (docs/benchmarks.md, "Session 37"). Other architectures keep their BLAS, not
    measured against the others. Other x86 CPUs take OpenBLAS where they lack AVX-512
    (measured on an AVX2-only AMD EPYC, Zen 3) and oneDNN where they have it (a Zen 4 EPYC);
    a way this process cannot take (a torch without oneDNN's operators, a numpy without
    OpenBLAS's per-thread count) falls back to the next, oneDNN, then the BLAS."""
    environ = os.environ if environ is None else environ
    choice = environ.get(CHOICE, "").strip().lower()
    if choice not in ("", "onednn", "openblas", "blas"):
        raise ValueError(
            f"{CHOICE}={environ[CHOICE]!r}: choose onednn, openblas or blas (unset: OpenBLAS "
            "on x86 CPUs other than Intel's without AVX-512, oneDNN on those with it, the BLAS "
            "elsewhere)"
        )
    if not choice:
        vendor = cpu_vendor() if vendor is None else vendor
        machine = platform.machine().lower() if machine is None else machine
        if machine not in ("x86_64", "amd64") or vendor in ("", "GenuineIntel"):
            return "blas"
        flags = cpu_flags() if flags is None else flags
        choice = "onednn" if "avx512f" in flags else "openblas"
    if choice == "openblas" and (openblas.available() if openblas_ok is None else openblas_ok):
        return "openblas"
    return "onednn" if choice != "blas" and _packing_ops() else "blas"


@functools.cache
def _packing_ops() -> bool:
    """Whether this torch has oneDNN and the operators that pack a weight and multiply by it."""
    ops = torch.ops.mkldnn
    return torch.backends.mkldnn.is_available() and all(
        hasattr(ops, name) for name in ("_reorder_linear_weight", "_linear_pointwise")
    )


@functools.cache
def _way_here() -> str:
    return product_way()


def _stack(layers: list[nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    if len(layers) == 1:
        return layers[0].weight, layers[0].bias
    weight = torch.cat([layer.weight for layer in layers])  # (n·D_out, D_in)
    if all(layer.bias is None for layer in layers):
        return weight, None
    zeros = layers[0].weight.new_zeros  # the key projection has no bias
    return weight, torch.cat([zeros(x.out_features) if x.bias is None else x.bias for x in layers])


def _plain(layers: list[nn.Module]) -> bool:
    """Whether one product can stand for the layers' calls: plain nn.Linear layers (int8
    quantized layers multiply on their own), none hooked."""
    return all(type(x) is nn.Linear and not _hooked(x) for x in layers)


def _hooked(module: nn.Module) -> bool:
    """Whether calling the module runs hooks that multiplying by its weight would skip."""
    return bool(
        module._forward_hooks
        or module._forward_pre_hooks
        or hooks._global_forward_hooks
        or hooks._global_forward_pre_hooks
    )
