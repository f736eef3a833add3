//! One delivery loop under every queue the store keeps: push backends and the always-on doctor read
//! the stored windows, webhooks the doctor's events. The store is the queue: each reader has a cursor
//! (the last item it got), so an outage loses nothing and a restart goes on where it stopped. The
//! loop reads the next batch after the cursor, delivers it, retries a failed delivery with backoff,
//! and advances the cursor. What a reader reads and how it delivers is its own (pusher.rs, watch.rs,
//! webhook.rs); this file must never know a receiver's protocol.

use crate::shared::Shared;
use crate::store::{Queue, StoreError};
use std::time::Duration;
use whyslow_model::unix_now_ns as now_ns;

const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// The longest an idle reader waits for the store's bell (the writers ring it; this bounds a wait
/// whose ring was missed, such as a stop asked by a signal before the agent's threads were told).
const UNRUNG: Duration = Duration::from_secs(1);
const LOG_EVERY: Duration = Duration::from_secs(60);

/// How a delivery went.
pub(crate) enum Outcome {
    /// Delivered: the cursor moves past the batch, and the next failure waits 1 s again.
    Delivered,
    /// Refused for good (the receiver will never take it): the cursor moves past the batch.
    Dropped,
    /// Nothing left to deliver (removed meanwhile): the cursor moves past the batch, unstored.
    Gone,
    /// The receiver failed: the batch is tried again after a backoff; the line to log, given the wait
    /// in seconds.
    Retry(Box<dyn FnOnce(u64) -> String>),
}

/// A reader of a queue: what it reads after its cursor, and how it delivers it.
pub(crate) trait Reader {
    type Batch;
    /// The next batch after item `cursor`, with the id of its last item (None: nothing queued).
    fn next(&mut self, s: &Shared, cursor: i64) -> Result<Option<(Self::Batch, i64)>, StoreError>;
    fn deliver(&mut self, s: &Shared, batch: Self::Batch) -> Outcome;
}

/// A queue's place in the store: which items it reads, under which name, and the log lines' subject
/// (`push to NAME`, `webhook NAME`, `doctor`).
pub(crate) struct Outbox {
    pub queue: Queue,
    pub name: String,
    pub what: String,
}

impl Outbox {
    /// Where the queue's reader is; a reader seen for the first time starts at the newest item
    /// (history is not delivered).
    pub(crate) fn cursor(&self, s: &Shared) -> Result<i64, StoreError> {
        s.store.lock().expect("store lock").cursor(self.queue, &self.name)
    }

    /// Delivers what comes after `cursor` until the agent stops.
    pub(crate) fn drain(&self, s: &Shared, mut cursor: i64, reader: &mut impl Reader) {
        let mut retry = Retry::new();
        while !s.stopping() {
            // Read before asking: items stored after the question ring past it.
            let seen = s.queued.rings();
            let (batch, last) = match reader.next(s, cursor) {
                Ok(Some(n)) => n,
                Ok(None) => {
                    s.queued.wait(seen, UNRUNG);
                    continue;
                }
                Err(e) => {
                    eprintln!("whyslow serve: {}: {e}", self.what);
                    sleep(s, Duration::from_secs(5));
                    continue;
                }
            };
            match reader.deliver(s, batch) {
                Outcome::Retry(line) => {
                    retry.failed(s, line);
                    continue;
                }
                Outcome::Gone => {
                    cursor = last;
                    continue;
                }
                Outcome::Delivered => retry.reset(),
                Outcome::Dropped => {}
            }
            cursor = last;
            if let Err(e) = s.store.lock().expect("store lock").set_cursor(self.queue, &self.name, cursor) {
                eprintln!("whyslow serve: {}: {e}", self.what);
            }
        }
    }
}

/// How a queue retries: exponential backoff with jitter from 1 s to [`MAX_BACKOFF`]; failures logged
/// at most every [`LOG_EVERY`], with how many were not, so an outage of hours is a few lines, not one
/// per attempt.
struct Retry {
    backoff: Duration,
    last_log: Option<std::time::Instant>,
    unlogged: u64,
}

impl Retry {
    fn new() -> Retry {
        Retry { backoff: Duration::from_secs(1), last_log: None, unlogged: 0 }
    }

    /// A delivery went through: the next failure waits 1 s again.
    fn reset(&mut self) {
        self.backoff = Duration::from_secs(1);
    }

    /// A delivery failed and will be retried: logs the line `what` makes of the wait (in seconds) unless
    /// one went out recently, then waits and doubles the next wait.
    fn failed(&mut self, s: &Shared, what: impl FnOnce(u64) -> String) {
        if self.last_log.is_none_or(|t| t.elapsed() >= LOG_EVERY) {
            let more = match self.unlogged {
                0 => String::new(),
                n => format!(" ({n} more failures since the last line)"),
            };
            eprintln!("{}{more}", what(self.backoff.as_secs()));
            self.last_log = Some(std::time::Instant::now());
            self.unlogged = 0;
        } else {
            self.unlogged += 1;
        }
        sleep(s, jitter(self.backoff));
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }
}

/// Between half and one and a half times `d`, so agents that failed together do not retry together.
fn jitter(d: Duration) -> Duration {
    let r = (now_ns() % 1000) as f64 / 1000.0;
    d.mul_f64(0.5 + r)
}

/// Sleeps up to `d`, waking early when the agent stops.
pub(crate) fn sleep(s: &Shared, d: Duration) {
    let end = std::time::Instant::now() + d;
    let mut seen = s.queued.rings();
    while !s.stopping() {
        let left = end.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return;
        }
        seen = s.queued.wait(seen, left.min(UNRUNG));
    }
}
