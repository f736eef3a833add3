//! Webhooks: each doctor event (a regression, a finding that started) POSTed as JSON to every
//! configured URL, with the push queue's discipline (outbox.rs): the store's events table is the queue
//! and each hook has a cursor (the last event it got), so an outage loses nothing and sends every event
//! once, in order; failures back off exponentially with jitter (1 s to 5 min), logged at most once a minute; only
//! a refusal of the body itself (400, 413, 422) drops that event, logged and counted.

use crate::outbox::{Outbox, Outcome, Reader};
use crate::shared::Shared;
use crate::store::{EventRow, Queue, StoreError};
use std::sync::Arc;
use whyslow_push::PushError;

/// The hook's name in its cursor and metrics: its URL without credentials or query.
fn name(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let rest = rest.split(['?', '#']).next().unwrap_or(rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    format!("{scheme}://{rest}")
}

/// Posts every doctor event after the hook's cursor, in order, until the agent stops.
pub fn run(s: Arc<Shared>, url: String) {
    let hook = name(&url);
    let outbox = Outbox { queue: Queue::Events, what: format!("webhook {hook}"), name: hook.clone() };
    let cursor = match outbox.cursor(&s) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("whyslow serve: webhook {hook}: {e}");
            return;
        }
    };
    outbox.drain(&s, cursor, &mut Hook { url, hook });
}

/// One hook's end of the events queue.
struct Hook {
    url: String,
    hook: String,
}

impl Reader for Hook {
    type Batch = EventRow;

    fn next(&mut self, s: &Shared, cursor: i64) -> Result<Option<(EventRow, i64)>, StoreError> {
        let next = s.store.lock().expect("store lock").next_event(cursor)?;
        Ok(next.map(|e| {
            let id = e.id;
            (e, id)
        }))
    }

    fn deliver(&mut self, s: &Shared, event: EventRow) -> Outcome {
        let hook = &self.hook;
        let result = whyslow_push::post_json(&self.url, event.body.as_bytes());
        let mut stats = s.hook_stats.lock().expect("hook stats lock");
        let st = stats.entry(hook.clone()).or_default();
        match result {
            Ok(()) => {
                st.delivered += 1;
                Outcome::Delivered
            }
            Err(PushError::Refused(m)) => {
                st.refused += 1;
                eprintln!("whyslow serve: webhook {hook} refused event {} (dropped): {m}", event.id);
                Outcome::Dropped
            }
            Err(PushError::Retry(m)) => {
                st.failures += 1;
                let hook = hook.clone();
                Outcome::Retry(Box::new(move |secs| {
                    format!("whyslow serve: webhook {hook} failed, retrying in {secs} s, events kept: {m}")
                }))
            }
        }
    }
}

/// Adds the webhook families to /metrics.
pub fn metrics(s: &Shared, o: &mut crate::prom::Out) {
    let stats = s.hook_stats.lock().expect("hook stats lock").clone();
    for url in &s.opts.webhooks {
        let hook = name(url);
        let st = stats.get(&hook).cloned().unwrap_or_default();
        let queued = s.store.lock().expect("store lock").queue(Queue::Events, &hook).unwrap_or_default().0;
        let r = |result: &'static str| [("hook", hook.as_str()), ("result", result)];
        o.sample(
            "whyslow_webhook_events_total",
            "counter",
            "Doctor events delivered to a webhook, or refused by it.",
            &r("delivered"),
            st.delivered.to_string(),
        );
        o.sample("whyslow_webhook_events_total", "counter", "", &r("refused"), st.refused.to_string());
        o.sample(
            "whyslow_webhook_failures_total",
            "counter",
            "Webhook deliveries that failed and will be retried.",
            &[("hook", hook.as_str())],
            st.failures.to_string(),
        );
        o.sample(
            "whyslow_webhook_queue_events",
            "gauge",
            "Doctor events waiting for a webhook.",
            &[("hook", hook.as_str())],
            queued.to_string(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::name;

    #[test]
    fn hook_names_carry_no_secrets() {
        assert_eq!(name("https://u:secret@hooks.example/x?token=abc"), "https://hooks.example/x");
        assert_eq!(name("http://127.0.0.1:9/hook"), "http://127.0.0.1:9/hook");
    }
}
