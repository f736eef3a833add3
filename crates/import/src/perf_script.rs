//! `perf script` text output in its default format: per sample a header line
//! `comm pid[/tid] [cpu] seconds.micros: [period] event:` (a sample without a call graph has its one frame
//! on the header line), then one indented line per frame, innermost first: `ADDR symbol+0xOFF (dso)`,
//! then a blank line.
//!
//! Threads come from pid/tid and comm; each event is a sample type. The on-CPU events (cpu-clock,
//! task-clock, cycles, ...) of a file with only one event become whyslow's own `cpu` samples (+ `cpu-ns`
//! or `cycles` when periods are shown), so the doctor's CPU rules read them. `[unknown]` symbols become
//! `dso+0xADDR` frames (the address is perf's, absolute), never dropped.

use crate::{bounded_sum, source_note, ImportError};
use whyslow_model::{basename, sample_types, FrameKind, Metadata, Profile, ProfileBuilder, SampleType, NONE};

const MAX_DEPTH: usize = 8192;

/// Most events one file may have: every sample has a value per event, so their product is the memory a
/// file takes (20,000 events of one sample each made 3 GB of an 800 KB file).
const MAX_EVENTS: usize = 256;

struct Header<'a> {
    comm: String,
    pid: u32,
    tid: u32,
    time_ns: Option<u64>,
    period: Option<u64>,
    event: &'a str,
    /// What follows the event on the line (tracepoint data, or the frame of a sample without call graph).
    rest: &'a str,
}

/// `12345.678901:` as nanoseconds.
fn time_token(t: &str) -> Option<u64> {
    let (s, frac) = t.strip_suffix(':')?.split_once('.')?;
    if s.is_empty()
        || frac.is_empty()
        || frac.len() > 9
        || !(s.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    let ns: u64 = format!("{frac:0<9}").parse().ok()?;
    s.parse::<u64>().ok()?.checked_mul(1_000_000_000)?.checked_add(ns)
}

/// Splits `s` at its first whitespace run: (token, rest after the whitespace).
fn token(s: &str) -> (&str, &str) {
    let s = s.trim_start();
    match s.find(char::is_whitespace) {
        Some(i) => (&s[..i], s[i..].trim_start()),
        None => (s, ""),
    }
}

fn parse_header(line: &str) -> Option<Header<'_>> {
    if line.starts_with(char::is_whitespace) {
        return None;
    }
    // The comm may contain spaces: find the time token, then read the fields before and after it.
    let mut words: Vec<(usize, &str)> = Vec::new();
    let mut start = None;
    for (i, c) in line.char_indices().chain(std::iter::once((line.len(), ' '))) {
        match (c.is_whitespace(), start) {
            (false, None) => start = Some(i),
            (true, Some(s)) => {
                words.push((s, &line[s..i]));
                start = None;
            }
            _ => {}
        }
    }
    let t = words.iter().position(|(_, w)| time_token(w).is_some())?;
    let time_ns = time_token(words[t].1);
    let mut before = t;
    if before > 0 && words[before - 1].1.starts_with('[') && words[before - 1].1.ends_with(']') {
        before -= 1; // [cpu]
    }
    if before < 2 {
        return None; // comm and pid are both needed
    }
    let ids = words[before - 1].1;
    let (pid, tid) = match ids.split_once('/') {
        Some((p, t)) => (p.parse().ok()?, t.parse().ok()?),
        None => {
            let t: u32 = ids.parse().ok()?;
            (t, t)
        }
    };
    let comm = line[..words[before - 1].0].trim_end().to_string();
    let mut k = t + 1;
    let period = words.get(k).and_then(|(_, w)| w.parse::<u64>().ok());
    if period.is_some() {
        k += 1;
    }
    let &(at, ev) = words.get(k)?;
    let event = ev.strip_suffix(':')?;
    if event.is_empty() {
        return None;
    }
    // `cycles:P`, `cpu-clock:ppp`: modifiers are not part of the name; `sched:sched_switch` keeps its
    // subsystem.
    let event = match event.rsplit_once(':') {
        Some((name, mods)) if !mods.is_empty() && mods.chars().all(|c| "ukhHGpPIS".contains(c)) => name,
        _ => event,
    };
    let rest = line[at + ev.len()..].trim();
    Some(Header { comm, pid, tid, time_ns, period, event, rest })
}

/// One frame line: `ADDR symbol+0xOFF (dso)`.
struct FrameLine<'a> {
    addr: u64,
    symbol: &'a str,
    dso: &'a str,
}

