"""Translator: a model's inputs in, Translations out, with the attention behind every output.

One Translator serves every model directory: the inputs are what the model's Source reads
(data/sources.py), texts for a text model, pictures (files, bytes, pixel arrays) for an image
model, which the Translator turns into the batch the search and the replay read; they, the
outputs and the traces (visualize/trace.py) are the same for both.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from heedful.allocator import one_malloc_arena
from heedful.checkpoint.model_dir import load_model_dir
from heedful.checkpoint.slots import text_tokenizer
from heedful.config import ModelConfig
from heedful.config.search import SearchSettings, call_settings
from heedful.cpu import FreeCores, in_streams
from heedful.data.sources import as_source
from heedful.data.tokenizers import BOS_ID, EOS, EOS_ID
from heedful.inference.engine import PICTURES, Capabilities, check_supported
from heedful.inference.quantize import check_quantize, quantize_int8
from heedful.inference.translation import Translation, blank_outputs
from heedful.layers.products import keep_products
from heedful.models.base import Seq2SeqOutput
from heedful.models.ensemble import Ensemble
from heedful.search.decoding import Hypothesis
from heedful.search.dispatch import search
from heedful.search.prefix import prefix_ids

__all__ = ["Translation", "Translator", "blank_outputs", "check_quantize", "quantize_int8"]

DEFAULT_GENERATION = SearchSettings()


class Translator:
    """A model, its source side (text or pictures), target tokenizer and search settings: what
    the CLI, the server and notebooks use."""

    engine = "torch"  # runtime.py: the other engine, ctranslate2, offers the same translate()
    capabilities = Capabilities()  # on text: every setting, prefixes, attention (engine.py)
    training: dict | None = None  # checkpoint/status.py's training.json of its directory
    # on a CPU, translate's batches run side by side, one thread each (cpu.in_streams); False:
    # one at a time, each on all of torch's threads
    streams = True

    def __init__(
        self,
        model: nn.Module,
        source,
        tgt_tokenizer,
        generation: SearchSettings = DEFAULT_GENERATION,
        device: str | torch.device = "cpu",
        languages: tuple[str, str] = ("src", "tgt"),
        pairs: tuple[tuple[str, str], ...] | None = None,
    ):
        """source: the model's Source (data/sources.py), or a text model's source tokenizer."""
        self.model, self.tgt_tokenizer = model.eval(), tgt_tokenizer
        self.source = as_source(source).for_model(model)  # an image's grid is the model's
        if self.source.kind == "image":  # what pictures cannot do, declared (engine.py)
            self.capabilities = PICTURES
        self.generation, self.device, self.languages = generation, torch.device(device), languages
        # pairs: a multilingual model's (data/languages.py), which reads a target token first
        self.pairs, self.target_tokens = (pairs, True) if pairs else ((languages,), False)
        # torch's threads follow the cores other processes leave free, unless chosen (cpu.py)
        self.cores = FreeCores.follow(None) if self.device.type == "cpu" else None
        if self.device.type == "cpu":  # batches side by side share one heap (allocator.py)
            one_malloc_arena()

    @classmethod
    def load(
        cls,
        model_dir: str | Path,
        device: str | torch.device = "cpu",
        quantize: str | None = None,
        src_lang: str | None = None,
        tgt_lang: str | None = None,
    ) -> Translator:
        """Load a model directory, of a text or an image model; quantize="int8" makes its
        Linear layers int8 (CPU only). src_lang, tgt_lang: a Hugging Face mBART or
        M2M100/NLLB model's languages ("en_XX", "de"; default: those saved with its
        tokenizer)."""
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
        translator = cls(
            model.to(device),
            loaded.source,
            loaded.tgt_tokenizer,
            loaded.generation,
            device,
            (loaded.src_lang, loaded.tgt_lang),
            loaded.pairs if loaded.target_tokens else None,
        )
        translator.training = loaded.training  # how it was trained, which traces say
        keep_products(model)  # its weights are fixed: packed once, not for every batch
        return translator

    @property
    def config(self) -> ModelConfig:
        """The model's architecture (family, sizes, attention kind): what to dispatch on."""
        return self.model.config

    @property
    def src_tokenizer(self):
        """A text model's source tokenizer; an image model has none (it reads pictures)."""
        return text_tokenizer(self.source)

    def translate(
        self,
        inputs: Sequence,
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
        """Translate the inputs in order, `batch_size` at a time: texts, or for an image model
        pictures (files, their bytes, (H, W, 3) uint8 RGB arrays); blank texts give empty
        outputs, a bad picture is an ImageError naming it.

        settings: the SearchSettings of this call [default: the model's generation.json, one
        output]; num_beams (1 is greedy search), n_best and `overrides` (length_penalty,
        max_len_ratio, max_len_offset; sample, temperature, top_k, top_p, seed, num_samples)
        replace its fields (a caption's limit is max_len_offset tokens). need_weights: each
        Translation's attention is its cross-attention, from replay(). prefixes: per input,
        target text its output must start with (None or "" for none); the search continues
        after it. target (and source): the language to write, whose token (<2de>) a
        multilingual model reads first; a pair the model does not have is a LanguageError
        that names its pairs.
        """
        asked = call_settings(
            self.generation, settings, num_beams=num_beams, n_best=n_best, **overrides
        )
        check_supported(self.engine, self.capabilities, asked, prefixes is not None, need_weights)
        inputs = self.sources(self.source.inputs(inputs), target, source)
        out, order = blank_outputs(inputs, self.source)
        lengths = {i: self.source.length(inputs[i]) for i in order}  # what the limits count
        forced = self._forced(len(inputs), lengths, prefixes, asked)  # {i: ids} or None
        order.sort(key=lengths.get)  # similar lengths together: less padding

        def one_batch(chunk: list[int]) -> None:
            src = self.source.batch([inputs[i] for i in chunk], self.device)  # (B, S) or pixels
            prefix = None if forced is None else [forced[i] for i in chunk]
            found = self.search(src, prefix=prefix, settings=asked)
            for row, (i, hyps) in enumerate(zip(chunk, found)):
                labels = self.source.labels(inputs[i])  # once for its n-best
                first, *rest = [self._translation(labels, h) for h in hyps]
                if need_weights:
                    one = self.source.row(src, row, inputs[i])  # (1, S) without padding
                    for translation, hyp in zip([first, *rest], hyps):
                        translation.attention = self._cross_attention(one, hyp)
                first.alternatives = rest or None
                out[i] = first

        batches = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
        side_by_side = self.streams and self.device.type == "cpu"  # cpu.py says why
        in_streams(one_batch, batches, self.cores, side_by_side)
        return out  # type: ignore[return-value]

    def sources(self, inputs: Sequence, target=None, source=None) -> list:
        """The inputs as the model reads them into `target`: a multilingual model's texts after
        the target token. Texts heedful tagged already (languages.Tagged: the server's, the
        CLI's) pass as they are; a text that merely starts with <2de> names no target."""
        from heedful.data.languages import Tagged, source_texts

        if target is None and source is None:
            if not self.target_tokens or all(
                isinstance(t, Tagged) or not t.strip() for t in inputs
            ):
                return list(inputs)
        return source_texts(inputs, self.pairs, self.target_tokens, target, source)

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

    def _forced(self, count: int, lengths: dict, prefixes, g: SearchSettings) -> dict | None:
        """The prefix ids of the inputs to translate ({index: ids}), each checked against its
        output limit (`lengths`: the source lengths of the count inputs', by index) before
        anything is translated; None without prefixes."""
        if prefixes is None:
            return None
        noun = self.source.kind  # text, image: what the inputs are called
        if len(prefixes) != count:
            raise ValueError(f"{len(prefixes)} prefixes for {count} {noun}s: give one each")
        forced = {}
        for i, length in lengths.items():
            forced[i] = self.prefix_ids(prefixes[i], f"{noun} {i + 1}: the prefix")
            limit = g.max_output_length(length)
            if len(forced[i]) > limit:
                raise ValueError(
                    f"{noun} {i + 1}: the prefix has {len(forced[i])} tokens, more than the output "
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
            grid=self.source.grid,  # a picture's regions; None for text
        )


def load(
    model_dir: str | Path, device: str | torch.device = "cpu", quantize: str | None = None
) -> Translator:
    """`heedful.load(MODEL_DIR)`: a Translator ready for `.translate(inputs, num_beams=5)`."""
    return Translator.load(model_dir, device, quantize)


class VocabularyMismatch(ValueError):
    """Models that cannot form an ensemble: their vocabularies differ, so one id would be a
    different token in each."""


def ensemble(translators: Sequence[Translator]) -> Translator:
    """One Translator whose model is the Ensemble of the translators' models (models/ensemble.py):
    the first one's tokenizers, search settings and languages. Members may be of different
    families (RNN and Transformer); their source and target vocabularies must be equal. Image
    models are refused: their grids are each its own model's."""
    first, *rest = translators
    for i, other in enumerate(translators, start=1):
        if other.source.kind != "text":
            raise ValueError(f"model {i} of the ensemble reads pictures; an ensemble reads text")
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
        first.source,
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
