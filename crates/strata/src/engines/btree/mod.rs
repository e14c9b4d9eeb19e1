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

pub(crate) mod node;

use std::collections::HashSet;
use std::ops::Bound;
use std::sync::Arc;

pub use node::{Internal, Leaf, Node};
use node::{INTERNAL_FIXED, LEAF_FIXED};

use crate::engine::salvage::{self, Damage, Sink};
use crate::engine::{CheckReport, Engine, EngineStats, MAX_HEIGHT};
use crate::error::{Error, Result};
use crate::kv::{
    above_lo, below_hi, free_blob, merge_operator, next_cursor, read_value, shortest_separator,
    write_blob, Keys, MergeOperator, Val,
};
use crate::storage::block::BLOCK_HEADER;
use crate::storage::{Checkpoint, Commit, Device, NodeId, NodeStore, Pager, Pin};

/// The first byte of the engine metadata in the superblock.
pub const ENGINE_TAG: u8 = 1;
const META_VERSION: u8 = 1;
pub const MIN_NODE_SIZE: usize = 4 << 10;
pub const MAX_NODE_SIZE: usize = 4 << 20;

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

type Path = Vec<(Pin<Node>, usize)>;

enum Fix {
    Merged,
    Moved(Vec<u8>),
}

impl BTree {
    pub fn check_node_size(node_size: usize) -> Result<()> {
        if !node_size.is_power_of_two() || !(MIN_NODE_SIZE..=MAX_NODE_SIZE).contains(&node_size) {
            return Err(Error::InvalidOptions(format!(
                "B+-tree node size must be a power of two from 4 KiB to 4 MiB, not {node_size}"
            )));
        }
        Ok(())
    }

