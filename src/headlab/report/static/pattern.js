// headlab displays: one head's pattern (see displays.js).
(function () {
  "use strict";
  const { LUT, rgb, el, tid, decode, surface, local, tip, untip, fmt, quote, chips, Grid, legend } = window.headlabDisplays.lib;
  const kinds = window.headlabDisplays.kinds;

  // ---------------------------------------------------------------- one head's pattern
  kinds.pattern = function (root, d) {
    const n = d.tokens.length, cell = d.cell, cells = Math.ceil(n / cell), T = d.tile;
    const overview = decode(d.overview, Float32Array);
    const tiles = new Map(d.tiles.map((t) => [t.q0 + "," + t.k0, t]));
    const span = Math.min(T, n), px = Math.max(2, Math.min(24, Math.floor(512 / span))), Z = span * px;
    let oMax = 0; for (let i = 0; i < overview.length; i++) oMax = Math.max(oMax, overview[i]);
    const O = Math.max(256, Math.min(384, cells * 2)), opx = O / cells;
    root.append(el("h4", "hl-title", d.model + ", layer " + d.layer + ", head " + d.head + ": " + n + " tokens"));
    const info = tid(el("p", "hl-muted"), "pattern-info"), floor = d.floor || 0;
    info.textContent = "Left: the whole text, " + (cell === 1 ? "one token a cell (exact)" : cell + " tokens a cell (the mean weight a query of the cell puts on the cell's keys, summed; from the streaming sums)") +
      ". Right: " + span + " \u00d7 " + span + " tokens with the head's own weights, unrounded: " + (floor > 0 ? "every weight \u2265 " + fmt(floor) : "every weight") +
      " is in this display (" + d.kept.toLocaleString("en") + " weights, " + (100 * d.mass).toFixed(1) + "% of the attention, within " + +(d.budget / 2 ** 20).toPrecision(2) + " MiB, computed when the display was made)" +
      (floor > 0 ? "; grey: a weight below " + fmt(floor) + ", shaded by the overview" : "") + ". Click the overview to move, or use the arrows.";
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
    root.append(info, row, legend("0", "largest in view", "colour: square root of the weight" + (floor > 0 ? "; grey: below " + fmt(floor) : "")), strip, text);
    const cache = new Map();
    // a tile's weights, NaN where it holds none (below the floor): dense, or at its offsets
    function tileValues(q0, k0) {
      const key = q0 + "," + k0;
      if (!cache.has(key)) {
        const t = tiles.get(key);
        let v = null;
        if (t && !t.offsets) v = decode(t.data, Float32Array);
        else if (t) {
          const at = decode(t.offsets, Uint16Array), values = decode(t.data, Float32Array);
          v = new Float32Array(t.rows * t.cols).fill(NaN);
          for (let i = 0; i < at.length; i++) v[at[i]] = values[i];
        }
        cache.set(key, v && { t, v });
      }
      return cache.get(key);
    }
    // weight of query q on key k: [value, exact?]; not exact: below the floor, the overview's
    // mean in its cell stands in for it (grey)
    function weight(q, k) {
      if (d.causal && k > q) return [0, true];
      const q0 = q - (q % T), k0 = k - (k % T), tv = tileValues(q0, k0);
      const w = tv ? tv.v[(q - q0) * tv.t.cols + (k - k0)] : NaN;
      if (!Number.isNaN(w)) return [w, true];
      if (floor === 0) return [0, true];  // every positive weight is kept: this one is 0
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
        zoomExact[i * span + j] ? "weight " + fmt(w) + " (exact)" : "below " + fmt(floor) + " (not kept; the overview's mean in its cell: " + fmt(w) + ")"]);
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

})();
