// The calculation of one cell: a Transformer head's softmax(q·k_j / √d_k) · V row by row, or an
// RNN decoder step in Alammar's seven steps, recomputed here from the trace's internals.

const CALC_KINDS = { cross: "cross", encoder: "enc", decoder: "dec" }; // trace name -> view name
const dot = (a, b) => a.reduce((sum, x, i) => sum + x * b[i], 0);
const addInto = (total, v, w) => v.forEach((x, i) => { total[i] += w * x; });
function vecText(v, n = 4) {
  const shown = v.slice(0, n).map((x) => fmt(x, 3)).join(", ");
  return "[" + shown + (v.length > n ? ", \u2026 " + (v.length - n) + " more" : "") + "]";
}
// A table cell holding a number or a vector, its exact value in data-value / data-vector.
function numCell(row, col, value, digits = 4) {
  const cell = row.insertCell();
  cell.dataset.col = col;
  if (Array.isArray(value)) {
    cell.dataset.vector = JSON.stringify(value);
    cell.title = value.map((x) => fmt(x, 5)).join(", ");
    cell.appendChild(el("span", "vec", vecText(value)));
  } else if (typeof value === "number") {
    cell.dataset.value = String(value);
    cell.appendChild(el("span", "num", value === -Infinity ? "\u2212\u221E" : fmt(value, digits)));
  } else cell.appendChild(typeof value === "string" ? el("span", null, value) : value);
  return cell;
}
function weightBar(w) {
  const box = el("div", "w-box");
  const bar = el("div", "bar");
  bar.style.width = Math.max(0, Math.min(1, w)) * 100 + "%";
  box.appendChild(bar);
  return box;
}
// exp(s − max) over the scores not masked (−∞ gives 0): the weights are the same, and finite.
function expOf(scores) {
  const max = Math.max(...scores.filter((s) => s > -Infinity));
  return scores.map((s) => (s === -Infinity ? 0 : Math.exp(s - max)));
}
const sumOf = (values) => values.reduce((total, x) => total + x, 0);
function softmaxOf(scores) {
  const exps = expOf(scores), total = sumOf(exps);
  return exps.map((x) => x / total);
}
function softmaxRows(rows) {
  const exps = expOf(rows.map((r) => (r.masked ? -Infinity : r.score)));
  const total = sumOf(exps);
  rows.forEach((r, i) => {
    r.exp = exps[i];
    r.weight = exps[i] / total;
  });
  return rows;
}

// ---- Transformer: one head, one query ----------------------------------------------------
// The K, V head a head reads: its own, or under grouped-query attention its group's (kv_heads).
const kvHead = (head) => ((trace.internals || {}).kv_heads || [])[head] ?? head;
// One head's Q (every query), K and V, its weights and tokens, or null without internals.
function headInternals(kind, layer, head) {
  const h = hyp(), own = h.internals || {}, shared = trace.internals || {}, g = kvHead(head);
  if (kind === "enc") {
    const e = shared.encoder;
    return e && { q: e.q[layer][head], k: e.k[layer][g], v: e.v[layer][g],
      weights: trace.encoder_self_attention[layer][head], keys: sourceTokens, queries: sourceTokens };
  }
  if (kind === "dec") {
    const d = own.decoder;
    return d && { q: d.q[layer][head], k: d.k[layer][g], v: d.v[layer][g],
      weights: h.decoder_self_attention[layer][head], keys: decoderReads(),
      queries: decoderQueries(), causal: true };
  }
  const c = shared.cross;
  return c && own.cross && { q: own.cross.q[layer][head], k: c.k[layer][g], v: c.v[layer][g],
    weights: headRows("cross", layer, head), keys: sourceTokens, queries: h.tokens };
}
function headParts(kind, layer, head, i) {
  const p = headInternals(kind, layer, head);
  return p && { ...p, q: p.q[i], weights: p.weights[i], query: p.queries[i] };
}
function headCalculation(p, i) {
  const scale = Math.sqrt(p.q.length);
  const qNorm = Math.sqrt(dot(p.q, p.q));
  const rows = p.k.map((k, j) => {
    const product = dot(p.q, k), norm = Math.sqrt(dot(k, k));
    // q·k_j = |q| |k_j| cos θ: the score is the cosine similarity, scaled by both lengths
    const cos = product / (qNorm * norm || 1);
    return { j, product, norm, cos, scaled: product / scale, masked: !!p.causal && j > i };
  });
  for (const r of rows) r.score = r.masked ? -Infinity : r.scaled;
  softmaxRows(rows);
  const output = new Array(p.v[0].length).fill(0);
  for (const r of rows) {
    r.weighted = p.v[r.j].map((x) => x * r.weight);
    addInto(output, p.v[r.j], r.weight);
  }
  return { rows, output };
}
const HEAD_COLUMNS = ["j", "key", "k_j", "q \u2299 k_j (its sum: q\u00B7k_j)", "q\u00B7k_j", "|k_j|", "cos \u03B8", "\u00F7\u221Ad_k", "masked",
  "exp(s \u2212 max)", "weight", "", "trace", "v_j", "weight \u00D7 v_j"];
