//! The Bε-tree engine: strata's write-optimised dictionary (see docs/betree.md).
//!
//! Writes become messages injected at the root. An internal node buffers messages in one
//! segment per child; when a segment outgrows B/F bytes, or the node outgrows B, the heaviest
//! segment is flushed: its messages move into the child (its segments, or, at a leaf, its
//! entries). Queries collect the messages for their key along the root-to-leaf path and apply
//! them, newest last, to what the leaf holds, so answers are exact at every moment.
//!
//! Invariants (checked by `check`):
//! - all leaves are at depth `height`; pivots are strictly increasing and every key of child i
//!   (messages and entries alike) lies in [pivot i-1, pivot i), within the node's own range;
//! - internal nodes other than a collapsing root have at least two children and, after every
//!   operation, at most `fanout`;
//! - messages in a node are newer than the messages and entries below it for their keys (a
//!   segment is flushed whole, or all but its last keys into a run (`flush::spill_fitted`), and
//!   a child receives a parent's messages only by a flush);
//! - a dirty node is fully resident (it is written back whole); only clean nodes are partial.
//! - values longer than `inline_max` live in blob blocks, freed when a newer message or a leaf
//!   update makes them unreachable.
//!
//! Files, one concern each: `config` (geometry), `format` (metadata in the superblock),
//! `basement` (a leaf's entries), `node` (nodes and runs on disk), `write` (injecting at the
//! root), `flush` (the flusher) with `policy` (the run budget) and `drainer` (drains on a
//! thread of their own), `leaf` (applying messages to leaves), `shape` (splits and merges), `read` (descent and resolution), `check` and
//! `salvage`. Messages and segments are `kv::msg`, shared with the LSM-tree.

pub(crate) mod basement;
mod check;
mod config;
mod drainer;
mod dump;
mod flush;
mod format;
mod leaf;
pub(crate) mod node;
mod policy;
mod read;
mod salvage;
mod shape;
mod write;

pub use config::{Geometry, Origin, LARGE_BASEMENTS};
use leaf::cut_basements;
#[cfg(test)]
pub(crate) use policy::SMALL_RUN_SHARE;
pub(crate) use policy::{MAX_RUNS, RUN_BUDGET};
pub(crate) use salvage::raw_messages;
use salvage::SalvageWalk;

use std::collections::{BTreeMap, HashSet};
use std::ops::Bound;
use std::sync::Arc;

use crate::kv::msg::{Body, Encoding, Msg, Scratch, Segment, EMPTY_SEGMENT};
use basement::{Basement, ValRef};
use node::{read_part, read_whole, Block, Internal, Leaf, Part, Run, RunRef};

use crate::engine::salvage::{Damage, Effect, Sink};
use crate::engine::{apply_each, CheckReport, Engine, EngineStats, SharedReads, MAX_HEIGHT};
use crate::error::{Error, Result};
use crate::kv::{
    free_blob, head, merge_operator, next_cursor, read_value, require_merge, shortest_separator,
    within, write_blob, Filter, Keys, MergeOperator, Op, Val,
};
use crate::storage::{Checkpoint, Commit, Device, NodeId, NodeStore, Pager, Pin, StoredNode};

/// The first byte of the engine metadata in the superblock.
pub const ENGINE_TAG: u8 = 2;

pub struct BeTree {
    store: NodeStore<Block>,
    merge: Option<Arc<dyn MergeOperator>>,
    geo: Geometry,
    origin: Origin,
    root: NodeId,
    height: u32,
    next_seq: u64,
    live_keys: u64,
    live_bytes: u64,
    leaves: u64,
    internals: u64,
    blobs: u64,
    /// Messages in all segments and runs.
    buffered: u64,
    /// Runs spilled toward leaves and not yet drained.
    runs: u64,
    /// Merges of a leaf's small runs into one since the engine was opened (`policy::Flush`).
    run_merges: u64,
    scratch: Scratch,
    /// Drains run on a thread of their own (`drainer`), else inline on the writer.
    background: bool,
    /// The thread drains run on, started by the first.
    drainer: Option<drainer::Drainer>,
    /// Raised by the log while it syncs: the drain thread then offers its core between
    /// basements (`Engine::yield_to_syncs`).
    syncing: Arc<std::sync::atomic::AtomicBool>,
    drains: drainer::DrainStats,
}

