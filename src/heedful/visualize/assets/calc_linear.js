// Where one head's numbers come from and where they go: x, the row W_Q reads, through the
// three linear layers W_Q, W_K, W_V (the self-attention article's "three linear layers", drawn
// as boxes with their shapes), and the head's output Σ_j w_j v_j checked against the one the
// model computed (W_O's input, recorded by the replay). Numbers from the trace's internals.

// What W_Q (reads) and W_K, W_V (keyReads) read in one layer of one kind, the layer's input
// before a pre-norm LayerNorm (input) and the heads' outputs W_O read (z), rows per position;
// null where the trace does not hold them (an older one, or no internals).
function headInputs(kind, layer) {
  const shared = trace.internals || {}, own = (hyp() && hyp().internals) || {};
  const block = shared.block, pre = block ? block.norm === "pre" : null;
  if (kind === "enc") {
    const data = block && block.layers[layer];
    const reads = data && (pre ? data.attn_norm_out : data.x);
    return data && { reads, keyReads: reads, input: data.x, z: data.z, pre };
  }
  const mine = (kind === "dec" ? own.decoder : own.cross) || {};
  const keyReads = kind === "dec" ? mine.x && mine.x[layer] : (shared.cross || {}).memory;
  return mine.x && keyReads && { reads: mine.x[layer], keyReads, z: mine.z[layer], pre };
}
// What x is, in words: the layer's input (layer 1: the embedding, scaled, plus PE), or in
// cross-attention the decoder's state after its self-attention; pre-norm reads its LayerNorm.
function readsText(kind, layer, pre) {
  const norm = pre === null ? "x = what W_Q reads (the input, or its LayerNorm if pre-norm)"
    : pre ? "x = LayerNorm(the input) (pre-norm)" : "x = the input (post-norm)";
  if (kind === "cross") {
    return norm + ", the input being the decoder's state after its masked self-attention; " +
      "K and V read m_j, the encoder's output (the memory)";
  }
  const stack = kind === "enc" ? "encoder" : "decoder";
  const token = kind === "enc" ? "embedding(token_i)" : "embedding(y_{t\u22121})";
  const input = layer === 0 ? token + " \u00D7 \u221Ad_model + PE" : "the output of " + stack + " layer " + layer;
  return norm + ", the input of " + stack + " layer " + (layer + 1) + " being " + input +
    "; K and V read every position's x";
}
// Why the names query, key and value (Michael Phi's guide borrows them from retrieval): the
// search-box analogy, in our words, as the caption over the linear layers that make them.
const ANALOGY = "Query, key, value, as in a video search: q is what you type in the search " +
  "box, each k_j the title of a video, q\u00B7k_j how well the two match, and what comes back " +
  "is the videos v_j, blended by how well each matched. Here all three are the same x seen " +
  "through three learned linear layers.";
// A matrix drawn as a box of its shape (rows × columns, 2 px a unit up to a cap), named.
function shapeBox(name, rows, cols, className) {
  const box = el("span", "calc-matrix" + (className ? " " + className : ""));
  box.dataset.shape = JSON.stringify([rows, cols]);
  box.style.width = Math.max(58, Math.min(160, 5 * cols)) + "px";
  box.style.height = Math.max(34, Math.min(100, 5 * rows)) + "px";
  box.append(el("b", null, name), el("span", "shape", "(" + rows + ", " + cols + ")"));
  return box;
}
// One linear layer as the article draws it: input (n, D) · W (D, d_k) → output (n, d_k).
function linearRow(input, n, w, out, D, dk, note) {
  const row = el("div", "calc-linear-row");
  row.dataset.weight = w;
  row.append(shapeBox(input, n, D), el("span", "op", "\u00B7"), shapeBox(w, D, dk, "weight"),
    el("span", "op", "\u2192"), shapeBox(out, n, dk), el("span", "note-inline", note));
  return row;
}
function renderLinear(body, p, where, inputs) {
  const { kind, layer, head, i } = where;
  const box = el("div", "calc-linear");
  box.dataset.part = "calc-linear";
  box.appendChild(el("h4", null, "x \u2192 q, k_j, v_j: three linear layers (x W, plus the layer's bias where it has one)"));
  box.appendChild(el("p", "calc-analogy", ANALOGY)).dataset.part = "calc-analogy";
  box.appendChild(el("p", "calc-line", readsText(kind, layer, inputs.pre)));
  if (kind === "enc" && layer === 0) embeddingLines(box, i, inputs);
  const line = box.appendChild(el("p", "calc-line"));
  line.append(el("b", null, "x = "), vectorSpan("calc-x", inputs.reads[i]));
  const D = inputs.reads[i].length, dk = p.q.length, n = p.k.length, g = kvHead(head);
  const keys = kind === "cross" ? "M" : "X", shared = g === head ? "" : " (key/value head " + (g + 1) + ")";
  box.append(
    linearRow("x", 1, "W_Q", "q", D, dk, "head " + (head + 1) + "'s columns of W_Q: q, below"),
    linearRow(keys, n, "W_K", "K", D, dk, "row j is k_j" + shared),
    linearRow(keys, n, "W_V", "V", D, dk, "row j is v_j" + shared));
  body.appendChild(box);
}
// Layer 1 of the encoder: x_i = embedding(token_i) × √d_model + PE_i, with their numbers.
function embeddingLines(box, i, inputs) {
  const block = trace.internals.block;
  const scaled = block.tokens[i].map((v) => v * block.scale);
  for (const [title, part, v] of [["embedding \u00D7 \u221Ad_model = ", "calc-embedding", scaled],
    ["PE_" + i + " = ", "calc-pe", block.positional[i]], ["their sum, the layer's input = ", "calc-input", inputs.input[i]]]) {
    const line = box.appendChild(el("p", "calc-line"));
    line.append(el("b", null, title), vectorSpan(part, v));
  }
}
// The elementwise q ⊙ k_j (bertviz's neuron view, with the numbers): its sum is q·k_j.
function productStrip(q, k) {
  const product = q.map((x, d) => x * k[d]);
  const max = Math.max(1e-12, ...product.map(Math.abs));
  const strip = el("span", "qk-strip");
  strip.dataset.vector = JSON.stringify(product);
  for (const x of product) {
    const cell = strip.appendChild(el("span", "qk-cell", q.length <= 32 ? fmt(x, 2) : ""));
    cell.style.background = divColour(x, max);
    if (Math.abs(x) > 0.6 * max) cell.style.color = "#fff"; // readable on the dark ends
    if (q.length > 32) cell.style.minWidth = "5px"; // colours only: too many to print
    cell.title = fmt(x, 5);
  }
  return strip;
}
// The head's output recomputed here, beside the model's own (its slice of W_O's input).
function renderOutputCheck(body, output, inputs, where) {
  const dk = output.length, h = where.head;
  const own = inputs && inputs.z ? inputs.z[where.i].slice(h * dk, (h + 1) * dk) : null;
  const line = body.appendChild(el("p", "calc-line"));
  line.dataset.part = "calc-model-output";
  line.appendChild(el("b", null, "the model's own head output (what its W_O read, from the replay) = "));
  if (!own) return line.appendChild(el("span", "note-inline", "not recorded (an older trace)"));
  line.appendChild(vectorSpan("calc-model-vector", own));
  const diff = Math.max(...own.map((x, d) => Math.abs(x - output[d])));
  const check = body.appendChild(el("p", "calc-line"));
  check.dataset.part = "calc-difference";
  check.dataset.value = String(diff);
  check.textContent = "difference: max |\u0394| = " + diff.toExponential(1) +
    " (the trace rounds its numbers to 5 decimals)";
}
