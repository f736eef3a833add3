//! Measures how long a binary's `.gopclntab` takes to parse and to answer lookups, and prints a few
//! symbolized addresses: `cargo run --release -p whyslow-gopclntab --example measure -- BINARY [LOOKUPS]`.
//! A manual check, not a test: it asserts nothing.

use std::time::Instant;
use whyslow_gopclntab::GoTable;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: measure BINARY [LOOKUPS]")?;
    let lookups: usize = args.next().map_or(Ok(10_000), |n| n.parse())?;
    let bytes = std::fs::read(&path)?;

    let start = Instant::now();
    let table = GoTable::from_elf(&bytes)?.ok_or("no .gopclntab")?;
    let parse = start.elapsed();
    println!("{path}: {table:?}; parsed in {parse:.2?}");

    let start = Instant::now();
    let functions: Vec<(u64, u64)> = table.functions().map(|f| (f.entry, f.end)).collect();
    println!("functions() over all: {:.2?}", start.elapsed());

    // Addresses spread over every function (a fixed stride, so runs are comparable).
    let addrs: Vec<u64> = (0..lookups)
        .map(|i| {
            let (entry, end) = functions[(i * 7919) % functions.len()];
            entry + (end - entry) * ((i * 31) % 97) as u64 / 97
        })
        .collect();
    let start = Instant::now();
    let mut frames = 0;
    let mut inlined = 0;
    for &addr in &addrs {
        if let Some(f) = table.frames(addr) {
            frames += f.len();
            inlined += f.iter().filter(|f| f.inlined).count();
        }
    }
    println!("{lookups} frames() lookups: {:.2?} ({frames} frames, {inlined} inlined)", start.elapsed());

    for &addr in addrs.iter().take(5) {
        println!("{addr:#x}:");
        for frame in table.frames(addr).unwrap_or_default() {
            println!(
                "  {} {}:{}{}",
                frame.name,
                frame.file.unwrap_or_default(),
                frame.line,
                if frame.inlined { " (inlined)" } else { "" }
            );
        }
    }
    Ok(())
}
