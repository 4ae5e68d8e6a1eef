// View: from scores to weights, for one layer and head. A Transformer's Q Kᵀ, ÷ √d_k, the
// mask (−∞) and softmax (Vaswani et al. 2017, eq. 1), recomputed here from the trace's Q and K;
// an RNN's scores (as the trace has them) and their softmax. A temperature τ divides the scores
// before the softmax and "without √d_k" skips the scaling: both show the softmax saturating.
// Every matrix names its rows and columns (tokens), and the weights × V give the output Z.

const PIPE_EXPLAIN = {
  transformer: "One head's attention as the formula builds it, queries in rows and keys in " +
    "columns: the scores Q K\u1D40, divided by \u221Ad_k (so that the softmax does not saturate: " +
    "Vaswani et al. 2017, \u00A73.2.1), the keys a query may not see set to \u2212\u221E " +
    "(hatched: the future, in decoder self-attention), then a softmax along each row. " +
    "Recomputed here from the trace's Q and K. Lower \u03C4, or drop \u221Ad_k, and each " +
    "row turns into a single 1; raise \u03C4 and it evens out (entropy \u2192 ln of its keys). " +
    "Each row of weights is coloured on its own scale, up to its max.",
  rnn: "The decoder's score of every source token (columns) at every step (rows), as the " +
    "model computed them, then softmax(score / \u03C4) along each row. Lower \u03C4 and each " +
    "row turns into a single 1; raise it and the weights even out.",
};
const temperature = () => Math.pow(10, +$("pipe-temperature").value); // the slider is log10 τ

// The matrices of one head: queries × keys, masked entries −∞, weights = softmax(masked / τ).
function transformerPipeline(kind, layer, head, tau) {
  const p = headInternals(kind, layer, head);
  if (!p) return null;
  const scale = $("pipe-unscaled").checked ? 1 : Math.sqrt(p.q[0].length);
  const scores = p.q.map((q) => p.k.map((k) => dot(q, k)));
  const scaled = scores.map((row) => row.map((x) => x / scale));
  const masked = scaled.map((row, i) => row.map((x, j) => (p.causal && j > i ? -Infinity : x)));
  const weights = masked.map((row) => softmaxOf(row.map((x) => x / tau)));
  const steps = [
    ["scores", "Q K\u1D40", scores],
    ["scaled", scale === 1 ? "\u00F7 1 (no \u221Ad_k)" : "\u00F7 \u221Ad_k = " + fmt(scale, 3), scaled],
    ["masked", p.causal ? "masked (\u2212\u221E)" : "masked (nothing is)", masked],
    ["weights", "softmax(\u00B7 / \u03C4)", weights],
  ];
  return { kind, layer, head, scale, tau, scores, scaled, masked, weights, steps,
    rowLabels: p.queries, colLabels: p.keys, values: p.v, valueName: "V", model: modelOutputs(kind, layer, head) };
}
// The head's outputs as the model computed them (its columns of what W_O read), or null.
function modelOutputs(kind, layer, head) {
  const inputs = headInputs(kind, layer);
  if (!inputs || !inputs.z) return null;
  const dk = inputs.z[0].length / (model.heads || 1);
  return inputs.z.map((row) => row.slice(head * dk, (head + 1) * dk));
}
function rnnPipeline(tau) {
  const h = hyp();
  const scores = h.rnn.scores.map((row) => row.map((x) => (x == null ? -Infinity : +x)));
  const weights = scores.map((row) => softmaxOf(row.map((x) => x / tau)));
  const states = (trace.internals || {}).encoder_states || null; // what the weights average
  return { kind: "cross", layer: 0, head: 0, scale: 1, tau, scores, weights,
    steps: [["scores", "score(h_t, h\u0304_s)", scores], ["weights", "softmax(score / \u03C4)", weights]],
    rowLabels: h.tokens, colLabels: sourceTokens, values: states, valueName: "h\u0304_s",
    model: model.window ? null : h.rnn.contexts || null }; // local attention's c_t is windowed
}

