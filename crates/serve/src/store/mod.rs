//! The embedded store: SQLite in WAL mode in the data directory (this file: opening, the schema and its
//! migrations, errors, the disk budget and retention; what is stored is read and written in
//! windows.rs, targets.rs, findings.rs and cursors.rs). Targets, the processes seen, and one row
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

use crate::spec::TargetSpec;
use rusqlite::{params, Connection};
use std::path::{Path, PathBuf};

mod cursors;
mod findings;
mod targets;
#[cfg(test)]
mod tests;
mod windows;

pub use cursors::Queue;
pub use findings::{EventRow, FindingRow};
pub use windows::WindowRow;

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
        cursors::migrate(&conn).map_err(sql)?;
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

    /// Bytes the database files take on disk (main file, log and shared memory).
    pub fn disk_bytes(&self) -> u64 {
        ["", "-wal", "-shm"]
            .iter()
            .filter_map(|s| std::fs::metadata(format!("{}{s}", self.path.display())).ok())
            .map(|m| m.len())
            .sum()
    }
}

/// A time as SQLite stores it (its integers are signed).
fn sql_time(ns: u64) -> i64 {
    ns.min(i64::MAX as u64) as i64
}
