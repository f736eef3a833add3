//! Following the processes that targets match, and recording them in windows.
//!
//! The manager scans /proc every [`SCAN_INTERVAL`]: each process matched by running targets gets one
//! recording key, the union of their sources with the highest frequency and the shortest window, and is
//! followed by the one session of that key, so a process matched by two targets is recorded once. A
//! process whose parent is followed already is covered by inheritance (its events were inherited at
//! fork) and is not opened again. Each session runs on its own thread (a [`Session`] borrows its eBPF
//! objects), cuts a window every `window_s` seconds and hands it to the window worker, which symbolizes
//! it, splits it by process, and stores one row per (target, process).
//!
//! Targets of every process (`match.all`) are not matched against /proc: one whole-host session samples
//! every CPU with one clock each (no event per process or thread, no scan), learns about processes from
//! the clock's side band (mappings, execs, forks, exits) and from each process's first sample, when it
//! is read (name, command line, cgroup) and matched against those targets. Its per-process state goes
//! when the process ends. It samples CPU time only, at the highest frequency those targets ask for.

use crate::procs;
use crate::shared::{Counters, Shared};
use crate::spec::{ProcessView, SourceKind, TargetSpec};
use crate::tracked::{ring_pages, Key, Tracked};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use whyslow_model::raw::RawRecording;
use whyslow_model::unix_now_ns as now_ns;
use whyslow_record::follow::{Cover, Entry, Followed, ForkWaits};
use whyslow_record::procfs;
use whyslow_record::{Objects, Observer, RecordOptions, Session, Target};

/// How often processes are rescanned: a process that starts (or execs into a match) is followed within
/// this much plus the time to open its events.
pub const SCAN_INTERVAL: Duration = Duration::from_millis(250);
/// How long a process that ended or stopped matching is remembered, so its last window still finds its
/// targets.
const GRACE: Duration = Duration::from_secs(120);
enum Cmd {
    Follow(u32),
    Forget(u32),
}

struct SessionHandle {
    tx: Sender<Cmd>,
    /// The processes the session's converter knows (opened, or seen forking from one that was).
    known: Arc<std::sync::Mutex<std::collections::HashSet<u32>>>,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
    pids: BTreeSet<u32>,
}

/// A window as a session cut it, with the session's key.
pub struct Window {
    pub raw: RawRecording,
    pub key: Key,
    /// Cut by the whole-host session.
    pub host: bool,
}

/// The whole-host session.
struct HostSession {
    key: Key,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

/// Runs the manager until `shared.stopping`; then stops every session (each flushes its window) and
/// waits for the window worker to store them.
pub fn run(shared: Arc<Shared>) {
    let (wtx, wrx) = channel::<Window>();
    let worker = {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("whyslow-windows".into())
            .spawn(move || window_worker(shared, wrx))
            .expect("spawning a thread")
    };
    let mut m = Manager {
        sessions: HashMap::new(),
        host: None,
        failed: HashMap::new(),
        windows: wtx,
        procs: None,
        matchers: HashMap::new(),
        pending: ForkWaits::default(),
    };
    while !shared.stopping() {
        let t0 = Instant::now();
        m.reap(&shared);
        m.manage(&shared);
        shared.manager_beat_ns.store(now_ns(), Ordering::Relaxed);
        std::thread::sleep(SCAN_INTERVAL.saturating_sub(t0.elapsed()));
    }
    let Manager { mut sessions, windows: wtx, host, .. } = m;
    if let Some(h) = host {
        h.stop.store(true, Ordering::SeqCst);
        let _ = h.thread.join();
    }
    for (_, s) in sessions.drain() {
        s.stop.store(true, Ordering::SeqCst);
        let _ = s.thread.join();
    }
    drop(wtx);
    let _ = worker.join();
}

/// How long a key whose session failed to start waits before it is tried again.
const RETRY: Duration = Duration::from_secs(10);

struct Manager {
    sessions: HashMap<Key, SessionHandle>,
    /// The session of the targets of every process, if any runs.
    host: Option<HostSession>,
    /// Keys whose session failed, and when to try again.
    failed: HashMap<Key, Instant>,
    windows: Sender<Window>,
    /// The processes of the machine, while targets other than whole-host ones run.
    procs: Option<procs::Procs>,
    matchers: HashMap<i64, (TargetSpec, crate::spec::Matcher)>,
    /// Processes started after their followed ancestor whose fork the session has not shown yet.
    pending: ForkWaits,
}

impl Manager {
    /// Sessions that ended by themselves (they failed to start, or their first process was gone): their
    /// processes are listed again at the next scan, the key after [`RETRY`].
    fn reap(&mut self, shared: &Shared) {
        let dead: Vec<Key> =
            self.sessions.iter().filter(|(_, s)| s.thread.is_finished()).map(|(k, _)| k.clone()).collect();
        let mut tracked = shared.tracked.lock().expect("tracked lock");
        for k in dead {
            let s = self.sessions.remove(&k).expect("listed above");
            let _ = s.thread.join();
            tracked.retain(|_, t| t.key != k);
            self.failed.insert(k, Instant::now() + RETRY);
        }
        self.failed.retain(|_, until| Instant::now() < *until);
    }

