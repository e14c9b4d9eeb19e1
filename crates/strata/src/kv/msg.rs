//! Messages and the segments that hold them: the write-optimised engines' common currency (the
//! Bε-tree's buffers and spilled runs, the LSM-tree's memtable and sorted tables).
//!
//! A message is an operation not yet applied to a key's value: put, delete, upsert (an operand
//! for the merge operator) or range delete of [key, end). Each carries a sequence number from
//! the engine, unique and increasing, so that wherever messages for one key meet (in a segment,
//! a leaf, a merge of runs, or a query collecting them) they are applied in the order they were
//! made.
//!
//! A segment is a sorted batch of messages (in the Bε-tree, the part of an internal node's
//! buffer bound for one child; in the LSM-tree, one block of a table). Invariants:
//! - `points` are sorted by (key, seq); `ranges` (range deletes) by seq;
//! - every point message for key k is newer than every range delete in the same segment that
//!   covers k: inserting a range delete drops the older point messages it covers, and inserting
//!   a put or delete drops older point messages for its key. So a segment holds at most one put
//!   or delete per key, followed by that key's newer upserts;
//! - an upsert meeting a known base in the segment (a put with an inline value, a delete, or a
//!   range delete covering its key) is folded into a put of the merged value.
//!
//! Messages that a newer one makes obsolete are handed back to the caller, which frees the blob
//! blocks of out-of-line put values.

use crate::codec::Reader;
use crate::kv::MergeOperator;
use crate::kv::{head, Val};

#[derive(Clone, Debug, PartialEq)]
pub enum Body {
    Put(Val),
    Delete,
    Upsert(Vec<u8>),
    /// Delete [key, end).
    DeleteRange(Vec<u8>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Msg {
    pub key: Vec<u8>,
    pub seq: u64,
    pub body: Body,
}

impl Msg {
    pub fn encoded_len(&self) -> usize {
        11 + self.key.len()
            + match &self.body {
                Body::Put(Val::Inline(v)) => 4 + v.len(),
                Body::Put(Val::Blob { .. }) => 12,
                Body::Delete => 0,
                Body::Upsert(o) => 4 + o.len(),
                Body::DeleteRange(e) => 2 + e.len(),
            }
    }

    /// Whether this range delete covers `k` (false for other messages).
    pub fn is_range(&self) -> bool {
        matches!(self.body, Body::DeleteRange(_))
    }
    pub fn covers(&self, k: &[u8]) -> bool {
        matches!(&self.body, Body::DeleteRange(end) if self.key.as_slice() <= k && k < end.as_slice())
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        let tag = match &self.body {
            Body::Put(Val::Inline(_)) => 1u8,
            Body::Put(Val::Blob { .. }) => 2,
            Body::Delete => 3,
            Body::Upsert(_) => 4,
            Body::DeleteRange(_) => 5,
        };
        out.push(tag);
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&(self.key.len() as u16).to_le_bytes());
        out.extend_from_slice(&self.key);
        match &self.body {
            Body::Put(Val::Inline(v)) | Body::Upsert(v) => {
                out.extend_from_slice(&(v.len() as u32).to_le_bytes());
                out.extend_from_slice(v);
            }
            Body::Put(Val::Blob { id, len }) => {
                out.extend_from_slice(&len.to_le_bytes());
                out.extend_from_slice(&id.to_le_bytes());
            }
            Body::Delete => {}
            Body::DeleteRange(e) => {
                out.extend_from_slice(&(e.len() as u16).to_le_bytes());
                out.extend_from_slice(e);
            }
        }
    }

    pub fn decode(r: &mut Reader<'_>) -> Result<Msg, String> {
        let tag = r.u8()?;
        let seq = r.u64()?;
        let klen = r.u16()? as usize;
        let key = r.bytes(klen)?.to_vec();
        let body = match tag {
            1 => {
                let n = r.u32()? as usize;
                Body::Put(Val::Inline(r.bytes(n)?.to_vec()))
            }
            2 => {
                let len = r.u32()?;
                Body::Put(Val::Blob { id: r.u64()?, len })
            }
            3 => Body::Delete,
            4 => {
                let n = r.u32()? as usize;
                Body::Upsert(r.bytes(n)?.to_vec())
            }
            5 => {
                let n = r.u16()? as usize;
                Body::DeleteRange(r.bytes(n)?.to_vec())
            }
            t => return Err(format!("unknown message tag {t}")),
        };
        Ok(Msg { key, seq, body })
    }
}

/// An empty segment's encoded size: two counts.
pub const EMPTY_SEGMENT: usize = 8;

/// The fewest bytes a message takes encoded: a delete with an empty key (tag, sequence, key
/// length), and a range delete with empty keys (an end length too).
const MIN_POINT: usize = 11;
const MIN_RANGE: usize = MIN_POINT + 2;

/// Spare vectors for `Segment::insert_run`.
#[derive(Debug, Default)]
pub struct Scratch {
    points: Vec<Msg>,
    heads: Vec<u64>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Segment {
    points: Vec<Msg>,
    /// The first 8 bytes of each point message's key, big-endian: searched before the keys,
    /// which are separate allocations (see `btree::keys`).
    heads: Vec<u64>,
    ranges: Vec<Msg>,
    bytes: usize,
}

impl Segment {
    pub fn bytes(&self) -> usize {
        EMPTY_SEGMENT + self.bytes
    }

