//! The embedded store: SQLite in WAL mode in the data directory. Targets, the processes seen, and one row
//! per (process, window) holding that window's profile (every sample type of the process's sources) in
//! the recording file format (gzip + CRC); `window_targets` says which targets each window belongs to, so
//! a process matched by many targets is stored once. Each window is one transaction, so a SIGKILL loses
//! at most the window in flight and never leaves a half-written row.
//!
//! Disk: the files (database, log, shared memory) stay within the budget given to [`Store::set_budget`].
//! The log is checkpointed every budget/8 and truncated to that size; room is made before a window is
//! written (the oldest windows go, and the pages they free are reused), and a write that finds the disk
//! full frees room and is tried once more, so a full disk recovers by itself. A store that fails its
//! integrity check at open is reported as [`StoreError::Damaged`], never half-loaded.

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
    /// The database file itself fails SQLite's integrity check (or is not a database).
    #[error("store {path} is damaged: {what}")]
    Damaged { path: PathBuf, what: String },
    #[error("store {path}: the disk is full (even after removing old windows)")]
    Full { path: PathBuf },
}

pub struct Store {
    conn: Connection,
    path: PathBuf,
    /// Bytes the store's files may take (u64::MAX: no limit).
    budget: u64,
}

/// A queue the store keeps for its readers (see outbox.rs): the items a cursor counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queue {
    /// The stored windows (push backends, the doctor).
    Windows,
    /// The doctor's events (webhooks).
    Events,
}

impl Queue {
    /// The table of its items, which also names the queue in the cursors table.
    fn table(self) -> &'static str {
        match self {
            Queue::Windows => "windows",
            Queue::Events => "events",
        }
    }
}

/// A stored window's identity, without its profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowRow {
    pub id: i64,
    pub pid: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub bytes: u64,
    /// The process's cgroup v2 path when the window was cut (its unit, container, pod: see cgroup.rs).
    pub cgroup: String,
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
    pid INTEGER NOT NULL,
    start_ticks INTEGER NOT NULL,
    start_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL,
    types TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    profile BLOB NOT NULL,
    cgroup TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS windows_by_time ON windows(start_ns);
-- Retention (end_ns) and /metrics' totals (COUNT, SUM(bytes)) read this index, not the table: a full
-- scan of the windows' rows (their profiles) cost more CPU with every hour stored.
CREATE INDEX IF NOT EXISTS windows_by_end ON windows(end_ns, bytes);
CREATE TABLE IF NOT EXISTS findings(
    target INTEGER NOT NULL,
    start_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL,
    rule TEXT NOT NULL,
    title TEXT NOT NULL,
    impact_pct REAL NOT NULL,
    impact_of TEXT NOT NULL,
    confidence TEXT NOT NULL,
    evidence TEXT NOT NULL,
    PRIMARY KEY(target, start_ns, rule)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    target INTEGER NOT NULL,
    at_ns INTEGER NOT NULL,
    kind TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_target ON events(target, at_ns);
-- Where each reader of a queue is (see outbox.rs): a push backend or the doctor over the windows, a
-- webhook over the events; `dropped` counts the windows retention removed before the reader got them.
CREATE TABLE IF NOT EXISTS cursors(
    queue TEXT NOT NULL,
    name TEXT NOT NULL,
    last_id INTEGER NOT NULL,
    dropped INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY(queue, name)
);
";

/// A finding of the always-on doctor in one window of a target.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FindingRow {
    pub target: i64,
    pub start_ns: u64,
    pub end_ns: u64,
    pub rule: String,
    pub title: String,
    pub impact_pct: f64,
    pub impact_of: String,
    pub confidence: String,
    pub evidence: Vec<String>,
}

/// Something the always-on doctor reported (a regression, a finding that started), as delivered to
/// webhooks: `body` is the JSON sent.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRow {
    pub id: i64,
    pub target: i64,
    pub at_ns: u64,
    pub kind: String,
    pub body: String,
}

