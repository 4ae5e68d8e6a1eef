"""What every demo task (demo/run.py's DEMO_TASKS: dates, dialogue, captions) trains and reports
the same way: its data's shape, its budget from --max-steps / --max-time, training with a
validation on the development pairs (the task's own, training/validation.py's shape, with exact
match) logged to OUT/metrics.jsonl (as `heedful train` logs, so `heedful curves OUT` draws it)
and stopping once every one is right, and the warning of an undertrained model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch

from heedful.config import Config, TrainConfig

# Below this held-out exact match the demo says its model is undertrained.
LOW_EXACT_MATCH = 0.9


def mark(output: str, reference: str) -> str:
    """How a report's example line judges its output."""
    return "ok" if output == reference else f"WRONG, expected {reference}"


@dataclass
class DemoData:
    """A task's generated data: `own`, what only the task's own steps read (its training pairs,
    its scenes), and the development and held-out (input, reference) pairs, an input a text or
    a picture, that every task validates on and is scored on."""

    own: object
    dev: list[tuple]
    test: list[tuple]


class WithExactMatch:
    """A task's Validation (training/validation.py) whose scores add exact match against the
    development references: what the demo stops on, from the outputs validation found anyway."""

    def __init__(self, valid, references: list[str]):
        self.valid, self.references, self.sides = valid, references, valid.sides
        self.inputs = valid.inputs

    def loss_batches(self):
        return self.valid.loss_batches()

    def outputs(self, searcher) -> list[str]:
        return self.valid.outputs(searcher)

    def scores(self, outputs: list[str]) -> dict:
        from heedful.evaluation import exact_match

        return {**self.valid.scores(outputs), "exact_match": exact_match(outputs, self.references)}


class BestWeights:
    """The best development exact match so far and a copy of the weights that scored it: a
    task whose score swings late in training ends with those (the run stops on the clock,
    wherever it is then)."""

    def __init__(self):
        self.score, self.weights = -1.0, None

    def offer(self, model: torch.nn.Module, metrics: dict) -> dict:
        if metrics["exact_match"] > self.score:
            self.score = metrics["exact_match"]
            self.weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return metrics


def budget(
    train: TrainConfig,
    max_steps: int | None,
    max_time: float | None,
    seed: int,
    snapshots: int | None = None,
):
    """A task's TrainConfig with the caller's budget, seed and inputs traced over training."""
    # the threads it starts with, pinned: a thread count changes the sums' order, and the
    # tour's models must not depend on what else runs on the machine (cpu.FreeCores)
    train = replace(train, seed=seed, threads=torch.get_num_threads())
    if snapshots is not None:
        train = replace(train, snapshot_sentences=snapshots)
    if max_steps is not None:
        train = replace(train, max_steps=max_steps, eval_every=min(train.eval_every, max_steps))
    if max_time is not None:
        train = replace(train, max_time=max_time)
    return train


def snapshots_of(translator, inputs: list, config: Config, out: Path):
    """The run's snapshots (training/snapshots.py) into out/snapshots.json, or None (and an
    earlier run's file gone) when the config asks for none."""
    from heedful.training.snapshots import Snapshots
    from heedful.visualize.snapshots import FILE_NAME

    path = out / FILE_NAME
    if not config.train.snapshot_sentences:
        path.unlink(missing_ok=True)
        return None
    sides = (translator.source, translator.tgt_tokenizer)
    return Snapshots(path, inputs, sides, config, translator.device, print)


def train_logged(model, pairs, config: Config, validate, out: Path, progress: bool, snapshots=None):
    """Train `model` on `pairs`, validating with `validate` (it scores exact_match on the
    development pairs), logging to out/metrics.jsonl; stop once every development pair is
    right. The validations are logged in place of checkpoints: a demo saves its model once.
    `snapshots` (training/snapshots.py), if any, trace their inputs before the first step
    and at every validation, into out/snapshots.json."""
    from heedful.training.distributed import Distributed
    from heedful.training.loop import train as train_model
    from heedful.training.run_dir import Run

    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.jsonl").unlink(missing_ok=True)  # the log of this run only
    run = Run(out, config, Distributed())

    def log_validation(state, metrics: dict | None) -> None:  # instead of a checkpoint
        if metrics is not None:
            run.log({"event": "validation", **metrics})
            if snapshots is not None:
                snapshots.take(model, state.progress.step, metrics)

    if snapshots is not None:
        snapshots.start(model, 0)  # the untrained model's traces

    return train_model(
        model,
        pairs,
        config.train,
        validate=validate,
        good_enough=lambda m: m["exact_match"] >= 0.999,
        progress=progress,
        save=log_validation,
        log=run.log,
    )


def training_status(result, accuracy: float, scores: dict | None, on: str) -> dict:
    """What the demo's model directory says of its training (checkpoint/status.py): its steps,
    why it stopped, its held-out exact match (and a task's other numbers: captions' BLEU) and
    whether it is undertrained (exact match below LOW_EXACT_MATCH)."""
    numbers = {
        name: value
        for name, value in (scores or {}).items()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    }
    return {
        "steps": result.steps,
        "stopped_by": result.stopped_by,
        "scores": {"exact_match": accuracy, **numbers},
        "on": on,
        "undertrained": accuracy < LOW_EXACT_MATCH,
    }


def undertrained_warning(stopped_by: str, accuracy: float, config: TrainConfig) -> str | None:
    """One line saying what went wrong and what to do, or None if the model reached its
    target (every development pair right) and scores well on the held-out pairs."""
    low = accuracy < LOW_EXACT_MATCH
    if (stopped_by == "validation" and not low) or accuracy == 1.0:  # every held-out pair right
        return None
    if stopped_by == "max_time":
        why = f"training stopped by --max-time ({config.max_time:g} s) before its target"
        fix = "rerun with a larger --max-time, or on an idle machine"
    elif stopped_by == "max_steps":
        budget = f"its step budget (--max-steps {config.max_steps})"
        why = f"training stopped at {budget} before its target"
        fix = "rerun with a larger --max-steps"
    else:
        why = f"training stopped by {stopped_by}"
        fix = "rerun with a larger --train-size or another --seed"
    if low:
        return (
            f"warning: {why}; exact match is only {accuracy:.1%}, so the model and its "
            f"heatmap are undertrained: {fix}"
        )
    return f"warning: {why} (every development pair right); exact match {accuracy:.1%}: {fix}"
