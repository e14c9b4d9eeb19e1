//! The version tree of a versioned dictionary (seed 003): pure, no IO. Every versioned engine
//! keeps one, and the facade's log records name its versions.
//!
//! A version is a number; version 0 is the root, made with the tree. `clone(v)` makes a new
//! child of `v` with the next number, so a child's number is always above its parent's: the
//! numbers order every chain from the root downwards, and along one chain the nearest
//! ancestor of a version is the ancestor with the largest number. Engines sort a key's
//! entries by version descending for that reason (a topological order that, unlike a DFS
//! numbering, never changes as the tree grows).
//!
//! Rules (each refused with `Error::BadVersion`, changing nothing):
//! - only a live leaf is writable; cloning a version freezes it for good (it stays internal
//!   even when its children are deleted), so what its clones inherited never changes;
//! - reads, clones and deletes need a live version.
//!
//! `delete(v)` marks `v` deleted. A deleted version with live descendants stays in the tree as
//! a ghost (its entries may still be the nearest for them, and ancestry runs through it); a
//! deleted version without children is removed, and so, in turn, is each deleted ancestor it
//! leaves childless. The removed versions are returned: every entry written at one of them is
//! unreachable from any live version and its space may be reclaimed. Entries of a ghost are
//! reclaimable only where a nearer entry hides them from every live descendant, which the
//! engines judge per key when they merge.
//!
//! Encoding (golden bytes in the tests): `next u64 | count u32 | per version, ascending:
//! id u64, parent u64 (u64::MAX for the root), flags u8 (1 deleted, 2 frozen)`. Decoding
//! checks that parents precede children, that there is at most one root and that a
//! ghost has children.

use std::collections::BTreeMap;

use crate::codec::{Reader, Writer};
use crate::error::{Error, Result};

/// A version of a versioned dictionary.
pub type Version = u64;

/// The version every tree starts with.
pub const ROOT: Version = 0;

const NO_PARENT: u64 = u64::MAX;
const DELETED: u8 = 1;
const FROZEN: u8 = 2;

#[derive(Clone, Debug, PartialEq, Eq)]
struct Node {
    parent: Option<Version>,
    children: Vec<Version>,
    deleted: bool,
    frozen: bool,
}

/// What a caller may learn of one version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionInfo {
    pub version: Version,
    pub parent: Option<Version>,
    pub children: Vec<Version>,
    /// Deleted, kept only because a live descendant reads through it.
    pub deleted: bool,
    /// Writable: live and never cloned.
    pub leaf: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionTree {
    nodes: BTreeMap<Version, Node>,
    next: Version,
    /// `spans`, made at the first ask after a change: every flush and merge asks.
    spans: SpansOnce,
}

/// The tree's labels once made; no part of what the tree is (equal trees, whatever made).
#[derive(Clone, Debug, Default)]
struct SpansOnce(std::sync::OnceLock<Spans>);

impl PartialEq for SpansOnce {
    fn eq(&self, _: &SpansOnce) -> bool {
        true
    }
}

impl Eq for SpansOnce {}

impl Default for VersionTree {
    fn default() -> VersionTree {
        VersionTree::new()
    }
}

fn bad(version: Version, why: &str) -> Error {
    Error::BadVersion {
        version,
        why: why.to_string(),
    }
}

/// `VersionTree::spans`: each version's depth-first interval.
#[derive(Clone, Debug)]
pub struct Spans(Vec<(u32, u32)>);

impl Spans {
    /// Whether `a` is `v` or one of its ancestors (`v` in the tree the spans were taken of).
    pub fn is_ancestor_or_self(&self, a: Version, v: Version) -> bool {
        let (Some(&(enter, exit)), Some(&(at, _))) =
            (self.0.get(a as usize), self.0.get(v as usize))
        else {
            return false;
        };
        enter <= at && at < exit
    }

    /// `v`'s label and one past its subtree's last (`v` and its descendants label within);
    /// an empty span for a version not in the tree.
    pub fn span(&self, v: Version) -> (u32, u32) {
        self.0.get(v as usize).copied().unwrap_or((u32::MAX, 0))
    }
}

