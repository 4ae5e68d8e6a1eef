"""Strict reading of parallel text: two line-aligned files, one TSV or one JSON Lines file
(summarization corpora: one object per line with `document` / `summary` fields), then length
filtering.

Every problem stops before training with a message that names the config key and the file,
and the line and byte where there is one: a corpus that is silently misaligned trains a model
that looks fine and translates badly. Lines are read by data/lines.py's rules (UTF-8, "\\n" or
"\\r\\n", gzip or not, data.max_line_bytes at most).
"""

from __future__ import annotations

import json
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path

from heedful.data.lines import (  # noqa: F401 (CorpusError, read_lines, split_lines: re-exported)
    DEFAULT_LIMIT,
    MAX_LINE_BYTES,
    CorpusError,
    LineLimit,
    iter_lines,
    read_lines,
    split_lines,
)
from heedful.data.tokenizers import Tokenizer


def iter_parallel(
    src_path: str | Path,
    tgt_path: str | Path,
    src_key: str,
    tgt_key: str,
    limit: LineLimit = DEFAULT_LIMIT,
) -> Iterator[tuple[str, str]]:
    """(source, target) pairs from two files aligned line by line, one pair at a time; when
    one file ends before the other, the error gives both line counts."""
    src_lines = iter_lines(src_path, src_key, limit)
    tgt_lines = iter_lines(tgt_path, tgt_key, limit)
    for count, (src, tgt) in enumerate(zip_longest(src_lines, tgt_lines), start=1):
        if src is None or tgt is None:  # one file ended: count the rest of the other
            total = count + sum(1 for _ in (src_lines if tgt is None else tgt_lines))
            src_count, tgt_count = (total, count - 1) if tgt is None else (count - 1, total)
            raise CorpusError(
                f"{src_key} and {tgt_key} must have one line per sentence pair, but {src_path} "
                f"has {src_count} lines and {tgt_path} has {tgt_count}"
            )
        yield src, tgt


def read_parallel(
    src_path: str | Path,
    tgt_path: str | Path,
    src_key: str,
    tgt_key: str,
    limit: LineLimit = DEFAULT_LIMIT,
) -> list[tuple[str, str]]:
    """(source, target) pairs from two files aligned line by line; unequal lengths are errors."""
    return list(iter_parallel(src_path, tgt_path, src_key, tgt_key, limit))


def iter_tsv(
    path: str | Path, key: str, limit: LineLimit = DEFAULT_LIMIT
) -> Iterator[tuple[str, str]]:
    """(source, target) pairs from `source TAB target` lines, one at a time; one TAB each."""
    for number, line in enumerate(iter_lines(path, key, limit), start=1):
        tabs = line.count("\t")
        if tabs != 1:
            raise CorpusError(
                f"{key}: {path}: line {number}: expected source TAB target (one TAB), "
                f"found {tabs} TABs"
            )
        src, tgt = line.split("\t")
        yield src, tgt


def read_tsv(path: str | Path, key: str, limit: LineLimit = DEFAULT_LIMIT) -> list[tuple[str, str]]:
    """(source, target) pairs from a file of `source TAB target` lines; exactly one TAB each."""
    return list(iter_tsv(path, key, limit))


def json_type(value) -> str:
    """The JSON name of a parsed value's type, for messages."""
    names = {bool: "true or false", int: "a number", float: "a number", str: "a string",
             list: "an array", dict: "an object", type(None): "null"}  # fmt: skip
    return names[type(value)]


