// The views beside the flame graph: top functions, sandwich, doctor, diff, processes.
import { $, st, actions, shownRange, rangeOf, rangeLabel, filterParams, sliceParams, targetLabel } from "./state.js";
import { api, q } from "./api.js";
import { fmt, pct, duration } from "./format.js";
import { prepare, render, hit, tooltip, sandwichTrees } from "./flame.js";

const TABLE_ROWS = 500;
const PROCESS_POLL_MS = 3000;
const DOCTOR_LINKS = 6; // functions of a finding linked to the flame graph

// ---- top functions ----------------------------------------------------------------------------------
export function renderTable() {
  const body = document.querySelector("#fn-table tbody");
  const filter = $("filter").value.trim().toLowerCase();
  const { key, desc } = st.sort;
  const rows = st.fns.filter((f) => !filter || f.name.toLowerCase().includes(filter));
  rows.sort((a, b) => {
    const c = key === "name" ? a.name.localeCompare(b.name) : a[key] - b[key];
    return desc ? -c : c;
  });
  body.innerHTML = "";
  for (const f of rows.slice(0, TABLE_ROWS)) {
    const tr = document.createElement("tr");
    for (const [v, cls] of [[f.name, ""], [fmt(f.self), "num"], [pct(f.self, st.total), "num"],
      [fmt(f.total), "num"], [pct(f.total, st.total), "num"]]) {
      const td = document.createElement("td");
      td.textContent = v; td.title = v; if (cls) td.className = cls;
      tr.append(td);
    }
    tr.dataset.name = f.name;
    tr.onclick = () => actions.showFunction(f.name);
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

// ---- sandwich ---------------------------------------------------------------------------------------
export function showSandwich(name) {
  st.sandwich = name;
  $("sandwich-name").value = name;
  actions.show("sandwich");
}

export function drawSandwich() {
  const name = st.sandwich;
  if (!name || !st.root) return;
  const t = sandwichTrees(st.root, name);
  $("sandwich-info").textContent = `${name}: total ${fmt(t.callees.value)} (${pct(t.callees.value, st.total)}), ` +
    `self ${fmt(t.callees.self)} (${pct(t.callees.self, st.total)})`;
  st.sandwichFrames = {
    callers: render($("callers"), t.callers, false),
    callees: render($("callees"), t.callees, true),
  };
}

// ---- doctor -----------------------------------------------------------------------------------------
export async function loadDoctor() {
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
    a.onclick = () => actions.showFunction(name);
    a.onkeydown = (e) => { if (e.key === "Enter") actions.showFunction(name); };
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
    const fns = names.filter((n) => text.includes(n.name)).slice(0, DOCTOR_LINKS);
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

// ---- diff -------------------------------------------------------------------------------------------
export async function loadDiff() {
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

export function diffChange(n) {
  const d = n.after_self - n.before_self;
  return Math.abs(d) <= 1e-9 ? "same" : d > 0 ? "grew" : "shrank";
}

export function diffColor(n) {
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

export function drawDiff() {
  const c = $("diff-flame");
  if (c && st.diffRoot) st.diffFrames = render(c, st.diffZoom, false, null, diffColor);
}

// ---- processes: shown live, fetched again every few seconds while the view is open --------------------
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

// The views' own controls.
export function installViews() {
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
  for (const id of ["callers", "callees"]) {
    $(id).addEventListener("click", (ev) => {
      const f = hit($(id), (st.sandwichFrames || {})[id], ev);
      if (f) showSandwich(f.name);
    });
  }
  $("sandwich-name").addEventListener("change", (e) => showSandwich(e.target.value.trim()));
  $("diff-run").onclick = loadDiff;
  setInterval(() => { if (st.view === "processes" && !document.hidden) loadProcesses(); }, PROCESS_POLL_MS);
}

export { loadProcesses };
