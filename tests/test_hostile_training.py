"""`heedful train` against hostile inputs (issue #9): each bad input gives an error that names
what to fix, or correct behaviour; never a traceback, a lost run or a silent corruption.

Every case runs the real CLI (click's CliRunner) on a tiny corpus, as a user would. A case
names the files it overwrites, the --set overrides, anything to do to the run directory before
(`before`), the exit code, the words the output must hold, and any check of the result.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from heedful.cli import main
from heedful.tasks.dates import generate_dates

CONFIG = """\
data:
  train_src: {d}/train.src
  train_tgt: {d}/train.tgt
  valid_src: {d}/valid.src
  valid_tgt: {d}/valid.tgt
  tokenizer: char
  max_length: 40
  valid_max_sentences: 4
model:
  d_model: 16
  num_heads: 2
  encoder_layers: 1
  decoder_layers: 1
  d_ff: 32
  dropout: 0.0
  max_positions: 64
train:
  seed: 3
  batch_tokens: 300
  max_steps: 8
  eval_every: 4
  log_every: 1
  lr: 0.003
  warmup_steps: 5
"""


@dataclass
class Env:
    """One test's corpus, config and run directory, and a way to run `heedful train`."""

    data: Path
    config: Path
    run_dir: Path

    def train(self, *args: str):
        argv = ["train", str(self.config), "--run-dir", str(self.run_dir), "--no-progress"]
        return CliRunner().invoke(main, [*argv, *args])

    def checkpoints(self) -> list[str]:
        return sorted(p.name for p in (self.run_dir / "checkpoints").iterdir())

    def latest(self) -> str:
        return (self.run_dir / "latest").resolve().name

    def steps_logged(self) -> list[int]:
        lines = (self.run_dir / "metrics.jsonl").read_text().splitlines()
        return [r["step"] for r in map(json.loads, lines) if "train_loss" in r]


@dataclass
class Case:
    files: dict[str, bytes] = field(default_factory=dict)  # data/NAME -> new content
    sets: tuple[str, ...] = ()  # --set overrides
    args: tuple[str, ...] = ()  # other CLI arguments
    before: Callable[[Env], None] | None = None  # e.g. a first run, then damage it
    code: int = 1  # expected exit code
    words: tuple[str, ...] = ()  # the output must contain each
    check: Callable[[Env], None] | None = None  # behaviour to check afterwards


# --- what cases do before the run under test --------------------------------------------------


def first_run(env: Env) -> None:
    result = env.train()
    assert result.exit_code == 0, result.output
    assert env.checkpoints() == ["step-00000004", "step-00000008"]


def killed_between_renames(keep_old: bool, keep_complete_build: bool):
    """The state a kill between io.staged's two renames leaves: step-8 moved aside as
    .old-PID (if keep_old), the new copy as a staging dir (whole, or cut off), `latest` dangling."""

    def before(env: Env) -> None:
        first_run(env)
        checkpoints = env.run_dir / "checkpoints"
        final = checkpoints / "step-00000008"
        build = checkpoints / ".step-00000008.tmp-k1ll3d"
        if keep_complete_build:
            shutil.copytree(final, build)
        else:
            build.mkdir()
            shutil.copy(final / "config.json", build)
        if keep_old:
            os.replace(final, checkpoints / ".step-00000008.old-4242")
        else:
            shutil.rmtree(final)

    return before


def leave_orphans(env: Env) -> None:
    """Staging dirs of saves cut off by kills (one complete, but never published: `latest`
    does not point there), an old copy a finished publish left, and a directory of the user's
    that looks nothing like ours."""
    first_run(env)
    checkpoints = env.run_dir / "checkpoints"
    shutil.copytree(checkpoints / "step-00000004", checkpoints / ".step-00000012.tmp-abc_123")
    shutil.copytree(checkpoints / "step-00000008", checkpoints / ".step-00000008.old-999")
    (checkpoints / ".step-00000008.tmp-xyz").mkdir()
    (checkpoints / "notes").mkdir()


