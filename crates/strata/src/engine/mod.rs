//! The `Engine` trait: what the `Db` facade needs from a data structure (the B+-tree and the
//! Bε-tree implement it). Engines are single-threaded objects: the
//! `Db` serialises calls, logs writes ahead and decides when to checkpoint.

use std::collections::HashSet;
use std::ops::Bound;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

pub mod dump;
pub mod salvage;
pub mod versioned;
pub mod versions;

use crate::codec::{Reader, Writer};
use crate::error::{Error, Result};
use crate::kv::Op;
use crate::storage::{CacheStats, Commit, Device, NodeId, NodeStore, Pager, StoredNode};
use salvage::{Damage, Sink};

/// The head of every engine's metadata in the superblock: its tag, then its format version.
pub(crate) fn meta_writer(tag: u8, version: u8) -> Writer {
    let mut w = Writer::new();
    w.u8(tag).u8(version);
    w
}

/// Read the head of an engine's metadata (`meta_writer`): the engine's tag, and a version no
/// newer than `newest`. Returns the version and a reader at the first field; `bad` makes the
/// error a field that does not read becomes.
pub(crate) fn meta_reader<'a>(
    meta: &'a [u8],
    tag: u8,
    newest: u8,
    file: &str,
    bad: impl Fn(&str) -> Error,
) -> Result<(u8, Reader<'a>)> {
    let mut r = Reader::new(meta);
    if r.u8().ok() != Some(tag) {
        return Err(bad("missing or another engine's"));
    }
    let version = r.u8().map_err(|e| bad(&e))?;
    if version > newest {
        return Err(Error::UnsupportedVersion {
            file: file.to_string(),
            found: version as u32,
            supported: newest as u32,
        });
    }
    Ok((version, r))
}

/// The end of every engine's `check`: each block of the translation table is reachable from
/// the engine's roots (`reachable`, gathered by its walk); one that is not is leaked space, or a
/// part of the structure its parent lost.
pub(crate) fn check_reachable(pager: &Pager, reachable: &HashSet<NodeId>) -> Result<()> {
    match pager.ids().into_iter().find(|id| !reachable.contains(id)) {
        Some(id) => Err(Error::corruption(
            pager.file_name(),
            0,
            format!("node {id} is in the translation table but unreachable"),
        )),
        None => Ok(()),
    }
}

/// No tree is taller: internal nodes have two children or more, so this height takes 2^63
/// leaves. Engines refuse metadata that claims more.
pub const MAX_HEIGHT: u32 = 64;

/// Apply operations one by one, in order.
pub(crate) fn apply_each<E: Engine + ?Sized>(engine: &mut E, ops: &[Op]) -> Result<()> {
    for op in ops {
        match op {
            Op::Put { key, value } => engine.put(key, value)?,
            Op::Delete { key } => engine.delete(key)?,
            Op::Upsert { key, operand } => engine.upsert(key, operand)?,
            Op::DeleteRange { start, end } => engine.delete_range(start, end)?,
        }
    }
    Ok(())
}

