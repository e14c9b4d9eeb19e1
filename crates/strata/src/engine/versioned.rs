//! `VersionedEngine`: what the `VersionedDb` facade needs from a versioned dictionary (seed
//! 003), and `VersionedMap`, the reference semantics every such engine is tested against.
//!
//! It is an extension of `Engine`'s vocabulary rather than a subtrait: the checkpoint methods
//! are `Engine`'s (same `Commit`, same protocol, driven by the facade), but every read and
//! write names a version, so `Engine`'s unversioned calls have no meaning here.
//!
//! Semantics (the tree's rules are in `versions`): `get_at(v, k)` is the value written for `k`
//! at the nearest ancestor-or-self of `v` that wrote `k`, a delete being a write of nothing;
//! `scan_with` hands a visitor what `get_at` would give for each key of a range, in order and
//! borrowed (`scan_at` copies it out); bad versions are refused with `Error::BadVersion` before
//! anything changes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::Arc;

use super::versions::{Version, VersionTree};
use super::{CheckReport, EngineStats};
use crate::error::Result;
use crate::kv::within;
use crate::storage::{Commit, Device};

/// One key whose value differs between two versions: its value at the first and at the
/// second (None: absent).
pub type DiffEntry = (Vec<u8>, Option<Vec<u8>>, Option<Vec<u8>>);