def killed_after_step_8_before_its_checkpoint(env: Env) -> None:
    """metrics.jsonl holds steps 5-8 (and a line cut off mid-write) past the resumed step 4."""
    first_run(env)
    shutil.rmtree(env.run_dir / "checkpoints" / "step-00000008")
    os.remove(env.run_dir / "latest")
    os.symlink("checkpoints/step-00000004", env.run_dir / "latest")
    with open(env.run_dir / "metrics.jsonl", "a") as f:
        f.write('{"step": 9, "train_lo')


def hold_lock(env: Env) -> None:
    """Another trainer (pid 31337) holds the run directory."""
    env.run_dir.mkdir()
    lock = open(env.run_dir / "train.lock", "w")  # noqa: SIM115 (held for the test)
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    lock.write("31337\n")
    lock.flush()
    env.held = lock  # kept open (and locked) until the test ends


def stale_lock(env: Env) -> None:
    """A lock file left by a trainer that was killed: the file stays, its flock went with it."""
    env.run_dir.mkdir()
    (env.run_dir / "train.lock").write_text("31337\n")


def nan_loss_from_step(step: int):
    def before(env: Env, monkeypatch) -> None:
        import heedful.training.loop as loop

        taking = [0]  # the step being taken: a step may compute its loss in several pieces

        def counted(real):
            def step_counted(net, model, shards, state, *args, **kwargs):
                taking[0] = state.progress.step + 1
                return real(net, model, shards, state, *args, **kwargs)

            return step_counted

        def poison(real):
            def poisoned(*args, **kwargs):
                loss = real(*args, **kwargs)
                return loss * float("nan") if taking[0] >= step else loss

            return poisoned

        monkeypatch.setattr(loop, "_optimizer_step", counted(loop._optimizer_step))
        # the training loss: whole logits (sequence_loss) or the Transformer's sliced one
        for name in ("sequence_loss", "output_layer_loss"):
            monkeypatch.setattr(loop, name, poison(getattr(loop, name)))

    return before


# --- checks of the outcome ----------------------------------------------------------------


def run_kept(env: Env) -> None:
    assert env.checkpoints() == ["step-00000004", "step-00000008"], "--force deleted the run"
    assert env.latest() == "step-00000008"


def resumed_at_8(env: Env) -> None:
    assert env.latest() == "step-00000008" and env.checkpoints()[-1] == "step-00000008"
    assert not [p for p in (env.run_dir / "checkpoints").iterdir() if p.name.startswith(".")]


def orphans_gone(env: Env) -> None:
    assert env.checkpoints() == ["notes", "step-00000004", "step-00000008"]


def each_step_logged_once(env: Env) -> None:
    assert env.steps_logged() == list(range(1, 9))
    assert env.latest() == "step-00000008"


def nothing_saved(env: Env) -> None:
    assert not (env.run_dir / "checkpoints").exists() and not (env.run_dir / "latest").exists()


def last_good_checkpoint_stays(env: Env) -> None:
    assert env.checkpoints() == ["step-00000004"] and env.latest() == "step-00000004"
    assert max(env.steps_logged()) == 5


def no_bom_in_vocabulary(env: Env) -> None:
    vocabulary = (env.run_dir / "latest" / "tokenizer.src").read_text(encoding="utf-8")
    assert "\ufeff" not in vocabulary


def trained(env: Env) -> None:
    assert env.latest() == "step-00000008"


def lines(n: int, text: str = "3 May 2021") -> bytes:
    return (text + "\n").encode() * n


HUGE = b"x" * 3_000_000  # a multi-megabyte line
TSV_ONLY = ("data.train_src=null", "data.train_tgt=null")

