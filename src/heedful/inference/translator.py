"""Translator: raw text in, raw text out, with the attention behind every output."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from heedful.checkpoint.model_dir import load_model_dir
from heedful.config import ModelConfig
from heedful.config.search import SearchSettings, call_settings
from heedful.data.batching import pad
from heedful.data.tokenizers import BOS_ID, EOS, EOS_ID
from heedful.inference.engine import Capabilities, check_supported
from heedful.models.base import Seq2SeqOutput
from heedful.models.ensemble import Ensemble
from heedful.search.decoding import Hypothesis
from heedful.search.dispatch import search
from heedful.search.prefix import prefix_ids


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


DEFAULT_GENERATION = SearchSettings()
QUANTIZE = ("int8",)  # Translator.load(quantize=...): dynamic int8 nn.Linear weights, CPU only


def check_quantize(quantize: str | None, device: str | torch.device = "cpu") -> None:
    """Refuse a quantization we do not offer, or one asked for off the CPU (both engines)."""
    if quantize is not None and quantize not in QUANTIZE:
        raise ValueError(f"unknown quantization {quantize!r}; choose one of {', '.join(QUANTIZE)}")
    if quantize is not None and torch.device(device).type != "cpu":
        raise ValueError(
            f"--quantize {quantize} runs on the CPU only (torch's dynamic quantization has "
            f"no {torch.device(device).type} kernels); load on device 'cpu' or drop it"
        )


def blank_outputs(texts: Sequence[str], src_tokenizer) -> tuple[list, list[int]]:
    """The answers of both engines' translate() with the blank texts already answered (an
    empty Translation) and the indices of the others, which still need a search."""
    out: list[Translation | None] = [None] * len(texts)
    todo = []
    for i, text in enumerate(texts):
        if text.strip():
            todo.append(i)
        else:
            out[i] = Translation("", src_tokenizer.tokens(text), [], 0.0)
    return out, todo


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
    """Whether Linear `name`'s parent reads its .weight itself, as its `weights_read` declares
    (an attention score of rnn_attention.py: Luong's concat slices W_a)."""
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    return child in getattr(parent, "weights_read", ())


class Translator:
    """A model, its tokenizers and search settings: what the CLI, server and notebooks use."""

    engine = "torch"  # runtime.py: the other engine, ctranslate2, offers the same translate()
    capabilities = Capabilities()  # every setting, prefixes and attention (engine.py)

    def __init__(
        self,
        model: nn.Module,
        src_tokenizer,
        tgt_tokenizer,
        generation: SearchSettings = DEFAULT_GENERATION,
        device: str | torch.device = "cpu",
        languages: tuple[str, str] = ("src", "tgt"),
        pairs: tuple[tuple[str, str], ...] | None = None,
    ):
        self.model, self.src_tokenizer, self.tgt_tokenizer = (
            model.eval(),
            src_tokenizer,
            tgt_tokenizer,
        )
        self.generation, self.device, self.languages = generation, torch.device(device), languages
        # pairs: a multilingual model's (data/languages.py), which reads a target token first
        self.pairs, self.target_tokens = (pairs, True) if pairs else ((languages,), False)

    @classmethod
    def load(
        cls,
        model_dir: str | Path,
        device: str | torch.device = "cpu",
        quantize: str | None = None,
        src_lang: str | None = None,
        tgt_lang: str | None = None,
    ) -> Translator:
        """Load a model directory; quantize="int8" makes its Linear layers int8 (CPU only).
        src_lang, tgt_lang: a Hugging Face mBART or M2M100/NLLB model's languages ("en_XX",
        "de"; default: those saved with its tokenizer)."""
        check_quantize(quantize, device)
        from heedful.hf.layout import is_huggingface_dir

        if is_huggingface_dir(model_dir):  # a save_pretrained directory (heedful.hf)
            from heedful.hf.loading import load_parts

            parts = load_parts(model_dir, device, src_lang, tgt_lang)
            model, src, tgt, generation, languages = parts
            model = model if quantize is None else quantize_int8(model)
            return cls(model, src, tgt, generation, device, languages)
        if src_lang is not None or tgt_lang is not None:
            raise ValueError(
                f"{model_dir}: src_lang and tgt_lang name a Hugging Face model's languages; a "
                "heedful model's are its pairs (translate(..., target=...))"
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
            loaded.pairs if loaded.target_tokens else None,
        )

    @property
    def config(self) -> ModelConfig:
        """The model's architecture (family, sizes, attention kind): what to dispatch on."""
        return self.model.config

    def translate(
        self,
        texts: Sequence[str],
        num_beams: int | None = None,
        n_best: int | None = None,
        batch_size: int = 64,
        need_weights: bool = False,
        prefixes: Sequence[str | None] | None = None,
        target: str | None = None,
        source: str | None = None,
        *,
        settings: SearchSettings | None = None,
        **overrides,
    ) -> list[Translation]:
        """Translate texts in order, `batch_size` at a time; empty texts give empty outputs.

        settings: the SearchSettings of this call [default: the model's generation.json, one
        output]; num_beams (1 is greedy search), n_best and `overrides` (length_penalty,
        max_len_ratio, max_len_offset; sample, temperature, top_k, top_p, seed, num_samples)
        replace its fields. need_weights: each Translation's attention is its
        cross-attention, from replay(). prefixes: per text, target text its output must start
        with (None or "" for none); the search continues after it. target (and source): the
        language to write, whose token (<2de>) a multilingual model reads first; a pair the
        model does not have is a LanguageError that names its pairs.
        """
        asked = call_settings(
            self.generation, settings, num_beams=num_beams, n_best=n_best, **overrides
        )
        check_supported(self.engine, self.capabilities, asked, prefixes is not None, need_weights)
        texts = self.sources(texts, target, source)
        out, order = blank_outputs(texts, self.src_tokenizer)
        forced = self._forced(texts, order, prefixes, asked)  # {i: ids} or None
        order.sort(key=lambda i: len(texts[i]))  # similar lengths together: less padding
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            ids = [self.src_tokenizer.encode(texts[i]) for i in chunk]
            src = pad(ids).to(self.device)  # (B, S)
            prefix = None if forced is None else [forced[i] for i in chunk]
            found = self.search(src, prefix=prefix, settings=asked)
            for row, (i, hyps) in enumerate(zip(chunk, found)):
                source_tokens = self.src_tokenizer.tokens(texts[i])  # once for its n-best
                first, *rest = [self._translation(source_tokens, h) for h in hyps]
                if need_weights:
                    source = src[row : row + 1, : len(ids[row])]  # (1, S) without padding
                    for translation, hyp in zip([first, *rest], hyps):
                        translation.attention = self._cross_attention(source, hyp)
                first.alternatives = rest or None
                out[i] = first
        return out  # type: ignore[return-value]

    def sources(self, texts: Sequence[str], target=None, source=None) -> list[str]:
        """The texts as the model reads them into `target`: a multilingual model's after the
        target token. Texts heedful tagged already (languages.Tagged: the server's, the CLI's)
        pass as they are; a text that merely starts with <2de> names no target."""
        from heedful.data.languages import Tagged, source_texts

        tagged = all(isinstance(t, Tagged) or not t.strip() for t in texts)
        if target is None and source is None and (not self.target_tokens or tagged):
            return list(texts)
        return source_texts(texts, self.pairs, self.target_tokens, target, source)

    def search(
        self,
        src: torch.Tensor,
        num_beams: int | None = None,
        n_best: int | None = None,
        prefix: list[list[int]] | None = None,
        *,
        settings: SearchSettings | None = None,
        **overrides,
    ) -> list[list[Hypothesis]]:
        """The n_best outputs of each sentence of src (B, S), best first, no attention.

        settings, num_beams, n_best and overrides: as translate's (None takes the model's
        generation.json, with one output). prefix: per sentence, target ids each output must
        start with (prefix_ids). The dispatch to greedy, beam or sampling is search.search.
        """
        asked = call_settings(
            self.generation, settings, num_beams=num_beams, n_best=n_best, **overrides
        )
        return search(self.model, src, asked, prefix)

    def _forced(self, texts, order: list[int], prefixes, g: SearchSettings) -> dict | None:
        """The prefix ids of the texts to translate ({index: ids}), each checked against its
        text's output limit before anything is translated; None without prefixes."""
        if prefixes is None:
            return None
        if len(prefixes) != len(texts):
            raise ValueError(f"{len(prefixes)} prefixes for {len(texts)} texts: give one each")
        forced = {}
        for i in order:
            forced[i] = self.prefix_ids(prefixes[i], f"text {i + 1}: the prefix")
            limit = g.max_output_length(len(self.src_tokenizer.encode(texts[i])))
            if len(forced[i]) > limit:
                raise ValueError(
                    f"text {i + 1}: the prefix has {len(forced[i])} tokens, more than the output "
                    f"limit of {limit} (max_len_ratio · source length + max_len_offset); "
                    "shorten it or raise max_len_offset"
                )
        return forced

    def prefix_ids(self, prefix: str | None, where: str = "the prefix") -> list[int]:
        """The target ids of a forced beginning (none for None or an empty text); one the
        output could not start with as typed is a PrefixError naming `where` (prefix.py)."""
        return prefix_ids(self.tgt_tokenizer, prefix, where) if prefix else []

    @torch.no_grad()
    def replay(self, src: torch.Tensor, hypothesis: Hypothesis) -> Seq2SeqOutput:
        """The one way to see where the model looked for an output: feed the hypothesis back
        (teacher forcing) with need_weights=True. Each step sees the prefix the search saw, so
        these are the numbers the search computed, for every layer and head.

        src: (1, S) the source without padding. Returns logits (1, T, V) and attention
        (AttentionMaps; an RNN without attention has only decoder_states), T the produced
        tokens with </s>.
        """
        tgt_in = torch.tensor([hypothesis.decoder_input(BOS_ID, EOS_ID)], device=src.device)
        return self.model(src, tgt_in, need_weights=True)

    def _cross_attention(self, src: torch.Tensor, hypothesis: Hypothesis) -> torch.Tensor | None:
        """(T, L, H, S) cross-attention of one output, or None for a model without attention."""
        maps = self.replay(src, hypothesis).attention
        return None if maps.cross is None else maps.cross[0].permute(2, 0, 1, 3).cpu()

    def _translation(self, source_tokens: list[str], hyp: Hypothesis) -> Translation:
        tokens = [self.tgt_tokenizer.id_to_token(i) for i in hyp.tokens]
        return Translation(
            self.tgt_tokenizer.decode(hyp.tokens),
            list(source_tokens),  # its own list: the n-best share one tokenization
            tokens + ([EOS] if hyp.finished else []),
            hyp.score,
        )


def load(
    model_dir: str | Path, device: str | torch.device = "cpu", quantize: str | None = None
) -> Translator:
    """`heedful.load(MODEL_DIR)`: a Translator ready for `.translate(list_of_str, num_beams=5)`."""
    return Translator.load(model_dir, device, quantize)


class VocabularyMismatch(ValueError):
    """Models that cannot form an ensemble: their vocabularies differ, so one id would be a
    different token in each."""


def ensemble(translators: Sequence[Translator]) -> Translator:
    """One Translator whose model is the Ensemble of the translators' models (models/ensemble.py):
    the first one's tokenizers, search settings and languages. Members may be of different
    families (RNN and Transformer); their source and target vocabularies must be equal."""
    first, *rest = translators
    for i, other in enumerate(rest, start=2):
        for side in ("src", "tgt"):
            mine, theirs = getattr(first, f"{side}_tokenizer"), getattr(other, f"{side}_tokenizer")
            difference = _vocabulary_difference(mine, theirs)
            if difference:
                raise VocabularyMismatch(
                    f"model {i} of the ensemble has a different {side} vocabulary from model 1 "
                    f"({difference}): an ensemble averages log-probabilities id by id, so every "
                    "model must read and write the same vocabularies"
                )
    model = Ensemble([t.model for t in translators])
    return Translator(
        model,
        first.src_tokenizer,
        first.tgt_tokenizer,
        first.generation,
        first.device,
        first.languages,
        first.pairs if first.target_tokens else None,
    )


def _vocabulary_difference(a, b) -> str | None:
    """How two tokenizers' vocabularies differ, in words, or None when they are equal."""
    if len(a) != len(b):
        return f"{len(a)} tokens against {len(b)}"
    for i in range(len(a)):
        if a.id_to_token(i) != b.id_to_token(i):
            return f"id {i} is {a.id_to_token(i)!r} against {b.id_to_token(i)!r}"
    return None


def load_ensemble(
    model_dirs: Sequence[str | Path],
    device: str | torch.device = "cpu",
    quantize: str | None = None,
) -> Translator:
    """`heedful translate A B C`: the model directories as one ensemble Translator."""
    return ensemble([Translator.load(d, device, quantize) for d in model_dirs])


def directions(model_dir: str | Path) -> tuple[tuple[tuple[str, str], ...], bool]:
    """(the language pairs, whether it reads a target token) of a model directory, from its
    config.json alone (data/languages.py); a Hugging Face directory's one pair."""
    from heedful.checkpoint.model_dir import read_model_config
    from heedful.data.languages import model_pairs
    from heedful.hf.layout import check_layout, is_huggingface_dir, languages

    if is_huggingface_dir(model_dir):
        check_layout(model_dir)
        return (languages(model_dir),), False
    meta, _ = read_model_config(Path(model_dir))
    return model_pairs(meta, Path(model_dir) / "config.json")
