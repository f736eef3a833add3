//! Compiles the eBPF programs in bpf/ and generates their libbpf-rs skeletons (needs clang).

use libbpf_cargo::SkeletonBuilder;
use std::path::PathBuf;

const PROGRAMS: &[&str] = &["syscalls", "calls", "exits", "offcpu", "clock"];

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bpf");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    for name in PROGRAMS {
        let src = root.join(format!("{name}.bpf.c"));
        SkeletonBuilder::new()
            .source(&src)
            .clang_args(["-I", root.to_str().expect("utf-8 path"), "-O2", "-Wall"])
            .build_and_generate(out.join(format!("{name}.skel.rs")))
            .unwrap_or_else(|e| panic!("building {}: {e:#}", src.display()));
        println!("cargo:rerun-if-changed={}", src.display());
    }
    for header in ["vmlinux.h", "track.h", "drops.h", "go.h"] {
        println!("cargo:rerun-if-changed={}", root.join(header).display());
    }
}
