"""The training loop: forward, loss, backward, clip, step, schedule; validate every N steps.

One explicit function, no trainer framework: read it top to bottom to know what happens.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from heedful.config import TrainConfig
from heedful.data.batching import bucketed_batches, collate
from heedful.data.tokenizers import PAD_ID


@dataclass
class TrainResult:
    steps: int
    seconds: float
    stopped_by: str  # "max_steps" | "max_time" | "validation"
    history: list[dict] = field(default_factory=list)  # one dict per validation


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


def make_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    kind = torch.optim.AdamW if config.optimizer == "adamw" else torch.optim.Adam
    return kind(
        model.parameters(), lr=config.lr, betas=config.betas, weight_decay=config.weight_decay
    )


def sequence_loss(
    logits: torch.Tensor, tgt_out: torch.Tensor, label_smoothing: float
) -> torch.Tensor:
    """Mean token cross-entropy over non-padding targets, with label smoothing (§5.4)."""
    return F.cross_entropy(
        logits.flatten(0, 1),
        tgt_out.flatten(),
        ignore_index=PAD_ID,
        label_smoothing=label_smoothing,
    )


def epoch_batches(src_ids, tgt_ids, batch_tokens: int, rng: random.Random):
    """Endless stream of (src, tgt_in, tgt_out) batches, reshuffled and rebucketed each epoch."""
    src_lengths = [len(s) for s in src_ids]
    tgt_lengths = [len(t) + 1 for t in tgt_ids]  # + <s> or </s>
    while True:
        for batch in bucketed_batches(src_lengths, tgt_lengths, batch_tokens, rng):
            yield collate([src_ids[i] for i in batch], [tgt_ids[i] for i in batch])


def train(
    model: nn.Module,
    src_ids: Sequence[Sequence[int]],
    tgt_ids: Sequence[Sequence[int]],
    config: TrainConfig,
    validate: Callable[[nn.Module], dict] | None = None,
    good_enough: Callable[[dict], bool] | None = None,
    progress: bool = True,
) -> TrainResult:
    """Train `model` in place on id sequences until max_steps, max_time, or `good_enough`.

    `validate(model)` runs every `config.eval_every` steps (in eval mode, no gradients) and returns
    metrics; `good_enough(metrics)` may end training early.
    """
    from tqdm.auto import tqdm

    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)
    optimizer = make_optimizer(model, config)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: learning_rate_factor(i + 1, config.warmup_steps, config.schedule)
    )
    batches = epoch_batches(src_ids, tgt_ids, config.batch_tokens, rng)
    bar = tqdm(total=config.max_steps, disable=not progress, unit="step", dynamic_ncols=True)
    start, history, stopped_by, tokens_seen = time.perf_counter(), [], "max_steps", 0
    step = 0
    model.train()
    while step < config.max_steps:
        src, tgt_in, tgt_out = next(batches)
        logits = model(src, tgt_in).logits  # (B, T, V)
        loss = sequence_loss(logits, tgt_out, config.label_smoothing)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.clip_norm > 0:
            nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm)
        optimizer.step()
        scheduler.step()
        step += 1
        tokens_seen += int((tgt_out != PAD_ID).sum())
        elapsed = time.perf_counter() - start
        bar.update(1)
        if step % config.log_every == 0:
            bar.set_postfix(
                loss=f"{loss.item():.3f}",
                lr=f"{scheduler.get_last_lr()[0]:.2e}",
                tok_s=f"{tokens_seen / elapsed:.0f}",
            )
        if validate is not None and step % config.eval_every == 0:
            metrics = _validate(model, validate, step, elapsed, loss.item())
            history.append(metrics)
            bar.write("  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                for k, v in metrics.items()))  # fmt: skip
            if good_enough is not None and good_enough(metrics):
                stopped_by = "validation"
                break
        if config.max_time is not None and elapsed >= config.max_time:
            stopped_by = "max_time"
            break
    bar.close()
    model.eval()
    return TrainResult(step, time.perf_counter() - start, stopped_by, history)


def _validate(model: nn.Module, validate: Callable, step: int, elapsed: float, loss: float) -> dict:
    model.eval()
    with torch.no_grad():
        metrics = {
            "step": step,
            "seconds": round(elapsed, 1),
            "train_loss": loss,
            **validate(model),
        }
    model.train()
    return metrics
