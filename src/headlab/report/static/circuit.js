// headlab displays: the circuit graph and faithfulness curves (see displays.js).
(function () {
  "use strict";
  const { LUT, rgb, el, tid, decode, surface, local, tip, untip, fmt, quote, chips, Grid, legend } = window.headlabDisplays.lib;
  const kinds = window.headlabDisplays.kinds;

  // ---------------------------------------------------------------- the circuit graph
  const SIGN = ["#3b6fd8", "#e4572e"], DASH = [[], [], [6, 4], [2, 3]], INPUT = ["", "q", "k", "v"], WIDTHS = 6, LIT = 20, ROWS = 40;
  // thousands of edges overlap: an edge under a thousandth of the largest is near transparent,
  // so the drawing shows where the strong edges run rather than a block of hairlines
  const DECADES = 3, MANY_ALPHA = [0.004, 0.03, 0.08, 0.2, 0.45, 0.8];
  kinds.circuit = function (root, d) {
    const senders = decode(d.senders, Uint16Array), receivers = decode(d.receivers, Uint16Array);
    const inputs = decode(d.inputs, Uint8Array), scores = decode(d.scores, Float32Array), m = d.count;
    // the frame is the figure's (xlim, ylim): a decoder's layers, or an encoder-decoder's blocks in run order
    const [x0, x1] = d.xlim, [y0, y1] = d.ylim;
    const W = Math.min(1100, Math.max(640, 70 + 34 * (x1 - x0 - 0.2))), H = Math.min(620, Math.max(260, 60 + 22 * (y1 - y0 + 0.6)));
    const X = (x) => 30 + ((x - x0) / (x1 - x0)) * (W - 50), Y = (y) => 20 + (1 - (y - y0) / (y1 - y0)) * (H - 40);
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
    const edges = tid(el("div", "hl-table-box"), "circuit-edges");
    root.append(controls, s.canvas, el("p", "hl-muted", "Layers left to right (emb, then each layer's query heads as dots and its MLP as a square below; in a GQA layer a shaded box is a K/V group, whose k and v edges land on its hollow square; logits at the right). Edges arc over the heads between their ends: width by |score|, blue above 0, red below (past 2000 edges drawn: straight hairlines, opacity by |score| in half-decades, near clear under a thousandth of the largest); into q solid, k dashed, v dotted. Point at a node for its edges; click it to light them (its 20 strongest at least, whatever the threshold)." + (d.bands.length ? " An encoder-decoder's blocks run in order on shaded bands, the encoder's then the decoder's; a decoder block's cross-attention heads (xH) sit above its self-attention heads, where the encoder's k and v edges land." : "")));
    root.append(edges);
    (function () { // the graph without edges, drawn once
      const ctx = base.ctx; ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, W, H);
      ctx.font = "11px system-ui, sans-serif"; ctx.textAlign = "left";
      d.bands.forEach(([from, to, name], i) => { // an encoder-decoder's two streams, shaded apart
        ctx.fillStyle = i % 2 ? "#f7f4ee" : "#f1f5fa"; ctx.fillRect(X(from), 0, X(to) - X(from), H - 14);
        ctx.fillStyle = "#616e7c"; ctx.fillText(name, X(from) + 4, 12);
      });
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
      const [tx, tl] = d.xticks, step = Math.max(1, Math.ceil(tx.length / 22));
      tx.forEach((x, i) => { if (i % step === 0 || tl[i] === "emb" || tl[i] === "out") ctx.fillText(tl[i], X(x), H - 4); });
      d.nodes.forEach((name, i) => {
        ctx.fillStyle = "#9aa5b1"; ctx.strokeStyle = "#9aa5b1";
        if (name.startsWith("embed") || name === "logits") { ctx.fillStyle = "#1f2933"; ctx.fillRect(px[i] - 4, py[i] - 4, 8, 8); }
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
      const many = shown > 2000, faint = shown > 300 ? 0.5 : 0.85;
      const paths = new Map();  // (width bucket, sign, input) -> edges; strongest drawn last
      for (let i = shown - 1; i >= 0; i--) {
        const share = Math.abs(scores[i]) / largest;
        // few edges: width by share; many: opacity by decades of share (half a decade a step)
        const w = Math.max(0, Math.min(WIDTHS - 1, Math.floor(many ? 2 * (DECADES + Math.log10(Math.max(share, 1e-30))) : share * WIDTHS)));
        const key = w * 8 + (scores[i] < 0 ? 4 : 0) + inputs[i];
        let list = paths.get(key); if (!list) { list = []; paths.set(key, list); }
        list.push(i);
      }
      // An edge arcs over the heads between its ends (a straight edge along a row would run
      // through every head dot on it); the dense hairline view keeps straight segments.
      const edge = (i, curved) => {
        const x0 = px[senders[i]], y0 = py[senders[i]], x1 = px[receivers[i]], y1 = py[receivers[i]];
        ctx.moveTo(x0, y0);
        if (!curved) { ctx.lineTo(x1, y1); return; }
        const dx = x1 - x0, dy = y1 - y0, length = Math.hypot(dx, dy) || 1;
        const lift = Math.min(0.2 * length, 60);  // px the arc's middle stands off the chord
        ctx.quadraticCurveTo((x0 + x1) / 2 + (dy / length) * lift, (y0 + y1) / 2 - (dx / length) * lift, x1, y1);
      };
      const stroke = (list) => {
        for (let a = 0; a < list.length; a += 400) {
          ctx.beginPath();
          for (let b = a; b < Math.min(list.length, a + 400); b++) edge(list[b], !many);
          ctx.stroke();
        }
      };
      [...paths.keys()].sort((a, b) => a - b).forEach((key) => {
        const w = key >> 3, sign = (key >> 2) & 1, input = key & 3, list = paths.get(key);
        ctx.strokeStyle = SIGN[sign]; ctx.setLineDash(many ? [] : DASH[input]);
        // many edges: one-pixel hairlines (the rasterizer's fast path), strength by opacity
        ctx.lineWidth = many ? 1 : 0.5 + (3.5 * (w + 0.5)) / WIDTHS;
        ctx.globalAlpha = picked < 0 ? (many ? MANY_ALPHA[w] : Math.min(1, faint + 0.1 * w)) : many ? 0.004 : 0.08;
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
          ctx.beginPath(); edge(i, true); ctx.stroke();
        });
      }
      ctx.setLineDash([]); ctx.globalAlpha = 1;
      if (picked >= 0) { ctx.strokeStyle = "#111"; ctx.lineWidth = 2; ctx.beginPath(); ctx.arc(px[picked], py[picked], 6, 0, 2 * Math.PI); ctx.stroke(); }
      count.textContent = fmt(threshold) + ": " + shown + " of " + m + " edges" + (shown === d.top && d.threshold === threshold ? " (the circuit)" : "") +
        (picked >= 0 ? "; " + d.nodes[picked] + " lit with " + lit.length + " of its edges (its strongest " + Math.min(LIT, lit.length) + " at least)" : "");
      s.canvas.dataset.picked = picked < 0 ? "" : d.nodes[picked];
      s.canvas.dataset.shown = shown; s.canvas.dataset.threshold = threshold; s.canvas.dataset.ms = (performance.now() - t0).toFixed(1);
      table(picked >= 0 ? lit : null);
    }
    // The strongest edges drawn (or the lit node's), as rows: rank, ends, input, score.
    function table(lit) {
      const rows = (lit || Array.from({ length: Math.min(shown, ROWS) }, (_, i) => i)).slice(0, ROWS);
      const t = el("table", "hl-table"), head = el("tr"), body = el("tbody");
      ["#", "sender", "receiver", "input", "score"].forEach((n) => head.append(el("th", null, n)));
      rows.forEach((i) => {
        const tr = el("tr"), v = scores[i];
        tr.append(el("td", null, String(i + 1)), el("td", null, d.nodes[senders[i]]), el("td", null, d.nodes[receivers[i]]),
          el("td", null, INPUT[inputs[i]] || "in"), el("td", null, (v > 0 ? "+" : "") + fmt(v)));
        body.append(tr);
      });
      const thead = el("thead"); thead.append(head); t.append(thead, body);
      const said = lit ? d.nodes[picked] + "\u2019s strongest " + rows.length + " lit edges (# ranks every edge by |score|)"
        : "The strongest " + rows.length + " of the " + shown + " edges drawn";
      edges.replaceChildren(el("p", "hl-muted", said + ":"), t);
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

})();
