//! (module, file offset) -> function frames: names demangled (C++, Rust without hash), Go as is, inlined
//! callees as frames of their own, kernel addresses from /proc/kallsyms. Turns a
//! [`RawRecording`] into a [`Profile`] through the model's builder.
//!
//! An address nothing covers stays visible as `module+0xOFFSET`; it is never dropped.

mod kallsyms;

pub use whyslow_symbols::demangle;

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use std::collections::HashMap;
use std::path::Path;
use whyslow_model::raw::{RawFrame, RawRecording};
use whyslow_model::{basename, FrameKind, Profile, ProfileBuilder, NONE};

/// Name of the pseudo-module kernel frames belong to.
pub const KERNEL_MODULE: &str = "[kernel.kallsyms]";

/// One function of the frames an address expands to (outermost first).
struct Func {
    name: String,
    file: String,
    kind: FrameKind,
}

/// Symbolizes all offsets of one module in one batch.
fn symbolize_module(symbolizer: &Symbolizer, path: &str, offsets: &[u64]) -> Result<Vec<Vec<Func>>, String> {
    let src = Source::Elf(Elf::new(path));
    let syms = symbolizer.symbolize(&src, Input::FileOffset(offsets)).map_err(|e| e.to_string())?;
    Ok(syms
        .iter()
        .zip(offsets)
        .map(|(s, off)| match s {
            Symbolized::Sym(sym) => {
                let file = |ci: Option<&blazesym::symbolize::CodeInfo>| {
                    ci.map(|c| c.file.to_string_lossy().into_owned()).unwrap_or_default()
                };
                let mut v = vec![Func {
                    name: demangle(&sym.name),
                    file: file(sym.code_info.as_deref()),
                    kind: FrameKind::User,
                }];
                v.extend(sym.inlined.iter().map(|i| Func {
                    name: demangle(&i.name),
                    file: file(i.code_info.as_ref()),
                    kind: FrameKind::Inlined,
                }));
                v
            }
            Symbolized::Unknown(_) => vec![unknown(path, *off)],
        })
        .collect())
}

fn unknown(path: &str, offset: u64) -> Func {
    Func { name: format!("{}+{offset:#x}", basename(path)), file: String::new(), kind: FrameKind::Unknown }
}

