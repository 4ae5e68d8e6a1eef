"""Attention traces: what a model did for one sentence, every weight of it, as JSON.

The format is docs/trace-schema.md (version 1). A trace is plain data (nested lists of rounded
floats), so the HTML viewer, the HTTP server and a notebook read it without torch or matplotlib.

Shapes: S source tokens, T output tokens of a hypothesis (</s> included when it finished),
L layers, H heads, N RNN hidden size, K top-k candidates.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from heedful.config.search import SearchSettings
from heedful.data.tokenizers import BOS_ID, EOS, EOS_ID, PAD_ID
from heedful.inference.engine import check_supported
from heedful.layers.scores import SCORES
from heedful.safejson import dumps
from heedful.visualize.internals import (
    DECIMALS,  # the schema's rounding; also read from here (words.py, trace_image.py)
    block_internals,
    recording,
    records_internals,
    rnn_internals,
    rounded,
    transformer_internals,
)
from heedful.visualize.trace_check import (  # check_index, check_kind: their old home
    ATTENTION_KINDS,  # noqa: F401
    check_index,  # noqa: F401
    check_keys,
    check_kind,  # noqa: F401
    check_trace,
    field_names,
    read_trace_json,
)
from heedful.visualize.trace_image import add_picture
from heedful.visualize.trace_size import TOP_K, estimated_json_bytes  # noqa: F401 (its old home)

if TYPE_CHECKING:
    import torch  # building a trace needs it, reading one does not: imported where it builds

ONLY_WHEN_USED = ("sampled", "members")  # hypothesis keys written only when not None
ONLY_WHEN_GIVEN = ("image", "masked_heads", "training")  # trace keys likewise


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
    # only when sampled: [T][K] the distribution each token was drawn from (sampling.py)
    sampled: list[list[dict]] | None = None
    # only for an ensemble: [M] of {"model": ..., "cross_attention": [T][L_dec][H][S] or None}
    members: list[dict] | None = None


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
    image: dict | None = None  # an image model's picture, grid and rollout (trace_image.py)
    masked_heads: list | None = None  # the heads switched off, {"kind", "layer", "head"} from 1
    training: dict | None = None  # how the model was trained (checkpoint/status.py), if it says

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
                {
                    f.name: getattr(h, f.name)
                    for f in fields(h)
                    if f.name not in ONLY_WHEN_USED or getattr(h, f.name) is not None
                }
                for h in self.hypotheses
            ],
            "internals": self.internals,
            **{k: getattr(self, k) for k in ONLY_WHEN_GIVEN if getattr(self, k) is not None},
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
        top, optional = field_names(cls)
        check_keys(data, top | {"format", "version"}, optional, "trace")
        if not isinstance(data["hypotheses"], list) or not data["hypotheses"]:
            raise ValueError("trace has no hypotheses")
        hypotheses = []
        for i, h in enumerate(data["hypotheses"]):
            check_keys(h, *field_names(TraceHypothesis), where=f"hypotheses[{i}]")
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


# ---- building a trace: Translator.search, then .replay (teacher forcing) per hypothesis ----


def model_info(config, hf: str | None = None) -> dict:
    """The trace's "model": its family, its maps' layers × heads, a Hugging Face model's type."""
    decoder = config.decoder
    if config.arch == "rnn":
        extra = {"window": decoder.local_window} if decoder.is_local() else {}
        extra |= {"copy": True} if decoder.copy else {}  # See et al. 2017's pointer-generator
        if decoder.attention in SCORES:  # its formula and form, for the viewer (scores.py)
            extra["score"] = SCORES[decoder.attention].describe(config.hidden_size)
        return {
            "arch": "rnn",
            "attention": decoder.attention,
            "encoder_layers": 1,
            "decoder_layers": 1,
            "heads": 1,
            **extra,  # Luong's local attention: D, its window's half-width; copy; score
        }
    return {
        "arch": "transformer",
        "attention": "multi-head",
        "encoder_layers": config.encoder.layers,
        "decoder_layers": decoder.layers,
        "heads": config.num_heads,
        **({"hf": hf} if hf else {}),
    }


# Never candidates: no training target is <s> (tgt_out starts after it) or <pad> (the loss
# ignores it), so a model gives them only leftover probability. decoding.py does not mask
# them, so one the search did pick is still shown. <unk> is a real target (every unknown
# piece of the training data), the search can pick it, and it stays (the viewer marks it).
NOT_CANDIDATES = (PAD_ID, BOS_ID)


