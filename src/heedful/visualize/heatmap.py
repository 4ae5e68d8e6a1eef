"""Static attention pictures: alignment heatmaps of a trace (one head, a layer's mean, or every
layer × head) as .png, .svg or .pdf.

Readability with long sentences comes from sizing the figure by its labels, not the other way
round: a tick label needs LABEL_PITCH × its font size along its axis, so each heatmap cell gets at
least that much room and neighbouring labels never overlap; fonts shrink (down to a floor) as
sentences grow, then the figure grows.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from heedful.checkpoint.status import status_line
from heedful.data.tokenizers import BOS
from heedful.visualize.figures import image_path, pyplot, save
from heedful.visualize.trace import Trace, check_index, check_kind

LABEL_PITCH = 1.5  # room per tick label along its axis, in multiples of its font size
POINT = 1 / 72  # inches
CMAP = "viridis"
RNN_PANEL = "an RNN has one attention\n(no layers or heads)"


def _label(token: str) -> str:
    """Make whitespace visible: a space would be an empty tick label."""
    return token.replace(" ", "␣")


# ---------------------------------------------------------------------------------------------
# Sizing: fonts and cells from the number of tokens
# ---------------------------------------------------------------------------------------------


@dataclass
class _Fit:
    """How one heatmap axis of n tokens is drawn: font (points), cell (inches), tick step."""

    font: float
    cell: float
    step: int


def _fit(n: int, font: float, min_side: float, max_side: float) -> _Fit:
    """Give each of n cells room for a label of `font`, within [min_side, max_side] inches;
    past max_side only every step-th label is shown, so they still do not overlap."""
    need = font * LABEL_PITCH * POINT
    cell = min(max(need, min_side / n), max_side / n)
    return _Fit(font, cell, max(1, math.ceil(need / cell - 1e-9)))


def _font_for(n: int, largest: float, smallest: float) -> float:
    """Full size up to ~30 tokens, then smaller, down to `smallest`."""
    return float(np.clip(largest * 30 / max(n, 1), smallest, largest))


def _ticks(ax, rows: Sequence[str], cols: Sequence[str], fy: _Fit, fx: _Fit, x=True, y=True):
    """Label rows and columns; source-like labels turn 90° unless they are single characters."""
    upright = all(len(t) <= 1 for t in cols)
    ax.set_xticks(range(0, len(cols), fx.step))
    ax.set_yticks(range(0, len(rows), fy.step))
    if x:
        ax.set_xticklabels(
            [_label(t) for t in cols[:: fx.step]], fontsize=fx.font, rotation=0 if upright else 90
        )
    else:
        ax.tick_params(labelbottom=False)
    if y:
        ax.set_yticklabels([_label(t) for t in rows[:: fy.step]], fontsize=fy.font)
    else:
        ax.tick_params(labelleft=False)
    ax.tick_params(length=2, pad=1.5)


def _heatmap_figure(weights, rows, cols, row_name: str, col_name: str, title: str):
    """One labelled heatmap, rows × cols, its cells sized so that no two labels overlap."""
    plt = pyplot()
    font = _font_for(max(len(rows), len(cols)), largest=10, smallest=7)
    fx = _fit(len(cols), font, min_side=2.5, max_side=120)
    fy = _fit(len(rows), font, min_side=1.5, max_side=120)
    width, height = fx.cell * len(cols), fy.cell * len(rows)
    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))  # the heatmap is the figure; labels lie outside it
    image = ax.imshow(weights, cmap=CMAP, vmin=0, vmax=1, aspect="auto", interpolation="nearest")
    _ticks(ax, rows, cols, fy, fx)
    ax.set_xlabel(col_name, fontsize=10)
    ax.set_ylabel(row_name, fontsize=10)
    chars = max(60, int(width * 72 / (0.6 * 10)))  # what fits across at 10 pt, or 60
    ax.set_title(_fit_title(title, chars), fontsize=10)
    bar = fig.add_axes((1 + 0.15 / width, 0, 0.18 / width, 1))
    fig.colorbar(image, cax=bar, label="attention weight")
    return fig


def _fit_title(title: str, chars: int) -> str:
    """Each line of a title cut (…) to `chars`: the tick labels already show every token."""
    return "\n".join(textwrap.shorten(line, chars, placeholder=" …") for line in title.splitlines())


def plot_alignment(
    weights,
    source_tokens: Sequence[str],
    target_tokens: Sequence[str],
    path: str | Path,
    title: str = "",
) -> Path:
    """Save a heatmap of `weights` (target × source, rows = output tokens) to `path` (PNG/SVG/PDF).

    Each row is one output token's attention distribution over the source tokens.
    """
    path = image_path(path)
    weights = np.asarray(weights, dtype=float)
    if weights.shape != (len(target_tokens), len(source_tokens)):
        raise ValueError(
            f"weights of shape {weights.shape} do not match {len(target_tokens)} target × "
            f"{len(source_tokens)} source tokens"
        )
    fig = _heatmap_figure(weights, target_tokens, source_tokens, "output", "source", title)
    return save(fig, path)


# ---------------------------------------------------------------------------------------------
# Traces: cross, encoder or decoder attention, one head, a layer's mean or every layer × head
# ---------------------------------------------------------------------------------------------


@dataclass
class _Maps:
    """The weights of one kind of attention in a trace, with their labels."""

    weights: np.ndarray  # (L, H, rows, cols)
    rows: list[str]
    cols: list[str]
    row_name: str  # what the rows are: "output" or "source"
    col_name: str
    stack: str  # whose layers: "decoder" or "encoder"
    name: str  # "cross attention", ...
    rnn: bool  # an RNN: one attention distribution per step, no layers or heads


def check_view(model: dict, kind: str, layer=None, head=None, grid=False) -> None:
    """Refuse, before anything is drawn (or translated), a view the model does not have.

    model: a trace's "model" (arch, attention, encoder_layers, decoder_layers, heads).
    """
    check_kind(kind)
    if model["arch"] == "rnn" and kind != "cross":
        raise ValueError(
            f"an RNN model has no {kind} self-attention (only a Transformer's layers attend to "
            "their own sequence); use --kind cross (kind='cross')"
        )
    if model["attention"] == "none":
        raise ValueError(
            f"this {model['arch']} model has no attention (attention: 'none'), so no cross "
            "attention: its decoder sees the source only through the encoder's final state"
        )
    stack = "encoder" if kind == "encoder" else "decoder"
    if layer is not None:
        check_index("layer", layer, model[f"{stack}_layers"], f"{stack} layer")
    if head is not None:
        check_index("head", head, model["heads"], "head")
    if grid and head is not None:
        raise ValueError("grid=True draws every head; leave head unset (or drop grid)")


def _trace_maps(trace: Trace, kind: str, hypothesis: int) -> _Maps:
    count = len(trace.hypotheses)
    if not 0 <= hypothesis < count:
        raise ValueError(
            f"hypothesis {hypothesis} out of range: the trace has {count} (numbered from 0)"
        )
    hyp, rnn = trace.hypotheses[hypothesis], trace.model["arch"] == "rnn"
    src, out = list(trace.source_tokens), list(hyp.tokens)
    if kind == "cross":
        weights = np.asarray(hyp.cross_attention, dtype=float).transpose(1, 2, 0, 3)  # L H T S
        return _Maps(weights, out, src, "output", "source", "decoder", "cross attention", rnn)
    own = trace.encoder_self_attention if kind == "encoder" else hyp.decoder_self_attention
    weights = np.asarray(own, dtype=float)  # (L, H, S, S) or (L, H, T, T)
    if kind == "encoder":
        return _Maps(
            weights,
            src,
            src,
            "source (query)",
            "source (key)",
            "encoder",
            "encoder self-attention",
            rnn,
        )
    reads = [BOS, *out[:-1]]  # position t reads y_{t-1} and predicts y_t: keys by what they read
    queries = [f"{r}→{t}" for r, t in zip(reads, out)]  # (a space would show as ␣)
    return _Maps(
        weights,
        queries,
        reads,
        "output (query: reads → predicts)",
        "key (the token it reads)",
        "decoder",
        "decoder self-attention",
        rnn,
    )


def _trace_title(trace: Trace, hypothesis: int) -> str:
    """The source and output, and how the model was trained when its directory says (an
    undertrained one's heatmap says so first)."""
    hyp = trace.hypotheses[hypothesis]
    which = "" if hypothesis == 0 else f" (hypothesis {hypothesis})"
    title = f"source: {trace.source!r}\noutput{which}: {hyp.text!r}"
    if trace.training is None:
        return title
    return status_line(trace.training, sep="\n") + "\n" + title


def _trace_figure(trace, kind="cross", layer=None, head=None, grid=False, hypothesis=0):
    """The figure plot_trace saves (tests measure its labels)."""
    check_view(trace.model, kind, layer, head, grid)
    maps = _trace_maps(trace, kind, hypothesis)
    num_layers, num_heads = maps.weights.shape[:2]
    if grid:
        layers = range(1, num_layers + 1) if layer is None else [layer]
        return _grid_figure(maps, list(layers), _trace_title(trace, hypothesis))
    layer = num_layers if layer is None else layer
    per_layer = maps.weights[layer - 1]  # (H, rows, cols)
    if head is None:
        weights = per_layer.mean(axis=0)
        which = "" if num_heads == 1 else f", mean of {num_heads} heads"
    else:
        weights, which = per_layer[head - 1], f", head {head} of {num_heads}"
    where = f"layer {layer} of {num_layers}{which}" if num_layers * num_heads > 1 else ""
    title = f"{_trace_title(trace, hypothesis)}\n{maps.name}" + (f", {where}" if where else "")
    return _heatmap_figure(weights, maps.rows, maps.cols, maps.row_name, maps.col_name, title)


def _grid_figure(maps: _Maps, layers: list[int], title: str):
    """Layers down, heads across, one shared colour scale; labels only on the outer panels."""
    plt = pyplot()
    rows, cols, num_heads = maps.rows, maps.cols, maps.weights.shape[1]
    font = _font_for(max(len(rows), len(cols)), largest=8, smallest=5)
    # Each panel gets at most its share of a ~60-inch figure; past that, labels thin out.
    fx = _fit(len(cols), font, min_side=1.6, max_side=max(1.6, 60 / num_heads))
    fy = _fit(len(rows), font, min_side=1.2, max_side=max(1.2, 60 / len(layers)))
    panel_w, panel_h, gap = fx.cell * len(cols), fy.cell * len(rows), 0.12
    width = num_heads * panel_w + (num_heads - 1) * gap
    height = len(layers) * panel_h + (len(layers) - 1) * gap
    fig = plt.figure(figsize=(width, height))
    for r, layer in enumerate(layers):
        for h in range(num_heads):
            left, bottom = h * (panel_w + gap), (len(layers) - 1 - r) * (panel_h + gap)
            ax = fig.add_axes((left / width, bottom / height, panel_w / width, panel_h / height))
            image = ax.imshow(
                maps.weights[layer - 1, h],
                cmap=CMAP,
                vmin=0,
                vmax=1,
                aspect="auto",
                interpolation="nearest",
            )
            _ticks(ax, rows, cols, fy, fx, x=r == len(layers) - 1, y=h == 0)
            if maps.rnn:  # one distribution per step: no layer or head to name
                ax.set_title(RNN_PANEL, fontsize=9)
                continue
            if r == 0:
                ax.set_title(f"head {h + 1}", fontsize=9)
            if h == 0:
                ax.set_ylabel(f"layer {layer}", fontsize=9)
    bar_height = min(1.0, 4 / height)  # a tall grid gets a colour bar of readable length
    bar = fig.add_axes((1 + 0.15 / width, (1 - bar_height) / 2, 0.18 / width, bar_height))
    fig.colorbar(image, cax=bar, label="attention weight")
    heading = f"{title}\n{maps.name}: rows {maps.row_name}, columns {maps.col_name}"
    chars = max(60, int(width * 72 / (0.6 * 10)))
    fig.suptitle(_fit_title(heading, chars), fontsize=10, y=1 + 0.45 / height, va="bottom")
    return fig


def plot_trace(
    trace: Trace,
    path: str | Path,
    kind: str = "cross",
    layer: int | None = None,
    head: int | None = None,
    grid: bool = False,
    hypothesis: int = 0,
) -> Path:
    """Save a heatmap of a trace's attention to `path` (.png, .svg or .pdf).

    kind: "cross" (output × source), "encoder" (source × source) or "decoder" (output × output,
        causal) self-attention; RNNs have only cross attention, rnn-none has none.
    layer, head: 1-based. layer=None is the last layer; head=None averages the layer's heads.
    grid: draw every layer × head (only `layer`'s heads when layer is given), one colour scale.
    hypothesis: which of the trace's outputs (0 = the best).
    Raises ValueError for an unknown suffix or kind, a layer or head out of range, or attention
    the model does not have.
    """
    path = image_path(path)
    return save(_trace_figure(trace, kind, layer, head, grid, hypothesis), path)
