"""Parallel corpus reading: line rules, errors that point at the problem, pairs dropped as pairs."""

from __future__ import annotations

import re

import pytest

from heedful.data.corpus import (
    CorpusError,
    FilterReport,
    filter_pairs,
    read_lines,
    read_parallel,
    read_tsv,
)
from heedful.data.tokenizers import CharTokenizer


def write(path, data: bytes):
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    "data, lines",
    [
        (b"one\ntwo\n", ["one", "two"]),  # a final newline adds no empty line
        (b"one\ntwo", ["one", "two"]),  # nor does its absence lose the last line
        (b"one\r\ntwo\r\n", ["one", "two"]),
        (b"one\r\ntwo", ["one", "two"]),
        (b"one\n\ntwo\n", ["one", "", "two"]),  # a blank line is a line
        (b"one\n\n", ["one", ""]),
        (b" padded \t\n", [" padded \t"]),  # only the newline is removed
        (b"", []),
        (b"\n", [""]),
        (b"\xef\xbb\xbfone\n", ["one"]),  # a UTF-8 byte-order mark is not text
        ("a\u2028b\x85c\x0cd\re\n".encode(), ["a\u2028b\x85c\x0cd\re"]),  # not line ends
    ],
)
def test_read_lines_splits_only_at_newlines(tmp_path, data, lines):
    assert read_lines(write(tmp_path / "f.txt", data), "data.train_src") == lines


@pytest.mark.parametrize(
    "data, line, offset, in_line",
    [
        (b"good line\nsecond \xff bad\nthird\n", 2, 17, 7),
        (b"\x80starts bad\n", 1, 0, 0),
        ("café\r\nend cut short ".encode() + b"\xc3", 2, 21, 14),  # file ends mid-character
        (b"\xef\xbb\xbfbom then\n\xc3(\n", 2, 12, 0),  # the offset counts the mark's 3 bytes
    ],
)
def test_invalid_utf8_names_file_line_and_byte_offsets(tmp_path, data, line, offset, in_line):
    path = write(tmp_path / "train.de", data)
    # The expected numbers are consistent: a non-ASCII byte, in_line bytes after a line start.
    assert data[offset] >= 0x80 and data[offset - in_line - 1 : offset - in_line] in (b"", b"\n")
    with pytest.raises(CorpusError) as caught:
        read_lines(path, "data.train_tgt")
    message = str(caught.value)
    assert message.startswith(f"data.train_tgt: {path}: line {line}: invalid UTF-8")
    assert f"byte offset {offset} of the file, {in_line} of the line" in message


def test_missing_file_names_the_key_and_the_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        CorpusError, match=r"^data\.train_src: file not found: corpora/x\.en \("
    ) as e:
        read_lines("corpora/x.en", "data.train_src")
    assert "directory corpora does not exist" in str(e.value)
    assert str(tmp_path / "corpora" / "x.en") in str(e.value)  # where a relative path was sought
    (tmp_path / "corpora").mkdir()
    with pytest.raises(CorpusError, match=r"^data\.valid_src: file not found: corpora/x\.en"):
        read_parallel("corpora/x.en", "corpora/x.de", "data.valid_src", "data.valid_tgt")
    with pytest.raises(CorpusError, match=r"^data\.train_tsv: is a directory, not a file: corpora"):
        read_tsv("corpora", "data.train_tsv")


def test_unequal_line_counts_name_both_files_and_both_counts(tmp_path):
    src = write(tmp_path / "train.en", b"a\nb\nc\n")
    tgt = write(tmp_path / "train.de", b"A\nB\n")
    with pytest.raises(CorpusError) as caught:
        read_parallel(src, tgt, "data.train_src", "data.train_tgt")
    message = str(caught.value)
    for part in ("data.train_src", "data.train_tgt", f"{src} has 3 lines", f"{tgt} has 2"):
        assert part in message
    # A trailing newline on one side only is not a difference.
    write(tmp_path / "train.de", b"A\nB\nC")
    assert read_parallel(src, tgt, "data.train_src", "data.train_tgt")[-1] == ("c", "C")


def test_aligned_files_and_tsv_give_the_same_pairs(tmp_path):
    pairs = [("Two dogs run.", "Zwei Hunde rennen."), ("", "Leer links."), (" a  b ", "ä\u2028ö")]
    src = write(tmp_path / "x.en", "".join(s + "\n" for s, _ in pairs).encode())
    tgt = write(tmp_path / "x.de", "".join(t + "\r\n" for _, t in pairs).encode())
    tsv = write(tmp_path / "x.tsv", "\n".join(f"{s}\t{t}" for s, t in pairs).encode())
    assert read_parallel(src, tgt, "data.train_src", "data.train_tgt") == pairs
    assert read_tsv(tsv, "data.train_tsv") == pairs


@pytest.mark.parametrize("bad_line", ["no tab here", "one\ttwo\tthree", ""])
def test_tsv_line_without_exactly_one_tab_names_file_and_line(tmp_path, bad_line):
    path = write(tmp_path / "train.tsv", f"a\tA\nb\tB\n{bad_line}\nc\tC\n".encode())
    tabs = bad_line.count("\t")
    expected = f"data.train_tsv: {path}: line 3: expected source TAB target (one TAB), found {tabs}"
    with pytest.raises(CorpusError, match=re.escape(expected)):
        read_tsv(path, "data.train_tsv")


def test_corpus_errors_are_value_errors():
    assert issubclass(CorpusError, ValueError)


class WordTokenizer:
    """One id per whitespace-separated word: lengths in tokens differ from lengths in chars."""

    def encode(self, text: str) -> list[int]:
        return [4 + len(word) for word in text.split()]


def test_filter_drops_pairs_as_pairs_and_counts_why():
    words = WordTokenizer()
    pairs = [
        ("k1 a", "K1 A"),
        ("", "K2 dropped"),  # empty source
        ("k3 dropped", " \t "),  # whitespace-only target
        ("k4 b c", "K4 B C D E F"),  # target has 6 > 5 tokens
        ("k5 x x x x x", "K5"),  # source has 6 tokens
        ("k6 averyveryverylongword", "K6 exactly five tokens here"),  # 5 tokens: kept
        ("k7 end", "K7 END"),
    ]
    src_ids, tgt_ids, report = filter_pairs(pairs, words, words, max_length=5)
    assert report == FilterReport(kept=3, dropped_empty=2, dropped_too_long=2)
    kept = [pairs[0], pairs[5], pairs[6]]
    assert src_ids == [words.encode(s) for s, _ in kept]
    assert tgt_ids == [words.encode(t) for _, t in kept]  # still aligned with their sources
    assert str(report) == (
        "kept 3 of 7 pairs (dropped 2 with an empty side, 2 longer than max_length on a side)"
    )


def test_filter_with_a_real_tokenizer_counts_its_tokens():
    chars = CharTokenizer.train(["abcdef"])
    src_ids, tgt_ids, report = filter_pairs([("abc", "abcd"), ("ab", "a")], chars, chars, 3)
    assert (src_ids, tgt_ids) == ([chars.encode("ab")], [chars.encode("a")])
    assert (report.kept, report.dropped_empty, report.dropped_too_long) == (1, 0, 1)
