// headlab report: heatmap explorers drawn on canvas from the JSON embedded in the page.
// Text from the data is only ever written with textContent, never parsed as HTML.
(function () {
  "use strict";
  const DATA = JSON.parse(document.getElementById("report-data").textContent);
  const tooltip = document.getElementById("tooltip");
  const EXPLORERS = {};  // explorer id -> {layers, heads, open(layer, head)}

  // viridis, 9 stops, interpolated into a 256-entry lookup table
  const STOPS = [[68, 1, 84], [71, 44, 122], [59, 81, 139], [44, 113, 142], [33, 144, 141],
    [39, 173, 129], [92, 200, 99], [170, 220, 50], [253, 231, 37]];
  const LUT = new Uint8ClampedArray(256 * 3);
  for (let i = 0; i < 256; i++) {
    const t = (i / 255) * (STOPS.length - 1), k = Math.min(STOPS.length - 2, Math.floor(t)), f = t - k;
    for (let c = 0; c < 3; c++) LUT[3 * i + c] = STOPS[k][c] * (1 - f) + STOPS[k + 1][c] * f;
  }

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // The quanta of report/heatmap.py (uint16 little endian, base64): value = q / 65535 * scale.
  function quantised(head) {
    const raw = atob(head.data), q = new Uint16Array(raw.length / 2);
    for (let i = 0; i < q.length; i++) q[i] = raw.charCodeAt(2 * i) | (raw.charCodeAt(2 * i + 1) << 8);
    return q;
  }

  // Token-level cells (results/token_cells.py): uint8 levels, row by row, of the causal
  // triangle (or the whole square), deflated; value = level / 255 * scale. A head is inflated
  // with the browser's DecompressionStream when it is first shown (asynchronously: `ready` is
  // called once it is), and at most KEEP heads are kept decoded.
  const TOKEN_CELLS = "uint8-deflate", KEEP = 48, decoded = [];
  const LEVEL_COLOUR = Uint16Array.from({ length: 256 }, (_, q) => Math.round(Math.sqrt(q / 255) * 255) * 3);

  function inflate(b64) {
    const raw = atob(b64), bytes = new Uint8Array(raw.length);
    for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Response(stream).arrayBuffer().then((b) => new Uint8Array(b));
  }

  function keep(head) {
    decoded.push(head);
    if (decoded.length > KEEP) {
      const old = decoded.shift();
      old.values = old.bitmap = old.pending = null;
    }
  }

  function tokenHead(head, n, triangle, ready) {
    if (head.values) return head;
    if (typeof DecompressionStream === "undefined") return null;  // said on the canvas
    if (!head.pending) {
      head.pending = inflate(head.z).then((levels) => {
        const values = new Float32Array(n * n), image = new ImageData(n, n), px = image.data;
        const unit = head.scale / 255, dark = LUT.slice(0, 3);
        for (let i = 0; i < n * n; i++) {
          px[4 * i] = dark[0]; px[4 * i + 1] = dark[1]; px[4 * i + 2] = dark[2]; px[4 * i + 3] = 255;
        }
        let at = 0;
        for (let q = 0; q < n; q++) {
          for (let k = 0, end = triangle ? q + 1 : n; k < end; k++) {
            const level = levels[at++], i = q * n + k, c = LEVEL_COLOUR[level];
            values[i] = level * unit;
            px[4 * i] = LUT[c]; px[4 * i + 1] = LUT[c + 1]; px[4 * i + 2] = LUT[c + 2];
          }
        }
        const bitmap = document.createElement("canvas");
        bitmap.width = bitmap.height = n;
        bitmap.getContext("2d").putImageData(image, 0, 0);
        head.values = values; head.bitmap = bitmap;
        keep(head);
      });
    }
    if (ready) head.pending.then(ready);
    return null;
  }

  // One head: decode lazily and keep the pixels (null while a token-level head inflates).
  function decodeHead(head, bins, ex, ready) {
    if (ex && ex.cells === TOKEN_CELLS) return tokenHead(head, bins, ex.triangle, ready);
    if (head.values) return head;
    const quanta = quantised(head);
    const values = new Float32Array(bins * bins);
    const image = new ImageData(bins, bins);
    const px = image.data;
    const unit = head.scale / 65535;
    for (let i = 0; i < bins * bins; i++) {
      const q = quanta[i];
      values[i] = q * unit;
      // colour: sqrt of the share of the head's largest cell, so weak structure stays visible
      const idx = Math.round(Math.sqrt(q / 65535) * 255) * 3;
      px[4 * i] = LUT[idx]; px[4 * i + 1] = LUT[idx + 1]; px[4 * i + 2] = LUT[idx + 2]; px[4 * i + 3] = 255;
    }
    const bitmap = document.createElement("canvas");
    bitmap.width = bitmap.height = bins;
    bitmap.getContext("2d").putImageData(image, 0, 0);
    head.values = values;
    head.bitmap = bitmap;
    return head;
  }

  function rangeLabel(tokens, edges, bin) {
    const a = edges[bin], b = edges[bin + 1] - 1;
    if (a === b) return "\u201c" + tokens[a] + "\u201d (" + a + ")";
    return "\u201c" + tokens[a] + "\u201d \u2026 \u201c" + tokens[b] + "\u201d (" + a + "\u2013" + b + ")";
  }

  // Axis labels: one token a cell when they fit (<= 40 tokens), else every step-th cell's first
  // token, so that labels stay LABEL_GAP px apart at any length; hover names every token.
  const LABEL_GAP = 14, MARGIN = 86;

  function shortLabel(t) { return t.length > 12 ? t.slice(0, 11) + "\u2026" : t; }

  function Explorer(root, ex) {
    const bins = ex.bins, perToken = bins === ex.tokens.length && bins <= 40;
    const cell = perToken ? Math.max(12, Math.floor(440 / bins)) : Math.max(1, Math.floor(512 / bins));
    const step = Math.max(1, Math.ceil(LABEL_GAP / cell));
    const margin = MARGIN;
    const dpr = window.devicePixelRatio || 1;
    const size = margin + bins * cell;
    const layerCount = ex.views[0].layers.length;
    const state = { layer: 0, heads: ex.views.map(() => 0) };
    const panels = [];

    if (ex.note) root.appendChild(el("p", "note", ex.note));
    if (ex.total_tokens > ex.tokens.length) {
      const why = ex.cut_reason ? ": " + ex.cut_reason : "";
      const cut = el("p", "cut", "Cut to " + ex.tokens.length + " of " + ex.total_tokens +
        " tokens" + why + "; the rest of the text is not shown.");
      cut.dataset.testid = "cut-" + root.dataset.explorer;
      root.appendChild(cut);
    }
    const layerBar = el("div", "layers");
    if (layerCount > 1) {
      layerBar.appendChild(el("span", "label", "layer"));
      for (let l = 0; l < layerCount; l++) {
        const b = el("button", "chip", String(l));
        b.dataset.testid = "layer-" + root.dataset.explorer + "-" + l;
        b.addEventListener("click", () => { state.layer = l; render(); });
        layerBar.appendChild(b);
      }
      root.appendChild(layerBar);
    }
    const row = el("div", "panels");
    root.appendChild(row);
    ex.views.forEach((view, v) => {
      const panel = el("div", "panel");
      panel.appendChild(el("h4", null, view.name));
      const strip = el("div", "heads");
      const canvas = el("canvas", "heatmap");
      // Drawn at the device pixel ratio and shown at its own size, so labels stay crisp.
      canvas.width = canvas.height = Math.round(size * dpr);
      canvas.style.width = size + "px";
      canvas.dataset.testid = "heatmap-" + root.dataset.explorer + "-" + v;
      // geometry, for anyone mapping pixels to cells (the browser tests do)
      canvas.dataset.margin = margin; canvas.dataset.cell = cell; canvas.dataset.bins = bins;
      canvas.dataset.size = size; canvas.dataset.step = step;
      const caption = el("p", "scale");
      caption.dataset.testid = "scale-" + root.dataset.explorer + "-" + v;
      panel.appendChild(strip);
      panel.appendChild(canvas);
      panel.appendChild(caption);
      row.appendChild(panel);
      panels.push({ strip, canvas, caption, view });
      canvas.addEventListener("mousemove", (e) => hover(e, v));
      canvas.addEventListener("mouseleave", () => { tooltip.hidden = true; });
    });
    if (bins < ex.tokens.length) {
      root.appendChild(el("p", "note", ex.tokens.length + " tokens shown in " + bins + "\u00d7" + bins +
        " bins: a cell is the weight a query of its bin puts on the keys of its bin (mean over queries, sum over keys)."));
    }
    const legend = el("p", "note colour-note");
    const bar = el("i", "ramp");
    bar.style.background = "linear-gradient(to right, " + STOPS.map((c) => "rgb(" + c.join(",") + ")").join(", ") + ")";
    legend.append(el("span", null, "0"), bar, el("span", null, "largest cell"),
      el("span", null, "Colour: square root of the weight relative to the head\u2019s largest cell."));
    root.appendChild(legend);
    let queued = false;  // one render for every head that finished inflating in a frame
    function schedule() {
      if (!queued) { queued = true; requestAnimationFrame(() => { queued = false; render(); }); }
    }
    const headOf = (p, v) => decodeHead(p.view.layers[state.layer][state.heads[v]], bins, ex, schedule);

    function buildStrip(p, v) {
      p.strip.replaceChildren();
      const heads = p.view.layers[state.layer];
      heads.forEach((head, h) => {
        const b = el("button", "head");
        b.dataset.testid = "head-" + root.dataset.explorer + "-" + v + "-" + h;
        b.title = p.view.name + ", head " + h;
        const thumb = el("canvas");
        thumb.width = thumb.height = Math.round(36 * dpr);
        thumb.style.width = thumb.style.height = "36px";
        const ctx = thumb.getContext("2d");
        ctx.imageSmoothingEnabled = bins > 36;
        const shown = decodeHead(head, bins, ex, schedule);
        if (shown) ctx.drawImage(shown.bitmap, 0, 0, thumb.width, thumb.height);
        b.appendChild(thumb);
        b.appendChild(el("span", null, heads.length === 1 ? "all" : String(h)));
        b.addEventListener("click", () => { state.heads[v] = h; render(); });
        p.strip.appendChild(b);
      });
    }

    function draw(p, v) {
      const head = headOf(p, v);
      const ctx = p.canvas.getContext("2d");
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);  // draw in CSS pixels
      ctx.fillStyle = "#fff";
      ctx.fillRect(0, 0, size, size);
      ctx.imageSmoothingEnabled = false;
      p.canvas.dataset.ready = head ? "1" : "0";
      if (head) ctx.drawImage(head.bitmap, margin, margin, bins * cell, bins * cell);
      else {
        ctx.fillStyle = "#3e4c59";
        ctx.font = "13px system-ui, sans-serif";
        ctx.fillText(typeof DecompressionStream === "undefined"
          ? "This browser cannot inflate the page\u2019s cells (no DecompressionStream)."
          : "Decoding\u2026", margin + 8, margin + 20);
      }
      ctx.fillStyle = "#9aa5b1";
      ctx.font = "11px system-ui, sans-serif";
      ctx.textAlign = "left";
      ctx.textBaseline = "top";
      ctx.fillText("key \u2192", 2, 2);
      ctx.fillText("query \u2193", 2, 16);
      ctx.fillStyle = "#3e4c59";
      ctx.font = Math.min(12, Math.max(9, step * cell - 3)) + "px system-ui, sans-serif";
      ctx.textBaseline = "middle";
      let drawn = 0;
      for (let b = 0; b < bins; b += step) {
        const label = shortLabel(ex.tokens[ex.edges[b]]);
        const at = margin + (b + 0.5) * cell;
        ctx.textAlign = "right";
        ctx.fillText(label, margin - 4, at);
        ctx.save();
        ctx.translate(at, margin - 4);
        ctx.rotate(-Math.PI / 2);
        ctx.textAlign = "left";
        ctx.fillText(label, 0, 0);
        ctx.restore();
        drawn++;
      }
      p.canvas.dataset.labels = drawn;
      [...p.strip.children].forEach((b, h) => b.classList.toggle("active", h === state.heads[v]));
      const which = p.view.layers[state.layer].length > 1 ? "head " + state.heads[v] : "the one head";
      const scale = p.view.layers[state.layer][state.heads[v]].scale;
      p.caption.textContent = which + (layerCount > 1 ? ", layer " + state.layer : "") +
        ": largest cell " + scale.toFixed(3) + " (yellow)";
    }

    function render() {
      [...layerBar.querySelectorAll("button")].forEach((b, l) => b.classList.toggle("active", l === state.layer));
      panels.forEach((p, v) => { buildStrip(p, v); draw(p, v); });
      align();
    }

    // Strips of thumbnails wrap differently (12 heads against 1): equal heights keep the
    // heatmaps of all panels side by side at the same height.
    function align() {
      panels.forEach((p) => { p.strip.style.minHeight = ""; });
      const tallest = Math.max(...panels.map((p) => p.strip.offsetHeight));
      if (tallest > 0) panels.forEach((p) => { p.strip.style.minHeight = tallest + "px"; });
    }
    const folded = root.closest("details");
    if (folded) folded.addEventListener("toggle", align);
    window.addEventListener("resize", align);

    function hover(e, v) {
      const p = panels[v], rect = p.canvas.getBoundingClientRect();
      const x = ((e.clientX - rect.left) / rect.width) * size - margin;
      const y = ((e.clientY - rect.top) / rect.height) * size - margin;
      const kb = Math.floor(x / cell), qb = Math.floor(y / cell);
      if ((kb < 0) !== (qb < 0) && Math.max(kb, qb) < bins) {  // on a label: the full token(s)
        const which = kb < 0 ? "query " : "key ", bin = Math.max(kb, qb);
        tooltip.replaceChildren(el("div", "tt-label", which + rangeLabel(ex.tokens, ex.edges, bin)));
        return place(e);
      }
      if (kb < 0 || qb < 0 || kb >= bins || qb >= bins) { tooltip.hidden = true; return; }
      const head = headOf(p, v);
      if (!head) { tooltip.hidden = true; return; }
      const w = head.values[qb * bins + kb];
      tooltip.replaceChildren(
        el("div", "tt-head", p.view.name + (layerCount > 1 ? ", layer " + state.layer : "") +
          (p.view.layers[state.layer].length > 1 ? ", head " + state.heads[v] : "")),
        el("div", "tt-q", "query " + rangeLabel(ex.tokens, ex.edges, qb)),
        el("div", "tt-k", "key " + rangeLabel(ex.tokens, ex.edges, kb)),
        el("div", "tt-w", "weight " + w.toFixed(4)));
      place(e);
    }

    function place(e) {
      tooltip.hidden = false;
      tooltip.style.left = Math.min(window.innerWidth - 260, e.clientX + 14) + "px";
      tooltip.style.top = (e.clientY + 14) + "px";
    }

    render();
    return {
      layers: layerCount,
      heads: ex.views[0].layers[0].length,
      open(layer, head) {
        state.layer = layer; state.heads[0] = head;
        render();
        root.scrollIntoView({ block: "start" });
      },
    };
  }

  // A head picked in the heads display (its "headlab-pick" event) can be shown on the text, in
  // the trained model's explorer, when that has the same layers and heads.
  function OfferOnText(display) {
    const view = document.getElementById("head-view");
    display.addEventListener("headlab-pick", (e) => {
      const l = e.detail.layer, h = e.detail.head, model = EXPLORERS.model;
      const data = JSON.parse(display.querySelector("script.hl-data").textContent);
      if (!model || model.layers !== data.num_layers || model.heads !== data.num_heads) return;
      const link = el("a", null, "show layer " + l + ", head " + h + " on your text");
      link.href = "#explorer-model";
      link.addEventListener("click", (ev) => { ev.preventDefault(); model.open(l, h); });
      view.replaceChildren(link);
      view.hidden = false;
      view.dataset.layer = l; view.dataset.head = h;
    });
  }

  const start = performance.now();
  document.querySelectorAll("[data-explorer]").forEach((root) => {
    const ex = DATA.explorers[root.dataset.explorer];
    if (ex) EXPLORERS[root.dataset.explorer] = Explorer(root, ex);
  });
  document.querySelectorAll("[data-testid=display-heads]").forEach(OfferOnText);
  document.body.dataset.renderMs = (performance.now() - start).toFixed(1);
})();
