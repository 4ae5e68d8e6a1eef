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

import contextlib
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


@contextlib.contextmanager
def one_thread():
    """numpy's OpenBLAS on one thread in this block (this thread's count; `available` first)."""
    setter = _thread_setter()
    before = setter(1)
    try:
        yield
    finally:
        setter(before)


def available() -> bool:
    """Whether products can go through numpy's OpenBLAS, one thread of its own each."""
    return _thread_setter() is not None


# OpenBLAS's float32 kernels for AVX2 (Haswell's, which its Zen targets use) multiply the rows
# of numpy's row-major x four at a time (its column-major view's N unroll); a remainder takes
# slower edge kernels. On one thread of the Zen 3 EPYC the 256 x 1,024 product took 175 µs at
# 11 rows and 115 at 12, 191 at 15 and 139 at 16, 286 at 31 and 236 at 32; the 256 x 8,000
# output layer 1,510 µs at 15 rows and 1,082 at 16. So up to PADDED_ROWS rows (a sentence's
# encoder, greedy search's batch once few of its sentences remain) are padded with zeros to
# a multiple of ROW_MULTIPLE; above, the padding's copy and arithmetic cost about what it
# saves (61 rows padded 3-20% slower, 63 10% faster; 315-318 rows of the 1,024 x 256 product
# 4-5% slower).
# One row stays one (numpy's matrix-vector call).
ROW_MULTIPLE = 4
PADDED_ROWS = 32


def operands(weight: torch.Tensor, bias: torch.Tensor | None) -> tuple:
    """What `linear` multiplies by, made once per weight: Wᵀ (D_in, D_out), contiguous, as
    OpenBLAS reads it, and b, as numpy arrays (each .numpy() call costs a microsecond)."""
    weight_t = weight.detach().t().contiguous().numpy()
    return weight_t, None if bias is None else bias.detach().numpy()


def linear(x: torch.Tensor, weight_t, bias, relu: bool) -> torch.Tensor:
    """max(0, ·) if relu of x Wᵀ + b, x (.., D_in) float32, weight_t = Wᵀ and bias b numpy
    arrays (`operands`), on one thread: `multiply` of x's rows, handed to torch without a copy.

    All of it in numpy: numpy's calls cost about a microsecond each on small arrays, torch's
    several (one row of a 256-wide layer took 19.6 µs through torch's reshape, empty, add_ and
    view around the product, 1.5 µs for the product alone; a search's step makes ten such
    products). The sums are the same in either library: one float32 addition per entry, and
    max(0, ·) exact."""
    y = multiply(x.numpy().reshape(-1, x.size(-1)), weight_t, bias, relu)  # (N, D_out)
    return torch.from_numpy(y.reshape(*x.shape[:-1], y.shape[1]))


def multiply(rows_in, weight_t, bias, relu: bool):
    """`linear` of numpy rows (N, D_in) -> (N, D_out), a new array."""
    import numpy

    rows_in = numpy.ascontiguousarray(rows_in)  # a view where it is one already
    rows = rows_in.shape[0]
    if 1 < rows <= PADDED_ROWS and rows % ROW_MULTIPLE:  # zeros below, their products dropped
        shape = (rows - rows % ROW_MULTIPLE + ROW_MULTIPLE, rows_in.shape[1])
        padded = numpy.zeros(shape, dtype=rows_in.dtype)
        padded[:rows] = rows_in
        rows_in = padded
    with one_thread():
        y = numpy.matmul(rows_in, weight_t)[:rows]  # y = x Wᵀ (N, D_out)
    if bias is not None:
        numpy.add(y, bias, out=y)
    if relu:
        numpy.maximum(y, 0, out=y)
    return y
