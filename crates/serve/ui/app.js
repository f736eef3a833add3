// whyslow web UI. Plain JavaScript without a bundler or toolchain (see index.html): every view reads the
// service's JSON API (/api/v1/...), the same one scripts use. window.whyslow exposes the drawn frames
// (a hit-test for tests and tools).
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const ROW = 18;
  const st = {
    targets: [], target: null, type: null, unit: "", total: 0, root: null, zoom: null,
    search: "", frames: [], fns: [], sort: { key: "self", desc: true }, view: "flame", ready: false,
    // The timeline of the whole range ({start, slice: ns, values, threads}), the selected slices [i, j)
    // (null: all), and the range the Diff view compares the selection with.
    timeline: null, sel: null, base: null, seq: 0, loads: 0,
    // The frame the keyboard moves (arrows), zooms to (Enter); null until an arrow is pressed.
    focus: null, polls: 0,
  };

  // ---- API ------------------------------------------------------------------------------------------
  async function api(path) {
    for (let attempt = 0; attempt < 2; attempt++) {
      const headers = {};
      const token = sessionStorage.getItem("whyslow-token");
      if (token) headers.Authorization = "Bearer " + token;
      const r = await fetch(path, { headers });
      if (r.status === 401 && attempt === 0) {
        const t = prompt("This whyslow service needs its bearer token:");
        if (!t) break;
        sessionStorage.setItem("whyslow-token", t.trim());
        continue;
      }
      const body = await r.json();
      if (!r.ok) throw new Error(body.error || r.statusText);
      return body;
    }
    throw new Error("unauthorized");
  }

  function status(msg) { $("status").textContent = msg || ""; }

  function rangeOf(t) {
    const r = $("range").value;
    const w = t.windows || { count: 0 };
    if (r === "all") {
      if (!w.count) return null;
      return { from: Math.floor(w.first_unix_ns / 1e9), until: Math.ceil(w.last_unix_ns / 1e9) + 1 };
    }
    return { from: "now-" + r, until: "now" };
  }

  // The range every view shows: the timeline's selection, else the whole range. Slice i covers
  // [start + i*slice, start + (i+1)*slice); the bounds are put half a slice before the slices' starts,
  // so rounding (unix ns do not fit a double exactly) cannot move a slice in or out.
  function shownRange() {
    const tl = st.timeline;
    if (!st.sel || !tl) return rangeOf(st.target);
    const at = (i) => ((tl.start + (i - 0.5) * tl.slice) / 1e9).toFixed(4);
    return { from: at(st.sel[0]), until: at(st.sel[1]) };
  }

  function rangeLabel(sel) {
    const tl = st.timeline;
    if (!sel || !tl) return "the whole range";
    return `${(sel[0] * tl.slice / 1e9).toFixed(1)}–${(sel[1] * tl.slice / 1e9).toFixed(1)} s`;
  }

  // The thread/process filter as query parameters ({thread: tid} or {pid: pid}, or none).
  function filterParams() {
    const v = $("thread").value;
    if (!v) return {};
    const [k, id] = v.split("=");
    return { [k]: id };
  }

  // Slicing, as report's --focus/--ignore/--no-kernel: the profile endpoints' focus, ignore, no_kernel.
  function sliceParams() {
    const out = {};
    const focus = $("focus").value.trim(), ignore = $("ignore").value.trim();
    if (focus) out.focus = focus;
    if (ignore) out.ignore = ignore;
    if ($("no-kernel").checked) out.no_kernel = 1;
    return out;
  }

  function q(params) {
    return Object.entries(params).filter(([, v]) => v !== null && v !== undefined)
      .map(([k, v]) => k + "=" + encodeURIComponent(v)).join("&");
  }

  function targetLabel(t) {
    return (t.name || "target " + t.id) + (t.state === "stopped" ? " (stopped)" : "");
  }

  // ---- loading --------------------------------------------------------------------------------------
  async function loadTargets() {
    st.targets = await api("/api/v1/targets?windows=true");
    for (const sel of [$("target"), $("diff-before"), $("diff-after")]) {
      sel.innerHTML = "";
      for (const t of st.targets) sel.add(new Option(targetLabel(t), t.id));
    }
    if (st.targets.length > 1) $("diff-after").value = st.targets[1].id;
    if (!st.targets.length) { status("No targets yet: define one (POST /api/v1/targets)."); return; }
    st.target = st.targets[0];
    const w = st.target.windows || {};
    // A long-lived service: start with the last hour rather than everything stored.
    $("range").value = w.count && w.last_unix_ns - w.first_unix_ns > 3600e9 ? "1h" : "all";
    await loadProfile();
  }

  // The target, type, range or thread filter changed: the timeline, and the selected range's tree beside
  // it (a selection is kept only across a thread filter change, which leaves the slices where they are).
  async function loadProfile() {
    const t = st.target;
    const r = rangeOf(t);
    if (!r) { status("No recorded windows of " + targetLabel(t) + " yet."); return; }
    status("");
    const timeline = api("/api/v1/profile?" + q({ target: t.id, type: st.type, from: r.from, until: r.until,
      ...filterParams(), ...sliceParams(), format: "timeline" })).then((tl) => {
      st.timeline = { start: tl.start_unix_ns, slice: tl.slice_ns, values: tl.values, threads: tl.threads };
    }, (e) => { status(e.message); st.timeline = null; }).then(() => { threadOptions(); drawTimeline(); loadFindings(); });
    await Promise.all([timeline, loadTree()]);
  }

  // The tree of the range shown (the timeline's selection), and every view drawn from it.
  async function loadTree() {
    const t = st.target;
    const r = shownRange();
    drawTimeline();
    const seq = ++st.seq; // a later selection's answer may come first: only the last one is shown
    let data;
    try {
      data = await api("/api/v1/profile?" + q({ target: t.id, type: st.type, from: r.from, until: r.until,
        ...filterParams(), ...sliceParams(), format: "tree" }));
      if (seq !== st.seq) return;
    } catch (e) {
      if (seq !== st.seq) return;
      status(e.message); st.root = null; st.total = 0; st.fns = []; shown(); draw(); renderTable(); return;
    }
    const types = data.sample_types.map((x) => x.name);
    const sel = $("type");
    sel.innerHTML = "";
    for (const n of types) sel.add(new Option(n, n));
    sel.value = data.sample_type;
    st.type = data.sample_type; st.unit = data.unit; st.total = data.total;
    [st.root, st.fns] = decodeTree(data);
    st.zoom = st.root;
    status(""); shown();
    draw(); renderTable();
    if (st.view === "doctor") loadDoctor();
    if (st.view === "sandwich") drawSandwich();
    st.ready = true; st.loads++;
  }

  function shown() {
    const el = $("shown");
    const sliced = $("thread").value || Object.keys(sliceParams()).length;
    el.textContent = `${fmt(st.total)} in ${rangeLabel(st.sel)}` + (sliced ? " (filtered)" : "");
    el.dataset.total = st.total;
    $("sel-clear").disabled = !st.sel;
    $("sel-base").disabled = !st.sel;
  }

  // The filter's choices: every process, then every thread, with their share of the whole range.
  function threadOptions() {
    const sel = $("thread"), keep = sel.value;
    const threads = (st.timeline && st.timeline.threads) || [];
    const all = threads.reduce((a, t) => a + t.value, 0);
    const procs = new Map();
    for (const t of threads) {
      const p = procs.get(t.pid) || { pid: t.pid, name: t.name, value: 0 };
      if (t.tid === t.pid) p.name = t.name;
      p.value += t.value; procs.set(t.pid, p);
    }
    sel.innerHTML = "";
    sel.add(new Option("all threads", ""));
    for (const p of procs.values()) sel.add(new Option(`process ${p.pid} ${p.name} (${pct(p.value, all)})`, "pid=" + p.pid));
    for (const t of threads) sel.add(new Option(`thread ${t.tid} ${t.name} (${pct(t.value, all)})`, "thread=" + t.tid));
    sel.value = [...sel.options].some((o) => o.value === keep) ? keep : "";
  }

  // ---- timeline: samples per second, drag to select ------------------------------------------------------
  function drawTimeline() {
    const c = $("timeline"), tl = st.timeline;
    const width = c.clientWidth || 800, height = 64, dpr = window.devicePixelRatio || 1;
    c.width = width * dpr; c.height = height * dpr;
    const ctx = c.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    if (!tl || !tl.values.length) return;
    const n = tl.values.length, bw = width / n, perSec = 1e9 / tl.slice;
    const max = tl.values.reduce((m, v) => Math.max(m, v), 1);
    const inSel = (i) => !st.sel || (i >= st.sel[0] && i < st.sel[1]);
    for (let i = 0; i < n; i++) {
      const h = (height - 14) * tl.values[i] / max;
      ctx.fillStyle = inSel(i) ? "#1565c0" : "#b0bec5";
      ctx.fillRect(i * bw, height - h, Math.max(bw - (bw > 3 ? 1 : 0), 0.5), h);
    }
    if (st.sel) {
      ctx.fillStyle = "rgba(21, 101, 192, 0.12)";
      ctx.fillRect(st.sel[0] * bw, 0, (st.sel[1] - st.sel[0]) * bw, height);
    }
    ctx.fillStyle = "#111"; ctx.font = "11px system-ui, sans-serif"; ctx.textBaseline = "top";
    ctx.fillText(`peak ${fmt(Math.round(max * perSec))} per second`, 4, 1);
    const dur = (n * tl.slice / 1e9).toFixed(1) + " s";
    ctx.fillText(dur, width - ctx.measureText(dur).width - 4, 1);
  }

  // ---- findings track: the always-on doctor's findings (one row per rule, a bar per episode, darker
  // with more impact) and regressions (a mark where the change was found; a click compares the two
  // ranges in the Diff view), over the timeline's range ----------------------------------------------------
  async function loadFindings() {
    const t = st.target, tl = st.timeline, box = $("findings-track");
    st.findings = null;
    box.innerHTML = "";
    box.hidden = true;
    if (!t || !tl || !tl.values.length) return;
    const from = tl.start, until = tl.start + tl.values.length * tl.slice;
    const range = { target: t.id, from: (from / 1e9).toFixed(3), until: (until / 1e9).toFixed(3) };
    let f, r;
    try {
      [f, r] = await Promise.all([api("/api/v1/findings?" + q(range)), api("/api/v1/regressions?" + q(range))]);
    } catch (e) {
      return; // an agent without the doctor: no track
    }
    if (st.target !== t) return;
    st.findings = { findings: f.findings, regressions: r.regressions };
    const x = (ns) => Math.max(0, Math.min(100, 100 * (ns - from) / (until - from)));
    const secs = (ns) => ((ns - from) / 1e9).toFixed(0);
    const row = (label, title) => {
      const d = document.createElement("div");
      d.className = "ftrack";
      const l = document.createElement("span");
      l.className = "flabel";
      l.textContent = label;
      d.title = title;
      d.appendChild(l);
      box.appendChild(d);
      return d;
    };
    for (const g of f.findings) {
      const d = row(g.rule, g.title);
      for (const e of g.episodes) {
        const seg = document.createElement("div");
        seg.className = "fseg";
        seg.style.left = x(e.start_ns) + "%";
        seg.style.width = Math.max(0.4, x(e.end_ns) - x(e.start_ns)) + "%";
        seg.style.opacity = (0.35 + 0.65 * Math.min(1, e.peak_impact_pct / 50)).toFixed(2);
        seg.title = `${g.title}: ${secs(e.start_ns)}–${secs(e.end_ns)} s, ${e.windows} windows, ` +
          `peak ${e.peak_impact_pct.toFixed(1)}% of ${g.impact_of}, last ${e.last_impact_pct.toFixed(1)}%`;
        d.appendChild(seg);
      }
    }
    if (r.regressions.length) {
      const d = row("regressions", "changes the doctor found: click one to compare before and after");
      for (const reg of r.regressions) {
        const b = document.createElement("button");
        b.className = "freg";
        b.style.left = x(reg.after.from_ns) + "%";
        const c = reg.changes[0];
        const what = reg.function || reg.rule;
        b.title = `${what}: ${c.measure} ${c.before_pct.toFixed(1)}% → ${c.after_pct.toFixed(1)}%` +
          (reg.deploy ? ` (deploy ${reg.before.build} → ${reg.after.build})` : "");
        b.setAttribute("aria-label", b.title);
        b.onclick = () => {
          const s = (ns) => (ns / 1e9).toFixed(3);
          st.base = { target: t.id, range: { from: s(reg.before.from_ns), until: s(reg.before.until_ns) },
            label: "before the change" };
          const n = tl.values.length;
          const i = Math.max(0, Math.floor((reg.after.from_ns - from) / tl.slice));
          const j = Math.min(n, Math.max(i + 1, Math.ceil((reg.after.until_ns - from) / tl.slice)));
          st.sel = [i, j];
          $("diff-before").value = $("diff-after").value = t.id;
          loadTree();
          show("diff");
        };
        d.appendChild(b);
      }
    }
    box.hidden = !box.children.length;
  }

  // The slice boundary nearest to a pointer position.
  function boundaryAt(ev) {
    const c = $("timeline"), r = c.getBoundingClientRect(), n = st.timeline.values.length;
    return Math.max(0, Math.min(n, Math.round((ev.clientX - r.left) / r.width * n)));
  }

  let drag = null;
  $("timeline").addEventListener("mousedown", (ev) => {
    if (!st.timeline || !st.timeline.values.length) return;
    drag = { a: boundaryAt(ev), moved: false };
    ev.preventDefault();
  });
  window.addEventListener("mousemove", (ev) => {
    if (!drag) return;
    const b = boundaryAt(ev);
    if (b === drag.a && !drag.moved) return;
    drag.moved = true;
    st.sel = [Math.min(drag.a, b), Math.max(drag.a, b)];
    if (st.sel[0] === st.sel[1]) st.sel[1] = Math.min(st.sel[0] + 1, st.timeline.values.length);
    if (st.sel[0] === st.sel[1]) st.sel[0]--;
    drawTimeline();
  });
  window.addEventListener("mouseup", () => {
    if (!drag) return;
    const moved = drag.moved;
    drag = null;
    if (!moved) st.sel = null; // a click without a drag selects everything again
    if (st.sel && st.sel[0] === 0 && st.sel[1] === st.timeline.values.length) st.sel = null;
    loadTree();
  });
  $("sel-clear").onclick = () => { st.sel = null; loadTree(); };
  $("sel-base").onclick = () => {
    st.base = { target: st.target.id, range: shownRange(), label: rangeLabel(st.sel) };
    $("diff-before").value = $("diff-after").value = st.target.id;
    show("diff");
  };

  // Parent links and depths; iterative (stacks can be thousands deep).
  function prepare(root) {
    root.parent = null; root.depth = 0;
    const todo = [root];
    while (todo.length) {
      const n = todo.pop();
      for (const c of n.children) { c.parent = n; c.depth = n.depth + 1; todo.push(c); }
    }
    return root;
  }

  // The compact tree of /api/v1/profile?format=tree (names, kinds, and per node in preorder: name index,
  // value, self, number of children) as linked nodes {name, kind, value, self, children, parent, depth},
  // and the functions' self and total, taken in the same pass (a recursive function's total counts each
  // stack once: only its outermost frames add).
  function decodeTree(d) {
    const { names, kinds, nodes } = d;
    const byName = new Map(), fns = [];
    const fnOf = names.map((name, i) => {
      if (i === 0) return -1;
      if (!byName.has(name)) { byName.set(name, fns.length); fns.push({ name, self: 0, total: 0 }); }
      return byName.get(name);
    });
    const onPath = new Int32Array(fns.length);
    const node = (k, parent) => ({ name: names[nodes[k]], kind: kinds[nodes[k]], value: nodes[k + 1],
      self: nodes[k + 2], children: [], parent, depth: parent ? parent.depth + 1 : 0 });
    const root = node(0, null);
    // Open nodes: [node, its function, children still to read].
    const open = [[root, -1, nodes[3]]];
    for (let k = 4; k < nodes.length; k += 4) {
      while (open[open.length - 1][2] === 0) { const [, f] = open.pop(); if (f >= 0) onPath[f]--; }
      const top = open[open.length - 1];
      top[2]--;
      const n = node(k, top[0]), f = fnOf[nodes[k]];
      top[0].children.push(n);
      fns[f].self += n.self;
      if (!onPath[f]) fns[f].total += n.value;
      onPath[f]++;
      open.push([n, f, nodes[k + 3]]);
    }
    return [root, fns.filter((f) => f.total > 0)];
  }

  // ---- flame graph ----------------------------------------------------------------------------------
  function color(n) {
    if (st.search && matches(n)) return "#d81b60";
    let h = 0;
    for (let i = 0; i < n.name.length; i++) h = (h * 31 + n.name.charCodeAt(i)) >>> 0;
    const v = (h % 1000) / 1000;
    if (n.kind === "kernel") return `hsl(30, 85%, ${58 + v * 12}%)`;
    if (n.kind === "inlined") return `hsl(180, 55%, ${60 + v * 12}%)`;
    if (n.kind === "root") return "#b0bec5";
    return `hsl(${5 + v * 45}, 80%, ${60 + v * 10}%)`;
  }

  function matches(n) {
    return n.kind !== "root" && n.name.toLowerCase().includes(st.search.toLowerCase());
  }

  function layout(zoom, width) {
    const out = [];
    if (!zoom) return out;
    const path = [];
    for (let n = zoom; n; n = n.parent) path.unshift(n);
    for (const n of path.slice(0, -1)) out.push({ node: n, x: 0, width, depth: n.depth });
    const scale = zoom.value > 0 ? width / zoom.value : 0;
    const todo = [[zoom, 0]];
    while (todo.length) {
      const [n, x] = todo.pop();
      const w = n.value * scale;
      if (w < 0.4) continue;
      out.push({ node: n, x, width: w, depth: n.depth });
      let cx = x; // children start at the parent's left edge
      for (const c of n.children) { todo.push([c, cx]); cx += c.value * scale; }
    }
    return out;
  }

  function draw() {
    st.frames = render($("flame"), st.root && st.zoom, $("icicle").checked, st.focus);
    breadcrumb(); searchInfo(); focusInfo();
  }

  // Draws the tree under `zoom` (its ancestors full width) on `canvas`; returns the drawn frames.
  function render(canvas, zoom, icicle, focus, colorOf = color) {
    const width = canvas.parentElement.clientWidth || 800;
    const frames = layout(zoom, width);
    const maxDepth = frames.reduce((m, f) => Math.max(m, f.depth), 0);
    const height = (maxDepth + 1) * ROW;
    const dpr = window.devicePixelRatio || 1;
    canvas.width = width * dpr; canvas.height = height * dpr;
    canvas.style.height = height + "px";
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    ctx.font = "12px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    return frames.map((f) => {
      const y = icicle ? f.depth * ROW : (maxDepth - f.depth) * ROW;
      ctx.fillStyle = colorOf(f.node);
      ctx.fillRect(f.x, y, Math.max(f.width - 0.5, 0.5), ROW - 1);
      if (f.width > 30) {
        ctx.fillStyle = st.search && matches(f.node) ? "#fff" : "#111";
        ctx.fillText(fit(ctx, f.node.name, f.width - 6), f.x + 3, y + ROW / 2);
      }
      if (f.node === focus) {
        ctx.strokeStyle = "#000"; ctx.lineWidth = 2;
        ctx.strokeRect(f.x + 1, y + 1, Math.max(f.width - 2.5, 1), ROW - 3);
      }
      return { name: f.node.name, x: f.x, y, width: f.width, depth: f.depth, node: f.node,
        matched: !!(st.search && matches(f.node)) };
    });
  }

  // ---- keyboard: arrows move the focus between parent, children and siblings; Enter zooms ---------------
  function focusInfo() {
    const el = $("focus-info"), n = st.focus;
    el.textContent = n ? `${n.name}: total ${fmt(n.value)} (${pct(n.value, st.total)}), self ${fmt(n.self)}` : "";
  }

  // The frame an arrow key leads to from the focus (null: none drawn that way). Toward the leaves (up in a
  // flame graph, down in an icicle) is the heaviest drawn child; siblings are the drawn ones of the parent.
  function moveFocus(key) {
    const f = st.focus, icicle = $("icicle").checked;
    const drawn = new Set(st.frames.map((x) => x.node));
    const leafward = icicle ? "ArrowDown" : "ArrowUp", rootward = icicle ? "ArrowUp" : "ArrowDown";
    if (key === leafward) {
      return f.children.filter((c) => drawn.has(c)).reduce((a, c) => (!a || c.value > a.value ? c : a), null);
    }
    if (key === rootward) return f.parent;
    // Siblings only inside the zoomed frame (its ancestors are drawn alone, full width).
    let inside = false;
    for (let n = f.parent; n; n = n.parent) if (n === st.zoom) inside = true;
    if (!inside) return null;
    const sibs = f.parent.children.filter((c) => drawn.has(c));
    return sibs[sibs.indexOf(f) + (key === "ArrowRight" ? 1 : -1)] || null;
  }

  function flameKey(e) {
    if (!st.root) return false;
    if (e.key.startsWith("Arrow")) {
      const next = st.focus && drawnNode(st.focus) ? moveFocus(e.key) : st.zoom;
      if (next) { st.focus = next; draw(); }
      return true;
    }
    if (e.key === "Enter" && st.focus) { zoomTo(st.focus); return true; }
    return false;
  }

  function drawnNode(n) { return st.frames.some((f) => f.node === n); }

  // ---- sandwich: one function's callers (above it) and callees (below it), over all its stacks ----------
  function outermost(name) {
    const out = [];
    const todo = st.root ? [st.root] : [];
    while (todo.length) {
      const n = todo.pop();
      if (n.name === name && n.kind !== "root") { out.push(n); continue; }
      for (const c of n.children) todo.push(c);
    }
    return out;
  }

  function childNamed(n, name, kind) {
    let c = n.children.find((x) => x.name === name);
    if (!c) { c = { name, kind, value: 0, self: 0, children: [] }; n.children.push(c); }
    return c;
  }

  function sandwichTrees(name) {
    const tops = outermost(name);
    const kind = tops.length ? tops[0].kind : "user";
    const callees = { name, kind, value: 0, self: 0, children: [] };
    const callers = { name, kind, value: 0, self: 0, children: [] };
    for (const t of tops) {
      const todo = [[callees, t]];
      while (todo.length) {
        const [dst, src] = todo.pop();
        dst.value += src.value; dst.self += src.self;
        for (const c of src.children) todo.push([childNamed(dst, c.name, c.kind), c]);
      }
      callers.value += t.value;
      let cur = callers;
      for (let p = t.parent; p && p.kind !== "root"; p = p.parent) {
        cur = childNamed(cur, p.name, p.kind);
        cur.value += t.value;
      }
    }
    const fixSelf = (n) => {
      const todo = [n];
      while (todo.length) {
        const x = todo.pop();
        x.self = x.value - x.children.reduce((a, c) => a + c.value, 0);
        x.children.sort((a, b) => a.name.localeCompare(b.name));
        todo.push(...x.children);
      }
    };
    fixSelf(callers);
    callees.children.sort((a, b) => a.name.localeCompare(b.name));
    return { callers: prepare(callers), callees: prepare(callees) };
  }

  function showSandwich(name) {
    st.sandwich = name;
    $("sandwich-name").value = name;
    show("sandwich");
  }

  function drawSandwich() {
    const name = st.sandwich;
    if (!name || !st.root) return;
    const t = sandwichTrees(name);
    $("sandwich-info").textContent = `${name}: total ${fmt(t.callees.value)} (${pct(t.callees.value, st.total)}), ` +
      `self ${fmt(t.callees.self)} (${pct(t.callees.self, st.total)})`;
    st.sandwichFrames = {
      callers: render($("callers"), t.callers, false),
      callees: render($("callees"), t.callees, true),
    };
  }

  for (const id of ["callers", "callees"]) {
    $(id).addEventListener("click", (ev) => {
      const f = hit($(id), (st.sandwichFrames || {})[id], ev);
      if (f) showSandwich(f.name);
    });
  }
  $("sandwich-name").addEventListener("change", (e) => showSandwich(e.target.value.trim()));

  function fit(ctx, text, w) {
    if (ctx.measureText(text).width <= w) return text;
    let lo = 0, hi = text.length;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (ctx.measureText(text.slice(0, mid) + "…").width <= w) lo = mid; else hi = mid - 1;
    }
    return lo > 0 ? text.slice(0, lo) + "…" : "";
  }

  const NUMBER = new Intl.NumberFormat(); // one formatter: toLocaleString builds one per call
  // Times and sizes as the text reports show them (crates/render/src/units.rs): three significant
  // digits in the unit that fits (850ns, 12.3µs, 500ms, 1.20s; 512B, 1.50KiB, 12.3MiB).
  function three(x) {
    const a = Math.abs(x);
    return a >= 100 ? x.toFixed(0) : a >= 10 ? x.toFixed(1) : x.toFixed(2);
  }
  function duration(ns) {
    const a = Math.abs(ns);
    // Rounding can carry a value into the next unit (999.6 µs): judge by the rounded value.
    const fits = (v) => three(v).replace("-", "").length <= 4 && Math.abs(v) < 999.5;
    if (a < 1e3) return Math.round(ns) + "ns";
    if (fits(ns / 1e3)) return three(ns / 1e3) + "µs";
    if (fits(ns / 1e6)) return three(ns / 1e6) + "ms";
    if (a < 999.5e9) return three(ns / 1e9) + "s";
    return (ns / 1e9).toFixed(0) + "s";
  }
  function bytes(n) {
    if (Math.abs(n) < 1024) return Math.round(n) + "B";
    const units = [["KiB", 1024], ["MiB", 1048576], ["GiB", 1073741824]];
    for (const [i, [name, size]] of units.entries()) {
      if (Math.abs(n / size) < 999.5 || i === units.length - 1) return three(n / size) + name;
    }
  }
  function fmt(v) {
    if (st.unit === "nanoseconds") return duration(v);
    if (st.unit === "bytes") return bytes(v);
    return NUMBER.format(v) + " " + st.unit;
  }
  function pct(v, of) { return of ? (100 * v / of).toFixed(1) + "%" : "0%"; }

  function breadcrumb() {
    const nav = $("breadcrumb");
    nav.innerHTML = "";
    const path = [];
    for (let n = st.zoom; n; n = n.parent) path.unshift(n);
    path.forEach((n, i) => {
      if (i) nav.append(" › ");
      const a = document.createElement("a");
      a.textContent = n.name; a.tabIndex = 0;
      a.onclick = () => zoomTo(n);
      a.onkeydown = (e) => { if (e.key === "Enter") zoomTo(n); };
      nav.append(a);
    });
  }

  // The share of the zoomed view in frames matching the search (nested matches counted once).
  function matchedValue(root) {
    let sum = 0;
    const todo = [root];
    while (todo.length) {
      const n = todo.pop();
      if (matches(n)) { sum += n.value; continue; }
      for (const c of n.children) todo.push(c);
    }
    return sum;
  }

  function searchInfo() {
    const el = $("match");
    if (!st.search || !st.root) { el.textContent = ""; return; }
    const v = matchedValue(st.zoom);
    el.textContent = `Matched: ${pct(v, st.zoom.value)} (${fmt(v)})`;
    el.dataset.pct = st.zoom.value ? (100 * v / st.zoom.value).toFixed(2) : "0";
  }

  function zoomTo(n) { st.zoom = n; draw(); }

  // The drawn frame under the pointer on `canvas`, of the frames `render` returned for it.
  function hit(canvas, frames, ev) {
    const r = canvas.getBoundingClientRect();
    const x = ev.clientX - r.left, y = ev.clientY - r.top;
    return (frames || []).find((f) => x >= f.x && x < f.x + f.width && y >= f.y && y < f.y + ROW);
  }

  // Shows `title` and `text` by the pointer, or hides the tooltip when there is no title.
  function tooltip(ev, title, text) {
    const tip = $("tooltip");
    if (!title) { tip.hidden = true; return; }
    tip.textContent = "";
    const b = document.createElement("b"); b.textContent = title; tip.append(b);
    tip.append(document.createElement("br"), text);
    tip.style.left = Math.min(ev.clientX + 12, window.innerWidth - 320) + "px";
    tip.style.top = ev.clientY + 14 + "px";
    tip.hidden = false;
  }

  $("flame").addEventListener("click", (ev) => { const f = hit($("flame"), st.frames, ev); if (f) zoomTo(f.node); });
  $("flame").addEventListener("mousemove", (ev) => {
    const f = hit($("flame"), st.frames, ev), n = f && f.node;
    tooltip(ev, n && n.name,
      n && `total ${fmt(n.value)} (${pct(n.value, st.total)}), self ${fmt(n.self)} (${pct(n.self, st.total)})`);
  });
  $("flame").addEventListener("mouseleave", () => { $("tooltip").hidden = true; });

  function setSearch(s) { st.search = s; $("search").value = s; draw(); }
  $("search").addEventListener("input", (e) => { st.search = e.target.value.trim(); draw(); });
  $("search").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && st.search) { const n = heaviest((x) => matches(x)); if (n) zoomTo(n); }
  });
  $("reset").onclick = () => zoomTo(st.root);
  $("icicle").onchange = () => draw();
  window.addEventListener("resize", () => {
    drawTimeline();
    if (st.view === "sandwich") drawSandwich(); else if (st.view === "diff") drawDiff(); else draw();
  });
  document.addEventListener("keydown", (e) => {
    const typing = ["INPUT", "SELECT", "TEXTAREA"].includes(document.activeElement.tagName);
    if (e.key === "/" && !typing) { e.preventDefault(); show("flame"); $("search").focus(); }
    else if (!typing && st.view === "flame" && e.target.tagName !== "A" && e.target.tagName !== "BUTTON"
      && flameKey(e)) e.preventDefault();
    else if (e.key === "Escape") {
      if (typing) document.activeElement.blur();
      if (st.view === "diff" && st.diffRoot) { st.diffZoom = st.diffRoot; drawDiff(); } else if (st.root) zoomTo(st.root);
    }
  });

  function heaviest(pred) {
    let best = null;
    const todo = st.root ? [st.root] : [];
    while (todo.length) {
      const n = todo.pop();
      if (pred(n) && (!best || n.value > best.value)) best = n;
      for (const c of n.children) todo.push(c);
    }
    return best;
  }

  // A function in the flame graph: searched (highlighted) and zoomed to its heaviest stack.
  function showFunction(name) {
    show("flame");
    setSearch(name);
    const n = heaviest((x) => x.name === name);
    if (n) zoomTo(n);
  }

  // ---- table ----------------------------------------------------------------------------------------
  function renderTable() {
    const body = document.querySelector("#fn-table tbody");
    const filter = $("filter").value.trim().toLowerCase();
    const { key, desc } = st.sort;
    const rows = st.fns.filter((f) => !filter || f.name.toLowerCase().includes(filter));
    rows.sort((a, b) => {
      const c = key === "name" ? a.name.localeCompare(b.name) : a[key] - b[key];
      return desc ? -c : c;
    });
    body.innerHTML = "";
    for (const f of rows.slice(0, 500)) {
      const tr = document.createElement("tr");
      for (const [v, cls] of [[f.name, ""], [fmt(f.self), "num"], [pct(f.self, st.total), "num"],
        [fmt(f.total), "num"], [pct(f.total, st.total), "num"]]) {
        const td = document.createElement("td");
        td.textContent = v; td.title = v; if (cls) td.className = cls;
        tr.append(td);
      }
      tr.dataset.name = f.name;
      tr.onclick = () => showFunction(f.name);
      const sw = document.createElement("button");
      sw.className = "sw"; sw.textContent = "sandwich"; sw.title = "callers and callees of " + f.name;
      sw.onclick = (e) => { e.stopPropagation(); showSandwich(f.name); };
      tr.firstChild.prepend(sw);
      body.append(tr);
    }
    document.querySelectorAll("#fn-table th[data-sort]").forEach((th) => {
      th.setAttribute("aria-sort", th.dataset.sort === key ? (desc ? "descending" : "ascending") : "none");
    });
  }
  document.querySelectorAll("#fn-table th[data-sort]").forEach((th) => {
    th.tabIndex = 0;
    const sort = () => {
      const k = th.dataset.sort;
      st.sort = { key: k, desc: st.sort.key === k ? !st.sort.desc : k !== "name" };
      renderTable();
    };
    th.onclick = sort;
    th.onkeydown = (e) => { if (e.key === "Enter") sort(); };
  });
  $("filter").addEventListener("input", renderTable);

  // ---- doctor ---------------------------------------------------------------------------------------
  async function loadDoctor() {
    const el = $("doctor");
    const r = st.target && shownRange();
    if (!r) return;
    el.textContent = "Diagnosing…";
    let d;
    try { d = await api("/api/v1/doctor?" + q({ target: st.target.id, from: r.from, until: r.until, ...filterParams() })); }
    catch (e) { el.textContent = e.message; return; }
    el.innerHTML = "";
    const names = st.fns.filter((f) => f.name.length >= 3).sort((a, b) => b.total - a.total);
    const link = (name) => {
      const a = document.createElement("a");
      a.className = "fn"; a.textContent = name; a.tabIndex = 0;
      a.onclick = () => showFunction(name);
      a.onkeydown = (e) => { if (e.key === "Enter") showFunction(name); };
      return a;
    };
    if (!d.findings.length) el.append(Object.assign(document.createElement("p"), { textContent: "No known anti-pattern found." }));
    for (const f of d.findings) {
      const box = document.createElement("article");
      box.className = "finding"; box.dataset.id = f.id;
      const h = document.createElement("h3");
      h.textContent = `${f.title} — ${f.impact_pct.toFixed(1)}% of ${f.impact_of} (${f.confidence} confidence) [${f.id}]`;
      box.append(h);
      const ul = document.createElement("ul");
      for (const e of f.evidence) { const li = document.createElement("li"); li.textContent = e; ul.append(li); }
      box.append(ul);
      for (const [k, v] of [["Why", f.why], ["Fix", f.fix], ["Verify", f.verify]]) {
        const p = document.createElement("p"); const b = document.createElement("b");
        b.textContent = k + ": "; p.append(b, v); box.append(p);
      }
      const text = [f.title, ...f.evidence].join(" ");
      const fns = names.filter((n) => text.includes(n.name)).slice(0, 6);
      if (fns.length) {
        const p = document.createElement("p"); p.append("In the flame graph: ");
        for (const n of fns) p.append(link(n.name));
        box.append(p);
      }
      el.append(box);
    }
    if (d.hot_paths && d.hot_paths.length) {
      const h = document.createElement("h3"); h.textContent = "Hot paths"; el.append(h);
      const ul = document.createElement("ul");
      for (const hp of d.hot_paths) {
        const li = document.createElement("li");
        li.append(`${hp.pct.toFixed(1)}% of ${hp.of}: ${hp.frames.slice(0, -1).join(" → ")} → `);
        li.append(link(hp.frames[hp.frames.length - 1]));
        ul.append(li);
      }
      el.append(ul);
    }
  }

  // ---- diff -----------------------------------------------------------------------------------------
  async function loadDiff() {
    const el = $("diff");
    const b = st.targets.find((t) => String(t.id) === $("diff-before").value);
    const a = st.targets.find((t) => String(t.id) === $("diff-after").value);
    if (!b || !a) { el.textContent = "Pick two targets (or open two recordings with whyslow view)."; return; }
    // Two ranges of one target: the baseline set on the timeline (before) and the range shown now (after).
    const ranges = st.base && st.base.target === b.id && b.id === a.id && st.target.id === b.id;
    const rb = ranges ? st.base.range : rangeOf(b), ra = ranges ? shownRange() : rangeOf(a);
    if (!rb || !ra) { el.textContent = "A target has no recorded windows."; return; }
    const params = { target: b.id, after_target: a.id, type: st.type, before_from: rb.from, before_until: rb.until,
      after_from: ra.from, after_until: ra.until, ...(ranges ? filterParams() : {}), ...sliceParams() };
    $("diff-ranges").textContent = ranges
      ? `${targetLabel(b)}: ${st.base.label} (before) vs ${rangeLabel(st.sel)} (after)`
      : "whole ranges (set a baseline on the timeline to compare two ranges of one target)";
    el.textContent = "Comparing…";
    st.diff = null; st.diffRoot = null;
    let d, t;
    try {
      [d, t] = await Promise.all([api("/api/v1/diff?" + q(params)), api("/api/v1/diff?" + q({ ...params, format: "tree" }))]);
    } catch (e) { el.textContent = e.message; return; }
    el.innerHTML = "";
    const p = document.createElement("p");
    p.textContent = `before: ${d.before.total} samples, after: ${d.after.total}. Widths: after; red grew, blue ` +
      `shrank (in ${t.unit}); click zooms, Esc unzooms.`;
    el.append(p);
    const wrap = document.createElement("div");
    wrap.className = "canvas-wrap";
    const canvas = document.createElement("canvas");
    canvas.id = "diff-flame";
    wrap.append(canvas); el.append(wrap);
    st.diffUnit = t.unit;
    st.diffRoot = prepare(diffNodes(t.tree));
    st.diffZoom = st.diffRoot;
    drawDiff();
    canvas.addEventListener("click", (ev) => { const f = hit(canvas, st.diffFrames, ev); if (f) { st.diffZoom = f.node; drawDiff(); } });
    canvas.addEventListener("mousemove", (ev) => {
      const f = hit(canvas, st.diffFrames, ev);
      const n = f && f.node;
      tooltip(ev, n && n.name, n && `total: before ${diffNum(n.before)}, after ${diffNum(n.after)} ` +
        `(${diffNum(n.after - n.before, true)}); self: ${diffNum(n.before_self)} → ${diffNum(n.after_self)} ` +
        `(${diffNum(n.after_self - n.before_self, true)})`);
    });
    canvas.addEventListener("mouseleave", () => { $("tooltip").hidden = true; });
    st.diff = d;
    const table = document.createElement("table");
    table.id = "diff-table";
    table.innerHTML = "<thead><tr><th>Function</th><th class=num>Self before</th><th class=num>Self after</th>" +
      "<th class=num>Self delta</th><th class=num>Total delta</th></tr></thead>";
    const body = document.createElement("tbody");
    for (const f of d.functions) {
      const tr = document.createElement("tr");
      tr.className = f.self_delta > 0 || f.total_delta > 0 ? "grew" : f.self_delta < 0 || f.total_delta < 0 ? "shrank" : "";
      tr.dataset.name = f.name;
      // Each number in its unit, the exact value in data-value (and the tooltip).
      for (const [v, signed] of [[f.name, null], [f.self_before, false], [f.self_after, false],
        [f.self_delta, true], [f.total_delta, true]]) {
        const td = document.createElement("td");
        if (signed === null) {
          td.textContent = v;
        } else {
          td.textContent = diffNum(v, signed); td.className = "num";
          td.dataset.value = String(v); td.title = (signed && v > 0 ? "+" : "") + v;
        }
        tr.append(td);
      }
      body.append(tr);
    }
    table.append(body);
    el.append(table);
  }

  // The merged tree drawn with widths from the after side. Colors tell the change of a frame's own (self)
  // time, like inferno's: callers whose callees changed stay neutral; the largest change is the deepest.
  function diffNodes(root) {
    let max = 0;
    const todo = [root];
    while (todo.length) {
      const n = todo.pop();
      n.value = n.after; n.self = n.after_self;
      max = Math.max(max, Math.abs(n.after_self - n.before_self));
      todo.push(...n.children);
    }
    st.diffMax = max;
    return root;
  }

  function diffChange(n) {
    const d = n.after_self - n.before_self;
    return Math.abs(d) <= 1e-9 ? "same" : d > 0 ? "grew" : "shrank";
  }

  function diffColor(n) {
    const c = diffChange(n);
    if (n.kind === "root") return "#b0bec5";
    if (c === "same") return "hsl(0, 0%, 88%)";
    const r = Math.min(1, Math.abs(n.after_self - n.before_self) / (st.diffMax || 1));
    return `hsl(${c === "grew" ? 0 : 215}, 85%, ${Math.round(90 - 38 * r)}%)`;
  }

  function diffNum(v, signed) {
    const s = st.diffUnit === "seconds" ? duration(v * 1e9) : v.toFixed(2) + "%";
    return signed && v > 0 ? "+" + s : s;
  }

  function drawDiff() {
    const c = $("diff-flame");
    if (c && st.diffRoot) st.diffFrames = render(c, st.diffZoom, false, null, diffColor);
  }
  $("diff-run").onclick = loadDiff;

  // ---- processes ------------------------------------------------------------------------------------
  // Shown live: fetched again every few seconds while the view is open.
  async function loadProcesses() {
    const el = $("processes");
    let ps, ts;
    try {
      [ps, ts] = await Promise.all([api("/api/v1/processes"), api("/api/v1/targets?windows=true")]);
    } catch (e) { el.textContent = e.message; return; }
    st.targets = ts;
    st.target = ts.find((t) => st.target && t.id === st.target.id) || st.target;
    st.polls++;
    el.innerHTML = "";
    const when = document.createElement("p");
    when.className = "hint";
    when.textContent = `Live: updated ${new Date().toLocaleTimeString()}, every ${PROCESS_POLL_MS / 1000} s.`;
    el.append(when);
    const h = document.createElement("h3"); h.textContent = "Targets"; el.append(h);
    const ul = document.createElement("ul");
    for (const t of st.targets) {
      const li = document.createElement("li");
      li.textContent = `${targetLabel(t)}: ${JSON.stringify(t.match)}, ${(t.windows || {}).count || 0} windows stored`;
      ul.append(li);
    }
    el.append(ul);
    const h2 = document.createElement("h3"); h2.textContent = `Processes followed now (${ps.length})`; el.append(h2);
    const ul2 = document.createElement("ul");
    for (const p of ps) {
      const li = document.createElement("li");
      li.textContent = `${p.pid} ${p.comm} (targets ${p.targets.join(",")}, ${p.sources}, ${p.followed}): ${p.cmdline}`;
      li.dataset.pid = p.pid;
      ul2.append(li);
    }
    el.append(ul2);
  }

  const PROCESS_POLL_MS = 3000;
  setInterval(() => { if (st.view === "processes" && !document.hidden) loadProcesses(); }, PROCESS_POLL_MS);

  // ---- tabs and selectors ---------------------------------------------------------------------------
  function show(view) {
    st.view = view;
    document.querySelectorAll("#tabs button").forEach((b) => b.setAttribute("aria-selected", b.dataset.view === view));
    document.querySelectorAll(".view").forEach((s) => { s.hidden = s.id !== "view-" + view; });
    if (view === "flame") draw();
    if (view === "sandwich") drawSandwich();
    if (view === "doctor") loadDoctor();
    if (view === "diff") loadDiff();
    if (view === "processes") loadProcesses();
  }
  document.querySelectorAll("#tabs button").forEach((b) => { b.onclick = () => show(b.dataset.view); });
  $("target").onchange = () => {
    st.target = st.targets.find((t) => String(t.id) === $("target").value);
    st.type = null; st.sel = null; $("thread").value = ""; loadProfile();
  };
  $("type").onchange = () => { st.type = $("type").value; loadProfile(); };
  $("range").onchange = () => { st.sel = null; st.base = null; loadProfile(); };
  $("thread").onchange = () => loadProfile();
  // A pattern is sent when typed out (Enter or leaving the field), not at every key.
  for (const id of ["focus", "ignore", "no-kernel"]) $(id).onchange = () => loadProfile();

  window.whyslow = {
    get ready() { return st.ready; },
    // The value of the samples the views show (the selected range, the thread filter).
    get total() { return st.total; },
    // Trees loaded so far (each selection and filter change loads one).
    get loads() { return st.loads; },
    focused: () => (st.focus ? st.focus.name : null),
    // The totals of the diff shown ({before, after}), null while it loads.
    diffTotals: () => (st.diff ? { before: st.diff.before.total, after: st.diff.after.total } : null),
    // The diff flame graph's drawn frames: like frames(), with total and self before and after (the diff's
    // unit), the change of self (grew, shrank, same) and the fill color.
    diffFrames: () => (st.diff ? (st.diffFrames || []).map((f) => ({ name: f.name, x: f.x, y: f.y, width: f.width,
      depth: f.depth, before: f.node.before, after: f.node.after, before_self: f.node.before_self,
      after_self: f.node.after_self, change: diffChange(f.node), color: diffColor(f.node) })) : []),
    // How often the Processes view was fetched (it refreshes every few seconds while shown).
    get polls() { return st.polls; },
    // The findings track's data ({findings, regressions} as the API gave them), null when there is none.
    findings: () => st.findings,
    // The threads of the whole range, {pid, tid, name, value} each, largest first.
    threads: () => (st.timeline ? st.timeline.threads : []),
    // The timeline: its slices (per slice, of the whole range) and the selected ones [i, j) or null.
    timeline: () => (st.timeline ? { values: st.timeline.values.slice(), sel: st.sel && st.sel.slice() } : null),
    // Drawn frames in canvas pixels: x, y (top of the row), width, depth (root 0), matched by the search.
    frames: () => st.frames.map((f) => ({ name: f.name, x: f.x, y: f.y, width: f.width, depth: f.depth, matched: f.matched })),
    zoomed: () => (st.zoom ? st.zoom.name : null),
    showFunction,
    showSandwich,
    // The sandwich view's drawn frames: {callers: [...], callees: [...]} like frames().
    sandwichFrames: () => {
      const strip = (fs) => (fs || []).map((f) => ({ name: f.name, x: f.x, y: f.y, width: f.width, depth: f.depth }));
      const s = st.sandwichFrames || {};
      return { callers: strip(s.callers), callees: strip(s.callees) };
    },
    search: setSearch,
  };

  loadTargets().catch((e) => status(e.message));
})();
