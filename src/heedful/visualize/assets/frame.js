// The viewer in an iframe, for pages that show one trace after another: the server's page (a
// new translation, a head switched off) and the training snapshots' page (another step). The
// viewer page is heedful.visualize.html's viewer_template() with a trace in its slots; the
// frame is as tall as its content; and the view a reader had open (tab, layer, head, output
// step, the calculation) is opened again on the next trace, so that only the numbers change.
// The including page wraps it in its own strict function scope.

const escapeHtml = (text) => String(text).replace(/[&<>"']/g, (c) =>
  ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#x27;" })[c]);
const scriptJson = (data) => JSON.stringify(data).replace(/[<>&\u2028\u2029]/g, (c) =>
  "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
// The frame is as tall as the viewer (fitFrame), so the viewer's own scrollbar is off, and so is
// its height limit on figures: in a frame that grows with its content, 78vh would grow too.
const EMBEDDED = "<style>html { overflow-y: hidden; } " +
  ".heedful-viewer { --heedful-figure-max-height: none; }</style>";
// the viewer page of `template` (viewer_template's pieces) with this trace in its slots
function viewerPage(template, trace) {
  const values = { source: escapeHtml(trace.source), trace: scriptJson(trace),
    output: escapeHtml(trace.hypotheses[0].text) };
  const fill = (part) => (typeof part === "string" ? part : values[part.slot]);
  return template.map(fill).join("").replace("</head>", EMBEDDED + "</head>");
}
// the frame's height: its document's, plus a horizontal scrollbar's when it has one
function fitFrame(frame) {
  const doc = frame.contentDocument, top = doc && doc.documentElement;
  if (!top) return;
  const scrollbar = frame.contentWindow.innerHeight - top.clientHeight;
  frame.style.height = Math.ceil(top.getBoundingClientRect().height) + scrollbar + "px";
}
// Keep the frame fitted: on each load, and whenever the viewer's content changes (a tab, a
// hypothesis) or the width does, by the frame's own ResizeObserver (one of this window's does
// not see into the frame).
function followFrame(frame) {
  frame.addEventListener("load", () => {
    fitFrame(frame);
    const Observer = frame.contentWindow && frame.contentWindow.ResizeObserver;
    if (Observer) new Observer(() => fitFrame(frame)).observe(frame.contentDocument.documentElement);
  });
}
const viewerIn = (frame) => (frame.contentWindow && frame.contentWindow.heedfulViewer) || null;
// What the reader has open in the frame's viewer: its tab, output step, open calculation and
// every control (selects, checkboxes, sliders) by its data-part; null before a viewer is there.
function viewOf(frame) {
  const viewer = viewerIn(frame);
  if (!viewer) return null;
  const controls = [];
  for (const node of viewer.root.querySelectorAll("select[data-part], input[data-part]")) {
    controls.push([node.dataset.part, node.type === "checkbox" ? node.checked : node.value]);
  }
  const { tab, step, calc } = viewer.state;
  return { tab, step, calc: calc ? { ...calc } : null, controls };
}
// Open `view` (viewOf's) again in the viewer, as far as this trace has it: a control set to a
// value its options lack, or an output step past its tokens, stays as the viewer chose.
function restoreView(viewer, view) {
  for (const [name, value] of view.controls) {
    const node = viewer.root.querySelector('[data-part="' + name + '"]');
    if (!node) continue;
    if (node.type === "checkbox") node.checked = value;
    else if (node.tagName !== "SELECT" || Array.from(node.options).some((o) => o.value === value)) node.value = value;
    else continue;
    node.dispatchEvent(new Event(node.type === "range" ? "input" : "change"));
  }
  const tokens = (viewer.trace.hypotheses[0] || { tokens: [] }).tokens.length;
  viewer.showTab(view.tab);
  viewer.setStep(Math.max(0, Math.min(view.step, tokens - 1)));
  const calc = view.calc;
  if (!calc) return;
  const count = calc.kind === "enc" ? viewer.trace.source_tokens.length : tokens;
  if (count) viewer.openCalc(calc.kind, calc.layer, calc.head, Math.min(calc.position, count - 1));
}
// Show `trace` in the frame, opening the view the reader had there.
function showInFrame(frame, template, trace) {
  const view = viewOf(frame);
  frame.addEventListener("load", () => {
    const viewer = viewerIn(frame);
    if (view && viewer) restoreView(viewer, view);
  }, { once: true });
  frame.hidden = false;
  frame.srcdoc = viewerPage(template, trace);
}
