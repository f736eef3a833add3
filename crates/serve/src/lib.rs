//! `whyslow serve`: the continuous profiling agent. Targets choose processes (by name, command line, pid,
//! cgroup) and sources; the recorder follows every matching process as it appears and records it in
//! windows through the same converter as one-shot recordings; windows go to an embedded SQLite store;
//! an HTTP API (and stackprobe's `/flamegraph` form) defines targets and serves profiles, the doctor and
//! diffs over any time range; periodic SVG/folded files are written for targets that ask for them.
//!
//! Threads: the HTTP server (tokio), the manager (scans /proc, starts and feeds sessions), one thread per
//! recording session, the window worker (symbolize, split, store), and housekeeping (retention, periodic
//! files). Only this crate knows HTTP.

mod api;
pub mod cgroup;
mod housekeeping;
mod metrics;
mod outbox;
mod procs;
mod prom;
mod pusher;
mod recorder;
mod shared;
mod slicing;
pub mod spec;
pub mod store;
pub mod timespec;
mod tracked;
mod view;
mod watch;
mod webhook;

pub use view::{view, ViewFile};

use shared::Shared;
use spec::TargetSpec;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use store::Store;
use whyslow_model::unix_now_ns as now_ns;

/// How to run the agent.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    /// Periodic files are written under this directory only (default: `DATA_DIR/output`).
    pub output_root: PathBuf,
    /// Bearer token every request must carry (required to listen on a non-loopback address).
    pub token: Option<String>,
    /// Windows older than this are removed.
    pub retention: Duration,
    /// The stored profiles take at most this many bytes (oldest windows removed first).
    pub max_disk: u64,
    /// Targets from the config file: kept in the store by name (a restart updates them, adds none twice).
    pub targets: Vec<TargetSpec>,
    /// Largest request body accepted.
    pub max_body: usize,
    /// Backends every stored window is pushed to.
    pub push: Vec<pusher::PushOptions>,
    /// Labels added to every pushed series.
    pub push_labels: Vec<(String, String)>,
    /// A `pid` label on pushed series (one series per process).
    pub push_per_process: bool,
    /// Host names (besides IP addresses and `localhost`) requests may name in their `Host` header.
    pub allow_hosts: Vec<String>,
    /// The always-on doctor: every window diagnosed, findings and regressions stored (see watch.rs).
    pub doctor: bool,
    /// URLs each doctor event (a regression, a finding that started) is POSTed to as JSON.
    pub webhooks: Vec<String>,
}

impl ServeOptions {
    /// A local agent over `data_dir` without token, config targets or pushes (what `whyslow view` runs).
    pub fn local(listen: SocketAddr, data_dir: PathBuf) -> Self {
        ServeOptions {
            listen,
            output_root: data_dir.join("output"),
            data_dir,
            token: None,
            retention: Duration::from_secs(u32::MAX as u64),
            max_disk: u64::MAX,
            targets: Vec::new(),
            max_body: 1 << 20,
            push: Vec::new(),
            push_labels: Vec::new(),
            push_per_process: false,
            allow_hosts: Vec::new(),
            doctor: false,
            webhooks: Vec::new(),
        }
    }
}

pub use pusher::PushOptions;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(
        "refusing to listen on {0} without --token-file: only 127.0.0.1/::1 may be served without a token"
    )]
    Unprotected(SocketAddr),
    #[error("cannot listen on {addr}: {source}")]
    Listen { addr: SocketAddr, source: std::io::Error },
    #[error("cannot create {path}: {source}")]
    Dir { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error("{0}")]
    Config(String),
    #[error("another whyslow serve{holder} uses {dir}: {lock} is locked (one agent per data directory)")]
    Locked { dir: PathBuf, lock: PathBuf, holder: String },
}

