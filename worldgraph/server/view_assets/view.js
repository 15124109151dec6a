/* worldgraph: draws one environment's world graph (the JSON in #wg-data) with cytoscape.js.
 *
 * What is drawn:
 * - entities (rounded boxes, coloured by type) and states (amber ellipses);
 * - containment as nesting: a current containment edge puts the child inside its parent's box,
 *   and a state sits inside the box of the entity it is a state of;
 * - transitions as arrows between states, labelled with their action;
 * - facts of any kind as teal arrows from subject to object, labelled with their predicate
 *   (a single-valued one with a "1" mark: its subject has one at a time);
 * - evidence count as node size and an "xN" badge, confidence as fill strength;
 * - rules in the side panel: hovering a node lights its rules, hovering a rule lights its nodes;
 * - the map layer: rooms (places) connected by a wide grey band, labelled with how one was
 *   reached from the other. Two places are connected when something was in one and then in the
 *   other (consecutive containment edges of one entity: the moves the agent made), or when a
 *   place's "exits" attribute names the other place ({"west": "hallway"} or ["hallway"]);
 * - arrows routed around nodes: an edge whose straight line crosses a node it does not join is
 *   bent around it (segment points beside the node's box);
 * - a node's details list where it was (its containment history, oldest first) and its facts.
 * By default only current facts are drawn (valid_to null), plus the past states a current
 * transition leaves or enters (the transition is current knowledge, its ends are not).
 * "closed history" adds every closed record, dashed; "scenes" adds scenes and episodic edges.
 * The location hash can preset them: #history&scenes&node=<id> (and layout=..., see draw()).
 *
 * Data is untrusted text: it reaches the document only through textContent and canvas labels.
 * When a drawing is done, <body> carries data-ready, data-node-count (entities and states drawn),
 * data-edge-count, data-scene-count, data-layout and data-layout-ms.
 */
