//! The embedded store: SQLite in WAL mode in the data directory. Targets, the processes seen, and one row
//! per (target, process, window) holding that window's profile (every sample type of the process's
//! sources) in the recording file format (gzip + CRC). Each window is one transaction, so a SIGKILL loses
//! at most the window in flight and never leaves a half-written row.

use crate::spec::{ProcessView, TargetSpec};
use rusqlite::{params, Connection, OptionalExtension};
use std::path::{Path, PathBuf};
use whyslow_model::Profile;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store {path}: {source}")]
    Sql { path: PathBuf, source: rusqlite::Error },
    #[error("store {path}: a stored window is unreadable: {what}")]
    Corrupt { path: PathBuf, what: String },
}

pub struct Store {
    conn: Connection,
    path: PathBuf,
}

/// A stored window's identity, without its profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowRow {
    pub id: i64,
    pub target: i64,
    pub pid: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub bytes: u64,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS targets(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    spec TEXT NOT NULL,
    created_ns INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS processes(
    pid INTEGER NOT NULL,
    start_ticks INTEGER NOT NULL,
    comm TEXT NOT NULL,
    cmdline TEXT NOT NULL,
    first_ns INTEGER NOT NULL,
    last_ns INTEGER NOT NULL,
    PRIMARY KEY(pid, start_ticks)
);
CREATE TABLE IF NOT EXISTS windows(
    id INTEGER PRIMARY KEY,
    target INTEGER NOT NULL,
    pid INTEGER NOT NULL,
    start_ticks INTEGER NOT NULL,
    start_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL,
    types TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    profile BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS windows_by_target ON windows(target, start_ns);
CREATE TABLE IF NOT EXISTS push_cursors(
    backend TEXT PRIMARY KEY,
    last_id INTEGER NOT NULL,
    dropped INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS windows_by_time ON windows(start_ns);
";

impl Store {
    /// Opens (creating) `dir/whyslow.db`.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let path = dir.join("whyslow.db");
        let sql = |source| StoreError::Sql { path: path.clone(), source };
        let conn = Connection::open(&path).map_err(sql)?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(sql)?;
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(sql)?;
        conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(sql)?;
        conn.execute_batch(SCHEMA).map_err(sql)?;
        Ok(Store { conn, path })
    }

    fn sql(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sql { path: self.path.clone(), source }
    }

    pub fn add_target(&self, spec: &TargetSpec, now_ns: u64) -> Result<i64, StoreError> {
        let json = serde_json::to_string(spec).expect("a spec serializes");
        self.conn
            .execute("INSERT INTO targets(spec, created_ns) VALUES (?1, ?2)", params![json, now_ns as i64])
            .map_err(|e| self.sql(e))?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Replaces target `id`'s definition; false when there is no such target.
    pub fn update_target(&self, id: i64, spec: &TargetSpec) -> Result<bool, StoreError> {
        let json = serde_json::to_string(spec).expect("a spec serializes");
        let n = self
            .conn
            .execute("UPDATE targets SET spec = ?1 WHERE id = ?2", params![json, id])
            .map_err(|e| self.sql(e))?;
        Ok(n == 1)
    }

    /// Deletes target `id` (its windows stay until retention removes them); false when there is none.
    pub fn delete_target(&self, id: i64) -> Result<bool, StoreError> {
        let n =
            self.conn.execute("DELETE FROM targets WHERE id = ?1", params![id]).map_err(|e| self.sql(e))?;
        Ok(n == 1)
    }

    /// Every target, by id. A row whose definition no longer parses is skipped.
    pub fn targets(&self) -> Result<Vec<(i64, TargetSpec)>, StoreError> {
        let mut st =
            self.conn.prepare("SELECT id, spec FROM targets ORDER BY id").map_err(|e| self.sql(e))?;
        let rows = st
            .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
            .map_err(|e| self.sql(e))?
            .filter_map(Result::ok)
            .filter_map(|(id, json)| Some((id, serde_json::from_str(&json).ok()?)))
            .collect();
        Ok(rows)
    }

    pub fn saw_process(&self, p: &ProcessView, now_ns: u64) -> Result<(), StoreError> {
        self.conn
            .execute(
                "INSERT INTO processes(pid, start_ticks, comm, cmdline, first_ns, last_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?5)
                 ON CONFLICT(pid, start_ticks) DO UPDATE SET last_ns = ?5, comm = ?3",
                params![p.pid, p.start_ticks as i64, p.comm, p.cmdline, now_ns as i64],
            )
            .map_err(|e| self.sql(e))?;
        Ok(())
    }

    /// Stores the windows of one cut in one transaction: (target, process, profile) each.
    pub fn add_windows(&mut self, rows: &[(i64, &ProcessView, &Profile)]) -> Result<(), StoreError> {
        let path = self.path.clone();
        let sql = |source| StoreError::Sql { path: path.clone(), source };
        let tx = self.conn.transaction().map_err(sql)?;
        for (target, p, profile) in rows {
            let blob = whyslow_model::file::encode(profile);
            let start = profile.meta.start_unix_ns;
            let end = start + profile.meta.duration_ns;
            let types = profile.sample_types.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(",");
            tx.execute(
                "INSERT INTO windows(target, pid, start_ticks, start_ns, end_ns, types, bytes, profile)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    target,
                    p.pid,
                    p.start_ticks as i64,
                    sql_time(start),
                    sql_time(end),
                    types,
                    blob.len() as i64,
                    blob
                ],
            )
            .map_err(sql)?;
        }
        tx.commit().map_err(sql)
    }

    /// Windows of `targets` overlapping [from, until), oldest first.
    pub fn windows(
        &self,
        targets: &[i64],
        from_ns: u64,
        until_ns: u64,
    ) -> Result<Vec<WindowRow>, StoreError> {
        let mut st = self
            .conn
            .prepare(
                "SELECT id, target, pid, start_ns, end_ns, bytes FROM windows
                 WHERE target = ?1 AND end_ns > ?2 AND start_ns < ?3 ORDER BY start_ns, id",
            )
            .map_err(|e| self.sql(e))?;
        let mut out = Vec::new();
        for &t in targets {
            let rows = st
                .query_map(params![t, sql_time(from_ns), sql_time(until_ns)], window_row)
                .map_err(|e| self.sql(e))?;
            for r in rows {
                out.push(r.map_err(|e| self.sql(e))?);
            }
        }
        out.sort_by_key(|w| (w.start_ns, w.id));
        Ok(out)
    }

    /// How many windows target `id` has stored and the time they span: (count, first start, last end).
    pub fn span(&self, id: i64) -> Result<(u64, u64, u64), StoreError> {
        self.conn
            .query_row(
                "SELECT COUNT(*), COALESCE(MIN(start_ns), 0), COALESCE(MAX(end_ns), 0) FROM windows WHERE target = ?1",
                params![id],
                |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64, r.get::<_, i64>(2)? as u64)),
            )
            .map_err(|e| self.sql(e))
    }

    /// The profile of a stored window.
    pub fn profile(&self, id: i64) -> Result<Option<Profile>, StoreError> {
        let blob: Option<Vec<u8>> = self
            .conn
            .query_row("SELECT profile FROM windows WHERE id = ?1", params![id], |r| r.get(0))
            .optional()
            .map_err(|e| self.sql(e))?;
        let Some(blob) = blob else { return Ok(None) };
        whyslow_model::file::decode(&blob, Path::new("window"))
            .map(Some)
            .map_err(|e| StoreError::Corrupt { path: self.path.clone(), what: format!("window {id}: {e}") })
    }

    /// Number of windows and their bytes.
    pub fn usage(&self) -> Result<(u64, u64), StoreError> {
        self.conn
            .query_row("SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM windows", [], |r| {
                Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64))
            })
            .map_err(|e| self.sql(e))
    }

    /// Removes windows that ended before `older_than_ns`, then the oldest until the stored profiles take
    /// at most `max_bytes`; forgets processes last seen before the cutoff. Returns the windows removed.
    pub fn retain(&mut self, older_than_ns: u64, max_bytes: u64) -> Result<u64, StoreError> {
        let path = self.path.clone();
        let sql = |source| StoreError::Sql { path: path.clone(), source };
        let tx = self.conn.transaction().map_err(sql)?;
        // Windows a backend never got count as dropped for it.
        tx.execute(
            "UPDATE push_cursors SET dropped = dropped +
             (SELECT COUNT(*) FROM windows WHERE end_ns < ?1 AND id > push_cursors.last_id)",
            params![sql_time(older_than_ns)],
        )
        .map_err(sql)?;
        let mut removed = tx
            .execute("DELETE FROM windows WHERE end_ns < ?1", params![sql_time(older_than_ns)])
            .map_err(sql)? as u64;
        tx.execute("DELETE FROM processes WHERE last_ns < ?1", params![sql_time(older_than_ns)])
            .map_err(sql)?;
        let total: i64 =
            tx.query_row("SELECT COALESCE(SUM(bytes), 0) FROM windows", [], |r| r.get(0)).map_err(sql)?;
        if total as u64 > max_bytes {
            // The newest windows whose bytes fit stay; every older one goes.
            let mut st =
                tx.prepare("SELECT id, bytes FROM windows ORDER BY start_ns DESC, id DESC").map_err(sql)?;
            let rows: Vec<(i64, i64)> = st
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(sql)?
                .filter_map(Result::ok)
                .collect();
            drop(st);
            let mut kept = 0u64;
            let mut cut = None;
            for (id, bytes) in rows {
                kept += bytes as u64;
                if kept > max_bytes {
                    cut = Some(id);
                    break;
                }
            }
            if let Some(id) = cut {
                let (s, i): (i64, i64) = tx
                    .query_row("SELECT start_ns, id FROM windows WHERE id = ?1", params![id], |r| {
                        Ok((r.get(0)?, r.get(1)?))
                    })
                    .map_err(sql)?;
                tx.execute(
                    "UPDATE push_cursors SET dropped = dropped + (SELECT COUNT(*) FROM windows
                     WHERE (start_ns < ?1 OR (start_ns = ?1 AND id <= ?2)) AND id > push_cursors.last_id)",
                    params![s, i],
                )
                .map_err(sql)?;
                removed += tx
                    .execute(
                        "DELETE FROM windows WHERE start_ns < ?1 OR (start_ns = ?1 AND id <= ?2)",
                        params![s, i],
                    )
                    .map_err(sql)? as u64;
            }
        }
        tx.commit().map_err(sql)?;
        Ok(removed)
    }

    /// The last window pushed to `backend`; a backend seen for the first time starts at the newest
    /// window (history is not pushed).
    pub fn push_cursor(&self, backend: &str) -> Result<i64, StoreError> {
        self.conn
            .execute(
                "INSERT OR IGNORE INTO push_cursors(backend, last_id) SELECT ?1, COALESCE(MAX(id), 0) FROM windows",
                params![backend],
            )
            .map_err(|e| self.sql(e))?;
        self.conn
            .query_row("SELECT last_id FROM push_cursors WHERE backend = ?1", params![backend], |r| r.get(0))
            .map_err(|e| self.sql(e))
    }

    pub fn set_push_cursor(&self, backend: &str, id: i64) -> Result<(), StoreError> {
        self.conn
            .execute("UPDATE push_cursors SET last_id = ?2 WHERE backend = ?1", params![backend, id])
            .map_err(|e| self.sql(e))?;
        Ok(())
    }

    /// The oldest stored window after `id`, with its process's name.
    pub fn next_window(&self, after: i64) -> Result<Option<(WindowRow, String)>, StoreError> {
        self.conn
            .query_row(
                "SELECT w.id, w.target, w.pid, w.start_ns, w.end_ns, w.bytes, COALESCE(p.comm, '')
                 FROM windows w LEFT JOIN processes p ON p.pid = w.pid AND p.start_ticks = w.start_ticks
                 WHERE w.id > ?1 ORDER BY w.id LIMIT 1",
                params![after],
                |r| Ok((window_row(r)?, r.get(6)?)),
            )
            .optional()
            .map_err(|e| self.sql(e))
    }

    /// Windows waiting for `backend`, and those retention removed before it got them.
    pub fn push_queue(&self, backend: &str) -> Result<(u64, u64), StoreError> {
        self.conn
            .query_row(
                "SELECT (SELECT COUNT(*) FROM windows WHERE id > c.last_id), c.dropped FROM push_cursors c
                 WHERE c.backend = ?1",
                params![backend],
                |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64)),
            )
            .optional()
            .map(Option::unwrap_or_default)
            .map_err(|e| self.sql(e))
    }

    /// Bytes the database files take on disk (main file and WAL).
    pub fn disk_bytes(&self) -> u64 {
        ["", "-wal"]
            .iter()
            .filter_map(|s| std::fs::metadata(format!("{}{s}", self.path.display())).ok())
            .map(|m| m.len())
            .sum()
    }
}

