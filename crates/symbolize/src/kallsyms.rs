//! Kernel symbol lookup from a kallsyms table (read once, sorted, binary searched): /proc/kallsyms, or
//! the copy perf keeps of a kernel's table in its build-id cache (`~/.debug/[kernel.kallsyms]/ID/kallsyms`,
//! written by `perf record`), which is a plain file: reading it takes milliseconds where /proc/kallsyms,
//! formatted by the kernel line by line, takes tens of them.

use std::path::PathBuf;

#[derive(Clone)]
pub struct Kallsyms {
    text: String,
    /// (address, start of the name in `text`, its length | [`LOADED`]), sorted by address, then name.
    syms: Vec<(u64, u32, u32)>,
    /// The kernel image's own text: `_stext`..`_etext`.
    core: Option<(u64, u64)>,
}

/// Set in a symbol's length: it belongs to a module or BPF program (`[name]` after it), not the image.
const LOADED: u32 = 1 << 31;

impl Kallsyms {
    pub fn load() -> Kallsyms {
        Self::parse(std::fs::read_to_string("/proc/kallsyms").unwrap_or_default())
    }

    /// The running kernel's table, the image's own symbols from a copy kept for this boot where there is
    /// one (true: modules and BPF programs, which come and go, are to be looked up in /proc/kallsyms), else
    /// read from /proc/kallsyms (~0.1 s) and its image symbols copied for the next run (false). The copy
    /// (`$XDG_CACHE_HOME/whyslow` or `~/.cache/whyslow`, `kallsyms-BOOT_ID`, mode 0600: the addresses
    /// tell where KASLR put the kernel) is valid for the boot it names only.
    pub fn load_running() -> (Kallsyms, bool) {
        let cache = boot_cache_path();
        if let Some(k) = cache.as_ref().and_then(|p| std::fs::read_to_string(p).ok()).map(Self::parse) {
            if !k.is_empty() && k.core.is_some() {
                return (k, true);
            }
        }
        let text = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
        if let Some(path) = cache {
            // Lines of the image: no `[module]` after the name. Hidden addresses (all zero) are not kept.
            let image: String = text
                .lines()
                .filter(|l| l.split_ascii_whitespace().nth(3).is_none() && !l.starts_with("0000000000000000"))
                .flat_map(|l| [l, "\n"])
                .collect();
            if !image.is_empty() {
                let _ = save_private(&path, image.as_bytes());
            }
        }
        (Self::parse(text), false)
    }

    /// perf's copy of the table of the kernel with this build id (hex), if it has one.
    pub fn from_perf_cache(build_id: &str) -> Option<Kallsyms> {
        if build_id.is_empty() || !build_id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let dir = match std::env::var_os("PERF_BUILDID_DIR") {
            Some(d) => PathBuf::from(d),
            None => PathBuf::from(std::env::var_os("HOME")?).join(".debug"),
        };
        let path = dir.join("[kernel.kallsyms]").join(build_id).join("kallsyms");
        let k = Self::parse(std::fs::read_to_string(path).ok()?);
        (!k.is_empty()).then_some(k)
    }