    /// The whole-host session the targets of every process want (CPU samples at their highest
    /// frequency, their shortest window), started, changed or stopped.
    fn manage_host(&mut self, shared: &Arc<Shared>, specs: &[&TargetSpec]) {
        let want = Key::of(specs.iter().copied()).map(|mut k| {
            k.sources = BTreeSet::from([SourceKind::Cpu]);
            k
        });
        if self.host.as_ref().is_some_and(|h| h.thread.is_finished()) {
            // It failed to start (the error is logged): tried again after RETRY.
            let h = self.host.take().expect("checked above");
            let _ = h.thread.join();
            self.failed.insert(h.key, Instant::now() + RETRY);
        }
        if self.host.as_ref().map(|h| &h.key) == want.as_ref() {
            return;
        }
        if let Some(h) = self.host.take() {
            h.stop.store(true, Ordering::SeqCst);
            let _ = h.thread.join();
        }
        if let Some(key) = want.filter(|k| !self.failed.contains_key(k)) {
            self.host = Some(start_host_session(shared, key, self.windows.clone()));
        }
    }

    /// One scan: which processes each running target matches now, and the sessions following them.
    fn manage(&mut self, shared: &Arc<Shared>) {
        // Matchers are compiled once per definition.
        let defs = shared.targets.read().expect("targets lock").clone();
        self.matchers.retain(|id, (spec, _)| defs.get(id) == Some(spec));
        let running = || defs.iter().filter(|(_, s)| s.state == crate::spec::State::Running);
        let host: Vec<&TargetSpec> = running().filter(|(_, s)| s.matcher.all).map(|(_, s)| s).collect();
        self.manage_host(shared, &host);
        let targets: Vec<(i64, TargetSpec, crate::spec::Matcher)> = running()
            .filter(|(_, s)| !s.matcher.all)
            .map(|(&id, s)| (id, s.clone()))
            .map(|(id, s)| {
                let m = self.matchers.entry(id).or_insert_with(|| (s.clone(), s.matcher())).1.clone();
                (id, s, m)
            })
            .collect();
        // Without targets to match, no process is read (and the proc connector is closed). The views are
        // borrowed from the process table, taken out of `self` for the scan (not copied at every scan).
        let mut table = match targets.is_empty() {
            true => None,
            false => Some(self.procs.take().unwrap_or_else(procs::Procs::new)),
        };
        let none = BTreeMap::new();
        let views = match &mut table {
            Some(p) => p.refresh(),
            None => &none,
        };
        let ticks = procfs::uptime_ticks();
        self.pending.retain(|pid| views.contains_key(&pid));
        let now = now_ns();
        let mut tracked = shared.tracked.lock().expect("tracked lock");
        // Desired state, parents before children (pids are not ordered by age; start ticks are).
        let mut order: Vec<&ProcessView> = views.values().collect();
        order.sort_by_key(|p| (p.start_ticks, p.pid));
        let mut want: BTreeMap<u32, (Vec<i64>, Key, u32)> = BTreeMap::new();
        for p in order {
            let ids: Vec<i64> =
                targets.iter().filter(|(_, _, m)| m.matches(p)).map(|(id, _, _)| *id).collect();
            let Some(key) = Key::of(targets.iter().filter(|(id, _, _)| ids.contains(id)).map(|(_, s, _)| s))
            else {
                continue;
            };
            let root = match tracked.get(&p.pid) {
                // A decision stands while the process and its root are followed with the same key.
                Some(t) if t.gone_ns.is_none() && t.key == key && want.contains_key(&t.root) => t.root,
                _ => match self.cover(p, &key, views, &want, &tracked) {
                    Cover::By(a) => a,
                    Cover::Direct => p.pid,
                    // Not decided yet: looked at again at the next scan.
                    Cover::Wait => continue,
                },
            };
            want.insert(p.pid, (ids, key, root));
        }
        // Let go of what ended or no longer matches (or moved to another key).
        let live: Vec<u32> = tracked.iter().filter(|(_, t)| t.gone_ns.is_none()).map(|(&p, _)| p).collect();
        for pid in live {
            let t = &tracked[&pid];
            let keep = want.get(&pid).is_some_and(|(_, k, r)| *k == t.key && *r == t.root)
                && views.get(&pid).is_some_and(|v| v.start_ticks == t.view.start_ticks);
            if !keep {
                if t.root == pid {
                    if let Some(s) = self.sessions.get_mut(&t.key) {
                        let _ = s.tx.send(Cmd::Forget(pid));
                        s.pids.remove(&pid);
                    }
                }
                tracked.get_mut(&pid).expect("listed above").gone_ns = Some(now);
            }
        }
        tracked.retain(|_, t| t.gone_ns.is_none_or(|g| now.saturating_sub(g) < GRACE.as_nanos() as u64));
        // Follow what is new.
        let mut new = Vec::new();
        for (pid, (ids, key, root)) in want {
            if let Some(t) = tracked.get_mut(&pid).filter(|t| t.gone_ns.is_none()) {
                t.targets = ids;
                // The same process read again (it exec'd, renamed itself or moved to another cgroup):
                // its windows from now on carry what it is now.
                if t.view != views[&pid] {
                    t.view = views[&pid].clone();
                    new.push(t.view.clone());
                }
                continue;
            }
            if self.failed.contains_key(&key) {
                continue;
            }
            let view = views[&pid].clone();
            new.push(view.clone());
            if root == pid {
                let s = self
                    .sessions
                    .entry(key.clone())
                    .or_insert_with(|| start_session(shared, key.clone(), pid, self.windows.clone()));
                if s.pids.insert(pid) {
                    let _ = s.tx.send(Cmd::Follow(pid));
                }
            }
            tracked.insert(
                pid,
                Tracked {
                    view,
                    targets: ids,
                    key,
                    root,
                    follow_ticks: ticks,
                    since_ns: now,
                    gone_ns: None,
                    host: false,
                },
            );
        }
        // Stored once they are followed and listed: a store busy with a window holds up neither.
        drop(tracked);
        if !new.is_empty() {
            let mut store = shared.store.lock().expect("store lock");
            for view in &new {
                let _ = store.saw_process(view, now);
            }
        }
        self.procs = table;
        // Sessions nobody needs any more end (their last window is flushed).
        let idle: Vec<Key> =
            self.sessions.iter().filter(|(_, s)| s.pids.is_empty()).map(|(k, _)| k.clone()).collect();
        for k in idle {
            if let Some(s) = self.sessions.remove(&k) {
                s.stop.store(true, Ordering::SeqCst);
                drop(s.tx);
                let _ = s.thread.join();
            }
        }
    }

