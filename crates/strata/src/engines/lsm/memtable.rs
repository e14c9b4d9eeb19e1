//! The memtable: the newest messages, in memory, sorted by key, until a flush writes them out
//! as a run of level 0. The log (the `Db`'s WAL) holds them durably meanwhile.
//!
//! It keeps the invariants of a `kv::msg::Segment`, in an ordered map so that an insert costs
//! O(log n) however large it grows:
//! - a key holds at most one put or delete, first, then the newer upserts;
//! - every point message is newer than the range deletes covering its key (a range delete drops
//!   the point messages it covers);
//! - an upsert meeting a known base (a put, a delete, or a covering range delete) folds into a
//!   put of the merged value.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::kv::msg::{Body, Msg};
use crate::kv::{MergeOperator, Val};

/// Heap bytes a message costs beyond its encoding (its map node and allocations), so that the
/// memtable's charge against the memory budget is honest.
pub(super) const OVERHEAD: usize = 64;

/// A key's messages, oldest first. Most keys hold one (a put or a delete): kept inline, so an
/// insert of a new key allocates no list.
#[derive(Debug)]
enum Entry {
    One(Msg),
    Many(Vec<Msg>),
}

impl Entry {
    fn as_slice(&self) -> &[Msg] {
        match self {
            Entry::One(m) => std::slice::from_ref(m),
            Entry::Many(v) => v,
        }
    }

    fn push(&mut self, m: Msg) {
        match self {
            Entry::Many(v) => v.push(m),
            Entry::One(_) => {
                let Entry::One(first) = std::mem::replace(self, Entry::Many(Vec::new())) else {
                    unreachable!("matched above")
                };
                *self = Entry::Many(vec![first, m]);
            }
        }
    }
}

#[derive(Debug, Default)]
pub struct Memtable {
    points: BTreeMap<Vec<u8>, Entry>,
    ranges: Vec<Msg>,
    /// Encoded bytes plus overhead of every message held.
    bytes: usize,
    messages: usize,
}

/// The fixed encoding's size: the charge the memtable has always made, so that the LSM-tree's
/// flush points stay where they were when the Bε-tree's messages got their compact encoding.
fn cost(m: &Msg) -> usize {
    m.fixed_len() + OVERHEAD
}

impl Memtable {
    pub fn is_empty(&self) -> bool {
        self.messages == 0
    }