/// The data directory's lock (an flock held while the agent runs): two agents on one store would each
/// see only the targets they added and record the same processes twice.
struct DirLock(#[allow(dead_code)] std::fs::File);

fn lock_dir(dir: &std::path::Path) -> Result<DirLock, ServeError> {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let lock = dir.join("whyslow.lock");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&lock)
        .map_err(|source| ServeError::Dir { path: lock.clone(), source })?;
    // SAFETY: flock on a descriptor this function owns; no pointers.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let pid = std::fs::read_to_string(&lock).unwrap_or_default();
        let holder = match pid.trim() {
            "" => String::new(),
            p => format!(" (pid {p})"),
        };
        return Err(ServeError::Locked { dir: dir.to_path_buf(), lock, holder });
    }
    let _ = f.set_len(0);
    let _ = write!(f, "{}", std::process::id());
    Ok(DirLock(f))
}

/// Opens the store; one that fails its integrity check is moved aside (`whyslow.db.corrupt-UNIXSECONDS`,
/// with its log) and a new one started, saying so: a half-readable store would serve some targets and
/// fail on others while /healthz said ok.
fn open_store(dir: &std::path::Path) -> Result<Store, ServeError> {
    match Store::open(dir) {
        Err(store::StoreError::Damaged { path, what }) => {
            let aside = path.with_extension(format!("db.corrupt-{}", now_ns() / 1_000_000_000));
            for suffix in ["", "-wal", "-shm"] {
                let from = PathBuf::from(format!("{}{suffix}", path.display()));
                if from.exists() {
                    let to = PathBuf::from(format!("{}{suffix}", aside.display()));
                    std::fs::rename(&from, &to).map_err(|source| ServeError::Dir { path: to, source })?;
                }
            }
            eprintln!(
                "whyslow serve: the store {} is corrupt ({what}); moved it to {} and started an empty one",
                path.display(),
                aside.display()
            );
            Ok(Store::open(dir)?)
        }
        other => Ok(other?),
    }
}

/// Runs the agent until SIGINT/SIGTERM: then the server stops taking requests, every session flushes its
/// window into the store, and everything is detached.
pub fn run(opts: ServeOptions) -> Result<(), ServeError> {
    run_with(opts, true, |_| {})
}

/// [`run`]; with `record` false nothing is recorded and nothing removed (no manager, no housekeeping):
/// the API and the UI serve what the store holds (`whyslow view`). `on_listen` is told the address.
fn run_with(opts: ServeOptions, record: bool, on_listen: impl FnOnce(SocketAddr)) -> Result<(), ServeError> {
    if opts.token.is_none() && !opts.listen.ip().is_loopback() {
        return Err(ServeError::Unprotected(opts.listen));
    }
    for dir in [&opts.data_dir, &opts.output_root] {
        std::fs::create_dir_all(dir).map_err(|source| ServeError::Dir { path: dir.clone(), source })?;
    }
    let lock = lock_dir(&opts.data_dir)?;
    let mut store = open_store(&opts.data_dir)?;
    if record {
        store.set_budget(opts.max_disk)?;
    }
    let stored = config_targets(&mut store, &opts.targets)?;
    let (listener, addr) = bind(opts.listen)?;
    whyslow_record::signals::install();
    tune_malloc();
    let shared = Arc::new(Shared::new(opts, store, stored));
    let outboxes = start_outboxes(&shared, record);
    let recording = if record { start_recording(&shared) } else { Vec::new() };
    on_listen(addr);
    if record {
        let n = shared.targets.read().expect("targets lock").len();
        eprintln!(
            "whyslow serve: listening on http://{addr} (data in {}, {n} target{})",
            shared.opts.data_dir.display(),
            if n == 1 { "" } else { "s" }
        );
    }
    let served = serve_api(&shared, listener);
    shared.stop();
    for t in recording.into_iter().chain(outboxes) {
        let _ = t.join();
    }
    if record {
        report_stop(&shared);
    }
    drop(lock);
    served.map_err(|source| ServeError::Listen { addr, source })
}

