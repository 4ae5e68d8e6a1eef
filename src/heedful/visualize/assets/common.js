/* heedful attention viewer: draws the trace embedded in its root's [data-part="trace-data"]
 * (docs/trace-schema.md).
 * Vanilla JavaScript, canvas and SVG; it fetches nothing. Views render lazily: only the visible
 * tab is drawn, and head averages are computed on first use and cached.
 *
 * html.py puts these files into one function scope, in this order: common.js (the trace, state
 * and small helpers), colours.js, matrices.js (reading the attention out of the trace),
 * heatmap.js (the matrix and self-attention views), heads.js (head view), rnn.js and replay.js
 * (decoding replay), image.js, calc.js, calc_linear.js and calc_rnn.js (the calculation of one
 * cell), pipeline.js (scores to weights, step by step), modelview.js (every layer and head),
 * rnn_steps.js and bottleneck.js (the RNN encoder and decoder, animated, and without attention
 * its bottleneck), block.js and block_diagram.js (the Transformer block), then viewer.js (beams,
 * tabs and wiring).
 *
 * Several viewers can share a page: each script works inside its own root element
 * (.heedful-viewer), finds its parts by data-part and gives them ids with its own prefix. */

// This script's viewer: the root around it or, where a notebook ran it elsewhere (jQuery
// evaluates scripts in <head>), the first root on the page that no script has taken yet.
function findRoot() {
  const script = document.currentScript;
  const own = script && script.closest(".heedful-viewer");
  return own && !own.dataset.ready ? own : document.querySelector(".heedful-viewer:not([data-ready])");
}
const root = findRoot();
root.dataset.ready = "true";
const parts = new Map();
(function nameParts() {
  window.heedfulViewerCount = (window.heedfulViewerCount || 0) + 1;
  const prefix = "heedful" + window.heedfulViewerCount + "-";
  for (const node of root.querySelectorAll("[data-part]")) {
    parts.set(node.dataset.part, node);
    node.id = prefix + node.dataset.part;
  }
  for (const attr of ["aria-controls", "aria-labelledby"]) {
    for (const node of root.querySelectorAll("[" + attr + "]")) {
      node.setAttribute(attr, prefix + node.getAttribute(attr));
    }
  }
})();
const $ = (name) => parts.get(name) || null;
const trace = JSON.parse($("trace-data").textContent);
const model = trace.model || {};
const hyps = trace.hypotheses || [];
const sourceTokens = trace.source_tokens || [];
const isRNN = model.arch === "rnn";
const SVG_NS = $("head-view").namespaceURI; // the inline <svg>'s namespace, no URL in our code
const MONO = 'ui-monospace, Menlo, Consolas, "DejaVu Sans Mono", monospace';
const FONT = "12px " + MONO;
const TITLE_FONT = '600 12px system-ui, "DejaVu Sans", sans-serif';
const MIN_LINE_WEIGHT = 0.02; // head view: lighter lines are invisible anyway
const LINE_LEVELS = 20; // head view: opacity quantised so one <path> draws a whole level

// link: the output step hovered in the alignment matrix; pipeline: the pipe view's matrices
const state = { hyp: 0, step: 0, timer: null, tab: "matrix", dirty: new Set(), focus: null, link: null,
  pipeline: null, blockBox: null };

const hyp = () => hyps[state.hyp] || null;
const label = (tok) => String(tok).replace(/ /g, "\u2423"); // a space would be invisible
const shorten = (text, n = 18) => (text.length > n ? text.slice(0, n - 1) + "\u2026" : text);
const fmt = (x, digits = 3) => (x == null || !isFinite(x) ? "\u2013" : Number(x).toFixed(digits));

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text != null) node.textContent = text;
  return node;
}
function svg(tag, attrs) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const key in attrs) node.setAttribute(key, attrs[key]);
  return node;
}
// A canvas of w × h CSS pixels, sharp on high-density screens; returns its 2D context.
function sizeCanvas(canvas, w, h) {
  const dpr = window.devicePixelRatio || 1;
  canvas.width = Math.ceil(w * dpr);
  canvas.height = Math.ceil(h * dpr);
  canvas.style.width = w + "px";
  canvas.style.height = h + "px";
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  return ctx;
}
function tokenChip(tok, className) {
  const chip = el("span", "tok" + (className ? " " + className : ""), label(tok));
  chip.title = String(tok);
  return chip;
}

// ---- tooltip ------------------------------------------------------------------------------
const tooltip = $("tooltip");
function showTip(event, lines) {
  tooltip.textContent = "";
  for (const [key, value, isToken] of lines) {
    const line = el("div");
    line.appendChild(el("b", null, key));
    line.appendChild(isToken ? tokenChip(value) : document.createTextNode(value));
    tooltip.appendChild(line);
  }
  tooltip.hidden = false;
  const x = Math.min(event.clientX + 14, window.innerWidth - tooltip.offsetWidth - 8);
  const y = Math.min(event.clientY + 14, window.innerHeight - tooltip.offsetHeight - 8);
  tooltip.style.left = x + "px";
  tooltip.style.top = y + "px";
}
const hideTip = () => { tooltip.hidden = true; };
// A view shows its body, or instead a note saying why the trace has nothing for it.
function setAvailable(name, ok, message) {
  $(name + "-note").hidden = ok;
  $(name + "-note").textContent = ok ? "" : message;
  $(name + "-body").hidden = !ok;
}
