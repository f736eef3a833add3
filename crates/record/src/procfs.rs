//! The one view of /proc that record and its users (the agent, `top`) share: /proc/PID/stat parsed in
//! one place into [`Stat`], the processes listed, and the clock its start times count in. It only reads.

/// The kernel's flag of its own threads (`PF_KTHREAD`, /proc/PID/stat's flags).
const PF_KTHREAD: u64 = 0x0020_0000;

/// Fields of /proc/PID/stat counted from the one after the command's closing parenthesis (`state` is 0;
/// proc(5) numbers them from 1 with the pid, so add 3).
const STATE: usize = 0;
const PPID: usize = 1;
const FLAGS: usize = 6;
const MAJFLT: usize = 9;
const UTIME: usize = 11;
const STIME: usize = 12;
const STARTTIME: usize = 19;

/// What whyslow reads of one process's /proc/PID/stat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub pid: u32,
    /// The command name (the kernel's 15 bytes), without its parentheses.
    pub comm: String,
    /// `R`, `S`, `D`, `Z` (ended, not reaped yet), `X` (dead), ...
    pub state: char,
    pub ppid: u32,
    /// The kernel's `PF_*` flags.
    pub flags: u64,
    /// Major page faults (read from disk).
    pub major_faults: u64,
    /// User and system CPU time, in clock ticks.
    pub utime_ticks: u64,
    pub stime_ticks: u64,
    /// Start time in clock ticks since boot: with the pid, names one process across pid reuse.
    pub start_ticks: u64,
}

impl Stat {
    /// The text of a /proc/PID/stat file, parsed (None when it is not one). The command name may hold
    /// spaces and parentheses: it ends at the last ") ".
    pub fn parse(text: &str) -> Option<Stat> {
        let (head, rest) = text.trim_end().rsplit_once(") ")?;
        let (pid, comm) = head.split_once(" (")?;
        let fields: Vec<&str> = rest.split(' ').collect();
        let num = |i: usize| fields.get(i)?.parse::<u64>().ok();
        Some(Stat {
            pid: pid.parse().ok()?,
            comm: comm.to_string(),
            state: fields.get(STATE)?.chars().next()?,
            ppid: fields.get(PPID)?.parse().ok()?,
            flags: num(FLAGS)?,
            major_faults: num(MAJFLT)?,
            utime_ticks: num(UTIME)?,
            stime_ticks: num(STIME)?,
            start_ticks: num(STARTTIME)?,
        })
    }

    /// Process `pid`'s stat now; None once it is gone.
    pub fn read(pid: u32) -> Option<Stat> {
        Stat::parse(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
    }

    /// This process's own stat.
    pub fn own() -> Option<Stat> {
        Stat::parse(&std::fs::read_to_string("/proc/self/stat").ok()?)
    }

    /// Whether it ended: a zombie (not reaped yet) or dead.
    pub fn ended(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }

    /// Whether it is one of the kernel's own threads.
    pub fn kernel_thread(&self) -> bool {
        self.flags & PF_KTHREAD != 0
    }
}

/// Every pid listed in /proc now, in directory order.
pub fn pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok()).collect()
}

/// Process `pid`'s command line, its arguments joined by spaces; None once it is gone, and for a kernel
/// thread or an ended process (they have none).
pub fn cmdline(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    (!raw.is_empty()).then(|| String::from_utf8_lossy(&raw).trim_end_matches('\0').replace('\0', " "))
}

/// Every running process but whyslow itself, kernel threads (no command line) and ended ones, by pid.
pub fn processes() -> Vec<Stat> {
    let me = std::process::id();
    let mut v: Vec<Stat> = pids()
        .into_iter()
        .filter(|&pid| pid != me)
        .filter_map(|pid| {
            let stat = Stat::read(pid).filter(|s| !s.ended())?;
            cmdline(pid).map(|_| stat)
        })
        .collect();
    v.sort_unstable_by_key(|p| p.pid);
    v
}

/// Clock ticks since boot: the unit of [`Stat::start_ticks`], from the same clock (CLOCK_BOOTTIME;
/// reading /proc/uptime at every scan was 1.7% of the agent's CPU).
pub fn uptime_ticks() -> u64 {
    let hz = ticks_per_second();
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    ts.tv_sec as u64 * hz + ts.tv_nsec as u64 * hz / 1_000_000_000
}

/// Clock ticks per second (`_SC_CLK_TCK`), at least 1.
pub fn ticks_per_second() -> u64 {
    // SAFETY: sysconf takes no pointers.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64
}

/// A /proc (or /sys) file with one value, trimmed; empty when it cannot be read.
pub(crate) fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path).map(|s| s.trim().to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::{processes, uptime_ticks, Stat};

    /// A name with spaces and parentheses ends at the last ") "; the fields after it are counted from
    /// there.
    #[test]
    fn a_stat_line_is_parsed_whatever_the_name() {
        let line = "4242 (my (odd) prog) S 7 4242 4242 0 -1 4194560 100 0 12 0 30 40 0 0 20 0 2 0 987 0 0\n";
        let s = Stat::parse(line).expect("parsed");
        assert_eq!(
            s,
            Stat {
                pid: 4242,
                comm: "my (odd) prog".into(),
                state: 'S',
                ppid: 7,
                flags: 4194560,
                major_faults: 12,
                utime_ticks: 30,
                stime_ticks: 40,
                start_ticks: 987,
            }
        );
        assert!(!s.ended() && !s.kernel_thread());
        assert_eq!(Stat::parse("4242 (short) S 1"), None);
    }

    #[test]
    fn this_process_is_read_and_not_listed() {
        let me = Stat::read(std::process::id()).expect("this process");
        assert_eq!(me.pid, std::process::id());
        assert!(me.start_ticks > 0 && !me.ended());
        assert_eq!(Stat::read(2).map(|k| k.kernel_thread()), Some(true), "kthreadd");
        let all = processes();
        assert!(all.iter().all(|p| p.pid != me.pid && p.pid != 2));
        assert!(all.iter().any(|p| p.pid == std::os::unix::process::parent_id()));
    }

    /// A process started now is as old as the clock says: a child's start time is within two ticks of
    /// the uptime read just before and after starting it.
    #[test]
    fn uptime_is_in_the_ticks_of_process_start_times() {
        let before = uptime_ticks();
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let after = uptime_ticks();
        let stat = Stat::read(child.id()).expect("the child is read");
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            before <= stat.start_ticks + 2 && stat.start_ticks <= after + 2,
            "{before} <= {} <= {after}",
            stat.start_ticks
        );
    }
}
