//! The store's tests: what is stored survives reopening, retention and the budget; old layouts are
//! migrated.

use super::{FindingRow, Queue, Store, StoreError};
use crate::spec::{ProcessView, TargetSpec};
use rusqlite::{params, Connection};
use whyslow_model::Profile;
use whyslow_model::{FrameKind, Metadata, ProfileBuilder, SampleType};

fn profile(start_ns: u64, n: i64) -> Profile {
    let meta = Metadata { start_unix_ns: start_ns, duration_ns: 10, ..Default::default() };
    let mut b = ProfileBuilder::new(meta, vec![SampleType { name: "cpu".into(), unit: "samples".into() }]);
    let m = b.module("/bin/x", "");
    let f = b.frame("f", m, "", FrameKind::User);
    let s = b.stack(&[f]);
    let t = b.thread(1, 1, "x");
    b.add_sample(s, t, &[n]);
    b.finish()
}

/// A profile whose encoded form is about `frames` x 24 bytes that do not compress.
fn big_profile(start_ns: u64, frames: usize, seed: u64) -> Profile {
    let meta = Metadata { start_unix_ns: start_ns, duration_ns: 10, ..Default::default() };
    let mut b = ProfileBuilder::new(meta, vec![SampleType { name: "cpu".into(), unit: "samples".into() }]);
    let m = b.module("/bin/x", "");
    let t = b.thread(1, 1, "x");
    let mut x = seed | 1;
    for _ in 0..frames {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let f = b.frame(&format!("f{x:016x}{:08x}", x >> 11), m, "", FrameKind::User);
        let s = b.stack(&[f]);
        b.add_sample(s, t, &[1]);
    }
    b.finish()
}

#[test]
fn targets_and_windows_survive_reopening_and_retention_keeps_the_newest() {
    let dir = tempfile::tempdir().unwrap();
    let spec = TargetSpec::from_json(br#"{"match":{"comm":"x"}}"#).unwrap();
    let p = ProcessView { pid: 1, comm: "x".into(), start_ticks: 5, ..Default::default() };
    {
        let mut s = Store::open(dir.path()).unwrap();
        assert_eq!(s.add_target(&spec, 1).unwrap(), 1);
        s.saw_process(&p, 1).unwrap();
        for i in 0..10u64 {
            let prof = profile(100 * i, i as i64 + 1);
            s.add_windows(&[(&[1], &p, &prof)]).unwrap();
        }
    }
    let mut s = Store::open(dir.path()).unwrap();
    assert_eq!(s.targets().unwrap(), vec![(1, spec)]);
    let w = s.windows(&[1], 0, u64::MAX).unwrap();
    assert_eq!(w.len(), 10);
    assert_eq!(s.profile(w[3].id).unwrap().unwrap().total(0), 4);
    // Windows 3..=8 overlap [305, 805).
    assert_eq!(s.windows(&[1], 305, 805).unwrap().len(), 6);
    // Age: windows ending before 300 go (0, 1, 2 end at 10, 110, 210).
    assert_eq!(s.retain(300).unwrap(), 3);
    let left: Vec<u64> = s.windows(&[1], 0, u64::MAX).unwrap().iter().map(|w| w.start_ns).collect();
    assert_eq!(left, [300, 400, 500, 600, 700, 800, 900]);
    assert!(s.delete_target(1).unwrap() && !s.delete_target(1).unwrap());
}

#[test]
fn push_cursors_start_at_the_newest_window_and_count_what_retention_removed_unsent() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(dir.path()).unwrap();
    let p = ProcessView { pid: 1, comm: "x".into(), start_ticks: 5, ..Default::default() };
    s.saw_process(&p, 1).unwrap();
    let add = |s: &mut Store, i: u64| s.add_windows(&[(&[1, 2], &p, &profile(100 * i, 1))]).unwrap();
    add(&mut s, 0);
    // History is not pushed: a new backend starts after window 1.
    assert_eq!(s.cursor(Queue::Windows, "b").unwrap(), 1);
    for i in 1..5 {
        add(&mut s, i);
    }
    assert_eq!(s.queue(Queue::Windows, "b").unwrap(), (4, 0));
    let (next, comm, targets) = s.next_window(1).unwrap().unwrap();
    assert_eq!((next.id, next.start_ns, comm.as_str(), targets), (2, 100, "x", vec![1, 2]));
    s.set_cursor(Queue::Windows, "b", 2).unwrap();
    // Windows 1-3 end before 310: window 3 was never pushed.
    s.retain(310).unwrap();
    assert_eq!(s.queue(Queue::Windows, "b").unwrap(), (2, 1));
    assert_eq!(s.next_window(2).unwrap().unwrap().0.id, 4);
}

