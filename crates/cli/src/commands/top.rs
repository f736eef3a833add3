//! `whyslow top`: a recording session cut into one window per interval, each symbolized (by one resident
//! symbolizer, as the agent does) and drawn as the hottest functions. On a terminal the table redraws in
//! place on the alternate screen and keys change it; otherwise each interval prints one table.

use super::flags::{seconds, OutputFormat, DEFAULT_LIMIT};
use anyhow::{bail, Result};
use clap::Args;
use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};
use whyslow_model::Profile;
use whyslow_record::follow::{Cover, Entry, Followed, ForkWaits};
use whyslow_record::procfs::{self, Stat};
use whyslow_record::target;
use whyslow_record::{signals, End, Objects, Observer, OffCpuOptions, RecordOptions, Session, Target};
use whyslow_render::top::{Action, Interval, Order, View, Weigh, KEYS};

#[derive(Args)]
#[command(
    after_help = "Keys on a terminal: s sort by self or total, k kernel frames, o on-CPU, off-CPU or wall \
                        time (with --offcpu), f or space freeze, q quit."
)]
pub struct TopArgs {
    /// Running processes to watch (comma-separated PIDs).
    #[arg(short = 'p', long = "pid", value_delimiter = ',', conflicts_with_all = ["comm", "all"])]
    pub pids: Vec<u32>,
    /// Every running process whose name matches this regular expression (and those that start later).
    #[arg(long, value_name = "RE", conflicts_with = "all")]
    pub comm: Option<String>,
    /// Every process of the host (and those that start later).
    #[arg(short = 'a', long)]
    pub all: bool,
    /// Stop after this many seconds (default: until q, Ctrl-C, or the processes exit).
    #[arg(short = 'd', long = "duration", value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Seconds per table.
    #[arg(short = 'i', long, default_value_t = 1.0, value_name = "SECONDS")]
    pub interval: f64,
    /// Sampling frequency in Hz.
    #[arg(short = 'F', long = "freq", default_value_t = 999)]
    pub freq: u64,
    /// Record blocked time too (eBPF at sched_switch): the o key cycles the table through on-CPU,
    /// off-CPU and wall time; it starts on off-CPU time.
    #[arg(long)]
    pub offcpu: bool,
    /// Sort by total (the function and what it calls) instead of self (key: s).
    #[arg(long)]
    pub total: bool,
    /// Leave kernel frames out (key: k).
    #[arg(long)]
    pub no_kernel: bool,
    /// Rows of each table (on a terminal, at most what fits).
    #[arg(long, default_value_t = DEFAULT_LIMIT)]
    pub limit: usize,
    /// Output format: json prints one JSON object per interval, one line each (NDJSON), with the
    /// table's columns, also on a terminal.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
    /// Command to launch and watch (after `--`), instead of running processes.
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// Which processes are watched: those given, and for `--comm` and `-a` those that start later.
enum Select {
    Given,
    /// The pattern as given, and whether a name matches it.
    Comm(String, Box<dyn Fn(&str) -> bool>),
    All,
}

impl Select {
    fn wants(&self, p: &Stat) -> bool {
        match self {
            Select::Given => false,
            Select::Comm(_, matches) => matches(&p.comm),
            Select::All => true,
        }
    }
}

/// Silent: `top` draws from the windows it cuts.
struct Quiet;
impl Observer for Quiet {}

pub fn top(a: TopArgs) -> Result<()> {
    let interval = seconds("-i (interval)", a.interval, false)?;
    let duration = a.duration.map(|d| seconds("-d (duration)", d, false)).transpose()?;
    let select = match (&a.pids[..], &a.comm, a.all, &a.command[..]) {
        ([], None, false, []) => {
            bail!("nothing to watch: give -p PID, --comm RE, -a (every process) or a command after `--`")
        }
        ([], None, false, cmd) => (Target::Launch(cmd.to_vec()), Select::Given),
        (pids, None, false, []) => (Target::Pids(pids.to_vec()), Select::Given),
        ([], Some(re), false, []) => {
            let pattern = whyslow_analyze::slice::pattern("--comm", re)?;
            (Target::Pids(Vec::new()), Select::Comm(re.clone(), Box::new(move |c| pattern.is_match(c))))
        }
        ([], None, true, []) => (Target::Pids(Vec::new()), Select::All),
        _ => bail!("give only one of: -p PID, --comm RE, -a, a command after `--`"),
    };
    let (mut target, select) = select;
    // The processes chosen by name or as all: the first starts the session, the others are followed.
    let mut rest = Vec::new();
    if !matches!(select, Select::Given) {
        let all = procfs::processes();
        let mut chosen: Vec<u32> = all.iter().filter(|p| select.wants(p)).map(|p| p.pid).collect();
        if chosen.is_empty() {
            let Select::Comm(re, _) = &select else { bail!("no process to watch") };
            bail!("no running process's name matches --comm '{re}'");
        }
        rest = chosen.split_off(1);
        target = Target::Pids(chosen);
    }
    let opts = RecordOptions {
        target,
        duration,
        frequency: a.freq,
        offcpu: a.offcpu.then(|| OffCpuOptions::sampled_at(a.freq, Duration::from_micros(10))),
        ..Default::default()
    };
    signals::install();
    let mut objects = Objects::new(&opts)?;
    // Read before the events open: a child that starts meanwhile waits for its fork to show.
    let opened = procfs::uptime_ticks();
    let mut s = Session::start(&opts, &mut objects, &mut Quiet)?;
    let mut since: HashMap<u32, u64> = s.pids().iter().map(|&p| (p, opened)).collect();
    for &pid in &rest {
        // A process that ended meanwhile is no error.
        let opened = procfs::uptime_ticks();
        if s.follow(pid).is_ok() {
            since.insert(pid, opened);
        }
    }
    let view = View {
        order: if a.total { Order::Total } else { Order::Self_ },
        kernel: !a.no_kernel,
        frozen: false,
        weigh: if a.offcpu { Weigh::OffCpu } else { Weigh::Cpu },
        offcpu: a.offcpu,
        limit: a.limit,
    };
    let what = match (&select, &opts.target) {
        (Select::Given, Target::Launch(cmd)) => cmd.join(" "),
        _ => {
            let pids: Vec<String> = s.pids().iter().map(u32::to_string).collect();
            format!("pid {}", pids.join(","))
        }
    };
    let json = matches!(a.format, OutputFormat::Json);
    let tty = std::io::stdout().is_terminal() && !json;
    if !tty {
        let each = if json { "a JSON line" } else { "a table" };
        eprintln!("whyslow: top of {what}, {each} every {} (Ctrl-C to stop)", render_seconds(interval));
    }
    let run = Run {
        view,
        interval,
        // Tables are cut from when sampling began, as `-d` counts: reading the kernel's symbols and
        // following the other processes take time on a busy machine.
        t0: s.started(),
        tables: 0,
        json,
        symbolizer: Default::default(),
        since,
        waits: ForkWaits::default(),
    };
    let end = if tty { run.on_screen(s, duration, &select)? } else { run.plain(s, duration, &select)? };
    if end == Some(End::TargetEnded) {
        eprintln!("whyslow: the watched processes exited; top stopped");
    }
    Ok(())
}

fn render_seconds(d: Duration) -> String {
    whyslow_render::units::seconds(d.as_secs_f64())
}

struct Run {
    view: View,
    interval: Duration,
    t0: Instant,
    /// Tables printed (plain output).
    tables: usize,
    /// One JSON object per line instead of a table.
    json: bool,
    symbolizer: whyslow_symbolize::Resident,
    /// The processes followed by themselves, and when their events were opened (clock ticks since boot).
    since: HashMap<u32, u64>,
    /// Processes started after a followed ancestor whose fork the session has not shown yet.
    waits: ForkWaits,
}

impl Run {
    /// One step of the session; Some(cut) when an interval is over. No window is cut within half an
    /// interval of the end of `-d` (the last window, from the end of the run, covers that time).
    fn step(
        &mut self,
        s: &mut Session,
        next: &mut Instant,
        deadline: Option<Instant>,
    ) -> (Option<End>, bool) {
        let end = s.step(&mut Quiet);
        let now = Instant::now();
        let due = end.is_none()
            && now >= *next
            && deadline.is_none_or(|d| d.saturating_duration_since(now) > self.interval / 2);
        if due {
            *next += self.interval;
            if *next <= now {
                *next = now + self.interval;
            }
        }
        (end, due)
    }

