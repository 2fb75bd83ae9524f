// headlab displays: the score split of why a head attends (see displays.js).
(function () {
  "use strict";
  const { el, tid, surface, local, tip, untip, fmt, quote, chips } = window.headlabDisplays.lib;
  const kinds = window.headlabDisplays.kinds;
  const BEFORE = 150, AFTER = 12;  // tokens of the text shown around the key
  // red adds to the score, blue takes away (as the report's figure); white: 0
  function diverging(v, bound) {
    const a = Math.min(1, bound > 0 ? Math.abs(v) / bound : 0);
    return v >= 0 ? "rgb(255," + Math.round(255 - 190 * a) + "," + Math.round(255 - 200 * a) + ")"
      : "rgb(" + Math.round(255 - 200 * a) + "," + Math.round(255 - 140 * a) + ",255)";
  }
  function signed(v) { return (v >= 0 ? "+" : "") + fmt(v); }
  function largest(values) { let m = 0; values.forEach((v) => { m = Math.max(m, Math.abs(v)); }); return m; }

  // The pair matrix: query-side components as rows, key-side ones as columns, "rest" last.
  function heatmap(p) {
    const rows = p.pair_rows.length, cols = p.pair_cols.length, cell = Math.max(16, Math.min(34, Math.floor(420 / Math.max(rows, cols))));
    const left = 70, top = 64, s = surface(left + cols * cell + 2, top + rows * cell + 2, "hl-canvas");
    const bound = largest(p.pair.flat()), ctx = s.ctx;
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, s.w, s.h);
    ctx.font = "10px system-ui, sans-serif"; ctx.fillStyle = "#3e4c59";
    ctx.textAlign = "right"; ctx.textBaseline = "middle";
    p.pair_rows.forEach((name, i) => ctx.fillText(name.slice(0, 11), left - 4, top + (i + 0.5) * cell));
    p.pair_cols.forEach((name, j) => {
      ctx.save(); ctx.translate(left + (j + 0.5) * cell, top - 4); ctx.rotate(-Math.PI / 3);
      ctx.textAlign = "left"; ctx.fillText(name.slice(0, 11), 0, 0); ctx.restore();
    });
    for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) {
      ctx.fillStyle = diverging(p.pair[i][j], bound); ctx.fillRect(left + j * cell, top + i * cell, cell - 1, cell - 1);
    }
    ctx.textAlign = "left"; ctx.textBaseline = "top"; ctx.fillStyle = "#616e7c"; ctx.fillText("query \u2193 key \u2192", 2, 2);
    s.canvas.addEventListener("mousemove", (e) => {
      const [x, y] = local(e, s.canvas, s.w, s.h), j = Math.floor((x - left) / cell), i = Math.floor((y - top) / cell);
      if (i < 0 || j < 0 || i >= rows || j >= cols) return untip();
      tip(e, ["query side " + p.pair_rows[i] + " \u00d7 key side " + p.pair_cols[j], "term " + signed(p.pair[i][j]) + " of q\u00b7k " + fmt(p.raw)]);
    });
    s.canvas.addEventListener("mouseleave", untip);
    s.canvas.dataset.cell = cell; s.canvas.dataset.left = left; s.canvas.dataset.top = top;
    return tid(s.canvas, "split-pair");
  }

  // One marginal as bars: the components with the largest |term|, from a centre line.
  function bars(names, values, raw, title, id, most) {
    const box = tid(el("div", "hl-bars"), id), order = values.map((v, i) => i).sort((a, b) => Math.abs(values[b]) - Math.abs(values[a])).slice(0, most);
    const bound = largest(order.map((i) => values[i]));
    box.append(el("b", null, title));
    order.forEach((c) => {
      const v = values[c], row = el("div", "hl-bar-row"), track = el("span", "hl-bar-track"), bar = el("i", "hl-bar");
      bar.style.width = (50 * (bound > 0 ? Math.abs(v) / bound : 0)).toFixed(1) + "%";
      bar.style[v >= 0 ? "left" : "right"] = "50%";
      bar.style.background = v >= 0 ? "#e4572e" : "#3b6fd8";
      track.append(bar);
      row.append(el("span", "hl-bar-name", names[c]), track, el("span", "hl-bar-value", signed(v)));
      row.dataset.component = names[c];
      row.addEventListener("mousemove", (e) => tip(e, [names[c] + ": " + signed(v), "of q\u00b7k " + fmt(raw) + " (" + title + ")"]));
      row.addEventListener("mouseleave", untip);
      box.append(row);
    });
    return box;
  }

  // An image's source split on its patch grid, row by row (its class token and registers
  // named below it); the key's patch outlined solid, the query's dashed.
  function patchGrid(p, source, tokens, d) {
    const [rows, cols] = d.grid, first = d.first_patch, at = new Map(source.positions.map((pos, i) => [pos, source.values[i]]));
    const cell = Math.max(6, Math.min(40, Math.floor(440 / Math.max(rows, cols)))), s = surface(cols * cell + 2, rows * cell + 2, "hl-canvas");
    const bound = largest(source.values), ctx = s.ctx;
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, s.w, s.h);
    for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) {
      const v = at.get(first + r * cols + c);
      ctx.fillStyle = v === undefined ? "#eee" : diverging(v, bound); ctx.fillRect(1 + c * cell, 1 + r * cell, cell - 1, cell - 1);
    }
    ctx.strokeStyle = "#1f2933"; ctx.lineWidth = 2;
    [[p.key, []], [p.query, [4, 3]]].forEach(([pos, dash]) => {
      if (pos < first) return;
      const r = Math.floor((pos - first) / cols), c = (pos - first) % cols;
      ctx.setLineDash(dash); ctx.strokeRect(2 + c * cell, 2 + r * cell, cell - 3, cell - 3);
    });
    ctx.setLineDash([]);
    s.canvas.addEventListener("mousemove", (e) => {
      const [x, y] = local(e, s.canvas, s.w, s.h), c = Math.floor((x - 1) / cell), r = Math.floor((y - 1) / cell);
      if (r < 0 || c < 0 || r >= rows || c >= cols) return untip();
      const pos = first + r * cols + c, v = at.get(pos);
      tip(e, ["position " + pos + " " + quote(tokens[pos]), v === undefined ? "not read by head " + source.component + " here" : signed(v) + " to the key side, through head " + source.component]);
    });
    s.canvas.addEventListener("mouseleave", untip);
    s.canvas.dataset.cell = cell;
    const before = [];
    for (let pos = 0; pos < first; pos++) if (at.has(pos)) before.push(tokens[pos] + " " + signed(at.get(pos)));
    return [tid(s.canvas, "split-grid"), tid(el("p", "hl-muted", before.join("; ")), "split-grid-others")];
  }

  // One head's key-side term on the text (an image: on its patch grid), by the source position
  // it read.
  function sources(p, tokens, d) {
    const box = tid(el("div"), "split-sources");
    if (!p.sources.length) {
      box.append(el("p", "hl-muted", "No head component is split by source here (no head adds to the key side, or none was asked for)."));
      return box;
    }
    const text = tid(el("div", d.grid ? null : "hl-text"), "split-text"), caption = el("p", "hl-muted");  // a grid is not scrolled in a text strip
    // a cross-attention's sources are the source text's positions: the query is not among them
    const cross = !!d.key_components, last = cross ? tokens.length : Math.max(p.key, p.query) + 1;
    const start = Math.max(0, p.key - BEFORE), end = Math.min(tokens.length, last, p.key + 1 + AFTER);
    function show(source) {
      if (d.grid) {
        caption.textContent = "The key side of head " + source.component + " at key " + p.key + ", by the patch it read (red adds to the score, blue takes away): " +
          signed(source.values.reduce((a, b) => a + b, 0)) + " in all. Outlined: the key's patch (solid) and the query's (dashed).";
        text.replaceChildren(...patchGrid(p, source, tokens, d));
        return;
      }
      const at = new Map(source.positions.map((pos, i) => [pos, source.values[i]]));
      const bound = largest(source.values), total = source.values.reduce((a, b) => a + b, 0);
      let outside = 0; source.positions.forEach((pos) => { if (pos < start || pos >= end) outside++; });
      caption.textContent = "The key side of head " + source.component + " at key " + p.key + ", by the source token it read (red adds to the score, blue takes away): " + signed(total) + " in all" +
        (outside ? "; " + outside + " source positions lie outside the tokens shown" : "") + (cross ? ". Outlined: the key." : ". Outlined: the key (solid) and the query (dashed).");
      const spans = [];
      for (let pos = start; pos < end; pos++) {
        const cls = "hl-tok" + (pos === p.key ? " hl-query" : "") + (!cross && pos === p.query && pos !== p.key ? " hl-asker" : "");
        const span = el("span", cls, tokens[pos]), v = at.get(pos);
        span.dataset.pos = pos;
        if (v !== undefined) span.style.background = diverging(v, bound);
        span.addEventListener("mousemove", (e) => tip(e, ["position " + pos + " " + quote(tokens[pos]),
          v === undefined ? "not read by head " + source.component + " here" : signed(v) + " to the key side, through head " + source.component]));
        span.addEventListener("mouseleave", untip);
        spans.push(span);
      }
      text.replaceChildren(...spans);
    }
    const names = p.sources.map((s) => s.component);
    box.append(chips(names, names[0], (name) => show(p.sources[names.indexOf(name)]), "split-source-"), caption, text);
    show(p.sources[0]);
    return box;
  }

  kinds["score-split"] = function (root, d) {
    root.append(el("h4", "hl-title", d.model + ", head " + d.layer + "." + d.head + " (K/V group " + d.kv_group + "): why it attends where it does, " + d.pairs.length + " pairs (" + d.keys + " keys)"));
    const labels = d.pairs.map((p, i) => (i + 1) + ": " + p.query + " \u2192 " + p.key);
    const body = tid(el("div"), "split-body");
    root.append(chips(labels, labels[d.first], (label) => show(labels.indexOf(label)), "split-pick-"), body);
    function show(i) {
      // a cross-attention's key side is another stream's: its own components and labels
      const p = d.pairs[i], tokens = d.tokens[p.batch], keyTokens = d.key_tokens || tokens, keyNames = d.key_components || d.components;
      const sum = "q\u00b7k " + fmt(p.raw) + (p.softcap_term ? " " + signed(p.softcap_term) + " (softcap)" : "") + (p.bias_term ? " " + signed(p.bias_term) + " (bias)" : "") + (p.score === null ? "" : " = score " + fmt(p.score));
      const say = tid(el("p", "hl-muted", "Query " + p.query + " " + quote(tokens[p.query]) + " \u2192 key " + p.key + " " + quote(keyTokens[p.key]) + ": " + sum +
        ". Every term below is a share of q\u00b7k (" + d.frozen + "); the pair matrix keeps the components that matter most on each side, the others summed into \u201crest\u201d."), "split-say");
      const row = el("div", "hl-row");
      const side = el("div");
      side.append(bars(keyNames, p.key_marginal, p.raw, "key side", "split-key-bars", d.bars), bars(d.components, p.query_marginal, p.raw, "query side", "split-query-bars", d.bars));
      row.append(heatmap(p), side);
      body.replaceChildren(say, row, sources(p, keyTokens, d));
      root.dataset.pair = i;
    }
    show(d.first);
  };

  // One head over all its queries: the summed pair matrix and marginals, and where each query
  // attends (a point per query at (query, attended key), coloured by its raw score q.k).
  function attended(d) {
    const n = d.keys.length, W = 430, H = 300, left = 46, bottom = 28, s = surface(W, H, "hl-canvas"), ctx = s.ctx;
    const X = (q) => left + (q / Math.max(1, n - 1)) * (W - left - 8), Y = (k) => H - bottom - (k / Math.max(1, n - 1)) * (H - bottom - 8);
    const bound = largest(d.raw);
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, W, H);
    ctx.strokeStyle = "#cbd2d9"; ctx.strokeRect(left, 8, W - left - 8, H - bottom - 8);
    ctx.font = "10px system-ui, sans-serif"; ctx.fillStyle = "#616e7c"; ctx.textAlign = "center";
    ctx.fillText("query position (0 to " + (n - 1) + ")", left + (W - left) / 2, H - 6);
    ctx.save(); ctx.translate(12, (H - bottom) / 2); ctx.rotate(-Math.PI / 2); ctx.fillText("attended key (0 to " + (n - 1) + ")", 0, 0); ctx.restore();
    // every point shows: at least 40% of the colour's strength, whatever its score
    for (let q = 0; q < n; q++) { const v = d.raw[q]; ctx.fillStyle = diverging(Math.sign(v) * Math.max(Math.abs(v), 0.4 * bound), bound); ctx.fillRect(X(q) - 1, Y(d.keys[q]) - 1, 2.5, 2.5); }
    s.canvas.addEventListener("mousemove", (e) => {
      const [x] = local(e, s.canvas, s.w, s.h), q = Math.round(((x - left) / (W - left - 8)) * (n - 1));
      if (q < 0 || q >= n) return untip();
      const k = d.keys[q];
      tip(e, ["query " + q + " " + quote(d.tokens[q]) + " \u2192 key " + k + " " + quote(d.tokens[k]), "q\u00b7k " + fmt(d.raw[q])]);
    });
    s.canvas.addEventListener("mouseleave", untip);
    return tid(s.canvas, "pairs-attended");
  }

  kinds["pairs-over-queries"] = function (root, d) {
    const n = d.keys.length;
    root.append(el("h4", "hl-title", d.model + ", head " + d.layer + "." + d.head + " (K/V group " + d.kv_group + "): the pair matrix summed over " + n + " queries at their attended keys"));
    root.append(tid(el("p", "hl-muted", "q\u00b7k summed over the queries: " + fmt(d.total) + "; " + d.at_first + " queries attend the first position, " + d.at_themselves + " themselves. Every term is a share of that sum (" + d.frozen + "); red adds, blue takes away; \u201crest\u201d sums the other components."), "pairs-say"));
    const row = el("div", "hl-row"), side = el("div");
    side.append(bars(d.components, d.key_marginal, d.total, "key side, summed", "pairs-key-bars", d.bars), bars(d.components, d.query_marginal, d.total, "query side, summed", "pairs-query-bars", d.bars));
    row.append(heatmap({ pair_rows: d.pair_rows, pair_cols: d.pair_cols, pair: d.pair, raw: d.total }), side, attended(d));
    root.append(row);
  };
})();
