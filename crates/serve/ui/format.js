// Numbers as the text reports show them (crates/render/src/units.rs): times and sizes with three
// significant digits in the unit that fits (850ns, 12.3µs, 500ms, 1.20s; 512B, 1.50KiB, 12.3MiB).
import { st } from "./state.js";

const NUMBER = new Intl.NumberFormat(); // one formatter: toLocaleString builds one per call

function three(x) {
  const a = Math.abs(x);
  return a >= 100 ? x.toFixed(0) : a >= 10 ? x.toFixed(1) : x.toFixed(2);
}

export function duration(ns) {
  const a = Math.abs(ns);
  // Rounding can carry a value into the next unit (999.6 µs): judge by the rounded value.
  const fits = (v) => three(v).replace("-", "").length <= 4 && Math.abs(v) < 999.5;
  if (a < 1e3) return Math.round(ns) + "ns";
  if (fits(ns / 1e3)) return three(ns / 1e3) + "µs";
  if (fits(ns / 1e6)) return three(ns / 1e6) + "ms";
  if (a < 999.5e9) return three(ns / 1e9) + "s";
  return (ns / 1e9).toFixed(0) + "s";
}

export function bytes(n) {
  if (Math.abs(n) < 1024) return Math.round(n) + "B";
  const units = [["KiB", 1024], ["MiB", 1048576], ["GiB", 1073741824]];
  for (const [i, [name, size]] of units.entries()) {
    if (Math.abs(n / size) < 999.5 || i === units.length - 1) return three(n / size) + name;
  }
}

// A value of the shown sample type, in its unit.
export function fmt(v) {
  if (st.unit === "nanoseconds") return duration(v);
  if (st.unit === "bytes") return bytes(v);
  return NUMBER.format(v) + " " + st.unit;
}

export function pct(v, of) { return of ? (100 * v / of).toFixed(1) + "%" : "0%"; }
