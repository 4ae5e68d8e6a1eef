"""Hostile training-snapshot files (RUN_DIR/snapshots.json, issue 28, item 3): each is refused by
read_snapshots with an error naming the file and the field, and by `heedful attention RUN_DIR
--html` in one line, writing no page; training resuming beside one begins the file anew.

The valid base holds the committed golden trace twice (tests/golden/expected); each case damages
one thing. docs/hostile-inputs.md counts these CASES.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from heedful.cli import main
from heedful.visualize.snapshots import (
    FILE_NAME,
    MAX_SNAPSHOTS_BYTES,
    check_snapshots,
    read_snapshots,
)

from .test_hostile_traces import set_in

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "expected"
TRACE = json.loads((GOLDEN / "trace-transformer-greedy.json").read_text("utf-8"))


def base() -> dict:
    """Two snapshots of one input: before training, and at step 4 with its scores."""
    return {
        "format": "heedful-snapshots",
        "version": 1,
        "inputs": [TRACE["source"]],
        "snapshots": [
            {"step": 0, "scores": {}, "traces": [copy.deepcopy(TRACE)]},
            {"step": 4, "scores": {"loss": 0.5, "bleu": 12.5}, "traces": [copy.deepcopy(TRACE)]},
        ],
    }


def edit(change):
    def make() -> bytes:
        data = base()
        change(data)
        return json.dumps(data).encode("utf-8")

    return make


def raw(data: bytes):
    return lambda: data


def snapshot(i: int) -> dict:
    return {"step": i, "scores": {}, "traces": [copy.deepcopy(TRACE)]}


VALID = json.dumps(base()).encode("utf-8")

CASES = [
    # row0: empty, truncated, wrong type, non-finite, huge, wrong encoding
    ("row0-empty", raw(b""), "not valid JSON"),
    ("row0-truncated", raw(VALID[: len(VALID) // 2]), "not valid JSON"),
    ("row0-truncated-to-one-brace", raw(b"{"), "not valid JSON"),
    ("row0-a-list", raw(b"[]"), "expected a JSON object, got list"),
    ("row0-a-number", raw(b"7"), "expected a JSON object, got int"),
    ("row0-nan-score", raw(VALID.replace(b'"loss": 0.5', b'"loss": NaN')), "holds NaN"),
    ("row0-infinite-score", raw(VALID.replace(b'"loss": 0.5', b'"loss": Infinity')), "Infinity"),
    ("row0-overflowing-score", raw(VALID.replace(b'"loss": 0.5', b'"loss": 1e999')), "loss"),
    ("row0-utf16", raw(VALID.decode().encode("utf-16")), "not UTF-8 text"),
    ("row0-latin1", raw(VALID.replace(b'"format"', b'"f\xe9rmat"')), "not UTF-8 text"),
    ("row0-nested-too-deeply", raw(b"[" * 100_000 + b"]" * 100_000), "nested too deeply"),
    # the file's own fields
    ("format", edit(set_in(["format"], "heedful-trace")), "not heedful training snapshots"),
    ("version", edit(set_in(["version"], 2)), "this heedful reads version 1, got 2"),
    ("unknown-key", edit(set_in(["extra"], 1)), "must have exactly the keys"),
    ("no-inputs", edit(set_in(["inputs"], [])), "expected 1 to 4 inputs, got 0"),
    ("too-many-inputs", edit(set_in(["inputs"], ["a"] * 5)), "expected 1 to 4 inputs, got 5"),
    ("input-not-text", edit(set_in(["inputs", 0], 5)), "inputs[0]: expected text, got int"),
    ("no-snapshots", edit(set_in(["snapshots"], [])), "expected 1 to 50 snapshots, got 0"),
    (
        "too-many-snapshots",
        edit(set_in(["snapshots"], [snapshot(i) for i in range(51)])),
        "expected 1 to 50 snapshots, got 51",
    ),
    ("snapshot-not-object", edit(set_in(["snapshots", 0], [])), "snapshots[0]: expected an"),
    ("snapshot-key", edit(set_in(["snapshots", 0, "seconds"], 1)), "snapshots[0]: must have"),
    ("step-text", edit(set_in(["snapshots", 1, "step"], "4")), "snapshots[1].step: expected"),
    ("step-bool", edit(set_in(["snapshots", 0, "step"], False)), "expected a whole number"),
    ("step-float", edit(set_in(["snapshots", 1, "step"], 4.5)), "snapshots[1].step: expected"),
    ("steps-fall", edit(set_in(["snapshots", 1, "step"], 0)), "steps must rise: 0 after 0"),
    ("step-negative", edit(set_in(["snapshots", 0, "step"], -3)), "steps must rise: -3 after"),
    ("scores-list", edit(set_in(["snapshots", 1, "scores"], [1])), "expected an object of"),
    ("score-text", edit(set_in(["snapshots", 1, "scores", "bleu"], "12")), "bleu: expected a"),
    ("score-bool", edit(set_in(["snapshots", 1, "scores", "bleu"], True)), "bleu: expected a"),
    (
        "too-many-scores",
        edit(set_in(["snapshots", 1, "scores"], {f"s{i}": 1.0 for i in range(65)})),
        "65 scores, more than 64",
    ),
    ("traces-object", edit(set_in(["snapshots", 0, "traces"], {})), "expected a list of 1"),
    ("traces-short", edit(set_in(["snapshots", 0, "traces"], [])), "expected 1 traces (one"),
    ("trace-not-a-trace", edit(set_in(["snapshots", 0, "traces", 0], 7)), "not a heedful"),
    (
        "trace-of-another-input",
        edit(set_in(["snapshots", 1, "traces", 0, "source"], "zzz")),
        "snapshots[1].traces[0]: a trace of 'zzz', not of inputs[0]",
    ),
    (
        "trace-score-text",
        edit(set_in(["snapshots", 1, "traces", 0, "hypotheses", 0, "score"], "x")),
        "snapshots[1].traces[0]: hypotheses[0].score",
    ),
    (
        "trace-matrix-short",
        edit(set_in(["snapshots", 1, "traces", 0, "hypotheses", 0, "cross_attention", 0], [])),
        "snapshots[1].traces[0]: hypotheses[0].cross_attention[0]: expected",
    ),
]


def write(tmp_path: Path, make) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / FILE_NAME).write_bytes(make())
    return run


def test_the_base_is_valid(tmp_path):
    data = read_snapshots(write(tmp_path, lambda: VALID))
    assert [s["step"] for s in data["snapshots"]] == [0, 4]
    assert check_snapshots(base()) == base()


@pytest.mark.parametrize(("make", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_snapshots_are_refused_by_name(tmp_path, make, fragment):
    run = write(tmp_path, make)
    with pytest.raises(ValueError) as caught:
        read_snapshots(run)
    message = str(caught.value)
    assert message.startswith(str(run / FILE_NAME)) and fragment in message, message
    page = tmp_path / "page.html"
    result = CliRunner().invoke(main, ["attention", str(run), "--html", str(page)])
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and fragment in lines[0], lines
    assert "Traceback" not in result.output and not page.exists()


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    with open(run / FILE_NAME, "wb") as f:  # sparse: no disk spent
        f.truncate(MAX_SNAPSHOTS_BYTES + 1)
    with pytest.raises(ValueError, match="larger than the .* bytes a snapshots file may have"):
        read_snapshots(run)


def test_a_directory_without_snapshots_says_what_turns_them_on(tmp_path):
    result = CliRunner().invoke(main, ["attention", str(tmp_path), "--html", "x.html"])
    assert result.exit_code == 1
    assert "no training snapshots there (train.snapshot_sentences" in result.output