impl VersionTree {
    /// A tree of one writable version, `ROOT`.
    pub fn new() -> VersionTree {
        let mut nodes = BTreeMap::new();
        nodes.insert(
            ROOT,
            Node {
                parent: None,
                children: Vec::new(),
                deleted: false,
                frozen: false,
            },
        );
        VersionTree {
            nodes,
            next: 1,
            spans: SpansOnce::default(),
        }
    }

    /// The number the next clone gets.
    pub fn next_version(&self) -> Version {
        self.next
    }

    /// Whether `v` is live (made, and not deleted).
    pub fn is_live(&self, v: Version) -> bool {
        self.nodes.get(&v).is_some_and(|n| !n.deleted)
    }

    /// Whether `v` is in the tree, live or a ghost.
    pub fn contains(&self, v: Version) -> bool {
        self.nodes.contains_key(&v)
    }

    /// `v` is live, or the error that says why not.
    pub fn check_live(&self, v: Version) -> Result<()> {
        match self.nodes.get(&v) {
            Some(n) if !n.deleted => Ok(()),
            Some(_) => Err(bad(v, "deleted")),
            None if v < self.next => Err(bad(v, "deleted")),
            None => Err(bad(v, "no such version")),
        }
    }

    /// `v` is a live leaf, which alone takes writes.
    pub fn check_writable(&self, v: Version) -> Result<()> {
        self.check_live(v)?;
        if self.nodes[&v].frozen {
            return Err(bad(
                v,
                "an internal version (it has been cloned); write to a leaf version",
            ));
        }
        Ok(())
    }

    /// Make a new leaf under `v`, which becomes internal.
    pub fn clone_version(&mut self, v: Version) -> Result<Version> {
        self.check_live(v)?;
        self.spans = SpansOnce::default();
        let w = self.next;
        self.next += 1;
        let parent = self.nodes.get_mut(&v).expect("checked live");
        parent.frozen = true;
        parent.children.push(w);
        self.nodes.insert(
            w,
            Node {
                parent: Some(v),
                children: Vec::new(),
                deleted: false,
                frozen: false,
            },
        );
        Ok(w)
    }

    /// Delete `v`; returns the versions removed from the tree (see the module comment), whose
    /// entries no live version can reach.
    pub fn delete(&mut self, v: Version) -> Result<Vec<Version>> {
        self.check_live(v)?;
        self.spans = SpansOnce::default();
        self.nodes.get_mut(&v).expect("checked live").deleted = true;
        let mut removed = Vec::new();
        let mut at = Some(v);
        while let Some(x) = at {
            let n = &self.nodes[&x];
            if !(n.deleted && n.children.is_empty()) {
                break;
            }
            let parent = n.parent;
            self.nodes.remove(&x);
            removed.push(x);
            if let Some(p) = parent {
                self.nodes
                    .get_mut(&p)
                    .expect("parent in the tree")
                    .children
                    .retain(|&c| c != x);
            }
            at = parent;
        }
        Ok(removed)
    }

    /// `v` and its ancestors, nearest first (`v` must be in the tree).
    pub fn ancestry(&self, v: Version) -> Vec<Version> {
        let mut out = Vec::new();
        let mut at = Some(v);
        while let Some(x) = at {
            out.push(x);
            at = self.nodes.get(&x).and_then(|n| n.parent);
        }
        out
    }

    /// Depth-first interval labels of the tree, indexed by version number (below
    /// `next_version`): `a` is `v` or an ancestor of `v` exactly when `spans[a].0 <=
    /// spans[v].0 < spans[a].1` (`Spans::is_ancestor_or_self`), two comparisons instead of a
    /// walk or a hashed set per question. Versions not in the tree get an empty span. Made
    /// once per change of the tree.
    pub fn spans(&self) -> &Spans {
        self.spans.0.get_or_init(|| self.label())
    }