/// A window from the columns `id, target, pid, start_ns, end_ns, bytes`, in that order.
fn window_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<WindowRow> {
    Ok(WindowRow {
        id: r.get(0)?,
        target: r.get(1)?,
        pid: r.get(2)?,
        start_ns: r.get::<_, i64>(3)? as u64,
        end_ns: r.get::<_, i64>(4)? as u64,
        bytes: r.get::<_, i64>(5)? as u64,
    })
}

/// A time as SQLite stores it (its integers are signed).
fn sql_time(ns: u64) -> i64 {
    ns.min(i64::MAX as u64) as i64
}

#[cfg(test)]
mod tests {
    use super::*;
    use whyslow_model::{FrameKind, Metadata, ProfileBuilder, SampleType};

    fn profile(start_ns: u64, n: i64) -> Profile {
        let meta = Metadata { start_unix_ns: start_ns, duration_ns: 10, ..Default::default() };
        let mut b =
            ProfileBuilder::new(meta, vec![SampleType { name: "cpu".into(), unit: "samples".into() }]);
        let m = b.module("/bin/x", "");
        let f = b.frame("f", m, "", FrameKind::User);
        let s = b.stack(&[f]);
        let t = b.thread(1, 1, "x");
        b.add_sample(s, t, &[n]);
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
                s.add_windows(&[(1, &p, &prof)]).unwrap();
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
        assert_eq!(s.retain(300, u64::MAX).unwrap(), 3);
        // Size: keep the newest that fit in three windows' bytes.
        let newest3: u64 = w[7..].iter().map(|w| w.bytes).sum();
        assert_eq!(s.retain(0, newest3).unwrap(), 4);
        let left: Vec<u64> = s.windows(&[1], 0, u64::MAX).unwrap().iter().map(|w| w.start_ns).collect();
        assert_eq!(left, [700, 800, 900]);
        assert!(s.delete_target(1).unwrap() && !s.delete_target(1).unwrap());
    }

    #[test]
    fn push_cursors_start_at_the_newest_window_and_count_what_retention_removed_unsent() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(dir.path()).unwrap();
        let p = ProcessView { pid: 1, comm: "x".into(), start_ticks: 5, ..Default::default() };
        s.saw_process(&p, 1).unwrap();
        let add = |s: &mut Store, i: u64| s.add_windows(&[(1, &p, &profile(100 * i, 1))]).unwrap();
        add(&mut s, 0);
        // History is not pushed: a new backend starts after window 1.
        assert_eq!(s.push_cursor("b").unwrap(), 1);
        for i in 1..5 {
            add(&mut s, i);
        }
        assert_eq!(s.push_queue("b").unwrap(), (4, 0));
        let (next, comm) = s.next_window(1).unwrap().unwrap();
        assert_eq!((next.id, next.start_ns, comm.as_str()), (2, 100, "x"));
        s.set_push_cursor("b", 2).unwrap();
        // Windows 1-3 end before 310: window 3 was never pushed.
        s.retain(310, u64::MAX).unwrap();
        assert_eq!(s.push_queue("b").unwrap(), (2, 1));
        assert_eq!(s.next_window(2).unwrap().unwrap().0.id, 4);
    }
}