CASES = [
    # 6: a kill between io.staged's two renames
    pytest.param(
        Case(
            before=killed_between_renames(keep_old=True, keep_complete_build=False),
            code=0,
            words=("restored", ".step-00000008.old-4242", "resuming from", "step 8"),
            check=resumed_at_8,
        ),
        id="row6-restored-from-old-copy",
    ),
    pytest.param(
        Case(
            before=killed_between_renames(keep_old=False, keep_complete_build=True),
            code=0,
            words=("restored", ".step-00000008.tmp-k1ll3d", "resuming from"),
            check=resumed_at_8,
        ),
        id="row6-restored-from-complete-staging-dir",
    ),
    pytest.param(
        Case(
            before=killed_between_renames(keep_old=False, keep_complete_build=False),
            words=("latest", "step-00000008", "does not exist", "--force"),
        ),
        id="row6-dangling-latest-without-copy-stops",
    ),
    # 7: training files that hold no usable pair
    pytest.param(
        Case(files={"train.src": b"", "train.tgt": b""}, words=("data.train_src", "empty")),
        id="row7-empty-training-files",
    ),
    pytest.param(
        Case(
            sets=("data.train_src=/dev/null", "data.train_tgt=/dev/null"),
            words=("data.train_src", "/dev/null", "empty"),
        ),
        id="row7-dev-null",
    ),
    pytest.param(
        Case(sets=(*TSV_ONLY, "data.train_tsv=/dev/null"), words=("data.train_tsv", "empty")),
        id="row7-empty-tsv",
    ),
    pytest.param(
        Case(
            sets=("data.max_length=2",),
            words=("no training pairs left", "kept 0 of 300", "300 longer than max_length"),
        ),
        id="row7-every-pair-too-long",
    ),
    pytest.param(
        Case(
            files={"train.src": b"\n \n", "train.tgt": b"a\n\n"},
            words=("no training pairs left", "kept 0 of 2", "2 with an empty side"),
        ),
        id="row7-every-pair-empty",
    ),
    pytest.param(
        Case(
            files={"train.src": lines(299) + HUGE + b"\n"},
            code=0,
            words=("kept 299 of 300", "1 longer than max_length"),
            check=trained,
        ),
        id="row7-huge-training-line-dropped-and-counted",
    ),
    pytest.param(
        Case(
            files={"valid.src": HUGE + b"\n" + lines(15)},
            words=("data.valid_src", "pair 1", "3,000,000 tokens", "model.max_positions"),
        ),
        id="row7-huge-validation-line",
    ),
    pytest.param(
        Case(files={"train.tgt": lines(299)}, words=("300 lines", "299", "data.train_tgt")),
        id="row7-truncated-target-file",
    ),
    pytest.param(
        Case(
            files={"t.tsv": b"a\tb\nc\td\ne"},
            sets=(*TSV_ONLY, "data.train_tsv=DATA/t.tsv"),
            words=("data.train_tsv", "line 3", "one TAB", "found 0"),
        ),
        id="row7-tsv-line-without-tab",
    ),
    pytest.param(
        Case(
            files={"train.src": lines(5) + b"caf\xe9\n" + lines(294)},
            words=("data.train_src", "line 6", "invalid UTF-8 byte 0xe9", "byte offset 58"),
        ),
        id="row7-invalid-utf8",
    ),
    pytest.param(
        Case(
            files={"train.src": "3 May 2021\n".encode("utf-16") * 300},
            words=("data.train_src", "UTF-16", "iconv"),
        ),
        id="row7-utf16-with-bom",
    ),
    pytest.param(
        Case(
            files={"train.src": "3 May 2021\n".encode("utf-16-le") * 300},
            words=("data.train_src", "line 1", "NUL byte", "UTF-16"),
        ),
        id="row7-utf16-without-bom",
    ),
    pytest.param(
        Case(files={"train.src": b"\xef\xbb\xbf" + lines(300)}, code=0, check=no_bom_in_vocabulary),
        id="row7-utf8-bom-is-not-text",
    ),
    # 8: non-finite numbers, and a loss that stops being finite
    pytest.param(
        Case(sets=("train.lr=.inf",), words=("train.lr", "finite"), check=nothing_saved),
        id="row8-lr-inf",
    ),
    pytest.param(
        Case(sets=("train.weight_decay=.inf",), words=("train.weight_decay", "finite")),
        id="row8-weight-decay-inf",
    ),
    pytest.param(
        Case(sets=("train.lr=1e30",), words=("loss at step 2", "diverged"), check=nothing_saved),
        id="row8-lr-huge-diverges-nothing-saved",
    ),
    pytest.param(
        Case(
            before=nan_loss_from_step(6),
            words=("training loss at step 6 is nan", "train.lr"),
            check=last_good_checkpoint_stays,
        ),
        id="row8-nan-loss-names-step-last-checkpoint-stays",
    ),
    # 9: --force only after every input checked
    pytest.param(
        Case(
            before=first_run,
            sets=("data.train_src=typo/train.src",),
            args=("--force",),
            words=("data.train_src", "file not found", "typo/train.src"),
            check=run_kept,
        ),
        id="row9-force-with-typo-keeps-run",
    ),
    pytest.param(
        Case(
            before=first_run,
            sets=("data.max_length=2",),
            args=("--force",),
            words=("no training pairs left",),
            check=run_kept,
        ),
        id="row9-force-with-nothing-to-train-keeps-run",
    ),
    pytest.param(
        Case(
            before=first_run,
            sets=("data.source.tokenizer=nope.src", "data.tgt_tokenizer=nope.tgt"),
            args=("--force",),
            words=("data.source.tokenizer", "nope.src"),
            check=run_kept,
        ),
        id="row9-force-with-missing-tokenizer-keeps-run",
    ),
    # 10: malformed values, values out of range, wrong types
    pytest.param(
        Case(sets=("train.max_steps=[1",), words=("train.max_steps", "not valid YAML")),
        id="row10-malformed-yaml-override",
    ),
    pytest.param(
        Case(sets=("train.lr=abc",), words=("train.lr: expected float", "'abc'")),
        id="row10-lr-not-a-number",
    ),
    pytest.param(
        Case(sets=("train.max_steps=[1, 2]",), words=("train.max_steps: expected int", "list")),
        id="row10-list-for-a-number",
    ),
    pytest.param(
        Case(sets=("train.max_steps=2.5",), words=("train.max_steps: expected int",)),
        id="row10-float-for-an-int",
    ),
    pytest.param(
        Case(sets=("train.clip_norm=.nan",), words=("train.clip_norm", "finite")),
        id="row10-clip-norm-nan",
    ),
    pytest.param(
        Case(sets=("train.max_time=-.inf",), words=("train.max_time", "finite")),
        id="row10-max-time-minus-inf",
    ),
    pytest.param(
        Case(sets=("model.dropout=.nan",), words=("model.dropout", "finite")),
        id="row10-dropout-nan",
    ),
    pytest.param(
        Case(sets=("train.patience=-1",), words=("train.patience", "> 0", "-1")),
        id="row10-patience-negative",
    ),
    pytest.param(
        Case(sets=("train.max_epochs=0",), words=("train.max_epochs", "> 0")),
        id="row10-max-epochs-zero",
    ),
    pytest.param(
        Case(sets=("train.eval_every=0",), words=("train.eval_every", "> 0")),
        id="row10-eval-every-zero",
    ),
    pytest.param(
        Case(sets=("train.betas=[0.9, 1.0]",), words=("train.betas[1]", "[0, 1)")),
        id="row10-beta-one",
    ),
    pytest.param(
        Case(sets=("train.seed=-1",), words=("train.seed", "[0, 2**63)")),
        id="row10-seed-negative",
    ),
    pytest.param(
        Case(sets=("data.valid_max_sentences=0",), words=("data.valid_max_sentences", "> 0")),
        id="row10-valid-max-sentences-zero",
    ),
    pytest.param(
        Case(sets=("train.lr=3e-3",), code=0, check=trained),
        id="row10-exponent-without-dot-is-a-number",
    ),
    # 11: an empty validation set, named at the start
    pytest.param(
        Case(
            files={"valid.src": b"", "valid.tgt": b""},
            words=("data.valid_src and data.valid_tgt", "empty"),
            check=nothing_saved,
        ),
        id="row11-empty-validation-set",
    ),
    # 13: kills during saves, resumed runs, two trainers
    pytest.param(
        Case(before=leave_orphans, code=0, words=("removed",), check=orphans_gone),
        id="row13-orphaned-temporaries-cleaned",
    ),
    pytest.param(
        Case(
            before=killed_after_step_8_before_its_checkpoint,
            code=0,
            words=("resuming from",),
            check=each_step_logged_once,
        ),
        id="row13-replayed-steps-logged-once",
    ),
    pytest.param(
        Case(before=hold_lock, words=("in use", "pid 31337", "train.lock"), check=nothing_saved),
        id="row13-second-trainer-refused",
    ),
    pytest.param(
        Case(before=stale_lock, code=0, check=trained),
        id="row13-lock-of-a-killed-trainer-is-free",
    ),
]


