//! The adapter every engine in a comparison implements: strata's own trees here, the peers in
//! `strata-compare`. The harness (`runner`) drives an adapter through a `workload::Spec`; it never
//! sees the engine behind it, so every engine is measured by the same code.
//!
//! An adapter commits each `write` call as one atomic batch, durably when the config asks for
//! synced commits, using the engine's own documented setting for that (its `settings` says
//! which). Reads see every committed write.
//!
//! Two calls exist so that every engine is held to the same rules:
//! - `flush`: make durable in the engine's own files everything it holds only in memory and
//!   its log, with the engine's own call for that (strata: a checkpoint; an LSM-tree: its
//!   memtables written as tables). A spec with `flush` times it at the end of each writing
//!   phase, so no engine defers its real writes past the measured window.
//! - `begin_reads` / `end_reads`: a group of point reads that may share one read view. Engines
//!   whose point read must go through a read transaction (LMDB, redb, bbolt) open one per
//!   group; the others read directly, as they would anyway.

use std::path::Path;

use serde::{Deserialize, Serialize};

use strata::{Db, Durability, LsmConfig, Options, WriteBatch};

pub type AnyError = Box<dyn std::error::Error + Send + Sync>;
pub type Result<T> = std::result::Result<T, AnyError>;

/// How the harness configures an engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// The cache budget, in bytes (each engine's own notion: block cache, page cache limit, map
    /// size does not count).
    pub cache_bytes: u64,
    /// Commits are durable before `write` returns.
    pub sync: bool,
    /// How many records the workload will hold, for engines that size themselves up front.
    pub expected_records: u64,
}

/// One write of a batch: a put, or a delete when `value` is `None`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

/// IO an engine counts on its data file: reads and writes, and their bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EngineIo {
    pub reads: u64,
    pub read_bytes: u64,
    pub writes: u64,
    pub write_bytes: u64,
}

impl EngineIo {
    /// The IO between `before` and `self`.
    pub fn since(&self, before: &EngineIo) -> EngineIo {
        EngineIo {
            reads: self.reads.saturating_sub(before.reads),
            read_bytes: self.read_bytes.saturating_sub(before.read_bytes),
            writes: self.writes.saturating_sub(before.writes),
            write_bytes: self.write_bytes.saturating_sub(before.write_bytes),
        }
    }
}

/// An open database.
pub trait Store {
    /// Commit the writes as one atomic batch.
    fn write(&mut self, batch: &[Write]) -> Result<()>;
    /// Replace `out` with the value of `key`; false when it is absent.
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool>;
    /// Visit up to `limit` records from the first key ≥ `start`, in order; how many there were.
    fn scan(&mut self, start: &[u8], limit: usize) -> Result<usize>;
    /// Make everything committed durable in the engine's own files (not only its log), with
    /// the engine's own call for it, and return once it is. Engines that write their pages at
    /// commit have nothing to do.
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }
    /// Start a group of point reads (and scans) that may share one read view; the harness ends
    /// it with `end_reads` before its next write. Engines whose reads need no transaction
    /// ignore both.
    fn begin_reads(&mut self) -> Result<()> {
        Ok(())
    }
    fn end_reads(&mut self) -> Result<()> {
        Ok(())
    }
    /// Bytes the engine itself counts as written to its files, where it keeps such a counter
    /// (strata does); the harness cross-checks it against the process's IO counter.
    fn engine_bytes_written(&self) -> Option<u64> {
        None
    }
    /// The engine's own count of its data file's IO so far (not its log's), where it keeps one:
    /// what a cost model of the engine predicts.
    fn engine_io(&self) -> Option<EngineIo> {
        None
    }
    /// Writes that waited for the engine's background work so far, and their seconds in all,
    /// where the engine counts them (strata's LSM-tree does).
    fn write_stalls(&self) -> Option<(u64, f64)> {
        None
    }
    /// Close cleanly (what a reopen or the end of a run does).
    fn close(self: Box<Self>) -> Result<()>;
}

