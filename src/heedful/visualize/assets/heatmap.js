// Views: alignment matrix, encoder and decoder self-attention, drawn as heatmaps on a canvas.

// ---- heatmap on a canvas (10,000 cells are 10,000 fillRects, not 10,000 DOM nodes) ---------
// Where the cells go: room on the left and top for the labels, cells that fill the width.
function heatmapGrid(canvas, ctx, rows, rowLabs, colLabs, axes) {
  const nRows = rows.length;
  const nCols = nRows ? rows[0].length : colLabs.length;
  ctx.font = FONT;
  const width = (labs) => labs.reduce((w, t) => Math.max(w, ctx.measureText(shorten(label(t))).width), 0);
  const left = 22 + width(rowLabs) + 8;
  // cells fill the width available (the figure's box; 680 px before layout), 5 to 32 px each
  const room = Math.max(480, (canvas.parentElement.clientWidth || 720) - left - 40);
  const cell = Math.max(5, Math.min(32, Math.floor(room / Math.max(nCols, 1))));
  const every = Math.max(1, Math.ceil(13 / cell)); // small cells: label every k-th token
  const upright = colLabs.every((t) => label(t).length <= 2) && cell >= 14;
  const top = 20 + (upright ? 16 : width(colLabs)) + 8;
  return { left, top, cell, every, upright, nRows, nCols, rows, rowLabs, colLabs, axes };
}
function drawCells(ctx, g, scaleMax) {
  const gap = g.cell >= 14 ? 1 : 0;
  for (let i = 0; i < g.nRows; i++) {
    const row = g.rows[i];
    for (let j = 0; j < g.nCols; j++) {
      ctx.fillStyle = seqColour(+row[j] || 0, scaleMax);
      ctx.fillRect(g.left + j * g.cell, g.top + i * g.cell, g.cell - gap, g.cell - gap);
    }
  }
}
function drawTickLabels(ctx, g) {
  const { left, top, cell } = g;
  ctx.fillStyle = "#1d2433";
  ctx.font = FONT;
  ctx.textBaseline = "middle";
  ctx.textAlign = "right";
  for (let i = 0; i < g.nRows; i += g.every) {
    ctx.fillText(shorten(label(g.rowLabs[i])), left - 6, top + i * cell + cell / 2);
  }
  for (let j = 0; j < g.nCols; j += g.every) {
    const x = left + j * cell + cell / 2;
    if (g.upright) {
      ctx.textAlign = "center";
      ctx.fillText(label(g.colLabs[j]), x, top - 12);
    } else {
      ctx.save();
      ctx.translate(x, top - 6);
      ctx.rotate(-Math.PI / 2);
      ctx.textAlign = "left";
      ctx.fillText(shorten(label(g.colLabs[j])), 0, 0);
      ctx.restore();
    }
  }
}
function drawAxisTitles(ctx, g) {
  ctx.font = TITLE_FONT;
  ctx.fillStyle = "#5b6478";
  ctx.textAlign = "center";
  ctx.fillText(g.axes.col + " \u2192", g.left + (g.nCols * g.cell) / 2, 9);
  ctx.save();
  ctx.translate(9, g.top + (g.nRows * g.cell) / 2);
  ctx.rotate(-Math.PI / 2);
  ctx.fillText("\u2190 " + g.axes.row, 0, 0);
  ctx.restore();
}
function drawHeatmap(canvas, rows, rowLabs, colLabs, scaleMax, axes) {
  const g = heatmapGrid(canvas, canvas.getContext("2d"), rows, rowLabs, colLabs, axes);
  const w = g.left + g.nCols * g.cell + 12;
  const h = g.top + g.nRows * g.cell + 12;
  const ctx = sizeCanvas(canvas, w, h);
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, w, h);
  drawCells(ctx, g, scaleMax);
  drawTickLabels(ctx, g);
  drawAxisTitles(ctx, g);
  canvas._grid = g; // for the tooltip
}
// The cell under the mouse, [row, column], or null off the cells.
function cellAt(canvas, event) {
  const g = canvas._grid;
  if (!g) return null;
  const box = canvas.getBoundingClientRect();
  const x = event.clientX - box.left - g.left;
  const y = event.clientY - box.top - g.top;
  const i = Math.floor(y / g.cell);
  const j = Math.floor(x / g.cell);
  return x < 0 || y < 0 || i >= g.nRows || j >= g.nCols ? null : [i, j];
}
function attachHeatmapTooltip(canvas) {
  canvas.addEventListener("mousemove", (event) => {
    const cell = cellAt(canvas, event);
    if (!cell) return hideTip();
    const [i, j] = cell, g = canvas._grid;
    showTip(event, [
      [g.axes.col + " #" + (j + 1), g.colLabs[j], true],
      [g.axes.row + " #" + (i + 1), g.rowLabs[i], true],
      ["weight", fmt(+g.rows[i][j], 4)],
    ]);
  });
  canvas.addEventListener("mouseleave", hideTip);
}

