// View: step-by-step decoding replay (output so far, attention over the source, candidates).

function renderProgress(tokens, t) {
  const slider = $("step-slider");
  slider.max = String(Math.max(0, tokens.length - 1));
  slider.value = String(t);
  const current = $("current-step");
  current.textContent = "Step " + (t + 1) + " of " + tokens.length + ": producing ";
  current.appendChild(tokenChip(tokens[t] == null ? "" : tokens[t], "current"));
  const output = $("replay-output");
  output.textContent = "";
  const pgen = hyp() && hyp().rnn && hyp().rnn.p_gen; // only a pointer-generator has it
  tokens.forEach((tok, i) => {
    const chip = tokenChip(tok, i < t ? "done" : i === t ? "current" : "future");
    output.appendChild(pgen ? pgenItem(chip, +pgen[i] || 0) : chip);
  });
  renderPgenNote(pgen, t);
}
// The pointer-generator (See et al. 2017): under each output token a bar of p_gen, the
// probability of generating it from the vocabulary (green) rather than copying it (amber).
function pgenItem(chip, p) {
  const item = el("span", "pgen-item");
  item.title = "p_gen " + fmt(p, 3) + ": generate " + Math.round(p * 100) + "%, copy " +
    Math.round((1 - p) * 100) + "%";
  const box = el("span", "pgen-box");
  const bar = el("span", "pgen");
  bar.style.width = Math.max(0, Math.min(1, p)) * 100 + "%";
  box.appendChild(bar);
  item.append(chip, box);
  return item;
}
function renderPgenNote(pgen, t) {
  const note = $("replay-pgen");
  note.hidden = !pgen;
  if (!pgen) return;
  const p = +pgen[t] || 0;
  note.textContent = "Copy: p_gen = " + fmt(p, 3) + ", so this step's probabilities are " +
    fmt(p, 2) + " \u00D7 the softmax + " + fmt(1 - p, 2) + " \u00D7 the attention on the " +
    "source positions holding each token (bars: generate in green, copy in amber).";
}
function sourceBar(tok, w) {
  const item = el("div", "source-bar");
  item.title = label(tok) + ": " + fmt(w, 4);
  const box = el("div", "bar-box");
  const bar = el("div", "bar");
  bar.style.height = Math.round(w * 100) + "%";
  box.appendChild(bar);
  const chip = tokenChip(tok, w > 0.45 ? "strong" : "");
  chip.style.background = "rgba(43, 89, 195, " + (0.06 + 0.8 * w).toFixed(3) + ")"; // highlight
  item.append(box, el("span", "value", w >= 0.005 ? fmt(w, 2).replace(/^0/, "") : ""), chip);
  return item;
}
function renderSourceAttention(t) {
  const source = $("replay-source");
  source.textContent = "";
  const hasAttention = available("cross");
  $("replay-attention-note").hidden = hasAttention;
  $("replay-attention-note").textContent = hasAttention ? "" : missingMessage("cross");
  $("replay-layer-label").hidden = !hasAttention || layerCount("cross") < 2;
  $("replay-head-label").hidden = !hasAttention || headCount("cross", 0) < 2;
  if (!hasAttention) return;
  const weights = matrixRows("cross", +$("replay-layer").value, $("replay-head").value)[t];
  sourceTokens.forEach((tok, s) => source.appendChild(sourceBar(tok, +weights[s] || 0)));
}
function renderCandidates(h, tokens, t) {
  const topk = $("replay-topk");
  topk.textContent = "";
  const candidates = h.top_k && h.top_k[t];
  $("replay-topk-note").hidden = !!candidates;
  $("replay-topk-note").textContent = candidates ? "" : "This trace has no top-k candidates.";
  for (const cand of candidates || []) topk.append(...candidateRow(cand, tokens[t]));
  const sampled = h.sampled && h.sampled[t];
  if (!sampled) return;
  // sampling: the distribution the token was drawn from (temperature, top-k, top-p applied)
  const title = el("div", "sampled-title", "drawn from (" + samplingLabel() + "):");
  title.style.gridColumn = "1 / -1";
  topk.appendChild(title);
  for (const cand of sampled) topk.append(...candidateRow(cand, tokens[t]));
}
function candidateRow(cand, token) {
  const chosen = cand.token === token;
  const chip = tokenChip(cand.token, (chosen ? "chosen" : "") + (cand.token === UNK ? " unk" : ""));
  if (cand.token === UNK) chip.title = UNK_NOTE;
  const box = el("div", "prob-box" + (chosen ? " chosen-row" : ""));
  const bar = el("div", "prob");
  bar.style.width = Math.max(0, Math.min(1, +cand.prob || 0)) * 100 + "%";
  box.appendChild(bar);
  return [chip, box, el("span", "num", fmt(cand.prob, 3))];
}
function samplingLabel() {
  const s = (trace.search && trace.search.sample) || {};
  const parts = ["temperature " + (s.temperature == null ? 1 : s.temperature)];
  if (s.top_k != null) parts.push("top-k " + s.top_k);
  if (s.top_p != null) parts.push("top-p " + s.top_p);
  if (s.seed != null) parts.push("seed " + s.seed);
  return parts.join(", ");
}
// <unk> is a real candidate (every unknown piece of the training data was one); <s> and <pad>,
// never a training target, are not listed (trace.py).
const UNK = "<unk>";
const UNK_NOTE = "<unk>: the unknown piece; the search may pick it, and the text then " +
  "shows an unknown character in its place";
function renderReplay() {
  const h = hyp();
  if (!h) return;
  const tokens = h.tokens || [];
  const t = Math.max(0, Math.min(state.step, tokens.length - 1));
  state.step = t;
  renderProgress(tokens, t);
  renderSourceAttention(t);
  renderImage(t); // image.js: the picture, for an image model's trace
  renderCandidates(h, tokens, t);
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
function initReplay() {
  if (available("cross")) {
    fillSelect($("replay-layer"), layerOptions(layerCount("cross")), layerCount("cross") - 1);
    fillSelect($("replay-head"), headOptions(headCount("cross", 0)));
  }
  for (const id of ["replay-layer", "replay-head"]) {
    $(id).addEventListener("change", () => invalidate(["replay"]));
  }
  $("step-slider").addEventListener("input", (event) => setStep(+event.target.value));
  $("play-button").addEventListener("click", play);
  $("replay-calc").addEventListener("click", () => {
    const head = $("replay-head").value;
    openCalc("cross", +$("replay-layer").value || 0, head === "avg" ? 0 : +head || 0, state.step);
  });
}
