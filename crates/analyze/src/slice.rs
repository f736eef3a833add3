//! Slicing a profile after the fact, as `perf report --comm/--dso/--pid/--tid` and pprof's `-focus`/
//! `-ignore` do: which samples are kept, and whether kernel frames are. Pure: a profile in, a profile out.

use regex::Regex;
use whyslow_model::{basename, FrameKind, Profile, ProfileBuilder, NONE};

/// Which samples and frames to keep. The default keeps everything.
#[derive(Debug, Clone, Default)]
pub struct Slice {
    /// Drop kernel frames; a sample that was all kernel becomes one `[kernel]` frame.
    pub no_kernel: bool,
    /// Keep these processes (empty: all).
    pub pids: Vec<u32>,
    /// Keep these threads (empty: all).
    pub tids: Vec<u32>,
    /// Keep threads whose name matches.
    pub comm: Option<Regex>,
    /// Keep samples whose innermost frame is in a module whose file name matches (perf's `--dso`).
    pub module: Option<Regex>,
    /// Keep samples with a frame whose function name matches (pprof's `-focus`).
    pub focus: Option<Regex>,
    /// Drop samples with a frame whose function name matches (pprof's `-ignore`).
    pub ignore: Option<Regex>,
}

/// A pattern of a slicing option that is not a regular expression.
#[derive(Debug, thiserror::Error)]
#[error("{option}: '{pattern}' is not a regular expression: {reason}")]
pub struct PatternError {
    pub option: &'static str,
    pub pattern: String,
    pub reason: String,
}

/// A regular expression of slicing option `option` (for errors).
pub fn pattern(option: &'static str, pattern: &str) -> Result<Regex, PatternError> {
    // The size limits keep a hostile pattern (a UI user's) from taking memory and time.
    regex::RegexBuilder::new(pattern).size_limit(1 << 20).dfa_size_limit(1 << 20).build().map_err(|e| {
        PatternError {
            option,
            pattern: pattern.to_string(),
            reason: e.to_string().lines().last().unwrap_or("").trim().to_string(),
        }
    })
}

impl Slice {
    pub fn is_everything(&self) -> bool {
        !self.no_kernel
            && self.pids.is_empty()
            && self.tids.is_empty()
            && self.comm.is_none()
            && self.module.is_none()
            && self.focus.is_none()
            && self.ignore.is_none()
    }

