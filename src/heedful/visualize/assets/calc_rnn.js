// The calculation of one RNN decoder step, numbered as Alammar's seven steps (Luong et al.
// 2015, §3): h_t, the encoder states h̄_s, the scores, the softmax, c_t, h̃_t, the output.

// score(h_t, h̄_s) as the model computes it, in the form the trace declares (model.score, from
// heedful's table of scores) and from the parts it keeps (internals): "dot" scale · q_t · k_s,
// "additive" vᵀ tanh(q_t + k_s), with q_t = h_t and k_s = h̄_s where no part is kept.
function rnnScore(t, s) {
  const shared = trace.internals, own = hyp().internals, score = model.score;
  if (!score) return +hyp().rnn.scores[t][s]; // an older trace: the scores it holds
  const q = own.score_queries ? own.score_queries[t] : hyp().rnn.decoder_states[t];
  const k = shared.score_keys ? shared.score_keys[s] : shared.encoder_states[s];
  if (score.form === "additive") return dot(shared.score_v, q.map((x, i) => Math.tanh(x + k[i])));
  return (score.scale || 1) * dot(q, k);
}
function rnnCalculation(t) {
  const states = trace.internals.encoder_states;
  // local attention (model.window = D): keys outside [p_t - D, p_t + D] masked; local-p then
  // weighs each by a Gaussian around p_t (Luong et al. 2015, eq. 10)
  const D = model.window, p = D ? +hyp().rnn.centers[t] : 0;
  const outside = (s) => !!D && Math.abs(s - p) > D + 1e-9;
  const rows = softmaxRows(states.map((_, s) => ({ j: s, score: rnnScore(t, s), masked: outside(s) })));
  if (!model.score) { // an older trace, without its score's form: its own scores and weights
    for (const r of rows) r.weight = +hyp().cross_attention[t][0][0][r.j];
  } else if (model.score.gaussian) {
    for (const r of rows) r.weight *= Math.exp(-((r.j - p) ** 2) / (2 * (D / 2) ** 2));
  }
  const context = new Array(states[0].length).fill(0);
  for (const r of rows) {
    r.weighted = states[r.j].map((x) => x * r.weight);
    addInto(context, states[r.j], r.weight);
  }
  return { rows, context };
}
function stepItem(list, title, content) {
  const item = el("li");
  item.appendChild(el("b", null, title + " "));
  if (content) item.appendChild(content);
  list.appendChild(item);
  return item;
}
function vectorSpan(part, v) {
  const span = el("span", "vec", vecText(v, 8));
  span.dataset.part = part;
  span.dataset.vector = JSON.stringify(v);
  span.title = v.map((x) => fmt(x, 5)).join(", ");
  return span;
}
function rnnTable(h, t, calc) {
  const table = el("table", "scores calc-table");
  const header = table.insertRow();
  for (const name of ["s", "source", "h\u0304_s", "score", "trace score", "exp(s \u2212 max)",
    "a_t(s)", "", "trace", "a_t(s) \u00D7 h\u0304_s"]) header.appendChild(el("th", null, name));
  for (const r of calc.rows) {
    const row = table.insertRow();
    row.dataset.key = String(r.j);
    if (r.masked) row.classList.add("masked"); // outside a local attention's window
    numCell(row, "j", String(r.j + 1));
    numCell(row, "key", tokenChip(sourceTokens[r.j]));
    numCell(row, "k", trace.internals.encoder_states[r.j]);
    numCell(row, "score", r.score);
    numCell(row, "trace-score", +h.rnn.scores[t][r.j]);
    numCell(row, "exp", r.exp);
    numCell(row, "weight", r.weight);
    numCell(row, "bar", weightBar(r.weight));
    numCell(row, "trace", +h.cross_attention[t][0][0][r.j]);
    numCell(row, "weighted", r.weighted);
  }
  return table;
}
// What the decoder RNN read at step t: embedding(y_{t-1}) (<s> at the first step) and, with
// input feeding, h̃_{t-1} (zeros at the first step). Older traces lack the embeddings.
function rnnInputs(item, t) {
  const h = hyp(), own = h.internals, feeding = trace.internals.decoder_reads === "embedding, attentional";
  const line = el("div", "calc-inputs");
  line.dataset.part = "calc-inputs";
  line.appendChild(el("span", null, "h_t = RNN(" + (feeding ? "[embedding(y_{t\u22121}); h\u0303_{t\u22121}]" : "embedding(y_{t\u22121})") + ", h_{t\u22121}), with embedding("));
  line.appendChild(tokenChip(t === 0 ? "<s>" : h.tokens[t - 1]));
  line.appendChild(el("span", null, ") = "));
  if (own.decoder_inputs) line.appendChild(vectorSpan("calc-embedding", own.decoder_inputs[t]));
  else line.appendChild(el("span", "note-inline", "not recorded (an older trace)"));
  if (feeding) {
    const fed = t === 0 ? own.attentional[0].map(() => 0) : own.attentional[t - 1];
    line.appendChild(el("span", null, " and h\u0303_{t\u22121} = "));
    line.appendChild(vectorSpan("calc-fed", fed));
  }
  item.appendChild(line);
}
function renderRnnCalc(body, t) {
  const h = hyp(), calc = rnnCalculation(t);
  const steps = el("ol", "calc-steps");
  const first = stepItem(steps, "The decoder state h_t (the RNN's output at this step):", vectorSpan("calc-query", h.rnn.decoder_states[t]));
  rnnInputs(first, t);
  stepItem(steps, "The encoder states h\u0304_s, one per source token (the table's h\u0304_s column).");
  stepItem(steps, "Score each one: " + (model.score ? model.score.formula : model.attention) + ".");
  stepItem(steps, "Softmax the scores into the weights a_t(s).");
  const ctx = stepItem(steps, "Context c_t = \u03A3_s a_t(s) h\u0304_s =", vectorSpan("calc-output", calc.context));
  ctx.appendChild(el("span", "note-inline", "  (the trace's c_t: " + vecText(h.rnn.contexts[t]) + ")"));
  stepItem(steps, "h\u0303_t = tanh(W_c [h_t; c_t]), the attentional state:", vectorSpan("calc-attentional", h.internals.attentional[t]));
  const pgen = h.rnn.p_gen && +h.rnn.p_gen[t]; // the pointer-generator mixes in copying
  const out = stepItem(steps, pgen == null ? "p(y_t) = softmax(W_o h\u0303_t); the most probable tokens:" :
    "p(y_t) = p_gen softmax(W_o h\u0303_t) + (1 \u2212 p_gen) \u03A3 a_t(s) over the source positions " +
    "holding y_t, p_gen = " + fmt(pgen, 3) + "; the most probable tokens:");
  for (const cand of h.top_k[t] || []) {
    // the token as a chip (its spaces shown), its probability plain beside it: "f 0.900"
    const item = out.appendChild(el("span", "candidate"));
    item.append(tokenChip(cand.token, cand.token === h.tokens[t] ? "chosen" : ""), el("span", "num", " " + fmt(cand.prob, 3) + " "));
  }
  body.append(steps, rnnTable(h, t, calc));
}
function openRnnCalc(t) {
  const h = hyp();
  $("calc-title").textContent = "Decoder step " + (t + 1) + ": producing " + label(h.tokens[t]);
  $("calc-explain").textContent = "The seven steps of one decoder step with attention, with this " +
    "model's numbers; scores, weights and c_t are recomputed here from h_t and h\u0304_s.";
  return renderRnnCalc($("calc-body"), t);
}

