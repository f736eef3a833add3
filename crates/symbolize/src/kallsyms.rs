//! Kernel symbol lookup from /proc/kallsyms (read once, sorted, binary searched).

pub struct Kallsyms {
    syms: Vec<(u64, String)>,
}

impl Kallsyms {
    pub fn load() -> Kallsyms {
        Self::parse(&std::fs::read_to_string("/proc/kallsyms").unwrap_or_default())
    }

    fn parse(text: &str) -> Kallsyms {
        let mut syms: Vec<(u64, String)> = text
            .lines()
            .filter_map(|l| {
                let mut it = l.split_whitespace();
                let addr = u64::from_str_radix(it.next()?, 16).ok()?;
                let kind = it.next()?;
                let name = it.next()?;
                // Text symbols only; a zero address means kptr_restrict hides them.
                (addr != 0 && matches!(kind, "t" | "T" | "w" | "W")).then(|| (addr, name.to_string()))
            })
            .collect();
        syms.sort_unstable();
        Kallsyms { syms }
    }

    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }

    pub fn lookup(&self, addr: u64) -> Option<&str> {
        let i = self.syms.partition_point(|(a, _)| *a <= addr);
        (i > 0).then(|| self.syms[i - 1].1.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_enclosing_symbol() {
        let k =
            Kallsyms::parse("ffff0010 T do_sys_open\nffff0000 t _stext\nffff0020 d data_sym\n0 T hidden\n");
        assert_eq!(k.lookup(0xffff0015), Some("do_sys_open"));
        assert_eq!(k.lookup(0xffff0000), Some("_stext"));
        assert_eq!(k.lookup(0xfffe0000), None);
    }
}
