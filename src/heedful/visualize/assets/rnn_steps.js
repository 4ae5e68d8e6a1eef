// View (RNN traces): the encoder reading the source token by token, its states h̄_1 … h̄_S
// appearing as colour strips under their tokens, then the decoder's replay over them: at each
// output step h_t, the attention weights a_t(s) as the strips' emphasis, and the context
// c_t = Σ_s a_t(s) h̄_s (Bahdanau et al. 2014, §3.1; Luong et al. 2015, §3). ◀ ▶ step by
// one; Play takes one step per interval, the speed control sets that interval.

const ANIM_STEP_MS = 900; // one step at speed 1×
// pos: 0 … S while the encoder has read pos tokens, S + 1 + t at decoder step t. shown, step
// and weights are what the last drawing showed; timerMs the interval of the running timer.
const anim = { pos: 0, speed: 1, interval: ANIM_STEP_MS, timer: null, timerMs: null,
  shown: 0, step: null, weights: null };
state.anim = anim;

const ANIM_FOR_RNN = "This view is for RNN models: it animates an RNN encoder reading the " +
  "source token by token, then the decoder's steps over its states. A Transformer reads every " +
  "token at once: see its encoder self-attention and the model view.";
const ANIM_NO_STATES = "This trace does not carry the encoder states h\u0304_s (it was too " +
  "large, or made without them): build it with build_trace(..., internals=True) to see them.";
const ANIM_NO_ATTENTION = "No attention: this model's decoder sees the source only through " +
  "the encoder's final state, so there are no weights and no context c_t.";

const encoderStates = () => (trace.internals && trace.internals.encoder_states) || null;
const animLast = () => sourceTokens.length + (hyp() ? hyp().tokens.length : 0);

// One colour scale for every strip of this hypothesis: h̄_s, h_t and c_t (a mean of the h̄_s).
function animScale() {
  let max = 0;
  const rows = encoderStates().concat((hyp().rnn && hyp().rnn.decoder_states) || []);
  for (const row of rows) for (const v of row) max = Math.max(max, Math.abs(+v || 0));
  return max || 1;
}
// A strip that also carries its numbers (data-vector), for tests and scripts.
function dataStrip(canvas, vector, scale, vertical) {
  drawStrip(canvas, vector, scale, vertical);
  canvas.dataset.vector = JSON.stringify(vector);
}

