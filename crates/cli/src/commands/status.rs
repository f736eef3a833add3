//! The live status line on stderr while a target runs (progress, the probes' rate and cost), the
//! announcement of an attached run and the -v phase times. It only ever writes to stderr: never to the
//! report, which may be standard output.

use std::io::IsTerminal;
use std::time::Duration;
use whyslow_record::{phases, Observer, Progress, Target};

/// Shows a live status line on a terminal; nothing otherwise. With probes that cost per hit (calls,
/// allocations, syscall counters), the line says their hits per second and what they cost the target.
pub struct StatusLine {
    tty: bool,
    /// Symbolizing ahead (see [`StatusLine::prefetching`]): what to read, then the thread reading it.
    prefetch: Option<(Target, bool)>,
    prefetched: Option<std::thread::JoinHandle<whyslow_symbolize::Prefetch>>,
    /// What the run is doing, first on the line ("recording", "calls", or a phase the run named).
    what: String,
    /// Announce the start of an attached run on stderr, once: "whyslow: {this} pid N (Ctrl-C to stop)".
    announce: Option<&'static str>,
    /// The probes' hits per second: when and at how many hits it was last computed, and the rate.
    rate: Option<(Duration, u64, f64)>,
}

impl StatusLine {
    pub fn new() -> StatusLine {
        StatusLine {
            tty: std::io::stderr().is_terminal(),
            prefetch: None,
            prefetched: None,
            what: "recording".into(),
            announce: None,
            rate: None,
        }
    }

    /// A line never drawn (compare runs its commands many times and prints its own table).
    pub fn silent() -> StatusLine {
        StatusLine { tty: false, ..StatusLine::new() }
    }

    /// A line about `what`, which announces an attached run's start (`doing`, as "counting calls of")
    /// when `attached`.
    pub fn about(mut self, what: &'static str, doing: &'static str, attached: bool) -> StatusLine {
        self.what = what.into();
        self.announce = attached.then_some(doing);
        self
    }

    /// The probes' hits per second, computed again about every second (over the first second, since
    /// the start).
    fn hit_rate(&mut self, elapsed: Duration, hits: u64) -> f64 {
        let since_start = hits as f64 / elapsed.as_secs_f64().max(1e-3);
        let (at, then, rate) = self.rate.unwrap_or((Duration::ZERO, 0, since_start));
        if elapsed.saturating_sub(at) < Duration::from_secs(1) {
            return rate;
        }
        let rate = hits.saturating_sub(then) as f64 / (elapsed - at).as_secs_f64();
        self.rate = Some((elapsed, hits, rate));
        rate
    }

    /// Starts symbolizing on other threads once the run has samples (its first progress with some,
    /// 0.25 s in): the kernel's symbol table (with `kernel`) and the symbols and debug information of
    /// a launched command's files (libc's compressed DWARF alone takes ~25 ms to inflate). A run over
    /// by then, or without samples, reads nothing ahead.
    pub fn prefetching(mut self, target: Target, kernel: bool) -> StatusLine {
        self.prefetch = Some((target, kernel));
        self
    }

    /// What was read ahead (nothing if the prefetch never started).
    pub fn prefetched(&mut self) -> whyslow_symbolize::Prefetch {
        self.prefetched.take().and_then(|h| h.join().ok()).unwrap_or_default()
    }
}

impl Observer for StatusLine {
    fn progress(&mut self, p: &Progress) {
        // Progress comes every 0.25 s of a run, and once at its end (too late to read ahead).
        if p.samples > 0 && p.elapsed >= Duration::from_millis(250) {
            if let Some((target, kernel)) = self.prefetch.take() {
                self.prefetched = Some(std::thread::spawn(move || {
                    let files: Vec<String> = match target {
                        Target::Launch(_) => whyslow_record::calls::target_modules(&target)
                            .unwrap_or_default()
                            .iter()
                            .filter_map(|m| std::fs::canonicalize(m).ok())
                            .map(|m| m.to_string_lossy().into_owned())
                            .collect(),
                        _ => Vec::new(),
                    };
                    whyslow_symbolize::Prefetch::start(&files, kernel.then_some(""))
                }));
            }
        }
        if self.tty {
            let mut line = format!("{}: {:6.1}s", self.what, p.elapsed.as_secs_f64());
            if p.samples > 0 || p.probes.is_none() {
                line += &format!("  {} samples  {} lost", p.samples, p.lost);
            }
            if let Some(load) = &p.probes {
                let rate = self.hit_rate(p.elapsed, load.hits);
                line += &format!("  {}", probe_cost_line(rate, load));
            }
            eprint!("\r\x1b[2K{line}");
        }
    }

    fn started(&mut self, pids: &[u32]) {
        if let Some(doing) = self.announce.take() {
            announce(doing, pids);
        }
    }

    fn phase(&mut self, name: &str) {
        self.what = name.to_string();
        if self.tty {
            eprint!("\r\x1b[2K{name}...");
        }
    }
}

