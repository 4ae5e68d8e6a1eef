"""Attention traces: what a model did for one sentence, every weight of it, as JSON.

The format is docs/trace-schema.md (version 1). A trace is plain data (nested lists of rounded
floats), so the HTML viewer, the HTTP server and a notebook read it without torch or matplotlib.

Shapes: S source tokens, T output tokens of a hypothesis (</s> included when it finished),
L layers, H heads, N RNN hidden size, K top-k candidates.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from heedful.config import ModelConfig
from heedful.data.tokenizers import BOS_ID, EOS, EOS_ID, PAD_ID, seen_tokens
from heedful.safejson import dumps
from heedful.visualize.internals import (
    INTERNALS_MAX_NUMBERS,
    block_internals,
    internals_size,
    recording,
    rnn_internals,
    transformer_internals,
)
from heedful.visualize.trace_check import check_trace, read_trace_json

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
    # this output's part of the internals (docs/trace-schema.md); None when not recorded
    internals: dict | None = None


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
    # what the calculation panels need besides the weights, shared by the hypotheses
    # (docs/trace-schema.md, "internals"); None when not recorded (too big, or an older trace)
    internals: dict | None = None

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
            "internals": self.internals,
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
        top, optional = _field_names(cls)
        _check_keys(data, top | {"format", "version"}, optional, "trace")
        if not isinstance(data["hypotheses"], list) or not data["hypotheses"]:
            raise ValueError("trace has no hypotheses")
        hypotheses = []
        for i, h in enumerate(data["hypotheses"]):
            _check_keys(h, *_field_names(TraceHypothesis), where=f"hypotheses[{i}]")
            hypotheses.append(TraceHypothesis(**h))
        check_trace(data)  # every field's type and shape, named when wrong
        given = (top - {"hypotheses"}) & data.keys()
        return cls(**{name: data[name] for name in given}, hypotheses=hypotheses)

    def save(self, path: str | Path) -> Path:
        """Write the trace as compact JSON (a -inf score as null: JSON has no infinities)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dumps(self.to_dict()) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path) -> Trace:
        """Read a trace file; every problem is a ValueError that starts with the path."""
        try:
            return cls.from_dict(read_trace_json(Path(path)))
        except ValueError as e:  # bad JSON, not UTF-8, too large, or a bad trace
            raise ValueError(f"{path}: {e}") from e

    def _repr_html_(self) -> str:
        """Jupyter shows a trace as the interactive viewer: a fragment whose ids, styles and
        script stay inside its own root, so several can share a notebook."""
        from heedful.visualize.html import render_fragment

        return render_fragment(self)


def _field_names(cls) -> tuple[set[str], set[str]]:
    """All field names of a dataclass, and those with a default: keys added to the schema
    after version 1 was written, which older traces lack."""
    names = {f.name for f in fields(cls)}
    return names, {f.name for f in fields(cls) if f.default is not MISSING}


def _check_keys(data: Any, expected: set[str], optional: set[str], where: str) -> None:
    if not isinstance(data, dict):
        raise ValueError(f"{where} must be a JSON object, got {type(data).__name__}")
    missing = sorted(expected - optional - data.keys())
    unknown = sorted(data.keys() - expected)
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


def model_info(config) -> dict:
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


# Never candidates: no training target is <s> (tgt_out starts after it) or <pad> (the loss
# ignores it), so a model gives them only leftover probability. decoding.py does not mask
# them, so one the search did pick is still shown. <unk> is a real target (every unknown
# piece of the training data), the search can pick it, and it stays (the viewer marks it).
NOT_CANDIDATES = (PAD_ID, BOS_ID)


def _top_k(log_probs: torch.Tensor, k: int, tokenizer, chosen: list[int]) -> list[list[dict]]:
    """log_probs (T, V) -> [T][K] the most probable next tokens with their probabilities,
    without <s> and <pad> unless chosen[t] is one of them; probabilities as the model gave
    them (not renormalised)."""
    wanted = min(k + len(NOT_CANDIDATES), log_probs.size(-1))
    probs, ids = log_probs.exp().topk(wanted, dim=-1)  # (T, K + 2)
    steps = []
    for ps, js, pick in zip(probs.double().tolist(), ids.tolist(), chosen):
        kept = [(p, i) for p, i in zip(ps, js) if i not in NOT_CANDIDATES or i == pick][:k]
        steps.append(
            [{"token": tokenizer.id_to_token(i), "prob": round(p, DECIMALS)} for p, i in kept]
        )
    return steps