/// An engine under test: what the harness opens (a strata engine or a peer).
pub trait Subject: Send + Sync {
    /// Its name in tables and on the command line.
    fn name(&self) -> &str;
    /// The library and version the adapter is built against.
    fn version(&self) -> String;
    /// The settings it is opened with, for the report.
    fn settings(&self, cfg: &Config) -> String;
    /// The engine and geometry it runs with under `cfg`, where strata's cost models price it
    /// (`profile`: the saved device profile its process reads, if any).
    fn shape(
        &self,
        _cfg: &Config,
        _profile: Option<&strata::DeviceProfile>,
    ) -> Option<strata::tune::EngineShape> {
        None
    }
    fn open(&self, dir: &Path, cfg: &Config) -> Result<Box<dyn Store>>;
    /// Bytes the closed database occupies: by default what is allocated to the files under
    /// `dir` (an engine on a simulated disk, in tests, counts its own).
    fn bytes_at_rest(&self, dir: &Path) -> u64 {
        crate::measure::allocated_bytes(dir)
    }
}

/// Which of strata's engines, and its shape.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// The Bε-tree, its geometry from the tuner (`EngineOptions::Auto`).
    BeTree,
    /// The B+-tree with nodes of this size.
    BTree(usize),
    /// The B+-tree with the node size the tuner picks for the cache and the records
    /// (`tune::auto_btree_node`).
    BTreeTuned,
    /// The LSM-tree: this policy and T, the rest `LsmConfig::for_cache`.
    Lsm(strata::LsmPolicy, u32),
    /// Exactly this engine and geometry (the advisor's).
    Shape(strata::tune::EngineShape),
}

/// strata, with a chosen engine and geometry.
pub struct Strata {
    name: &'static str,
    kind: Kind,
    /// O_DIRECT on the data file: reads the cache misses go to the device, not the OS page
    /// cache (for checking a model priced in device IOs).
    direct_io: bool,
}

impl Strata {
    fn new(name: &'static str, kind: Kind) -> Strata {
        Strata {
            name,
            kind,
            direct_io: false,
        }
    }

    /// The Bε-tree with its default geometry (tuned from the saved profile when there is one).
    pub fn betree() -> Strata {
        Strata::new("strata-betree", Kind::BeTree)
    }

    /// The B+-tree with the tuner's node size for the cache and the records, as the Bε-tree
    /// gets the tuner's geometry: a fixed 64 KiB node wrote 263× the data once the tree
    /// outgrew the cache, where the tuned 4 KiB wrote 25× (docs/btree.md).
    pub fn btree() -> Strata {
        Strata::new("strata-btree", Kind::BTreeTuned)
    }

    /// The B+-tree with nodes of `node` bytes, named `name`.
    pub fn btree_sized(name: &'static str, node: usize) -> Strata {
        Strata::new(name, Kind::BTree(node))
    }

    fn btree_node(cfg: &Config, profile: Option<&strata::DeviceProfile>) -> usize {
        strata::tune::auto_btree_node_with(
            profile,
            cfg.expected_records,
            cfg.cache_bytes,
            Options::default().checkpoint_wal_bytes,
        )
        .0
    }

    /// The LSM-tree, leveled with T = 10 (RocksDB's default shape), its memtable a quarter of
    /// the cache budget.
    pub fn lsm() -> Strata {
        Strata::new("strata-lsm", Kind::Lsm(strata::LsmPolicy::Leveled, 10))
    }

    /// An engine of exactly this shape, named `name`.
    pub fn shaped(name: &'static str, shape: strata::tune::EngineShape) -> Strata {
        Strata::new(name, Kind::Shape(shape))
    }

    /// The same engine with O_DIRECT on or off.
    pub fn direct_io(self, on: bool) -> Strata {
        Strata {
            direct_io: on,
            ..self
        }
    }

