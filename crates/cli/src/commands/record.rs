use super::*;
use crate::{EventArg, RecordArgs};
use whyslow_investigate::loadtest::LoadOutput;
use whyslow_model::file;
use whyslow_record::{AllocOptions, Clock, OffCpuOptions, RecordOptions};
use whyslow_render as render;

pub fn record(a: RecordArgs) -> Result<()> {
    let mut report = Report::open(&a.report)?;
    check_writable(&a.output)?;
    let opts = RecordOptions {
        target: target(&a.target)?,
        frequency: a.freq,
        duration: duration(&a.target)?,
        clock: match a.event {
            EventArg::Auto => Clock::Auto,
            EventArg::Cycles => Clock::Cycles,
            EventArg::CpuClock => Clock::CpuClock,
        },
        stack_bytes: a.stack_size,
        kernel: !a.no_kernel,
        cpu: a.cpu || !(a.alloc || a.offcpu),
        alloc: a.alloc.then_some(AllocOptions { period: a.alloc_period }),
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
    let mut status = StatusLine::new().prefetching(opts.target.clone(), opts.kernel);
    let (raw, load_run) = match &load {
        Some(l) => {
            let run = whyslow_investigate::loadtest::record_under_load(&opts, l, &mut status);
            end_status_line();
            let run = run?;
            (run.raw, Some((run.load, run.ready_after)))
        }
        None => {
            let raw = whyslow_record::record(&opts, &mut status);
            end_status_line();
            (raw?, None)
        }
    };
    remember_outcome(&raw.meta, a.target.duration);
    if let Some((out, ready_after)) = &load_run {
        show_load(out, *ready_after, raw.meta.exit_code)?;
    }
    if raw.samples.is_empty() {
        let why = whyslow_record::NoSamples::of(&opts, &raw.meta);
        // A command that failed: its status is the answer (passed through), the missing samples a note.
        if why.target_failed() {
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
    eprintln!(
        "whyslow: wrote {} ({amount}, {}); next: `whyslow report {0}`, `whyslow flamegraph {0}`",
        a.output.display(),
        render::units::duration(profile.meta.duration_ns as i64)
    );
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
    let stats = whyslow_analyze::load::parse_load_output(&out.stdout);
    render::load::summary(&mut o, stats.as_ref(), ready_after, out.elapsed, server_exit)?;
    if out.status != 0 {
        eprintln!("whyslow: warning: the load command exited with status {}", out.status);
    }
    Ok(())
}
