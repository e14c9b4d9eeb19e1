//! The latency of single synced puts, each its own commit: the log's fdatasync is most of it.
//!
//! `cargo run --release -p strata --example synced_puts -- DIR [PUTS]` creates a database in
//! DIR (removing what is there), with a 4 MiB cache and a checkpoint every 4 MiB of log, so
//! that the log goes round its two files many times; makes PUTS (default 200,000) puts of a
//! random 16-byte key and a 100-byte value, each acknowledged only once synced; and prints
//! the percentiles of the second half's latencies (the first half lets both log files reach
//! their length).

use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next() else {
        eprintln!("usage: synced_puts DIR [PUTS]");
        std::process::exit(2);
    };
    let n: usize = args
        .next()
        .map_or(200_000, |s| s.parse().expect("PUTS: a count"));
    let _ = std::fs::remove_dir_all(&dir);
    let opts = strata::Options::default()
        .checkpoint_wal_bytes(4 << 20)
        .cache_bytes(4 << 20);
    let db = strata::Db::open(&dir, opts).expect("open");
    let value = [7u8; 100];
    let mut lat = Vec::with_capacity(n);
    let mut x: u64 = 1;
    for _ in 0..n {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let key = x.to_be_bytes().repeat(2);
        let t = Instant::now();
        db.put(&key, value).expect("put");
        lat.push(t.elapsed().as_nanos() as u64);
    }
    db.close().expect("close");
    let mut tail = lat[n / 2..].to_vec();
    tail.sort_unstable();
    let q = |p: f64| tail[((tail.len() - 1) as f64 * p) as usize] as f64 / 1e3;
    println!(
        "{} synced puts, the last {}: p50 {:.0} µs, p90 {:.0}, p99 {:.0}, p99.9 {:.0}, max {:.0}",
        n,
        tail.len(),
        q(0.5),
        q(0.9),
        q(0.99),
        q(0.999),
        q(1.0)
    );
}