fn parse_frame(line: &str) -> Option<FrameLine<'_>> {
    let (addr, rest) = token(line);
    let addr = u64::from_str_radix(addr, 16).ok()?;
    let rest = rest.trim_end();
    let (symbol, dso) = match rest.strip_suffix(')').and_then(|r| r.rfind(" (").map(|i| (r, i))) {
        Some((r, i)) => (r[..i].trim(), &r[i + 2..]),
        None if rest.starts_with('(') && rest.ends_with(')') => ("", &rest[1..rest.len() - 1]),
        None => (rest, ""),
    };
    // `burn_a+0x19`: the offset into the function is not part of its name.
    let symbol = match symbol.rsplit_once("+0x") {
        Some((s, off)) if !s.is_empty() && u64::from_str_radix(off, 16).is_ok() => s,
        _ => symbol,
    };
    Some(FrameLine { addr, symbol, dso })
}

/// Whether the first line that is not a `#` comment is a sample header.
pub(crate) fn looks_like(bytes: &[u8]) -> bool {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(64 * 1024)]);
    text.lines()
        .map(|l| l.trim_end_matches('\r'))
        .find(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .is_some_and(|l| parse_header(l).is_some())
}

/// Events whose samples are on-CPU time.
const CPU_EVENTS: [&str; 6] =
    ["cpu-clock", "task-clock", "cycles", "cpu-cycles", "ref-cycles", "instructions"];

