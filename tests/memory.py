"""A memory cap for tests of inputs that would exhaust memory: RLIMIT_AS set a little above what
the process maps already, so that an allocation larger than the headroom fails (MemoryError or
torch's RuntimeError) instead of taking the machine."""

from __future__ import annotations

import resource
from contextlib import contextmanager
from pathlib import Path

HEADROOM = 1 << 30  # address space allowed above what the process maps already


@contextmanager
def memory_cap(headroom: int = HEADROOM):
    """RLIMIT_AS at the current address-space size + headroom: a larger allocation fails."""
    mapped = next(
        int(line.split()[1]) * 1024
        for line in Path("/proc/self/status").read_text().splitlines()
        if line.startswith("VmSize:")
    )
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (mapped + headroom, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