def _rnn_parts(maps) -> dict:
    """h_t, c_t and the scores of one hypothesis (batch of one); an RNN without attention has
    only h_t."""
    attends = maps.cross is not None
    return {
        "decoder_states": _rounded(maps.decoder_states[0]),  # (T, N)
        "contexts": _rounded(maps.contexts[0]) if attends else None,  # (T, N)
        "scores": _rounded(maps.scores[0, 0, 0]) if attends else None,  # (T, S)
    }


def _replayed(translator, src: torch.Tensor, hyp, top_k: int, internals: bool, first: bool):
    """A hypothesis with what the model computed at each of its steps (Translator.replay).

    Returns the TraceHypothesis, the encoder self-attention (L, H, S, S) or None, and the
    internals shared by all hypotheses (None unless `internals`; the encoder block's tensors,
    the same for every hypothesis, are read for the `first` one only).
    """
    tgt_tok = translator.tgt_tokenizer
    with recording(translator.model) as captured:
        out = translator.replay(src, hyp)
    maps = out.attention
    shared = own = None
    if internals and translator.config.arch == "transformer":
        shared, own = transformer_internals(captured, DECIMALS)
        shared["block"] = block_internals(captured, translator.model, DECIMALS) if first else None
    elif internals:
        shared, own = rnn_internals(
            captured, translator.model, maps, DECIMALS
        )  # rnn-none: decoder_states only
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
        top_k=_top_k(out.logits[0].log_softmax(-1), top_k, tgt_tok, hyp.produced(EOS_ID)),
        rnn=_rnn_parts(maps) if translator.config.arch == "rnn" else None,
        internals=own,
    )
    return trace_hyp, encoder, shared


def build_trace(
    translator,
    sentence: str,
    num_beams: int = 1,
    n_best: int = 1,
    top_k: int | None = None,
    length_penalty: float | None = None,
    internals: bool | None = None,
) -> Trace:
    """Translate `sentence` and record, for each of the n_best outputs, every attention weight.

    translator: a heedful.Translator (its model, tokenizers and length limits are used).
    num_beams: 1 is greedy search; n_best: how many hypotheses to keep (at most num_beams).
    top_k: how many candidate next tokens to record at each step; None is TOP_K.
    length_penalty: beam search's GNMT alpha; None takes the translator's.
    internals: record what the viewer's calculation panels need (per-head Q, K, V; RNN
        encoder and attentional states): None does so while they stay within
        INTERNALS_MAX_NUMBERS numbers (docs/trace-schema.md), True always, False never.
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
    source_tokens = seen_tokens(translator.src_tokenizer, sentence)  # <unk> where it saw one
    import torch

    src = torch.tensor([ids], device=translator.device)  # (1, S)
    [hyps] = translator.search(src, num_beams, n_best, length_penalty=length_penalty)
    if internals is None:
        lengths = [len(h.produced(EOS_ID)) for h in hyps]
        internals = internals_size(translator.config, len(ids), lengths) <= INTERNALS_MAX_NUMBERS
    with torch.no_grad():
        traced = [
            _replayed(translator, src, h, top_k, internals, i == 0) for i, h in enumerate(hyps)
        ]
    return Trace(
        model=model_info(translator.config),
        source=sentence,
        source_tokens=source_tokens,
        search={"num_beams": num_beams, "length_penalty": length_penalty},
        encoder_self_attention=_rounded(traced[0][1]),
        hypotheses=[h for h, _, _ in traced],
        internals=traced[0][2],
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
    # internals are kept only while within the limit: a trace of shorter outputs may keep them
    numbers = min(internals_size(config, s, [t] * n_best), INTERNALS_MAX_NUMBERS)
    return shared + n_best * per_output + numbers * _SCORE_BYTES


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
