// headlab displays of the encoder-decoders' and image models' heads (report/displays/
// kinds_display.py): added to displays.js' drawers, with its helpers, when that file loads.
// Text from the data is only ever written with textContent or fillText, never parsed as HTML.
(window.headlabDrawers = window.headlabDrawers || []).push(function (kinds, lib) {
  "use strict";
  const { el, tid, decode, surface, local, tip, untip, fmt, rgb, chips, Grid, legend } = lib;
  const safe = (name) => name.replace(/[^A-Za-z0-9_-]/g, "_");
  const range = (grid) => { const v = grid.flat().filter((x) => x !== undefined); return [Math.min(...v), Math.max(...v)]; };

  // A rows x cols image of weights, each cell coloured by sqrt(weight / largest), on a canvas
  // of at most maxW x maxH CSS pixels; labels(r, c) -> the tooltip's lines.
  function Heat(values, rows, cols, maxW, maxH, labels, marked, most) {
    const cap = most || 24, cw = Math.max(Math.min(cap, maxW / cols), 0.25), ch = Math.max(Math.min(cap, maxH / rows), 2);
    const s = surface(Math.ceil(cw * cols) + 2, Math.ceil(ch * rows) + 2, "hl-canvas");
    let top = 0; for (let i = 0; i < values.length; i++) top = Math.max(top, values[i]);
    const off = document.createElement("canvas"); off.width = cols; off.height = rows;
    const ctx = off.getContext("2d"), image = ctx.createImageData(cols, rows);
    for (let i = 0; i < rows * cols; i++) {
      const c = rgb(top > 0 ? Math.sqrt(values[i] / top) : 0).match(/\d+/g);
      image.data.set([+c[0], +c[1], +c[2], 255], 4 * i);
    }
    ctx.putImageData(image, 0, 0);
    s.ctx.imageSmoothingEnabled = false;
    s.ctx.drawImage(off, 1, 1, cw * cols, ch * rows);
    s.ctx.strokeStyle = "#e4572e"; s.ctx.lineWidth = 2;
    (marked || []).forEach(([r, c]) => s.ctx.strokeRect(1 + c * cw + 1, 1 + r * ch + 1, Math.max(cw - 2, 1), Math.max(ch - 2, 1)));
    s.canvas.addEventListener("mousemove", (e) => {
      const [x, y] = local(e, s.canvas, s.w, s.h), c = Math.floor((x - 1) / cw), r = Math.floor((y - 1) / ch);
      if (r >= 0 && c >= 0 && r < rows && c < cols) tip(e, labels(r, c)); else untip();
    });
    s.canvas.addEventListener("mouseleave", untip);
    return s.canvas;
  }

  // The heads of one kind on a grid, a metric's chips, and a pick that shows one head's pattern.
  function headsGrid(root, prefix, get, onPick, marked) {
    const box = el("div"), scale = el("div");
    let grid = null;
    function redraw() {
      const { layers, heads, metrics, metric } = get(), g = metrics[metric], [lo, hi] = range(g);
      grid = Grid(layers, heads, (l, h) => (g[l][h] === undefined ? null : rgb(hi > lo ? (g[l][h] - lo) / (hi - lo) : 0.5)), {
        hover: (l, h) => ["layer " + l + ", head " + h, ...Object.keys(metrics).map((n) => n + " " + (metrics[n][l][h] === undefined ? "\u2013" : fmt(metrics[n][l][h])))],
        pick: onPick, marked,
      });
      tid(grid.canvas, prefix + "-heatmap");
      box.replaceChildren(grid.canvas);
      scale.replaceChildren(legend(fmt(lo), fmt(hi), metric + ", its own scale; click a head"));
    }
    root.append(box, scale);
    return { redraw, pick: (l, h) => grid && grid.pick(l, h) };
  }

  // ---------------------------------------------------------------- encoder-decoders
  kinds.cross = function (root, d) {
    let kind = d.first_kind, metric = d.metric, range = [0, Infinity];
    const p = d.patterns, kept = p ? p.heads.map((h) => h.join(".")) : [];
    const weights = p ? decode(p.weights, Float32Array) : null;
    const T = p ? p.targets.length : 0, S = p ? p.sources.length : 0;
    root.append(el("h4", "hl-title", d.model + ": heads of each attention kind, " + d.n_sources + " sources"));
    const metricBar = el("div"), noteBox = el("div");
    root.append(chips(Object.keys(d.kinds), kind, (k) => { kind = k; if (!(metric in d.kinds[k].metrics)) metric = Object.keys(d.kinds[k].metrics)[0]; metricChips(); grid.redraw(); notes(); }, "cross-kind-"), metricBar, noteBox);
    const grid = headsGrid(root, "cross", () => ({ layers: d.kinds[kind].num_layers, heads: d.kinds[kind].num_heads, metrics: d.kinds[kind].metrics, metric }),
      (l, h) => (kind === "cross" ? pattern(l, h) : null));
    const detail = tid(el("div", "hl-detail"), "cross-pattern");
    root.append(detail);
    function metricChips() { metricBar.replaceChildren(chips(Object.keys(d.kinds[kind].metrics), metric, (m) => { metric = m; grid.redraw(); }, "cross-metric-")); }
    function notes() { noteBox.replaceChildren(...(d.kinds[kind].notes || []).map((n) => el("p", "hl-muted", "Note: " + n + "."))); }
    function pattern(l, h) {
      if (!p) { detail.replaceChildren(el("p", "hl-muted", "This results file keeps no cross-attention weights (written by an older headlab): run model heads again to see a head's pattern.")); return; }
      const i = kept.indexOf(l + "." + h);
      if (i < 0) { detail.replaceChildren(el("p", "hl-muted", "Cross-attention head " + l + "." + h + ": its weights were not kept in this file.")); return; }
      const w = weights.subarray(i * T * S, (i + 1) * T * S), peaks = [];
      for (let t = 0; t < T; t++) { let best = 0; for (let s = 1; s < S; s++) if (w[t * S + s] > w[t * S + best]) best = s; peaks.push(best); }
      // The source columns shown, [from, to]: all at first; two sliders narrow them (Whisper's
      // speech often fills the first seconds of its 30 s window).
      const box = el("div"), fromIn = tid(el("input"), "cross-from"), toIn = tid(el("input"), "cross-to"), span = tid(el("span", "hl-muted"), "cross-range");
      [fromIn, toIn].forEach((input, k) => { input.type = "range"; input.min = 0; input.max = S - 1; input.value = k ? S - 1 : range[0]; input.addEventListener("input", draw); });
      toIn.value = Math.min(S - 1, range[1]);
      function draw() {
        let a = +fromIn.value, b = +toIn.value;
        if (a > b) [a, b] = [b, a];
        range = [a, b];
        const n = b - a + 1, sub = new Float32Array(T * n);
        for (let t = 0; t < T; t++) sub.set(w.subarray(t * S + a, t * S + b + 1), t * n);
        const canvas = tid(Heat(sub, T, n, 720, 420, (t, s) => ["target " + t + ": " + p.targets[t], "source " + (a + s) + ": " + p.sources[a + s], "weight " + fmt(w[t * S + a + s])]), "cross-pattern-canvas");
        span.textContent = "source columns " + a + " (" + p.sources[a] + ") to " + b + " (" + p.sources[b] + "), " + n + " of " + S;
        box.replaceChildren(canvas);
      }
      const list = tid(el("div", "hl-text"), "cross-peaks");
      p.targets.forEach((tok, t) => { const item = el("span", "hl-tok", tok + " \u2192 " + p.sources[peaks[t]] + "   "); list.append(item); });
      const sliders = el("p", "hl-legend");
      sliders.append(el("span", null, "from"), fromIn, el("span", null, "to"), toIn, span);
      detail.replaceChildren(
        el("h4", "hl-title", "Cross-attention head " + l + "." + h + " on the first pair: " + T + " target tokens (rows) \u00d7 " + S + " source positions (columns)"),
        sliders, box, legend("0", "its largest weight in view", "colour: square root of the weight; hover a cell"),
        el("p", "hl-muted", "Each target token and the source position it puts the most weight on:"), list,
        ...p.notes.map((n) => el("p", "hl-muted", "Note: " + n + ".")));
      draw();
    }
    metricChips(); notes(); grid.redraw();
    if (p && kind === "cross") { const [l, h] = p.heads[0]; grid.pick(l, h); pattern(l, h); }
    else detail.replaceChildren(el("p", "hl-muted", p ? "Pick the cross attention and click a head to see its pattern." : "No cross-attention weights kept in this file."));
  };

  // ---------------------------------------------------------------- image models
  kinds["patch-grid"] = function (root, d) {
    let metric = d.metric;
    const [rows, cols] = d.grid, first = 1 + d.registers.length, N = d.tokens;
    const cls = d.cls ? decode(d.cls, Float32Array) : null, ratios = d.ratios ? decode(d.ratios, Float32Array) : null;
    root.append(el("h4", "hl-title", d.model + ": " + d.num_layers + " layers \u00d7 " + d.num_heads + " heads, " + d.n_images + (d.n_images === 1 ? " image, " : " images, ") + rows + " \u00d7 " + cols + " patches" + (d.registers.length ? ", " + d.registers.length + " registers" : "")));
    d.notes.forEach((n) => root.append(el("p", "hl-muted", "Note: " + n + ".")));
    const metricBar = el("div"); root.append(metricBar);
    const grid = headsGrid(root, "patch", () => ({ layers: d.num_layers, heads: d.num_heads, metrics: d.metrics, metric }), (l, h) => patches(l, h));
    const detail = tid(el("div", "hl-detail"), "patch-grid");
    root.append(detail);
    function metricChips() { metricBar.replaceChildren(chips(Object.keys(d.metrics), metric, (m) => { metric = m; grid.redraw(); }, "patch-metric-")); }
    function patches(l, h) {
      if (!cls) { detail.replaceChildren(el("p", "hl-muted", "This results file keeps no class-token weights (written by an older headlab): run model heads again to see a head on the patch grid.")); return; }
      const row = cls.subarray((l * d.num_heads + h) * N, (l * d.num_heads + h + 1) * N), onPatches = row.subarray(first);
      const ratio = ratios ? ratios.subarray(l * N, (l + 1) * N) : null, high = [];
      if (ratio) for (let t = first; t < N; t++) if (ratio[t] > d.threshold) high.push([Math.floor((t - first) / cols), (t - first) % cols]);
      const size = Math.max(6, Math.min(48, Math.floor(448 / Math.max(rows, cols))));
      const canvas = tid(Heat(onPatches, rows, cols, cols * size, rows * size, (r, c) => {
        const t = first + r * cols + c;
        return ["patch (" + r + ", " + c + "), token " + t, "weight from the class token " + fmt(row[t]), ...(ratio ? ["norm / median patch norm " + fmt(ratio[t]) + (ratio[t] > d.threshold ? " (high-norm)" : "")] : [])];
      }, high, 48), "patch-grid-canvas");
      let patchSum = 0; for (let i = 0; i < onPatches.length; i++) patchSum += onPatches[i];
      const parts = ["class token on itself " + fmt(row[0])];
      d.registers.forEach((t, i) => parts.push("register " + i + " " + fmt(row[t])));
      parts.push("all patches together " + fmt(patchSum));
      detail.replaceChildren(
        el("h4", "hl-title", "Layer " + l + ", head " + h + ": the class token's attention on each patch (first image)"),
        canvas, legend("0", "its largest patch weight", "colour: square root of the weight"),
        tid(el("p", "hl-muted", parts.join("; ") + "."), "patch-grid-others"),
        el("p", "hl-muted", ratio ? (high.length ? high.length + " high-norm patch" + (high.length > 1 ? "es" : "") + " at this layer's input (outlined: norm above " + fmt(d.threshold) + "\u00d7 the median patch norm)." : "No high-norm patch at this layer's input (none above " + fmt(d.threshold) + "\u00d7 the median patch norm).") : "Norm ratios not kept (images of different token counts)."));
    }
    metricChips(); grid.redraw();
    const l = d.num_layers - 1; grid.pick(l, 0); patches(l, 0);
  };
});
