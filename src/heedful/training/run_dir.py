"""A run directory of `heedful train`, and the bookkeeping of its checkpoints.

RUN_DIR/config.yaml             the resolved config (file + overrides)
RUN_DIR/metrics.jsonl           one JSON record per log line and per validation
RUN_DIR/train.log               the lines training printed, with timestamps, appended on resume
RUN_DIR/tensorboard/            the same records for TensorBoard, with the `tensorboard` extra
RUN_DIR/checkpoints/step-N/     model directory + training state, written atomically
RUN_DIR/latest, RUN_DIR/best    symlinks to the newest and the best checkpoint
RUN_DIR/scores.json             the early-stopping metric of each kept checkpoint
RUN_DIR/snapshots.json          a few inputs traced at each validation (training/snapshots.py)
RUN_DIR/train.lock              held (flock) by the one trainer writing here; holds its pid

Training starts only in a new or empty directory or a run directory (train.lock is its
marker), and `--force` deletes only the entries above, refusing a run that holds others.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from heedful.checkpoint.model_dir import write_model_files
from heedful.config import Config, save_config
from heedful.data.sources import IMAGE_SLOT, TEXT_SLOT, as_source
from heedful.evaluation import higher_is_better
from heedful.io import (
    CheckpointError,
    atomic_write_bytes,
    atomic_write_json,
    recover_directories,
    staged,
)
from heedful.logs import as_run_log
from heedful.output_dirs import DirectoryKind, foreign_entries, listed
from heedful.training.distributed import Distributed
from heedful.training.interrupts import STOP_SIGNALS
from heedful.training.loop import TrainResult, train
from heedful.training.snapshots import Snapshots
from heedful.training.state import TrainState
from heedful.visualize.snapshots import FILE_NAME as SNAPSHOTS

LOCK_FILE = "train.lock"
# what Run.save writes into a checkpoint (the source in one of its two slots, data/sources.py);
# training_state.json goes last
SOURCE_SLOTS = (TEXT_SLOT, IMAGE_SLOT)
CHECKPOINT_FILES = (
    "config.json",
    "model.safetensors",
    *SOURCE_SLOTS,
    "tokenizer.tgt",
    "generation.json",
    "training_state.safetensors",
    "training_state.json",
)

TRAIN_LOG = "train.log"
RUN_FILES = (LOCK_FILE, "config.yaml", "metrics.jsonl", "scores.json", TRAIN_LOG, SNAPSHOTS)
# rank-N.log: experiment._voice; .latest.tmp-PID: _point; .step-N.tmp-* / .old-*: io.staged
RANK_LOG = re.compile(r"rank-\d+\.log")
LINK = re.compile(r"(latest|best|\.(latest|best)\.tmp-\d+)")
CHECKPOINT = re.compile(r"step-\d+|\.step-\d+\.(tmp|old)-[A-Za-z0-9_]+")


def _is_run_dir(directory: Path) -> bool:
    """train.lock, which every heedful train makes first; a run from before it had one has
    metrics.jsonl beside checkpoints/."""
    if (directory / LOCK_FILE).is_file():
        return True
    return (directory / "metrics.jsonl").is_file() and (directory / "checkpoints").is_dir()


def _real_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def _run_entry(path: Path) -> bool:
    """Whether heedful train writes this entry of a run directory (by name and type)."""
    if path.is_symlink():
        return bool(LINK.fullmatch(path.name))
    if path.is_file():
        return path.name in RUN_FILES or bool(RANK_LOG.fullmatch(path.name))
    if path.name == "checkpoints" and _real_dir(path):
        return all(_checkpoint(p) for p in path.iterdir())
    if path.name == "tensorboard" and _real_dir(path):
        return all(p.name.startswith("events.out.tfevents.") for p in path.iterdir())
    return False


def _checkpoint(path: Path) -> bool:
    return (
        bool(CHECKPOINT.fullmatch(path.name))
        and _real_dir(path)
        and all(p.name in CHECKPOINT_FILES and p.is_file() for p in path.iterdir())
    )


# What `train --force` deletes: only a run directory's own entries, and only in a run directory
RUN_DIRECTORY = DirectoryKind("a heedful run directory", _is_run_dir, _run_entry)


class RunError(ValueError):
    """The run directory cannot be trained in: another trainer is writing to it, or it holds
    files that heedful train did not write (which --force would delete)."""


class Run:
    """The files of one run directory, and the checkpoint bookkeeping (latest, best K)."""

    def __init__(self, run_dir: Path, config: Config, dist: Distributed):
        self.dir, self.config, self.dist = Path(run_dir), config, dist
        self.checkpoints = self.dir / "checkpoints"
        self.snapshots: Snapshots | None = None  # train.snapshot_sentences: set by the caller

    def latest(self) -> Path | None:
        link = self.dir / "latest"
        return link.resolve() if link.exists() else None

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Be the one trainer writing to this run directory (the main rank takes the lock).

        flock rather than a pid file alone: the kernel releases the lock when its owner dies,
        however it dies (SIGKILL included), so a stale lock never needs removing by hand. The
        pid written into the file is only there to name the owner in the error.
        """
        if not self.dist.is_main:
            yield
            return
        self._check_writable()
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / LOCK_FILE
        with os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT, 0o644), "r+") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = f.read().strip() or "unknown"
                raise RunError(
                    f"{self.dir} is in use by another heedful train (pid {owner}, holding "
                    f"{path}); wait for it to end or stop it, or give another --run-dir"
                ) from None
            f.truncate(0)
            f.write(f"{os.getpid()}\n")
            f.flush()
            try:
                yield
            finally:
                f.truncate(0)  # closing the file releases the lock

    def _check_writable(self) -> None:
        """Train only in a new or empty directory or a run directory: config.yaml and
        metrics.jsonl are common names, and a directory of the user's may hold its own."""
        for above in (self.dir, *self.dir.absolute().parents):
            if os.path.lexists(above) and not above.is_dir():
                raise RunError(f"{above}: a file, not a directory; give --run-dir a directory")
            if above.is_dir():
                break
        if not self.dir.is_dir() or _is_run_dir(self.dir):
            return
        names = sorted(p.name for p in self.dir.iterdir() if not RANK_LOG.fullmatch(p.name))
        if names:  # rank-N.log: the other processes of this run may have begun it
            raise RunError(
                f"{self.dir}: not empty, and not a heedful run directory (it holds "
                f"{listed(names)}); give --run-dir a new or empty directory"
            )

    def clear(self) -> None:
        """--force: delete the run's files, all but the lock this process holds; refused,
        deleting nothing, if the directory holds anything heedful train did not write."""
        if not self.dist.is_main:
            return
        foreign = foreign_entries(self.dir, RUN_DIRECTORY)
        if foreign:
            raise RunError(
                f"{self.dir}: --force deletes a run directory's own files, but it also holds "
                f"{listed(foreign)}, which heedful train did not write there; move them out "
                "(nothing was deleted), or give another --run-dir"
            )
        for path in self.dir.iterdir():
            if path.name == LOCK_FILE:
                continue
            if _real_dir(path):
                shutil.rmtree(path)
            else:
                path.unlink()

    def resume_point(self, echo) -> Path | None:
        """The checkpoint to resume from, after cleaning up what kills during saves left.

        A kill inside a save can leave a staging directory (a whole checkpoint), a half-moved
        checkpoint (see io.staged) and a `latest` pointing at nothing; a dangling `latest` is
        never read as "no checkpoint", which would silently start over.
        """
        link = self.dir / "latest"
        if self.dist.is_main:
            needed = [Path(os.readlink(link)).name] if link.is_symlink() else []
            for note in recover_directories(self.checkpoints, _complete_checkpoint, needed):
                echo(note)
            for tmp in self.dir.glob(".*.tmp-*"):  # _point's temporaries
                if tmp.is_symlink():
                    tmp.unlink()
        self.dist.barrier()
        if link.is_symlink() and not link.exists():
            raise CheckpointError(
                f"{link} points to {os.readlink(link)}, which does not exist, and no copy of it "
                f"was left in {self.checkpoints} to restore; point {link} at a checkpoint there "
                "(ln -sfn checkpoints/step-N latest) to resume from it, or use --force to start "
                "over"
            )
        return self.latest()

    def rewind_metrics(self, step: int) -> None:
        """Drop the records of steps after `step`, which a resumed run is about to log again.

        A kill leaves records of steps past the last checkpoint (and maybe a cut-off last
        line); without this, every replayed step would appear twice in metrics.jsonl.
        """
        path = self.dir / "metrics.jsonl"
        if not self.dist.is_main or not path.exists():
            return
        text = path.read_text(encoding="utf-8")
        kept = [line for line in text.splitlines(keepends=True) if _keep_record(line, step)]
        if len(kept) != len(text.splitlines()):
            atomic_write_bytes(path, "".join(kept).encode("utf-8"))

    def log(self, record: dict) -> None:
        """Append to metrics.jsonl, and to TensorBoard once `start_tensorboard` found it."""
        if not self.dist.is_main:
            return
        with open(self.dir / "metrics.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        writer = getattr(self, "_writer", None)
        if writer is not None and "step" in record:
            prefix = "valid" if record.get("event") == "validation" else "train"
            for key, value in record.items():
                if (
                    isinstance(value, (int, float))
                    and not isinstance(value, bool)
                    and key != "step"
                ):
                    writer.add_scalar(f"{prefix}/{key}", value, record["step"])
            writer.flush()

    def start_tensorboard(self) -> Path | None:
        """With the `tensorboard` extra installed (pip install 'heedful[tensorboard]'), write
        every record of metrics.jsonl to RUN_DIR/tensorboard too, and return that directory;
        without it, None. Installing the extra is the switch: one setting more could only
        disagree with it, and training says where it writes, so it is never written unsaid."""
        if not self.dist.is_main:
            return None
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # torch's writer needs the tensorboard package
            return None
        self._writer = SummaryWriter(str(self.dir / "tensorboard"))
        return self.dir / "tensorboard"

    def save(self, model, tokenizers, state: TrainState, metrics: dict | None) -> None:
        """Write checkpoints/step-N whole (staged), then move the links and prune to the best K.

        The checkpoint is a model directory with the config's generation settings, so that
        `heedful translate` searches as the config says, plus the training state.
        """
        if not self.dist.is_main:
            return
        config = self.config
        final = self.checkpoints / f"step-{state.progress.step:08d}"
        languages, pairs = config.data.pairs()[0], config.data.pairs()
        with staged(final) as build:
            write_model_files(
                build,
                model,
                config.model,
                *tokenizers,
                config.generation,
                languages,
                pairs if config.data.corpora else None,
            )
            state.save(build, metrics=metrics, seed=config.train.seed)
        _point(self.dir / "latest", final)
        if metrics is not None:
            self.log({"event": "validation", **metrics})
            self._record_score(final, metrics)
            if self.snapshots is not None:
                self.snapshots.take(model, state.progress.step, metrics)

    def _record_score(self, checkpoint: Path, metrics: dict) -> None:
        name = self.config.train.early_stopping_metric
        if name not in metrics:
            return
        scores_path = self.dir / "scores.json"
        scores = json.loads(scores_path.read_text()) if scores_path.exists() else {}
        scores[checkpoint.name] = metrics[name]
        ranked = sorted(scores, key=lambda k: scores[k], reverse=higher_is_better(name))
        keep = set(ranked[: self.config.train.keep_best])
        latest = self.latest()
        for old in [*ranked[self.config.train.keep_best :], *self._unscored(scores)]:
            if latest is None or old != latest.name:
                shutil.rmtree(self.checkpoints / old, ignore_errors=True)
        scores = {k: v for k, v in scores.items() if k in keep or (latest and k == latest.name)}
        atomic_write_json(scores_path, scores)  # a kill mid-write must not corrupt it
        _point(self.dir / "best", self.checkpoints / ranked[0])

    def _unscored(self, scores: dict) -> list[str]:
        """Checkpoints saved without a validation (after a signal, see interrupts.py): kept
        while they are `latest`, then removed as the ones outside the best K are."""
        return [
            path.name
            for path in self.checkpoints.iterdir()
            if re.fullmatch(r"step-\d+", path.name) and path.name not in scores
        ]


def run_training(run: Run, model, tokenizers, pairs, validate, latest, progress, echo, device):
    """Set up the training state (fresh or resumed), then run the training loop. `echo`'s
    lines from here on, and those it held, go to RUN_DIR/train.log too (logs.RunLog)."""
    config, dist, echo = run.config, run.dist, as_run_log(echo)
    if dist.is_main:
        save_config(config, run.dir / "config.yaml")
        echo.attach(run.dir / TRAIN_LOG)
        if (tensorboard := run.start_tensorboard()) is not None:
            echo(f"TensorBoard: {tensorboard}")
    model.to(device)
    if latest is not None:
        state = TrainState.resume(latest, model, config.train)
        echo(f"resuming from {latest} (step {state.progress.step})")
    else:
        state = TrainState.fresh(model, config.train)
    run.rewind_metrics(state.progress.step)
    if run.snapshots is not None and dist.is_main:  # the untrained model's, or resumed
        run.snapshots.start(model, state.progress.step)
    n_params = sum(p.numel() for p in model.parameters())
    sizes = (as_source(tokenizers[0]).vocab_size, len(tokenizers[1]))  # pictures: no source's
    vocabulary = " / ".join(str(size) for size in sizes if size is not None)
    echo(f"model: {config.model.arch}, {n_params:,} parameters; vocabulary {vocabulary}")
    result = train(
        model,
        pairs,
        config.train,
        validate=validate,
        progress=progress,
        save=lambda state, metrics: run.save(model, tokenizers, state, metrics),
        log=run.log,
        state=state,
        dist=dist,
        device=device,
        echo=echo,
    )
    echo(stopped_line(run, result))
    dist.finish()  # every process saved and said its last line: leave the group together
    return result


def stopped_line(run: Run, result: TrainResult) -> str:
    """The last line of a run: why it stopped, and which checkpoint to take or resume from."""
    where = f"stopped by {result.stopped_by} at step {result.steps} ({result.seconds:.0f} s)"
    if result.stopped_by in STOP_SIGNALS:
        return f"{where}: saved {run.latest()}; heedful train on {run.dir} resumes from it"
    best = run.dir / "best"
    return f"{where}; best checkpoint: {best.resolve() if best.exists() else '-'}"


def _complete_checkpoint(directory: Path) -> bool:
    """Every file a checkpoint has, its source in either slot."""
    files = [name for name in CHECKPOINT_FILES if name not in SOURCE_SLOTS]
    has_source = any((directory / slot).is_file() for slot in SOURCE_SLOTS)
    return has_source and all((directory / name).is_file() for name in files)


def _keep_record(line: str, step: int) -> bool:
    if not line.endswith("\n"):
        return False  # cut off by a kill while it was being written
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return True  # not ours to judge
    return not isinstance(record, dict) or not record.get("step", 0) > step


def _point(link: Path, target: Path) -> None:
    """Atomically (re)point a relative symlink."""
    tmp = link.with_name(f".{link.name}.tmp-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    os.symlink(os.path.relpath(target, link.parent), tmp)
    os.replace(tmp, link)