    pub fn len(&self) -> usize {
        self.points.len() + self.ranges.len()
    }

    pub fn points(&self) -> &[Msg] {
        &self.points
    }

    /// The point messages, taken out (a merge consumes a block once).
    pub fn into_points(self) -> Vec<Msg> {
        self.points
    }

    pub fn ranges(&self) -> &[Msg] {
        &self.ranges
    }

    /// The index range of the point messages for `key`.
    fn run_of(&self, key: &[u8]) -> (usize, usize) {
        let h = head(key);
        let below = |i: usize| (self.heads[i], self.points[i].key.as_slice()) < (h, key);
        let (mut lo, mut hi) = (0, self.points.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if below(mid) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let mut b = lo;
        while b < self.points.len() && self.heads[b] == h && self.points[b].key == key {
            b += 1;
        }
        (lo, b)
    }

    fn insert_point(&mut self, at: usize, m: Msg) {
        self.heads.insert(at, head(&m.key));
        self.points.insert(at, m);
    }

    fn drain_points(&mut self, a: usize, b: usize) -> Vec<Msg> {
        self.heads.drain(a..b);
        self.points.drain(a..b).collect()
    }

    /// Messages bearing on `key`: its point messages and the range deletes covering it.
    pub fn lookup<'a>(&'a self, key: &'a [u8]) -> impl Iterator<Item = &'a Msg> + 'a {
        let (a, b) = self.run_of(key);
        self.points[a..b]
            .iter()
            .chain(self.ranges.iter().filter(move |r| r.covers(key)))
    }

    /// Add `m`, newer than every message here; returns the messages it made obsolete.
    pub fn insert(&mut self, m: Msg, merge: Option<&dyn MergeOperator>) -> Vec<Msg> {
        let mut dropped = Vec::new();
        match &m.body {
            Body::Put(_) | Body::Delete => {
                let (a, b) = self.run_of(&m.key);
                dropped.extend(self.drain_points(a, b));
                self.bytes += m.encoded_len();
                self.insert_point(a, m);
            }
            Body::Upsert(operand) => {
                let (a, b) = self.run_of(&m.key);
                let base: Option<Option<&[u8]>> = match self.points[a..b].last().map(|l| &l.body) {
                    Some(Body::Put(Val::Inline(v))) => Some(Some(v)),
                    Some(Body::Delete) => Some(None),
                    Some(_) => None,
                    None if self.ranges.iter().any(|r| r.covers(&m.key)) => Some(None),
                    None => None,
                };
                match (base, merge) {
                    (Some(base), Some(op)) => {
                        let body = match op.merge(&m.key, base, operand) {
                            Some(v) => Body::Put(Val::Inline(v)),
                            None => Body::Delete,
                        };
                        let folded = Msg {
                            key: m.key,
                            seq: m.seq,
                            body,
                        };
                        dropped.extend(self.drain_points(a, b));
                        self.bytes += folded.encoded_len();
                        self.insert_point(a, folded);
                    }
                    _ => {
                        self.bytes += m.encoded_len();
                        self.insert_point(b, m);
                    }
                }
            }
            Body::DeleteRange(end) => {
                let (start, end) = (m.key.as_slice(), end.as_slice());
                let a = self.points.partition_point(|p| p.key.as_slice() < start);
                let b = a + self.points[a..].partition_point(|p| p.key.as_slice() < end);
                dropped.extend(self.drain_points(a, b));
                let (keep, gone): (Vec<Msg>, Vec<Msg>) = std::mem::take(&mut self.ranges)
                    .into_iter()
                    .partition(|r| match &r.body {
                        Body::DeleteRange(e) => !(start <= r.key.as_slice() && e.as_slice() <= end),
                        _ => true,
                    });
                self.ranges = keep;
                dropped.extend(gone);
                self.bytes += m.encoded_len();
                self.ranges.push(m);
            }
        }
        self.bytes -= dropped.iter().map(Msg::encoded_len).sum::<usize>();
        dropped
    }

