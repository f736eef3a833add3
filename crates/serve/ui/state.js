// The view's state, the page's controls, and the view state kept in the URL's fragment (target, range,
// type, threads, labels, slicing, view, timeline selection, zoom, search) so a view can be linked and Back goes
// back.
export const $ = (id) => document.getElementById(id);

export const st = {
  targets: [], target: null, type: null, unit: "", total: 0, root: null, zoom: null,
  search: "", frames: [], fns: [], sort: { key: "self", desc: true }, view: "flame", ready: false,
  // The timeline of the whole range ({start, slice: ns, values, threads}), the selected slices [i, j)
  // (null: all), and the range the Diff view compares the selection with.
  timeline: null, sel: null, base: null, seq: 0, loads: 0,
  // The frame the keyboard moves (arrows), zooms to (Enter); null until an arrow is pressed.
  focus: null, polls: 0,
};

// What the views call on each other (filled in by app.js): show(view), loadTree(), showFunction(name),
// showSandwich(name). Kept here so the view modules do not import the module that imports them.
export const actions = {};

export function status(msg) { $("status").textContent = msg || ""; }

export function targetLabel(t) {
  return (t.name || "target " + t.id) + (t.state === "stopped" ? " (stopped)" : "");
}

// The range selector's range of target `t` (null: nothing stored).
export function rangeOf(t) {
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
export function shownRange() {
  const tl = st.timeline;
  if (!st.sel || !tl) return rangeOf(st.target);
  const at = (i) => ((tl.start + (i - 0.5) * tl.slice) / 1e9).toFixed(4);
  return { from: at(st.sel[0]), until: at(st.sel[1]) };
}

export function rangeLabel(sel) {
  const tl = st.timeline;
  if (!sel || !tl) return "the whole range";
  return `${(sel[0] * tl.slice / 1e9).toFixed(1)}–${(sel[1] * tl.slice / 1e9).toFixed(1)} s`;
}

// The thread/process filter and the cgroup label filter as query parameters ({thread: tid} or
// {pid: pid}, and {selector: "unit=nginx.service"}, or none).
export function filterParams() {
  const out = {};
  const v = $("thread").value;
  if (v) {
    const [k, id] = v.split("=");
    out[k] = id;
  }
  if ($("labels").value) out.selector = $("labels").value;
  return out;
}

// Slicing, as report's --focus/--ignore/--no-kernel: the profile endpoints' focus, ignore, no_kernel.
export function sliceParams() {
  const out = {};
  const focus = $("focus").value.trim(), ignore = $("ignore").value.trim();
  if (focus) out.focus = focus;
  if (ignore) out.ignore = ignore;
  if ($("no-kernel").checked) out.no_kernel = 1;
  return out;
}

// ---- the view state in the URL ----------------------------------------------------------------------
// The frames from the root to `n`, without the root: how a zoom is named in the URL (";" between names,
// as in folded stacks).
export function zoomPath(n) {
  const names = [];
  for (; n && n.parent; n = n.parent) names.unshift(n.name);
  return names.join(";");
}

// The node a zoom path names in the tree under `root` (the deepest one found along it).
export function nodeAt(root, path) {
  let n = root;
  for (const name of path ? path.split(";") : []) {
    const c = n && n.children.find((x) => x.name === name);
    if (!c) break;
    n = c;
  }
  return n;
}

// The URL's view state: {target, range, type, thread, labels, view, sel: [i, j] | null, zoom, search, focus,
// ignore, noKernel}.
export function readUrl() {
  const p = new URLSearchParams(location.hash.slice(1));
  const sel = (p.get("sel") || "").split("-").map(Number);
  return {
    target: p.get("target"), range: p.get("range"), type: p.get("type"), thread: p.get("thread") || "",
    labels: p.get("labels") || "",
    view: p.get("view"), zoom: p.get("zoom") || "", search: p.get("search") || "",
    focus: p.get("focus") || "", ignore: p.get("ignore") || "", noKernel: p.get("no_kernel") === "1",
    sel: sel.length === 2 && sel.every(Number.isInteger) && sel[0] < sel[1] ? sel : null,
  };
}

function urlOf() {
  const p = new URLSearchParams();
  const put = (k, v) => { if (v !== null && v !== undefined && v !== "") p.set(k, v); };
  put("target", st.target && st.target.id);
  put("range", $("range").value);
  put("type", st.type);
  put("thread", $("thread").value);
  put("labels", $("labels").value);
  for (const [k, v] of Object.entries(sliceParams())) put(k, v);
  put("view", st.view);
  put("sel", st.sel && st.sel.join("-"));
  put("zoom", zoomPath(st.zoom));
  put("search", st.search);
  return "#" + p.toString();
}

let applying = false;
// Records the view state in the URL: a new history entry when it changed (Back returns to the last), or
// the current entry replaced (`replace`: the first view, a search being typed).
export function writeUrl(replace) {
  if (applying || !st.ready) return;
  const url = urlOf();
  if (url === location.hash) return;
  if (replace) history.replaceState(null, "", url); else history.pushState(null, "", url);
}

// Runs `f` (which sets the state from the URL) without writing the URL back.
export async function fromUrl(f) {
  applying = true;
  try { await f(); } finally { applying = false; }
}