    /// Whether `p` is recorded through a followed ancestor with the same key (record's follow rule):
    /// through it once the session has seen its fork, directly when it started before the ancestor's
    /// events were opened (or before they are), and directly when the fork does not show within
    /// [`FORK_WAIT`](whyslow_record::follow::FORK_WAIT).
    fn cover(
        &mut self,
        p: &ProcessView,
        key: &Key,
        views: &BTreeMap<u32, ProcessView>,
        want: &BTreeMap<u32, (Vec<i64>, Key, u32)>,
        tracked: &BTreeMap<u32, Tracked>,
    ) -> Cover {
        let table = |pid| views.get(&pid).map(|v| Entry { ppid: v.ppid, start_ticks: v.start_ticks });
        let followed = |up| {
            let (_, _, root) = want.get(&up).filter(|(_, k, _)| k == key)?;
            // An ancestor chosen in this scan is opened after it: nothing is inherited yet.
            let open = tracked.get(root).filter(|t| t.gone_ns.is_none() && t.root == *root);
            Some(Followed { root: open.map(|_| *root), since_ticks: open.map_or(0, |a| a.follow_ticks) })
        };
        let session = self.sessions.get(key);
        let seen = || session.is_some_and(|s| s.known.lock().expect("known lock").contains(&p.pid));
        self.pending.cover(p.pid, p.start_ticks, p.ppid, table, followed, seen)
    }
}

fn start_session(shared: &Shared, key: Key, first: u32, windows: Sender<Window>) -> SessionHandle {
    let (tx, rx) = channel();
    let known = Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let (key, stop, known) = (key.clone(), stop.clone(), known.clone());
        let counters = shared.counters.clone();
        std::thread::Builder::new()
            .name(format!("whyslow-rec-{}", key.name()))
            .spawn(move || {
                if let Err(e) = session_thread(&key, first, rx, stop, &windows, &counters, &known) {
                    eprintln!("whyslow serve: recording {} failed: {e}", key.name());
                    counters.session_errors.fetch_add(1, Ordering::Relaxed);
                }
            })
            .expect("spawning a thread")
    };
    SessionHandle { tx, known, stop, thread, pids: BTreeSet::new() }
}