    pub(crate) fn parse(text: String) -> Kallsyms {
        let mut syms = Vec::with_capacity(text.len() / 40);
        let mut start = 0usize;
        for line in text.split('\n') {
            let at = start;
            start += line.len() + 1;
            let mut it = line.split_ascii_whitespace();
            let (Some(addr), Some(kind), Some(name)) = (it.next(), it.next(), it.next()) else { continue };
            let Ok(addr) = u64::from_str_radix(addr, 16) else { continue };
            // Text symbols only; a zero address means kptr_restrict hides them.
            if addr == 0 || !matches!(kind, "t" | "T" | "w" | "W") {
                continue;
            }
            let offset = name.as_ptr() as usize - line.as_ptr() as usize;
            let (Ok(from), Ok(len)) = (u32::try_from(at + offset), u32::try_from(name.len())) else {
                continue;
            };
            if len >= LOADED {
                continue;
            }
            let loaded = if it.next().is_some() { LOADED } else { 0 };
            syms.push((addr, from, len | loaded));
        }
        let name =
            |&(_, from, len): &(u64, u32, u32)| &text[from as usize..(from + (len & !LOADED)) as usize];
        // The table is mostly sorted already; equal addresses sort by name (the last one names them).
        syms.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| name(a).cmp(name(b))));
        let mut k = Kallsyms { text, syms, core: None };
        k.core = k.address_of("_stext").zip(k.address_of("_etext"));
        k
    }

    fn name(&self, i: usize) -> &str {
        let (_, from, len) = self.syms[i];
        &self.text[from as usize..(from + (len & !LOADED)) as usize]
    }

    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }

    /// The symbol `addr` lies in. An address outside the image's text whose nearest symbol below is one
    /// of the image's (a section end such as `_einittext`) lies in code this table does not name: a BPF
    /// program or module loaded after it was read, or since unloaded.
    pub fn lookup(&self, addr: u64) -> Option<&str> {
        let i = self.syms.partition_point(|(a, ..)| *a <= addr).checked_sub(1)?;
        let of_image = self.syms[i].2 & LOADED == 0;
        if of_image && self.core.is_some() && !self.in_core_text(addr) && self.syms[i].0 != addr {
            return None;
        }
        Some(self.name(i))
    }

    /// The address of a symbol (the first of that name).
    pub fn address_of(&self, symbol: &str) -> Option<u64> {
        (0..self.syms.len()).find(|&i| self.name(i) == symbol).map(|i| self.syms[i].0)
    }

    /// Whether `addr` lies in the kernel image's own text (`_stext`.. `_etext`), not in a module or BPF
    /// program (those are loaded and unloaded while the kernel runs).
    pub fn in_core_text(&self, addr: u64) -> bool {
        self.core.is_some_and(|(s, e)| s <= addr && addr < e)
    }
}

/// Where the image symbols of this boot's kernel are kept (None without a boot id or a home).
fn boot_cache_path() -> Option<PathBuf> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let boot = boot.trim();
    if boot.is_empty() || !boot.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
        return None;
    }
    let dir = match std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache"),
    };
    Some(dir.join("whyslow").join(format!("kallsyms-{boot}")))
}

/// Writes `bytes` to `path` readable by its owner only, atomically (a temporary file renamed).
fn save_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let dir = path.parent().ok_or(std::io::ErrorKind::InvalidInput)?;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let tmp = dir.join(format!(".kallsyms-{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
    f.write_all(bytes)?;
    drop(f);
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::{boot_cache_path, Kallsyms};

    #[test]
    fn finds_the_enclosing_symbol() {
        let k = Kallsyms::parse(
            "ffff0010 T do_sys_open\nffff0000 t _stext\nffff0020 d data_sym\n0 T hidden\n\
             ffff0000 T _text\nffff9000 t mod_fn\t[some_mod]\nffff0040 T _etext\n"
                .into(),
        );
        assert_eq!(k.lookup(0xffff0015), Some("do_sys_open"));
        assert_eq!(k.lookup(0xffff0000), Some("_text"), "equal addresses: the last name in order");
        assert_eq!(k.lookup(0xfffe0000), None);
        assert_eq!(k.lookup(0xffff9004), Some("mod_fn"));
        assert_eq!(k.address_of("do_sys_open"), Some(0xffff0010));
        assert!(k.in_core_text(0xffff0015) && !k.in_core_text(0xffff9004));
        // Past the image's text, below every module: code the table does not name (a BPF program).
        assert_eq!(k.lookup(0xffff0050), None);
    }

    /// The running kernel's table read twice: the second time from this boot's copy of the image's
    /// symbols, which names the image's text as /proc/kallsyms does.
    #[test]
    fn the_running_kernels_image_symbols_are_kept_for_the_boot() {
        let dir = tempfile::tempdir().unwrap();
        // No other test of this crate reads XDG_CACHE_HOME.
        std::env::set_var("XDG_CACHE_HOME", dir.path());
        let (first, _) = Kallsyms::load_running();
        let (again, from_copy) = Kallsyms::load_running();
        if first.is_empty() || first.core.is_none() {
            return; // addresses hidden here (kptr_restrict): nothing to keep
        }
        assert!(from_copy);
        let path = boot_cache_path().unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let (s, e) = first.core.unwrap();
        for a in [s, s + (e - s) / 3, e - 1] {
            assert_eq!(first.lookup(a), again.lookup(a), "{a:#x}");
        }
    }
}
