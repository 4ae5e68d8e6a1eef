"""Where a training step's time goes, per operator, and what removing our own overhead gains.

    python benchmarks/profile_training.py            # ~5 minutes; needs ../shared/corpora/multi30k
    python benchmarks/profile_training.py --report   # only rewrite docs/benchmarks.md
    python benchmarks/profile_training.py --cpu amd-epyc-avx2   # another CPU's own section

The Transformer of the vs-JoeyNMT benchmark (3+3 layers, d_model 256, 4 heads, d_ff 1024,
dropout 0.1, 8k joint vocabulary, batches of 3,000 tokens; benchmarks/report.py builds it)
trains as heedful's loop trains it: label-smoothed cross-entropy summed over tokens, backward,
gradient clipping at 1.0, Adam (training_state.make_optimizer with the default TrainConfig).
In float32 the output layer and the loss go in slices (training/output_loss.py), and glibc
keeps freed memory (allocator.reuse_freed_memory), as in `heedful train`.

1. Profile: --profile-steps steps under torch.profiler after a warm-up; each operator's own
   time is put in one row (matmuls, attention, softmax, layer norm, embedding, the output layer,
   the loss, the optimizer step, data collation, ...), as a share of the steps' wall time, and
   the model FLOP/s (vs_joeynmt.forward_flops, 3 x forward) against the machine's matmul limit
   (vs_joeynmt.matmul_gflops, measured in the same run).
2. Variants, each a copy of the same model and optimizer, alternated in rounds over the same
   batches, so that the other work on the machine falls on all of them alike; each variant's
   ratio to the baseline is the median of its per-round ratios of target tokens/s.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from decode_speed_report import shared  # benchmarks/decode_speed_report.py
from report import cpu, machine, multi30k_transformer, variant, write_section  # report.py
from vs_joeynmt import forward_flops, matmul_gflops  # benchmarks/vs_joeynmt.py

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpora" / "multi30k"
REPORT = ROOT / "docs" / "benchmarks.md"
RESULT = ROOT / "benchmarks" / "results" / "profile-training.json"
BEGIN, END = "<!-- profile-training:begin -->", "<!-- profile-training:end -->"
THREADS = 2
VOCAB = 8000
LABELS = ("collate", "forward", "loss", "backward", "clip", "optimizer")


class Trainer:
    """One model and its optimizer, stepping as heedful.training.loop does (without its logging)."""

    def __init__(self, model, tensors, optimizer_options: dict | None = None, bf16=False, pieces=1):
        """optimizer_options: None for heedful's own optimizer (make_optimizer), else Adam's
        options for a variant; bf16: forward and loss under bfloat16 autocast; pieces: each
        batch in that many pieces, a forward and backward each, one after the other
        (training/streams.py's split and backward_in_pieces, on one stream)."""
        import torch

        from heedful.config import TrainConfig
        from heedful.training.state import make_optimizer, parameter_groups

        self.model, self.tensors, self.config = model, tensors, TrainConfig()
        self.bf16, self.pieces = bf16, pieces
        self.optimizer = make_optimizer(model, self.config)
        if optimizer_options is not None:
            groups = parameter_groups(model, self.config.weight_decay)
            c = self.config
            self.optimizer = torch.optim.Adam(groups, lr=c.lr, betas=c.betas, **optimizer_options)

    def step(self, batch) -> int:
        from torch import nn
        from torch.profiler import record_function

        from heedful.data.batching import Batch
        from heedful.training.streams import backward_in_pieces, split

        with record_function("collate"):
            whole = Batch(*self.tensors(batch))
            tokens = int((whole.tgt_out != 0).sum())
        self.optimizer.zero_grad(set_to_none=True)
        if self.pieces > 1 and (parts := split(whole, self.pieces)) is not None:
            backward_in_pieces(self.loss, self.model, parts, 1 / tokens, streams=1)
        else:
            loss = self.loss(whole)
            with record_function("backward"):
                (loss / tokens).backward()
        with record_function("clip"):
            nn.utils.clip_grad_norm_(self.model.parameters(), self.config.clip_norm)
        with record_function("optimizer"):
            self.optimizer.step()
        return tokens

    def loss(self, batch):
        """The batch's summed loss, as the loop takes it: in float32 the output layer and the
        loss in slices (output_loss.py)."""
        import torch
        from torch.profiler import record_function

        from heedful.training.loop import PAD_ID, sequence_loss
        from heedful.training.output_loss import output_layer_loss

        smoothing = self.config.label_smoothing
        with torch.autocast("cpu", torch.bfloat16, enabled=self.bf16):
            with record_function("forward"):
                out = self.model(batch.src, batch.tgt_in, project=self.bf16)
            with record_function("loss"):
                if out.features is not None:
                    layer = out.output_layer
                    return output_layer_loss(out.features, layer, batch.tgt_out, smoothing, PAD_ID)
                return sequence_loss(out.logits, batch.tgt_out, smoothing, "sum")


def batch_flops(batch, tensors) -> float:
    """Training FLOPs of a batch: 3 x forward_flops over its pairs' real lengths."""
    src, _, tgt_out = tensors(batch)
    s_len, t_len = (src != 0).sum(1).tolist(), (tgt_out != 0).sum(1).tolist()
    return 3 * sum(forward_flops(s, t) for s, t in zip(s_len, t_len))


# ---- 1. the profile ---------------------------------------------------------------------------


def profile(trainer: Trainer, batches, tensors) -> dict:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    for batch in batches[:3]:
        trainer.step(batch)
    with torch_profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        start = time.perf_counter()
        tokens = sum(trainer.step(batch) for batch in batches[3:])
        wall = time.perf_counter() - start
    rows: dict[str, float] = {}
    for event in prof.events():
        if event.name in LABELS or not event.name.startswith("aten::"):
            continue
        row = category(event)
        rows[row] = rows.get(row, 0.0) + event.self_cpu_time_total / 1e6
    rows["Python and other (outside operators)"] = wall - sum(rows.values())
    flops = sum(batch_flops(b, tensors) for b in batches[3:])
    return {"wall": wall, "steps": len(batches) - 3, "tokens": tokens, "flops": flops,
            "rows": rows}  # fmt: skip


def category(event) -> str:
    """The row of one operator: by the step's part it ran in, then by its name."""
    label = _label(event)
    name = event.name
    if label in ("collate", "clip"):
        return {"collate": "data collation", "clip": "gradient clipping"}[label]
    if label == "optimizer":
        return "optimizer step (Adam)"
    if name in (
        "aten::mm",
        "aten::addmm",
        "aten::addmm_",
        "aten::bmm",
        "aten::matmul",
        "aten::linear",
    ):
        return "output layer matmuls (d_model x 8k)" if _vocab_wide(event) else "matmuls"
    if label == "loss" or "nll_loss" in name or ("log_softmax" in name and _vocab_wide(event)):
        return "loss: softmax, label smoothing, the logits' gradient (8k vocabulary)"
    if "scaled_dot_product" in name or "softmax" in name:
        return "attention: softmax(QK^T)V kernels"
    if "layer_norm" in name:
        return "layer norm"
    if "embedding" in name:
        return "embedding lookups"
    if "dropout" in name or "bernoulli" in name:
        return "dropout"
    if name in ("aten::copy_", "aten::clone", "aten::contiguous", "aten::cat"):
        return "copies (contiguous, cat)"
    if name in ("aten::fill_", "aten::zero_", "aten::zeros", "aten::empty", "aten::zeros_like"):
        return "allocation and zeroing"
    return "elementwise and other (adds, ReLU, masks, sums)"


def _label(event) -> str | None:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name in LABELS:
            return parent.name
        parent = parent.cpu_parent
    return None


def _vocab_wide(event) -> bool:
    return any(VOCAB in shape for shape in event.input_shapes if isinstance(shape, list))


# ---- 2. the variants --------------------------------------------------------------------------


def separate_qkv_in_training(on: bool) -> None:
    """A variant: self-attention's Q, K, V from three products when training, as heedful did
    before the stacked products (layers/products.py; K and V first, then Q)."""
    import torch

    from heedful.layers.attention import MultiHeadAttention

    original = MultiHeadAttention.__dict__.get("_original_project_qkv")
    if original is None:
        original = MultiHeadAttention.project_qkv
        MultiHeadAttention._original_project_qkv = original

    def project_qkv(self, x):
        if not torch.is_grad_enabled():
            return original(self, x)
        k, v = self.split_heads(self.w_k(x)), self.split_heads(self.w_v(x))
        return self.split_heads(self.w_q(x)), k, v

    MultiHeadAttention.project_qkv = project_qkv if on else original


def torch_dropout(on: bool) -> None:
    """A variant: torch's dropout (a bernoulli_ mask) in place of layers/dropout.py's."""
    import torch.nn.functional as F

    from heedful.layers import dropout as module

    ours = module.__dict__.setdefault("_ours", module.dropout)
    module.dropout = (lambda x, p: F.dropout(x, p, training=True)) if on else ours


def bf16_attention_kernel(on: bool) -> None:
    """A variant: torch's fused attention kernel on the bfloat16 heads that autocast gives it,
    where heedful runs it in float32 on a CPU (training masks have no empty rows)."""
    import torch.nn.functional as F

    from heedful.layers import attention as module

    ours = module.__dict__.setdefault("_ours", module._fused_attention)
    torchs = lambda q, k, v, mask, p: F.scaled_dot_product_attention(  # noqa: E731
        q, k, v, attn_mask=mask, dropout_p=p
    )
    module._fused_attention = torchs if on else ours


@dataclass(frozen=True)
class Variant:
    adam: dict  # Adam's options
    separate_qkv: bool = False  # Q, K, V from three products in training
    torch_dropout: bool = False  # torch's bernoulli_ dropout
    bf16: bool = False  # bfloat16 autocast over the forward pass and the loss
    bf16_attention: bool = False  # with it, the attention kernel in bfloat16 too


_BEFORE = {"separate_qkv": True, "torch_dropout": True}
VARIANTS = {  # the first is the baseline of the ratios
    "Adam, for-loop (heedful before)": Variant({"foreach": False}, **_BEFORE),
    "Adam foreach=True": Variant({"foreach": True}, **_BEFORE),
    "Adam fused=True": Variant({"fused": True}, **_BEFORE),
    "Adam fused=True + one QKV product in training": Variant({"fused": True}, torch_dropout=True),
    "+ heedful's dropout, 16-bit masks (heedful now, float32)": Variant({"fused": True}),
    "+ bfloat16 autocast, attention kernel in bfloat16": Variant(
        {"fused": True}, bf16=True, bf16_attention=True
    ),
    "+ bfloat16 autocast, attention kernel in float32 (heedful with train.bf16: true)": Variant(
        {"fused": True}, bf16=True
    ),
}


def use(variant: Variant) -> None:
    separate_qkv_in_training(variant.separate_qkv)
    torch_dropout(variant.torch_dropout)
    bf16_attention_kernel(variant.bf16_attention)


def has_bf16() -> bool:
    """Whether the CPU multiplies bfloat16 itself (AVX512_BF16 or AMX): without, torch emulates
    it at a few percent of float32's speed (58 against 2,064 target tok/s on an AVX2 EPYC),
    and the bfloat16 variants would take most of an hour and say nothing about heedful."""
    return bool({"avx512_bf16", "amx_bf16"} & set(cpu()["flags"]))


def variants(model, batches, tensors, rounds: int, steps: int, bf16: bool) -> dict:
    chosen = {name: v for name, v in VARIANTS.items() if bf16 or not v.bf16}
    trainers = {name: Trainer(copy.deepcopy(model), tensors, v.adam, v.bf16)
                for name, v in chosen.items()}  # fmt: skip
    rates: dict[str, list[float]] = {name: [] for name in chosen}
    for r in range(rounds):
        names = list(chosen)
        names = names[r % len(names) :] + names[: r % len(names)]
        chunk = [batches[(r * steps + i) % len(batches)] for i in range(steps)]
        for name in names:
            use(VARIANTS[name])
            trainers[name].step(chunk[0])  # one step unmeasured: the caches of this variant
            start = time.perf_counter()
            tokens = sum(trainers[name].step(batch) for batch in chunk[1:])
            rates[name].append(tokens / (time.perf_counter() - start))
            print(f"round {r + 1} {name}: {rates[name][-1]:.0f} tok/s", flush=True)
    use(VARIANTS["+ heedful's dropout, 16-bit masks (heedful now, float32)"])
    base = rates[next(iter(VARIANTS))]
    return {
        name: {
            "tokens_per_s": statistics.median(rate),
            "rates": rate,
            "vs_baseline": statistics.median(a / b for a, b in zip(rate, base)),
        }
        for name, rate in rates.items()
    }


# ---- the run and the report -------------------------------------------------------------------


def run(args) -> dict:
    import torch

    from heedful.allocator import reuse_freed_memory

    load = os.getloadavg()[0]
    reuse_freed_memory()  # as heedful train: every step's tensors without fresh pages
    torch.set_num_threads(THREADS)
    matmul = matmul_gflops()
    bf16 = has_bf16()
    model, batches, tensors = multi30k_transformer(CORPUS)
    if args.pieces > 1:  # one core's share: one thread, the pieces one after the other
        torch.set_num_threads(1)
    trainer = Trainer(copy.deepcopy(model), tensors, pieces=args.pieces)
    prof = profile(trainer, batches[: 3 + args.profile_steps], tensors)
    torch.set_num_threads(THREADS)
    rest = batches[3 + args.profile_steps :] or batches
    return {
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "load": [load, os.getloadavg()[0]],
        "command": " ".join(["python", "benchmarks/profile_training.py", *sys.argv[1:]]),
        "matmul": matmul,
        **({"matmul_bf16": matmul_gflops(torch.bfloat16)} if bf16 else {}),
        "profile": prof,
        "variants": variants(model, rest, tensors, args.rounds, args.steps_per_round, bf16),
        "rounds": args.rounds,
        "steps_per_round": args.steps_per_round,
        "cpu": args.cpu,
        "sliced_loss": True,  # the harness takes the loss as the loop does (Trainer.step)
        "pieces": args.pieces,
    }


def report(result: dict) -> str:
    p, limit = result["profile"], result["matmul"]["limit"]
    gflops = p["flops"] / p["wall"] / 1e9
    if (pieces := result.get("pieces", 1)) > 1:  # one thread: against one core's half
        limit /= THREADS
    lines = [
        BEGIN,
        "## Where a training step's time goes"
        + (f", {result['cpu']}" if result.get("cpu") else ""),
        "",
        f"{result['date']}, {result['machine']}. {shared(result)}",
        "",
        f"    {result['command']}",
        "",
        "The Transformer of the vs-JoeyNMT benchmark (3+3 layers, d_model 256, 4 heads, d_ff "
        "1024, 8k vocabulary, batches of 3,000 tokens), "
        + _how_trained(result)
        + _pieces(pieces)
        + f" {p['steps']} steps under torch.profiler after 3 of warm-up: each operator's own "
        "time in one row, by the part of the step it ran in (collation, loss, clipping, "
        "optimizer) and then by its name; 'Python and other' is the wall time outside any "
        "operator.",
        "",
        "| part | seconds | share of step time |",
        "|---|---:|---:|",
    ]
    for row, seconds in sorted(p["rows"].items(), key=lambda kv: -kv[1]):
        lines.append(f"| {row} | {seconds:.2f} | {100 * seconds / p['wall']:.1f}% |")
    lines += [
        f"| all | {p['wall']:.2f} | 100% |",
        "",
        f"Under the profiler: {p['tokens'] / p['wall']:.0f} target tok/s, model FLOPs "
        f"(vs_joeynmt.forward_flops, 3 x forward) at {gflops:.0f} GFLOP/s = "
        f"**{100 * gflops / limit:.0f}% of the matmul limit** ({limit:.0f} GFLOP/s measured in "
        "the same run" + (", half the two threads' limit: one core's" if pieces > 1 else "") + ").",
        "",
        f"Changes, each on its own copy of the model, alternated over {result['rounds']} rounds "
        f"of {result['steps_per_round']} steps (the first of each unmeasured); ratio = median "
        "of the per-round ratios to the baseline's target tok/s:",
        "",
        "| variant | target tok/s | vs baseline |",
        "|---|---:|---:|",
    ]
    for name, v in result["variants"].items():
        lines.append(f"| {name} | {v['tokens_per_s']:.0f} | {v['vs_baseline']:.2f}x |")
    if "matmul_bf16" in result:
        lines += ["", *_bf16_lines(result)]
    else:
        lines += ["", "The bfloat16 variants were left out: this CPU has no bfloat16 products."]
    lines.append(END)
    return "\n".join(lines)


def _how_trained(result: dict) -> str:
    """Runs before 2026-12-05 took the loss with F.cross_entropy over the whole logits, where
    the loop had taken it in slices since 2026-12-03: their figures say so."""
    if result.get("sliced_loss"):
        return "trained as heedful trains it (the output layer and the loss in slices)."
    return (
        "trained as heedful trained it before 2026-12-03: this run's loss was F.cross_entropy "
        "over the whole (tokens x 8k) logits, which the loop has since taken in slices "
        "(training/output_loss.py); the harness does too from 2026-12-05 on."
    )


def _pieces(pieces: int) -> str:
    """How the profiled steps ran: whole batches on both threads, or (--pieces) as `heedful
    train` runs them, each batch's pieces side by side on one thread each, of which the
    profile times one core's share."""
    if pieces == 1:
        return f" Whole batches on {THREADS} threads, as the loop ran them before 2026-12-05."
    return (
        f" Each batch in {pieces} pieces as `heedful train` runs them (training/streams.py), "
        "side by side on one thread each: the profile times one core's share, the pieces one "
        "after the other on one thread, so its steps take about twice a real step's wall time "
        f"(the variants below run whole batches on {THREADS} threads)."
    )


def _bf16_lines(result: dict) -> list[str]:
    """The bfloat16 variant's model FLOP/s against both limits: the float32 one, and bfloat16's
    (AMX tiles where the CPU has them)."""
    p, v = result["profile"], result["variants"][list(VARIANTS)[-1]]
    gflops = v["tokens_per_s"] * p["flops"] / p["tokens"] / 1e9
    limit32, limit16 = result["matmul"]["limit"], result["matmul_bf16"]["limit"]
    return [
        f"Under bfloat16 autocast (the last row) the model FLOPs run at {gflops:.0f} GFLOP/s: "
        f"{100 * gflops / limit32:.0f}% of the float32 limit and {100 * gflops / limit16:.0f}% "
        f"of bfloat16's ({limit16:.0f} GFLOP/s, the same shapes in bfloat16, measured in the "
        "same run)."
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile-steps", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps-per-round", type=int, default=6)
    parser.add_argument(
        "--pieces",
        type=int,
        default=1,
        help="profile each batch in this many pieces on one thread, as heedful train runs "
        "them on each core (1: whole batches on both threads; the variants always are)",
    )
    parser.add_argument("--report", action="store_true", help="only rewrite docs/benchmarks.md")
    parser.add_argument("--cpu", help="a name for this CPU: its own result file and section")
    args = parser.parse_args()
    path, begin, end = variant(RESULT, BEGIN, END, args.cpu)
    if not args.report:
        result = run(args)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2) + "\n")
    section = report(json.loads(path.read_text()))
    write_section(REPORT, begin, end, section.replace(BEGIN, begin).replace(END, end))
    print(f"wrote {REPORT}")


if __name__ == "__main__":
    main()