// ---- drawing: one small canvas per step, −∞ hatched grey ------------------------------------
let hatchTile = null;
function hatch(ctx) {
  if (!hatchTile) {
    hatchTile = document.createElement("canvas");
    hatchTile.width = hatchTile.height = 6;
    const t = hatchTile.getContext("2d");
    t.fillStyle = "#e4e6eb";
    t.fillRect(0, 0, 6, 6);
    t.strokeStyle = "#9aa1ad";
    t.beginPath();
    t.moveTo(0, 6);
    t.lineTo(6, 0);
    t.stroke();
  }
  return ctx.createPattern(hatchTile, "repeat");
}
const smallCell = (nRows, nCols) => Math.max(3, Math.min(18, Math.floor(250 / Math.max(nRows, nCols, 1))));
function drawSmallMatrix(canvas, rows, colour) {
  const nRows = rows.length, nCols = rows[0].length;
  const cell = smallCell(nRows, nCols);
  const gap = cell >= 8 ? 1 : 0;
  const ctx = sizeCanvas(canvas, nCols * cell, nRows * cell);
  const pattern = hatch(ctx);
  rows.forEach((row, i) => row.forEach((x, j) => {
    ctx.fillStyle = x === -Infinity ? pattern : colour(x, i);
    ctx.fillRect(j * cell, i * cell, cell - gap, cell - gap);
  }));
  canvas._cell = cell;
}
// Each row of weights is one distribution: its largest weight and its entropy H = −Σ w ln w
// (ln of the keys it may see when uniform, 0 when all on one key).
function rowStats(weights) {
  return weights.map((row) => ({
    max: Math.max(...row),
    entropy: -row.reduce((sum, w) => sum + (w > 0 ? w * Math.log(w) : 0), 0),
  }));
}
function statsTable(stats) {
  const table = el("table", "scores pipe-stats");
  table.dataset.part = "pipe-stats";
  const header = table.insertRow();
  for (const name of ["row", "max", "entropy"]) header.appendChild(el("th", null, name));
  stats.forEach((s, i) => {
    const row = table.insertRow();
    row.dataset.row = String(i);
    numCell(row, "row", String(i + 1));
    numCell(row, "max", s.max, 3);
    numCell(row, "entropy", s.entropy, 3);
  });
  return table;
}
function pipeTooltip(canvas, m, rows) {
  canvas.addEventListener("mousemove", (event) => {
    const box = canvas.getBoundingClientRect(), cell = canvas._cell;
    const i = Math.floor((event.clientY - box.top) / cell), j = Math.floor((event.clientX - box.left) / cell);
    if (!rows[i] || rows[i][j] === undefined) return hideTip();
    const x = rows[i][j];
    showTip(event, [["query #" + (i + 1), m.rowLabels[i], true], ["key #" + (j + 1), m.colLabels[j], true],
      ["value", x === -Infinity ? "\u2212\u221E (masked)" : fmt(x, 4)]]);
  });
  canvas.addEventListener("mouseleave", hideTip);
}
// Labels beside a small matrix, one per cell where they fit (every few cells where they do
// not): its rows' on the left, its columns' above, read upwards; all of them in data-labels.
function axisLabels(names, cell, across) {
  const box = el("div", across ? "pipe-cols" : "pipe-rows");
  box.dataset.labels = JSON.stringify(names.map(String));
  const every = Math.max(1, Math.ceil(11 / cell));
  names.forEach((name, i) => {
    const span = box.appendChild(el("span", null, i % every ? "" : shorten(label(name), 10)));
    span.title = String(name);
    span.style[across ? "width" : "height"] = cell + "px";
    span.style.fontSize = Math.max(8, Math.min(11, cell - 2)) + "px";
  });
  return box;
}
// One figure of the pipeline: a caption, the matrix with its row and column labels.
function matrixFigure(m, name, caption, rows, labels, colour) {
  const figure = el("figure", "pipe-step");
  figure.dataset.step = name;
  figure.appendChild(el("figcaption", null, caption));
  const grid = figure.appendChild(el("div", "pipe-grid"));
  const canvas = el("canvas");
  const cell = smallCell(rows.length, rows[0].length);
  grid.append(el("span"), axisLabels(labels[1], cell, true), axisLabels(labels[0], cell, false), canvas);
  drawSmallMatrix(canvas, rows, colour);
  pipeTooltip(canvas, { rowLabels: labels[0], colLabels: labels[1] }, rows);
  return figure;
}
function drawPipeline(m) {
  const box = $("pipe-steps");
  box.textContent = "";
  const finite = m.steps.slice(0, -1).flatMap(([, , rows]) => rows.flat()).filter(isFinite);
  const scale = Math.max(1e-6, ...finite.map(Math.abs));
  m.steps.forEach(([name, caption, rows], k) => {
    if (k) box.appendChild(el("span", "pipe-arrow", "\u2192"));
    // weights: each row on its own scale (÷ its max), so a flat row reads as flat, not as
    // "nothing", however high τ spreads it; the row's max and entropy stand beside it
    const colour = name === "weights" ? (x, i) => seqColour(x, m.stats[i].max || 1)
      : (x) => divColour(x, scale);
    box.appendChild(matrixFigure(m, name, caption, rows, [m.rowLabels, m.colLabels], colour));
    if (name === "weights") box.appendChild(statsTable(m.stats));
  });
  const legends = box.appendChild(el("div", "pipe-legends"));
  for (const [min, max, colour, title] of [[-scale, scale, (v) => divColour(v, scale), "score"],
    [0, 1, (v) => seqColour(v, 1), "weight \u00F7 its row's max"]]) {
    const canvas = legends.appendChild(el("canvas"));
    Object.assign(canvas, { width: 280, height: 36 });
    drawLegend(canvas, min, max, colour, title);
  }
}

