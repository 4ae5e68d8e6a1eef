"""The training loop: forward, loss, backward, clip, step, schedule; validate and save every N.

One explicit function, no trainer framework: read `train` top to bottom to know what happens.
What it carries from step to step (optimizer, schedule, progress) is a `TrainState`
(training/state.py), made fresh from the seed or resumed from a checkpoint.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from heedful.config import TrainConfig
from heedful.cpu import FreeCores, bf16_missing, bf16_units
from heedful.data.batching import Pairs
from heedful.data.stream import BatchStream, Shard
from heedful.data.tokenizers import PAD_ID
from heedful.evaluation import improves
from heedful.logs import Progress, as_run_log
from heedful.training.distributed import ALONE, Distributed
from heedful.training.interrupts import STOP_SIGNALS, StopSignals
from heedful.training.output_loss import output_layer_loss, output_products
from heedful.training.state import TrainProgress, TrainState
from heedful.training.streams import Streams, backward_in_pieces, plan, split


class TrainingError(ValueError):
    """Training cannot go on (the loss or the weights stopped being finite); says at which step."""


@dataclass
class TrainResult:
    progress: TrainProgress
    stopped_by: str  # max_steps | max_epochs | max_time | validation | patience | SIGINT | SIGTERM
    history: list[dict] = field(default_factory=list)  # one dict per validation

    @property
    def steps(self) -> int:
        return self.progress.step

    @property
    def seconds(self) -> float:
        return self.progress.seconds


def use_bf16(setting: bool | None, device: str | torch.device) -> bool:
    """train.bf16 as given, or (None) on for a CUDA GPU with bfloat16 support: there it
    roughly halves the time and memory of the matmuls at no cost in accuracy that matters.
    Not on a CPU by default, even one with AMX tiles, whose bfloat16 products run 5-8x float32's:
    oneDNN builds and caches a kernel for every matrix shape, and length-bucketed batches bring
    a new shape with most batches (a run's memory reached 5.7 GB in 13 minutes, float32's
    1.4; docs/benchmarks.md, "bfloat16 on a CPU")."""
    if setting is not None:
        return setting
    device = torch.device(device)
    return device.type == "cuda" and torch.cuda.is_bf16_supported()


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


def defers_output_layer(model: nn.Module) -> bool:
    """Whether model.forward takes project=False (and then returns the states before the
    output layer with that layer): the Transformer and the RNN do (the pointer-generator takes
    it and still returns logits); a subclass that overrides forward without it, or a Hugging
    Face model, do not and train on logits as before."""
    return "project" in inspect.signature(model.forward).parameters


def train(
    model: nn.Module,
    pairs: Pairs,
    config: TrainConfig,
    validate: Callable[[nn.Module], dict] | None = None,
    good_enough: Callable[[dict], bool] | None = None,
    progress: bool = True,
    save: Callable[[TrainState, dict | None], None] | None = None,
    log: Callable[[dict], None] | None = None,
    state: TrainState | None = None,
    dist: Distributed = ALONE,
    device: str | torch.device = "cpu",
    echo: Callable[[str], None] | None = None,
) -> TrainResult:
    """Train `model` in place until max_steps / max_epochs / max_time, early stop, `good_enough`
    or SIGINT / SIGTERM (interrupts.py). validate(model) -> metrics runs every `eval_every`
    steps and at the last, in eval mode; `save(state, metrics)` then checkpoints; `log(record)`
    gets training records, `echo` the lines (logs.py). `state` resumes a run (default: fresh);
    `dist` shards each global batch across processes (then wrapped in DDP)."""
    state = state if state is not None else TrainState.fresh(model, config)
    p = state.progress
    stream = _batches(pairs, config, p, dist)
    net = nn.parallel.DistributedDataParallel(model) if dist.world_size > 1 else model
    autocast = _autocast(config, device, echo if dist.is_main else None)
    products = _products(config, model, device, autocast, echo if dist.is_main else None)
    shown = Progress(config.max_steps, p.step, progress and dist.is_main, as_run_log(echo))
    history, clock = [], _clock(p.seconds, dist, device)
    streams, cores = _threads(config, model, device, dist, autocast, echo)
    reserve, saved_at = 0.0, p.step  # the latest validation's seconds; the step last saved
    model.train()
    with StopSignals(lambda signum: dist.latest(signum, device)) as stop:
        while (stopped_by := _limit_reached(config, stream, p, reserve, stop)) is None:
            shards = [stream.next() for _ in range(config.accumulate)]
            with streams.step():
                loss_sum, tokens = _optimizer_step(
                    net, model, shards, state, config, dist, device, (autocast, products), streams
                )
            _advance(p, stream, tokens, clock, cores, echo)
            _log(state, config, loss_sum * dist.world_size, tokens, shards, shown, log)
            if p.step % config.eval_every == 0:
                began = p.seconds
                metrics = _validate(model, validate, p, config, shown, dist, clock)
                reserve = p.seconds - began  # the same on every process (clock() is their max)
                stopped_by = _early_stop(metrics, config, p, good_enough, history)
                _save(save, model, state, metrics, config)
                saved_at = p.step
                if stopped_by is not None:
                    break
        if stopped_by in STOP_SIGNALS and p.step != saved_at:
            _save(save, model, state, None, config)  # at once, unvalidated (interrupts.py)
        elif stopped_by not in STOP_SIGNALS and p.step % config.eval_every != 0:
            # a final checkpoint wherever a limit stopped us, validated: with a schedule that
            # decays to the budget's end it is often the best, and `best` must point at it
            metrics = _validate(model, validate, p, config, shown, dist, clock)
            _early_stop(metrics, config, p, None, history)  # marks it best or not
            _save(save, model, state, metrics, config)
    shown.close()
    model.eval()
    return TrainResult(p, stopped_by, history)


def _threads(config: TrainConfig, model, device, dist: Distributed, autocast, echo):
    """(the pieces of each batch and the threads that run them, training/streams.py; the free
    cores the threads follow, cpu.FreeCores, or None): a batch that runs whole on every thread
    follows them, pieces side by side keep every core."""
    streams = plan(config.pieces, model, device, dist.world_size, _sliced(model, autocast), echo)
    follow = dist.world_size == 1 and streams.side_by_side == 1
    return streams, FreeCores.follow(config.threads) if follow else None


def _batches(pairs: Pairs, config: TrainConfig, p: TrainProgress, dist: Distributed) -> BatchStream:
    """The batches from where the run is (its epoch and batch), this process's share of each."""
    return BatchStream(
        pairs,
        config.batch_tokens,
        config.seed,
        p.epoch,
        p.batch_in_epoch,
        dist.rank,
        dist.world_size,
        config.data_workers,
    )


