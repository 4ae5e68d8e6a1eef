(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const page = JSON.parse($("page-data").textContent);
  const escapeHtml = (text) => String(text).replace(/[&<>"']/g, (c) =>
    ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#x27;" })[c]);
  const scriptJson = (data) => JSON.stringify(data).replace(/[<>&\u2028\u2029]/g, (c) =>
    "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
  // the viewer page of heedful.visualize.html, with this trace in its slots
  function viewerPage(trace) {
    const values = { source: escapeHtml(trace.source), trace: scriptJson(trace),
      output: escapeHtml(trace.hypotheses[0].text) };
    const fill = (part) => (typeof part === "string" ? part : values[part.slot]);
    return page.viewer.map(fill).join("");
  }
  function fit(frame) {
    const doc = frame.contentDocument;
    if (!doc || !doc.documentElement) return;
    frame.style.height = doc.documentElement.scrollHeight + 24 + "px";
  }
  const frame = $("viewer-frame");
  frame.addEventListener("load", () => {
    fit(frame);
    if (frame.contentDocument && window.ResizeObserver) {
      new ResizeObserver(() => fit(frame)).observe(frame.contentDocument.body);
    }
  });
  function showError(message) {
    $("error").textContent = message;
    $("error").hidden = false;
  }
  async function translate(event) {
    event.preventDefault();
    const text = $("source-input").value;
    $("error").hidden = true;
    $("translate-button").disabled = true;
    $("status").textContent = "translating\u2026";
    try {
      const response = await fetch("translate", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ q: text, source: page.source, target: page.target,
          num_beams: +$("num-beams").value, return_attention: true }),
      });
      const answer = await response.json();
      if (!response.ok) return showError(answer.error || "HTTP " + response.status);
      $("translation").textContent = answer.translatedText;
      $("result").hidden = false;
      frame.srcdoc = viewerPage(answer.attention);
      window.heedfulPage.last = answer;
    } catch (error) {
      showError("the server did not answer: " + error);
    } finally {
      $("translate-button").disabled = false;
      $("status").textContent = "";
    }
  }
  $("translate-form").addEventListener("submit", translate);
  window.heedfulPage = { last: null, viewerPage };
})();
