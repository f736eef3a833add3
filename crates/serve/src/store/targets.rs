//! The target definitions, as JSON, by id.

use super::{Store, StoreError};
use crate::spec::TargetSpec;
use rusqlite::params;

impl Store {
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
}
