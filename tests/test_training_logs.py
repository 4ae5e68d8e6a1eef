"""Training's output in files and pipelines (logs.py): no progress-bar frames where nobody
watches a bar, timestamps, RUN/train.log, TensorBoard only with its extra and said, and a
data.vocab_size the text cannot fill lowered in one line."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import types

from test_hostile_training import make_env
from test_training import MODEL, data

from heedful import logs
from heedful.config import DataConfig, TrainConfig
from heedful.data.prepare import prepare
from heedful.data.tokenizers import load_tokenizer
from heedful.logs import Progress, RunLog
from heedful.models.build import build_model
from heedful.tasks.dates import generate_dates
from heedful.training.loop import train

STAMPED = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S")


def record(step: int) -> dict:
    return {"step": step, "train_loss": 1.5, "lr": 1e-3, "tokens_per_s": 1234.0, "epoch": 0}


def test_training_redirected_to_files_writes_lines_not_bar_frames(tmp_path):
    """`heedful train > out 2> err` as a user or a job script runs it: no carriage-return
    frames, no bytes growing with the steps, and the first progress line all the same."""
    env = make_env(tmp_path)
    sets = ["--set", "train.max_steps=60", "--set", "train.eval_every=1000"]
    with open(tmp_path / "out", "wb") as out, open(tmp_path / "err", "wb") as err:
        argv = [sys.executable, "-m", "heedful", "train", str(env.config)]
        argv += ["--run-dir", str(env.run_dir), *sets]
        done = subprocess.run(
            argv, stdout=out, stderr=err, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"}
        )
    out, err = (tmp_path / "out").read_text(), (tmp_path / "err").read_text()
    assert done.returncode == 0, out + err
    assert "\r" not in out + err and err == ""  # the bar went nowhere, its frames with it
    lines = out.splitlines()
    # a few lines whatever the steps: the CLI's, the run's, one progress line, the last ones
    assert len(lines) <= 8 and len(out.encode()) < 1200, out
    assert any(re.search(r" step 1/60  loss \d+\.\d+  lr \S+  [\d,]+ tok/s", x) for x in lines)
    assert "stopped by max_steps at step 60" in lines[-1]
    ours = [x for x in lines if not x.startswith("run directory:")]  # the CLI prints that one
    assert ours and all(STAMPED.match(x) for x in ours), out
    assert (env.run_dir / "train.log").read_text().splitlines() == ours


def test_plain_progress_lines_come_every_so_often(monkeypatch, capsys):
    """Where stderr is no terminal (here: captured), a plain line at the first record and
    then every PLAIN_EVERY seconds (0 here: every record), through echo, timestamped."""
    monkeypatch.setattr(logs, "PLAIN_EVERY", 0.0)
    said = []
    config = TrainConfig(batch_tokens=60, max_steps=6, log_every=2, eval_every=100, seed=1)
    train(build_model(MODEL, 12, 12), data(), config, progress=True, echo=said.append)
    captured = capsys.readouterr()
    assert "\r" not in captured.err + captured.out and captured.err == ""
    steps = [int(re.search(r" step (\d+)/6 ", x)[1]) for x in said]
    assert steps == [2, 4, 6] and all(STAMPED.match(x) for x in said)


def test_plain_lines_wait_their_interval():
    now, said = [0.0], []
    shown = Progress(
        100, 0, True, RunLog(said.append), every=30.0, stream=io.StringIO(), clock=lambda: now[0]
    )
    for step, at in ((1, 0.0), (2, 10.0), (3, 29.9), (4, 30.0), (5, 45.0), (6, 61.0)):
        now[0] = at
        shown.update(record(step))
    assert [int(re.search(r"step (\d+)/100", x)[1]) for x in said] == [1, 4, 6]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_the_bar_and_the_file_gets_the_lines(tmp_path):
    terminal, said = Terminal(), []
    lines = RunLog(said.append)
    lines.attach(tmp_path / "train.log")
    shown = Progress(10, 0, True, lines, stream=terminal)
    shown.update(record(1))
    shown.say("step=1  loss=1.2")
    shown.close()
    assert "\r" in terminal.getvalue() and "1/10" in terminal.getvalue()  # tqdm's bar
    assert len(said) == 1 and said[0].endswith("step=1  loss=1.2")  # the bar shows the step
    kept = (tmp_path / "train.log").read_text().splitlines()
    assert len(kept) == 2 and "step 1/10  loss 1.500" in kept[0] and kept[1] == said[0]


def test_lines_before_the_log_is_attached_are_kept_first(tmp_path):
    said = []
    lines = RunLog(said.append)
    lines("before the run directory is locked")
    lines.attach(tmp_path / "train.log")
    lines("after")
    kept = (tmp_path / "train.log").read_text().splitlines()
    assert kept == said and kept[0].endswith(" before the run directory is locked")


def test_train_log_is_appended_on_resume_and_its_own_for_force(tmp_path):
    env = make_env(tmp_path)
    first = env.train()
    assert first.exit_code == 0, first.output
    log = env.run_dir / "train.log"
    session = log.read_text()
    assert "stopped by max_steps at step 8" in session and "resuming" not in session
    resumed = env.train("--set", "train.max_steps=12")
    assert resumed.exit_code == 0, resumed.output
    both = log.read_text()
    assert both.startswith(session) and "resuming from" in both[len(session) :]
    forced = env.train("--force")  # train.log is the run directory's own: deleted, not refused
    assert forced.exit_code == 0, forced.output
    assert "resuming" not in log.read_text() and "step 8" in log.read_text()


class Writer:
    """torch.utils.tensorboard.SummaryWriter as far as a run uses it."""

    made: list = []

    def __init__(self, log_dir: str):
        self.log_dir, self.scalars = log_dir, {}
        Writer.made.append(self)

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self.scalars.setdefault(tag, []).append(step)

    def flush(self) -> None:
        pass


def test_tensorboard_is_written_with_its_extra_and_says_where(tmp_path, monkeypatch):
    fake = types.ModuleType("torch.utils.tensorboard")
    fake.SummaryWriter = Writer
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", fake)
    monkeypatch.setattr(Writer, "made", [])
    env = make_env(tmp_path)
    result = env.train()
    assert result.exit_code == 0, result.output
    where = env.run_dir / "tensorboard"
    assert result.output.count(f"TensorBoard: {where}") == 1
    assert f"TensorBoard: {where}" in (env.run_dir / "train.log").read_text()
    (writer,) = Writer.made
    assert writer.log_dir == str(where)
    assert writer.scalars["train/train_loss"] == list(range(1, 9))
    assert writer.scalars["valid/bleu"] == [4, 8]


def test_without_the_extra_no_tensorboard_and_nothing_said(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # an ImportError
    env = make_env(tmp_path)
    result = env.train()
    assert result.exit_code == 0 and "TensorBoard" not in result.output, result.output
    assert not (env.run_dir / "tensorboard").exists()


def test_a_vocabulary_the_text_cannot_fill_is_lowered_in_one_line(tmp_path):
    env = make_env(tmp_path)
    result = env.train("--set", "data.tokenizer=sentencepiece", "--set", "data.vocab_size=5000")
    assert result.exit_code == 0, result.output
    said = [x for x in result.output.splitlines() if "data.vocab_size" in x]
    assert len(said) == 1, result.output
    size = int(re.search(r"trained with (\d+), the most it can", said[0])[1])
    assert "5000 is more than the training text can fill" in said[0] and 4 < size < 5000
    latest = env.run_dir / "latest"
    sizes = [len(load_tokenizer(latest / f"tokenizer.{side}")) for side in ("src", "tgt")]
    assert sizes == [size, size]
    assert said[0] in (env.run_dir / "train.log").read_text()


def test_a_vocabulary_too_small_for_the_characters_is_still_an_error(tmp_path):
    env = make_env(tmp_path)
    result = env.train("--set", "data.tokenizer=sentencepiece", "--set", "data.vocab_size=8")
    assert result.exit_code == 1 and "data.vocab_size = 8" in result.output, result.output
    assert "Traceback" not in result.output


def test_prepare_redirected_writes_lines_not_bar_frames(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(logs, "PLAIN_EVERY", 0.0)
    d = tmp_path / "data"
    d.mkdir()
    for split, n in (("train", 300), ("valid", 10)):
        pairs = generate_dates(n, 1)
        (d / f"{split}.src").write_text("".join(s + "\n" for s, _ in pairs))
        (d / f"{split}.tgt").write_text("".join(t + "\n" for _, t in pairs))
    config = DataConfig(
        train_src=str(d / "train.src"),
        train_tgt=str(d / "train.tgt"),
        valid_src=str(d / "valid.src"),
        valid_tgt=str(d / "valid.tgt"),
        tokenizer="char",
        max_length=40,
    )
    said = []
    prepare(config, tmp_path / "prepared", workers=1, progress=True, echo=said.append)
    captured = capsys.readouterr()
    assert "\r" not in captured.err + captured.out and captured.err == ""
    assert any(re.fullmatch(r"encoding: [\d,]+ pairs read", x) for x in said), said
