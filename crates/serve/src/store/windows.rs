//! The stored windows: one row per (process, window) with its profile, the targets each belongs to,
//! and the processes seen; read by range, by cut (the doctor) and one after another (push).

use super::{sql_time, Store, StoreError};
use crate::spec::ProcessView;
use rusqlite::{params, OptionalExtension};
use std::path::Path;
use whyslow_model::Profile;

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

impl Store {
    pub fn saw_process(&mut self, p: &ProcessView, now_ns: u64) -> Result<(), StoreError> {
        self.write(|c| {
            c.prepare_cached(
                "INSERT INTO processes(pid, start_ticks, comm, cmdline, first_ns, last_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?5)
                 ON CONFLICT(pid, start_ticks) DO UPDATE SET last_ns = ?5, comm = ?3, cmdline = ?4",
            )?
            .execute(params![p.pid, p.start_ticks as i64, p.comm, p.cmdline, now_ns as i64])
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
                tx.prepare_cached(
                    "INSERT INTO windows(pid, start_ticks, start_ns, end_ns, types, bytes, profile, cgroup)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                )?
                .execute(params![
                    p.pid,
                    p.start_ticks as i64,
                    sql_time(start),
                    sql_time(end),
                    types,
                    blob.len() as i64,
                    blob,
                    p.cgroup
                ])?;
                let id = tx.last_insert_rowid();
                for t in targets.iter() {
                    tx.prepare_cached(
                        "INSERT OR IGNORE INTO window_targets(target, start_ns, window) VALUES (?1, ?2, ?3)",
                    )?
                    .execute(params![t, sql_time(start), id])?;
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