/// Issue 36: a cut's windows are read together; findings and events are kept per target until
/// retention; a webhook's cursor starts after the newest event.
#[test]
fn cuts_findings_and_events() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(dir.path()).unwrap();
    let p1 = ProcessView { pid: 1, comm: "x".into(), start_ticks: 5, ..Default::default() };
    let p2 = ProcessView { pid: 2, comm: "y".into(), start_ticks: 6, ..Default::default() };
    let (a, b) = (profile(100, 1), profile(100, 2));
    s.add_windows(&[(&[1], &p1, &a), (&[1, 2], &p2, &b)]).unwrap();
    s.add_windows(&[(&[1], &p1, &profile(200, 1))]).unwrap();
    let cut = s.cut_after(0).unwrap();
    let ids: Vec<(i64, Vec<i64>)> = cut.iter().map(|(w, t)| (w.id, t.clone())).collect();
    assert_eq!(ids, [(1, vec![1]), (2, vec![1, 2])]);
    assert_eq!(s.cut_after(2).unwrap().len(), 1);
    // Replayed by target: target 1's two cuts, target 2's one; bounded by id and count.
    assert_eq!(s.last_cuts(1, 3, 10).unwrap(), [vec![1, 2], vec![3]]);
    assert_eq!(s.last_cuts(1, 3, 1).unwrap(), [vec![3]]);
    assert_eq!(s.last_cuts(1, 2, 10).unwrap(), [vec![1, 2]]);
    assert_eq!(s.last_cuts(2, 3, 10).unwrap(), [vec![2]]);
    assert!(s.cut_after(3).unwrap().is_empty());
    let f = |start: u64, rule: &str| FindingRow {
        target: 1,
        start_ns: start,
        end_ns: start + 100,
        rule: rule.into(),
        title: "t".into(),
        impact_pct: 12.5,
        impact_of: "cpu".into(),
        confidence: "high".into(),
        evidence: vec!["3 calls".into()],
    };
    assert_eq!(s.cursor(Queue::Events, "h").unwrap(), 0);
    let events = [(1, 150, "finding", "{}".to_string())];
    s.add_findings(&[f(100, "r1"), f(200, "r1"), f(200, "r2")], &events).unwrap();
    let got = s.findings(&[1], 0, 1000).unwrap();
    assert_eq!(got.len(), 3);
    assert_eq!(got[0], f(100, "r1"));
    assert_eq!(s.findings(&[1], 250, 1000).unwrap().len(), 2);
    assert!(s.findings(&[2], 0, 1000).unwrap().is_empty());
    assert_eq!(s.queue(Queue::Events, "h").unwrap(), (1, 0));
    let e = s.next_event(0).unwrap().unwrap();
    assert_eq!((e.id, e.target, e.at_ns, e.kind.as_str()), (1, 1, 150, "finding"));
    s.set_cursor(Queue::Events, "h", 1).unwrap();
    assert_eq!(s.queue(Queue::Events, "h").unwrap(), (0, 0));
    // A hook added later starts after the newest event.
    assert_eq!(s.cursor(Queue::Events, "late").unwrap(), 1);
    assert_eq!(s.events(&[1], Some("finding"), 0, 1000).unwrap().len(), 1);
    assert!(s.events(&[1], Some("regression"), 0, 1000).unwrap().is_empty());
    s.retain(250).unwrap();
    assert_eq!(s.findings(&[1], 0, 1000).unwrap().len(), 2);
    assert!(s.events(&[1], None, 0, 1000).unwrap().is_empty());
}

