"""The training loop: forward, loss, backward, clip, step, schedule; validate and save every N.

One explicit function, no trainer framework: read `train` top to bottom to know what happens.
Everything a resumed run needs to continue bit for bit lives in `TrainProgress` (plus the
optimizer, scheduler and torch RNG, which the caller's checkpoint hook saves).
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from heedful.config import TrainConfig
from heedful.data.batching import bucketed_batches, collate
from heedful.data.tokenizers import PAD_ID


class TrainingError(ValueError):
    """Training cannot go on (the loss or the weights stopped being finite); says at which step."""


@dataclass
class TrainProgress:
    """Where training stands; saved in every checkpoint, restored on resume."""

    step: int = 0
    epoch: int = 0  # data position: epoch number and batch index within it
    batch_in_epoch: int = 0
    tokens: int = 0  # target tokens trained on
    seconds: float = 0.0  # training wall-clock time, summed over resumed sessions
    best_score: float | None = None  # best validation value of the early-stopping metric
    bad_validations: int = 0  # validations since the best one


@dataclass
class TrainResult:
    progress: TrainProgress
    stopped_by: str  # max_steps | max_epochs | max_time | validation | patience
    history: list[dict] = field(default_factory=list)  # one dict per validation

    @property
    def steps(self) -> int:
        return self.progress.step

    @property
    def seconds(self) -> float:
        return self.progress.seconds


@dataclass(frozen=True)
class Distributed:
    """This process's place in a multi-process run (torchrun sets RANK / WORLD_SIZE)."""

    rank: int = 0
    world_size: int = 1

    @classmethod
    def from_env(cls) -> Distributed:
        return cls(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)))

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def learning_rate_factor(step: int, warmup_steps: int, schedule: str) -> float:
    """Multiplier of the peak learning rate at `step` (1-based).

    Linear warm-up to the peak, then either constant or the inverse square root decay of
    Vaswani et al. 2017, §5.3 ("Noam"), normalised so the peak is exactly `train.lr`.
    """
    if warmup_steps > 0 and step < warmup_steps:
        return step / warmup_steps
    if schedule == "inverse_sqrt":
        return math.sqrt(max(warmup_steps, 1) / step)
    return 1.0


def use_bf16(setting: bool | None, device: str | torch.device) -> bool:
    """train.bf16 as given, or (None) on for a CUDA GPU with bfloat16 support: there it
    roughly halves the time and memory of the matmuls at no cost in accuracy that matters,
    while on a CPU bfloat16 matmuls are often slower than float32."""
    if setting is not None:
        return setting
    device = torch.device(device)
    return device.type == "cuda" and torch.cuda.is_bf16_supported()


def make_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    kind = torch.optim.AdamW if config.optimizer == "adamw" else torch.optim.Adam
    return kind(
        model.parameters(), lr=config.lr, betas=config.betas, weight_decay=config.weight_decay
    )


def make_scheduler(optimizer: torch.optim.Optimizer, config: TrainConfig):
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: learning_rate_factor(i + 1, config.warmup_steps, config.schedule)
    )


def sequence_loss(
    logits: torch.Tensor, tgt_out: torch.Tensor, label_smoothing: float, reduction: str = "mean"
) -> torch.Tensor:
    """Token cross-entropy over non-padding targets, with label smoothing (§5.4)."""
    return F.cross_entropy(
        logits.float().flatten(0, 1),
        tgt_out.flatten(),
        ignore_index=PAD_ID,
        label_smoothing=label_smoothing,
        reduction=reduction,
    )


