"""The attention filter from random to meaningful: a few fixed validation inputs traced before
the first step and at every validation, into RUN_DIR/snapshots.json (train.snapshot_sentences;
the format and its page are visualize/snapshots.py's).

The self-attention article says it in one sentence: "at first the weights are basically random
numbers; once trained they become meaningful". The file shows it on the run's own model: each
trace is build_trace's (greedy, as validation searches), so the last one is the trace the
trained model gives of that input. Its size is bounded: at most MAX_SNAPSHOT_SENTENCES inputs,
each trace at most SNAPSHOT_TRACE_BYTES (its internals left out beyond that, the whole trace
beyond that again; a Transformer block's numbers, a tab the slider does not need, never kept),
and at most train.snapshot_validations snapshots, thinned evenly as the run goes on.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import torch

from heedful.config import Config
from heedful.data.sources import as_source
from heedful.io import atomic_write_bytes
from heedful.safejson import dumps
from heedful.visualize.snapshots import (
    FILE_NAME,
    FORMAT,
    SNAPSHOT_TRACE_BYTES,
    VERSION,
    read_snapshots,
)
from heedful.visualize.trace import build_trace


def thinned(snapshots: list[dict], keep: int) -> list[dict]:
    """At most `keep` (≥ 2) of the snapshots, the first and the latest always: while there are
    too many, the one whose neighbours are closest in steps goes, so that the steps kept stay
    about evenly spread over the run however long it gets."""
    snapshots = list(snapshots)
    while len(snapshots) > keep:
        steps = [s["step"] for s in snapshots]
        gone = min(range(1, len(steps) - 1), key=lambda i: steps[i + 1] - steps[i - 1])
        del snapshots[gone]
    return snapshots


def scores_of(metrics: dict | None) -> dict:
    """A validation's finite numbers by name, without its step and seconds (a snapshot has
    its own step, and seconds depend on the machine) or its best flag."""
    return {
        name: value
        for name, value in (metrics or {}).items()
        if name not in ("step", "seconds")
        and isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
    }


@contextmanager
def evaluating(model: torch.nn.Module) -> Iterator[None]:
    """The model in eval mode without gradients, as validation runs it, then as it was."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


class Snapshots:
    """A run's snapshots file: `start` at the run's first step (or where it resumes), `take`
    at each validation. `inputs`: the validation inputs as build_trace takes them (texts, or
    pictures), the first train.snapshot_sentences of them not blank; `sides`: the run's
    source side and target tokenizer."""

    def __init__(self, path: Path, inputs: Sequence, sides: tuple, config: Config, device, echo):
        self.path, self.sides, self.device, self.echo = Path(path), sides, device, echo
        self.source = as_source(sides[0])  # a text model's may come as its tokenizer
        count = config.train.snapshot_sentences
        self.inputs = [x for x in inputs if not self.source.blank(x)][:count]
        self.keep = config.train.snapshot_validations
        self.settings = replace(config.generation, num_beams=1, n_best=1)  # greedy
        self.data: dict | None = None

    @classmethod
    def of(cls, directory: Path, valid, config: Config, device, echo) -> Snapshots | None:
        """A run's snapshots (of `valid`, its Validation), or None when the config asks for
        none or every validation input is blank."""
        if not config.train.snapshot_sentences:
            return None
        made = cls(Path(directory) / FILE_NAME, valid.inputs, valid.sides, config, device, echo)
        return made if made.inputs else None

    def _translator(self, model):
        from heedful.inference.translator import Translator

        return Translator(model, *self.sides, self.settings, device=self.device)

    def _trace(self, translator, item) -> dict | None:
        """One input's trace within SNAPSHOT_TRACE_BYTES, or None over it even without internals."""
        for internals in (None, False):  # None: while within the trace's own limit
            data = build_trace(translator, item, settings=self.settings, internals=internals)
            data = data.to_dict()
            if data["internals"] is not None:
                data["internals"]["block"] = None  # the block tab's numbers: not over training
            if len(dumps(data).encode("utf-8")) <= SNAPSHOT_TRACE_BYTES:
                return data
        return None

    def start(self, model, step: int) -> None:
        """At the run's first step, a new file with the untrained model's traces; resuming at
        `step`, the file as it is (its snapshots after `step` are taken again). A file that
        cannot be read, or of other inputs, is begun anew, said in one line."""
        if step == 0 or not self.path.exists():
            self._begin()
            if step == 0:
                self.take(model, 0, None)
            return
        try:
            data = read_snapshots(self.path)
        except ValueError as error:
            self.echo(f"warning: {error}; the snapshots begin anew from step {step}")
            return self._begin()
        if data["inputs"] != self._sources():
            self.echo(f"warning: {self.path} traced other inputs; the snapshots begin anew")
            return self._begin()
        self.data = data  # the snapshots after `step` give way as take() reaches them

    def _sources(self) -> list[str]:
        return [self.source.describe(x) for x in self.inputs]  # each trace's `source`

    def _begin(self) -> None:
        self.data = {"format": FORMAT, "version": VERSION, "inputs": self._sources()}
        self.data["snapshots"] = []

    def take(self, model, step: int, metrics: dict | None) -> None:
        """Trace every input with the model as it is at `step` (its validation's `metrics`),
        and write the file again, atomically."""
        if self.data is None:
            self._begin()
        with evaluating(model):  # a Translator puts its model in eval mode: inside, so that
            translator = self._translator(model)  # training goes on with its dropout
            traces = [self._trace(translator, item) for item in self.inputs]
        kept = [s for s in self.data["snapshots"] if s["step"] < step]
        snapshot = {"step": step, "scores": scores_of(metrics), "traces": traces}
        self.data["snapshots"] = thinned([*kept, snapshot], self.keep)
        atomic_write_bytes(self.path, dumps(self.data).encode("utf-8"))
