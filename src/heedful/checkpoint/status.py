"""training.json: how a model directory's weights were trained, so that every trace header and
heatmap of it can say so (issue 28, item 5): the steps trained, what stopped training, the
scores on held-out data, what that data was, and whether the model is undertrained (a demo's
model below its target: its pictures are not what a trained model draws).

    {"steps": 3200, "stopped_by": "validation", "scores": {"exact_match": 1.0},
     "on": "1000 held-out dates", "undertrained": false}

Optional: a directory without it (written before it, averaged, exported, or by `heedful
train`) says nothing of its training. One that has it is read strictly, as the directory's other
files are: a damaged file is a CheckpointError naming it, never a model that loads half-said.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from heedful.io import CheckpointError, atomic_write_json, read_json

STATUS_FILE = "training.json"
MAX_STATUS_BYTES = 64 << 10  # a few hundred bytes when written
MAX_SCORES = 16
MAX_TEXT = 200  # characters of stopped_by and on
KEYS = ("steps", "stopped_by", "scores", "on", "undertrained")


def check_status(data: Any, where: str) -> dict:
    """`data` if it is a training status; CheckpointError naming `where` and the field if not."""

    def fail(problem: str) -> None:
        raise CheckpointError(f"{where}: {problem}")

    if not isinstance(data, dict):
        fail(f"must be a JSON object, got {type(data).__name__}")
    if sorted(data) != sorted(KEYS):
        fail(f"must have exactly the keys {', '.join(KEYS)}")
    steps = data["steps"]
    if not isinstance(steps, int) or isinstance(steps, bool) or not 0 <= steps < 2**53:
        fail(f"steps: expected a whole number from 0, got {steps!r:.40}")
    for key in ("stopped_by", "on"):
        if not isinstance(data[key], str) or len(data[key]) > MAX_TEXT:
            fail(f"{key}: expected text of at most {MAX_TEXT} characters")
    if not isinstance(data["undertrained"], bool):
        fail(f"undertrained: expected true or false, got {data['undertrained']!r:.40}")
    scores = data["scores"]
    if not isinstance(scores, dict) or len(scores) > MAX_SCORES:
        fail(f"scores: expected an object of at most {MAX_SCORES} numbers")
    for name, value in scores.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            fail(f"scores.{name[:40]}: expected a number, got {value!r:.40}")
        if not math.isfinite(value):
            fail(f"scores.{name[:40]}: expected a finite number, got {value}")
    return data


def read_status(directory: Path) -> dict | None:
    """The directory's training status, checked, or None when it has none."""
    path = Path(directory) / STATUS_FILE
    if not path.exists() and not path.is_symlink():
        return None
    return check_status(read_json(path, MAX_STATUS_BYTES), str(path))


def write_status(directory: Path, status: dict) -> None:
    """Write a status (checked first: what is written is what reads back) into a directory."""
    check_status(status, STATUS_FILE)
    atomic_write_json(Path(directory) / STATUS_FILE, status)


def status_line(status: dict, sep: str = "; ") -> str:
    """One line for a trace header, or (sep "\n") two for a picture's narrow title:
    "trained 3,200 steps (stopped by validation); exact match 100.0% on 1000 held-out dates",
    starting "UNDERTRAINED: " when it is."""
    scores = status["scores"]
    said = [
        f"exact match {100 * value:.1f}%" if name == "exact_match" else f"{name} {value:.4g}"
        for name, value in scores.items()
    ]
    line = f"trained {status['steps']:,} steps (stopped by {status['stopped_by']})"
    if said:
        line += f"{sep}{', '.join(said)} on {status['on']}"
    return ("UNDERTRAINED: " if status["undertrained"] else "") + line
