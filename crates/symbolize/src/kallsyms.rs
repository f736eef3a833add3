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

#[cfg(test)]
mod tests {
    use super::*;

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
}
