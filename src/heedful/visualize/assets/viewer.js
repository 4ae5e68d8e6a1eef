// The whole page: beams, tabs and wiring; init() fills the controls and draws the first view.

const VIEWS = {
  matrix: () => renderHeatmapView("matrix"),
  heads: renderHeads,
  model: renderModelView,
  enc: () => renderHeatmapView("enc"),
  dec: () => renderHeatmapView("dec"),
  pipe: renderPipeline,
  replay: renderReplay,
  anim: renderAnim,
  block: renderBlock,
};
function invalidate(names) {
  for (const name of names) state.dirty.add(name);
  if (state.dirty.has(state.tab)) {
    state.dirty.delete(state.tab);
    VIEWS[state.tab]();
  }
}
function showTab(name) {
  state.tab = name;
  for (const tab of root.querySelectorAll('[role="tab"]')) {
    const selected = tab.dataset.tab === name;
    tab.setAttribute("aria-selected", String(selected));
    tab.tabIndex = selected ? 0 : -1;
    $("panel-" + tab.dataset.tab).hidden = !selected;
  }
  hideTip();
  invalidate([]);
}
function renderBeams() {
  $("beams").hidden = hyps.length < 2;
  const list = $("beam-list");
  list.textContent = "";
  hyps.forEach((h, i) => {
    const button = el("button", "hypothesis");
    button.type = "button";
    button.setAttribute("aria-pressed", String(i === state.hyp));
    const text = el("span", "text", h.text);
    // decode leaves <unk> out of the text: say where the output holds one, or it reads as whole
    const unknown = (h.tokens || []).filter((t) => t === "<unk>").length;
    if (unknown) text.appendChild(el("span", "unfinished", "(" + unknown + " \u00D7 <unk> left out)"));
    if (h.finished === false) text.appendChild(el("span", "unfinished", "(unfinished)"));
    button.append(el("span", "rank", "#" + (i + 1)), text, el("span", "score", fmt(h.score, 3)));
    button.addEventListener("click", () => selectHypothesis(i));
    list.appendChild(el("li")).appendChild(button);
  });
}
function selectHypothesis(i) {
  pause();
  animPause();
  state.hyp = i;
  state.focus = state.link = null;
  $("output-text").textContent = hyps[i].text;
  renderBeams();
  markTabs();
  invalidate(Object.keys(VIEWS));
}
function markTabs() {
  const kinds = { matrix: "cross", heads: "cross", enc: "enc", dec: "dec" };
  for (const [tab, kind] of Object.entries(kinds)) {
    $("tab-" + tab).classList.toggle("unavailable", !available(kind));
  }
}
function modelInfo() {
  const parts = [model.arch, model.attention].filter(Boolean);
  if (model.arch === "transformer") {
    parts.push(model.encoder_layers + "+" + model.decoder_layers + " layers", model.heads + " heads");
  }
  if (model.window) parts.push("local window D = " + model.window);
  if (model.copy) parts.push("copy (pointer-generator)");
  const search = trace.search || {};
  if (search.sample) parts.push("sampling: " + samplingLabel());
  else parts.push(search.num_beams > 1 ? "beam search, " + search.num_beams + " beams" : "greedy search");
  if (search.prefix) parts.push("prefix " + JSON.stringify(search.prefix));
  parts.push(sourceTokens.length + " source tokens");
  // heads switched off (inference/heads.py): their weights are drawn, their output was zero
  const off = (trace.masked_heads || []).map((h) => h.kind + ":" + h.layer + (h.head ? ":" + h.head : ""));
  if (off.length) parts.push("heads switched off: " + off.join(", "));
  return parts.join(" \u00B7 ");
}

function initTabs() {
  const tabs = Array.from(root.querySelectorAll('[role="tab"]'));
  tabs.forEach((tab, i) => {
    tab.addEventListener("click", () => showTab(tab.dataset.tab));
    tab.addEventListener("keydown", (event) => {
      const step = event.key === "ArrowRight" ? 1 : event.key === "ArrowLeft" ? -1 : 0;
      if (!step) return;
      const next = tabs[(i + step + tabs.length) % tabs.length];
      next.focus();
      showTab(next.dataset.tab);
    });
  });
}
// How the model was trained, where its directory says (checkpoint/status.py): the steps, what
// stopped it and its held-out scores; an undertrained model's pictures are not a trained one's.
function trainingStatus() {
  const t = trace.training;
  if (!t) return;
  const scores = Object.entries(t.scores).map(([name, value]) =>
    name === "exact_match" ? "exact match " + (100 * value).toFixed(1) + "%" : name + " " + fmt(value, 2));
  const said = "trained " + t.steps.toLocaleString("en") + " steps (stopped by " + t.stopped_by + ")" +
    (scores.length ? "; " + scores.join(", ") + " on " + t.on : "");
  $("training-status").textContent = (t.undertrained ? "UNDERTRAINED: " : "") + said;
  $("training-status").classList.toggle("undertrained", t.undertrained);
  $("training-status").hidden = false;
}
function init() {
  $("model-info").textContent = modelInfo();
  trainingStatus();
  if (hyps.length) $("output-text").textContent = hyps[0].text;
  renderBeams();
  markTabs();
  // selectors: layers and heads are properties of the model, the same for every hypothesis
  initHeatmaps();
  initHeadView();
  initReplay();
  initImage();
  initPipeline();
  initAnim();
  initBlock();
  initTabs();
  for (const name of Object.keys(VIEWS)) state.dirty.add(name);
  showTab(available("cross") && !image ? "matrix" : "replay"); // a picture opens on its replay
  $("calc-close").addEventListener("click", closeCalc);
  if (root.dataset.open) openCell(JSON.parse(root.dataset.open));
}
// render_step's page: the view of that kind at that layer and head, and the cell's calculation.
function openCell(cell) {
  const kind = CALC_KINDS[cell.kind];
  if (available(kind)) {
    if (kind !== "enc") state.step = cell.position;
    openInViews(kind, cell.layer, cell.head);
  }
  openCalc(kind, cell.layer, cell.head, cell.position);
}
// Hovering row i of the alignment matrix: the replay goes to step i and the head view shows
// that output token's lines (hovering one of its own tokens lets go of the link).
function linkStep(i) {
  if (state.link === i) return;
  state.link = i;
  setStep(i);
  state.dirty.add("heads");
}

init();
// for scripting and tests: the parsed trace and the few actions the controls perform; the
// last viewer of the page is window.heedfulViewer, each is its root's .heedfulViewer
const api = { root, trace, state, showTab, selectHypothesis, setStep, openCalc, openInViews };
root.heedfulViewer = window.heedfulViewer = api;
(window.heedfulViewers = window.heedfulViewers || []).push(api);
