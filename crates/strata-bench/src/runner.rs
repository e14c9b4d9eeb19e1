//! The harness: drive one engine through a `Spec` in a directory, phase by phase, and measure
//! each phase from outside the engine (`measure`) the same way for every engine.
//!
//! Per phase: operations and seconds; latency of single reads and scans, and of batch commits,
//! apart; the logical bytes written (keys and values of puts, keys of deletes); the bytes the
//! process wrote and read (`/proc/self/io`), the device's counters, and the engine's own counter
//! where it has one; the bytes allocated under the directory after the phase and the live
//! logical bytes; the memory the engine holds after it (anonymous resident memory plus the page
//! cache of its files). After the last phase the database is closed and the bytes at rest are
//! read, for space amplification. Every read of a live record is checked against the value the
//! harness last committed for it; a miss or a wrong value is counted, never hidden.
//!
//! The clock runs only inside the engine's calls (commits, reads, scans, read views, the
//! flush): generating keys and values and checking what a read returned are outside it, here
//! and in the Go port, so both drivers time the same work. `wall_secs` keeps the phase's
//! elapsed time with everything.
//!
//! With `Spec::flush` a writing phase ends with `Store::flush`, timed apart (`flush_secs`); its
//! bytes count in the phase's, and `ops_per_sec` is over the phase and its flush together
//! (`acked_ops_per_sec` leaves the flush out).
//!
//! Run one engine per process (`strata bench worker`) when comparing engines, so that the process
//! counters and the peak resident memory are that engine's alone.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::gen::{Records, Rng, Zipf};
use crate::measure::{self, BlockStat, Latencies, ProcIo};
use crate::store::{Config, EngineIo, Store, Subject, Write};
use crate::workload::{Dist, Mix, Phase, Spec};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseResult {
    pub phase: String,
    /// Operations: records written, reads, scans, or mixed operations of every kind.
    pub ops: u64,
    /// Time inside the engine's calls, the flush excluded.
    pub secs: f64,
    /// The durable flush that ends a writing phase (0 without one).
    #[serde(default)]
    pub flush_secs: f64,
    /// Elapsed time of the whole phase, the harness's own work and the flush included.
    #[serde(default)]
    pub wall_secs: f64,
    /// ops / (secs + flush_secs): operations made durable in the engine's files per second.
    pub ops_per_sec: f64,
    /// ops / secs: operations acknowledged per second, the flush left out.
    #[serde(default)]
    pub acked_ops_per_sec: f64,
    /// Single reads and scans, each timed (0 when the phase has none).
    pub read_p50_us: f64,
    pub read_p99_us: f64,
    /// Batch commits, each timed (0 when the phase has none).
    pub commits: u64,
    pub commit_p50_us: f64,
    pub commit_p99_us: f64,
    pub logical_bytes_written: u64,
    /// `/proc/self/io` over the phase: bytes this process handed to write calls (`wchar`, the
    /// WA numerator), bytes the kernel charged it for writing to storage (`write_bytes`; see
    /// `measure` for why it over-counts page rewrites), and bytes read from storage.
    pub process_bytes_written: u64,
    pub storage_bytes_written: u64,
    pub process_bytes_read: u64,
    /// The part of `process_bytes_written` written by the flush.
    #[serde(default)]
    pub flush_bytes_written: u64,
    /// The engine's own count of bytes written, where it keeps one.
    pub engine_bytes_written: Option<u64>,
    /// The engine's own count of its data file's reads and writes over the phase, where it
    /// keeps one (strata's engines): what their cost models predict.
    #[serde(default)]
    pub engine_io: Option<EngineIo>,
    /// Writes that waited for background work during the phase, and their seconds, where the
    /// engine counts them.
    #[serde(default)]
    pub write_stalls: Option<(u64, f64)>,
    /// The block device's counters over the phase (the whole device, journal included).
    pub device_bytes_written: Option<u64>,
    pub device_reads: Option<u64>,
    /// Bytes allocated under the database directory after the phase.
    pub disk_bytes: u64,
    /// Logical bytes (keys and values) of the live records after the phase.
    pub live_bytes: u64,
    /// Reads of a live record that found nothing, or a value other than the last committed.
    pub wrong_reads: u64,
    /// After the phase (and its flush): anonymous resident memory of the process, and the
    /// bytes of the database's files in the OS page cache; `memory_bytes` is their sum.
    #[serde(default)]
    pub rss_anon_bytes: u64,
    #[serde(default)]
    pub cached_bytes: u64,
    #[serde(default)]
    pub memory_bytes: u64,
}

