//! What the agent's threads share: its options, the store, the targets, the processes followed, and
//! the counters behind /metrics and /healthz. Only state and its small accessors live here; what the
//! threads do with it lives in their own modules.

use crate::spec::TargetSpec;
use crate::store::{Store, StoreError};
use crate::tracked::Tracked;
use crate::ServeOptions;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::Duration;

/// Counters behind /metrics.
#[derive(Default)]
pub struct Counters {
    /// What the recording sessions converted and what it cost them, by session sources.
    pub(crate) samples: Mutex<BTreeMap<String, SessionCounts>>,
    pub windows: AtomicU64,
    pub windows_removed: AtomicU64,
    pub store_errors: AtomicU64,
    pub follow_errors: AtomicU64,
    pub session_errors: AtomicU64,
    pub files_written: AtomicU64,
    pub(crate) requests: Mutex<BTreeMap<u16, u64>>,
    /// HTTP connections open now, refused (over a cap), and closed for sending their headers too slowly.
    pub connections_open: AtomicU64,
    pub connections_refused: AtomicU64,
    pub connections_timed_out: AtomicU64,
    /// Times the symbolizer's caches were dropped to bound the agent's memory.
    pub symbolizer_resets: AtomicU64,
    /// Processes whose state the recording sessions hold (summed over them).
    pub processes_held: AtomicU64,
}

/// The counts of the recording sessions of one set of sources.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SessionCounts {
    pub samples: u64,
    pub lost: u64,
    /// CPU time of the sessions' threads while they record (reading the rings, unwinding, converting,
    /// cutting windows), in ns: what the samples cost the agent before symbolizing and storing.
    pub cpu_ns: u64,
    /// That CPU time per sample over the last window a session cut, in ns (0 before the first).
    pub window_ns_per_sample: f64,
}

impl Counters {
    /// Adds one step of a session of sources `sources` ([`Key::name`](crate::tracked::Key::name)):
    /// samples and lost samples converted, and its CPU ns.
    pub(crate) fn add(&self, sources: &str, samples: u64, lost: u64, cpu_ns: u64) {
        self.of_sources(sources, |e| {
            e.samples += samples;
            e.lost += lost;
            e.cpu_ns += cpu_ns;
        });
    }

    /// A session of sources `sources` cut a window whose samples cost `ns_per_sample` of its CPU each.
    pub(crate) fn window_cost(&self, sources: &str, ns_per_sample: f64) {
        self.of_sources(sources, |e| e.window_ns_per_sample = ns_per_sample);
    }

    /// Changes the counts of `sources` (called at every step of a session: no name is made when the
    /// entry exists).
    fn of_sources(&self, sources: &str, change: impl FnOnce(&mut SessionCounts)) {
        let mut m = self.samples.lock().expect("counters lock");
        match m.get_mut(sources) {
            Some(e) => change(e),
            None => change(m.entry(sources.to_string()).or_default()),
        }
    }

    pub(crate) fn request(&self, code: u16) {
        *self.requests.lock().expect("counters lock").entry(code).or_default() += 1;
    }
}

/// Delivery counters of one backend.
#[derive(Debug, Clone, Default)]
pub struct PushStats {
    pub pushed: u64,
    pub refused: u64,
    pub failures: u64,
    pub bytes: u64,
    /// Profiles of delivered windows the backend rejected (OTLP partial success).
    pub rejected_profiles: u64,
    pub last_success_ns: u64,
}

/// Delivery counters of one hook.
#[derive(Debug, Clone, Default)]
pub struct HookStats {
    pub delivered: u64,
    pub refused: u64,
    pub failures: u64,
}

/// What /metrics shows of the doctor.
#[derive(Debug, Default, Clone)]
pub struct DoctorStats {
    /// Target windows diagnosed.
    pub windows: u64,
    /// CPU seconds the doctor's thread used.
    pub cpu_seconds: f64,
    /// (target, rule) -> impact in the target's last window (0 once gone).
    pub impacts: BTreeMap<(i64, String), f64>,
    /// Regressions reported, by target.
    pub regressions: BTreeMap<i64, u64>,
}

/// A count of events that threads wait for.
#[derive(Default)]
pub(crate) struct Bell {
    rings: Mutex<u64>,
    rung: Condvar,
}

impl Bell {
    pub(crate) fn ring(&self) {
        *self.rings.lock().expect("bell lock") += 1;
        self.rung.notify_all();
    }

    /// How often it has rung so far.
    pub(crate) fn rings(&self) -> u64 {
        *self.rings.lock().expect("bell lock")
    }

    /// Waits up to `d` for it to ring past `seen` rings; how often it has rung then.
    pub(crate) fn wait(&self, seen: u64, d: Duration) -> u64 {
        let rings = self.rings.lock().expect("bell lock");
        *self.rung.wait_timeout_while(rings, d, |n| *n == seen).expect("bell lock").0
    }
}

