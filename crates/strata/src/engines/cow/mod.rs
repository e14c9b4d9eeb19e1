//! The copy-on-write B-tree with clones (Rodeh, "B-trees, shadowing, and clones"): the baseline
//! the SDA is measured against (seed 003 §3). Every live version has a root; nodes are shared
//! between versions' trees and carry reference counts.
//!
//! - `clone(v) -> w`: w gets v's root and the root's count goes up (lazy: nothing is copied).
//! - A write at v descends from v's root shadowing each node on its path: a node whose count is
//!   1 belongs to v alone and is changed in place (the pager writes it copy-on-write at the
//!   next checkpoint or eviction anyway); a shared one is copied, each of the copy's children
//!   gains a count, the original loses one, and the parent points at the copy.
//! - Leaves split past `leaf_entries`, internal nodes past `fanout`. A key delete removes the
//!   entry and an emptied node from its parent; there is no rebalancing of underfull nodes,
//!   and a root left with one child is replaced by it. Deletes need no tombstones.
//! - `delete_version(v)`: v's root loses a count; a node whose count reaches 0 is freed and its
//!   children lose one each, recursively.
//!
//! Invariants (checked by `check`, and in debug builds after every change): a node's count is
//! the number of pointers to it from roots and internal nodes; every node in the translation
//! table is reachable from a root; keys are sorted within nodes and within their parents'
//! separators. Durability is the facade's (`VersionedDb`): a checkpoint writes the dirty nodes
//! and the manifest (the version tree, the roots and the counts).
//!
//! Files: `config`, `node` (the node and its encoding), `format` (metadata and manifest),
//! `dump`, `salvage` (the tolerant read and the import a salvage makes), this file (writes,
//! reads, check).

pub(crate) mod config;
mod dump;
mod format;
pub(crate) mod node;
mod salvage;

pub use config::Config;

use std::collections::{BTreeMap, HashSet};
use std::ops::Bound;
use std::sync::Arc;

use crate::engine::versioned::{VersionedEngine, VersionedReads};
use crate::engine::versions::{Version, VersionTree, ROOT};
use crate::engine::{check_reachable, CheckReport, EngineStats};
use crate::error::{Error, Result};
use crate::storage::{Checkpoint, Commit, Device, NodeId, NodeStore, Pager};
use node::Node;

/// The first byte of the engine metadata in the superblock.
pub const ENGINE_TAG: u8 = 5;

/// A node to visit in `walk`, with the bounds its parent's separators give its keys.
type Visit = (NodeId, Option<Vec<u8>>, Option<Vec<u8>>);

/// Child `i` (node `k`) of an internal node with separators `seps` whose own keys lie in
/// [`lo`, `hi`): the child's bounds are its neighbouring separators, or its parent's at the
/// ends.
fn child_visit(
    k: NodeId,
    i: usize,
    seps: &[Vec<u8>],
    lo: &Option<Vec<u8>>,
    hi: &Option<Vec<u8>>,
) -> Visit {
    let clo = if i == 0 {
        lo.clone()
    } else {
        Some(seps[i - 1].clone())
    };
    let chi = if i == seps.len() {
        hi.clone()
    } else {
        Some(seps[i].clone())
    };
    (k, clo, chi)
}

pub struct CowTree {
    store: NodeStore<Node>,
    cfg: Config,
    tree: VersionTree,
    roots: BTreeMap<Version, NodeId>,
    counts: BTreeMap<NodeId, u32>,
    manifest: NodeId,
    copies: u64,
    frees: u64,
}

impl CowTree {
    pub fn create(mut pager: Pager, cfg: Config) -> Result<CowTree> {
        cfg.check()?;
        let manifest = pager.new_id();
        let mut t = CowTree {
            store: NodeStore::new(pager, cfg.cache_bytes),
            cfg,
            tree: VersionTree::new(),
            roots: BTreeMap::new(),
            counts: BTreeMap::new(),
            manifest,
            copies: 0,
            frees: 0,
        };
        let root = t.store.create(Node::Leaf(Vec::new()))?.id();
        t.counts.insert(root, 1);
        t.roots.insert(ROOT, root);
        t.checkpoint(0)?;
        Ok(t)
    }