impl PhaseResult {
    /// Bytes the process wrote per logical byte written (0 for a phase that wrote nothing).
    pub fn write_amplification(&self) -> f64 {
        ratio(self.process_bytes_written, self.logical_bytes_written)
    }

    /// Allocated bytes per live logical byte after the phase.
    pub fn space_amplification(&self) -> f64 {
        ratio(self.disk_bytes, self.live_bytes)
    }

    /// Device reads per operation, where the device's counters are known.
    pub fn device_reads_per_op(&self) -> Option<f64> {
        self.device_reads.map(|r| ratio(r, self.ops))
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub engine: String,
    pub version: String,
    pub settings: String,
    pub spec: Spec,
    pub phases: Vec<PhaseResult>,
    /// Peak and final resident memory of the process (`VmHWM`, `VmRSS`).
    pub peak_rss_bytes: u64,
    pub rss_bytes: u64,
    pub secs: f64,
    /// Bytes the database occupies once closed after the last phase (every file under its
    /// directory, logs included), and the live logical bytes then.
    #[serde(default)]
    pub disk_bytes_at_rest: u64,
    #[serde(default)]
    pub live_bytes_at_rest: u64,
}

impl RunResult {
    /// The first phase with this label.
    pub fn phase(&self, label: &str) -> Option<&PhaseResult> {
        self.phases.iter().find(|p| p.phase == label)
    }

    /// Bytes at rest per live logical byte, after the final close.
    pub fn space_amplification_at_rest(&self) -> f64 {
        ratio(self.disk_bytes_at_rest, self.live_bytes_at_rest)
    }

    /// The most memory the engine held at the end of any phase (`PhaseResult::memory_bytes`).
    pub fn memory_bytes(&self) -> u64 {
        self.phases
            .iter()
            .map(|p| p.memory_bytes)
            .max()
            .unwrap_or(0)
    }
}

/// Progress: the phase's label, operations done and the phase's total.
pub type Progress<'a> = &'a mut dyn FnMut(&str, u64, u64);

/// Run `spec` on `engine` in `dir` (created if missing; must not hold another database).
pub fn run(
    engine: &dyn Subject,
    spec: &Spec,
    dir: &Path,
    progress: Progress,
) -> Result<RunResult, String> {
    spec.validate()?;
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let cfg = Config {
        cache_bytes: spec.cache_bytes,
        sync: spec.sync,
        expected_records: spec.records,
    };
    let fail = |what: &str, e: crate::store::AnyError| format!("{}: {what}: {e}", engine.name());
    let started = Instant::now();
    let store = engine.open(dir, &cfg).map_err(|e| fail("open", e))?;
    let mut h = Harness {
        spec,
        records: Records::new(
            spec.order,
            spec.key_size,
            spec.value_size,
            spec.seed,
            spec.records.saturating_mul(2),
        )?,
        store: Some(store),
        versions: HashMap::new(),
        first_live: 0,
        next: 0,
        key: Vec::new(),
        value: Vec::new(),
        expected: Vec::new(),
    };
    let mut phases = Vec::new();
    for (n, phase) in spec.phases.iter().enumerate() {
        let r = h
            .phase(engine, &cfg, dir, phase, n as u64, progress)
            .map_err(|e| fail(&phase.label(), e))?;
        phases.push(r);
    }
    h.store
        .take()
        .expect("open")
        .close()
        .map_err(|e| fail("close", e))?;
    let (peak_rss_bytes, rss_bytes) = measure::rss();
    let live_bytes_at_rest = h.live() * (spec.key_size + spec.value_size) as u64;
    Ok(RunResult {
        engine: engine.name().into(),
        version: engine.version(),
        settings: engine.settings(&cfg),
        spec: spec.clone(),
        phases,
        peak_rss_bytes,
        rss_bytes,
        secs: started.elapsed().as_secs_f64(),
        disk_bytes_at_rest: engine.bytes_at_rest(dir),
        live_bytes_at_rest,
    })
}

/// The harness's view of the database: which records are live, and each one's version.
struct Harness<'a> {
    spec: &'a Spec,
    records: Records,
    store: Option<Box<dyn Store>>,
    /// Records rewritten since the load, with their latest committed version.
    versions: HashMap<u64, u64>,
    /// Live records are first_live..next (deletes take the oldest).
    first_live: u64,
    next: u64,
    key: Vec<u8>,
    value: Vec<u8>,
    expected: Vec<u8>,
}