/// The stored targets, with the config file's added or updated by name (a restart adds none twice).
fn config_targets(
    store: &mut Store,
    targets: &[TargetSpec],
) -> Result<BTreeMap<i64, TargetSpec>, ServeError> {
    let mut stored: BTreeMap<i64, TargetSpec> = store.targets()?.into_iter().collect();
    for spec in targets {
        spec.check().map_err(|e| ServeError::Config(format!("config target: {e}")))?;
        let same = stored.iter().find(|(_, s)| s.name.is_some() && s.name == spec.name).map(|(&id, _)| id);
        let id = match same {
            Some(id) => {
                store.update_target(id, spec)?;
                id
            }
            None => store.add_target(spec, now_ns())?,
        };
        stored.insert(id, spec.clone());
    }
    Ok(stored)
}

/// The listening socket (non-blocking, for tokio) and the address it got.
fn bind(listen: SocketAddr) -> Result<(std::net::TcpListener, SocketAddr), ServeError> {
    let listener =
        std::net::TcpListener::bind(listen).map_err(|source| ServeError::Listen { addr: listen, source })?;
    let addr = listener.local_addr().map_err(|source| ServeError::Listen { addr: listen, source })?;
    listener.set_nonblocking(true).map_err(|source| ServeError::Listen { addr, source })?;
    Ok((listener, addr))
}

/// Bounds what glibc's allocator keeps of the agent's bursts.
fn tune_malloc() {
    // Threads allocate in bursts at every window: glibc's one arena per thread then holds tens of MB
    // that never go back (39 -> 80 MB over 10 minutes); two arenas keep the agent flat (31 MB).
    // A window's large buffers (decompressed, compressed, grown by doubling) freed raise glibc's
    // mmap threshold to their size, after which the next ones come from the arenas and stay there,
    // scattered (resident memory went up and down 7 MB while the heap in use was flat at 25 MB): a
    // fixed threshold keeps them in mappings of their own, returned when freed.
    // SAFETY: mallopt takes no pointers.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    std::thread::Builder::new().name(name.into()).spawn(f).expect("thread")
}

/// The threads that deliver what the store queues: one per push backend, the always-on doctor and
/// one per webhook (these two only when recording).
fn start_outboxes(shared: &Arc<Shared>, record: bool) -> Vec<JoinHandle<()>> {
    let mut threads = Vec::new();
    for o in &shared.opts.push {
        let (s, o) = (shared.clone(), o.clone());
        threads.push(spawn("whyslow-push", move || pusher::run(s, o)));
    }
    if record && shared.opts.doctor {
        let s = shared.clone();
        threads.push(spawn("whyslow-doctor", move || watch::run(s)));
    }
    for url in shared.opts.webhooks.iter().filter(|_| record) {
        let (s, url) = (shared.clone(), url.clone());
        threads.push(spawn("whyslow-webhook", move || webhook::run(s, url)));
    }
    threads
}

/// The manager (follows processes, records them) and housekeeping (retention, periodic files).
fn start_recording(shared: &Arc<Shared>) -> Vec<JoinHandle<()>> {
    let s = shared.clone();
    let manager = spawn("whyslow-manager", move || recorder::run(s));
    let s = shared.clone();
    let keeper = spawn("whyslow-keeper", move || housekeeping::run(s));
    vec![manager, keeper]
}

/// Serves the API on `listener` until the agent is told to stop.
fn serve_api(shared: &Arc<Shared>, listener: std::net::TcpListener) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(api::serve(shared.clone(), listener))
}

/// The last line of a recording agent: where its windows went, or why the last ones were lost.
fn report_stop(shared: &Shared) {
    match shared.store_error.lock().expect("store error lock").as_deref() {
        None => {
            eprintln!("whyslow serve: stopped; windows flushed to {}", shared.opts.data_dir.display())
        }
        Some(e) => eprintln!(
            "whyslow serve: stopped; the last windows could not be stored ({} lost in all): {e}",
            shared.counters.store_errors.load(Ordering::Relaxed)
        ),
    }
}

