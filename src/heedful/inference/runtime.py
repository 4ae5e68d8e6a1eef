"""Runtimes: the one place where the CLI, the server and notebooks choose how a model runs.

    torch         Translator (translator.py): our own search, attention weights available;
                  quantize="int8" makes its Linear layers int8 (torch dynamic quantization).
    ctranslate2   CTranslate2Translator below: the model exported by export.py, run by
                  CTranslate2's C++ search; quantize="int8" computes in int8. No attention.

Both are an engine.Engine: the same `translate(texts, num_beams, n_best, batch_size,
need_weights, prefixes, settings=SearchSettings, **overrides) -> list[Translation]`, the
attributes the server reads (source, tgt_tokenizer, generation, languages) and their
declared capabilities, checked by engine.check_supported; so a caller changes engine by
changing one argument of `load_translator`.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch

from heedful.checkpoint.model_dir import (
    CTRANSLATE2_DIR,
    CheckpointError,
    read_generation,
    read_model_config,
)
from heedful.checkpoint.slots import load_tokenizers
from heedful.config import ModelConfig
from heedful.config.search import SearchSettings, call_settings
from heedful.cpu import ctranslate2_compute_type
from heedful.data.sources import TextSource
from heedful.data.tokenizers import EOS_ID
from heedful.inference.engine import SEARCH, Capabilities, check_supported
from heedful.inference.export import export_ctranslate2, import_ctranslate2, vocabulary
from heedful.inference.quantize import check_quantize
from heedful.inference.translation import Translation, blank_outputs
from heedful.inference.translator import Translator
from heedful.search.beam import gnmt_length_penalty

ENGINES = ("torch", "ctranslate2")


class CTranslate2Translator:
    """Translate with a CTranslate2 export: our tokenizers around CTranslate2's search.

    CTranslate2 searches (greedy, or beam search with the same candidate rule as ours: the
    2K best extensions, a </s> counting only among the best K) and hands back all beam_size
    hypotheses with their raw log-probabilities; they are ranked here as beam.beam_search
    ranks them: finished ones by log P(Y) / gnmt_length_penalty(|Y|), then ones cut at the
    length limit by log P(Y). (CTranslate2's own length penalty divides by |Y| ** alpha, not
    GNMT's ((5 + |Y|) / 6) ** alpha, so it is switched off.) The output limit is ours,
    ratio · source length + offset for each sentence (sentences with one limit share a
    batch), and </s> may come first. Translation.score is log P(Y), </s> included.

    What still differs is when a sentence stops (CTranslate2 4.x, src/decoding.cc): as soon as
    its best beam ends with beam_size hypotheses kept, where ours goes on until no alive beam
    could beat the worst kept one under the length penalty. With length_penalty 0 that cannot
    change the best output (an alive beam can only lose log-probability); with a length
    penalty, and for the n-best alternatives, ours may find a better one later. Greedy search
    is exactly ours. No attention weights: need_weights=True is refused.
    """

    engine = "ctranslate2"
    capabilities = Capabilities(settings=SEARCH, prefixes=False, attention=False, masks=False)

    def __init__(
        self,
        ct2_translator,
        src_tokenizer,
        tgt_tokenizer,
        generation: SearchSettings,
        languages: tuple[str, str] = ("src", "tgt"),
        config: ModelConfig | None = None,
    ):
        self.ct2, self.src_tokenizer, self.tgt_tokenizer = (
            ct2_translator,
            src_tokenizer,
            tgt_tokenizer,
        )
        self.source = TextSource(src_tokenizer)  # CTranslate2 reads text (data/sources.py)
        self.generation, self.languages, self.device = generation, languages, torch.device("cpu")
        self.config = config  # the exported model's architecture (Translator.config)
        self.src_vocab = vocabulary(src_tokenizer)
        self.tgt_ids = {token: i for i, token in enumerate(vocabulary(tgt_tokenizer))}

    @classmethod
    def load(
        cls, model_dir: str | Path, quantize: str | None = None, threads: int | None = None
    ) -> CTranslate2Translator:
        """Load an export (heedful export), or convert a model directory in memory first.

        quantize="int8": compute in int8 whatever the export holds, on a CPU where int8
        products are fast and exact (VNNI); elsewhere float32, with a heedful.cpu.Int8Fallback
        warning that names the missing feature (int8 weights are then computed in float32
        too). threads: CTranslate2's
        intra-op threads [default: torch.get_num_threads()], one translation at a time.
        """
        ctranslate2 = import_ctranslate2()
        check_quantize(quantize)
        model_dir = Path(model_dir)
        meta, config = read_model_config(model_dir)
        src_tokenizer, tgt_tokenizer = load_tokenizers(model_dir, meta, config)
        generation = read_generation(model_dir)
        saved_int8 = "int8" if meta.get("ctranslate2", {}).get("quantization") == "int8" else None
        options = dict(
            device="cpu",
            # int8 only where this CPU multiplies int8 fast and exactly (heedful.cpu says why)
            compute_type=ctranslate2_compute_type(quantize or saved_int8),
            inter_threads=1,
            intra_threads=threads or torch.get_num_threads(),
        )
        if (model_dir / CTRANSLATE2_DIR).is_dir():
            _check_vocabularies(model_dir / CTRANSLATE2_DIR, src_tokenizer, tgt_tokenizer)
            ct2 = _open_ctranslate2(ctranslate2, model_dir / CTRANSLATE2_DIR, options)
        else:
            with tempfile.TemporaryDirectory(prefix="heedful-ct2-") as tmp:
                export_ctranslate2(model_dir, Path(tmp) / "export")
                ct2 = ctranslate2.Translator(str(Path(tmp) / "export" / CTRANSLATE2_DIR), **options)
        return cls(
            ct2,
            src_tokenizer,
            tgt_tokenizer,
            generation,
            (meta.get("src_lang", "src"), meta.get("tgt_lang", "tgt")),
            config,
        )

    def translate(
        self,
        texts: Sequence[str],
        num_beams: int | None = None,
        n_best: int | None = None,
        batch_size: int = 64,
        need_weights: bool = False,
        prefixes: Sequence[str | None] | None = None,
        *,
        settings: SearchSettings | None = None,
        **overrides,
    ) -> list[Translation]:
        """As Translator.translate, for what CTranslate2 can do (capabilities): greedy and
        beam search, without prefixes or attention weights."""
        g = call_settings(
            self.generation, settings, num_beams=num_beams, n_best=n_best, **overrides
        )
        check_supported(self.engine, self.capabilities, g, prefixes is not None, need_weights)
        beams, n_best = g.num_beams, g.n_best
        out, todo = blank_outputs(texts, self.source)
        ids = {i: self.src_tokenizer.encode(texts[i]) for i in todo}
        limits = {n: g.max_output_length(n) for n in {len(s) for s in ids.values()}}
        results = {}
        # One CTranslate2 call per `batch_size` sentences of similar length, under the largest
        # limit in the batch. A search under a larger limit runs exactly as under the smaller
        # one until that limit; so if no hypothesis of a sentence grew past its own limit, the
        # result is the one a search stopped at that limit would give. The (rare) sentences
        # whose hypotheses did grow past it are searched again, grouped by limit.
        order = sorted(ids, key=lambda i: len(ids[i]))
        again = []
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            found = self._translate_batch(
                [[self.src_vocab[k] for k in ids[i]] for i in chunk],  # pieces, not ids
                beams,
                max(limits[len(ids[i])] for i in chunk),
            )
            for i, result in zip(chunk, found):
                limit = limits[len(ids[i])]
                if all(len(h) <= limit for h in result.hypotheses):
                    results[i] = result
                else:
                    again.append(i)
        again.sort(key=lambda i: (limits[len(ids[i])], len(ids[i])))
        for chunk in _batches(again, lambda i: limits[len(ids[i])], batch_size):
            source = [[self.src_vocab[k] for k in ids[i]] for i in chunk]
            results.update(
                zip(chunk, self._translate_batch(source, beams, limits[len(ids[chunk[0]])]))
            )
        for i, result in results.items():
            hyps = self._ranked(result.hypotheses, result.scores, g.length_penalty)
            first, *rest = [self._translation(texts[i], *h) for h in hyps[:n_best]]
            first.alternatives = rest or None
            out[i] = first
        return out  # type: ignore[return-value]

    def _translate_batch(self, source: list[list[str]], beams: int, limit: int):
        """CTranslate2's search over one batch whose sentences share the output limit."""
        try:
            return self.ct2.translate_batch(
                source,
                beam_size=beams,
                num_hypotheses=beams,  # all of them, to rank the way beam_search does
                length_penalty=0.0,  # raw log P(Y): ranked by our length penalty in _ranked
                max_decoding_length=limit,
                min_decoding_length=0,  # </s> may come first, as in our search
                max_input_length=0,  # never cut the source
                return_scores=True,
                return_end_token=True,  # tells finished outputs from those cut at the limit
            )
        except RuntimeError as error:  # the export's position table is finite (export.py)
            if "position encodings" not in str(error):
                raise
            raise ValueError(f"a sequence is too long for this model: {error}") from None

    def _ranked(self, hypotheses, scores, alpha: float) -> list[tuple[list[int], float]]:
        """(ids, log P) best first as beam.beam_search ranks them: finished outputs by
        log P / gnmt_length_penalty(|Y|, alpha), |Y| counting </s>, then those cut at the
        length limit by log P."""
        hyps = [([self.tgt_ids[t] for t in tokens], s) for tokens, s in zip(hypotheses, scores)]

        def rank(hyp):
            ids, score = hyp
            finished = bool(ids) and ids[-1] == EOS_ID
            return (0, -score / gnmt_length_penalty(len(ids), alpha)) if finished else (1, -score)

        return sorted(hyps, key=rank)

    def _translation(self, text: str, ids: list[int], score: float) -> Translation:
        return Translation(
            self.tgt_tokenizer.decode(ids),
            self.src_tokenizer.tokens(text),
            [self.tgt_tokenizer.id_to_token(i) for i in ids],  # ends with </s> when finished
            float(score),
        )


def _check_vocabularies(ct2_dir: Path, src_tokenizer, tgt_tokenizer) -> None:
    """CTranslate2 maps pieces to ids with its own vocabulary files: they must be our
    tokenizers' pieces in id order (export.vocabulary), or outputs map to the wrong ids."""
    shared = ct2_dir / "shared_vocabulary.json"
    paths = (
        (shared, shared)
        if shared.exists()
        else (ct2_dir / "source_vocabulary.json", ct2_dir / "target_vocabulary.json")
    )
    for path, tokenizer, side in zip(paths, (src_tokenizer, tgt_tokenizer), ("src", "tgt")):
        try:
            tokens = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise CheckpointError(
                f"{path}: cannot read the export's vocabulary ({error})"
            ) from None
        if tokens != vocabulary(tokenizer):
            size = len(tokens) if isinstance(tokens, list) else "no list of"
            raise CheckpointError(
                f"{path}: {size} tokens that are not the {len(tokenizer)} of tokenizer.{side} in "
                "id order; the CTranslate2 model and the tokenizers do not belong together"
            )


def _open_ctranslate2(ctranslate2, directory: Path, options: dict):
    """ctranslate2.Translator(directory), or a CheckpointError naming the directory.

    CTranslate2 4.x reports a damaged model.bin as RuntimeError, IndexError or even
    UnicodeDecodeError, depending on where the damage is, so any error is caught here.
    """
    try:
        return ctranslate2.Translator(str(directory), **options)
    except Exception as error:  # noqa: BLE001 - the C++ library's errors have no common type
        raise CheckpointError(
            f"{directory}: CTranslate2 cannot load this model ({type(error).__name__}: "
            f"{error}); if its model.bin is damaged, export the model again"
        ) from None


def _batches(order: list[int], key, size: int):
    """Runs of equal key (one output limit each), cut into batches of at most `size`."""
    start = 0
    while start < len(order):
        end = start + 1
        while end < len(order) and end - start < size and key(order[end]) == key(order[start]):
            end += 1
        yield order[start:end]
        start = end


def engine_type(engine: str) -> type:
    """The class of an engine by its name, whose declared capabilities can be checked before
    anything is loaded (the CLI's flags)."""
    types = {"torch": Translator, "ctranslate2": CTranslate2Translator}
    if engine not in types:
        raise ValueError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    return types[engine]


def load_translator(
    model_dir: str | Path,
    engine: str = "torch",
    quantize: str | None = None,
    device: str | torch.device = "cpu",
    threads: int | None = None,
) -> Translator | CTranslate2Translator:
    """A Translator (engine "torch") or CTranslate2Translator ("ctranslate2") for `model_dir`.

    quantize: None or "int8". device: the torch engine's; CTranslate2 runs on the CPU here.
    threads: CTranslate2's intra-op threads (torch's are set with torch.set_num_threads).
    """
    if engine == "torch":
        return Translator.load(model_dir, device, quantize)
    if engine == "ctranslate2":
        if torch.device(device).type != "cpu":
            raise ValueError(f"the ctranslate2 engine runs on the CPU here, not {device}")
        return CTranslate2Translator.load(model_dir, quantize, threads)
    raise ValueError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