/// Issue 32 #9: a process's window matched by many targets is one row, found through each target.
#[test]
fn a_window_of_many_targets_is_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(dir.path()).unwrap();
    let p = ProcessView { pid: 1, comm: "x".into(), start_ticks: 5, ..Default::default() };
    let targets: Vec<i64> = (1..=1000).collect();
    let prof = big_profile(100, 200, 7);
    s.add_windows(&[(&targets, &p, &prof)]).unwrap();
    let (windows, bytes) = s.usage().unwrap();
    assert_eq!(windows, 1);
    assert_eq!(bytes, whyslow_model::file::encode(&prof).len() as u64);
    for t in [1, 500, 1000] {
        assert_eq!(s.windows(&[t], 0, u64::MAX).unwrap().len(), 1, "target {t}");
    }
    // Asked for several targets at once, the window is still one.
    assert_eq!(s.windows(&[1, 2, 3], 0, u64::MAX).unwrap().len(), 1);
    assert!(s.windows(&[1001], 0, u64::MAX).unwrap().is_empty());
    // Retention removes the window and what refers to it.
    s.retain(u64::MAX).unwrap();
    assert_eq!(s.span(1).unwrap().0, 0);
}

/// Issue 32 #2: with a budget, the files (database, log, shared memory) stay within it while windows
/// keep coming: the log is checkpointed and truncated, and the oldest windows make room.
#[test]
fn the_files_stay_within_the_budget_log_included() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(dir.path()).unwrap();
    let budget = 1 << 20;
    s.set_budget(budget).unwrap();
    let p = ProcessView { pid: 1, comm: "x".into(), start_ticks: 5, ..Default::default() };
    let mut most = 0;
    for i in 0..300u64 {
        // ~12 KB per window: 300 of them are 3.6 MB, over three times the budget.
        let prof = big_profile(1000 * i, 500, i);
        s.add_windows(&[(&[1], &p, &prof)]).unwrap();
        if i % 10 == 0 {
            s.retain(0).unwrap();
        }
        most = most.max(s.disk_bytes());
        assert!(s.disk_bytes() <= budget, "window {i}: files take {} bytes", s.disk_bytes());
    }
    // The newest windows are kept, and enough of them to use the budget.
    let left = s.windows(&[1], 0, u64::MAX).unwrap();
    assert_eq!(left.last().unwrap().start_ns, 299_000);
    let (_, bytes) = s.usage().unwrap();
    assert!(bytes > budget / 3, "{bytes} bytes of windows kept");
    eprintln!("most on disk: {most} of {budget}; {} windows kept, {bytes} bytes", left.len());
}

/// Issue 32 #2: a store whose log already grew past the budget (an older agent) is brought back
/// within it when the budget is set.
#[test]
fn an_existing_oversized_store_is_shrunk_to_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let p = ProcessView { pid: 1, comm: "x".into(), start_ticks: 5, ..Default::default() };
    {
        let mut s = Store::open(dir.path()).unwrap();
        for i in 0..100u64 {
            s.add_windows(&[(&[1], &p, &big_profile(1000 * i, 500, i))]).unwrap();
        }
        assert!(s.disk_bytes() > 1 << 20);
    }
    let mut s = Store::open(dir.path()).unwrap();
    s.set_budget(1 << 20).unwrap();
    assert!(s.disk_bytes() <= 1 << 20, "{} bytes", s.disk_bytes());
    assert!(!s.windows(&[1], 0, u64::MAX).unwrap().is_empty());
}

/// Issue 32 #3: a damaged file is reported as such at open (not half-loaded).
#[test]
fn a_damaged_store_is_refused_at_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut s = Store::open(dir.path()).unwrap();
        for i in 0..300 {
            let spec = TargetSpec::from_json(
                format!(r#"{{"name":"t{i}","match":{{"comm":"^{}$"}}}}"#, "x".repeat(200)).as_bytes(),
            )
            .unwrap();
            s.add_target(&spec, 1).unwrap();
        }
        s.checkpoint().unwrap();
    }
    let path = dir.path().join("whyslow.db");
    let mut bytes = std::fs::read(&path).unwrap();
    assert!(bytes.len() > 8 * 4096);
    // Garbage over the middle pages (the b-tree's leaves and interior pages).
    for b in &mut bytes[4 * 4096..6 * 4096] {
        *b = 0x5a;
    }
    std::fs::write(&path, &bytes).unwrap();
    match Store::open(dir.path()) {
        Err(StoreError::Damaged { what, .. }) => assert!(!what.is_empty()),
        Err(e) => panic!("not reported as damaged: {e}"),
        Ok(s) => panic!("opened; {} targets", s.targets().map(|t| t.len()).unwrap_or(0)),
    }
    // Not a database at all.
    std::fs::write(&path, vec![7u8; 8192]).unwrap();
    assert!(matches!(Store::open(dir.path()), Err(StoreError::Damaged { .. })));
}

