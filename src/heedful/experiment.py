"""`heedful train`: a config in, a run directory out, resumable at any checkpoint.

    RUN_DIR/config.yaml             the resolved config (file + overrides)
    RUN_DIR/metrics.jsonl           one JSON record per log line and per validation
    RUN_DIR/checkpoints/step-N/     model directory + training state, written atomically
    RUN_DIR/latest, RUN_DIR/best    symlinks to the newest and the best checkpoint

Running it again on the same RUN_DIR resumes from `latest`; `force=True` starts over.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path

import torch

from heedful.checkpoint import (
    CheckpointError,
    GenerationConfig,
    atomic_write_json,
    load_model_dir,
    publish_directory,
    read_training_state,
    staging_directory,
    write_model_files,
    write_training_state,
)
from heedful.config import Config, ConfigError, save_config
from heedful.data.batching import collate
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


def read_split(config: Config, split: str) -> list[tuple[str, str]]:
    """The (source, target) pairs of `train` or `valid`, from aligned files or a TSV."""
    from heedful.data.corpus import read_parallel, read_tsv

    data = config.data
    src, tgt, tsv = (getattr(data, f"{split}_{k}") for k in ("src", "tgt", "tsv"))
    if tsv is not None:
        if src is not None or tgt is not None:
            raise ConfigError(f"data.{split}_tsv and data.{split}_src/_tgt are exclusive: give one")
        return read_tsv(Path(tsv), f"data.{split}_tsv")
    if src is None or tgt is None:
        raise ConfigError(
            f"data.{split}_src and data.{split}_tgt (or data.{split}_tsv) are required"
        )
    return read_parallel(Path(src), Path(tgt), f"data.{split}_src", f"data.{split}_tgt")


class Run:
    """The files of one run directory, and the checkpoint bookkeeping (latest, best K)."""

    def __init__(self, run_dir: Path, config: Config, dist: Distributed):
        self.dir, self.config, self.dist = Path(run_dir), config, dist
        self.checkpoints = self.dir / "checkpoints"

    def latest(self) -> Path | None:
        link = self.dir / "latest"
        return link.resolve() if link.exists() else None

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
    src_ids = [src_tok.encode(s)[: config.data.max_length] for s in sources]
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


def _given_tokenizer(key: str, path: str):
    from heedful.data.tokenizers import load_tokenizer

    try:
        return load_tokenizer(path)
    except (OSError, ValueError) as e:
        raise ConfigError(f"{key}: cannot load a tokenizer from {path}: {e}") from e


def train_from_config(
    config: Config, run_dir: str | Path, force: bool = False, progress: bool = True, echo=print
) -> TrainResult:
    """Train (or resume) the run in `run_dir` as `config` says."""
    from heedful.data.corpus import filter_pairs
    from heedful.data.tokenizers import train_tokenizers

    dist = Distributed.from_env()
    device = _device(dist)
    if dist.world_size > 1 and not torch.distributed.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        torch.distributed.init_process_group(backend)
    run = Run(Path(run_dir), config, dist)
    if force and dist.is_main and run.dir.exists():
        shutil.rmtree(run.dir)
    _barrier(dist)
    run.dir.mkdir(parents=True, exist_ok=True)
    latest = run.latest()
    train_pairs = read_split(config, "train")
    valid_pairs = read_split(config, "valid")
    if latest is not None:
        loaded = load_model_dir(latest)
        if loaded.model_config != config.model:
            raise CheckpointError(
                f"{latest}: its model config differs from the config given; "
                "use --force to start over"
            )
        model, src_tok, tgt_tok = loaded.model, loaded.src_tokenizer, loaded.tgt_tokenizer
    else:
        data = config.data
        if data.src_tokenizer is not None:
            src_tok = _given_tokenizer("data.src_tokenizer", data.src_tokenizer)
            tgt_tok = _given_tokenizer("data.tgt_tokenizer", data.tgt_tokenizer)
        else:
            src_tok, tgt_tok = train_tokenizers(
                [s for s, _ in train_pairs],
                [t for _, t in train_pairs],
                kind=data.tokenizer,
                vocab_size=data.vocab_size,
                model_type=data.sp_model_type,
                joint=data.joint_vocab,
            )
        torch.manual_seed(config.train.seed)
        model = build_model(config.model, len(src_tok), len(tgt_tok))
    if dist.is_main:
        save_config(config, run.dir / "config.yaml")
    model.to(device)
    src_ids, tgt_ids, report = filter_pairs(train_pairs, src_tok, tgt_tok, config.data.max_length)
    echo(f"training pairs: {report}")
    optimizer = make_optimizer(model, config.train)
    scheduler = make_scheduler(optimizer, config.train)
    state = None
    if latest is not None:
        info = read_training_state(latest, optimizer, scheduler)
        state = (optimizer, scheduler, TrainProgress(**info["progress"]))
        echo(f"resuming from {latest} (step {state[2].step})")
    else:
        torch.manual_seed(config.train.seed)
        state = (optimizer, scheduler, TrainProgress())
    n_params = sum(p.numel() for p in model.parameters())
    echo(
        f"model: {config.model.arch}, {n_params:,} parameters; "
        f"vocabulary {len(src_tok)} / {len(tgt_tok)}"
    )
    result = train(
        model,
        src_ids,
        tgt_ids,
        config.train,
        validate=make_validator(valid_pairs, src_tok, tgt_tok, config, device),
        progress=progress,
        save=lambda p, m: run.save(model, optimizer, scheduler, (src_tok, tgt_tok), p, m),
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