// Weights × V = Z: each output row the weighted sum of the value rows (Vaswani et al. 2017,
// eq. 1's last product; an RNN's c_t = Σ_s a_t(s) h̄_s), beside the model's own at τ = 1.
function productOf(weights, values) {
  return weights.map((row) => {
    const out = new Array(values[0].length).fill(0);
    row.forEach((w, j) => addInto(out, values[j], w));
    return out;
  });
}
function drawProduct(m) {
  const box = $("pipe-product");
  box.textContent = "";
  $("pipe-product-note").hidden = !!m.values;
  if (!m.values) return;
  m.output = productOf(m.weights, m.values);
  const dims = m.values[0].map((_, d) => d + 1);
  const signed = (rows) => { const max = Math.max(1e-6, ...rows.flat().map(Math.abs)); return (x) => divColour(x, max); };
  const z = m.valueName === "V" ? "Z = weights \u00D7 V" : "c_t = weights \u00D7 h\u0304_s";
  box.append(el("span", "pipe-arrow", "weights \u00D7"),
    matrixFigure(m, "values", m.valueName + " (rows: the keys, columns: dimensions)", m.values, [m.colLabels, dims], signed(m.values)),
    el("span", "pipe-arrow", "="),
    matrixFigure(m, "output", z + " (rows: the queries)", m.output, [m.rowLabels, dims], signed(m.output)));
  if (m.model) {
    const diff = Math.max(...m.output.flatMap((row, i) => row.map((x, d) => Math.abs(x - m.model[i][d]))));
    const note = box.appendChild(el("p", "note-inline pipe-diff"));
    note.dataset.part = "pipe-model-diff";
    note.dataset.value = String(diff);
    const transformer = m.valueName === "V";
    note.textContent = "max |\u0394| from the model's own " + (transformer ? "head outputs" : "c_t") +
      " (computed at \u03C4 = 1" + (transformer ? ", with \u221Ad_k" : "") + "): " + diff.toExponential(1);
  }
}

// ---- the view ----------------------------------------------------------------------------
function renderPipeline() {
  const kind = $("pipe-kind").value || "cross";
  $("pipe-explain").textContent = PIPE_EXPLAIN[isRNN ? "rnn" : "transformer"];
  let ok = available(kind) && (!isRNN || !!(hyp().rnn && hyp().rnn.scores));
  setAvailable("pipe", ok, missingMessage(kind));
  if (!ok) return;
  fillSelect($("pipe-layer"), layerOptions(layerCount(kind)), layerCount(kind) - 1);
  fillSelect($("pipe-head"), headOptions(headCount(kind, 0)).filter(([value]) => value !== "avg"));
  const tau = temperature();
  $("pipe-tau").textContent = "\u03C4 = " + fmt(tau, 2);
  const m = isRNN ? rnnPipeline(tau) : transformerPipeline(kind, +$("pipe-layer").value, +$("pipe-head").value, tau);
  ok = !!m;
  const advice = model.hf ? hfAdvice(kind, +$("pipe-layer").value, +$("pipe-head").value, null).text : INTERNALS_MISSING;
  setAvailable("pipe", ok, advice);
  if (ok) m.stats = rowStats(m.weights);
  state.pipeline = m;
  if (ok) {
    drawPipeline(m);
    drawProduct(m);
  }
}
function initPipeline() {
  const kinds = Object.keys(KINDS).filter(available);
  fillSelect($("pipe-kind"), kinds.map((k) => [k, KINDS[k].title]));
  $("pipe-unscaled-label").hidden = isRNN;
  for (const name of ["pipe-kind", "pipe-layer", "pipe-head", "pipe-unscaled"]) {
    $(name).addEventListener("change", () => invalidate(["pipe"]));
  }
  $("pipe-temperature").addEventListener("input", () => invalidate(["pipe"]));
}
