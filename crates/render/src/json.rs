//! The JSON report. Field names are a contract other tools script against: add, never rename.

use crate::{pct, sample_type, RenderError};
use serde_json::json;
use std::io::Write;
use whyslow_model::Profile;

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// The report as one pretty-printed JSON object; `total_samples` is the total of the chosen value.
pub fn report(w: &mut impl Write, p: &Profile, value: usize) -> Result<(), RenderError> {
    let st = sample_type(p, value)?;
    // Shares are of the program's own samples: those inside whyslow's probes are `probe_samples`.
    let probe = whyslow_analyze::probe_total(p, value);
    let total = p.total(value);
    let own = total - probe;
    let functions: Vec<_> = whyslow_analyze::program_functions(p, value)
        .into_iter()
        .map(|f| {
            json!({"name": f.name, "module": f.module, "self": f.self_, "total": f.total,
                   "self_pct": round2(pct(f.self_, own)), "total_pct": round2(pct(f.total, own))})
        })
        .collect();
    let threads: Vec<_> = whyslow_analyze::threads(p, value)
        .into_iter()
        .map(|t| json!({"tid": t.tid, "pid": t.pid, "name": t.name, "samples": t.value}))
        .collect();
    // Which source named each module's frames (the symbol table, DWARF, a debug file, Go's table).
    let modules: Vec<_> = p
        .modules
        .iter()
        .filter(|m| !m.symbols.is_empty())
        .map(|m| json!({"path": m.path, "build_id": m.build_id, "symbols": m.symbols}))
        .collect();
    let m = &p.meta;
    let mut doc = json!({
        "sample_type": st.name,
        "unit": st.unit,
        "total_samples": total,
        "probe_samples": probe,
        "lost_samples": m.lost_samples,
        "unwind": {"complete": m.unwind.complete, "partial": m.unwind.partial},
        "command": m.command,
        "event": m.event,
        "frequency_hz": m.frequency_hz,
        "duration_s": m.duration_ns as f64 / 1e9,
        "duration_ns": m.duration_ns,
        "exit_code": m.exit_code,
        "killed": m.killed,
        "notes": m.notes,
        "functions": functions,
        "threads": threads,
        "modules": modules,
    });
    if !p.syscalls.is_empty() {
        doc["syscalls"] = crate::syscalls::rows_json(&whyslow_analyze::syscall_summary(p, false)).into();
        // The counters' window: shorter than the run when a probe budget stopped them.
        doc["syscalls_duration_s"] = m.syscalls_seconds().into();
        if m.syscall_cost_ns > 0 {
            doc["syscall_cost_us"] = (m.syscall_cost_ns as f64 / 1e3).into();
        }
        if !m.syscall_slices.is_empty() {
            // The windows the counters ran in (the first, then the slices that sampled the rest).
            let windows: Vec<serde_json::Value> = m
                .syscall_slices
                .iter()
                .map(|&(ns, calls)| serde_json::json!({ "s": ns as f64 / 1e9, "calls": calls }))
                .collect();
            doc["syscall_windows"] = windows.into();
            if let Some(e) = m.syscall_rate_error() {
                doc["syscall_rate_error_pct"] = (e * 100.0).into();
            }
        }
    }
    serde_json::to_writer_pretty(&mut *w, &doc).map_err(std::io::Error::from)?;
    writeln!(w)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::fixture::{self, check_golden};

    #[test]
    fn json_golden() {
        let mut out = Vec::new();
        super::report(&mut out, &fixture::profile(), 0).unwrap();
        check_golden("report.json", &out);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["total_samples"], 100);
        assert_eq!(v["functions"][0]["name"], "burn_a");
        assert_eq!(v["functions"][0]["self_pct"], 40.0);
    }
}