    /// A new, empty tree on an empty device, committed as the first checkpoint.
    pub fn create(
        pager: Pager,
        node_size: usize,
        cache_bytes: usize,
        merge: Option<Arc<dyn MergeOperator>>,
    ) -> Result<BTree> {
        Self::check_node_size(node_size)?;
        let mut store = NodeStore::new(pager, cache_bytes);
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

    pub fn open(
        pager: Pager,
        cp: &Checkpoint,
        cache_bytes: usize,
        merge: Option<Arc<dyn MergeOperator>>,
    ) -> Result<BTree> {
        let m = &cp.engine_meta;
        let bad = |what: &str| {
            Error::corruption(pager.file_name(), 0, format!("B+-tree metadata: {what}"))
        };
        if m.len() < 58 || m[0] != ENGINE_TAG {
            return Err(bad("missing or not a B+-tree"));
        }
        if m[1] > META_VERSION {
            return Err(Error::UnsupportedVersion {
                file: pager.file_name().to_string(),
                found: m[1] as u32,
                supported: META_VERSION as u32,
            });
        }
        let u64_at = |i: usize| u64::from_le_bytes(m[i..i + 8].try_into().unwrap());
        let node_size = u32::from_le_bytes(m[2..6].try_into().unwrap()) as usize;
        Self::check_node_size(node_size).map_err(|_| bad("node size out of range"))?;
        let height = u32::from_le_bytes(m[54..58].try_into().unwrap());
        // A write's descent reserves a path of `height` nodes, and height 0 underflows when
        // the root collapses.
        if !(1..=MAX_HEIGHT).contains(&height) {
            return Err(bad("height out of range"));
        }
        Ok(BTree {
            store: NodeStore::new(pager, cache_bytes),
            merge,
            root: u64_at(6),
            node_size,
            inline_max: node_size / 4,
            height,
            live_keys: u64_at(14),
            live_bytes: u64_at(22),
            leaves: u64_at(30),
            internals: u64_at(38),
            blobs: u64_at(46),
        })
    }

    fn meta(&self) -> Vec<u8> {
        let mut m = vec![ENGINE_TAG, META_VERSION];
        m.extend_from_slice(&(self.node_size as u32).to_le_bytes());
        for v in [
            self.root,
            self.live_keys,
            self.live_bytes,
            self.leaves,
            self.internals,
            self.blobs,
        ] {
            m.extend_from_slice(&v.to_le_bytes());
        }
        m.extend_from_slice(&self.height.to_le_bytes());
        m
    }

    pub fn node_size(&self) -> usize {
        self.node_size
    }

    fn descend(&mut self, key: &[u8]) -> Result<(Path, Pin<Node>)> {
        let mut path = Vec::with_capacity(self.height as usize);
        let mut pin = self.store.get(self.root)?;
        loop {
            let next = match &*pin.read() {
                Node::Internal(n) => {
                    let i = n.child_for(key);
                    Some((i, n.children[i]))
                }
                Node::Leaf(_) => None,
            };
            let Some((i, child)) = next else {
                return Ok((path, pin));
            };
            let child = self.store.get(child)?;
            path.push((pin, i));
            pin = child;
        }
    }

    /// The leaf a scan visits next, and its fence: the nearest separator beyond it in the scan's
    /// direction (`None` when the leaf is the last one that way).
    fn leaf_toward(
        &mut self,
        at: Bound<&[u8]>,
        reverse: bool,
    ) -> Result<(Pin<Node>, Option<Vec<u8>>)> {
        let mut fence = None;
        let mut pin = self.store.get(self.root)?;
        loop {
            let next = match &*pin.read() {
                Node::Internal(n) => {
                    let i = match (at, reverse) {
                        (Bound::Unbounded, false) => 0,
                        (Bound::Unbounded, true) => n.children.len() - 1,
                        (Bound::Included(k), _) => n.child_for(k),
                        (Bound::Excluded(k), false) => n.child_for(k),
                        (Bound::Excluded(k), true) => n.child_below(k),
                    };
                    if !reverse && i < n.keys.len() {
                        fence = Some(n.keys.get(i).to_vec());
                    }
                    if reverse && i > 0 {
                        fence = Some(n.keys.get(i - 1).to_vec());
                    }
                    Some(n.children[i])
                }
                Node::Leaf(_) => None,
            };
            match next {
                Some(child) => pin = self.store.get(child)?,
                None => return Ok((pin, fence)),
            }
        }
    }

    fn write_blob(&mut self, value: &[u8]) -> Result<Val> {
        let val = write_blob(self.store.pager_mut(), value)?;
        self.blobs += 1;
        Ok(val)
    }

    fn read_val(&self, val: &Val) -> Result<Vec<u8>> {
        read_value(self.store.pager(), val)
    }

    fn drop_val(&mut self, val: Val) {
        if free_blob(self.store.pager_mut(), val) {
            self.blobs -= 1;
        }
    }

    fn overflows(&self, node: &Node) -> bool {
        match node {
            Node::Leaf(l) => BLOCK_HEADER + l.bytes > self.node_size && l.keys.len() >= 2,
            Node::Internal(n) => BLOCK_HEADER + n.bytes > self.node_size && n.children.len() >= 4,
        }
    }

    fn underflows(&self, node: &Node) -> bool {
        match node {
            Node::Leaf(l) => l.keys.is_empty() || BLOCK_HEADER + l.bytes < self.node_size / 4,
            Node::Internal(n) => {
                n.children.len() < 2 || BLOCK_HEADER + n.bytes < self.node_size / 4
            }
        }
    }

    /// Split `node` while it overflows, pushing separators up the path.
    fn split_up(&mut self, mut path: Path, mut node: Pin<Node>) -> Result<()> {
        loop {
            let split = {
                let mut g = node.write();
                if !self.overflows(&g) {
                    return Ok(());
                }
                match &mut *g {
                    Node::Leaf(l) => {
                        let right = l.split_off(l.byte_midpoint());
                        let sep = shortest_separator(
                            l.keys.last().expect("left half"),
                            right.keys.get(0),
                        );
                        self.leaves += 1;
                        (sep, Node::Leaf(right))
                    }
                    Node::Internal(n) => {
                        let m = n.split_point();
                        let keys = n.keys.split_off(m + 1);
                        let sep = n.keys.pop().expect("split point has a key");
                        let children = n.children.split_off(m + 1);
                        n.recount();
                        let mut r = Internal {
                            keys,
                            children,
                            bytes: 0,
                        };
                        r.recount();
                        self.internals += 1;
                        (sep, Node::Internal(r))
                    }
                }
            };
            let (sep, right) = split;
            self.store.mark_dirty(&node);
            let right = self.store.create(right)?;
            match path.pop() {
                Some((parent, i)) => {
                    internal_mut(&mut parent.write()).insert_after(i, sep, right.id());
                    self.store.mark_dirty(&parent);
                    node = parent;
                }
                None => {
                    let mut root = Internal {
                        keys: Keys::from(vec![sep]),
                        children: vec![node.id(), right.id()],
                        bytes: 0,
                    };
                    root.recount();
                    self.root = self.store.create(Node::Internal(root))?.id();
                    self.height += 1;
                    self.internals += 1;
                    return Ok(());
                }
            }
        }
    }

    /// Fix underflowing nodes from `node` upwards, then shorten the tree if the root has one child.
    fn rebalance_up(&mut self, mut path: Path, mut node: Pin<Node>) -> Result<()> {
        while let Some((parent, i)) = path.pop() {
            let under = self.underflows(&node.read());
            if !under {
                break;
            }
            self.fix_child(&parent, i, node)?;
            node = parent;
        }
        drop(node);
        loop {
            let root = self.store.get(self.root)?;
            let only = match &*root.read() {
                Node::Internal(n) if n.children.len() == 1 => Some(n.children[0]),
                _ => None,
            };
            drop(root);
            let Some(child) = only else { return Ok(()) };
            self.store.free(self.root);
            self.root = child;
            self.height -= 1;
            self.internals -= 1;
        }
    }

    /// Merge child `i` of `parent` with a sibling, or move entries between them.
    fn fix_child(&mut self, parent: &Pin<Node>, i: usize, child: Pin<Node>) -> Result<()> {
        let (li, sibling_id, sep) = {
            let g = parent.read();
            let Node::Internal(p) = &*g else {
                unreachable!("parents are internal")
            };
            if p.children.len() < 2 {
                return Ok(());
            }
            let li = if i > 0 { i - 1 } else { 0 };
            let sib = if i > 0 {
                p.children[i - 1]
            } else {
                p.children[i + 1]
            };
            (li, sib, p.keys.get(li).to_vec())
        };
        let sibling = self.store.get(sibling_id)?;
        let (left, right) = if i > 0 {
            (sibling, child)
        } else {
            (child, sibling)
        };
        let fix = {
            let mut lg = left.write();
            let mut rg = right.write();
            match (&mut *lg, &mut *rg) {
                (Node::Leaf(l), Node::Leaf(r)) => {
                    let fits = BLOCK_HEADER + l.bytes + r.bytes - LEAF_FIXED <= self.node_size;
                    l.append(r);
                    if fits || l.keys.len() < 2 {
                        self.leaves -= 1;
                        Fix::Merged
                    } else {
                        *r = l.split_off(l.byte_midpoint());
                        Fix::Moved(shortest_separator(
                            l.keys.last().expect("left half"),
                            r.keys.get(0),
                        ))
                    }
                }
                (Node::Internal(l), Node::Internal(r)) => {
                    let fits = BLOCK_HEADER + l.bytes + r.bytes - INTERNAL_FIXED
                        + node::sep_len(&sep)
                        <= self.node_size;
                    l.keys.push(sep);
                    l.keys.append(&mut r.keys);
                    l.children.append(&mut r.children);
                    l.recount();
                    if fits || l.children.len() < 4 {
                        self.internals -= 1;
                        Fix::Merged
                    } else {
                        let m = l.split_point();
                        r.keys = l.keys.split_off(m + 1);
                        let up = l.keys.pop().expect("split point has a key");
                        r.children = l.children.split_off(m + 1);
                        l.recount();
                        r.recount();
                        Fix::Moved(up)
                    }
                }
                _ => {
                    let at = self
                        .store
                        .pager()
                        .extent(parent.id())
                        .map_or(0, |e| e.offset);
                    return Err(Error::corruption(
                        self.store.pager().file_name(),
                        at,
                        format!("children of node {} are at different heights", parent.id()),
                    ));
                }
            }
        };
        match fix {
            Fix::Merged => {
                internal_mut(&mut parent.write()).remove_after(li);
                self.store.mark_dirty(&left);
                let right_id = right.id();
                drop(right);
                self.store.free(right_id);
            }
            Fix::Moved(up) => {
                {
                    let mut g = parent.write();
                    let p = internal_mut(&mut g);
                    p.keys.replace(li, up);
                    p.recount();
                }
                self.store.mark_dirty(&left);
                self.store.mark_dirty(&right);
            }
        }
        self.store.mark_dirty(parent);
        Ok(())
    }
}

impl Engine for BTree {
    fn name(&self) -> &'static str {
        "btree"
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let (leaf, _) = self.leaf_toward(Bound::Included(key), false)?;
        let val = {
            let g = leaf.read();
            let Node::Leaf(l) = &*g else {
                unreachable!("descent ends at a leaf")
            };
            match l.search(key) {
                Ok(i) => l.vals[i].clone(),
                Err(_) => return Ok(None),
            }
        };
        self.read_val(&val).map(Some)
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

