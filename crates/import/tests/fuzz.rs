//! Property test of every importer: random bytes and mutations of the corpus (bit flips, truncations,
//! insertions, duplicated and deleted chunks), both as stored and, for gzipped pprof, of the decompressed
//! protobuf (so the decoder itself is exercised, not only gzip's checksum). Each input must decode or be
//! refused with an error, never panic, and in bounded time; a decoded profile must validate and survive
//! the analyses. Seeded, so a failure repeats; WHYSLOW_FUZZ_ITERS sets the rounds per corpus file
//! (default 5000) and WHYSLOW_FUZZ_SEED the seed, for long runs.

use std::path::Path;
use std::time::{Duration, Instant};
use whyslow_import::{decode, ImportOptions};

/// xorshift64*: small, seeded, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

fn mutate(rng: &mut Rng, input: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        match rng.below(6) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 => v.truncate(rng.below(v.len() + 1)),
            2 => {
                let i = rng.below(v.len() + 1);
                let n = 1 + rng.below(16);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                v.splice(i..i, bytes);
            }
            3 if !v.is_empty() => {
                let (a, n) = (rng.below(v.len()), 1 + rng.below(64));
                let chunk: Vec<u8> = v[a..(a + n).min(v.len())].to_vec();
                let at = rng.below(v.len() + 1);
                v.splice(at..at, chunk);
            }
            4 if !v.is_empty() => {
                let a = rng.below(v.len());
                let b = (a + 1 + rng.below(64)).min(v.len());
                v.drain(a..b);
            }
            _ if !v.is_empty() => {
                // Text-aware: a byte that matters to the text formats.
                let i = rng.below(v.len());
                v[i] = b" ;\n\t:/()[]+0x9"[rng.below(14)];
            }
            _ => {}
        }
    }
    v
}

fn check(input: &[u8], what: &str, slowest: &mut Duration) {
    let opts = ImportOptions { max_bytes: 16 << 20, ..Default::default() };
    let t = Instant::now();
    let result = decode(input, what, &opts);
    if let Ok(p) = &result {
        p.validate().unwrap_or_else(|e| panic!("{what}: decoded an invalid profile: {e}"));
        for v in 0..p.sample_types.len() {
            whyslow_analyze::top_functions(p, v);
        }
        whyslow_analyze::doctor::diagnose(p, what);
    } else if let Err(e) = &result {
        assert!(!e.to_string().contains('\n'), "{what}: error of several lines: {e}");
    }
    let took = t.elapsed();
    *slowest = (*slowest).max(took);
    assert!(took < Duration::from_secs(10), "{what}: took {took:?}");
}

fn gunzip(b: &[u8]) -> Vec<u8> {
    let mut raw = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(b), &mut raw).unwrap();
    raw
}

#[test]
fn importers_never_panic_on_random_or_mutated_input() {
    let iters: usize = std::env::var("WHYSLOW_FUZZ_ITERS").ok().and_then(|s| s.parse().ok()).unwrap_or(5000);
    let seed: u64 = std::env::var("WHYSLOW_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed);
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut inputs: Vec<(String, Vec<u8>)> = Vec::new();
    for e in std::fs::read_dir(&corpus).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let bytes = std::fs::read(&path).unwrap();
        if bytes.starts_with(&[0x1f, 0x8b]) {
            inputs.push((format!("{name} (decompressed)"), gunzip(&bytes)));
        }
        inputs.push((name, bytes));
    }
    inputs.sort();
    assert!(inputs.len() >= 8, "corpus incomplete: {}", inputs.len());
    let mut rng = Rng(seed | 1);
    let mut slowest = Duration::ZERO;
    let (mut decoded, mut refused) = (0, 0);
    for (name, input) in &inputs {
        assert!(decode(input, name, &ImportOptions::default()).is_ok(), "corpus file {name} must import");
        for i in 0..iters {
            let m = mutate(&mut rng, input);
            let what = format!("{name} mutation {i} (seed {seed})");
            check(&m, &what, &mut slowest);
            match decode(&m, &what, &ImportOptions::default()) {
                Ok(_) => decoded += 1,
                Err(_) => refused += 1,
            }
        }
    }
    for i in 0..iters {
        let n = rng.below(4096);
        let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
        check(&bytes, &format!("random input {i} (seed {seed})"), &mut slowest);
    }
    eprintln!("fuzz: {decoded} mutations decoded, {refused} refused, slowest input {slowest:?}");
}