def _top_k(log_probs, k: int, tokenizer, chosen: list[int], cut: bool = False) -> list[list[dict]]:
    """log_probs (T, V) -> [T][K] the most probable next tokens with their probabilities,
    without <s> and <pad> unless chosen[t] is one of them; probabilities as the model gave
    them (not renormalised). cut: without the tokens of probability 0 (sampling's cut ones)."""
    wanted = min(k + len(NOT_CANDIDATES), log_probs.size(-1))
    probs, ids = log_probs.exp().topk(wanted, dim=-1)  # (T, K + 2)
    steps = []
    for ps, js, pick in zip(probs.double().tolist(), ids.tolist(), chosen):
        kept = [(p, i) for p, i in zip(ps, js) if i not in NOT_CANDIDATES or i == pick]
        kept = [(p, i) for p, i in kept if p > 0 or i == pick or not cut][:k]
        steps.append(
            [{"token": tokenizer.id_to_token(i), "prob": round(p, DECIMALS)} for p, i in kept]
        )
    return steps


def _rnn_parts(maps) -> dict:
    """h_t, c_t and the scores of one hypothesis (batch of one); an RNN without attention has
    only h_t, one with local attention also the p_t its windows centre on, a copying one p_gen."""
    attends = maps.cross is not None
    parts = {k: getattr(maps, k) for k in ("centers", "p_gen")}  # (B, T) each, or None
    extra = {k: rounded(v[0]) for k, v in parts.items() if v is not None}
    return {
        "decoder_states": rounded(maps.decoder_states[0]),  # (T, N)
        "contexts": rounded(maps.contexts[0]) if attends else None,  # (T, N)
        "scores": rounded(maps.scores[0, 0, 0]) if attends else None,  # (T, S)
        **extra,
    }


def replayed(translator, src, hyp, top_k: int, internals: bool, first: bool, sampling=None):
    """A hypothesis with what the model computed at each of its steps (Translator.replay);
    with `sampling`, the distributions its tokens were drawn from.

    Returns the TraceHypothesis, the encoder self-attention (L, H, S, S) or None, and the
    internals shared by all hypotheses (None unless `internals`; the encoder block's tensors,
    the same for every hypothesis, are read for the `first` one only).
    """
    tgt_tok = translator.tgt_tokenizer
    with recording(translator.model) if internals else nullcontext({}) as captured:
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
    cross = _cross(maps)  # (T, L, H, S)
    decoder = None if maps.decoder is None else maps.decoder[0]  # (L, H, T, T)
    encoder = None if maps.encoder is None else maps.encoder[0]  # (L, H, S, S)
    log_probs = out.logits[0].log_softmax(-1)  # (T, V)
    trace_hyp = TraceHypothesis(
        text=tgt_tok.decode(hyp.tokens),
        tokens=[tgt_tok.id_to_token(i) for i in hyp.tokens] + ([EOS] if hyp.finished else []),
        score=round(hyp.score, DECIMALS),
        finished=hyp.finished,
        cross_attention=rounded(cross),
        decoder_self_attention=rounded(decoder),
        top_k=_top_k(log_probs, top_k, tgt_tok, hyp.produced(EOS_ID)),
        rnn=_rnn_parts(maps) if translator.config.arch == "rnn" else None,
        internals=own,
        sampled=None if sampling is None else _sampled(log_probs, sampling, top_k, tgt_tok, hyp),
        members=_members(translator.model, src, hyp),
    )
    return trace_hyp, encoder, shared


def _sampled(log_probs, sampling, top_k: int, tokenizer, hyp) -> list[list[dict]]:
    """[T][K] the most probable tokens of the distribution each token was drawn from."""
    from heedful.search.sampling import sampling_log_probs

    reshaped = sampling_log_probs(log_probs, sampling)
    return _top_k(reshaped, top_k, tokenizer, hyp.produced(EOS_ID), cut=True)


def _members(model, src, hyp) -> list[dict] | None:
    """Each ensemble member's cross-attention over this hypothesis; None for one model."""
    if not hasattr(model, "member_outputs"):
        return None
    import torch

    tgt_in = torch.tensor([hyp.decoder_input(BOS_ID, EOS_ID)], device=src.device)
    outputs = model.member_outputs(src, tgt_in, need_weights=True)
    return [
        {"model": model_info(m.config), "cross_attention": rounded(_cross(o.attention))}
        for m, o in zip(model.members, outputs)
    ]


def _cross(maps) -> torch.Tensor | None:
    return None if maps.cross is None else maps.cross[0].permute(2, 0, 1, 3)  # (T, L, H, S)


def _search(translator, src, settings, prefix):
    """The hypotheses of build_trace, with the trace's `search` (SearchSettings.record) and the
    Sampling they were drawn with (or None)."""
    from heedful.search.sampling import Sampling

    forced = [translator.prefix_ids(prefix)] if prefix else None
    drawn = Sampling.of(settings) if settings.sample else None
    [hyps] = translator.search(src, prefix=forced, settings=settings)
    return hyps, settings.record(prefix, len(forced[0]) if forced else 0), drawn


