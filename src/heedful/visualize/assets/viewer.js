/* heedful attention viewer: draws the trace embedded in #trace-data (docs/trace-schema.md).
 * Vanilla JavaScript, canvas and SVG; it fetches nothing. Views render lazily: only the visible
 * tab is drawn, and head averages are computed on first use and cached. */
(function () {
  "use strict";

  const $ = (id) => document.getElementById(id);
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

  const state = { hyp: 0, step: 0, timer: null, tab: "matrix", dirty: new Set(), focus: null };

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
  function tokenChip(tok, className) {
    const chip = el("span", "tok" + (className ? " " + className : ""), label(tok));
    chip.title = String(tok);
    return chip;
  }

  // ---- colours ------------------------------------------------------------------------------
  function makeLut(stops) {
    const lut = [];
    for (let i = 0; i < 256; i++) {
      const x = (i / 255) * (stops.length - 1);
      const k = Math.min(Math.floor(x), stops.length - 2);
      const f = x - k;
      const rgb = [0, 1, 2].map((c) => Math.round(stops[k][c] + (stops[k + 1][c] - stops[k][c]) * f));
      lut.push("rgb(" + rgb.join(",") + ")");
    }
    return lut;
  }
  // viridis for weights (matplotlib's default, as in heatmap.py); blue-white-red for signed values
  const SEQUENTIAL = makeLut([
    [68, 1, 84], [72, 40, 120], [62, 73, 137], [49, 104, 142], [38, 130, 142],
    [31, 158, 137], [53, 183, 121], [109, 205, 89], [180, 222, 44], [253, 231, 37],
  ]);
  const DIVERGING = makeLut([
    [33, 102, 172], [103, 169, 207], [209, 229, 240], [247, 247, 247],
    [253, 219, 199], [239, 138, 98], [178, 24, 43],
  ]);
  const index255 = (x) => (x >= 0 ? Math.min(255, Math.round(x * 255)) : 0);
  const seqColour = (v, max) => SEQUENTIAL[index255(v / max)];
  const divColour = (v, max) => DIVERGING[index255((v / max + 1) / 2)];
  const HEAD_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
    "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"];
  const headColour = (h) => HEAD_COLOURS[h] || "hsl(" + ((h * 137.5) % 360) + ",65%,42%)";

  // ---- the attention matrices ---------------------------------------------------------------
  // kind "cross": output × source; "enc": source × source; "dec": output × output.
  // Rows are queries, columns keys; every row is one attention distribution.
  const KINDS = {
    cross: { title: "cross-attention (output \u2192 source)", row: "output", col: "source" },
    enc: { title: "encoder self-attention", row: "query (source)", col: "key (source)" },
    dec: { title: "decoder self-attention", row: "query (output)", col: "key (output)" },
  };
  function available(kind) {
    const h = hyp();
    if (kind === "enc") return Array.isArray(trace.encoder_self_attention);
    if (kind === "dec") return !!h && Array.isArray(h.decoder_self_attention);
    return !!h && Array.isArray(h.cross_attention) && h.cross_attention.length > 0;
  }
  function layerCount(kind) {
    if (kind === "enc") return trace.encoder_self_attention.length;
    if (kind === "dec") return hyp().decoder_self_attention.length;
    return hyp().cross_attention[0].length;
  }
  function headCount(kind, layer) {
    if (kind === "enc") return trace.encoder_self_attention[layer].length;
    if (kind === "dec") return hyp().decoder_self_attention[layer].length;
    return hyp().cross_attention[0][layer].length;
  }
  function headRows(kind, layer, head) {
    if (kind === "enc") return trace.encoder_self_attention[layer][head];
    if (kind === "dec") return hyp().decoder_self_attention[layer][head];
    return hyp().cross_attention.map((step) => step[layer][head]);
  }
  const averages = new Map(); // computed on first use: a 6-layer, 8-head trace needs few of them
  function averageRows(kind, layer) {
    const key = kind + "|" + (kind === "enc" ? "" : state.hyp) + "|" + layer;
    if (averages.has(key)) return averages.get(key);
    const heads = headCount(kind, layer);
    let rows = null;
    for (let head = 0; head < heads; head++) {
      const part = headRows(kind, layer, head);
      if (!rows) rows = part.map((row) => new Float32Array(row.length));
      part.forEach((row, i) => {
        const out = rows[i];
        for (let j = 0; j < row.length; j++) out[j] += (+row[j] || 0) / heads;
      });
    }
    averages.set(key, rows);
    return rows;
  }
  const matrixRows = (kind, layer, head) =>
    head === "avg" ? averageRows(kind, layer) : headRows(kind, layer, +head);
  const rowLabels = (kind) => (kind === "enc" ? sourceTokens : hyp().tokens);
  const colLabels = (kind) => (kind === "cross" ? sourceTokens : rowLabels(kind));
  function maxOf(rows) {
    let max = 0;
    for (const row of rows) for (let j = 0; j < row.length; j++) if (row[j] > max) max = row[j];
    return max;
  }

  // Keeps the current choice when it still exists, else takes `fallback` (or the first option);
  // a selector with a single choice is hidden with its label.
  function fillSelect(select, options, fallback) {
    const old = select.value;
    select.textContent = "";
    for (const [value, text] of options) {
      const option = el("option", null, text);
      option.value = String(value);
      select.appendChild(option);
    }
    const values = options.map(([value]) => String(value));
    if (values.includes(old)) select.value = old;
    else if (values.length) select.value = values.includes(String(fallback)) ? String(fallback) : values[0];
    const wrapper = select.closest("label");
    if (wrapper) wrapper.hidden = options.length < 2;
  }
  const layerOptions = (n) => Array.from({ length: n }, (_, i) => [i, "layer " + (i + 1)]);
  function headOptions(n) {
    if (n === 1) return [[0, "the one head"]];
    const heads = Array.from({ length: n }, (_, i) => [i, "head " + (i + 1)]);
    return [["avg", "average of " + n + " heads"]].concat(heads);
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

  // ---- heatmap on a canvas (10,000 cells are 10,000 fillRects, not 10,000 DOM nodes) ---------
  function drawHeatmap(canvas, rows, rowLabs, colLabs, scaleMax, axes) {
    const nRows = rows.length;
    const nCols = nRows ? rows[0].length : colLabs.length;
    const ctx = canvas.getContext("2d");
    ctx.font = FONT;
    const width = (labs) => labs.reduce((w, t) => Math.max(w, ctx.measureText(shorten(label(t))).width), 0);
    const left = 22 + width(rowLabs) + 8;
    // cells fill the width available (the figure's box; 680 px before layout), 5 to 32 px each
    const room = Math.max(480, (canvas.parentElement.clientWidth || 720) - left - 40);
    const cell = Math.max(5, Math.min(32, Math.floor(room / Math.max(nCols, 1))));
    const every = Math.max(1, Math.ceil(13 / cell)); // small cells: label every k-th token
    const upright = colLabs.every((t) => label(t).length <= 2) && cell >= 14;
    const top = 20 + (upright ? 16 : width(colLabs)) + 8;
    const w = left + nCols * cell + 12;
    const h = top + nRows * cell + 12;
    const dpr = window.devicePixelRatio || 1;
    canvas.width = Math.ceil(w * dpr);
    canvas.height = Math.ceil(h * dpr);
    canvas.style.width = w + "px";
    canvas.style.height = h + "px";
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, w, h);
    const gap = cell >= 14 ? 1 : 0;
    for (let i = 0; i < nRows; i++) {
      const row = rows[i];
      for (let j = 0; j < nCols; j++) {
        ctx.fillStyle = seqColour(+row[j] || 0, scaleMax);
        ctx.fillRect(left + j * cell, top + i * cell, cell - gap, cell - gap);
      }
    }
    ctx.fillStyle = "#1d2433";
    ctx.font = FONT;
    ctx.textBaseline = "middle";
    ctx.textAlign = "right";
    for (let i = 0; i < nRows; i += every) {
      ctx.fillText(shorten(label(rowLabs[i])), left - 6, top + i * cell + cell / 2);
    }
    for (let j = 0; j < nCols; j += every) {
      const x = left + j * cell + cell / 2;
      if (upright) {
        ctx.textAlign = "center";
        ctx.fillText(label(colLabs[j]), x, top - 12);
      } else {
        ctx.save();
        ctx.translate(x, top - 6);
        ctx.rotate(-Math.PI / 2);
        ctx.textAlign = "left";
        ctx.fillText(shorten(label(colLabs[j])), 0, 0);
        ctx.restore();
      }
    }
    ctx.font = TITLE_FONT;
    ctx.fillStyle = "#5b6478";
    ctx.textAlign = "center";
    ctx.fillText(axes.col + " \u2192", left + (nCols * cell) / 2, 9);
    ctx.save();
    ctx.translate(9, top + (nRows * cell) / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.fillText("\u2190 " + axes.row, 0, 0);
    ctx.restore();
    canvas._grid = { left, top, cell, nRows, nCols, rows, rowLabs, colLabs, axes };
  }
  function attachHeatmapTooltip(canvas) {
    canvas.addEventListener("mousemove", (event) => {
      const g = canvas._grid;
      if (!g) return;
      const box = canvas.getBoundingClientRect();
      const x = event.clientX - box.left - g.left;
      const y = event.clientY - box.top - g.top;
      const i = Math.floor(y / g.cell);
      const j = Math.floor(x / g.cell);
      if (x < 0 || y < 0 || i >= g.nRows || j >= g.nCols) return hideTip();
      showTip(event, [
        [g.axes.col + " #" + (j + 1), g.colLabs[j], true],
        [g.axes.row + " #" + (i + 1), g.rowLabs[i], true],
        ["weight", fmt(+g.rows[i][j], 4)],
      ]);
    });
    canvas.addEventListener("mouseleave", hideTip);
  }
  function drawLegend(canvas, min, max, colour, title) {
    const ctx = canvas.getContext("2d");
    const w = canvas.width, x0 = 46, x1 = w - 46, barTop = 18;
    ctx.clearRect(0, 0, w, canvas.height);
    for (let x = x0; x < x1; x++) {
      ctx.fillStyle = colour(min + ((x - x0) / (x1 - x0 - 1)) * (max - min));
      ctx.fillRect(x, barTop, 1, 12);
    }
    ctx.fillStyle = "#5b6478";
    ctx.font = TITLE_FONT;
    ctx.textBaseline = "alphabetic";
    ctx.textAlign = "left";
    ctx.fillText(title, x0, 12);
    ctx.font = FONT;
    ctx.textBaseline = "middle";
    ctx.textAlign = "right";
    ctx.fillText(fmt(min, 2), x0 - 5, barTop + 6);
    ctx.textAlign = "left";
    ctx.fillText(fmt(max, 2), x1 + 5, barTop + 6);
  }

  function setAvailable(name, ok, message) {
    $(name + "-note").hidden = ok;
    $(name + "-note").textContent = ok ? "" : message;
    $(name + "-body").hidden = !ok;
  }

  // ---- views: alignment matrix, encoder and decoder self-attention ---------------------------
  const HEATMAPS = { matrix: "cross", enc: "enc", dec: "dec" };
  function missingMessage(kind) {
    const name = (model.attention || model.arch || "this") + " model";
    if (kind === "cross") {
      return "This " + name + " has no attention over the source (an encoder-decoder without " +
        "attention passes only its final state).";
    }
    if (isRNN) {
      return "This is an RNN trace (" + name + "): recurrent layers have no self-attention, " +
        "so there is nothing to show here.";
    }
    return "This trace has no " + KINDS[kind].title + ".";
  }
  function renderHeatmapView(name) {
    const kind = HEATMAPS[name];
    const ok = available(kind);
    setAvailable(name, ok, missingMessage(kind));
    if (!ok) return;
    const layer = +$(name + "-layer").value;
    const rows = matrixRows(kind, layer, $(name + "-head").value);
    const max = $(name + "-stretch").checked ? Math.max(1e-6, maxOf(rows)) : 1;
    drawHeatmap($(name + "-canvas"), rows, rowLabels(kind), colLabels(kind), max, KINDS[kind]);
    drawLegend($(name + "-legend"), 0, max, (v) => seqColour(v, max), "attention weight");
  }

  // ---- view: head view (SVG lines, one colour per head) --------------------------------------
  function ensureHeadToggles(n) {
    const box = $("head-toggles");
    if (box.childElementCount === n) return;
    box.textContent = "";
    for (let h = 0; h < n; h++) {
      const item = el("label");
      const input = el("input", "head-toggle");
      input.type = "checkbox";
      input.checked = true;
      input.dataset.head = String(h);
      input.addEventListener("change", drawHeadLines);
      const swatch = el("span", "swatch");
      swatch.style.background = headColour(h);
      item.append(input, swatch, document.createTextNode(n === 1 ? "attention" : "head " + (h + 1)));
      box.appendChild(item);
    }
  }
  // what drawHeadLines needs from the last renderHeads: which matrix and where the columns are
  const headView = { kind: "cross", layer: 0, x1: 0, x2: 0, y: (i) => i };
  const COLUMN_TITLES = {
    cross: ["SOURCE", "OUTPUT"],
    enc: ["SOURCE (KEYS)", "SOURCE (QUERIES)"],
    dec: ["OUTPUT (KEYS)", "OUTPUT (QUERIES)"],
  };
  function addHeadViewColumn(view, labs, side, x, y) {
    labs.forEach((tok, i) => {
      const attrs = { x, y: y(i), "dominant-baseline": "middle", "data-side": side, "data-index": i };
      if (side === "left") attrs["text-anchor"] = "end";
      const text = view.appendChild(svg("text", attrs));
      text.textContent = shorten(label(tok), 24);
      text.appendChild(svg("title", {})).textContent = String(tok);
      const focus = (on) => () => {
        state.focus = on ? { side, index: i } : null;
        text.classList.toggle("focus", on);
        drawHeadLines();
      };
      text.addEventListener("mouseenter", focus(true));
      text.addEventListener("mouseleave", focus(false));
    });
  }
  function renderHeads() {
    const kind = $("hv-kind").value;
    const ok = !!kind && available(kind);
    setAvailable("heads", ok, missingMessage(kind || "cross"));
    if (!ok) return;
    fillSelect($("hv-layer"), layerOptions(layerCount(kind)), layerCount(kind) - 1);
    state.focus = null;
    const layer = +$("hv-layer").value;
    ensureHeadToggles(headCount(kind, layer));
    const left = colLabels(kind); // keys
    const right = rowLabels(kind); // queries
    const ctx = document.createElement("canvas").getContext("2d");
    ctx.font = "13px " + MONO;
    const textWidth = (labs, least) =>
      labs.reduce((w, t) => Math.max(w, ctx.measureText(shorten(label(t), 24)).width), least);
    const x1 = textWidth(left, 110) + 16; // at least the column title's width
    const x2 = x1 + 320;
    const width = x2 + textWidth(right, 130) + 16;
    const rowHeight = 20, top = 34;
    const height = top + Math.max(left.length, right.length) * rowHeight + 8;
    const y = (i) => top + i * rowHeight + rowHeight / 2;
    const view = $("head-view");
    view.textContent = "";
    view.setAttribute("width", width);
    view.setAttribute("height", height);
    view.setAttribute("viewBox", "0 0 " + width + " " + height);
    const [leftTitle, rightTitle] = COLUMN_TITLES[kind];
    const titleAttrs = { y: 14, class: "column-title" };
    view.appendChild(svg("text", { ...titleAttrs, x: x1 - 8, "text-anchor": "end" })).textContent = leftTitle;
    view.appendChild(svg("text", { ...titleAttrs, x: x2 + 8 })).textContent = rightTitle;
    view.appendChild(svg("g", { id: "hv-lines" }));
    addHeadViewColumn(view, left, "left", x1 - 8, y);
    addHeadViewColumn(view, right, "right", x2 + 8, y);
    Object.assign(headView, { kind, layer, x1, x2, y });
    drawHeadLines();
  }
  function drawHeadLines() {
    const lines = $("hv-lines");
    if (!lines) return;
    lines.textContent = "";
    const { kind, layer, x1, x2, y } = headView;
    const focus = state.focus;
    const heads = Array.from(document.querySelectorAll(".head-toggle"))
      .filter((box) => box.checked)
      .map((box) => +box.dataset.head);
    let count = 0;
    for (const head of heads) {
      const rows = headRows(kind, layer, head);
      const levels = Array.from({ length: LINE_LEVELS }, () => []);
      for (let i = 0; i < rows.length; i++) {
        if (focus && focus.side === "right" && focus.index !== i) continue;
        const row = rows[i];
        for (let j = 0; j < row.length; j++) {
          if (focus && focus.side === "left" && focus.index !== j) continue;
          const w = +row[j] || 0;
          if (w < MIN_LINE_WEIGHT) continue;
          const level = Math.min(LINE_LEVELS - 1, Math.floor(w * LINE_LEVELS));
          levels[level].push("M" + x1 + " " + y(j) + "L" + x2 + " " + y(i));
          count++;
        }
      }
      const group = svg("g", { class: "head-lines", "data-head": head });
      levels.forEach((segments, level) => {
        if (!segments.length) return;
        group.appendChild(svg("path", {
          class: "attn-line", d: segments.join(""), stroke: headColour(head),
          "stroke-opacity": ((level + 1) / LINE_LEVELS).toFixed(2),
        }));
      });
      lines.appendChild(group);
    }
    $("head-view").dataset.lineCount = String(count);
  }

  // ---- view: step-by-step decoding replay -----------------------------------------------------
  const stripScales = new Map(); // per hypothesis and field: max |value| over all steps
  function stripScale(field) {
    const key = state.hyp + "|" + field;
    if (!stripScales.has(key)) {
      let max = 0;
      for (const vec of hyp().rnn[field] || []) for (const v of vec) max = Math.max(max, Math.abs(+v || 0));
      stripScales.set(key, max || 1);
    }
    return stripScales.get(key);
  }
  function drawStrip(canvas, vector, max) {
    const n = vector.length;
    const cell = Math.max(2, Math.min(14, Math.floor(640 / Math.max(n, 1))));
    const dpr = window.devicePixelRatio || 1;
    canvas.width = Math.ceil(n * cell * dpr);
    canvas.height = Math.ceil(20 * dpr);
    canvas.style.width = n * cell + "px";
    canvas.style.height = "20px";
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    vector.forEach((v, i) => {
      ctx.fillStyle = divColour(+v || 0, max);
      ctx.fillRect(i * cell, 0, cell, 20);
    });
    canvas.onmousemove = (event) => {
      const i = Math.floor((event.clientX - canvas.getBoundingClientRect().left) / cell);
      if (i >= 0 && i < n) showTip(event, [["unit", String(i + 1)], ["value", fmt(+vector[i], 4)]]);
    };
    canvas.onmouseleave = hideTip;
  }
  function renderRNN(h, t) {
    const rnn = h.rnn;
    $("rnn-panel").hidden = !rnn;
    if (!rnn) return;
    const states = rnn.decoder_states, contexts = rnn.contexts;
    const hMax = states ? stripScale("decoder_states") : 1;
    const cMax = contexts ? stripScale("contexts") : 1;
    if (states && states[t]) drawStrip($("h-strip"), states[t], hMax);
    $("c-strip").hidden = !contexts;
    $("c-strip-note").hidden = !!contexts;
    $("c-strip-note").textContent = contexts ? "" : "no context vector: this model has no attention";
    if (contexts && contexts[t]) drawStrip($("c-strip"), contexts[t], cMax);
    const scale = Math.max(hMax, contexts ? cMax : 0);
    const title = "h_t and c_t: value of each unit (blue < 0 < red)";
    drawLegend($("strip-legend"), -scale, scale, (v) => divColour(v, scale), title);
    const table = $("rnn-scores");
    table.textContent = "";
    const scores = rnn.scores && rnn.scores[t];
    const weights = h.cross_attention && h.cross_attention[t] ? h.cross_attention[t][0][0] : null;
    $("rnn-scores-note").hidden = !!scores;
    $("rnn-scores-note").textContent = scores ? "" : "No attention scores: this model has no attention.";
    if (!scores) return;
    const header = table.insertRow();
    for (const name of ["source", "score (before softmax)", "", "weight (after softmax)", ""]) {
      header.appendChild(el("th", null, name));
    }
    const sMax = scores.reduce((m, v) => Math.max(m, Math.abs(+v || 0)), 0) || 1;
    sourceTokens.forEach((tok, s) => {
      const row = table.insertRow();
      row.insertCell().appendChild(tokenChip(tok));
      const box = el("div", "div-box");
      const v = +scores[s] || 0;
      const bar = el("div", "bar " + (v >= 0 ? "pos" : "neg"));
      const half = (Math.abs(v) / sMax) * 50;
      bar.style.left = (v >= 0 ? 50 : 50 - half) + "%";
      bar.style.width = half + "%";
      box.append(bar, el("div", "axis"));
      row.insertCell().appendChild(box);
      row.insertCell().appendChild(el("span", "num", fmt(scores[s], 3)));
      const wBox = el("div", "w-box");
      const wBar = el("div", "bar");
      wBar.style.width = (weights ? (+weights[s] || 0) * 100 : 0) + "%";
      wBox.appendChild(wBar);
      row.insertCell().appendChild(wBox);
      row.insertCell().appendChild(el("span", "num", weights ? fmt(weights[s], 3) : "\u2013"));
    });
  }
  function renderReplay() {
    const h = hyp();
    if (!h) return;
    const tokens = h.tokens || [];
    const t = Math.max(0, Math.min(state.step, tokens.length - 1));
    state.step = t;
    const slider = $("step-slider");
    slider.max = String(Math.max(0, tokens.length - 1));
    slider.value = String(t);
    const current = $("current-step");
    current.textContent = "Step " + (t + 1) + " of " + tokens.length + ": producing ";
    current.appendChild(tokenChip(tokens[t] == null ? "" : tokens[t], "current"));

    const output = $("replay-output");
    output.textContent = "";
    tokens.forEach((tok, i) => {
      output.appendChild(tokenChip(tok, i < t ? "done" : i === t ? "current" : "future"));
    });

    const source = $("replay-source");
    source.textContent = "";
    const hasAttention = available("cross");
    $("replay-attention-note").hidden = hasAttention;
    $("replay-attention-note").textContent = hasAttention ? "" : missingMessage("cross");
    $("replay-layer-label").hidden = !hasAttention || layerCount("cross") < 2;
    $("replay-head-label").hidden = !hasAttention || headCount("cross", 0) < 2;
    if (hasAttention) {
      const weights = matrixRows("cross", +$("replay-layer").value, $("replay-head").value)[t];
      sourceTokens.forEach((tok, s) => {
        const w = +weights[s] || 0;
        const item = el("div", "source-bar");
        item.title = label(tok) + ": " + fmt(w, 4);
        const box = el("div", "bar-box");
        const bar = el("div", "bar");
        bar.style.height = Math.round(w * 100) + "%";
        box.appendChild(bar);
        const chip = tokenChip(tok, w > 0.45 ? "strong" : "");
        chip.style.background = "rgba(43, 89, 195, " + (0.06 + 0.8 * w).toFixed(3) + ")"; // highlight
        item.append(box, el("span", "value", w >= 0.005 ? fmt(w, 2).replace(/^0/, "") : ""), chip);
        source.appendChild(item);
      });
    }

    const topk = $("replay-topk");
    topk.textContent = "";
    const candidates = h.top_k && h.top_k[t];
    $("replay-topk-note").hidden = !!candidates;
    $("replay-topk-note").textContent = candidates ? "" : "This trace has no top-k candidates.";
    for (const cand of candidates || []) {
      const chosen = cand.token === tokens[t];
      const chip = tokenChip(cand.token, chosen ? "chosen" : "");
      const box = el("div", "prob-box" + (chosen ? " chosen-row" : ""));
      const bar = el("div", "prob");
      bar.style.width = Math.max(0, Math.min(1, +cand.prob || 0)) * 100 + "%";
      box.appendChild(bar);
      topk.append(chip, box, el("span", "num", fmt(cand.prob, 3)));
    }
    renderRNN(h, t);
  }
  function setStep(t) {
    state.step = t;
    if (state.tab === "replay") renderReplay();
    else state.dirty.add("replay");
  }
  function pause() {
    clearInterval(state.timer);
    state.timer = null;
    $("play-button").textContent = "\u25B6 Play";
    $("play-button").setAttribute("aria-pressed", "false");
  }
  function play() {
    if (state.timer) return pause();
    const last = (hyp() ? hyp().tokens.length : 1) - 1;
    if (state.step >= last) setStep(0);
    state.timer = setInterval(() => {
      if (state.step >= last) return pause();
      setStep(state.step + 1);
    }, 800);
    $("play-button").textContent = "\u275A\u275A Pause";
    $("play-button").setAttribute("aria-pressed", "true");
  }

  // ---- beams, tabs and wiring -----------------------------------------------------------------
  const VIEWS = {
    matrix: () => renderHeatmapView("matrix"),
    heads: renderHeads,
    enc: () => renderHeatmapView("enc"),
    dec: () => renderHeatmapView("dec"),
    replay: renderReplay,
  };
  function invalidate(names) {
    for (const name of names) state.dirty.add(name);
    if (state.dirty.has(state.tab)) {
      state.dirty.delete(state.tab);
      VIEWS[state.tab]();
    }
  }
  function showTab(name) {
    state.tab = name;
    for (const tab of document.querySelectorAll('[role="tab"]')) {
      const selected = tab.dataset.tab === name;
      tab.setAttribute("aria-selected", String(selected));
      tab.tabIndex = selected ? 0 : -1;
      $("panel-" + tab.dataset.tab).hidden = !selected;
    }
    hideTip();
    invalidate([]);
  }
  function renderBeams() {
    $("beams").hidden = hyps.length < 2;
    const list = $("beam-list");
    list.textContent = "";
    hyps.forEach((h, i) => {
      const button = el("button", "hypothesis");
      button.type = "button";
      button.setAttribute("aria-pressed", String(i === state.hyp));
      const text = el("span", "text", h.text);
      if (h.finished === false) text.appendChild(el("span", "unfinished", "(unfinished)"));
      button.append(el("span", "rank", "#" + (i + 1)), text, el("span", "score", fmt(h.score, 3)));
      button.addEventListener("click", () => selectHypothesis(i));
      list.appendChild(el("li")).appendChild(button);
    });
  }
  function selectHypothesis(i) {
    pause();
    state.hyp = i;
    state.focus = null;
    $("output-text").textContent = hyps[i].text;
    renderBeams();
    markTabs();
    invalidate(Object.keys(VIEWS));
  }
  function markTabs() {
    const kinds = { matrix: "cross", heads: "cross", enc: "enc", dec: "dec" };
    for (const [tab, kind] of Object.entries(kinds)) {
      $("tab-" + tab).classList.toggle("unavailable", !available(kind));
    }
  }
  function modelInfo() {
    const parts = [model.arch, model.attention].filter(Boolean);
    if (model.arch === "transformer") {
      parts.push(model.encoder_layers + "+" + model.decoder_layers + " layers", model.heads + " heads");
    }
    const search = trace.search || {};
    parts.push(search.num_beams > 1 ? "beam search, " + search.num_beams + " beams" : "greedy search");
    parts.push(sourceTokens.length + " source tokens");
    return parts.join(" \u00B7 ");
  }

  function init() {
    $("model-info").textContent = modelInfo();
    if (hyps.length) $("output-text").textContent = hyps[0].text;
    renderBeams();
    markTabs();
    // selectors: layers and heads are properties of the model, the same for every hypothesis
    for (const [name, kind] of Object.entries(HEATMAPS)) {
      if (!available(kind)) continue;
      // the last layer's cross-attention is usually the most alignment-like
      fillSelect($(name + "-layer"), layerOptions(layerCount(kind)), layerCount(kind) - 1);
      fillSelect($(name + "-head"), headOptions(headCount(kind, 0)));
      for (const part of ["-layer", "-head", "-stretch"]) {
        $(name + part).addEventListener("change", () => invalidate([name]));
      }
      attachHeatmapTooltip($(name + "-canvas"));
    }
    fillSelect($("hv-kind"), Object.keys(KINDS).filter(available).map((k) => [k, KINDS[k].title]));
    $("hv-kind").addEventListener("change", () => invalidate(["heads"]));
    $("hv-layer").addEventListener("change", () => invalidate(["heads"]));
    const setAll = (on) => {
      for (const box of document.querySelectorAll(".head-toggle")) box.checked = on;
      drawHeadLines();
    };
    $("hv-all").addEventListener("click", () => setAll(true));
    $("hv-none").addEventListener("click", () => setAll(false));
    if (available("cross")) {
      fillSelect($("replay-layer"), layerOptions(layerCount("cross")), layerCount("cross") - 1);
      fillSelect($("replay-head"), headOptions(headCount("cross", 0)));
    }
    for (const id of ["replay-layer", "replay-head"]) {
      $(id).addEventListener("change", () => invalidate(["replay"]));
    }
    $("step-slider").addEventListener("input", (event) => setStep(+event.target.value));
    $("play-button").addEventListener("click", play);
    const tabs = Array.from(document.querySelectorAll('[role="tab"]'));
    tabs.forEach((tab, i) => {
      tab.addEventListener("click", () => showTab(tab.dataset.tab));
      tab.addEventListener("keydown", (event) => {
        const step = event.key === "ArrowRight" ? 1 : event.key === "ArrowLeft" ? -1 : 0;
        if (!step) return;
        const next = tabs[(i + step + tabs.length) % tabs.length];
        next.focus();
        showTab(next.dataset.tab);
      });
    });
    for (const name of Object.keys(VIEWS)) state.dirty.add(name);
    showTab(available("cross") ? "matrix" : "replay");
  }

  init();
  // for scripting and tests: the parsed trace and the few actions the controls perform
  window.heedfulViewer = { trace, state, showTab, selectHypothesis, setStep };
})();
