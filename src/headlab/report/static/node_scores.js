// headlab displays: node scores (heads, K/V groups, MLPs) on a layers x columns grid (see displays.js).
(function () {
  "use strict";
  const { el, tid, fmt, Grid } = window.headlabDisplays.lib;
  const kinds = window.headlabDisplays.kinds;
  const SIGN = [[59, 111, 216], [228, 87, 46]];  // blue above 0, red below (as the circuit's edges)

  function tint(v, largest) {
    const t = largest > 0 ? Math.min(1, Math.abs(v) / largest) : 0, c = SIGN[v < 0 ? 1 : 0];
    return "rgb(" + c.map((x) => Math.round(255 - t * (255 - x))).join(",") + ")";
  }

  kinds.nodes = function (root, d) {
    const L = d.heads_per_layer.length, H = Math.max(...d.heads_per_layer);
    const grouped = d.kv_heads_per_layer.some((kv, l) => kv < d.heads_per_layer[l]);
    const G = grouped ? Math.max(...d.kv_heads_per_layer) : 0, cols = H + G + 1;
    const at = {};  // "layer,column" -> [name, score]
    let largest = 0;
    d.cells.forEach(([kind, layer, index, value], i) => {
      const col = kind === "h" ? index : kind === "g" ? H + index : H + G;
      at[layer + "," + col] = [d.nodes[i], value];
      largest = Math.max(largest, Math.abs(value));
    });
    const task = d.task ? d.task + ", " : "";
    root.append(el("h4", "hl-title", d.model + ", " + task + d.method + ": " + d.nodes.length + " nodes"));
    root.append(el("p", "hl-muted", "Each node's score: the " + d.metric + " metric's change when its output comes from the corrupted run (clean " + fmt(d.clean) + ", corrupted " + fmt(d.corrupted) + ")."));
    const row = el("div", "hl-row"), box = el("div"), right = tid(el("div", "hl-table-box"), "nodes-table");
    row.append(box, right); root.append(row);
    const grid = Grid(L, cols, (l, c) => { const cell = at[l + "," + c]; return cell ? tint(cell[1], largest) : null; }, {
      hover: (l, c) => { const cell = at[l + "," + c]; return cell ? [cell[0], "score " + fmt(cell[1])] : ["layer " + l + ": no node here"]; },
      pick: (l, c) => { const cell = at[l + "," + c]; mark(cell ? cell[0] : null); },
    });
    tid(grid.canvas, "nodes-grid");
    const key = "Rows: layers. Columns: query heads 0\u2013" + (H - 1) + (G ? ", then K/V groups 0\u2013" + (G - 1) + " (columns " + H + "\u2013" + (H + G - 1) + ")" : "") + ", then the MLP (column " + (H + G) + "). Blue: the metric rises when the node is patched, red: it falls; the deeper the colour, the larger |score| (largest " + fmt(largest) + ").";
    box.append(grid.canvas, tid(el("p", "hl-muted", key), "nodes-key"));
    const table = el("table", "hl-table"), head = el("tr"), body = el("tbody");
    ["#", "node", "score"].forEach((n) => head.append(el("th", null, n)));
    d.top.forEach(([name, value], i) => {
      const tr = el("tr"); tr.dataset.node = name;
      tr.append(el("td", null, String(i + 1)), el("td", null, name), el("td", null, fmt(value)));
      body.append(tr);
    });
    const thead = el("thead"); thead.append(head); table.append(thead, body); right.append(table);
    function mark(name) { body.querySelectorAll("tr").forEach((tr) => tr.classList.toggle("picked", tr.dataset.node === name)); }
  };
})();
