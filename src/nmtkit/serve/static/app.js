// nmtkit web page: translate with /v1/translate, then draw one sentence's attention from
// /v1/attention on a canvas, with its confidence view (token probabilities, source words that
// got little attention) and "keep the beginning, re-decode the rest" (a forced prefix).
// A model of several directions (/health's tgt_langs) gets a target-language selector, and
// every request names the language ("tgt_lang").
// No dependencies, no build step.
"use strict";

const $ = (id) => document.getElementById(id);
const LANGS = {
  de: "German", en: "English", fr: "French", cs: "Czech", es: "Spanish", it: "Italian",
  nl: "Dutch", pt: "Portuguese", ru: "Russian", zh: "Chinese", ja: "Japanese", tr: "Turkish",
};
const AXIS_NAMES = { source: "source", target: "output", target_in: "decoder input" };
const KIND_NAMES = {
  decoder_src: "decoder → source (cross-attention)",
  encoder: "encoder self-attention",
  decoder_self: "decoder self-attention",
};
const CAPTIONS = {
  decoder_src: "Each row is an output token; it shows how much the decoder looked at each source token while producing it.",
  encoder: "Each row is a source token; it shows which source tokens the encoder mixed into its representation.",
  decoder_self: "Each row is an output token; it shows which earlier decoder inputs it attended to (the future is masked).",
};
// Colour ramp for weights 0 .. max: near-white to deep blue.
const RAMP = [[248, 250, 253], [205, 222, 247], [120, 160, 230], [45, 90, 190], [18, 35, 96]];

const state = {
  info: null, lines: [], translations: [], att: null, hover: null, geom: null, beam: 1, mbr: 0,
  index: 0, prefix: null, loads: 0, tgtLang: null,
};

function langName(code) { return LANGS[code] ? `${LANGS[code]} (${code})` : code; }

