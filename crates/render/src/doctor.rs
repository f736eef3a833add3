//! The doctor's report: findings first, most impact first, each short enough to read in a terminal;
//! then the hot paths, the rules that could not run, and what the run did. JSON carries the same.

use crate::fit;
use serde::Serialize;
use std::io::Write;
use whyslow_analyze::doctor::{Diagnosis, Finding, HotPath, IdleThread, WallSplit};
use whyslow_model::Profile;

/// How the text report is laid out.
#[derive(Debug, Clone, Copy)]
pub struct TextOptions {
    /// Rows of the hot paths and of the counted calls.
    pub limit: usize,
    /// The widest line: the terminal's width, or [`fit::WIDTH`].
    pub width: usize,
    /// Everything: each finding whole, why rules were not checked, how the probes spent their budget.
    pub verbose: bool,
}

impl TextOptions {
    /// At most `max` lines unless verbose.
    fn lines(&self, max: usize) -> Option<usize> {
        (!self.verbose).then_some(max)
    }
}

/// Writes `text` folded under `label` (see [`fit::wrap`]).
fn wrap(
    w: &mut impl Write,
    label: &str,
    text: &str,
    width: usize,
    max: Option<usize>,
) -> std::io::Result<()> {
    for line in fit::wrap(label, text, width, max) {
        writeln!(w, "{line}")?;
    }
    Ok(())
}

/// A finding in at most 12 lines (whole with `verbose`): the title, its impact, the first evidence
/// (3 lines), why (2), the fix (3) and how to verify it (2).
fn finding(w: &mut impl Write, n: usize, f: &Finding, o: &TextOptions) -> std::io::Result<()> {
    writeln!(w, "{}", fit::clip(&format!("{n}. [{}] {}", f.id, f.title), o.width))?;
    let conf = serde_json::to_value(f.confidence)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let of = match f.impact_of {
        "memory" => "the memory in use at the end",
        "wall" => "wall time",
        "cpus" => "the CPUs it may use",
        _ => "cpu time",
    };
    writeln!(w, "   impact: {:.1}% of {of}, confidence {conf}", f.impact_pct)?;
    let mut evidence: Vec<String> =
        f.evidence.iter().flat_map(|e| fit::wrap("   - ", e, o.width, None)).collect();
    if !o.verbose && evidence.len() > 3 {
        evidence.truncate(3);
        evidence[2] = fit::marked_cut(&evidence[2], o.width);
    }
    for line in evidence {
        writeln!(w, "{line}")?;
    }
    wrap(w, "   why: ", &f.why, o.width, o.lines(2))?;
    wrap(w, "   fix: ", &f.fix, o.width, o.lines(3))?;
    wrap(w, "   verify: ", &f.verify, o.width, o.lines(2))?;
    writeln!(w)
}

