//! `strata load`: write N generated records in batches, report throughput, write and space
//! amplification, tree shape and cache behaviour, then optionally time a pass of random point
//! reads of the loaded keys (verifying every value) and report its read amplification.

use std::fmt;
use std::io::{self, IsTerminal};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use serde::Serialize;
use strata::{Db, Durability, LsmConfig, Options, WriteBatch};

use crate::kv::to_hex;
use crate::report::{bytes, hit_rate, print_json, print_table, ratio, DbView, Table};
use crate::sizes::{human, parse_size, SIZE_HELP};
use crate::Failure;
use strata_bench::gen::{Order, Records, Rng};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OrderArg {
    /// Keys in ascending order (a big-endian counter)
    Sequential,
    /// Keys in pseudo-random order (a hash of the seed and the counter)
    Random,
}

impl From<OrderArg> for Order {
    fn from(o: OrderArg) -> Order {
        match o {
            OrderArg::Sequential => Order::Sequential,
            OrderArg::Random => Order::Random,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EngineKind {
    /// B+-tree
    Btree,
    /// Bε-tree (the default engine)
    Betree,
    /// LSM-tree (leveled, T = 10, memtable a quarter of --cache)
    Lsm,
}

/// Bulk-load generated records, then report throughput, amplification and cache behaviour
///
/// Record i is a pure function of --seed and i, so --reads can look up any loaded key and check
/// its value. After the writes, one checkpoint puts everything in the tree (its time is reported
/// apart from the load's), so WA counts every byte it took to make the data durable there; the
/// space and SA are the closed database's (its files at rest, as `strata bench rum` measures).
#[derive(Args)]
#[command(after_help = SIZE_HELP)]
pub struct LoadArgs {
    /// Database directory (created if missing)
    #[arg(long, value_name = "DIR")]
    db: PathBuf,
    /// Number of records to write
    #[arg(long, value_name = "N")]
    keys: u64,
    /// Bytes per key
    #[arg(long, value_name = "SIZE", default_value = "16", value_parser = parse_size)]
    key_size: u64,
    /// Bytes per value (incompressible)
    #[arg(long, value_name = "SIZE", default_value = "100", value_parser = parse_size)]
    value_size: u64,
    /// Records per write batch (one log record each)
    #[arg(long, value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..))]
    batch: u64,
    /// Key order
    #[arg(long, value_enum, default_value_t = OrderArg::Random)]
    order: OrderArg,
    /// Engine of a new database (an existing one keeps its own)
    #[arg(long, value_enum, default_value_t = EngineKind::Betree)]
    engine: EngineKind,
    /// Node size of a new database (an existing one keeps its own); default 64KiB for the
    /// B+-tree. For the Bε-tree, with none of --node-size, --fanout and --basement, the tuner
    /// chooses from the saved device profile (`strata profile`), else 1MiB
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    node_size: Option<u64>,
    /// Bε-tree fanout: children per internal node (default 16)
    #[arg(long, value_name = "N")]
    fanout: Option<u64>,
    /// Bε-tree leaf basement size; default a sixteenth of the node, from 1KiB to 64KiB
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    basement: Option<u64>,
    /// Buffer pool budget
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = parse_size)]
    cache: u64,
    /// Acknowledge a batch once its log record is synced to disk (the default)
    #[arg(long, overrides_with = "no_sync")]
    sync: bool,
    /// Acknowledge a batch once its log record is handed to the OS
    #[arg(long, overrides_with = "sync")]
    no_sync: bool,
    /// Open the data file with O_DIRECT, bypassing the OS page cache
    #[arg(long)]
    direct: bool,
    /// Seed of the generated keys, values and read indices
    #[arg(long, value_name = "N", default_value_t = 42)]
    seed: u64,
    /// After loading, do N point reads of random loaded keys
    #[arg(long, value_name = "N", default_value_t = 0)]
    reads: u64,
    /// Close and reopen the database before the reads, so strata's cache starts empty (the OS
    /// page cache stays warm unless --direct)
    #[arg(long)]
    cold: bool,
    /// Print one JSON object instead of a table, and no progress bar
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct LoadReport {
    db: String,
    load: LoadPhase,
    database: DbView,
    reads: Option<ReadPhase>,
    peak_rss_bytes: Option<u64>,
}

#[derive(Serialize)]
struct LoadPhase {
    keys: u64,
    key_size: u64,
    value_size: u64,
    batch: u64,
    order: &'static str,
    durability: &'static str,
    direct_io: bool,
    elapsed_s: f64,
    ops_per_s: f64,
    final_checkpoint_s: f64,
    write_amplification: f64,
    device_bytes_written: u64,
    data_bytes_written: u64,
    wal_bytes_written: u64,
    wal_syncs: u64,
    logical_bytes_written: u64,
}

#[derive(Serialize)]
struct ReadPhase {
    reads: u64,
    cold: bool,
    elapsed_s: f64,
    ops_per_s: f64,
    /// Device reads per point query during the pass.
    read_amplification: f64,
    device_reads: u64,
    device_bytes_read: u64,
    cache_hits: u64,
    cache_misses: u64,
    hit_rate: f64,
}

fn usize_arg(name: &str, v: u64) -> Result<usize, Failure> {
    usize::try_from(v).map_err(|_| Failure::Invalid(format!("--{name} {v} is too large")))
}

pub fn run(a: LoadArgs) -> Result<ExitCode, Failure> {
    if a.cold && a.reads == 0 {
        return Err(Failure::Invalid("--cold needs --reads N".into()));
    }
    if a.reads > 0 && a.keys == 0 {
        return Err(Failure::Invalid(
            "--reads needs --keys of at least 1".into(),
        ));
    }
    let records = Records::new(
        a.order.into(),
        usize_arg("key-size", a.key_size)?,
        usize_arg("value-size", a.value_size)?,
        a.seed,
        a.keys,
    )
    .map_err(Failure::Invalid)?;
    let durability = if a.no_sync {
        Durability::None
    } else {
        Durability::Sync
    };
    let opts = match a.engine {
        EngineKind::Btree => {
            Options::default().btree(usize_arg("node-size", a.node_size.unwrap_or(64 << 10))?)
        }
        // No geometry given: the tuner chooses from the saved device profile, for this many keys.
        EngineKind::Betree if (a.node_size, a.fanout, a.basement) == (None, None, None) => {
            Options::default().expected_keys(a.keys)
        }
        EngineKind::Betree => {
            let node = a.node_size.unwrap_or(1 << 20);
            let basement = a.basement.unwrap_or((node / 16).clamp(1 << 10, 64 << 10));
            Options::default().betree(
                usize_arg("node-size", node)?,
                usize_arg("fanout", a.fanout.unwrap_or(16))?,
                usize_arg("basement", basement)?,
            )
        }
        EngineKind::Lsm => {
            Options::default().lsm(LsmConfig::for_cache(usize_arg("cache", a.cache)?))
        }
    }
    .cache_bytes(usize_arg("cache", a.cache)?)
    .durability(durability)
    .direct_io(a.direct);

    let opts_at_rest = opts.clone().create_if_missing(false);
    let mut db = Db::open(&a.db, opts.clone())?;
    let elapsed = load(&db, &records, &a)?;
    let checkpoint_start = Instant::now();
    db.checkpoint()?;
    let checkpoint_elapsed = checkpoint_start.elapsed();
    let after_load = db.metrics();

    let reads = if a.reads > 0 {
        if a.cold {
            db.close()?;
            db = Db::open(&a.db, opts)?;
        }
        Some(read_pass(&db, &records, &a)?)
    } else {
        None
    };
    db.close()?;
    // Space is the closed database's, as the harness measures it ("at rest"): an open one's
    // log files keep their length between checkpoints for its next round to write over.
    let at_rest = Db::open(&a.db, opts_at_rest)?.metrics();
    let mut database = DbView::from(&after_load);
    database.data_file_bytes = at_rest.data_file_bytes;
    database.wal_file_bytes = at_rest.wal_file_bytes;
    database.space_amplification = at_rest.space_amplification;

    let (data, wal) = (&after_load.data_io, &after_load.wal_io);
    let report = LoadReport {
        db: a.db.display().to_string(),
        load: LoadPhase {
            keys: a.keys,
            key_size: a.key_size,
            value_size: a.value_size,
            batch: a.batch,
            order: Order::from(a.order).name(),
            durability: match durability {
                Durability::Sync => "sync",
                Durability::None => "none",
            },
            direct_io: a.direct,
            elapsed_s: elapsed.as_secs_f64(),
            ops_per_s: ratio(a.keys as f64, elapsed.as_secs_f64()),
            final_checkpoint_s: checkpoint_elapsed.as_secs_f64(),
            write_amplification: after_load.write_amplification,
            device_bytes_written: data.bytes_written + wal.bytes_written,
            data_bytes_written: data.bytes_written,
            wal_bytes_written: wal.bytes_written,
            wal_syncs: wal.syncs,
            logical_bytes_written: after_load.logical_bytes_written,
        },
        database,
        reads,
        peak_rss_bytes: peak_rss_bytes(),
    };
    if a.json {
        print_json(&report)?;
    } else {
        print_table(&report.table())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Write every record; returns the time the writes took.
fn load(db: &Db, records: &Records, a: &LoadArgs) -> Result<Duration, Failure> {
    let bar = progress(a.keys, "load", a.json);
    let (mut key, mut value) = (Vec::new(), Vec::new());
    let mut batch = WriteBatch::new();
    let start = Instant::now();
    for i in 0..a.keys {
        records.key(i, &mut key);
        records.value(i, &mut value);
        batch.put(&key, &value);
        if batch.len() as u64 == a.batch || i + 1 == a.keys {
            let n = batch.len() as u64;
            db.write(std::mem::take(&mut batch))?;
            bar.inc(n);
        }
    }
    let elapsed = start.elapsed();
    bar.finish_and_clear();
    Ok(elapsed)
}

/// Point reads of random loaded records, each value checked against the generator.
fn read_pass(db: &Db, records: &Records, a: &LoadArgs) -> Result<ReadPhase, Failure> {
    const TICK: u64 = 256;
    let bar = progress(a.reads, "read", a.json);
    let mut rng = Rng::for_reads(a.seed);
    let (mut key, mut want) = (Vec::new(), Vec::new());
    let before = db.metrics();
    let start = Instant::now();
    for done in 1..=a.reads {
        let i = rng.below(a.keys);
        records.key(i, &mut key);
        let got = db.get(&key)?;
        records.value(i, &mut want);
        if got.as_deref() != Some(want.as_slice()) {
            let what = if got.is_some() {
                "has the wrong value"
            } else {
                "is missing"
            };
            return Err(Failure::WrongData(format!(
                "read pass: record {i} (key {}) {what}",
                to_hex(&key)
            )));
        }
        if done % TICK == 0 {
            bar.inc(TICK);
        }
    }
    let elapsed = start.elapsed();
    bar.finish_and_clear();
    let after = db.metrics();
    let io = &after.data_io - &before.data_io;
    let queries = after.point_queries - before.point_queries;
    let (c0, c1) = (&before.engine.cache, &after.engine.cache);
    let (hits, misses) = (c1.hits - c0.hits, c1.misses - c0.misses);
    Ok(ReadPhase {
        reads: a.reads,
        cold: a.cold,
        elapsed_s: elapsed.as_secs_f64(),
        ops_per_s: ratio(a.reads as f64, elapsed.as_secs_f64()),
        read_amplification: ratio(
            (after.point_query_reads - before.point_query_reads) as f64,
            queries as f64,
        ),
        device_reads: io.reads,
        device_bytes_read: io.bytes_read,
        cache_hits: hits,
        cache_misses: misses,
        hit_rate: ratio(hits as f64, (hits + misses) as f64),
    })
}

/// A progress bar on stderr, drawn only when stderr is a terminal and the output is not JSON.
fn progress(len: u64, what: &'static str, quiet: bool) -> ProgressBar {
    if quiet || !io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let style = ProgressStyle::with_template(
        "{msg:>4} [{bar:40}] {human_pos}/{human_len} {rate} eta {eta}",
    )
    .map(|s| {
        s.progress_chars("=> ")
            .with_key("rate", |state: &ProgressState, w: &mut dyn fmt::Write| {
                let _ = write!(w, "{:.0} ops/s", state.per_sec());
            })
    })
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr())
        .with_style(style)
        .with_message(what)
}

/// The process's peak resident set size (VmHWM), where /proc provides it.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?;
    let kib: u64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kib * 1024)
}

impl LoadReport {
    fn table(&self) -> Table {
        let l = &self.load;
        let mut t = Table::default();
        t.section(&format!("load into {}", self.db));
        t.row("keys", l.keys);
        t.row(
            "records",
            format!(
                "{} order, {} B keys, {} B values, batches of {}, durability {}{}",
                l.order,
                l.key_size,
                l.value_size,
                l.batch,
                l.durability,
                if l.direct_io { ", O_DIRECT" } else { "" }
            ),
        );
        t.row("elapsed", format!("{:.3} s", l.elapsed_s));
        t.row("throughput", format!("{:.0} ops/s", l.ops_per_s));
        t.row("final checkpoint", format!("{:.3} s", l.final_checkpoint_s));
        t.row("WA", format!("{:.3}", l.write_amplification));
        t.row(
            "device written",
            format!(
                "{} (data {}, wal {}, {} wal syncs)",
                human(l.device_bytes_written),
                human(l.data_bytes_written),
                human(l.wal_bytes_written),
                l.wal_syncs
            ),
        );
        t.row("logical written", bytes(l.logical_bytes_written));
        self.database.rows(&mut t);
        if let Some(r) = &self.reads {
            let temp = if r.cold { "cold cache" } else { "warm cache" };
            t.section(&format!("reads ({temp})"));
            t.row("reads", r.reads);
            t.row("elapsed", format!("{:.3} s", r.elapsed_s));
            t.row("throughput", format!("{:.0} ops/s", r.ops_per_s));
            t.row(
                "RA",
                format!("{:.3} device reads per point query", r.read_amplification),
            );
            t.row(
                "device read",
                format!("{} in {} reads", human(r.device_bytes_read), r.device_reads),
            );
            t.row(
                "hits / misses",
                format!(
                    "{} / {} ({})",
                    r.cache_hits,
                    r.cache_misses,
                    hit_rate(r.hit_rate)
                ),
            );
        }
        t.section("process");
        t.row(
            "peak RSS",
            self.peak_rss_bytes.map_or("n/a".to_string(), bytes),
        );
        t
    }
}