    /// The profile with only what this slice keeps (metadata, counters and sample types as they were).
    pub fn apply(&self, p: &Profile) -> Profile {
        if self.is_everything() {
            return p.clone();
        }
        let mut b = ProfileBuilder::new(p.meta.clone(), p.sample_types.clone());
        let mut kernel_only = None;
        for s in &p.samples {
            let t = &p.threads[s.thread as usize];
            let name = t.name.as_str();
            if (!self.pids.is_empty() && !self.pids.contains(&t.pid))
                || (!self.tids.is_empty() && !self.tids.contains(&t.tid))
                || self.comm.as_ref().is_some_and(|re| !re.is_match(name))
            {
                continue;
            }
            let frames = p.stack_frames(s.stack);
            let named = |re: &Regex| frames.iter().any(|&f| re.is_match(p.frame_name(f)));
            if self.focus.as_ref().is_some_and(|re| !named(re)) || self.ignore.as_ref().is_some_and(named) {
                continue;
            }
            if let Some(re) = &self.module {
                if !frames.last().is_some_and(|&f| re.is_match(basename(p.frame_module(f)))) {
                    continue;
                }
            }
            let mut kept: Vec<(u32, u32)> = Vec::with_capacity(frames.len());
            for (f, line) in p.stack_lines(s.stack) {
                let frame = &p.frames[f as usize];
                if self.no_kernel && frame.kind == FrameKind::Kernel {
                    continue;
                }
                // A frame in no module (an address no mapping covered) keeps having none.
                let module = match p.modules.get(frame.module as usize) {
                    Some(m) => b.module_of(m),
                    None => NONE,
                };
                kept.push((b.frame(p.str(frame.name), module, p.str(frame.file), frame.kind), line));
            }
            if kept.is_empty() {
                kept.push((
                    *kernel_only.get_or_insert_with(|| {
                        let m = b.module("[kernel.kallsyms]", "");
                        b.frame("[kernel]", m, "", FrameKind::Kernel)
                    }),
                    0,
                ));
            }
            let stack = b.stack_at_lines(&kept);
            let thread = b.thread(t.pid, t.tid, name);
            b.add_sample_at(stack, thread, s.time, &s.values);
        }
        let mut out = b.finish();
        out.modules.iter_mut().for_each(|m| {
            if let Some(o) = p.modules.iter().find(|o| o.path == m.path) {
                m.symbols.clone_from(&o.symbols);
            }
        });
        out.syscalls = p.syscalls.clone();
        out.calls = p.calls.clone();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::{pattern, Slice};
    use whyslow_model::FrameKind;
    use whyslow_model::Profile;
    use whyslow_model::ProfileBuilder;
    use whyslow_model::{Metadata, SampleType};

    /// Two threads of one process: `main > work > do_syscall_64` (3) in `app`, `main > idle` (1) in
    /// `helper`.
    fn profile() -> Profile {
        let types = vec![SampleType { name: "cpu".into(), unit: "samples".into() }];
        let mut b = ProfileBuilder::new(Metadata::default(), types);
        let app = b.module("/bin/app", "");
        let k = b.module("[kernel.kallsyms]", "");
        let main = b.frame("main", app, "", FrameKind::User);
        let work = b.frame("work", app, "", FrameKind::User);
        let sys = b.frame("do_syscall_64", k, "", FrameKind::Kernel);
        let idle = b.frame("idle", app, "", FrameKind::User);
        let (t1, t2) = (b.thread(7, 7, "app"), b.thread(7, 8, "helper"));
        let s1 = b.stack(&[main, work, sys]);
        b.add_sample(s1, t1, &[3]);
        let s2 = b.stack(&[main, idle]);
        b.add_sample(s2, t2, &[1]);
        b.finish()
    }

    fn leaves(p: &Profile) -> Vec<(String, i64)> {
        let mut v: Vec<(String, i64)> = p
            .samples
            .iter()
            .map(|s| {
                let names: Vec<&str> = p.stack_frames(s.stack).iter().map(|&f| p.frame_name(f)).collect();
                (names.join(";"), s.values[0])
            })
            .collect();
        v.sort();
        v
    }

    #[test]
    fn each_option_keeps_what_it_names() {
        let p = profile();
        let all = leaves(&Slice::default().apply(&p));
        assert_eq!(all, [("main;idle".to_string(), 1), ("main;work;do_syscall_64".to_string(), 3)]);
        let re = |s: &str| Some(pattern("--x", s).unwrap());
        let cases: Vec<(Slice, Vec<(&str, i64)>)> = vec![
            (Slice { no_kernel: true, ..Default::default() }, vec![("main;idle", 1), ("main;work", 3)]),
            (Slice { tids: vec![8], ..Default::default() }, vec![("main;idle", 1)]),
            (Slice { pids: vec![9], ..Default::default() }, vec![]),
            (Slice { comm: re("^app$"), ..Default::default() }, vec![("main;work;do_syscall_64", 3)]),
            (Slice { module: re("kallsyms"), ..Default::default() }, vec![("main;work;do_syscall_64", 3)]),
            (Slice { focus: re("^work$"), ..Default::default() }, vec![("main;work;do_syscall_64", 3)]),
            (Slice { ignore: re("work"), ..Default::default() }, vec![("main;idle", 1)]),
        ];
        for (slice, want) in cases {
            let want: Vec<(String, i64)> = want.into_iter().map(|(s, n)| (s.to_string(), n)).collect();
            assert_eq!(leaves(&slice.apply(&p)), want, "{slice:?}");
        }
        let e = pattern("--focus", "a(").unwrap_err().to_string();
        assert!(e.starts_with("--focus: 'a(' is not a regular expression: ") && !e.contains('\n'), "{e}");
    }
}