/// The text report.
pub fn text(w: &mut impl Write, p: &Profile, d: &Diagnosis, o: &TextOptions) -> std::io::Result<()> {
    let pids: Vec<String> = p.meta.target_pids.iter().map(u32::to_string).collect();
    // Imported profiles name no process.
    let pids = if pids.is_empty() { String::new() } else { format!(" (pid {})", pids.join(",")) };
    // A live investigation's second phase counted calls after the first sampled: both windows, so the
    // header says the time the run took.
    let phase2 = p.meta.notes.iter().any(|n| n.starts_with(whyslow_model::PHASE2_NOTE));
    let took = match (phase2, p.meta.calls_duration_ns) {
        (true, calls) if calls > 0 => format!(
            "{} sampled, then {} counting calls",
            crate::units::duration(p.meta.duration_ns as i64),
            crate::units::duration(calls as i64)
        ),
        _ => crate::units::duration(p.meta.duration_ns as i64),
    };
    let header = format!(
        "{}{pids}, {took}: {} finding{}",
        p.meta.command.join(" "),
        d.findings.len(),
        if d.findings.len() == 1 { "" } else { "s" }
    );
    wrap(w, "whyslow doctor: ", &header, o.width, None)?;
    writeln!(w)?;
    if d.findings.is_empty() {
        writeln!(w, "No known anti-pattern matched. Where the time goes:\n")?;
    }
    for (i, f) in d.findings.iter().enumerate() {
        finding(w, i + 1, f, o)?;
    }
    if let Some(split) = &d.wall {
        wall(w, split, o.width)?;
    }
    if let Some(c) = &d.cpu_contention {
        wrap(w, "waiting for a CPU: ", c, o.width, o.lines(2))?;
        writeln!(w)?;
    }
    if !d.idle_threads.is_empty() {
        idle(w, &d.idle_threads, o)?;
    }
    writeln!(w, "hot paths:")?;
    let of = d.hot_paths.iter().map(|h| h.of.len()).max().unwrap_or(0);
    for h in d.hot_paths.iter().take(o.limit) {
        let row = format!("  {:5.1}% of {:<of$} ", h.pct, h.of);
        let frames: Vec<_> = h.frames.iter().map(|f| crate::short_name(f)).collect();
        let frames: Vec<&str> = frames.iter().map(|f| f.as_ref()).collect();
        writeln!(w, "{row}{}", fit::path(&frames, o.width.saturating_sub(row.chars().count())))?;
    }
    more(w, d.hot_paths.len(), o.limit, "hot paths")?;
    // A function probed but never called in the window is no row (`0 calls 0/s main`); JSON has it.
    let calls: Vec<Counted> = counted_calls(p).into_iter().filter(|c| c.calls > 0).collect();
    if !calls.is_empty() {
        writeln!(
            w,
            "\nexact call counts of the hot functions (over {}):",
            crate::units::seconds(p.meta.calls_seconds())
        )?;
        for c in calls.iter().take(o.limit) {
            let row = format!("  {:>12} calls {:>12.0}/s  {}", c.calls, c.per_s, crate::short_name(&c.name));
            writeln!(w, "{}", fit::clip(&row, o.width))?;
        }
        more(w, calls.len(), o.limit, "functions")?;
    }
    if !d.skipped.is_empty() {
        writeln!(w)?;
        if o.verbose {
            wrap(w, "not checked: ", &d.skipped.join("; "), o.width, None)?;
        } else {
            // Each is `rule: why`; the rules alone here.
            let rules: Vec<&str> =
                d.skipped.iter().map(|s| s.split_once(':').map_or(s.as_str(), |r| r.0)).collect();
            wrap(w, "not checked: ", &format!("{} (-v says why)", rules.join(", ")), o.width, None)?;
        }
    }
    let how = measured(p);
    if !how.is_empty() {
        writeln!(w)?;
        wrap(w, "measured: ", &how.join("; "), o.width, o.lines(1))?;
    }
    if d.instrumentation_pct >= 1.0 {
        writeln!(w)?;
        wrap(
            w,
            "",
            &format!(
                "{:.1}% of CPU samples were whyslow's own probes and are left out of the shares",
                d.instrumentation_pct
            ),
            o.width,
            None,
        )?;
    }
    let lost = p.meta.lost_samples + p.meta.lost_events;
    if lost > 0 {
        wrap(
            w,
            "",
            &format!("{lost} events lost (ring buffers full); exact counters are unaffected"),
            o.width,
            None,
        )?;
    }
    for k in &p.meta.killed {
        wrap(w, "", &k.to_string(), o.width, None)?;
    }
    // How the probes spent their budget is for -v; every other note is one line by default.
    let mut details = 0;
    for n in &p.meta.notes {
        if o.verbose {
            wrap(w, "note: ", n, o.width, None)?;
        } else if whyslow_model::is_detail_note(n) {
            details += 1;
        } else {
            wrap(w, "note: ", n, o.width, Some(1))?;
        }
    }
    if details > 0 {
        writeln!(
            w,
            "({details} note{} on how the probes spent their budget: -v)",
            if details == 1 { "" } else { "s" }
        )?;
    }
    Ok(())
}

/// `  ... 3 more hot paths (--limit)` under a table cut at `limit` of its `rows`.
fn more(w: &mut impl Write, rows: usize, limit: usize, what: &str) -> std::io::Result<()> {
    if rows > limit {
        writeln!(w, "  ... {} more {what} (--limit)", rows - limit)?;
    }
    Ok(())
}