    fn lsm_config(cfg: &Config, policy: strata::LsmPolicy, t: u32) -> LsmConfig {
        LsmConfig {
            policy,
            size_ratio: t,
            l0_runs: LsmConfig::with(policy, t).l0_runs,
            ..LsmConfig::for_cache(cfg.cache_bytes as usize)
        }
    }

    fn options(&self, cfg: &Config) -> Options {
        let durability = if cfg.sync {
            Durability::Sync
        } else {
            Durability::None
        };
        let opts = Options::default()
            .cache_bytes(cfg.cache_bytes as usize)
            .durability(durability)
            .expected_keys(cfg.expected_records)
            .direct_io(self.direct_io);
        match self.kind {
            Kind::BeTree => opts,
            Kind::BTree(node) => opts.btree(node),
            Kind::BTreeTuned => {
                let saved = strata::DeviceProfile::load_saved().ok().flatten();
                opts.btree(Self::btree_node(cfg, saved.as_ref().map(|(_, p)| p)))
            }
            Kind::Lsm(policy, t) => opts.lsm(Self::lsm_config(cfg, policy, t)),
            Kind::Shape(shape) => opts.shape(shape),
        }
    }
}

/// strata's engines in other shapes, run when named (`--engines`) but not by default: the
/// B+-tree with the fixed 64 KiB nodes it had before it was tuned, and the LSM-tree tiered and
/// with lazy leveling, T = 10.
pub fn strata_variants() -> Vec<Box<dyn Subject>> {
    vec![
        Box::new(Strata::btree_sized("strata-btree-64k", 64 << 10)),
        Box::new(Strata::new(
            "strata-lsm-tiered",
            Kind::Lsm(strata::LsmPolicy::Tiered, 10),
        )),
        Box::new(Strata::new(
            "strata-lsm-lazy",
            Kind::Lsm(strata::LsmPolicy::LazyLeveled, 10),
        )),
    ]
}

/// strata's own engines.
pub fn strata_engines() -> Vec<Box<dyn Subject>> {
    vec![
        Box::new(Strata::betree()),
        Box::new(Strata::btree()),
        Box::new(Strata::lsm()),
    ]
}

impl Subject for Strata {
    fn name(&self) -> &str {
        self.name
    }

    fn version(&self) -> String {
        format!("strata {}", env!("CARGO_PKG_VERSION"))
    }

    fn settings(&self, cfg: &Config) -> String {
        let o = self.options(cfg);
        let auto = || {
            strata::tune::auto_geometry(
                o.expected_keys,
                o.cache_bytes as u64,
                o.checkpoint_wal_bytes,
            )
        };
        let geometry = match self.kind {
            Kind::BeTree => match auto() {
                Ok((g, origin)) => format!(
                    "Bε-tree, {} KiB nodes, fanout {}, {} KiB basements ({}); drains and \
                     merges of the runs of leaves out of the cache on a thread of their own; \
                     the data file written out every 256 KiB (sync_file_range)",
                    g.node_size >> 10,
                    g.fanout,
                    g.basement >> 10,
                    origin.describe()
                ),
                Err(e) => format!("Bε-tree, geometry unknown: {e}"),
            },
            Kind::BTree(node) => format!("B+-tree, {} KiB nodes", node >> 10),
            Kind::BTreeTuned => match strata::tune::auto_btree_node(
                o.expected_keys,
                o.cache_bytes as u64,
                o.checkpoint_wal_bytes,
            ) {
                Ok((node, origin)) => format!(
                    "B+-tree, {} KiB nodes ({})",
                    node >> 10,
                    origin.describe()
                ),
                Err(e) => format!("B+-tree, node size unknown: {e}"),
            },
            Kind::Lsm(policy, t) => format!(
                "LSM-tree, {}; merges on a thread of their own, one at a time (writes stall at 2·trigger + 4 level-0 runs)",
                Self::lsm_config(cfg, policy, t).describe()
            ),
            Kind::Shape(shape) => format!("{shape:?}"),
        };
        let durability = if cfg.sync {
            "each batch a WAL record, fsync'd before it is acknowledged (group commit)"
        } else {
            "WAL record handed to the OS, no fsync"
        };
        let defaults = Options::default();
        format!(
            "{geometry}; buffer pool {} MiB (default {} MiB; it holds the dirty nodes, or the \
             LSM-tree's memtable, too, so it is all of strata's cache and write buffer); \
             {durability}; flush: Db::checkpoint (every dirty node, or the memtable, written, \
             the data file and log synced, the log emptied); \
             checkpoints otherwise once the log passes {} MiB and the dirty nodes' bytes \
             (default); expected keys {} for the tuner (default {}); data file and log through the OS page cache (O_DIRECT off, the \
             default); no compression (strata has none); point reads one by one (no \
             snapshots)",
            cfg.cache_bytes >> 20,
            defaults.cache_bytes >> 20,
            defaults.checkpoint_wal_bytes >> 20,
            cfg.expected_records,
            defaults.expected_keys,
        )
    }

