// main calls rustwork::work::burn_rust for N seconds. Usage: rustwork [SECONDS] (default 2).
mod work {
    use std::hint::black_box;
    use std::time::Instant;

    #[inline(never)]
    pub fn burn_rust(secs: f64) -> u64 {
        let start = Instant::now();
        let mut x: u64 = 1;
        while start.elapsed().as_secs_f64() < secs {
            for _ in 0..20000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
            }
            x = black_box(x);
        }
        x
    }
}

fn main() {
    let secs = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    std::hint::black_box(work::burn_rust(secs));
}
