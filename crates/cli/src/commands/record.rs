//! `whyslow record`: sample a target's CPU time (and on request its blocked time and allocations) with
//! complete stacks, print a summary and save the recording; with --load, a server under a load command.

use super::flags::{
    duration, load_options, parse_budget, probe_budget, target, Budget, LoadArgs, ReportTo, TargetArgs,
    DEFAULT_LIMIT,
};
use super::outcome::{ran, Outcome};
use super::output::{check_writable, Report};
use super::recording::value_index;
use super::status::{end_status_line, print_phases, wrote, StatusLine};
use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;
use whyslow_investigate::goheap::{record_go_heap, GoHeapOptions};
use whyslow_investigate::loadtest::LoadOutput;
use whyslow_model::file;
use whyslow_record::mem::MemOptions;
use whyslow_record::{phases, signals, AllocOptions, Clock, OffCpuOptions, RecordOptions, Target};
use whyslow_render as render;

#[derive(Args)]
pub struct RecordArgs {
    #[command(flatten)]
    pub report: ReportTo,
    #[command(flatten)]
    pub target: TargetArgs,
    /// Sampling frequency in Hz.
    #[arg(short = 'F', long = "freq", default_value_t = 999)]
    pub freq: u64,
    /// Output recording file.
    #[arg(short = 'o', long, default_value = "whyslow.data")]
    pub output: PathBuf,
    /// Sampling clock: `auto` uses hardware cycles where the CPU has them, else cpu-clock.
    #[arg(short = 'e', long, value_enum, default_value_t = EventArg::Auto)]
    pub event: EventArg,
    /// Do not record kernel stacks.
    #[arg(long)]
    pub no_kernel: bool,
    /// Sample on-CPU time (the default when no other source is chosen).
    #[arg(long)]
    pub cpu: bool,
    /// Record blocked time by stack (eBPF at sched_switch): blocks of 1/F or longer as they are, shorter
    /// ones sampled (kept with probability length x F, valued 1/F), so the cost stays bounded.
    #[arg(long)]
    pub offcpu: bool,
    /// With --offcpu: leave out blocks shorter than this many microseconds.
    #[arg(long, default_value_t = 10, value_name = "US")]
    pub min_block_us: u64,
    /// Record allocations (count and bytes) by stack: malloc, calloc, realloc, posix_memalign,
    /// aligned_alloc, memalign (C++ operator new allocates through malloc), Go's runtime.mallocgc.
    #[arg(long)]
    pub alloc: bool,
    /// With --alloc: counts and bytes are exact per call site and stack, counted in the kernel; the stack
    /// of each is copied at its 1st, 2nd, 4th, ... call and then at least every Nth (1: every call).
    #[arg(long, default_value_t = whyslow_record::ALLOC_PERIOD, value_name = "N")]
    pub alloc_period: u64,
    /// Record memory in use by stack: what the target still holds at its end (what a launched command
    /// leaked; of a running process, what it allocated during the run and still holds, with its age), at
    /// its heap's peak and over time (report --type inuse-bytes, peak-bytes, alloc-bytes). A launched
    /// command pairs every allocation and free inside itself (a library it runs with: LD_PRELOAD); a
    /// running process (-p) is probed (uprobes on its allocator, no restart, no stop). A Go program's
    /// heap is its runtime's, not malloc's: give its net/http/pprof address (`--mem
    /// http://HOST:PORT/debug/pprof`, with or without -p PID) and its heap profile is read at the start,
    /// every second and at the end.
    #[arg(long, value_name = "URL", num_args = 0..=1)]
    pub mem: Option<Option<String>>,
    /// With --mem: sample allocations by bytes, one every BYTES on average (as tcmalloc, jemalloc and Go
    /// do), with unbiased estimates; 0 counts every allocation exactly. Default: 0 for a launched
    /// command, 524288 (512 KiB) for a running process.
    #[arg(long, value_name = "BYTES")]
    pub mem_sample: Option<u64>,
    /// With --mem on a running process: stop the probes once their estimated cost (each hit priced as
    /// measured at the start) passes PCT percent of its CPU time, as the doctor does; in use is then as
    /// of that moment. Default 5; `none`: never stop.
    #[arg(long, value_name = "PCT", value_parser = parse_budget)]
    pub budget: Option<Budget>,
    /// Bytes of user stack copied per sample (up to 64 KB more of a deeper thread stack follow; deeper
    /// stacks are cut).
    #[arg(long, default_value_t = 16384)]
    pub stack_size: u32,
    /// Rows of each table of the summary printed at the end.
    #[arg(long, default_value_t = DEFAULT_LIMIT)]
    pub limit: usize,
    /// Do not print the summary at the end.
    #[arg(short, long)]
    pub quiet: bool,
    /// Print the wall time of each phase (eBPF load, perf events, attach, run, symbolize, save) at the
    /// end.
    #[arg(short, long)]
    pub verbose: bool,
    #[command(flatten)]
    pub load: LoadArgs,
}

