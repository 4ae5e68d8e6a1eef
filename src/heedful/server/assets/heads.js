// Heads you can switch off (inference/heads.py; Michel et al. 2019): the model's attention
// heads as boxes, by kind and layer, a layer's own box for all its heads. Checking one
// translates the text again at once with those heads off (the request's mask_heads), and the
// page says how the output and its score moved from the model with every head on.

const KIND_NAMES = { encoder: "encoder self-attention", decoder: "decoder self-attention",
  cross: "cross-attention" };
// "kind:layer[:head]" (from 1) of every box checked; a whole layer as one
function headsOff() {
  const off = [];
  for (const row of document.querySelectorAll("#heads [data-kind]")) {
    const where = row.dataset.kind + ":" + row.dataset.layer;
    if (row.querySelector("input.layer").checked) off.push(where);
    else for (const box of row.querySelectorAll("input.head:checked")) off.push(where + ":" + box.dataset.head);
  }
  return off;
}
function headBox(className, title, data) {
  const label = document.createElement("label");
  const box = document.createElement("input");
  box.type = "checkbox";
  box.className = className;
  Object.assign(box.dataset, data);
  label.append(box, title);
  return label;
}
function layerRow(kind, layer, count) {
  const row = document.createElement("div");
  row.className = "head-row";
  Object.assign(row.dataset, { kind, layer: String(layer) });
  row.append(document.createTextNode("layer " + layer), headBox("layer", "all", {}));
  for (let h = 1; h <= count; h++) row.append(headBox("head", String(h), { head: String(h) }));
  return row;
}
// shape: {kind: [heads of layer 1, ...]} of the served model, or null (no heads to switch)
function initHeads(shape, changed) {
  const panel = document.getElementById("heads");
  if (!shape) return;
  for (const [kind, layers] of Object.entries(shape)) {
    const group = document.createElement("div");
    group.className = "head-group";
    group.appendChild(document.createElement("b")).textContent = KIND_NAMES[kind] || kind;
    layers.forEach((count, i) => group.appendChild(layerRow(kind, i + 1, count)));
    panel.appendChild(group);
  }
  panel.addEventListener("change", (event) => {
    const row = event.target.closest("[data-kind]");
    if (event.target.classList.contains("layer")) {
      for (const box of row.querySelectorAll("input.head")) box.disabled = event.target.checked;
    }
    changed();
  });
  panel.hidden = false;
}
const allOn = new Map(); // "beams text" -> {text, score} of the model with every head on
const scoreOf = (answer) => (answer.attention ? answer.attention.hypotheses[0].score : null);
const said = (one) => JSON.stringify(one.text) + (one.score == null ? "" : " (score " + one.score.toFixed(3) + ")");
// After an answer: with heads off, the output and its score beside every head's (`unmasked`
// fetches those once per text and beam size); with none off, nothing to compare.
async function showEffect(key, off, answer, unmasked) {
  const effect = document.getElementById("heads-effect");
  const now = { text: answer.translatedText, score: scoreOf(answer) };
  if (!off.length) {
    allOn.set(key, now);
    effect.hidden = true;
    return;
  }
  if (!allOn.has(key)) {
    const full = await unmasked();
    allOn.set(key, { text: full.translatedText, score: scoreOf(full) });
  }
  effect.textContent = "With " + off.join(", ") + " off: " + said(now) +
    "; with every head on: " + said(allOn.get(key)) + ".";
  effect.hidden = false;
}
