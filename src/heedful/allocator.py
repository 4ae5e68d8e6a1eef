"""glibc's malloc, tuned for torch's tensors: every CPU tensor is a malloc and a free (torch's
CPU allocator keeps no cache of its own), so glibc's defaults decide how often the kernel must
fault in fresh pages and how much memory threads hold.

Both settings are process-wide, made by the commands that own the process's work: training
(training/experiment.py) keeps freed memory for the next step and one arena; a Translator, one
arena. Linux with glibc only, and never over the user's own allocator settings or another
allocator (LD_PRELOAD).
"""

from __future__ import annotations

import os
import platform

# glibc's mallopt parameters (malloc.h), and the largest mmap threshold it accepts on 64-bit
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8
_MMAP_THRESHOLD_MAX = 32 * 2**20
_TRIM_THRESHOLD = 2**30
_USER_MALLOC = (
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "GLIBC_TUNABLES",
    "LD_PRELOAD",
)
_USER_ARENAS = ("MALLOC_ARENA_MAX", "MALLOC_ARENA_TEST", "GLIBC_TUNABLES", "LD_PRELOAD")


def reuse_freed_memory(environ=None) -> bool:
    """Ask glibc's malloc to keep the memory torch frees, for the next step's tensors.

    Why: torch's CPU allocator has no cache of its own; every tensor is a malloc and a free.
    glibc serves blocks above its mmap threshold (128 KiB at first, rising with what is freed)
    with fresh mappings and hands the top of its heap back to the kernel once more than twice
    that is free, so a training step's activations come back, step after step, as fresh pages
    that the kernel must fault in and zero. A fixed threshold of 32 MiB (glibc's maximum) and a
    trim threshold of 1 GiB keep blocks up to 32 MiB in the heap: in a Multi30k GRU run on 2
    cores, 139,000 page faults a second became 50,000, the kernel's share of the CPU time 13%
    became 5%, and training ran 1.13x as fast (benchmarks/training_memory.py). The process keeps
    its peak heap (it holds that much at every step anyway). Linux with glibc only; left alone
    when the user chose allocator settings or another allocator (LD_PRELOAD). Returns whether
    it applied.

    Not for translation: there it made beam 5 1.04-1.09x as fast on one thread and raised the
    peak memory by 20-30 MiB (Zen 4 EPYC, 2026-12-06), the margin by which heedful stays below
    Eole's (benchmarks/vs_eole.py).
    """
    pairs = ((_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX), (_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))
    return _mallopt(environ, _USER_MALLOC, pairs)


def one_malloc_arena(environ=None) -> bool:
    """Ask glibc's malloc to serve every thread from one arena (its heap and free lists).

    Why: glibc gives each thread that allocates an arena of its own, and memory freed in one
    is reused by that thread only, so every thread holds its own peak. A Translator runs its
    batches side by side, a thread each (in_streams): 500 Multi30k sentences with two streams
    peaked at 470 MiB greedy and 629-676 MiB at beam 5, with one arena at 434-440 and 562-575,
    at the same speed within the noise (greedy 0.93x to 1.01x, beam 5 0.97x to 1.03x in three
    A/B runs of benchmarks/decode_speed.py on 2 threads; Zen 4 EPYC, 2026-12-06). Training
    runs a batch's pieces side by side too: 60 steps of the Multi30k recipe peaked at
    1,297-1,379 MiB against 1,340-1,449 (four runs each) at 2,969-3,008 against 2,702-2,911
    target tok/s. Threads then take turns at one lock for each allocation, a few hundred per
    step, each far shorter than a step's products. As reuse_freed_memory: glibc only, and
    never over the user's own settings. Returns whether it applied.
    """
    return _mallopt(environ, _USER_ARENAS, ((_M_ARENA_MAX, 1),))


def _mallopt(environ, user_settings: tuple[str, ...], pairs) -> bool:
    """glibc's mallopt(parameter, value) for each pair, on Linux with glibc where none of
    user_settings is set: whether every one applied."""
    environ = os.environ if environ is None else environ
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    if any(environ.get(name) for name in user_settings):
        return False
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return all([bool(mallopt(parameter, value)) for parameter, value in pairs])