class _JSONLine:
    """Parses one line of a JSON Lines file strictly, naming the file and line on any fault."""

    def __init__(self, where: str, number: int):
        self.where, self.number = where, number

    def fail(self, problem: str) -> CorpusError:
        return CorpusError(f"{self.where}: line {self.number}: {problem}")

    def constant(self, name: str):  # NaN, Infinity: Python's json reads them, JSON does not
        raise self.fail(f"{name} is not JSON (RFC 8259 has no NaN or Infinity)")

    def unique(self, pairs: list[tuple[str, object]]) -> dict:
        record = dict(pairs)
        if len(record) < len(pairs):  # json.loads would silently keep the last one
            seen = set()
            twice = next(k for k, _ in pairs if k in seen or seen.add(k))
            raise self.fail(f"the key {twice!r} appears twice in one object")
        return record

    def parse(self, line: str) -> dict:
        if not line.strip():
            raise self.fail("empty line: JSON Lines holds one JSON object on every line")
        try:
            value = json.loads(line, parse_constant=self.constant, object_pairs_hook=self.unique)
        except json.JSONDecodeError as error:  # e.g. a line cut short: "Unterminated string"
            raise self.fail(f"invalid JSON at column {error.colno}: {error.msg}") from None
        except RecursionError:
            raise self.fail("invalid JSON: nested too deeply") from None
        except ValueError as error:  # not CorpusError: an integer of over 4,300 digits, say
            if isinstance(error, CorpusError):
                raise
            raise self.fail(f"invalid JSON: {error}") from None
        if not isinstance(value, dict):
            raise self.fail(f"expected a JSON object, got {json_type(value)}")
        return value

    def text(self, record: dict, field: str, key: str) -> str:
        """record[field] as text; a missing field, another type, or text that is not valid
        Unicode (a lone surrogate escape, "\\ud800") or holds NUL are errors naming it."""
        if field not in record:
            have = ", ".join(repr(k) for k in list(record)[:8]) or "none"
            raise self.fail(f"no field {field!r} ({key}); the object's fields: {have}")
        value = record[field]
        if not isinstance(value, str):
            raise self.fail(f"field {field!r} ({key}) must be a string, got {json_type(value)}")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as error:
            raise self.fail(
                f"field {field!r} holds a lone surrogate (\\u{ord(value[error.start]):04x}) at "
                f"character {error.start}: not text"
            ) from None
        if "\0" in value:  # as in a text file (the module rules): no text holds NUL
            at = value.index("\0")
            raise self.fail(f"field {field!r} holds NUL (\\u0000) at character {at}")
        return value


def iter_jsonl(
    path: str | Path,
    key: str,
    src_field: str = "document",
    tgt_field: str = "summary",
    limit: LineLimit = DEFAULT_LIMIT,
) -> Iterator[tuple[str, str]]:
    """(source, target) pairs from a JSON Lines file (one JSON object per line, as the
    Hugging Face exports of XSum, CNN/DailyMail and Gigaword are), one at a time.

    src_field / tgt_field: the fields holding the two sides (data.jsonl_src_field and
    data.jsonl_tgt_field); other fields are ignored. Lines follow the module's rules (UTF-8,
    gzip or not); an empty line, invalid JSON, NaN or Infinity, a repeated key, a value that
    is not an object, a missing field or one that is not a string are errors that name the
    file, the line and the field.
    """
    path = Path(path)
    for number, line in enumerate(iter_lines(path, key, limit), start=1):
        reader = _JSONLine(f"{key}: {path}", number)
        record = reader.parse(line)
        yield (
            reader.text(record, src_field, "data.jsonl_src_field"),
            reader.text(record, tgt_field, "data.jsonl_tgt_field"),
        )


def read_jsonl(
    path: str | Path,
    key: str,
    src_field: str = "document",
    tgt_field: str = "summary",
    limit: LineLimit = DEFAULT_LIMIT,
) -> list[tuple[str, str]]:
    """(source, target) pairs from a JSON Lines file; see iter_jsonl."""
    return list(iter_jsonl(path, key, src_field, tgt_field, limit))


