"""JSON Lines corpora (data.train_jsonl, issue 15) against hostile files: each case is read by
the reader (`iter_split`, which `heedful train` and `heedful prepare` both read through) and by
the real `heedful train`; a bad file is an error naming the file, the line and the field, never
a traceback, a shorter corpus or a silently changed pair.

The ids start with `row0-` for the usual cases of a surface (empty, huge, truncated, wrong type,
non-finite numbers, wrong encoding), as docs/hostile-inputs.md's tables do.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from heedful.cli import main
from heedful.config import Config, load_config
from heedful.data.corpus import CorpusError, iter_split

GOOD = b'{"document": "a man rides a bike", "summary": "man rides"}\n'
HUGE = "w " * 1_000_000  # a 2 MB document: read whole, then dropped by data.max_length


def line(**fields) -> bytes:
    return json.dumps(fields).encode() + b"\n"


@dataclass
class Case:
    content: bytes  # the train.jsonl file
    expect: str | list  # a regex of the error (file and line are checked too), or the pairs
    cli: str | None = None  # `heedful train`'s error when the reader's answer is pairs, or None
    sets: tuple[str, ...] = ()  # --set overrides
    located: bool = True  # the error names the file and a line
    valid: bytes = GOOD  # the valid.jsonl file


CASES = {
    # row0: empty, huge, truncated
    "row0-empty-file": Case(b"", [], cli="empty, no sentence pairs"),
    "row0-empty-line": Case(GOOD + b"\n" + GOOD, r"line 2: empty line: JSON Lines holds one"),
    "row0-blank-last-line": Case(GOOD + b"  \t\n", r"line 2: empty line"),
    "row0-huge-line": Case(
        GOOD + line(document=HUGE, summary="w"),
        [("a man rides a bike", "man rides"), (HUGE, "w")],
    ),
    "row0-truncated-line": Case(
        GOOD + b'{"document": "a man ri', r"line 2: invalid JSON at column 14: Unterminated string"
    ),
    "row0-truncated-object": Case(GOOD + b'{"document": "a"', r"line 2: invalid JSON at column 17"),
    "row0-truncated-gzip": Case(
        gzip.compress(GOOD * 2000)[:-300], r"the gzip data is damaged after line", located=False
    ),
    # row0: wrong types
    "row0-array-not-object": Case(b'["a", "b"]\n', r"line 1: expected a JSON object, got an array"),
    "row0-string-not-object": Case(b'"a man"\n', r"line 1: expected a JSON object, got a string"),
    "row0-number-field": Case(
        line(document=5, summary="x"),
        r"line 1: field 'document' \(data.jsonl_src_field\) must be a string, got a number",
    ),
    "row0-null-field": Case(
        line(document="x", summary=None),
        r"line 1: field 'summary' \(data.jsonl_tgt_field\) must be a string, got null",
    ),
    "row0-array-field": Case(
        line(document=["a", "b"], summary="x"), r"field 'document' .* got an array"
    ),
    "row0-bool-field": Case(line(document="x", summary=True), r"'summary' .* got true or false"),
    # row0: non-finite numbers (Python's json reads NaN and Infinity; JSON has neither)
    "row0-nan-field": Case(b'{"document": NaN, "summary": "x"}\n', r"line 1: NaN is not JSON"),
    "row0-infinity-other-field": Case(
        b'{"document": "a", "summary": "b", "score": -Infinity}\n', r"-Infinity is not JSON"
    ),
    "row0-overflow-to-inf": Case(
        b'{"document": "a", "summary": 1e999}\n', r"'summary' .* must be a string, got a number"
    ),
    "row0-integer-too-long": Case(
        b'{"document": "a", "summary": "b", "id": ' + b"7" * 5000 + b"}\n",
        r"line 1: invalid JSON: Exceeds the limit",
    ),
    # row0: wrong encodings
    "row0-utf16-with-bom": Case(
        GOOD.decode().encode("utf-16"), r"UTF-16 byte-order mark", located=False
    ),
    "row0-utf16-without-bom": Case(GOOD.decode().encode("utf-16-le"), r"line 1: NUL byte"),
    "row0-latin1": Case(
        GOOD + '{"document": "café"}\n'.encode("latin-1"), r"line 2: invalid UTF-8"
    ),
    "row0-lone-surrogate": Case(
        b'{"document": "a\\ud800b", "summary": "x"}\n', r"line 1: field 'document' holds a lone"
    ),
    "row0-nul-escape": Case(
        b'{"document": "a", "summary": "x\\u0000"}\n', r"line 1: field 'summary' holds NUL"
    ),
    # missing or repeated fields, other JSON faults
    "missing-source-field": Case(
        GOOD + line(article="a", highlights="b"),
        r"line 2: no field 'document' \(data.jsonl_src_field\); the object's fields: 'article', ",
    ),
    "missing-target-field": Case(line(document="a"), r"line 1: no field 'summary'"),
    "repeated-key": Case(
        b'{"document": "a", "summary": "b", "summary": "c"}\n', r"'summary' appears twice"
    ),
    "trailing-comma": Case(b'{"document": "a", "summary": "b",}\n', r"line 1: invalid JSON"),
    "nested-too-deeply": Case(b"[" * 100_000 + b"\n", r"line 1: invalid JSON: nested too deeply"),
    "two-objects-on-a-line": Case(
        GOOD.strip() + GOOD, r"line 1: invalid JSON at column 59: Extra data"
    ),
    # correct behaviour
    "other-field-names": Case(
        line(article="a man rides", highlights="man rides", id="7"),
        [("a man rides", "man rides")],
        sets=("data.jsonl_src_field=article", "data.jsonl_tgt_field=highlights"),
        valid=line(article="a man", highlights="man"),
    ),
    "utf8-bom-crlf-escapes": Case(
        b"\xef\xbb\xbf" + GOOD.replace(b"\n", b"\r\n") + line(document="a\nb\u2028", summary="\t"),
        [("a man rides a bike", "man rides"), ("a\nb\u2028", "\t")],
    ),
    "jsonl-and-tsv-both-given": Case(
        GOOD,
        r"data.train_tsv and data.train_jsonl are exclusive",
        sets=("data.train_tsv=x",),
        located=False,
    ),
}

CONFIG = """\
data:
  train_jsonl: {d}/train.jsonl
  valid_jsonl: {d}/valid.jsonl
  tokenizer: char
  max_length: 40