/// Reads through `&self`, which every engine gives (`Engine::shared`): `Db` takes its state
/// lock shared for `get` and range pages, so readers overlap their IOs and their CPU, and
/// wait only while a write holds the lock. A shared read makes room in
/// the pool by dropping clean nodes only; when that is not enough (`over_budget`), `Db` takes
/// the lock alone after it and settles (`Engine::settle`), so that the budget holds between
/// calls as it does for the other engines.
pub trait SharedReads: Sync {
    /// Whether the pool holds more than its budget (what shared reads could not evict).
    fn over_budget(&self) -> bool;
    /// The value of `key`.
    fn get_shared(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Append to `out` up to `limit` entries within (`lo`, `hi`), ascending or (with `reverse`)
    /// descending from the corresponding end. Iterators page through a range with this.
    fn scan_shared(
        &self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        reverse: bool,
        limit: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<()>;
}

pub trait Engine: Send + Sync {
    fn name(&self) -> &'static str;
    /// `SharedReads::get_shared`, for a caller holding the engine alone.
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.shared().get_shared(key)
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()>;
    fn delete(&mut self, key: &[u8]) -> Result<()>;
    /// Apply the engine's merge operator to `key`'s value with `operand`.
    fn upsert(&mut self, key: &[u8], operand: &[u8]) -> Result<()>;
    /// Delete every key in [start, end).
    fn delete_range(&mut self, start: &[u8], end: &[u8]) -> Result<()>;
    /// Apply a batch's operations as if one by one, in order. An engine that gains from seeing
    /// the whole batch at once (the Bε-tree merges it into its root) overrides this.
    fn apply_batch(&mut self, ops: Vec<Op>) -> Result<()> {
        apply_each(self, &ops)
    }
    /// `SharedReads::scan_shared`, for a caller holding the engine alone.
    fn scan(
        &mut self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        reverse: bool,
        limit: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<()> {
        self.shared().scan_shared(lo, hi, reverse, limit, out)
    }
    /// Start a checkpoint of the engine's state, covering log records up to `wal_seq`: write
    /// every dirty node and the table. The engine may change again at once; the checkpoint is
    /// the state at this call. It is durable after `Commit::make_durable` and complete after
    /// `finish_checkpoint`, and no other checkpoint may begin in between.
    fn begin_checkpoint(&mut self, wal_seq: u64) -> Result<Commit>;
    /// Release what the previous checkpoint alone referenced, once `c` is durable.
    fn finish_checkpoint(&mut self, c: Commit) -> Result<()>;
    /// A whole checkpoint, on the caller's thread.
    fn checkpoint(&mut self, wal_seq: u64) -> Result<()> {
        let mut c = self.begin_checkpoint(wal_seq)?;
        c.make_durable()?;
        self.finish_checkpoint(c)
    }
    /// Called between operations, when nothing is pinned: bring the cache within budget.
    fn settle(&mut self) -> Result<()>;
    /// The engine's reads through `&self` (`SharedReads`), which `Db` runs side by side.
    fn shared(&self) -> &dyn SharedReads;
    /// Right after a completed checkpoint: move blocks out of the file's tail into the holes
    /// below them (`Pager::relocate_tail`); the next checkpoint makes it durable and shortens
    /// the file. Returns the bytes moved.
    fn relocate_tail(&mut self) -> Result<u64>;
    /// Right after a completed checkpoint, when the engine is closing: give the data file's
    /// free extents back to the file system (`Pager::release_free`). Returns the bytes.
    fn release_free(&mut self) -> Result<u64> {
        Ok(0)
    }
    /// Cache bytes of the nodes a checkpoint would write now.
    fn dirty_bytes(&self) -> u64;
    /// A flag the log raises while an fdatasync is in flight: background work on the engine's
    /// own threads offers its core while it is up, so that the syncing thread, woken by its IO,
    /// need not wait behind it. None when the engine has no such work.
    fn yield_to_syncs(&self) -> Option<Arc<AtomicBool>> {
        None
    }
    fn stats(&self) -> EngineStats;
    /// Verify every block's checksum and the structure's invariants; reads bypass the cache.
    fn check(&mut self) -> Result<CheckReport>;
    /// The data device, for space accounting.
    fn device(&self) -> &Arc<dyn Device>;
    /// Copy out every entry still readable, calling `out` for each, and record in `lost` what
    /// cannot be read, walking on around it (see `salvage`). It only reads; only `out`'s errors
    /// stop it. Entries come in key order except those found below damaged nodes, which come
    /// after, and a key may come twice with the same value.
    fn salvage(&mut self, out: &mut Sink<'_>, lost: &mut Vec<Damage>) -> Result<()>;
    /// The structure level by level from the root, down to `levels` levels (0: all), for
    /// `strata dump`. Only reads.
    fn dump(&mut self, levels: u32) -> Result<dump::Dump>;
}

/// What every engine reports, and what only one engine has (`detail`, by name).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EngineStats {
    pub engine: &'static str,
    pub node_size: u64,
    /// Where the node geometry came from: the options, a default, or the tuner.
    pub geometry_origin: &'static str,
    /// Keys (and their key and value bytes) in the leaves. Exact when nothing is buffered above
    /// them (`detail("buffered_messages")` is zero); a write-optimised engine learns whether a
    /// buffered put creates a key only when the put reaches a leaf.
    pub live_keys: u64,
    pub live_bytes: u64,
    pub height: u32,
    pub internal_nodes: u64,
    pub leaf_nodes: u64,
    /// Values stored out of line, one block each.
    pub blobs: u64,
    /// Figures only this engine has, by name, in the order it shows them (the Bε-tree's
    /// `fanout`, `basement_size`, `buffered_messages` and `runs`).
    pub detail: Vec<(&'static str, u64)>,
    pub checkpoints: u64,
    /// Every write batch up to this log sequence number is in the last durable checkpoint.
    pub checkpoint_wal_seq: u64,
    pub cache: CacheStats,
    /// Bytes of extents the translation table references, and free bytes inside the file.
    pub referenced_bytes: u64,
    pub free_bytes: u64,
}

impl EngineStats {
    /// The substrate's part, the same for every engine on a buffer pool: checkpoints, cache
    /// and space. An engine fills in the rest.
    pub fn substrate<N: StoredNode>(store: &NodeStore<N>) -> EngineStats {
        let pager = store.pager();
        EngineStats {
            checkpoints: pager.last_checkpoint().seq,
            checkpoint_wal_seq: pager.last_checkpoint().wal_seq,
            cache: store.stats(),
            referenced_bytes: pager.referenced_bytes(),
            free_bytes: pager.free_bytes(),
            ..EngineStats::default()
        }
    }

    /// The engine's own figure `name` (see `detail`), or 0 when it has none by that name.
    pub fn detail(&self, name: &str) -> u64 {
        find(&self.detail, name)
    }
}

fn find(detail: &[(&'static str, u64)], name: &str) -> u64 {
    detail
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(0, |&(_, v)| v)
}

/// What `Engine::check` verified.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CheckReport {
    pub blocks_verified: u64,
    /// Keys a reader sees (buffered messages applied).
    pub keys: u64,
    pub height: u32,
    pub leaf_nodes: u64,
    pub internal_nodes: u64,
    pub blobs: u64,
    /// What only this engine counts, by name (the Bε-tree's `runs`).
    pub detail: Vec<(&'static str, u64)>,
}

impl CheckReport {
    /// The engine's own count `name`, or 0 when it has none by that name.
    pub fn detail(&self, name: &str) -> u64 {
        find(&self.detail, name)
    }
}
