//! The soak test: a long run of random overwrites of a fixed key set on a real directory with a
//! small cache, watching that nothing grows without bound. `#[ignore]`d: each test runs for
//! `STRATA_SOAK_SECS` seconds (default 1800) after loading its keys, one engine per process
//! when the RSS figures matter:
//!
//! ```sh
//! STRATA_SOAK_SECS=60 cargo test -p strata --test soak -- --ignored --exact soak_betree --nocapture
//! ```
//!
//! Workload: `STRATA_SOAK_KEYS` keys (default 500,000) of 16 bytes with 100-byte values, loaded
//! in order, then overwritten at random in durable batches of 1,000 operations (9 in 10 puts of
//! a new value, 1 in 10 deletes), with a 16 MiB cache: the data set is several times the cache.
//! Checkpoints come from the log threshold (the default 64 MiB for the Bε-tree, 16 MiB for the
//! slower B+-tree), plus an explicit `Db::checkpoint` at a quarter, half and three quarters of
//! the run. Every thirtieth of the run a row is recorded: elapsed time, data file (now, and its
//! largest since the last row), its referenced and free bytes, log files (now and largest), RSS,
//! cache residency, live keys, checkpoints, write rate; the table is printed and written as CSV
//! under the target directory (the path is printed).
//!
//! Asserted:
//! - the data file levels off: its largest size after any batch of the last third of the run
//!   is at most 1.3 times its largest over the middle third (freed extents are reused);
//! - the log never exceeds the bound its checkpoint rule implies (see `log_bound`), checked
//!   after every batch;
//! - RSS stays within the cache budget plus 64 MiB above the process's RSS before the database
//!   was opened (the baseline, which holds the test's own model of the keys);
//! - the contents are right: sampled reads during the run, and at the end every key and value
//!   against the model, the live key count and `Db::check`.
//!
//! The two tests share the process's RSS, so they take a lock and run one after the other.

mod common;

use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::Rng;
use strata::{Db, Options, WriteBatch, LARGE_BASEMENTS_BETREE};

const KEY_LEN: usize = 16;
const VALUE_LEN: usize = 100;
const BATCH: usize = 1000;
const CACHE: usize = 16 << 20;
/// RSS allowed above the baseline, beyond the cache budget: the log's and the checkpoint's
/// buffers, iterator pages, the allocator's slack.
const RSS_SLACK: u64 = 64 << 20;
const MIB: f64 = (1u64 << 20) as f64;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[test]
#[ignore = "soak: STRATA_SOAK_SECS seconds (default 1800)"]
fn soak_betree() {
    let g = LARGE_BASEMENTS_BETREE;
    soak(
        "betree",
        Options::default().betree(g.node_size, g.fanout, g.basement),
    );
}

#[test]
#[ignore = "soak: STRATA_SOAK_SECS seconds (default 1800)"]
fn soak_btree() {
    // At its rate (under 10,000 random overwrites a second with this cache) the log would
    // pass the default 64 MiB about once a minute; 16 MiB, the cache budget, checkpoints every
    // few seconds and makes the rule's dirty-bytes side the one that counts.
    soak(
        "btree",
        Options::default()
            .btree(64 << 10)
            .checkpoint_wal_bytes(CACHE as u64),
    );
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).map_or(default, |s| {
        s.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={s} is not a number"))
    })
}

fn key(i: u64) -> Vec<u8> {
    let k = format!("soak{i:012}").into_bytes();
    debug_assert_eq!(k.len(), KEY_LEN);
    k
}

/// The value of key i's version v (versions start at 1; 0 means deleted).
fn value(i: u64, v: u32) -> Vec<u8> {
    common::value((i << 32) | u64::from(v), VALUE_LEN)
}

/// This process's resident set, from /proc/self/status.
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS line");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmRSS value");
    kib << 10
}

/// The most bytes the two log files can hold together.
///
/// A checkpoint begins after a write once the current log file holds at least
/// `checkpoint_wal_bytes` and at least the dirty nodes' bytes (db.rs, `write_with`). That check
/// runs after the batch settled, when the cache is within its budget with nothing pinned, so
/// the dirty bytes are at most the budget: the current file is rotated once it passes
/// max(checkpoint_wal_bytes, cache budget), and before the write that crossed it, it was below
/// that, so it never holds more than that plus one record. A rotation leaves the filled file
/// behind until its checkpoint is durable, and the next rotation first waits for that and
/// writes over it from its start (a file keeps the length of its longest round, never more);
/// so at most two such files exist at once, each starting with a marker record.
fn log_bound(opts: &Options, max_record: u64) -> u64 {
    let threshold = opts.checkpoint_wal_bytes.max(opts.cache_bytes as u64);
    2 * (threshold + max_record + 32)
}