/// How often a Go heap (`--mem URL`) is read between the start and the end: the series the memory-growth
/// rule fits, one HTTP request each.
const GO_HEAP_PERIOD: Duration = Duration::from_secs(1);

/// The mean bytes between sampled allocations of a running process (tcmalloc's, jemalloc's and Go's).
const DEFAULT_MEM_SAMPLE: u64 = 512 * 1024;

#[derive(Clone, Copy, ValueEnum)]
pub enum EventArg {
    Auto,
    Cycles,
    CpuClock,
}

pub fn record(a: RecordArgs) -> Result<Outcome> {
    ran(|outcome| run(a, outcome))
}

/// The command, which says in `outcome` how its target ended.
fn run(a: RecordArgs, outcome: &mut Outcome) -> Result<()> {
    let mut report = Report::open(&a.report)?;
    check_writable(&a.output)?;
    let go_heap = a.mem.clone().flatten();
    let mem = a.mem.is_some() && go_heap.is_none();
    let target = match (&go_heap, &a.target) {
        // The heap's address is the target: no process needs naming.
        (Some(_), t) if t.pids.is_empty() && t.comm.is_none() && t.command.is_empty() => Target::Pids(vec![]),
        _ => target(&a.target)?,
    };
    let launched = matches!(target, Target::Launch(_));
    if go_heap.is_some() && (a.mem_sample.is_some() || a.budget.is_some() || a.load.load.is_some()) {
        bail!("--mem URL reads Go's own heap profile (Go samples it): --mem-sample, --budget and --load do not apply");
    }
    if a.budget.is_some() && (!mem || launched) {
        bail!("--budget limits the memory probes of a running process: it goes with --mem and -p");
    }
    // A running process's every allocation traps: sampled by default, so stacks are copied rarely.
    let default_sample = if launched { 0 } else { DEFAULT_MEM_SAMPLE };
    let opts = RecordOptions {
        target,
        frequency: a.freq,
        duration: duration(&a.target)?,
        clock: match a.event {
            EventArg::Auto => Clock::Auto,
            EventArg::Cycles => Clock::Cycles,
            EventArg::CpuClock => Clock::CpuClock,
        },
        stack_bytes: a.stack_size,
        kernel: !a.no_kernel,
        cpu: a.cpu || !(a.alloc || a.offcpu || a.mem.is_some()),
        alloc: a.alloc.then_some(AllocOptions { period: a.alloc_period }),
        mem: mem
            .then_some(MemOptions { sample_bytes: a.mem_sample.unwrap_or(default_sample), period_ms: 100 }),
        probe_budget: if mem { probe_budget(a.budget, launched) } else { None },
        offcpu: a.offcpu.then(|| OffCpuOptions::sampled_at(a.freq, Duration::from_micros(a.min_block_us))),
        ..Default::default()
    };
    let load = load_options(&a.load)?;
    if load.is_some() {
        if !matches!(opts.target, Target::Launch(_)) {
            bail!("--load needs the server command after `--` (it is started, loaded, then stopped)");
        }
        if opts.duration.is_some() {
            bail!("--load ends the recording when the load command ends: leave out -d");
        }
    }
    signals::install();
    // An attached run says when its probes are in (a test, or a user, starts the load then).
    let attached = matches!(opts.target, Target::Pids(_) | Target::Comm(_));
    let doing = if go_heap.is_some() { "reading the Go heap of" } else { "recording" };
    let mut status =
        StatusLine::new().prefetching(opts.target.clone(), opts.kernel).about("recording", doing, attached);
    let (raw, load_run) = match &load {
        Some(l) => {
            let run = whyslow_investigate::loadtest::record_under_load(&opts, l, &mut status);
            end_status_line();
            let run = run?;
            (run.raw, Some((run.load, run.ready_after)))
        }
        None => match &go_heap {
            Some(url) => {
                let heap = GoHeapOptions { url: url.clone(), period: GO_HEAP_PERIOD };
                let raw = record_go_heap(&opts, &heap, &mut status);
                end_status_line();
                (raw?, None)
            }
            None => {
                let raw = whyslow_record::record(&opts, &mut status);
                end_status_line();
                (raw?, None)
            }
        },
    };
    *outcome = Outcome::of(&raw.meta, a.target.duration);
    if let Some((out, ready_after)) = &load_run {
        show_load(out, *ready_after, raw.meta.exit_code)?;
    }
    if let (Some(url), true) = (&go_heap, raw.samples.is_empty()) {
        bail!("the Go heap at {url} holds nothing and nothing was allocated during the run");
    }
    if raw.samples.is_empty() {
        let none = whyslow_record::NoSamples::of(&opts, &raw.meta);
        // What memory the probes can see may be why nothing was recorded (a Go heap is not malloc's).
        let why = match raw.meta.notes.iter().find(|n| n.starts_with("memory: ")) {
            Some(note) => format!("{none} ({note})"),
            None => none.to_string(),
        };
        // A command that failed: its status is the answer (passed through), the missing samples a note.
        if none.target_failed() {
            eprintln!("whyslow: {why}");
            return Ok(());
        }
        bail!("{why}");
    }
    let prefetch = status.prefetched();
    let profile = phases::time("symbolize", || whyslow_symbolize::symbolize_with(raw, prefetch));
    // The summary comes first: a save that fails (disk full) must not cost the user what was recorded.
    let saved = phases::time("save", || file::save(&profile, &a.output));
    let reported = std::time::Instant::now();
    if !a.quiet {
        let value = value_index(&profile, None)?;
        render::text::report(
            &mut report,
            &profile,
            &render::text::ReportOptions { value, limit: a.limit, threads: false },
        )?;
        writeln!(report)?;
        report.flush()?;
    }
    phases::add("report", reported.elapsed());
    if a.verbose {
        print_phases();
    }
    saved?;
    let amount = render::units::amount(&profile, 0);
    wrote(&format!(
        "wrote {} ({amount}, {}); next: `whyslow report {0}`, `whyslow flamegraph {0}`",
        a.output.display(),
        render::units::duration(profile.meta.duration_ns as i64)
    ));
    Ok(())
}

/// The load tool's own output, then what whyslow read from it and how the server ended.
fn show_load(out: &LoadOutput, ready_after: Duration, server_exit: Option<i32>) -> Result<()> {
    let mut o = std::io::stdout().lock();
    o.write_all(out.stdout.as_bytes())?;
    if !out.stdout.is_empty() && !out.stdout.ends_with('\n') {
        writeln!(o)?;
    }
    o.flush()?;
    eprint!("{}", out.stderr);
    let stats = whyslow_analyze::loadtest::parse_load_output(&out.stdout);
    render::loadtest::summary(&mut o, stats.as_ref(), ready_after, out.elapsed, server_exit)?;
    if out.status != 0 {
        eprintln!("whyslow: warning: the load command exited with status {}", out.status);
    }
    Ok(())
}
