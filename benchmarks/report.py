"""What every benchmark script shares: a description of the machine, and its own section of
docs/benchmarks.md (between two HTML comments), rewritten without touching the others."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    return (
        f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), Python {platform.python_version()}"
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
