//! The B+-tree engine: the classic baseline, on the shared substrate.
//!
//! Invariants (checked by `check`):
//! - every leaf is at depth `height`; keys are strictly increasing within a node and every key
//!   of child i of an internal node lies in [keys[i-1], keys[i]);
//! - internal nodes have at least two children, and leaves other than the root are not empty;
//! - a node splits when its block would exceed `node_size` (and it has enough entries to split),
//!   and merges with or borrows from a sibling below a quarter of it. A node can exceed
//!   `node_size` only when its entries are individually huge (keys up to 4 KiB in 4 KiB nodes).
//! - values longer than `node_size / 4` live in their own blob block, freed with the entry.
//!
//! It is a fair baseline: writes go to the pinned leaf at once and nothing is buffered beyond the
//! cache. Range scans re-descend from the root for each leaf using the leaf's fence key, so no
//! sibling pointers need to be maintained and scans never hold a pin between calls.

//!
//! Files, one concern each: `config` (node sizes), `format` (metadata in the superblock),
//! `node` (nodes on disk), `read`, `write`, `shape` (splits and merges), `check`, `salvage`.

mod check;
mod config;
mod dump;
mod format;
pub(crate) mod node;
mod read;
mod salvage;
mod shape;
mod write;

pub use config::{MAX_NODE_SIZE, MIN_NODE_SIZE};
use shape::Path;

use std::collections::HashSet;
use std::ops::Bound;
use std::sync::Arc;

pub use node::{Internal, Leaf, Node};
use node::{INTERNAL_FIXED, LEAF_FIXED};

use crate::engine::salvage::{Damage, Sink};
use crate::engine::{CheckReport, Engine, EngineStats, SharedReads, MAX_HEIGHT};
use crate::error::{Error, Result};
use crate::kv::{
    above_lo, below_hi, free_blob, merge_operator, next_cursor, read_value, shortest_separator,
    write_blob, Keys, MergeOperator, Val,
};
use crate::storage::block::BLOCK_HEADER;
use crate::storage::pager::MAX_RUN_IO;
use crate::storage::{Checkpoint, Commit, Device, NodeId, NodeStore, Pager, Pin};

/// The first byte of the engine metadata in the superblock.
pub const ENGINE_TAG: u8 = 1;

pub struct BTree {
    store: NodeStore<Node>,
    merge: Option<Arc<dyn MergeOperator>>,
    root: NodeId,
    node_size: usize,
    inline_max: usize,
    height: u32,
    live_keys: u64,
    live_bytes: u64,
    leaves: u64,
    internals: u64,
    blobs: u64,
}

fn leaf_mut(n: &mut Node) -> &mut Leaf {
    match n {
        Node::Leaf(l) => l,
        Node::Internal(_) => unreachable!("descent ends at a leaf"),
    }
}

fn internal_mut(n: &mut Node) -> &mut Internal {
    match n {
        Node::Internal(i) => i,
        Node::Leaf(_) => unreachable!("a path holds internal nodes only"),
    }
}

impl BTree {
    /// A new, empty tree on an empty device, committed as the first checkpoint.
    pub fn create(
        pager: Pager,
        node_size: usize,
        cache_bytes: usize,
        merge: Option<Arc<dyn MergeOperator>>,
    ) -> Result<BTree> {
        Self::check_node_size(node_size)?;
        let mut store = Self::pool(pager, cache_bytes);
        let root = store.create(Node::Leaf(Leaf::new()))?.id();
        let mut t = BTree {
            store,
            merge,
            root,
            node_size,
            inline_max: node_size / 4,
            height: 1,
            live_keys: 0,
            live_bytes: 0,
            leaves: 1,
            internals: 0,
            blobs: 0,
        };
        t.checkpoint(0)?;
        Ok(t)
    }

    pub fn node_size(&self) -> usize {
        self.node_size
    }

    /// The buffer pool, writing dirty nodes back in batches of up to a sixteenth of it (4 MiB
    /// at most): once the tree outgrows the cache every insert evicts a dirty leaf, and a batch
    /// turns a write per leaf into one per run of adjacent extents (docs/btree.md).
    pub(super) fn pool(pager: Pager, cache_bytes: usize) -> NodeStore<Node> {
        let mut store = NodeStore::new(pager, cache_bytes);
        store.set_writeback_batch((cache_bytes / WRITEBACK_BATCH_SHARE).min(MAX_RUN_IO as usize));
        store
    }
}

