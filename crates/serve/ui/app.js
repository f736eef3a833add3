// whyslow web UI. Plain JavaScript modules without a bundler or toolchain (see index.html): every view
// reads the service's JSON API (/api/v1/...), the same one scripts use. This module loads the profiles,
// draws the flame graph view, switches views and keeps the view state in the URL (state.js); the other
// views are in views.js, the timeline in timeline.js, the drawing in flame.js.
import { $, st, actions, status, targetLabel, rangeOf, shownRange, rangeLabel, filterParams, sliceParams,
  readUrl, writeUrl, fromUrl, nodeAt } from "./state.js";
import { api, q } from "./api.js";
import { fmt, pct } from "./format.js";
import { decodeTree, render, hit, tooltip, matches, heaviest } from "./flame.js";
import { drawTimeline, loadFindings, installTimeline } from "./timeline.js";
import { renderTable, showSandwich, drawSandwich, loadDoctor, loadDiff, drawDiff, loadProcesses, installViews,
  diffChange, diffColor } from "./views.js";

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
  await applyUrl(readUrl());
  writeUrl(true);
}

// The target, type, range or thread filter changed: the timeline, and the selected range's tree beside
// it (a selection is kept only across a thread filter change, which leaves the slices where they are).
async function loadProfile() {
  const t = st.target;
  const r = rangeOf(t);
  if (!r) { status("No recorded windows of " + targetLabel(t) + " yet."); return; }
  status("");
  await labelOptions();
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
  writeUrl();
}

function shown() {
  const el = $("shown");
  const sliced = $("thread").value || $("labels").value || Object.keys(sliceParams()).length;
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

// The label filter's choices: every cgroup label (unit, container, pod) of the target's processes
// followed now, and the one chosen (its windows stay after its processes exit).
const LABEL_NAMES = { unit: "unit", container_id: "container", pod_uid: "pod" };
async function labelOptions() {
  const sel = $("labels"), keep = sel.value;
  let ps = [];
  try { ps = await api("/api/v1/processes?" + q({ target: st.target.id })); } catch (e) { ps = []; }
  const found = new Map();
  for (const p of ps) {
    for (const [k, v] of Object.entries(p.labels || {})) found.set(k + "=" + v, (found.get(k + "=" + v) || 0) + 1);
  }
  if (keep && !found.has(keep)) found.set(keep, 0);
  sel.innerHTML = "";
  sel.add(new Option("all processes", ""));
  for (const [key, n] of [...found.entries()].sort()) {
    const k = key.slice(0, key.indexOf("=")), v = key.slice(key.indexOf("=") + 1);
    sel.add(new Option(`${LABEL_NAMES[k] || k} ${k === "unit" ? v : v.slice(0, 12)} (${n} followed now)`, key));
  }
  sel.value = keep;
}

// A filter a URL names (thread, labels), before its choices are listed.
function setOption(sel, v) {
  if (v && ![...sel.options].some((o) => o.value === v)) sel.add(new Option(v, v));
  sel.value = v;
}

// ---- the view state in the URL: a link opens the same view, Back returns to the previous one ----------
async function applyUrl(u) {
  await fromUrl(async () => {
    const t = st.targets.find((x) => String(x.id) === u.target) || st.target;
    const reload = !st.root || t !== st.target || (u.range || $("range").value) !== $("range").value
      || (u.type && u.type !== st.type) || u.thread !== $("thread").value || u.labels !== $("labels").value
      || String(u.sel) !== String(st.sel) || u.focus !== $("focus").value.trim()
      || u.ignore !== $("ignore").value.trim() || u.noKernel !== $("no-kernel").checked;
    st.target = t; $("target").value = t.id;
    if (u.range) $("range").value = u.range;
    if (u.type) st.type = u.type;
    setOption($("thread"), u.thread);
    setOption($("labels"), u.labels);
    $("focus").value = u.focus; $("ignore").value = u.ignore; $("no-kernel").checked = u.noKernel;
    if (reload) {
      st.sel = null;
      await loadProfile();
      const n = st.timeline ? st.timeline.values.length : 0;
      if (u.sel && u.sel[1] <= n) { st.sel = u.sel; await loadTree(); }
    }
    if (u.search !== st.search) { st.search = u.search; $("search").value = u.search; }
    st.zoom = nodeAt(st.root, u.zoom) || st.root;
    show(u.view || "flame");
  });
}
window.addEventListener("popstate", () => { if (st.targets.length) applyUrl(readUrl()); });

// ---- flame graph ----------------------------------------------------------------------------------
function draw() {
  st.frames = render($("flame"), st.root && st.zoom, $("icicle").checked, st.focus);
  breadcrumb(); searchInfo(); focusInfo();
}

function zoomTo(n) { st.zoom = n; draw(); writeUrl(); }

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

function setSearch(s) { st.search = s; $("search").value = s; draw(); writeUrl(true); }

// A function in the flame graph: searched (highlighted) and zoomed to its heaviest stack.
function showFunction(name) {
  show("flame");
  setSearch(name);
  const n = heaviest(st.root, (x) => x.name === name);
  if (n) zoomTo(n);
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
    const drawn = st.focus && st.frames.some((f) => f.node === st.focus);
    const next = drawn ? moveFocus(e.key) : st.zoom;
    if (next) { st.focus = next; draw(); }
    return true;
  }
  if (e.key === "Enter" && st.focus) { zoomTo(st.focus); return true; }
  return false;
}

