"""A trace read from a file, checked before anything draws it: every field's type and shape.

docs/trace-schema.md says what a trace holds; `Trace.load` and `Trace.from_dict` call
`check_trace`, so that a damaged or hand-edited file fails with its field named
("hypotheses[0].cross_attention[2][0][1]: expected 7 numbers (S), got 6") instead of drawing
nothing, or half a page, in a viewer that trusts it. The shapes are the schema's letters: S
source tokens, T a hypothesis's tokens, L layers, H heads, N the RNN's hidden size.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

from heedful.checkpoint.status import check_status
from heedful.layers.scores import FORMS, RNN_ATTENTIONS

MAX_TRACE_BYTES = 256 << 20  # far above any trace build_trace writes (internals are bounded)
MAX_IMAGE_URI_CHARS = 2 << 20  # an image trace's picture: a 256-pixel PNG takes under 300,000
IMAGE_URI_PREFIXES = ("data:image/png;base64,", "data:image/jpeg;base64,")
ARCHS = ("transformer", "rnn")
ATTENTIONS = ("multi-head", *RNN_ATTENTIONS)


def read_trace_json(path: Path, max_bytes: int | None = None, what: str = "a trace") -> Any:
    """A trace file's JSON (or another file of traces: `what` it is, at most `max_bytes`): at
    most MAX_TRACE_BYTES, strict UTF-8, no NaN or Infinity (which Python's json reads but JSON
    does not allow, and the viewer could not draw)."""
    max_bytes = MAX_TRACE_BYTES if max_bytes is None else max_bytes
    size = path.stat().st_size
    if size > max_bytes:
        raise ValueError(f"{size:,} bytes, larger than the {max_bytes:,} bytes {what} may have")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"not UTF-8 text ({error.reason} at byte {error.start})") from None
    try:
        return json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("not valid JSON: nested too deeply") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"not valid JSON: {error}") from None


_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")


def _no_constant(name: str) -> None:
    raise ValueError(f"holds {name}, not a number JSON allows (write null)")


def field_names(cls) -> tuple[set[str], set[str]]:
    """All field names of a dataclass, and those with a default: keys added to the schema
    after version 1 was written, which older traces lack."""
    names = {f.name for f in fields(cls)}
    return names, {f.name for f in fields(cls) if f.default is not MISSING}


def check_keys(data: Any, expected: set[str], optional: set[str], where: str) -> None:
    if not isinstance(data, dict):
        raise ValueError(f"{where} must be a JSON object, got {type(data).__name__}")
    missing = sorted(expected - optional - data.keys())
    unknown = sorted(data.keys() - expected)
    if missing:
        raise ValueError(f"{where} lacks {', '.join(missing)}")
    if unknown:
        raise ValueError(f"{where} has unknown keys {', '.join(unknown)}")


class _Checker:
    """Walks one trace, with the path of the field it is at for the error message."""

    def fail(self, where: str, problem: str) -> None:
        raise ValueError(f"{where}: {problem}")

    def kind(self, value: Any, kinds: type | tuple, where: str, name: str) -> Any:
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in _tuple(kinds)):
            self.fail(where, f"expected {name}, got {_shown(value)}")
        return value

    def count(self, value: Any, where: str, largest: int = 1 << 20) -> int:
        self.kind(value, int, where, "a whole number")
        if not 1 <= value <= largest:
            self.fail(where, f"must be from 1 to {largest:,}, got {value}")
        return value

    def number(self, value: Any, where: str, low: float = -math.inf, high: float = math.inf):
        self.kind(value, (int, float), where, "a number")
        if not math.isfinite(value) or not low <= value <= high:
            self.fail(where, f"expected a finite number from {low:g} to {high:g}, got {value}")

    def array(self, value: Any, shape: list[tuple[int, str]], where: str, weights=False) -> None:
        """Nested lists of the given (size, letter) shape holding finite numbers (in [0, 1]
        for attention weights)."""
        (size, letter), rest = shape[0], shape[1:]
        self.kind(value, list, where, f"a list of {size} ({letter})")
        if len(value) != size:
            items = "numbers" if not rest else "lists"
            self.fail(where, f"expected {size} {items} ({letter}), got {len(value)}")
        for i, item in enumerate(value):
            if rest:
                self.array(item, rest, f"{where}[{i}]", weights)
            else:
                self.number(item, f"{where}[{i}]", *((0.0, 1.0) if weights else ()))

    def optional_array(self, value, shape, where: str, weights=False) -> None:
        if value is not None:
            self.array(value, shape, where, weights)

    def numbers_within(self, value: Any, where: str) -> None:
        """Objects, lists, null, text and finite numbers only (internals: their shapes follow
        the model's sizes, which docs/trace-schema.md lists; the viewer checks them on use)."""
        if isinstance(value, dict):
            for key, item in value.items():
                self.numbers_within(item, f"{where}.{key}")
        elif isinstance(value, list):
            for i, item in enumerate(value):
                self.numbers_within(item, f"{where}[{i}]")
        elif value is not None and not isinstance(value, str):  # "post" / "pre" norm, say
            self.number(value, where)


def _tuple(kinds: type | tuple) -> tuple:
    return kinds if isinstance(kinds, tuple) else (kinds,)


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 30 else text[:29] + '…'}"