fn internal(n: &Block) -> &Internal {
    match n {
        Block::Internal(i) => i,
        _ => unreachable!("an internal node was expected"),
    }
}

fn internal_mut(n: &mut Block) -> &mut Internal {
    match n {
        Block::Internal(i) => i,
        _ => unreachable!("an internal node was expected"),
    }
}

fn leaf_mut(n: &mut Block) -> &mut Leaf {
    match n {
        Block::Leaf(l) => l,
        _ => unreachable!("a leaf was expected"),
    }
}

/// Tests: a tree of 64 KiB nodes, fanout 8 and 4 KiB basements on a simulated disk.
#[cfg(test)]
fn sim_tree(origin: Origin, cache: usize, merge: Option<Arc<dyn MergeOperator>>) -> BeTree {
    sim_tree_with(64 << 10, 8, origin, cache, merge)
}

/// `sim_tree` with nodes of `node_size` bytes and `fanout` children.
#[cfg(test)]
fn sim_tree_with(
    node_size: usize,
    fanout: usize,
    origin: Origin,
    cache: usize,
    merge: Option<Arc<dyn MergeOperator>>,
) -> BeTree {
    use crate::storage::{SimDevice, SimDisk};
    let disk = SimDisk::new(Default::default(), 0.0);
    let pager = Pager::create(Arc::new(SimDevice::new("data", disk)));
    let geo = Geometry {
        node_size,
        fanout,
        basement: 4096,
    };
    BeTree::create(pager, geo, origin, cache, merge).unwrap()
}

/// The tree's buffer pool. The blocks it writes between checkpoints (evicted runs and leaves)
/// live until a drain or a merge replaces them, so the device is asked to write them out as
/// they accumulate (`Pager::set_write_out_every`): left in the page cache, the kernel wrote
/// them out in bursts, and the log's syncs waited 5–25 ms behind those at 10M keys.
fn node_store(mut pager: Pager, cache_bytes: usize) -> NodeStore<Block> {
    pager.set_write_out_every(WRITE_OUT_EVERY);
    NodeStore::new(pager, cache_bytes)
}

/// Bytes of blocks written between two requests to write them out (`node_store`). Each
/// request can block the writer while the device's queue is full, and that back-pressure is
/// what keeps the queue short when the log's next sync comes: at 10M keys and 256 MiB the mixed
/// commit p99 was worse in every pair with the requests handed to a thread (4 of 4) and with 4
/// MiB (3 of 3), and better in 5 of 6 pairs with 256 KiB than with 1 MiB (docs/performance.md,
/// eighth session).
const WRITE_OUT_EVERY: u64 = 1 << 18;

fn empty_seg() -> Part<Segment> {
    Part::new(Segment::default(), 0, EMPTY_SEGMENT)
}

fn before(key: &[u8], hi: Option<&[u8]>) -> bool {
    hi.is_none_or(|h| key < h)
}

