//! Connections: how many are admitted (in all and per client, descriptors kept back for recording), how
//! long a client may take to send its headers, and the accept loop.

use crate::shared::Shared;
use axum::Router;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::unix::AsyncFd;

/// A client that has not sent a request's headers within this long (from connecting, or from its last
/// answer on a kept-alive connection) is disconnected: slow or idle clients cannot hold connections.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections open at once, in all and from one address. The rest are closed at once (and counted), so
/// the descriptors recording needs are never taken by clients.
const MAX_CONNECTIONS: usize = 256;
const MAX_CONNECTIONS_PER_CLIENT: usize = 32;
/// Descriptors kept back from connections for recording (perf events, eBPF maps, files, the store).
const RESERVED_FDS: u64 = 512;

/// Connections open now, in all and by client address.
#[derive(Default)]
struct Conns {
    total: usize,
    by_client: std::collections::HashMap<std::net::IpAddr, usize>,
}

/// One admitted connection: counted until dropped.
struct Admitted(Arc<Shared>, Arc<std::sync::Mutex<Conns>>, std::net::IpAddr);

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut c = self.1.lock().expect("conns lock");
        c.total -= 1;
        if let Some(n) = c.by_client.get_mut(&self.2) {
            *n -= 1;
            if *n == 0 {
                c.by_client.remove(&self.2);
            }
        }
        self.0.counters.connections_open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The connection cap: the configured one, lowered so that RESERVED_FDS descriptors stay free under the
/// descriptor limit (raised to its hard maximum first).
fn connection_cap() -> usize {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit read and write the struct given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            let raised = libc::rlimit { rlim_cur: r.rlim_max.min(1 << 20), rlim_max: r.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                r = raised;
            }
        }
    }
    let open = std::fs::read_dir("/proc/self/fd").map(|d| d.count() as u64).unwrap_or(64);
    let room = r.rlim_cur.saturating_sub(open + RESERVED_FDS) as usize;
    MAX_CONNECTIONS.min(room.max(8))
}

/// The signal handlers' stop descriptor (whyslow_record::signals), borrowed: it stays open.
struct StopFd(i32);

impl std::os::fd::AsRawFd for StopFd {
    fn as_raw_fd(&self) -> i32 {
        self.0
    }
}

/// Returns once a stop was requested (the stop descriptor readable), or after a second without one.
async fn stopped(fd: Option<&AsyncFd<StopFd>>) {
    if let Some(fd) = fd {
        while let Ok(mut ready) = fd.readable().await {
            if whyslow_record::signals::stop_requested() {
                return;
            }
            ready.clear_ready();
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await
}

/// Accepts connections and serves `app` on each admitted one until the agent stops; then lets answers
/// in flight finish.
pub(super) async fn accept(
    shared: Arc<Shared>,
    listener: tokio::net::TcpListener,
    app: Router,
) -> std::io::Result<()> {
    let cap = connection_cap();
    let per_client = MAX_CONNECTIONS_PER_CLIENT.min(cap);
    let conns = Arc::new(std::sync::Mutex::new(Conns::default()));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // The agent stops on a signal: wait for it with the connections, not on a clock (where no stop fd
    // could be made, look once a second).
    let stop_fd = whyslow_record::signals::stop_fd().and_then(|fd| {
        // SAFETY: the stop descriptor stays open, the same eventfd, for the process's lifetime.
        unsafe { AsyncFd::register_with_interest(StopFd(fd), tokio::io::Interest::READABLE) }.ok()
    });
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stopped(stop_fd.as_ref()) => {
                if shared.stopping() { break } else { continue }
            }
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            // Out of descriptors (or another transient failure): wait instead of spinning.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let admitted = {
            let mut c = conns.lock().expect("conns lock");
            let mine = c.by_client.get(&peer.ip()).copied().unwrap_or(0);
            (c.total < cap && mine < per_client).then(|| {
                c.total += 1;
                *c.by_client.entry(peer.ip()).or_default() += 1;
                Admitted(shared.clone(), conns.clone(), peer.ip())
            })
        };
        let Some(admitted) = admitted else {
            shared.counters.connections_refused.fetch_add(1, Ordering::Relaxed);
            // Told why when the socket takes it at once; closed either way.
            let _ = stream.try_write(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: 37\r\n\r\n{\"error\": \"too many connections\"}\r\n\r\n",
            );
            drop(stream);
            continue;
        };
        shared.counters.connections_open.fetch_add(1, Ordering::Relaxed);
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let mut stop = stop_rx.clone();
        let s = shared.clone();
        tokio::spawn(async move {
            let _admitted = admitted;
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            tokio::pin!(conn);
            let ended = tokio::select! {
                r = conn.as_mut() => r,
                _ = stop.changed() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if ended.is_err_and(|e| e.is_timeout()) {
                s.counters.connections_timed_out.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    let _ = stop_tx.send(true);
    // Answers in flight finish (a few seconds at most); idle connections close now.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while conns.lock().expect("conns lock").total > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}
