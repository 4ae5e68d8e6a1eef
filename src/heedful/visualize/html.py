"""The interactive attention viewer: one self-contained, offline HTML file per trace.

The page embeds the trace (docs/trace-schema.md) as compact JSON plus the viewer's own markup,
CSS and JavaScript (assets/viewer.html, viewer.css and the SCRIPTS); it loads nothing from the
network, so it can be mailed, archived or opened from a laptop without a connection.

A viewer is one root element (.heedful-viewer) with no ids of its own: its parts are named by
data-part, its CSS is scoped under the root's class and its script finds its own root, so
several viewers share a page (a notebook) without touching each other or the page.
"""

from __future__ import annotations

import functools
import re
from html import escape
from importlib import resources
from typing import Any

from heedful import safejson
from heedful.visualize.trace import Trace, TraceHypothesis, check_index, check_kind


@functools.cache
def _asset(name: str) -> str:
    return (resources.files(__package__) / "assets" / name).read_text(encoding="utf-8")


# The viewer's JavaScript, one file per view, in reading order: parts first, the whole last.
SCRIPTS = (
    "common.js",
    "colours.js",
    "matrices.js",
    "heatmap.js",
    "heads.js",
    "rnn.js",
    "replay.js",
    "image.js",
    "calc.js",
    "calc_linear.js",
    "calc_rnn.js",
    "pipeline.js",
    "modelview.js",
    "rnn_steps.js",
    "bottleneck.js",
    "block.js",
    "block_diagram.js",
    "viewer.js",
)


def _viewer_js() -> str:
    """The scripts in one function scope: they share its constants and helpers, and leave
    nothing in the page's globals but window.heedfulViewer(s)."""
    body = "\n".join(_asset(name) for name in SCRIPTS)
    return f'(function () {{\n"use strict";\n\n{body}}})();'


def _as_dict(trace: Any) -> dict:
    if isinstance(trace, dict):
        return trace
    to_dict = getattr(trace, "to_dict", None)
    if callable(to_dict):
        data = to_dict()
        if isinstance(data, dict):
            return data
    raise TypeError(
        f"render_html needs a trace dict or an object with to_dict(), got {type(trace).__name__}"
    )


def _heatmap_panel(name: str, title: str, explain: str) -> str:
    """The markup of one heatmap view; heatmap.js finds its parts by the `name-` prefix."""
    return f"""
<section data-part="panel-{name}" class="panel" role="tabpanel" aria-labelledby="tab-{name}"
  hidden>
  <h2>{title}</h2>
  <p class="explain">{explain}</p>
  <p class="note" data-part="{name}-note" hidden></p>
  <div data-part="{name}-body">
    <div class="controls">
      <label>Layer <select data-part="{name}-layer"></select></label>
      <label>Head <select data-part="{name}-head"></select></label>
      <label class="check"><input type="checkbox" data-part="{name}-stretch">
        stretch colours to the largest weight</label>
    </div>
    <div class="legend"><canvas data-part="{name}-legend" width="280" height="36"
      aria-label="colour scale"></canvas></div>
    <div class="figure"><canvas data-part="{name}-canvas" role="img"
      aria-label="{title}: hover a cell for its weight, click it for its calculation"></canvas>
    </div>
  </div>
</section>"""


