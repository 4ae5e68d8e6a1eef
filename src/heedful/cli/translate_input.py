"""What `heedful translate` reads, and in what pieces it translates it.

A file (-i FILE) is read whole and translated in one call, so its batches are sorted by length
across the whole file (the least padding). Standard input (no -i, or -i -) is translated as it
arrives: a thread reads its lines while the model works, and each piece is every line that has
arrived, up to a window of batches, so `heedful translate` can sit in a pipe and answer a line
before the next is written, yet a fast producer still fills whole batches. Both are read by
data/lines.py's rules (UTF-8, "\\n" or "\\r\\n", a bounded length); each line is checked against
--max-chars as it is read, and output line N is always the translation of input line N.
"""

from __future__ import annotations

import stat
import sys
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from queue import Empty, Queue

import click

WINDOW_BATCHES = 8  # lines already arrived translated together: at most this many batches
STDIN = "<stdin>"  # how messages name standard input


def line_limit(max_chars: int):
    """The bytes a line is read to before it is refused: 4 per --max-chars character (UTF-8's
    longest) and 16 MiB at least, so that a line a little over --max-chars is still counted
    for its message, and /dev/zero (no line end at all) is stopped, never held whole."""
    from heedful.data.lines import MAX_LINE_BYTES, LineLimit

    setting = "--max-chars (a line may have 4 bytes per character, and 16 MiB whatever it is)"
    return LineLimit(max(MAX_LINE_BYTES, 4 * max_chars), setting)


def regular_file(path: Path, option: str) -> None:
    """A FIFO would block until something writes to it (for ever, if nothing does), a device
    or a directory is no file of lines: refused by name before opening (issue 26)."""
    try:
        mode = path.stat().st_mode
    except OSError:  # missing or unreadable: the reader says which
        return
    if not stat.S_ISREG(mode):
        kinds = {stat.S_IFIFO: "a FIFO", stat.S_IFDIR: "a directory"}
        kind = kinds.get(stat.S_IFMT(mode), "a device or socket")
        raise click.ClickException(
            f"{option} {path}: {kind}, not a regular file; give a file, one line per input line"
        )


def is_stdin(path: str | None) -> bool:
    return path is None or path == "-"


def _checked(lines: Iterable[str], where: str, max_chars: int) -> Iterator[str]:
    """The lines, the first longer than max_chars (0: no limit) an error naming it.

    A long line is an error, not a skipped line: output line N stays the translation of input
    line N, and an exit status is harder to miss than one refusal among many outputs.
    """
    for number, line in enumerate(lines, start=1):
        if max_chars and len(line) > max_chars:
            raise click.ClickException(
                f"{where}: line {number} has {len(line):,} characters, more than "
                f"--max-chars {max_chars:,}; split it, or raise --max-chars (0: no limit)"
            )
        yield line


def _stdin_lines(max_chars: int) -> Iterator[str]:
    """Standard input's lines one at a time, as a file's are read (data/lines.py), each
    returned as soon as its ending has arrived."""
    from heedful.data.lines import iter_stream_lines  # the line rules, for an open stream

    raw = iter_stream_lines(sys.stdin.buffer, STDIN, "input", line_limit(max_chars))
    return _checked(raw, STDIN, max_chars)


def read_all(path: str | None, max_chars: int) -> list[str]:
    """Every line to translate, the whole input read first (a file, or stdin read whole)."""
    from heedful.data.lines import iter_lines

    if is_stdin(path):
        return list(_stdin_lines(max_chars))
    return list(_checked(iter_lines(Path(path), "--input", line_limit(max_chars)), path, max_chars))


_END = None  # what the reading thread puts after the last line


def _reader(lines: Iterator[str], queue: Queue) -> threading.Thread:
    """A thread putting each line into `queue` as it is read, then _END, or the error that
    stopped it (raised again where the lines are taken, in order, after the lines before it)."""

    def read() -> None:
        try:
            for line in lines:
                queue.put(line)
            queue.put(_END)
        except BaseException as error:  # noqa: BLE001 (handed to the main thread, not dropped)
            queue.put(error)

    # a daemon: a command that stops early (an error, a bad model) need not wait for stdin
    return threading.Thread(target=read, name="heedful-stdin", daemon=True)


def _take_arrived(queue: Queue, window: int) -> list:
    """The next item, waited for, then every item already there after it, `window` at most."""
    items = [queue.get()]
    while len(items) < window and isinstance(items[-1], str):
        try:
            items.append(queue.get_nowait())
        except Empty:
            break
    return items


def arrivals(lines: Iterator[str], window: int) -> Iterator[list[str]]:
    """`lines` in pieces of what has arrived when the last piece is done (1 to window lines):
    a line written alone into a pipe is translated alone, at once; a file piped in fills every
    piece. The queue holds a window at most, so a fast producer waits for the model."""
    queue: Queue = Queue(maxsize=window)
    _reader(lines, queue).start()
    while True:
        items = _take_arrived(queue, window)
        last = items[-1]
        if isinstance(last, str):
            yield items
            continue
        if items[:-1]:
            yield items[:-1]
        if isinstance(last, BaseException):
            raise last
        return


def pieces(path: str | None, max_chars: int, batch_size: int, whole: bool):
    """(number of the first line, lines) of the input, piece by piece: a file whole, stdin as
    it arrives (whole too when `whole`: results that must not depend on arrival times)."""
    if whole or not is_stdin(path):
        yield 1, read_all(path, max_chars)
        return
    first = 1
    for lines in arrivals(_stdin_lines(max_chars), WINDOW_BATCHES * batch_size):
        yield first, lines
        first += len(lines)
