//! Readers side by side: point reads of one strata database from 1, 2, 4 … threads at once,
//! and the same beside a writer. Every engine of `Db` reads under a shared lock
//! (`SharedReads`), and so do `VersionedDb`'s (`VersionedReads`), so readers overlap their
//! device reads and their CPU. A versioned dictionary is read and written at its root
//! version, its batches through `VersionedDb::write_at`.
//!
//! The database is loaded (random 16-byte keys, 100-byte values, batches of 1,000), closed and
//! reopened with the cache asked for, so that every setting starts from the same files. Each
//! point then runs its readers for a fixed time: each reader reads random loaded keys, one at
//! a time, timing every read; with `writer`, one more thread rewrites random keys in batches
//! of 100 meanwhile, as fast as it can. Figures: reads/s of all readers together, their
//! median and 99th-percentile latency, device reads per read (of all threads together: the
//! writer's reads count too), and the writer's records/s.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use strata::{
    CowConfig, Db, Durability, LsmConfig, Options, SdaConfig, VersionedDb, VersionedEngineOptions,
    VersionedOptions, WriteBatch, ROOT_VERSION,
};

use crate::gen::{Order, Records, Rng};
use crate::measure::Latencies;
use crate::store::Result;

#[derive(Clone, Debug)]
pub struct Config {
    pub records: u64,
    pub cache_bytes: u64,
    pub threads: Vec<usize>,
    pub seconds: f64,
    /// One writer beside the readers at every point.
    pub writer: bool,
    pub engine: Engine,
    pub direct_io: bool,
}

/// Which of strata's engines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    BeTree,
    /// 4 KiB nodes.
    BTree,
    /// The default configuration (leveled).
    Lsm,
    /// The versioned dictionary's stratified doubling array (the default configuration).
    Sda,
    /// The versioned dictionary's copy-on-write B-tree (the default configuration).
    Cow,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::BeTree => "strata-betree",
            Engine::BTree => "strata-btree",
            Engine::Lsm => "strata-lsm",
            Engine::Sda => "strata-sda",
            Engine::Cow => "strata-cow",
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Point {
    pub threads: usize,
    pub reads: u64,
    pub reads_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub device_reads_per_read: f64,
    /// Records the writer wrote per second (0 without one).
    pub writes_per_s: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub engine: String,
    pub records: u64,
    pub cache_bytes: u64,
    pub data_bytes: u64,
    pub writer: bool,
    pub points: Vec<Point>,
}

const KEY: usize = 16;
const VALUE: usize = 100;

/// The database under test: a `Db`, or a `VersionedDb` at its root version.
enum Target {
    Db(Db),
    Versioned(VersionedDb),
}

impl Target {
    fn open(dir: &Path, cfg: &Config) -> Result<Target> {
        let cache = cfg.cache_bytes as usize;
        let db = Options::default()
            .cache_bytes(cache)
            .durability(Durability::None)
            .expected_keys(cfg.records)
            .direct_io(cfg.direct_io);
        let versioned = |engine| VersionedOptions {
            engine,
            durability: Durability::None,
            direct_io: cfg.direct_io,
            ..VersionedOptions::default()
        };
        Ok(match cfg.engine {
            Engine::BeTree => Target::Db(Db::open(dir, db)?),
            Engine::BTree => Target::Db(Db::open(dir, db.btree(4 << 10))?),
            Engine::Lsm => Target::Db(Db::open(dir, db.lsm(LsmConfig::default()))?),
            Engine::Sda => Target::Versioned(VersionedDb::open(
                dir,
                versioned(VersionedEngineOptions::Sda(SdaConfig {
                    cache_bytes: cache,
                    ..SdaConfig::default()
                })),
            )?),
            Engine::Cow => Target::Versioned(VersionedDb::open(
                dir,
                versioned(VersionedEngineOptions::Cow(CowConfig {
                    cache_bytes: cache,
                    ..CowConfig::default()
                })),
            )?),
        })
    }

    /// Records `i` of `which` (the load's values, or the writer's `version` 1), as one batch.
    fn write(&self, recs: &Records, which: impl Iterator<Item = u64>, version: u64) -> Result<()> {
        let (mut k, mut v) = (Vec::new(), Vec::new());
        let mut batch = WriteBatch::new();
        for i in which {
            recs.key(i, &mut k);
            recs.value_version(i, version, &mut v);
            batch.put(&k, &v);
        }
        match self {
            Target::Db(db) => db.write(batch)?,
            Target::Versioned(db) => db.write_at(ROOT_VERSION, batch)?,
        }
        Ok(())
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(match self {
            Target::Db(db) => db.get(key)?,
            Target::Versioned(db) => db.get_at(ROOT_VERSION, key)?,
        })
    }

    /// The data file's device reads so far, and its size.
    fn data_file(&self) -> Result<(u64, u64)> {
        let m = match self {
            Target::Db(db) => db.metrics(),
            Target::Versioned(db) => db.metrics()?,
        };
        Ok((m.data_io.reads, m.data_file_bytes))
    }