struct Quiet;
impl Observer for Quiet {}

fn session_thread(
    key: &Key,
    first: u32,
    rx: Receiver<Cmd>,
    stop: Arc<AtomicBool>,
    windows: &Sender<Window>,
    counters: &Counters,
    known: &std::sync::Mutex<std::collections::HashSet<u32>>,
) -> Result<(), whyslow_record::RecordError> {
    let opts = key.options(first, stop);
    let mut objects = Objects::new(&opts)?;
    let mut s = Session::start(&opts, &mut objects, &mut Quiet)?;
    let mut windowing = Windowing::new(key, windows, false);
    // This session's part of the processes held, as last added to the counter.
    let mut held = 0u64;
    loop {
        let end = s.step(&mut Quiet);
        for cmd in rx.try_iter() {
            match cmd {
                Cmd::Follow(pid) => {
                    // A process that ended before it could be opened is no error.
                    if let Err(e) = s.follow(pid) {
                        if whyslow_record::target::alive(pid) {
                            counters.follow_errors.fetch_add(1, Ordering::Relaxed);
                            eprintln!("whyslow serve: cannot follow pid {pid}: {e}");
                        }
                    }
                }
                Cmd::Forget(pid) => s.forget(pid),
            }
        }
        let procs: std::collections::HashSet<u32> = s.processes().collect();
        counters.processes_held.fetch_add(procs.len() as u64, Ordering::Relaxed);
        counters
            .processes_held
            .fetch_sub(std::mem::replace(&mut held, procs.len() as u64), Ordering::Relaxed);
        *known.lock().expect("known lock") = procs;
        if !windowing.stepped(&mut s, end, counters) {
            break;
        }
    }
    counters.processes_held.fetch_sub(held, Ordering::Relaxed);
    windowing.finish(s);
    Ok(())
}

/// A session's windows: counts the samples and losses of each step, cuts a window every `window_s`, and
/// sends the last one at the end.
struct Windowing<'a> {
    key: &'a Key,
    /// The key's name, as the counters are kept by.
    sources: String,
    windows: &'a Sender<Window>,
    /// Cut by the whole-host session.
    host: bool,
    window: Duration,
    cut_at: Instant,
    /// Samples and lost samples counted so far.
    seen: (u64, u64),
    /// The thread's CPU time when last counted, and when the window began, with the samples then.
    cpu_seen: u64,
    window_start: (u64, u64),
}

impl<'a> Windowing<'a> {
    fn new(key: &'a Key, windows: &'a Sender<Window>, host: bool) -> Self {
        let window = Duration::from_secs(key.window_s);
        // Counted from here: the session's start (loading its eBPF programs) is paid once, not per sample.
        let cpu = whyslow_record::thread_cpu_ns();
        Windowing {
            key,
            sources: key.name(),
            windows,
            host,
            window,
            cut_at: Instant::now() + window,
            seen: (0, 0),
            cpu_seen: cpu,
            window_start: (cpu, 0),
        }
    }

