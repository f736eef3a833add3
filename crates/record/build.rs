//! Compiles the eBPF programs in bpf/ and generates their libbpf-rs skeletons (needs clang), and the
//! in-process memory library in preload/ (needs a C compiler: $CC, else cc).

use libbpf_cargo::SkeletonBuilder;
use std::path::PathBuf;

const PROGRAMS: &[&str] = &["syscalls", "calls", "exits", "offcpu", "clock", "mem", "stacks"];

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
    for header in ["vmlinux.h", "track.h", "drops.h", "go.h", "ustack.h", "python.h", "rings.h"] {
        println!("cargo:rerun-if-changed={}", root.join(header).display());
    }
    build_preload(&out);
}

/// preload/whyslow_mem.c as a shared library: frame pointers in its entry points (its stack walk starts
/// from their frames), nothing exported but the allocator's names.
fn build_preload(out: &std::path::Path) {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../preload/whyslow_mem.c");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = std::process::Command::new(&cc)
        .args(["-O2", "-fPIC", "-shared", "-fno-omit-frame-pointer", "-fvisibility=hidden", "-Wall"])
        .arg("-o")
        .arg(out.join("libwhyslow_mem.so"))
        .arg(&src)
        .args(["-ldl", "-lm", "-lpthread"])
        .status()
        .unwrap_or_else(|e| panic!("running {cc}: {e}"));
    assert!(status.success(), "{cc} failed on {}", src.display());
    println!("cargo:rerun-if-changed={}", src.display());
    println!("cargo:rerun-if-env-changed=CC");
}
