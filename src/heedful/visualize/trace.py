"""Attention traces: what a model did for one sentence, every weight of it, as JSON.

The format is docs/trace-schema.md (version 1). A trace is plain data (nested lists of rounded
floats), so the HTML viewer, the HTTP server and a notebook read it without torch or matplotlib.

Shapes: S source tokens, T output tokens of a hypothesis (</s> included when it finished),
L layers, H heads, N RNN hidden size, K top-k candidates.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from heedful.config import ModelConfig
from heedful.data.tokenizers import EOS

if TYPE_CHECKING:
    import torch  # building a trace needs it, reading one does not: imported where it builds

DECIMALS = 5  # the schema's rounding: small files, and still 1e-5 from the model's numbers
# The attention a trace holds: output → source, source → source, output → output. The names
# the CLI (--kind), plot_trace and explain take, in this order.
ATTENTION_KINDS = ("cross", "encoder", "decoder")


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


def check_index(what: str, index: int, count: int, noun: str, owner: str = "the model") -> int:
    """A 1-based `index` (of a layer, head or position) of `count`, as 0-based; out of range,
    a ValueError naming them: "layer 7 out of range: the model has 3 decoder layers"."""
    if not 1 <= index <= count:
        plural = "" if count == 1 else "s"
        hint = " (numbered from 1)" if index < 1 else ""
        raise ValueError(f"{what} {index} out of range: {owner} has {count} {noun}{plural}{hint}")
    return index - 1


def check_kind(kind: str) -> str:
    if kind not in ATTENTION_KINDS:
        raise ValueError(
            f"unknown attention kind {kind!r}: choose one of {', '.join(ATTENTION_KINDS)}"
        )
    return kind


# ---------------------------------------------------------------------------------------------
# Building a trace: Translator.search, then Translator.replay (teacher forcing) per hypothesis
# ---------------------------------------------------------------------------------------------


def _rounded(x: torch.Tensor | None) -> list | None:
    """Nested lists of floats rounded to DECIMALS (float64 first, so they print short)."""
    return None if x is None else x.double().round(decimals=DECIMALS).tolist()


def _model_info(config) -> dict:
    """The trace's "model": its family and the layers × heads its attention maps have."""
    if config.arch == "rnn":
        return {
            "arch": "rnn",
            "attention": config.attention,
            "encoder_layers": 1,
            "decoder_layers": 1,
            "heads": 1,
        }
    return {
        "arch": "transformer",
        "attention": "multi-head",
        "encoder_layers": config.encoder_layers,
        "decoder_layers": config.decoder_layers,
        "heads": config.num_heads,
    }


def _top_k(log_probs: torch.Tensor, k: int, tokenizer) -> list[list[dict]]:
    """log_probs (T, V) -> [T][K] the most probable next tokens with their probabilities."""
    probs, ids = log_probs.exp().topk(min(k, log_probs.size(-1)), dim=-1)  # (T, K)
    return [
        [{"token": tokenizer.id_to_token(i), "prob": round(p, DECIMALS)} for p, i in zip(ps, js)]
        for ps, js in zip(probs.double().tolist(), ids.tolist())
    ]


def _rnn_parts(maps) -> dict:
    """h_t, c_t and the scores of one hypothesis (batch of one); an RNN without attention has
    only h_t."""
    attends = maps.cross is not None
    return {
        "decoder_states": _rounded(maps.decoder_states[0]),  # (T, N)
        "contexts": _rounded(maps.contexts[0]) if attends else None,  # (T, N)
        "scores": _rounded(maps.scores[0, 0, 0]) if attends else None,  # (T, S)
    }


def _replayed(translator, src: torch.Tensor, hyp, top_k: int):
    """A hypothesis with what the model computed at each of its steps (Translator.replay).

    Returns the TraceHypothesis and the encoder self-attention (L, H, S, S) or None.
    """
    tgt_tok = translator.tgt_tokenizer
    out = translator.replay(src, hyp)
    maps = out.attention  # rnn-none: decoder_states only
    cross = None if maps.cross is None else maps.cross[0].permute(2, 0, 1, 3)  # (T, L, H, S)
    decoder = None if maps.decoder is None else maps.decoder[0]  # (L, H, T, T)
    encoder = None if maps.encoder is None else maps.encoder[0]  # (L, H, S, S)
    trace_hyp = TraceHypothesis(
        text=tgt_tok.decode(hyp.tokens),
        tokens=[tgt_tok.id_to_token(i) for i in hyp.tokens] + ([EOS] if hyp.finished else []),
        score=round(hyp.score, DECIMALS),
        finished=hyp.finished,
        cross_attention=_rounded(cross),
        decoder_self_attention=_rounded(decoder),
        top_k=_top_k(out.logits[0].log_softmax(-1), top_k, tgt_tok),
        rnn=_rnn_parts(maps) if translator.config.arch == "rnn" else None,
    )
    return trace_hyp, encoder


