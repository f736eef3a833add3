//! `whyslow top`: the hottest functions of each interval of a live run, and the keys that change what the
//! table shows (like `perf top` and `py-spy top`). The view is plain data: the command reads keys and cuts
//! windows, this module decides what a key does and draws one window's table.

use crate::units::Scale;
use crate::RenderError;
use std::io::Write;
use whyslow_analyze::FunctionStat;
use whyslow_model::{sample_types, Profile};

/// Which column the table is sorted by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Time in the function itself (its innermost frames).
    Self_,
    /// Time in the function and what it calls.
    Total,
}

/// Which time the table weighs functions by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weigh {
    /// On-CPU time.
    Cpu,
    /// Blocked time (recorded with --offcpu).
    OffCpu,
    /// Both (recorded with --offcpu).
    Wall,
}

impl Weigh {
    /// The sample type of a window this weighs by: CPU time in ns where the clock gives it, else the
    /// CPU samples; None when the window has no such type.
    pub fn value(self, p: &Profile) -> Option<usize> {
        match self {
            Weigh::Cpu => p.sample_type(sample_types::CPU_NS).or_else(|| p.sample_type(sample_types::CPU)),
            Weigh::OffCpu => p.sample_type(sample_types::OFFCPU),
            Weigh::Wall => p.sample_type(sample_types::WALL),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Weigh::Cpu => "cpu",
            Weigh::OffCpu => "off-cpu",
            Weigh::Wall => "wall (cpu + off-cpu)",
        }
    }
}

/// What the table shows; keys change it.
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    pub order: Order,
    /// Show kernel frames (else a sample all in the kernel is one `[kernel]` frame).
    pub kernel: bool,
    /// The table stays as it is while windows go on being recorded (and dropped).
    pub frozen: bool,
    pub weigh: Weigh,
    /// Whether off-CPU time was recorded (the weigh key cycles through cpu, off-cpu and wall then).
    pub offcpu: bool,
    /// Rows of the table.
    pub limit: usize,
}

impl Default for View {
    fn default() -> Self {
        View { order: Order::Self_, kernel: true, frozen: false, weigh: Weigh::Cpu, offcpu: false, limit: 25 }
    }
}

/// What the command does after a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Draw the last window again with the view as it is now.
    Redraw,
    /// End the run.
    Quit,
    /// Nothing (a key with no meaning).
    Ignore,
}

/// The keys, as the screen's last line shows them.
pub const KEYS: &str = "keys: s self/total  k kernel frames  o cpu/off-cpu/wall  f freeze  q quit";

impl View {
    /// Applies one key (a byte read from the terminal: Ctrl-C arrives as a signal, not here).
    pub fn key(&mut self, key: u8) -> Action {
        match key {
            b'q' | b'Q' => return Action::Quit,
            b's' | b'S' => {
                self.order = match self.order {
                    Order::Self_ => Order::Total,
                    Order::Total => Order::Self_,
                }
            }
            b'k' | b'K' => self.kernel = !self.kernel,
            b'f' | b'F' | b' ' => self.frozen = !self.frozen,
            b'o' | b'O' if self.offcpu => {
                self.weigh = match self.weigh {
                    Weigh::Cpu => Weigh::OffCpu,
                    Weigh::OffCpu => Weigh::Wall,
                    Weigh::Wall => Weigh::Cpu,
                }
            }
            _ => return Action::Ignore,
        }
        Action::Redraw
    }

    /// The functions of window `p` as this view weighs, slices and sorts them (None: the window has no
    /// such samples), with the total their shares are of.
    pub fn functions(&self, p: &Profile) -> Option<(Vec<FunctionStat>, i64, Scale)> {
        let value = self.weigh.value(p)?;
        let sliced;
        let p = if self.kernel {
            p
        } else {
            sliced = whyslow_analyze::slice::Slice { no_kernel: true, ..Default::default() }.apply(p);
            &sliced
        };
        let mut funcs = whyslow_analyze::program_functions(p, value);
        let key = |f: &FunctionStat| match self.order {
            Order::Self_ => (f.self_, f.total),
            Order::Total => (f.total, f.self_),
        };
        funcs.sort_by(|a, b| key(b).cmp(&key(a)).then(a.name.cmp(&b.name)).then(a.module.cmp(&b.module)));
        let total = p.total(value) - whyslow_analyze::probe_total(p, value);
        Some((funcs, total, Scale::of(&p.sample_types[value].unit)))
    }
}

/// One interval of a run, for the line above its table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    /// When it ended (unix ns).
    pub end_unix_ns: u64,
    /// Since the run started, in seconds, at its end.
    pub elapsed_s: f64,
    /// Its length in seconds.
    pub seconds: f64,
}