// ---- drawing ------------------------------------------------------------------------------
// Source token s with its state h̄_s under it: hidden until the encoder has read it; at a
// decoder step its emphasis (opacity) follows its weight, largest weight fully opaque.
function animColumn(s, shown, current, weight, wMax, scale) {
  const col = el("div", "anim-col");
  col.dataset.s = String(s);
  col.appendChild(tokenChip(sourceTokens[s], current ? "current" : ""));
  const canvas = col.appendChild(el("canvas"));
  const value = col.appendChild(el("span", "value"));
  if (!shown) {
    drawStrip(canvas, encoderStates()[s], scale, true); // keeps its place, drawn blank
    canvas.style.visibility = "hidden";
    col.classList.add("pending");
    return col;
  }
  dataStrip(canvas, encoderStates()[s], scale, true);
  col.dataset.shown = "true";
  if (weight != null) {
    col.dataset.weight = String(weight);
    col.style.opacity = (0.15 + 0.85 * (wMax > 0 ? weight / wMax : 0)).toFixed(3);
    value.textContent = fmt(weight, 2);
    value.title = "a_t(" + (s + 1) + ") = " + fmt(weight, 5);
  }
  return col;
}
function renderAnimSource(shown, current, weights, scale) {
  const box = $("anim-source");
  box.textContent = "";
  const wMax = weights ? weights.reduce((m, w) => Math.max(m, w), 0) : 0;
  sourceTokens.forEach((tok, s) => {
    const weight = weights ? weights[s] : null;
    box.appendChild(animColumn(s, s < shown, s === current, weight, wMax, scale));
  });
}
function renderAnimDecoder(h, t, scale) {
  $("anim-decoder").hidden = t == null;
  if (t == null) return;
  const output = $("anim-output");
  output.textContent = "";
  h.tokens.forEach((tok, i) => {
    output.appendChild(tokenChip(tok, i < t ? "done" : i === t ? "current" : "future"));
  });
  const rnn = h.rnn || {};
  if (rnn.decoder_states && rnn.decoder_states[t]) dataStrip($("anim-h"), rnn.decoder_states[t], scale);
  const context = rnn.contexts && rnn.contexts[t];
  $("anim-c-row").hidden = !context;
  $("anim-decoder-note").hidden = !!context;
  $("anim-decoder-note").textContent = context ? "" : ANIM_NO_ATTENTION;
  if (context) dataStrip($("anim-c"), context, scale);
}
function renderAnimStatus(h) {
  const status = $("anim-status"), S = sourceTokens.length, k = anim.shown, t = anim.step;
  status.textContent = "";
  if (t == null && k === 0) {
    status.textContent = "Encoder: \u25B6 reads the first token";
  } else if (t == null) {
    status.textContent = "Encoder step " + k + " of " + S + ": reads ";
    status.append(tokenChip(sourceTokens[k - 1], "current"), " \u2192 h\u0304_" + k);
  } else if (!h.cross_attention) {  // the bottleneck: no weights, no c_t to speak of
    status.textContent = "Decoder step " + (t + 1) + " of " + h.tokens.length + ": h_t, from " +
      "y_{t\u22121} and h_{t\u22121} alone (the source reached the decoder once, as its start " +
      "state from the encoder's final state), produces ";
    status.append(tokenChip(h.tokens[t], "current"));
  } else {
    status.textContent = "Decoder step " + (t + 1) + " of " + h.tokens.length + ": h_t weighs " +
      "h\u0304_1\u2026h\u0304_" + S + " into c_t and produces ";
    status.append(tokenChip(h.tokens[t], "current"));
  }
}
function renderAnim() {
  const ok = isRNN && !!encoderStates() && !!hyp();
  setAvailable("anim", ok, isRNN ? ANIM_NO_STATES : ANIM_FOR_RNN);
  if (!ok) return;
  const h = hyp(), S = sourceTokens.length;
  anim.pos = Math.max(0, Math.min(anim.pos, animLast()));
  anim.shown = Math.min(anim.pos, S);
  anim.step = anim.pos > S ? anim.pos - S - 1 : null;
  const t = anim.step;
  anim.weights = t != null && h.cross_attention ? h.cross_attention[t][0][0].map(Number) : null;
  const scale = animScale();
  renderAnimSource(anim.shown, t == null ? anim.shown - 1 : -1, anim.weights, scale);
  renderAnimDecoder(h, t, scale);
  renderAnimStatus(h);
  $("anim-prev").disabled = anim.pos === 0;
  $("anim-next").disabled = anim.pos >= animLast();
  const title = "h\u0304_s, h_t and c_t: value of each unit (blue < 0 < red)";
  drawLegend($("anim-legend"), -scale, scale, (v) => divColour(v, scale), title);
  renderBottleneck(); // without attention: the encoder's final state as the only context
}

// ---- stepping and playing -----------------------------------------------------------------
function animGo(pos) {
  anim.pos = Math.max(0, Math.min(pos, animLast()));
  if (state.tab === "anim") renderAnim();
  else state.dirty.add("anim");
}
function animPause() {
  clearInterval(anim.timer);
  anim.timer = anim.timerMs = null;
  $("anim-play").textContent = "\u25B6 Play";
  $("anim-play").setAttribute("aria-pressed", "false");
}
function animStart() {
  clearInterval(anim.timer);
  anim.timerMs = anim.interval;
  anim.timer = setInterval(() => {
    if (anim.pos >= animLast()) animPause();
    else animGo(anim.pos + 1);
  }, anim.interval);
  $("anim-play").textContent = "\u275A\u275A Pause";
  $("anim-play").setAttribute("aria-pressed", "true");
}
function animPlay() {
  if (anim.timer) return animPause();
  if (anim.pos >= animLast()) animGo(0);
  animStart();
}
function setAnimSpeed(speed) {
  anim.speed = speed;
  anim.interval = Math.round(ANIM_STEP_MS / speed);
  if (anim.timer) animStart(); // a running animation takes the new pace at once
}
function initAnim() {
  $("anim-prev").addEventListener("click", () => { animPause(); animGo(anim.pos - 1); });
  $("anim-next").addEventListener("click", () => { animPause(); animGo(anim.pos + 1); });
  $("anim-play").addEventListener("click", animPlay);
  $("anim-speed").addEventListener("change", (event) => setAnimSpeed(+event.target.value));
  $("tab-anim").classList.toggle("unavailable", !isRNN || !encoderStates());
}
