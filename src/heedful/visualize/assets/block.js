// The Transformer's block, drawn: one encoder layer as boxes and arrows, each box opening the
// model's own numbers for every source position (trace.internals.block), and the positional
// encoding the model adds: its table, a few of its dimensions as curves, and PE·PEᵀ.

const blockData = () => (trace.internals && trace.internals.block) || null;
const headSize = () => blockData().tokens[0].length / (model.heads || 1);

// The boxes of one layer in the model's order: [id, title, formula]. Post-norm (the paper):
// x → attention → Add & Norm → FFN → Add & Norm; pre-norm: Norm → attention → Add, and so on.
function blockBoxes(block, layer) {
  const input = layer === 0 ? ["embed", "x = embedding \u00D7 \u221Ad_model + PE", "the layer's input"]
    : ["x", "x", "the output of layer " + layer];
  const heads = ["z", "Multi-head attention", "z_h = softmax(Q_h K_h\u1D40 / \u221Ad_k) V_h, one per head"];
  const concat = ["attn_out", "Concat \u00B7 W_O", "concat(z_1 \u2026 z_H) W_O\u1D40 + b_O"];
  const ff = ["ff_out", "Feed-forward", "max(0, h W_1 + b_1) W_2 + b_2"];
  if (block.norm === "pre") {
    return [input, ["attn_norm", "LayerNorm", "LN(x), what attention reads"], heads, concat,
      ["ff_norm", "Add, LayerNorm", "h = x + attention; LN(h), what the feed-forward reads"], ff,
      ["out", "Add", "h + feed-forward"]];
  }
  return [input, heads, concat, ["attn_norm", "Add & LayerNorm", "LN(x + attention)"], ff,
    ["ff_norm", "Add & LayerNorm", "LN(h + feed-forward)"]];
}
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
  state.blockBox = id;
  for (const box of $("block-diagram").querySelectorAll(".block-box")) {
    box.setAttribute("aria-pressed", String(box.dataset.box === id));
  }
  const out = $("block-numbers");
  out.textContent = "";
  for (const [name, title, matrix] of boxTables(block, layer, id)) {
    out.appendChild(numberTable(name, title, matrix));
  }
}
function renderBlockDiagram() {
  const block = blockData();
  const layer = +$("block-layer").value;
  const diagram = $("block-diagram");
  diagram.textContent = "";
  const boxes = blockBoxes(block, layer);
  boxes.forEach(([id, title, formula], i) => {
    if (i) diagram.appendChild(el("div", "block-arrow", "\u2193"));
    const box = el("button", "block-box");
    box.type = "button";
    box.dataset.box = id;
    box.append(el("b", null, title), el("span", "formula", formula));
    box.addEventListener("click", () => openBox(id));
    diagram.appendChild(box);
  });
  const keep = boxes.some(([id]) => id === state.blockBox) ? state.blockBox : boxes[0][0];
  openBox(keep);
}

// ---- the positional encoding --------------------------------------------------------------
// A matrix drawn as coloured cells; the exact numbers travel in data-matrix.
function drawMatrix(canvas, matrix, colour) {
  const rows = matrix.length, cols = (matrix[0] || []).length;
  const cell = Math.max(3, Math.min(14, Math.floor(480 / Math.max(rows, cols, 1))));
  const ctx = sizeCanvas(canvas, cols * cell, rows * cell);
  let max = 0;
  for (const row of matrix) for (const v of row) max = Math.max(max, Math.abs(v));
  matrix.forEach((row, i) => row.forEach((v, j) => {
    ctx.fillStyle = colour(v, max || 1);
    ctx.fillRect(j * cell, i * cell, cell, cell);
  }));
  canvas.dataset.matrix = JSON.stringify(matrix);
  canvas.onmousemove = (event) => {
    const box = canvas.getBoundingClientRect();
    const i = Math.floor((event.clientY - box.top) / cell), j = Math.floor((event.clientX - box.left) / cell);
    if (i < rows && j < cols) showTip(event, [["row ", String(i)], ["column ", String(j)], ["value ", fmt(matrix[i][j], 4)]]);
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
function drawCurves(target, pe) {
  const P = pe.length, w = 480, h = 150, pad = 24;
  target.textContent = "";
  target.setAttribute("viewBox", "0 0 " + w + " " + h);
  target.setAttribute("width", w);
  target.setAttribute("height", h);
  const x = (p) => pad + (p / Math.max(P - 1, 1)) * (w - 2 * pad);
  const y = (v) => h / 2 - v * (h / 2 - pad / 2);
  target.appendChild(svg("line", { x1: pad, x2: w - pad, y1: y(0), y2: y(0), stroke: "#c8cfdc" }));
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
  drawMatrix($("pe-table"), pe, divColour);
  drawCurves($("pe-curves"), pe);
  drawMatrix($("pe-products"), positionProducts(pe), divColour);
  $("pe-explain").textContent = "The first " + pe.length + " positions (rows) \u00D7 " +
    (pe[0] || []).length + " dimensions (columns) of the encoding the model adds to the scaled " +
    "embeddings; below, a few dimensions as curves over the positions, and PE\u00B7PE\u1D40: " +
    "row i, column j is PE[i]\u00B7PE[j], how alike two positions look to the model.";
}
function renderBlock() {
  const block = blockData();
  const ok = model.arch === "transformer" && block !== null;
  setAvailable("block", ok, model.arch !== "transformer" ? "This view is for Transformer models."
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
