// The page's script: the form, the examples, and the viewer's frame sized to the viewer.
// index.html wraps it in a strict function scope: it leaves only window.heedfulPage.

const $ = (id) => document.getElementById(id);
const page = JSON.parse($("page-data").textContent);
const escapeHtml = (text) => String(text).replace(/[&<>"']/g, (c) =>
  ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#x27;" })[c]);
const scriptJson = (data) => JSON.stringify(data).replace(/[<>&\u2028\u2029]/g, (c) =>
  "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
// The frame is as tall as the viewer (fit), so the viewer's own scrollbar is off, and so is
// its height limit on figures: in a frame that grows with its content, 78vh would grow too.
const EMBEDDED = "<style>html { overflow-y: hidden; } " +
  ".heedful-viewer { --heedful-figure-max-height: none; }</style>";
// the viewer page of heedful.visualize.html, with this trace in its slots
function viewerPage(trace) {
  const values = { source: escapeHtml(trace.source), trace: scriptJson(trace),
    output: escapeHtml(trace.hypotheses[0].text) };
  const fill = (part) => (typeof part === "string" ? part : values[part.slot]);
  return page.viewer.map(fill).join("").replace("</head>", EMBEDDED + "</head>");
}
const frame = $("viewer-frame");
// the frame's height: its document's, plus a horizontal scrollbar's when it has one
function fit() {
  const doc = frame.contentDocument, root = doc && doc.documentElement;
  if (!root) return;
  const scrollbar = frame.contentWindow.innerHeight - root.clientHeight;
  frame.style.height = Math.ceil(root.getBoundingClientRect().height) + scrollbar + "px";
}
frame.addEventListener("load", () => {
  fit();
  // the frame's own ResizeObserver: one of this window's does not see into the frame; it
  // fires when the viewer's content changes (a tab, a hypothesis) and when the width does
  const Observer = frame.contentWindow && frame.contentWindow.ResizeObserver;
  if (Observer) new Observer(fit).observe(frame.contentDocument.documentElement);
});
// an engine without attention (ctranslate2): the beam's outputs as a list, best first
function showOutputs(texts) {
  const list = $("outputs");
  list.replaceChildren(...texts.map((text) => {
    const item = document.createElement("li");
    item.textContent = text;
    return item;
  }));
  list.hidden = false;
}
function showError(message) {
  $("error").textContent = message;
  $("error").hidden = false;
}
async function translate(event) {
  event.preventDefault();
  const beams = +$("num-beams").value;
  $("error").hidden = true;
  $("translate-button").disabled = true;
  $("status").textContent = "translating\u2026";
  try {
    // every hypothesis of the beam comes back (alternatives), for the viewer's beam list
    const response = await fetch("translate", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ q: $("source-input").value, source: page.source,
        target: page.target, num_beams: beams, alternatives: beams - 1,
        return_attention: page.attention }),
    });
    const answer = await response.json();
    if (!response.ok) return showError(answer.error || "HTTP " + response.status);
    if (page.attention) {
      frame.hidden = false;
      frame.srcdoc = viewerPage(answer.attention);
    } else {
      showOutputs([answer.translatedText, ...(answer.alternatives || [])]);
    }
    window.heedfulPage.last = answer;
  } catch (error) {
    showError("the server did not answer: " + error);
  } finally {
    $("translate-button").disabled = false;
    $("status").textContent = "";
  }
}
for (const example of document.querySelectorAll("#examples button")) {
  example.addEventListener("click", () => {
    $("source-input").value = example.textContent;
    $("source-input").focus();
  });
}
$("translate-form").addEventListener("submit", translate);
window.heedfulPage = { last: null, viewerPage, fit };
