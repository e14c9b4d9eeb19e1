//! Options for opening a database. The engine and its geometry are fixed when the database is
//! created; opening an existing database uses what its superblock records.

use std::sync::Arc;

use crate::engines::betree::Geometry;
use crate::engines::btree::BTree;
use crate::error::{Error, Result};
use crate::kv::MergeOperator;
use crate::model::Affine;
use crate::profile::DeviceProfile;
use crate::tune::{self, Workload};

#[derive(Clone, Debug, Default, PartialEq)]
pub enum EngineOptions {
    /// The Bε-tree, its geometry chosen by the tuner for the options' cache and expected keys,
    /// priced with the saved device profile (`strata profile`), or with built-in SSD figures
    /// when none is saved. What was used is recorded and shown in `Metrics`.
    #[default]
    Auto,
    BTree {
        node_size: usize,
    },
    /// Node size B, target fanout F (children per internal node) and leaf basement size.
    BeTree {
        node_size: usize,
        fanout: usize,
        basement: usize,
    },
    /// The LSM-tree: its merge policy, size ratio, memtable, table and block sizes and filter
    /// bits (`LsmConfig::default()` is leveled, T = 10). The memtable is part of the cache
    /// budget.
    Lsm(crate::engines::lsm::Config),
}

/// A Bε-tree geometry with large basements (1 MiB nodes, fanout 16, 64 KiB basements), the
/// fixed default before a tree created without a saved profile was tuned from built-in figures.
pub const LARGE_BASEMENTS_BETREE: Geometry = crate::engines::betree::LARGE_BASEMENTS;

/// When a write is acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// After its log record is on stable storage (fdatasync); concurrent writers share one sync.
    Sync,
    /// After its log record is handed to the operating system: survives a process crash, not a
    /// power cut. `Db::sync` or a checkpoint makes it durable.
    None,
}

#[derive(Clone, Debug)]
pub struct Options {
    /// Engine and geometry for a new database.
    pub engine: EngineOptions,
    /// Byte budget of the buffer pool.
    pub cache_bytes: usize,
    pub durability: Durability,
    /// Open the data file with O_DIRECT (Linux), bypassing the page cache.
    pub direct_io: bool,
    /// Checkpoint when the write-ahead log grows past this many bytes and past the bytes of
    /// the dirty nodes a checkpoint would write (at most the cache budget). So checkpoints
    /// write no more than the log did, and recovery replays at most the larger of this and the
    /// cache budget.
    pub checkpoint_wal_bytes: u64,
    pub create_if_missing: bool,
    /// Cost model used to price IOs in the metrics.
    pub cost_model: Affine,
    /// What upserts do; required to write or replay them.
    pub merge_operator: Option<Arc<dyn MergeOperator>>,
    /// Records the database is expected to hold, for `EngineOptions::Auto`'s tuning.
    pub expected_keys: u64,
    /// Run the LSM-tree's merges and the Bε-tree's leaf drains on a thread of their own while
    /// writes go on (the default), or inline on the writer: one core, and the same merges and
    /// drains at the same points on every run (what tests that compare with the model want).
    pub background_merges: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            engine: EngineOptions::default(),
            cache_bytes: 64 << 20,
            durability: Durability::Sync,
            direct_io: false,
            checkpoint_wal_bytes: 64 << 20,
            create_if_missing: true,
            cost_model: Affine::default(),
            merge_operator: None,
            expected_keys: 10_000_000,
            background_merges: true,
        }
    }
}

impl Options {
    pub fn btree(mut self, node_size: usize) -> Self {
        self.engine = EngineOptions::BTree { node_size };
        self
    }
    pub fn betree(mut self, node_size: usize, fanout: usize, basement: usize) -> Self {
        self.engine = EngineOptions::BeTree {
            node_size,
            fanout,
            basement,
        };
        self
    }
    pub fn lsm(mut self, cfg: crate::engines::lsm::Config) -> Self {
        self.engine = EngineOptions::Lsm(cfg);
        self
    }
    pub fn cache_bytes(mut self, bytes: usize) -> Self {
        self.cache_bytes = bytes;
        self
    }
    pub fn durability(mut self, d: Durability) -> Self {
        self.durability = d;
        self
    }
    pub fn direct_io(mut self, on: bool) -> Self {
        self.direct_io = on;
        self
    }
    pub fn background_merges(mut self, on: bool) -> Self {
        self.background_merges = on;
        self
    }
    pub fn checkpoint_wal_bytes(mut self, bytes: u64) -> Self {
        self.checkpoint_wal_bytes = bytes;
        self
    }
    /// The engine and cache the tuner recommends for this device and workload: the Bε-tree
    /// geometry of `strata tune`, and the workload's cache budget.
    pub fn tuned(profile: &DeviceProfile, workload: &Workload) -> Options {
        let geo = tune::geometry(profile, workload);
        Options::default()
            .betree(geo.node_size, geo.fanout, geo.basement)
            .cache_bytes(workload.cache_bytes as usize)
    }
    /// The engine and geometry the advisor picks for this device and workload
    /// (`tune::advise`), with the workload's cache budget.
    pub fn advised(profile: &DeviceProfile, workload: &tune::AdviseWorkload) -> Options {
        let advice = tune::advise(profile, workload);
        Options::default()
            .shape(advice.pick().shape)
            .cache_bytes(workload.cache_bytes as usize)
    }
    /// An engine and geometry as the tuner describes it.
    pub fn shape(self, shape: tune::EngineShape) -> Self {
        match shape {
            tune::EngineShape::BTree { node_size } => self.btree(node_size),
            tune::EngineShape::BeTree(g) => self.betree(g.node_size, g.fanout, g.basement),
            tune::EngineShape::Lsm(cfg) => self.lsm(cfg),
        }
    }
    pub fn expected_keys(mut self, keys: u64) -> Self {
        self.expected_keys = keys;
        self
    }
    pub fn merge_operator(mut self, op: impl MergeOperator + 'static) -> Self {
        self.merge_operator = Some(Arc::new(op));
        self
    }
    pub fn create_if_missing(mut self, on: bool) -> Self {
        self.create_if_missing = on;
        self
    }

    pub fn validate(&self) -> Result<()> {
        match self.engine {
            EngineOptions::Auto => {}
            EngineOptions::BTree { node_size } => BTree::check_node_size(node_size)?,
            EngineOptions::BeTree {
                node_size,
                fanout,
                basement,
            } => Geometry {
                node_size,
                fanout,
                basement,
            }
            .check()?,
            EngineOptions::Lsm(cfg) => cfg.check()?,
        }
        if self.cache_bytes < 64 << 10 {
            return Err(Error::InvalidOptions(format!(
                "cache budget of {} bytes is below the minimum of 64 KiB",
                self.cache_bytes
            )));
        }
        if self.checkpoint_wal_bytes < 4096 {
            return Err(Error::InvalidOptions(
                "checkpoint_wal_bytes must be at least 4 KiB".into(),
            ));
        }
        Ok(())
    }
}
