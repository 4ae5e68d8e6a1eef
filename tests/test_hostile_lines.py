"""Lines without an end: every reader of lines stops at its limit and names the file and line
(issue 26, class 6; and `--prefix FIFO`, class 8).

CASES: each reader (the training data keys through corpus.iter_split, `evaluate --src/--jsonl`,
`translate -i` and stdin, `translate --prefix`) against each hostile input: a line one byte over
the limit, a gzip of one huge line, a line of exactly the limit (accepted, with "\\n" and with
"\\r\\n"), a UTF-8 character or an invalid byte straddling the limit, /dev/zero, a FIFO (the
training keys refuse it before opening it: FIFOS). The data readers and evaluate run with a
limit of 64 bytes (data.max_line_bytes, --max-line-bytes); translate with its own (16 MiB at
least, data/lines.py). DEV_ZERO reads /dev/zero with the default limit in a subprocess whose
memory is capped by resource.setrlimit.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from heedful.cli import main
from heedful.config import DataConfig
from heedful.data.corpus import CorpusError, iter_split

LIMIT = 64
PREFIX, SUFFIX = b'{"document": "', b'", "summary": "b"}'  # a JSON Lines line around its text


def line(form: str, size: int, tail: bytes = b"", end: bytes = b"\n") -> bytes:
    """One line of `size` bytes (its end not counted) in the reader's format, its text of
    "a"s ending in `tail`, the bytes that straddle the limit."""
    around = {"text": (b"", b""), "tsv": (b"", b"\tb"), "jsonl": (PREFIX, SUFFIX)}[form]
    run = size - len(around[0]) - len(around[1]) - len(tail)
    return around[0] + b"a" * run + tail + around[1] + end


def gzip_of_one_line(path, size: int) -> None:
    """A gzip of one line of `size` "a"s, written in pieces (kilobytes on disk, for any size)."""
    with gzip.open(path, "wb", compresslevel=1) as out:
        for _ in range(size // 2**20):
            out.write(b"a" * 2**20)


def rows(form: str) -> list[tuple[str, bytes | None, tuple[str, ...]]]:
    """The hostile inputs, written in `form`: (id, bytes or None for the gzip, error words)."""
    ok = line(form, 10)
    over = ("line 2", f"longer than {LIMIT} bytes")
    return [
        ("over-by-one", ok + line(form, LIMIT + 1), over),
        ("gzip-32mib-line", None, ("line 1", f"longer than {LIMIT} bytes")),
        ("exactly-the-limit", ok + line(form, LIMIT), ()),
        ("exactly-the-limit-crlf", ok + line(form, LIMIT, end=b"\r\n"), ()),
        ("no-end-over-by-one", ok + line(form, LIMIT + 1, end=b""), over),
        ("utf8-straddles-the-limit", ok + line(form, LIMIT + 1, "é".encode()), over),
        ("invalid-utf8-straddles", ok + line(form, LIMIT + 1, b"\xc3"), over),
        ("invalid-utf8-at-the-limit", ok + line(form, LIMIT, b"\xff"),
         ("line 2", "invalid UTF-8 byte 0xff")),
    ]  # fmt: skip


READERS = {  # reader: (its format, the config key or option named)
    "train_src": ("text", "data.train_src"),
    "train_tsv": ("tsv", "data.train_tsv"),
    "train_jsonl": ("jsonl", "data.train_jsonl"),
    "evaluate-src": ("text", "--src"),
    "evaluate-jsonl": ("jsonl", "--jsonl"),
}
DEVICE = ("a device or socket, not a regular file",)
TRANSLATE = [  # translate's own limit (16 MiB at least), and --prefix
    ("translate-i", "dev-zero", "/dev/zero", ("/dev/zero", "line 1", "longer than 16,777,216")),
    ("translate-stdin", "dev-zero", "/dev/zero", ("<stdin>", "line 1", "longer than 16,777,216")),
    ("translate-i", "gzip-32mib-line", None, ("in.gz", "line 1", "longer than 16,777,216")),
    ("translate-prefix", "fifo", "FIFO", ("--prefix", "a FIFO, not a regular file")),
    ("translate-prefix", "dev-zero", "/dev/zero", ("--prefix", "/dev/zero", *DEVICE)),
]  # fmt: skip
FIFOS = [  # training data is read more than once: a FIFO is refused before it is opened
    (reader, "fifo", "FIFO", ("a FIFO (named pipe)", "read more than once"))
    for reader in ("train_src", "train_tsv", "train_jsonl")
]
DEV_ZERO = [  # the default limit, in a subprocess that may map only 512 MiB more
    (reader, "dev-zero-default-limit", "/dev/zero", ("line 1", "longer than 16,777,216 bytes"))
    for reader in ("train_src", "train_tsv", "train_jsonl")
]
CASES = [
    pytest.param(reader, data, words, id=f"{reader}-{name}")
    for reader in READERS
    for name, data, words in rows(READERS[reader][0])
] + [
    pytest.param(r, data, words, id=f"{r}-{name}")
    for r, name, data, words in TRANSLATE + FIFOS + DEV_ZERO
]


def _write(path, data: bytes | str | None) -> None:
    if data == "FIFO":
        os.mkfifo(path)  # nothing ever writes to it
    elif data is None:
        gzip_of_one_line(path, 32 * 2**20)
    else:
        path.write_bytes(data)


CAPPED = """
import resource, sys
from heedful.config import DataConfig
from heedful.data.corpus import CorpusError, iter_split
with open("/proc/self/status") as status:
    mapped = next(int(l.split()[1]) * 1024 for l in status if l.startswith("VmSize"))