/// Counters of one phase while it runs.
#[derive(Default)]
struct Tally {
    ops: u64,
    /// Time inside the engine's calls.
    busy: Duration,
    /// A read view is open (`Store::begin_reads`).
    in_group: bool,
    reads: Latencies,
    commits: Latencies,
    commit_count: u64,
    logical: u64,
    wrong: u64,
}

type Res<T> = crate::store::Result<T>;

impl Harness<'_> {
    fn store(&mut self) -> &mut dyn Store {
        self.store
            .as_deref_mut()
            .expect("the store is open between phases")
    }

    fn reopen(&mut self, engine: &dyn Subject, cfg: &Config, dir: &Path, cold: bool) -> Res<()> {
        self.store.take().expect("open").close()?;
        if cold {
            measure::drop_page_cache(dir);
        }
        self.store = Some(engine.open(dir, cfg)?);
        if cold {
            // Opening may rewrite files (an LSM replaying its log into new tables), which puts
            // them back in the page cache.
            measure::drop_page_cache(dir);
        }
        Ok(())
    }

    fn live(&self) -> u64 {
        self.next - self.first_live
    }

    fn phase(
        &mut self,
        engine: &dyn Subject,
        cfg: &Config,
        dir: &Path,
        phase: &Phase,
        index: u64,
        progress: Progress,
    ) -> Res<PhaseResult> {
        let label = phase.label();
        if let Phase::Reads { cold: true, .. } = phase {
            self.reopen(engine, cfg, dir, true)?;
        }
        // Each phase draws from its own stream, whatever ran before it.
        let mut rng = Rng::new(crate::gen::mix(self.spec.seed ^ (index + 1) << 32));
        let device = BlockStat::of(dir);
        let proc_before = ProcIo::now();
        let engine_before = self.store().engine_bytes_written();
        let io_before = self.store().engine_io();
        let stalls_before = self.store().write_stalls();
        let started = Instant::now();
        let mut t = Tally::default();
        let mut report = |done: u64, total: u64| progress(&label, done, total);
        let group = self.spec.read_group;
        match phase {
            Phase::Load => self.load(&mut t, &mut report)?,
            Phase::Reopen => {
                let start = Instant::now();
                self.reopen(engine, cfg, dir, false)?;
                t.busy += start.elapsed();
            }
            Phase::Reads { ops, dist, .. } => {
                let chooser = Chooser::new(*dist, self.first_live, self.live());
                for i in 0..*ops {
                    if group > 0 && i % group == 0 {
                        self.end_reads(&mut t)?;
                        self.begin_reads(&mut t)?;
                    }
                    let r = chooser.pick(&mut rng);
                    self.read(r, &mut t)?;
                    if i % 1024 == 0 {
                        report(i, *ops);
                    }
                }
                self.end_reads(&mut t)?;
                t.ops = *ops;
            }
            Phase::Scans { ops, len, dist } => {
                let chooser = Chooser::new(*dist, self.first_live, self.live());
                for i in 0..*ops {
                    let r = chooser.pick(&mut rng);
                    self.scan(r, *len, &mut t)?;
                    if i % 256 == 0 {
                        report(i, *ops);
                    }
                }
                t.ops = *ops;
            }
            Phase::Mixed {
                ops,
                mix,
                dist,
                scan_len,
            } => self.mixed(*ops, mix, *dist, *scan_len, &mut rng, &mut t, &mut report)?,
            Phase::Deletes { ops } => self.deletes(*ops, &mut t, &mut report)?,
        }
        let writes = matches!(
            phase,
            Phase::Load | Phase::Mixed { .. } | Phase::Deletes { .. }
        );
        let mut flush_secs = 0.0;
        let mut flush_bytes_written = 0;
        if self.spec.flush && writes {
            let before = ProcIo::now();
            let start = Instant::now();
            self.store().flush()?;
            flush_secs = start.elapsed().as_secs_f64();
            flush_bytes_written = ProcIo::now().since(&before).wchar;
        }
        let wall_secs = started.elapsed().as_secs_f64();
        let secs = t.busy.as_secs_f64();
        // After a reopen the engine's counter restarts; only a phase on one store compares.
        let engine_after = self.store().engine_bytes_written();
        let engine_bytes_written = match (engine_before, engine_after, phase) {
            (_, _, Phase::Reopen) => None,
            (Some(b), Some(a), _) => Some(a.saturating_sub(b)),
            _ => None,
        };
        let engine_io = match (io_before, self.store().engine_io(), phase) {
            (_, _, Phase::Reopen) => None,
            (Some(b), Some(a), _) => Some(a.since(&b)),
            _ => None,
        };
        let write_stalls = match (stalls_before, self.store().write_stalls(), phase) {
            (_, _, Phase::Reopen) => None,
            (Some(b), Some(a), _) => Some((a.0.saturating_sub(b.0), (a.1 - b.1).max(0.0))),
            _ => None,
        };
        let proc = ProcIo::now().since(&proc_before);
        let dev = device.and_then(|b| Some(BlockStat::of(dir)?.since(&b)));
        let live_bytes = self.live() * (self.spec.key_size + self.spec.value_size) as u64;
        let rss_anon_bytes = measure::rss_anon();
        let cached_bytes = measure::cached_bytes(dir);
        let per_sec = |s: f64| if s > 0.0 { t.ops as f64 / s } else { 0.0 };
        Ok(PhaseResult {
            phase: label.clone(),
            ops: t.ops,
            secs,
            flush_secs,
            wall_secs,
            ops_per_sec: per_sec(secs + flush_secs),
            acked_ops_per_sec: per_sec(secs),
            read_p50_us: t.reads.quantile_us(0.50),
            read_p99_us: t.reads.quantile_us(0.99),
            commits: t.commit_count,
            commit_p50_us: t.commits.quantile_us(0.50),
            commit_p99_us: t.commits.quantile_us(0.99),
            logical_bytes_written: t.logical,
            process_bytes_written: proc.wchar,
            storage_bytes_written: proc.write_bytes,
            process_bytes_read: proc.read_bytes,
            flush_bytes_written,
            engine_bytes_written,
            engine_io,
            write_stalls,
            device_bytes_written: dev.map(|d| d.bytes_written),
            device_reads: dev.map(|d| d.reads),
            disk_bytes: measure::allocated_bytes(dir),
            live_bytes,
            wrong_reads: t.wrong,
            rss_anon_bytes,
            cached_bytes,
            memory_bytes: rss_anon_bytes + cached_bytes,
        })
    }

    /// Open a read view for the reads that follow, if the spec groups reads and none is open.
    fn begin_reads(&mut self, t: &mut Tally) -> Res<()> {
        if self.spec.read_group == 0 || t.in_group {
            return Ok(());
        }
        let start = Instant::now();
        self.store().begin_reads()?;
        t.busy += start.elapsed();
        t.in_group = true;
        Ok(())
    }

    /// Close the open read view, if any (before a write, and at the end of a group).
    fn end_reads(&mut self, t: &mut Tally) -> Res<()> {
        if !t.in_group {
            return Ok(());
        }
        let start = Instant::now();
        self.store().end_reads()?;
        t.busy += start.elapsed();
        t.in_group = false;
        Ok(())
    }

    fn commit(&mut self, batch: &[Write], t: &mut Tally) -> Res<()> {
        // A read view never spans a write (LMDB would refuse a write beside it on one thread).
        self.end_reads(t)?;
        if batch.is_empty() {
            return Ok(());
        }
        let start = Instant::now();
        self.store().write(batch)?;
        let took = start.elapsed();
        t.busy += took;
        t.commits.record(took.as_nanos() as u64);
        t.commit_count += 1;
        t.logical += batch
            .iter()
            .map(|w| (w.key.len() + w.value.as_ref().map_or(0, Vec::len)) as u64)
            .sum::<u64>();
        Ok(())
    }

    fn put_of(&mut self, record: u64, version: u64) -> Write {
        self.records.key(record, &mut self.key);
        self.records.value_version(record, version, &mut self.value);
        Write {
            key: self.key.clone(),
            value: Some(self.value.clone()),
        }
    }

    fn load(&mut self, t: &mut Tally, report: &mut dyn FnMut(u64, u64)) -> Res<()> {
        let total = self.spec.records;
        let mut batch = Vec::with_capacity(self.spec.batch as usize);
        let mut done = 0;
        while done < total {
            let n = self.spec.batch.min(total - done);
            batch.clear();
            for i in 0..n {
                let record = self.next + i;
                let w = self.put_of(record, 0);
                batch.push(w);
            }
            self.commit(&batch, t)?;
            self.next += n;
            done += n;
            report(done, total);
        }
        t.ops = total;
        Ok(())
    }

    fn deletes(&mut self, ops: u64, t: &mut Tally, report: &mut dyn FnMut(u64, u64)) -> Res<()> {
        let ops = ops.min(self.live());
        let mut batch = Vec::new();
        let mut done = 0;
        while done < ops {
            let n = self.spec.batch.min(ops - done);
            batch.clear();
            for i in 0..n {
                self.records.key(self.first_live + i, &mut self.key);
                batch.push(Write {
                    key: self.key.clone(),
                    value: None,
                });
            }
            self.commit(&batch, t)?;
            for i in 0..n {
                self.versions.remove(&(self.first_live + i));
            }
            self.first_live += n;
            done += n;
            report(done, ops);
        }
        t.ops = ops;
        Ok(())
    }

    /// Read record r and check it against its last committed version (the key and the
    /// expected value are made, and the check done, outside the clock).
    fn read(&mut self, r: u64, t: &mut Tally) -> Res<()> {
        self.records.key(r, &mut self.key);
        let version = self.versions.get(&r).copied().unwrap_or(0);
        let mut expected = std::mem::take(&mut self.expected);
        self.records.value_version(r, version, &mut expected);
        let key = std::mem::take(&mut self.key);
        let mut got = std::mem::take(&mut self.value);
        let start = Instant::now();
        let found = self.store().get(&key, &mut got)?;
        let took = start.elapsed();
        t.busy += took;
        t.reads.record(took.as_nanos() as u64);
        if !found || got != expected {
            t.wrong += 1;
        }
        self.key = key;
        self.value = got;
        self.expected = expected;
        Ok(())
    }

    fn scan(&mut self, r: u64, len: u64, t: &mut Tally) -> Res<()> {
        self.records.key(r, &mut self.key);
        let key = std::mem::take(&mut self.key);
        let start = Instant::now();
        let n = self.store().scan(&key, len as usize)?;
        let took = start.elapsed();
        t.busy += took;
        t.reads.record(took.as_nanos() as u64);
        // The scan starts at a live key, so it sees at least that one.
        if n == 0 {
            t.wrong += 1;
        }
        self.key = key;
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn mixed(
        &mut self,
        ops: u64,
        mix: &Mix,
        dist: Dist,
        scan_len: u64,
        rng: &mut Rng,
        t: &mut Tally,
        report: &mut dyn FnMut(u64, u64),
    ) -> Res<()> {
        let mut chooser = Chooser::new(dist, self.first_live, self.live());
        let mut batch = Vec::new();
        // Versions written this round take effect when the round commits.
        let mut pending: HashMap<u64, u64> = HashMap::new();
        let mut done = 0;
        while done < ops {
            let n = self.spec.batch.min(ops - done);
            batch.clear();
            pending.clear();
            let mut inserted = 0;
            for _ in 0..n {
                let roll = rng.below(100) as u32;
                let mut edge = mix.read;
                if roll < edge {
                    let r = chooser.pick(rng);
                    // The round's reads share one view, opened at its first read.
                    self.begin_reads(t)?;
                    self.read(r, t)?;
                    continue;
                }
                edge += mix.update;
                if roll < edge {
                    let r = chooser.pick(rng);
                    let v = self.next_version(r, &pending);
                    pending.insert(r, v);
                    let w = self.put_of(r, v);
                    batch.push(w);
                    continue;
                }
                edge += mix.insert;
                if roll < edge {
                    let w = self.put_of(self.next + inserted, 0);
                    batch.push(w);
                    inserted += 1;
                    continue;
                }
                edge += mix.scan;
                if roll < edge {
                    let r = chooser.pick(rng);
                    self.begin_reads(t)?;
                    self.scan(r, scan_len, t)?;
                    continue;
                }
                let r = chooser.pick(rng);
                self.begin_reads(t)?;
                self.read(r, t)?;
                let v = self.next_version(r, &pending);
                pending.insert(r, v);
                let w = self.put_of(r, v);
                batch.push(w);
            }
            self.commit(&batch, t)?;
            self.versions.extend(pending.drain());
            self.next += inserted;
            chooser.grow(self.live());
            done += n;
            report(done, ops);
        }
        t.ops = ops;
        Ok(())
    }

    fn next_version(&self, r: u64, pending: &HashMap<u64, u64>) -> u64 {
        pending
            .get(&r)
            .or_else(|| self.versions.get(&r))
            .copied()
            .unwrap_or(0)
            + 1
    }
}

/// Picks live records by a distribution.
struct Chooser {
    dist: Dist,
    first: u64,
    live: u64,
    zipf: Option<Zipf>,
}

impl Chooser {
    fn new(dist: Dist, first: u64, live: u64) -> Chooser {
        let zipf = (dist != Dist::Uniform && live > 0).then(|| Zipf::new(live, Zipf::THETA));
        Chooser {
            dist,
            first,
            live,
            zipf,
        }
    }

    /// Newly inserted records become choosable; the zipfian table keeps its initial size (as
    /// YCSB's does between its occasional resizes).
    fn grow(&mut self, live: u64) {
        self.live = live;
    }

    fn pick(&self, rng: &mut Rng) -> u64 {
        match (&self.zipf, self.dist) {
            (Some(z), Dist::Zipfian) => self.first + z.scattered(rng),
            // The newest record is the most popular.
            (Some(z), Dist::Latest) => self.first + self.live - 1 - z.rank(rng).min(self.live - 1),
            _ => self.first + rng.below(self.live),
        }
    }
}
