// headlab displays: one drawer per results type, drawn on canvases from the JSON inside each
// display (report/displays). Loaded once per page; each display then only adds its data.
// Text from the data is only ever written with textContent, never parsed as HTML.
(function () {
  "use strict";
  if (window.headlabDisplays) { window.headlabDisplays.drawAll(); return; }
  const kinds = {};

  // ---------------------------------------------------------------- shared helpers
  const STOPS = [[68, 1, 84], [71, 44, 122], [59, 81, 139], [44, 113, 142], [33, 144, 141],
    [39, 173, 129], [92, 200, 99], [170, 220, 50], [253, 231, 37]];
  const LUT = new Uint8ClampedArray(256 * 3);
  for (let i = 0; i < 256; i++) {
    const t = (i / 255) * (STOPS.length - 1), k = Math.min(STOPS.length - 2, Math.floor(t)), f = t - k;
    for (let c = 0; c < 3; c++) LUT[3 * i + c] = STOPS[k][c] * (1 - f) + STOPS[k + 1][c] * f;
  }
  const RAMP = "linear-gradient(to right, " + STOPS.map((c) => "rgb(" + c.join(",") + ")").join(", ") + ")";
  function rgb(share) {
    const i = 3 * Math.max(0, Math.min(255, Math.round(share * 255)));
    return "rgb(" + LUT[i] + "," + LUT[i + 1] + "," + LUT[i + 2] + ")";
  }

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function tid(node, id) { node.dataset.testid = id; return node; }

  function decode(text, Type) {
    const raw = atob(text), bytes = new Uint8Array(raw.length);
    for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
    return new Type(bytes.buffer);
  }

  // A canvas of w x h CSS pixels drawn at the device pixel ratio.
  function surface(w, h, cls) {
    const dpr = window.devicePixelRatio || 1, canvas = el("canvas", cls);
    canvas.width = Math.round(w * dpr); canvas.height = Math.round(h * dpr);
    canvas.style.width = w + "px"; canvas.style.height = h + "px";
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return { canvas, ctx, w, h };
  }
  // The pointer in the canvas' own CSS pixels (inside its border).
  function local(e, canvas, w, h) {
    const r = canvas.getBoundingClientRect();
    return [((e.clientX - r.left - canvas.clientLeft) / canvas.clientWidth) * w,
      ((e.clientY - r.top - canvas.clientTop) / canvas.clientHeight) * h];
  }

  let tooltip = null;
  function tip(e, lines) {
    if (!tooltip) { tooltip = el("div", "hl-tooltip"); tooltip.setAttribute("role", "tooltip"); document.body.appendChild(tooltip); }
    tooltip.replaceChildren(...lines.map((line, i) => el("div", i === 0 ? "hl-tt-head" : null, line)));
    tooltip.hidden = false;
    tooltip.style.left = Math.min(window.innerWidth - 280, e.clientX + 14) + "px";
    tooltip.style.top = (e.clientY + 14) + "px";
  }
  function untip() { if (tooltip) tooltip.hidden = true; }
  function fmt(v) { return Math.abs(v) >= 1000 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(2) : (+v.toPrecision(4)).toString(); }
  function quote(t) { return "\u201c" + (t.length > 24 ? t.slice(0, 23) + "\u2026" : t) + "\u201d"; }

  function chips(names, active, onPick, idPrefix) {
    const bar = el("div", "hl-chips");
    const buttons = names.map((name) => {
      const b = tid(el("button", "hl-chip", name), idPrefix + name.replace(/[^A-Za-z0-9_-]/g, "_"));
      b.type = "button";
      b.addEventListener("click", () => { buttons.forEach((o) => o.classList.toggle("active", o === b)); onPick(name); });
      b.classList.toggle("active", name === active);
      return b;
    });
    bar.append(...buttons);
    return bar;
  }

  // A layers x columns grid of cells on a canvas: colour(l, c) -> CSS colour; hover and click.
  function Grid(rows, cols, colour, opts) {
    const cell = Math.max(9, Math.min(26, Math.floor((opts.width || 520) / Math.max(cols, 1)))), left = 34, top = 22;
    const s = surface(left + cols * cell + 2, top + rows * cell + 2, "hl-grid");
    let picked = null;
    function draw() {
      const ctx = s.ctx;
      ctx.clearRect(0, 0, s.w, s.h);
      ctx.fillStyle = "#616e7c"; ctx.font = "10px system-ui, sans-serif"; ctx.textAlign = "center"; ctx.textBaseline = "bottom";
      const step = Math.max(1, Math.ceil(14 / cell));
      for (let c = 0; c < cols; c += step) ctx.fillText(String(c), left + (c + 0.5) * cell, top - 3);
      ctx.textAlign = "right"; ctx.textBaseline = "middle";
      for (let l = 0; l < rows; l += Math.max(1, Math.ceil(12 / cell))) ctx.fillText(String(l), left - 4, top + (l + 0.5) * cell);
      ctx.textAlign = "left"; ctx.textBaseline = "top"; ctx.fillText(opts.corner || "L\\H", 0, 0);
      for (let l = 0; l < rows; l++) for (let c = 0; c < cols; c++) {
        const fill = colour(l, c);
        if (!fill) continue;
        ctx.fillStyle = fill; ctx.fillRect(left + c * cell, top + l * cell, cell - 1, cell - 1);
      }
      const marks = opts.marked ? opts.marked() : [];
      ctx.strokeStyle = "#e4572e"; ctx.lineWidth = 2;
      marks.forEach(([l, c]) => ctx.strokeRect(left + c * cell + 1, top + l * cell + 1, cell - 3, cell - 3));
      if (picked) { ctx.strokeStyle = "#111"; ctx.lineWidth = 2; ctx.strokeRect(left + picked[1] * cell, top + picked[0] * cell, cell - 1, cell - 1); }
    }
    function at(e) {
      const [x, y] = local(e, s.canvas, s.w, s.h), c = Math.floor((x - left) / cell), l = Math.floor((y - top) / cell);
      return l >= 0 && c >= 0 && l < rows && c < cols ? [l, c] : null;
    }
    s.canvas.addEventListener("mousemove", (e) => { const p = at(e); if (p && opts.hover) tip(e, opts.hover(p[0], p[1])); else untip(); });
    s.canvas.addEventListener("mouseleave", untip);
    s.canvas.addEventListener("click", (e) => { const p = at(e); if (p) { picked = p; draw(); if (opts.pick) opts.pick(p[0], p[1]); } });
    s.canvas.dataset.cell = cell; s.canvas.dataset.left = left; s.canvas.dataset.top = top;
    draw();
    return { canvas: s.canvas, draw, pick(l, c) { picked = [l, c]; draw(); } };
  }

  function legend(lo, hi, text) {
    const p = el("p", "hl-legend");
    const bar = el("i", "hl-ramp"); bar.style.background = RAMP;
    p.append(el("span", null, lo), bar, el("span", null, hi), el("span", "hl-muted", text || ""));
    return p;
  }

  // ---------------------------------------------------------------- head statistics
  kinds.heads = function (root, d) {
    const names = [...Object.keys(d.metrics), ...Object.keys(d.detectors || {})];
    const grids = Object.assign({}, d.metrics, d.detectors || {});
    let metric = d.first || names[0], sortBy = metric, descending = true, picked = null;
    root.append(el("h4", "hl-title", d.model + ": " + d.num_layers + " layers \u00d7 " + d.num_heads + " heads, " + d.n_texts + " texts"));
    (d.notes || []).forEach((n) => root.append(el("p", "hl-muted", "Note: " + n + ".")));
    root.append(chips(names, metric, (name) => { metric = name; sortBy = name; descending = true; redraw(); }, "heads-metric-"));
    const row = el("div", "hl-row"), left = el("div"), right = tid(el("div", "hl-table-box"), "heads-table");
    row.append(left, right); root.append(row);
    const range = () => { const v = grids[metric].flat(); return [Math.min(...v), Math.max(...v)]; };
    const grid = Grid(d.num_layers, d.num_heads, (l, h) => {
      const v = grids[metric][l][h]; if (v === undefined) return null;
      const [lo, hi] = range(); return rgb(hi > lo ? (v - lo) / (hi - lo) : 0.5);
    }, {
      hover: (l, h) => ["layer " + l + ", head " + h, ...names.map((n) => n + " " + (grids[n][l][h] === undefined ? "\u2013" : fmt(grids[n][l][h])))],
      pick: (l, h) => { picked = [l, h]; table(); const r = right.querySelector("tr.picked"); if (r) r.scrollIntoView({ block: "nearest" }); },
    });
    tid(grid.canvas, "heads-heatmap");
    const scale = el("div");
    left.append(grid.canvas, scale);
    function table() {
      const rows = [];
      for (let l = 0; l < d.num_layers; l++) for (let h = 0; h < grids[names[0]][l].length; h++) rows.push([l, h]);
      const key = (r) => sortBy === "layer" ? r[0] * 1e4 + r[1] : sortBy === "head" ? r[1] * 1e4 + r[0] : grids[sortBy][r[0]][r[1]];
      rows.sort((a, b) => (descending ? key(b) - key(a) : key(a) - key(b)));
      const t = el("table", "hl-table"), head = el("tr");
      ["layer", "head", ...names].forEach((n) => {
        const th = tid(el("th", n === sortBy ? "sorted" : null, n + (n === sortBy ? (descending ? " \u25be" : " \u25b4") : "")), "heads-sort-" + n.replace(/[^A-Za-z0-9_-]/g, "_"));
        th.addEventListener("click", () => { descending = n === sortBy ? !descending : n !== "layer" && n !== "head"; sortBy = n; table(); });
        head.append(th);
      });
      const body = el("tbody");
      rows.forEach(([l, h]) => {
        const tr = el("tr", picked && picked[0] === l && picked[1] === h ? "picked" : null);
        tr.dataset.layer = l; tr.dataset.head = h;
        tr.append(el("td", null, String(l)), el("td", null, String(h)), ...names.map((n) => el("td", null, fmt(grids[n][l][h]))));
        tr.addEventListener("click", () => { picked = [l, h]; grid.pick(l, h); table(); });
        body.append(tr);
      });
      const thead = el("thead"); thead.append(head); t.append(thead, body);
      right.replaceChildren(t);
    }
    function redraw() {
      grid.draw(); table();
      const [lo, hi] = range();
      scale.replaceChildren(legend(fmt(lo), fmt(hi), metric + ", its own scale; click a cell or a row"));
    }
    redraw();
  };

  // ---------------------------------------------------------------- one head's pattern
  kinds.pattern = function (root, d) {
    const n = d.tokens.length, cell = d.cell, cells = Math.ceil(n / cell), T = d.tile;
    const overview = decode(d.overview, Float32Array);
    const tiles = new Map(d.tiles.map((t) => [t.q0 + "," + t.k0, t]));
    const span = Math.min(T, n), px = Math.max(2, Math.min(24, Math.floor(512 / span))), Z = span * px;
    let oMax = 0; for (let i = 0; i < overview.length; i++) oMax = Math.max(oMax, overview[i]);
    const O = Math.max(256, Math.min(384, cells * 2)), opx = O / cells;
    root.append(el("h4", "hl-title", d.model + ", layer " + d.layer + ", head " + d.head + ": " + n + " tokens"));
    const kept = d.tiles.length, info = tid(el("p", "hl-muted"), "pattern-info");
    info.textContent = "Left: the whole text, " + (cell === 1 ? "one token a cell (exact)" : cell + " tokens a cell (the mean weight a query of the cell puts on the cell's keys, summed; from the streaming sums)") +
      ". Right: " + span + " \u00d7 " + span + " tokens, exact where a tile was kept (" + kept + " tiles of " + T + " \u00d7 " + T + " holding " + (100 * d.mass).toFixed(1) +
      "% of the attention, within " + (d.budget / 2 ** 20).toFixed(0) + " MiB); grey: a tile not kept, shown from the overview. Click the overview to move, or use the arrows.";
    if (d.total_tokens > n) root.append(el("p", "hl-muted", "Cut to " + n + " of " + d.total_tokens + " tokens: " + d.cut_reason + "."));
    const row = el("div", "hl-row"), ov = surface(O, O, "hl-canvas"), zoom = surface(Z, Z, "hl-canvas");
    tid(ov.canvas, "pattern-overview"); tid(zoom.canvas, "pattern-zoom");
    const nav = el("div", "hl-nav"), where = tid(el("span", "hl-muted"), "pattern-where");
    const move = (dq, dk) => { view.q += dq; view.k += dk; clamp(); drawAll(); };
    [["\u2190 keys", 0, -span / 2], ["keys \u2192", 0, span / 2], ["\u2191 queries", -span / 2, 0], ["queries \u2193", span / 2, 0]].forEach(([label, dq, dk], i) => {
      const b = tid(el("button", "hl-chip", label), "pattern-move-" + i); b.type = "button"; b.addEventListener("click", () => move(dq, dk)); nav.append(b);
    });
    nav.append(where);
    const leftBox = el("div"), rightBox = el("div");
    leftBox.append(ov.canvas); rightBox.append(zoom.canvas, nav);
    row.append(leftBox, rightBox);
    const text = tid(el("div", "hl-text"), "pattern-text"), asked = tid(el("b"), "pattern-query");
    const strip = el("p", "hl-muted", "The keys in view, coloured by the weight of the query under the pointer: ");
    strip.append(asked);
    root.append(info, row, legend("0", "largest in view", "colour: square root of the weight"), strip, text);
    const cache = new Map();
    function tileValues(q0, k0) {
      const key = q0 + "," + k0;
      if (!cache.has(key)) { const t = tiles.get(key); cache.set(key, t ? { t, v: decode(t.data, Float32Array) } : null); }
      return cache.get(key);
    }
    // weight of query q on key k: [value, exact?]
    function weight(q, k) {
      const q0 = q - (q % T), k0 = k - (k % T), tv = tileValues(q0, k0);
      if (tv) return [(q - q0) < tv.t.rows && (k - k0) < tv.t.cols ? tv.v[(q - q0) * tv.t.cols + (k - k0)] : 0, true];
      const qc = Math.floor(q / cell), kc = Math.floor(k / cell), width = Math.min(cell, n - kc * cell);
      return [overview[qc * cells + kc] / width, false];
    }
    // start where the attention is: the kept tile with the most overview mass, past the sinks
    let best = null, bestMass = -1;
    d.tiles.forEach((t) => {
      let m = 0;
      for (let q = Math.floor(t.q0 / cell); q <= Math.floor((t.q0 + t.rows - 1) / cell); q++)
        for (let k = Math.floor(t.k0 / cell); k <= Math.floor((t.k0 + t.cols - 1) / cell); k++) m += overview[q * cells + k];
      if (m > bestMass && !(t.k0 === 0 && n > T)) { bestMass = m; best = t; }
    });
    const view = { q: best ? best.q0 : 0, k: best ? best.k0 : 0 };
    function clamp() { view.q = Math.max(0, Math.min(n - span, Math.round(view.q))); view.k = Math.max(0, Math.min(n - span, Math.round(view.k))); }
    const oImage = document.createElement("canvas"); oImage.width = oImage.height = cells;
    (function () {
      const img = new ImageData(cells, cells), p = img.data;
      for (let i = 0; i < cells * cells; i++) {
        const j = 3 * Math.round(Math.sqrt(oMax > 0 ? overview[i] / oMax : 0) * 255);
        p[4 * i] = LUT[j]; p[4 * i + 1] = LUT[j + 1]; p[4 * i + 2] = LUT[j + 2]; p[4 * i + 3] = 255;
      }
      oImage.getContext("2d").putImageData(img, 0, 0);
    })();
    const zImage = document.createElement("canvas"); zImage.width = zImage.height = span;
    let zoomValues = new Float32Array(span * span), zoomExact = new Uint8Array(span * span);
    function drawOverview() {
      const ctx = ov.ctx; ctx.imageSmoothingEnabled = false;
      ctx.drawImage(oImage, 0, 0, O, O);
      ctx.strokeStyle = "#e4572e"; ctx.lineWidth = 2;
      ctx.strokeRect((view.k / cell) * opx, (view.q / cell) * opx, Math.max(3, (span / cell) * opx), Math.max(3, (span / cell) * opx));
    }
    function drawZoom() {
      let top = 0;
      for (let i = 0; i < span; i++) for (let j = 0; j < span; j++) {
        const [w, exact] = weight(view.q + i, view.k + j);
        zoomValues[i * span + j] = w; zoomExact[i * span + j] = exact ? 1 : 0; if (w > top) top = w;
      }
      const img = new ImageData(span, span), p = img.data;
      for (let i = 0; i < span * span; i++) {
        const s = Math.sqrt(top > 0 ? zoomValues[i] / top : 0);
        if (zoomExact[i]) { const j = 3 * Math.round(s * 255); p[4 * i] = LUT[j]; p[4 * i + 1] = LUT[j + 1]; p[4 * i + 2] = LUT[j + 2]; }
        else { const g = 235 - Math.round(s * 180); p[4 * i] = p[4 * i + 1] = p[4 * i + 2] = g; }
        p[4 * i + 3] = 255;
      }
      zImage.getContext("2d").putImageData(img, 0, 0);
      zoom.ctx.imageSmoothingEnabled = false;
      zoom.ctx.drawImage(zImage, 0, 0, Z, Z);
      zoom.canvas.dataset.q = view.q; zoom.canvas.dataset.k = view.k; zoom.canvas.dataset.px = px; zoom.canvas.dataset.top = top;
      where.textContent = "queries " + view.q + "\u2013" + (view.q + span - 1) + ", keys " + view.k + "\u2013" + (view.k + span - 1) + "; largest weight in view " + fmt(top);
    }
    function drawText(q) {
      asked.textContent = q === null ? "" : "query " + q + " " + quote(d.tokens[q]);
      const spans = [];
      for (let j = 0; j < span; j++) {
        const k = view.k + j, s = el("span", k === q ? "hl-tok hl-query" : "hl-tok", d.tokens[k]);
        if (q !== null) { const [w] = weight(q, k); const a = Math.min(1, Math.sqrt(w) * 1.2); s.style.background = "rgba(228,87,46," + a.toFixed(3) + ")"; }
        spans.push(s);
      }
      text.replaceChildren(...spans);
    }
    function drawAll() { drawOverview(); drawZoom(); drawText(null); }
    ov.canvas.addEventListener("click", (e) => {
      const [x, y] = local(e, ov.canvas, O, O);
      view.q = (y / opx) * cell - span / 2; view.k = (x / opx) * cell - span / 2; clamp(); drawAll();
    });
    ov.canvas.addEventListener("mousemove", (e) => {
      const [x, y] = local(e, ov.canvas, O, O), qc = Math.floor(y / opx), kc = Math.floor(x / opx);
      if (qc < 0 || kc < 0 || qc >= cells || kc >= cells) return untip();
      const qa = qc * cell, ka = kc * cell, qb = Math.min(n, qa + cell) - 1, kb = Math.min(n, ka + cell) - 1;
      tip(e, ["queries " + qa + "\u2013" + qb + " " + quote(d.tokens[qa]) + (qb > qa ? " \u2026" : ""), "keys " + ka + "\u2013" + kb + " " + quote(d.tokens[ka]) + (kb > ka ? " \u2026" : ""),
        "weight on these keys, mean over these queries: " + fmt(overview[qc * cells + kc])]);
    });
    ov.canvas.addEventListener("mouseleave", untip);
    zoom.canvas.addEventListener("mousemove", (e) => {
      const [x, y] = local(e, zoom.canvas, Z, Z), i = Math.floor(y / px), j = Math.floor(x / px);
      if (i < 0 || j < 0 || i >= span || j >= span) return untip();
      const q = view.q + i, k = view.k + j, w = zoomValues[i * span + j];
      tip(e, ["query " + q + " " + quote(d.tokens[q]), "key " + k + " " + quote(d.tokens[k]),
        zoomExact[i * span + j] ? "weight " + fmt(w) + " (exact)" : "about " + fmt(w) + " (tile not kept: the overview's mean)"]);
      if (text.dataset.query !== String(q)) { text.dataset.query = q; drawText(q); }
    });
    zoom.canvas.addEventListener("mouseleave", untip);
    zoom.canvas.tabIndex = 0;
    zoom.canvas.addEventListener("keydown", (e) => {
      const step = { ArrowLeft: [0, -span / 8], ArrowRight: [0, span / 8], ArrowUp: [-span / 8, 0], ArrowDown: [span / 8, 0] }[e.key];
      if (step) { e.preventDefault(); move(step[0], step[1]); }
    });
    clamp(); drawAll();
  };

  // ---------------------------------------------------------------- roles at long context
  const ROLE_COLOURS = { retrieval: "#e4572e", copy: "#f3a712", sink: "#3b6fd8", local: "#17a398", mixed: "#cbd2d9" };
  kinds.roles = function (root, d) {
    root.append(el("h4", "hl-title", d.model + ": every head on " + d.n_tokens + " tokens"));
    if (d.note) root.append(el("p", "hl-muted", d.note));
    const names = Object.keys(d.scores);
    let colourBy = d.roles ? "role" : names[0];
    const box = el("div"), row = el("div", "hl-row"), detail = tid(el("div", "hl-detail"), "roles-detail");
    const scale = el("div");
    root.append(chips([...(d.roles ? ["role"] : []), ...names], colourBy, (n) => { colourBy = n; grid.draw(); key(); }, "roles-by-"), row);
    row.append(box, detail);
    const maps = d.maps ? { m: d.maps, blocked: decode(d.maps.blocked, Float32Array), received: decode(d.maps.received, Float32Array) } : null;
    const grid = Grid(d.layers, d.heads, (l, h) => {
      if (colourBy === "role") { const r = d.roles[l][h]; return r ? ROLE_COLOURS[r] : null; }
      const g = d.scores[colourBy], v = g[l][h]; if (v === undefined) return null;
      const all = g.flat(), lo = Math.min(...all), hi = Math.max(...all);
      return rgb(hi > lo ? (v - lo) / (hi - lo) : 0.5);
    }, {
      hover: (l, h) => ["layer " + l + ", head " + h + (d.roles ? ": " + d.roles[l][h] : ""), ...names.map((n) => n + " " + fmt(d.scores[n][l][h]))],
      pick: (l, h) => show(l, h),
    });
    tid(grid.canvas, "roles-grid");
    box.append(grid.canvas, scale);
    function key() {
      if (colourBy !== "role") { const all = d.scores[colourBy].flat(); scale.replaceChildren(legend(fmt(Math.min(...all)), fmt(Math.max(...all)), colourBy)); return; }
      const counts = {}; d.roles.flat().forEach((r) => { counts[r] = (counts[r] || 0) + 1; });
      const p = tid(el("p", "hl-legend"), "roles-legend");
      Object.keys(ROLE_COLOURS).forEach((r) => { const sw = el("i", "hl-swatch"); sw.style.background = ROLE_COLOURS[r]; p.append(sw, el("span", null, r + " " + (counts[r] || 0))); });
      scale.replaceChildren(p);
    }
    function show(l, h) {
      detail.replaceChildren(el("b", null, "layer " + l + ", head " + h + (d.roles ? ": " + d.roles[l][h] : "")));
      if (!maps) { detail.append(el("p", "hl-muted", "This results file has no attention maps.")); return; }
      const B = maps.m.blocks, size = Math.max(2, Math.floor(256 / B)), s = surface(B * size, B * size, "hl-canvas");
      tid(s.canvas, "roles-map");
      const off = (l * d.heads + h) * B * B, img = new ImageData(B, B), p = img.data;
      let top = 0; for (let i = 0; i < B * B; i++) top = Math.max(top, maps.blocked[off + i]);
      for (let i = 0; i < B * B; i++) {
        const j = 3 * Math.round(Math.sqrt(top > 0 ? maps.blocked[off + i] / top : 0) * 255);
        p[4 * i] = LUT[j]; p[4 * i + 1] = LUT[j + 1]; p[4 * i + 2] = LUT[j + 2]; p[4 * i + 3] = 255;
      }
      const bitmap = document.createElement("canvas"); bitmap.width = bitmap.height = B; bitmap.getContext("2d").putImageData(img, 0, 0);
      s.ctx.imageSmoothingEnabled = false; s.ctx.drawImage(bitmap, 0, 0, B * size, B * size);
      s.canvas.addEventListener("mousemove", (e) => {
        const [x, y] = local(e, s.canvas, s.w, s.h), kb = Math.floor(x / size), qb = Math.floor(y / size);
        if (kb < 0 || qb < 0 || kb >= B || qb >= B) return untip();
        tip(e, ["queries " + qb * maps.m.block + "\u2013" + ((qb + 1) * maps.m.block - 1), "keys " + kb * maps.m.block + "\u2013" + ((kb + 1) * maps.m.block - 1), "mean weight on these keys " + fmt(maps.blocked[off + qb * B + kb])]);
      });
      s.canvas.addEventListener("mouseleave", untip);
      detail.append(el("p", "hl-muted", "Blocks of " + maps.m.block + " tokens: the mean weight a query of a block puts on each block of keys."), s.canvas);
      const R = maps.m.bins, W = 300, H = 90, pr = surface(W, H, "hl-canvas"), roff = (l * d.heads + h) * R;
      tid(pr.canvas, "roles-profile");
      let hi = 0, lo = Infinity;
      for (let i = 0; i < R; i++) { const v = maps.received[roff + i]; hi = Math.max(hi, v); if (v > 0) lo = Math.min(lo, v); }
      lo = Math.max(lo === Infinity ? hi : lo, hi * 1e-4); const ly = (v) => H - 4 - ((Math.log10(Math.max(v, lo)) - Math.log10(lo)) / Math.max(1e-9, Math.log10(hi) - Math.log10(lo))) * (H - 8);
      pr.ctx.strokeStyle = "#3b6fd8"; pr.ctx.beginPath();
      for (let i = 0; i < R; i++) { const x = (i / Math.max(1, R - 1)) * (W - 2) + 1; if (i) pr.ctx.lineTo(x, ly(maps.received[roff + i])); else pr.ctx.moveTo(x, ly(maps.received[roff + i])); }
      pr.ctx.stroke();
      detail.append(el("p", "hl-muted", "Attention each key receives along the text (" + maps.m.bin + " tokens a point, log scale):"), pr.canvas);
    }
    key();
    if (d.roles) { grid.pick(0, 0); show(0, 0); }
  };

  // ---------------------------------------------------------------- the KV-budget plan
  kinds["kv-budget"] = function (root, d) {
    root.append(el("h4", "hl-title", d.model + ": K/V groups windowed to " + d.sinks + " sink + " + d.window + " recent tokens, on " + d.n_tokens + " tokens"));
    const error = {}; d.ranking.forEach(([l, g, e]) => { error[l + "," + g] = e; });
    const errors = d.ranking.map((r) => r[2]), lo = Math.min(...errors), hi = Math.max(...errors);
    const full = d.runs.find((r) => r.kind === "full");
    let picked = d.runs.find((r) => r.kind === "chosen") || full;
    const row = el("div", "hl-row"), left = el("div"), right = tid(el("div", "hl-table-box"), "kv-table");
    left.style.maxWidth = "340px";  // the grid is narrow: its notes wrap beside the table
    row.append(left, right); root.append(row);
    const caption = el("p", "hl-muted");
    const grid = Grid(d.layers, d.groups, (l, g) => {
      const e = error[l + "," + g]; return e === undefined ? null : rgb(hi > lo ? 1 - (e - lo) / (hi - lo) : 0.5);
    }, {
      width: 220, corner: "L\\G",
      hover: (l, g) => ["layer " + l + ", K/V group " + g, "window error " + fmt(error[l + "," + g]), picked.groups.some(([a, b]) => a === l && b === g) ? "windowed in this plan" : "kept whole in this plan"],
      marked: () => picked.groups,
    });
    tid(grid.canvas, "kv-grid");
    left.append(grid.canvas, legend("most error", "least", "window error of each group; outlined: windowed by the plan picked in the table"), caption);
    const t = el("table", "hl-table"), head = el("tr");
    ["groups windowed", "plan", "KV memory saved", "perplexity", "copy accuracy"].forEach((n) => head.append(el("th", null, n)));
    const thead = el("thead"); thead.append(head);
    const body = el("tbody");
    d.runs.forEach((r, i) => {
      const tr = tid(el("tr", r === picked ? "picked" : null), "kv-run-" + i);
      tr.append(el("td", null, r.kind === "full" ? "\u2013" : (100 * r.budget).toFixed(0) + "%"), el("td", null, r.kind + (r.seed === null ? "" : " (seed " + r.seed + ")")),
        el("td", null, r.kv_saved.toFixed(2) + "\u00d7"), el("td", null, fmt(r.perplexity) + (r === full ? "" : " (" + (r.perplexity >= full.perplexity ? "+" : "") + fmt(r.perplexity - full.perplexity) + ")")),
        el("td", null, r.copy_accuracy.toFixed(3)));
      tr.addEventListener("click", () => { picked = r; body.querySelectorAll("tr").forEach((o) => o.classList.toggle("picked", o === tr)); grid.draw(); say(); });
      body.append(tr);
    });
    t.append(thead, body); right.append(t);
    function say() { caption.textContent = picked.kind + " plan" + (picked.kind === "full" ? "" : " at " + (100 * picked.budget).toFixed(0) + "%") + ": " + picked.groups.length + " groups windowed."; }
    say();
  };

  // ---------------------------------------------------------------- the circuit graph
  const SIGN = ["#3b6fd8", "#e4572e"], DASH = [[], [], [6, 4], [2, 3]], INPUT = ["", "q", "k", "v"], WIDTHS = 6, LIT = 20;
  kinds.circuit = function (root, d) {
    const senders = decode(d.senders, Uint16Array), receivers = decode(d.receivers, Uint16Array);
    const inputs = decode(d.inputs, Uint8Array), scores = decode(d.scores, Float32Array), m = d.count;
    const L = d.heads_per_layer.length, tallest = Math.max(...d.heads_per_layer);
    const W = Math.min(1100, Math.max(640, 70 + 34 * (L + 2))), H = Math.min(620, Math.max(260, 60 + 22 * (tallest + 3)));
    const X = (x) => 30 + ((x + 1.6) / (L + 2.2)) * (W - 50), Y = (y) => 20 + (1 - (y + 2.0) / (tallest + 2.4)) * (H - 40);
    const px = d.x.map(X), py = d.y.map(Y);
    const largest = m ? Math.abs(scores[0]) : 1, smallest = (() => { for (let i = m - 1; i >= 0; i--) if (scores[i] !== 0) return Math.abs(scores[i]); return largest; })();
    root.append(el("h4", "hl-title", d.model + ", " + d.task + ", " + d.method + ": " + m + " edges"));
    const controls = el("div", "hl-nav"), slider = tid(el("input"), "circuit-threshold"), count = tid(el("span", "hl-muted"), "circuit-count");
    slider.type = "range"; slider.min = 0; slider.max = 1000; slider.step = 1;
    const lg = (v) => Math.log10(Math.max(v, 1e-30)), span = Math.max(1e-9, lg(largest) - lg(smallest));
    const toValue = (s) => (s <= 0 ? 0 : s >= 1000 ? largest : 10 ** (lg(smallest) + (s / 1000) * span)), toSlider = (v) => Math.round(((lg(v) - lg(smallest)) / span) * 1000);
    let threshold = d.threshold, shown = 0, picked = d.picked ? d.nodes.indexOf(d.picked) : -1;
    slider.value = Math.max(0, Math.min(1000, toSlider(threshold || smallest)));
    controls.append(el("span", null, "|score| \u2265"), slider, count);
    const base = surface(W, H, "hl-canvas"), s = surface(W, H, "hl-canvas");
    tid(s.canvas, "circuit-canvas");
    root.append(controls, s.canvas, el("p", "hl-muted", "Layers left to right (emb, then each layer's query heads as dots and its MLP as a square below; in a GQA layer a shaded box is a K/V group, whose k and v edges land on its hollow square; logits at the right). Edges: width by |score|, blue above 0, red below; into q solid, k dashed, v dotted. Point at a node for its edges; click it to light them (its 20 strongest at least, whatever the threshold)."));
    (function () { // the graph without edges, drawn once
      const ctx = base.ctx; ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, W, H);
      d.heads_per_layer.forEach((heads, l) => {
        const kv = d.kv_heads_per_layer[l];
        if (kv < heads) {
          const size = heads / kv;
          for (let g = 0; g < kv; g++) {
            const x0 = X(l - 0.28), x1 = X(l + 0.22), y0 = Y(g * size + size - 0.65), y1 = Y(g * size - 0.35);
            ctx.fillStyle = "#eef1f6"; ctx.strokeStyle = "#d9dee6"; ctx.fillRect(x0, y0, x1 - x0, y1 - y0); ctx.strokeRect(x0, y0, x1 - x0, y1 - y0);
          }
        }
      });
      ctx.font = "10px system-ui, sans-serif"; ctx.textAlign = "center"; ctx.fillStyle = "#616e7c";
      const step = Math.max(1, Math.ceil(L / 20));
      for (let l = 0; l < L; l += step) ctx.fillText(String(l), X(l), H - 4);
      ctx.fillText("emb", X(-1), H - 4); ctx.fillText("out", X(L), H - 4);
      d.nodes.forEach((name, i) => {
        ctx.fillStyle = "#9aa5b1"; ctx.strokeStyle = "#9aa5b1";
        if (name === "embed" || name === "logits") { ctx.fillStyle = "#1f2933"; ctx.fillRect(px[i] - 4, py[i] - 4, 8, 8); }
        else if (name.startsWith("mlp.")) ctx.fillRect(px[i] - 3, py[i] - 3, 6, 6);
        else if (name.includes(".g")) { ctx.fillStyle = "#fff"; ctx.fillRect(px[i] - 3, py[i] - 3, 6, 6); ctx.strokeRect(px[i] - 3, py[i] - 3, 6, 6); }
        else { ctx.beginPath(); ctx.arc(px[i], py[i], 2.5, 0, 2 * Math.PI); ctx.fill(); }
      });
    })();
    function countAbove(t) { let a = 0, b = m; while (a < b) { const c = (a + b) >> 1; if (Math.abs(scores[c]) >= t) a = c + 1; else b = c; } return a; }
    function draw() {
      const t0 = performance.now(), ctx = s.ctx;
      shown = countAbove(threshold);
      ctx.drawImage(base.canvas, 0, 0, W, H);
      // Thousands of edges: thin, solid, faint lines, stroked a few hundred segments a path
      // (software rasterizers stroke long self-crossing paths and dashes slowly); dashes only
      // where they can be told apart.
      const many = shown > 2000, faint = shown > 3000 ? 0.25 : shown > 300 ? 0.5 : 0.85;
      const paths = new Map();  // (width bucket, sign, input) -> edges; strongest drawn last
      for (let i = shown - 1; i >= 0; i--) {
        const share = Math.abs(scores[i]) / largest, w = Math.min(WIDTHS - 1, Math.floor(share * WIDTHS));
        const key = w * 8 + (scores[i] < 0 ? 4 : 0) + inputs[i];
        let list = paths.get(key); if (!list) { list = []; paths.set(key, list); }
        list.push(i);
      }
      const stroke = (list) => {
        for (let a = 0; a < list.length; a += 400) {
          ctx.beginPath();
          for (let b = a; b < Math.min(list.length, a + 400); b++) {
            const i = list[b];
            ctx.moveTo(px[senders[i]], py[senders[i]]); ctx.lineTo(px[receivers[i]], py[receivers[i]]);
          }
          ctx.stroke();
        }
      };
      [...paths.keys()].sort((a, b) => a - b).forEach((key) => {
        const w = key >> 3, sign = (key >> 2) & 1, input = key & 3, list = paths.get(key);
        ctx.strokeStyle = SIGN[sign]; ctx.setLineDash(many ? [] : DASH[input]);
        // many edges: one-pixel hairlines (the rasterizer's fast path), strength by opacity
        ctx.lineWidth = many ? 1 : 0.5 + (3.5 * (w + 0.5)) / WIDTHS;
        ctx.globalAlpha = picked < 0 ? Math.min(1, faint + (many ? 0.15 : 0.1) * w) : many ? 0.015 : 0.08;
        stroke(list);
      });
      // the picked node's edges above the threshold, and at least its LIT strongest below it
      let lit = [];
      if (picked >= 0) {
        for (let i = 0; i < m && (i < shown || lit.length < LIT); i++) if (senders[i] === picked || receivers[i] === picked) lit.push(i);
        const top = lit.length ? Math.abs(scores[lit[0]]) : 1;
        ctx.globalAlpha = 0.9;
        lit.slice().reverse().forEach((i) => {
          ctx.strokeStyle = SIGN[scores[i] < 0 ? 1 : 0]; ctx.setLineDash(DASH[inputs[i]]);
          ctx.lineWidth = 0.8 + (3.2 * Math.abs(scores[i])) / top;
          ctx.beginPath(); ctx.moveTo(px[senders[i]], py[senders[i]]); ctx.lineTo(px[receivers[i]], py[receivers[i]]); ctx.stroke();
        });
      }
      ctx.setLineDash([]); ctx.globalAlpha = 1;
      if (picked >= 0) { ctx.strokeStyle = "#111"; ctx.lineWidth = 2; ctx.beginPath(); ctx.arc(px[picked], py[picked], 6, 0, 2 * Math.PI); ctx.stroke(); }
      count.textContent = fmt(threshold) + ": " + shown + " of " + m + " edges" + (shown === d.top && d.threshold === threshold ? " (the circuit)" : "") +
        (picked >= 0 ? "; " + d.nodes[picked] + " lit with " + lit.length + " of its edges (its strongest " + Math.min(LIT, lit.length) + " at least)" : "");
      s.canvas.dataset.picked = picked < 0 ? "" : d.nodes[picked];
      s.canvas.dataset.shown = shown; s.canvas.dataset.threshold = threshold; s.canvas.dataset.ms = (performance.now() - t0).toFixed(1);
    }
    let queued = false;
    slider.addEventListener("input", () => {
      threshold = toValue(+slider.value);
      if (!queued) { queued = true; requestAnimationFrame(() => { queued = false; draw(); }); }
    });
    function nearest(e) {
      const [x, y] = local(e, s.canvas, W, H); let best = -1, dist = 100;
      for (let i = 0; i < px.length; i++) { const dd = (px[i] - x) ** 2 + (py[i] - y) ** 2; if (dd < dist) { dist = dd; best = i; } }
      return best;
    }
    s.canvas.addEventListener("mousemove", (e) => {
      const node = nearest(e);
      if (node < 0) return untip();
      let into = 0, out = 0, strongest = -1;
      for (let i = 0; i < shown; i++) if (senders[i] === node || receivers[i] === node) { if (senders[i] === node) out++; else into++; if (strongest < 0) strongest = i; }
      tip(e, [d.nodes[node], into + " edges in, " + out + " out (of those drawn)",
        ...(strongest >= 0 ? ["strongest: " + d.nodes[senders[strongest]] + " \u2192 " + d.nodes[receivers[strongest]] + (INPUT[inputs[strongest]] ? " <" + INPUT[inputs[strongest]] + ">" : "") + " " + fmt(scores[strongest])] : [])]);
    });
    s.canvas.addEventListener("mouseleave", untip);
    s.canvas.addEventListener("click", (e) => { const node = nearest(e); picked = node === picked ? -1 : node; draw(); });
    draw();
  };

  // ---------------------------------------------------------------- faithfulness curves
  const CURVES = ["#3b6fd8", "#e4572e", "#17a398"];
  kinds.faithfulness = function (root, d) {
    const first = d.curves[0], W = 640, H = 280, left = 48, bottom = 34, right = 12, top = 12;
    root.append(el("h4", "hl-title", d.title));
    const s = surface(W, H, "hl-canvas"); tid(s.canvas, "faithfulness-canvas");
    const all = [...d.curves.flatMap((c) => c.faithfulness), ...first.random.flat(), 0, 1];
    const lo = Math.min(...all), hi = Math.max(...all);
    const fr = first.fractions, lx = (f) => Math.log10(f), x0 = lx(Math.min(...fr)), x1 = lx(Math.max(...fr));
    const X = (f) => left + ((lx(f) - x0) / Math.max(1e-9, x1 - x0)) * (W - left - right), Y = (v) => top + (1 - (v - lo) / Math.max(1e-9, hi - lo)) * (H - top - bottom);
    const ctx = s.ctx; ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, W, H);
    ctx.strokeStyle = "#cbd2d9"; ctx.lineWidth = 1;
    [0, 1].forEach((v) => { ctx.beginPath(); ctx.moveTo(left, Y(v)); ctx.lineTo(W - right, Y(v)); ctx.stroke(); });
    ctx.fillStyle = "#616e7c"; ctx.font = "10px system-ui, sans-serif"; ctx.textAlign = "right"; ctx.textBaseline = "middle";
    [lo, 0, 1, hi].forEach((v) => ctx.fillText(fmt(v), left - 4, Y(v)));
    ctx.textAlign = "center"; ctx.textBaseline = "top";
    fr.forEach((f, i) => { if (i % Math.max(1, Math.ceil(fr.length / 10)) === 0) ctx.fillText(+(100 * f).toPrecision(2) + "%", X(f), H - bottom + 4); });
    ctx.fillText("edges kept (of " + first.edges + "), log scale", left + (W - left) / 2, H - 14);
    const line = (xs, ys, colour, width, dash) => { ctx.strokeStyle = colour; ctx.lineWidth = width; ctx.setLineDash(dash); ctx.beginPath(); ys.forEach((v, i) => (i ? ctx.lineTo(X(xs[i]), Y(v)) : ctx.moveTo(X(xs[i]), Y(v)))); ctx.stroke(); ctx.setLineDash([]); };
    const seeds = first.random_cpr.length;
    for (let k = 0; k < seeds; k++) line(fr, first.random.map((r) => r[k]), "#cbd2d9", 1, []);
    const mean = first.random.map((r) => r.reduce((a, b) => a + b, 0) / Math.max(1, r.length));
    line(fr, mean, "#9aa5b1", 1.5, [5, 4]);
    d.curves.forEach((c, n) => line(c.fractions, c.faithfulness, CURVES[n % 3], 2, []));
    const key = el("p", "hl-legend");
    d.curves.forEach((c, n) => { const sw = el("i", "hl-swatch"); sw.style.background = CURVES[n % 3]; key.append(sw, el("span", null, c.selection + " " + c.method + ": CPR " + c.cpr.toFixed(3) + ", CMD " + c.cmd.toFixed(3))); });
    const sw = el("i", "hl-swatch"); sw.style.background = "#9aa5b1";
    key.append(sw, el("span", null, "random circuits (" + seeds + " seeds; dashed: their mean)"));
    s.canvas.addEventListener("mousemove", (e) => {
      const [x] = local(e, s.canvas, W, H); let best = 0;
      fr.forEach((f, i) => { if (Math.abs(X(f) - x) < Math.abs(X(fr[best]) - x)) best = i; });
      tip(e, [first.sizes[best] + " edges (" + fmt(100 * fr[best]) + "%)", ...d.curves.map((c) => c.selection + " " + c.method + ": " + fmt(c.faithfulness[best])), "random mean: " + fmt(mean[best])]);
    });
    s.canvas.addEventListener("mouseleave", untip);
    root.append(s.canvas, key);
  };

  // ---------------------------------------------------------------- drawing
  function draw(root) {
    if (root.dataset.hlDrawn) return;
    root.dataset.hlDrawn = "1";
    const start = performance.now(), drawer = kinds[root.dataset.hlKind];
    const fallback = root.querySelector(".hl-fallback"), holder = root.querySelector("script.hl-data");
    try {
      if (!drawer) throw new Error("no drawer for " + root.dataset.hlKind + " (an older headlab's code is loaded: reload the page)");
      const data = JSON.parse(holder.textContent);
      if (fallback) fallback.remove();
      drawer(root, data);
    } catch (error) {
      root.append(el("p", "hl-error", "headlab could not draw this display: " + error.message));
      throw error;
    }
    root.dataset.ms = (performance.now() - start).toFixed(1);
  }
  function drawAll(scope) { (scope || document).querySelectorAll(".hl-display:not([data-hl-drawn])").forEach(draw); }
  // More drawers (kinds_displays.js) come before this file in the page and are added here.
  const lib = { el, tid, decode, surface, local, tip, untip, fmt, rgb, chips, Grid, legend };
  (window.headlabDrawers || []).forEach((add) => add(kinds, lib));
  window.headlabDisplays = { kinds, draw, drawAll };
  drawAll();
})();