impl BeTree {
    pub fn create(
        pager: Pager,
        geo: Geometry,
        origin: Origin,
        cache_bytes: usize,
        merge: Option<Arc<dyn MergeOperator>>,
    ) -> Result<BeTree> {
        geo.check()?;
        let mut store = node_store(pager, cache_bytes);
        let leaf = cut_basements(Basement::default(), geo.basement);
        let root = store.create(Block::Leaf(leaf))?.id();
        let mut t = BeTree {
            store,
            merge,
            geo,
            origin,
            root,
            height: 1,
            next_seq: 1,
            live_keys: 0,
            live_bytes: 0,
            leaves: 1,
            internals: 0,
            blobs: 0,
            buffered: 0,
            runs: 0,
            run_merges: 0,
            scratch: Scratch::default(),
            background: true,
            drainer: None,
            syncing: Default::default(),
            drains: Default::default(),
        };
        t.checkpoint(0)?;
        Ok(t)
    }

    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    /// Run leaf drains on a thread of their own (the default) or inline on the writer
    /// (`Options::background_merges`).
    pub fn background(mut self, on: bool) -> BeTree {
        self.background = on;
        self
    }

    // ---- partitions and values -------------------------------------------------------------

    /// Make partition i of a pinned node resident, decoded.
    fn load_part(&self, pin: &Pin<Block>, i: usize) -> Result<()> {
        self.fetch_part(pin, i, true)
    }

    /// Make partition i of a pinned node resident: decoded if `decode`, else a segment may
    /// stay raw (a point query walks it in place). Readers sharing the tree may fetch the
    /// same partition at once: the read is made without the node's lock, and whoever takes
    /// the lock second finds the partition there and installs nothing (the charge moves
    /// once).
    fn fetch_part(&self, pin: &Pin<Block>, i: usize, decode: bool) -> Result<()> {
        let there = |g: &Block| g.loaded(i) || (!decode && g.present(i));
        let loc = {
            let g = pin.read();
            if there(&g) {
                return Ok(());
            }
            g.loc(i).expect("an unloaded partition is on disk")
        };
        let bytes = if pin.read().present(i) {
            None
        } else {
            Some(read_part(self.store.pager(), pin.id(), i, loc)?)
        };
        let mut g = pin.write();
        if there(&g) {
            return Ok(());
        }
        let before = g.part_charge(i);
        let installed = match (g.decode_raw(i), bytes) {
            (Ok(true), _) => Ok(()),
            (Err(what), _) => Err(what),
            (Ok(false), Some(bytes)) if decode => g.install(i, &bytes),
            (Ok(false), Some(bytes)) => g.install_raw(i, &bytes),
            // Held raw when looked at, gone since: another reader's decode of it failed (a
            // shed cannot run on a pinned node). Read it from the device.
            (Ok(false), None) => {
                drop(g);
                return self.fetch_part(pin, i, decode);
            }
        };
        // A raw segment that failed to decode is gone: the node shrank.
        let after = g.part_charge(i);
        self.store.recharge_by(pin, before, after);
        debug_assert_eq!(
            self.store.charge_of(pin.id()),
            Some(StoredNode::charge(&*g))
        );
        drop(g);
        installed.map_err(|what| {
            let at = self.store.pager().offset_of(pin.id()) + loc.off as u64;
            Error::corruption(
                self.store.pager().file_name(),
                at,
                format!("node {}: {what}", pin.id()),
            )
        })
    }

    /// Make every partition resident and decoded (required before a node is changed): raw
    /// segments are decoded in place, and one read of the whole extent fetches the rest when
    /// more than one partition is missing.
    fn load_all(&mut self, pin: &Pin<Block>) -> Result<()> {
        let missing: Vec<usize> = {
            let g = pin.read();
            (0..g.parts()).filter(|&i| !g.loaded(i)).collect()
        };
        if missing.is_empty() {
            return Ok(());
        }
        let absent = {
            let g = pin.read();
            missing.iter().filter(|&&i| !g.present(i)).count()
        };
        if absent > 1 {
            let whole = read_whole(self.store.pager(), pin.id())?;
            let installed = pin
                .write()
                .install_from(self.store.pager(), pin.id(), &whole, true);
            // Charged for what it holds even when a partition failed: those before it stay.
            self.store.recharge(pin);
            installed?;
        }
        for i in missing {
            self.load_part(pin, i)?;
        }
        Ok(())
    }

