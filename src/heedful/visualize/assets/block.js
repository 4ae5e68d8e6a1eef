// The Transformer's block, drawn: one encoder layer as boxes and arrows (block_diagram.js),
// each box opening the model's own numbers for every source position (trace.internals.block),
// and the positional encoding the model adds: its table, a few of its dimensions as curves,
// and PE·PEᵀ.

const blockData = () => (trace.internals && trace.internals.block) || null;
const headSize = () => blockData().tokens[0].length / (model.heads || 1);

// The tables a box opens: [name, title, matrix [S][n]].
function boxTables(block, layer, id) {
  const data = block.layers[layer];
  const S = sourceTokens.length;
  if (id === "embed") {
    const scaled = block.tokens.map((row) => row.map((v) => v * block.scale));
    return [["tokens-scaled", "embedding \u00D7 \u221Ad_model (\u00D7 " + fmt(block.scale, 3) + ")", scaled],
      ["positional", "PE (the positional encoding added)", block.positional.slice(0, S)],
      ["x", "x = their sum, the layer's input", data.x]];
  }
  if (id === "z") {
    const dk = headSize();
    return Array.from({ length: model.heads }, (_, h) =>
      ["z-" + h, "z of head " + (h + 1), data.z.map((row) => row.slice(h * dk, (h + 1) * dk))]);
  }
  if (id === "attn_norm" || id === "ff_norm") {
    return [[id + "_in", "LayerNorm's input", data[id + "_in"]],
      [id + "_out", "LayerNorm's output", data[id + "_out"]]];
  }
  const names = { x: "x, the layer's input", attn_out: "W_O's output", ff_out: "feed-forward's output",
    out: "the layer's output" };
  return [[id, names[id], data[id]]];
}
// A matrix as a table, rows the source tokens, each cell coloured (blue < 0 < red) and
// holding its exact number in data-value.
function numberTable(name, title, matrix) {
  const wrap = el("div", "block-table-wrap");
  wrap.appendChild(el("h4", null, title));
  const table = el("table", "block-table");
  table.dataset.name = name;
  let max = 0;
  for (const row of matrix) for (const v of row) max = Math.max(max, Math.abs(v));
  const headRow = table.insertRow();
  headRow.appendChild(el("th", null, ""));
  (matrix[0] || []).forEach((_, j) => headRow.appendChild(el("th", null, String(j))));
  matrix.forEach((row, s) => {
    const tr = table.insertRow();
    tr.appendChild(el("th")).appendChild(tokenChip(sourceTokens[s]));
    for (const v of row) {
      const cell = el("td", null, fmt(v, 2));
      cell.dataset.value = String(v);
      cell.style.background = divColour(v, max || 1);
      cell.title = String(v);
      tr.appendChild(cell);
    }
  });
  wrap.appendChild(table);
  return wrap;
}
function openBox(id) {
  const block = blockData();
  const layer = +$("block-layer").value;
  pressBox(id);
  const out = $("block-numbers");
  out.textContent = "";
  for (const [name, title, matrix] of boxTables(block, layer, id)) {
    out.appendChild(numberTable(name, title, matrix));
  }
}
// ---- the positional encoding --------------------------------------------------------------
// Every figure has axes: what its rows and columns are, and their indices every few cells.
const AXIS_LEFT = 46, AXIS_TOP = 30;
function ticks(n, cell) {  // 0, step, 2·step, …: labels at least 22 px apart
  const step = Math.max(1, Math.ceil(22 / cell)), out = [];
  for (let i = 0; i < n; i += step) out.push(i);
  return out;
}
function drawAxes(ctx, rows, cols, cell, axes) {
  const xticks = ticks(cols, cell), yticks = ticks(rows, cell);
  ctx.fillStyle = "#4a5568";
  ctx.font = "10px sans-serif";
  ctx.textAlign = "center";
  ctx.textBaseline = "bottom";
  for (const j of xticks) ctx.fillText(String(j), AXIS_LEFT + (j + 0.5) * cell, AXIS_TOP - 2);
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  for (const i of yticks) ctx.fillText(String(i), AXIS_LEFT - 4, AXIS_TOP + (i + 0.5) * cell);
  ctx.textAlign = "left";
  ctx.textBaseline = "top";  // rows downwards, columns across, named in the corner
  ctx.fillText("\u2193 " + axes.y + ",  " + axes.x + " \u2192", 2, 2);
  return { x: axes.x, y: axes.y, xticks, yticks };
}
// A matrix drawn as coloured cells under its axes; the exact numbers travel in data-matrix.
function drawMatrix(canvas, matrix, colour, axes) {
  const rows = matrix.length, cols = (matrix[0] || []).length;
  const cell = Math.max(3, Math.min(14, Math.floor(480 / Math.max(rows, cols, 1))));
  const ctx = sizeCanvas(canvas, AXIS_LEFT + cols * cell, AXIS_TOP + rows * cell);
  let max = 0;
  for (const row of matrix) for (const v of row) max = Math.max(max, Math.abs(v));
  matrix.forEach((row, i) => row.forEach((v, j) => {
    ctx.fillStyle = colour(v, max || 1);
    ctx.fillRect(AXIS_LEFT + j * cell, AXIS_TOP + i * cell, cell, cell);
  }));
  canvas.dataset.axes = JSON.stringify(drawAxes(ctx, rows, cols, cell, axes));
  canvas.dataset.matrix = JSON.stringify(matrix);
  canvas.onmousemove = (event) => {
    const box = canvas.getBoundingClientRect();
    const i = Math.floor((event.clientY - box.top - AXIS_TOP) / cell);
    const j = Math.floor((event.clientX - box.left - AXIS_LEFT) / cell);
    if (i >= 0 && j >= 0 && i < rows && j < cols) {
      showTip(event, [[axes.y + " ", String(i)], [axes.x + " ", String(j)], ["value ", fmt(matrix[i][j], 4)]]);
    } else hideTip();
  };
  canvas.onmouseleave = hideTip;
}
// PE·PEᵀ: how alike two positions' encodings are, computed here from the trace's table.
function positionProducts(pe) {
  return pe.map((a) => pe.map((b) => a.reduce((sum, v, k) => sum + v * b[k], 0)));
}
// The dimensions drawn as curves: the first pair, two from the middle and the last.
function curveDimensions(d) {
  const picks = [0, 1, Math.floor(d / 2) - (Math.floor(d / 2) % 2), Math.floor(d / 2) + 1 - (Math.floor(d / 2) % 2), d - 1];
  return Array.from(new Set(picks.filter((k) => k >= 0 && k < d))).sort((a, b) => a - b);
}
function svgText(target, attrs, text) {
  const node = svg("text", { fill: "#4a5568", "font-size": 10, ...attrs });
  node.textContent = text;
  return target.appendChild(node);
}
// The curves' axes: PE from −1 to 1 upwards, the positions along the bottom.
function curveAxes(target, P, x, y, w, plot) {
  for (const v of [-1, 0, 1]) {
    target.appendChild(svg("line", { x1: x(0), x2: w - 24, y1: y(v), y2: y(v), stroke: v ? "#e6e9f0" : "#c8cfdc" }));
    svgText(target, { x: x(0) - 4, y: y(v) + 3, "text-anchor": "end", "data-axis": "y" }, v < 0 ? "\u22121" : String(v));
  }
  const step = Math.max(1, Math.ceil(P / 8));
  for (let p = 0; p < P; p += step) {
    svgText(target, { x: x(p), y: plot + 12, "text-anchor": "middle", "data-axis": "x" }, String(p));
  }
  svgText(target, { x: x(0), y: plot + 26 }, "PE[pos, d] (up) against position pos \u2192");
}
function drawCurves(target, pe) {
  const P = pe.length, w = 480, plot = 150, h = plot + 30, pad = 24, left = 40;
  target.textContent = "";
  target.setAttribute("viewBox", "0 0 " + w + " " + h);
  target.setAttribute("width", w);
  target.setAttribute("height", h);
  const x = (p) => left + (p / Math.max(P - 1, 1)) * (w - left - pad);
  const y = (v) => plot / 2 - v * (plot / 2 - pad / 2);
  curveAxes(target, P, x, y, w, plot);
  const dims = curveDimensions((pe[0] || []).length);
  target.dataset.dims = JSON.stringify(dims);
  dims.forEach((k, n) => {
    const points = pe.map((row, p) => x(p).toFixed(1) + "," + y(row[k]).toFixed(1)).join(" ");
    const line = svg("polyline", { points, fill: "none", stroke: headColour(n), "stroke-width": 1.6 });
    line.dataset.dim = String(k);
    line.appendChild(svg("title", {})).textContent = "dimension " + k;
    target.appendChild(line);
    const tag = svg("text", { x: w - pad + 2, y: 12 + n * 13, fill: headColour(n), "font-size": 11 });
    tag.textContent = "d" + k;
    target.appendChild(tag);
  });
}
function renderPositional() {
  const pe = blockData().positional;
  drawMatrix($("pe-table"), pe, divColour, { x: "dimension d", y: "position pos" });
  drawCurves($("pe-curves"), pe);
  drawMatrix($("pe-products"), positionProducts(pe), divColour, { x: "position j", y: "position i" });
  $("pe-explain").textContent = "The first " + pe.length + " positions (rows) \u00D7 " +
    (pe[0] || []).length + " dimensions (columns) of the encoding the model adds to the scaled " +
    "embeddings; below, a few dimensions as curves over the positions, and PE\u00B7PE\u1D40: " +
    "row i, column j is PE[i]\u00B7PE[j], how alike two positions look to the model.";
}
function renderBlock() {
  const block = blockData();
  const ok = model.arch === "transformer" && block !== null;
  setAvailable("block", ok, model.arch !== "transformer" ? "This view is for Transformer models."
    : model.hf ? "This view draws heedful's own Transformer layer from the numbers its trace " +
      "records; a Hugging Face model's trace (" + model.hf + ") has none. `heedful explain " +
      "MODEL_DIR SENTENCE --kind encoder --layer L` prints what a layer's W_Q reads and one " +
      "head's attention from that model's own numbers."
    : "This view needs the trace's internals.block (build_trace(..., internals=True)).");
  if (!ok) return;
  renderBlockDiagram();
  renderPositional();
}
function initBlock() {
  const block = blockData();
  $("tab-block").classList.toggle("unavailable", model.arch !== "transformer" || block === null);
  if (!block) return;
  const select = $("block-layer");
  block.layers.forEach((_, i) => select.appendChild(el("option", null, "encoder layer " + (i + 1))).setAttribute("value", i));
  select.addEventListener("change", renderBlockDiagram);
  $("block-norm").textContent = block.norm === "pre" ? "pre-norm: LayerNorm before each sublayer, the residual added after"
    : "post-norm (as in the paper): each sublayer's output added to its input, then LayerNorm";
}
