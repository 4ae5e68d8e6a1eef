"""Reading lines strictly and with a length limit: the rules every text file of heedful is read by
(corpora, caption files, `translate` and `evaluate` input), in one place.

Line rules, the same for every file:
- Lines end with "\\n" or "\\r\\n"; the terminator is removed and nothing else (no stripping).
- A file that ends with a terminator has no extra empty line after it ("a\\nb\\n" is two
  lines), and a last line without one is still a line ("a\\nb" is two lines too). A blank
  line before the end ("a\\n\\n") is a line of its own and counts.
- Nothing else separates lines: a lone "\\r", form feed, U+0085, U+2028 stay inside the line
  (str.splitlines() would split there, and misalign the two sides of a corpus).
- Text must be UTF-8. A leading byte-order mark is an encoding signature, not text, and is
  dropped.
- A line has at most LineLimit.max_bytes bytes (its terminator not counted): the reader stops
  one byte past the limit, so /dev/zero or a gzip of one 3 GiB line is an error naming the
  file, the line and the setting, never a MemoryError (issue 26).
"""

from __future__ import annotations

import codecs
import gzip
import io
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from heedful.config import MAX_LINE_BYTES  # far above any sentence or document


class CorpusError(ValueError):
    """A corpus that cannot be used; the message names the file (and line, byte, config key)."""


def _open(path: Path, key: str):
    """The file's bytes as a stream: gzip-compressed files (recognised by their magic number,
    not their name) are decompressed on the fly."""
    try:
        stream = open(path, "rb")  # noqa: SIM115 (closed by the caller's with-block)
    except FileNotFoundError:
        raise CorpusError(f"{key}: file not found: {path}{_missing_hint(path)}") from None
    except IsADirectoryError:
        raise CorpusError(f"{key}: is a directory, not a file: {path}") from None
    except OSError as error:
        raise CorpusError(f"{key}: cannot read {path}: {error.strerror}") from None
    if stream.peek(2)[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=stream, mode="rb")
    return stream


def _missing_hint(path: Path) -> str:
    """Where a relative path was looked for, and the first directory on it that is missing."""
    hints = [] if path.is_absolute() else [f"looked for {path.absolute()}"]
    for parent in reversed(path.parents):
        if parent != Path(".") and not parent.exists():
            hints.append(f"directory {parent} does not exist")
            break
    return f" ({'; '.join(hints)})" if hints else ""


def _bad_byte(line: int, start: int, index: int, byte: int, where: str, what: str) -> CorpusError:
    """An error pointing at byte `index` of line `line`, which starts at byte `start`."""
    return CorpusError(
        f"{where}: line {line}: {what} 0x{byte:02x} at byte offset {start + index} of the "
        f"file, {index} of the line (offsets count from 0)"
    )


def _decode_line(raw: bytes, number: int, start: int, where: str) -> str:
    """One line's bytes (terminator included) -> its text, or a CorpusError at the bad byte."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        byte = raw[error.start]
        raise _bad_byte(number, start, error.start, byte, where, "invalid UTF-8 byte") from None
    if "\0" in text:
        # valid UTF-8, but no text has NUL: UTF-16 without a byte-order mark (every other
        # byte of ASCII is 0) or a binary file, which would train on garbage
        at = raw.index(b"\0")
        raise _bad_byte(number, start, at, 0, where, "NUL byte (a UTF-16 or binary file?)")
    return text[:-2] if text.endswith("\r\n") else text.removesuffix("\n")


@dataclass(frozen=True)
class LineLimit:
    """The longest line a reader takes, in bytes, and the setting that raises it (named in the
    error: a config key for training data, an option for the CLI)."""

    max_bytes: int = MAX_LINE_BYTES
    setting: str = "data.max_line_bytes"

    def error(self, where: str, number: int) -> CorpusError:
        return CorpusError(
            f"{where}: line {number} is longer than {self.max_bytes:,} bytes (not counting its "
            f"ending); split it, or raise {self.setting}"
        )


DEFAULT_LIMIT = LineLimit()


def _raw_lines(stream, max_bytes: int) -> Iterator[bytes]:
    """Each line's bytes, read at most max_bytes + 3 at a time (text, "\r\n", one over):
    a line without an end (/dev/zero, a gzip of one 3 GiB line) is never held whole."""
    size = max_bytes + 3
    while raw := stream.readline(size):
        if raw.startswith(codecs.BOM_UTF8) and not raw.endswith(b"\n"):  # the BOM is not text
            raw += stream.readline(len(codecs.BOM_UTF8))
        yield raw


def _lines(stream, path: Path, key: str, compressed: bool, limit: LineLimit) -> Iterator[str]:
    where = f"{key}: {path}" + (" (offsets in the decompressed text)" if compressed else "")
    start = 0
    for number, raw in enumerate(_raw_lines(stream, limit.max_bytes), start=1):
        if number == 1:
            if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
                raise CorpusError(
                    f"{key}: {path}: starts with a UTF-16 byte-order mark: the file is UTF-16 "
                    f"(or UTF-32), not UTF-8; convert it, e.g. iconv -f UTF-16 -t UTF-8 {path}"
                )
            if raw.startswith(codecs.BOM_UTF8):  # an encoding signature, not text
                start, raw = len(codecs.BOM_UTF8), raw[len(codecs.BOM_UTF8) :]
        text = raw[:-2] if raw.endswith(b"\r\n") else raw.removesuffix(b"\n")
        if len(text) > limit.max_bytes:  # before decoding: a cut character is not the fault
            raise limit.error(where, number)
        yield _decode_line(raw, number, start, where)
        start += len(raw)


def iter_lines(path: str | Path, key: str, limit: LineLimit = DEFAULT_LIMIT) -> Iterator[str]:
    """The lines of a UTF-8 text file (gzip-compressed or not) one at a time, without their
    "\\n" or "\\r\\n" (see the module rules), holding one line in memory.

    key: the config key the path came from (e.g. "data.train_src"), named in every error,
    with the line and byte offset where there is one. A damaged gzip stream is an error that
    names the last line read, never a shorter corpus. A line of more than max_bytes bytes is
    an error naming limit.setting, found before the line is held.
    """
    path = Path(path)
    with _open(path, key) as stream:
        compressed = isinstance(stream, gzip.GzipFile)
        lines = _lines(stream, path, key, compressed, limit)
        number = 0
        try:
            for number, line in enumerate(lines, start=1):  # noqa: B007 (read after the loop)
                yield line
        except (EOFError, OSError, zlib.error) as error:
            raise CorpusError(
                f"{key}: {path}: the gzip data is damaged after line {number:,} ({error}); "
                "it may be truncated: compress it again"
            ) from None


def read_lines(path: str | Path, key: str, limit: LineLimit = DEFAULT_LIMIT) -> list[str]:
    """The lines of a UTF-8 text file, without their "\\n" or "\\r\\n" (see iter_lines)."""
    return list(iter_lines(path, key, limit))


def split_lines(stream, path: str | Path, key: str, limit: LineLimit = DEFAULT_LIMIT) -> list[str]:
    """read_lines for a stream already open (standard input) or bytes; `path` names them."""
    stream = io.BytesIO(stream) if isinstance(stream, bytes) else stream
    return list(_lines(stream, Path(path), key, False, limit))


def iter_stream_lines(
    stream, path: str | Path, key: str, limit: LineLimit = DEFAULT_LIMIT
) -> Iterator[str]:
    """iter_lines for a stream already open (standard input), one line at a time, each as soon
    as its ending has been read: what lets `heedful translate` sit in a pipe."""
    return _lines(stream, Path(path), key, False, limit)
