//! The amplification arithmetic on runs whose bytes are known exactly.
//!
//! - `Twice` writes every batch to a file two times over: the process counter the harness reads
//!   for WA, and the allocated bytes it reads for SA, must both come out at 2.0.
//! - strata runs on a simulated disk whose every device is wrapped in a `Tap` that counts the
//!   bytes handed to it: strata's own counter must equal the tap's at every reading, and the
//!   row's engine WA must be the tap's bytes over the logical bytes.
//! - With the flush that ends a writing phase, strata's row must include its checkpoint: the
//!   tapped bytes of the checkpoint (at least every record once more, in the tree) are in its
//!   WA, and its SA is the simulated files' bytes after the close over the live bytes.
//! - `Memtable`, a store shaped like an LSM-tree (a journal of every batch, the records written
//!   once more as a table by its flush, the journal dropped after), must come out at WA 2.00
//!   with the flush and SA about 1 at rest, and its write rate must pay for the flush.
//!
//! The process counter is process-wide: these tests live in a file of their own and take
//! `ONE_AT_A_TIME`, so that no other test writes while one reads `/proc/self/io`.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use strata::storage::{Device, Env, EnvLock, FileKind, SimEnv};
use strata::{Db, Options};
use strata_bench::gen::Order;
use strata_bench::rum;
use strata_bench::runner::{self, RunResult};
use strata_bench::store::{self, Config, Result, Store, Subject, Write};
use strata_bench::workload::{Phase, Spec};

const RECORDS: u64 = 20_000;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn load_spec() -> Spec {
    Spec {
        name: "known-bytes".into(),
        records: RECORDS,
        key_size: 16,
        value_size: 100,
        order: Order::Random,
        batch: 500,
        sync: true,
        cache_bytes: 8 << 20,
        seed: 7,
        phases: vec![Phase::Load],
        flush: false,
        read_group: 0,
    }
}

/// The load above, ended by the engine's durable flush.
fn flushed_load_spec() -> Spec {
    Spec {
        flush: true,
        ..load_spec()
    }
}

fn run(engine: &dyn Subject, spec: &Spec, dir: &Path) -> RunResult {
    runner::run(engine, spec, dir, &mut |_, _, _| {}).unwrap()
}

// ---- a store that writes everything twice ---------------------------------------------------

struct Twice;

struct TwiceStore {
    file: File,
    sync: bool,
    data: HashMap<Vec<u8>, Vec<u8>>,
}

impl Subject for Twice {
    fn name(&self) -> &str {
        "twice"
    }
    fn version(&self) -> String {
        "test".into()
    }
    fn settings(&self, _: &Config) -> String {
        "every batch written to the file two times".into()
    }
    fn open(&self, dir: &Path, cfg: &Config) -> Result<Box<dyn Store>> {
        let file = File::options()
            .create(true)
            .append(true)
            .open(dir.join("twice.log"))?;
        Ok(Box::new(TwiceStore {
            file,
            sync: cfg.sync,
            data: HashMap::new(),
        }))
    }
}

impl Store for TwiceStore {
    fn write(&mut self, batch: &[Write]) -> Result<()> {
        let mut bytes = Vec::new();
        for w in batch {
            bytes.extend_from_slice(&w.key);
            bytes.extend_from_slice(w.value.as_deref().unwrap_or_default());
            match &w.value {
                Some(v) => self.data.insert(w.key.clone(), v.clone()),
                None => self.data.remove(&w.key),
            };
        }
        self.file.write_all(&bytes)?;
        self.file.write_all(&bytes)?;
        if self.sync {
            self.file.sync_data()?;
        }
        Ok(())
    }
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        match self.data.get(key) {
            Some(v) => {
                out.clone_from(v);
                Ok(true)
            }
            None => Ok(false),
        }
    }
    fn scan(&mut self, _: &[u8], _: usize) -> Result<usize> {
        Err("no scans".into())
    }
    fn close(self: Box<Self>) -> Result<()> {
        Ok(self.file.sync_all()?)
    }
}

#[test]
fn process_counter_and_allocated_bytes_give_wa_and_sa_of_a_store_that_writes_twice() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let r = run(&Twice, &load_spec(), &dir.path().join("db"));
    let load = r.phase("load").unwrap();
    let logical = RECORDS * 116;
    assert_eq!(load.logical_bytes_written, logical);
    assert_eq!(load.live_bytes, logical);
    if cfg!(target_os = "linux") {
        // wchar counts the two writes of every batch, and nothing else of this process.
        assert!(
            load.process_bytes_written >= 2 * logical
                && load.process_bytes_written <= 2 * logical + (16 << 10),
            "wchar {} against {} written",
            load.process_bytes_written,
            2 * logical
        );
        let row = rum::row(std::slice::from_ref(&r));
        assert!(
            (row.write_amplification - 2.0).abs() < 0.01,
            "WA {}",
            row.write_amplification
        );
        assert_eq!(row.engine_write_amplification, None);
    }
    // The file holds 2 × logical bytes, allocated in whole filesystem blocks.
    assert!(
        load.disk_bytes >= 2 * logical && load.disk_bytes <= 2 * logical + (1 << 20),
        "allocated {} against {} in the file",
        load.disk_bytes,
        2 * logical
    );
    let sa = load.space_amplification();
    assert!((2.0..2.5).contains(&sa), "SA {sa}");
}

