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
  tokens.forEach((tok, i) => {
    output.appendChild(tokenChip(tok, i < t ? "done" : i === t ? "current" : "future"));
  });
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
  for (const cand of candidates || []) {
    const chosen = cand.token === tokens[t];
    const chip = tokenChip(cand.token, (chosen ? "chosen" : "") + (cand.token === UNK ? " unk" : ""));
    if (cand.token === UNK) chip.title = UNK_NOTE;
    const box = el("div", "prob-box" + (chosen ? " chosen-row" : ""));
    const bar = el("div", "prob");
    bar.style.width = Math.max(0, Math.min(1, +cand.prob || 0)) * 100 + "%";
    box.appendChild(bar);
    topk.append(chip, box, el("span", "num", fmt(cand.prob, 3)));
  }
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
