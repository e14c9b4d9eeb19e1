//! The SDA's write buffer: each version's latest write of each key, in memory until a flush
//! writes it out as arrays. Indexed by version first: the buffer holds every leaf's writes,
//! and a read at v wants only those of v's ancestors-or-self, a few of hundreds of versions,
//! so a range scan walks those versions' keys in the range and never another branch's.
//!
//! Invariant: one entry per (key, version), the latest write (a rewrite replaces it); no
//! version holds an empty map.

use std::collections::BTreeMap;
use std::ops::Bound;

use super::array::Entry;
use crate::engine::versions::Version;

/// A buffered write: its seq and its value (None: a tombstone).
pub type Write = (u64, Option<Vec<u8>>);

#[derive(Default)]
pub struct Buffer {
    by_version: BTreeMap<Version, BTreeMap<Vec<u8>, Write>>,
    len: usize,
}

/// One version's writes within a range, in the scan's direction.
pub type Writes<'a> = Box<dyn Iterator<Item = (&'a Vec<u8>, &'a Write)> + 'a>;

impl Buffer {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Record a write of `key` at `v`; the write it replaces, if any.
    pub fn insert(&mut self, v: Version, key: &[u8], w: Write) -> Option<Write> {
        let old = self
            .by_version
            .entry(v)
            .or_default()
            .insert(key.to_vec(), w);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// The write of `key` at `v` itself.
    pub fn get(&self, v: Version, key: &[u8]) -> Option<&Write> {
        self.by_version.get(&v)?.get(key)
    }

    /// Whether `v` has buffered writes.
    pub fn holds(&self, v: Version) -> bool {
        self.by_version.contains_key(&v)
    }

    /// The writes of `v` with keys within (`lo`, `hi`) (not an empty range: the caller checks),
    /// ascending, or descending when `reverse`.
    pub fn range<'a>(
        &'a self,
        v: Version,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        reverse: bool,
    ) -> Writes<'a> {
        match self.by_version.get(&v) {
            None => Box::new(std::iter::empty()),
            Some(m) => {
                let r = m.range::<[u8], _>((lo, hi));
                if reverse {
                    Box::new(r.rev())
                } else {
                    Box::new(r)
                }
            }
        }
    }

    /// Forget the writes of versions in `removed`.
    pub fn remove_versions(&mut self, removed: &[Version]) {
        for v in removed {
            if let Some(m) = self.by_version.remove(v) {
                self.len -= m.len();
            }
        }
    }

    /// The versions with writes here.
    pub fn versions(&self) -> impl Iterator<Item = Version> + '_ {
        self.by_version.keys().copied()
    }

    /// Every write, as entries in `Entry::order`, copied out (the buffer is shared with reads:
    /// a frozen buffer's flush, `flusher`).
    pub fn entries(&self) -> Vec<Entry> {
        let mut out: Vec<Entry> = self
            .by_version
            .iter()
            .flat_map(|(&version, m)| {
                m.iter().map(move |(key, (seq, value))| Entry {
                    key: key.clone(),
                    version,
                    seq: *seq,
                    value: value.clone(),
                })
            })
            .collect();
        out.sort_unstable_by(|x, y| x.order(y));
        out
    }

    /// Every write, as entries in `Entry::order`, the buffer left empty.
    pub fn take(&mut self) -> Vec<Entry> {
        let by_version = std::mem::take(&mut self.by_version);
        self.len = 0;
        let mut out: Vec<Entry> = by_version
            .into_iter()
            .flat_map(|(version, m)| {
                m.into_iter().map(move |(key, (seq, value))| Entry {
                    key,
                    version,
                    seq,
                    value,
                })
            })
            .collect();
        out.sort_unstable_by(|x, y| x.order(y));
        out
    }

    /// Every write: (key, version, write), in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Version, &Write)> {
        self.by_version
            .iter()
            .flat_map(|(&v, m)| m.iter().map(move |(k, w)| (k.as_slice(), v, w)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ops::Bound::{Excluded, Included, Unbounded};

    /// A rewrite replaces; `take` gives entries in `Entry::order`; a range gives one version's
    /// keys in either direction; removed versions' writes go.
    #[test]
    fn writes_by_version_in_order() {
        let mut b = Buffer::default();
        assert!(b.insert(2, b"k2", (1, Some(b"a".to_vec()))).is_none());
        assert!(b.insert(0, b"k2", (2, None)).is_none());
        assert!(b.insert(2, b"k1", (3, Some(b"b".to_vec()))).is_none());
        assert_eq!(
            b.insert(2, b"k2", (4, Some(b"c".to_vec()))),
            Some((1, Some(b"a".to_vec())))
        );
        assert_eq!(b.len(), 3);
        assert_eq!(b.get(2, b"k2"), Some(&(4, Some(b"c".to_vec()))));
        assert_eq!(b.get(1, b"k2"), None);
        let keys = |r: Writes| r.map(|(k, _)| k.clone()).collect::<Vec<_>>();
        assert_eq!(
            keys(b.range(2, Unbounded, Unbounded, false)),
            [b"k1".to_vec(), b"k2".to_vec()]
        );
        assert_eq!(
            keys(b.range(2, Unbounded, Unbounded, true)),
            [b"k2".to_vec(), b"k1".to_vec()]
        );
        assert_eq!(
            keys(b.range(2, Excluded(b"k1"), Included(b"k2"), false)),
            [b"k2".to_vec()]
        );
        assert!(keys(b.range(1, Unbounded, Unbounded, false)).is_empty());
        let mut c = Buffer::default();
        for (k, v, w) in b.iter() {
            c.insert(v, k, w.clone());
        }
        let entries = c.take();
        assert!(c.is_empty());
        assert!(entries.windows(2).all(|w| w[0].order(&w[1]).is_lt()));
        assert_eq!(
            entries
                .iter()
                .map(|e| (e.key.clone(), e.version))
                .collect::<Vec<_>>(),
            [
                (b"k1".to_vec(), 2),
                (b"k2".to_vec(), 2),
                (b"k2".to_vec(), 0)
            ]
        );
        b.remove_versions(&[2]);
        assert_eq!(b.len(), 1);
        assert!(!b.holds(2) && b.holds(0));
    }
}
