"""`heedful train`: a config in, a run directory (run_dir.py) out, resumable at any checkpoint.

Running it again on the same run directory resumes from `latest`; `force=True` starts over.
Every input the config names is read and checked before anything in the run directory changes,
so a typo costs an error message, never a run directory.

One pipeline for every task: a task (text_experiment.TextTask, captions_experiment.CaptionTask)
supplies what differs (reading its data, the source side and target tokenizer, the training
pairs, the validation); the processes, their logs, the run directory, its checkpoints, the
training loop and the validator's shape (validation.py) are the same for all of them.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from heedful.allocator import one_malloc_arena, reuse_freed_memory
from heedful.config import Config
from heedful.cpu import set_threads
from heedful.data.batching import Pairs
from heedful.logs import RunLog
from heedful.training.captions_task import CaptionTask
from heedful.training.distributed import Distributed
from heedful.training.loop import TrainResult
from heedful.training.run_dir import Run, run_training
from heedful.training.snapshots import Snapshots
from heedful.training.text_task import TextTask, read_split
from heedful.training.validation import Validation, make_validator

__all__ = ["Task", "make_validator", "read_split", "task_for", "train_from_config"]


class Task(Protocol):
    """What a task supplies to train_from_config; `data` is whatever its read returns."""

    def read(self, config: Config, dist: Distributed, progress: bool, echo) -> object:
        """Every input, read and checked (before the run directory changes)."""

    def model(self, config: Config, latest: Path | None, data, echo) -> tuple:
        """(model, (source side, target tokenizer)): resumed from `latest`, or new."""

    def examples(
        self, config: Config, data, model, tokenizers, device, echo
    ) -> tuple[Pairs, Validation]:
        """The pairs to train on, and what validation reads."""

    def reading(self, model, data) -> AbstractContextManager:
        """The model as training runs it (captions: past a cached trunk)."""


def task_for(config: Config) -> Task:
    """Captions for an image encoder (issue 12), translation for text."""
    return TextTask() if config.model.encoder.kind == "text" else CaptionTask()


def _voice(dist: Distributed, run_dir: Path, rank_logs: bool, echo):
    """What this process prints with: `echo` on rank 0; on the others nothing, or (rank_logs)
    a line appended to rank-N.log in the run directory."""
    if dist.is_main:
        return echo
    if not rank_logs:
        return lambda message: None

    def to_file(message: str) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        with open(run_dir / f"rank-{dist.rank}.log", "a", encoding="utf-8") as log:
            log.write(f"{message}\n")

    return to_file


def train_from_config(
    config: Config, run_dir: str | Path, force: bool = False, progress: bool = True, echo=print
) -> TrainResult:
    """Train (or resume) the run in `run_dir` as `config` says."""
    reuse_freed_memory()  # every step's tensors again, without fresh pages (allocator.py)
    one_malloc_arena()  # the pieces of a batch, side by side in threads, share one heap
    task = task_for(config)
    set_threads(config.train.threads)
    dist = Distributed.from_env()
    device = dist.device()
    dist.start(echo)
    echo = RunLog(_voice(dist, Path(run_dir), config.train.rank_logs, echo), hold=dist.is_main)
    # Read and check every input first: --force must not delete a run for a typo in a path.
    data = task.read(config, dist, progress, echo)
    run = Run(Path(run_dir), config, dist)
    with run.locked():
        latest = None if force else run.resume_point(echo)
        model, tokenizers = task.model(config, latest, data, echo)
        pairs, valid = task.examples(config, data, model, tokenizers, device, echo)
        validate = make_validator(valid, config, device)
        run.snapshots = Snapshots.of(run.dir, valid, config, device, echo)
        if force:
            run.clear()
        dist.barrier()
        with task.reading(model, data):
            return run_training(
                run, model, tokenizers, pairs, validate, latest, progress, echo, device
            )
