// Flame graphs on a canvas: the profile tree as the API sends it, its layout, drawing, and hit-testing.
// Also the trees drawn from it (a function's callers and callees for the sandwich view).
import { $, st } from "./state.js";

export const ROW = 18; // px per frame row
const MIN_FRAME_PX = 0.4; // narrower frames are not drawn
const LABEL_MIN_PX = 30; // frames narrower than this carry no label
const LABEL_PAD_PX = 3;
const FONT = "12px system-ui, sans-serif";
const ROOT_COLOR = "#b0bec5";
const MATCH_COLOR = "#d81b60";
const TOOLTIP_WIDTH_PX = 320;

// Parent links and depths; iterative (stacks can be thousands deep).
export function prepare(root) {
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
export function decodeTree(d) {
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

export function matches(n) {
  return n.kind !== "root" && n.name.toLowerCase().includes(st.search.toLowerCase());
}

// A frame's fill: by kind, the shade from its name (stable across loads); search matches stand out.
export function color(n) {
  if (st.search && matches(n)) return MATCH_COLOR;
  let h = 0;
  for (let i = 0; i < n.name.length; i++) h = (h * 31 + n.name.charCodeAt(i)) >>> 0;
  const v = (h % 1000) / 1000;
  if (n.kind === "kernel") return `hsl(30, 85%, ${58 + v * 12}%)`;
  if (n.kind === "inlined") return `hsl(180, 55%, ${60 + v * 12}%)`;
  if (n.kind === "root") return ROOT_COLOR;
  return `hsl(${5 + v * 45}, 80%, ${60 + v * 10}%)`;
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
    if (w < MIN_FRAME_PX) continue;
    out.push({ node: n, x, width: w, depth: n.depth });
    let cx = x; // children start at the parent's left edge
    for (const c of n.children) { todo.push([c, cx]); cx += c.value * scale; }
  }
  return out;
}

function fit(ctx, text, w) {
  if (ctx.measureText(text).width <= w) return text;
  let lo = 0, hi = text.length;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (ctx.measureText(text.slice(0, mid) + "…").width <= w) lo = mid; else hi = mid - 1;
  }
  return lo > 0 ? text.slice(0, lo) + "…" : "";
}

// Draws the tree under `zoom` (its ancestors full width) on `canvas`; returns the drawn frames.
export function render(canvas, zoom, icicle, focus, colorOf = color) {
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
  ctx.font = FONT;
  ctx.textBaseline = "middle";
  return frames.map((f) => {
    const y = icicle ? f.depth * ROW : (maxDepth - f.depth) * ROW;
    ctx.fillStyle = colorOf(f.node);
    ctx.fillRect(f.x, y, Math.max(f.width - 0.5, 0.5), ROW - 1);
    if (f.width > LABEL_MIN_PX) {
      ctx.fillStyle = st.search && matches(f.node) ? "#fff" : "#111";
      ctx.fillText(fit(ctx, f.node.name, f.width - 2 * LABEL_PAD_PX), f.x + LABEL_PAD_PX, y + ROW / 2);
    }
    if (f.node === focus) {
      ctx.strokeStyle = "#000"; ctx.lineWidth = 2;
      ctx.strokeRect(f.x + 1, y + 1, Math.max(f.width - 2.5, 1), ROW - 3);
    }
    return { name: f.node.name, x: f.x, y, width: f.width, depth: f.depth, node: f.node,
      matched: !!(st.search && matches(f.node)) };
  });
}

// The drawn frame under the pointer on `canvas`, of the frames `render` returned for it.
export function hit(canvas, frames, ev) {
  const r = canvas.getBoundingClientRect();
  const x = ev.clientX - r.left, y = ev.clientY - r.top;
  return (frames || []).find((f) => x >= f.x && x < f.x + f.width && y >= f.y && y < f.y + ROW);
}

// Shows `title` and `text` by the pointer, or hides the tooltip when there is no title.
export function tooltip(ev, title, text) {
  const tip = $("tooltip");
  if (!title) { tip.hidden = true; return; }
  tip.textContent = "";
  const b = document.createElement("b"); b.textContent = title; tip.append(b);
  tip.append(document.createElement("br"), text);
  tip.style.left = Math.min(ev.clientX + 12, window.innerWidth - TOOLTIP_WIDTH_PX) + "px";
  tip.style.top = ev.clientY + 14 + "px";
  tip.hidden = false;
}

// The heaviest node under `root` that `pred` accepts.
export function heaviest(root, pred) {
  let best = null;
  const todo = root ? [root] : [];
  while (todo.length) {
    const n = todo.pop();
    if (pred(n) && (!best || n.value > best.value)) best = n;
    for (const c of n.children) todo.push(c);
  }
  return best;
}

// ---- sandwich trees: one function's callers (above it) and callees (below it), over all its stacks ----
function outermost(root, name) {
  const out = [];
  const todo = root ? [root] : [];
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

export function sandwichTrees(root, name) {
  const tops = outermost(root, name);
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
