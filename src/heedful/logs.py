"""Training's lines, fit for a terminal, a file and a pipe: timestamps, RUN/train.log, and a
progress bar only where someone watches one.

A progress bar redraws itself with carriage returns: on a terminal that is one line changing
in place, but redirected to a file every redraw stays (about 100 bytes a step, 116 KB for one
demo). So the bar is drawn only when its stream is a terminal; elsewhere the same news comes
as a plain line now and then (PLAIN_EVERY seconds apart), which a file, `grep` or `tail`
reads as well as a person. A Jupyter notebook, whose output is no terminal, keeps its bar.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

PLAIN_EVERY = 30.0  # seconds between plain progress lines where no bar is drawn


def stamp(message: str) -> str:
    """`message` after the local time to the second, as log lines usually begin."""
    return f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}"


def is_terminal(stream) -> bool:
    """Whether `stream` is a terminal (a captured or redirected stream is not)."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def _in_notebook() -> bool:
    """Running in a Jupyter kernel, where tqdm.auto draws a widget that redraws in place."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if hasattr(ipython, "get_ipython") else None
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


class RunLog:
    """A run's lines, each with a timestamp: shown through `echo` and, once `attach`ed,
    appended to a file (RUN/train.log), which then holds the same lines.

    Lines said before `attach` are held and written first: the run directory is written only
    once it is locked and (with --force) cleared, and the log must still tell what came before.
    Each line opens and closes the file, so nothing is lost to a buffer when the process dies.
    `hold=False`: a RunLog that will never be attached keeps nothing.
    """

    def __init__(self, echo: Callable[[str], None] = print, hold: bool = True):
        self.echo, self.path = echo, None
        self._held: list[str] | None = [] if hold else None

    def __call__(self, message: str) -> None:
        line = stamp(message)
        self.echo(line)
        self._keep(line)

    def keep(self, message: str) -> None:
        """Into the file only (what a progress bar already shows on the terminal)."""
        self._keep(stamp(message))

    def attach(self, path: str | Path) -> None:
        self.path = Path(path)
        held, self._held = self._held or [], []
        for line in held:
            self._keep(line)

    def _keep(self, line: str) -> None:
        if self.path is None:
            if self._held is not None:
                self._held.append(line)
            return
        with open(self.path, "a", encoding="utf-8") as log:
            log.write(line + "\n")


def as_run_log(echo: Callable[[str], None] | None) -> RunLog:
    """`echo` as a RunLog (itself if it is one), by default printing."""
    return echo if isinstance(echo, RunLog) else RunLog(echo or print, hold=False)


class Every:
    """Whether `seconds` have passed since it last answered yes (the first time: yes)."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic):
        self.seconds, self.clock, self.last = seconds, clock, None

    def __call__(self) -> bool:
        now = self.clock()
        if self.last is not None and now - self.last < self.seconds:
            return False
        self.last = now
        return True


class Counter:
    """A count that grows (`heedful prepare`'s pairs) shown as it does: tqdm's bar on a
    terminal, elsewhere "DESC: N UNIT read" every PLAIN_EVERY seconds; nothing unless `show`."""

    def __init__(self, desc: str, unit: str, show: bool, echo=print, stream=None):
        from tqdm.auto import tqdm

        terminal = show and is_terminal(sys.stderr if stream is None else stream)
        self.bar = tqdm(unit=f" {unit}", unit_scale=True, disable=not terminal, desc=desc)
        self.plain, self.due = show and not terminal, Every(PLAIN_EVERY)
        self.desc, self.unit, self.echo, self.count = desc, unit, echo, 0

    def update(self, n: int) -> None:
        self.count += n
        self.bar.update(n)
        if self.plain and self.due():
            self.echo(f"{self.desc}: {self.count:,} {self.unit} read")

    def close(self) -> None:
        self.bar.close()


def step_line(record: dict, total: int) -> str:
    """A training record (training._record) as one plain line."""
    return (
        f"step {record['step']}/{total}  loss {record['train_loss']:.3f}  "
        f"lr {record['lr']:.2e}  {record['tokens_per_s']:,.0f} tok/s  epoch {record['epoch']}"
    )


class Progress:
    """How far training is: a tqdm bar on a terminal, plain lines elsewhere.

    `show`: whether to show progress at all (--no-progress, or a process other than rank 0,
    shows none); the file of `lines` gets the plain lines whatever is shown. `stream`: where
    the bar would go (tqdm's default, stderr), and the terminal test is made on it.
    """

    def __init__(
        self,
        total: int,
        initial: int,
        show: bool,
        lines: RunLog,
        every: float | None = None,  # default: PLAIN_EVERY
        stream=None,  # default: sys.stderr, as tqdm's
        clock: Callable[[], float] = time.monotonic,
    ):
        stream = sys.stderr if stream is None else stream
        self.total, self.lines = total, lines
        self.due = Every(PLAIN_EVERY if every is None else every, clock)
        self.bar = None
        if show and (is_terminal(stream) or _in_notebook()):
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=total, initial=initial, unit="step", dynamic_ncols=True, file=stream
            )
        self.plain = show and self.bar is None  # plain lines on the terminal

    def update(self, record: dict | None) -> None:
        """One step done; `record` (training._record) on the steps that log one."""
        if self.bar is not None:
            self.bar.update(1)
        if record is None:
            return
        if self.bar is not None:
            loss, lr, speed = record["train_loss"], record["lr"], record["tokens_per_s"]
            self.bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{speed:.0f}")
        if not self.due():
            return
        line = step_line(record, self.total)
        if self.plain:
            self.say(line)
        else:
            self.lines.keep(line)  # the bar, or nothing, on the terminal; the file has it

    def say(self, message: str) -> None:
        """A line to show and keep, written around the bar (which is then drawn again)."""
        if self.bar is None:
            self.lines(message)
            return
        with self.bar.external_write_mode():
            self.lines(message)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