    /// After a step that ended with `end`: counts what it sampled and cuts a window when one is due. False
    /// once the session was stopped (its last window is sent by [`Windowing::finish`]).
    fn stepped(&mut self, s: &mut Session, end: Option<whyslow_record::End>, counters: &Counters) -> bool {
        let n = s.counters();
        let cut = end != Some(whyslow_record::End::Stopped) && Instant::now() >= self.cut_at;
        if cut {
            self.cut_at += self.window;
            self.send(s.cut());
        }
        // The step's CPU time, cutting the window included.
        let cpu = whyslow_record::thread_cpu_ns();
        counters.add(
            &self.sources,
            n.samples - self.seen.0,
            n.lost - self.seen.1,
            cpu.saturating_sub(self.cpu_seen),
        );
        self.seen = (n.samples, n.lost);
        self.cpu_seen = cpu;
        if cut {
            let (cpu_then, samples_then) = std::mem::replace(&mut self.window_start, (cpu, n.samples));
            if n.samples > samples_then {
                let ns = cpu.saturating_sub(cpu_then) as f64 / (n.samples - samples_then) as f64;
                counters.window_cost(&self.sources, ns);
            }
        }
        end != Some(whyslow_record::End::Stopped)
    }

    fn finish(self, s: Session) {
        let raw = s.finish(&mut Quiet);
        self.send(raw);
    }

    fn send(&self, raw: RawRecording) {
        let _ = self.windows.send(Window { raw, key: self.key.clone(), host: self.host });
    }
}

fn start_host_session(shared: &Arc<Shared>, key: Key, windows: Sender<Window>) -> HostSession {
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let (key, stop, shared) = (key.clone(), stop.clone(), shared.clone());
        std::thread::Builder::new()
            .name("whyslow-rec-host".into())
            .spawn(move || {
                if let Err(e) = host_session_thread(&shared, &key, stop, &windows) {
                    eprintln!("whyslow serve: recording every process failed: {e}");
                    shared.counters.session_errors.fetch_add(1, Ordering::Relaxed);
                }
            })
            .expect("spawning a thread")
    };
    HostSession { key, stop, thread }
}

/// How often the whole-host session lets go of the processes that ended.
const HOST_SWEEP: Duration = Duration::from_secs(1);

/// Samples every process of the host (see the module's documentation): each process is read when its
/// first sample arrives (while it runs: samples are taken in within 100 ms) and listed in
/// `host_tracked` with the targets of every process that match it, until it ends.
fn host_session_thread(
    shared: &Arc<Shared>,
    key: &Key,
    stop: Arc<AtomicBool>,
    windows: &Sender<Window>,
) -> Result<(), whyslow_record::RecordError> {
    let stack_bytes = RecordOptions::default().stack_bytes;
    let opts = RecordOptions {
        target: Target::All,
        frequency: key.frequency,
        cpu: true,
        ring_pages: ring_pages(key.frequency, stack_bytes),
        stop: Some(stop),
        ..RecordOptions::default()
    };
    let mut objects = Objects::new(&opts)?;
    let mut s = Session::start(&opts, &mut objects, &mut Quiet)?;
    let mut windowing = Windowing::new(key, windows, true);
    let mut swept = Instant::now();
    let mut matchers: HashMap<i64, (TargetSpec, crate::spec::Matcher)> = HashMap::new();
    loop {
        let end = s.step(&mut Quiet);
        let first = s.take_first_sampled();
        if !first.is_empty() {
            let defs = shared.targets.read().expect("targets lock").clone();
            matchers.retain(|id, (spec, _)| defs.get(id) == Some(spec));
            let host: Vec<(i64, crate::spec::Matcher)> = defs
                .into_iter()
                .filter(|(_, s)| s.state == crate::spec::State::Running && s.matcher.all)
                .map(|(id, s)| (id, matchers.entry(id).or_insert_with(|| (s.clone(), s.matcher())).1.clone()))
                .collect();
            let now = now_ns();
            let seen: Vec<Tracked> = first
                .into_iter()
                .filter_map(procs::read_sampled)
                .map(|view| Tracked {
                    targets: host.iter().filter(|(_, m)| m.matches(&view)).map(|(id, _)| *id).collect(),
                    root: view.pid,
                    view,
                    key: key.clone(),
                    follow_ticks: 0,
                    since_ns: now,
                    gone_ns: None,
                    host: true,
                })
                .collect();
            let mut tracked = shared.host_tracked.lock().expect("tracked lock");
            for t in seen {
                // A process that exec'd is read again: its new name and command line replace the old.
                tracked.insert(t.view.pid, t);
            }
        }
        if swept.elapsed() >= HOST_SWEEP {
            swept = Instant::now();
            // The converter lets a process go a second after it ended.
            let live: std::collections::HashSet<u32> = s.processes().collect();
            let now = now_ns();
            let mut tracked = shared.host_tracked.lock().expect("tracked lock");
            for (pid, t) in tracked.iter_mut() {
                if t.gone_ns.is_none() && !live.contains(pid) {
                    t.gone_ns = Some(now);
                }
            }
            tracked.retain(|_, t| t.gone_ns.is_none_or(|g| now.saturating_sub(g) < GRACE.as_nanos() as u64));
        }
        if !windowing.stepped(&mut s, end, &shared.counters) {
            break;
        }
    }
    windowing.finish(s);
    Ok(())
}

