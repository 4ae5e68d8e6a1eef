"""What every benchmark script shares: a description of the machine, and its own section of
docs/benchmarks.md (between two HTML comments), rewritten without touching the others."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path


def cpu() -> dict:
    """The CPU's model name and the vector extensions that decide torch's kernels: two CPUs of
    one model name (an EPYC with AVX-512, another with AVX2 only) run different code."""
    name, flags = "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and name == "unknown CPU":
                name = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16")
    return {"model": name, "flags": [f for f in wanted if f in flags]}


def machine() -> str:
    import torch

    c = cpu()
    return (
        f"{c['model']} ({', '.join(c['flags']) or 'no AVX2'}), {os.cpu_count()} cores, "
        f"torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"Python {platform.python_version()}"
    )


def variant(result: Path, begin: str, end: str, name: str | None) -> tuple[Path, str, str]:
    """A named run (another CPU with `--cpu NAME`, or AVX2 kernels forced): its own result
    file and section markers beside the default ones, so that one run never overwrites
    another's figures."""
    if not name:
        return result, begin, end
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", name):
        raise SystemExit(f"--cpu {name!r}: use lowercase letters, digits and '-' (amd-epyc-avx2)")
    tag = f"-{name}:"
    return (
        result.with_name(f"{result.stem}-{name}{result.suffix}"),
        begin.replace(":", tag, 1),
        end.replace(":", tag, 1),
    )


def write_section(path: Path, begin: str, end: str, section: str) -> None:
    """Replace the text from `begin` to `end` in `path` with `section` (or append it)."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    if begin in text:
        head, rest = text.split(begin, 1)
        text = head + section + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def multi30k_transformer(corpus: Path, pairs: int = 6000):
    """What the training-speed benchmarks time: the issue's Transformer (3+3 layers, d_model
    256, 4 heads, d_ff 1024, dropout 0.1, pre-norm, tied embeddings) and the length-bucketed
    batches of 3,000 tokens of the first `pairs` Multi30k pairs under a joint SentencePiece
    vocabulary of 8,000. Returns (model, batches, tensors), tensors(batch) giving
    (src, tgt_in, tgt_out)."""
    import torch

    from heedful.config import DecoderConfig, ModelConfig, TextEncoderConfig
    from heedful.data.batching import bucketed_batches, collate
    from heedful.data.tokenizers import SentencePieceTokenizer
    from heedful.models.build import build_model

    src = (corpus / "train.en").read_text(encoding="utf-8").splitlines()[:pairs]
    tgt = (corpus / "train.de").read_text(encoding="utf-8").splitlines()[:pairs]
    tok = SentencePieceTokenizer.train(src + tgt, 8000, "unigram")
    S, T = [tok.encode(s) for s in src], [tok.encode(t) for t in tgt]
    batches = bucketed_batches([len(s) for s in S], [len(t) + 1 for t in T], 3000)
    config = ModelConfig(
        d_model=256,
        num_heads=4,
        d_ff=1024,
        dropout=0.1,
        norm="pre",
        encoder=TextEncoderConfig(layers=3),
        decoder=DecoderConfig(layers=3, tie_embeddings=True),
    )
    torch.manual_seed(0)
    model = build_model(config, len(tok), len(tok)).train()
    return model, batches, lambda batch: collate([S[i] for i in batch], [T[i] for i in batch])