/// Symbolizes every frame of a raw recording and builds the profile.
pub fn symbolize(raw: RawRecording) -> Profile {
    let symbolizer = Symbolizer::builder()
        .enable_code_info(true)
        .enable_inlined_fns(true)
        // Its demangler also "demangles" plain C names (`a` -> `signed char`); we demangle ourselves.
        .enable_demangling(false)
        .build();
    let mut notes = Vec::new();

    // Collect distinct addresses per module, then resolve each module in one batch.
    let mut by_module: HashMap<u32, Vec<u64>> = HashMap::new();
    let mut kernel_addrs = Vec::new();
    for (stack, _) in raw.samples.keys() {
        for f in stack {
            match *f {
                RawFrame::User { module, offset } => by_module.entry(module).or_default().push(offset),
                RawFrame::Kernel(a) => kernel_addrs.push(a),
                RawFrame::Unmapped(_) | RawFrame::Label(_) => {}
            }
        }
    }
    let mut resolved: HashMap<RawFrame, Vec<Func>> = HashMap::new();
    let sampled: Vec<u32> = by_module.keys().copied().collect();
    for (module, mut offsets) in by_module {
        offsets.sort_unstable();
        offsets.dedup();
        let m = &raw.modules[module as usize];
        let path = m.path.as_str();
        // An object with no file of its own (the vDSO) is symbolized from the bytes the recorder kept.
        let kept = m.image.as_deref().and_then(|bytes| {
            let f = tempfile::NamedTempFile::new().ok()?;
            std::fs::write(f.path(), bytes).ok()?;
            Some(f)
        });
        let file = kept.as_ref().map(|f| f.path().to_string_lossy().into_owned());
        let funcs = match file.as_deref().or(path.starts_with('/').then_some(path)) {
            Some(file) => symbolize_module(&symbolizer, file, &offsets).unwrap_or_else(|e| {
                notes.push(format!("cannot symbolize {path}: {e}"));
                offsets.iter().map(|&o| vec![unknown(path, o)]).collect()
            }),
            None => offsets.iter().map(|&o| vec![unknown(path, o)]).collect(),
        };
        for (o, f) in offsets.iter().zip(funcs) {
            resolved.insert(RawFrame::User { module, offset: *o }, f);
        }
    }
    if !kernel_addrs.is_empty() {
        let ksyms = kallsyms::Kallsyms::load();
        if ksyms.is_empty() {
            notes.push("kernel symbols unavailable (/proc/kallsyms shows no addresses)".into());
        }
        for a in kernel_addrs {
            let name =
                ksyms.lookup(a).map(str::to_string).unwrap_or_else(|| format!("{KERNEL_MODULE}+{a:#x}"));
            let kind = if ksyms.lookup(a).is_some() { FrameKind::Kernel } else { FrameKind::Unknown };
            resolved.insert(RawFrame::Kernel(a), vec![Func { name, file: String::new(), kind }]);
        }
    }

    let mut meta = raw.meta;
    meta.notes.extend(notes);
    let mut b = ProfileBuilder::new(meta, raw.sample_types);
    let module_ids: Vec<u32> = raw.modules.iter().map(|m| b.module(&m.path, &m.build_id)).collect();
    let kernel_module = b.module(KERNEL_MODULE, "");
    let mut frame_cache: HashMap<RawFrame, Vec<u32>> = HashMap::new();
    // Deterministic output order: sort the aggregated samples.
    let mut samples: Vec<_> = raw.samples.into_iter().collect();
    samples.sort_by(|a, b| (a.0 .1.pid, a.0 .1.tid, &a.0 .0).cmp(&(b.0 .1.pid, b.0 .1.tid, &b.0 .0)));
    let mut root_first = Vec::new();
    for ((stack, thread), values) in samples {
        root_first.clear();
        for raw_frame in stack.iter().rev() {
            let ids = frame_cache.entry(*raw_frame).or_insert_with(|| {
                let module = match *raw_frame {
                    RawFrame::User { module, .. } => module_ids[module as usize],
                    RawFrame::Kernel(_) => kernel_module,
                    RawFrame::Unmapped(_) => NONE,
                    RawFrame::Label(i) => {
                        let l = &raw.labels[i as usize];
                        let m = b.module(&l.module, "");
                        return vec![b.frame(&l.name, m, "", l.kind)];
                    }
                };
                match resolved.get(raw_frame) {
                    Some(funcs) => funcs.iter().map(|f| b.frame(&f.name, module, &f.file, f.kind)).collect(),
                    None => {
                        let RawFrame::Unmapped(a) = *raw_frame else {
                            unreachable!("user and kernel resolved")
                        };
                        vec![b.frame(&format!("[unknown]+{a:#x}"), NONE, "", FrameKind::Unknown)]
                    }
                }
            });
            root_first.extend_from_slice(ids);
        }
        let leaf = b.stack(&root_first);
        let name = raw.thread_names.get(&(thread.pid, thread.tid)).map(String::as_str).unwrap_or("");
        let t = b.thread(thread.pid, thread.tid, name);
        b.add_sample(leaf, t, &values);
    }
    let mut p = b.finish();
    for (raw_id, m) in raw.modules.iter().enumerate() {
        if sampled.contains(&(raw_id as u32)) && m.path.starts_with('/') {
            p.modules[module_ids[raw_id] as usize].producers =
                whyslow_symbols::producers(Path::new(&m.path)).unwrap_or_default();
        }
    }
    p.syscalls = raw.syscalls;
    p.calls = raw.calls;
    p
}
