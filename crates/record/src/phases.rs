//! Wall time of each phase of a command (loading eBPF programs, opening events, attaching, the run,
//! symbolizing, writing the file), kept for `-v` to print: where a short command's fixed cost goes.
//! It only records; the CLI prints. Phases of one name add up.

use std::sync::Mutex;
use std::time::{Duration, Instant};

static PHASES: Mutex<Vec<(&'static str, Duration)>> = Mutex::new(Vec::new());

/// Adds `d` to phase `name`.
pub fn add(name: &'static str, d: Duration) {
    let mut p = PHASES.lock().unwrap_or_else(|e| e.into_inner());
    match p.iter_mut().find(|(n, _)| *n == name) {
        Some((_, t)) => *t += d,
        None => p.push((name, d)),
    }
}

/// Runs `f` as (part of) phase `name`.
pub fn time<T>(name: &'static str, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let out = f();
    add(name, t.elapsed());
    out
}

/// The phases so far, in the order they first ran.
pub fn all() -> Vec<(&'static str, Duration)> {
    PHASES.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

#[cfg(test)]
mod tests {
    #[test]
    fn phases_of_one_name_add_up_in_first_run_order() {
        super::add("b", std::time::Duration::from_millis(2));
        super::time("a", || ());
        super::add("b", std::time::Duration::from_millis(3));
        let all = super::all();
        let b = all.iter().position(|(n, _)| *n == "b").unwrap();
        assert!(all.iter().position(|(n, _)| *n == "a").unwrap() > b);
        assert_eq!(all[b].1, std::time::Duration::from_millis(5));
    }
}
