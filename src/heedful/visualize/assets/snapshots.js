// The training snapshots' page (heedful.visualize.snapshots): a slider over the steps traced,
// each step's validation scores, and the viewer of that step's trace of the chosen input in a
// frame (frame.js), the reader's view kept open from one step to the next.

const $ = (id) => document.getElementById(id);
const data = JSON.parse($("snapshots-data").textContent);
const snapshots = data.snapshots, frame = $("viewer-frame"), slider = $("step-slider");
const state = { index: 0, input: 0 };
// How a score reads: exact match as a percentage, BLEU and chrF with two decimals.
const NAMES = { exact_match: "exact match", bleu: "BLEU", chrf: "chrF", loss: "loss", ppl: "perplexity" };
function scoreText(name, value) {
  if (name === "exact_match") return NAMES[name] + " " + (100 * value).toFixed(1) + "%";
  const digits = name === "bleu" || name === "chrf" ? 2 : 4;
  return (NAMES[name] || name) + " " + Number(value).toFixed(digits);
}
function scoresLine(scores) {
  const names = Object.keys(scores);
  if (!names.length) return "before training: the weights as initialised, random";
  const first = ["exact_match", "bleu", "chrf", "loss"].filter((n) => n in scores);
  const rest = names.filter((n) => !first.includes(n) && n !== "ppl");
  return "validation: " + [...first, ...rest].map((n) => scoreText(n, scores[n])).join(" \u00B7 ");
}
function show() {
  const snapshot = snapshots[state.index], trace = snapshot.traces[state.input];
  slider.value = String(state.index);
  $("step").textContent = "step " + snapshot.step.toLocaleString("en") +
    " (" + (state.index + 1) + " of " + snapshots.length + ")";
  $("scores").textContent = scoresLine(snapshot.scores);
  for (const [i, tick] of Array.from($("ticks").children).entries()) {
    tick.setAttribute("aria-pressed", String(i === state.index));
  }
  $("missing").hidden = trace !== null;
  $("missing").textContent = trace === null
    ? "This step's trace of this input was over 1 MiB even without its internals, so it was not kept." : "";
  if (trace === null) frame.hidden = true;
  else showInFrame(frame, data.viewer, trace);
  window.heedfulSnapshots.shown = { index: state.index, input: state.input, step: snapshot.step };
}
function init() {
  slider.max = String(snapshots.length - 1);
  slider.addEventListener("input", () => { state.index = +slider.value; show(); });
  snapshots.forEach((snapshot, i) => {
    const tick = document.createElement("button");
    tick.type = "button";
    tick.textContent = String(snapshot.step);
    tick.title = scoresLine(snapshot.scores);
    tick.addEventListener("click", () => { state.index = i; show(); });
    $("ticks").appendChild(tick);
  });
  data.inputs.forEach((source, j) => $("input").appendChild(new Option(source, String(j))));
  $("input-label").hidden = data.inputs.length < 2;
  $("input").addEventListener("change", () => { state.input = +$("input").value; show(); });
  followFrame(frame);
  show();
}
// for scripting and tests: the data, what is shown, and a way to go to snapshot i
window.heedfulSnapshots = { data, frame, shown: null, go: (i) => { state.index = i; show(); } };
init();