(function () {
  'use strict';
  var data = JSON.parse(document.getElementById('wg-data').textContent);
  var hash = new URLSearchParams(location.hash.replace(/^#/, ''));
  var opts = { history: hash.has('history'), scenes: hash.has('scenes'), map: !hash.has('nomap') };
  // entity types that are places: the map layer connects them
  var PLACE = /room|location|place|area|zone|region|hall|yard|garden|outside|corridor/i;
  // entity types, most frequent first; far from the states' amber and the scenes' violet
  var PALETTE = ['#2563eb', '#059669', '#db2777', '#0891b2', '#65a30d', '#dc2626', '#4f46e5', '#0d9488',
                 '#92400e', '#0369a1'];
  var OTHER = '#64748b';
  // Above this many drawn nodes the force layout (fCoSE) gets slow (seconds) and tangles nested
  // boxes; the page then packs boxes instead (view_pack.js: linear time, no overlaps). Above
  // this many nodes in the graph it also draws lighter: labels only once zoomed in far enough
  // to read them, no edges while panning.
  var BIG = 400;

  var nodeById = new Map(data.nodes.map(function (n) { return [n.id, n]; }));
  var sceneById = new Map(data.scenes.map(function (s) { return [s.id, s]; }));
  var rulesByNode = new Map();
  data.rules.forEach(function (r) {
    r.linked_node_ids.forEach(function (id) {
      if (!rulesByNode.has(id)) rulesByNode.set(id, []);
      rulesByNode.get(id).push(r);
    });
  });
  var typeColor = typeColors();
  var linked = nodeById.get(hash.get('node'));
  if (linked && linked.valid_to != null) opts.history = true;  // a link to a closed node shows history
  var ruleItems = new Map();
  var pinned = null;

  var cy = cytoscape({
    container: document.getElementById('cy'),
    style: graphStyle(),
    hideEdgesOnViewport: data.nodes.length > BIG,
    minZoom: 0.02,
    maxZoom: 4,
    boxSelectionEnabled: false
  });

  // The canvas follows its box (a window resize, a headless screenshot's viewport).
  if (typeof ResizeObserver !== 'undefined') new ResizeObserver(function () { cy.resize(); }).observe(cy.container());

  buildChrome();
  draw();
  // for the browser console and the tests: the graph object and the data it was drawn from
  window.worldgraphView = { cy: cy, data: data };

  // ------------------------------------------------------------------ elements
  function drawnNodeIds() {
    var ids = new Set();
    data.nodes.forEach(function (n) { if (opts.history || n.valid_to == null) ids.add(n.id); });
    if (!opts.history) {
      data.edges.forEach(function (e) {
        if (e.relation === 'transition' && e.valid_to == null && nodeById.has(e.src_id) && nodeById.has(e.dst_id)) {
          ids.add(e.src_id);
          ids.add(e.dst_id);
        }
      });
    }
    return ids;
  }

  function elements() {
    var ids = drawnNodeIds();
    var parent = new Map();
    var nested = new Set();
    // Current containment: single parent (the newest if the data has several), no cycles.
    data.edges.filter(function (e) {
      return e.relation === 'containment' && e.valid_to == null && ids.has(e.src_id) && ids.has(e.dst_id);
    }).sort(function (a, b) { return String(b.valid_from).localeCompare(String(a.valid_from)); })
      .forEach(function (e) {
        if (!parent.has(e.dst_id) && !makesCycle(parent, e.dst_id, e.src_id)) {
          parent.set(e.dst_id, e.src_id);
          nested.add(e.id);
        }
      });
    data.nodes.forEach(function (n) {
      if (n.kind === 'state' && ids.has(n.id) && !parent.has(n.id) && n.entity_id && ids.has(n.entity_id) &&
          !makesCycle(parent, n.id, n.entity_id)) parent.set(n.id, n.entity_id);
    });
    var isParent = new Set(parent.values());
    // A big box gets a big title, so the overview of a big graph still names its regions.
    var inside = new Map();
    parent.forEach(function (p) {
      for (var guard = 0; p != null && guard < 1000; p = parent.get(p), guard++) inside.set(p, (inside.get(p) || 0) + 1);
    });
    var els = [];
    data.nodes.forEach(function (n) {
      if (!ids.has(n.id)) return;
      var ev = n.evidence_count || 0;
      var conf = n.confidence == null ? 0.5 : n.confidence;
      var past = n.valid_to != null;
      els.push({ group: 'nodes', classes: [n.kind === 'state' ? 'state' : 'entity', past ? 'closed' : 'current',
                                          isParent.has(n.id) ? 'box' : 'leaf'].join(' '),
        data: { id: n.id, parent: parent.get(n.id), kind: n.kind, label: n.name + (ev > 1 ? '  \u00d7' + ev : ''),
                color: n.kind === 'state' ? '#fbbf24' : (typeColor.get(n.type) || OTHER),
                size: Math.min(30 + 9 * Math.log2(Math.max(ev, 1)), 70), alpha: 0.3 + 0.7 * conf,
                font: Math.round(Math.min(80, 12 * Math.max(1, Math.sqrt(inside.get(n.id) || 0) / 3))) } });
    });
    var scenesDrawn = new Set();
    data.edges.forEach(function (e) {
      if (nested.has(e.id) || !(opts.history || e.valid_to == null) || !ids.has(e.src_id)) return;
      if (e.relation === 'episodic') {
        if (!opts.scenes || !sceneById.has(e.dst_id)) return;
        scenesDrawn.add(e.dst_id);
      } else if (!ids.has(e.dst_id)) return;
      var containment = e.relation === 'containment';
      els.push({ group: 'edges', classes: [e.relation, e.valid_to == null ? 'current' : 'closed'].join(' '),
        data: { id: 'e:' + e.id, rel: e.relation,
                // containment reads child -> parent: "was in" / "in"
                source: containment ? e.dst_id : e.src_id, target: containment ? e.src_id : e.dst_id,
                label: e.relation === 'transition' ? (e.action || '') :
                  e.relation === 'fact' ? (e.predicate || '') + (e.single_valued ? ' \u2460' : '') :
                  containment ? (e.valid_to == null ? 'in' : 'was in') : '' } });
    });
    if (opts.map) mapConnections(ids, parent).forEach(function (c) { els.push(c); });
    scenesDrawn.forEach(function (id) {
      var s = sceneById.get(id);
      els.push({ group: 'nodes', classes: 'scene leaf',
        data: { id: id, kind: 'scene', label: s.round == null ? 'scene' : 'round ' + s.round, color: '#8b5cf6',
                size: 18, alpha: 0.9, font: 10 } });
    });
    return els;
  }

  // The map layer: place-to-place connections (see the header), one per pair of drawn places.
  function mapConnections(ids, parent) {
    var places = new Set(data.nodes.filter(function (n) {
      return n.kind !== 'state' && ids.has(n.id) && PLACE.test(n.type || '');
    }).map(function (n) { return n.id; }));
    var byName = new Map();
    data.nodes.forEach(function (n) { if (places.has(n.id)) byName.set(String(n.name).toLowerCase(), n.id); });
    var pairs = new Map();
    function within(a, b) {  // b is a or one of a's ancestors
      for (var p = a, guard = 0; p != null && guard < 10000; p = parent.get(p), guard++) if (p === b) return true;
      return false;
    }
    function add(a, b, label) {
      if (a === b || !places.has(a) || !places.has(b) || within(a, b) || within(b, a)) return;
      var key = a < b ? a + '|' + b : b + '|' + a;
      if (!pairs.has(key)) pairs.set(key, { a: a, b: b, labels: [] });
      var c = pairs.get(key);
      if (label && c.labels.indexOf(label) < 0 && c.labels.length < 3) c.labels.push(label);
    }
    locations().forEach(function (list) {
      for (var i = 0; i + 1 < list.length; i++) {
        if (list[i].valid_to != null) add(list[i].src_id, list[i + 1].src_id, moveLabel(list[i + 1]));
      }
    });
    data.nodes.forEach(function (n) {
      if (!places.has(n.id)) return;
      var exits = (n.attributes || {}).exits;
      if (Array.isArray(exits)) {
        exits.forEach(function (x) { if (typeof x === 'string' && byName.has(x.toLowerCase())) add(n.id, byName.get(x.toLowerCase()), ''); });
      } else if (exits && typeof exits === 'object') {
        Object.keys(exits).forEach(function (dir) {
          var x = exits[dir];
          if (typeof x === 'string' && byName.has(x.toLowerCase())) add(n.id, byName.get(x.toLowerCase()), dir);
        });
      }
    });
    var out = [];
    pairs.forEach(function (c, key) {
      out.push({ group: 'edges', classes: 'map', data: { id: 'map:' + key, rel: 'map', source: c.a, target: c.b,
                                                           label: c.labels.join(' / ') } });
    });
    return out;
  }

  // Each node's containment edges (where it was), oldest first: the node id -> [edge].
  function locations() {
    var out = new Map();
    data.edges.forEach(function (e) {
      if (e.relation !== 'containment' || !nodeById.has(e.src_id)) return;
      if (!out.has(e.dst_id)) out.set(e.dst_id, []);
      out.get(e.dst_id).push(e);
    });
    out.forEach(function (list) {
      list.sort(function (a, b) { return String(a.valid_from).localeCompare(String(b.valid_from)); });
    });
    return out;
  }

  // How something got somewhere: the containment edge's action, else its scene's action.
  function moveLabel(e) {
    if (e.action) return e.action;
    var s = (e.scenes || []).map(function (id) { return sceneById.get(id); }).filter(Boolean)[0];
    return s && s.action ? s.action : '';
  }

  function makesCycle(parent, child, candidate) {
    for (var p = candidate, guard = 0; p != null && guard < 10000; p = parent.get(p), guard++) {
      if (p === child) return true;
    }
    return false;
  }

  function typeColors() {
    var counts = new Map();
    data.nodes.forEach(function (n) {
      if (n.kind !== 'state') counts.set(n.type, (counts.get(n.type) || 0) + 1);
    });
    var types = Array.from(counts.keys()).sort(function (a, b) {
      return counts.get(b) - counts.get(a) || (a < b ? -1 : 1);
    });
    var out = new Map();
    types.slice(0, PALETTE.length).forEach(function (t, i) { out.set(t, PALETTE[i]); });
    out.others = types.length > PALETTE.length;
    return out;
  }

  // ------------------------------------------------------------------ drawing
  function draw() {
    var t = [performance.now()];
    document.body.dataset.ready = '0';
    cy.batch(function () {
      cy.elements().remove();
      cy.add(elements());
    });
    t.push(performance.now());
    var n = cy.nodes().length;
    var forced = hash.get('layout');  // fcose | pack: for benchmarks and comparisons
    var layout = forced === 'pack' || (forced !== 'fcose' && n > BIG) || typeof cytoscapeFcose === 'undefined' ?
      { name: 'preset', positions: worldgraphPack(cy), label: 'packed boxes' } : {
        name: 'fcose', label: 'fcose', quality: 'default', randomize: true, animate: false,
        nodeDimensionsIncludeLabels: true, tile: true, uniformNodeDimensions: false,
        nodeRepulsion: function () { return 9000; },
        idealEdgeLength: function (e) {
          var rel = e.data('rel');
          return rel === 'transition' || rel === 'fact' ? 110 : rel === 'map' ? 160 : 70;
        },
        edgeElasticity: function () { return 0.45; }, nestingFactor: 0.1, gravity: 0.25, numIter: 2500,
        tilingPaddingVertical: 14, tilingPaddingHorizontal: 14
      };
    cy.layout(Object.assign({ fit: false, padding: 30 }, layout)).run();
    var routed = routeEdges();
    t.push(performance.now());
    fitView();
    t.push(performance.now());
    renderRules();
    t.push(performance.now());
    var ms = Math.round(t[t.length - 1] - t[0]);
    var phases = ['add', 'layout', 'fit', 'rules'].map(function (name, i) {
      return name + ':' + Math.round(t[i + 1] - t[i]);
    });
    var worldNodes = cy.nodes('.entity, .state').length;
    Object.assign(document.body.dataset, {
      nodeCount: String(worldNodes), edgeCount: String(cy.edges().length),
      sceneCount: String(cy.nodes('.scene').length), layout: layout.label, layoutMs: String(ms),
      mapCount: String(cy.edges('.map').length), routedCount: String(routed),
      phasesMs: phases.join(',')
    });
    document.getElementById('status').textContent =
      'drawn: ' + worldNodes + ' nodes, ' + cy.edges().length + ' edges' +
      (opts.scenes ? ', ' + cy.nodes('.scene').length + ' scenes' : '') +
      (opts.history ? ' (with closed history)' : ' (current facts; closed history hidden)') +
      ' \u00b7 layout: ' + layout.label + ', drawn in ' + ms + ' ms' +
      ' \u00b7 scroll to zoom, drag to pan, click a node for details';
    var focus = hash.get('node');
    if (focus && cy.getElementById(focus).nonempty()) {
      var node = cy.getElementById(focus);
      select(node);
      fitView(node.isParent() ? node : node.parent().nonempty() ? node.parent() : node.closedNeighborhood());
    }
    document.body.dataset.ready = '1';
  }

  // Bend each edge whose straight line crosses a node it does not join (a leaf that is neither
  // end nor inside one) around that node: two segment points beside the node's box, on the side
  // away from its centre. Returns how many edges were bent.
  function routeEdges() {
    var MARGIN = 10;
    var obstacles = cy.nodes().filter(function (n) { return !n.isParent(); }).map(function (n) {
      return { node: n, box: n.boundingBox({ includeLabels: false, includeOverlays: false }) };
    });
    var bent = 0;
    cy.edges().forEach(function (edge) {
      if (edge.hasClass('episodic')) return;
      var src = edge.source(), dst = edge.target();
      if (src.same(dst)) return;
      var p = src.position(), q = dst.position();
      var dx = q.x - p.x, dy = q.y - p.y, len = Math.sqrt(dx * dx + dy * dy);
      if (len < 1) return;
      var ux = dx / len, uy = dy / len, nx = -uy, ny = ux;
      var ends = src.union(dst);
      var hits = [];
      obstacles.forEach(function (o) {
        if (ends.contains(o.node) || o.node.ancestors().intersection(ends).nonempty()) return;
        if (!segmentHitsBox(p, q, o.box, MARGIN)) return;
        var cx = (o.box.x1 + o.box.x2) / 2 - p.x, cy2 = (o.box.y1 + o.box.y2) / 2 - p.y;
        var w = (o.box.x2 - o.box.x1) / 2 + MARGIN, h = (o.box.y2 - o.box.y1) / 2 + MARGIN;
        var along = cx * ux + cy2 * uy, across = cx * nx + cy2 * ny;
        var rPar = Math.abs(ux) * w + Math.abs(uy) * h, rPerp = Math.abs(nx) * w + Math.abs(ny) * h;
        var side = across >= 0 ? -1 : 1;  // pass on the side away from the node's centre
        hits.push({ t1: (along - rPar) / len, t2: (along + rPar) / len, d: side * (rPerp + side * across) });
      });
      if (!hits.length) return;
      hits.sort(function (a, b) { return a.t1 - b.t1; });
      var weights = [], dists = [];
      hits.forEach(function (h) {
        weights.push(Math.max(0.02, Math.min(0.98, h.t1)), Math.max(0.02, Math.min(0.98, h.t2)));
        dists.push(h.d, h.d);
      });
      edge.style({ 'curve-style': 'segments', 'segment-weights': weights, 'segment-distances': dists,
                   'edge-distances': 'node-position' });
      // cytoscape's sign of a segment distance: check one point and flip them all if it fell on the other side
      var pts = edge.segmentPoints();
      if (pts && pts.length) {
        var got = (pts[0].x - p.x) * nx + (pts[0].y - p.y) * ny;
        if (got * dists[0] < 0) edge.style('segment-distances', dists.map(function (d) { return -d; }));
      }
      edge.addClass('routed');
      bent++;
    });
    return bent;
  }

  // Whether the segment p-q passes through the box grown by margin (Liang-Barsky clipping).
  function segmentHitsBox(p, q, b, margin) {
    var x1 = b.x1 - margin, x2 = b.x2 + margin, y1 = b.y1 - margin, y2 = b.y2 + margin;
    var t0 = 0, t1 = 1, dx = q.x - p.x, dy = q.y - p.y;
    var checks = [[-dx, p.x - x1], [dx, x2 - p.x], [-dy, p.y - y1], [dy, y2 - p.y]];
    for (var i = 0; i < 4; i++) {
      var pp = checks[i][0], qq = checks[i][1];
      if (pp === 0) { if (qq < 0) return false; continue; }
      var r = qq / pp;
      if (pp < 0) { if (r > t1) return false; if (r > t0) t0 = r; } else { if (r < t0) return false; if (r < t1) t1 = r; }
    }
    return true;
  }

  function fitView(eles) {
    cy.fit(eles, 30);
    if (cy.zoom() > 1.6) { cy.zoom(1.6); cy.center(eles); }
  }

  function graphStyle() {
    return [
      { selector: 'node', style: {
        'label': 'data(label)', 'font-size': 12, 'color': '#0f172a', 'text-wrap': 'wrap', 'text-max-width': 130,
        'text-valign': 'bottom', 'text-margin-y': 4, 'text-outline-color': '#fff', 'text-outline-width': 2,
        // on a big graph, labels appear once zoomed in far enough to read them
        'min-zoomed-font-size': data.nodes.length > BIG ? 7 : 0,
        'width': 'data(size)', 'height': 'data(size)', 'background-color': 'data(color)',
        'background-opacity': 'data(alpha)', 'border-width': 1.5, 'border-color': '#334155',
        'border-opacity': 0.5 } },
      { selector: 'node.entity', style: { 'shape': 'round-rectangle' } },
      { selector: 'node.state', style: { 'shape': 'ellipse', 'border-color': '#b45309', 'border-width': 2.5,
        'border-opacity': 1, 'height': 'mapData(size, 30, 70, 24, 50)' } },
      { selector: 'node.state.closed', style: { 'background-color': '#fef3c7', 'border-style': 'dashed',
        'border-color': '#d6a24a', 'color': '#78716c' } },
      { selector: 'node.entity.closed', style: { 'border-style': 'dashed', 'opacity': 0.55 } },
      { selector: 'node.box', style: { 'background-opacity': 0.07, 'border-color': 'data(color)',
        'border-opacity': 0.9, 'border-width': 1.5, 'text-valign': 'top', 'text-halign': 'center',
        'text-margin-y': -3, 'font-weight': 'bold', 'font-size': 'data(font)', 'text-wrap': 'none',
        'padding': 14, 'shape': 'round-rectangle',
        'corner-radius': 8 } },
      { selector: 'node.state.box', style: { 'background-color': '#fbbf24', 'border-color': '#b45309' } },
      { selector: 'node.scene', style: { 'shape': 'diamond', 'width': 18, 'height': 18, 'background-opacity': 0.9,
        'font-size': 10, 'color': '#6d28d9', 'border-width': 0 } },
      { selector: 'edge', style: { 'width': 1.5, 'curve-style': 'bezier', 'line-color': '#94a3b8',
        'target-arrow-color': '#94a3b8', 'target-arrow-shape': 'triangle', 'arrow-scale': 0.9,
        'label': 'data(label)', 'font-size': 10, 'color': '#475569', 'text-background-color': '#fff',
        'text-background-opacity': 0.85, 'text-background-padding': 2, 'text-rotation': 'none' } },
      { selector: 'edge.transition', style: { 'width': 2.5, 'line-color': '#d97706', 'target-arrow-color': '#d97706',
        'color': '#92400e', 'font-size': 11, 'font-weight': 'bold', 'text-wrap': 'wrap', 'text-max-width': 140 } },
      { selector: 'edge.fact', style: { 'width': 2, 'line-color': '#0f766e', 'target-arrow-color': '#0f766e',
        'color': '#115e59', 'font-size': 10, 'font-style': 'italic' } },
      { selector: 'edge.episodic', style: { 'width': 1, 'line-style': 'dotted', 'line-color': '#a78bfa',
        'target-arrow-shape': 'none' } },
      { selector: 'edge.map', style: { 'width': 7, 'line-color': '#cbd5e1', 'opacity': 0.9, 'target-arrow-shape': 'none',
        'color': '#64748b', 'font-size': 10, 'font-style': 'italic', 'z-index': 0, 'curve-style': 'straight' } },
      { selector: 'edge.closed', style: { 'line-style': 'dashed', 'opacity': 0.55 } },
      { selector: '.faded', style: { 'opacity': 0.12 } },
      { selector: 'node.hl', style: { 'border-color': '#e11d48', 'border-width': 4, 'border-opacity': 1,
        'opacity': 1 } },
      { selector: 'edge.hl', style: { 'line-color': '#e11d48', 'target-arrow-color': '#e11d48', 'opacity': 1 } },
      { selector: 'node:selected', style: { 'border-color': '#e11d48', 'border-width': 4, 'border-opacity': 1 } }
    ];
  }

  // ------------------------------------------------------------------ side panel and header
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text != null) e.textContent = String(text);
    return e;
  }

  function buildChrome() {
    var m = data.meta || {};
    var c = m.counts || {};
    var bits = [];
    if (m.graph_version != null) bits.push('version ' + m.graph_version);
    if (m.updated_at) bits.push('updated ' + String(m.updated_at).replace('T', ' ').slice(0, 16) + ' UTC');
    bits.push(data.nodes.length + ' nodes', data.edges.length + ' edges', data.rules.length + ' rules',
              data.scenes.length + ' scenes');
    if (c.nodes == null && !data.nodes.length) bits.push('(empty graph)');
    document.getElementById('meta').textContent = bits.join(' \u00b7 ');

    var hist = document.getElementById('t-history');
    var scenes = document.getElementById('t-scenes');
    var map = document.getElementById('t-map');
    hist.checked = opts.history;
    scenes.checked = opts.scenes;
    map.checked = opts.map;
    map.addEventListener('change', function () { opts.map = map.checked; unpin(); draw(); });
    hist.addEventListener('change', function () { opts.history = hist.checked; unpin(); draw(); });
    scenes.addEventListener('change', function () { opts.scenes = scenes.checked; unpin(); draw(); });
    document.getElementById('fit').addEventListener('click', function () { fitView(); });

    var names = document.getElementById('names');
    Array.from(new Set(data.nodes.map(function (n) { return n.name; }))).sort().slice(0, 5000)
      .forEach(function (name) { var o = document.createElement('option'); o.value = name; names.appendChild(o); });
    document.getElementById('find').addEventListener('change', function (ev) { find(ev.target.value); });

    buildLegend();
    cy.on('mouseover', 'node', function (ev) { hoverNode(ev.target, ev.renderedPosition); });
    cy.on('mouseout', 'node', function () { if (!pinned) clearHighlight(); hideTip(); });
    cy.on('tap', 'node', function (ev) { select(ev.target); });
    cy.on('tap', function (ev) { if (ev.target === cy) unpin(); });
  }

  function buildLegend() {
    var box = document.getElementById('legend');
    var ul = el('ul');
    function row(cls, text, style) {
      var li = el('li');
      var sw = el('span', 'sw ' + cls);
      if (style) sw.style.background = style;
      li.append(sw, el('span', null, text));
      ul.appendChild(li);
      return li;
    }
    row('entity', 'entity (colour = type)', PALETTE[0]);
    var types = el('div', 'types');
    typeColor.forEach(function (color, type) {
      var t = el('span');
      var sw = el('span', 'sw type');
      sw.style.background = color;
      t.append(sw, el('span', null, type || '(no type)'));
      types.appendChild(t);
    });
    if (typeColor.others) {
      var t = el('span');
      var sw = el('span', 'sw type');
      sw.style.background = OTHER;
      t.append(sw, el('span', null, 'other'));
      types.appendChild(t);
    }
    ul.appendChild(types);
    row('state', 'state, current');
    row('past', 'past state (superseded)');
    row('box', 'box: contains what is drawn inside it');
    row('arrow', 'transition, labelled with its action');
    row('fact', 'fact: subject \u2192 object, labelled with its predicate (\u2460: one at a time)');
    row('map', 'map: places connected (moved between, or a named exit)');
    row('closed', 'closed history (toggle): no longer true');
    row('scene', 'scene the fact was learned in (toggle)');
    ul.appendChild(el('li', null, 'size and \u00d7N: evidence count; fill strength: confidence'));
    box.appendChild(ul);
  }

  function renderRules() {
    var list = document.getElementById('rules');
    list.textContent = '';
    ruleItems.clear();
    var rules = data.rules.filter(function (r) { return opts.history || r.valid_to == null; })
      .sort(function (a, b) {
        return (a.valid_to == null ? 0 : 1) - (b.valid_to == null ? 0 : 1) ||
          (b.evidence_count || 0) - (a.evidence_count || 0) || (b.confidence || 0) - (a.confidence || 0);
      });
    document.getElementById('rule-count').textContent = '(' + rules.length + ')';
    rules.forEach(function (r) {
      var li = el('li', r.valid_to == null ? null : 'closed');
      var cond = el('div', 'cond');
      cond.append(el('span', 'kw', 'IF'), document.createTextNode(r.condition || ''));
      var out = el('div', 'out');
      out.append(el('span', 'kw', 'THEN'), document.createTextNode(r.outcome || ''));
      li.append(cond, out, el('div', 'num', figures(r) + (r.valid_to ? ' \u00b7 closed ' + day(r.valid_to) : '')));
      var links = el('div', 'links');
      r.linked_node_ids.forEach(function (id) {
        var n = nodeById.get(id);
        if (n) links.appendChild(el('span', 'chip', n.name));
      });
      li.appendChild(links);
      li.addEventListener('mouseenter', function () { if (!pinned) highlight(ruleNodes(r)); li.classList.add('on'); });
      li.addEventListener('mouseleave', function () { if (!pinned) clearHighlight(); li.classList.remove('on'); });
      li.addEventListener('click', function () {
        var nodes = ruleNodes(r);
        if (nodes.nonempty()) cy.animate({ fit: { eles: nodes, padding: 80 }, duration: 300 });
      });
      ruleItems.set(r.id, li);
      list.appendChild(li);
    });
  }

  function ruleNodes(r) {
    return cy.collection(r.linked_node_ids.map(function (id) { return cy.getElementById(id); })
      .filter(function (n) { return n.nonempty(); }));
  }

  function figures(rec) {
    // the evidence count only when there is evidence: a record without quotes is not "evidence 0"
    return 'confidence ' + (rec.confidence == null ? '-' : rec.confidence.toFixed(2)) +
      (rec.evidence_count ? ' \u00b7 evidence ' + rec.evidence_count : '');
  }

  function day(ts) { return String(ts).replace('T', ' ').slice(0, 16); }

  // ------------------------------------------------------------------ interaction
  function highlight(nodes) {
    cy.batch(function () {
      cy.elements().removeClass('hl').addClass('faded');
      var inner = nodes.union(nodes.descendants());
      var shown = inner.union(inner.connectedEdges());
      shown = shown.union(shown.connectedNodes());
      // a compound's opacity multiplies into its children: keep every ancestor of what is shown clear
      shown.union(shown.nodes().ancestors()).removeClass('faded');
      nodes.addClass('hl');
    });
  }

  function clearHighlight() {
    cy.elements().removeClass('faded hl');
    ruleItems.forEach(function (li) { li.classList.remove('on'); });
  }

  function lightRules(id) {
    var first = null;
    ruleItems.forEach(function (li) { li.classList.remove('on'); });
    (rulesByNode.get(id) || []).forEach(function (r) {
      var li = ruleItems.get(r.id);
      if (li) { li.classList.add('on'); first = first || li; }
    });
    if (first) first.scrollIntoView({ block: 'nearest' });
  }

  function hoverNode(node, pos) {
    if (!pinned) { highlight(node); lightRules(node.id()); }
    var tip = document.getElementById('tip');
    tip.textContent = '';
    var n = nodeById.get(node.id());
    if (n) {
      tip.append(el('b', null, n.name), el('div', 'sub', n.kind + ' \u00b7 ' + (n.type || 'no type') +
        (n.valid_to ? ' \u00b7 closed ' + day(n.valid_to) : ' \u00b7 current')), el('div', null, figures(n)));
      var rules = (rulesByNode.get(n.id) || []).filter(function (r) { return opts.history || r.valid_to == null; });
      if (rules.length) {
        var ul = el('ul');
        rules.slice(0, 8).forEach(function (r) {
          ul.appendChild(el('li', null, 'IF ' + r.condition + ' THEN ' + r.outcome));
        });
        if (rules.length > 8) ul.appendChild(el('li', null, '\u2026 ' + (rules.length - 8) + ' more in the panel'));
        tip.append(el('div', 'sub', rules.length + ' rule' + (rules.length > 1 ? 's' : '') + ':'), ul);
      }
    } else {
      var s = sceneById.get(node.id());
      if (!s) return;
      tip.append(el('b', null, node.data('label')), el('div', 'sub', 'scene \u00b7 ' + (s.status || '')),
                 el('div', null, s.action ? 'action: ' + s.action : ''), el('div', null, s.trigger_reason || ''));
    }
    var box = document.getElementById('cy').getBoundingClientRect();
    tip.style.left = Math.min(box.left + pos.x + 14, window.innerWidth - 370) + 'px';
    tip.style.top = Math.min(box.top + pos.y + 14, window.innerHeight - 160) + 'px';
    tip.hidden = false;
  }

  function hideTip() { document.getElementById('tip').hidden = true; }

  function select(node) {
    pinned = node.id();
    cy.elements().unselect();
    node.select();
    highlight(node);
    lightRules(node.id());
    showDetails(node.id());
  }

  function unpin() {
    pinned = null;
    clearHighlight();
    document.getElementById('details').hidden = true;
  }

  function showDetails(id) {
    var box = document.getElementById('details');
    box.textContent = '';
    var n = nodeById.get(id);
    var s = sceneById.get(id);
    if (!n && !s) return;
    var dl = el('dl');
    function row(k, v) { if (v != null && v !== '') dl.append(el('dt', null, k), el('dd', null, v)); }
    if (n) {
      box.append(el('h3', null, n.name), el('div', 'num', n.kind + ' \u00b7 ' + (n.type || 'no type') + ' \u00b7 ' +
        figures(n)));
      row('since', n.valid_from && day(n.valid_from));
      row('closed', n.valid_to && day(n.valid_to));
      var of = n.entity_id && nodeById.get(n.entity_id);
      if (of) row('state of', of.name);
      row('scenes', n.scenes);
      var where = locations().get(n.id) || [];
      if (where.length) {
        var ol = el('ol', 'where');
        where.forEach(function (e) {
          var at = nodeById.get(e.src_id);
          var li = el('li', e.valid_to == null ? 'now' : 'past', (at ? at.name : e.src_id) + ' \u00b7 ' +
            (e.valid_from ? day(e.valid_from) : '?') + ' \u2013 ' + (e.valid_to ? day(e.valid_to) : 'now'));
          var how = moveLabel(e);
          if (how) li.appendChild(el('span', 'num', ' (' + how + ')'));
          ol.appendChild(li);
        });
        box.appendChild(el('div', 'num', where.length > 1 ? 'where it was (oldest first):' : 'where it is:'));
        box.appendChild(ol);
      }
      var facts = data.edges.filter(function (e) {
        return e.relation === 'fact' && (e.src_id === n.id || e.dst_id === n.id) && (opts.history || e.valid_to == null);
      });
      if (facts.length) {
        var fl = el('ul', 'facts');
        facts.forEach(function (e) {
          var a = nodeById.get(e.src_id);
          var b = nodeById.get(e.dst_id);
          fl.appendChild(el('li', e.valid_to == null ? 'now' : 'past', (a ? a.name : e.src_id) + ' ' + e.predicate +
            ' ' + (b ? b.name : e.dst_id) + (e.valid_to ? ' (until ' + day(e.valid_to) + ')' : '')));
        });
        box.appendChild(el('div', 'num', 'facts:'));
        box.appendChild(fl);
      }
      Object.keys(n.attributes || {}).forEach(function (k) {
        var v = n.attributes[k];
        row(k, typeof v === 'string' ? v : JSON.stringify(v));
      });
      box.appendChild(dl);
      n.evidence.forEach(function (q) { box.appendChild(el('blockquote', null, q)); });
      if (n.evidence_count > n.evidence.length) {
        box.appendChild(el('div', 'num', '\u2026 and ' + (n.evidence_count - n.evidence.length) + ' more'));
      }
    } else {
      box.append(el('h3', null, 'scene, round ' + (s.round == null ? '?' : s.round)));
      row('status', s.status);
      row('action', s.action);
      row('why', s.trigger_reason);
      box.appendChild(dl);
    }
    box.hidden = false;
  }

  function find(text) {
    var q = String(text || '').trim().toLowerCase();
    if (!q) return;
    var hits = cy.nodes().filter(function (n) {
      var rec = nodeById.get(n.id());
      return rec && rec.name.toLowerCase() === q;
    });
    if (hits.empty()) {
      hits = cy.nodes().filter(function (n) {
        var rec = nodeById.get(n.id());
        return rec && rec.name.toLowerCase().indexOf(q) >= 0;
      });
    }
    if (hits.empty()) return;
    select(hits[0]);
    cy.animate({ fit: { eles: hits, padding: 120 }, duration: 300 });
  }
})();
