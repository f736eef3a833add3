//! The kernel's BPF programs and where their JIT-compiled code lies, asked of the kernel (bpf(2)) rather
//! than read from /proc/kallsyms: programs come and go with every process a service starts following, and
//! /proc/kallsyms costs ~65 ms of CPU to read where asking about a new program costs two syscalls.
//! Names are kallsyms' (`bpf_prog_TAG_NAME`); every function of a program with subprograms carries the
//! program's name.

use std::collections::{HashMap, HashSet};

const BPF_PROG_GET_NEXT_ID: libc::c_long = 11;
const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;

/// The programs loaded now, by id (ids are never reused while the kernel runs).
#[derive(Default)]
pub(crate) struct Programs {
    /// Each program's kallsyms name and its functions' (address, length).
    by_id: HashMap<u32, (String, Vec<(u64, u32)>)>,
    /// (start, end, id) of every function, sorted by start.
    ranges: Vec<(u64, u64, u32)>,
}

impl Programs {
    /// Lists the programs again, asking about the new ones. False when they cannot be listed or their
    /// addresses are hidden (that needs CAP_SYS_ADMIN): then the table says nothing.
    pub fn refresh(&mut self) -> bool {
        let Some(ids) = program_ids() else {
            *self = Programs::default();
            return false;
        };
        let before = self.by_id.len();
        self.by_id.retain(|id, _| ids.contains(id));
        let mut changed = before != self.by_id.len();
        for &id in &ids {
            if self.by_id.contains_key(&id) {
                continue;
            }
            // A program unloaded since it was listed is simply not there.
            let Some(program) = program(id) else { continue };
            if program.1.iter().any(|f| f.0 == 0) {
                *self = Programs::default();
                return false;
            }
            self.by_id.insert(id, program);
            changed = true;
        }
        if changed {
            self.ranges = self
                .by_id
                .iter()
                .flat_map(|(&id, (_, fs))| fs.iter().map(move |&(at, len)| (at, at + len as u64, id)))
                .collect();
            self.ranges.sort_unstable();
        }
        true
    }

    /// The program whose code holds `addr`.
    pub fn lookup(&self, addr: u64) -> Option<&str> {
        let i = self.ranges.partition_point(|r| r.0 <= addr).checked_sub(1)?;
        let (_, end, id) = self.ranges[i];
        (addr < end).then(|| self.by_id[&id].0.as_str())
    }
}

/// The ids of the loaded programs; None when they cannot be listed.
fn program_ids() -> Option<HashSet<u32>> {
    let (mut ids, mut last) = (HashSet::new(), 0);
    loop {
        // union bpf_attr for BPF_PROG_GET_NEXT_ID: start_id, next_id, open_flags.
        let mut attr = [last, 0u32, 0u32];
        if bpf(BPF_PROG_GET_NEXT_ID, &mut attr) != 0 {
            return (std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOENT)).then_some(ids);
        }
        last = attr[1];
        ids.insert(last);
    }
}

/// A program's kallsyms name and its functions' (address, length).
fn program(id: u32) -> Option<(String, Vec<(u64, u32)>)> {
    // union bpf_attr for BPF_PROG_GET_FD_BY_ID: prog_id, next_id, open_flags.
    let mut attr = [id, 0u32, 0u32];
    let fd = bpf(BPF_PROG_GET_FD_BY_ID, &mut attr);
    if fd < 0 {
        return None;
    }
    // SAFETY: the kernel just gave us this descriptor; it is closed when `_owned` drops.
    let _owned = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) };
    let mut info = Info::default();
    info_by_fd(fd as u32, &mut info)?;
    let n = info.nr_jited_ksyms.min(info.nr_jited_func_lens) as usize;
    let (mut addrs, mut lens) = (vec![0u64; n], vec![0u32; n]);
    // The second call fills the arrays the first one counted.
    let mut full = Info {
        nr_jited_ksyms: n as u32,
        nr_jited_func_lens: n as u32,
        jited_ksyms: addrs.as_mut_ptr() as u64,
        jited_func_lens: lens.as_mut_ptr() as u64,
        ..Info::default()
    };
    info_by_fd(fd as u32, &mut full)?;
    let tag: String = full.tag.iter().map(|b| format!("{b:02x}")).collect();
    let end = full.name.iter().position(|&b| b == 0).unwrap_or(full.name.len());
    let name = format!("bpf_prog_{tag}_{}", String::from_utf8_lossy(&full.name[..end]));
    Some((name, addrs.into_iter().zip(lens).collect()))
}

