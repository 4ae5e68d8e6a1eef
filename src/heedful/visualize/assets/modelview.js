// View: the model view (after bertviz's): every layer × head of encoder self-attention, decoder
// self-attention and cross-attention as thumbnails, rows layers and columns heads; a click opens
// that layer and head in its matrix view and in the head view.

const THUMB = 64; // CSS pixels along a thumbnail's longer side
const VIEW_OF = { cross: "matrix", enc: "enc", dec: "dec" }; // the heatmap view of each kind
const SEQUENTIAL_RGB = SEQUENTIAL.map((colour) => colour.match(/\d+/g).map(Number));

// One pixel per weight, scaled up without smoothing: thousands of cells in one drawImage.
function drawThumb(canvas, rows) {
  const nRows = rows.length, nCols = rows.length ? rows[0].length : 0;
  const tile = document.createElement("canvas");
  tile.width = Math.max(1, nCols);
  tile.height = Math.max(1, nRows);
  const image = tile.getContext("2d").createImageData(tile.width, tile.height), data = image.data;
  rows.forEach((row, i) => {
    for (let j = 0, at = 4 * i * nCols; j < nCols; j++, at += 4) {
      const rgb = SEQUENTIAL_RGB[index255(+row[j] || 0)];
      data[at] = rgb[0];
      data[at + 1] = rgb[1];
      data[at + 2] = rgb[2];
      data[at + 3] = 255;
    }
  });
  tile.getContext("2d").putImageData(image, 0, 0);
  const scale = THUMB / Math.max(nRows, nCols, 1);
  const w = Math.max(1, Math.round(nCols * scale)), h = Math.max(1, Math.round(nRows * scale));
  const ctx = sizeCanvas(canvas, w, h);
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(tile, 0, 0, w, h);
}
function thumbButton(kind, layer, head) {
  const button = el("button", "thumb");
  button.type = "button";
  Object.assign(button.dataset, { kind, layer: String(layer), head: String(head) });
  button.setAttribute("aria-label", KINDS[kind].title + ", layer " + (layer + 1) + ", head " + (head + 1));
  button.title = button.getAttribute("aria-label");
  drawThumb(button.appendChild(el("canvas")), headRows(kind, layer, head));
  button.addEventListener("click", () => openInViews(kind, layer, head));
  return button;
}
function modelGrid(kind) {
  const section = el("section", "model-kind");
  section.dataset.kind = kind;
  section.appendChild(el("h3", null, KINDS[kind].title));
  // what a thumbnail's rows and columns are, in the words of that kind's matrix view
  section.appendChild(el("p", "model-axes", "In each: rows " + KINDS[kind].row + ", columns " +
    KINDS[kind].col + ", on the scale above."));
  const heads = headCount(kind, 0), layers = layerCount(kind);
  const grid = section.appendChild(el("div", "model-grid"));
  grid.style.gridTemplateColumns = "auto repeat(" + heads + ", max-content)";
  grid.appendChild(el("span"));
  for (let head = 0; head < heads; head++) {
    grid.appendChild(el("span", "model-label", heads === 1 ? "attention" : "head " + (head + 1)));
  }
  for (let layer = 0; layer < layers; layer++) {
    grid.appendChild(el("span", "model-label", isRNN ? "" : "layer " + (layer + 1)));
    for (let head = 0; head < heads; head++) grid.appendChild(thumbButton(kind, layer, head));
  }
  return section;
}
function renderModelView() {
  const kinds = ["enc", "dec", "cross"].filter(available);
  setAvailable("model", kinds.length > 0, missingMessage("cross"));
  const legend = $("model-legend");  // the thumbnails share one scale: weights from 0 to 1
  drawLegend(legend, 0, 1, (v) => seqColour(v, 1), "attention weight, the same scale in every thumbnail");
  legend.dataset.range = "0,1";
  const box = $("model-grids");
  box.textContent = "";
  for (const kind of kinds) box.appendChild(modelGrid(kind));
}
// A layer and head of one kind in its heatmap view (shown) and in the head view (that head only).
function openInViews(kind, layer, head) {
  const name = VIEW_OF[kind];
  $(name + "-layer").value = String(layer);
  $(name + "-head").value = String(head);
  $("hv-kind").value = kind;
  fillSelect($("hv-layer"), layerOptions(layerCount(kind)));
  $("hv-layer").value = String(layer);
  ensureHeadToggles(headCount(kind, layer));
  for (const box of root.querySelectorAll(".head-toggle")) box.checked = +box.dataset.head === head;
  state.dirty.add("heads");
  state.dirty.add(name);
  showTab(name);
}
