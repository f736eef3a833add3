//! The always-on doctor's findings (per target window) and the events it reported (regressions,
//! findings that started), which webhooks are sent.

use super::{sql_time, Store, StoreError};
use rusqlite::{params, OptionalExtension};

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

impl Store {
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
                tx.prepare_cached(
                    "INSERT OR REPLACE INTO findings(target, start_ns, end_ns, rule, title, impact_pct, impact_of,
                     confidence, evidence) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                )?
                .execute(params![
                    f.target,
                    sql_time(f.start_ns),
                    sql_time(f.end_ns),
                    f.rule,
                    f.title,
                    f.impact_pct,
                    f.impact_of,
                    f.confidence,
                    serde_json::to_string(&f.evidence).expect("strings serialize")
                ])?;
            }
            for (target, at, kind, body) in events {
                tx.prepare_cached("INSERT INTO events(target, at_ns, kind, body) VALUES (?1, ?2, ?3, ?4)")?
                    .execute(params![target, sql_time(*at), kind, body])?;
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