    pub fn open(pager: Pager, cp: &Checkpoint) -> Result<CowTree> {
        let (cfg, manifest) = format::decode_meta(&cp.engine_meta, pager.file_name())?;
        let (tree, roots, counts) = pager.read_decoded(
            manifest,
            node::KIND_MANIFEST,
            "CoW B-tree manifest",
            format::decode_manifest,
        )?;
        Ok(CowTree {
            store: NodeStore::new(pager, cfg.cache_bytes),
            cfg,
            tree,
            roots,
            counts,
            manifest,
            copies: 0,
            frees: 0,
        })
    }

    pub fn config(&self) -> Config {
        self.cfg
    }

    /// Put into version `v`'s tree, shadowing its path (no check that `v` takes writes).
    fn put_in(&mut self, v: Version, key: &[u8], value: &[u8]) -> Result<()> {
        let root = self.shadow(self.roots[&v])?;
        self.roots.insert(v, root);
        if let Some((sep, right)) = self.insert(root, key, value)? {
            let up = self.create_node(Node::Internal {
                seps: vec![sep],
                kids: vec![root, right],
            })?;
            self.roots.insert(v, up);
        }
        Ok(())
    }

    /// Delete from version `v`'s tree, shadowing its path (no check that `v` takes writes).
    fn delete_in(&mut self, v: Version, key: &[u8]) -> Result<()> {
        // Nothing to copy for a key that is not there.
        if self.lookup(v, key)?.is_none() {
            return Ok(());
        }
        let root = self.shadow(self.roots[&v])?;
        self.roots.insert(v, root);
        let emptied = self.remove(root, key)?;
        match self.load(root)? {
            Node::Internal { kids, .. } if emptied => {
                debug_assert!(kids.is_empty());
                self.release(root)?;
                let leaf = self.create_node(Node::Leaf(Vec::new()))?;
                self.roots.insert(v, leaf);
            }
            Node::Internal { kids, .. } if kids.len() == 1 => {
                // The only child takes the root's place and its pointer.
                self.counts.remove(&root);
                self.store.free(root);
                self.frees += 1;
                self.roots.insert(v, kids[0]);
            }
            _ => {}
        }
        Ok(())
    }

    fn load(&mut self, id: NodeId) -> Result<Node> {
        Ok(self.store.get(id)?.read().clone())
    }

    fn save(&mut self, id: NodeId, node: Node) -> Result<()> {
        let pin = self.store.get(id)?;
        *pin.write() = node;
        self.store.mark_dirty(&pin);
        Ok(())
    }

    fn create_node(&mut self, node: Node) -> Result<NodeId> {
        let id = self.store.create(node)?.id();
        self.counts.insert(id, 1);
        Ok(id)
    }

    /// `id` made private to the pointer being followed: itself if no other pointer shares it,
    /// else a copy (whose children each gain a count) that takes over this pointer's count.
    fn shadow(&mut self, id: NodeId) -> Result<NodeId> {
        let n = self.counts[&id];
        if n == 1 {
            return Ok(id);
        }
        let node = self.load(id)?;
        if let Node::Internal { kids, .. } = &node {
            for k in kids {
                *self.counts.get_mut(k).expect("counted") += 1;
            }
        }
        self.counts.insert(id, n - 1);
        self.copies += 1;
        self.create_node(node)
    }

    /// Drop one pointer to `id`; free what no pointer reaches any more.
    fn release(&mut self, id: NodeId) -> Result<()> {
        let mut stack = vec![id];
        while let Some(id) = stack.pop() {
            let n = self.counts[&id];
            if n > 1 {
                self.counts.insert(id, n - 1);
                continue;
            }
            if let Node::Internal { kids, .. } = self.load(id)? {
                stack.extend(kids);
            }
            self.counts.remove(&id);
            self.store.free(id);
            self.frees += 1;
        }
        Ok(())
    }

