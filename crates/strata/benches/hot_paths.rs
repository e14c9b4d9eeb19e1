//! Micro-benchmarks of the hot paths behind the `rum` figures, so that a regression shows up
//! before a full comparison run: a batch of 1,000 random puts, a warm point read, and with the
//! data about 6× the buffer pool (the report's out-of-memory setting) a cold point read (most
//! fetch a leaf's basement or a run's chunk from the file, through the OS page cache) and a
//! batch of puts whose flushes reach leaves that are not resident (the Bε-tree spills them as
//! runs and drains a leaf's runs into it once they fill their budget), on both trees. Commits are unsynced, so what is timed is the CPU work of the engine and the log
//! (and the checkpoints they trigger), not the device's flushes (`docs/performance.md`). The
//! puts cycle over a fixed key space, so the tree stays the same size however long the
//! benchmark runs.
//!
//! `cargo bench -p strata --bench hot_paths`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use strata::{Db, Durability, Options, WriteBatch};

const PRELOAD: u64 = 100_000;
const BATCH: u64 = 1_000;

#[path = "../tests/common/keys.rs"]
mod keys;
use keys::rum_key as key;

fn value(i: u64) -> [u8; 100] {
    let mut v = [0u8; 100];
    for (j, b) in v.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(j as u8);
    }
    v
}

fn batch(from: u64) -> WriteBatch {
    let mut b = WriteBatch::new();
    for i in from..from + BATCH {
        b.put(key(i), value(i));
    }
    b
}

/// Puts cycle over this many keys, the first `PRELOAD` of them loaded before timing.
const KEY_SPACE: u64 = 2 * PRELOAD;

fn engines() -> [(&'static str, Options); 2] {
    let base = Options::default()
        .durability(Durability::None)
        .cache_bytes(256 << 20);
    [
        ("betree", base.clone().betree(1 << 20, 16, 64 << 10)),
        ("btree", base.btree(64 << 10)),
    ]
}

fn loaded(dir: &std::path::Path, opts: &Options) -> Db {
    let db = Db::open(dir, opts.clone()).unwrap();
    for from in (0..PRELOAD).step_by(BATCH as usize) {
        db.write(batch(from)).unwrap();
    }
    db
}

fn writes(c: &mut Criterion) {
    put_batches(c, "write 1,000 random puts", engines());
}

/// Batches of 1,000 random puts cycling over the key space, on each engine.
fn put_batches(c: &mut Criterion, title: &str, engines: [(&'static str, Options); 2]) {
    let mut g = c.benchmark_group(title);
    for (name, opts) in engines {
        let dir = tempfile::tempdir().unwrap();
        let db = loaded(dir.path(), &opts);
        let mut next = PRELOAD;
        g.bench_function(name, |b| {
            b.iter_batched(
                || {
                    let from = next;
                    next = (next + BATCH) % KEY_SPACE;
                    batch(from)
                },
                |wb| db.write(wb).unwrap(),
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

fn reads(c: &mut Criterion) {
    point_reads(c, "warm point read", engines());
}

/// Point reads of loaded keys in a scattered order, after a checkpoint (so that a read out of
/// the pool finds its block in the file, not in a dirty node).
fn point_reads(c: &mut Criterion, title: &str, engines: [(&'static str, Options); 2]) {
    let mut g = c.benchmark_group(title);
    for (name, opts) in engines {
        let dir = tempfile::tempdir().unwrap();
        let db = loaded(dir.path(), &opts);
        db.checkpoint().unwrap();
        let mut i = 0u64;
        g.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 7919) % PRELOAD;
                black_box(db.get(key(i)).unwrap().expect("loaded"))
            })
        });
    }
    g.finish();
}

/// The out-of-memory setting: a 2 MiB pool under about 12 MB of records, with the Bε-tree's
/// geometry as the tuner picks it for such a cache on this machine's SSD.
fn cold_engines() -> [(&'static str, Options); 2] {
    let base = Options::default()
        .durability(Durability::None)
        .cache_bytes(2 << 20);
    [
        ("betree", base.clone().betree(512 << 10, 64, 4 << 10)),
        ("btree", base.btree(16 << 10)),
    ]
}

fn cold_reads(c: &mut Criterion) {
    point_reads(c, "cold point read", cold_engines());
}

fn cold_writes(c: &mut Criterion) {
    put_batches(
        c,
        "write 1,000 random puts, data beyond the pool",
        cold_engines(),
    );
}

criterion_group!(benches, writes, reads, cold_reads, cold_writes);
criterion_main!(benches);
