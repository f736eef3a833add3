//! Where reports and rendered files go: standard output or --print-to, a file written atomically ("-":
//! standard output), and the check that a recording can be written before a run starts.

use super::flags::ReportTo;
use anyhow::{Context, Result};
use std::io::{IsTerminal, Write};
use std::path::Path;
use whyslow_model::file;

/// Where a command's report goes: standard output, or the file of `--print-to`, created before the run
/// starts (so a bad path fails before anything is recorded) and written as the report is produced.
pub enum Report {
    Stdout(std::io::Stdout),
    File(std::io::BufWriter<std::fs::File>),
}

impl Report {
    pub fn open(args: &ReportTo) -> Result<Report> {
        Ok(match &args.report {
            None => Report::Stdout(std::io::stdout()),
            Some(p) => Report::File(std::io::BufWriter::new(
                std::fs::File::create(p).with_context(|| format!("--print-to {}", p.display()))?,
            )),
        })
    }

    /// Whether it is a terminal (live tables redraw in place there).
    pub fn is_terminal(&self) -> bool {
        matches!(self, Report::Stdout(s) if s.is_terminal())
    }

    /// The widest line text may have: the terminal's width, else [`whyslow_render::fit::WIDTH`].
    pub fn width(&self) -> usize {
        match terminal_size() {
            Some((_, cols)) if self.is_terminal() => cols,
            _ => whyslow_render::fit::WIDTH,
        }
    }
}

/// Rows and columns of the terminal on standard output, when it says.
pub fn terminal_size() -> Option<(usize, usize)> {
    // SAFETY: winsize is plain data that TIOCGWINSZ fills.
    unsafe {
        let mut ws: libc::winsize = std::mem::zeroed();
        (libc::ioctl(1, libc::TIOCGWINSZ, &mut ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0)
            .then_some((ws.ws_row as usize, ws.ws_col as usize))
    }
}

impl Write for Report {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Report::Stdout(s) => s.lock().write(buf),
            Report::File(f) => f.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Report::Stdout(s) => s.lock().flush(),
            Report::File(f) => f.flush(),
        }
    }
}

/// Fails before a run when its recording could not be written: the directory of `path` must exist and
/// take a new file (checked with a probe file, removed at once; `path` itself is not touched).
pub fn check_writable(path: &Path) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let probe = dir.join(format!(".whyslow-write-check-{}", std::process::id()));
    std::fs::File::create(&probe)
        .and_then(|_| std::fs::remove_file(&probe))
        .with_context(|| format!("cannot write {} (-o): {}", path.display(), dir.display()))
}

/// Writes a rendered output to a file atomically ("-" is standard output).
pub fn write_output(path: &Path, render: impl FnOnce(&mut Vec<u8>) -> Result<()>) -> Result<()> {
    let mut buf = Vec::new();
    render(&mut buf)?;
    if path == Path::new("-") {
        std::io::stdout().lock().write_all(&buf)?;
        return Ok(());
    }
    file::write_atomic(path, &buf)?;
    Ok(())
}