    /// Add puts and deletes, all newer than every message here, sorted by key (each key's
    /// oldest first), in one merge; returns the messages they made obsolete. The same as
    /// inserting them one by one, without moving the segment's tail for each.
    /// `scratch` lends the vectors merged into and takes back the emptied old ones, so that a
    /// merge allocates nothing once the scratch has grown to a segment's size.
    pub fn insert_run(&mut self, run: Vec<Msg>, scratch: &mut Scratch) -> Vec<Msg> {
        debug_assert!(run
            .iter()
            .all(|m| matches!(m.body, Body::Put(_) | Body::Delete)));
        let mut dropped = Vec::new();
        let n = self.points.len() + run.len();
        let mut old_points =
            std::mem::replace(&mut self.points, std::mem::take(&mut scratch.points));
        let mut old_heads = std::mem::replace(&mut self.heads, std::mem::take(&mut scratch.heads));
        self.points.clear();
        self.heads.clear();
        self.points.reserve(n);
        self.heads.reserve(n);
        let mut old = old_points.drain(..).zip(old_heads.drain(..)).peekable();
        let mut run = run.into_iter().peekable();
        while let Some(mut m) = run.next() {
            // Of one key's new messages only the newest stays.
            while run.peek().is_some_and(|n| n.key == m.key) {
                dropped.push(std::mem::replace(&mut m, run.next().expect("peeked")));
            }
            let h = head(&m.key);
            while let Some((o, oh)) = old.next_if(|(o, oh)| (*oh, o.key.as_slice()) < (h, &m.key)) {
                self.points.push(o);
                self.heads.push(oh);
            }
            while let Some((o, _)) = old.next_if(|(o, oh)| *oh == h && o.key == m.key) {
                self.bytes -= o.encoded_len();
                dropped.push(o);
            }
            self.bytes += m.encoded_len();
            self.points.push(m);
            self.heads.push(h);
        }
        for (o, oh) in old {
            self.points.push(o);
            self.heads.push(oh);
        }
        scratch.points = old_points;
        scratch.heads = old_heads;
        dropped
    }

    /// Every message in an order safe to apply or re-insert them in: by key (each key's
    /// messages oldest first, as they are held) when there are no range deletes, whose order
    /// against the point messages matters; else oldest first.
    pub fn into_messages(self) -> Vec<Msg> {
        if self.ranges.is_empty() {
            self.points
        } else {
            self.into_by_seq()
        }
    }

    /// Every message, oldest first.
    pub fn into_by_seq(self) -> Vec<Msg> {
        let mut all = self.points;
        all.extend(self.ranges);
        all.sort_by_key(|m| m.seq);
        all
    }

