//! Fetching a profile over HTTP(S), as Go's `net/http/pprof` serves them: `/debug/pprof/profile?seconds=N`
//! (CPU, answers after N seconds), `/heap`, `/allocs`, `/block`, `/mutex` (gzipped profile.proto).
//!
//! The request times out N seconds plus a margin after it starts; the body is read up to the size cap and
//! a declared length above it is refused before reading. An unreachable host, a status other than 200 and
//! an oversized body are each one typed error.

use crate::{ImportError, ImportOptions};
use std::io::Read;
use std::time::Duration;

/// The profiling time a URL asks for (`seconds=N` in its query), 0 when none.
fn seconds(url: &str) -> u64 {
    let Some((_, query)) = url.split_once('?') else { return 0 };
    query
        .split(['&', '#'])
        .find_map(|kv| kv.strip_prefix("seconds=")?.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(0, |s| s.ceil().min(86_400.0) as u64)
}

pub(crate) fn fetch(url: &str, opts: &ImportOptions) -> Result<Vec<u8>, ImportError> {
    let timeout = Duration::from_secs(seconds(url)) + opts.http_margin;
    let agent = ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_secs(10).min(opts.http_margin))
        .timeout(timeout)
        .user_agent(concat!("whyslow/", env!("CARGO_PKG_VERSION")))
        .build();
    let unreachable = |what: String| ImportError::Unreachable { url: url.to_string(), what };
    let response = match agent.get(url).call() {
        Ok(r) => r,
        Err(ureq::Error::Status(status, r)) => {
            // The first line of the body says why (Go's pprof handlers answer in plain text).
            let mut head = Vec::new();
            let _ = r.into_reader().take(4096).read_to_end(&mut head);
            let head = String::from_utf8_lossy(&head);
            let line = head.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
            let line =
                if line.is_empty() { "(empty body)".to_string() } else { line.chars().take(200).collect() };
            return Err(ImportError::HttpStatus { url: url.to_string(), status, line });
        }
        Err(ureq::Error::Transport(t)) => {
            // The innermost cause is the useful part ("Connection refused (os error 111)").
            let mut what = t.kind().to_string();
            let mut cause: Option<&dyn std::error::Error> = std::error::Error::source(&t);
            let mut last = None;
            while let Some(c) = cause {
                last = Some(c.to_string());
                cause = c.source();
            }
            if let Some(m) = last.or_else(|| t.message().map(str::to_string)) {
                what = format!("{what}: {m}");
            }
            return Err(unreachable(what));
        }
    };
    if response.status() != 200 {
        let status = response.status();
        return Err(ImportError::HttpStatus {
            url: url.to_string(),
            status,
            line: response.status_text().into(),
        });
    }
    let declared = response.header("Content-Length").and_then(|l| l.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > opts.max_bytes) {
        return Err(ImportError::TooLarge { origin: url.to_string(), max: opts.max_bytes });
    }
    let mut body = Vec::new();
    response
        .into_reader()
        .take(opts.max_bytes + 1)
        .read_to_end(&mut body)
        .map_err(|e| unreachable(format!("reading the answer: {e}")))?;
    if body.len() as u64 > opts.max_bytes {
        return Err(ImportError::TooLarge { origin: url.to_string(), max: opts.max_bytes });
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::{fetch, seconds};
    use crate::ImportError;
    use crate::ImportOptions;
    use std::io::Read;
    use std::time::Duration;

    #[test]
    fn seconds_come_from_the_query() {
        assert_eq!(seconds("http://h/debug/pprof/profile?seconds=3"), 3);
        assert_eq!(seconds("http://h/debug/pprof/profile?x=1&seconds=2.5"), 3);
        assert_eq!(seconds("http://h/debug/pprof/heap"), 0);
        assert_eq!(seconds("http://h/p?seconds=-1"), 0);
        assert_eq!(seconds("http://h/p?seconds=1e99"), 86_400);
    }

    /// A server that resets every connection (it closes with the request unread, so the kernel answers
    /// RST) fails the fetch at once: one connection, no retry, no waiting for the timeout (60 s here).
    #[test]
    fn reset_connection_fails_at_once() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut one = [0u8; 1];
                let _ = (&conn).read_exact(&mut one);
                drop(conn);
            }
        });
        let opts = ImportOptions { http_margin: Duration::from_secs(60), ..Default::default() };
        let started = std::time::Instant::now();
        let e = fetch(&format!("http://127.0.0.1:{port}/debug/pprof/heap"), &opts).unwrap_err();
        let s = e.to_string();
        assert!(matches!(e, ImportError::Unreachable { .. }) && s.contains("reset"), "{s}");
        assert!(!s.contains('\n'), "{s}");
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1, "no retry");
        assert!(started.elapsed() < Duration::from_secs(30), "waited {:?}", started.elapsed());
    }

    #[test]
    fn refused_connection_is_one_line() {
        let e = fetch("http://127.0.0.1:1/x", &ImportOptions::default()).unwrap_err();
        let s = e.to_string();
        assert!(matches!(e, ImportError::Unreachable { .. }), "{s}");
        assert!(s.starts_with("cannot fetch http://127.0.0.1:1/x: ") && !s.contains('\n'), "{s}");
    }
}