/// Parses `perf script` output; `origin` names the source.
pub fn parse(text: &str, origin: &str) -> Result<Profile, ImportError> {
    let err = |line: usize, what: &str| ImportError::PerfScript {
        origin: origin.to_string(),
        line,
        what: what.into(),
    };
    let lines = || text.lines().map(|l| l.trim_end_matches('\r')).enumerate();
    let is_header =
        |l: &str| !l.trim().is_empty() && !l.starts_with(char::is_whitespace) && !l.starts_with('#');

    // First pass: which events, and whether perf showed periods (the sample types depend on both).
    let mut events: Vec<String> = Vec::new();
    let mut periods = false;
    for (i, line) in lines().filter(|(_, l)| is_header(l)) {
        let h = parse_header(line).ok_or_else(|| {
            err(i + 1, "not a perf script sample header (`comm pid/tid [cpu] time: period event:`)")
        })?;
        periods |= h.period.is_some();
        if !events.iter().any(|e| e == h.event) {
            if events.len() == MAX_EVENTS {
                return Err(err(i + 1, &format!("more than {MAX_EVENTS} events (the most whyslow reads)")));
            }
            events.push(h.event.to_string());
        }
    }
    if events.is_empty() {
        return Err(ImportError::Unknown { origin: origin.to_string(), detail: " (no samples)".into() });
    }
    // Per event its sample count, and its summed period when perf showed periods.
    let single_cpu = events.len() == 1 && CPU_EVENTS.contains(&events[0].as_str());
    let mut types = Vec::new();
    for e in &events {
        let clock = e.ends_with("-clock");
        let (count, period) = if single_cpu {
            (
                sample_types::CPU.to_string(),
                if clock { sample_types::CPU_NS } else { sample_types::CYCLES }.to_string(),
            )
        } else {
            (e.clone(), format!("{e}-period"))
        };
        types.push(SampleType { name: count, unit: "samples".into() });
        if periods {
            let unit = if clock { "nanoseconds" } else { "events" };
            types.push(SampleType { name: period, unit: unit.into() });
        }
    }
    let per_event = if periods { 2 } else { 1 };
    let meta = Metadata {
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        command: vec![origin.to_string()],
        event: format!("perf script: {}", events.join(", ")),
        notes: vec![source_note("perf script output", origin)],
        ..Default::default()
    };
    let mut b = ProfileBuilder::new(meta, types);

    // Second pass: the samples.
    let mut frames: Vec<u32> = Vec::new(); // innermost first
    let mut values = vec![0i64; events.len() * per_event];
    let mut totals = values.clone();
    let mut current: Option<u32> = None; // the thread of the sample being read
    let (mut t_min, mut t_max) = (u64::MAX, 0u64);
    let mut cut = 0u64;
    let frame_of = |b: &mut ProfileBuilder, f: &FrameLine| -> u32 {
        let module = match f.dso {
            "" | "[unknown]" => NONE,
            d => b.module(d, ""),
        };
        let (name, kind) = match f.symbol {
            "" | "[unknown]" => {
                let name = match f.dso {
                    "" | "[unknown]" => format!("{:#x}", f.addr),
                    d => format!("{}+{:#x}", basename(d), f.addr),
                };
                (name, FrameKind::Unknown)
            }
            s if f.dso.starts_with("[kernel") || f.dso.starts_with("[guest.kernel") => {
                (s.to_string(), FrameKind::Kernel)
            }
            s => (s.to_string(), FrameKind::User),
        };
        b.frame(&name, module, "", kind)
    };
    let mut finish =
        |b: &mut ProfileBuilder, current: &mut Option<u32>, frames: &mut Vec<u32>, values: &[i64]| {
            if let Some(thread) = current.take() {
                if frames.len() > MAX_DEPTH {
                    frames.truncate(MAX_DEPTH);
                    cut += 1;
                }
                frames.reverse();
                let leaf = b.stack(frames);
                b.add_sample(leaf, thread, values);
            }
            frames.clear();
        };
    for (i, line) in lines() {
        if line.trim().is_empty() {
            finish(&mut b, &mut current, &mut frames, &values);
        } else if line.starts_with(char::is_whitespace) {
            if current.is_none() {
                return Err(err(i + 1, "a frame line outside of a sample"));
            }
            let f = parse_frame(line)
                .ok_or_else(|| err(i + 1, "not a perf script frame (`ADDRESS symbol (module)`)"))?;
            frames.push(frame_of(&mut b, &f));
        } else if !line.starts_with('#') {
            finish(&mut b, &mut current, &mut frames, &values);
            let h = parse_header(line).ok_or_else(|| err(i + 1, "not a perf script sample header"))?;
            if let Some(t) = h.time_ns {
                t_min = t_min.min(t);
                t_max = t_max.max(t);
            }
            let e = events.iter().position(|e| e == h.event).unwrap_or(0);
            values.iter_mut().for_each(|v| *v = 0);
            values[e * per_event] = 1;
            if periods {
                values[e * per_event + 1] = h.period.unwrap_or(0).min(i64::MAX as u64) as i64;
            }
            for (t, &v) in totals.iter_mut().zip(&values) {
                if !bounded_sum(t, v) {
                    return Err(err(i + 1, "the periods overflow"));
                }
            }
            current = Some(b.thread(h.pid, h.tid, &h.comm));
            // Without a call graph the one frame follows the event on the header line.
            if let Some(f) = h.rest.split_once(char::is_whitespace).and_then(|_| parse_frame(h.rest)) {
                frames.push(frame_of(&mut b, &f));
            }
        }
    }
    finish(&mut b, &mut current, &mut frames, &values);
    let m = b.meta_mut();
    // A clock event's period is nanoseconds per sample: its rate is the sampling frequency.
    if single_cpu && periods && events[0].ends_with("-clock") && totals[0] > 0 && totals[1] > 0 {
        m.frequency_hz = (1e9 * totals[0] as f64 / totals[1] as f64).round() as u64;
    }
    if t_max > t_min {
        m.duration_ns = t_max - t_min;
    }
    if cut > 0 {
        m.notes.push(format!("{cut} stacks deeper than {MAX_DEPTH} frames were cut at the root side"));
    }
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::{parse_frame, parse_header};

    #[test]
    fn headers() {
        let h = parse_header("cpu_split  1234/1235 [002] 12345.678901:     250000 cpu-clock:ppp: ").unwrap();
        assert_eq!(
            (h.comm.as_str(), h.pid, h.tid, h.period, h.event),
            ("cpu_split", 1234, 1235, Some(250000), "cpu-clock")
        );
        assert_eq!(h.time_ns, Some(12_345_678_901_000));
        let h = parse_header("Web Content 77 1.5: cycles:P: ").unwrap();
        assert_eq!(
            (h.comm.as_str(), h.pid, h.tid, h.period, h.event),
            ("Web Content", 77, 77, None, "cycles")
        );
        let h = parse_header("sh 9 [000] 2.000001: sched:sched_switch: prev_comm=sh").unwrap();
        assert_eq!((h.event, h.rest), ("sched:sched_switch", "prev_comm=sh"));
        assert!(parse_header("main;f;g 12").is_none());
        assert!(parse_header("\t 55d4 main (/bin/x)").is_none());
    }

    #[test]
    fn frames() {
        let f = parse_frame("\t    55d4c1a2b139 burn_a+0x19 (/w/bin/cpu_split_fp)").unwrap();
        assert_eq!((f.addr, f.symbol, f.dso), (0x55d4c1a2b139, "burn_a", "/w/bin/cpu_split_fp"));
        let f = parse_frame(
            "   7f00 std::vector<int, std::allocator<int> >::push_back(int const&)+0x1 (/lib/a b.so)",
        )
        .unwrap();
        assert_eq!(
            (f.symbol, f.dso),
            ("std::vector<int, std::allocator<int> >::push_back(int const&)", "/lib/a b.so")
        );
        let f = parse_frame("  ffffffff8100 [unknown] ([kernel.kallsyms])").unwrap();
        assert_eq!((f.symbol, f.dso), ("[unknown]", "[kernel.kallsyms]"));
        assert!(parse_frame("  zz main (x)").is_none());
    }
}