HEATMAPS = {
    "MATRIX": (
        "matrix",
        "Alignment matrix",
        "Rows are output tokens, columns source tokens: how much each output token, when it "
        "was produced, attended to each source token. Click a cell to see its calculation.",
    ),
    "ENC": (
        "enc",
        "Encoder self-attention",
        "Rows are source tokens (queries), columns the source tokens they attend to.",
    ),
    "DEC": (
        "dec",
        "Decoder self-attention",
        "Rows are output tokens (queries), columns the earlier output tokens they attend "
        "to; the mask hides the future (above the diagonal).",
    ),
}
_TRACE_TAG = '<script type="application/json" data-part="trace-data">'
_FRAGMENT = (
    '<div class="heedful-viewer"@@OPEN@@>\n<style>\n@@CSS@@</style>\n@@BODY@@'
    + _TRACE_TAG
    + "@@DATA@@</script>\n<script>\n@@JS@@\n</script>\n</div>"
)
_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="heedful">
<title>@@TITLE@@</title>
<style>body { margin: 0; background: #f4f6fa; }</style>
</head>
<body>
@@FRAGMENT@@
</body>
</html>
"""


def _fill(template: str, parts: dict) -> str:
    """One pass, so that a marker inside the trace or an asset is never itself replaced."""
    return re.sub(r"@@([A-Z]+)@@", lambda match: parts[match.group(1)], template)


def render_fragment(trace: Any, open_cell: dict | None = None) -> str:
    """The viewer as one element to put into any page (Jupyter's `_repr_html_`): its markup,
    its CSS scoped to it and its script, which draws into this element only.

    open_cell: {"kind", "layer", "head", "position"} (0-based, kind of ATTENTION_KINDS) to open
    with that cell's calculation shown (render_step); None opens the first view.
    """
    data = _as_dict(trace)
    hypotheses = data.get("hypotheses") or []
    output = str(hypotheses[0].get("text", "")) if hypotheses else ""
    body = _fill(
        _asset("viewer.html"),
        {
            "SOURCE": escape(str(data.get("source", ""))),
            "OUTPUT": escape(output),
            **{marker: _heatmap_panel(*panel) for marker, panel in HEATMAPS.items()},
        },
    )
    open_attr = "" if open_cell is None else f" data-open='{escape(safejson.dumps(open_cell))}'"
    parts = {
        "OPEN": open_attr,
        "CSS": _asset("viewer.css"),
        "BODY": body,
        "DATA": safejson.for_script(data),
        "JS": _viewer_js(),
    }
    return _fill(_FRAGMENT, parts)


def render_html(trace: Any, open_cell: dict | None = None) -> str:
    """Render an attention trace as one self-contained, offline HTML page.

    Args:
        trace: a dict in the format of docs/trace-schema.md, or any object with a `to_dict()`
            method that returns one (such as `heedful.visualize.trace.Trace`).
        open_cell: see render_fragment; None opens the first view.

    Returns:
        The page as a string: write it to a `.html` file and open it in any browser. It has
        the alignment matrix, the head view, the model view (every layer and head), encoder
        and decoder self-attention, the pipeline from scores to weights (QKᵀ, ÷√d_k, mask,
        softmax with a temperature), a step-by-step decoding replay, the calculation of any
        cell clicked, for an RNN its encoder and decoder animated step by step, for a
        Transformer one encoder layer drawn with its numbers and its positional encoding and,
        for beam search, the list of hypotheses.
    """
    data = _as_dict(trace)
    hypotheses = data.get("hypotheses") or []
    source = str(data.get("source", ""))
    output = str(hypotheses[0].get("text", "")) if hypotheses else ""
    title = escape(f"{source} → {output}" if output else source or "attention trace")
    fragment = render_fragment(data, open_cell)
    return _fill(_PAGE, {"TITLE": title, "FRAGMENT": fragment})


def render_step(trace: Any, kind: str, layer: int, head: int, position: int) -> str:
    """A viewer page that opens on the calculation of one attention row: `kind` one of
    ATTENTION_KINDS ("cross", "encoder", "decoder"); layer, head and position (the query:
    output step, or source token for "encoder") numbered from 1, as `heedful explain` takes
    them. Raises ValueError, naming the model's sizes, for one out of range."""
    data = _as_dict(trace)
    model = data.get("model") or {}
    check_kind(kind)
    layers = model.get("encoder_layers" if kind == "encoder" else "decoder_layers", 1)
    where = "encoder" if kind == "encoder" else "decoder"
    first = (data.get("hypotheses") or [{}])[0]
    count = (
        len(data.get("source_tokens", [])) if kind == "encoder" else len(first.get("tokens", []))
    )
    cell = {
        "kind": kind,
        "layer": check_index("layer", layer, layers, f"{where} layer"),
        "head": check_index("head", head, model.get("heads", 1), "head"),
        "position": check_index("position", position, count, "token", "the trace"),
    }
    return render_html(data, cell)


# ---- the viewer page with slots, for pages that show a trace later (server) ----

_SOURCE_SLOT, _OUTPUT_SLOT = "heedful-slot-source-7f3a", "heedful-slot-output-7f3a"


def viewer_template() -> list:
    """render_html's page cut at the places that change per trace: strings to keep and
    {"slot": "source" | "output" | "trace"} for a page's JavaScript to fill in (the escaped
    source text, the escaped output text, the trace as JSON safe inside <script>)."""
    page = render_html(_placeholder_trace(_SOURCE_SLOT, _OUTPUT_SLOT))
    head, found, rest = page.partition(_TRACE_TAG)
    if not found or "</script>" not in rest:
        raise RuntimeError("the viewer page has no embedded trace to replace (visualize/html.py)")
    tail = rest.split("</script>", 1)[1]
    parts: list = []
    slots = {_SOURCE_SLOT: "source", _OUTPUT_SLOT: "output"}
    for piece in re.split(f"({_SOURCE_SLOT}|{_OUTPUT_SLOT})", head):
        parts.append({"slot": slots[piece]} if piece in slots else piece)
    return parts + [_TRACE_TAG, {"slot": "trace"}, "</script>" + tail]


def frame_script() -> str:
    """assets/frame.js: a page's viewer in an iframe, one trace after another (viewer_template
    filled in, the frame fitted, the reader's view kept), for a page to put in its script."""
    return _asset("frame.js")


def _placeholder_trace(source: str, output: str) -> Trace:
    """A trace with every field and no weights, whose source and output texts a page finds
    and replaces by a real trace's (viewer_template, for the server's page)."""
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