def _advance(p: TrainProgress, stream: BatchStream, tokens: int, clock, cores, echo) -> None:
    """A step taken: the counters and the clock; and the threads, where they follow the cores
    other processes leave free (cpu.FreeCores), with a line when their count changes."""
    p.step, p.tokens = p.step + 1, p.tokens + tokens
    p.epoch, p.batch_in_epoch = stream.epoch, stream.batch
    p.seconds = clock()
    changed = cores.look() if cores is not None else None
    if changed is not None and echo is not None:
        threads, others = changed
        echo(f"threads: {threads}, as other processes use {others:.1f} of {len(cores.cores)} cores")


def _log(state: TrainState, config: TrainConfig, loss_sum, tokens, shards, shown, log) -> None:
    """A step done: its training record, every log_every steps, to `log`, and the progress
    shown."""
    record = None
    if state.progress.step % config.log_every == 0:
        record = _record(state, loss_sum, tokens, shards)
        if log is not None:
            log(record)
    shown.update(record)


def _limit_reached(
    config: TrainConfig, stream: BatchStream, p: TrainProgress, reserve: float, stop: StopSignals
):
    """The step, epoch or time limit or the signal that ends training before another step, or
    None to take it. `reserve`: seconds to leave in the time budget for the final validation."""
    if p.step >= config.max_steps:
        return "max_steps"
    if config.max_epochs is not None and stream.epochs_done() >= config.max_epochs:
        return "max_epochs"
    if config.max_time is not None and p.seconds + reserve >= config.max_time:
        return "max_time"
    return stop.agreed()