    fn close(self) -> Result<()> {
        match self {
            Target::Db(db) => db.close()?,
            Target::Versioned(db) => db.close()?,
        }
        Ok(())
    }
}

pub fn run(cfg: &Config, dir: &Path, progress: impl Fn(&str)) -> Result<Report> {
    if cfg.records == 0 || cfg.threads.is_empty() || cfg.threads.contains(&0) {
        return Err("readers: records and every thread count must be at least 1".into());
    }
    let recs = Records::new(Order::Random, KEY, VALUE, 1, cfg.records)?;
    progress(&format!("loading {} records", cfg.records));
    let db = Target::open(dir, cfg)?;
    for b in (0..cfg.records).step_by(1000) {
        db.write(&recs, b..(b + 1000).min(cfg.records), 0)?;
    }
    db.close()?;
    let mut report = Report {
        engine: cfg.engine.name().into(),
        records: cfg.records,
        cache_bytes: cfg.cache_bytes,
        data_bytes: 0,
        writer: cfg.writer,
        points: Vec::new(),
    };
    for &threads in &cfg.threads {
        progress(&format!("{threads} readers"));
        let db = Target::open(dir, cfg)?;
        report.data_bytes = db.data_file()?.1;
        report.points.push(point(&db, &recs, cfg, threads)?);
        db.close()?;
    }
    Ok(report)
}

fn point(db: &Target, recs: &Records, cfg: &Config, threads: usize) -> Result<Point> {
    let stop = AtomicBool::new(false);
    let before = db.data_file()?.0;
    let started = Instant::now();
    let (readers, written) = std::thread::scope(|s| {
        let writer = cfg.writer.then(|| {
            s.spawn(|| -> Result<u64> {
                let mut rng = Rng::new(0xfeed);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let which: Vec<u64> = (0..100).map(|_| rng.below(cfg.records)).collect();
                    db.write(recs, which.into_iter(), 1)?;
                    n += 100;
                }
                Ok(n)
            })
        });
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let stop = &stop;
                s.spawn(move || -> Result<Latencies> {
                    let mut rng = Rng::new(t as u64 + 1);
                    let mut lat = Latencies::default();
                    let mut k = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        recs.key(rng.below(cfg.records), &mut k);
                        let t0 = Instant::now();
                        let got = db.get(&k)?;
                        lat.record(t0.elapsed().as_nanos() as u64);
                        if got.is_none() {
                            return Err("a loaded key read back absent".into());
                        }
                    }
                    Ok(lat)
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs_f64(cfg.seconds));
        stop.store(true, Ordering::Relaxed);
        let readers: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
        let written = writer.map(|w| w.join());
        (readers, written)
    });
    let elapsed = started.elapsed().as_secs_f64();
    let mut all = Latencies::default();
    let mut reads = 0u64;
    for r in readers {
        let lat = r.map_err(|_| "a reader panicked")??;
        reads += lat.len() as u64;
        all.extend(lat);
    }
    let writes = match written {
        Some(w) => w.map_err(|_| "the writer panicked")??,
        None => 0,
    };
    let device_reads = db.data_file()?.0 - before;
    Ok(Point {
        threads,
        reads,
        reads_per_s: reads as f64 / elapsed,
        p50_us: all.quantile_us(0.5),
        p99_us: all.quantile_us(0.99),
        device_reads_per_read: device_reads as f64 / reads.max(1) as f64,
        writes_per_s: writes as f64 / elapsed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(threads: Vec<usize>, writer: bool) -> Config {
        Config {
            records: 3_000,
            cache_bytes: 256 << 10,
            threads,
            seconds: 0.05,
            writer,
            engine: Engine::BeTree,
            direct_io: false,
        }
    }

    /// Every point reads (every loaded key it asks for is there, or the run fails), the
    /// writer writes when asked, and the database on disk holds the records; for `Db`'s
    /// default engine and both versioned ones.
    #[test]
    fn every_point_reads_and_the_writer_writes() {
        for engine in [Engine::BeTree, Engine::Sda, Engine::Cow] {
            every_point_reads_and_the_writer_writes_in(engine);
        }
    }

    fn every_point_reads_and_the_writer_writes_in(engine: Engine) {
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config {
            engine,
            ..tiny(vec![1, 2], true)
        };
        let r = run(&cfg, dir.path(), |_| {}).unwrap();
        assert_eq!(r.engine, engine.name());
        assert_eq!(r.points.len(), 2);
        for p in &r.points {
            assert!(p.reads > 0 && p.reads_per_s > 0.0, "{p:?}");
            assert!(p.p50_us > 0.0 && p.p99_us >= p.p50_us, "{p:?}");
            assert!(p.writes_per_s > 0.0, "{p:?}");
        }
        assert!(
            r.data_bytes > 3_000 * (KEY + VALUE) as u64 / 2,
            "{}",
            r.data_bytes
        );
    }

    #[test]
    fn no_threads_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        for threads in [vec![], vec![1, 0]] {
            let e = run(&tiny(threads, false), dir.path(), |_| {}).unwrap_err();
            assert!(e.to_string().contains("at least 1"), "{e}");
        }
    }
}