/// "threads' time: 49.2% running, 0.0% blocked, 50.8% waiting for a CPU (4.01 s); 12.00 s idle".
fn wall(w: &mut impl Write, s: &WallSplit, width: usize) -> std::io::Result<()> {
    let working = s.running_ns + s.blocked_ns + s.runnable_ns;
    let pct = |x: i64| if working > 0 { 100.0 * x as f64 / working as f64 } else { 0.0 };
    let mut text = format!(
        "{:.1}% running, {:.1}% blocked, {:.1}% waiting for a CPU (of {})",
        pct(s.running_ns),
        pct(s.blocked_ns),
        pct(s.runnable_ns),
        crate::units::duration(working)
    );
    if s.idle_ns >= 5_000_000 {
        text += &format!(
            "; {} more idle (waiting for work), left out of the shares",
            crate::units::duration(s.idle_ns)
        );
    }
    if s.probe_ns >= 5_000_000 {
        text += &format!(
            "; {} off CPU inside whyslow's probes, left out too",
            crate::units::duration(s.probe_ns)
        );
    }
    wrap(w, "threads' working time: ", &text, width, None)?;
    writeln!(w)
}

/// "3 threads idle: jemalloc_bg_thd (tid 12) in pthread_cond_wait 98%, ...".
fn idle(w: &mut impl Write, threads: &[IdleThread], o: &TextOptions) -> std::io::Result<()> {
    let each: Vec<String> = threads
        .iter()
        .map(|t| {
            let wait = if t.waits_in.is_empty() { String::new() } else { format!(" in {}", t.waits_in) };
            format!("{} (tid {}){wait} {:.0}%", t.name, t.tid, t.idle_pct)
        })
        .collect();
    let n = threads.len();
    let label = format!("{n} thread{} idle: ", if n == 1 { "" } else { "s" });
    wrap(w, &label, &each.join(", "), o.width, o.lines(2))?;
    writeln!(w)
}

/// Which numbers are sampled (with their uncertainty) and which are exact counts over which window.
fn measured(p: &Profile) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(n) = p.cpu_samples() {
        let err = whyslow_analyze::stats::share_error(50.0, n);
        out.push(format!("CPU shares sampled ({n} samples: within ±{err:.1} points, 95%)"));
    }
    if !p.syscalls.is_empty() {
        let m = &p.meta;
        let cost = match m.syscall_cost_ns {
            0 => String::new(),
            ns => format!(
                ", at {} per counted syscall, measured on this run",
                crate::units::duration(ns as i64)
            ),
        };
        out.push(match (m.syscalls_duration_ns, m.syscall_slices.split_first()) {
            (0, _) => "syscall counts exact over the whole run".to_string(),
            (_, Some((first, rest))) if !rest.is_empty() => format!(
                "syscall counts exact over the first {}, then sampled in {} slice{} over the rest of the {} \
                 (the budget{cost}); rates are per second of the {} counted{}",
                crate::units::duration(first.0 as i64),
                rest.len(),
                if rest.len() == 1 { "" } else { "s" },
                crate::units::duration(m.duration_ns as i64),
                crate::units::seconds(m.syscalls_seconds()),
                m.syscall_rate_error()
                    .map_or(String::new(), |e| format!(", within ±{:.0}% (95%)", (e * 100.0).max(1.0)))
            ),
            _ => format!(
                "syscall counts exact over the first {} of {} (the budget stopped the counters{cost}; rates are \
                 per second of that window)",
                crate::units::seconds(m.syscalls_seconds()),
                crate::units::duration(m.duration_ns as i64)
            ),
        });
    }
    if !p.calls.is_empty() || p.sample_type(whyslow_model::sample_types::ALLOC_COUNT).is_some() {
        out.push(format!(
            "call and allocation counts exact over {} (rates per second of that window), their stacks sampled",
            crate::units::seconds(p.meta.calls_seconds())
        ));
    }
    out
}

