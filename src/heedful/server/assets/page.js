// The page's script: the form, the examples, the viewer's frame (frame.js) and the heads to
// switch off (heads.js), both before it.
// index.html wraps the three in a strict function scope: they leave only window.heedfulPage.

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
// POST /translate: the text asked for last, with the beams and the heads switched off now
async function post(asked, off, attention) {
  // every hypothesis of the beam comes back (alternatives), for the viewer's beam list
  const body = { q: asked.text, source: page.source, target: page.target,
    num_beams: asked.beams, alternatives: asked.beams - 1, return_attention: attention };
  if (off.length) body.mask_heads = off;
  const response = await fetch("translate", { method: "POST",
    headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  const answer = await response.json();
  if (!response.ok) throw new Error(answer.error || "HTTP " + response.status);
  return answer;
}
// what the heads' boxes translate again; `sent` counts the requests, so that an answer
// overtaken by a later one (boxes clicked quickly) is not shown over it
const asked = { text: null, beams: 1, sent: 0 };
async function translate(event) {
  if (event) {
    event.preventDefault();
    Object.assign(asked, { text: $("source-input").value, beams: +$("num-beams").value });
  }
  if (asked.text === null) return;
  const off = headsOff(), key = asked.beams + " " + asked.text, mine = ++asked.sent;
  $("error").hidden = true;
  $("translate-button").disabled = true;
  $("status").textContent = "translating\u2026";
  try {
    const answer = await post(asked, off, page.attention);
    if (mine !== asked.sent) return; // a later request is on its way: its answer shows
    if (page.attention) {
      showInFrame(frame, page.viewer, answer.attention); // the view open before stays open
    } else {
      showOutputs([answer.translatedText, ...(answer.alternatives || [])]);
    }
    window.heedfulPage.last = answer;
    await showEffect(key, off, answer, () => post(asked, [], true));
  } catch (error) {
    showError(error instanceof TypeError ? "the server did not answer: " + error : error.message);
  } finally {
    if (mine === asked.sent) {
      $("translate-button").disabled = false;
      $("status").textContent = "";
    }
  }
}
for (const example of document.querySelectorAll("#examples button")) {
  example.addEventListener("click", () => {
    $("source-input").value = example.textContent;
    $("source-input").focus();
  });
}
$("translate-form").addEventListener("submit", translate);
initHeads(page.heads, () => translate()); // heads.js: a box changed, translate again
window.heedfulPage = { last: null, viewerPage: (trace) => viewerPage(page.viewer, trace),
  fit: () => fitFrame(frame) };
