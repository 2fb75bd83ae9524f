// headlab displays: one drawer per results type, drawn on canvases from the JSON inside each
// display (report/displays). Loaded once per page, with the drawers of pattern.js and circuit.js
// after it (display_bundle.page_code); each display then only adds its data.
// Text from the data is only ever written with textContent, never parsed as HTML.
(function () {
  "use strict";
  if (window.headlabDisplays) return;  // sent again: page_code's last line draws
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
  // Detector scores (0..1, one scale), then each statistic on its own scale; each head's role
  // on a long text where the data has it. A pick is also sent to the page as "headlab-pick".
  kinds.heads = function (root, d) {
    const detectors = Object.keys(d.detectors || {}), names = [...detectors, ...Object.keys(d.metrics)];
    const grids = Object.assign({}, d.metrics, d.detectors || {}), roles = d.roles || null;
    const columns = roles ? ["role", ...names] : names;
    let metric = d.first || names[0], sortBy = metric, descending = true, picked = null;
    root.append(el("h4", "hl-title", d.model + ": " + d.num_layers + " layers \u00d7 " + d.num_heads + " heads, " + d.n_texts + " texts"));
    (d.notes || []).forEach((n) => root.append(el("p", "hl-muted", "Note: " + n + ".")));
    root.append(chips(roles ? [...names, "role"] : names, metric, (name) => { metric = name; sortBy = name; descending = name !== "role"; redraw(); }, "heads-metric-"));
    const row = el("div", "hl-row"), left = el("div"), right = tid(el("div", "hl-table-box"), "heads-table");
    row.append(left, right); root.append(row);
    const range = () => { if (detectors.includes(metric)) return [0, 1]; const v = grids[metric].flat(); return [Math.min(...v), Math.max(...v)]; };
    const value = (n, l, h) => (n === "role" ? roles[l][h] : grids[n][l][h]);
    const grid = Grid(d.num_layers, d.num_heads, (l, h) => {
      if (metric === "role") return roles[l][h] === undefined ? null : ROLE_COLOURS[roles[l][h]] || "#cbd2d9";
      const v = grids[metric][l][h]; if (v === undefined) return null;
      const [lo, hi] = range(); return rgb(hi > lo ? (v - lo) / (hi - lo) : 0.5);
    }, {
      hover: (l, h) => ["layer " + l + ", head " + h + (roles ? ": " + roles[l][h] : ""), ...names.map((n) => n + " " + (grids[n][l][h] === undefined ? "\u2013" : fmt(grids[n][l][h])))],
      pick: (l, h) => { select(l, h); const r = right.querySelector("tr.picked"); if (r) r.scrollIntoView({ block: "nearest" }); },
    });
    tid(grid.canvas, "heads-heatmap");
    const scale = el("div");
    left.append(grid.canvas, scale);
    function select(l, h) {
      picked = [l, h]; table();
      root.dataset.picked = l + "." + h;
      root.dispatchEvent(new CustomEvent("headlab-pick", { bubbles: true, detail: { layer: l, head: h } }));
    }
    function table() {
      const rows = [];
      for (let l = 0; l < d.num_layers; l++) for (let h = 0; h < grids[names[0]][l].length; h++) rows.push([l, h]);
      const key = (r) => sortBy === "layer" ? r[0] * 1e4 + r[1] : sortBy === "head" ? r[1] * 1e4 + r[0] : value(sortBy, r[0], r[1]);
      const order = (a, b) => (typeof a === "string" ? a.localeCompare(b) : a - b);
      rows.sort((a, b) => (descending ? order(key(b), key(a)) : order(key(a), key(b))));
      const t = el("table", "hl-table"), head = el("tr");
      ["layer", "head", ...columns].forEach((n) => {
        const th = tid(el("th", n === sortBy ? "sorted" : null, n + (n === sortBy ? (descending ? " \u25be" : " \u25b4") : "")), "heads-sort-" + n.replace(/[^A-Za-z0-9_-]/g, "_"));
        th.addEventListener("click", () => { descending = n === sortBy ? !descending : !["layer", "head", "role"].includes(n); sortBy = n; table(); });
        head.append(th);
      });
      const body = el("tbody");
      rows.forEach(([l, h]) => {
        const tr = el("tr", picked && picked[0] === l && picked[1] === h ? "picked" : null);
        tr.dataset.layer = l; tr.dataset.head = h;
        tr.append(el("td", null, String(l)), el("td", null, String(h)), ...columns.map((n) => el("td", null, n === "role" ? String(roles[l][h]) : fmt(grids[n][l][h]))));
        tr.addEventListener("click", () => { grid.pick(l, h); select(l, h); });
        body.append(tr);
      });
      const thead = el("thead"); thead.append(head); t.append(thead, body);
      right.replaceChildren(t);
    }
    function redraw() {
      grid.draw(); table();
      if (metric === "role") { scale.replaceChildren(roleKey(roles)); return; }
      const [lo, hi] = range();
      scale.replaceChildren(legend(fmt(lo), fmt(hi), metric + (detectors.includes(metric) ? ", a detector score: 0 to 1, one scale for every detector" : ", its own scale") + "; click a cell or a row"));
    }
    redraw();
  };

  // Role swatches with each role's count (the roles display and the statistics' role grid).
  function roleKey(roles) {
    const counts = {}; roles.flat().forEach((r) => { counts[r] = (counts[r] || 0) + 1; });
    const p = tid(el("p", "hl-legend"), "roles-legend");
    Object.keys(ROLE_COLOURS).forEach((r) => { const sw = el("i", "hl-swatch"); sw.style.background = ROLE_COLOURS[r]; p.append(sw, el("span", null, r + " " + (counts[r] || 0))); });
    return p;
  }

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
      scale.replaceChildren(roleKey(d.roles));
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
    // one row per plan size: the chosen plan against the random plans and the opposite ranking
    const sizes = el("table", "hl-table"), sizesHead = el("tr"), sizesBody = el("tbody");
    ["groups windowed", "KV memory saved", "perplexity change: chosen", "random plans (lowest\u2026highest)", "opposite",
      "copy accuracy: chosen", "random plans", "opposite"].forEach((n) => sizesHead.append(el("th", null, n)));
    (d.plan_sizes || []).forEach((r) => {
      const tr = el("tr");
      ["groups", "saved", "perplexity", "random_perplexity", "opposite_perplexity", "copy_accuracy", "random_copy", "opposite_copy"]
        .forEach((k) => tr.append(el("td", null, r[k])));
      sizesBody.append(tr);
    });
    const sizesTop = el("thead"); sizesTop.append(sizesHead); sizes.append(sizesTop, sizesBody);
    root.append(tid(el("div", "hl-table-box hl-wide"), "kv-budget-table"));
    root.lastChild.append(sizes);
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
  const lib = { LUT, rgb, el, tid, decode, surface, local, tip, untip, fmt, quote, chips, Grid, legend };
  // Drawers queued before this file (kinds_displays.js) are added here; those after it
  // (pattern.js, circuit.js, score_split.js) add themselves through window.headlabDisplays.lib.
  (window.headlabDrawers || []).forEach((add) => add(kinds, lib));
  window.headlabDisplays = { kinds, draw, drawAll, lib };
})();
