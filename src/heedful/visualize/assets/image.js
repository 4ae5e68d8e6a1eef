// View: an image model's picture in the decoding replay (trace.image, trace_image.py). A grid of
// cells lies over the picture, one per region (row-major: region s = i·gw + j), each darkening
// the picture as much as its weight falls short of the map's peak: the current word's
// attention, or, while a word below is hovered, that word's; for a ViT, the self-attention of
// a chosen patch over the others, or its attention rollout. Dimming, not a colour wash: the
// scene keeps its own colours where the model looks (the captions name them).

const image = trace.image || null;
const imageState = { mode: "word", patch: 0, hover: null, words: null };
const IMAGE_DIM = 0.75; // how dark a cell of weight 0 is; a cell at the map's peak is clear
const LIT = 0.5; // hovering a word outlines the regions holding at least half its peak weight

function initImage() {
  $("replay-image").hidden = !image;
  if (!image) return;
  const uri = String(image.data_uri || "");
  if (/^data:image\/(png|jpeg);base64,/.test(uri)) $("image-picture").src = uri; // never a URL
  const [gh, gw] = image.grid;
  const cells = $("image-cells");
  cells.style.gridTemplateColumns = "repeat(" + gw + ", 1fr)";
  cells.style.gridTemplateRows = "repeat(" + gh + ", 1fr)";
  for (let s = 0; s < gh * gw; s++) cells.appendChild(regionCell(s));
  const modes = [["word", "the word's attention over the picture"]];
  if (available("enc")) modes.push(["patch", "a patch's self-attention (click a patch)"]);
  if (image.rollout) modes.push(["rollout", "a patch's attention rollout (click a patch)"]);
  fillSelect($("image-mode"), modes, "word");
  if (available("enc")) {
    fillSelect($("image-layer"), layerOptions(layerCount("enc")), layerCount("enc") - 1);
  }
  for (const name of ["image-mode", "image-layer"]) {
    $(name).addEventListener("change", () => {
      imageState.mode = $("image-mode").value;
      renderImage(state.step);
    });
  }
}
function regionCell(s) {
  const cell = el("div", "region");
  cell.dataset.region = String(s);
  cell.addEventListener("click", () => {
    imageState.patch = s;
    if (imageState.mode !== "word") renderImage(state.step);
  });
  cell.addEventListener("mousemove", (event) =>
    showTip(event, [["region ", sourceTokens[s], true], ["weight ", fmt(+cell.dataset.weight, 4)]]));
  cell.addEventListener("mouseleave", hideTip);
  return cell;
}
// The weights the cells show: the hovered word's, or by the chosen mode.
function imageWeights(t) {
  const word = imageState.hover == null ? t : imageState.hover;
  if (imageState.hover == null && imageState.mode === "patch") {
    return averageRows("enc", +$("image-layer").value)[imageState.patch];
  }
  if (imageState.hover == null && imageState.mode === "rollout") return image.rollout[imageState.patch];
  if (!available("cross")) return null;
  return matrixRows("cross", +$("replay-layer").value, $("replay-head").value)[word];
}
function imageExplain(t) {
  const tokens = hyp().tokens;
  const patch = sourceTokens[imageState.patch];
  if (imageState.hover != null) return "Hovered: where the model looked to write " +
    JSON.stringify(tokens[imageState.hover]) + " (step " + (imageState.hover + 1) + ").";
  if (imageState.mode === "patch") return "Encoder layer " + (+$("image-layer").value + 1) +
    ": how much patch " + patch + " (outlined) attends to each patch, heads averaged.";
  if (imageState.mode === "rollout") return "Attention rollout (Abnar & Zuidema 2020): how much " +
    "patch " + patch + " after the last layer draws from each input patch, through every layer " +
    "(each layer \u00BD attention + \u00BD the residual path).";
  return "Step " + (t + 1) + ": where the model looked to write " + JSON.stringify(tokens[t]) +
    " (clear: the most weight; darker: less, black: none). Hover a word above to see its regions.";
}
// The caption's words under the picture, rebuilt only when the step or the output changes (a
// rebuild under the pointer would undo the hover it answers).
function renderImageWords(t) {
  const words = $("image-words");
  const key = state.hyp + ":" + t;
  if (imageState.words !== key) {
    imageState.words = key;
    words.textContent = "";
    hyp().tokens.forEach((tok, i) => {
      const chip = tokenChip(tok, i === t ? "current" : "");
      chip.dataset.step = String(i);
      chip.addEventListener("mouseenter", () => { imageState.hover = i; renderImage(state.step); });
      chip.addEventListener("mouseleave", () => { imageState.hover = null; renderImage(state.step); });
      words.appendChild(chip);
    });
  }
  for (const chip of words.children) chip.classList.toggle("hovered", +chip.dataset.step === imageState.hover);
}
function renderImage(t) {
  if (!image || !hyp()) return;
  renderImageWords(t);
  $("image-layer").closest("label").hidden = imageState.mode !== "patch" || layerCount("enc") < 2;
  $("image-explain").textContent = imageExplain(t);
  const weights = imageWeights(t) || [];
  let peak = 0, top = -1;
  for (let s = 0; s < weights.length; s++) if (+weights[s] > peak) { peak = +weights[s]; top = s; }
  Array.from($("image-cells").children).forEach((cell, s) => {
    const w = +weights[s] || 0;
    const a = peak > 0 ? IMAGE_DIM * (1 - w / peak) : 0;  // dark = not looked at
    cell.dataset.weight = String(w);
    cell.style.backgroundColor = "rgba(0, 0, 0, " + a.toFixed(4) + ")";
    cell.classList.toggle("top", s === top);
    cell.classList.toggle("lit", imageState.hover != null && peak > 0 && w >= LIT * peak);
    cell.classList.toggle("chosen", imageState.hover == null && imageState.mode !== "word" &&
      s === imageState.patch);
  });
}
