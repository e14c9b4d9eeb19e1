//! The amplification arithmetic on runs whose bytes are known exactly.
//!
//! - `Twice` writes every batch to a file two times over: the process counter the harness reads
//!   for WA, and the allocated bytes it reads for SA, must both come out at 2.0.
//! - strata runs on a simulated disk whose every device is wrapped in a `Tap` that counts the
//!   bytes handed to it: strata's own counter must equal the tap's at every reading, and the
//!   row's engine WA must be the tap's bytes over the logical bytes.
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
use strata_bench::store::{self, Config, Engine, Result, Store, Write};
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
    }
}

fn run(engine: &dyn Engine, spec: &Spec, dir: &Path) -> RunResult {
    runner::run(engine, spec, dir, &mut |_, _, _| {}).unwrap()
}

// ---- a store that writes everything twice ---------------------------------------------------

struct Twice;

struct TwiceStore {
    file: File,
    sync: bool,
    data: HashMap<Vec<u8>, Vec<u8>>,
}

impl Engine for Twice {
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
/// with the tap's bytes since the database was opened.
struct TappedStrata {
    env: TapEnv,
    opts: fn() -> Options,
    readings: Arc<Mutex<Vec<(u64, u64)>>>,
}

struct TappedStore {
    db: Db,
    tap_at_open: u64,
    env: TapEnv,
    readings: Arc<Mutex<Vec<(u64, u64)>>>,
}

impl Engine for TappedStrata {
    fn name(&self) -> &str {
        "strata-tapped"
    }
    fn version(&self) -> String {
        "test".into()
    }
    fn settings(&self, _: &Config) -> String {
        "on a simulated disk".into()
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
