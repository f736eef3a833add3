// The timeline (samples per second over the range, drag to select a part of it) and, above it, the
// always-on doctor's findings track.
import { $, st, actions, shownRange, rangeLabel } from "./state.js";
import { api, q } from "./api.js";
import { fmt } from "./format.js";

const HEIGHT_PX = 64;
const CAPTION_PX = 14; // above the bars: the peak rate and the duration
const SELECTED = "#1565c0";
const UNSELECTED = "#b0bec5";
const SELECTION_SHADE = "rgba(21, 101, 192, 0.12)";
const FULL_IMPACT_PCT = 50; // an episode this heavy is drawn fully opaque

export function drawTimeline() {
  const c = $("timeline"), tl = st.timeline;
  const width = c.clientWidth || 800, height = HEIGHT_PX, dpr = window.devicePixelRatio || 1;
  c.width = width * dpr; c.height = height * dpr;
  const ctx = c.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, width, height);
  if (!tl || !tl.values.length) return;
  const n = tl.values.length, bw = width / n, perSec = 1e9 / tl.slice;
  const max = tl.values.reduce((m, v) => Math.max(m, v), 1);
  const inSel = (i) => !st.sel || (i >= st.sel[0] && i < st.sel[1]);
  for (let i = 0; i < n; i++) {
    const h = (height - CAPTION_PX) * tl.values[i] / max;
    ctx.fillStyle = inSel(i) ? SELECTED : UNSELECTED;
    ctx.fillRect(i * bw, height - h, Math.max(bw - (bw > 3 ? 1 : 0), 0.5), h);
  }
  if (st.sel) {
    ctx.fillStyle = SELECTION_SHADE;
    ctx.fillRect(st.sel[0] * bw, 0, (st.sel[1] - st.sel[0]) * bw, height);
  }
  ctx.fillStyle = "#111"; ctx.font = "11px system-ui, sans-serif"; ctx.textBaseline = "top";
  ctx.fillText(`peak ${fmt(Math.round(max * perSec))} per second`, 4, 1);
  const dur = (n * tl.slice / 1e9).toFixed(1) + " s";
  ctx.fillText(dur, width - ctx.measureText(dur).width - 4, 1);
}

// The findings track: one row per rule, a bar per episode (darker with more impact), and the
// regressions (a mark where the change was found; a click compares the two ranges in the Diff view),
// over the timeline's range.
export async function loadFindings() {
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
      seg.style.opacity = (0.35 + 0.65 * Math.min(1, e.peak_impact_pct / FULL_IMPACT_PCT)).toFixed(2);
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
        actions.loadTree();
        actions.show("diff");
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

// Drag on the timeline to select slices; a click without a drag selects everything again.
export function installTimeline() {
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
    if (!moved) st.sel = null;
    if (st.sel && st.sel[0] === 0 && st.sel[1] === st.timeline.values.length) st.sel = null;
    actions.loadTree();
  });
  $("sel-clear").onclick = () => { st.sel = null; actions.loadTree(); };
  $("sel-base").onclick = () => {
    st.base = { target: st.target.id, range: shownRange(), label: rangeLabel(st.sel) };
    $("diff-before").value = $("diff-after").value = st.target.id;
    actions.show("diff");
  };
}
