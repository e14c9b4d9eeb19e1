//! The LSM-tree engine: writes go to a memtable; a full memtable is written out as a sorted run
//! of level 0; runs merge down the levels by a policy (leveled, tiered or lazy leveling) chosen
//! with the cost model (docs/lsm.md). All on the shared substrate: tables are blocks of the
//! pager, read through the buffer pool, and the levels are a manifest block committed with each
//! checkpoint.
//!
//! Invariants (checked by `check`):
//! - within a run, tables are in key order and their key ranges disjoint; within a table,
//!   messages are in (key, seq) order;
//! - for one key, every message in a level is newer than every message in a deeper level, and
//!   within a level a newer run's messages are newer than an older run's; the memtable is the
//!   newest of all. So a point query stops at the first run that settles its key;
//! - a point message is newer than the range deletes covering it in its own table;
//! - every table is referenced by exactly one run of the manifest; tables freed by a merge are
//!   released by the pager once a checkpoint no longer needs them (copy-on-write).
//!
//! Durability: the `Db`'s log holds what the memtable holds. A checkpoint writes the memtable
//! out as a level-0 run and commits the manifest; the log is released up to it by the `Db`'s
//! checkpoint protocol. Tables written between checkpoints (a full memtable, a merge's output)
//! are referenced only by the next manifest, so a crash before it leaves them unreferenced and
//! the log replays their writes.
//!
//! Merges run on a thread of their own, one at a time, started and installed by the writer
//! between operations (`settle`); a write waits for them only when level 0 is at its stall
//! bound (counted and timed in `stats`), and a checkpoint asked for waits for every merge due,
//! then merges newer versions down onto the older copies they shadow when that pays
//! (`compact.rs`).
//!
//! Files, one concern each: `config` (the shape), `format` (metadata and manifest), `memtable`,
//! `table` (a table on disk and its builder), `policy` (which merge next, pure), `simulate` (the policy played out
//! on synthetic tables, for the model), `merge` (a
//! merge's work, on its thread), `compact` (flushes, and starting and installing merges), `read` (point and range queries, the cursors merges share), `check`
//! and `salvage`.

pub(crate) mod block;
mod check;
mod compact;
mod config;
mod dump;
mod format;
mod memtable;
mod merge;
pub(crate) mod policy;
mod read;
mod salvage;
pub(crate) mod simulate;
pub(crate) mod table;

pub use config::{Config, Policy};

use std::ops::Bound;
use std::sync::Arc;

use crate::engine::salvage::{Damage, Sink};
use crate::engine::{CheckReport, Engine, EngineStats, SharedReads};
use crate::error::{Error, Result};
use crate::kv::msg::{Body, Msg};
use crate::kv::{merge_operator, MergeOperator, Op, Val};
use crate::storage::{Checkpoint, Commit, Device, NodeId, NodeStore, Pager};
use format::Counters;
use memtable::Memtable;
use policy::{Level, TableInfo};
use table::Table;

/// The first byte of the engine metadata in the superblock.
pub const ENGINE_TAG: u8 = 3;

/// No LSM-tree has more levels: with T ≥ 2 and a 64 KiB memtable, 40 levels hold 2^56 bytes.
pub const MAX_LEVELS: usize = 40;

/// The least of the memory budget left to the buffer pool (table heads and blocks) after the
/// memtable's share.
const MIN_POOL: usize = 256 << 10;

pub struct Lsm {
    store: NodeStore<Table>,
    /// The memory budget the memtable and the pool share.
    cache_bytes: usize,
    merge: Option<Arc<dyn MergeOperator>>,
    cfg: Config,
    mem: Memtable,
    levels: Vec<Level>,
    /// Per leveled level, the largest key of the table last merged down from it.
    cursors: Vec<Vec<u8>>,
    manifest: NodeId,
    next_seq: u64,
    counters: Counters,
    /// Merges run on a thread of their own (else inline on the writer).
    background: bool,
    /// The merge running on its own thread.
    inflight: Option<compact::InFlight>,
    /// Writes that waited for merges, for how long in all, and the most bytes one merge read
    /// and wrote.
    stalls: u64,
    stall_nanos: u64,
    largest_merge: u64,
    /// Checkpoints asked for that merged levels down to drop the older copies newer versions
    /// shadowed (`settle_at_rest`), since open.
    rest_merges: u64,
    /// Why the manifest did not read, when opened for salvage (`open_tolerant`).
    manifest_damage: Option<Error>,
}

impl Lsm {
    /// The pool's share of `cache_bytes` when the memtable holds `mem` bytes: what it leaves.
    fn pool_budget(cache_bytes: usize, mem: usize) -> usize {
        cache_bytes.saturating_sub(mem).max(MIN_POOL)
    }

