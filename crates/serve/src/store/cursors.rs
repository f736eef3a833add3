//! Where each reader of a queue is (outbox.rs): one table keyed by queue and reader name, replacing
//! the push and event cursor tables of earlier stores.

use super::{Store, StoreError};
use rusqlite::{params, Connection, OptionalExtension};

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

impl Store {
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
            c.prepare_cached("UPDATE cursors SET last_id = ?3 WHERE queue = ?1 AND name = ?2")?
                .execute(params![queue.table(), name, id])
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
}

/// Moves the cursors of a store before the one cursor table (push_cursors, event_cursors) into it and
/// drops the old tables.
pub(super) fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    for (table, queue, name) in [("push_cursors", "windows", "backend"), ("event_cursors", "events", "hook")]
    {
        let exists = conn
            .prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1")
            .and_then(|mut st| st.exists([table]))?;
        if exists {
            let dropped = if table == "push_cursors" { "dropped" } else { "0" };
            conn.execute_batch(&format!(
                "BEGIN;
                 INSERT OR IGNORE INTO cursors(queue, name, last_id, dropped)
                 SELECT '{queue}', {name}, last_id, {dropped} FROM {table};
                 DROP TABLE {table};
                 COMMIT;"
            ))?;
        }
    }
    Ok(())
}