resource.setrlimit(resource.RLIMIT_AS, (mapped + 2**29, resource.RLIM_INFINITY))
try:
    other = {"train_tgt": "/dev/null"} if sys.argv[1] == "train_src" else {}
    list(iter_split(DataConfig(**{sys.argv[1]: "/dev/zero"}, **other), "train"))
except CorpusError as error:
    print(error)
"""


def _capped(reader: str) -> str:
    """/dev/zero as `reader`'s file, read with the default limit under a memory cap."""
    done = subprocess.run([sys.executable, "-c", CAPPED, reader], capture_output=True, text=True)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    return done.stdout


def _translate(reader: str, data, tmp_path, model_dir) -> str:
    command = ["translate", str(model_dir)]
    if data is None:
        _write(tmp_path / "in.gz", None)
        command += ["-i", str(tmp_path / "in.gz")]
    elif reader == "translate-i":
        command += ["-i", data]
    if reader == "translate-prefix":
        if data == "FIFO":
            os.mkfifo(tmp_path / "fifo")  # nothing ever writes to it
            data = str(tmp_path / "fifo")
        command += ["--prefix", data]
    with open("/dev/zero" if reader == "translate-stdin" else "/dev/null", "rb") as stdin:
        result = CliRunner().invoke(main, command, input=stdin)
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    return result.output


def _read(reader: str, path, tmp_path, model_dir):
    """Read `path` with `reader` at LIMIT: -> (the error text or None, lines read)."""
    form, key = READERS[reader]
    data = b"" if path.name.endswith("gz") or path.is_fifo() else path.read_bytes()
    count = data.count(b"\n") + (not data.endswith(b"\n"))
    if reader.startswith("evaluate"):
        other = tmp_path / "other.txt"
        other.write_bytes(b"b\n" * count)
        files = (
            ["--jsonl", str(path)] if form == "jsonl" else ["--src", str(path), "--ref", str(other)]
        )
        result = CliRunner().invoke(
            main, ["evaluate", str(model_dir), *files, "--max-line-bytes", str(LIMIT)]
        )
        assert "Traceback" not in result.output
        return (result.output if result.exit_code else None), result.exit_code
    keys = {f"{reader}": str(path)}
    if reader == "train_src":
        keys["train_tgt"] = str(tmp_path / "other.txt")
        (tmp_path / "other.txt").write_bytes(b"b\n" * count)
    try:
        return None, list(iter_split(DataConfig(**keys, max_line_bytes=LIMIT), "train"))
    except CorpusError as error:
        return str(error), None


@pytest.mark.parametrize("reader, data, words", CASES)
def test_line_readers(reader, data, words, tmp_path, reverse_model_dir):
    if reader.startswith("translate"):
        output = _translate(reader, data, tmp_path, reverse_model_dir)
        assert all(w in output for w in words), output
        return
    if data == "/dev/zero":
        output = _capped(reader)
        assert all(w in output for w in words) and "data.max_line_bytes" in output, output
        return
    path = tmp_path / ("in.gz" if data is None else "in.txt")
    _write(path, data)
    error, pairs = _read(reader, path, tmp_path, reverse_model_dir)
    if not words:  # the line of exactly LIMIT bytes is read whole, its ending dropped
        assert error is None
        if not reader.startswith("evaluate"):  # (evaluate: exit 0, the pairs scored)
            around = {"text": 0, "tsv": 2, "jsonl": len(PREFIX) + len(SUFFIX)}
            assert pairs[1][0] == "a" * (LIMIT - around[READERS[reader][0]])
        return
    setting = "--max-line-bytes" if reader.startswith("evaluate") else "data.max_line_bytes"
    assert error is not None and all(w in error for w in words), error
    if "longer than" in words[-1]:
        assert setting in error
    assert READERS[reader][1] in error and path.name in error