def split_source(data, split: str, at: str = "data") -> str:
    """The config keys and files a split (`train` or `valid`) is read from, for messages;
    `at` is where in the config `data` is (data.corpora[1] for a corpus of several)."""
    if getattr(data, "corpora", ()):
        return "; ".join(
            split_source(c, split, f"{at}.corpora[{i}]") for i, c in enumerate(data.corpora)
        )
    for form in ("tsv", "jsonl"):
        if getattr(data, f"{split}_{form}", None) is not None:
            return f"{at}.{split}_{form} ({getattr(data, f'{split}_{form}')})"
    src, tgt = getattr(data, f"{split}_src"), getattr(data, f"{split}_tgt")
    return f"{at}.{split}_src and {at}.{split}_tgt ({src}, {tgt})"


def split_files(data, split: str, at: str = "data") -> list[tuple[str, Path]]:
    """(config key, path) of the files a split is read from: one TSV, one JSON Lines file or
    two aligned files. A JSON Lines key names its fields too ("data.train_jsonl[document,
    summary]"): `heedful prepare` fingerprints these keys, so other fields mean preparing again."""
    return _read_again(_named_files(data, split, at))


def _named_files(data, split: str, at: str) -> list[tuple[str, Path]]:
    """split_files' answer, from the config's keys alone (one form of a split, or an error)."""
    from heedful.config import ConfigError

    src, tgt = getattr(data, f"{split}_src"), getattr(data, f"{split}_tgt")
    single = {f: getattr(data, f"{split}_{f}", None) for f in ("tsv", "jsonl")}
    given = [f for f, path in single.items() if path is not None]
    if given:
        others = [f"{at}.{split}_{f}" for f in given[1:]]
        if src is not None or tgt is not None:
            others.append(f"{at}.{split}_src/_tgt")
        if others:
            raise ConfigError(
                f"{at}.{split}_{given[0]} and {', '.join(others)} are exclusive: give one"
            )
        if given[0] == "jsonl":
            fields = f"[{data.jsonl_src_field},{data.jsonl_tgt_field}]"
            return [(f"{at}.{split}_jsonl{fields}", Path(single["jsonl"]))]
        return [(f"{at}.{split}_tsv", Path(single["tsv"]))]
    if src is None or tgt is None:
        raise ConfigError(
            f"{at}.{split}_src and {at}.{split}_tgt (or {at}.{split}_tsv, or "
            f"{at}.{split}_jsonl) are required"
        )
    return [(f"{at}.{split}_src", Path(src)), (f"{at}.{split}_tgt", Path(tgt))]


def _read_again(files: list[tuple[str, Path]]) -> list[tuple[str, Path]]:
    """Training data is read more than once (the vocabulary, the batches, `prepare`'s passes),
    so a FIFO or a socket cannot be it: the second reading would find it empty, and opening a
    FIFO nothing writes to blocks for ever. Refused by name before opening (issue 26)."""
    for key, path in files:
        try:
            mode = path.stat().st_mode
        except OSError:  # missing or unreadable: the reader says which
            continue
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            kind = "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket"
            raise CorpusError(
                f"{key}: {path} is {kind}, not a file: training data is read more than once "
                "(the vocabulary, then the batches); write it to a file first"
            )
    return files


def iter_split(data, split: str, at: str = "data") -> Iterator[tuple[str, str]]:
    """The (source, target) pairs of a split as `data` (a DataConfig) names it, streamed;
    `at` where `data` is in the config, for messages."""
    files = split_files(data, split, at)
    limit = LineLimit(getattr(data, "max_line_bytes", MAX_LINE_BYTES))
    if len(files) == 2:
        (src_key, src), (tgt_key, tgt) = files
        return iter_parallel(src, tgt, src_key, tgt_key, limit)
    key, path = files[0]
    if key.startswith(f"{at}.{split}_jsonl"):
        fields = data.jsonl_src_field, data.jsonl_tgt_field
        return iter_jsonl(path, f"{at}.{split}_jsonl", *fields, limit)
    return iter_tsv(path, key, limit)


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
