//! `whyslow stacks -p PID`: every thread's stack now, native, JIT-compiled Java and Python frames
//! together, with its state (running, or blocked, in which syscall on what, for how long): the first
//! look at a hung process. The process is not stopped.

use super::flags::OutputFormat;
use anyhow::Result;
use clap::Args;
use std::io::Write;
use whyslow_record::stacks::{stacks as take, StacksOptions};
use whyslow_render as render;

#[derive(Args)]
pub struct StacksArgs {
    /// The running process whose threads to show.
    #[arg(short = 'p', long = "pid")]
    pub pid: u32,
    /// Leave kernel frames out.
    #[arg(long)]
    pub no_kernel: bool,
    /// Output format: text groups threads with the same state and stack; json lists every thread.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
}

pub fn stacks(a: StacksArgs) -> Result<()> {
    let snap = take(&StacksOptions { pid: a.pid, ..Default::default() })?;
    let profile = whyslow_symbolize::symbolize(snap.raw);
    let mut out = std::io::stdout().lock();
    match a.format {
        OutputFormat::Text => render::stacks::text(&mut out, &profile, &snap.threads, !a.no_kernel)?,
        OutputFormat::Json => render::stacks::json(&mut out, &profile, &snap.threads, !a.no_kernel)?,
    }
    out.flush()?;
    Ok(())
}