def _check_score(c: _Checker, score: Any) -> None:
    """model.score: {"form", "formula"[, "scale"][, "gaussian"]} of Score.describe."""
    c.kind(score, dict, "model.score", "an object")
    if not {"form", "formula"} <= score.keys() <= {"form", "formula", "scale", "gaussian"}:
        c.fail("model.score", "must have the keys form and formula (and scale, gaussian)")
    if score["form"] not in FORMS:
        c.fail("model.score.form", f"must be one of {', '.join(FORMS)}")
    c.kind(score["formula"], str, "model.score.formula", "text")
    if "scale" in score:
        c.number(score["scale"], "model.score.scale", low=0.0)
    c.kind(score.get("gaussian", True), bool, "model.score.gaussian", "true or false")


def check_trace(data: dict) -> None:
    """Raise ValueError naming the first field of `data` (a trace's plain data, its keys
    already checked) whose type or shape is not the schema's."""
    c = _Checker()
    model = c.kind(data["model"], dict, "model", "an object")
    arch = model.get("arch")
    if arch not in ARCHS:
        c.fail("model.arch", f"must be one of {', '.join(ARCHS)}, got {_shown(arch)}")
    if model.get("attention") not in ATTENTIONS:
        c.fail("model.attention", f"must be one of {', '.join(ATTENTIONS)}")
    if "score" in model:  # an RNN's score (scores.py); older traces lack it
        _check_score(c, model["score"])
    enc, dec, heads = (
        c.count(model.get(k), f"model.{k}", 4096)
        for k in ("encoder_layers", "decoder_layers", "heads")
    )
    c.kind(data["source"], str, "source", "text")
    tokens = c.kind(data["source_tokens"], list, "source_tokens", "a list of tokens")
    for i, token in enumerate(tokens):
        c.kind(token, str, f"source_tokens[{i}]", "text")
    s = len(tokens)
    search = c.kind(data["search"], dict, "search", "an object")
    c.count(search.get("num_beams"), "search.num_beams", 1024)
    c.number(search.get("length_penalty"), "search.length_penalty")
    c.optional_array(
        data["encoder_self_attention"],
        [(enc, "L_enc"), (heads, "H"), (s, "S"), (s, "S")],
        "encoder_self_attention",
        weights=True,
    )
    c.kind(data.get("internals"), (dict, type(None)), "internals", "an object or null")
    c.numbers_within(data.get("internals"), "internals")
    for i, hypothesis in enumerate(data["hypotheses"]):
        _check_hypothesis(c, hypothesis, f"hypotheses[{i}]", s, dec, heads)
    if data.get("image") is not None:
        _check_image(c, data["image"], s)
    if data.get("training") is not None:  # a model directory's training.json, as it was
        check_status(data["training"], "training")
    if data.get("masked_heads") is not None:
        _check_masked(
            c, data["masked_heads"], {"encoder": enc, "decoder": dec, "cross": dec}, heads
        )


def _check_masked(c: _Checker, masked: Any, layers: dict, heads: int) -> None:
    """The heads switched off (inference/heads.py): {"kind", "layer", "head"}, each counted
    from 1 within the model's sizes, head null for a whole layer."""
    c.kind(masked, list, "masked_heads", "a list of heads")
    if len(masked) > 3 * 4096 * (heads + 1):
        c.fail("masked_heads", f"{len(masked):,} heads, more than the model can have")
    for i, head in enumerate(masked):
        at = f"masked_heads[{i}]"
        c.kind(head, dict, at, "an object")
        if set(head) != {"kind", "layer", "head"}:
            c.fail(at, "must have exactly the keys kind, layer and head")
        if head["kind"] not in ATTENTION_KINDS:
            c.fail(f"{at}.kind", f"must be one of {', '.join(ATTENTION_KINDS)}")
        c.count(head["layer"], f"{at}.layer", layers[head["kind"]])
        if head["head"] is not None:
            c.count(head["head"], f"{at}.head", heads)


def _check_image(c: _Checker, image: Any, s: int) -> None:
    """An image trace's picture (trace_image.py): a PNG or JPEG data URI of bounded size, which
    the viewer puts in an <img> (never a URL it would fetch, nor markup), the grid of the S
    regions and, for a ViT, the rollout [S][S]."""
    c.kind(image, dict, "image", "an object or null")
    if set(image) != {"data_uri", "grid", "rollout"}:
        c.fail("image", "must have exactly the keys data_uri, grid and rollout")
    uri = c.kind(image["data_uri"], str, "image.data_uri", "text")
    if len(uri) > MAX_IMAGE_URI_CHARS:
        c.fail(
            "image.data_uri",
            f"{len(uri):,} characters, over the {MAX_IMAGE_URI_CHARS:,} a trace's picture may have",
        )
    prefix = next((p for p in IMAGE_URI_PREFIXES if uri.startswith(p)), None)
    payload = uri[len(prefix) :] if prefix else ""
    if prefix is None or not payload or not _BASE64.fullmatch(payload):
        c.fail("image.data_uri", f"expected a base64 PNG or JPEG data URI, got {_shown(uri)}")
    grid = c.kind(image["grid"], list, "image.grid", "[rows, columns]")
    if len(grid) != 2:
        c.fail("image.grid", f"expected [rows, columns], got {_shown(grid)}")
    rows, columns = (c.count(n, f"image.grid[{i}]", 4096) for i, n in enumerate(grid))
    if rows * columns != s:
        c.fail("image.grid", f"{rows} × {columns} regions, but the trace has {s} (S)")
    c.optional_array(image["rollout"], [(s, "S"), (s, "S")], "image.rollout", weights=True)