/// Which targets each window belongs to (created after a store of the first layout, one row per target
/// and window, is migrated).
const TARGETS_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS window_targets(
    target INTEGER NOT NULL,
    start_ns INTEGER NOT NULL,
    window INTEGER NOT NULL,
    PRIMARY KEY(target, start_ns, window)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS window_targets_by_window ON window_targets(window);
CREATE TRIGGER IF NOT EXISTS window_gone AFTER DELETE ON windows
BEGIN DELETE FROM window_targets WHERE window = old.id; END;
";

/// Whether a SQLite failure says the file is not a sound database.
fn is_damage(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
    )
}

fn is_full(e: &rusqlite::Error) -> bool {
    e.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull)
}

impl Store {
    /// Opens (creating) `dir/whyslow.db`, after an integrity check of an existing one.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let path = dir.join("whyslow.db");
        let damaged = |what: String| StoreError::Damaged { path: path.clone(), what };
        let sql = |source: rusqlite::Error| {
            if is_damage(&source) {
                StoreError::Damaged { path: path.clone(), what: source.to_string() }
            } else {
                StoreError::Sql { path: path.clone(), source }
            }
        };
        let conn = Connection::open(&path).map_err(sql)?;
        // New stores give back the pages of removed windows on request (incremental_vacuum): a budget
        // lowered below what the file takes can still be met.
        conn.pragma_update(None, "auto_vacuum", "INCREMENTAL").map_err(sql)?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(sql)?;
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(sql)?;
        conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(sql)?;
        let check: Vec<String> = {
            let mut st = conn.prepare("PRAGMA quick_check(5)").map_err(sql)?;
            let rows = st.query_map([], |r| r.get::<_, String>(0)).map_err(sql)?;
            rows.collect::<Result<_, _>>().map_err(sql)?
        };
        if check != ["ok"] {
            return Err(damaged(check.join("; ")));
        }
        conn.execute_batch(SCHEMA).map_err(sql)?;
        // The first layout kept one row per (target, window): its target column becomes window_targets.
        let old_layout = conn
            .prepare("SELECT 1 FROM pragma_table_info('windows') WHERE name = 'target'")
            .and_then(|mut st| st.exists([]))
            .map_err(sql)?;
        let has_cgroup = conn
            .prepare("SELECT 1 FROM pragma_table_info('windows') WHERE name = 'cgroup'")
            .and_then(|mut st| st.exists([]))
            .map_err(sql)?;
        if !has_cgroup {
            conn.execute_batch("ALTER TABLE windows ADD COLUMN cgroup TEXT NOT NULL DEFAULT ''")
                .map_err(sql)?;
        }
        if old_layout {
            conn.execute_batch(&format!(
                "BEGIN; {TARGETS_SCHEMA}
                 INSERT INTO window_targets(target, start_ns, window) SELECT target, start_ns, id FROM windows;
                 DROP INDEX IF EXISTS windows_by_target;
                 ALTER TABLE windows DROP COLUMN target;
                 COMMIT;"
            ))
            .map_err(sql)?;
        } else {
            conn.execute_batch(TARGETS_SCHEMA).map_err(sql)?;
        }
        // Stores before the one cursor table kept a table of cursors per queue: their rows move over.
        for (table, queue, name) in
            [("push_cursors", "windows", "backend"), ("event_cursors", "events", "hook")]
        {
            let exists = conn
                .prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1")
                .and_then(|mut st| st.exists([table]))
                .map_err(sql)?;
            if exists {
                let dropped = if table == "push_cursors" { "dropped" } else { "0" };
                conn.execute_batch(&format!(
                    "BEGIN;
                     INSERT OR IGNORE INTO cursors(queue, name, last_id, dropped)
                     SELECT '{queue}', {name}, last_id, {dropped} FROM {table};
                     DROP TABLE {table};
                     COMMIT;"
                ))
                .map_err(sql)?;
            }
        }
        // Every target definition must parse (a store of a newer version is not half-loaded either).
        {
            let mut st = conn.prepare("SELECT id, spec FROM targets").map_err(sql)?;
            let rows =
                st.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))).map_err(sql)?;
            for row in rows {
                let (id, json) = row.map_err(sql)?;
                if let Err(e) = serde_json::from_str::<TargetSpec>(&json) {
                    return Err(damaged(format!("target {id} does not parse: {e}")));
                }
            }
        }
        Ok(Store { conn, path, budget: u64::MAX })
    }

    /// Keeps the store's files within `bytes`: the log is checkpointed every eighth of it and truncated
    /// to that size, and windows are written only where they fit (see [`Store::make_room`]).
    pub fn set_budget(&mut self, bytes: u64) -> Result<(), StoreError> {
        self.budget = bytes;
        let page = self.pragma("page_size")?.max(512) as u64;
        let log = (bytes / 8).min(4 << 20);
        let pages = (log / page).clamp(4, 1000) as i64;
        self.conn.pragma_update(None, "wal_autocheckpoint", pages).map_err(|e| self.sql(e))?;
        self.conn.pragma_update(None, "journal_size_limit", log as i64).map_err(|e| self.sql(e))?;
        self.make_room(0)?;
        Ok(())
    }

    fn pragma(&self, name: &str) -> Result<i64, StoreError> {
        self.conn.query_row(&format!("PRAGMA {name}"), [], |r| r.get(0)).map_err(|e| self.sql(e))
    }

    /// Bytes the live pages of the database take (pages on the free list are reused before the file
    /// grows).
    fn live_bytes(&self) -> Result<u64, StoreError> {
        let (count, free, page) =
            (self.pragma("page_count")?, self.pragma("freelist_count")?, self.pragma("page_size")?);
        Ok(((count - free).max(0) * page) as u64)
    }

    /// Removes the oldest windows until `incoming` more bytes fit in the budget (the database's live pages
    /// within three quarters of it, the rest for the log), gives back free pages while the file is larger
    /// than that, and truncates the log. Returns the windows removed.
    pub fn make_room(&mut self, incoming: u64) -> Result<u64, StoreError> {
        if self.budget == u64::MAX {
            return Ok(0);
        }
        let limit = self.budget / 4 * 3;
        let mut removed = 0;
        loop {
            let live = self.live_bytes()?;
            // Page overhead: a blob takes whole pages plus its row.
            let need = incoming + incoming / 8;
            if live + need <= limit {
                break;
            }
            let excess = live + need - limit;
            let n = self.remove_oldest(excess)?;
            if n == 0 {
                break;
            }
            removed += n;
        }
        // A file larger than the limit (an older store, a lower budget) gives its free pages back.
        let page = self.pragma("page_size")?.max(512) as u64;
        let step = (self.budget / 8 / page).max(4);
        for _ in 0..10_000 {
            let file = std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0);
            if file <= limit || self.pragma("freelist_count")? == 0 || self.pragma("auto_vacuum")? != 2 {
                break;
            }
            self.conn
                .execute_batch(&format!("PRAGMA incremental_vacuum({step})"))
                .map_err(|e| self.sql(e))?;
            self.checkpoint()?;
        }
        self.checkpoint()?;
        Ok(removed)
    }

    /// Copies the log into the database and truncates it.
    pub fn checkpoint(&self) -> Result<(), StoreError> {
        self.conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())).map_err(|e| self.sql(e))
    }

    /// Removes the oldest windows whose bytes add up to `bytes` (at least one); returns how many.
    fn remove_oldest(&mut self, bytes: u64) -> Result<u64, StoreError> {
        let path = self.path.clone();
        let sql = |source| StoreError::Sql { path: path.clone(), source };
        let tx = self.conn.transaction().map_err(sql)?;
        let cut: Option<(i64, i64)> = {
            let mut st =
                tx.prepare("SELECT start_ns, id, bytes FROM windows ORDER BY start_ns, id").map_err(sql)?;
            let mut rows = st.query([]).map_err(sql)?;
            let mut sum = 0u64;
            let mut cut = None;
            while let Some(r) = rows.next().map_err(sql)? {
                cut = Some((r.get(0).map_err(sql)?, r.get(1).map_err(sql)?));
                sum += r.get::<_, i64>(2).map_err(sql)? as u64;
                if sum >= bytes {
                    break;
                }
            }
            cut
        };
        let Some((s, i)) = cut else { return Ok(0) };
        tx.execute(
            "UPDATE cursors SET dropped = dropped + (SELECT COUNT(*) FROM windows
             WHERE (start_ns < ?1 OR (start_ns = ?1 AND id <= ?2)) AND id > cursors.last_id)
             WHERE queue = 'windows'",
            params![s, i],
        )
        .map_err(sql)?;
        let n = tx
            .execute("DELETE FROM windows WHERE start_ns < ?1 OR (start_ns = ?1 AND id <= ?2)", params![s, i])
            .map_err(sql)? as u64;
        tx.commit().map_err(sql)?;
        Ok(n)
    }

    /// Runs a write; one that finds the disk full frees room (a quarter of the windows, the log) and is
    /// tried once more.
    fn write<T>(
        &mut self,
        mut f: impl FnMut(&mut Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        match f(&mut self.conn) {
            Err(e) if is_full(&e) => {
                let (windows, bytes) = self.usage()?;
                if windows > 0 {
                    let _ = self.remove_oldest((bytes / 4).max(1));
                }
                let _ = self.checkpoint();
                f(&mut self.conn).map_err(|e| {
                    if is_full(&e) {
                        StoreError::Full { path: self.path.clone() }
                    } else {
                        self.sql(e)
                    }
                })
            }
            r => r.map_err(|e| self.sql(e)),
        }
    }

    fn sql(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sql { path: self.path.clone(), source }
    }

    pub fn add_target(&mut self, spec: &TargetSpec, now_ns: u64) -> Result<i64, StoreError> {
        let json = serde_json::to_string(spec).expect("a spec serializes");
        self.write(|c| {
            c.execute("INSERT INTO targets(spec, created_ns) VALUES (?1, ?2)", params![json, now_ns as i64])?;
            Ok(c.last_insert_rowid())
        })
    }

    /// Replaces target `id`'s definition; false when there is no such target.
    pub fn update_target(&mut self, id: i64, spec: &TargetSpec) -> Result<bool, StoreError> {
        let json = serde_json::to_string(spec).expect("a spec serializes");
        let n = self.write(|c| c.execute("UPDATE targets SET spec = ?1 WHERE id = ?2", params![json, id]))?;
        Ok(n == 1)
    }

    /// Deletes target `id` (its windows stay until retention removes them); false when there is none.
    pub fn delete_target(&mut self, id: i64) -> Result<bool, StoreError> {
        let n = self.write(|c| c.execute("DELETE FROM targets WHERE id = ?1", params![id]))?;
        Ok(n == 1)
    }

    /// Every target, by id.
    pub fn targets(&self) -> Result<Vec<(i64, TargetSpec)>, StoreError> {
        let mut st =
            self.conn.prepare_cached("SELECT id, spec FROM targets ORDER BY id").map_err(|e| self.sql(e))?;
        let rows = st
            .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
            .map_err(|e| self.sql(e))?;
        let mut out = Vec::new();
        for r in rows {
            let (id, json) = r.map_err(|e| self.sql(e))?;
            let spec = serde_json::from_str(&json).map_err(|e| StoreError::Damaged {
                path: self.path.clone(),
                what: format!("target {id} does not parse: {e}"),
            })?;
            out.push((id, spec));
        }
        Ok(out)
    }

    pub fn saw_process(&mut self, p: &ProcessView, now_ns: u64) -> Result<(), StoreError> {
        self.write(|c| {
            c.execute(
                "INSERT INTO processes(pid, start_ticks, comm, cmdline, first_ns, last_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?5)
                 ON CONFLICT(pid, start_ticks) DO UPDATE SET last_ns = ?5, comm = ?3",
                params![p.pid, p.start_ticks as i64, p.comm, p.cmdline, now_ns as i64],
            )
        })?;
        Ok(())
    }

    /// Stores the windows of one cut in one transaction, each once: (the targets it belongs to, process,
    /// profile). Room is made first within the budget. Returns the windows removed to make room.
    pub fn add_windows(&mut self, rows: &[(&[i64], &ProcessView, &Profile)]) -> Result<u64, StoreError> {
        let blobs: Vec<Vec<u8>> = rows.iter().map(|(_, _, p)| whyslow_model::file::encode(p)).collect();
        let removed = self.make_room(blobs.iter().map(|b| b.len() as u64).sum())?;
        self.write(|c| {
            let tx = c.transaction()?;
            for ((targets, p, profile), blob) in rows.iter().zip(&blobs) {
                let start = profile.meta.start_unix_ns;
                let end = start + profile.meta.duration_ns;
                let types =
                    profile.sample_types.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(",");
                tx.execute(
                    "INSERT INTO windows(pid, start_ticks, start_ns, end_ns, types, bytes, profile, cgroup)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                    params![
                        p.pid,
                        p.start_ticks as i64,
                        sql_time(start),
                        sql_time(end),
                        types,
                        blob.len() as i64,
                        blob,
                        p.cgroup
                    ],
                )?;
                let id = tx.last_insert_rowid();
                for t in targets.iter() {
                    tx.execute(
                        "INSERT OR IGNORE INTO window_targets(target, start_ns, window) VALUES (?1, ?2, ?3)",
                        params![t, sql_time(start), id],
                    )?;
                }
            }
            tx.commit()
        })?;
        Ok(removed)
    }

    /// Windows of `targets` overlapping [from, until), oldest first, each once.
    pub fn windows(
        &self,
        targets: &[i64],
        from_ns: u64,
        until_ns: u64,
    ) -> Result<Vec<WindowRow>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT w.id, w.pid, w.start_ns, w.end_ns, w.bytes, w.cgroup FROM window_targets t
                 JOIN windows w ON w.id = t.window
                 WHERE t.target = ?1 AND t.start_ns < ?2 AND w.end_ns > ?3",
            )
            .map_err(|e| self.sql(e))?;
        let mut out = Vec::new();
        for &t in targets {
            let rows = st
                .query_map(params![t, sql_time(until_ns), sql_time(from_ns)], window_row)
                .map_err(|e| self.sql(e))?;
            for r in rows {
                out.push(r.map_err(|e| self.sql(e))?);
            }
        }
        out.sort_by_key(|w| (w.start_ns, w.id));
        out.dedup_by_key(|w| w.id);
        Ok(out)
    }

    /// How many windows target `id` has stored and the time they span: (count, first start, last end).
    pub fn span(&self, id: i64) -> Result<(u64, u64, u64), StoreError> {
        self.conn
            .query_row(
                "SELECT COUNT(*), COALESCE(MIN(w.start_ns), 0), COALESCE(MAX(w.end_ns), 0)
                 FROM window_targets t JOIN windows w ON w.id = t.window WHERE t.target = ?1",
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

    /// Removes windows that ended before `older_than_ns` and forgets processes last seen before it, then
    /// keeps the files within the budget (oldest windows first) and truncates the log. Returns the
    /// windows removed.
    pub fn retain(&mut self, older_than_ns: u64) -> Result<u64, StoreError> {
        let cutoff = sql_time(older_than_ns);
        let removed = self.write(|c| {
            let tx = c.transaction()?;
            // Windows a backend never got count as dropped for it.
            tx.execute(
                "UPDATE cursors SET dropped = dropped +
                 (SELECT COUNT(*) FROM windows WHERE end_ns < ?1 AND id > cursors.last_id)
                 WHERE queue = 'windows'",
                params![cutoff],
            )?;
            let removed = tx.execute("DELETE FROM windows WHERE end_ns < ?1", params![cutoff])? as u64;
            tx.execute("DELETE FROM findings WHERE end_ns < ?1", params![cutoff])?;
            tx.execute("DELETE FROM events WHERE at_ns < ?1", params![cutoff])?;
            tx.execute("DELETE FROM processes WHERE last_ns < ?1", params![cutoff])?;
            tx.commit()?;
            Ok(removed)
        })?;
        Ok(removed + self.make_room(0)?)
    }

    /// The oldest stored window after `id`, with its process's name and the targets it belongs to.
    pub fn next_window(&self, after: i64) -> Result<Option<(WindowRow, String, Vec<i64>)>, StoreError> {
        let next = self
            .conn
            .query_row(
                "SELECT w.id, w.pid, w.start_ns, w.end_ns, w.bytes, w.cgroup, COALESCE(p.comm, '')
                 FROM windows w LEFT JOIN processes p ON p.pid = w.pid AND p.start_ticks = w.start_ticks
                 WHERE w.id > ?1 ORDER BY w.id LIMIT 1",
                params![after],
                |r| Ok((window_row(r)?, r.get::<_, String>(6)?)),
            )
            .optional()
            .map_err(|e| self.sql(e))?;
        let Some((row, comm)) = next else { return Ok(None) };
        let targets = self.window_targets(row.id)?;
        Ok(Some((row, comm, targets)))
    }

    /// The targets window `id` belongs to, in id order.
    fn window_targets(&self, id: i64) -> Result<Vec<i64>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached("SELECT target FROM window_targets WHERE window = ?1 ORDER BY target")
            .map_err(|e| self.sql(e))?;
        let targets = st.query_map(params![id], |r| r.get(0)).map_err(|e| self.sql(e))?;
        targets.collect::<Result<_, _>>().map_err(|e| self.sql(e))
    }

    /// The windows of one cut: the oldest window after `after` and the ones stored with it (the same
    /// start, the next ids), each with its targets.
    pub fn cut_after(&self, after: i64) -> Result<Vec<(WindowRow, Vec<i64>)>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT id, pid, start_ns, end_ns, bytes, cgroup FROM windows WHERE id > ?1 ORDER BY id LIMIT 256",
            )
            .map_err(|e| self.sql(e))?;
        let rows: Vec<WindowRow> = st
            .query_map(params![after], window_row)
            .map_err(|e| self.sql(e))?
            .collect::<Result<_, _>>()
            .map_err(|e| self.sql(e))?;
        let mut out = Vec::new();
        for (i, row) in rows.iter().enumerate() {
            if i > 0 && (row.start_ns != rows[0].start_ns || row.id != rows[i - 1].id + 1) {
                break;
            }
            out.push((row.clone(), self.window_targets(row.id)?));
        }
        Ok(out)
    }

    /// The newest `cuts` windows of `target` among those up to window `until_id`, grouped by start (the
    /// windows of one cut), oldest first: what the doctor replays to rebuild a baseline after a restart.
    pub fn last_cuts(&self, target: i64, until_id: i64, cuts: usize) -> Result<Vec<Vec<i64>>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT w.id, w.start_ns FROM window_targets t JOIN windows w ON w.id = t.window
                 WHERE t.target = ?1 AND w.id <= ?2 ORDER BY w.start_ns DESC, w.id DESC LIMIT ?3",
            )
            .map_err(|e| self.sql(e))?;
        let rows = st
            .query_map(params![target, until_id, (cuts * 16) as i64], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
            })
            .map_err(|e| self.sql(e))?;
        let mut groups: Vec<(i64, Vec<i64>)> = Vec::new();
        for r in rows {
            let (id, start) = r.map_err(|e| self.sql(e))?;
            let n = groups.len();
            match groups.last_mut() {
                Some((s, ids)) if *s == start => ids.insert(0, id),
                _ if n == cuts => break,
                _ => groups.push((start, vec![id])),
            }
        }
        Ok(groups.into_iter().rev().map(|(_, ids)| ids).collect())
    }

    /// Stores the findings of target windows and the events they raised (target, time, kind, JSON
    /// body), in one transaction.
    pub fn add_findings(
        &mut self,
        rows: &[FindingRow],
        events: &[(i64, u64, &str, String)],
    ) -> Result<(), StoreError> {
        self.write(|c| {
            let tx = c.transaction()?;
            for f in rows {
                tx.execute(
                    "INSERT OR REPLACE INTO findings(target, start_ns, end_ns, rule, title, impact_pct, impact_of,
                     confidence, evidence) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                    params![
                        f.target,
                        sql_time(f.start_ns),
                        sql_time(f.end_ns),
                        f.rule,
                        f.title,
                        f.impact_pct,
                        f.impact_of,
                        f.confidence,
                        serde_json::to_string(&f.evidence).expect("strings serialize")
                    ],
                )?;
            }
            for (target, at, kind, body) in events {
                tx.execute(
                    "INSERT INTO events(target, at_ns, kind, body) VALUES (?1, ?2, ?3, ?4)",
                    params![target, sql_time(*at), kind, body],
                )?;
            }
            tx.commit()
        })
    }

    /// The findings of `targets` in windows overlapping [from, until), by target, rule and time.
    pub fn findings(
        &self,
        targets: &[i64],
        from_ns: u64,
        until_ns: u64,
    ) -> Result<Vec<FindingRow>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT target, start_ns, end_ns, rule, title, impact_pct, impact_of, confidence, evidence
                 FROM findings WHERE target = ?1 AND start_ns < ?2 AND end_ns > ?3 ORDER BY rule, start_ns",
            )
            .map_err(|e| self.sql(e))?;
        let mut out = Vec::new();
        for &t in targets {
            let rows = st
                .query_map(params![t, sql_time(until_ns), sql_time(from_ns)], |r| {
                    Ok(FindingRow {
                        target: r.get(0)?,
                        start_ns: r.get::<_, i64>(1)? as u64,
                        end_ns: r.get::<_, i64>(2)? as u64,
                        rule: r.get(3)?,
                        title: r.get(4)?,
                        impact_pct: r.get(5)?,
                        impact_of: r.get(6)?,
                        confidence: r.get(7)?,
                        evidence: serde_json::from_str(&r.get::<_, String>(8)?).unwrap_or_default(),
                    })
                })
                .map_err(|e| self.sql(e))?;
            for r in rows {
                out.push(r.map_err(|e| self.sql(e))?);
            }
        }
        Ok(out)
    }

    /// Events of `kind` (any when None) of `targets` at [from, until), oldest first.
    pub fn events(
        &self,
        targets: &[i64],
        kind: Option<&str>,
        from_ns: u64,
        until_ns: u64,
    ) -> Result<Vec<EventRow>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT id, target, at_ns, kind, body FROM events
                 WHERE target = ?1 AND at_ns >= ?2 AND at_ns < ?3 AND (?4 IS NULL OR kind = ?4) ORDER BY id",
            )
            .map_err(|e| self.sql(e))?;
        let mut out = Vec::new();
        for &t in targets {
            let rows = st
                .query_map(params![t, sql_time(from_ns), sql_time(until_ns), kind], event_row)
                .map_err(|e| self.sql(e))?;
            for r in rows {
                out.push(r.map_err(|e| self.sql(e))?);
            }
        }
        out.sort_by_key(|e| e.id);
        Ok(out)
    }

    /// The oldest event after `id`.
    pub fn next_event(&self, after: i64) -> Result<Option<EventRow>, StoreError> {
        self.conn
            .query_row(
                "SELECT id, target, at_ns, kind, body FROM events WHERE id > ?1 ORDER BY id LIMIT 1",
                params![after],
                event_row,
            )
            .optional()
            .map_err(|e| self.sql(e))
    }

    /// Where reader `name` of `queue` is (the last item it got); a reader seen for the first time starts
    /// at the newest item (history is not delivered).
    pub fn cursor(&self, queue: Queue, name: &str) -> Result<i64, StoreError> {
        let table = queue.table();
        self.conn
            .execute(
                &format!(
                    "INSERT OR IGNORE INTO cursors(queue, name, last_id) SELECT ?1, ?2, COALESCE(MAX(id), 0) FROM {table}"
                ),
                params![table, name],
            )
            .map_err(|e| self.sql(e))?;
        self.conn
            .query_row(
                "SELECT last_id FROM cursors WHERE queue = ?1 AND name = ?2",
                params![table, name],
                |r| r.get(0),
            )
            .map_err(|e| self.sql(e))
    }

    pub fn set_cursor(&mut self, queue: Queue, name: &str, id: i64) -> Result<(), StoreError> {
        self.write(|c| {
            c.execute(
                "UPDATE cursors SET last_id = ?3 WHERE queue = ?1 AND name = ?2",
                params![queue.table(), name, id],
            )
        })?;
        Ok(())
    }

    /// Items waiting for reader `name` of `queue`, and the windows retention removed before it got them.
    pub fn queue(&self, queue: Queue, name: &str) -> Result<(u64, u64), StoreError> {
        let table = queue.table();
        self.conn
            .query_row(
                &format!(
                    "SELECT (SELECT COUNT(*) FROM {table} WHERE id > c.last_id), c.dropped FROM cursors c
                     WHERE c.queue = ?1 AND c.name = ?2"
                ),
                params![table, name],
                |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64)),
            )
            .optional()
            .map(Option::unwrap_or_default)
            .map_err(|e| self.sql(e))
    }

    /// Bytes the database files take on disk (main file, log and shared memory).
    pub fn disk_bytes(&self) -> u64 {
        ["", "-wal", "-shm"]
            .iter()
            .filter_map(|s| std::fs::metadata(format!("{}{s}", self.path.display())).ok())
            .map(|m| m.len())
            .sum()
    }
}