// ---- strata on a tapped simulated disk ------------------------------------------------------

/// Counts the bytes written through it, beneath strata's own accounting.
#[derive(Debug)]
struct Tap {
    inner: Arc<dyn Device>,
    written: Arc<AtomicU64>,
}

impl Device for Tap {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> strata::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, data: &[u8], offset: u64) -> strata::Result<()> {
        self.written.fetch_add(data.len() as u64, SeqCst);
        self.inner.write_at(data, offset)
    }
    fn sync(&self) -> strata::Result<()> {
        self.inner.sync()
    }
    fn len(&self) -> strata::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> strata::Result<()> {
        self.inner.set_len(len)
    }
}

#[derive(Debug, Clone)]
struct TapEnv {
    sim: SimEnv,
    written: Arc<AtomicU64>,
}

impl Env for TapEnv {
    fn location(&self) -> String {
        self.sim.location()
    }
    fn lock(&self, name: &str, create: bool) -> strata::Result<EnvLock> {
        self.sim.lock(name, create)
    }
    fn open(
        &self,
        name: &str,
        kind: FileKind,
        create: bool,
    ) -> strata::Result<Option<Arc<dyn Device>>> {
        Ok(self.sim.open(name, kind, create)?.map(|inner| {
            Arc::new(Tap {
                inner,
                written: self.written.clone(),
            }) as Arc<dyn Device>
        }))
    }
}

/// strata's B+-tree or Bε-tree on the tapped disk; every reading of strata's counter is logged
/// with the tap's bytes since the database was opened, and each flush (a checkpoint) logs the
/// tap's bytes before and after it.
struct TappedStrata {
    env: TapEnv,
    opts: fn() -> Options,
    readings: Arc<Mutex<Vec<(u64, u64)>>>,
    flushes: Arc<Mutex<Vec<(u64, u64)>>>,
}

struct TappedStore {
    db: Db,
    tap_at_open: u64,
    env: TapEnv,
    readings: Arc<Mutex<Vec<(u64, u64)>>>,
    flushes: Arc<Mutex<Vec<(u64, u64)>>>,
}

impl Subject for TappedStrata {
    fn name(&self) -> &str {
        "strata-tapped"
    }
    fn version(&self) -> String {
        "test".into()
    }
    fn settings(&self, _: &Config) -> String {
        "on a simulated disk".into()
    }
    /// What the simulated files hold: the data file and the log, whatever their state.
    fn bytes_at_rest(&self, _: &Path) -> u64 {
        let files = self.env.sim.files();
        files
            .names()
            .iter()
            .filter_map(|n| files.get(n))
            .map(|d| d.len().unwrap())
            .sum()
    }
    fn open(&self, _: &Path, cfg: &Config) -> Result<Box<dyn Store>> {
        let tap_at_open = self.env.written.load(SeqCst);
        let db = Db::open_in(
            &self.env,
            (self.opts)().cache_bytes(cfg.cache_bytes as usize),
        )?;
        Ok(Box::new(TappedStore {
            db,
            tap_at_open,
            env: self.env.clone(),
            readings: self.readings.clone(),
            flushes: self.flushes.clone(),
        }))
    }
}

impl Store for TappedStore {
    fn write(&mut self, batch: &[Write]) -> Result<()> {
        Ok(self.db.write(store::strata_batch(batch))?)
    }
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        Ok(match self.db.get(key)? {
            Some(v) => {
                *out = v;
                true
            }
            None => false,
        })
    }
    fn scan(&mut self, _: &[u8], _: usize) -> Result<usize> {
        Err("no scans".into())
    }
    fn flush(&mut self) -> Result<()> {
        let before = self.env.written.load(SeqCst);
        self.db.checkpoint()?;
        let after = self.env.written.load(SeqCst);
        self.flushes.lock().unwrap().push((before, after));
        Ok(())
    }
    fn engine_bytes_written(&self) -> Option<u64> {
        let own = self.db.metrics().total_io().bytes_written;
        let tapped = self.env.written.load(SeqCst) - self.tap_at_open;
        self.readings.lock().unwrap().push((own, tapped));
        Some(own)
    }
    fn close(self: Box<Self>) -> Result<()> {
        Ok(self.db.close()?)
    }
}