function colour(t) {
  t = Math.max(0, Math.min(1, t)) * (RAMP.length - 1);
  const i = Math.min(Math.floor(t), RAMP.length - 2), f = t - i;
  const c = RAMP[i].map((v, k) => Math.round(v + (RAMP[i + 1][k] - v) * f));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

function setStatus(text, isError = false) {
  const s = $("status");
  s.textContent = text;
  s.classList.toggle("error", isError);
}

async function postJSON(url, body) {
  const r = await fetch(url, {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  });
  let data = null;
  try { data = await r.json(); } catch (e) { /* not JSON */ }
  if (!r.ok) {
    const msg = data && data.detail ? data.detail : `HTTP ${r.status}`;
    throw new Error(msg);
  }
  return data;
}

function fillSelect(sel, options, keep) {
  const old = keep ? sel.value : null;
  sel.textContent = "";
  for (const [value, label] of options) {
    const o = document.createElement("option");
    o.value = String(value);
    o.textContent = label;
    sel.appendChild(o);
  }
  if (old !== null && options.some(([v]) => String(v) === old)) sel.value = old;
  sel.disabled = options.length < 2;
}

async function loadInfo() {
  try {
    const r = await fetch("/health");
    const info = await r.json();
    state.info = info;
    const langs = info.tgt_langs || [];
    if (langs.length > 1) {  // data.directions: one model, several target languages
      $("pair").textContent = (info.directions || []).map((d) => d.replace("-", " → ")).join(" · ");
      $("src-label").textContent = "Source";
      fillSelect($("tgt-lang"), langs.map((l) => [l, langName(l)]), false);
      $("tgt-lang-wrap").hidden = false;
      $("tgt-label").textContent = langName($("tgt-lang").value);
    } else {
      $("pair").textContent = `${info.src_lang} → ${info.tgt_lang}`;
      $("src-label").textContent = langName(info.src_lang);
      $("tgt-label").textContent = langName(info.tgt_lang);
    }
    const params = info.parameters == null ? null : info.parameters >= 1e6
      ? `${(info.parameters / 1e6).toFixed(1)}M` : `${(info.parameters / 1e3).toFixed(0)}k`;
    const names = info.model === info.name ? info.name : `${info.name} · ${info.model}`;
    const engine = info.engine && info.engine !== "torch" ? ` · ${info.engine}` : "";
    const rr = info.rerank;  // nmtkit serve --reverse-model ... --rerank N
    const models = (n, kind) => n ? [`${n} ${kind} model${n > 1 ? "s" : ""}`] : [];
    const reranked = rr ? ` · reranked by ${[...models(rr.reverse_models, "reverse"),
      ...models(rr.r2l_models, "right-to-left")].join(" and ")}` : "";
    $("model").textContent = `${names} · ${info.architecture}`
      + (params ? ` · ${params} parameters` : "") + ` · ${info.device}${engine}${reranked}`;
    const beams = [];
    for (let b = 1; b <= info.limits.max_beam; b++) beams.push([b, b === 1 ? "1 (greedy)" : String(b)]);
    fillSelect($("beam"), beams, false);
    $("beam").value = String(info.default_beam);
    // How the output is chosen among the candidates: the search's best, or minimum Bayes risk
    // among N (at most --max-beam; below the reranking's size where the server reranks).
    const sizes = new Set([info.default_mbr, 5, 10, 20]);
    const choices = [[0, "best candidate"]];
    for (const n of [...sizes].sort((a, b) => a - b)) {
      if (n > 1 && n <= info.limits.max_beam && !(rr && n >= rr.candidates)) choices.push([n, `MBR of ${n}`]);
    }
    fillSelect($("mbr"), choices, false);
    $("mbr").value = String(info.default_mbr);
    $("mbr-wrap").hidden = choices.length < 2;
  } catch (e) {
    setStatus(`cannot reach the server: ${e.message}`, true);
  }
}

async function translate() {
  const text = $("source").value;
  const lines = text.split("\n");
  if (!lines.some((l) => l.trim())) { setStatus("Type a sentence first.", true); return; }
  const beam = parseInt($("beam").value || "1", 10);
  const mbr = parseInt($("mbr").value || "0", 10);
  const tgtLang = chosenTgtLang();
  $("translate").disabled = true;
  setStatus("Translating…");
  const t0 = performance.now();
  try {
    const body = { texts: lines, beam, mbr };
    if (tgtLang !== null) body.tgt_lang = tgtLang;
    const res = await postJSON("/v1/translate", body);
    state.tgtLang = tgtLang;  // the attention and re-decode requests of this translation
    state.translations = res.translations;
    $("translation").textContent = res.translations.join("\n");
    setStatus(`Translated in ${Math.round(performance.now() - t0)} ms.`);
    state.lines = lines;
    state.beam = beam;
    state.mbr = mbr;
    state.prefix = null;
    const opts = [];
    lines.forEach((l, i) => {
      if (l.trim()) opts.push([i, l.length > 40 ? `${i + 1}: ${l.slice(0, 40)}…` : `${i + 1}: ${l}`]);
    });
    fillSelect($("sentence"), opts, false);
    // An engine without attention maps (CTranslate2): translations only.
    const attention = !state.info || state.info.attention !== false;
    $("sentence-wrap").hidden = opts.length < 2 || !attention;
    $("confidence-note").hidden = attention;
    if (!attention) {
      $("confidence-note").textContent = `No confidence view or prefix editing with the ${state.info.engine} `
        + "engine: it gives no attention or token probabilities (serve the .pt checkpoint with --engine torch).";
      $("confidence-panel").hidden = true;
    }
    if (attention) await loadAttention(opts[0][0]);
  } catch (e) {
    setStatus(e.message, true);
  } finally {
    $("translate").disabled = false;
  }
}

// The target language picked (a model of several directions), or null (a model of one).
function chosenTgtLang() {
  return $("tgt-lang-wrap").hidden ? null : $("tgt-lang").value;
}

// A new target language: its name on the output panel, and the text translated into it.
function onTgtLangChange() {
  $("tgt-label").textContent = langName($("tgt-lang").value);
  if (state.lines.length) translate();
}

// A threshold input's value, or null (empty or invalid: the server's default).
function threshold(id) {
  const v = parseFloat($(id).value);
  return Number.isFinite(v) ? v : null;
}

// Translate sentence `index` again (starting with `prefix` unless null), with its attention maps
// and confidence view; the output panel shows the new translation of that line.
async function loadAttention(index, prefix = null) {
  const canvas = $("heatmap");
  canvas.dataset.state = "loading";
  const body = { text: state.lines[index], beam: state.beam, mbr: state.mbr, confidence: true };
  if (state.tgtLang !== null) body.tgt_lang = state.tgtLang;
  if (prefix !== null) body.prefix = prefix;
  const lowP = threshold("low-probability"), lowC = threshold("low-coverage");
  if (lowP !== null && lowP > 0 && lowP <= 1) body.low_probability = lowP;
  if (lowC !== null && lowC >= 0) body.low_coverage = lowC;
  try {
    const att = await postJSON("/v1/attention", body);
    state.att = att;
    state.index = index;
    state.prefix = prefix;
    state.loads += 1;
    if (state.translations[index] !== att.translation) {
      state.translations[index] = att.translation;
      $("translation").textContent = state.translations.join("\n");
    }
    renderConfidence(att);
    const kinds = Object.keys(att.attention);
    kinds.sort((a, b) => (a === "decoder_src" ? -1 : b === "decoder_src" ? 1 : a.localeCompare(b)));
    fillSelect($("kind"), kinds.map((k) => [k, KIND_NAMES[k] || k]), true);
    $("attention-panel").hidden = false;
    onKindChange();
  } catch (e) {
    canvas.dataset.state = "error";
    setStatus(`attention: ${e.message}`, true);
  }
}

// Output tokens with their probability (low ones marked), source tokens with the attention
// they received over the output (possible omissions flagged): the numbers come from the server.
function renderConfidence(att) {
  const c = att.confidence;
  if (!c) { $("confidence-panel").hidden = true; return; }
  // An empty threshold box means the server's default: shown as its placeholder.
  $("low-probability").placeholder = String(c.low_probability_threshold);
  $("low-coverage").placeholder = String(c.low_coverage_threshold);
  const panel = $("confidence-panel");
  panel.dataset.lowProbability = String(c.low_probability_threshold);
  panel.dataset.lowCoverage = String(c.low_coverage_threshold);
  const tgt = $("conf-target"), src = $("conf-source");
  tgt.textContent = "";
  src.textContent = "";
  att.tokens.target.forEach((token, t) => {
    const p = c.token_probs[t];
    const el = document.createElement("span");
    el.className = "tok tgt";
    el.dataset.index = String(t);
    el.dataset.p = String(p);
    const forced = t < att.forced_tokens;
    if (c.low_probability[t]) el.classList.add("low");
    if (forced) el.classList.add("forced");
    el.title = `p = ${p.toFixed(4)}` + (c.low_probability[t] ? ` (below ${c.low_probability_threshold}: low)` : "")
      + (forced ? " · kept (forced prefix)" : "")
      + (t < att.prefix_texts.length ? " · click to keep the translation up to here" : "");
    const w = document.createElement("span");
    w.className = "w";
    w.textContent = token;
    const pv = document.createElement("span");
    pv.className = "p";
    pv.textContent = p.toFixed(2);
    el.append(w, pv);
    if (t < att.prefix_texts.length) {
      el.addEventListener("click", () => {
        $("prefix").value = att.prefix_texts[t] + " ";
        $("prefix").focus();
      });
    }
    tgt.appendChild(el);
  });
  c.coverage.forEach((cov, i) => {
    const el = document.createElement("span");
    el.className = "tok src";
    el.dataset.index = String(i);
    el.dataset.coverage = String(cov);
    if (c.possible_omissions[i]) el.classList.add("omission");
    el.title = `attention received: ${cov.toFixed(2)} × an even share`
      + (c.possible_omissions[i] ? ` (below ${c.low_coverage_threshold}): possible omission` : "");
    const w = document.createElement("span");
    w.className = "w";
    w.textContent = att.tokens.source[i];
    const pv = document.createElement("span");
    pv.className = "p";
    pv.textContent = cov.toFixed(2);
    el.append(w, pv);
    src.appendChild(el);
  });
  const nLow = c.low_probability.filter(Boolean).length;
  const nOm = c.possible_omissions.filter(Boolean).length;
  $("confidence-caption").textContent = `${nLow} output token${nLow === 1 ? "" : "s"} with p < `
    + `${c.low_probability_threshold} (marked); ${nOm} source token${nOm === 1 ? "" : "s"} that received `
    + `less than ${c.low_coverage_threshold} of an even share of the attention over the output `
    + "(flagged: possible omission). Click an output token to keep the translation up to it, edit, "
    + "and re-decode the rest.";
  $("prefix").value = att.translation;
  $("confidence-panel").hidden = false;
}

async function redecode() {
  const prefix = $("prefix").value;
  if (!state.lines.length) return;
  $("redecode").disabled = true;
  setStatus("Re-decoding…");
  const t0 = performance.now();
  try {
    await loadAttention(state.index, prefix.trim() ? prefix : null);
    if (!$("status").classList.contains("error")) {
      setStatus(`Re-decoded after the kept beginning in ${Math.round(performance.now() - t0)} ms.`);
    }
  } finally {
    $("redecode").disabled = false;
  }
}

function onKindChange() {
  const map = state.att.attention[$("kind").value];
  const layers = [];
  for (let l = 0; l < map.layers; l++) layers.push([l, String(l + 1)]);
  if (map.layers > 1) layers.push(["mean", "mean"]);
  fillSelect($("layer"), layers, true);
  const heads = [];
  for (let h = 0; h < map.heads; h++) heads.push([h, String(h + 1)]);
  if (map.heads > 1) heads.push(["mean", "mean"]);
  fillSelect($("head"), heads, true);
  draw();
}

// The matrix for the current kind/layer/head; "mean" averages over layers and/or heads.
function currentMatrix() {
  const map = state.att.attention[$("kind").value];
  const lv = $("layer").value, hv = $("head").value;
  const layers = lv === "mean" ? map.weights : [map.weights[parseInt(lv, 10)]];
  const mats = [];
  for (const heads of layers) {
    if (hv === "mean") mats.push(...heads); else mats.push(heads[parseInt(hv, 10)]);
  }
  const rows = mats[0].length, cols = mats[0][0].length;
  const m = [];
  for (let i = 0; i < rows; i++) {
    const row = new Array(cols).fill(0);
    for (const w of mats) for (let j = 0; j < cols; j++) row[j] += w[i][j] / mats.length;
    m.push(row);
  }
  return { map, m };
}

function draw() {
  const canvas = $("heatmap");
  const { map, m } = currentMatrix();
  const rowLabels = state.att.tokens[map.rows], colLabels = state.att.tokens[map.cols];
  const ctx = canvas.getContext("2d");
  const font = "13px system-ui, -apple-system, 'Segoe UI', Roboto, 'DejaVu Sans', sans-serif";
  ctx.font = font;
  const widest = (labels) => Math.max(...labels.map((s) => ctx.measureText(s).width));
  const left = Math.ceil(widest(rowLabels)) + 16, top = Math.ceil(widest(colLabels)) + 16;
  const avail = canvas.parentElement.clientWidth;
  const fitWidth = Math.floor((avail - left - 12) / colLabels.length);
  const fitHeight = Math.floor(640 / rowLabels.length);
  const cell = Math.max(16, Math.min(40, fitWidth, Math.max(fitHeight, 24)));
  const width = left + cell * colLabels.length + 12, height = top + cell * rowLabels.length + 12;
  const dpr = window.devicePixelRatio || 1;
  canvas.width = Math.round(width * dpr);
  canvas.height = Math.round(height * dpr);
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, width, height);
  ctx.font = font;

  let vmax = 0;
  for (const row of m) for (const v of row) vmax = Math.max(vmax, v);
  vmax = $("scale").value === "one" ? 1 : vmax || 1;
  for (let i = 0; i < m.length; i++) {
    for (let j = 0; j < m[i].length; j++) {
      ctx.fillStyle = colour(m[i][j] / vmax);
      ctx.fillRect(left + j * cell, top + i * cell, cell, cell);
    }
  }
  ctx.strokeStyle = "#dde2ea";
  ctx.lineWidth = 1;
  ctx.strokeRect(left + 0.5, top + 0.5, cell * colLabels.length - 1, cell * rowLabels.length - 1);

  const hv = state.hover;
  ctx.textBaseline = "middle";
  ctx.textAlign = "right";
  rowLabels.forEach((s, i) => {
    ctx.fillStyle = hv && hv.i === i ? "#2458c6" : "#1d2433";
    ctx.font = hv && hv.i === i ? `bold ${font}` : font;
    ctx.fillText(s, left - 8, top + i * cell + cell / 2);
  });
  colLabels.forEach((s, j) => {
    ctx.save();
    ctx.translate(left + j * cell + cell / 2, top - 8);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "left";
    ctx.fillStyle = hv && hv.j === j ? "#2458c6" : "#1d2433";
    ctx.font = hv && hv.j === j ? `bold ${font}` : font;
    ctx.fillText(s, 0, 0);
    ctx.restore();
  });
  if (hv && hv.i < m.length && hv.j < colLabels.length) {
    ctx.strokeStyle = "#f2a900";
    ctx.lineWidth = 2;
    ctx.strokeRect(left + hv.j * cell + 1, top + hv.i * cell + 1, cell - 2, cell - 2);
  }

  state.geom = { left, top, cell, rows: m.length, cols: colLabels.length, m, rowLabels, colLabels, map };
  $("legend-max").textContent = vmax.toFixed(2);
  $("ramp").style.background = `linear-gradient(to right, ${RAMP.map((c) => `rgb(${c})`).join(", ")})`;
  $("caption").textContent = `${CAPTIONS[$("kind").value] || ""} Rows: ${AXIS_NAMES[map.rows]} tokens · columns: ${AXIS_NAMES[map.cols]} tokens · colour scale 0 – ${vmax.toFixed(2)}.`;
  canvas.dataset.kind = $("kind").value;
  canvas.dataset.layer = $("layer").value;
  canvas.dataset.head = $("head").value;
  canvas.dataset.rows = String(m.length);
  canvas.dataset.cols = String(colLabels.length);
  canvas.dataset.loads = String(state.loads);
  canvas.dataset.state = "ready";
}