    fn shape(
        &self,
        cfg: &Config,
        profile: Option<&strata::DeviceProfile>,
    ) -> Option<strata::tune::EngineShape> {
        use strata::tune::EngineShape;
        Some(match self.kind {
            Kind::BeTree => EngineShape::BeTree(
                strata::tune::auto_geometry_with(
                    profile,
                    cfg.expected_records,
                    cfg.cache_bytes,
                    Options::default().checkpoint_wal_bytes,
                )
                .0,
            ),
            Kind::BTree(node) => EngineShape::BTree { node_size: node },
            Kind::BTreeTuned => EngineShape::BTree {
                node_size: Self::btree_node(cfg, profile),
            },
            Kind::Lsm(policy, t) => EngineShape::Lsm(Self::lsm_config(cfg, policy, t)),
            Kind::Shape(shape) => shape,
        })
    }

    fn open(&self, dir: &Path, cfg: &Config) -> Result<Box<dyn Store>> {
        Ok(Box::new(StrataStore(Db::open(dir, self.options(cfg))?)))
    }
}

/// The harness's writes as one strata batch.
pub fn strata_batch(batch: &[Write]) -> WriteBatch {
    let mut b = WriteBatch::new();
    for w in batch {
        match &w.value {
            Some(v) => b.put(&w.key, v),
            None => b.delete(&w.key),
        };
    }
    b
}

struct StrataStore(Db);

impl Store for StrataStore {
    fn write(&mut self, batch: &[Write]) -> Result<()> {
        Ok(self.0.write(strata_batch(batch))?)
    }

    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        match self.0.get(key)? {
            Some(v) => {
                *out = v;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn scan(&mut self, start: &[u8], limit: usize) -> Result<usize> {
        let mut n = 0;
        for item in self.0.range(start..)?.take(limit) {
            item?;
            n += 1;
        }
        Ok(n)
    }

    fn flush(&mut self) -> Result<()> {
        Ok(self.0.checkpoint()?)
    }

    fn engine_bytes_written(&self) -> Option<u64> {
        Some(self.0.metrics().total_io().bytes_written)
    }

    fn engine_io(&self) -> Option<EngineIo> {
        let d = self.0.metrics().data_io;
        Some(EngineIo {
            reads: d.reads,
            read_bytes: d.bytes_read,
            writes: d.writes,
            write_bytes: d.bytes_written,
        })
    }

    fn write_stalls(&self) -> Option<(u64, f64)> {
        let e = self.0.metrics().engine;
        e.detail
            .iter()
            .any(|(n, _)| *n == "stalls")
            .then(|| (e.detail("stalls"), e.detail("stall_ms") as f64 / 1e3))
    }

    fn close(self: Box<Self>) -> Result<()> {
        Ok(self.0.close()?)
    }
}
