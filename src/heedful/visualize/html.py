"""The interactive attention viewer: one self-contained, offline HTML file per trace.

The page embeds the trace (docs/trace-schema.md) as compact JSON plus the viewer's own CSS and
JavaScript (assets/viewer.css and the SCRIPTS in assets/); it loads nothing from the network, so
it can be mailed, archived or opened from a laptop without a connection.
"""

from __future__ import annotations

import functools
import re
from html import escape
from importlib import resources
from typing import Any

from heedful import safejson


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
    "viewer.js",
)


def _viewer_js() -> str:
    """The scripts in one function scope: they share its constants and helpers, and leave
    nothing in the page's globals but window.heedfulViewer."""
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
    """The markup of one heatmap view; heatmap.js finds its parts by the `name-` prefixed ids."""
    return f"""
<section id="panel-{name}" class="panel" role="tabpanel" aria-labelledby="tab-{name}" hidden>
  <h2>{title}</h2>
  <p class="explain">{explain}</p>
  <p class="note" id="{name}-note" hidden></p>
  <div id="{name}-body">
    <div class="controls">
      <label>Layer <select id="{name}-layer"></select></label>
      <label>Head <select id="{name}-head"></select></label>
      <label class="check"><input type="checkbox" id="{name}-stretch">
        stretch colours to the largest weight</label>
    </div>
    <div class="legend"><canvas id="{name}-legend" width="280" height="36"
      aria-label="colour scale"></canvas></div>
    <div class="figure"><canvas id="{name}-canvas" role="img"
      aria-label="{title}: hover a cell for its weight"></canvas></div>
  </div>
</section>"""


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="heedful">
<title>@@TITLE@@</title>
<style>
@@CSS@@
</style>
</head>
<body>
<header class="page-header">
  <p class="brand">heedful · attention viewer</p>
  <h1><span class="sentence-label">source</span> <span id="source-text">@@SOURCE@@</span></h1>
  <p class="output-line"><span class="sentence-label">output</span>
    <span id="output-text">@@OUTPUT@@</span></p>
  <p id="model-info" class="meta"></p>
</header>
<section id="beams" class="beams" aria-labelledby="beams-title" hidden>
  <h2 id="beams-title">Beam search hypotheses</h2>
  <p class="explain">Best first, with the sum of log-probabilities. Select one to show its own
    attention in every view.</p>
  <ol id="beam-list"></ol>
</section>
<nav class="tabs" role="tablist" aria-label="Views">
  <button type="button" role="tab" id="tab-matrix" data-tab="matrix"
    aria-controls="panel-matrix">Alignment matrix</button>
  <button type="button" role="tab" id="tab-heads" data-tab="heads"
    aria-controls="panel-heads">Head view</button>
  <button type="button" role="tab" id="tab-enc" data-tab="enc"
    aria-controls="panel-enc">Encoder self-attention</button>
  <button type="button" role="tab" id="tab-dec" data-tab="dec"
    aria-controls="panel-dec">Decoder self-attention</button>
  <button type="button" role="tab" id="tab-replay" data-tab="replay"
    aria-controls="panel-replay">Decoding replay</button>
</nav>
<main>
@@MATRIX@@
<section id="panel-heads" class="panel" role="tabpanel" aria-labelledby="tab-heads" hidden>
  <h2>Head view</h2>
  <p class="explain">Each line joins a token to a token it attends to; its opacity is the weight
    (weights under 0.02 are not drawn), its colour the head. Hover a token to see only its
    lines.</p>
  <p class="note" id="heads-note" hidden></p>
  <div id="heads-body">
    <div class="controls">
      <label>Attention <select id="hv-kind"></select></label>
      <label>Layer <select id="hv-layer"></select></label>
      <span class="head-buttons"><button type="button" id="hv-all">all heads</button>
        <button type="button" id="hv-none">no heads</button></span>
    </div>
    <div id="head-toggles" class="head-toggles" role="group" aria-label="Heads shown"></div>
    <div class="figure"><svg id="head-view" role="img" aria-label="Head view"></svg></div>
  </div>