/// One function counted in the doctor's second phase.
#[derive(Serialize)]
struct Counted {
    name: String,
    calls: u64,
    per_s: f64,
}

/// The counted functions, most calls first.
fn counted_calls(p: &Profile) -> Vec<Counted> {
    let secs = p.meta.calls_seconds().max(1e-9);
    let mut v: Vec<Counted> = whyslow_analyze::call_summary(p)
        .into_iter()
        .map(|r| Counted { per_s: r.stat.calls as f64 / secs, name: r.stat.name, calls: r.stat.calls })
        .collect();
    v.sort_by(|a, b| b.calls.cmp(&a.calls).then(a.name.cmp(&b.name)));
    v
}

#[derive(Serialize)]
struct Json<'a> {
    command: &'a [String],
    duration_s: f64,
    /// The same, exact.
    duration_ns: u64,
    /// The window of the call and allocation counts (a live investigation's phase 2, after
    /// `duration_ns`; else within it); 0 when none were counted.
    calls_duration_ns: u64,
    findings: &'a [Finding],
    hot_paths: &'a [HotPath],
    calls: Vec<Counted>,
    skipped: &'a [String],
    instrumentation_pct: f64,
    wall: Option<&'a WallSplit>,
    idle_threads: &'a [IdleThread],
    cpu_contention: Option<&'a str>,
    /// Which numbers are sampled and which are exact, over which window.
    measured: Vec<String>,
    lost_events: u64,
    killed: &'a [whyslow_model::Killed],
    notes: &'a [String],
}

pub fn json(w: &mut impl Write, p: &Profile, d: &Diagnosis) -> std::io::Result<()> {
    let j = Json {
        command: &p.meta.command,
        duration_s: p.meta.duration_ns as f64 / 1e9,
        duration_ns: p.meta.duration_ns,
        calls_duration_ns: match p.meta.calls_duration_ns {
            0 if !p.calls.is_empty() => p.meta.duration_ns,
            ns => ns,
        },
        findings: &d.findings,
        hot_paths: &d.hot_paths,
        calls: counted_calls(p),
        skipped: &d.skipped,
        instrumentation_pct: (d.instrumentation_pct * 10.0).round() / 10.0,
        wall: d.wall.as_ref(),
        idle_threads: &d.idle_threads,
        cpu_contention: d.cpu_contention.as_deref(),
        measured: measured(p),
        lost_events: p.meta.lost_samples + p.meta.lost_events,
        killed: &p.meta.killed,
        notes: &p.meta.notes,
    };
    serde_json::to_writer_pretty(&mut *w, &j)?;
    writeln!(w)
}

#[cfg(test)]
mod tests {
    use super::TextOptions;
    use crate::fixture::check_golden;
    use whyslow_model::{FrameKind, Metadata, Profile, ProfileBuilder, SampleType, SyscallStat};

    const OPTIONS: TextOptions = TextOptions { limit: 25, width: crate::fit::WIDTH, verbose: false };

    /// A server that stamps log lines with localtime (TZ unset) and commits with fdatasync.
    fn server() -> Profile {
        let meta = Metadata {
            command: vec!["./server".into(), "--port".into(), "9000".into()],
            target_pids: vec![4242],
            duration_ns: 10_000_000_000,
            ..Default::default()
        };
        let types = ["cpu-ns", "offcpu"].map(|n| SampleType { name: n.into(), unit: "nanoseconds".into() });
        let mut b = ProfileBuilder::new(meta, types.to_vec());
        let app = b.module("/srv/server", "");
        let libc = b.module("/usr/lib/x86_64-linux-gnu/libc.so.6", "");
        let k = b.module("[kernel]", "");
        let t = b.thread(4242, 4242, "server");
        let stacks: [(&[&str], i64, i64); 4] = [
            (&["main", "handle", "log_line", "localtime", "__tz_convert", "__tzfile_read"], 3_000_000_000, 0),
            (&["main", "handle", "parse"], 5_000_000_000, 0),
            (&["main", "commit", "fdatasync", "k:__x64_sys_fdatasync", "k:schedule"], 0, 6_000_000_000),
            (&["main", "handle", "render"], 2_000_000_000, 0),
        ];
        for (frames, cpu, off) in stacks {
            let ids: Vec<u32> = frames
                .iter()
                .map(|f| match f.strip_prefix("k:") {
                    Some(kf) => b.frame(kf, k, "", FrameKind::Kernel),
                    None if f.starts_with("__") || ["localtime", "fdatasync"].contains(f) => {
                        b.frame(f, libc, "", FrameKind::User)
                    }
                    None => b.frame(f, app, "server.c", FrameKind::User),
                })
                .collect();
            let s = b.stack(&ids);
            b.add_sample(s, t, &[cpu, off]);
        }
        let mut p = b.finish();
        p.syscalls = vec![
            SyscallStat {
                pid: 4242,
                tid: 4242,
                name: "newfstatat".into(),
                calls: 500_000,
                total_ns: 900_000_000,
                ..Default::default()
            },
            SyscallStat {
                pid: 4242,
                tid: 4242,
                name: "fdatasync".into(),
                calls: 2_000,
                total_ns: 6_000_000_000,
                ..Default::default()
            },
        ];
        p
    }