function renderHeadCalc(body, p, calc, where) {
  const inputs = headInputs(where.kind, where.layer);
  if (inputs) renderLinear(body, p, where, inputs);
  const q = el("p", "calc-line");
  q.dataset.part = "calc-q";
  q.append(el("b", null, "q = "), el("span", "vec", vecText(p.q, 8)), el("span", "note-inline",
    "  d_k = " + p.q.length + ", \u221Ad_k = " + fmt(Math.sqrt(p.q.length), 4) + ", |q| = " +
    fmt(Math.sqrt(dot(p.q, p.q)), 4) + "; q\u00B7k_j = |q| |k_j| cos \u03B8"));
  q.dataset.vector = JSON.stringify(p.q);
  const table = el("table", "scores calc-table");
  const header = table.insertRow();
  for (const name of HEAD_COLUMNS) header.appendChild(el("th", null, name));
  for (const r of calc.rows) {
    const row = table.insertRow();
    row.dataset.key = String(r.j);
    if (r.masked) row.className = "masked";
    numCell(row, "j", String(r.j + 1));
    numCell(row, "key", tokenChip(p.keys[r.j]));
    numCell(row, "k", p.k[r.j]);
    const strip = productStrip(p.q, p.k[r.j]);
    numCell(row, "qk", strip).dataset.vector = strip.dataset.vector;
    numCell(row, "dot", r.product);
    numCell(row, "norm", r.norm);
    numCell(row, "cos", r.cos);
    numCell(row, "scaled", r.scaled);
    numCell(row, "score", r.score);
    numCell(row, "exp", r.exp);
    numCell(row, "weight", r.weight);
    numCell(row, "bar", weightBar(r.weight));
    numCell(row, "trace", +p.weights[r.j]);
    numCell(row, "v", p.v[r.j]);
    numCell(row, "weighted", r.weighted);
  }
  const out = el("p", "calc-line");
  out.dataset.part = "calc-output";
  out.dataset.vector = JSON.stringify(calc.output);
  out.append(el("b", null, "head output = \u03A3_j weight_j \u00D7 v_j = "), el("span", "vec", vecText(calc.output, 8)));
  body.append(q, table, out);
  renderOutputCheck(body, calc.output, inputs, where);
}
// On a mean of heads, the cell shown is no one head's weight: each head's weight of the key,
// their mean (the cell), and a button that opens that head's calculation.
function renderHeadBreakdown(body, kind, layer, i, j) {
  const heads = headCount(kind, layer);
  const weights = Array.from({ length: heads }, (_, h) => +headRows(kind, layer, h)[i][j]);
  const box = el("div", "calc-breakdown");
  box.dataset.part = "calc-breakdown";
  box.appendChild(el("p", "calc-line", "The cell is the mean of " + heads + " heads' weights of key " +
    (j + 1) + " (" + label(colLabels(kind)[j]) + "): " + fmt(sumOf(weights) / heads, 4) + ". Each head:"));
  const table = el("table", "scores calc-table");
  weights.forEach((w, h) => {
    const row = table.insertRow();
    row.dataset.head = String(h);
    numCell(row, "head", "head " + (h + 1));
    numCell(row, "weight", w);
    numCell(row, "bar", weightBar(w));
    const open = el("button", null, "its calculation");
    open.type = "button";
    open.addEventListener("click", () => openCalc(kind, layer, h, i, { key: j }));
    numCell(row, "open", open);
  });
  box.appendChild(table);
  body.appendChild(box);
}
// Under grouped-query attention, which heads read this head's K and V (the same numbers).
function sharedKV(head) {
  const groups = (trace.internals || {}).kv_heads, g = kvHead(head);
  if (!groups) return "";
  const heads = groups.flatMap((x, h) => (x === g ? [h + 1] : []));
  return " Grouped-query attention: K and V are key/value head " + (g + 1) + " of " +
    (Math.max(...groups) + 1) + ", shared by heads " + heads.join(", ") + ".";
}
function openHeadCalc(kind, layer, head, i, key) {
  const p = headParts(kind, layer, head, i);
  const where = KINDS[kind].title + ", layer " + (layer + 1) + ", head " + (head + 1);
  const keyText = key == null ? "" : ", key " + (key + 1) + " (" + label(p ? p.keys[key] : "") + ")";
  $("calc-title").textContent = where + ": query " + (i + 1) + " (" + label(p ? p.query : "") + ")" + keyText;
  $("calc-explain").textContent = where + ": softmax(q\u00B7k_j / \u221Ad_k) over the keys j, " +
    "then the weighted sum of the values v_j. Masked keys (the future) score \u2212\u221E, so exp gives 0." +
    sharedKV(head);
  if (!p) return null;
  renderHeadCalc($("calc-body"), p, headCalculation(p, i), { kind, layer, head, i });
  const row = key == null ? null : $("calc-body").querySelector('.calc-table tr[data-key="' + key + '"]');
  if (row) row.classList.add("clicked"); // the key clicked, in its head's calculation
  return p;
}