/// How long the window worker waits for a window before it ends a symbolizer round without one: the
/// default window (a file needed every window of a target cut every 60 s or less stays held).
const IDLE_ROUND: Duration = Duration::from_secs(10);

/// Symbolizes each window, splits it by the followed process its samples belong to, and stores one
/// row per (target, process).
fn window_worker(shared: Arc<Shared>, rx: Receiver<Window>) {
    // Processes started inside followed ones, as (child -> parent), from the windows' fork records.
    let mut parents: HashMap<u32, (u32, Instant)> = HashMap::new();
    // Files and the kernel's table stay read from one window to the next.
    // Debug files fetched from debuginfod are the agent's, under its data directory.
    let debug_files = shared.opts.data_dir.join("debuginfod");
    let mut symbolizer = whyslow_symbolize::Resident::caching_debug_files_in(&debug_files);
    // The resident symbolizer keeps every file it read (its parsed symbols and debug information, the
    // file mapped): with a whole host, or churn through many binaries, that grows without bound (a debug
    // build of the agent reached 532 MB in 30 s of `serve --all` on a machine compiling Rust). When the
    // agent has grown SYMBOLIZER_MEMORY over what it took after the last reset, the caches are dropped
    // and rebuilt from what the next windows need.
    let mut base_rss = crate::procs::own_usage().1;
    loop {
        // No window for a while (nothing followed is running): the symbolizer's round ends all the
        // same, so the files of programs that ended are let go (mapped, their file systems stay busy).
        let w = match rx.recv_timeout(IDLE_ROUND) {
            Ok(w) => w,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                symbolizer.idle_round();
                continue;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        };
        for &(child, parent) in &w.raw.forks {
            parents.insert(child, (parent, Instant::now()));
        }
        parents.retain(|_, (_, t)| t.elapsed() < GRACE);
        if w.raw.samples.is_empty() {
            symbolizer.idle_round();
            continue;
        }
        let rows = if w.host {
            host_rows(&shared, &mut symbolizer, w.raw)
        } else {
            followed_rows(&shared, &mut symbolizer, w, &parents)
        };
        let refs: Vec<(&[i64], &ProcessView, &whyslow_model::Profile)> =
            rows.iter().map(|(ids, v, p)| (ids.as_slice(), v, p)).collect();
        if refs.is_empty() {
            continue;
        }
        let mut store = shared.store.lock().expect("store lock");
        let stored = store.add_windows(&refs);
        // Counted before the store is let go: a reader of the queue (a pusher) cannot deliver a window
        // that /metrics does not count as stored yet.
        if let Ok(removed) = &stored {
            shared.counters.windows.fetch_add(refs.len() as u64, Ordering::Relaxed);
            shared.counters.windows_removed.fetch_add(*removed, Ordering::Relaxed);
        }
        drop(store);
        shared.store_result(&stored);
        match stored {
            Ok(_) => shared.queued.ring(),
            Err(e) => {
                eprintln!("whyslow serve: {} windows lost: {e}", refs.len());
                // Windows lost, not failed cycles.
                shared.counters.store_errors.fetch_add(refs.len() as u64, Ordering::Relaxed);
            }
        }
        // A window's symbolizing, splitting and compressing allocate and free megabytes at once, and glibc
        // keeps freed pages inside its arenas: after 5 minutes with process churn one arena held 31.7 MB
        // of which 15.1 MB were in use. Hand the free pages back after every window.
        // SAFETY: malloc_trim takes no pointers.
        unsafe { libc::malloc_trim(0) };
        let rss = crate::procs::own_usage().1;
        if rss > base_rss + SYMBOLIZER_MEMORY {
            symbolizer = whyslow_symbolize::Resident::caching_debug_files_in(&debug_files);
            // SAFETY: malloc_trim takes no pointers.
            unsafe { libc::malloc_trim(0) };
            shared.counters.symbolizer_resets.fetch_add(1, Ordering::Relaxed);
            base_rss = crate::procs::own_usage().1.min(rss);
        }
    }
}