    #[test]
    fn doctor_report_golden() {
        let p = server();
        let d = whyslow_analyze::doctor::diagnose(&p, "whyslow.data");
        let ids: Vec<&str> = d.findings.iter().map(|f| f.id).collect();
        assert_eq!(ids, ["blocking-io", "hot-logging", "tz-stat-storm"]);
        let mut text = Vec::new();
        super::text(&mut text, &p, &d, &OPTIONS).unwrap();
        check_golden("doctor.txt", &text);
        let mut json = Vec::new();
        super::json(&mut json, &p, &d).unwrap();
        check_golden("doctor.json", &json);
    }

    /// `-v` shows each finding whole, why each rule was not checked and every note; a narrow terminal
    /// gets lines no wider than it, a deep hot path elided in its middle to one line (JSON keeps it all).
    #[test]
    fn verbose_and_narrow_goldens() {
        let mut p = server();
        p.meta.notes.push(format!(
            "{}0.31 us here (measured at the start of the run)",
            whyslow_model::SYSCALL_COST_NOTE
        ));
        p.meta.notes.push("kernel stacks not allowed (perf_event_paranoid): user stacks only".into());
        let mut d = whyslow_analyze::doctor::diagnose(&p, "whyslow.data");
        let deep = [
            "main",
            "ngx_worker_process_cycle",
            "ngx_process_events_and_timers",
            "ngx_epoll_process_events",
            "ngx_http_finalize_request",
            "ngx_http_free_request",
            "ngx_http_log_handler",
            "write",
        ];
        d.hot_paths.insert(
            0,
            whyslow_analyze::doctor::HotPath {
                frames: deep.map(String::from).to_vec(),
                pct: 40.0,
                of: "wall (running)",
            },
        );
        let mut verbose = Vec::new();
        super::text(&mut verbose, &p, &d, &TextOptions { verbose: true, ..OPTIONS }).unwrap();
        check_golden("doctor-verbose.txt", &verbose);
        let mut narrow = Vec::new();
        super::text(&mut narrow, &p, &d, &TextOptions { width: 72, ..OPTIONS }).unwrap();
        let text = String::from_utf8(narrow.clone()).unwrap();
        assert!(text.lines().all(|l| l.chars().count() <= 72), "{text}");
        assert!(text.contains("main > … > ngx_http_log_handler > write\n"), "{text}");
        assert!(text.contains("note: kernel stacks not allowed") && !text.contains("0.31 us"), "{text}");
        assert!(text.contains("(1 note on how the probes spent their budget: -v)"), "{text}");
        check_golden("doctor-72.txt", &narrow);
        // Every finding fits in 12 lines (the blank line after it aside).
        for f in text.split("\n\n").filter(|b| b.starts_with(|c: char| c.is_ascii_digit())) {
            assert!(f.lines().count() <= 12, "{f}");
        }
    }