    fn read_val(&self, v: &Val) -> Result<Vec<u8>> {
        read_value(self.store.pager(), v)
    }

    fn read_ref(&self, v: ValRef) -> Result<Vec<u8>> {
        match v {
            ValRef::Inline(b) => Ok(b.to_vec()),
            ValRef::Blob { .. } => self.read_val(&v.to_val()),
        }
    }

    fn make_val(&mut self, bytes: Vec<u8>) -> Result<Val> {
        if bytes.len() <= self.geo.inline_max() {
            return Ok(Val::Inline(bytes));
        }
        let val = write_blob(self.store.pager_mut(), &bytes)?;
        self.blobs += 1;
        Ok(val)
    }

    fn free_val(&mut self, v: Val) {
        if free_blob(self.store.pager_mut(), v) {
            self.blobs -= 1;
        }
    }

    fn free_msgs(&mut self, dropped: Vec<Msg>) {
        for m in dropped {
            if let Body::Put(v) = m.body {
                self.free_val(v);
            }
        }
    }

    fn merge_op(&self) -> Result<&dyn MergeOperator> {
        merge_operator(&self.merge)
    }

    fn not_a_node(&self, id: NodeId) -> Error {
        self.corrupt(
            id,
            format!("node {id} is a run where a tree node was expected"),
        )
    }

    fn not_a_run(&self, id: NodeId) -> Error {
        self.corrupt(id, format!("node {id} is listed as a run but is not one"))
    }

    /// Corruption found in node `id`, reported at its extent.
    fn corrupt(&self, id: NodeId, what: String) -> Error {
        let pager = self.store.pager();
        Error::corruption(pager.file_name(), pager.offset_of(id), what)
    }
}

