"""A self-contained interactive attention page: one HTML file, inline CSS and JavaScript,
the data embedded as JSON. It loads nothing from the network (no CDN, no fonts).

Choose the kind (encoder, decoder self, decoder source), the layer and the head (or the
mean over heads); hovering a cell shows its row token, column token and weight.
"""

from __future__ import annotations

import html
import json
from typing import Any

from .maps import AttentionMaps


def _script_json(data: dict[str, Any]) -> str:
    """JSON that is safe inside a <script> element (no '</script>' or '<!--' can appear)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def attention_html(att: AttentionMaps, title: str | None = None) -> str:
    """The page as a string (write it anywhere; open it with any browser, offline)."""
    title = title or f"Attention: {att.source}"
    return (_PAGE.replace("__TITLE__", html.escape(title))
            .replace("__DATA__", _script_json(att.to_dict())))


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<style>
  body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5rem;
         color: #1d1d1f; background: #fff; }
  h1 { font-size: 1.25rem; margin: 0 0 .6rem; }
  .sent { margin: .15rem 0; }
  .sent .k { display: inline-block; min-width: 6.5rem; color: #666; }
  .controls { display: flex; flex-wrap: wrap; gap: 1.2rem; align-items: center;
              margin: 1rem 0 .4rem; padding: .6rem .8rem; background: #f4f4f6; border-radius: 6px; }
  .controls label { color: #444; }
  select { font: inherit; margin-left: .3rem; }
  #axes { color: #666; font-size: 12px; margin: .3rem 0 .6rem; }
  #legend { display: flex; align-items: center; gap: .4rem; font-size: 12px; color: #444; }
  #legend .bar { width: 140px; height: 12px; border-radius: 2px; }
  #map table { border-collapse: collapse; }
  #map th { font-weight: normal; font-size: 12px; white-space: nowrap; color: #333; }
  #map th.row { text-align: right; padding: 0 6px 0 0; }
  #map th.col { writing-mode: vertical-rl; transform: rotate(180deg); text-align: left;
                padding: 0 0 6px 0; vertical-align: bottom; }
  #map td.c { width: 22px; height: 22px; min-width: 22px; padding: 0; border: 1px solid #fff;
              cursor: crosshair; }
  #map td.c:hover { outline: 2px solid #e4572e; outline-offset: -1px; }
  #map th.hl { color: #e4572e; font-weight: 600; }
  #tip { position: fixed; z-index: 10; pointer-events: none; display: none; white-space: nowrap;
         background: #222; color: #fff; padding: 4px 8px; border-radius: 4px; font-size: 12px; }
  footer { margin-top: 1.2rem; color: #888; font-size: 12px; }
</style>
</head>
<body>
<h1>Attention</h1>
<p class="sent"><span class="k">source</span> <span id="source"></span></p>
<p class="sent"><span class="k">translation</span> <span id="translation"></span></p>
<div class="controls">
  <label>kind <select id="kind"></select></label>
  <label>layer <select id="layer"></select></label>
  <label>head <select id="head"></select></label>
  <span id="legend"><span>0</span><span class="bar" id="legend-bar"></span>
    <span id="legend-max">1</span></span>
</div>
<p id="axes"></p>
<div id="map" aria-label="attention map"></div>
<div id="tip" role="tooltip"></div>
<footer>Rows are queries, columns are keys; every row sums to 1. Colours are scaled to the
largest weight of the map shown; grey cells are hidden by the
subsequent mask. Made by <code>nmtkit plot attention --html</code>.</footer>
<script type="application/json" id="attention-data">__DATA__</script>
<script>
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("attention-data").textContent);
  var kindSel = document.getElementById("kind");
  var layerSel = document.getElementById("layer");
  var headSel = document.getElementById("head");
  var map = document.getElementById("map");
  var tip = document.getElementById("tip");
  // viridis, five stops
  var STOPS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];

  function color(x) {
    x = Math.max(0, Math.min(1, x)) * (STOPS.length - 1);
    var i = Math.min(Math.floor(x), STOPS.length - 2), f = x - i, a = STOPS[i], b = STOPS[i + 1];
    return "rgb(" + [0, 1, 2].map(function (k) { return Math.round(a[k] + f * (b[k] - a[k])); })
      .join(",") + ")";
  }

  function option(sel, value, text) {
    var o = document.createElement("option");
    o.value = value;
    o.textContent = text;
    sel.appendChild(o);
  }

  function fillSelect(sel, n, withMean) {
    var old = sel.value;
    sel.textContent = "";
    for (var i = 0; i < n; i++) option(sel, String(i), String(i + 1));
    if (withMean && n > 1) option(sel, "mean", "mean of heads");
    sel.value = old;
    if (sel.selectedIndex < 0) sel.value = "0";
  }

  function matrix(kind, layer, head) {
    var heads = DATA.kinds[kind].weights[layer];
    if (head !== "mean") return heads[Number(head)];
    return heads[0].map(function (row, r) {
      return row.map(function (_, c) {
        var s = 0;
        for (var h = 0; h < heads.length; h++) s += heads[h][r][c];
        return s / heads.length;
      });
    });
  }

  function onKind() {
    var k = DATA.kinds[kindSel.value];
    fillSelect(layerSel, k.weights.length, false);
    fillSelect(headSel, k.weights[0].length, true);
    render();
  }

  function render() {
    var kind = kindSel.value, k = DATA.kinds[kind];
    var layer = Number(layerSel.value), head = headSel.value;
    var m = matrix(kind, layer, head);
    var vmax = 0;
    m.forEach(function (row) { row.forEach(function (w) { if (w > vmax) vmax = w; }); });
    vmax = vmax > 0 ? vmax : 1;
    var table = document.createElement("table");
    var hr = table.insertRow();
    hr.appendChild(document.createElement("th"));
    k.cols.forEach(function (tok, c) {
      var th = document.createElement("th");
      th.className = "col";
      th.dataset.c = c;
      th.textContent = tok;
      hr.appendChild(th);
    });
    m.forEach(function (row, r) {
      var tr = table.insertRow();
      var th = document.createElement("th");
      th.className = "row";
      th.dataset.r = r;
      th.textContent = k.rows[r];
      tr.appendChild(th);
      row.forEach(function (w, c) {
        var td = tr.insertCell();
        td.className = "c";
        td.dataset.r = r;
        td.dataset.c = c;
        td.dataset.w = w.toFixed(4);
        if (k.causal && c > r) {  // a later position: hidden by the mask, not learned
          td.className = "c masked";
          td.style.backgroundColor = "rgb(236, 236, 236)";
        } else {
          td.style.backgroundColor = color(w / vmax);
        }
      });
    });
    map.textContent = "";
    map.appendChild(table);
    map.dataset.kind = kind;
    map.dataset.layer = String(layer);
    map.dataset.head = head;
    document.getElementById("axes").textContent =
      k.title + ". Rows: " + k.row_axis + "; columns: " + k.col_axis + ".";
    document.getElementById("legend-max").textContent = vmax.toFixed(3);
    tip.style.display = "none";
  }

  function highlight(r, c) {
    map.querySelectorAll("th.hl").forEach(function (th) { th.classList.remove("hl"); });
    if (r === null) return;
    var rh = map.querySelector('th.row[data-r="' + r + '"]');
    var ch = map.querySelector('th.col[data-c="' + c + '"]');
    if (rh) rh.classList.add("hl");
    if (ch) ch.classList.add("hl");
  }

  map.addEventListener("mouseover", function (ev) {
    var td = ev.target.closest("td.c");
    if (!td) return;
    var k = DATA.kinds[kindSel.value];
    var r = Number(td.dataset.r), c = Number(td.dataset.c);
    tip.textContent = "row " + (r + 1) + " \\u201c" + k.rows[r] + "\\u201d \\u2192 column " + (c + 1) +
      " \\u201c" + k.cols[c] + "\\u201d: " + (td.classList.contains("masked") ?
      "masked (a later position)" : "weight " + Number(td.dataset.w).toFixed(3));
    tip.style.display = "block";
    highlight(td.dataset.r, td.dataset.c);
  });
  map.addEventListener("mousemove", function (ev) {
    tip.style.left = (ev.clientX + 14) + "px";
    tip.style.top = (ev.clientY + 14) + "px";
  });
  map.addEventListener("mouseleave", function () {
    tip.style.display = "none";
    highlight(null, null);
  });

  document.getElementById("source").textContent = DATA.source;
  document.getElementById("translation").textContent = DATA.translation;
  var bar = [];
  for (var i = 0; i <= 10; i++) bar.push(color(i / 10) + " " + (i * 10) + "%");
  document.getElementById("legend-bar").style.background =
    "linear-gradient(to right, " + bar.join(", ") + ")";
  Object.keys(DATA.kinds).forEach(function (kind) { option(kindSel, kind, DATA.kinds[kind].title); });
  kindSel.addEventListener("change", onKind);
  layerSel.addEventListener("change", render);
  headSel.addEventListener("change", render);
  if (kindSel.options.length) onKind();
})();
</script>
</body>
</html>
"""