/// `14:03:07` (UTC) of a unix time in ns.
fn clock(unix_ns: u64) -> String {
    let s = unix_ns / 1_000_000_000 % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// The line above each table: `whyslow top 14:03:07 UTC +3.0s: interval 1.00s, 998 samples, cpu by self`
/// (the window's CPU samples).
pub fn header(p: &Profile, view: &View, iv: &Interval) -> String {
    let n = p.sample_type(sample_types::CPU).map_or(0, |v| p.total(v));
    let order = match view.order {
        Order::Self_ => "self",
        Order::Total => "total",
    };
    let mut line = format!(
        "whyslow top {} UTC +{:.1}s: interval {:.2}s, {n} samples, {} by {order}",
        clock(iv.end_unix_ns),
        iv.elapsed_s,
        iv.seconds,
        view.weigh.name()
    );
    if !view.kernel {
        line += ", kernel frames hidden";
    }
    if view.frozen {
        line += " [frozen: f to go on]";
    }
    line
}

/// The header line and the table of one window (a line that says so when it has no samples of the view's
/// type).
pub fn table(w: &mut impl Write, p: &Profile, view: &View, iv: &Interval) -> Result<(), RenderError> {
    writeln!(w, "{}", header(p, view, iv))?;
    match view.functions(p) {
        Some((funcs, total, scale)) if total > 0 => {
            crate::text::functions_table(w, &funcs, total, view.limit, scale)?
        }
        _ => writeln!(w, "  no {} samples in this interval", view.weigh.name())?,
    }
    Ok(())
}

/// One window as one line of JSON (NDJSON: a line per refresh), the table's columns with exact values:
/// `{"time_unix_ns", "elapsed_s", "interval_s", "samples", "weigh", "order", "kernel", "sample_type",
/// "unit", "total", "functions": [{"name", "module", "self", "self_pct", "total", "total_pct"}],
/// "more_functions"}`; `functions` is empty (and `sample_type` null) when the window has no samples of
/// the view's type.
pub fn json_line(w: &mut impl Write, p: &Profile, view: &View, iv: &Interval) -> Result<(), RenderError> {
    let samples = p.sample_type(sample_types::CPU).map_or(0, |v| p.total(v));
    let (rows, total, more) = match view.functions(p) {
        Some((funcs, total, _)) => {
            let more = funcs.len().saturating_sub(view.limit);
            let rows: Vec<serde_json::Value> = funcs
                .iter()
                .take(view.limit)
                .map(|f| {
                    serde_json::json!({
                        "name": f.name,
                        "module": f.module,
                        "self": f.self_,
                        "self_pct": crate::pct(f.self_, total),
                        "total": f.total,
                        "total_pct": crate::pct(f.total, total),
                    })
                })
                .collect();
            (rows, total, more)
        }
        None => (Vec::new(), 0, 0),
    };
    let st = view.weigh.value(p).map(|v| &p.sample_types[v]);
    let line = serde_json::json!({
        "time_unix_ns": iv.end_unix_ns,
        "elapsed_s": iv.elapsed_s,
        "interval_s": iv.seconds,
        "samples": samples,
        "weigh": view.weigh.name(),
        "order": match view.order { Order::Self_ => "self", Order::Total => "total" },
        "kernel": view.kernel,
        "sample_type": st.map(|t| t.name.as_str()),
        "unit": st.map(|t| t.unit.as_str()),
        "total": total,
        "functions": rows,
        "more_functions": more,
    });
    serde_json::to_writer(&mut *w, &line).map_err(std::io::Error::from)?;
    writeln!(w)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{header, json_line, table, Action, Interval, Order, View, Weigh};
    use whyslow_model::sample_types;
    use whyslow_model::Profile;
    use whyslow_model::{FrameKind, Metadata, ProfileBuilder, SampleType};

    /// main -> work -> [kernel] write (2 ms, all but its last frame user), main -> work (5 ms),
    /// main -> spin (4 ms): by self, work leads; by total, main; without kernel frames, work's 2 ms in
    /// the kernel become its own.
    fn window() -> Profile {
        let types = vec![
            SampleType { name: sample_types::CPU.into(), unit: "samples".into() },
            SampleType { name: sample_types::CPU_NS.into(), unit: "nanoseconds".into() },
        ];
        let mut b = ProfileBuilder::new(Metadata::default(), types);
        let m = b.module("/bin/app", "");
        let k = b.module("[kernel.kallsyms]", "");
        let t = b.thread(1, 1, "app");
        let main = b.frame("main", m, "", FrameKind::User);
        let work = b.frame("work", m, "", FrameKind::User);
        let spin = b.frame("spin", m, "", FrameKind::User);
        let write = b.frame("ksys_write", k, "", FrameKind::Kernel);
        for (frames, ms) in [(vec![main, work, write], 2), (vec![main, work], 5), (vec![main, spin], 4)] {
            let s = b.stack(&frames);
            b.add_sample(s, t, &[ms, ms * 1_000_000]);
        }
        b.finish()
    }

    fn names(view: &View, p: &Profile) -> Vec<(String, i64, i64)> {
        view.functions(p)
            .unwrap()
            .0
            .into_iter()
            .map(|f| (f.name, f.self_ / 1_000_000, f.total / 1_000_000))
            .collect()
    }

    #[test]
    fn keys_sort_toggle_kernel_freeze_and_quit() {
        let p = window();
        let mut v = View::default();
        let row = |n: &str, s, t| (n.to_string(), s, t);
        assert_eq!(
            names(&v, &p),
            [row("work", 5, 7), row("spin", 4, 4), row("ksys_write", 2, 2), row("main", 0, 11)]
        );
        assert_eq!(v.key(b's'), Action::Redraw);
        assert_eq!(v.order, Order::Total);
        assert_eq!(names(&v, &p)[..2], [row("main", 0, 11), row("work", 5, 7)]);
        assert_eq!(v.key(b's'), Action::Redraw);
        assert_eq!(v.key(b'k'), Action::Redraw);
        assert!(!v.kernel);
        assert_eq!(names(&v, &p), [row("work", 7, 7), row("spin", 4, 4), row("main", 0, 11)]);
        assert_eq!(v.key(b'f'), Action::Redraw);
        assert!(v.frozen);
        assert_eq!(v.key(b' '), Action::Redraw);
        assert!(!v.frozen);
        // Without off-CPU time recorded there is nothing to cycle through.
        assert_eq!(v.key(b'o'), Action::Ignore);
        assert_eq!(v.weigh, Weigh::Cpu);
        v.offcpu = true;
        for want in [Weigh::OffCpu, Weigh::Wall, Weigh::Cpu] {
            assert_eq!(v.key(b'o'), Action::Redraw);
            assert_eq!(v.weigh, want);
        }
        assert_eq!(v.key(b'x'), Action::Ignore);
        assert_eq!(v.key(b'q'), Action::Quit);
    }

    #[test]
    fn a_table_has_its_header_and_its_limit() {
        let p = window();
        let iv = Interval {
            end_unix_ns: 1_700_000_000_000_000_000 + 3_723_000_000_000,
            elapsed_s: 3.04,
            seconds: 1.0,
        };
        let mut v = View { limit: 2, ..View::default() };
        let mut out = Vec::new();
        table(&mut out, &p, &v, &iv).unwrap();
        let text = String::from_utf8(out).unwrap();
        let want = "\
whyslow top 23:15:23 UTC +3.0s: interval 1.00s, 11 samples, cpu by self
  self%   self  total%  total  function  module
 45.45% 5.00ms  63.64% 7.00ms  work      app
 36.36% 4.00ms  36.36% 4.00ms  spin      app
  ... 2 more functions (--limit)
";
        assert_eq!(text, want);
        v.kernel = false;
        v.frozen = true;
        v.order = Order::Total;
        assert_eq!(
            header(&p, &v, &iv),
            "whyslow top 23:15:23 UTC +3.0s: interval 1.00s, 11 samples, cpu by total, kernel frames hidden \
             [frozen: f to go on]"
        );
        // A window without samples of the type weighed says so under its header.
        v.offcpu = true;
        v.weigh = Weigh::OffCpu;
        let mut out = Vec::new();
        table(&mut out, &p, &v, &iv).unwrap();
        assert!(String::from_utf8(out).unwrap().ends_with("\n  no off-cpu samples in this interval\n"));
    }

    /// The JSON line holds the table's rows with exact values, and what was left out.
    #[test]
    fn a_json_line_has_the_tables_columns() {
        let p = window();
        let iv = Interval { end_unix_ns: 7, elapsed_s: 3.0, seconds: 1.0 };
        let v = View { limit: 2, ..View::default() };
        let mut out = Vec::new();
        json_line(&mut out, &p, &v, &iv).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.matches('\n').count(), 1);
        let j: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            j,
            serde_json::json!({
                "time_unix_ns": 7, "elapsed_s": 3.0, "interval_s": 1.0, "samples": 11, "weigh": "cpu",
                "order": "self", "kernel": true, "sample_type": "cpu-ns", "unit": "nanoseconds",
                "total": 11_000_000, "more_functions": 2,
                "functions": [
                    {"name": "work", "module": "/bin/app", "self": 5_000_000, "self_pct": 100.0 * 5e6 / 11e6,
                     "total": 7_000_000, "total_pct": 100.0 * 7e6 / 11e6},
                    {"name": "spin", "module": "/bin/app", "self": 4_000_000, "self_pct": 100.0 * 4e6 / 11e6,
                     "total": 4_000_000, "total_pct": 100.0 * 4e6 / 11e6},
                ],
            })
        );
        let off = View { offcpu: true, weigh: Weigh::OffCpu, ..v };
        let mut out = Vec::new();
        json_line(&mut out, &p, &off, &iv).unwrap();
        let j: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            (&j["functions"], &j["sample_type"], &j["total"]),
            (&serde_json::json!([]), &serde_json::Value::Null, &serde_json::json!(0))
        );
    }
}
