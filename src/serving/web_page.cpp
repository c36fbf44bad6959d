// The page `torchmt serve` shows at /: type or paste text, the translation follows as you type
// (each pause of 250 ms sends the text to /v1/translate; an answer to older text is dropped),
// and the cross-attention of the chosen sentence is drawn as the server's SVG (the same picture
// as `translate --attention-svg`) beside its word alignment. With "HTML input" the text is an
// HTML document (format html), shown translated as markup. A server of several directions offers
// the choice of one. Everything is inline: no script, style or font from
// elsewhere, so it works on a machine without a network; the layout stacks on a phone.
#include "serving/http_server.h"

namespace torchmt {

const std::string& web_page_html() {
  static const std::string page = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>torchmt</title>
<link rel="icon" href="data:,">
<style>
  :root { color-scheme: light dark; font-family: system-ui, -apple-system, "Segoe UI", sans-serif; }
  body { margin: 0 auto; max-width: 72rem; padding: 1rem; line-height: 1.4; }
  h1 { font-size: 1.3rem; margin: 0 0 .75rem; }
  .panes { display: grid; grid-template-columns: 1fr 1fr; gap: 1rem; }
  @media (max-width: 40rem) { .panes { grid-template-columns: 1fr; } }
  textarea, output { box-sizing: border-box; width: 100%; min-height: 9rem; padding: .6rem; font: inherit;
    border: 1px solid #8886; border-radius: .4rem; }
  output { display: block; white-space: pre-wrap; background: #8881; }
  label { font-weight: 600; display: block; margin-bottom: .25rem; }
  #status { font-size: .85rem; opacity: .75; min-height: 1.2rem; margin: .4rem 0; }
  #status.error { color: #c0392b; opacity: 1; }
  .controls { display: flex; flex-wrap: wrap; gap: .75rem; align-items: center; margin: .5rem 0; font-size: .9rem; }
  select, input { font: inherit; }
  .attention { display: flex; flex-wrap: wrap; gap: 1rem; align-items: flex-start; margin-top: .5rem; }
  #heatmap { overflow-x: auto; max-width: 100%; }
  #heatmap img { max-width: 100%; height: auto; background: #fff; }
  #alignment { font-size: .9rem; border-collapse: collapse; }
  #alignment td { padding: .1rem .4rem; border-bottom: 1px solid #8883; }
  .doubt { text-decoration: underline wavy #d35400; text-underline-offset: .2em; }
</style>
</head>
<body>
<h1>torchmt</h1>
<div class="panes">
  <div><label for="source">Source</label>
    <textarea id="source" autofocus placeholder="Ein Hund läuft über die Wiese."></textarea></div>
  <div><label for="target">Translation</label><output id="target" for="source" aria-live="polite"></output></div>
</div>
<div id="status"></div>
<div class="controls">
  <span id="directions" hidden><label for="direction" style="display:inline;font-weight:400">direction</label>
  <select id="direction"></select></span>
  <label for="beam" style="display:inline;font-weight:400">beam</label>
  <select id="beam"><option>1</option><option>2</option><option>4</option><option selected>5</option></select>
  <label for="line" style="display:inline;font-weight:400">attention of sentence</label>
  <select id="line"><option value="0">1</option></select>
  <label style="display:inline;font-weight:400"><input type="checkbox" id="html"> HTML input</label>
</div>
<div class="attention">
  <div id="heatmap" aria-label="cross-attention heatmap"></div>
  <table id="alignment" aria-label="word alignment"></table>
</div>
<script>
"use strict";
const source = document.getElementById("source"), target = document.getElementById("target");
const statusLine = document.getElementById("status"), heatmap = document.getElementById("heatmap");
const beam = document.getElementById("beam"), lineSelect = document.getElementById("line");
const htmlInput = document.getElementById("html"), alignment = document.getElementById("alignment");
const direction = document.getElementById("direction");
let sent = 0, shown = 0, timer = null, last = null, imageUrl = null;

// A server of several directions (serve -m de-en.pt -m en-de.pt): the choice of one, from /languages.
async function loadDirections() {
  try {
    const languages = await (await fetch("languages")).json();
    for (const l of languages)
      for (const t of l.targets) {
        const o = document.createElement("option");
        o.value = l.code + ">" + t;
        const name = (code) => (languages.find((x) => x.code === code) || {name: code}).name;
        o.textContent = l.name + " \u2192 " + name(t);
        direction.appendChild(o);
      }
    document.getElementById("directions").hidden = direction.options.length < 2;
  } catch (e) { /* a server without languages: one direction */ }
}

function setStatus(text, isError) {
  statusLine.textContent = text;
  statusLine.className = isError ? "error" : "";
}

// Source word -> target word links of a sentence (Pharaoh pairs over whitespace-separated words).
function drawAlignment(sentence) {
  alignment.textContent = "";
  if (!sentence || !sentence.alignment) return;
  const src = sentence.source.split(/\s+/).filter(Boolean), tgt = sentence.text.split(/\s+/).filter(Boolean);
  for (const pair of sentence.alignment.split(" ")) {
    const [s, t] = pair.split("-").map(Number);
    const row = alignment.insertRow();
    row.insertCell().textContent = src[s] || "";
    row.insertCell().textContent = "\u2192";
    row.insertCell().textContent = tgt[t] || "";
  }
}

function drawHeatmap() {
  heatmap.textContent = "";
  alignment.textContent = "";
  if (imageUrl) { URL.revokeObjectURL(imageUrl); imageUrl = null; }
  if (!last) return;
  const sentences = last.translations[0].sentences;
  const index = Math.min(Number(lineSelect.value) || 0, sentences.length - 1);
  drawAlignment(sentences[index]);
  const attention = sentences[index] && sentences[index].attention;
  if (!attention || !attention.svg) return;
  imageUrl = URL.createObjectURL(new Blob([attention.svg], {type: "image/svg+xml"}));
  const img = document.createElement("img");
  img.id = "heatmap-image";
  img.alt = "cross-attention of line " + (index + 1);
  img.src = imageUrl;
  heatmap.appendChild(img);
}

// The translation, each word titled with its confidence and the doubtful ones (below 0.5) marked.
function showTarget(translation) {
  const text = translation.text;
  target.textContent = "";
  let at = 0;
  for (const s of translation.sentences || []) {
    for (const w of (s.confidence ? s.confidence.words : [])) {
      const i = text.indexOf(w.word, at);
      if (w.word === "" || i < 0) continue;
      if (i > at) target.appendChild(document.createTextNode(text.slice(at, i)));
      const span = document.createElement("span");
      span.textContent = w.word;
      span.title = "confidence " + w.confidence.toFixed(2);
      if (w.confidence < 0.5) span.className = "doubt";
      target.appendChild(span);
      at = i + w.word.length;
    }
  }
  if (at < text.length) target.appendChild(document.createTextNode(text.slice(at)));
}

function fillLines(count) {
  const keep = lineSelect.value;
  lineSelect.textContent = "";
  for (let i = 0; i < count; i++) {
    const o = document.createElement("option");
    o.value = String(i); o.textContent = String(i + 1);
    lineSelect.appendChild(o);
  }
  lineSelect.value = Number(keep) < count ? keep : "0";
}

async function translateNow() {
  const text = source.value;
  const id = ++sent;
  if (text.trim() === "") {
    shown = id; last = null; target.textContent = ""; fillLines(1); drawHeatmap(); setStatus("", false);
    return;
  }
  setStatus("translating…", false);
  const started = performance.now();
  try {
    const request = htmlInput.checked
        ? {q: text, beam: Number(beam.value), format: "html"}
        : {q: text, beam: Number(beam.value), attention: true, alignments: true, split_sentences: true,
           confidence: true};
    if (direction.options.length > 1) [request.source, request.target] = direction.value.split(">");
    const response = await fetch("v1/translate", {
      method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(request)});
    const answer = await response.json();
    if (id < shown) return;  // an answer to older text came late
    shown = id;
    if (!response.ok) { setStatus(answer.error || ("error " + response.status), true); return; }
    last = answer;
    showTarget(answer.translations[0]);
    fillLines(Math.max(1, answer.translations[0].sentences.length));
    drawHeatmap();
    setStatus("translated in " + Math.round(performance.now() - started) + " ms", false);
  } catch (e) {
    if (id >= shown) setStatus("cannot reach the server: " + e.message, true);
  }
}

function schedule() {
  clearTimeout(timer);
  timer = setTimeout(translateNow, 250);
}

source.addEventListener("input", schedule);
beam.addEventListener("change", translateNow);
htmlInput.addEventListener("change", translateNow);
lineSelect.addEventListener("change", drawHeatmap);
direction.addEventListener("change", translateNow);
loadDirections();
</script>
</body>
</html>
)HTML";
  return page;
}

}  // namespace torchmt