    pub fn create(
        mut pager: Pager,
        cfg: Config,
        cache_bytes: usize,
        merge: Option<Arc<dyn MergeOperator>>,
    ) -> Result<Lsm> {
        cfg.check()?;
        let manifest = pager.new_id();
        let levels = Vec::new();
        let counters = Counters::default();
        let mut t = Lsm::open_parts(
            pager,
            cfg,
            manifest,
            1,
            levels,
            counters,
            cache_bytes,
            merge,
        );
        t.checkpoint(0)?;
        Ok(t)
    }

    #[allow(clippy::too_many_arguments)]
    fn open_parts(
        pager: Pager,
        cfg: Config,
        manifest: NodeId,
        next_seq: u64,
        levels: Vec<Level>,
        counters: Counters,
        cache_bytes: usize,
        merge: Option<Arc<dyn MergeOperator>>,
    ) -> Lsm {
        Lsm {
            // An empty memtable leaves the pool all of the budget; `settle` shrinks it as the
            // memtable fills.
            store: NodeStore::new(pager, Self::pool_budget(cache_bytes, 0)),
            cache_bytes,
            merge,
            cfg,
            mem: Memtable::default(),
            levels,
            cursors: Vec::new(),
            manifest,
            next_seq,
            counters,
            background: true,
            inflight: None,
            stalls: 0,
            stall_nanos: 0,
            largest_merge: 0,
            rest_merges: 0,
            manifest_damage: None,
        }
    }

    pub fn open(
        pager: Pager,
        cp: &Checkpoint,
        cache_bytes: usize,
        merge: Option<Arc<dyn MergeOperator>>,
    ) -> Result<Lsm> {
        let (cfg, manifest, next_seq) = format::decode_meta(&cp.engine_meta, pager.file_name())?;
        let (levels, counters) = Lsm::read_manifest(&pager, manifest)?;
        let t = Lsm::open_parts(
            pager,
            cfg,
            manifest,
            next_seq,
            levels,
            counters,
            cache_bytes,
            merge,
        );
        Ok(t)
    }

    /// The levels and counters of the manifest block `id`; damage is reported at its offset.
    fn read_manifest(pager: &Pager, id: NodeId) -> Result<(Vec<Level>, Counters)> {
        pager.read_decoded(
            id,
            table::KIND_MANIFEST,
            "LSM manifest",
            format::decode_manifest,
        )
    }

    /// Run merges on a thread of their own (the default) or inline (`Options::background_merges`).
    pub fn background(mut self, on: bool) -> Lsm {
        self.background = on;
        self
    }

    pub fn config(&self) -> Config {
        self.cfg
    }

    fn insert(&mut self, key: &[u8], body: Body) -> Result<()> {
        self.insert_owned(key.to_vec(), body)
    }

    fn insert_owned(&mut self, key: Vec<u8>, body: Body) -> Result<()> {
        let m = Msg {
            key,
            seq: self.next_seq,
            body,
        };
        self.next_seq += 1;
        self.mem.insert(m, self.merge.as_deref());
        Ok(())
    }

    /// Messages not yet settled at the bottom: the memtable's, those of every run but the
    /// deepest, and the deepest run's range deletes and messages other than puts.
    fn buffered(&self) -> u64 {
        let deepest = self.levels.iter().rev().find_map(|l| l.runs.last());
        let mut n = self.mem.messages() as u64;
        for t in self.tables() {
            let bottom = deepest.is_some_and(|run| run.iter().any(|d| d.id == t.id));
            n += t.ranges as u64 + if bottom { t.points - t.puts } else { t.points };
        }
        n
    }

    fn tables(&self) -> impl Iterator<Item = &TableInfo> {
        self.levels.iter().flat_map(|l| l.runs.iter().flatten())
    }

    /// Corruption found in node `id`, reported at its extent.
    fn corrupt(&self, id: NodeId, what: String) -> Error {
        let pager = self.store.pager();
        Error::corruption(pager.file_name(), pager.offset_of(id), what)
    }
}

