"""Training snapshots: a few fixed inputs traced before the first step and at every validation
(RUN_DIR/snapshots.json, written by training/snapshots.py), and their page, the viewer with a
training-step slider (the self-attention article: "at first the weights are basically random
numbers; once trained they become meaningful").

The file (docs/trace-schema.md, "Training snapshots"):

    {"format": "heedful-snapshots", "version": 1,
     "inputs": [the source of each traced input, as its traces say it],
     "snapshots": [{"step": 0, "scores": {}, "traces": [a trace or null per input]},
                   {"step": 200, "scores": {"loss": 0.41, "bleu": 71.2, ...}, "traces": [...]}]}

Steps rise; scores are the validation's numbers at that step (none before the first step); a
trace is null where it was over SNAPSHOT_TRACE_BYTES even without its internals. It is read as
strictly as a trace file (trace_check.py): every problem is a ValueError naming the file and
the field.
"""

from __future__ import annotations

import functools
import math
import re
from html import escape
from importlib import resources
from pathlib import Path
from typing import Any

from heedful.config import MAX_SNAPSHOT_SENTENCES, MAX_SNAPSHOT_VALIDATIONS
from heedful.safejson import for_script
from heedful.visualize.html import viewer_template
from heedful.visualize.trace import Trace
from heedful.visualize.trace_check import read_trace_json

FORMAT, VERSION = "heedful-snapshots", 1
FILE_NAME = "snapshots.json"  # in a run directory, or a demo's output directory
SNAPSHOT_TRACE_BYTES = 1 << 20  # a trace's JSON at most; over it, without internals; then null
# the largest file the writer can make: every trace at its limit, plus the rest
MAX_SNAPSHOTS_BYTES = (MAX_SNAPSHOT_SENTENCES * MAX_SNAPSHOT_VALIDATIONS + 1) * SNAPSHOT_TRACE_BYTES
MAX_SCORES = 64  # numbers of one validation (a multilingual run has one BLEU per target)
KEYS = {"format", "version", "inputs", "snapshots"}


def _fail(where: str, problem: str) -> None:
    raise ValueError(f"{where}: {problem}")


def _kind(value: Any, kinds: type | tuple, where: str, name: str) -> Any:
    if not isinstance(value, kinds) or isinstance(value, bool):
        _fail(where, f"expected {name}, got {type(value).__name__}")
    return value


def _listed(value: Any, where: str, name: str, largest: int) -> list:
    _kind(value, list, where, f"a list of {name}")
    if not 1 <= len(value) <= largest:
        _fail(where, f"expected 1 to {largest} {name}, got {len(value)}")
    return value


def _check_scores(scores: Any, where: str) -> None:
    """A validation's numbers by name: finite, at most MAX_SCORES of them."""
    _kind(scores, dict, where, "an object of numbers")
    if len(scores) > MAX_SCORES:
        _fail(where, f"{len(scores)} scores, more than {MAX_SCORES}")
    for name, value in scores.items():
        _kind(value, (int, float), f"{where}.{name}", "a number")
        if not math.isfinite(value):
            _fail(f"{where}.{name}", f"expected a finite number, got {value}")


def _check_traces(traces: Any, inputs: list[str], where: str) -> None:
    """A trace (trace_check.py's checks, its source the input's) or null per input."""
    _kind(traces, list, where, f"a list of {len(inputs)} traces")
    if len(traces) != len(inputs):
        _fail(where, f"expected {len(inputs)} traces (one per input), got {len(traces)}")
    for j, (trace, source) in enumerate(zip(traces, inputs)):
        if trace is None:
            continue
        try:
            parsed = Trace.from_dict(trace)
        except ValueError as error:
            _fail(f"{where}[{j}]", str(error))
        if parsed.source != source:
            _fail(f"{where}[{j}]", f"a trace of {parsed.source[:40]!r}, not of inputs[{j}]")


def check_snapshots(data: Any) -> dict:
    """`data` if it is a snapshots file's plain data; a ValueError naming the first field that
    is not (the traces' own fields as trace_check.py names them)."""
    _kind(data, dict, "snapshots file", "a JSON object")
    if data.get("format") != FORMAT:
        _fail("format", f"not heedful training snapshots: expected {FORMAT!r}")
    if data.get("version") != VERSION:
        _fail("version", f"this heedful reads version {VERSION}, got {data.get('version')!r}")
    if set(data) != KEYS:
        _fail("snapshots file", f"must have exactly the keys {', '.join(sorted(KEYS))}")
    inputs = _listed(data["inputs"], "inputs", "inputs", MAX_SNAPSHOT_SENTENCES)
    for j, source in enumerate(inputs):
        _kind(source, str, f"inputs[{j}]", "text")
    snapshots = _listed(data["snapshots"], "snapshots", "snapshots", MAX_SNAPSHOT_VALIDATIONS)
    last = -1
    for i, snapshot in enumerate(snapshots):
        where = f"snapshots[{i}]"
        _kind(snapshot, dict, where, "an object")
        if set(snapshot) != {"step", "scores", "traces"}:
            _fail(where, "must have exactly the keys step, scores and traces")
        step = _kind(snapshot["step"], int, f"{where}.step", "a whole number")
        if step <= last:
            _fail(f"{where}.step", f"steps must rise: {step} after {last}")
        last = step
        _check_scores(snapshot["scores"], f"{where}.scores")
        _check_traces(snapshot["traces"], inputs, f"{where}.traces")
    return data


def snapshots_path(path: str | Path) -> Path:
    """The snapshots file `path` names: the file, or a run (or demo) directory holding one."""
    path = Path(path)
    return path / FILE_NAME if path.is_dir() else path


def read_snapshots(path: str | Path) -> dict:
    """A snapshots file (or a directory's), checked; ValueError starting with the file if not."""
    path = snapshots_path(path)
    if not path.is_file():
        raise ValueError(
            f"{path}: no training snapshots there (train.snapshot_sentences turns them on)"
        )
    try:
        data = read_trace_json(path, MAX_SNAPSHOTS_BYTES, "a snapshots file")
        return check_snapshots(data)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


@functools.cache
def _asset(name: str) -> str:
    return (resources.files(__package__) / "assets" / name).read_text(encoding="utf-8")


def render_snapshots(data: dict, title: str = "training") -> str:
    """The page of a snapshots file's (checked) data: a slider over its steps with each
    step's scores, a choice of input, and the viewer of that step's trace of it in a frame,
    which keeps the view open (tab, layer, head, output step, calculation) from step to step."""
    page = {"viewer": viewer_template(), "inputs": data["inputs"], "snapshots": data["snapshots"]}
    parts = {
        "TITLE": escape(title),
        "DATA": for_script(page),
        "JS": _asset("frame.js") + _asset("snapshots.js"),
    }
    return re.sub(r"@@([A-Z]+)@@", lambda m: parts[m.group(1)], _asset("snapshots.html"))
