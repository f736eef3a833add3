//! Images and modules: a mapped file's unwind tables parsed once per build id however many processes
//! map it (a bounded cache of unused ones), its module id, and mmap records made mappings of a process.

use crate::process::Mapped;
use crate::{jit, Converter, Host};
use std::collections::HashMap;
use std::sync::Arc;
use whyslow_model::raw::{KeptFile, RawModule};
use whyslow_unwind::ObjectImage;

/// The parsed files (unwind tables), shared by every process that maps them: by build id (by identity,
/// else path, for a file without one), with the file identities and paths already looked up. Files
/// that no process maps any more are kept while a process mapped them within the last [`KEEP_CUTS`]
/// cuts, up to [`UNUSED_IMAGES`] of them, the most recently used first, and dropped beyond that when a
/// window is cut: a kept file stays mapped by us, and a file system holding it could not be unmounted.
#[derive(Default)]
pub(crate) struct Images {
    /// Cache key -> the image (None: unreadable or not an object file), when it was last asked for
    /// (tick), and in which round (cuts so far).
    by_key: HashMap<String, (Option<Arc<ObjectImage>>, u64, u64)>,
    /// A file's identity (or path) -> its cache key.
    known: HashMap<String, String>,
    tick: u64,
    /// Cuts so far.
    round: u64,
}

/// Cuts (windows of an agent, 10 s by default) an unused file stays for after a process last mapped it.
pub(crate) const KEEP_CUTS: u64 = 6;

/// Parsed files no process maps any more that are kept (a program started again soon, a library of
/// the next short-lived process).
pub(crate) const UNUSED_IMAGES: usize = 32;

impl Images {
    /// Ends a round: drops what no process uses and none mapped in the last [`KEEP_CUTS`] rounds, and
    /// beyond the [`UNUSED_IMAGES`] most recently asked for.
    pub(crate) fn evict(&mut self) {
        self.round += 1;
        let round = self.round;
        let mut unused: Vec<(bool, u64, String)> = self
            .by_key
            .iter()
            .filter(|(_, (img, _, _))| img.as_ref().is_none_or(|i| Arc::strong_count(i) == 1))
            .map(|(k, (_, t, r))| (round - r > KEEP_CUTS, *t, k.clone()))
            .collect();
        // The old ones first, then the least recently asked for.
        unused.sort_unstable_by_key(|u| (std::cmp::Reverse(u.0), u.1));
        let old = unused.iter().filter(|u| u.0).count();
        let n = old.max(unused.len().saturating_sub(UNUSED_IMAGES));
        if n == 0 {
            return;
        }
        for (_, _, k) in unused.drain(..n) {
            self.by_key.remove(&k);
        }
        let by_key = &self.by_key;
        self.known.retain(|_, k| by_key.contains_key(k));
    }

    pub(crate) fn len(&self) -> usize {
        self.by_key.len()
    }
}

/// The GNU build id in an object file's notes (hex), read without parsing the rest; None when it has
/// none or is no object file.
pub(crate) fn note_build_id(bytes: &[u8]) -> Option<String> {
    whyslow_unwind::build_id(bytes)
}

impl<H: Host> Converter<H> {
    /// Parsed files held (for bounded-memory checks).
    pub fn images_held(&self) -> usize {
        self.images.len()
    }

    /// Reads and parses the unwind tables of a file ahead of its first samples.
    pub fn preload(&mut self, pid: u32, path: &str) {
        if self.host.foreign(pid, path).is_none() {
            self.image(pid, path, path);
        }
    }

    /// The unwind tables of `path` as `pid` sees it, parsed once per file: `key` tells files apart
    /// (the path, with the identity of a foreign file).
    ///
    /// A file is known by its identity where the host tells it (else by `key`), and parsed once per
    /// build id: a library that many processes map, under any path or in any container, is read and
    /// parsed once while any of them maps it (see [`Images`]).
    pub(crate) fn image(&mut self, pid: u32, path: &str, key: &str) -> Option<Arc<ObjectImage>> {
        let seen = match self.host.identity(pid, path) {
            Some((dev, ino, mtime)) => format!("file:{dev}:{ino}:{mtime}"),
            None => format!("path:{key}"),
        };
        self.images.tick += 1;
        let (tick, round) = (self.images.tick, self.images.round);
        if let Some(e) = self.images.known.get(&seen).and_then(|k| self.images.by_key.get_mut(k)) {
            (e.1, e.2) = (tick, round);
            return e.0.clone();
        }
        let bytes = self.host.file(pid, path);
        let build_id = bytes.as_ref().and_then(|b| note_build_id(b));
        let cache_key = build_id.map_or_else(|| seen.clone(), |b| format!("build-id:{b}"));
        let img = match self.images.by_key.get_mut(&cache_key) {
            Some(e) => {
                (e.1, e.2) = (tick, round);
                e.0.clone()
            }
            None => {
                self.counters.images_loaded += 1;
                let img = bytes.and_then(|b| ObjectImage::parse(path, &b).ok()).map(Arc::new);
                self.images.by_key.insert(cache_key.clone(), (img.clone(), tick, round));
                img
            }
        };
        self.images.known.insert(seen, cache_key);
        img
    }

    /// The module of a file, one per path and build id: the same path in two containers may be two
    /// builds.
    pub(crate) fn module_id(&mut self, pid: u32, path: &str, build_id: &str, kept: Option<KeptFile>) -> u32 {
        let key = format!("{path}\0{build_id}");
        if let Some(&id) = self.module_ids.get(&key) {
            return id;
        }
        let id = self.raw.modules.len() as u32;
        // The vDSO has no file to read when symbolizing: keep its bytes.
        let image = if path == "[vdso]" { self.host.file(pid, path).map(|b| b.to_vec()) } else { None };
        let m = RawModule { path: path.to_string(), build_id: build_id.to_string(), image, kept };
        self.raw.modules.push(m);
        self.module_ids.insert(key, id);
        id
    }

    pub(crate) fn add_mapping(&mut self, pid: u32, start: u64, end: u64, pgoff: u64, path: &str) {
        let path = path.strip_suffix(" (deleted)").unwrap_or(path);
        // A JIT maps its jitdump file to show profilers where it is.
        if jit::jitdump_pid(path).is_some() {
            self.procs.entry(pid).or_default().jit.dump = Some(path.to_string());
            return;
        }
        // perf names anonymous executable memory (JIT code) "//anon": no file to read.
        if path.starts_with("//") || !(path.starts_with('/') || path == "[vdso]") {
            return;
        }
        let foreign = if path == "[vdso]" { None } else { self.host.foreign(pid, path) };
        let key = match &foreign {
            Some(f) => format!("{path}\0{}:{}", f.id.0, f.id.1),
            None => path.to_string(),
        };
        let image = self.image(pid, path, &key);
        let build_id = image.as_ref().map(|i| i.build_id.clone()).unwrap_or_default();
        let module = self.module_id(pid, path, &build_id, foreign.map(|f| f.file));
        let proc = self.procs.entry(pid).or_default();
        proc.maps.retain(|m| m.end <= start || end <= m.start);
        proc.maps.push(Mapped { start, end, pgoff, module });
        let bias = image.as_ref().and_then(|i| i.bias(start, pgoff));
        if let Some(image) = image {
            proc.unwinder.add_mapping(start, end, pgoff, image);
        }
        self.find_python(pid, path, bias);
    }
}