def make_env(tmp_path: Path) -> Env:
    data = tmp_path / "data"
    data.mkdir()
    for split, n, seed in (("train", 300, 1), ("valid", 16, 2)):
        pairs = generate_dates(n, seed)
        (data / f"{split}.src").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
        (data / f"{split}.tgt").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG.format(d=data))
    return Env(data, config, tmp_path / "run")


@pytest.mark.parametrize("case", CASES)
def test_hostile_training_input(tmp_path, monkeypatch, case: Case):
    env = make_env(tmp_path)
    for name, content in case.files.items():
        (env.data / name).write_bytes(content)
    if case.before is not None:
        takes_monkeypatch = case.before.__code__.co_argcount == 2
        case.before(*((env, monkeypatch) if takes_monkeypatch else (env,)))
    sets = [s.replace("DATA", str(env.data)) for s in case.sets]
    result = env.train(*case.args, *(a for s in sets for a in ("--set", s)))
    assert result.exit_code == case.code, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert "Traceback" not in result.output
    for word in case.words:
        assert word in result.output, (word, result.output)
    if case.check is not None:
        case.check(env)


def test_publish_error_between_the_renames_puts_the_old_copy_back(tmp_path, monkeypatch):
    """An error (not a kill) in the second rename must not leave `final` missing."""
    from heedful import io

    final = tmp_path / "step-1"
    final.mkdir()
    (final / "weights").write_text("old")
    real, calls = os.replace, []

    def failing_second(src, dst):
        calls.append(src)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real(src, dst)

    with pytest.raises(OSError, match="No space"), io.staged(final) as build:
        (build / "weights").write_text("new")
        monkeypatch.setattr(io.os, "replace", failing_second)
    assert (final / "weights").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-1"]  # the staging dir is gone


def test_row13_a_live_trainer_holds_the_run_and_a_killed_one_frees_it(tmp_path):
    """The real thing: a second trainer is refused while the first runs; SIGKILL frees the lock
    (flock dies with its owner), and the resumed run logs every step once."""
    import signal
    import subprocess
    import sys
    import time

    env = make_env(tmp_path)
    argv = [sys.executable, "-m", "heedful", "train", str(env.config), "--no-progress"]
    argv += ["--run-dir", str(env.run_dir), "--set", "train.max_steps=100000"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while not (env.run_dir / "checkpoints" / "step-00000004").exists():
            assert proc.poll() is None and time.time() < deadline, "trainer ended or hung"
            time.sleep(0.01)
        refused = env.train()
        assert refused.exit_code == 1 and f"pid {proc.pid}" in refused.output, refused.output
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    end = int(env.latest().removeprefix("step-")) + 4  # wherever the kill caught it
    resumed = env.train("--set", f"train.max_steps={end}")
    assert resumed.exit_code == 0 and "resuming from" in resumed.output, resumed.output
    assert env.steps_logged() == list(range(1, end + 1))
