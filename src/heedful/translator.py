"""Translator: raw text in, raw text out, with the attention behind every output."""

from __future__ import annotations

import warnings
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
QUANTIZE = ("int8",)  # Translator.load(quantize=...): dynamic int8 nn.Linear weights, CPU only


def quantize_int8(model: nn.Module) -> nn.Module:
    """The model with its nn.Linear layers as dynamically quantized int8 ones (CPU only).

    quantize_dynamic (Jacob et al. 2018's scheme, applied after training) stores each Linear's
    weights as int8 with one scale per output row and quantizes the activations per batch on
    the fly, so a matrix product runs in int8 and is rescaled to float: the weights shrink 4x
    and the Linear-heavy decoding loop speeds up on CPU. Embeddings, norms and attention stay
    float32. A Linear whose `.weight` is read directly (Luong's concat score slices W_a) is
    kept float, since a quantized Linear has no `.weight` tensor to slice.
    """
    names = {
        name
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and not _weight_is_read(model, name)
    }
    with warnings.catch_warnings():
        # torch 2.13 marks torch.ao.quantization and quantize_per_tensor as deprecated in favour
        # of the separate torchao package; the eager API still works, so only these two
        # warnings are silenced, and only for this call.
        warnings.filterwarnings("ignore", "torch.ao.quantization is deprecated", DeprecationWarning)
        warnings.filterwarnings("ignore", "torch.quantize_per_tensor", UserWarning)
        # One scale per output row (per channel), not one per matrix: on a small model the
        # per-matrix scale moved a float32 decision that led by 2.3 nats, per row 0.7 at most
        # (tests/test_quantize.py); on Multi30k both stay within 0.5 BLEU of float32 and per
        # row runs at 0.94-1.04x the per-matrix speed (benchmarks/int8_per_cpu.py).
        # Activations are quantized to 7 bits on every CPU (reduce_range), so AVX2's 16-bit
        # sums cannot saturate (heedful.cpu).
        qconfig = torch.ao.quantization.per_channel_dynamic_qconfig
        return torch.ao.quantization.quantize_dynamic(
            model, dict.fromkeys(names, qconfig), dtype=torch.qint8
        )


def _weight_is_read(model: nn.Module, name: str) -> bool:
    from heedful.attention import LuongAttention

    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    return isinstance(parent, LuongAttention) and parent.kind == "concat" and child == "w_a"


class Translator:
    """A model, its tokenizers and search settings: what the CLI, server and notebooks use."""

    engine = "torch"  # runtime.py: the other engine, ctranslate2, offers the same translate()

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
    def load(
        cls,
        model_dir: str | Path,
        device: str | torch.device = "cpu",
        quantize: str | None = None,
    ) -> Translator:
        """Load a model directory; quantize="int8" makes its Linear layers int8 (CPU only)."""
        if quantize is not None and quantize not in QUANTIZE:
            raise ValueError(
                f"unknown quantization {quantize!r}; choose one of {', '.join(QUANTIZE)}"
            )
        if quantize is not None and torch.device(device).type != "cpu":
            raise ValueError(
                f"--quantize {quantize} runs on the CPU only (torch's dynamic quantization has "
                f"no {torch.device(device).type} kernels); load on device 'cpu' or drop it"
            )
        loaded = load_model_dir(model_dir)
        model = loaded.model if quantize is None else quantize_int8(loaded.model)
        return cls(
            model.to(device),
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


def load(
    model_dir: str | Path, device: str | torch.device = "cpu", quantize: str | None = None
) -> Translator:
    """`heedful.load(MODEL_DIR)`: a Translator ready for `.translate(list_of_str, num_beams=5)`."""
    return Translator.load(model_dir, device, quantize)