    /// Cut into pieces of about `target` encoded bytes by key, a key's messages never split:
    /// (first key of each piece after the first, piece). A segment holding a range delete stays
    /// whole, since a range may reach across pieces.
    pub fn cut(mut self, target: usize) -> Vec<(Option<Vec<u8>>, Segment)> {
        if !self.ranges.is_empty() || self.bytes() <= target {
            return vec![(None, self)];
        }
        let mut starts = Vec::new();
        let mut bytes = EMPTY_SEGMENT;
        for (i, m) in self.points.iter().enumerate() {
            if bytes >= target && self.points[i - 1].key != m.key {
                starts.push(i);
                bytes = EMPTY_SEGMENT;
            }
            bytes += m.encoded_len();
        }
        let mut out = Vec::with_capacity(starts.len() + 1);
        for &at in starts.iter().rev() {
            let points = self.points.split_off(at);
            let heads = self.heads.split_off(at);
            let bytes = points.iter().map(Msg::encoded_len).sum();
            self.bytes -= bytes;
            let first = points[0].key.clone();
            let piece = Segment {
                points,
                heads,
                ranges: Vec::new(),
                bytes,
            };
            out.push((Some(first), piece));
        }
        out.push((None, self));
        out.reverse();
        out
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.points.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.ranges.len() as u32).to_le_bytes());
        for m in self.points.iter().chain(&self.ranges) {
            m.encode(out);
        }
    }

    pub fn decode(p: &[u8]) -> Result<Segment, String> {
        let mut r = Reader::new(p);
        let np = r.u32()? as usize;
        let nr = r.u32()? as usize;
        let points = r.capacity(np, MIN_POINT);
        let mut s = Segment {
            points: Vec::with_capacity(points),
            heads: Vec::with_capacity(points),
            ranges: Vec::with_capacity(r.capacity(nr, MIN_RANGE)),
            bytes: 0,
        };
        for i in 0..np + nr {
            let m = Msg::decode(&mut r)?;
            s.bytes += m.encoded_len();
            let is_range = matches!(m.body, Body::DeleteRange(_));
            if is_range != (i >= np) {
                return Err("range delete among point messages, or the reverse".into());
            }
            if is_range {
                s.ranges.push(m);
            } else {
                if s.points
                    .last()
                    .is_some_and(|l| (&l.key, l.seq) >= (&m.key, m.seq))
                {
                    return Err("segment messages out of order".into());
                }
                s.heads.push(head(&m.key));
                s.points.push(m);
            }
        }
        r.finish()?;
        Ok(s)
    }
}

/// The point messages for `key` in an encoded segment (`Segment::encode`), found by walking
/// its bytes: the other messages are skipped, not decoded, so a block read to answer one query
/// costs no allocation but the answer's. Stops at the first key above `key` (points are sorted),
/// so range deletes, which follow the points, are not looked at: for blocks that hold none (an
/// LSM-tree's table blocks keep theirs in the table's head).
pub fn lookup_encoded(p: &[u8], key: &[u8]) -> Result<Vec<Msg>, String> {
    walk_encoded(p, key, false)
}

/// As `lookup_encoded`, and the range deletes covering `key` too (what `Segment::lookup`
/// gives): for segments that may hold them, such as a Bε-tree's buffers and runs.
pub fn lookup_encoded_with_ranges(p: &[u8], key: &[u8]) -> Result<Vec<Msg>, String> {
    walk_encoded(p, key, true)
}