    /// Insert into private node `id`; returns the separator and right sibling of a split.
    fn insert(
        &mut self,
        id: NodeId,
        key: &[u8],
        value: &[u8],
    ) -> Result<Option<(Vec<u8>, NodeId)>> {
        let mut node = self.load(id)?;
        let split = match &mut node {
            Node::Leaf(es) => {
                match es.binary_search_by(|(k, _)| k.as_slice().cmp(key)) {
                    Ok(i) => es[i].1 = value.to_vec(),
                    Err(i) => es.insert(i, (key.to_vec(), value.to_vec())),
                }
                if es.len() > self.cfg.leaf_entries as usize {
                    let right = es.split_off(es.len() / 2);
                    let sep = right[0].0.clone();
                    Some((sep, Node::Leaf(right)))
                } else {
                    None
                }
            }
            Node::Internal { seps, kids } => {
                let i = Node::child_for(seps, key);
                let c = self.shadow(kids[i])?;
                kids[i] = c;
                if let Some((s, r)) = self.insert(c, key, value)? {
                    seps.insert(i, s);
                    kids.insert(i + 1, r);
                }
                if kids.len() > self.cfg.fanout as usize {
                    let mid = kids.len() / 2;
                    let right_kids = kids.split_off(mid);
                    let right_seps = seps.split_off(mid);
                    let up = seps.pop().expect("a separator left of mid");
                    Some((
                        up,
                        Node::Internal {
                            seps: right_seps,
                            kids: right_kids,
                        },
                    ))
                } else {
                    None
                }
            }
        };
        self.save(id, node)?;
        match split {
            Some((sep, right)) => Ok(Some((sep, self.create_node(right)?))),
            None => Ok(None),
        }
    }

    /// Remove `key` (present) under private node `id`; whether `id` is left empty.
    fn remove(&mut self, id: NodeId, key: &[u8]) -> Result<bool> {
        let mut node = self.load(id)?;
        let empty = match &mut node {
            Node::Leaf(es) => {
                if let Ok(i) = es.binary_search_by(|(k, _)| k.as_slice().cmp(key)) {
                    es.remove(i);
                }
                es.is_empty()
            }
            Node::Internal { seps, kids } => {
                let i = Node::child_for(seps, key);
                let c = self.shadow(kids[i])?;
                kids[i] = c;
                if self.remove(c, key)? {
                    kids.remove(i);
                    if !seps.is_empty() {
                        seps.remove(i.saturating_sub(1));
                    }
                    self.release(c)?;
                }
                kids.is_empty()
            }
        };
        self.save(id, node)?;
        Ok(empty)
    }

    fn lookup(&self, v: Version, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.tree.check_live(v)?;
        let mut id = self.roots[&v];
        loop {
            let pin = self.store.get_shared(id)?;
            let next = match &*pin.read() {
                Node::Leaf(es) => {
                    return Ok(es
                        .binary_search_by(|(k, _)| k.as_slice().cmp(key))
                        .ok()
                        .map(|i| es[i].1.clone()))
                }
                Node::Internal { seps, kids } => kids[Node::child_for(seps, key)],
            };
            id = next;
        }
    }