    /// The window so far as a profile, with its interval.
    fn window(&mut self, raw: whyslow_model::raw::RawRecording) -> (Profile, Interval) {
        let p = self.symbolizer.symbolize(raw);
        let iv = Interval {
            end_unix_ns: p.meta.start_unix_ns + p.meta.duration_ns,
            elapsed_s: self.t0.elapsed().as_secs_f64(),
            seconds: p.meta.duration_ns as f64 / 1e9,
        };
        (p, iv)
    }

    /// Follows processes started since the last look that `select` wants and that no watched process
    /// started (those are followed already, through the events they inherited: record's follow rule,
    /// with its start-time and fork-wait checks), and lets ended ones go.
    fn rescan(&mut self, s: &mut Session, select: &Select) {
        if matches!(select, Select::Given) {
            return;
        }
        let all = procfs::processes();
        let known: std::collections::HashSet<u32> = s.processes().chain(s.pids().iter().copied()).collect();
        let table: HashMap<u32, Entry> =
            all.iter().map(|p| (p.pid, Entry { ppid: p.ppid, start_ticks: p.start_ticks })).collect();
        self.waits.retain(|pid| table.contains_key(&pid));
        // A process the session learned of through its fork inherited its events from further up: its
        // own start bounds its children's.
        let since = &self.since;
        let followed = |up: u32| {
            known
                .contains(&up)
                .then(|| Followed { root: Some(up), since_ticks: since.get(&up).copied().unwrap_or(0) })
        };
        let mut direct = Vec::new();
        for p in all.iter().filter(|p| select.wants(p) && !known.contains(&p.pid)) {
            let seen = || known.contains(&p.pid);
            if self.waits.cover(p.pid, p.start_ticks, p.ppid, |q| table.get(&q).copied(), followed, seen)
                == Cover::Direct
            {
                direct.push(p.pid);
            }
        }
        for pid in direct {
            let opened = procfs::uptime_ticks();
            if s.follow(pid).is_ok() {
                self.since.insert(pid, opened);
            }
        }
        let ended: Vec<u32> = s.pids().iter().copied().filter(|&p| !target::alive(p)).collect();
        for pid in ended {
            s.forget(pid);
            self.since.remove(&pid);
        }
    }