/// A versioned engine's reads through `&self` (`VersionedEngine::shared`), so that
/// `VersionedDb`'s readers run side by side, holding its state shared; writes hold it alone.
/// What a read keeps for the next (the SDA's heads, block cache and kept runs; the copy-on-write
/// B-tree's pool) is behind locks of its own, never held across a device read.
pub trait VersionedReads: Sync {
    /// The version tree (reads only).
    fn version_tree(&self) -> &VersionTree;
    /// Whether memory holds more than its budget: what shared reads could not evict (dirty
    /// nodes), for `VersionedEngine::settle` to write back.
    fn over_budget(&self) -> bool;
    fn get_at_shared(&self, v: Version, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Hand each entry of `v` within (`lo`, `hi`) to `visit`, ascending or (with `reverse`)
    /// descending, until it returns false. The key and value are borrowed from the engine's
    /// own memory (a block, a node, the write buffer): nothing is allocated per entry. A bad
    /// `v` is refused before anything is visited.
    fn scan_with_shared(
        &self,
        v: Version,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        reverse: bool,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()>;
    /// Append to `out` up to `limit` entries of `v` within (`lo`, `hi`), ascending or (with
    /// `reverse`) descending: `scan_with_shared`, copied out.
    fn scan_at_shared(
        &self,
        v: Version,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        reverse: bool,
        limit: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<()> {
        self.version_tree().check_live(v)?;
        if limit == 0 {
            return Ok(());
        }
        let mut taken = 0;
        out.reserve(limit.min(1024));
        self.scan_with_shared(v, lo, hi, reverse, &mut |k, x| {
            out.push((k.to_vec(), x.to_vec()));
            taken += 1;
            taken < limit
        })
    }
    /// Keys within (`lo`, `hi`) whose values at `v` and `w` differ, ascending.
    fn diff_shared(
        &self,
        v: Version,
        w: Version,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
    ) -> Result<Vec<DiffEntry>> {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        self.scan_at_shared(v, lo, hi, false, usize::MAX, &mut a)?;
        self.scan_at_shared(w, lo, hi, false, usize::MAX, &mut b)?;
        Ok(diff_sorted(a, b))
    }
}

/// The reads below are `VersionedReads`' through `shared`, for a caller holding the engine
/// alone (tests, tools); `VersionedDb` calls `shared` itself.
pub trait VersionedEngine: Send + Sync {
    fn name(&self) -> &'static str;
    fn versions(&self) -> &VersionTree;
    /// The engine's reads through `&self`.
    fn shared(&self) -> &dyn VersionedReads;
    /// A new leaf under `v` (which becomes internal); its number is `versions().next_version()`.
    fn clone_version(&mut self, v: Version) -> Result<Version>;
    fn put_at(&mut self, v: Version, key: &[u8], value: &[u8]) -> Result<()>;
    fn delete_at(&mut self, v: Version, key: &[u8]) -> Result<()>;
    fn get_at(&mut self, v: Version, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.shared().get_at_shared(v, key)
    }
    fn scan_with(
        &mut self,
        v: Version,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        reverse: bool,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        self.shared().scan_with_shared(v, lo, hi, reverse, visit)
    }
    fn scan_at(
        &mut self,
        v: Version,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        reverse: bool,
        limit: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<()> {
        self.shared().scan_at_shared(v, lo, hi, reverse, limit, out)
    }
    /// Delete `v`; what no live version can reach any more is reclaimed (at once or by later
    /// merges, as the engine documents).
    fn delete_version(&mut self, v: Version) -> Result<()>;
    fn diff(
        &mut self,
        v: Version,
        w: Version,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
    ) -> Result<Vec<DiffEntry>> {
        self.shared().diff_shared(v, w, lo, hi)
    }
    /// As `Engine::begin_checkpoint`: the state now, covering log records up to `wal_seq`.
    fn begin_checkpoint(&mut self, wal_seq: u64) -> Result<Commit>;
    fn finish_checkpoint(&mut self, c: Commit) -> Result<()>;
    fn checkpoint(&mut self, wal_seq: u64) -> Result<()> {
        let mut c = self.begin_checkpoint(wal_seq)?;
        c.make_durable()?;
        self.finish_checkpoint(c)
    }
    /// Between operations: flush a full write buffer and run the merges due.
    fn settle(&mut self) -> Result<()>;
    /// Right after a completed checkpoint, when closing: move blocks out of the file's tail
    /// into the holes below them (`Engine::relocate_tail`), once no merge is running whose
    /// output could lie in that tail. Returns the bytes moved.
    fn relocate_tail(&mut self) -> Result<u64>;
    /// Right after a completed checkpoint, when closing: give the data file's free extents
    /// back to the file system (`Engine::release_free`). Returns the bytes.
    fn release_free(&mut self) -> Result<u64>;
    /// Run every merge due, waiting for any running on a thread of its own: what a close
    /// leaves is then settled (the SDA's; an engine without merges has nothing to do).
    fn finish_merges(&mut self) -> Result<()> {
        Ok(())
    }
    fn stats(&self) -> EngineStats;
    /// Verify every block's checksum and the structure's invariants.
    fn check(&mut self) -> Result<CheckReport>;
    /// The structure, `levels` of it (0: all), as `Engine::dump` gives a plain engine's.
    fn dump(&mut self, levels: u32) -> Result<super::dump::Dump>;
    fn device(&self) -> &Arc<dyn Device>;
}

/// The keys of two ascending, duplicate-free listings whose values differ.
pub fn diff_sorted(a: Vec<(Vec<u8>, Vec<u8>)>, b: Vec<(Vec<u8>, Vec<u8>)>) -> Vec<DiffEntry> {
    let mut out = Vec::new();
    let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
    loop {
        let order = match (a.peek(), b.peek()) {
            (None, None) => return out,
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some(x), Some(y)) => x.0.cmp(&y.0),
        };
        match order {
            std::cmp::Ordering::Less => {
                let (k, v) = a.next().expect("peeked");
                out.push((k, Some(v), None));
            }
            std::cmp::Ordering::Greater => {
                let (k, v) = b.next().expect("peeked");
                out.push((k, None, Some(v)));
            }
            std::cmp::Ordering::Equal => {
                let ((k, x), (_, y)) = (a.next().expect("peeked"), b.next().expect("peeked"));
                if x != y {
                    out.push((k, Some(x), Some(y)));
                }
            }
        }
    }
}

/// The reference: the tree, and each version's own writes in a map (None: a delete). A read
/// walks from the version to the root and takes the first write of its key. Deleting a version
/// drops the writes of the versions the tree removes.
#[derive(Clone, Debug, Default)]
pub struct VersionedMap {
    tree: VersionTree,
    writes: HashMap<Version, BTreeMap<Vec<u8>, Option<Vec<u8>>>>,
}

impl VersionedMap {
    pub fn new() -> VersionedMap {
        VersionedMap::default()
    }

    pub fn versions(&self) -> &VersionTree {
        &self.tree
    }

    pub fn clone_version(&mut self, v: Version) -> Result<Version> {
        self.tree.clone_version(v)
    }

    pub fn put_at(&mut self, v: Version, key: &[u8], value: &[u8]) -> Result<()> {
        self.tree.check_writable(v)?;
        self.writes
            .entry(v)
            .or_default()
            .insert(key.to_vec(), Some(value.to_vec()));
        Ok(())
    }

    pub fn delete_at(&mut self, v: Version, key: &[u8]) -> Result<()> {
        self.tree.check_writable(v)?;
        self.writes.entry(v).or_default().insert(key.to_vec(), None);
        Ok(())
    }

    pub fn get_at(&self, v: Version, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.tree.check_live(v)?;
        for x in self.tree.ancestry(v) {
            if let Some(w) = self.writes.get(&x).and_then(|m| m.get(key)) {
                return Ok(w.clone());
            }
        }
        Ok(None)
    }

    /// Every entry of `v` within (`lo`, `hi`), ascending.
    pub fn range_at(
        &self,
        v: Version,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.tree.check_live(v)?;
        let mut seen: BTreeMap<&[u8], &Option<Vec<u8>>> = BTreeMap::new();
        // Nearest first: a key's first write found wins.
        for x in self.tree.ancestry(v) {
            for (k, w) in self.writes.get(&x).into_iter().flatten() {
                if within(k, lo, hi) {
                    seen.entry(k.as_slice()).or_insert(w);
                }
            }
        }
        Ok(seen
            .into_iter()
            .filter_map(|(k, w)| w.as_ref().map(|w| (k.to_vec(), w.clone())))
            .collect())
    }

    pub fn delete_version(&mut self, v: Version) -> Result<()> {
        for x in self.tree.delete(v)? {
            self.writes.remove(&x);
        }
        Ok(())
    }

    pub fn diff(
        &self,
        v: Version,
        w: Version,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
    ) -> Result<Vec<DiffEntry>> {
        Ok(diff_sorted(
            self.range_at(v, lo, hi)?,
            self.range_at(w, lo, hi)?,
        ))
    }

    /// The (key, version) pairs a fully merged store keeps: every value that is the nearest
    /// write of its key for some live version, and every such delete that hides one of those
    /// values (one written at a proper ancestor of the delete's version). A delete hiding
    /// nothing kept can go: reads find nothing either way.
    pub fn needed(&self) -> BTreeSet<(Vec<u8>, Version)> {
        let mut nearest: BTreeMap<(Vec<u8>, Version), bool> = BTreeMap::new();
        for w in self.tree.live() {
            let mut seen = BTreeSet::new();
            for x in self.tree.ancestry(w) {
                for (k, val) in self.writes.get(&x).into_iter().flatten() {
                    if seen.insert(k.clone()) {
                        nearest.insert((k.clone(), x), val.is_some());
                    }
                }
            }
        }
        let hides_a_value = |k: &Vec<u8>, x: Version| {
            nearest.iter().any(|((key, y), &value)| {
                value && key == k && *y != x && self.tree.is_ancestor_or_self(*y, x)
            })
        };
        nearest
            .iter()
            .filter(|((k, x), &value)| value || hides_a_value(k, *x))
            .map(|(kx, _)| kx.clone())
            .collect()
    }

    /// Writes kept (a version's writes are dropped when the tree removes it): what a fully
    /// merged engine may store at most.
    pub fn stored_writes(&self) -> usize {
        self.writes.values().map(|m| m.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::versions::ROOT;
    use std::ops::Bound::Unbounded;

    #[test]
    fn the_reference_follows_the_nearest_ancestor_rule() {
        let mut m = VersionedMap::new();
        m.put_at(ROOT, b"a", b"0").unwrap();
        m.put_at(ROOT, b"b", b"0").unwrap();
        let x = m.clone_version(ROOT).unwrap();
        let y = m.clone_version(ROOT).unwrap();
        assert!(m.put_at(ROOT, b"c", b"0").is_err(), "frozen by the clone");
        m.delete_at(x, b"a").unwrap();
        m.put_at(y, b"b", b"y").unwrap();
        assert_eq!(m.get_at(x, b"a").unwrap(), None);
        assert_eq!(m.get_at(y, b"a").unwrap(), Some(b"0".to_vec()));
        assert_eq!(
            m.range_at(x, Unbounded, Unbounded).unwrap(),
            vec![(b"b".to_vec(), b"0".to_vec())]
        );
        assert_eq!(
            m.diff(x, y, Unbounded, Unbounded).unwrap(),
            vec![
                (b"a".to_vec(), None, Some(b"0".to_vec())),
                (b"b".to_vec(), Some(b"0".to_vec()), Some(b"y".to_vec())),
            ]
        );
        m.delete_version(y).unwrap();
        assert!(m.get_at(y, b"a").is_err());
        assert_eq!(m.stored_writes(), 3);
    }
}