/// Allocations from this size up get mappings of their own (glibc's default, 128 KiB, kept fixed).
const MMAP_THRESHOLD: libc::c_int = 128 << 10;

/// The name of the target `whyslow serve --all` defines.
pub const ALL_TARGET: &str = "all-processes";

/// The target of every process (`--all`): on-CPU samples at [`spec::ALL_FREQUENCY`], kept by name like
/// a config file's targets.
pub fn all_target() -> TargetSpec {
    TargetSpec::from_json(format!(r#"{{"name":"{ALL_TARGET}","match":{{"all":true}}}}"#).as_bytes())
        .expect("the all-processes target is valid")
}

/// Parses a config file (TOML): server settings are the command line's; `[[target]]` tables are
/// target definitions as the API takes them.
pub fn parse_config(text: &str) -> Result<Vec<TargetSpec>, ServeError> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Config {
        #[serde(default)]
        target: Vec<toml::Table>,
    }
    let c: Config =
        toml::from_str(text).map_err(|e| ServeError::Config(e.to_string().trim().replace('\n', " ")))?;
    let mut targets = Vec::with_capacity(c.target.len());
    for (i, t) in c.target.into_iter().enumerate() {
        // Through JSON, so a table means what the API's body means (defaults included).
        let spec = serde_json::to_value(&t)
            .map_err(|e| spec::SpecError::Syntax(e.to_string()))
            .and_then(TargetSpec::from_value)
            .map_err(|e| ServeError::Config(format!("target {}: {e}", i + 1)))?;
        targets.push(spec);
    }
    for (i, t) in targets.iter().enumerate() {
        t.check().map_err(|e| ServeError::Config(format!("target {}: {e}", i + 1)))?;
        // Config targets are kept in the store by name: two of one name would overwrite each other.
        if let Some(n) = &t.name {
            if targets[..i].iter().any(|o| o.name.as_ref() == Some(n)) {
                return Err(ServeError::Config(format!("target {}: the name '{n}' is used twice", i + 1)));
            }
        }
    }
    Ok(targets)
}

#[cfg(test)]
mod tests {
    #[test]
    fn config_targets_parse_strictly() {
        let t = super::parse_config(
            "[[target]]\nname = \"web\"\nsources = [\"cpu\", \"offcpu\"]\n[target.match]\ncomm = \"^nginx\"\n[target.labels]\nenv = \"prod\"\n",
        )
        .unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].labels["env"], "prod");
        assert!(super::parse_config("[[target]]\nname = \"x\"\n").unwrap_err().to_string().contains("match"));
        assert!(super::parse_config("[[target]]\nbogus = 1\n[target.match]\ncomm = \"a\"\n")
            .unwrap_err()
            .to_string()
            .contains("bogus"));
        // Names key config targets: one name twice is refused.
        let twice = "[[target]]\nname = \"a\"\n[target.match]\ncomm = \"x\"\n".repeat(2);
        assert!(super::parse_config(&twice).unwrap_err().to_string().contains("used twice"));
        // A target of every process samples at 19 Hz unless told otherwise.
        let all = super::parse_config("[[target]]\n[target.match]\nall = true\n").unwrap();
        assert_eq!((all[0].matcher.all, all[0].frequency), (true, 19));
        let all = super::parse_config("[[target]]\nfrequency = 49\n[target.match]\nall = true\n").unwrap();
        assert_eq!(all[0].frequency, 49);
        assert_eq!(super::all_target().frequency, 19);
        // The example shipped with the systemd unit.
        let shipped = super::parse_config(include_str!("../../../dist/whyslow.toml")).unwrap();
        assert_eq!(shipped[0].matcher.comm.as_deref(), Some("^nginx"));
    }
}