/// What the probes cost, for the live line: `204.1k hits/s, probes ~1.20s of the target's 1.90s of CPU
/// (~2.7x slower)`; the slowdown is the probes' time over the rest of the target's CPU time (a hit's
/// time is the thread's own).
fn probe_cost_line(hits_per_s: f64, load: &whyslow_record::ProbeLoad) -> String {
    let rate = match hits_per_s {
        r if r >= 1e6 => format!("{:.2}M", r / 1e6),
        r if r >= 1e3 => format!("{:.1}k", r / 1e3),
        r => format!("{r:.0}"),
    };
    let rate = if load.stopped { "stopped at the budget".to_string() } else { format!("{rate} hits/s") };
    let seconds = |ns: u64| whyslow_render::units::duration(ns as i64);
    let own = load.target_cpu_ns.saturating_sub(load.cost_ns);
    let slower = match load.cost_ns as f64 / own.max(1) as f64 {
        _ if load.target_cpu_ns == 0 => return format!("{rate}, probes ~{} so far", seconds(load.cost_ns)),
        _ if own == 0 => "nearly all of it: many times slower".to_string(),
        s if s < 1.0 => format!("~{:.0}% slower", s * 100.0),
        s => format!("~{:.1}x slower", 1.0 + s),
    };
    format!(
        "{rate}, probes ~{} of the target's {} of CPU ({slower})",
        seconds(load.cost_ns),
        seconds(load.target_cpu_ns)
    )
}

pub fn end_status_line() {
    if std::io::stderr().is_terminal() {
        eprint!("\r\x1b[2K");
    }
}

/// Says on stderr what a command wrote and what to run next, folded to the terminal's width (110
/// columns when stderr is no terminal): "whyslow: wrote whyslow.data; next: `whyslow report ...`".
pub fn wrote(what: &str) {
    let width = match super::output::terminal_size() {
        Some((_, cols)) if std::io::stderr().is_terminal() => cols,
        _ => whyslow_render::fit::WIDTH,
    };
    for line in whyslow_render::fit::wrap("whyslow: ", what, width, None) {
        eprintln!("{line}");
    }
}

/// `-v`: the wall time of each phase so far, one line each, and since whyslow started.
pub fn print_phases() {
    let text = whyslow_render::text::phases(&phases::all(), crate::STARTED.elapsed());
    eprint!("{text}");
}

/// Tells the user (and scripts waiting for it) that counting has begun on attached processes.
/// Says on stderr that an attached run started (as strace and perf say they attached): "whyslow:
/// counting calls of pid 12 (Ctrl-C to stop)".
pub fn announce(doing: &str, pids: &[u32]) {
    let list: Vec<String> = pids.iter().map(u32::to_string).collect();
    match list.is_empty() {
        true => eprintln!("whyslow: {doing} the program (Ctrl-C to stop)"),
        false => eprintln!("whyslow: {doing} pid {} (Ctrl-C to stop)", list.join(",")),
    }
}

#[cfg(test)]
mod tests {
    use super::{probe_cost_line, StatusLine};
    use std::time::Duration;
    use whyslow_record::ProbeLoad;

    /// The live line's cost part: hits per second, the probes' time beside the target's CPU time, and
    /// the slowdown it makes (probe time over the rest of the target's CPU time).
    #[test]
    fn the_live_line_says_hits_per_second_and_the_slowdown() {
        let load = |cost_ms: u64, cpu_ms: u64| ProbeLoad {
            hits: 0,
            cost_ns: cost_ms * 1_000_000,
            target_cpu_ns: cpu_ms * 1_000_000,
            stopped: false,
        };
        assert_eq!(
            probe_cost_line(204_100.0, &load(3310, 3920)),
            "204.1k hits/s, probes ~3.31s of the target's 3.92s of CPU (~6.4x slower)"
        );
        assert_eq!(
            probe_cost_line(950.0, &load(12, 1012)),
            "950 hits/s, probes ~12.0ms of the target's 1.01s of CPU (~1% slower)"
        );
        assert_eq!(probe_cost_line(2.5e6, &load(40, 0)), "2.50M hits/s, probes ~40.0ms so far");
        // The estimate can pass the CPU time read (ticks of 10 ms): then the ratio is not said.
        assert_eq!(
            probe_cost_line(27_300.0, &load(80, 70)),
            "27.3k hits/s, probes ~80.0ms of the target's 70.0ms of CPU (nearly all of it: many times slower)"
        );
        let stopped = ProbeLoad { stopped: true, ..load(30, 500) };
        assert_eq!(
            probe_cost_line(0.0, &stopped),
            "stopped at the budget, probes ~30.0ms of the target's 500ms of CPU (~6% slower)"
        );
    }

    /// The rate is over the first second until there is one, then over each second since the last.
    #[test]
    fn the_hit_rate_is_recomputed_about_every_second() {
        let mut line = StatusLine { tty: false, ..StatusLine::new() };
        let ms = Duration::from_millis;
        assert_eq!(line.hit_rate(ms(250), 1000), 4000.0);
        assert_eq!(line.hit_rate(ms(1000), 2000), 2000.0);
        // Kept until a second more has passed.
        assert_eq!(line.hit_rate(ms(1500), 9000), 2000.0);
        assert_eq!(line.hit_rate(ms(2000), 12000), 10000.0);
    }
}