model:
  arch: rnn
  d_model: 8
  hidden_size: 8
  dropout: 0.0
train:
  max_steps: 1
  eval_every: 1
  batch_tokens: 200
"""


def files(tmp_path: Path, case: Case) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_bytes(case.content)
    (data / "valid.jsonl").write_bytes(case.valid)
    (tmp_path / "c.yaml").write_text(CONFIG.format(d=data), encoding="utf-8")
    return data


@pytest.mark.parametrize("case", CASES.values(), ids=CASES)
def test_the_reader(tmp_path, case: Case):
    data = files(tmp_path, case)
    config = load_config(tmp_path / "c.yaml", case.sets, Config).data
    if isinstance(case.expect, list):
        assert list(iter_split(config, "train")) == case.expect
        return
    with pytest.raises(ValueError, match=case.expect) as caught:
        list(iter_split(config, "train"))
    if case.located:
        assert isinstance(caught.value, CorpusError)
        where = f"data.train_jsonl: {data / 'train.jsonl'}: line "
        assert str(caught.value).startswith(where), str(caught.value)


@pytest.mark.parametrize("case", CASES.values(), ids=CASES)
def test_heedful_train(tmp_path, case: Case):
    files(tmp_path, case)
    argv = ["train", str(tmp_path / "c.yaml"), "--run-dir", str(tmp_path / "run"), "--no-progress"]
    result = CliRunner().invoke(main, [*argv, *(a for s in case.sets for a in ("--set", s))])
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    error = case.expect if isinstance(case.expect, str) else case.cli
    if error is None:
        assert result.exit_code == 0, result.output
        assert (tmp_path / "run" / "latest").exists()
    else:
        assert result.exit_code == 1, result.output
        assert re.search(error, result.output), result.output