// ---- the panel ---------------------------------------------------------------------------
const INTERNALS_MISSING = "This trace holds only the attention weights, not the numbers " +
  "they are made from (it was too large, or made without them): build it with " +
  "build_trace(..., internals=True) to see the whole calculation.";
// A Hugging Face model's trace has no internals (the hooks know heedful's own modules): the
// `heedful explain` that computes this cell from that model's projections, counted from 1.
const shellQuoted = (text) => "'" + String(text).replace(/'/g, "'\\''") + "'";
function hfAdvice(kind, layer, head, position) {
  const args = { kind: { enc: "encoder", dec: "decoder", cross: "cross" }[kind], layer: layer + 1, head: head + 1 };
  if (position != null) args.position = position + 1;
  const options = Object.entries(args).map(([k, v]) => "--" + k + " " + v).join(" ");
  const text = "This is a Hugging Face model's trace (" + model.hf + "): it holds the attention " +
    "weights, not the queries, keys and values they are made from, which heedful records for its " +
    "own models only. To see " + (position == null ? "each query's" : "this cell's") +
    " calculation with the model's own numbers, run: heedful explain MODEL_DIR " +
    shellQuoted(trace.source) + " " + options + (position == null ? " --position P" : "") +
    " (in Python: heedful.visualize.explain.explain(translator, sentence, kind=\u2026, layer=\u2026, head=\u2026, position=\u2026)).";
  return { args, text };
}
// The panel's note where the calculation cannot be shown, and what would show it.
function calcNote(kind, layer, head, position) {
  const note = $("calc-note");
  delete note.dataset.command;
  if (!available(kind)) return missingMessage(kind);
  if (!model.hf) return INTERNALS_MISSING;
  const advice = hfAdvice(kind, layer, head, position);
  note.dataset.command = JSON.stringify(advice.args);
  return advice.text;
}
// clicked: {key, mean} of a click on a matrix cell: the key is marked in the calculation, and
// a mean of heads first shows each head's weight of it (heatmap.js).
function openCalc(kind, layer, head, position, clicked = {}) {
  const panel = $("calc"), body = $("calc-body");
  body.textContent = "";
  const has = !!(trace.internals && hyp() && hyp().internals) && available(kind);
  $("calc-note").hidden = has;
  $("calc-note").textContent = has ? "" : calcNote(kind, layer, head, position);
  Object.assign(state, { calc: { kind, layer, head, position } });
  panel.hidden = false;
  if (clicked.mean && !isRNN && available(kind)) renderHeadBreakdown(body, kind, layer, position, clicked.key);
  if (has && isRNN) openRnnCalc(position);
  else if (has) openHeadCalc(kind, layer, head, position, clicked.key);
  panel.dataset.kind = kind;
  panel.dataset.position = String(position);
  if (panel.scrollIntoView) panel.scrollIntoView({ block: "nearest" }); // not below the fold
}
function closeCalc() {
  $("calc").hidden = true;
  state.calc = null;
}