/// What the threads share.
pub struct Shared {
    pub(crate) opts: ServeOptions,
    pub(crate) store: Mutex<Store>,
    /// The targets as stored, by id.
    pub(crate) targets: RwLock<BTreeMap<i64, TargetSpec>>,
    pub(crate) tracked: Mutex<BTreeMap<u32, Tracked>>,
    /// The processes the whole-host sampling (targets of every process) saw, from their first sample
    /// until shortly after they ended; apart from `tracked` (a process can be both).
    pub(crate) host_tracked: Mutex<BTreeMap<u32, Tracked>>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) push_stats: Mutex<BTreeMap<String, PushStats>>,
    /// The always-on doctor's counters, and each webhook's.
    pub(crate) doctor: Mutex<DoctorStats>,
    pub(crate) hook_stats: Mutex<BTreeMap<String, HookStats>>,
    pub(crate) stopping: AtomicBool,
    /// Rung when the store gains what a queue's reader reads (windows, the doctor's events) and when the
    /// agent stops: idle readers wait on it (outbox.rs) instead of asking the store on a clock.
    pub(crate) queued: Bell,
    /// The last store failure (None: the last write succeeded), for /healthz.
    pub(crate) store_error: Mutex<Option<String>>,
    /// When the manager last finished a scan (0: no manager), for /healthz.
    pub(crate) manager_beat_ns: AtomicU64,
}

impl Shared {
    /// The state of an agent over `store`, holding the targets `targets` (as stored, by id).
    pub(crate) fn new(opts: ServeOptions, store: Store, targets: BTreeMap<i64, TargetSpec>) -> Shared {
        Shared {
            opts,
            store: Mutex::new(store),
            targets: RwLock::new(targets),
            tracked: Mutex::new(BTreeMap::new()),
            host_tracked: Mutex::new(BTreeMap::new()),
            counters: Arc::new(Counters::default()),
            push_stats: Mutex::new(BTreeMap::new()),
            doctor: Mutex::new(DoctorStats::default()),
            hook_stats: Mutex::new(BTreeMap::new()),
            stopping: AtomicBool::new(false),
            queued: Bell::default(),
            store_error: Mutex::new(None),
            manager_beat_ns: AtomicU64::new(0),
        }
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst) || whyslow_record::signals::stop_requested()
    }

    /// Tells every thread to stop, waking the readers that wait for items.
    pub(crate) fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.queued.ring();
    }

    /// Notes how the last store write went (for /healthz).
    pub(crate) fn store_result<T>(&self, r: &Result<T, StoreError>) {
        *self.store_error.lock().expect("store error lock") = r.as_ref().err().map(|e| e.to_string());
    }
}

/// The stored windows `ids`, merged into one profile spanning them.
pub(crate) fn merged(s: &Shared, ids: &[i64]) -> Result<whyslow_model::Profile, StoreError> {
    merged_with(s, ids, |_| true)
}

/// [`merged`], leaving out the memory in use of the windows `in_use` refuses: a window holds the level
/// at its end, so a range keeps one window's of each process (see `api/query.rs`).
pub(crate) fn merged_with(
    s: &Shared,
    ids: &[i64],
    in_use: impl Fn(i64) -> bool,
) -> Result<whyslow_model::Profile, StoreError> {
    let mut profiles = Vec::with_capacity(ids.len());
    for &id in ids {
        let p = s.store.lock().expect("store lock").profile(id)?;
        profiles.extend(p.map(|mut p| {
            if !in_use(id) {
                drop_in_use(&mut p);
            }
            p
        }));
    }
    if profiles.len() == 1 {
        return Ok(profiles.pop().expect("one profile"));
    }
    let refs: Vec<&whyslow_model::Profile> = profiles.iter().collect();
    let mut p = whyslow_analyze::diff::merge(&refs);
    if let (Some(start), Some(end)) = (
        profiles.iter().map(|p| p.meta.start_unix_ns).min(),
        profiles.iter().map(|p| p.meta.start_unix_ns + p.meta.duration_ns).max(),
    ) {
        p.meta.start_unix_ns = start;
        p.meta.duration_ns = end - start;
    }
    Ok(p)
}

/// Zeroes a profile's `inuse-*` values (samples left with no value go).
fn drop_in_use(p: &mut whyslow_model::Profile) {
    use whyslow_model::sample_types as st;
    let slots: Vec<usize> =
        [st::INUSE_BYTES, st::INUSE_COUNT].iter().filter_map(|t| p.sample_type(t)).collect();
    if slots.is_empty() {
        return;
    }
    for smp in &mut p.samples {
        for &i in &slots {
            smp.values[i] = 0;
        }
    }
    p.samples.retain(|smp| smp.values.iter().any(|&v| v != 0));
}
