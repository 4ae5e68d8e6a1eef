"""Translator: raw text in, raw text out, with the attention behind every output."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn

from heedful.checkpoint import GenerationConfig, load_model_dir
from heedful.data.batching import pad
from heedful.data.tokenizers import BOS_ID, EOS, EOS_ID
from heedful.decoding import Hypothesis, greedy_search


@dataclass
class Translation:
    """One translated text.

    source_tokens / tokens: the pieces the model read and wrote (tokens ends with </s> when the
    output finished), the axis labels of an attention picture.
    attention: cross-attention (len(tokens), L, H, len(source_tokens)), or None.
    alternatives: the other n-best outputs, best first (empty unless n_best > 1).
    """

    text: str
    source_tokens: list[str]
    tokens: list[str]
    score: float
    attention: torch.Tensor | None = None
    alternatives: list[Translation] | None = None


DEFAULT_GENERATION = GenerationConfig()


class Translator:
    """A model, its tokenizers and search settings: what the CLI, server and notebooks use."""

    def __init__(
        self,
        model: nn.Module,
        src_tokenizer,
        tgt_tokenizer,
        generation: GenerationConfig = DEFAULT_GENERATION,
        device: str | torch.device = "cpu",
        languages: tuple[str, str] = ("src", "tgt"),
    ):
        self.model, self.src_tokenizer, self.tgt_tokenizer = (
            model.eval(),
            src_tokenizer,
            tgt_tokenizer,
        )
        self.generation, self.device, self.languages = generation, torch.device(device), languages

    @classmethod
    def load(cls, model_dir: str | Path, device: str | torch.device = "cpu") -> Translator:
        loaded = load_model_dir(model_dir)
        return cls(
            loaded.model.to(device),
            loaded.src_tokenizer,
            loaded.tgt_tokenizer,
            loaded.generation,
            device,
            (loaded.src_lang, loaded.tgt_lang),
        )

    def translate(
        self,
        texts: Sequence[str],
        num_beams: int | None = None,
        n_best: int = 1,
        batch_size: int = 64,
        need_weights: bool = False,
        **settings,
    ) -> list[Translation]:
        """Translate texts in order, `batch_size` at a time; empty texts give empty outputs.

        num_beams=1 is greedy search; `settings` override other GenerationConfig fields
        (length_penalty, max_len_ratio, max_len_offset).
        """
        g = replace(self.generation, **settings)
        beams = g.num_beams if num_beams is None else num_beams
        out: list[Translation | None] = [None] * len(texts)
        order = [i for i, t in enumerate(texts) if t.strip()]
        order.sort(key=lambda i: len(texts[i]))  # similar lengths together: less padding
        for i, t in enumerate(texts):
            if not t.strip():
                out[i] = Translation("", self.src_tokenizer.tokens(t), [], 0.0)
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            src = pad([self.src_tokenizer.encode(texts[i]) for i in chunk]).to(self.device)
            for i, hyps in zip(chunk, self._search(src, beams, n_best, g, need_weights)):
                first, *rest = [self._translation(texts[i], h) for h in hyps]
                first.alternatives = rest or None
                out[i] = first
        return out  # type: ignore[return-value]

    def _search(
        self, src, beams, n_best, g: GenerationConfig, need_weights
    ) -> list[list[Hypothesis]]:
        if beams == 1 and n_best == 1:
            hyps = greedy_search(
                self.model, src, BOS_ID, EOS_ID, g.max_len_ratio, g.max_len_offset, need_weights
            )
            return [[h] for h in hyps]
        from heedful.decoding import beam_search

        return beam_search(
            self.model,
            src,
            BOS_ID,
            EOS_ID,
            beam_size=beams,
            n_best=n_best,
            length_penalty=g.length_penalty,
            max_len_ratio=g.max_len_ratio,
            max_len_offset=g.max_len_offset,
            need_weights=need_weights,
        )

    def _translation(self, text: str, hyp: Hypothesis) -> Translation:
        tokens = [self.tgt_tokenizer.id_to_token(i) for i in hyp.tokens]
        return Translation(
            self.tgt_tokenizer.decode(hyp.tokens),
            self.src_tokenizer.tokens(text),
            tokens + ([EOS] if hyp.finished else []),
            hyp.score,
            hyp.cross_attention,
        )


def load(model_dir: str | Path, device: str | torch.device = "cpu") -> Translator:
    """`heedful.load(MODEL_DIR)`: a Translator ready for `.translate(list_of_str, num_beams=5)`."""
    return Translator.load(model_dir, device)