#[test]
fn strata_counts_exactly_the_bytes_its_devices_receive() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    type MakeOptions = fn() -> Options;
    let engines: [(&str, MakeOptions); 2] = [
        ("btree", || Options::default().btree(16 << 10)),
        ("betree", || {
            Options::default().betree(256 << 10, 8, 16 << 10)
        }),
    ];
    for (name, opts) in engines {
        let env = TapEnv {
            sim: SimEnv::new(),
            written: Arc::new(AtomicU64::new(0)),
        };
        let readings = Arc::new(Mutex::new(Vec::new()));
        let engine = TappedStrata {
            env: env.clone(),
            opts,
            readings: readings.clone(),
            flushes: Arc::new(Mutex::new(Vec::new())),
        };
        let dir = tempfile::tempdir().unwrap();
        let r = run(&engine, &load_spec(), &dir.path().join("db"));
        let readings = readings.lock().unwrap().clone();
        assert!(readings.len() >= 2, "{name}: {readings:?}");
        for &(own, tapped) in &readings {
            assert_eq!(own, tapped, "{name}: strata's counter against the tap");
        }
        let load = r.phase("load").unwrap();
        let logical = RECORDS * 116;
        assert_eq!(load.logical_bytes_written, logical);
        let (start, end) = (readings[0].1, readings[readings.len() - 1].1);
        assert_eq!(load.engine_bytes_written, Some(end - start), "{name}");
        // Every record reaches the log at least once, so WA is at least 1.
        assert!(end - start > logical, "{name}: {} bytes", end - start);
        let row = rum::row(std::slice::from_ref(&r));
        assert_eq!(
            row.engine_write_amplification,
            Some((end - start) as f64 / logical as f64),
            "{name}"
        );
        // Nothing reached a file: the process counter sees (almost) none of it.
        if cfg!(target_os = "linux") {
            assert!(
                load.process_bytes_written < logical / 10,
                "{name}: wchar {}",
                load.process_bytes_written
            );
        }
    }
}

type MakeOptions = fn() -> Options;

/// Both strata trees with small nodes and a cache that holds all of the load, so no checkpoint
/// runs inside the load and the tree is written only by the flush.
const TREES: [(&str, MakeOptions); 2] = [
    ("btree", || Options::default().btree(16 << 10)),
    ("betree", || {
        Options::default().betree(256 << 10, 8, 16 << 10)
    }),
];

#[test]
fn a_strata_row_counts_its_checkpoint_in_wa_and_its_files_at_rest_in_sa() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let logical = RECORDS * 116;
    for (name, opts) in TREES {
        let env = TapEnv {
            sim: SimEnv::new(),
            written: Arc::new(AtomicU64::new(0)),
        };
        let readings = Arc::new(Mutex::new(Vec::new()));
        let flushes = Arc::new(Mutex::new(Vec::new()));
        let engine = TappedStrata {
            env: env.clone(),
            opts,
            readings: readings.clone(),
            flushes: flushes.clone(),
        };
        let dir = tempfile::tempdir().unwrap();
        let r = run(&engine, &flushed_load_spec(), &dir.path().join("db"));
        let load = r.phase("load").unwrap();
        assert_eq!(load.logical_bytes_written, logical);
        let flushes = flushes.lock().unwrap().clone();
        assert_eq!(
            flushes.len(),
            1,
            "{name}: one flush, at the end of the load"
        );
        let (before, after) = flushes[0];
        let readings = readings.lock().unwrap().clone();
        for &(own, tapped) in &readings {
            assert_eq!(own, tapped, "{name}: strata's counter against the tap");
        }
        // The phase's count runs from before the load to after the flush: the log of every
        // batch, then the checkpoint, which writes every record into the tree.
        let (start, end) = (readings[0].1, readings[readings.len() - 1].1);
        // One open on a fresh disk: bytes since the open are the tap's total.
        assert_eq!(end, after, "{name}: the last reading follows the flush");
        assert_eq!(load.engine_bytes_written, Some(end - start), "{name}");
        let log = before - start;
        let checkpoint = after - before;
        assert!(log >= logical, "{name}: log {log} bytes for {logical}");
        assert!(
            checkpoint >= logical,
            "{name}: the checkpoint wrote {checkpoint} bytes for {logical} in the tree"
        );
        let row = rum::row(std::slice::from_ref(&r));
        let wa = row.engine_write_amplification.unwrap();
        assert_eq!(wa, (log + checkpoint) as f64 / logical as f64, "{name}");
        assert!(wa >= 2.0, "{name}: engine WA {wa} leaves the tree out");
        assert!(load.flush_secs > 0.0 && load.ops_per_sec < load.acked_ops_per_sec);
        // SA: what the simulated files hold after the close, over the live bytes.
        let at_rest = engine.bytes_at_rest(dir.path());
        assert_eq!(r.disk_bytes_at_rest, at_rest, "{name}");
        assert_eq!(r.live_bytes_at_rest, logical, "{name}");
        assert_eq!(
            row.space_amplification,
            at_rest as f64 / logical as f64,
            "{name}"
        );
        assert!(
            (1.0..3.0).contains(&row.space_amplification),
            "{name}: SA {} at rest",
            row.space_amplification
        );
    }
}