    /// One table per interval on standard output, and the last (partial) window at the end when it
    /// covers half an interval or more (or when it is the only one).
    fn plain(mut self, mut s: Session, duration: Option<Duration>, select: &Select) -> Result<Option<End>> {
        let mut out = std::io::stdout().lock();
        let mut next = self.t0 + self.interval;
        let deadline = duration.map(|d| self.t0 + d);
        let end = loop {
            let (end, due) = self.step(&mut s, &mut next, deadline);
            if let Some(e) = end {
                break e;
            }
            if due {
                let raw = s.cut();
                let (p, iv) = self.window(raw);
                self.print(&mut out, &p, &iv)?;
                self.rescan(&mut s, select);
            }
        };
        let raw = s.finish(&mut Quiet);
        let (p, iv) = self.window(raw);
        if self.tables == 0 || iv.seconds >= self.interval.as_secs_f64() / 2.0 {
            self.print(&mut out, &p, &iv)?;
        }
        Ok(Some(end))
    }

    fn print(&mut self, out: &mut impl Write, p: &Profile, iv: &Interval) -> Result<()> {
        if self.json {
            whyslow_render::top::json_line(out, p, &self.view, iv)?;
        } else {
            if self.tables > 0 {
                writeln!(out)?;
            }
            whyslow_render::top::table(out, p, &self.view, iv)?;
        }
        out.flush()?;
        self.tables += 1;
        Ok(())
    }

