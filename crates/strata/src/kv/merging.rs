//! Merging sorted message streams: the k-way merge that groups one key's messages from every
//! stream (`next_group`), what a reader makes of a key's messages (`resolve`), and what a merge
//! of runs keeps of them (`reduce`).
//!
//! Invariants the callers keep and these functions rely on:
//! - every stream yields its point messages by key (ascending, or descending for a reverse
//!   merge), a key's messages together;
//! - sequence numbers are unique: a key's messages apply in sequence order, whatever stream
//!   they came from;
//! - `resolve` is given a key's whole history back to a base (a put, a delete, a covering range
//!   delete, or the start of time); `reduce` may be given less, and then keeps what it cannot
//!   settle (upserts with no base) unless told the merge reaches the bottom of the data.

use super::merge::MergeOperator;
use super::msg::{Body, Msg};
use super::value::Val;
use crate::error::{Error, Result};

/// A sorted stream of point messages that may read to go on (`C` is what it reads through).
pub trait Cursor<C: ?Sized> {
    /// Make the next message available, reading if need be; false at the end.
    fn fill(&mut self, ctx: &mut C) -> Result<bool>;
    /// The next message (after `fill` returned true).
    fn head(&self) -> &Msg;
    /// Take the next message (after `fill` returned true).
    fn pop(&mut self) -> Msg;
}

