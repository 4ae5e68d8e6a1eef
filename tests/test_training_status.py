"""A model directory's training.json (issue 28, item 5; checkpoint/status.py): how its weights
were trained, said by every trace header and heatmap of it; the demo writes it. HOSTILE: each
damaged file is refused by name when the directory loads, by heedful.load and in one line by
`heedful translate`, never a model that loads half-said. docs/hostile-inputs.md counts them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import heedful
from heedful.checkpoint.status import STATUS_FILE, check_status, status_line, write_status
from heedful.cli import main
from heedful.io import CheckpointError
from heedful.visualize.heatmap import _trace_figure
from heedful.visualize.trace import Trace, build_trace

GOLDEN = Path(__file__).resolve().parent / "golden" / "models" / "transformer"
GOOD = {
    "steps": 3200,
    "stopped_by": "validation",
    "scores": {"exact_match": 0.998, "bleu1": 99.5},
    "on": "1000 held-out dates",
    "undertrained": False,
}


@pytest.fixture
def model_dir(tmp_path) -> Path:
    directory = tmp_path / "model"
    shutil.copytree(GOLDEN, directory)
    write_status(directory, GOOD)
    return directory


def with_status(data) -> bytes:
    return json.dumps(data).encode("utf-8")


def changed(**fields) -> bytes:
    return with_status({**GOOD, **fields})


VALID = with_status(GOOD)
HOSTILE = [
    # row0: empty, truncated, wrong type, non-finite, huge, wrong encoding
    ("row0-empty", b"", "not valid JSON"),
    ("row0-truncated", VALID[: len(VALID) // 2], "not valid JSON"),
    ("row0-a-list", b"[3200]", "must be a JSON object, got list"),
    ("row0-steps-text", changed(steps="3200"), "steps: expected a whole number from 0"),
    ("row0-steps-float", changed(steps=3.5), "steps: expected a whole number from 0"),
    ("row0-steps-negative", changed(steps=-1), "steps: expected a whole number from 0"),
    ("row0-steps-huge", changed(steps=2**64), "steps: expected a whole number from 0"),
    ("row0-steps-bool", changed(steps=True), "steps: expected a whole number from 0"),
    ("row0-score-nan", VALID.replace(b"0.998", b"NaN"), "scores.exact_match: expected a finite"),
    ("row0-score-infinite", VALID.replace(b"0.998", b"1e999"), "expected a finite number, got"),
    ("row0-score-text", changed(scores={"bleu": "99"}), "scores.bleu: expected a number"),
    ("row0-scores-list", changed(scores=[1.0]), "scores: expected an object of at most 16"),
    (
        "row0-scores-many",
        changed(scores={f"s{i}": 1.0 for i in range(17)}),
        "scores: expected an object of at most 16",
    ),
    ("row0-huge", b" " * (64 << 10) + VALID, "more than the 65,536 a heedful training.json"),
    ("row0-utf16", VALID.decode().encode("utf-16"), "UTF-16 or binary, not UTF-8 text"),
    ("row0-latin1", VALID.replace(b"held-out", b"h\xe9ld-out"), "not UTF-8 (invalid byte 0xe9"),
    # its own fields
    ("missing-key", with_status({k: v for k, v in GOOD.items() if k != "on"}), "exactly the keys"),
    ("unknown-key", changed(seconds=140.0), "must have exactly the keys"),
    ("repeated-key", VALID.replace(b'{"steps"', b'{"steps": 1, "steps"'), "not valid JSON"),
    ("undertrained-text", changed(undertrained="no"), "undertrained: expected true or false"),
    ("stopped-by-number", changed(stopped_by=5), "stopped_by: expected text of at most 200"),
    ("on-too-long", changed(on="x" * 201), "on: expected text of at most 200 characters"),
]


@pytest.mark.parametrize(
    ("data", "fragment"), [c[1:] for c in HOSTILE], ids=[c[0] for c in HOSTILE]
)
def test_a_damaged_training_status_is_refused_by_name(model_dir, data, fragment):
    (model_dir / STATUS_FILE).write_bytes(data)
    with pytest.raises(CheckpointError) as caught:
        heedful.load(model_dir)
    message = str(caught.value)
    assert str(model_dir / STATUS_FILE) in message and fragment in message, message
    result = CliRunner().invoke(main, ["translate", str(model_dir)], input="abc\n")
    assert result.exit_code == 1 and "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], lines


def test_every_trace_and_heatmap_of_the_directory_says_how_it_was_trained(model_dir):
    translator = heedful.load(model_dir)
    assert translator.training == GOOD
    trace = build_trace(translator, "abcd")
    assert trace.to_dict()["training"] == GOOD
    assert Trace.from_dict(json.loads(json.dumps(trace.to_dict()))).training == GOOD
    title = _trace_figure(trace).axes[0].get_title()  # the heatmap --png draws
    lines = [
        "trained 3,200 steps (stopped by validation)",
        "exact match 99.8%, bleu1 99.5 on 1000 held-out dates",
    ]
    assert title.splitlines()[:3] == [*lines, "source: 'abcd'"], title
    (model_dir / STATUS_FILE).unlink()  # a directory that does not say: its traces do not
    assert "training" not in build_trace(heedful.load(model_dir), "abcd").to_dict()


def test_an_undertrained_model_says_so_first():
    assert status_line({**GOOD, "undertrained": True}).startswith("UNDERTRAINED: trained 3,200")
    with pytest.raises(CheckpointError, match="training: undertrained"):
        check_status({**GOOD, "undertrained": None}, "training")


def test_an_image_models_overlay_says_how_it_was_trained(tmp_path, monkeypatch):
    """`heedful attention IMAGE_MODEL picture --png`: the overlay's title starts with it too."""
    import numpy as np
    from PIL import Image

    model = tmp_path / "captioner"
    fixture = GOLDEN.parents[2] / "fixtures" / "model_dirs" / "image-cnn-rnn-bahdanau"
    shutil.copytree(fixture, model)
    write_status(model, {**GOOD, "undertrained": True, "on": "1000 held-out scenes"})
    picture = tmp_path / "scene.png"
    Image.fromarray(np.full((48, 48, 3), 200, dtype=np.uint8)).save(picture)
    titles = []
    monkeypatch.setattr(
        "heedful.visualize.overlay.draw_overlay", lambda *args: titles.append(args[-1])
    )
    args = ["attention", str(model), str(picture), "--png", str(tmp_path / "o.png")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    [title] = titles
    assert title.startswith("UNDERTRAINED: trained 3,200 steps (stopped by validation); exact")
