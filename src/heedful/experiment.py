"""`heedful train`: a config in, a run directory out, resumable at any checkpoint.

    RUN_DIR/config.yaml             the resolved config (file + overrides)
    RUN_DIR/metrics.jsonl           one JSON record per log line and per validation
    RUN_DIR/checkpoints/step-N/     model directory + training state, written atomically
    RUN_DIR/latest, RUN_DIR/best    symlinks to the newest and the best checkpoint
    RUN_DIR/train.lock              held (flock) by the one trainer writing here; holds its pid

Running it again on the same RUN_DIR resumes from `latest`; `force=True` starts over. Every
input the config names is read and checked before anything in RUN_DIR changes, so a typo costs
an error message, never a run directory.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import torch

from heedful.checkpoint import (
    CheckpointError,
    GenerationConfig,
    atomic_write_bytes,
    atomic_write_json,
    load_model_dir,
    publish_directory,
    read_training_state,
    recover_directories,
    staging_directory,
    write_model_files,
    write_training_state,
)
from heedful.config import Config, ConfigError, save_config
from heedful.cpu import set_threads
from heedful.data.batching import collate
from heedful.data.corpus import CorpusError
from heedful.models.build import build_model
from heedful.training import (
    Distributed,
    TrainProgress,
    TrainResult,
    make_optimizer,
    make_scheduler,
    sequence_loss,
    train,
)

LOCK_FILE = "train.lock"
# what Run.save writes into a checkpoint; training_state.json goes last
CHECKPOINT_FILES = (
    "config.json",
    "model.safetensors",
    "tokenizer.src",
    "tokenizer.tgt",
    "generation.json",
    "training_state.safetensors",
    "training_state.json",
)


class RunError(ValueError):
    """The run directory cannot be trained in now (another trainer is writing to it)."""


def split_source(config: Config, split: str) -> str:
    """The config keys and files a split is read from, as error messages name them."""
    data = config.data
    if getattr(data, f"{split}_tsv") is not None:
        return f"data.{split}_tsv ({getattr(data, f'{split}_tsv')})"
    src, tgt = getattr(data, f"{split}_src"), getattr(data, f"{split}_tgt")
    return f"data.{split}_src and data.{split}_tgt ({src}, {tgt})"


def read_split(config: Config, split: str) -> list[tuple[str, str]]:
    """The (source, target) pairs of `train` or `valid`, from aligned files or a TSV; at least
    one, since an empty split fails later, deep inside training or the first validation."""
    from heedful.data.corpus import read_parallel, read_tsv

    data = config.data
    src, tgt, tsv = (getattr(data, f"{split}_{k}") for k in ("src", "tgt", "tsv"))
    if tsv is not None:
        if src is not None or tgt is not None:
            raise ConfigError(f"data.{split}_tsv and data.{split}_src/_tgt are exclusive: give one")
        pairs = read_tsv(Path(tsv), f"data.{split}_tsv")
    elif src is None or tgt is None:
        raise ConfigError(
            f"data.{split}_src and data.{split}_tgt (or data.{split}_tsv) are required"
        )
    else:
        pairs = read_parallel(Path(src), Path(tgt), f"data.{split}_src", f"data.{split}_tgt")
    if not pairs:
        raise CorpusError(
            f"{split_source(config, split)}: empty, no sentence pairs; the {split} split "
            "needs at least one line"
        )
    return pairs


class Run:
    """The files of one run directory, and the checkpoint bookkeeping (latest, best K)."""

    def __init__(self, run_dir: Path, config: Config, dist: Distributed):
        self.dir, self.config, self.dist = Path(run_dir), config, dist
        self.checkpoints = self.dir / "checkpoints"

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

    def clear(self) -> None:
        """--force: delete the run's files, all but the lock this process holds."""
        if not self.dist.is_main:
            return
        for path in self.dir.iterdir():
            if path.name == LOCK_FILE:
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()

    def resume_point(self, echo) -> Path | None:
        """The checkpoint to resume from, after cleaning up what kills during saves left.

        A kill inside a save can leave a staging directory (a whole checkpoint), a half-moved
        checkpoint (see checkpoint.publish_directory) and a `latest` pointing at nothing; a
        dangling `latest` is never read as "no checkpoint", which would silently start over.
        """
        link = self.dir / "latest"
        if self.dist.is_main:
            needed = [Path(os.readlink(link)).name] if link.is_symlink() else []
            for note in recover_directories(self.checkpoints, _complete_checkpoint, needed):
                echo(note)
            for link in self.dir.glob(".*.tmp-*"):  # _point's temporaries
                if link.is_symlink():
                    link.unlink()
        _barrier(self.dist)
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
        """Append to metrics.jsonl, and to TensorBoard if the `tensorboard` package is installed."""
        if not self.dist.is_main:
            return
        with open(self.dir / "metrics.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        writer = self._tensorboard()
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

    def _tensorboard(self):
        if not hasattr(self, "_writer"):
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard is optional
                self._writer = None
            else:
                self._writer = SummaryWriter(str(self.dir / "tensorboard"))
        return self._writer

    def save(
        self, model, optimizer, scheduler, tokenizers, progress: TrainProgress, metrics
    ) -> None:
        """Write checkpoints/step-N atomically, then move the links and prune to the best K."""
        if not self.dist.is_main:
            return
        final = self.checkpoints / f"step-{progress.step:08d}"
        build = staging_directory(final)
        try:
            data = self.config.data
            write_model_files(
                build,
                model,
                self.config.model,
                *tokenizers,
                GenerationConfig(),
                (data.src_lang, data.tgt_lang),
            )
            write_training_state(
                build,
                optimizer,
                scheduler,
                {
                    "progress": asdict(progress),
                    "metrics": metrics,
                    "seed": self.config.train.seed,
                },
            )
            publish_directory(build, final)
        except BaseException:
            shutil.rmtree(build, ignore_errors=True)
            raise
        _point(self.dir / "latest", final)
        if metrics is not None:
            self.log({"event": "validation", **metrics})
            self._record_score(final, metrics)

    def _record_score(self, checkpoint: Path, metrics: dict) -> None:
        name = self.config.train.early_stopping_metric
        if name not in metrics:
            return
        scores_path = self.dir / "scores.json"
        scores = json.loads(scores_path.read_text()) if scores_path.exists() else {}
        scores[checkpoint.name] = metrics[name]
        ranked = sorted(scores, key=lambda k: scores[k], reverse=name != "loss")
        keep = set(ranked[: self.config.train.keep_best])
        latest = self.latest()
        for old in ranked[self.config.train.keep_best :]:
            if latest is None or old != latest.name:
                shutil.rmtree(self.checkpoints / old, ignore_errors=True)
        scores = {k: v for k, v in scores.items() if k in keep or (latest and k == latest.name)}
        atomic_write_json(scores_path, scores)  # a kill mid-write must not corrupt it
        _point(self.dir / "best", self.checkpoints / ranked[0])


def _complete_checkpoint(directory: Path) -> bool:
    return all((directory / name).is_file() for name in CHECKPOINT_FILES)


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


def make_validator(valid_pairs, src_tok, tgt_tok, config: Config, device):
    """Validation: teacher-forced loss and perplexity, greedy BLEU and chrF on the valid set."""
    import math

    from heedful.evaluation import corpus_scores
    from heedful.translator import Translator

    limit = config.data.valid_max_sentences
    pairs = valid_pairs[:limit] if limit else valid_pairs
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    src_ids = [src_tok.encode(s) for s in sources]
    _check_valid_lengths(src_ids, config)
    src_ids = [ids[: config.data.max_length] for ids in src_ids]
    tgt_ids = [tgt_tok.encode(t)[: config.data.max_length] for t in references]

    def validate(model) -> dict:
        total, tokens = 0.0, 0
        for start in range(0, len(pairs), 64):
            src, tgt_in, tgt_out = (
                t.to(device)
                for t in collate(src_ids[start : start + 64], tgt_ids[start : start + 64])
            )
            total += sequence_loss(model(src, tgt_in).logits, tgt_out, 0.0, "sum").item()
            tokens += int((tgt_out != 0).sum())
        translator = Translator(
            model, src_tok, tgt_tok, GenerationConfig(num_beams=1), device=device
        )
        outputs = [t.text for t in translator.translate(sources, batch_size=100)]
        scores = corpus_scores(outputs, references)
        loss = total / max(tokens, 1)
        return {
            "loss": loss,
            "ppl": math.exp(min(loss, 50)),
            "bleu": scores.bleu,
            "chrf": scores.chrf,
        }

    return validate


def _check_valid_lengths(src_ids, config: Config) -> None:
    """Validation translates whole sources: one too long for the model (a multi-megabyte line,
    say) would exhaust memory or time at the first validation; say so before training."""
    limit = config.model.max_positions
    for number, ids in enumerate(src_ids, start=1):
        if len(ids) > limit:
            raise CorpusError(
                f"{split_source(config, 'valid')}: pair {number} has a source of {len(ids):,} "
                f"tokens, more than model.max_positions ({limit}); validation translates whole "
                "sentences: shorten or remove that line, or raise model.max_positions"
            )


def _given_tokenizers(config: Config):
    """The tokenizers named by data.src_tokenizer / data.tgt_tokenizer, or None."""
    from heedful.data.tokenizers import load_tokenizer

    data = config.data
    if data.src_tokenizer is None:
        return None
    loaded = []
    for key, path in (
        ("data.src_tokenizer", data.src_tokenizer),
        ("data.tgt_tokenizer", data.tgt_tokenizer),
    ):
        try:
            loaded.append(load_tokenizer(path))
        except (OSError, ValueError) as e:
            raise ConfigError(f"{key}: cannot load a tokenizer from {path}: {e}") from e
    return tuple(loaded)


def _new_tokenizers(config: Config, train_pairs):
    from heedful.data.tokenizers import train_tokenizers

    data = config.data
    try:
        return train_tokenizers(
            [s for s, _ in train_pairs],
            [t for _, t in train_pairs],
            kind=data.tokenizer,
            vocab_size=data.vocab_size,
            model_type=data.sp_model_type,
            joint=data.joint_vocab,
        )
    except ValueError as e:
        raise ConfigError(
            f"cannot train the data.tokenizer ({data.tokenizer}) on "
            f"{split_source(config, 'train')}: {e} (data.vocab_size = {data.vocab_size})"
        ) from None


def _model_and_tokenizers(config: Config, latest: Path | None, given, train_pairs):
    """From the checkpoint resumed, or new: given or newly trained tokenizers, seeded model."""
    if latest is not None:
        loaded = load_model_dir(latest)
        if loaded.model_config != config.model:
            raise CheckpointError(
                f"{latest}: its model config differs from the config given; "
                "use --force to start over"
            )
        return loaded.model, loaded.src_tokenizer, loaded.tgt_tokenizer
    src_tok, tgt_tok = given or _new_tokenizers(config, train_pairs)
    torch.manual_seed(config.train.seed)
    return build_model(config.model, len(src_tok), len(tgt_tok)), src_tok, tgt_tok


def _training_ids(config: Config, train_pairs, src_tok, tgt_tok, echo):
    """Tokenized training pairs, filtered by length; none left is an error, not an IndexError."""
    from heedful.data.corpus import filter_pairs

    src_ids, tgt_ids, report = filter_pairs(train_pairs, src_tok, tgt_tok, config.data.max_length)
    if not src_ids:
        raise CorpusError(
            f"{split_source(config, 'train')}: no training pairs left: {report}; check the "
            f"files, or raise data.max_length (now {config.data.max_length})"
        )
    echo(f"training pairs: {report}")
    return src_ids, tgt_ids


def train_from_config(
    config: Config, run_dir: str | Path, force: bool = False, progress: bool = True, echo=print
) -> TrainResult:
    """Train (or resume) the run in `run_dir` as `config` says."""
    set_threads(config.train.threads)
    dist = Distributed.from_env()
    device = _device(dist)
    if dist.world_size > 1 and not torch.distributed.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        torch.distributed.init_process_group(backend)
    # Read and check every input first: --force must not delete a run for a typo in a path.
    train_pairs, valid_pairs = read_split(config, "train"), read_split(config, "valid")
    given = _given_tokenizers(config)
    run = Run(Path(run_dir), config, dist)
    with run.locked():
        latest = None if force else run.resume_point(echo)
        model, src_tok, tgt_tok = _model_and_tokenizers(config, latest, given, train_pairs)
        src_ids, tgt_ids = _training_ids(config, train_pairs, src_tok, tgt_tok, echo)
        validate = make_validator(valid_pairs, src_tok, tgt_tok, config, device)
        if force:
            run.clear()
        _barrier(dist)
        return _train_run(
            run,
            model,
            (src_tok, tgt_tok),
            (src_ids, tgt_ids),
            validate,
            latest,
            progress,
            echo,
            device,
        )


def _train_run(run: Run, model, tokenizers, ids, validate, latest, progress, echo, device):
    """Set up the optimizer (restored when resuming), then run the training loop."""
    config, dist = run.config, run.dist
    if dist.is_main:
        save_config(config, run.dir / "config.yaml")
    model.to(device)
    optimizer = make_optimizer(model, config.train)
    scheduler = make_scheduler(optimizer, config.train)
    if latest is not None:
        info = read_training_state(latest, optimizer, scheduler)
        state = (optimizer, scheduler, TrainProgress(**info["progress"]))
        echo(f"resuming from {latest} (step {state[2].step})")
    else:
        torch.manual_seed(config.train.seed)
        state = (optimizer, scheduler, TrainProgress())
    run.rewind_metrics(state[2].step)
    n_params = sum(p.numel() for p in model.parameters())
    echo(
        f"model: {config.model.arch}, {n_params:,} parameters; "
        f"vocabulary {len(tokenizers[0])} / {len(tokenizers[1])}"
    )
    result = train(
        model,
        *ids,
        config.train,
        validate=validate,
        progress=progress,
        save=lambda p, m: run.save(model, optimizer, scheduler, tokenizers, p, m),
        log=run.log,
        state=state,
        dist=dist,
        device=device,
    )
    echo(
        f"stopped by {result.stopped_by} at step {result.steps} ({result.seconds:.0f} s); "
        f"best checkpoint: {(run.dir / 'best').resolve() if (run.dir / 'best').exists() else '-'}"
    )
    return result


def _device(dist: Distributed) -> torch.device:
    if torch.cuda.is_available():
        return torch.device(
            "cuda", int(os.environ.get("LOCAL_RANK", dist.rank)) % torch.cuda.device_count()
        )
    return torch.device("cpu")


def _barrier(dist: Distributed) -> None:
    if dist.world_size > 1:
        torch.distributed.barrier()
