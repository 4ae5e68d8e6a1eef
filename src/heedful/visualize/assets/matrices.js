// The attention matrices of the trace, layer and head averages, and the selectors that pick them.

// kind "cross": output × source; "enc": source × source; "dec": output × output.
// Rows are queries, columns keys; every row is one attention distribution.
const KINDS = {
  cross: { title: "cross-attention (output \u2192 source)", row: "output", col: "source" },
  enc: { title: "encoder self-attention", row: "query (source)", col: "key (source)" },
  dec: { title: "decoder self-attention", row: "query (reads \u2192 predicts)",
    col: "key (the token it reads)" },
};
function available(kind) {
  const h = hyp();
  if (kind === "enc") return Array.isArray(trace.encoder_self_attention);
  if (kind === "dec") return !!h && Array.isArray(h.decoder_self_attention);
  return !!h && Array.isArray(h.cross_attention) && h.cross_attention.length > 0;
}
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
// Decoder position t reads y_{t-1} (<s> at the first) and predicts y_t, so a decoder key is
// labelled by the token it reads (as `heedful explain` labels it) and a query by both: labelled
// by what it produces, the causal diagonal read as "a token attends to itself".
const decoderReads = () => ["<s>", ...hyp().tokens.slice(0, -1)];
const decoderQueries = () => {
  const reads = decoderReads();
  return hyp().tokens.map((token, t) => reads[t] + "\u2192" + token); // (a space shows as ␣)
};
function rowLabels(kind) {
  if (kind === "enc") return sourceTokens;
  return kind === "dec" ? decoderQueries() : hyp().tokens;
}
function colLabels(kind) {
  if (kind === "dec") return decoderReads();
  return kind === "cross" ? sourceTokens : rowLabels(kind);
}
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
