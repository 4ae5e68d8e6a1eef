// Decoding replay, RNN panel: h_t and c_t as colour strips, and the scores before the softmax.

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
// A vector as a row of coloured cells, one per unit; `vertical`: a column 18 px wide (the
// encoder states under their tokens, rnn_steps.js).
function drawStrip(canvas, vector, max, vertical = false) {
  const n = vector.length;
  const cell = vertical ? Math.max(2, Math.min(8, Math.floor(200 / Math.max(n, 1))))
    : Math.max(2, Math.min(14, Math.floor(640 / Math.max(n, 1))));
  const ctx = vertical ? sizeCanvas(canvas, 18, n * cell) : sizeCanvas(canvas, n * cell, 20);
  vector.forEach((v, i) => {
    ctx.fillStyle = divColour(+v || 0, max);
    if (vertical) ctx.fillRect(0, i * cell, 18, cell);
    else ctx.fillRect(i * cell, 0, cell, 20);
  });
  canvas.onmousemove = (event) => {
    const box = canvas.getBoundingClientRect();
    const i = Math.floor((vertical ? event.clientY - box.top : event.clientX - box.left) / cell);
    if (i >= 0 && i < n) showTip(event, [["unit", String(i + 1)], ["value", fmt(+vector[i], 4)]]);
  };
  canvas.onmouseleave = hideTip;
}
function renderStrips(rnn, t) {
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
}
// One row per source token: its score as a bar either side of 0, then its weight.
function addScoreRow(table, tok, score, weight, sMax) {
  const row = table.insertRow();
  row.insertCell().appendChild(tokenChip(tok));
  const box = el("div", "div-box");
  const v = +score || 0;
  const bar = el("div", "bar " + (v >= 0 ? "pos" : "neg"));
  const half = (Math.abs(v) / sMax) * 50;
  bar.style.left = (v >= 0 ? 50 : 50 - half) + "%";
  bar.style.width = half + "%";
  box.append(bar, el("div", "axis"));
  row.insertCell().appendChild(box);
  row.insertCell().appendChild(el("span", "num", fmt(score, 3)));
  const wBox = el("div", "w-box");
  const wBar = el("div", "bar");
  wBar.style.width = (weight != null ? (+weight || 0) * 100 : 0) + "%";
  wBox.appendChild(wBar);
  row.insertCell().appendChild(wBox);
  row.insertCell().appendChild(el("span", "num", weight != null ? fmt(weight, 3) : "\u2013"));
}
function renderScores(h, t) {
  const table = $("rnn-scores");
  table.textContent = "";
  const scores = h.rnn.scores && h.rnn.scores[t];
  const weights = h.cross_attention && h.cross_attention[t] ? h.cross_attention[t][0][0] : null;
  $("rnn-scores-note").hidden = !!scores;
  $("rnn-scores-note").textContent = scores ? "" : "No attention scores: this model has no attention.";
  if (!scores) return;
  const header = table.insertRow();
  for (const name of ["source", "score (before softmax)", "", "weight (after softmax)", ""]) {
    header.appendChild(el("th", null, name));
  }
  const sMax = scores.reduce((m, v) => Math.max(m, Math.abs(+v || 0)), 0) || 1;
  sourceTokens.forEach((tok, s) => addScoreRow(table, tok, scores[s], weights ? weights[s] : null, sMax));
}
function renderRNN(h, t) {
  $("rnn-panel").hidden = !h.rnn;
  if (!h.rnn) return;
  renderStrips(h.rnn, t);
  renderScores(h, t);
}