def build_trace(
    translator,
    sentence: str,
    num_beams: int = 1,
    n_best: int = 1,
    top_k: int | None = None,
    length_penalty: float | None = None,
) -> Trace:
    """Translate `sentence` and record, for each of the n_best outputs, every attention weight.

    translator: a heedful.Translator (its model, tokenizers and length limits are used).
    num_beams: 1 is greedy search; n_best: how many hypotheses to keep (at most num_beams).
    top_k: how many candidate next tokens to record at each step; None is TOP_K.
    length_penalty: beam search's GNMT alpha; None takes the translator's.
    Raises ValueError for an empty sentence.
    """
    if not sentence.strip():
        raise ValueError("empty sentence: there is nothing to translate, so nothing to trace")
    top_k = TOP_K if top_k is None else top_k
    if top_k < 1:
        raise ValueError(f"top_k must be at least 1, got {top_k}")
    if length_penalty is None:
        length_penalty = translator.generation.length_penalty
    ids = translator.src_tokenizer.encode(sentence)
    source_tokens = translator.src_tokenizer.tokens(sentence)
    if len(ids) != len(source_tokens):  # the labels must name the positions the model read
        raise ValueError(f"tokenizer gives {len(ids)} ids but {len(source_tokens)} tokens")
    import torch

    src = torch.tensor([ids], device=translator.device)  # (1, S)
    [hyps] = translator.search(src, num_beams, n_best, length_penalty=length_penalty)
    with torch.no_grad():
        traced = [_replayed(translator, src, h, top_k) for h in hyps]
    return Trace(
        model=_model_info(translator.config),
        source=sentence,
        source_tokens=source_tokens,
        search={"num_beams": num_beams, "length_penalty": length_penalty},
        encoder_self_attention=_rounded(traced[0][1]),
        hypotheses=[h for h, _ in traced],
    )


# ---- sizes and placeholders for pages that show a trace later (server) ----


TOP_K = 5  # candidates per step in a trace (build_trace's default)
# Bytes a number takes in a trace's JSON, with DECIMALS decimals and a comma: a weight or a
# probability is in [0, 1] ("0.12345,"); h_t and c_t of tanh-bounded RNNs in (-1, 1)
# ("-0.12345,"); a score before the softmax is unbounded, and real ones stay under 1000 in
# magnitude ("-123.45678,").
_WEIGHT_BYTES, _STATE_BYTES, _SCORE_BYTES = 8, 9, 11


def estimated_json_bytes(
    config: ModelConfig, source_length: int, output_length: int, n_best: int
) -> int:
    """An upper estimate of the JSON size of a trace of `n_best` hypotheses, from the model's
    shape: S = source_length tokens and at most T = output_length (</s> included) each."""
    s, t = source_length, output_length
    if config.arch == "transformer":
        heads = config.num_heads
        per_output = config.decoder_layers * heads * (t * s + t * t)  # cross + decoder self
        per_output *= _WEIGHT_BYTES
        shared = config.encoder_layers * heads * s * s * _WEIGHT_BYTES  # encoder self-attention
    else:
        per_output = t * s * (_WEIGHT_BYTES + _SCORE_BYTES)  # weights and scores
        per_output += 2 * t * config.hidden_size * _STATE_BYTES  # h_t and c_t
        shared = 0
    per_output += 4 * TOP_K * t * _WEIGHT_BYTES  # a candidate is a token and a probability
    return shared + n_best * per_output


def placeholder_trace(source: str, output: str) -> Trace:
    """A trace with every field and no weights, whose source and output texts a page finds
    and replaces by a real trace's (the server's page, heedful.visualize.html.viewer_template)."""
    hypothesis = TraceHypothesis(
        text=output,
        tokens=[],
        score=0.0,
        finished=True,
        cross_attention=None,
        decoder_self_attention=None,
        top_k=[],
        rnn=None,
    )
    return Trace(
        model={},
        source=source,
        source_tokens=[],
        search={},
        encoder_self_attention=None,
        hypotheses=[hypothesis],
    )