// ---- a store shaped like an LSM-tree --------------------------------------------------------

/// A journal of every batch, and a flush that writes the buffered records once as a table and
/// drops the journal: the bytes of each are known exactly.
struct Memtable;

struct MemtableStore {
    dir: std::path::PathBuf,
    journal: File,
    tables: u64,
    buffered: Vec<(Vec<u8>, Vec<u8>)>,
    data: HashMap<Vec<u8>, Vec<u8>>,
}

impl Subject for Memtable {
    fn name(&self) -> &str {
        "memtable"
    }
    fn version(&self) -> String {
        "test".into()
    }
    fn settings(&self, _: &Config) -> String {
        "a journal, and a table per flush".into()
    }
    fn open(&self, dir: &Path, _: &Config) -> Result<Box<dyn Store>> {
        let journal = File::options()
            .create(true)
            .append(true)
            .open(dir.join("journal"))?;
        Ok(Box::new(MemtableStore {
            dir: dir.to_path_buf(),
            journal,
            tables: 0,
            buffered: Vec::new(),
            data: HashMap::new(),
        }))
    }
}

impl Store for MemtableStore {
    fn write(&mut self, batch: &[Write]) -> Result<()> {
        let mut bytes = Vec::new();
        for w in batch {
            let v = w.value.clone().ok_or("no deletes")?;
            bytes.extend_from_slice(&w.key);
            bytes.extend_from_slice(&v);
            self.buffered.push((w.key.clone(), v.clone()));
            self.data.insert(w.key.clone(), v);
        }
        self.journal.write_all(&bytes)?;
        self.journal.sync_data()?;
        Ok(())
    }
    fn flush(&mut self) -> Result<()> {
        let mut table = Vec::new();
        for (k, v) in self.buffered.drain(..) {
            table.extend_from_slice(&k);
            table.extend_from_slice(&v);
        }
        let mut f = File::create(self.dir.join(format!("table{}", self.tables)))?;
        f.write_all(&table)?;
        f.sync_all()?;
        self.tables += 1;
        // The journal's records are in the table now.
        self.journal.set_len(0)?;
        self.journal.sync_all()?;
        Ok(())
    }
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        match self.data.get(key) {
            Some(v) => {
                out.clone_from(v);
                Ok(true)
            }
            None => Ok(false),
        }
    }
    fn scan(&mut self, _: &[u8], _: usize) -> Result<usize> {
        Err("no scans".into())
    }
    fn close(self: Box<Self>) -> Result<()> {
        Ok(self.journal.sync_all()?)
    }
}

#[test]
fn a_peer_row_counts_its_flush_in_wa_time_and_sa() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let r = run(&Memtable, &flushed_load_spec(), &dir.path().join("db"));
    let load = r.phase("load").unwrap();
    let logical = RECORDS * 116;
    assert!(load.flush_secs > 0.0);
    assert!(
        load.ops_per_sec < load.acked_ops_per_sec,
        "the write rate must pay for the flush: {} against {} acknowledged",
        load.ops_per_sec,
        load.acked_ops_per_sec
    );
    let row = rum::row(std::slice::from_ref(&r));
    assert_eq!(row.write_ops, load.ops_per_sec);
    assert_eq!(row.acked_write_ops, load.acked_ops_per_sec);
    assert_eq!(row.load_flush_secs, load.flush_secs);
    if cfg!(target_os = "linux") {
        // The flush wrote the table: every record once more.
        assert!(
            load.flush_bytes_written >= logical && load.flush_bytes_written <= logical + (4 << 10),
            "flush wrote {} for {logical}",
            load.flush_bytes_written
        );
        assert!(
            (row.write_amplification - 2.0).abs() < 0.01,
            "WA {} (journal and table)",
            row.write_amplification
        );
    }
    // At rest only the table holds the records: SA about 1, in whole filesystem blocks.
    assert_eq!(r.live_bytes_at_rest, logical);
    assert!(
        (1.0..1.1).contains(&row.space_amplification),
        "SA {} at rest",
        row.space_amplification
    );
}
