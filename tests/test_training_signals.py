"""Ctrl-C (SIGINT) and SIGTERM during training: a final checkpoint at the step reached, a clean
exit with one line, and a resume that goes on bit for bit (interrupts.py, training.train).

The loop's tests send the signal from inside training (at a known step, from the `log`
callback), in this process; the end-to-end test sends it from outside to `heedful train`,
as a user's Ctrl-C or a scheduler's SIGTERM would, and follows the kill -9 test of
test_experiment.py for the comparison with an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import signal
import time
from contextlib import contextmanager

import pytest
import torch
from test_experiment import corpus, heedful, run_ok, weights, write_config
from test_training import MODEL, data

from heedful.config import TrainConfig
from heedful.models.build import build_model
from heedful.training.interrupts import StopSignals
from heedful.training.loop import train
from heedful.training.state import TrainState

CONFIG = TrainConfig(
    batch_tokens=60, max_steps=12, eval_every=4, log_every=1, warmup_steps=3, seed=2
)


class LetThrough(Exception):
    """The signal reached the handler from before training: training did not catch it."""


@contextmanager
def handlers_that_fail():
    """SIGINT and SIGTERM raise LetThrough while this holds, where training lets one through
    (Python's own handlers would stop pytest or kill it)."""

    def fail(signum, frame):
        raise LetThrough(signal.Signals(signum).name)

    before = {s: signal.signal(s, fail) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield fail
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def signal_at(step: int, signum: int):
    """A `log` callback that sends `signum` to this process when the record of `step` comes."""

    def log(record: dict) -> None:
        if record["step"] == step:
            os.kill(os.getpid(), signum)

    return log


def start_model() -> tuple[torch.nn.Module, dict]:
    torch.manual_seed(0)
    model = build_model(MODEL, 12, 12)  # dropout 0.1: the RNG must come back too
    return model, {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_saves_the_step_reached_and_the_resume_is_bit_for_bit(tmp_path, signum):
    pairs = data()
    straight, start = start_model()
    train(straight, pairs, CONFIG, progress=False)

    half, _ = start_model()
    half.load_state_dict(start)
    saves = []

    def save(state, metrics):
        state.save(tmp_path)
        saves.append(
            (state.progress.step, metrics, {k: v.clone() for k, v in half.state_dict().items()})
        )

    with handlers_that_fail() as fail:
        result = train(half, pairs, CONFIG, progress=False, save=save, log=signal_at(6, signum))
        # the handlers from before training are back
        assert signal.getsignal(signal.SIGINT) is fail and signal.getsignal(signal.SIGTERM) is fail
    assert result.stopped_by == signal.Signals(signum).name and result.steps == 6
    assert [(step, metrics) for step, metrics, _ in saves][-1] == (6, None)  # unvalidated
    assert [step for step, _, _ in saves] == [4, 6]

    torch.rand(10)  # a new process: the generator is elsewhere
    resumed = build_model(MODEL, 12, 12)
    resumed.load_state_dict(saves[-1][2])
    state = TrainState.resume(tmp_path, resumed, CONFIG)
    assert state.progress.step == 6
    train(resumed, pairs, CONFIG, progress=False, state=state)
    for name, value in straight.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[name]), name


def test_a_second_signal_while_saving_lets_the_checkpoint_finish(tmp_path):
    pairs = data()
    model, _ = start_model()
    written = []

    def save(state, metrics):
        if written:  # the signal's checkpoint (after step 4's): Ctrl-C again, halfway through
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGTERM)
        state.save(tmp_path)
        written.append(state.progress.step)

    with handlers_that_fail():
        result = train(
            model, pairs, CONFIG, progress=False, save=save, log=signal_at(5, signal.SIGINT)
        )
    assert result.stopped_by == "SIGINT" and written == [4, 5]
    assert TrainState.resume(tmp_path, build_model(MODEL, 12, 12), CONFIG).progress.step == 5


def test_a_signal_on_a_step_just_saved_saves_nothing_more():
    saves = []
    with handlers_that_fail():
        result = train(
            start_model()[0],
            data(),
            CONFIG,
            progress=False,
            save=lambda state, metrics: saves.append(state.progress.step),
            log=signal_at(8, signal.SIGTERM),
        )
    assert result.stopped_by == "SIGTERM" and saves == [4, 8]


def test_processes_stop_at_the_same_step_when_one_caught_the_signal():
    """agreed() asks the largest over the processes (Distributed.latest): a peer's signal."""
    with StopSignals(largest=lambda mine: max(mine, float(signal.SIGTERM))) as stop:
        assert stop.signum == 0 and stop.agreed() == "SIGTERM"
    with StopSignals() as stop:
        assert stop.agreed() is None


def _wait_for_step(proc, run_dir, step: int) -> None:
    metrics, deadline = run_dir / "metrics.jsonl", time.time() + 120
    while True:
        assert proc.poll() is None and time.time() < deadline, "training ended or hung"
        if metrics.exists():
            steps = [json.loads(r).get("step", 0) for r in metrics.read_text().splitlines()[:-1]]
            if steps and max(steps) >= step:
                return
        time.sleep(0.01)


def _stop(config, run_dir, args, at_least: int, signum: int) -> int:
    """Run `heedful train` until it logged step `at_least`, send `signum`, check its exit and
    its last line; -> the step it stopped (and saved) at."""
    proc = heedful("train", str(config), "--run-dir", str(run_dir), *args)
    _wait_for_step(proc, run_dir, at_least)
    proc.send_signal(signum)
    out, _ = proc.communicate(timeout=120)
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum, out
    assert "Traceback" not in out and out.count(f"stopped by {name}") == 1, out
    last = out.strip().splitlines()[-1]
    reached = int(last.split(f"stopped by {name} at step ")[1].split(" ")[0])
    assert reached >= at_least and (run_dir / "latest").resolve().name == f"step-{reached:08d}"
    assert f"step-{reached:08d}" in last  # the line names the checkpoint to resume from
    return reached


def test_heedful_train_stopped_by_signals_resumes_bit_for_bit(tmp_path):
    """The real thing: `heedful train` gets Ctrl-C, then (resumed) SIGTERM from outside, saves
    the step it reached each time (unvalidated: eval_every is past it), exits with 128 + the
    signal's number and one line, and a resume from there ends as a run never stopped does."""
    config = write_config(tmp_path, corpus(tmp_path), steps=100_000)
    stopped, straight = tmp_path / "stopped", tmp_path / "straight"
    args = ["--no-progress", "--set", "train.eval_every=1000"]
    first = _stop(config, stopped, args, 8, signal.SIGINT)
    second = _stop(config, stopped, args, first + 4, signal.SIGTERM)

    end = ["--set", f"train.max_steps={second + 6}"]
    out = run_ok("train", str(config), "--run-dir", str(stopped), *args, *end)
    assert f"resuming from {stopped / 'checkpoints' / f'step-{second:08d}'}" in out, out
    run_ok("train", str(config), "--run-dir", str(straight), *args, *end)
    a, b = weights(straight), weights(stopped)
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
    # the signals' unvalidated checkpoints go once a validated one is latest
    names = sorted(p.name for p in (stopped / "checkpoints").iterdir())
    assert names == [f"step-{second + 6:08d}"]
    log = (stopped / "train.log").read_text()  # appended by each session, not replaced
    assert log.count("stopped by SIG") == 2 and log.count("resuming from") == 2, log
