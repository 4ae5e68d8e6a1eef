"""GPU check for prepared data: `heedful prepare`, then training from the prepared directory.

    bash benchmarks/gpu_check.sh     # runs gpu_check.py, then this; on a machine with a GPU

1. Prepares a generated corpus (the dates task, 200,000 pairs: no download) with 8 workers:
   pairs/s and tokens/s of preparation.
2. Trains gpu_check.py's Transformer (3+3 layers, d_model 256) with bf16 autocast, from the
   prepared directory, from the same corpus in memory, and from the prepared directory with 4
   DataLoader workers collating ahead (after a warm-up run): target tokens/s of each (after
   the first sixth of the steps) and the wall time from the start to the first step.
3. The attention kernels a training step runs, from the CUDA profiler: the fused
   scaled-dot-product backends (flash, memory-efficient, cuDNN) by kernel name.
4. An RNN (GRU + Bahdanau) trained and checkpointed on the GPU from the prepared directory:
   cuDNN packs its weights into one buffer, which the checkpoint must still save.
5. Resume: 40 steps straight against 20 steps, a new process state, and 20 resumed: the largest
   weight difference (0 when the GPU kernels are deterministic).
Prints one JSON object; exits non-zero if a check fails. `--steps 20` on a CPU is a dry run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
from safetensors.torch import load_file

from heedful.config import (
    Config,
    DataConfig,
    DecoderConfig,
    ModelConfig,
    TextEncoderConfig,
    TrainConfig,
)
from heedful.data.prepare import prepare
from heedful.tasks.dates import generate_dates
from heedful.training.experiment import train_from_config

MODEL = ModelConfig(
    d_model=256,
    num_heads=4,
    d_ff=1024,
    dropout=0.0,
    norm="pre",
    encoder=TextEncoderConfig(layers=3),
    decoder=DecoderConfig(layers=3, tie_embeddings=True),
)


def write_corpus(directory: Path, pairs: int) -> DataConfig:
    for split, n, seed in (("train", pairs, 1), ("valid", 500, 2)):
        rows = generate_dates(n, seed)
        for side, column in (("src", 0), ("tgt", 1)):
            with open(directory / f"{split}.{side}", "w", encoding="utf-8") as f:
                f.writelines(row[column] + "\n" for row in rows)
    files = {
        f"{s}_{k}": str(directory / f"{s}.{k}") for s in ("train", "valid") for k in ("src", "tgt")
    }
    return DataConfig(**files, tokenizer="char", max_length=64, valid_max_sentences=200)


def rate(run_dir: Path) -> float:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    records = [r for r in records if "tokens_per_s" in r]
    a, b = records[len(records) // 6], records[-1]
    return (b["tokens"] - a["tokens"]) / (b["seconds"] - a["seconds"])


def timed_train(config: Config, run_dir: Path) -> tuple[float, float]:
    """(wall seconds from the call to the end of step 1, target tokens/s)."""
    start = time.perf_counter()
    train_from_config(replace(config, train=replace(config.train, max_steps=1)), run_dir,
                      force=True, progress=False, echo=lambda m: None)  # fmt: skip
    first = time.perf_counter() - start
    train_from_config(config, run_dir, force=True, progress=False, echo=lambda m: None)
    return first, rate(run_dir)


def attention_kernels(config: Config, run_dir: Path) -> list[str]:
    """Names of the CUDA kernels a few training steps run that compute attention."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        train_from_config(replace(config, train=replace(config.train, max_steps=3)), run_dir,
                          force=True, progress=False, echo=lambda m: None)  # fmt: skip
    words = ("flash", "fmha", "efficient_attention", "attention", "sdpa", "cudnn_attn")
    names = {e.key for e in prof.key_averages() if any(w in e.key.lower() for w in words)}
    return sorted(names)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--pairs", type=int, default=200_000)
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    report: dict = {"device": torch.cuda.get_device_name() if cuda else "cpu",
                    "torch": torch.__version__}  # fmt: skip
    failures: list[str] = []
    work = Path(tempfile.mkdtemp(prefix="heedful-gpu-prepared-"))
    data = write_corpus(work, args.pairs)
    start = time.perf_counter()
    manifest = prepare(data, work / "prep", workers=8, progress=False, echo=lambda m: None)
    seconds = time.perf_counter() - start
    split = manifest["splits"]["train"]
    tokens = split["src_tokens"] + split["tgt_tokens"]
    report["prepare"] = {"pairs": split["pairs"], "seconds": round(seconds, 2),
                         "tokens_per_s": tokens / seconds}  # fmt: skip
    train = TrainConfig(batch_tokens=12000, max_steps=args.steps, bf16=cuda, lr=1e-3,
                        warmup_steps=100, eval_every=10**9,
                        log_every=max(1, args.steps // 30))  # fmt: skip
    in_memory = Config(data=data, model=MODEL, train=train)
    prepared = replace(in_memory, data=replace(data, prepared=str(work / "prep")))
    timed_train(replace(in_memory, train=replace(train, max_steps=5)), work / "warm-up")
    loaders = replace(prepared, train=replace(train, data_workers=4))
    runs = (
        ("prepared", prepared),
        ("in_memory", in_memory),
        ("prepared_4_loader_workers", loaders),
    )
    for name, config in runs:
        first, tokens = timed_train(config, work / name)
        report[f"train_{name}"] = {"seconds_to_first_step": round(first, 2), "tokens_per_s": tokens}
    report["prepared_over_in_memory"] = (
        report["train_prepared"]["tokens_per_s"] / report["train_in_memory"]["tokens_per_s"]
    )
    report["attention_kernels"] = attention_kernels(prepared, work / "profile") if cuda else []
    if cuda and not any("flash" in k.lower() or "fmha" in k.lower() or "efficient" in k.lower()
                        or "cudnn" in k.lower() for k in report["attention_kernels"]):  # fmt: skip
        failures.append("no fused attention kernel ran in training")
    rnn = replace(
        prepared,
        model=ModelConfig(arch="rnn", hidden_size=256, decoder=DecoderConfig(attention="bahdanau")),
        train=replace(train, max_steps=10, eval_every=5),
    )
    try:
        train_from_config(rnn, work / "rnn", progress=False, echo=lambda m: None)
        report["rnn_checkpoint"] = (work / "rnn" / "latest" / "model.safetensors").exists()
    except Exception as error:  # noqa: BLE001 (reported, not raised: the other checks still run)
        report["rnn_checkpoint"] = f"failed: {error}"
        failures.append("an RNN trained on the GPU cannot be checkpointed")
    short = replace(prepared, train=replace(train, max_steps=40, eval_every=20))
    train_from_config(short, work / "straight", progress=False, echo=lambda m: None)
    half = replace(short, train=replace(short.train, max_steps=20))
    train_from_config(half, work / "resumed", progress=False, echo=lambda m: None)
    train_from_config(short, work / "resumed", progress=False, echo=lambda m: None)
    a, b = (
        load_file(str(work / r / "latest" / "model.safetensors")) for r in ("straight", "resumed")
    )
    report["resume_max_weight_diff"] = max((a[k] - b[k]).abs().max().item() for k in a)
    report["failures"] = failures
    print(json.dumps(report, indent=2))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
