"""What every demo task (demo/run.py's DEMO_TASKS: dates, dialogue, captions) trains and reports
the same way: its budget from --max-steps / --max-time, training with a validation on the
development pairs logged to OUT/metrics.jsonl (as `heedful train` logs, so `heedful curves OUT`
draws it) and stopping once every one is right, and the warning of an undertrained model.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from heedful.config import Config, TrainConfig

# Below this held-out exact match the demo says its model is undertrained.
LOW_EXACT_MATCH = 0.9


def budget(train: TrainConfig, max_steps: int | None, max_time: float | None, seed: int):
    """A task's TrainConfig with the caller's budget and seed."""
    train = replace(train, seed=seed)
    if max_steps is not None:
        train = replace(train, max_steps=max_steps, eval_every=min(train.eval_every, max_steps))
    if max_time is not None:
        train = replace(train, max_time=max_time)
    return train


def train_logged(model, pairs, config: Config, validate, out: Path, progress: bool):
    """Train `model` on `pairs`, validating with `validate` (it scores exact_match on the
    development pairs), logging to out/metrics.jsonl; stop once every development pair is
    right. The validations are logged in place of checkpoints: a demo saves its model once."""
    from heedful.training.loop import Distributed
    from heedful.training.loop import train as train_model
    from heedful.training.run_dir import Run

    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.jsonl").unlink(missing_ok=True)  # the log of this run only
    run = Run(out, config, Distributed())

    def log_validation(_state, metrics: dict | None) -> None:  # instead of a checkpoint
        if metrics is not None:
            run.log({"event": "validation", **metrics})

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
        why = f"training stopped by --max-steps ({config.max_steps}) before its target"
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
