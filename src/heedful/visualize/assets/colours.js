// Colour scales: viridis for weights, blue-white-red for signed values, one colour per head;
// drawLegend draws a scale as a bar with its ends labelled.

function makeLut(stops) {
  const lut = [];
  for (let i = 0; i < 256; i++) {
    const x = (i / 255) * (stops.length - 1);
    const k = Math.min(Math.floor(x), stops.length - 2);
    const f = x - k;
    const rgb = [0, 1, 2].map((c) => Math.round(stops[k][c] + (stops[k + 1][c] - stops[k][c]) * f));
    lut.push("rgb(" + rgb.join(",") + ")");
  }
  return lut;
}
// viridis for weights (matplotlib's default, as in heatmap.py); blue-white-red for signed values
const SEQUENTIAL = makeLut([
  [68, 1, 84], [72, 40, 120], [62, 73, 137], [49, 104, 142], [38, 130, 142],
  [31, 158, 137], [53, 183, 121], [109, 205, 89], [180, 222, 44], [253, 231, 37],
]);
const DIVERGING = makeLut([
  [33, 102, 172], [103, 169, 207], [209, 229, 240], [247, 247, 247],
  [253, 219, 199], [239, 138, 98], [178, 24, 43],
]);
const index255 = (x) => (x >= 0 ? Math.min(255, Math.round(x * 255)) : 0);
const seqColour = (v, max) => SEQUENTIAL[index255(v / max)];
const divColour = (v, max) => DIVERGING[index255((v / max + 1) / 2)];
const HEAD_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
  "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"];
const headColour = (h) => HEAD_COLOURS[h] || "hsl(" + ((h * 137.5) % 360) + ",65%,42%)";
function drawLegend(canvas, min, max, colour, title) {
  const ctx = canvas.getContext("2d");
  const w = canvas.width, x0 = 46, x1 = w - 46, barTop = 18;
  ctx.clearRect(0, 0, w, canvas.height);
  for (let x = x0; x < x1; x++) {
    ctx.fillStyle = colour(min + ((x - x0) / (x1 - x0 - 1)) * (max - min));
    ctx.fillRect(x, barTop, 1, 12);
  }
  ctx.fillStyle = "#5b6478";
  ctx.font = TITLE_FONT;
  ctx.textBaseline = "alphabetic";
  ctx.textAlign = "left";
  ctx.fillText(title, x0, 12);
  ctx.font = FONT;
  ctx.textBaseline = "middle";
  ctx.textAlign = "right";
  ctx.fillText(fmt(min, 2), x0 - 5, barTop + 6);
  ctx.textAlign = "left";
  ctx.fillText(fmt(max, 2), x1 + 5, barTop + 6);
}