class BatchStream:
    """Batches in a reproducible order that can resume at any (epoch, batch) position.

    Each epoch's order depends only on the seed and the epoch number, so a resumed run sees
    exactly the batches the uninterrupted run would have seen.
    """

    def __init__(
        self, src_ids, tgt_ids, batch_tokens: int, seed: int, epoch: int = 0, batch: int = 0
    ):
        self.src_ids, self.tgt_ids, self.seed = src_ids, tgt_ids, seed
        self.src_lengths = [len(s) for s in src_ids]
        self.tgt_lengths = [len(t) + 1 for t in tgt_ids]  # + <s> or </s>
        self.batch_tokens, self.epoch, self.batch = batch_tokens, epoch, batch
        self._order = self._epoch_order()

    def _epoch_order(self) -> list[list[int]]:
        rng = random.Random(self.seed * 1_000_003 + self.epoch)
        return bucketed_batches(self.src_lengths, self.tgt_lengths, self.batch_tokens, rng)

    def epochs_done(self) -> int:
        """Complete passes over the data so far."""
        return self.epoch + (1 if self.batch >= len(self._order) else 0)

    def next(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.batch >= len(self._order):
            self.epoch, self.batch = self.epoch + 1, 0
            self._order = self._epoch_order()
        indices = self._order[self.batch]
        self.batch += 1
        return collate([self.src_ids[i] for i in indices], [self.tgt_ids[i] for i in indices])


def _shard(batch, dist: Distributed):
    """This rank's rows of a global batch; a rank left without rows gets one row, weighted 0."""
    rows = list(range(dist.rank, batch[0].size(0), dist.world_size))
    weight = 1.0 if rows else 0.0
    return tuple(t[rows or [0]] for t in batch), weight


def train(
    model: nn.Module,
    src_ids: Sequence[Sequence[int]],
    tgt_ids: Sequence[Sequence[int]],
    config: TrainConfig,
    validate: Callable[[nn.Module], dict] | None = None,
    good_enough: Callable[[dict], bool] | None = None,
    progress: bool = True,
    save: Callable[[TrainProgress, dict | None], None] | None = None,
    log: Callable[[dict], None] | None = None,
    state: tuple[torch.optim.Optimizer, object, TrainProgress] | None = None,
    dist: Distributed = Distributed(),
    device: str | torch.device = "cpu",
) -> TrainResult:
    """Train `model` in place until max_steps / max_epochs / max_time, early stop, or `good_enough`.

    validate(model) -> metrics runs every `eval_every` steps in eval mode; `save(progress,
    metrics)` is then called (and once more at the end) to checkpoint; `log(record)` receives
    training records. `state` = (optimizer, scheduler, progress) resumes a run; `dist` shards
    each global batch across processes (the model is then wrapped in DistributedDataParallel).
    """
    from tqdm.auto import tqdm

    if state is None:
        torch.manual_seed(config.seed)
        optimizer = make_optimizer(model, config)
        state = (optimizer, make_scheduler(optimizer, config), TrainProgress())
    optimizer, scheduler, p = state
    stream = BatchStream(
        src_ids, tgt_ids, config.batch_tokens, config.seed, p.epoch, p.batch_in_epoch
    )
    net = model
    if dist.world_size > 1:
        net = nn.parallel.DistributedDataParallel(model)
    autocast = (
        torch.autocast(torch.device(device).type, torch.bfloat16)
        if use_bf16(config.bf16, device)
        else nullcontext()
    )
    bar = tqdm(
        total=config.max_steps,
        initial=p.step,
        disable=not (progress and dist.is_main),
        unit="step",
        dynamic_ncols=True,
    )
    history, stopped_by, session_start, start_seconds = (
        [],
        "max_steps",
        time.perf_counter(),
        p.seconds,
    )
    model.train()
    while p.step < config.max_steps:
        if config.max_epochs is not None and stream.epochs_done() >= config.max_epochs:
            stopped_by = "max_epochs"
            break
        # One optimizer step over `accumulate` global batches. Each rank's loss is its share of
        # the global token mean, so gradients match one process on the whole batch.
        batches = [tuple(t.to(device) for t in stream.next()) for _ in range(config.accumulate)]
        total_tokens = sum(int((b[2] != PAD_ID).sum()) for b in batches)
        optimizer.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for i, batch in enumerate(batches):
            (src, tgt_in, tgt_out), weight = _shard(batch, dist)
            sync = i == len(batches) - 1 or dist.world_size == 1
            with autocast, nullcontext() if sync else net.no_sync():
                logits = net(src, tgt_in).logits  # (B, T, V)
                loss = sequence_loss(logits, tgt_out, config.label_smoothing, "sum")
                (loss * weight * dist.world_size / total_tokens).backward()
            loss_sum += loss.item() * weight
        _check_loss("training", loss_sum, p.step + 1, config)
        if config.clip_norm > 0:
            nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm)
        optimizer.step()
        scheduler.step()
        p.step, p.tokens = p.step + 1, p.tokens + total_tokens
        p.epoch, p.batch_in_epoch = stream.epoch, stream.batch
        p.seconds = start_seconds + time.perf_counter() - session_start
        bar.update(1)
        if p.step % config.log_every == 0:
            record = {
                "step": p.step,
                "train_loss": loss_sum * dist.world_size / total_tokens,
                "lr": scheduler.get_last_lr()[0],
                "tokens_per_s": p.tokens / max(p.seconds, 1e-9),
                # running totals: differences between two records give the rate of a stretch
                "tokens": p.tokens,
                "seconds": p.seconds,
                "epoch": p.epoch,
                # share of the step's target positions that are padding (bucketing keeps it low)
                "padding": 1.0 - total_tokens / sum(b[2].numel() for b in batches),
            }
            bar.set_postfix(
                loss=f"{record['train_loss']:.3f}",
                lr=f"{record['lr']:.2e}",
                tok_s=f"{record['tokens_per_s']:.0f}",
            )
            if log is not None:
                log(record)
        if p.step % config.eval_every == 0:
            metrics = None
            if validate is not None:
                metrics = _validate(model, validate, p)
                _check_loss("validation", metrics.get("loss", 0.0), p.step, config)
                history.append(metrics)
                if dist.is_main:
                    bar.write("  ".join(_fmt(k, v) for k, v in metrics.items()))
                stopped_by = _early_stop(metrics, config, p, good_enough)
            if save is not None:
                _check_weights(model, p.step, config)
                save(p, metrics)
            if stopped_by in ("validation", "patience"):
                break
        if config.max_time is not None and p.seconds >= config.max_time:
            stopped_by = "max_time"
            break
    else:
        stopped_by = "max_steps"
    bar.close()
    if save is not None and p.step % config.eval_every != 0:
        _check_weights(model, p.step, config)
        save(p, None)  # a clean final checkpoint at whatever step we stopped
    model.eval()
    return TrainResult(p, stopped_by, history)