def _clock(start_seconds: float, dist: Distributed, device) -> Callable[[], float]:
    """Training seconds so far (from `start_seconds`, what resumed sessions spent), the
    largest over the processes: validations included."""
    session_start = time.perf_counter()
    return lambda: dist.latest(start_seconds + time.perf_counter() - session_start, device)


def _autocast(config: TrainConfig, device: str | torch.device, echo=None):
    """bfloat16 autocast where train.bf16 (or its default) asks for it, with a line saying so:
    the run's numbers differ from float32's, and a GPU turns it on unasked."""
    if not use_bf16(config.bf16, device):
        return nullcontext()
    if echo is not None:
        why = (
            "train.bf16" if config.bf16 else "the default on this GPU; train.bf16=false for float32"
        )
        slow = bf16_missing() if torch.device(device).type == "cpu" else None
        echo(f"precision: bfloat16 autocast ({why})" + (f"; WARNING: {slow}" if slow else ""))
    return torch.autocast(torch.device(device).type, torch.bfloat16)


def _optimizer_step(
    net, model, shards: list[Shard], state, config, dist, device, precision, streams: Streams
) -> tuple[float, int]:
    """One optimizer step over `accumulate` global batches -> (this rank's summed loss, the
    global batches' target tokens). Each rank's loss is its share of the global token mean, so
    gradients match one process on the whole batch. On a CPU each batch goes in pieces, side
    by side in `streams` threads (training/streams.py). precision: the autocast context and
    the output layer's products' dtype (`_products`)."""
    autocast, products = precision
    total_tokens = sum(shard.global_tokens for shard in shards)
    state.optimizer.zero_grad(set_to_none=True)
    loss_sum = 0.0
    sliced = _sliced(model, autocast)
    for i, (batch, weight, _) in enumerate(shards):
        batch = batch.to(device)
        scale = weight * dist.world_size / total_tokens
        if (parts := split(batch, streams.pieces)) is not None:
            loss_of = partial(_loss, model, sliced, config.label_smoothing, products=products)
            pieces_loss = backward_in_pieces(loss_of, model, parts, scale, streams.side_by_side)
            loss_sum += pieces_loss * weight
            continue
        sync = i == len(shards) - 1 or dist.world_size == 1
        with autocast, nullcontext() if sync else net.no_sync():
            loss = _loss(net, sliced, config.label_smoothing, batch, products)
            (loss * scale).backward()
        loss_sum += loss.item() * weight
    _check_loss("training", loss_sum, state.progress.step + 1, config)
    if config.clip_norm > 0:
        nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm)
    state.optimizer.step()
    state.scheduler.step()
    return loss_sum, total_tokens


def _sliced(model: nn.Module, autocast) -> bool:
    """Whether the output layer and the loss go in slices (output_loss.py): where the model can,
    and in float32 (bf16 autocast keeps the plain path)."""
    return isinstance(autocast, nullcontext) and defers_output_layer(model)


def _products(config: TrainConfig, model, device, autocast, echo) -> torch.dtype | None:
    """bfloat16 where train.output_products asks for the output layer's products in it and
    that layer goes in slices, with a line saying so; None (the states' own dtype) else."""
    products = output_products(config.output_products, device)
    if products is None or not _sliced(model, autocast):
        return None
    if echo is not None:
        slow = bf16_missing() if torch.device(device).type == "cpu" else None
        why = f"train.output_products={config.output_products}"
        why += f": this CPU has {bf16_units()}" if config.output_products == "auto" else ""
        line = f"precision: the output layer's products in bfloat16 ({why})"
        echo(line + (f"; WARNING: {slow}" if slow else ""))
    return products