/// The next key of the merge of `cursors` (the smallest, or with `reverse` the largest) and
/// every message for it from every cursor, in no particular order.
pub fn next_group<C: ?Sized>(
    cursors: &mut [Box<dyn Cursor<C> + '_>],
    ctx: &mut C,
    reverse: bool,
) -> Result<Option<(Vec<u8>, Vec<Msg>)>> {
    let mut best: Option<usize> = None;
    for i in 0..cursors.len() {
        if !cursors[i].fill(ctx)? {
            continue;
        }
        best = match best {
            Some(b) => {
                // One comparison a cursor: the keys are compared whole once.
                let ord = cursors[i].head().key.cmp(&cursors[b].head().key);
                Some(if ord.is_ne() && ord.is_lt() != reverse {
                    i
                } else {
                    b
                })
            }
            None => Some(i),
        };
    }
    let Some(b) = best else { return Ok(None) };
    let key = cursors[b].head().key.clone();
    let mut msgs = Vec::new();
    for c in cursors.iter_mut() {
        while c.fill(ctx)? && c.head().key == key {
            msgs.push(c.pop());
        }
    }
    Ok(Some((key, msgs)))
}

/// The value a reader sees for `key`, given its messages (`msgs`, any order) and the sequence
/// numbers of the range deletes covering it (`ranges`): each applied in sequence order from an
/// absent key. `read` reads an out-of-line value.
pub fn resolve(
    key: &[u8],
    msgs: &mut [Msg],
    ranges: &[u64],
    merge: Option<&dyn MergeOperator>,
    mut read: impl FnMut(&Val) -> Result<Vec<u8>>,
) -> Result<Option<Vec<u8>>> {
    msgs.sort_unstable_by_key(|m| m.seq);
    // Only what follows the newest covering range delete counts (an LSM-tree's bottom messages
    // may have sequence 0, so no range delete must not cut at 0).
    let cut = ranges.iter().copied().max();
    let mut value: Option<Vec<u8>> = None;
    for m in msgs.iter().filter(|m| cut.is_none_or(|c| m.seq > c)) {
        value = match &m.body {
            Body::Put(Val::Inline(v)) => Some(v.clone()),
            Body::Put(v) => Some(read(v)?),
            Body::Delete | Body::DeleteRange(_) => None,
            Body::Upsert(operand) => {
                let op = merge.ok_or_else(|| {
                    Error::InvalidOptions(
                        "an upsert is stored but no merge operator is set: set \
                         Options::merge_operator to the one it was written with"
                            .into(),
                    )
                })?;
                op.merge(key, value.as_deref(), operand)
            }
        };
    }
    Ok(value)
}

/// What a merge of runs keeps of one key's messages (`msgs`, sorted by sequence), given the
/// newest range delete among the merged runs that covers the key (`shadow`, its sequence):
/// - messages older than that range delete or than the newest put or delete go;
/// - upserts on a known base (put, delete or covering range delete) fold into one put, or a
///   delete when the operator says so;
/// - at the `bottom` (nothing older lies below the merge), an upsert with no base is applied to
///   an absent key and deletes go, since they no longer hide anything.
///
/// Inline values only (the LSM-tree keeps no blobs).
pub fn reduce(
    key: &[u8],
    mut msgs: Vec<Msg>,
    shadow: Option<u64>,
    merge: Option<&dyn MergeOperator>,
    bottom: bool,
) -> Vec<Msg> {
    debug_assert!(msgs.windows(2).all(|w| w[0].seq < w[1].seq));
    if let Some(s) = shadow {
        msgs.retain(|m| m.seq > s);
    }
    let base_at = msgs
        .iter()
        .rposition(|m| matches!(m.body, Body::Put(_) | Body::Delete));
    // The base: Some(value) when known (None inside it for an absent key).
    let base: Option<Option<Vec<u8>>> = match base_at {
        Some(i) => {
            msgs.drain(..i);
            match &msgs[0].body {
                Body::Put(Val::Inline(v)) => Some(Some(v.clone())),
                Body::Delete => Some(None),
                _ => None,
            }
        }
        None if shadow.is_some() || bottom => Some(None),
        None => None,
    };
    let upserts = msgs.len() - usize::from(base_at.is_some());
    let mut out = match (base, merge) {
        (Some(mut value), Some(op)) if upserts > 0 => {
            for m in &msgs {
                if let Body::Upsert(operand) = &m.body {
                    value = op.merge(key, value.as_deref(), operand);
                }
            }
            let seq = msgs.last().expect("upserts > 0").seq;
            let body = match value {
                Some(v) => Body::Put(Val::Inline(v)),
                None => Body::Delete,
            };
            vec![Msg {
                key: key.to_vec(),
                seq,
                body,
            }]
        }
        _ => msgs,
    };
    if bottom {
        out.retain(|m| !matches!(m.body, Body::Delete));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::AddU64;

    fn put(seq: u64, v: u64) -> Msg {
        Msg {
            key: b"k".to_vec(),
            seq,
            body: Body::Put(Val::Inline(v.to_le_bytes().to_vec())),
        }
    }
    fn up(seq: u64, n: u64) -> Msg {
        Msg {
            key: b"k".to_vec(),
            seq,
            body: Body::Upsert(n.to_le_bytes().to_vec()),
        }
    }
    fn del(seq: u64) -> Msg {
        Msg {
            key: b"k".to_vec(),
            seq,
            body: Body::Delete,
        }
    }
    fn value(msgs: &[Msg], ranges: &[u64]) -> Option<u64> {
        let mut m = msgs.to_vec();
        let v = resolve(b"k", &mut m, ranges, Some(&AddU64), |_| unreachable!()).unwrap();
        v.map(|b| u64::from_le_bytes(b.try_into().unwrap()))
    }

    #[test]
    fn resolve_applies_in_sequence_order_after_the_newest_covering_range() {
        assert_eq!(value(&[up(3, 5), put(1, 10), up(2, 1)], &[]), Some(16));
        assert_eq!(value(&[put(1, 10), up(3, 5)], &[2]), Some(5));
        assert_eq!(value(&[put(1, 10), del(2)], &[]), None);
        assert_eq!(value(&[put(4, 7)], &[2, 5]), None);
        // Sequence 0 (an LSM-tree's bottom put) counts when no range delete covers it.
        assert_eq!(value(&[put(0, 7)], &[]), Some(7));
        assert_eq!(value(&[put(0, 7), up(3, 1)], &[]), Some(8));
        assert_eq!(value(&[put(0, 7)], &[1]), None);
    }

    /// Whatever a merge keeps must read as the full history did, above any older data.
    #[test]
    fn reduce_keeps_what_reads_the_same() {
        let histories = [
            vec![put(1, 10), up(2, 1), up(3, 2)],
            vec![up(1, 1), up(2, 2)],
            vec![del(1), up(2, 3)],
            vec![put(1, 4), del(2)],
            vec![up(1, 9), put(2, 1), up(5, 1)],
        ];
        for h in histories {
            for shadow in [None, Some(1), Some(2)] {
                for bottom in [false, true] {
                    let kept = reduce(b"k", h.clone(), shadow, Some(&AddU64), bottom);
                    let ranges: Vec<u64> = shadow.into_iter().collect();
                    // Older data below the merge: a put of 100, unless this is the bottom.
                    let mut full = h.clone();
                    let mut short = kept.clone();
                    if !bottom {
                        full.insert(0, put(0, 100));
                        short.insert(0, put(0, 100));
                    }
                    assert_eq!(
                        value(&short, &ranges),
                        value(&full, &ranges),
                        "{h:?} shadow {shadow:?} bottom {bottom}: kept {kept:?}"
                    );
                    assert!(kept.len() <= h.len());
                    if bottom {
                        assert!(kept.iter().all(|m| matches!(m.body, Body::Put(_))));
                        assert!(kept.len() <= 1);
                    }
                }
            }
        }
    }

    struct Vecs(Vec<Msg>);
    impl Cursor<()> for Vecs {
        fn fill(&mut self, _: &mut ()) -> Result<bool> {
            Ok(!self.0.is_empty())
        }
        fn head(&self) -> &Msg {
            &self.0[0]
        }
        fn pop(&mut self) -> Msg {
            self.0.remove(0)
        }
    }

    #[test]
    fn next_group_merges_by_key_both_ways() {
        let m = |k: &str, seq| Msg {
            key: k.as_bytes().to_vec(),
            seq,
            body: Body::Delete,
        };
        for reverse in [false, true] {
            let order = |mut v: Vec<Msg>| {
                if reverse {
                    v.reverse();
                }
                v
            };
            let mut cursors: Vec<Box<dyn Cursor<()>>> = vec![
                Box::new(Vecs(order(vec![m("a", 1), m("c", 2)]))),
                Box::new(Vecs(order(vec![m("b", 3), m("c", 4), m("d", 5)]))),
            ];
            let mut keys = Vec::new();
            while let Some((k, msgs)) = next_group(&mut cursors, &mut (), reverse).unwrap() {
                assert!(msgs.iter().all(|x| x.key == k));
                keys.push((String::from_utf8(k).unwrap(), msgs.len()));
            }
            let mut want = vec![
                ("a".to_string(), 1),
                ("b".to_string(), 1),
                ("c".to_string(), 2),
                ("d".to_string(), 1),
            ];
            if reverse {
                want.reverse();
            }
            assert_eq!(keys, want);
        }
    }
}