fn walk_encoded(p: &[u8], key: &[u8], ranges: bool) -> Result<Vec<Msg>, String> {
    let mut r = Reader::new(p);
    let np = r.u32()? as usize;
    let nr = r.u32()? as usize;
    // The range deletes lie past every point: walk to them only if there are any.
    let to_end = ranges && nr > 0;
    let mut found = Vec::new();
    for _ in 0..np {
        let at = r.position();
        let tag = r.u8()?;
        r.u64()?;
        let klen = r.u16()? as usize;
        let k = r.bytes(klen)?;
        match k.cmp(key) {
            std::cmp::Ordering::Equal => {
                let mut m = Reader::new(&p[at..]);
                let msg = Msg::decode(&mut m)?;
                r.bytes(m.position() - (r.position() - at))?;
                found.push(msg);
            }
            std::cmp::Ordering::Greater if !to_end => break,
            _ => match tag {
                1 | 4 => {
                    let n = r.u32()? as usize;
                    r.bytes(n)?;
                }
                2 => {
                    r.bytes(12)?;
                }
                3 => {}
                t => return Err(format!("unknown point message tag {t}")),
            },
        }
    }
    if to_end {
        for _ in 0..nr {
            let m = Msg::decode(&mut r)?;
            if !m.is_range() {
                return Err("a point message among the range deletes".into());
            }
            if m.covers(key) {
                found.push(m);
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::AddU64;

    #[test]
    fn lookup_in_the_encoding_finds_what_the_decoded_segment_finds() {
        let mut s = Segment::default();
        let mut seq = 0;
        for k in (0u32..200).step_by(3) {
            for body in [
                Body::Put(Val::Inline(vec![k as u8; (k % 7) as usize])),
                Body::Upsert(vec![1; 3]),
            ] {
                seq += 1;
                s.insert(
                    Msg {
                        key: k.to_be_bytes().to_vec(),
                        seq,
                        body,
                    },
                    None,
                );
            }
            seq += 1;
            s.insert(
                Msg {
                    key: (k + 1).to_be_bytes().to_vec(),
                    seq,
                    body: Body::Delete,
                },
                None,
            );
        }
        let mut bytes = Vec::new();
        s.encode(&mut bytes);
        for k in 0u32..205 {
            let key = k.to_be_bytes();
            let want: Vec<Msg> = s.lookup(&key).cloned().collect();
            assert_eq!(lookup_encoded(&bytes, &key).unwrap(), want, "key {k}");
        }
        assert!(lookup_encoded(&bytes[..bytes.len() / 2], &199u32.to_be_bytes()).is_err());
    }

    #[test]
    fn lookup_with_ranges_in_the_encoding_finds_what_the_decoded_segment_finds() {
        let key = |k: u32| k.to_be_bytes().to_vec();
        let mut s = Segment::default();
        let mut seq = 0;
        let mut add = |s: &mut Segment, k: u32, body: Body| {
            seq += 1;
            s.insert(
                Msg {
                    key: key(k),
                    seq,
                    body,
                },
                None,
            );
        };
        for k in (0u32..120).step_by(2) {
            add(&mut s, k, Body::Put(Val::Inline(vec![k as u8; 5])));
        }
        // Two range deletes, the first covering older puts, then newer messages inside both.
        add(&mut s, 20, Body::DeleteRange(key(40)));
        add(&mut s, 60, Body::DeleteRange(key(90)));
        for k in [25u32, 30, 61, 89] {
            add(&mut s, k, Body::Upsert(vec![1; 3]));
        }
        assert_eq!(s.ranges().len(), 2);
        let mut bytes = Vec::new();
        s.encode(&mut bytes);
        for k in 0u32..125 {
            let want: Vec<Msg> = s.lookup(&key(k)).cloned().collect();
            let got = lookup_encoded_with_ranges(&bytes, &key(k)).unwrap();
            assert_eq!(got, want, "key {k}");
        }
        // The points-only walk leaves the range deletes out.
        assert!(lookup_encoded(&bytes, &key(70)).unwrap().is_empty());
        assert!(lookup_encoded_with_ranges(&bytes[..bytes.len() - 3], &key(70)).is_err());
    }

    #[test]
    fn cut_keeps_every_message_in_order_and_each_key_in_one_piece() {
        let mut s = Segment::default();
        for i in 0..500u32 {
            let key = format!("k{:05}", i / 2 * 2).into_bytes();
            let body = if i % 2 == 0 {
                Body::Put(crate::kv::Val::Inline(vec![1; 20]))
            } else {
                Body::Upsert(vec![2; 8])
            };
            s.insert(
                Msg {
                    key,
                    seq: i as u64 + 1,
                    body,
                },
                None,
            );
        }
        let (bytes, len) = (s.bytes(), s.len());
        let whole = s.clone();
        let pieces = s.cut(1024);
        assert!(pieces.len() > 5, "{} pieces", pieces.len());
        assert!(pieces[0].0.is_none() && pieces[1..].iter().all(|p| p.0.is_some()));
        for w in pieces.windows(2) {
            let last = &w[0].1.points().last().unwrap().key;
            assert!(last < w[1].0.as_ref().unwrap(), "a key split across pieces");
        }
        for (first, piece) in &pieces[1..] {
            assert_eq!(Some(&piece.points()[0].key), first.as_ref());
        }
        let sum: usize = pieces.iter().map(|p| p.1.bytes() - EMPTY_SEGMENT).sum();
        assert_eq!(sum + EMPTY_SEGMENT, bytes);
        assert_eq!(pieces.iter().map(|p| p.1.len()).sum::<usize>(), len);
        let joined: Vec<Msg> = pieces
            .into_iter()
            .flat_map(|p| p.1.into_messages())
            .collect();
        assert_eq!(joined, whole.into_messages());
    }

    fn put(k: &str, seq: u64, v: &str) -> Msg {
        Msg {
            key: k.into(),
            seq,
            body: Body::Put(Val::Inline(v.into())),
        }
    }

    fn up(k: &str, seq: u64, n: u64) -> Msg {
        Msg {
            key: k.into(),
            seq,
            body: Body::Upsert(n.to_le_bytes().to_vec()),
        }
    }

    #[test]
    fn newer_messages_supersede_and_fold() {
        let mut s = Segment::default();
        assert!(s.insert(put("a", 1, "x"), None).is_empty());
        assert!(
            s.insert(up("b", 2, 5), Some(&AddU64)).is_empty(),
            "no base: stacked"
        );
        assert_eq!(s.insert(put("a", 3, "y"), None), vec![put("a", 1, "x")]);
        let rd = Msg {
            key: "a".into(),
            seq: 4,
            body: Body::DeleteRange("b".into()),
        };
        assert_eq!(s.insert(rd.clone(), None), vec![put("a", 3, "y")]);
        // An upsert under a covering range delete folds into a put of merge(None).
        assert!(s.insert(up("a", 5, 7), Some(&AddU64)).is_empty());
        assert_eq!(
            s.lookup(b"a").map(|m| m.seq).collect::<Vec<_>>(),
            vec![5, 4]
        );
        assert_eq!(
            s.points()[0].body,
            Body::Put(Val::Inline(7u64.to_le_bytes().to_vec()))
        );
        let mut buf = Vec::new();
        s.encode(&mut buf);
        assert_eq!(buf.len(), s.bytes());
        assert_eq!(Segment::decode(&buf).unwrap(), s);
        assert_eq!(
            s.clone()
                .into_by_seq()
                .iter()
                .map(|m| m.seq)
                .collect::<Vec<_>>(),
            vec![2, 4, 5]
        );
    }

    #[test]
    fn a_merged_run_equals_one_insert_at_a_time() {
        // A segment with puts, an upsert stack and a range delete, then runs of puts and
        // deletes (some keys repeated in the run, some already present) merged in or inserted
        // one by one: same messages, same bytes, same obsolete ones handed back.
        let mut x = 0x9e37_79b9_u64;
        let mut next = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut seq = 0;
        for _ in 0..50 {
            let mut base = Segment::default();
            for _ in 0..next(40) {
                seq += 1;
                let k = format!("k{:02}", next(60));
                let m = match next(4) {
                    0 => up(&k, seq, next(9)),
                    _ => put(&k, seq, &"v".repeat(next(5) as usize)),
                };
                base.insert(m, Some(&AddU64));
            }
            seq += 1;
            let rd = Msg {
                key: "k30".into(),
                seq,
                body: Body::DeleteRange("k35".into()),
            };
            base.insert(rd, Some(&AddU64));
            let mut run: Vec<Msg> = (0..next(30))
                .map(|_| {
                    seq += 1;
                    let k = format!("k{:02}", next(60));
                    match next(3) {
                        0 => Msg {
                            key: k.into_bytes(),
                            seq,
                            body: Body::Delete,
                        },
                        _ => put(&k, seq, "w"),
                    }
                })
                .collect();
            run.sort_by(|a, b| a.key.cmp(&b.key));
            let mut merged = base.clone();
            let mut dropped_merged = merged.insert_run(run.clone(), &mut Scratch::default());
            let mut one_by_one = base;
            let mut dropped_one = Vec::new();
            for m in run {
                dropped_one.extend(one_by_one.insert(m, Some(&AddU64)));
            }
            assert_eq!(merged, one_by_one);
            assert_eq!(merged.bytes(), one_by_one.bytes());
            dropped_merged.sort_by_key(|m| m.seq);
            dropped_one.sort_by_key(|m| m.seq);
            assert_eq!(dropped_merged, dropped_one);
        }
    }
}
