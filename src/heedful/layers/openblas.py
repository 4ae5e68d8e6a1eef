"""Products through the OpenBLAS that numpy's wheels carry, one thread each.

Why a second library: on an AVX2-only AMD EPYC (Zen 3) OpenBLAS's kernels ran decoding's thin
products on one thread faster than oneDNN's packed weights (64 x 256 x 8,000: 72 against 60
GFLOP/s; benchmarks/decode_gemm.py), and decoding as a whole on one thread 1.06x greedy and
1.09x at beam 5, on two threads level greedy and 1.05-1.18x at beam 5 (docs/benchmarks.md,
"Session 31"). numpy holds the library already (heedful depends on numpy),
multiplies torch's tensors in place through `.numpy()` views, and lets go of Python's lock
inside the product, so decoding's streams (cpu.in_streams) run side by side as they do in torch.

OpenBLAS keeps threads of its own, as many as the machine has cores unless
OPENBLAS_NUM_THREADS says otherwise, where each of torch's streams has one: every product here
sets the calling thread's own count (openblas_set_num_threads_local, OpenBLAS 0.3.27 and later)
to one and puts the previous one back, so numpy's other work keeps its threads. (OpenBLAS's
threads beside torch's, which spin between operators, decoded a single batch on two cores 10x
slower: products.py sends only one-thread work here.) Where numpy's BLAS is another library,
or an OpenBLAS without that function, `available` is False and products.py keeps oneDNN.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch


@functools.cache
def _thread_setter():
    """numpy's own OpenBLAS's openblas_set_num_threads_local, or None: found among the
    libraries this process has mapped, in the folder of numpy's bundled libraries."""
    try:
        import numpy

        maps = Path("/proc/self/maps").read_text(encoding="utf-8", errors="replace")
        bundled = Path(numpy.__file__).resolve().parent.parent / "numpy.libs"  # auditwheel's
        path = bundled_openblas(maps, bundled)
        library = None if path is None else ctypes.CDLL(str(path))
    except (ImportError, OSError):
        return None
    setter = getattr(library, "openblas_set_num_threads_local", None)
    if setter is not None:
        setter.argtypes, setter.restype = [ctypes.c_int], ctypes.c_int
    return setter


def bundled_openblas(maps: str, folder: Path) -> Path | None:
    """The OpenBLAS library among the files mapped in `maps` (the text of /proc/self/maps)
    that lies in `folder`, or None."""
    for line in maps.splitlines():  # address, permissions, offset, device, inode, path
        fields = line.split(maxsplit=5)
        path = Path(fields[5]) if len(fields) == 6 else None
        name = "" if path is None else path.name  # "... (deleted)": replaced since mapped
        if path and path.parent == folder and "openblas" in name.lower() and ")" not in name:
            return path
    return None


def available() -> bool:
    """Whether products can go through numpy's OpenBLAS, one thread of its own each."""
    return _thread_setter() is not None


def linear(x: torch.Tensor, weight_t: torch.Tensor, bias: torch.Tensor | None, relu: bool):
    """max(0, ·) if relu of x Wᵀ + b, x (.., D_in) float32, weight_t = Wᵀ (D_in, D_out)
    contiguous, on one thread."""
    import numpy

    rows, width = x.numel() // x.size(-1), x.size(-1)
    x2 = x.reshape(rows, width).contiguous()
    y = torch.empty(rows, weight_t.size(1))
    setter = _thread_setter()
    before = setter(1)
    try:
        numpy.matmul(x2.numpy(), weight_t.numpy(), out=y.numpy())  # y = x Wᵀ
    finally:
        setter(before)
    if bias is not None and relu:
        torch.ops.aten._add_relu_.Tensor(y, bias)  # y = max(0, y + b) in one pass
    elif bias is not None:
        y.add_(bias)
    elif relu:
        y.clamp_(min=0)
    return y.view(*x.shape[:-1], y.size(1))
