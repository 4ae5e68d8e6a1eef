// The page's script: the form, the examples, and the viewer's frame (frame.js, before it).
// index.html wraps both in a strict function scope: they leave only window.heedfulPage.

const $ = (id) => document.getElementById(id);
const page = JSON.parse($("page-data").textContent);
const frame = $("viewer-frame");
followFrame(frame); // frame.js: as tall as the viewer
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
      showInFrame(frame, page.viewer, answer.attention); // the view open before stays open
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
window.heedfulPage = { last: null, viewerPage: (trace) => viewerPage(page.viewer, trace),
  fit: () => fitFrame(frame) };
