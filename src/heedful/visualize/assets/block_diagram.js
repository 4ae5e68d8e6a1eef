// The Transformer's block drawn as the paper draws it (Vaswani et al. 2017, Figure 1 and 2):
// the layer's sublayers bottom to top as boxes, the residual arrow around each sublayer into
// its Add & Norm, multi-head attention holding its Q, K and V linear layers, and the shape of
// what flows on each arrow. Each box opens the model's numbers (block.js's tables).

// The boxes of one layer in the model's order, [id, title, formula], and the residuals
// [from, to]: what is added back, and the box that adds it. Post-norm (the paper):
// x → attention → Add & Norm → FFN → Add & Norm; pre-norm: Norm → attention → Add, and so on.
function blockLayout(block, layer) {
  const input = layer === 0 ? ["embed", "x = embedding \u00D7 \u221Ad_model + PE", "the layer's input"]
    : ["x", "x", "the output of layer " + layer];
  const heads = ["z", "Scaled dot-product attention", "z_h = softmax(Q_h K_h\u1D40 / \u221Ad_k) V_h, each head"];
  const concat = ["attn_out", "Concat \u00B7 W_O", "concat(z_1 \u2026 z_H) W_O\u1D40 + b_O"];
  const ff = ["ff_out", "Feed-forward", "max(0, h W_1 + b_1) W_2 + b_2"];
  if (block.norm === "pre") {
    return { boxes: [input, ["attn_norm", "LayerNorm", "LN(x), what attention reads"], heads, concat,
      ["ff_norm", "Add, LayerNorm", "h = x + attention; LN(h), what the feed-forward reads"], ff,
      ["out", "Add", "h + feed-forward"]], residuals: [[input[0], "ff_norm"], ["ff_norm", "out"]] };
  }
  return { boxes: [input, heads, concat, ["attn_norm", "Add & LayerNorm", "LN(x + attention)"], ff,
    ["ff_norm", "Add & LayerNorm", "LN(h + feed-forward)"]], residuals: [[input[0], "attn_norm"], ["attn_norm", "ff_norm"]] };
}
function blockButton(id, title, formula, onOpen) {
  const box = el("button", "block-box");
  box.type = "button";
  box.dataset.box = id;
  box.append(el("b", null, title), el("span", "formula", formula));
  box.addEventListener("click", onOpen);
  return box;
}
// The arrow into a box, with the shape of what flows on it beside it (left, clear of the
// residuals, which leave to the right).
function shapeArrow(shape) {
  const arrow = el("div", "block-arrow");
  arrow.dataset.shape = shape;
  arrow.append(el("span", "block-shape", shape), el("span", null, "\u2193"), el("span"));
  return arrow;
}
// Multi-head attention as the paper's Figure 2: the Q, K and V linear layers side by side,
// each opening its per-head matrices, the heads' attention (box z), their concat and W_O.
function attentionFrame(box, concat, S, D, pre) {
  const H = model.heads || 1, dk = D / H, kvHeads = ((trace.internals || {}).kv_heads || []);
  const Hkv = kvHeads.length ? Math.max(...kvHeads) + 1 : H;
  const frame = el("div", "block-mha");
  frame.appendChild(el("div", "block-mha-title", "Multi-head attention: " + H + " heads of d_k = " +
    dk + ", reading X = " + (pre ? "LN(x)" : "x")));
  const row = frame.appendChild(el("div", "block-qkv"));
  for (const [name, count] of [["q", H], ["k", Hkv], ["v", Hkv]]) {
    const big = name.toUpperCase();
    const part = el("button", "qkv-box");
    part.type = "button";
    part.dataset.qkv = name;
    part.dataset.shape = JSON.stringify([S, dk, count]);
    part.append(el("b", null, big + " = X W_" + big), el("span", "block-shape", "W_" + big + " (" + D + ", " + dk + ")"),
      el("span", "block-shape", "(" + S + ", " + dk + ") \u00D7 " + count));
    part.addEventListener("click", () => openQKV(name));
    row.appendChild(part);
  }
  const heads = "(" + S + ", " + dk + ") \u00D7 " + H;  // (S, d_k) per head
  frame.append(shapeArrow(heads), box, shapeArrow(heads + " \u2192 concat (" + S + ", " + D + ")"), concat);
  return frame;
}
// A Q, K or V box's numbers: each head's matrix (S, d_k), rows the source tokens.
function openQKV(name) {
  const layer = +$("block-layer").value, internals = trace.internals || {};
  pressBox("qkv:" + name);
  const out = $("block-numbers");
  out.textContent = "";
  const heads = internals.encoder ? internals.encoder[name][layer] : null;
  if (!heads) return out.appendChild(el("p", "note", "This trace holds no encoder Q, K, V."));
  const big = name.toUpperCase(), groups = internals.kv_heads;
  heads.forEach((matrix, h) => {
    const shared = name !== "q" && groups ? " (read by heads " + groups.flatMap((g, i) => (g === h ? [i + 1] : [])).join(", ") + ")" : "";
    out.appendChild(numberTable(name + "-" + h, big + " of " + (shared ? "key/value head " : "head ") + (h + 1) + shared + " = x W_" + big + ", its columns", matrix));
  });
}
function pressBox(id) {
  state.blockBox = id;
  for (const box of $("block-diagram").querySelectorAll(".block-box, .qkv-box")) {
    const own = box.dataset.box || "qkv:" + box.dataset.qkv;
    box.setAttribute("aria-pressed", String(own === id));
  }
}
// The residual arrows, drawn over the laid-out boxes: from the arrow under the box whose
// output is added back, out to a lane right of the boxes, up to the box that adds it.
function drawResiduals(diagram, residuals) {
  const old = diagram.querySelector("svg.block-residuals");
  if (old) old.remove();
  const frame = diagram.getBoundingClientRect();
  if (!frame.width) return; // not laid out (a hidden tab): drawn when shown
  const rect = (id) => {
    const r = diagram.querySelector('[data-box="' + id + '"]').getBoundingClientRect();
    return { left: r.left - frame.left, right: r.right - frame.left, top: r.top - frame.top, bottom: r.bottom - frame.top };
  };
  const boxes = Array.from(diagram.querySelectorAll(".block-box, .block-mha"), (b) => b.getBoundingClientRect().right - frame.left);
  const layer = svg("svg", { class: "block-residuals", width: frame.width, height: frame.height });
  residuals.forEach(([from, to], n) => {
    const a = rect(from), b = rect(to), lane = Math.max(...boxes) + 14 + 10 * n;
    const x0 = (a.left + a.right) / 2, y0 = a.bottom + 6, y1 = (b.top + b.bottom) / 2;
    const points = [[x0, y0], [lane, y0], [lane, y1], [b.right + 2, y1]];
    const path = svg("path", { d: "M" + points.map((p) => p.map((v) => v.toFixed(1)).join(" ")).join(" L"),
      class: "block-residual" });
    Object.assign(path.dataset, { from, to, points: JSON.stringify(points) });
    path.appendChild(svg("title", {})).textContent = "residual: " + from + " is added back in " + to;
    const [x, y] = points[3]; // its head, pointing left into the box (a marker would be a URL reference)
    layer.append(path, svg("path", { d: "M" + x + " " + y + " l8 -4 v8 z", class: "block-residual-head" }));
  });
  diagram.appendChild(layer);
}
function renderBlockDiagram() {
  const block = blockData(), layer = +$("block-layer").value, diagram = $("block-diagram");
  diagram.textContent = "";
  const { boxes, residuals } = blockLayout(block, layer);
  const S = sourceTokens.length, D = block.tokens[0].length, flow = "(S, D) = (" + S + ", " + D + ")";
  const button = ([id, title, formula]) => blockButton(id, title, formula, () => openBox(id));
  boxes.forEach((item, i) => {
    if (item[0] === "attn_out") return; // inside the attention's frame, after the heads
    diagram.appendChild(shapeArrow(i ? flow : "tokens: " + S));
    const concat = () => button(boxes[i + 1]);
    diagram.appendChild(item[0] === "z" ? attentionFrame(button(item), concat(), S, D, block.norm === "pre") : button(item));
  });
  diagram.appendChild(shapeArrow(flow + ", the layer's output"));
  drawResiduals(diagram, residuals);
  const ids = boxes.map(([id]) => id).concat(["qkv:q", "qkv:k", "qkv:v"]);
  const keep = ids.includes(state.blockBox) ? state.blockBox : boxes[0][0];
  if (String(keep).startsWith("qkv:")) openQKV(keep.slice(4));
  else openBox(keep);
}