/// A store of the first layout (one row per target and window) is migrated: its windows stay
/// reachable through their targets.
#[test]
fn a_store_of_the_first_layout_is_migrated() {
    let dir = tempfile::tempdir().unwrap();
    {
        let c = Connection::open(dir.path().join("whyslow.db")).unwrap();
        c.execute_batch(
            "CREATE TABLE windows(id INTEGER PRIMARY KEY, target INTEGER NOT NULL, pid INTEGER NOT NULL,
             start_ticks INTEGER NOT NULL, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL,
             types TEXT NOT NULL, bytes INTEGER NOT NULL, profile BLOB NOT NULL);
             CREATE INDEX windows_by_target ON windows(target, start_ns);",
        )
        .unwrap();
        let blob = whyslow_model::file::encode(&profile(100, 3));
        for target in [1, 2] {
            c.execute(
                "INSERT INTO windows(target, pid, start_ticks, start_ns, end_ns, types, bytes, profile)
                 VALUES (?1, 1, 5, 100, 110, 'cpu', ?2, ?3)",
                params![target, blob.len() as i64, blob],
            )
            .unwrap();
        }
    }
    let s = Store::open(dir.path()).unwrap();
    let w = s.windows(&[2], 0, u64::MAX).unwrap();
    assert_eq!(w.iter().map(|w| w.id).collect::<Vec<_>>(), [2]);
    assert_eq!(s.profile(2).unwrap().unwrap().total(0), 3);
    drop(s);
    // Opening again finds the new layout.
    assert_eq!(Store::open(dir.path()).unwrap().windows(&[1], 0, u64::MAX).unwrap().len(), 1);
}

/// A store of the two cursor tables (push_cursors, event_cursors) keeps its cursors in the one table
/// that replaced them, and the old tables go.
#[test]
fn the_cursor_tables_of_the_previous_layout_are_migrated() {
    let dir = tempfile::tempdir().unwrap();
    {
        let c = Connection::open(dir.path().join("whyslow.db")).unwrap();
        c.execute_batch(
            "CREATE TABLE push_cursors(backend TEXT PRIMARY KEY, last_id INTEGER NOT NULL,
             dropped INTEGER NOT NULL DEFAULT 0);
             CREATE TABLE event_cursors(hook TEXT PRIMARY KEY, last_id INTEGER NOT NULL);
             INSERT INTO push_cursors VALUES ('pyroscope', 7, 2), ('doctor', 5, 0);
             INSERT INTO event_cursors VALUES ('http://127.0.0.1:9/hook', 3);",
        )
        .unwrap();
    }
    let s = Store::open(dir.path()).unwrap();
    assert_eq!(s.cursor(Queue::Windows, "pyroscope").unwrap(), 7);
    assert_eq!(s.queue(Queue::Windows, "pyroscope").unwrap(), (0, 2));
    assert_eq!(s.cursor(Queue::Windows, "doctor").unwrap(), 5);
    assert_eq!(s.cursor(Queue::Events, "http://127.0.0.1:9/hook").unwrap(), 3);
    // The queues stay apart: a hook's name is no window reader.
    assert_eq!(s.queue(Queue::Windows, "http://127.0.0.1:9/hook").unwrap(), (0, 0));
    let old: i64 = s
        .conn
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE name IN ('push_cursors', 'event_cursors')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(old, 0);
    drop(s);
    // Opening again finds the one table.
    assert_eq!(Store::open(dir.path()).unwrap().cursor(Queue::Windows, "pyroscope").unwrap(), 7);
}
