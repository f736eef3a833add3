//! The processes of the machine as the matchers see them, read from /proc.

use crate::spec::ProcessView;

/// Every process now (kernel threads and whyslow itself left out).
pub fn scan() -> Vec<ProcessView> {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter_map(read)
        .collect()
}

/// One process, or None when it is gone or a kernel thread (no command line).
pub fn read(pid: u32) -> Option<ProcessView> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, rest) = stat.rsplit_once(") ")?;
    let comm = head.split_once(" (")?.1.to_string();
    let fields: Vec<&str> = rest.split(' ').collect();
    // After the comm: state(0) ppid(1) ... starttime(19).
    if matches!(fields.first(), Some(&"Z") | Some(&"X")) {
        return None;
    }
    let ppid = fields.get(1)?.parse().ok()?;
    let start_ticks = fields.get(19)?.parse().ok()?;
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    if raw.is_empty() {
        return None;
    }
    let cmdline = String::from_utf8_lossy(&raw).trim_end_matches('\0').replace('\0', " ");
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("0::").map(str::to_string)))
        .unwrap_or_default();
    Some(ProcessView { pid, ppid, comm, cmdline, cgroup, start_ticks })
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_our_parent_and_skips_ourselves() {
        let me = std::process::id();
        let parent = std::os::unix::process::parent_id();
        let all = super::scan();
        assert!(all.iter().all(|p| p.pid != me));
        let p = all.iter().find(|p| p.pid == parent).expect("the parent is listed");
        assert!(!p.comm.is_empty() && !p.cmdline.is_empty() && p.start_ticks > 0);
        assert!(all.iter().all(|p| p.pid != 2), "kthreadd is a kernel thread");
    }
}