    fn scan(
        &mut self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        reverse: bool,
        limit: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<()> {
        let mut cursor: Bound<Vec<u8>> = if reverse { hi } else { lo }.map(|k| k.to_vec());
        let mut taken = 0;
        loop {
            let (leaf, fence) = self.leaf_toward(cursor.as_ref().map(|k| k.as_slice()), reverse)?;
            let picked: Vec<(Vec<u8>, Val)> = {
                let g = leaf.read();
                let Node::Leaf(l) = &*g else {
                    unreachable!("descent ends at a leaf")
                };
                // Entries before the cursor: those < k when k is included, <= k when excluded.
                let pos = |k: &[u8], incl: bool| l.keys.rank(k, !incl);
                let mut v = Vec::new();
                if reverse {
                    let end = match &cursor {
                        Bound::Unbounded => l.keys.len(),
                        Bound::Included(k) => pos(k, false),
                        Bound::Excluded(k) => pos(k, true),
                    };
                    for i in (0..end).rev() {
                        if !above_lo(l.keys.get(i), lo) || taken + v.len() == limit {
                            break;
                        }
                        v.push((l.keys.get(i).to_vec(), l.vals[i].clone()));
                    }
                } else {
                    let start = match &cursor {
                        Bound::Unbounded => 0,
                        Bound::Included(k) => pos(k, true),
                        Bound::Excluded(k) => pos(k, false),
                    };
                    for i in start..l.keys.len() {
                        if !below_hi(l.keys.get(i), hi) || taken + v.len() == limit {
                            break;
                        }
                        v.push((l.keys.get(i).to_vec(), l.vals[i].clone()));
                    }
                }
                v
            };
            drop(leaf);
            taken += picked.len();
            for (k, v) in picked {
                let v = self.read_val(&v)?;
                out.push((k, v));
            }
            match next_cursor(fence, lo, hi, reverse, taken >= limit) {
                Some(next) => cursor = next,
                None => return Ok(()),
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
        let mut report = CheckReport::default();
        let pager = self.store.pager();
        pager.verify_extents()?;
        for id in pager.ids() {
            pager.read_block(id)?;
            report.blocks_verified += 1;
        }
        let mut walk = Walk {
            report,
            depth_seen: None,
            live_bytes: 0,
            reachable: Default::default(),
        };
        self.walk(self.root, None, None, 1, &mut walk)?;
        let mut report = walk.report;
        let file = self.store.pager().file_name().to_string();
        let bad = |what: String| Error::corruption(&file, 0, what);
        report.height = self.height;
        if (report.keys, walk.live_bytes) != (self.live_keys, self.live_bytes) {
            return Err(bad(format!(
                "tree holds {} keys / {} bytes, metadata says {} / {}",
                report.keys, walk.live_bytes, self.live_keys, self.live_bytes
            )));
        }
        if (report.leaf_nodes, report.internal_nodes, report.blobs)
            != (self.leaves, self.internals, self.blobs)
        {
            return Err(bad(format!(
                "found {} leaves, {} internal nodes, {} blobs; metadata says {}, {}, {}",
                report.leaf_nodes,
                report.internal_nodes,
                report.blobs,
                self.leaves,
                self.internals,
                self.blobs
            )));
        }
        for id in self.store.pager().ids() {
            if !walk.reachable.contains(&id) {
                return Err(bad(format!(
                    "node {id} is in the translation table but unreachable"
                )));
            }
        }
        Ok(report)
    }

    fn device(&self) -> &Arc<dyn Device> {
        self.store.pager().device()
    }

    fn salvage(&mut self, out: &mut Sink<'_>, lost: &mut Vec<Damage>) -> Result<()> {
        let mut w = salvage::Walk::new(out, lost);
        self.salvage_node(self.root, None, None, Some(1), &mut w)?;
        self.salvage_below_holes(&mut w)
    }
}

// ---- salvage: the tolerant walk -----------------------------------------------------------

impl BTree {
    /// Copy out the readable entries of node `id`, whose keys lie in [lo, hi), at `depth` (the
    /// root's is 1; `None` when unknown: a node found below a damaged one). A node that does not
    /// read becomes a hole in the key space, looked for later below it.
    fn salvage_node(
        &mut self,
        id: NodeId,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        depth: Option<u32>,
        w: &mut salvage::Walk<'_, ()>,
    ) -> Result<()> {
        let what = match depth {
            Some(d) if d == self.height => "leaf",
            Some(_) => "internal node",
            None => "node",
        };
        if !w.seen.insert(id) {
            let e = self.corrupt_node(id, "reached twice in one walk".into());
            w.lose(Damage::new(what, Some(id), e).keys(lo, hi));
            return Ok(());
        }
        let node = match self.store.get(id) {
            Ok(pin) => pin.read().clone(),
            Err(e) => {
                w.hole(Damage::new(what, Some(id), e).keys(lo, hi), ());
                return Ok(());
            }
        };
        let is_leaf = matches!(node, Node::Leaf(_));
        if let Some(d) = depth.filter(|&d| is_leaf != (d == self.height)) {
            let e = self.corrupt_node(
                id,
                format!("at depth {d} of a tree of height {}", self.height),
            );
            w.hole(Damage::new(what, Some(id), e).keys(lo, hi), ());
            return Ok(());
        }
        match node {
            Node::Leaf(l) => {
                for (k, v) in l.keys.iter().zip(&l.vals) {
                    // Outside its parent's range, an entry is not this checkpoint's.
                    if !salvage::in_range(k, lo, hi) {
                        continue;
                    }
                    match self.read_val(v) {
                        Ok(bytes) => w.emit(k, &bytes)?,
                        Err(e) => {
                            let blob = match v {
                                Val::Blob { id, .. } => Some(*id),
                                Val::Inline(_) => None,
                            };
                            w.lose(Damage::new("blob", blob, e).key(k));
                        }
                    }
                }
                self.store.evict_to_budget()?;
            }
            Node::Internal(n) => {
                for (i, &c) in n.children.iter().enumerate() {
                    let clo = (i > 0).then(|| n.keys.get(i - 1));
                    let chi = (i < n.keys.len()).then(|| n.keys.get(i));
                    let (clo, chi) = salvage::narrow(lo, hi, clo, chi);
                    self.salvage_node(c, clo, chi, depth.map(|d| d + 1), w)?;
                }
            }
        }
        Ok(())
    }

    fn corrupt_node(&self, id: NodeId, what: String) -> Error {
        let pager = self.store.pager();
        Error::corruption(
            pager.file_name(),
            pager.offset_of(id),
            format!("node {id}: {what}"),
        )
    }

    /// The nodes of the table the walk never reached lie below damaged nodes: walk each
    /// subtree whose top was not reached either, within the hole its keys fall in.
    fn salvage_below_holes(&mut self, w: &mut salvage::Walk<'_, ()>) -> Result<()> {
        if w.holes.is_empty() {
            return Ok(());
        }
        let unreached: Vec<NodeId> = self
            .store
            .pager()
            .ids()
            .into_iter()
            .filter(|id| !w.seen.contains(id))
            .collect();
        // (node, a key inside it), and every node some unreached node points to.
        let mut tops = Vec::new();
        let mut below = HashSet::new();
        for id in unreached {
            // The kind byte, unchecked: only tree nodes matter (blobs are read through their
            // leaves), and loading one checks everything.
            let tree = self
                .store
                .pager()
                .read_part(id, 20, 1)
                .is_ok_and(|b| b[0] == node::KIND_LEAF || b[0] == node::KIND_INTERNAL);
            if !tree {
                continue;
            }
            match self.store.get(id) {
                Ok(pin) => {
                    let key = match &*pin.read() {
                        Node::Internal(n) => {
                            below.extend(n.children.iter().copied());
                            n.keys.first().map(<[u8]>::to_vec)
                        }
                        Node::Leaf(l) => l.keys.first().map(<[u8]>::to_vec),
                    };
                    tops.push((id, key));
                }
                Err(e) => {
                    w.seen.insert(id);
                    w.lose(Damage::new("node below a damaged node", Some(id), e));
                }
            }
        }
        for (id, key) in tops {
            if below.contains(&id) {
                continue;
            }
            // An empty node holds nothing; a node under no hole is no part of this checkpoint.
            let Some(h) = key.and_then(|k| w.hole_of(&k)) else {
                continue;
            };
            let range = w.holes[h].range.clone();
            let before = w.copied;
            self.salvage_node(id, range.lo.as_deref(), range.hi.as_deref(), None, w)?;
            let damage = w.holes[h].damage;
            w.lost[damage].recovered += w.copied - before;
        }
        Ok(())
    }
}

struct Walk {
    report: CheckReport,
    depth_seen: Option<u32>,
    live_bytes: u64,
    reachable: std::collections::HashSet<NodeId>,
}

impl BTree {
    fn walk(
        &mut self,
        id: NodeId,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        depth: u32,
        w: &mut Walk,
    ) -> Result<()> {
        let file = self.store.pager().file_name().to_string();
        let at = self.store.pager().extent(id).map_or(0, |e| e.offset);
        let bad = |what: String| Error::corruption(&file, at, format!("node {id}: {what}"));
        w.reachable.insert(id);
        let pin = self.store.get(id)?;
        let is_root = id == self.root;
        let node = pin.read().clone();
        drop(pin);
        let keys = match &node {
            Node::Leaf(l) => &l.keys,
            Node::Internal(n) => &n.keys,
        };
        if keys.iter().zip(keys.iter().skip(1)).any(|(a, b)| a >= b) {
            return Err(bad("keys out of order".into()));
        }
        if let (Some(lo), Some(first)) = (lo, keys.first()) {
            if first < lo {
                return Err(bad("key below its lower fence".into()));
            }
        }
        if let (Some(hi), Some(last)) = (hi, keys.last()) {
            if last >= hi {
                return Err(bad("key at or above its upper fence".into()));
            }
        }
        match node {
            Node::Leaf(l) => {
                if l.keys.is_empty() && !is_root {
                    return Err(bad("empty non-root leaf".into()));
                }
                if *w.depth_seen.get_or_insert(depth) != depth || depth != self.height {
                    return Err(bad(format!(
                        "leaf at depth {depth}, tree height {}",
                        self.height
                    )));
                }
                w.report.leaf_nodes += 1;
                w.report.keys += l.keys.len() as u64;
                for (k, v) in l.keys.iter().zip(&l.vals) {
                    w.live_bytes += (k.len() + v.logical_len()) as u64;
                    if let Val::Blob { id, .. } = v {
                        w.reachable.insert(*id);
                        w.report.blobs += 1;
                        self.read_val(v)?;
                    }
                }
            }
            Node::Internal(n) => {
                if n.children.len() < 2 {
                    return Err(bad("internal node with fewer than two children".into()));
                }
                w.report.internal_nodes += 1;
                for (i, &c) in n.children.iter().enumerate() {
                    let clo = if i == 0 { lo } else { Some(n.keys.get(i - 1)) };
                    let chi = if i == n.keys.len() {
                        hi
                    } else {
                        Some(n.keys.get(i))
                    };
                    self.walk(c, clo, chi, depth + 1, w)?;
                }
            }
        }
        Ok(())
    }
}
