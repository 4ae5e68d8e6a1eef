"""A TCP port for a server a test starts in another process (torchrun's store, uvicorn).

The port is checked free here and bound there seconds later. A port from the kernel's
ephemeral range (bind to port 0) can be taken in between: every outgoing connection on the
machine draws its local port from that range, and a client that dials the port before its
server listens can even be handed it as its own local port and connect to itself (TCP's
simultaneous open), then wait for ever for a store that is not there. A port below the range
is never handed out by the kernel, so only a server that asks for it by number can take it."""

from __future__ import annotations

import random
import socket
from pathlib import Path

RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range of local ports for outgoing connections (Linux's default where the
    file cannot be read)."""
    try:
        low, high = map(int, RANGE.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def free_port(tries: int = 200) -> int:
    """A port that nothing listens on or holds now, below the ephemeral range."""
    low = ephemeral_range()[0]
    pool = range(10_000 if low > 11_000 else 1_024, low)
    # a generator of its own: a test that seeds `random` must not make every run pick alike
    for port in random.Random().sample(pool, k=min(tries, len(pool))):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port below the ephemeral range ({low}) in {tries} tries")
