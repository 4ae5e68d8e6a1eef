"""Translator: raw text in, raw text out, with the attention behind every output."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from heedful.data.batching import pad
from heedful.data.tokenizers import BOS_ID, EOS, EOS_ID
from heedful.decoding import greedy_search


@dataclass
class Translation:
    """One translated text.

    source_tokens / tokens: the pieces the model read and wrote (tokens ends with </s> when the
    output finished), the axis labels of an attention picture.
    attention: cross-attention (len(tokens), L, H, len(source_tokens)), or None.
    """

    text: str
    source_tokens: list[str]
    tokens: list[str]
    score: float
    attention: torch.Tensor | None = None


class Translator:
    """A model, its tokenizers and search settings: what the CLI, server and notebooks use."""

    def __init__(self, model: nn.Module, src_tokenizer, tgt_tokenizer, max_len_ratio: float = 2.0,
                 max_len_offset: int = 10):  # fmt: skip
        self.model, self.src_tokenizer, self.tgt_tokenizer = (
            model.eval(),
            src_tokenizer,
            tgt_tokenizer,
        )
        self.max_len_ratio, self.max_len_offset = max_len_ratio, max_len_offset

    def translate(
        self, texts: Sequence[str], batch_size: int = 64, need_weights: bool = False
    ) -> list[Translation]:
        """Translate texts in order, `batch_size` at a time."""
        out: list[Translation] = []
        for start in range(0, len(texts), batch_size):
            chunk = texts[start : start + batch_size]
            src = pad([self.src_tokenizer.encode(t) for t in chunk])
            hyps = greedy_search(self.model, src, BOS_ID, EOS_ID, self.max_len_ratio,
                                 self.max_len_offset, need_weights)  # fmt: skip
            for text, hyp in zip(chunk, hyps):
                tokens = [self.tgt_tokenizer.id_to_token(i) for i in hyp.tokens]
                out.append(Translation(
                    self.tgt_tokenizer.decode(hyp.tokens),
                    self.src_tokenizer.tokens(text),
                    tokens + ([EOS] if hyp.finished else []),
                    hyp.score,
                    hyp.cross_attention,
                ))  # fmt: skip
        return out