impl Engine for Lsm {
    fn name(&self) -> &'static str {
        "lsm"
    }

    fn dump(&mut self, levels: u32) -> Result<crate::engine::dump::Dump> {
        self.dump_levels(levels)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.insert(key, Body::Put(Val::Inline(value.to_vec())))
    }

    fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.insert(key, Body::Delete)
    }

    fn upsert(&mut self, key: &[u8], operand: &[u8]) -> Result<()> {
        merge_operator(&self.merge)?;
        self.insert(key, Body::Upsert(operand.to_vec()))
    }

    fn delete_range(&mut self, start: &[u8], end: &[u8]) -> Result<()> {
        if start >= end {
            return Ok(());
        }
        self.insert(start, Body::DeleteRange(end.to_vec()))
    }

    /// As one by one, but the batch's keys and values move into the memtable uncopied.
    fn apply_batch(&mut self, ops: Vec<Op>) -> Result<()> {
        for op in ops {
            match op {
                Op::Put { key, value } => self.insert_owned(key, Body::Put(Val::Inline(value)))?,
                Op::Delete { key } => self.insert_owned(key, Body::Delete)?,
                Op::Upsert { key, operand } => {
                    merge_operator(&self.merge)?;
                    self.insert_owned(key, Body::Upsert(operand))?
                }
                Op::DeleteRange { start, end } => {
                    if start < end {
                        self.insert_owned(start, Body::DeleteRange(end))?
                    }
                }
            }
        }
        Ok(())
    }

    fn shared(&self) -> &dyn SharedReads {
        self
    }

    fn begin_checkpoint(&mut self, wal_seq: u64) -> Result<Commit> {
        if !self.mem.is_empty() {
            self.flush()?;
        }
        // A merge running goes on: the manifest names its inputs, not its output.
        self.merge_in_background()?;
        let manifest = format::encode_manifest(&self.levels, &self.counters);
        let id = self.manifest;
        self.store
            .pager_mut()
            .write_block(id, table::KIND_MANIFEST, &manifest)?;
        let meta = format::encode_meta(&self.cfg, self.manifest, self.next_seq);
        self.store.begin_checkpoint(wal_seq, meta)
    }

    fn finish_checkpoint(&mut self, c: Commit) -> Result<()> {
        self.store.pager_mut().finish_commit(c)
    }

    /// A checkpoint asked for covers the merges its flush makes due (see `compact.rs`).
    fn checkpoint(&mut self, wal_seq: u64) -> Result<()> {
        if !self.mem.is_empty() {
            self.flush()?;
        }
        self.drain()?;
        self.settle_at_rest()?;
        let mut c = self.begin_checkpoint(wal_seq)?;
        c.make_durable()?;
        self.finish_checkpoint(c)
    }

    fn settle(&mut self) -> Result<()> {
        if self.mem.bytes() >= self.cfg.memtable_bytes {
            self.flush()?;
        }
        self.merge_in_background()?;
        // The memtable and the pool share one budget: blocks fill what the memtable does not
        // hold yet (after a flush, all of it), as RocksDB charges memtables to its block cache.
        self.store
            .set_budget(Self::pool_budget(self.cache_bytes, self.mem.bytes()));
        self.store.evict_to_budget()
    }

    fn relocate_tail(&mut self) -> Result<u64> {
        // A merge's output must not land in the tail being given back.
        self.reap(true)?;
        self.store.pager_mut().relocate_tail()
    }

    fn release_free(&mut self) -> Result<u64> {
        self.reap(true)?;
        self.store.pager_mut().release_free()
    }

    fn dirty_bytes(&self) -> u64 {
        self.mem.bytes() as u64
    }

    fn stats(&self) -> EngineStats {
        let tables = self.tables().count() as u64;
        let runs: usize = self.levels.iter().map(|l| l.runs.len()).sum();
        let c = &self.counters;
        let mut s = EngineStats::substrate(&self.store);
        s.engine = "lsm";
        s.node_size = self.cfg.block_bytes as u64;
        s.geometry_origin = "given in the options";
        // Every put not yet merged to the bottom may meet a newer delete or an older put of its
        // key on the way: the key count is exact only when nothing is buffered, that is when
        // all the data is one run of puts at the bottom.
        s.live_keys = self.tables().map(|t| t.puts).sum();
        s.live_bytes = self.tables().map(|t| t.bytes).sum();
        s.height = self.levels.len() as u32;
        s.leaf_nodes = tables;
        s.detail = vec![
            ("size_ratio", self.cfg.size_ratio as u64),
            ("levels", self.levels.len() as u64),
            ("runs", runs as u64),
            ("tables", tables),
            ("memtable_bytes", self.mem.bytes() as u64),
            ("buffered_messages", self.buffered()),
            ("flushes", c.flushes),
            ("flush_bytes", c.flush_bytes),
            ("merges", c.merges),
            ("trivial_moves", c.trivial_moves),
            ("merge_read_bytes", c.merge_read_bytes),
            ("merge_write_bytes", c.merge_write_bytes),
            ("stalls", self.stalls),
            ("stall_ms", self.stall_nanos / 1_000_000),
            ("largest_merge_bytes", self.largest_merge),
            ("rest_merges", self.rest_merges),
            // Where space amplification comes from: what is not in the last level may be an
            // older copy's newer version.
            (
                "last_level_bytes",
                self.levels.last().map_or(0, Level::bytes),
            ),
        ];
        s
    }

    fn check(&mut self) -> Result<CheckReport> {
        self.reap(true)?;
        self.verify()
    }

    fn device(&self) -> &Arc<dyn Device> {
        self.store.pager().device()
    }

    fn salvage(&mut self, out: &mut Sink<'_>, lost: &mut Vec<Damage>) -> Result<()> {
        self.rescue(out, lost)
    }
}

impl Drop for Lsm {
    fn drop(&mut self) {
        self.abandon_merge();
    }
}
