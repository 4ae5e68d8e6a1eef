// View: head view, a line from each query to each key it attends to, one colour per head.

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
const headView = { kind: "cross", layer: 0, x1: 0, x2: 0, y: (i) => i, lines: null };
const COLUMN_TITLES = {
  cross: ["SOURCE", "OUTPUT"],
  enc: ["SOURCE (KEYS)", "SOURCE (QUERIES)"],
  dec: ["READS (KEYS)", "READS \u2192 PREDICTS (QUERIES)"],
};
function addHeadViewColumn(view, labs, side, x, y) {
  labs.forEach((tok, i) => {
    const attrs = { x, y: y(i), "dominant-baseline": "middle", "data-side": side, "data-index": i };
    if (side === "left") attrs["text-anchor"] = "end";
    const text = view.appendChild(svg("text", attrs));
    text.textContent = shorten(label(tok), 24);
    text.appendChild(svg("title", {})).textContent = String(tok);
    if (state.focus && state.focus.side === side && state.focus.index === i) text.classList.add("focus");
    const focus = (on) => () => {
      state.focus = on ? { side, index: i } : null;
      state.link = null;
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
  // a row hovered in the alignment matrix (linkStep) stays in focus here
  state.focus = state.link != null && kind === "cross" ? { side: "right", index: state.link } : null;
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
  headView.lines = view.appendChild(svg("g", {}));
  addHeadViewColumn(view, left, "left", x1 - 8, y);
  addHeadViewColumn(view, right, "right", x2 + 8, y);
  Object.assign(headView, { kind, layer, x1, x2, y });
  drawHeadLines();
}
function drawHeadLines() {
  const lines = headView.lines;
  if (!lines) return;
  lines.textContent = "";
  const { kind, layer, x1, x2, y } = headView;
  const focus = state.focus;
  const heads = Array.from(root.querySelectorAll(".head-toggle"))
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
  if (focus) drawWeightBoxes(lines, heads);
  $("head-view").dataset.lineCount = String(count);
  filterNotice(kind);
}
// A row hovered in the alignment matrix keeps filtering this view after the mouse left it:
// say so, with the way back to every line.
function filterNotice(kind) {
  const linked = state.link != null && kind === "cross" && state.focus && state.focus.side === "right"
    && state.focus.index === state.link;
  $("hv-filter").hidden = !linked;
  if (!linked) return;
  const token = label(rowLabels(kind)[state.link]);
  $("hv-filter-text").textContent = "Only the lines of output token " + (state.link + 1) + " (" +
    token + ") are drawn: its row was hovered in the alignment matrix.";
}
// bertviz's boxes: with a token hovered, each token across from it gets one box per shown head,
// as dark as that head's weight between the two, so heads compare at a glance.
const BOX = 9;
function drawWeightBoxes(lines, heads) {
  const { kind, layer, x1, x2, y } = headView, focus = state.focus;
  const across = focus.side === "right" ? "left" : "right";
  const count = across === "left" ? colLabels(kind).length : rowLabels(kind).length;
  const boxes = lines.appendChild(svg("g", { class: "weight-boxes", "data-side": across }));
  heads.forEach((head, n) => {
    const rows = headRows(kind, layer, head);
    for (let k = 0; k < count; k++) {
      const row = focus.side === "right" ? rows[focus.index] : rows[k];
      const w = +(row && row[focus.side === "right" ? k : focus.index]) || 0;
      const x = across === "left" ? x1 + 2 + n * (BOX + 1) : x2 - 2 - (heads.length - n) * (BOX + 1);
      const box = boxes.appendChild(svg("rect", {
        x, y: y(k) - BOX / 2, width: BOX, height: BOX, fill: headColour(head),
        "fill-opacity": w.toFixed(3), stroke: headColour(head), "stroke-width": 0.5,
        "data-head": head, "data-index": k, "data-weight": w,
      }));
      box.appendChild(svg("title", {})).textContent = "head " + (head + 1) + ": " + fmt(w, 4);
    }
  });
}
function initHeadView() {
  fillSelect($("hv-kind"), Object.keys(KINDS).filter(available).map((k) => [k, KINDS[k].title]));
  $("hv-kind").addEventListener("change", () => invalidate(["heads"]));
  $("hv-layer").addEventListener("change", () => invalidate(["heads"]));
  const setAll = (on) => {
    for (const box of root.querySelectorAll(".head-toggle")) box.checked = on;
    drawHeadLines();
  };
  $("hv-unfilter").addEventListener("click", () => {
    state.link = state.focus = null;
    for (const text of root.querySelectorAll("[data-part=head-view] text.focus")) text.classList.remove("focus");
    drawHeadLines();
  });
  $("hv-all").addEventListener("click", () => setAll(true));
  $("hv-none").addEventListener("click", () => setAll(false));
}