    /// The table redrawn in place on the alternate screen, keys read from the terminal; the terminal is
    /// restored however this ends (q, Ctrl-C or SIGTERM, the end of `-d`, the processes' exit, an error,
    /// a panic). Returns None when q ended it.
    fn on_screen(
        mut self,
        mut s: Session,
        duration: Option<Duration>,
        select: &Select,
    ) -> Result<Option<End>> {
        let mut screen = Screen::enter();
        let mut next = self.t0 + self.interval;
        let deadline = duration.map(|d| self.t0 + d);
        let mut shown: Option<(Profile, Interval)> = None;
        screen
            .draw(&format!("whyslow top: first table in {}...\n\n{KEYS}", render_seconds(self.interval)))?;
        let end = 'run: loop {
            let (end, due) = self.step(&mut s, &mut next, deadline);
            if end.is_some() {
                break end;
            }
            let mut redraw = false;
            for k in screen.keys() {
                match self.view.key(k) {
                    Action::Quit => break 'run None,
                    Action::Redraw => redraw = true,
                    Action::Ignore => {}
                }
            }
            if due {
                let raw = s.cut();
                let window = self.window(raw);
                if !self.view.frozen || shown.is_none() {
                    shown = Some(window);
                    redraw = true;
                }
                self.rescan(&mut s, select);
            }
            if let (true, Some((p, iv))) = (redraw, &shown) {
                // Header, column titles, the "more" line and the keys fit around the rows.
                let rows = screen.size().0.saturating_sub(5).max(1);
                let view = View { limit: self.view.limit.min(rows), ..self.view.clone() };
                let mut text = Vec::new();
                whyslow_render::top::table(&mut text, p, &view, iv)?;
                screen.draw(&format!("{}\n{KEYS}", String::from_utf8_lossy(&text)))?;
            }
        };
        drop(screen);
        s.finish(&mut Quiet);
        Ok(end)
    }
}

/// The terminal while `top` draws on it: the alternate screen with the cursor hidden, and standard input
/// (when a terminal) without line buffering and echo, so keys arrive one by one; Ctrl-C still raises
/// SIGINT (ISIG is kept), which ends the run through the stop flag. Dropping it restores both.
struct Screen {
    saved: Option<libc::termios>,
}

impl Screen {
    fn enter() -> Screen {
        let mut saved = None;
        if std::io::stdin().is_terminal() {
            // SAFETY: termios is plain data that tcgetattr fills; tcsetattr reads the copy we changed.
            unsafe {
                let mut t: libc::termios = std::mem::zeroed();
                if libc::tcgetattr(0, &mut t) == 0 {
                    let old = t;
                    t.c_lflag &= !(libc::ICANON | libc::ECHO);
                    t.c_cc[libc::VMIN] = 0;
                    t.c_cc[libc::VTIME] = 0;
                    if libc::tcsetattr(0, libc::TCSANOW, &t) == 0 {
                        saved = Some(old);
                    }
                }
            }
        }
        let mut out = std::io::stdout().lock();
        let _ = write!(out, "\x1b[?1049h\x1b[?25l");
        let _ = out.flush();
        Screen { saved }
    }

    /// The keys typed since the last call (none when standard input is not a terminal).
    fn keys(&mut self) -> Vec<u8> {
        if self.saved.is_none() {
            return Vec::new();
        }
        let mut buf = [0u8; 64];
        // SAFETY: reads at most buf.len() bytes into buf; VMIN=VTIME=0 makes it return at once.
        let n = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
        // Escape sequences (arrows) are not keys of ours: drop them whole.
        match buf.get(..n.max(0) as usize) {
            Some(b) if !b.contains(&0x1b) => b.to_vec(),
            _ => Vec::new(),
        }
    }

    /// Rows and columns of the terminal (24 x 80 when it does not say).
    fn size(&self) -> (usize, usize) {
        super::output::terminal_size().unwrap_or((24, 80))
    }

    /// Draws `text` from the top left, each line cut to the terminal's width and the screen's rest
    /// cleared (no blank flash between frames).
    fn draw(&mut self, text: &str) -> std::io::Result<()> {
        let (rows, cols) = self.size();
        let lines: Vec<String> =
            text.lines().take(rows).map(|l| l.chars().take(cols).collect::<String>() + "\x1b[K").collect();
        // No line break after the last line: on the bottom row it would scroll the screen.
        let frame = format!("\x1b[H{}\x1b[J", lines.join("\n"));
        let mut out = std::io::stdout().lock();
        out.write_all(frame.as_bytes())?;
        out.flush()
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let mut out = std::io::stdout().lock();
        let _ = write!(out, "\x1b[?25h\x1b[?1049l");
        let _ = out.flush();
        if let Some(t) = &self.saved {
            // SAFETY: restores the settings tcgetattr returned.
            unsafe { libc::tcsetattr(0, libc::TCSANOW, t) };
        }
    }
}