</section>
@@ENC@@
@@DEC@@
<section id="panel-replay" class="panel" role="tabpanel" aria-labelledby="tab-replay" hidden>
  <h2>Step-by-step decoding replay</h2>
  <p class="explain">At each step the decoder looks at the source (attention weights) and picks
    the next token from its candidates.</p>
  <div class="controls">
    <button type="button" id="play-button" aria-pressed="false">▶ Play</button>
    <input type="range" id="step-slider" min="0" max="0" value="0" step="1"
      aria-label="Decoding step">
    <span id="current-step" class="current-step" aria-live="polite"></span>
    <label id="replay-layer-label">Layer <select id="replay-layer"></select></label>
    <label id="replay-head-label">Head <select id="replay-head"></select></label>
  </div>
  <h3>Output so far</h3>
  <div id="replay-output" class="tokens"></div>
  <h3>Attention over the source for this token</h3>
  <p class="note" id="replay-attention-note" hidden></p>
  <div id="replay-source" class="source-bars"></div>
  <h3>Top candidates</h3>
  <p class="note" id="replay-topk-note" hidden></p>
  <div id="replay-topk" class="topk"></div>
  <div id="rnn-panel" hidden>
    <h3>Decoder state h<sub>t</sub> and context c<sub>t</sub></h3>
    <div class="strip-row"><span class="strip-label">h<sub>t</sub></span>
      <canvas id="h-strip" role="img" aria-label="decoder state h_t"></canvas></div>
    <div class="strip-row"><span class="strip-label">c<sub>t</sub></span>
      <canvas id="c-strip" role="img" aria-label="context c_t"></canvas>
      <span class="note" id="c-strip-note" hidden></span></div>
    <div class="legend"><canvas id="strip-legend" width="420" height="36"
      aria-label="colour scale of h_t and c_t"></canvas></div>
    <h3>Attention scores before and after the softmax</h3>
    <p class="note" id="rnn-scores-note" hidden></p>
    <table id="rnn-scores" class="scores"></table>
  </div>
</section>
</main>
<div id="tooltip" class="tooltip" role="tooltip" hidden></div>
<noscript><p class="note">This viewer needs JavaScript to draw the attention.</p></noscript>
<script type="application/json" id="trace-data">@@DATA@@</script>
<script>
@@JS@@
</script>
</body>
</html>
"""


def render_html(trace: Any) -> str:
    """Render an attention trace as one self-contained, offline HTML page.

    Args:
        trace: a dict in the format of docs/trace-schema.md, or any object with a `to_dict()`
            method that returns one (such as `heedful.visualize.trace.Trace`).

    Returns:
        The page as a string: write it to a `.html` file and open it in any browser. It has
        the alignment matrix, the head view, encoder and decoder self-attention, a step-by-step
        decoding replay and, for beam search, the list of hypotheses.
    """
    data = _as_dict(trace)
    hypotheses = data.get("hypotheses") or []
    source = str(data.get("source", ""))
    output = str(hypotheses[0].get("text", "")) if hypotheses else ""
    parts = {
        "TITLE": escape(f"{source} → {output}" if output else source or "attention trace"),
        "SOURCE": escape(source),
        "OUTPUT": escape(output),
        "CSS": _asset("viewer.css"),
        "MATRIX": _heatmap_panel(
            "matrix",
            "Alignment matrix",
            "Rows are output tokens, columns source tokens: how much each output token, when it "
            "was produced, attended to each source token.",
        ),
        "ENC": _heatmap_panel(
            "enc",
            "Encoder self-attention",
            "Rows are source tokens (queries), columns the source tokens they attend to.",
        ),
        "DEC": _heatmap_panel(
            "dec",
            "Decoder self-attention",
            "Rows are output tokens (queries), columns the earlier output tokens they attend "
            "to; the mask hides the future (above the diagonal).",
        ),
        "DATA": safejson.for_script(data),
        "JS": _viewer_js(),
    }
    # One pass, so that a marker inside the trace or an asset is never itself replaced.
    return re.sub(r"@@([A-Z]+)@@", lambda match: parts[match.group(1)], _PAGE)


# ---- the viewer page with slots, for pages that show a trace later (server) ----

_SOURCE_SLOT, _OUTPUT_SLOT = "heedful-slot-source-7f3a", "heedful-slot-output-7f3a"
_TRACE_TAG = '<script type="application/json" id="trace-data">'


def viewer_template() -> list:
    """render_html's page cut at the places that change per trace: strings to keep and
    {"slot": "source" | "output" | "trace"} for a page's JavaScript to fill in (the escaped
    source text, the escaped output text, the trace as JSON safe inside <script>)."""
    from heedful.visualize.trace import placeholder_trace

    page = render_html(placeholder_trace(_SOURCE_SLOT, _OUTPUT_SLOT))
    head, found, rest = page.partition(_TRACE_TAG)
    if not found or "</script>" not in rest:
        raise RuntimeError("the viewer page has no embedded trace to replace (visualize/html.py)")
    tail = rest.split("</script>", 1)[1]
    parts: list = []
    slots = {_SOURCE_SLOT: "source", _OUTPUT_SLOT: "output"}
    for piece in re.split(f"({_SOURCE_SLOT}|{_OUTPUT_SLOT})", head):
        parts.append({"slot": slots[piece]} if piece in slots else piece)
    return parts + [_TRACE_TAG, {"slot": "trace"}, "</script>" + tail]