/// One stored row: the targets, the process, its part of the window.
type Row = (Vec<i64>, ProcessView, whyslow_model::Profile);

/// The rows of a window of followed processes, each under the targets it was followed for.
fn followed_rows(
    shared: &Shared,
    symbolizer: &mut whyslow_symbolize::Resident,
    w: Window,
    parents: &HashMap<u32, (u32, Instant)>,
) -> Vec<Row> {
    let profile = symbolizer.symbolize(w.raw);
    let tracked = shared.tracked.lock().expect("tracked lock").clone();
    // A process is this session's only if it is followed under the session's key: a child forked
    // from a followed parent inherits the parent's events, and when other targets match the child
    // too (another key), its own session records it: what it inherited here would count it twice.
    // Each followed process is stored as itself (its pid, cgroup and targets), whether its events
    // are its own or inherited; a child no target matches goes with its nearest followed ancestor.
    let owner = |pid: u32| {
        let mut p = pid;
        for _ in 0..64 {
            if let Some(t) = tracked.get(&p) {
                return (t.key == w.key).then_some(p);
            }
            p = parents.get(&p)?.0;
        }
        None
    };
    let parts = whyslow_analyze::diff::split(&profile, owner);
    let mut rows = Vec::new();
    for (pid, part) in parts {
        let Some(t) = tracked.get(&pid) else { continue };
        let mut ids = t.targets.clone();
        ids.sort_unstable();
        ids.dedup();
        rows.push((ids, t.view.clone(), part));
    }
    rows
}

/// The rows of a whole-host window: each process that targets of every process matched, under them.
/// The samples of the others (and of processes never read) are dropped before symbolizing.
fn host_rows(
    shared: &Shared,
    symbolizer: &mut whyslow_symbolize::Resident,
    mut raw: RawRecording,
) -> Vec<Row> {
    let mut of: HashMap<u32, (Vec<i64>, ProcessView)> = HashMap::new();
    {
        let tracked = shared.host_tracked.lock().expect("tracked lock");
        for (_, thread, _) in raw.samples.keys() {
            if let Some(t) = tracked.get(&thread.pid).filter(|t| !t.targets.is_empty()) {
                of.entry(thread.pid).or_insert_with(|| (t.targets.clone(), t.view.clone()));
            }
        }
    }
    raw.samples.retain(|(_, thread, _), _| of.contains_key(&thread.pid));
    if raw.samples.is_empty() {
        return Vec::new();
    }
    let profile = symbolizer.symbolize(raw);
    let parts = whyslow_analyze::diff::split(&profile, |pid| of.contains_key(&pid).then_some(pid));
    parts
        .into_iter()
        .filter_map(|(pid, part)| {
            let (ids, view) = of.remove(&pid)?;
            Some((ids, view, part))
        })
        .collect()
}

/// How much the agent may grow through the symbolizer's caches before they are dropped.
const SYMBOLIZER_MEMORY: u64 = 48 << 20;