    /// Memory the memtable holds, charged against the budget.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn messages(&self) -> usize {
        self.messages
    }

    pub fn ranges(&self) -> &[Msg] {
        &self.ranges
    }

    fn drop_msgs(&mut self, gone: &[Msg]) {
        self.bytes -= gone.iter().map(cost).sum::<usize>();
        self.messages -= gone.len();
    }

    fn add(&mut self, m: &Msg) {
        self.bytes += cost(m);
        self.messages += 1;
    }

    /// Add `m`, newer than every message here.
    pub fn insert(&mut self, m: Msg, merge: Option<&dyn MergeOperator>) {
        match &m.body {
            Body::Put(_) | Body::Delete => {
                self.add(&m);
                if let Some(old) = self.points.insert(m.key.clone(), Entry::One(m)) {
                    self.drop_msgs(old.as_slice());
                }
            }
            Body::Upsert(operand) => {
                let covered = || self.ranges.iter().any(|r| r.covers(&m.key));
                let base: Option<Option<&[u8]>> = match self.points.get(&m.key) {
                    Some(msgs) => match &msgs.as_slice().last().expect("no empty entries").body {
                        Body::Put(Val::Inline(v)) => Some(Some(v)),
                        Body::Delete => Some(None),
                        _ => None,
                    },
                    None if covered() => Some(None),
                    None => None,
                };
                let folded = match (base, merge) {
                    (Some(base), Some(op)) => Some(match op.merge(&m.key, base, operand) {
                        Some(v) => Body::Put(Val::Inline(v)),
                        None => Body::Delete,
                    }),
                    _ => None,
                };
                match folded {
                    Some(body) => self.insert(
                        Msg {
                            key: m.key,
                            seq: m.seq,
                            body,
                        },
                        None,
                    ),
                    None => {
                        self.add(&m);
                        match self.points.get_mut(&m.key) {
                            Some(e) => e.push(m),
                            None => {
                                self.points.insert(m.key.clone(), Entry::One(m));
                            }
                        }
                    }
                }
            }
            Body::DeleteRange(end) => {
                let (start, end) = (m.key.clone(), end.clone());
                if start < end {
                    let keys: Vec<Vec<u8>> = self
                        .points
                        .range::<[u8], _>((Bound::Included(&start[..]), Bound::Excluded(&end[..])))
                        .map(|(k, _)| k.clone())
                        .collect();
                    for k in keys {
                        let old = self.points.remove(&k).expect("listed above");
                        self.drop_msgs(old.as_slice());
                    }
                }
                let (keep, gone): (Vec<Msg>, Vec<Msg>) = std::mem::take(&mut self.ranges)
                    .into_iter()
                    .partition(|r| match &r.body {
                        Body::DeleteRange(e) => !(start <= r.key && *e <= end),
                        _ => true,
                    });
                self.ranges = keep;
                self.drop_msgs(&gone);
                self.add(&m);
                self.ranges.push(m);
            }
        }
    }

    /// `key`'s point messages (oldest first), and the sequence numbers of the range deletes
    /// covering it.
    pub fn lookup(&self, key: &[u8]) -> (&[Msg], Vec<u64>) {
        let points = self.points.get(key).map_or(&[][..], Entry::as_slice);
        let ranges = self
            .ranges
            .iter()
            .filter(|r| r.covers(key))
            .map(|r| r.seq)
            .collect();
        (points, ranges)
    }

    /// Up to `keys` keys' point messages within (`lo`, `hi`), in key order (descending with
    /// `reverse`), each key's oldest first.
    pub fn batch(
        &self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        reverse: bool,
        keys: usize,
    ) -> Vec<Msg> {
        // `BTreeMap::range` refuses an inverted range, or an empty one excluded at both ends.
        let empty = match (lo, hi) {
            (Bound::Included(l), Bound::Included(h)) => l > h,
            (Bound::Included(l) | Bound::Excluded(l), Bound::Included(h) | Bound::Excluded(h)) => {
                l >= h
            }
            _ => false,
        };
        if empty {
            return Vec::new();
        }
        let range = self.points.range::<[u8], _>((lo, hi));
        let take = |it: &mut dyn Iterator<Item = (&Vec<u8>, &Entry)>| {
            it.take(keys)
                .flat_map(|(_, msgs)| msgs.as_slice().iter().cloned())
                .collect::<Vec<Msg>>()
        };
        if reverse {
            take(&mut range.rev())
        } else {
            take(&mut { range })
        }
    }

    /// Each key and its point messages (oldest first), in key order.
    pub fn keys(&self) -> impl Iterator<Item = (&[u8], &[Msg])> {
        self.points
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_slice()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::msg::Segment;
    use crate::kv::AddU64;

    /// The memtable and a segment given the same messages hold the same ones.
    #[test]
    fn agrees_with_a_segment() {
        let mut rng = crate::model::SplitMix64::new(7);
        for _ in 0..200 {
            let (mut mem, mut seg) = (Memtable::default(), Segment::default());
            for seq in 1..40 {
                let k = vec![b'a' + rng.below(6) as u8];
                let body = match rng.below(5) {
                    0 | 1 => Body::Put(Val::Inline(vec![rng.below(9) as u8])),
                    2 => Body::Delete,
                    3 => Body::Upsert(vec![1]),
                    _ => Body::DeleteRange(vec![k[0] + 1 + rng.below(3) as u8]),
                };
                let m = Msg { key: k, seq, body };
                mem.insert(m.clone(), Some(&AddU64));
                seg.insert(m, Some(&AddU64));
            }
            let all = seg.points().iter().chain(seg.ranges());
            let bytes: usize = all.map(Msg::fixed_len).sum();
            assert_eq!(mem.bytes(), bytes + OVERHEAD * seg.len());
            assert_eq!(mem.messages(), seg.len());
            let points: Vec<Msg> = mem.keys().flat_map(|(_, m)| m.iter().cloned()).collect();
            assert_eq!(points, seg.points());
            assert_eq!(mem.ranges(), seg.ranges());
        }
    }
}
