/* worldgraph: the "packed boxes" layout of the world-graph page (used above a few hundred nodes,
 * where a force layout takes seconds and tangles nested boxes). Linear time, no overlaps.
 * worldgraphPack(cy) returns {id: {x, y}} for every leaf node, for cytoscape's preset layout.
 */
(function () {
  'use strict';

  // Nested boxes packed in rows, inside out: a leaf takes one cell, a box is its children packed
  // into rows of about the box's square width, and the top-level boxes are packed the same way
  // (wider, like the screen). States inside an entity go in transition order, so their arrows
  // mostly run left to right. Returns the centre of every leaf; cytoscape sizes the boxes.
  function worldgraphPack(cy) {
    var CELL_W = 150, LABEL_H = 38, GAP = 18, PAD = 18;
    var rank = transitionRank(cy);
    var pos = {};
    function measure(node) {
      var kids = node.children();
      if (kids.empty()) {
        var size = node.data('size') || 20;
        var w = Math.max(CELL_W, size), h = size + LABEL_H;
        return { w: w, h: h, node: node, place: function (x, y) { pos[node.id()] = { x: x + w / 2, y: y + size / 2 }; } };
      }
      var items = kids.map(measure);
      // leaves only (a state chain, a shelf of items): a wide row reads better than a column
      var box = shelf(items, kids.every(function (k) { return !k.isParent(); }) ? 5 : 1.3);
      var title = 1.3 * (node.data('font') || 12) + 6;  // drawn above the box's border
      var bw = box.w + 2 * PAD, bh = box.h + 2 * PAD + title;
      return { w: bw, h: bh, node: node, place: function (x, y) { box.place(x + PAD, y + PAD + title); } };
    }
    function order(a, b) {
      var ka = a.node.isParent() ? 0 : 1, kb = b.node.isParent() ? 0 : 1;
      if (ka !== kb) return ka - kb;
      if (ka === 0 && b.h * b.w !== a.h * a.w) return b.h * b.w - a.h * a.w;
      var ra = rank.get(a.node.id()) || 0, rb = rank.get(b.node.id()) || 0;
      if (ra !== rb) return ra - rb;
      var la = String(a.node.data('label')), lb = String(b.node.data('label'));
      return la < lb ? -1 : la > lb ? 1 : 0;
    }
    // Rows of items, as wide as makes the whole closest to ``aspect`` (width / height).
    function shelf(items, aspect) {
      items.sort(order);
      var area = 0, widest = 0;
      items.forEach(function (it) { area += (it.w + GAP) * (it.h + GAP); widest = Math.max(widest, it.w); });
      var best = null;
      for (var f = 0.5; f <= 2.01; f += 0.1) {
        var rows = fill(items, Math.max(widest, f * Math.sqrt(area * aspect)));
        var miss = Math.abs(Math.log(rows.w / Math.max(rows.h, 1) / aspect));
        if (!best || miss < best.miss - 1e-9) best = { rows: rows, miss: miss };
      }
      var r = best.rows;
      return { w: r.w, h: r.h, place: function (x, y) {
        var yy = y;
        r.list.forEach(function (row) {
          var xx = x;
          row.items.forEach(function (it) { it.place(xx, yy); xx += it.w + GAP; });
          yy += row.h + GAP;
        });
      } };
    }
    function fill(items, limit) {
      var list = [], row = null;
      items.forEach(function (it) {
        if (!row || (row.w > 0 && row.w + it.w > limit)) { row = { items: [], w: 0, h: 0 }; list.push(row); }
        row.items.push(it);
        row.w += it.w + GAP;
        row.h = Math.max(row.h, it.h);
      });
      var w = 0, h = 0;
      list.forEach(function (rw) { w = Math.max(w, rw.w - GAP); h += rw.h + GAP; });
      return { list: list, w: w, h: Math.max(h - GAP, 0) };
    }
    var box = cy.container().getBoundingClientRect();
    shelf(cy.nodes().orphans().map(measure), Math.max(box.width / Math.max(box.height, 1), 1)).place(0, 0);
    return pos;
  }

  // For each state: how many transitions lead to it from a state with none leading in.
  function transitionRank(cy) {
    var rank = new Map();
    var edges = cy.edges('.transition');
    for (var round = 0, changed = true; changed && round < 50; round++) {
      changed = false;
      edges.forEach(function (e) {
        var r = (rank.get(e.data('source')) || 0) + 1;
        if (r > (rank.get(e.data('target')) || 0)) { rank.set(e.data('target'), r); changed = true; }
      });
    }
    return rank;
  }

  window.worldgraphPack = worldgraphPack;
})();