function onHover(ev) {
  const g = state.geom;
  if (!g) return;
  const rect = $("heatmap").getBoundingClientRect();
  const x = ev.clientX - rect.left, y = ev.clientY - rect.top;
  const j = Math.floor((x - g.left) / g.cell), i = Math.floor((y - g.top) / g.cell);
  const tip = $("tooltip");
  if (i < 0 || j < 0 || i >= g.rows || j >= g.cols) {
    tip.hidden = true;
    if (state.hover) { state.hover = null; draw(); }
    return;
  }
  if (!state.hover || state.hover.i !== i || state.hover.j !== j) {
    state.hover = { i, j };
    draw();
  }
  // Built from text nodes: tokens come from user input.
  tip.textContent = "";
  const line = (label, token) => {
    const b = document.createElement("b");
    b.textContent = `${label} `;
    tip.append(b, `“${token}”`, document.createElement("br"));
  };
  line(AXIS_NAMES[g.map.rows], g.rowLabels[i]);
  line(AXIS_NAMES[g.map.cols], g.colLabels[j]);
  const b = document.createElement("b");
  b.textContent = "weight ";
  tip.append(b, g.m[i][j].toFixed(4));
  tip.hidden = false;
  const wrap = $("heatmap").parentElement;
  const wr = wrap.getBoundingClientRect();
  tip.style.left = `${ev.clientX - wr.left + wrap.scrollLeft + 14}px`;
  tip.style.top = `${ev.clientY - wr.top + wrap.scrollTop + 14}px`;
}

function onLeave() {
  $("tooltip").hidden = true;
  if (state.hover) { state.hover = null; draw(); }
}

window.addEventListener("DOMContentLoaded", () => {
  loadInfo();
  $("translate").addEventListener("click", translate);
  $("tgt-lang").addEventListener("change", onTgtLangChange);
  $("source").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); translate(); }
  });
  $("kind").addEventListener("change", onKindChange);
  $("layer").addEventListener("change", draw);
  $("head").addEventListener("change", draw);
  $("scale").addEventListener("change", draw);
  $("sentence").addEventListener("change", () => loadAttention(parseInt($("sentence").value, 10)));
  $("redecode").addEventListener("click", redecode);
  $("prefix").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter") { ev.preventDefault(); redecode(); }
  });
  for (const id of ["low-probability", "low-coverage"]) {
    $(id).addEventListener("change", () => { if (state.att) loadAttention(state.index, state.prefix); });
  }
  $("heatmap").addEventListener("mousemove", onHover);
  $("heatmap").addEventListener("mouseleave", onLeave);
  window.addEventListener("resize", () => { if (state.att) draw(); });
});
