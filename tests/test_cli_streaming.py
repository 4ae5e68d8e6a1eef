"""`heedful translate` in a pipe: each line answered as it arrives, before stdin is closed, with
the outputs a file gives; `-` for stdin (and stdout); the pieces stdin is cut into
(cli/translate_input.py); `evaluate --src -`."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from queue import Queue

import pytest
from click.testing import CliRunner

from heedful.cli import main
from heedful.cli.translate_input import arrivals

WORDS = ["abc", "hgfe", "cabbage"]  # the reverse model (tests/conftest.py) reverses a-h words
READ_TIMEOUT = 300  # seconds: only so that a translate that never answers fails, not hangs


def _file_output(model_dir, tmp_path, lines: list[str]) -> str:
    """What `translate -i FILE` writes for `lines`: the outputs stdin must match."""
    (tmp_path / "in.txt").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    result = CliRunner().invoke(main, ["translate", str(model_dir), "-i", str(tmp_path / "in.txt")])
    assert result.exit_code == 0, result.output
    return result.output


class _Lines:
    """A process's stdout read by a thread, so that a test can wait for a line with a timeout."""

    def __init__(self, stream):
        self.queue: Queue = Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in iter(stream.readline, ""):
            self.queue.put(line)
        self.queue.put(None)

    def next(self) -> str | None:
        from queue import Empty

        try:
            return self.queue.get(timeout=READ_TIMEOUT)
        except Empty:
            raise AssertionError("no line came back while stdin was still open") from None


def _start(model_dir, *args: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "heedful", "translate", str(model_dir), *args]
    return subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.parametrize("args", [[], ["-i", "-", "-o", "-"]], ids=["stdin", "dash"])
def test_each_line_comes_back_before_the_next_is_written(args, reverse_model_dir, tmp_path):
    expected = _file_output(reverse_model_dir, tmp_path, WORDS).splitlines(keepends=True)
    process = _start(reverse_model_dir, *args)
    try:
        lines = _Lines(process.stdout)
        answers = []
        for word in WORDS:
            process.stdin.write(word + "\n")
            process.stdin.flush()
            answers.append(lines.next())  # stdin still open: the line must come back now
        process.stdin.close()
        assert lines.next() is None  # and nothing more
        assert process.wait(timeout=READ_TIMEOUT) == 0, process.stderr.read()
    finally:
        process.kill()
        process.wait()
    assert answers == expected


def test_an_error_in_the_stream_comes_after_the_lines_before_it(reverse_model_dir, tmp_path):
    expected = _file_output(reverse_model_dir, tmp_path, ["abc"])
    data = "abc\n" + "a" * 20 + "\n"
    command = ["translate", str(reverse_model_dir), "--max-chars", "10"]
    result = CliRunner().invoke(main, command, input=data)
    assert result.exit_code == 1
    assert result.stdout == expected  # line 1's translation, written before line 2 was read
    assert "<stdin>: line 2 has 20 characters" in result.stderr


def test_a_file_piped_in_gives_what_the_file_gives(reverse_model_dir, tmp_path):
    lines = [WORDS[i % 3] * (1 + i % 4) for i in range(300)]  # several windows of batches
    expected = _file_output(reverse_model_dir, tmp_path, lines)
    data = "".join(line + "\n" for line in lines)
    command = ["translate", str(reverse_model_dir), "-i", "-", "--batch-size", "4"]
    result = CliRunner().invoke(main, command, input=data)
    assert result.exit_code == 0, result.output
    assert result.output == expected


def _gated(first: list[str], gate: threading.Event, rest: list[str], error=None):
    """`first`, then (once `gate` is set) `rest`, then `error` raised if given."""
    yield from first
    gate.wait()
    yield from rest
    if error is not None:
        raise error


def test_a_piece_is_what_has_arrived_and_no_more_than_a_window():
    gate = threading.Event()
    pieces = arrivals(_gated(["a"], gate, [str(i) for i in range(10)]), window=4)
    assert next(pieces) == ["a"]  # line 2 is not there yet: line 1 goes alone
    gate.set()
    rest = list(pieces)
    assert [line for piece in rest for line in piece] == [str(i) for i in range(10)]
    assert all(1 <= len(piece) <= 4 for piece in rest)


def test_a_reading_error_is_raised_after_the_lines_read_before_it():
    gate = threading.Event()
    gate.set()
    taken = []
    with pytest.raises(ValueError, match="line 3 is bad"):
        for piece in arrivals(_gated(["a", "b"], gate, [], ValueError("line 3 is bad")), 8):
            taken += piece
    assert taken == ["a", "b"]


def test_evaluate_reads_a_dash_from_stdin(reverse_model_dir, reverse_test_set, tmp_path):
    sources = "".join(s + "\n" for s, _ in reverse_test_set[:20])
    (tmp_path / "src.txt").write_text(sources, encoding="utf-8")
    (tmp_path / "ref.txt").write_text("".join(r + "\n" for _, r in reverse_test_set[:20]))
    base = [sys.executable, "-m", "heedful", "evaluate", str(reverse_model_dir), "--json"]
    ref = ["--ref", str(tmp_path / "ref.txt")]
    run = dict(capture_output=True, text=True, timeout=READ_TIMEOUT)
    from_file = subprocess.run([*base, "--src", str(tmp_path / "src.txt"), *ref], **run)
    from_stdin = subprocess.run([*base, "--src", "-", *ref], input=sources, **run)
    assert from_stdin.returncode == 0, from_stdin.stderr
    file_scores, stdin_scores = json.loads(from_file.stdout), json.loads(from_stdin.stdout)
    assert stdin_scores["scores"] == file_scores["scores"]
    assert stdin_scores["sentences"] == 20


def test_evaluate_reads_stdin_once():
    result = CliRunner().invoke(main, ["evaluate", "m", "--src", "-", "--ref", "-"])
    assert result.exit_code == 2 and "--src and --ref cannot both read stdin" in result.output
