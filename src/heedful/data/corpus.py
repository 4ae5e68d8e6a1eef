"""Strict reading of parallel text: two line-aligned files or one TSV, then length filtering.

Every problem stops before training with a message that names the config key and the file,
and the line and byte where there is one: a corpus that is silently misaligned trains a model
that looks fine and translates badly.

Line rules, the same for every file:
- Lines end with "\\n" or "\\r\\n"; the terminator is removed and nothing else (no stripping).
- A file that ends with a terminator has no extra empty line after it ("a\\nb\\n" is two
  lines), and a last line without one is still a line ("a\\nb" is two lines too). A blank
  line before the end ("a\\n\\n") is a line of its own and counts.
- Nothing else separates lines: a lone "\\r", form feed, U+0085, U+2028 stay inside the line
  (str.splitlines() would split there, and misalign the two sides of a corpus).
- Text must be UTF-8. A leading byte-order mark is an encoding signature, not text, and is
  dropped.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from heedful.data.tokenizers import Tokenizer


class CorpusError(ValueError):
    """A corpus that cannot be used; the message names the file (and line, byte, config key)."""


def _read_bytes(path: Path, key: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise CorpusError(f"{key}: file not found: {path}{_missing_hint(path)}") from None
    except IsADirectoryError:
        raise CorpusError(f"{key}: is a directory, not a file: {path}") from None
    except OSError as error:
        raise CorpusError(f"{key}: cannot read {path}: {error.strerror}") from None


def _missing_hint(path: Path) -> str:
    """Where a relative path was looked for, and the first directory on it that is missing."""
    hints = [] if path.is_absolute() else [f"looked for {path.absolute()}"]
    for parent in reversed(path.parents):
        if parent != Path(".") and not parent.exists():
            hints.append(f"directory {parent} does not exist")
            break
    return f" ({'; '.join(hints)})" if hints else ""


def _bad_byte(data: bytes, offset: int, path: Path, key: str, what: str) -> CorpusError:
    """An error pointing at byte `offset` of the file: its line, and where in the line."""
    line_start = data.rfind(b"\n", 0, offset) + 1
    line = data.count(b"\n", 0, offset) + 1
    return CorpusError(
        f"{key}: {path}: line {line}: {what} 0x{data[offset]:02x} at byte offset {offset} of "
        f"the file, {offset - line_start} of the line (offsets count from 0)"
    )


def _decode(data: bytes, path: Path, key: str) -> str:
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise CorpusError(
            f"{key}: {path}: starts with a UTF-16 byte-order mark: the file is UTF-16 (or "
            f"UTF-32), not UTF-8; convert it, e.g. iconv -f UTF-16 -t UTF-8 {path}"
        )
    start = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        text = data[start:].decode("utf-8")
    except UnicodeDecodeError as error:
        # offset of the first bad byte, counted in the whole file
        raise _bad_byte(data, start + error.start, path, key, "invalid UTF-8 byte") from None
    if "\0" in text:
        # valid UTF-8, but no text has NUL: UTF-16 without a byte-order mark (every other
        # byte of ASCII is 0) or a binary file, which would train on garbage
        raise _bad_byte(data, data.index(b"\0"), path, key, "NUL byte (a UTF-16 or binary file?)")
    return text


def read_lines(path: str | Path, key: str) -> list[str]:
    """The lines of a UTF-8 text file, without their "\\n" or "\\r\\n" (see the module rules).

    key: the config key the path came from (e.g. "data.train_src"), named in every error.
    """
    path = Path(path)
    return split_lines(_read_bytes(path, key), path, key)


def split_lines(data: bytes, path: str | Path, key: str) -> list[str]:
    """read_lines for bytes already read (standard input, say); `path` names them in errors."""
    lines = _decode(data, Path(path), key).split("\n")
    last = lines.pop()  # the text after the final "\n": "" when the file ends with one
    lines = [line.removesuffix("\r") for line in lines]
    if last:
        lines.append(last)
    return lines


def read_parallel(
    src_path: str | Path, tgt_path: str | Path, src_key: str, tgt_key: str
) -> list[tuple[str, str]]:
    """(source, target) pairs from two files aligned line by line; unequal lengths are errors."""
    src_lines = read_lines(src_path, src_key)
    tgt_lines = read_lines(tgt_path, tgt_key)
    if len(src_lines) != len(tgt_lines):
        raise CorpusError(
            f"{src_key} and {tgt_key} must have one line per sentence pair, but {src_path} has "
            f"{len(src_lines)} lines and {tgt_path} has {len(tgt_lines)}"
        )
    return list(zip(src_lines, tgt_lines))


def read_tsv(path: str | Path, key: str) -> list[tuple[str, str]]:
    """(source, target) pairs from a file of `source TAB target` lines; exactly one TAB each."""
    pairs = []
    for number, line in enumerate(read_lines(path, key), start=1):
        tabs = line.count("\t")
        if tabs != 1:
            raise CorpusError(
                f"{key}: {path}: line {number}: expected source TAB target (one TAB), "
                f"found {tabs} TABs"
            )
        src, tgt = line.split("\t")
        pairs.append((src, tgt))
    return pairs


@dataclass
class FilterReport:
    """How many pairs filter_pairs kept and why it dropped the others (each pair counted once)."""

    kept: int
    dropped_empty: int
    dropped_too_long: int

    def __str__(self) -> str:
        total = self.kept + self.dropped_empty + self.dropped_too_long
        return (
            f"kept {self.kept:,} of {total:,} pairs (dropped {self.dropped_empty:,} with an empty "
            f"side, {self.dropped_too_long:,} longer than max_length on a side)"
        )


def filter_pairs(
    pairs: Iterable[tuple[str, str]],
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    max_length: int,
) -> tuple[list[list[int]], list[list[int]], FilterReport]:
    """Tokenize pairs, dropping whole pairs (never one side) that are empty or too long.

    A pair is dropped as empty when either side is only whitespace or encodes to no tokens,
    and as too long when either side has more than `max_length` tokens, counted without <s>
    and </s>. Returns (src_ids, tgt_ids, report), the two lists still aligned.
    """
    src_ids, tgt_ids = [], []
    empty = too_long = 0
    for src, tgt in pairs:
        if not src.strip() or not tgt.strip():
            empty += 1
            continue
        s, t = src_tokenizer.encode(src), tgt_tokenizer.encode(tgt)
        if not s or not t:
            empty += 1
        elif len(s) > max_length or len(t) > max_length:
            too_long += 1
        else:
            src_ids.append(s)
            tgt_ids.append(t)
    return src_ids, tgt_ids, FilterReport(len(src_ids), empty, too_long)