def _loss(net, sliced: bool, label_smoothing: float, batch, products=None) -> torch.Tensor:
    """The batch's summed (smoothed) token loss, and the model's regulariser if it has one;
    `products`: the sliced output layer's (`_products`)."""
    src, tgt_in, tgt_out = batch
    # states (B, T, D) and the output layer, or logits (B, T, V) from a model that cannot
    # defer that layer (the pointer-generator) or was not asked to
    out = net(src, tgt_in, project=False) if sliced else net(src, tgt_in)
    if out.features is not None:
        loss = output_layer_loss(
            out.features, out.output_layer, tgt_out, label_smoothing, PAD_ID, products=products
        )
    else:
        loss = sequence_loss(out.logits, tgt_out, label_smoothing, "sum")
    if out.penalty is not None:  # e.g. Show, Attend and Tell's attention regulariser
        loss = loss + out.penalty
    return loss


def _record(state: TrainState, loss_sum: float, tokens: int, shards: list[Shard]) -> dict:
    """A training record for metrics.jsonl and the progress bar."""
    p = state.progress
    return {
        "step": p.step,
        "train_loss": loss_sum / tokens,
        "lr": state.scheduler.get_last_lr()[0],
        "tokens_per_s": p.tokens / max(p.seconds, 1e-9),
        # running totals: differences between two records give the rate of a stretch
        "tokens": p.tokens,
        "seconds": p.seconds,
        "epoch": p.epoch,
        # share of the step's target positions that are padding (bucketing keeps it low)
        # (this rank's rows: the share is the same in expectation on every rank)
        "padding": 1.0
        - sum(s.batch.target_tokens() for s in shards)
        / max(1, sum(s.batch.tgt_out.numel() for s in shards)),
    }


def _check_loss(kind: str, loss: float, step: int, config: TrainConfig) -> None:
    """Stop at the first non-finite loss: every step after it would only spread the NaN."""
    if not math.isfinite(loss):
        raise TrainingError(
            f"the {kind} loss at step {step} is {loss}: training diverged (try a lower "
            f"train.lr, now {config.lr:g}, or a train.clip_norm > 0, now {config.clip_norm:g}); "
            "nothing was saved after the last checkpoint"
        )


def _save(save, model: nn.Module, state: TrainState, metrics, config: TrainConfig) -> None:
    """Checkpoint through the caller's `save`, never with non-finite weights: `latest` would
    resume into NaN for ever."""
    if save is None:
        return
    for name, param in model.named_parameters():
        if not torch.isfinite(param).all():
            raise TrainingError(
                f"weight {name} is not finite after step {state.progress.step}: training "
                f"diverged (try a lower train.lr, now {config.lr:g}); step "
                f"{state.progress.step} was not saved, the last checkpoint stays"
            )
    save(state, metrics)


def _fmt(key: str, value) -> str:
    return f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}"


def _validate(model, validate, p: TrainProgress, config, shown, dist, clock) -> dict | None:
    """validate(model) in eval mode, without gradients (None without one); its loss must be
    finite. The progress clock then moves past it: the budget counts validation."""
    if validate is None:
        return None
    model.eval()
    with torch.no_grad():
        metrics = {"step": p.step, "seconds": round(p.seconds, 1), **validate(model)}
    model.train()
    p.seconds = clock()
    _check_loss("validation", metrics.get("loss", 0.0), p.step, config)
    if dist.is_main:
        shown.say("  ".join(_fmt(k, v) for k, v in metrics.items()))
    return metrics


def _early_stop(
    metrics: dict | None, config: TrainConfig, p: TrainProgress, good_enough, history: list
) -> str | None:
    """Record a validation and update the best score; the reason to stop ("patience",
    "validation") or None to go on (always, without a validation)."""
    if metrics is None:
        return None
    history.append(metrics)
    name = config.early_stopping_metric
    if name in metrics:
        better = improves(name, metrics[name], p.best_score)
        p.best_score, p.bad_validations = (
            (metrics[name], 0) if better else (p.best_score, p.bad_validations + 1)
        )
        metrics["best"] = better
        if config.patience is not None and p.bad_validations >= config.patience:
            return "patience"
    if good_enough is not None and good_enough(metrics):
        return "validation"
    return None
