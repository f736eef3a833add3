//! Subcommand bodies, one file each with its arguments: options in, library calls, renderer out. What
//! several share has a file per concern: `flags` (argument groups and their conversion to the libraries'
//! options), `status` (the live status line), `output` (where reports and files go), `recording`
//! (reading a recording) and `outcome` (the target's exit status passed on); `help` generates help, man
//! pages and completions from main's clap definition.

mod calls;
mod compare;
mod diff;
mod doctor;
mod export;
mod flags;
mod flamegraph;
mod help;
mod outcome;
mod output;
mod push;
mod record;
mod recording;
mod report;
mod serve;
mod stacks;
mod status;
mod syscalls;
mod top;
mod view;

pub use calls::{calls, CallsArgs};
pub use compare::{compare, CompareArgs};
pub use diff::{diff, DiffArgs};
pub use doctor::{doctor, DoctorArgs};
pub use export::{export, ExportArgs};
pub use flags::in_flag_words;
pub use flamegraph::{flamegraph, FlamegraphArgs};
pub use help::{completions, help, man_pages};
pub use outcome::{split, Outcome};
pub use push::{push, PushFileArgs};
pub use record::{record, RecordArgs};
pub use report::{report, ReportArgs};
pub use serve::{serve, ServeArgs};
pub use stacks::{stacks, StacksArgs};
pub use syscalls::{syscalls, SyscallsArgs};
pub use top::{top, TopArgs};
pub use view::{view, ViewArgs};
