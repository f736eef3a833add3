//! /metrics in the Prometheus text format: `whyslow_` prefix, base units, `_total` counters, no pid labels.

use crate::prom::Out;
use crate::shared::Shared;
use std::sync::atomic::Ordering;

pub fn render(s: &Shared) -> Result<String, crate::store::StoreError> {
    let c = &s.counters;
    let mut o = Out::default();
    o.family("whyslow_build_info", "gauge", "Version of the agent.");
    o.value("whyslow_build_info", &[("version", env!("CARGO_PKG_VERSION"))], 1);
    let targets = s.targets.read().expect("targets lock");
    let running = targets.values().filter(|t| t.state == crate::spec::State::Running).count();
    o.family("whyslow_targets", "gauge", "Targets defined, by state.");
    o.value("whyslow_targets", &[("state", "running")], running);
    o.value("whyslow_targets", &[("state", "stopped")], targets.len() - running);
    drop(targets);
    let tracked = s.tracked.lock().expect("tracked lock");
    let live: Vec<&crate::tracked::Tracked> = tracked.values().filter(|t| t.gone_ns.is_none()).collect();
    o.family("whyslow_tracked_processes", "gauge", "Processes followed now, by how they are followed.");
    o.value(
        "whyslow_tracked_processes",
        &[("followed", "directly")],
        live.iter().filter(|t| t.root == t.view.pid).count(),
    );
    o.value(
        "whyslow_tracked_processes",
        &[("followed", "inherited")],
        live.iter().filter(|t| t.root != t.view.pid).count(),
    );
    drop(tracked);
    let host = s.host_tracked.lock().expect("tracked lock").values().filter(|t| t.gone_ns.is_none()).count();
    o.value("whyslow_tracked_processes", &[("followed", "host")], host);
    o.one(
        "whyslow_processes_held",
        "gauge",
        "Processes whose state (mappings, unwinder) the recording sessions hold: the followed ones, and \
         those that ended or were let go within the last second.",
        c.processes_held.load(Ordering::Relaxed),
    );
    let samples = c.samples.lock().expect("counters lock").clone();
    o.family(
        "whyslow_samples_total",
        "counter",
        "Samples and events converted, by the sources of the recording session.",
    );
    for (k, n) in &samples {
        o.value("whyslow_samples_total", &[("sources", k)], n.samples);
    }
    o.family(
        "whyslow_lost_samples_total",
        "counter",
        "Samples the kernel dropped (ring buffer full), by session sources.",
    );
    for (k, n) in &samples {
        o.value("whyslow_lost_samples_total", &[("sources", k)], n.lost);
    }
    o.family(
        "whyslow_recorder_cpu_seconds_total",
        "counter",
        "CPU time of the recording sessions' threads while they record (reading the rings, unwinding, \
         converting, cutting windows; not symbolizing or storing), by session sources: over \
         whyslow_samples_total, what a sample costs the agent.",
    );
    for (k, n) in &samples {
        o.value("whyslow_recorder_cpu_seconds_total", &[("sources", k)], n.cpu_ns as f64 / 1e9);
    }
    o.family(
        "whyslow_recorder_cpu_per_sample_seconds",
        "gauge",
        "The recording sessions' CPU time per sample over the last window cut, by session sources.",
    );
    for (k, n) in &samples {
        o.value("whyslow_recorder_cpu_per_sample_seconds", &[("sources", k)], n.window_ns_per_sample / 1e9);
    }
    o.one(
        "whyslow_windows_stored_total",
        "counter",
        "Windows stored (one per process, whatever the number of targets it belongs to).",
        c.windows.load(Ordering::Relaxed),
    );
    o.one(
        "whyslow_windows_removed_total",
        "counter",
        "Windows removed by retention.",
        c.windows_removed.load(Ordering::Relaxed),
    );
    o.one(
        "whyslow_store_errors_total",
        "counter",
        "Windows lost because the store failed to write them.",
        c.store_errors.load(Ordering::Relaxed),
    );
    o.one(
        "whyslow_follow_errors_total",
        "counter",
        "Processes that could not be followed.",
        c.follow_errors.load(Ordering::Relaxed),
    );
    o.one(
        "whyslow_session_errors_total",
        "counter",
        "Recording sessions that failed to start.",
        c.session_errors.load(Ordering::Relaxed),
    );
    o.one(
        "whyslow_http_connections",
        "gauge",
        "HTTP connections open now.",
        c.connections_open.load(Ordering::Relaxed),
    );
    o.one(
        "whyslow_http_connections_refused_total",
        "counter",
        "HTTP connections closed at once: over the cap in all or from one address.",
        c.connections_refused.load(Ordering::Relaxed),
    );
    o.one(
        "whyslow_http_header_timeouts_total",
        "counter",
        "HTTP connections closed because a request's headers did not arrive in time.",
        c.connections_timed_out.load(Ordering::Relaxed),
    );
    o.one(
        "whyslow_symbolizer_resets_total",
        "counter",
        "Times the symbolizer's caches (files read, symbols, debug information) were dropped to bound memory.",
        c.symbolizer_resets.load(Ordering::Relaxed),
    );
    o.one(
        "whyslow_files_written_total",
        "counter",
        "Periodic SVG and folded files written.",
        c.files_written.load(Ordering::Relaxed),
    );
    let store = s.store.lock().expect("store lock");
    let (windows, bytes) = store.usage()?;
    let disk = store.disk_bytes();
    drop(store);
    o.one("whyslow_store_windows", "gauge", "Windows in the store.", windows);
    o.one("whyslow_store_profile_bytes", "gauge", "Bytes of the stored profiles.", bytes);
    o.one("whyslow_store_disk_bytes", "gauge", "Bytes the store's files take on disk.", disk);
    o.family("whyslow_http_requests_total", "counter", "API requests answered, by status code.");
    for (code, n) in c.requests.lock().expect("counters lock").iter() {
        o.value("whyslow_http_requests_total", &[("code", &code.to_string())], n);
    }
    crate::pusher::metrics(s, &mut o);
    crate::watch::metrics(s, &mut o);
    crate::webhook::metrics(s, &mut o);
    let (cpu, rss) = crate::procs::own_usage();
    o.one("whyslow_process_cpu_seconds_total", "counter", "CPU time of the agent (user + system).", cpu);
    o.one("whyslow_process_resident_memory_bytes", "gauge", "Resident memory of the agent.", rss);
    Ok(o.into_text())
}
