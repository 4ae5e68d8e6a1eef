"""Attention traces: what a model did for one sentence, every weight of it, as JSON.

The format is docs/trace-schema.md (version 1). A trace is plain data (nested lists of rounded
floats), so the HTML viewer, the HTTP server and a notebook read it without torch or matplotlib.

Shapes: S source tokens, T output tokens of a hypothesis (</s> included when it finished),
L layers, H heads, N RNN hidden size, K top-k candidates.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, ClassVar

import torch

from heedful.data.tokenizers import BOS_ID, EOS, EOS_ID
from heedful.models.rnn import RNNSeq2Seq

DECIMALS = 5  # the schema's rounding: small files, and still 1e-5 from the model's numbers


@dataclass
class TraceHypothesis:
    """One output of the search and, step by step, where the model looked to produce it."""

    text: str
    tokens: list[str]  # T labels, ending with </s> when finished
    score: float  # sum of log-probabilities, as the search reported it
    finished: bool
    cross_attention: list | None  # [T][L_dec][H][S], None without attention (rnn-none)
    decoder_self_attention: list | None  # [L_dec][H][T][T], None for an RNN
    top_k: list[list[dict]]  # [T][K] of {"token": str, "prob": float}
    rnn: dict | None  # {"decoder_states": [T][N], "contexts", "scores"}; None for a Transformer


@dataclass
class Trace:
    """A trace of docs/trace-schema.md; hypotheses[0] is the output, the others best first."""

    FORMAT: ClassVar[str] = "heedful-trace"
    VERSION: ClassVar[int] = 1

    model: dict  # arch, attention, encoder_layers, decoder_layers, heads
    source: str
    source_tokens: list[str]
    search: dict  # num_beams, length_penalty
    encoder_self_attention: list | None  # [L_enc][H][S][S], None for an RNN
    hypotheses: list[TraceHypothesis]

    def to_dict(self) -> dict:
        return {
            "format": self.FORMAT,
            "version": self.VERSION,
            "model": self.model,
            "source": self.source,
            "source_tokens": self.source_tokens,
            "search": self.search,
            "encoder_self_attention": self.encoder_self_attention,
            "hypotheses": [
                {f.name: getattr(h, f.name) for f in fields(h)} for h in self.hypotheses
            ],
        }

    @classmethod
    def from_dict(cls, data: Any) -> Trace:
        """Check the format and version, and that every field of the schema is there."""
        if not isinstance(data, dict) or data.get("format") != cls.FORMAT:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise ValueError(f"not a heedful trace: format is {found!r}, expected {cls.FORMAT!r}")
        if data.get("version") != cls.VERSION:
            raise ValueError(
                f"unsupported trace version {data.get('version')!r}: this heedful reads "
                f"version {cls.VERSION} (docs/trace-schema.md)"
            )
        top = {f.name for f in fields(cls)}
        _check_keys(data, top | {"format", "version"}, "trace")
        if not isinstance(data["hypotheses"], list) or not data["hypotheses"]:
            raise ValueError("trace has no hypotheses")
        hypotheses = []
        for i, h in enumerate(data["hypotheses"]):
            _check_keys(h, {f.name for f in fields(TraceHypothesis)}, f"hypotheses[{i}]")
            hypotheses.append(TraceHypothesis(**h))
        return cls(**{name: data[name] for name in top - {"hypotheses"}}, hypotheses=hypotheses)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))
        path.write_text(text + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path) -> Trace:
        try:
            return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
        except ValueError as e:  # bad JSON (JSONDecodeError is a ValueError) or a bad trace
            raise ValueError(f"{path}: {e}") from e

    def _repr_html_(self) -> str:
        """Jupyter shows a trace as the interactive viewer."""
        from heedful.visualize.html import render_html

        return render_html(self)


def _check_keys(data: Any, expected: set[str], where: str) -> None:
    if not isinstance(data, dict):
        raise ValueError(f"{where} must be a JSON object, got {type(data).__name__}")
    missing, unknown = sorted(expected - data.keys()), sorted(data.keys() - expected)
    if missing:
        raise ValueError(f"{where} lacks {', '.join(missing)}")
    if unknown:
        raise ValueError(f"{where} has unknown keys {', '.join(unknown)}")


# ---------------------------------------------------------------------------------------------
# Building a trace: search, then one teacher-forced forward pass per hypothesis
# ---------------------------------------------------------------------------------------------


def _rounded(x: torch.Tensor | None) -> list | None:
    """Nested lists of floats rounded to DECIMALS (float64 first, so they print short)."""
    return None if x is None else x.double().round(decimals=DECIMALS).tolist()


def _model_info(model) -> dict:
    if isinstance(model, RNNSeq2Seq):
        return {
            "arch": "rnn",
            "attention": model.attention_kind,
            "encoder_layers": 1,
            "decoder_layers": 1,
            "heads": 1,
        }
    return {
        "arch": "transformer",
        "attention": "multi-head",
        "encoder_layers": len(model.encoder_layers),
        "decoder_layers": len(model.decoder_layers),
        "heads": model.decoder_layers[0].self_attn.num_heads,
    }


def _top_k(log_probs: torch.Tensor, k: int, tokenizer) -> list[list[dict]]:
    """log_probs (T, V) -> [T][K] the most probable next tokens with their probabilities."""
    probs, ids = log_probs.exp().topk(min(k, log_probs.size(-1)), dim=-1)  # (T, K)
    return [
        [{"token": tokenizer.id_to_token(i), "prob": round(p, DECIMALS)} for p, i in zip(ps, js)]
        for ps, js in zip(probs.double().tolist(), ids.tolist())
    ]


def _rnn_parts(model: RNNSeq2Seq, src, tgt_in, maps) -> dict:
    """h_t, c_t and the scores of one hypothesis (batch of one)."""
    if maps is None:  # rnn-none: no attention maps; h_t comes from the decoder itself
        memory = model.encode(src)
        _, _, steps = model.decoder(tgt_in, model.init_state(memory), memory)
        return {
            "decoder_states": _rounded(steps.states[0]),
            "contexts": None,
            "scores": None,
        }
    return {
        "decoder_states": _rounded(maps.decoder_states[0]),  # (T, N)
        "contexts": _rounded(maps.contexts[0]),  # (T, N)
        "scores": _rounded(maps.scores[0, 0, 0]),  # (T, S)
    }


def _teacher_forced(translator, src: torch.Tensor, hyp, top_k: int):
    """Feed a hypothesis's own output back (teacher forcing) and read what the model computed
    at each step: the same numbers as the search's, since both see the same prefix.

    Returns the TraceHypothesis and the encoder self-attention (L, H, S, S) or None.
    """
    model, tgt_tok = translator.model, translator.tgt_tokenizer
    produced = hyp.tokens + ([EOS_ID] if hyp.finished else [])  # T ids
    tgt_in = torch.tensor([[BOS_ID] + produced[:-1]], device=src.device)  # (1, T)
    out = model(src, tgt_in, need_weights=True)
    maps = out.attention  # None for rnn-none
    cross = None if maps is None else maps.cross[0].permute(2, 0, 1, 3)  # (T, L, H, S)
    decoder = None if maps is None or maps.decoder is None else maps.decoder[0]  # (L, H, T, T)
    encoder = None if maps is None or maps.encoder is None else maps.encoder[0]  # (L, H, S, S)
    is_rnn = isinstance(model, RNNSeq2Seq)
    trace_hyp = TraceHypothesis(
        text=tgt_tok.decode(hyp.tokens),
        tokens=[tgt_tok.id_to_token(i) for i in hyp.tokens] + ([EOS] if hyp.finished else []),
        score=round(hyp.score, DECIMALS),
        finished=hyp.finished,
        cross_attention=_rounded(cross),
        decoder_self_attention=_rounded(decoder),
        top_k=_top_k(out.logits[0].log_softmax(-1), top_k, tgt_tok),
        rnn=_rnn_parts(model, src, tgt_in, maps) if is_rnn else None,
    )
    return trace_hyp, encoder


@torch.no_grad()
def build_trace(
    translator,
    sentence: str,
    num_beams: int = 1,
    n_best: int = 1,
    top_k: int = 5,
    length_penalty: float | None = None,
) -> Trace:
    """Translate `sentence` and record, for each of the n_best outputs, every attention weight.

    translator: a heedful.Translator (its model, tokenizers and length limits are used).
    num_beams: 1 is greedy search; n_best: how many hypotheses to keep (at most num_beams).
    top_k: how many candidate next tokens to record at each step.
    length_penalty: beam search's GNMT alpha; None takes the translator's.
    Raises ValueError for an empty sentence.
    """
    if not sentence.strip():
        raise ValueError("empty sentence: there is nothing to translate, so nothing to trace")
    if top_k < 1:
        raise ValueError(f"top_k must be at least 1, got {top_k}")
    settings = {} if length_penalty is None else {"length_penalty": length_penalty}
    generation = replace(translator.generation, **settings)
    ids = translator.src_tokenizer.encode(sentence)
    source_tokens = translator.src_tokenizer.tokens(sentence)
    if len(ids) != len(source_tokens):  # the labels must name the positions the model read
        raise ValueError(f"tokenizer gives {len(ids)} ids but {len(source_tokens)} tokens")
    src = torch.tensor([ids], device=translator.device)  # (1, S)
    [hyps] = translator._search(src, num_beams, n_best, generation, False)
    traced = [_teacher_forced(translator, src, h, top_k) for h in hyps]
    return Trace(
        model=_model_info(translator.model),
        source=sentence,
        source_tokens=source_tokens,
        search={"num_beams": num_beams, "length_penalty": generation.length_penalty},
        encoder_self_attention=_rounded(traced[0][1]),
        hypotheses=[h for h, _ in traced],
    )