/// A window from the columns `id, pid, start_ns, end_ns, bytes, cgroup`, in that order.
fn window_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<WindowRow> {
    Ok(WindowRow {
        id: r.get(0)?,
        pid: r.get(1)?,
        start_ns: r.get::<_, i64>(2)? as u64,
        end_ns: r.get::<_, i64>(3)? as u64,
        bytes: r.get::<_, i64>(4)? as u64,
        cgroup: r.get(5)?,
    })
}

fn event_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<EventRow> {
    Ok(EventRow {
        id: r.get(0)?,
        target: r.get(1)?,
        at_ns: r.get::<_, i64>(2)? as u64,
        kind: r.get(3)?,
        body: r.get(4)?,
    })
}

/// A time as SQLite stores it (its integers are signed).
fn sql_time(ns: u64) -> i64 {
    ns.min(i64::MAX as u64) as i64
}

#[cfg(test)]
mod tests {
    use super::{FindingRow, Queue, Store, StoreError};
    use crate::spec::{ProcessView, TargetSpec};
    use rusqlite::{params, Connection};
    use whyslow_model::Profile;
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

    /// A profile whose encoded form is about `frames` x 24 bytes that do not compress.
    fn big_profile(start_ns: u64, frames: usize, seed: u64) -> Profile {
        let meta = Metadata { start_unix_ns: start_ns, duration_ns: 10, ..Default::default() };
        let mut b =
            ProfileBuilder::new(meta, vec![SampleType { name: "cpu".into(), unit: "samples".into() }]);
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
}
