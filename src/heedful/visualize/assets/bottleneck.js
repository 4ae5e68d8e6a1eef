// The bottleneck (RNN traces without attention, in the "RNN, step by step" view): the encoder
// unrolled, h̄_{s−1} → h̄_s under each token; its final state handed over as the decoder's only
// context, s_0 = tanh(W_s h_final + b_s) (Bahdanau et al. 2014, A.2.2; without attention the
// model of Sutskever et al. 2014 and Cho et al. 2014); then the decoder unrolled, s_0 → h_1 →
// … → h_T, reading y_{t−1} below and writing y_t above. Each state is a strip with its first
// units' numbers beside it, as Alammar draws a hidden state.

const UNITS_SHOWN = 8; // "8 units with numbers": the first units of each state, printed
const BN_EXPLAIN = "Without attention the decoder never sees h\u0304_1 \u2026 h\u0304_S: only the " +
  "encoder's final state reaches it, once, as its start state s_0. Every output step reads the " +
  "source through those numbers alone, however long the sentence: the bottleneck attention removes.";

// A state: its strip (all units, blue < 0 < red) and its first UNITS_SHOWN units as numbers.
function stateCell(name, vector, scale, above, below) {
  const cell = el("div", "bn-state");
  cell.dataset.name = name;
  cell.appendChild(el("div", "bn-token", "")).appendChild(above || el("span"));
  const body = cell.appendChild(el("div", "bn-body"));
  const canvas = body.appendChild(el("canvas"));
  dataStrip(canvas, vector, scale, true);
  const units = body.appendChild(el("ol", "bn-units"));
  units.dataset.units = JSON.stringify(vector.slice(0, UNITS_SHOWN));
  for (const v of vector.slice(0, UNITS_SHOWN)) {
    const unit = units.appendChild(el("li", null, fmt(v, 2)));
    unit.style.background = divColour(v, scale);
  }
  const more = vector.length - UNITS_SHOWN;
  cell.appendChild(el("div", "bn-name", name + (more > 0 ? " (" + UNITS_SHOWN + " of " + vector.length + " units)" : "")));
  cell.appendChild(el("div", "bn-token")).appendChild(below || el("span"));
  return cell;
}
function bnArrow(from, to, text = "\u2192") {
  const arrow = el("span", "bn-arrow", text);
  arrow.dataset.from = from;
  arrow.dataset.to = to;
  arrow.title = from + " \u2192 " + to;
  return arrow;
}
// One unrolled row: the states in order with an arrow from each to the next.
function unrolledRow(part, cells) {
  const row = el("div", "bn-row");
  row.dataset.part = part;
  cells.forEach((cell, i) => {
    if (i) row.appendChild(bnArrow(cells[i - 1].dataset.name, cell.dataset.name));
    row.appendChild(cell);
  });
  return row;
}
function renderBottleneck() {
  const box = $("anim-bottleneck"), shared = trace.internals || {}, h = hyp();
  box.hidden = model.attention !== "none" || !encoderStates() || !h;
  box.textContent = "";
  if (box.hidden) return;
  box.append(el("h3", null, "The bottleneck: one state carries the whole source"), el("p", "explain", BN_EXPLAIN));
  const states = encoderStates(), decoder = h.rnn.decoder_states, S = states.length;
  const scale = animScale(), bar = "h\u0304_";
  const encoder = states.map((v, s) => stateCell(bar + (s + 1), v, scale, null, tokenChip(sourceTokens[s])));
  box.appendChild(unrolledRow("bn-encoder", encoder));
  const handover = box.appendChild(el("div", "bn-row bn-handover"));
  if (shared.encoder_final && shared.decoder_start) {
    handover.dataset.part = "bn-handover";
    const final = stateCell("h_final", shared.encoder_final, scale);
    const start = stateCell("s_0", shared.decoder_start, scale);
    handover.append(el("span", "note-inline", "the only context: h_final, the encoder's final " +
      "state (a bidirectional one's: forward at " + S + ", backward at 1) \u2192"), final,
      bnArrow("h_final", "s_0", "\u2192 tanh(W_s h_final + b_s) \u2192"), start);
  } else handover.appendChild(el("p", "note-inline", "h_final and s_0 were not recorded (an older trace)"));
  const reads = decoderReads();
  const steps = decoder.map((v, t) => stateCell("h_" + (t + 1), v, scale, tokenChip(h.tokens[t], "chosen"), tokenChip(reads[t])));
  if (shared.decoder_start) steps.unshift(stateCell("s_0", shared.decoder_start, scale));
  box.appendChild(unrolledRow("bn-decoder", steps));
  markBottleneckStep(box);
}
// The state the animation is at: an encoder step's h̄_s, a decoder step's h_t.
function markBottleneckStep(box) {
  const name = anim.step != null ? "h_" + (anim.step + 1) : anim.shown ? "h\u0304_" + anim.shown : null;
  for (const cell of box.querySelectorAll(".bn-state")) {
    cell.classList.toggle("current", cell.dataset.name === name);
  }
}