/// The head of struct bpf_prog_info (uapi linux/bpf.h) up to the JIT's function addresses and lengths;
/// the kernel fills as much of it as we pass.
#[repr(C)]
#[derive(Default)]
struct Info {
    kind: u32,
    id: u32,
    tag: [u8; 8],
    jited_prog_len: u32,
    xlated_prog_len: u32,
    jited_prog_insns: u64,
    xlated_prog_insns: u64,
    load_time: u64,
    created_by_uid: u32,
    nr_map_ids: u32,
    map_ids: u64,
    name: [u8; 16],
    ifindex: u32,
    gpl_compatible: u32,
    netns_dev: u64,
    netns_ino: u64,
    nr_jited_ksyms: u32,
    nr_jited_func_lens: u32,
    jited_ksyms: u64,
    jited_func_lens: u64,
}

fn info_by_fd(fd: u32, info: &mut Info) -> Option<()> {
    // union bpf_attr for BPF_OBJ_GET_INFO_BY_FD: bpf_fd, info_len, info (a pointer).
    #[repr(C)]
    struct Attr {
        fd: u32,
        len: u32,
        info: u64,
    }
    let mut attr = Attr { fd, len: std::mem::size_of::<Info>() as u32, info: info as *mut Info as u64 };
    (bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr) == 0).then_some(())
}

fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> libc::c_long {
    // SAFETY: attr is a valid bpf_attr prefix of the size passed, holding only pointers to live buffers of
    // the lengths it states; the kernel writes within them.
    unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut T, std::mem::size_of::<T>()) }
}

#[cfg(test)]
mod tests {
    use super::{bpf, Programs};
    use crate::kallsyms::Kallsyms;
    use std::os::fd::{FromRawFd, OwnedFd};

    /// Loads a two-instruction socket filter named `name` (`r0 = 0; exit`): a program of our own, whatever
    /// else the machine runs.
    fn load(name: &str) -> OwnedFd {
        #[repr(C)]
        struct Load {
            prog_type: u32,
            insn_cnt: u32,
            insns: u64,
            license: u64,
            log_level: u32,
            log_size: u32,
            log_buf: u64,
            kern_version: u32,
            prog_flags: u32,
            prog_name: [u8; 16],
        }
        let insns: [u64; 2] = [0xb7, 0x95];
        let mut prog_name = [0u8; 16];
        prog_name[..name.len()].copy_from_slice(name.as_bytes());
        let mut attr = Load {
            prog_type: 1, // BPF_PROG_TYPE_SOCKET_FILTER
            insn_cnt: 2,
            insns: insns.as_ptr() as u64,
            license: c"GPL".as_ptr() as u64,
            log_level: 0,
            log_size: 0,
            log_buf: 0,
            kern_version: 0,
            prog_flags: 0,
            prog_name,
        };
        let fd = bpf(5, &mut attr); // BPF_PROG_LOAD
        assert!(fd >= 0, "loading a socket filter: {}", std::io::Error::last_os_error());
        // SAFETY: a descriptor the kernel just gave us.
        unsafe { OwnedFd::from_raw_fd(fd as i32) }
    }

    /// A program's code lies where /proc/kallsyms puts it, under the same name; once unloaded, it is gone
    /// from the table at the next refresh (the suite runs as root).
    #[test]
    fn programs_are_where_kallsyms_puts_them() {
        let prog = load("whyslow_test");
        let mut p = Programs::default();
        assert!(p.refresh(), "BPF programs are listed (the suite runs as root)");
        let ours: Vec<(u64, u64, String)> = p
            .ranges
            .iter()
            .map(|&(start, end, id)| (start, end, p.by_id[&id].0.clone()))
            .filter(|r| r.2.ends_with("_whyslow_test"))
            .collect();
        assert!(!ours.is_empty(), "our program among {} functions", p.ranges.len());
        let k = Kallsyms::load();
        for (start, end, name) in &ours {
            let (start, end, name) = (*start, *end, name.as_str());
            assert_eq!(k.lookup(start), Some(name), "at {start:#x}");
            assert_eq!((p.lookup(start), p.lookup(end - 1)), (Some(name), Some(name)));
        }
        drop(prog);
        let start = ours[0].0;
        // The kernel frees a program after an RCU grace period: wait for it to leave the list.
        for _ in 0..200 {
            assert!(p.refresh());
            if p.lookup(start) != Some(ours[0].2.as_str()) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("an unloaded program is still named");
    }
}