/// One row of the curve.
struct Row {
    secs: f64,
    /// The data file now, and its largest size since the previous row.
    data: u64,
    data_max: u64,
    /// Of the data file: bytes the newest checkpoint's table references, and free bytes.
    referenced: u64,
    free: u64,
    /// The log files now, and their largest size since the previous row.
    log: u64,
    log_max: u64,
    rss: u64,
    cache: u64,
    live: u64,
    checkpoints: u64,
    ops_per_sec: f64,
}

fn soak(engine: &str, opts: Options) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let secs = env_u64("STRATA_SOAK_SECS", 1800);
    let keys = env_u64("STRATA_SOAK_KEYS", 500_000);
    let seed = env_u64("STRATA_SOAK_SEED", 0x50a4);
    let opts = opts.cache_bytes(CACHE);
    let dir = tempfile::Builder::new()
        .prefix("strata-soak-")
        .tempdir()
        .expect("tempdir");
    let every = Duration::from_secs_f64((secs as f64 / 30.0).max(1.0));
    eprintln!(
        "soak {engine}: {secs} s, {keys} keys of {KEY_LEN} B with {VALUE_LEN} B values, cache \
         {} MiB, checkpoint_wal_bytes {} MiB, a row every {:.0} s, in {}",
        CACHE >> 20,
        opts.checkpoint_wal_bytes >> 20,
        every.as_secs_f64(),
        dir.path().display()
    );

    // The model: key i's current version (0: deleted), every key at version 1 once loaded.
    // Written (so resident) before the baseline is taken.
    let mut version = vec![1u32; keys as usize];
    let mut live = keys;
    // Hand memory an earlier test in this process freed back to the system, so that the
    // baseline is this test's own.
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free heap memory.
    unsafe {
        libc::malloc_trim(0);
    }
    let baseline = rss_bytes();
    let db = Db::open(dir.path(), opts.clone()).expect("open");

    // Record size of a batch of puts: header 32, count 4, per put tag 1 + two lengths 4 + 4.
    let max_record = (32 + 4 + BATCH * (1 + 4 + KEY_LEN + 4 + VALUE_LEN)) as u64;
    let bound = log_bound(&opts, max_record);

    let load_start = Instant::now();
    for first in (0..keys).step_by(BATCH) {
        let mut b = WriteBatch::new();
        for i in first..(first + BATCH as u64).min(keys) {
            b.put(key(i), value(i, 1));
        }
        db.write(b).expect("load");
    }
    eprintln!(
        "soak {engine}: loaded in {:.1} s",
        load_start.elapsed().as_secs_f64()
    );

    let mut rng = Rng::new(seed);
    let mut rows: Vec<Row> = Vec::new();
    let mut log_max_ever = 0;
    let mut log_max_row = 0;
    let mut data_max_row = 0;
    let mut ops = 0u64;
    let mut ops_at_row = 0u64;
    let mut next_version = 2u32;
    let mut explicit = 0;
    let start = Instant::now();
    let mut next_row = Duration::ZERO;
    let run = Duration::from_secs(secs);
    loop {
        let elapsed = start.elapsed();
        if elapsed >= next_row {
            let m = db.metrics();
            let rss = rss_bytes();
            let at = elapsed.as_secs_f64();
            let since = rows.last().map_or(0.0, |r| at - r.secs);
            rows.push(Row {
                secs: at,
                data: m.data_file_bytes,
                data_max: data_max_row.max(m.data_file_bytes),
                referenced: m.engine.referenced_bytes,
                free: m.engine.free_bytes,
                log: m.wal_file_bytes,
                log_max: log_max_row.max(m.wal_file_bytes),
                rss,
                cache: m.engine.cache.resident_bytes,
                live,
                checkpoints: m.engine.checkpoints,
                ops_per_sec: if since > 0.0 {
                    (ops - ops_at_row) as f64 / since
                } else {
                    0.0
                },
            });
            log_max_row = 0;
            data_max_row = 0;
            ops_at_row = ops;
            assert!(
                rss.saturating_sub(baseline) <= CACHE as u64 + RSS_SLACK,
                "soak {engine}: RSS {:.1} MiB is {:.1} MiB above the baseline {:.1} MiB at {at:.0} s, \
                 over the cache budget + {} MiB",
                rss as f64 / MIB,
                rss.saturating_sub(baseline) as f64 / MIB,
                baseline as f64 / MIB,
                RSS_SLACK >> 20
            );
            // Sampled reads against the model.
            for _ in 0..200 {
                let i = rng.range(0, keys);
                let want = match version[i as usize] {
                    0 => None,
                    v => Some(value(i, v)),
                };
                assert_eq!(db.get(key(i)).expect("get"), want, "soak {engine}: key {i}");
            }
            if elapsed >= run {
                break;
            }
            next_row += every;
        }
        // A few explicit checkpoints, at a quarter, a half and three quarters of the run.
        if explicit < 3 && elapsed >= run * (explicit + 1) / 4 {
            db.checkpoint().expect("checkpoint");
            explicit += 1;
        }
        let mut b = WriteBatch::new();
        for _ in 0..BATCH {
            let i = rng.range(0, keys);
            let v = &mut version[i as usize];
            if rng.chance(1, 10) {
                live -= u64::from(*v != 0);
                *v = 0;
                b.delete(key(i));
            } else {
                live += u64::from(*v == 0);
                *v = next_version;
                b.put(key(i), value(i, next_version));
            }
        }
        next_version += 1;
        db.write(b).expect("write");
        ops += BATCH as u64;
        let m = db.metrics();
        let log = m.wal_file_bytes;
        data_max_row = data_max_row.max(m.data_file_bytes);
        log_max_row = log_max_row.max(log);
        log_max_ever = log_max_ever.max(log);
        assert!(
            log <= bound,
            "soak {engine}: the log holds {log} bytes, above its bound of {bound}"
        );
    }

    // The curve: printed and written as CSV.
    let mut table = String::from(
        "    s  data MiB  data max MiB  ref MiB  free MiB  log MiB  log max MiB  RSS MiB  RSS-base MiB  cache MiB  live keys  checkpoints  ops/s\n",
    );
    let mut csv = String::from(
        "secs,data_bytes,data_max_bytes,referenced_bytes,free_bytes,log_bytes,log_max_bytes,rss_bytes,rss_above_baseline_bytes,cache_bytes,live_keys,checkpoints,ops_per_sec\n",
    );
    for r in &rows {
        let _ = writeln!(
            table,
            "{:5.0}  {:8.1}  {:12.1}  {:7.1}  {:8.1}  {:7.1}  {:11.1}  {:7.1}  {:12.1}  {:9.1}  {:9}  {:11}  {:5.0}",
            r.secs,
            r.data as f64 / MIB,
            r.data_max as f64 / MIB,
            r.referenced as f64 / MIB,
            r.free as f64 / MIB,
            r.log as f64 / MIB,
            r.log_max as f64 / MIB,
            r.rss as f64 / MIB,
            r.rss.saturating_sub(baseline) as f64 / MIB,
            r.cache as f64 / MIB,
            r.live,
            r.checkpoints,
            r.ops_per_sec
        );
        let _ = writeln!(
            csv,
            "{:.1},{},{},{},{},{},{},{},{},{},{},{},{:.0}",
            r.secs,
            r.data,
            r.data_max,
            r.referenced,
            r.free,
            r.log,
            r.log_max,
            r.rss,
            r.rss.saturating_sub(baseline),
            r.cache,
            r.live,
            r.checkpoints,
            r.ops_per_sec
        );
    }
    let csv_path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("soak-{engine}-{secs}s.csv"));
    std::fs::write(&csv_path, csv).expect("write the CSV");
    eprintln!(
        "soak {engine}: baseline RSS {:.1} MiB; log bound {:.1} MiB, largest {:.1} MiB; \
         {ops} operations in {:.0} s\n{table}curve written to {}",
        baseline as f64 / MIB,
        bound as f64 / MIB,
        log_max_ever as f64 / MIB,
        start.elapsed().as_secs_f64(),
        csv_path.display()
    );

    // The data file levels off: compare the last third with the middle third.
    let n = rows.len();
    assert!(
        n >= 9,
        "soak {engine}: too few rows ({n}) to judge the curve"
    );
    let max_data = |rs: &[Row]| rs.iter().map(|r| r.data_max).max().unwrap();
    let (middle, last) = (
        max_data(&rows[n / 3..2 * n / 3]),
        max_data(&rows[2 * n / 3..]),
    );
    assert!(
        last as f64 <= 1.3 * middle as f64,
        "soak {engine}: the data file still grows: {:.1} MiB at most in the last third against \
         {:.1} MiB in the middle third",
        last as f64 / MIB,
        middle as f64 / MIB
    );

    // Everything that should be there is, and nothing else.
    let report = db.check().expect("check");
    assert_eq!(report.keys, live, "soak {engine}: checked keys");
    let mut seen = 0u64;
    for kv in db.iter().expect("iter") {
        let (k, v) = kv.expect("scan");
        let i: u64 = std::str::from_utf8(&k[4..])
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("soak {engine}: unexpected key {:?}", k.escape_ascii()));
        let ver = version[i as usize];
        assert!(ver != 0, "soak {engine}: deleted key {i} is present");
        assert_eq!(v, value(i, ver), "soak {engine}: value of key {i}");
        seen += 1;
    }
    assert_eq!(seen, live, "soak {engine}: live keys");
    db.close().expect("close");
}