// ---- tabs -----------------------------------------------------------------------------------------
function show(view) {
  st.view = view;
  document.querySelectorAll("#tabs button").forEach((b) => b.setAttribute("aria-selected", b.dataset.view === view));
  document.querySelectorAll(".view").forEach((s) => { s.hidden = s.id !== "view-" + view; });
  if (view === "flame") draw();
  if (view === "sandwich") drawSandwich();
  if (view === "doctor") loadDoctor();
  if (view === "diff") loadDiff();
  if (view === "processes") loadProcesses();
  writeUrl();
}

Object.assign(actions, { show, loadTree, showFunction, showSandwich });

// ---- controls -------------------------------------------------------------------------------------
$("flame").addEventListener("click", (ev) => { const f = hit($("flame"), st.frames, ev); if (f) zoomTo(f.node); });
$("flame").addEventListener("mousemove", (ev) => {
  const f = hit($("flame"), st.frames, ev), n = f && f.node;
  tooltip(ev, n && n.name,
    n && `total ${fmt(n.value)} (${pct(n.value, st.total)}), self ${fmt(n.self)} (${pct(n.self, st.total)})`);
});
$("flame").addEventListener("mouseleave", () => { $("tooltip").hidden = true; });
$("search").addEventListener("input", (e) => { st.search = e.target.value.trim(); draw(); writeUrl(true); });
$("search").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && st.search) { const n = heaviest(st.root, (x) => matches(x)); if (n) zoomTo(n); }
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
document.querySelectorAll("#tabs button").forEach((b) => { b.onclick = () => show(b.dataset.view); });
$("target").onchange = () => {
  st.target = st.targets.find((t) => String(t.id) === $("target").value);
  st.type = null; st.sel = null; $("thread").value = ""; $("labels").value = ""; loadProfile();
};
$("labels").onchange = () => { $("thread").value = ""; loadProfile(); };
$("type").onchange = () => { st.type = $("type").value; loadProfile(); };
$("range").onchange = () => { st.sel = null; st.base = null; loadProfile(); };
$("thread").onchange = () => loadProfile();
// A pattern is sent when typed out (Enter or leaving the field), not at every key.
for (const id of ["focus", "ignore", "no-kernel"]) $(id).onchange = () => loadProfile();
installTimeline();
installViews();

// What the browser tests read and drive (tests/ui/test_view.py sets window.whyslowTestHooks before the
// page loads); not part of the shipped page otherwise.
if (window.whyslowTestHooks) {
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
    // The label filter's choices (values: "unit=nginx.service"), "" for all processes.
    labels: () => [...$("labels").options].map((o) => o.value),
    // The timeline: its slices (per slice, of the whole range) and the selected ones [i, j) or null.
    timeline: () => (st.timeline ? { values: st.timeline.values.slice(), sel: st.sel && st.sel.slice() } : null),
    // Drawn frames in canvas pixels: x, y (top of the row), width, depth (root 0), matched by the search.
    frames: () => st.frames.map((f) => ({ name: f.name, x: f.x, y: f.y, width: f.width, depth: f.depth, matched: f.matched })),
    zoomed: () => (st.zoom ? st.zoom.name : null),
    // The view shown (flame, table, sandwich, doctor, diff, processes).
    view: () => st.view,
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
}

loadTargets().catch((e) => status(e.message));