def _asked(translator, num_beams, n_best, length_penalty, sampling) -> SearchSettings:
    """build_trace's settings from its older arguments, over the translator's own."""
    draws = {"sample": True, **sampling} if sampling is not None else {}
    return translator.generation.but(
        num_beams=num_beams, n_best=n_best, length_penalty=length_penalty, **draws
    )


def build_trace(
    translator,
    item,
    num_beams: int = 1,
    n_best: int = 1,
    top_k: int | None = None,
    length_penalty: float | None = None,
    internals: bool | None = None,
    prefix: str | None = None,
    sampling: dict | None = None,
    target: str | None = None,
    source: str | None = None,
    settings: SearchSettings | None = None,
    mask_heads: tuple = (),
) -> Trace:
    """Translate `item` and record, for each of the n_best outputs, every attention weight.

    translator: a heedful.Translator (its model, source side, tokenizer and length limits are
        used). item: a sentence, or for an image model a picture (a file, its bytes or (H, W,
        3) uint8 pixels), whose trace also holds the picture, its grid and, for an encoder
        with self-attention, the rollout (trace_image.py).
    settings: the SearchSettings [default: the translator's, with num_beams (1: greedy),
        n_best, length_penalty (None: the translator's) and sampling as given].
    top_k: how many candidate next tokens to record at each step; None is TOP_K.
    internals: record what the viewer's calculation panels need (per-head Q, K, V; RNN
        encoder and attentional states): None does so while they stay within
        INTERNALS_MAX_NUMBERS numbers (docs/trace-schema.md), True always, False never; an
        image model has none (engine.py: refused by name when asked for), nor a Hugging Face
        model (its panels name the `heedful explain` to run).
    prefix: target text the outputs must start with. sampling: SearchSettings' sampling
        fields (temperature, top_k, top_p, seed): draw n_best outputs instead of searching.
    target, source: the language pair, as Translator.translate takes them: a multilingual
        model reads the target's token first, and a <2de> the sentence starts with is text.
    mask_heads: heads switched off in the search and the replay alike (inference/heads.py's
        Heads; the trace lists them in masked_heads).
    Raises ValueError for an empty sentence.
    """
    side = translator.source  # data/sources.py: text or pictures
    if side.blank(item):
        raise ValueError("empty sentence: there is nothing to translate, so nothing to trace")
    [item] = translator.sources(side.inputs([item]), target, source)  # only the API sets one
    top_k = TOP_K if top_k is None else top_k
    if top_k < 1:
        raise ValueError(f"top_k must be at least 1, got {top_k}")
    settings = settings or _asked(translator, num_beams, n_best, length_penalty, sampling)
    masks = bool(mask_heads)
    check_supported(
        translator.engine, translator.capabilities, settings, internals=internals, masks=masks
    )
    from heedful.inference.heads import masked

    src = side.batch([item], translator.device)  # (1, S), or (1, 3, size, size) pixels
    with masked(translator.model, mask_heads) if masks else nullcontext():
        search, traced = _traced(
            translator, side.length(item), src, settings, prefix, top_k, internals
        )
    trace = _trace(translator, item, search, traced)
    trace.masked_heads = [head.record() for head in mask_heads] or None
    return trace


def _traced(translator, length: int, src, settings, prefix, top_k, internals) -> tuple:
    """The search's record and each hypothesis replayed (replayed()'s triples)."""
    import torch

    hyps, search, drawn = _search(translator, src, settings, prefix)
    if translator.capabilities.internals:
        internals = records_internals(translator, internals, length, hyps)
    with torch.no_grad():
        traced = [
            replayed(translator, src, h, top_k, bool(internals), i == 0, drawn)
            for i, h in enumerate(hyps)
        ]
    return search, traced


def _trace(translator, item, search: dict, traced: list) -> Trace:
    """The Trace of `item` from its hypotheses as replayed (TraceHypothesis, encoder
    self-attention, shared internals); an image model's with its picture, grid and rollout."""
    side, encoder = translator.source, traced[0][1]
    trace = Trace(
        model=model_info(translator.config, getattr(translator.model, "hf_model_type", None)),
        source=side.describe(item),
        source_tokens=side.seen(item),  # <unk> (猫) where it saw one; a picture's regions
        search=search,
        encoder_self_attention=rounded(encoder),
        hypotheses=[h for h, _, _ in traced],
        internals=traced[0][2],
        training=getattr(translator, "training", None),  # its directory's training.json
    )
    if side.kind == "image":  # trace_image.py
        add_picture(trace, item, translator.config, side.grid, encoder)
    return trace