    /// Hand the entries of the subtree at `id` within (`lo`, `hi`) to `visit`, in the scan's
    /// direction, borrowed from the pinned nodes (a node is neither copied nor evicted while
    /// the walk is in it); false once `visit` has stopped the scan.
    fn visit_from(
        &self,
        id: NodeId,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        reverse: bool,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<bool> {
        let pin = self.store.get_shared(id)?;
        let node = pin.read();
        match &*node {
            Node::Leaf(es) => {
                // Sorted: the bounds cut one slice, and no entry in it is compared again.
                let from = match lo {
                    Bound::Included(l) => es.partition_point(|(k, _)| k.as_slice() < l),
                    Bound::Excluded(l) => es.partition_point(|(k, _)| k.as_slice() <= l),
                    Bound::Unbounded => 0,
                };
                let to = match hi {
                    Bound::Included(h) => es.partition_point(|(k, _)| k.as_slice() <= h),
                    Bound::Excluded(h) => es.partition_point(|(k, _)| k.as_slice() < h),
                    Bound::Unbounded => es.len(),
                };
                let es = &es[from..to.max(from)];
                let go = if reverse {
                    es.iter().rev().all(|(k, v)| visit(k, v))
                } else {
                    es.iter().all(|(k, v)| visit(k, v))
                };
                Ok(go)
            }
            Node::Internal { kids, .. } if kids.is_empty() => Ok(true),
            Node::Internal { seps, kids } => {
                // Child i holds [seps[i-1], seps[i]): those from the one `lo` falls in to
                // the one `hi` falls in.
                let first = match lo {
                    Bound::Included(l) | Bound::Excluded(l) => Node::child_for(seps, l),
                    Bound::Unbounded => 0,
                };
                let last = match hi {
                    Bound::Included(h) => Node::child_for(seps, h),
                    Bound::Excluded(h) => seps.partition_point(|s| s.as_slice() < h),
                    Bound::Unbounded => kids.len() - 1,
                };
                for j in 0..(last + 1).saturating_sub(first) {
                    let i = if reverse { last - j } else { first + j };
                    if !self.visit_from(kids[i], lo, hi, reverse, visit)? {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
        }
    }

    /// Pointers to each node from the roots and internal nodes, and the nodes' key order,
    /// walking every version's tree (each shared node once).
    fn walk(&self) -> Result<(BTreeMap<NodeId, u32>, u64)> {
        let mut indegree: BTreeMap<NodeId, u32> = BTreeMap::new();
        let mut seen = HashSet::new();
        let mut keys = 0;
        let roots: Vec<NodeId> = self.roots.values().copied().collect();
        let mut stack: Vec<Visit> = Vec::new();
        for r in roots {
            *indegree.entry(r).or_default() += 1;
            stack.push((r, None, None));
        }
        while let Some((id, lo, hi)) = stack.pop() {
            let node = self.store.inspect(id, Node::clone)?;
            let bad = |what: &str| {
                let pager = self.store.pager();
                Error::corruption(
                    pager.file_name(),
                    pager.offset_of(id),
                    format!("CoW B-tree node {id}: {what}"),
                )
            };
            let inside = |k: &[u8]| {
                lo.as_deref().is_none_or(|l| l <= k) && hi.as_deref().is_none_or(|h| k < h)
            };
            match &node {
                Node::Leaf(es) => {
                    if es.iter().any(|(k, _)| !inside(k)) {
                        return Err(bad("a key outside its parent's separators"));
                    }
                    if seen.insert(id) {
                        keys += es.len() as u64;
                    }
                }
                Node::Internal { seps, kids } => {
                    if seps.iter().any(|s| !inside(s)) || kids.len() != seps.len() + 1 {
                        return Err(bad("separators outside the parent's, or miscounted"));
                    }
                    let first = seen.insert(id);
                    for (i, &k) in kids.iter().enumerate() {
                        *indegree.entry(k).or_default() += first as u32;
                        if first {
                            stack.push(child_visit(k, i, seps, &lo, &hi));
                        }
                    }
                }
            }
        }
        Ok((indegree, keys))
    }

    /// The reference counts equal the pointers (debug builds check this after every change).
    fn verify_counts(&self) -> Result<u64> {
        let (indegree, keys) = self.walk()?;
        if indegree != self.counts {
            let pager = self.store.pager();
            return Err(Error::corruption(
                pager.file_name(),
                pager.offset_of(self.manifest),
                format!(
                    "CoW B-tree: reference counts {:?} differ from the pointers {:?}",
                    self.counts, indegree
                ),
            ));
        }
        Ok(keys)
    }

    fn after_change(&mut self) -> Result<()> {
        #[cfg(debug_assertions)]
        self.verify_counts()?;
        Ok(())
    }
}

/// Reads pin nodes through the pool's shared path (`NodeStore::get_shared`): a miss reads
/// without the pool's lock, and eviction drops clean nodes only; dirty victims wait for
/// `settle`.
impl VersionedReads for CowTree {
    fn version_tree(&self) -> &VersionTree {
        &self.tree
    }

    fn over_budget(&self) -> bool {
        self.store.over_budget()
    }

    fn get_at_shared(&self, v: Version, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.lookup(v, key)
    }

    fn scan_with_shared(
        &self,
        v: Version,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        reverse: bool,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        self.tree.check_live(v)?;
        let root = self.roots[&v];
        self.visit_from(root, lo, hi, reverse, visit).map(|_| ())
    }
}

impl VersionedEngine for CowTree {
    fn name(&self) -> &'static str {
        "cow"
    }

    fn versions(&self) -> &VersionTree {
        &self.tree
    }

    fn shared(&self) -> &dyn VersionedReads {
        self
    }

    fn clone_version(&mut self, v: Version) -> Result<Version> {
        let w = self.tree.clone_version(v)?;
        let root = self.roots[&v];
        *self.counts.get_mut(&root).expect("counted") += 1;
        self.roots.insert(w, root);
        self.after_change()?;
        Ok(w)
    }

    fn put_at(&mut self, v: Version, key: &[u8], value: &[u8]) -> Result<()> {
        self.tree.check_writable(v)?;
        self.put_in(v, key, value)?;
        self.after_change()
    }

    fn delete_at(&mut self, v: Version, key: &[u8]) -> Result<()> {
        self.tree.check_writable(v)?;
        self.delete_in(v, key)?;
        self.after_change()
    }

    fn delete_version(&mut self, v: Version) -> Result<()> {
        self.tree.delete(v)?;
        // Every live version has a root of its own: a deleted one needs none, ghost or not.
        if let Some(root) = self.roots.remove(&v) {
            self.release(root)?;
        }
        self.after_change()
    }

    fn begin_checkpoint(&mut self, wal_seq: u64) -> Result<Commit> {
        let manifest = format::encode_manifest(&self.tree, &self.roots, &self.counts);
        let id = self.manifest;
        self.store
            .pager_mut()
            .write_block(id, node::KIND_MANIFEST, &manifest)?;
        let meta = format::encode_meta(&self.cfg, self.manifest);
        self.store.begin_checkpoint(wal_seq, meta)
    }

    fn finish_checkpoint(&mut self, c: Commit) -> Result<()> {
        self.store.pager_mut().finish_commit(c)
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

    fn stats(&self) -> EngineStats {
        let mut s = EngineStats::substrate(&self.store);
        s.engine = "cow";
        s.geometry_origin = "given in the options";
        s.detail = vec![
            ("nodes", self.counts.len() as u64),
            (
                "shared_nodes",
                self.counts.values().filter(|&&n| n > 1).count() as u64,
            ),
            ("live_versions", self.tree.live().count() as u64),
            ("copies", self.copies),
            ("frees", self.frees),
        ];
        s
    }

    fn dump(&mut self, levels: u32) -> Result<crate::engine::dump::Dump> {
        self.dump_levels(levels)
    }

    fn check(&mut self) -> Result<CheckReport> {
        let keys = self.verify_counts()?;
        // Every written node is reachable, and reads back with its checksum.
        let mut reachable: HashSet<NodeId> = self.counts.keys().copied().collect();
        reachable.insert(self.manifest);
        check_reachable(self.store.pager(), &reachable)?;
        let mut blocks = 0;
        for id in self.store.pager().ids() {
            self.store.pager().read_block(id)?;
            blocks += 1;
        }
        Ok(CheckReport {
            blocks_verified: blocks,
            keys,
            detail: vec![("nodes", self.counts.len() as u64)],
            ..CheckReport::default()
        })
    }

    fn device(&self) -> &Arc<dyn Device> {
        self.store.pager().device()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::versioned::VersionedMap;
    use crate::storage::sim::{SimDevice, SimDisk};
    use std::ops::Bound::{Excluded, Included, Unbounded};

    fn fresh() -> CowTree {
        let disk = SimDisk::new(Default::default(), 0.0);
        CowTree::create(
            Pager::create(Arc::new(SimDevice::new("data", disk))),
            Config::tiny(),
        )
        .unwrap()
    }

    /// Clones share everything until written; deleting every version but one frees every node
    /// the survivor does not reach.
    #[test]
    fn clones_share_nodes_and_version_deletes_free_them() {
        let mut t = fresh();
        for k in 0..200u32 {
            t.put_at(ROOT, &k.to_be_bytes(), b"r").unwrap();
        }
        let nodes = t.counts.len();
        let a = t.clone_version(ROOT).unwrap();
        let b = t.clone_version(ROOT).unwrap();
        assert_eq!(t.counts.len(), nodes, "a clone copies nothing");
        t.put_at(a, &7u32.to_be_bytes(), b"a").unwrap();
        let path = t.counts.len() - nodes;
        assert!((2..=8).contains(&path), "one path copied: {path}");
        assert_eq!(
            t.get_at(b, &7u32.to_be_bytes()).unwrap(),
            Some(b"r".to_vec())
        );
        t.delete_at(b, &7u32.to_be_bytes()).unwrap();
        assert_eq!(t.get_at(b, &7u32.to_be_bytes()).unwrap(), None);
        assert_eq!(
            t.get_at(a, &7u32.to_be_bytes()).unwrap(),
            Some(b"a".to_vec())
        );
        t.delete_version(ROOT).unwrap();
        t.delete_version(b).unwrap();
        // Only `a`'s tree is left, unshared.
        assert!(t.counts.values().all(|&n| n == 1));
        t.checkpoint(1).unwrap();
        t.check().unwrap();
    }

    /// A visitor that returns false is not called again, from either end; bounds cut leaves
    /// at both ends; a bad version is refused before the visitor is called.
    #[test]
    fn a_visitor_that_stops_stops_the_scan() {
        let mut t = fresh();
        for k in 0..300u32 {
            t.put_at(ROOT, &k.to_be_bytes(), &[k as u8; 3]).unwrap();
        }
        let a = t.clone_version(ROOT).unwrap();
        t.delete_at(a, &1u32.to_be_bytes()).unwrap();
        for reverse in [false, true] {
            let mut seen = Vec::new();
            t.scan_with(a, Unbounded, Unbounded, reverse, &mut |k, x| {
                assert_eq!(x, [k[3]; 3]);
                seen.push(u32::from_be_bytes(k.try_into().unwrap()));
                seen.len() < 3
            })
            .unwrap();
            let want = if reverse {
                vec![299, 298, 297]
            } else {
                vec![0, 2, 3]
            };
            assert_eq!(seen, want, "reverse {reverse}");
            let (lo, hi) = (41u32.to_be_bytes(), 250u32.to_be_bytes());
            let mut seen = Vec::new();
            t.scan_with(a, Excluded(&lo), Included(&hi), reverse, &mut |k, _| {
                seen.push(u32::from_be_bytes(k.try_into().unwrap()));
                true
            })
            .unwrap();
            let mut want: Vec<u32> = (42..=250).collect();
            if reverse {
                want.reverse();
            }
            assert_eq!(seen, want, "reverse {reverse}");
        }
        let mut called = false;
        let got = t.scan_with(9, Unbounded, Unbounded, false, &mut |_, _| {
            called = true;
            true
        });
        assert!(matches!(got, Err(Error::BadVersion { version: 9, .. })));
        assert!(!called);
    }

    #[test]
    fn matches_the_reference_through_splits_and_reopens() {
        let mut t = fresh();
        let mut m = VersionedMap::new();
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut copies = 0;
        for step in 0..3000u64 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let live: Vec<Version> = m.versions().live().collect();
            let v = live[(rng >> 8) as usize % live.len()];
            let key = format!("k{:02}", (rng >> 20) % 50).into_bytes();
            let outcome = match rng % 100 {
                0..=59 => (
                    t.put_at(v, &key, &step.to_be_bytes()).is_ok(),
                    m.put_at(v, &key, &step.to_be_bytes()).is_ok(),
                ),
                60..=79 => (t.delete_at(v, &key).is_ok(), m.delete_at(v, &key).is_ok()),
                80..=84 => {
                    let (x, y) = (t.clone_version(v).unwrap(), m.clone_version(v).unwrap());
                    (x == y, true)
                }
                85..=86 if live.len() > 2 => {
                    (t.delete_version(v).is_ok(), m.delete_version(v).is_ok())
                }
                _ => (true, true),
            };
            assert_eq!(outcome.0, outcome.1, "step {step}");
            assert_eq!(
                t.get_at(v, &key).ok(),
                m.get_at(v, &key).ok(),
                "step {step}"
            );
            t.settle().unwrap();
            if step % 700 == 699 {
                copies += t.stats().detail("copies");
                t.checkpoint(step).unwrap();
                let dev = t.device().clone();
                drop(t);
                let (pager, cp) = Pager::open(dev).unwrap();
                t = CowTree::open(pager, &cp).unwrap();
                t.check().unwrap();
                for x in m.versions().live().collect::<Vec<_>>() {
                    for rev in [false, true] {
                        let mut got = Vec::new();
                        t.scan_at(x, Unbounded, Unbounded, rev, usize::MAX, &mut got)
                            .unwrap();
                        let mut want = m.range_at(x, Unbounded, Unbounded).unwrap();
                        if rev {
                            want.reverse();
                        }
                        assert_eq!(got, want);
                    }
                }
            }
        }
        // Shared nodes were shadowed (the counter restarts at each open).
        assert!(copies > 100, "{copies} copies");
    }

    /// The dump shows every node once, reached from the live versions' roots, each root with
    /// the versions it is the root of; a depth limit cuts the walk, not the height.
    #[test]
    fn the_dump_shows_each_shared_node_once_from_the_roots() {
        let mut t = fresh();
        for k in 0..200u32 {
            t.put_at(ROOT, &k.to_be_bytes(), b"root").unwrap();
        }
        let a = t.clone_version(ROOT).unwrap();
        let b = t.clone_version(ROOT).unwrap();
        t.put_at(a, &7u32.to_be_bytes(), b"a").unwrap();
        let d = t.dump(0).unwrap();
        let ids: HashSet<NodeId> = d.nodes.iter().map(|n| n.id).collect();
        assert_eq!(ids.len(), d.nodes.len(), "each node once");
        assert_eq!(ids, t.counts.keys().copied().collect::<HashSet<_>>());
        assert!(d.height >= 2, "{d:?}");
        let roots: Vec<(NodeId, Vec<Version>)> = d
            .nodes
            .iter()
            .filter(|n| !n.versions.is_empty())
            .map(|n| (n.id, n.versions.clone()))
            .collect();
        // b still shares the root's tree; a has a root of its own.
        assert_eq!(
            roots,
            vec![(t.roots[&ROOT], vec![ROOT, b]), (t.roots[&a], vec![a])]
        );
        assert!(d.nodes.iter().all(|n| n.level < d.height));
        let top = t.dump(1).unwrap();
        assert_eq!(top.height, d.height);
        assert!(top
            .nodes
            .iter()
            .all(|n| n.level == 0 && n.kind == "internal"));
        assert_eq!(top.nodes.len(), 2);
    }
}