/// The share of the cache one write-back batch may take (see `BTree::pool`).
const WRITEBACK_BATCH_SHARE: usize = 16;

impl Engine for BTree {
    fn name(&self) -> &'static str {
        "btree"
    }

    fn dump(&mut self, levels: u32) -> Result<crate::engine::dump::Dump> {
        self.dump_levels(levels)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let val = if value.len() > self.inline_max {
            self.write_blob(value)?
        } else {
            Val::Inline(value.to_vec())
        };
        let (path, leaf) = self.descend(key)?;
        let old = {
            let mut g = leaf.write();
            let l = leaf_mut(&mut g);
            match l.search(key) {
                Ok(i) => Some(l.replace_at(i, val)),
                Err(i) => {
                    l.insert_at(i, key.to_vec(), val);
                    None
                }
            }
        };
        match old {
            Some(v) => {
                self.live_bytes -= v.logical_len() as u64;
                self.drop_val(v);
            }
            None => {
                self.live_keys += 1;
                self.live_bytes += key.len() as u64;
            }
        }
        self.live_bytes += value.len() as u64;
        self.store.mark_dirty(&leaf);
        self.split_up(path, leaf)
    }

    fn delete(&mut self, key: &[u8]) -> Result<()> {
        let (path, leaf) = self.descend(key)?;
        let removed = {
            let mut g = leaf.write();
            let l = leaf_mut(&mut g);
            l.search(key).ok().map(|i| l.remove_at(i))
        };
        let Some((k, v)) = removed else { return Ok(()) };
        self.live_keys -= 1;
        self.live_bytes -= (k.len() + v.logical_len()) as u64;
        self.drop_val(v);
        self.store.mark_dirty(&leaf);
        self.rebalance_up(path, leaf)
    }

    /// Read, merge, write back: the B+-tree has nowhere to keep an upsert but the leaf.
    fn upsert(&mut self, key: &[u8], operand: &[u8]) -> Result<()> {
        merge_operator(&self.merge)?;
        let op = self.merge.clone().expect("checked above");
        let old = self.get(key)?;
        match op.merge(key, old.as_deref(), operand) {
            Some(v) => self.put(key, &v),
            None => self.delete(key),
        }
    }

    /// One delete per key in the range, a leaf's worth at a time.
    fn delete_range(&mut self, start: &[u8], end: &[u8]) -> Result<()> {
        if start >= end {
            return Ok(());
        }
        loop {
            let mut doomed = Vec::new();
            self.scan(
                Bound::Included(start),
                Bound::Excluded(end),
                false,
                256,
                &mut doomed,
            )?;
            if doomed.is_empty() {
                return Ok(());
            }
            for (k, _) in doomed {
                self.delete(&k)?;
            }
        }
    }

    fn begin_checkpoint(&mut self, wal_seq: u64) -> Result<Commit> {
        let meta = self.meta();
        self.store.begin_checkpoint(wal_seq, meta)
    }

    fn finish_checkpoint(&mut self, c: Commit) -> Result<()> {
        self.store.pager_mut().finish_commit(c)
    }

    fn settle(&mut self) -> Result<()> {
        self.store.evict_to_budget()
    }

    fn shared(&self) -> &dyn SharedReads {
        self
    }

    fn relocate_tail(&mut self) -> Result<u64> {
        self.store.pager_mut().relocate_tail()
    }

    fn release_free(&mut self) -> Result<u64> {
        self.store.pager_mut().release_free()
    }

    fn dirty_bytes(&self) -> u64 {
        self.store.dirty_bytes() as u64
    }

    fn stats(&self) -> EngineStats {
        EngineStats {
            engine: "btree",
            node_size: self.node_size as u64,
            geometry_origin: "given in the options",
            live_keys: self.live_keys,
            live_bytes: self.live_bytes,
            height: self.height,
            internal_nodes: self.internals,
            leaf_nodes: self.leaves,
            blobs: self.blobs,
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
        let mut w = crate::engine::salvage::Walk::new(out, lost);
        self.salvage_node(self.root, None, None, Some(1), &mut w)?;
        self.salvage_below_holes(&mut w)
    }
}