    /// A live investigation's header names both phases' windows; a probed function never called in
    /// phase 2 is no row of the text (JSON keeps it).
    #[test]
    fn phase_windows_in_the_header_and_no_zero_rows() {
        let mut p = server();
        p.meta.notes.push(format!(
            "{}the allocation functions and 2 hot functions counted",
            whyslow_model::PHASE2_NOTE
        ));
        p.meta.calls_duration_ns = 1_500_000_000;
        let stat = |name: &str, calls| whyslow_model::CallStat {
            pid: 4242,
            name: name.into(),
            group: name.into(),
            calls,
            ..Default::default()
        };
        p.calls = vec![stat("parse", 3000), stat("main", 0)];
        let d = whyslow_analyze::doctor::diagnose(&p, "whyslow.data");
        let mut text = Vec::new();
        super::text(&mut text, &p, &d, &OPTIONS).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.starts_with(
                "whyslow doctor: ./server --port 9000 (pid 4242), 10.0s sampled, then 1.50s counting calls: "
            ),
            "{text}"
        );
        assert!(text.contains("         3000 calls         2000/s  parse\n"), "{text}");
        assert!(!text.contains(" 0 calls"), "{text}");
        let mut json = Vec::new();
        super::json(&mut json, &p, &d).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(v["calls"].as_array().unwrap().len(), 2, "{v:#}");
        assert_eq!(v["calls_duration_ns"], 1_500_000_000u64);
    }

    /// C++ template arguments are shortened in the text's hot paths (one line each, not five) and kept
    /// whole in JSON.
    #[test]
    fn template_arguments_are_short_in_text_only() {
        let p = server();
        let mut d = whyslow_analyze::doctor::diagnose(&p, "whyslow.data");
        let full = "std::vector<std::pair<int, std::__cxx11::basic_string<char, std::char_traits<char>, \
                    std::allocator<char> > >, std::allocator<std::pair<int, std::__cxx11::basic_string<char, \
                    std::char_traits<char>, std::allocator<char> > > > >::push_back(std::pair<int, \
                    std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > > const&)";
        d.hot_paths.insert(
            0,
            whyslow_analyze::doctor::HotPath {
                frames: vec!["main".into(), full.into()],
                pct: 99.0,
                of: "cpu",
            },
        );
        let mut text = Vec::new();
        super::text(&mut text, &p, &d, &OPTIONS).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains(" main > std::vector<…>::push_back(std::pair<…> const&)\n"), "{text}");
        assert!(!text.contains("basic_string<char"), "{text}");
        let mut json = Vec::new();
        super::json(&mut json, &p, &d).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(v["hot_paths"][0]["frames"][1], full);
    }

    /// Counters that a budget stopped after 0.5 s, then sampled in three slices: the rates read over the
    /// 0.65 s counted, and the measured line says so, with the sampling error of those windows and the
    /// measured price of a syscall; the rules' evidence names the windows too.
    #[test]
    fn sampled_syscall_windows_are_stated() {
        let mut p = server();
        p.meta.syscall_cost_ns = 420;
        p.meta.syscall_slices =
            vec![(500_000_000, 50_000), (50_000_000, 5_000), (50_000_000, 4_000), (50_000_000, 6_000)];
        p.meta.syscalls_duration_ns = 650_000_000;
        let how = super::measured(&p).join("; ");
        let err = p.meta.syscall_rate_error().unwrap() * 100.0;
        assert!(
            how.contains(&format!(
                "syscall counts exact over the first 500ms, then sampled in 3 slices over the rest of the 10.0s \
                 (the budget, at 420ns per counted syscall, measured on this run); rates are per second of the \
                 650ms counted, within ±{err:.0}% (95%)"
            )),
            "{how}"
        );
        let d = whyslow_analyze::doctor::diagnose(&p, "whyslow.data");
        let tz = d.findings.iter().find(|f| f.id == "tz-stat-storm").expect("tz-stat-storm");
        let rate = 500_000.0 / 0.65;
        assert!(
            tz.evidence.iter().any(|e| e.contains(&format!("({rate:.0}/s over 0.65 s counted in 4 windows"))),
            "{:?}",
            tz.evidence
        );
    }
}