// ---- views: alignment matrix, encoder and decoder self-attention ---------------------------
const HEATMAPS = { matrix: "cross", enc: "enc", dec: "dec" };
function renderHeatmapView(name) {
  const kind = HEATMAPS[name];
  const ok = available(kind);
  setAvailable(name, ok, missingMessage(kind));
  if (!ok) return;
  const layer = +$(name + "-layer").value;
  const rows = matrixRows(kind, layer, $(name + "-head").value);
  const max = $(name + "-stretch").checked ? Math.max(1e-6, maxOf(rows)) : 1;
  drawHeatmap($(name + "-canvas"), rows, rowLabels(kind), colLabels(kind), max, KINDS[kind]);
  if (name === "matrix") drawLocalWindows($(name + "-canvas"));
  drawLegend($(name + "-legend"), 0, max, (v) => seqColour(v, max), "attention weight");
}
// Luong's local attention (§3.2): on each output row of the alignment matrix, the window
// [p_t - D, p_t + D] the step could attend to, outlined, and p_t itself, a dot (the trace's
// model.window and the hypothesis's rnn.centers; data-windows holds [low, high, p_t] per row).
function drawLocalWindows(canvas) {
  const h = hyp(), D = model.window;
  const centers = h && h.rnn && h.rnn.centers;
  delete canvas.dataset.windows;
  if (!centers || !D) return;
  const g = canvas._grid, ctx = canvas.getContext("2d");
  const windows = centers.map((p) =>
    [Math.max(0, Math.ceil(p - D - 1e-9)), Math.min(g.nCols - 1, Math.floor(p + D + 1e-9)), p]);
  ctx.save();
  windows.forEach(([low, high, p], i) => {
    const y = g.top + i * g.cell;
    ctx.strokeStyle = "#e39b00";
    ctx.lineWidth = 1.5;
    ctx.strokeRect(g.left + low * g.cell + 0.75, y + 0.75, (high - low + 1) * g.cell - 1.5, g.cell - 1.5);
    ctx.fillStyle = "#c0504d"; // p_t, a real-valued position: cell s spans [s - 0.5, s + 0.5]
    ctx.beginPath();
    ctx.arc(g.left + (p + 0.5) * g.cell, y + g.cell / 2, Math.max(2, g.cell / 6), 0, 2 * Math.PI);
    ctx.fill();
  });
  ctx.restore();
  canvas.dataset.windows = JSON.stringify(windows);
}
function initHeatmaps() {
  for (const [name, kind] of Object.entries(HEATMAPS)) {
    if (!available(kind)) continue;
    // the last layer's cross-attention is usually the most alignment-like
    fillSelect($(name + "-layer"), layerOptions(layerCount(kind)), layerCount(kind) - 1);
    fillSelect($(name + "-head"), headOptions(headCount(kind, 0)));
    for (const part of ["-layer", "-head", "-stretch"]) {
      $(name + part).addEventListener("change", () => invalidate([name]));
    }
    attachHeatmapTooltip($(name + "-canvas"));
    if (name === "matrix") {
      $(name + "-canvas").addEventListener("mousemove", (event) => {
        const cell = cellAt($(name + "-canvas"), event);
        if (cell) linkStep(cell[0]);
      });
    }
    // a click opens the calculation of the clicked cell; on an average of heads, first each
    // head's weight of that key (their mean is the cell), then head 1's calculation
    $(name + "-canvas").addEventListener("click", (event) => {
      const cell = cellAt($(name + "-canvas"), event);
      const head = $(name + "-head").value, mean = head === "avg";
      if (cell) {
        const clicked = { key: cell[1], mean };
        openCalc(kind, +$(name + "-layer").value, mean ? 0 : +head, cell[0], clicked);
      }
    });
  }
}