def _check_hypothesis(c: _Checker, h: dict, where: str, s: int, layers: int, heads: int) -> None:
    c.kind(h["text"], str, f"{where}.text", "text")
    tokens = c.kind(h["tokens"], list, f"{where}.tokens", "a list of tokens")
    for i, token in enumerate(tokens):
        c.kind(token, str, f"{where}.tokens[{i}]", "text")
    t = len(tokens)
    if h["score"] is not None and h["score"] != -math.inf:  # a file holds -inf as null
        c.number(h["score"], f"{where}.score", high=0.0)
    c.kind(h["finished"], bool, f"{where}.finished", "true or false")
    cross = [(t, "T"), (layers, "L_dec"), (heads, "H"), (s, "S")]
    c.optional_array(h["cross_attention"], cross, f"{where}.cross_attention", weights=True)
    own = [(layers, "L_dec"), (heads, "H"), (t, "T"), (t, "T")]
    c.optional_array(h["decoder_self_attention"], own, f"{where}.decoder_self_attention", True)
    _check_candidates(c, h["top_k"], f"{where}.top_k", t)
    if h.get("sampled") is not None:
        _check_candidates(c, h["sampled"], f"{where}.sampled", t)
    for i, member in enumerate(c.kind(h.get("members") or [], list, f"{where}.members", "a list")):
        at = f"{where}.members[{i}]"
        if not isinstance(member, dict) or set(member) != {"model", "cross_attention"}:
            c.fail(at, "must be an object with exactly the keys model and cross_attention")
        model = c.kind(member["model"], dict, f"{at}.model", "an object")
        shape = [(t, "T"), (model.get("decoder_layers"), "L_dec"), (model.get("heads"), "H")]
        c.optional_array(member["cross_attention"], [*shape, (s, "S")], f"{at}.cross_attention")
    if h["rnn"] is not None:
        _check_rnn(c, h["rnn"], f"{where}.rnn", t, s)
    c.kind(h.get("internals"), (dict, type(None)), f"{where}.internals", "an object or null")
    c.numbers_within(h.get("internals"), f"{where}.internals")


def _check_candidates(c: _Checker, steps: Any, where: str, t: int) -> None:
    """[T][K] of {"token": text, "prob": a probability}: top_k, and sampled."""
    c.kind(steps, list, where, f"a list of {t} (T)")
    if len(steps) != t:
        c.fail(where, f"expected {t} lists (T), got {len(steps)}")
    for i, step in enumerate(steps):
        for j, candidate in enumerate(c.kind(step, list, f"{where}[{i}]", "a list")):
            at = f"{where}[{i}][{j}]"
            c.kind(candidate, dict, at, "an object")
            if set(candidate) != {"token", "prob"}:
                c.fail(at, "must have exactly the keys token and prob")
            c.kind(candidate["token"], str, f"{at}.token", "text")
            c.number(candidate["prob"], f"{at}.prob", 0.0, 1.0)


def _check_rnn(c: _Checker, rnn: Any, where: str, t: int, s: int) -> None:
    c.kind(rnn, dict, where, "an object or null")
    if set(rnn) - {"centers", "p_gen"} != {"decoder_states", "contexts", "scores"}:
        c.fail(
            where,
            "must have exactly the keys decoder_states, contexts and scores (and "
            "centers with local attention, p_gen with copy)",
        )
    if "centers" in rnn:  # p_t of Luong's local attention, a source position
        c.array(rnn["centers"], [(t, "T")], f"{where}.centers")
    if "p_gen" in rnn:  # the pointer-generator's probability of generating: in [0, 1]
        c.array(rnn["p_gen"], [(t, "T")], f"{where}.p_gen", weights=True)
    states = c.kind(rnn["decoder_states"], list, f"{where}.decoder_states", "a list")
    n = len(states[0]) if states and isinstance(states[0], list) else 0
    c.array(states, [(t, "T"), (max(n, 1), "N")], f"{where}.decoder_states")
    c.optional_array(rnn["contexts"], [(t, "T"), (max(n, 1), "N")], f"{where}.contexts")
    c.optional_array(rnn["scores"], [(t, "T"), (s, "S")], f"{where}.scores")


# The attention a trace holds: output → source, source → source, output → output. The names
# the CLI (--kind), plot_trace and explain take, in this order.
ATTENTION_KINDS = ("cross", "encoder", "decoder")


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