    fn label(&self) -> Spans {
        let mut spans = vec![(u32::MAX, 0u32); self.next as usize];
        let mut clock = 0u32;
        // (version, whether its children are done)
        let mut stack: Vec<(Version, bool)> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.parent.is_none())
            .map(|(&v, _)| (v, false))
            .collect();
        while let Some((v, done)) = stack.pop() {
            if done {
                spans[v as usize].1 = clock;
                continue;
            }
            spans[v as usize].0 = clock;
            clock += 1;
            stack.push((v, true));
            stack.extend(self.nodes[&v].children.iter().map(|&c| (c, false)));
        }
        Spans(spans)
    }

    /// Whether `a` is `v` or one of its ancestors.
    pub fn is_ancestor_or_self(&self, a: Version, v: Version) -> bool {
        // Numbers grow downwards, so the walk stops as soon as it passes below `a`.
        let mut at = Some(v);
        while let Some(x) = at {
            if x == a {
                return true;
            }
            if x < a {
                return false;
            }
            at = self.nodes.get(&x).and_then(|n| n.parent);
        }
        false
    }

    /// The parent of `v` in the tree (ghosts included).
    pub fn parent(&self, v: Version) -> Option<Version> {
        self.nodes.get(&v).and_then(|n| n.parent)
    }

    /// Live versions, ascending.
    pub fn live(&self) -> impl Iterator<Item = Version> + '_ {
        self.nodes
            .iter()
            .filter(|(_, n)| !n.deleted)
            .map(|(&v, _)| v)
    }

    /// Live versions in the subtree of `x` (`x` itself if live), ascending.
    pub fn live_subtree(&self, x: Version) -> Vec<Version> {
        let mut out = Vec::new();
        let mut stack = vec![x];
        while let Some(v) = stack.pop() {
            if let Some(n) = self.nodes.get(&v) {
                if !n.deleted {
                    out.push(v);
                }
                stack.extend(n.children.iter().copied());
            }
        }
        out.sort_unstable();
        out
    }

    /// Every version in the tree (ghosts included), ascending.
    pub fn versions(&self) -> Vec<VersionInfo> {
        self.nodes
            .iter()
            .map(|(&v, n)| VersionInfo {
                version: v,
                parent: n.parent,
                children: n.children.clone(),
                deleted: n.deleted,
                leaf: !n.deleted && !n.frozen,
            })
            .collect()
    }

    pub(crate) fn encode(&self, w: &mut Writer) {
        w.u64(self.next).u32(self.nodes.len() as u32);
        for (&v, n) in &self.nodes {
            let flags = if n.deleted { DELETED } else { 0 } | if n.frozen { FROZEN } else { 0 };
            w.u64(v).u64(n.parent.unwrap_or(NO_PARENT)).u8(flags);
        }
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> std::result::Result<VersionTree, String> {
        let next = r.u64()?;
        let count = r.u32()? as usize;
        let mut nodes: BTreeMap<Version, Node> = BTreeMap::new();
        let mut roots = 0;
        for _ in 0..count {
            let v = r.u64()?;
            let parent = r.u64()?;
            let flags = r.u8()?;
            if flags & !(DELETED | FROZEN) != 0 {
                return Err(format!("version {v}: unknown flags {flags:#x}"));
            }
            if v >= next || nodes.last_key_value().is_some_and(|(&l, _)| l >= v) {
                return Err(format!("version {v} out of order"));
            }
            let parent = if parent == NO_PARENT {
                roots += 1;
                None
            } else {
                match nodes.get_mut(&parent) {
                    Some(p) if p.frozen => p.children.push(v),
                    _ => return Err(format!("version {v}: parent {parent} missing or a leaf")),
                }
                Some(parent)
            };
            nodes.insert(
                v,
                Node {
                    parent,
                    children: Vec::new(),
                    deleted: flags & DELETED != 0,
                    frozen: flags & FROZEN != 0,
                },
            );
        }
        if roots > 1 {
            return Err(format!("{roots} roots"));
        }
        if let Some((v, _)) = nodes
            .iter()
            .find(|(_, n)| n.deleted && n.children.is_empty())
        {
            return Err(format!("version {v}: deleted, yet kept without children"));
        }
        Ok(VersionTree {
            nodes,
            next,
            spans: SpansOnce::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The interval labels answer every ancestry question as the walk does, on a random tree
    /// with ghosts and removed versions.
    #[test]
    fn spans_agree_with_the_walk() {
        let mut t = VersionTree::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for _ in 0..300 {
            let live: Vec<Version> = t.live().collect();
            let v = live[next(live.len() as u64) as usize];
            if next(5) == 0 && live.len() > 3 {
                t.delete(v).unwrap();
            } else {
                t.clone_version(v).unwrap();
            }
            // The labels kept since the last change are those of the tree as it is now.
            assert_eq!(t.spans().0, t.label().0);
        }
        let spans = t.spans();
        let all = t.next_version() + 2;
        let mut yes = 0;
        for a in 0..all {
            for v in t.versions().iter().map(|i| i.version) {
                let want = t.contains(a) && t.is_ancestor_or_self(a, v);
                assert_eq!(spans.is_ancestor_or_self(a, v), want, "{a} of {v}");
                yes += want as u32;
            }
        }
        assert!(yes > 300, "{yes}");
    }

    #[test]
    fn clone_freezes_and_only_live_leaves_take_writes() {
        let mut t = VersionTree::new();
        t.check_writable(ROOT).unwrap();
        let a = t.clone_version(ROOT).unwrap();
        let b = t.clone_version(ROOT).unwrap();
        assert_eq!((a, b), (1, 2));
        assert!(matches!(
            t.check_writable(ROOT),
            Err(Error::BadVersion { version: 0, .. })
        ));
        t.check_writable(a).unwrap();
        assert!(t
            .check_live(9)
            .unwrap_err()
            .to_string()
            .contains("no such version"));
        assert!(t.is_ancestor_or_self(ROOT, b));
        assert!(!t.is_ancestor_or_self(a, b));
        assert_eq!(t.ancestry(b), vec![2, 0]);
        // Deleting every child does not make the parent writable again.
        t.delete(a).unwrap();
        t.delete(b).unwrap();
        assert!(t.check_writable(ROOT).is_err());
        assert!(t.check_live(a).unwrap_err().to_string().contains("deleted"));
    }

    #[test]
    fn delete_keeps_ghosts_for_live_descendants_and_removes_the_rest() {
        let mut t = VersionTree::new();
        let a = t.clone_version(ROOT).unwrap(); // 1
        let b = t.clone_version(a).unwrap(); // 2
        let c = t.clone_version(a).unwrap(); // 3
                                             // An internal version with live children stays as a ghost.
        assert_eq!(t.delete(a).unwrap(), Vec::<Version>::new());
        assert!(t.contains(a) && !t.is_live(a));
        assert!(t.is_ancestor_or_self(a, b));
        assert_eq!(t.live().collect::<Vec<_>>(), vec![0, 2, 3]);
        assert_eq!(t.delete(b).unwrap(), vec![b]);
        // The last child of a ghost takes the ghost with it.
        assert_eq!(t.delete(c).unwrap(), vec![c, a]);
        assert_eq!(t.live_subtree(ROOT), vec![0]);
        assert!(t.delete(a).is_err(), "twice");
    }

    /// The tree's bytes, fixed: a change to them is a format change.
    #[test]
    fn encoding_golden_bytes() {
        let mut t = VersionTree::new();
        let a = t.clone_version(ROOT).unwrap();
        t.clone_version(a).unwrap();
        t.clone_version(a).unwrap();
        t.delete(a).unwrap();
        let mut w = Writer::new();
        t.encode(&mut w);
        let bytes = w.finish();
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "040000000000000004000000\
             0000000000000000ffffffffffffffff02\
             0100000000000000000000000000000003\
             0200000000000000010000000000000000\
             0300000000000000010000000000000000"
        );
        let mut r = Reader::new(&bytes);
        assert_eq!(VersionTree::decode(&mut r).unwrap(), t);
        r.finish().unwrap();
        // A child naming a leaf as its parent does not decode.
        let mut broken = bytes.clone();
        broken[12 + 17 + 16] &= !FROZEN;
        assert!(VersionTree::decode(&mut Reader::new(&broken)).is_err());
    }
}