def _check_loss(kind: str, loss: float, step: int, config: TrainConfig) -> None:
    """Stop at the first non-finite loss: every step after it would only spread the NaN."""
    if not math.isfinite(loss):
        raise TrainingError(
            f"the {kind} loss at step {step} is {loss}: training diverged (try a lower "
            f"train.lr, now {config.lr:g}, or a train.clip_norm > 0, now {config.clip_norm:g}); "
            "nothing was saved after the last checkpoint"
        )


def _check_weights(model: nn.Module, step: int, config: TrainConfig) -> None:
    """Never checkpoint non-finite weights: `latest` would resume into NaN for ever."""
    for name, param in model.named_parameters():
        if not torch.isfinite(param).all():
            raise TrainingError(
                f"weight {name} is not finite after step {step}: training diverged (try a "
                f"lower train.lr, now {config.lr:g}); step {step} was not saved, the last "
                "checkpoint stays"
            )


def _fmt(key: str, value) -> str:
    return f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}"


def _validate(model: nn.Module, validate: Callable, p: TrainProgress) -> dict:
    model.eval()
    with torch.no_grad():
        metrics = {"step": p.step, "seconds": round(p.seconds, 1), **validate(model)}
    model.train()
    return metrics


def _early_stop(metrics: dict, config: TrainConfig, p: TrainProgress, good_enough) -> str:
    """Update the best score and decide whether to stop; returns the reason or 'max_steps'."""
    name = config.early_stopping_metric
    if name in metrics:
        value = metrics[name]
        better = p.best_score is None or (
            value < p.best_score if name == "loss" else value > p.best_score
        )
        p.best_score, p.bad_validations = (
            (value, 0) if better else (p.best_score, p.bad_validations + 1)
        )
        metrics["best"] = better
        if config.patience is not None and p.bad_validations >= config.patience:
            return "patience"
    if good_enough is not None and good_enough(metrics):
        return "validation"
    return "max_steps"
