"""SIGINT and SIGTERM during training: stop after the step under way, with a checkpoint.

Python's default (KeyboardInterrupt for Ctrl-C, death for SIGTERM) loses every step since the
last checkpoint; a scheduler that ends or preempts a job (Slurm, Kubernetes) sends SIGTERM and
waits a grace period (30 s by default in both) before SIGKILL. training.train asks `agreed()`
before each step, and after a signal saves a checkpoint at once, unvalidated, and returns.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

STOP_SIGNALS = ("SIGINT", "SIGTERM")  # TrainResult.stopped_by of a run a signal stopped


class StopSignals:
    """The signals caught while training runs (a context manager around the loop).

    The handler only notes the signal: it runs between two bytecodes of the main thread, which
    may be halfway through writing a file or a line, so all the rest waits for the loop.
    Signals after the first are noted and ignored, so a second Ctrl-C while the checkpoint is
    written cannot cut it off (the write is atomic in any case; SIGKILL still stops at once).
    The handlers from before are put back when training ends. Only the main thread may set
    handlers: started from another thread, training runs without them.

    `largest(value)`: the largest of every training process's `value` (Distributed.latest),
    so that every process stops at the same step: one going on alone would wait in its next
    all-reduce for ever.
    """

    def __init__(self, largest: Callable[[float], float] = float):
        self.largest = largest
        self.signum = 0  # the first signal caught; 0: none
        self._before: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._before[signum] = signal.signal(signum, self._catch)
        return self

    def __exit__(self, *exception) -> None:
        for signum, handler in self._before.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)

    def _catch(self, signum: int, frame) -> None:
        self.signum = self.signum or signum

    def agreed(self) -> str | None:
        """The name of the signal caught (by any process), or None to go on."""
        signum = int(self.largest(float(self.signum)))
        return signal.Signals(signum).name if signum else None
