//! Delivery of stored windows to push backends. The store is the queue: each backend has a cursor (the
//! last window it got), so an outage loses nothing (windows are sent late, in order, with their own
//! timestamps), memory stays bounded whatever the outage (one window at a time is read), and what
//! retention removes before a backend got it is counted as dropped. Failures back off exponentially with
//! jitter (1 s to 5 min), logged at most once a minute; 401/403/404 are outages too (rotated
//! credentials, a proxy). Only a refusal of the data itself (400/413/422, gRPC INVALID_ARGUMENT) drops
//! that window with the reason logged and counted, instead of retrying it forever.
//! Profiles an OTLP backend accepted without keeping (a partial success) are logged and counted too.

use crate::outbox::{Outbox, Outcome, Reader};
use crate::shared::Shared;
use crate::store::{Queue, StoreError, WindowRow};
use std::sync::Arc;
use whyslow_model::unix_now_ns as now_ns;
use whyslow_push::{Auth, Backend, PushError, Sender};

/// A backend and how to reach it.
#[derive(Debug, Clone)]
pub struct PushOptions {
    pub backend: Backend,
    pub auth: Auth,
}

/// Pushes every stored window after the backend's cursor, in order, until the agent stops.
pub fn run(s: Arc<Shared>, o: PushOptions) {
    let name = o.backend.name();
    let outbox = Outbox { queue: Queue::Windows, what: format!("push to {name}"), name: name.clone() };
    let cursor = match outbox.cursor(&s) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("whyslow serve: push to {name}: {e}");
            return;
        }
    };
    outbox.drain(&s, cursor, &mut Pusher { name, sender: Sender::new(&o.backend, &o.auth) });
}

/// One backend's end of the push queue.
struct Pusher {
    name: String,
    sender: Sender,
}

impl Reader for Pusher {
    /// A window, its process's name and its targets.
    type Batch = (WindowRow, String, Vec<i64>);

    fn next(&mut self, s: &Shared, cursor: i64) -> Result<Option<(Self::Batch, i64)>, StoreError> {
        let next = s.store.lock().expect("store lock").next_window(cursor)?;
        Ok(next.map(|n| {
            let id = n.0.id;
            (n, id)
        }))
    }

    fn deliver(&mut self, s: &Shared, (row, comm, targets): Self::Batch) -> Outcome {
        let name = &self.name;
        let profile = match s.store.lock().expect("store lock").profile(row.id) {
            Ok(Some(p)) => p,
            // Removed by retention meanwhile, or unreadable: nothing to send.
            _ => return Outcome::Gone,
        };
        let labels = labels(s, &targets, row.pid, &comm, &row.cgroup);
        let result = self.sender.send(&labels, &profile);
        let mut stats = s.push_stats.lock().expect("stats lock");
        let st = stats.entry(name.clone()).or_default();
        match result {
            Ok(sent) => {
                st.pushed += 1;
                st.bytes += sent.bytes;
                st.rejected_profiles += sent.rejected_profiles;
                if sent.rejected_profiles > 0 || !sent.message.is_empty() {
                    eprintln!(
                        "whyslow serve: {name} kept window {} partly ({} profiles rejected): {}",
                        row.id, sent.rejected_profiles, sent.message
                    );
                }
                st.last_success_ns = now_ns();
                Outcome::Delivered
            }
            Err(PushError::Refused(m)) => {
                st.refused += 1;
                eprintln!("whyslow serve: {name} refused window {} (dropped, not retried): {m}", row.id);
                Outcome::Dropped
            }
            Err(PushError::Retry(m)) => {
                st.failures += 1;
                let name = name.clone();
                Outcome::Retry(Box::new(move |secs| {
                    format!("whyslow serve: push to {name} failed, retrying in {secs} s, queue kept: {m}")
                }))
            }
        }
    }
}

/// The series labels of a window: as the service, the name of the first of its targets that has one
/// (targets of every process aside: they name no service), else the process's systemd unit, else the
/// process name; its targets' labels (the first target's value where they differ), the agent's
/// `--push-label`s, the process's cgroup labels (unit, container_id, pod_uid), the process name and the
/// host; the pid only when asked for (one series per process). A window is pushed once, however many
/// targets it belongs to.
fn labels(s: &Shared, targets: &[i64], pid: u32, comm: &str, cgroup: &str) -> whyslow_push::Labels {
    let specs: Vec<crate::spec::TargetSpec> = {
        let all = s.targets.read().expect("targets lock");
        targets.iter().filter_map(|t| all.get(t).cloned()).collect()
    };
    let mut extra: Vec<(String, String)> = s.opts.push_labels.clone();
    for t in &specs {
        for (k, v) in &t.labels {
            if !extra.iter().any(|(e, _)| e == k) {
                extra.push((k.clone(), v.clone()));
            }
        }
    }
    let from_cgroup = crate::cgroup::labels(cgroup);
    for (k, v) in &from_cgroup {
        if !extra.iter().any(|(e, _)| e == k) {
            extra.push((k.to_string(), v.clone()));
        }
    }
    let named = specs.iter().filter(|t| !t.matcher.all).find_map(|t| t.name.clone());
    let unit = from_cgroup.get(crate::cgroup::UNIT).cloned();
    whyslow_push::Labels {
        service: whyslow_push::service_name(named.or(unit), comm),
        process: comm.to_string(),
        hostname: std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default(),
        pid: s.opts.push_per_process.then_some(pid),
        extra,
    }
}

/// Adds the push families to /metrics.
pub fn metrics(s: &Shared, o: &mut crate::prom::Out) {
    let stats = s.push_stats.lock().expect("stats lock").clone();
    for p in &s.opts.push {
        let name = p.backend.name();
        let st = stats.get(&name).cloned().unwrap_or_default();
        let (queued, dropped) =
            s.store.lock().expect("store lock").queue(Queue::Windows, &name).unwrap_or_default();
        let b = [("backend", name.as_str())];
        let w = |result: &'static str| [("backend", name.as_str()), ("result", result)];
        o.sample(
            "whyslow_push_windows_total",
            "counter",
            "Windows delivered to a push backend, refused by it, or removed by retention before it got them.",
            &w("pushed"),
            st.pushed.to_string(),
        );
        o.sample("whyslow_push_windows_total", "counter", "", &w("refused"), st.refused.to_string());
        o.sample("whyslow_push_windows_total", "counter", "", &w("retention"), dropped.to_string());
        o.sample(
            "whyslow_push_failures_total",
            "counter",
            "Push attempts that failed and will be retried.",
            &b,
            st.failures.to_string(),
        );
        o.sample("whyslow_push_bytes_total", "counter", "Bytes pushed.", &b, st.bytes.to_string());
        o.sample(
            "whyslow_push_rejected_profiles_total",
            "counter",
            "Profiles of delivered windows the backend rejected (OTLP partial success).",
            &b,
            st.rejected_profiles.to_string(),
        );
        o.sample(
            "whyslow_push_queue_windows",
            "gauge",
            "Windows waiting to be pushed.",
            &b,
            queued.to_string(),
        );
        o.sample(
            "whyslow_push_last_success_timestamp_seconds",
            "gauge",
            "When a push last succeeded (0: never).",
            &b,
            format!("{:.3}", st.last_success_ns as f64 / 1e9),
        );
    }
}