impl Engine for BeTree {
    fn name(&self) -> &'static str {
        "betree"
    }

    fn dump(&mut self, levels: u32) -> Result<crate::engine::dump::Dump> {
        self.dump_levels(levels)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let body = self.put_body(value)?;
        self.inject(body, key)
    }

    fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.inject(Body::Delete, key)
    }

    fn upsert(&mut self, key: &[u8], operand: &[u8]) -> Result<()> {
        self.merge_op()?;
        self.inject(Body::Upsert(operand.to_vec()), key)
    }

    /// Random puts and deletes: sorted by key and merged into the root's segments in one pass
    /// per segment (`Segment::insert_run`), or applied to the root while it is still a leaf,
    /// then the root is relieved once. Anything else goes one operation at a time: upserts and
    /// range deletes, and keys in ascending order, which take the sequential fast path.
    fn apply_batch(&mut self, ops: Vec<Op>) -> Result<()> {
        fn key(op: &Op) -> Option<&[u8]> {
            match op {
                Op::Put { key, .. } | Op::Delete { key } => Some(key),
                _ => None,
            }
        }
        // Drains are installed by writes, whose failures poison the database, not by reads.
        self.reap(false)?;
        let merge = ops.len() > 1
            && ops.iter().all(|op| key(op).is_some())
            && !ops.windows(2).all(|w| key(&w[0]) < key(&w[1]));
        if !merge {
            return apply_each(self, &ops);
        }
        let mut msgs = Vec::with_capacity(ops.len());
        for op in ops {
            let (key, body) = match op {
                Op::Put { key, value } => (key, Body::Put(self.make_val(value)?)),
                Op::Delete { key } => (key, Body::Delete),
                _ => unreachable!("only puts and deletes are merged"),
            };
            msgs.push(Msg {
                key,
                seq: self.next_seq,
                body,
            });
            self.next_seq += 1;
        }
        // By key, each key's messages oldest first (their batch order). Sorting small (head,
        // position) pairs, keys compared only when heads tie, moves far less than the messages.
        let mut order: Vec<(u64, u32)> = msgs
            .iter()
            .enumerate()
            .map(|(i, m)| (head(&m.key), i as u32))
            .collect();
        order.sort_unstable_by(|&(ha, a), &(hb, b)| {
            ha.cmp(&hb)
                .then_with(|| msgs[a as usize].key.cmp(&msgs[b as usize].key))
                .then(a.cmp(&b))
        });
        let mut slots: Vec<Option<Msg>> = msgs.into_iter().map(Some).collect();
        let msgs: Vec<Msg> = order
            .into_iter()
            .map(|(_, i)| slots[i as usize].take().expect("each position once"))
            .collect();
        let root = self.store.get(self.root)?;
        self.deliver(&root, msgs, 1)?;
        drop(root);
        self.fix_root()
    }

    fn delete_range(&mut self, start: &[u8], end: &[u8]) -> Result<()> {
        if start >= end {
            return Ok(());
        }
        self.inject(Body::DeleteRange(end.to_vec()), start)
    }

    fn shared(&self) -> &dyn SharedReads {
        self
    }

    fn begin_checkpoint(&mut self, wal_seq: u64) -> Result<Commit> {
        let meta = self.meta();
        self.store.begin_checkpoint(wal_seq, meta)
    }

    fn finish_checkpoint(&mut self, c: Commit) -> Result<()> {
        self.store.pager_mut().finish_commit(c)
    }

    fn checkpoint(&mut self, wal_seq: u64) -> Result<()> {
        // A checkpoint asked for covers the running drain.
        self.reap(true)?;
        let mut c = self.begin_checkpoint(wal_seq)?;
        c.make_durable()?;
        self.finish_checkpoint(c)
    }

    fn settle(&mut self) -> Result<()> {
        self.store.evict_to_budget()
    }

    fn relocate_tail(&mut self) -> Result<u64> {
        self.store.pager_mut().relocate_tail()
    }

    fn release_free(&mut self) -> Result<u64> {
        self.store.pager_mut().release_free()
    }

    fn yield_to_syncs(&self) -> Option<Arc<std::sync::atomic::AtomicBool>> {
        Some(self.syncing.clone())
    }

    fn dirty_bytes(&self) -> u64 {
        self.store.dirty_bytes() as u64
    }

    fn stats(&self) -> EngineStats {
        EngineStats {
            engine: "betree",
            node_size: self.geo.node_size as u64,
            geometry_origin: self.origin.describe(),
            live_keys: self.live_keys,
            live_bytes: self.live_bytes,
            height: self.height,
            internal_nodes: self.internals,
            leaf_nodes: self.leaves,
            blobs: self.blobs,
            detail: vec![
                ("fanout", self.geo.fanout as u64),
                ("basement_size", self.geo.basement as u64),
                ("buffered_messages", self.buffered),
                ("runs", self.runs),
                ("run_merges", self.run_merges),
                ("drains_offloaded", self.drains.offloaded),
                ("drains_inline", self.drains.inline),
                ("drains_dropped", self.drains.dropped),
                ("drains_cut_on_thread", self.drains.cut_on_thread),
                ("drain_runs_read", self.drains.runs_read),
                ("drain_leaves_read", self.drains.leaves_read),
                ("merges_offloaded", self.drains.merges_offloaded),
                ("merges_dropped", self.drains.merges_dropped),
                ("drain_stalls", self.drains.stalls),
                ("drain_stall_ms", self.drains.stall_us / 1000),
            ],
            ..EngineStats::substrate(&self.store)
        }
    }

    fn check(&mut self) -> Result<CheckReport> {
        self.check_tree()
    }

    fn device(&self) -> &Arc<dyn Device> {
        self.store.pager().device()
    }

    fn salvage(&mut self, out: &mut Sink<'_>, lost: &mut Vec<Damage>) -> Result<()> {
        let mut w = SalvageWalk::new(out, lost);
        self.salvage_node(self.root, None, None, Some(1), Vec::new(), &mut w)?;
        self.salvage_below_holes(&mut w)?;
        self.salvage_settled(&mut w)
    }
}
