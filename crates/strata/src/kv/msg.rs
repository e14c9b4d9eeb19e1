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
//!
//! Three encodings (`Encoding`). Compact: a tag byte, then varints (`codec`) for the sequence
//! number and every length, so an 8-byte pair takes 12 to 15 bytes where the fixed encoding
//! took 23. Shaped, what the Bε-tree writes today: compact, except that a segment whose point
//! messages all have one shape (the same tag, key length and value length: records of a fixed
//! size, as a benchmark or a table of fixed-width rows writes them) says the shape once, so
//! each such message is its sequence number, key and value (a 16-byte key and a 100-byte value
//! take 119 bytes instead of 122). Fixed, still read: the tag, a u64 sequence number, a u16 key
//! length and u32 value lengths (the Bε-tree's nodes and runs of the older block kinds, the
//! LSM-tree's format-1 table blocks, and the range deletes in an LSM-tree table's head).
//! ```text
//! message, compact: tag u8 | seq varint | key length varint | key | body
//!   body: put (1), upsert (4): length varint, bytes; blob put (2): length varint, id varint;
//!         delete (3): nothing; range delete (5): end length varint, end
//! message, fixed:   tag u8 | seq u64 | key length u16 | key | body
//!   body: put, upsert: length u32, bytes; blob put: length u32, id u64; delete: nothing;
//!         range delete: end length u16, end
//! message, of a shape: seq varint | key | value (put, upsert) or nothing (delete)
//! segment, compact: point messages varint | range deletes varint | points | ranges
//! segment, fixed:   point messages u32 | range deletes u32 | points | ranges
//! segment, shaped:  point messages varint | range deletes varint | form u8 | points | ranges
//!   form 0: the points compact; form 1: tag u8 (1, 3 or 4) | key length varint |
//!   value length varint (0 for deletes), then the points of that shape. Form 1 is written
//!   exactly when there are points and all have one shape of those tags; the range deletes
//!   are compact either way.
//! ```
//! A segment's `bytes` and `Msg::encoded_len` are the compact encoding's: the engines' size
//! accounting (node sizes, cuts, run budgets) is in them, and a shaped segment writes at most
//! one byte more (its form), fewer whenever it has a shape.

use crate::codec::{put_varint, varint_len, Reader};
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

/// How messages and segments are laid out in bytes (module doc).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Encoding {
    /// Varint sequence numbers and lengths: what is written.
    #[default]
    Compact,
    /// Fixed-width sequence numbers and lengths: the older format, still read.
    Fixed,
    /// Compact, with the shape of a segment's point messages said once when they share one.
    Shaped,
}

/// The tag, key length and value length that every point message of a shaped segment's form 1
/// shares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Shape {
    tag: u8,
    klen: usize,
    vlen: usize,
}

impl Shape {
    fn of(m: &Msg) -> Option<Shape> {
        let (tag, vlen) = match &m.body {
            Body::Put(Val::Inline(v)) => (1, v.len()),
            Body::Delete => (3, 0),
            Body::Upsert(o) => (4, o.len()),
            Body::Put(Val::Blob { .. }) | Body::DeleteRange(_) => return None,
        };
        Some(Shape {
            tag,
            klen: m.key.len(),
            vlen,
        })
    }
}

/// How one segment's messages are laid out: its encoding, and for a shaped segment of form 1
/// the shape of its point messages (its range deletes are compact).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    Compact,
    Fixed,
    Uniform(Shape),
}

impl Form {
    /// The layout of a lone message (or a range delete) in `enc`.
    fn of(enc: Encoding) -> Form {
        match enc {
            Encoding::Compact | Encoding::Shaped => Form::Compact,
            Encoding::Fixed => Form::Fixed,
        }
    }

    /// The layout of this segment's range deletes.
    fn ranges(self) -> Form {
        match self {
            Form::Uniform(_) => Form::Compact,
            f => f,
        }
    }
}

fn tag(body: &Body) -> u8 {
    match body {
        Body::Put(Val::Inline(_)) => 1,
        Body::Put(Val::Blob { .. }) => 2,
        Body::Delete => 3,
        Body::Upsert(_) => 4,
        Body::DeleteRange(_) => 5,
    }
}

/// A byte string's varint length and its bytes.
fn var_bytes(b: &[u8]) -> usize {
    varint_len(b.len() as u64) + b.len()
}

impl Msg {
    /// Bytes of the compact encoding, which the engines' size accounting counts.
    pub fn encoded_len(&self) -> usize {
        1 + varint_len(self.seq)
            + var_bytes(&self.key)
            + match &self.body {
                Body::Put(Val::Inline(v)) | Body::Upsert(v) => var_bytes(v),
                Body::Put(Val::Blob { id, len }) => varint_len(*len as u64) + varint_len(*id),
                Body::Delete => 0,
                Body::DeleteRange(e) => var_bytes(e),
            }
    }

    /// Bytes of the fixed encoding.
    pub fn fixed_len(&self) -> usize {
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

    /// Append the compact encoding.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(tag(&self.body));
        put_varint(out, self.seq);
        put_varint(out, self.key.len() as u64);
        out.extend_from_slice(&self.key);
        match &self.body {
            Body::Put(Val::Inline(v)) | Body::Upsert(v) | Body::DeleteRange(v) => {
                put_varint(out, v.len() as u64);
                out.extend_from_slice(v);
            }
            Body::Put(Val::Blob { id, len }) => {
                put_varint(out, *len as u64);
                put_varint(out, *id);
            }
            Body::Delete => {}
        }
    }

    /// Append the fixed encoding (the LSM-tree's table heads still write it for their range
    /// deletes).
    pub fn encode_fixed(&self, out: &mut Vec<u8>) {
        out.push(tag(&self.body));
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

    fn encode_form(&self, form: Form, out: &mut Vec<u8>) {
        match form {
            Form::Compact => self.encode(out),
            Form::Fixed => self.encode_fixed(out),
            Form::Uniform(_) => {
                put_varint(out, self.seq);
                out.extend_from_slice(&self.key);
                if let Body::Put(Val::Inline(v)) | Body::Upsert(v) = &self.body {
                    out.extend_from_slice(v);
                }
            }
        }
    }

    /// One message as `encode` (compact, which is also how a shaped segment lays out a message
    /// alone) or `encode_fixed` wrote it.
    pub fn decode(r: &mut Reader<'_>, enc: Encoding) -> Result<Msg, String> {
        Msg::decode_in(r, Form::of(enc))
    }

    fn decode_in(r: &mut Reader<'_>, form: Form) -> Result<Msg, String> {
        let (tag, seq, key) = head_of(r, form)?;
        let body = match tag {
            1 => Body::Put(Val::Inline(value(r, form)?.to_vec())),
            2 => match form {
                Form::Compact => {
                    let len = u32::try_from(r.varint()?).map_err(|_| "a blob length past u32")?;
                    Body::Put(Val::Blob {
                        id: r.varint()?,
                        len,
                    })
                }
                Form::Fixed => {
                    let len = r.u32()?;
                    Body::Put(Val::Blob { id: r.u64()?, len })
                }
                Form::Uniform(_) => unreachable!("a shape's tag is 1, 3 or 4"),
            },
            3 => Body::Delete,
            4 => Body::Upsert(value(r, form)?.to_vec()),
            5 => Body::DeleteRange(short(r, form)?.to_vec()),
            t => return Err(format!("unknown message tag {t}")),
        };
        Ok(Msg {
            key: key.to_vec(),
            seq,
            body,
        })
    }
}

/// A message's tag, sequence number and key.
fn head_of<'a>(r: &mut Reader<'a>, form: Form) -> Result<(u8, u64, &'a [u8]), String> {
    if let Form::Uniform(s) = form {
        let seq = r.varint()?;
        return Ok((s.tag, seq, r.bytes(s.klen)?));
    }
    let tag = r.u8()?;
    let seq = match form {
        Form::Fixed => r.u64()?,
        _ => r.varint()?,
    };
    Ok((tag, seq, short(r, form)?))
}

/// A key or a range's end: u16 length (fixed) or varint (compact), then the bytes.
fn short<'a>(r: &mut Reader<'a>, form: Form) -> Result<&'a [u8], String> {
    let n = match form {
        Form::Compact => r.varint()?,
        Form::Fixed => r.u16()? as u64,
        Form::Uniform(s) => return r.bytes(s.klen),
    };
    if n > u16::MAX as u64 {
        return Err(format!("a key of {n} bytes"));
    }
    r.bytes(n as usize)
}

/// An inline value or an upsert's operand: u32 length (fixed) or varint (compact), the bytes.
fn value<'a>(r: &mut Reader<'a>, form: Form) -> Result<&'a [u8], String> {
    let n = match form {
        Form::Compact => r.varint()?,
        Form::Fixed => r.u32()? as u64,
        Form::Uniform(s) => return r.bytes(s.vlen),
    };
    if n > u32::MAX as u64 {
        return Err(format!("a value of {n} bytes"));
    }
    r.bytes(n as usize)
}

/// Skip a point message's body after its head.
fn skip_body(r: &mut Reader<'_>, tag: u8, form: Form) -> Result<(), String> {
    match (tag, form) {
        (1 | 4, _) => {
            value(r, form)?;
        }
        (2, Form::Compact) => {
            r.varint()?;
            r.varint()?;
        }
        (2, Form::Fixed) => {
            r.bytes(12)?;
        }
        (3, _) => {}
        (t, _) => return Err(format!("unknown point message tag {t}")),
    }
    Ok(())
}

/// An empty segment's encoded size: two counts of 0, one byte each (compact).
pub const EMPTY_SEGMENT: usize = 2;

/// An empty segment's size in the fixed encoding: two u32 counts.
#[cfg(test)]
pub const EMPTY_FIXED_SEGMENT: usize = 8;

/// The fewest bytes a message takes encoded: a delete with an empty key (tag, sequence, key
/// length), a message of a shape (its sequence number, key and value), and a range delete
/// with empty keys (an end length too).
const fn min_point(form: Form) -> usize {
    match form {
        Form::Compact => 3,
        Form::Fixed => 11,
        Form::Uniform(s) => 1 + s.klen + s.vlen,
    }
}
const fn min_range(form: Form) -> usize {
    match form {
        Form::Fixed => 13,
        _ => 4,
    }
}

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

/// How many of the messages `points` (sorted by key, with their `heads`) sort before `key`
/// (whose head is `h`): galloping from the front, so that finding k of them costs O(log k).
fn gallop(heads: &[u64], points: &[Msg], h: u64, key: &[u8]) -> usize {
    let before = |i: usize| (heads[i], points[i].key.as_slice()) < (h, key);
    let len = heads.len();
    if len == 0 || !before(0) {
        return 0;
    }
    // before(lo) holds; find hi with !before(hi) or hi == len.
    let (mut lo, mut step) = (0, 1);
    let mut hi = loop {
        let at = lo + step;
        if at >= len {
            break len;
        }
        if !before(at) {
            break at;
        }
        lo = at;
        step *= 2;
    };
    // Invariant: before(lo), and hi == len or !before(hi).
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if before(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

impl Segment {
    /// Bytes of the compact encoding.
    pub fn bytes(&self) -> usize {
        varint_len(self.points.len() as u64) + varint_len(self.ranges.len() as u64) + self.bytes
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
    ///
    /// The old messages between two new ones are found by galloping and moved as a block,
    /// without comparing each: a flush routes a few messages into each of a node's segments,
    /// and merging message by message was 30% of a mixed commit's apply at 10M keys.
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
        {
            let mut old = old_points.drain(..);
            let mut old_h = old_heads.drain(..);
            let mut run = run.into_iter().peekable();
            while let Some(mut m) = run.next() {
                // Of one key's new messages only the newest stays.
                while run.peek().is_some_and(|n| n.key == m.key) {
                    dropped.push(std::mem::replace(&mut m, run.next().expect("peeked")));
                }
                let h = head(&m.key);
                let below = gallop(old_h.as_slice(), old.as_slice(), h, &m.key);
                self.points.extend(old.by_ref().take(below));
                self.heads.extend(old_h.by_ref().take(below));
                // Equal keys have equal heads: compare those first, and follow a key's
                // pointer only when they tie.
                while old_h.as_slice().first() == Some(&h)
                    && old.as_slice().first().is_some_and(|o| o.key == m.key)
                {
                    let o = old.next().expect("checked");
                    old_h.next();
                    self.bytes -= o.encoded_len();
                    dropped.push(o);
                }
                self.bytes += m.encoded_len();
                self.points.push(m);
                self.heads.push(h);
            }
            self.points.extend(old);
            self.heads.extend(old_h);
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

    /// Keep the first keys, whole, within `keep` encoded bytes, and return the messages of the
    /// keys after them as a segment of their own; None (and nothing moved) when the segment
    /// holds range deletes (they order messages across keys), already fits, or not even its
    /// first key fits.
    pub fn split_tail(&mut self, keep: usize) -> Option<Segment> {
        if !self.ranges.is_empty() || self.bytes() <= keep {
            return None;
        }
        // Counts of the kept part: its two varints at most as long as the whole's.
        let mut bytes = varint_len(self.points.len() as u64) + 1;
        let mut cut = 0;
        for (i, m) in self.points.iter().enumerate() {
            if i > 0 && self.points[i - 1].key != m.key {
                cut = i;
            }
            bytes += m.encoded_len();
            if bytes > keep {
                break;
            }
        }
        if cut == 0 {
            return None;
        }
        let points = self.points.split_off(cut);
        let heads = self.heads.split_off(cut);
        let moved: usize = points.iter().map(Msg::encoded_len).sum();
        self.bytes -= moved;
        Some(Segment {
            points,
            heads,
            ranges: Vec::new(),
            bytes: moved,
        })
    }

    /// Append the compact encoding (`bytes()` of them).
    #[cfg(test)]
    pub fn encode(&self, out: &mut Vec<u8>) {
        self.encode_in(Encoding::Compact, out)
    }

    pub fn encode_in(&self, enc: Encoding, out: &mut Vec<u8>) {
        let (np, nr) = (self.points.len(), self.ranges.len());
        let form = self.form(enc);
        match enc {
            Encoding::Compact | Encoding::Shaped => {
                put_varint(out, np as u64);
                put_varint(out, nr as u64);
            }
            Encoding::Fixed => {
                out.extend_from_slice(&(np as u32).to_le_bytes());
                out.extend_from_slice(&(nr as u32).to_le_bytes());
            }
        }
        if enc == Encoding::Shaped {
            match form {
                Form::Uniform(s) => {
                    out.push(1);
                    out.push(s.tag);
                    put_varint(out, s.klen as u64);
                    put_varint(out, s.vlen as u64);
                }
                _ => out.push(0),
            }
        }
        for m in &self.points {
            m.encode_form(form, out);
        }
        for m in &self.ranges {
            m.encode_form(form.ranges(), out);
        }
    }

    /// How `encode_in(enc)` lays the messages out: in a shaped segment, form 1 when there are
    /// point messages and all have one shape.
    fn form(&self, enc: Encoding) -> Form {
        if enc != Encoding::Shaped {
            return Form::of(enc);
        }
        let Some(first) = self.points.first().and_then(Shape::of) else {
            return Form::Compact;
        };
        if self.points[1..].iter().all(|m| Shape::of(m) == Some(first)) {
            Form::Uniform(first)
        } else {
            Form::Compact
        }
    }

    pub fn decode(p: &[u8], enc: Encoding) -> Result<Segment, String> {
        let mut r = Reader::new(p);
        let (np, nr, form) = header(&mut r, enc)?;
        let points = r.capacity(np, min_point(form));
        let mut s = Segment {
            points: Vec::with_capacity(points),
            heads: Vec::with_capacity(points),
            ranges: Vec::with_capacity(r.capacity(nr, min_range(form))),
            bytes: 0,
        };
        for i in 0..np.saturating_add(nr) {
            let m = Msg::decode_in(&mut r, if i < np { form } else { form.ranges() })?;
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
        // One segment, one encoding: form 0 where form 1 applies is refused.
        if enc == Encoding::Shaped && s.form(enc) != form {
            return Err("a shaped segment in the wrong form".into());
        }
        Ok(s)
    }
}

/// A segment's header: its two counts (point messages, range deletes) and, for a shaped one,
/// its form.
fn header(r: &mut Reader<'_>, enc: Encoding) -> Result<(usize, usize, Form), String> {
    let count = |r: &mut Reader<'_>| -> Result<usize, String> {
        match enc {
            Encoding::Compact | Encoding::Shaped => {
                usize::try_from(r.varint()?).map_err(|_| "a count past the address space".into())
            }
            Encoding::Fixed => Ok(r.u32()? as usize),
        }
    };
    let (np, nr) = (count(r)?, count(r)?);
    if enc != Encoding::Shaped {
        return Ok((np, nr, Form::of(enc)));
    }
    let form = match r.u8()? {
        0 => Form::Compact,
        1 => {
            let tag = r.u8()?;
            let (klen, vlen) = (r.varint()?, r.varint()?);
            if klen > u16::MAX as u64 || vlen > u32::MAX as u64 {
                return Err(format!(
                    "a shape of {klen}-byte keys and {vlen}-byte values"
                ));
            }
            let shapely = matches!(tag, 1 | 4) || (tag == 3 && vlen == 0);
            if !shapely || np == 0 {
                return Err(format!("a shape of tag {tag} and {vlen}-byte values"));
            }
            Form::Uniform(Shape {
                tag,
                klen: klen as usize,
                vlen: vlen as usize,
            })
        }
        f => return Err(format!("unknown segment form {f}")),
    };
    Ok((np, nr, form))
}

/// The messages bearing on `key` in an encoded segment (`Segment::encode_in`), found by walking
/// its bytes once: its point messages (oldest first) and the range deletes covering it, what
/// the decoded segment's `lookup` finds. The other messages are skipped, not decoded, so a
/// block read to answer one query costs no allocation but the answer's. A segment without
/// range deletes (an LSM-tree's format-1 table blocks keep theirs in the table's head) is
/// walked only up to the first key above `key`.
pub fn lookup_encoded(p: &[u8], key: &[u8], enc: Encoding) -> Result<Vec<Msg>, String> {
    walk_encoded(p, key, enc)
}

/// A segment held as its encoded bytes (checked, not decoded) with where each point message
/// starts, found in one walk when it is read: a point query binary-searches it instead of
/// walking it, and allocates only for what it returns. A wide node's segment holds hundreds of
/// messages, and a walk is half of them on average, at every level of every query.
#[derive(Clone, Debug, PartialEq)]
pub struct RawSegment {
    bytes: Box<[u8]>,
    starts: Box<[u32]>,
    form: Form,
    /// Where the range deletes begin, and how many there are.
    ranges_at: u32,
    ranges: u32,
}

impl RawSegment {
    /// Index `p`, a segment in `enc`; fails on bytes that do not parse as one.
    pub fn new(p: &[u8], enc: Encoding) -> Result<RawSegment, String> {
        let mut r = Reader::new(p);
        let (np, nr, form) = header(&mut r, enc)?;
        let mut starts = Vec::with_capacity(np.min(p.len()));
        for _ in 0..np {
            starts.push(r.position() as u32);
            let (tag, _, _) = head_of(&mut r, form)?;
            skip_body(&mut r, tag, form)?;
        }
        let ranges_at = r.position() as u32;
        for _ in 0..nr {
            if !Msg::decode_in(&mut r, form.ranges())?.is_range() {
                return Err("a point message among the range deletes".into());
            }
        }
        Ok(RawSegment {
            bytes: p.into(),
            starts: starts.into(),
            form,
            ranges_at,
            ranges: u32::try_from(nr).map_err(|_| "too many range deletes")?,
        })
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Memory held, for the cache's charge.
    pub fn heap_bytes(&self) -> usize {
        self.bytes.len() + 4 * self.starts.len()
    }

    fn key_at(&self, i: usize) -> Result<&[u8], String> {
        let mut r = Reader::new(&self.bytes[self.starts[i] as usize..]);
        head_of(&mut r, self.form).map(|(_, _, k)| k)
    }

    /// The messages bearing on `key`: its point messages (oldest first, as held) and the range
    /// deletes covering it; what the decoded segment's `lookup` finds.
    pub fn lookup(&self, key: &[u8]) -> Result<Vec<Msg>, String> {
        let (mut lo, mut hi) = (0, self.starts.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.key_at(mid)? < key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let mut found = Vec::new();
        while lo < self.starts.len() && self.key_at(lo)? == key {
            let mut r = Reader::new(&self.bytes[self.starts[lo] as usize..]);
            found.push(Msg::decode_in(&mut r, self.form)?);
            lo += 1;
        }
        if self.ranges > 0 {
            let mut r = Reader::new(&self.bytes[self.ranges_at as usize..]);
            covering(
                &mut r,
                self.ranges as usize,
                key,
                self.form.ranges(),
                &mut found,
            )?;
        }
        Ok(found)
    }
}

fn walk_encoded(p: &[u8], key: &[u8], enc: Encoding) -> Result<Vec<Msg>, String> {
    let mut r = Reader::new(p);
    let (np, nr, form) = header(&mut r, enc)?;
    let mut found = Vec::new();
    for _ in 0..np {
        let at = r.position();
        let (tag, _, k) = head_of(&mut r, form)?;
        match k.cmp(key) {
            std::cmp::Ordering::Equal => {
                let mut m = Reader::new(&p[at..]);
                let msg = Msg::decode_in(&mut m, form)?;
                r.bytes(m.position() - (r.position() - at))?;
                found.push(msg);
            }
            // The range deletes follow the points: without any, nothing further bears on it.
            std::cmp::Ordering::Greater if nr == 0 => break,
            _ => skip_body(&mut r, tag, form)?,
        }
    }
    covering(&mut r, nr, key, form.ranges(), &mut found)?;
    Ok(found)
}

/// Of the `n` range deletes at `r`, add those covering `key` to `found`.
fn covering(
    r: &mut Reader<'_>,
    n: usize,
    key: &[u8],
    form: Form,
    found: &mut Vec<Msg>,
) -> Result<(), String> {
    for _ in 0..n {
        let m = Msg::decode_in(r, form)?;
        if !m.is_range() {
            return Err("a point message among the range deletes".into());
        }
        if m.covers(key) {
            found.push(m);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::AddU64;

    #[test]
    fn split_tail_keeps_whole_keys_within_the_budget() {
        let mut s = Segment::default();
        let mut seq = 0;
        for k in 0u8..40 {
            // Every fourth key has an upsert after its put: its two messages move together.
            let bodies = if k % 4 == 0 { 2 } else { 1 };
            for b in 0..bodies {
                seq += 1;
                let body = match b {
                    0 => Body::Put(Val::Inline(vec![k; 20])),
                    _ => Body::Upsert(vec![1; 8]),
                };
                s.insert(
                    Msg {
                        key: vec![b'k', k],
                        seq,
                        body,
                    },
                    None,
                );
            }
        }
        let whole = s.clone();
        for keep in [EMPTY_SEGMENT + 1, 100, 333, 500, 900] {
            let mut head = whole.clone();
            let Some(tail) = head.split_tail(keep) else {
                // Not even the first key fits.
                assert!(keep < EMPTY_SEGMENT + whole.points()[0].encoded_len());
                continue;
            };
            assert!(head.bytes() <= keep, "{} > {keep}", head.bytes());
            // The next key would not have fitted: the head is as long as it can be.
            let next = &tail.points()[0];
            let same: usize = tail
                .points()
                .iter()
                .take_while(|m| m.key == next.key)
                .map(Msg::encoded_len)
                .sum();
            assert!(head.bytes() + same > keep);
            assert_ne!(head.points().last().unwrap().key, next.key);
            // Nothing lost, nothing reordered, and the sizes are the encodings'.
            let mut both = head.points().to_vec();
            both.extend_from_slice(tail.points());
            assert_eq!(both, whole.points());
            for part in [&head, &tail] {
                let mut enc = Vec::new();
                part.encode(&mut enc);
                assert_eq!(enc.len(), part.bytes());
            }
        }
        // A segment that fits, or one holding a range delete, is left whole.
        let mut fits = whole.clone();
        assert!(fits.split_tail(whole.bytes()).is_none());
        assert_eq!(fits, whole);
        let mut ranged = whole.clone();
        ranged.insert(
            Msg {
                key: b"a".to_vec(),
                seq: seq + 1,
                body: Body::DeleteRange(b"b".to_vec()),
            },
            None,
        );
        let before = ranged.clone();
        assert!(ranged.split_tail(100).is_none());
        assert_eq!(ranged, before);
    }

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
        for enc in [Encoding::Compact, Encoding::Fixed, Encoding::Shaped] {
            let mut bytes = Vec::new();
            s.encode_in(enc, &mut bytes);
            for k in 0u32..205 {
                let key = k.to_be_bytes();
                let want: Vec<Msg> = s.lookup(&key).cloned().collect();
                assert_eq!(lookup_encoded(&bytes, &key, enc).unwrap(), want, "key {k}");
                let raw = RawSegment::new(&bytes, enc).unwrap();
                assert_eq!(raw.lookup(&key).unwrap(), want, "key {k}");
            }
            let half = &bytes[..bytes.len() / 2];
            assert!(lookup_encoded(half, &199u32.to_be_bytes(), enc).is_err());
        }
    }

    #[test]
    fn a_raw_segment_with_ranges_and_its_walk_find_what_the_decoded_segment_finds() {
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
        for enc in [Encoding::Compact, Encoding::Fixed, Encoding::Shaped] {
            let mut bytes = Vec::new();
            s.encode_in(enc, &mut bytes);
            for k in 0u32..125 {
                let want: Vec<Msg> = s.lookup(&key(k)).cloned().collect();
                let got = RawSegment::new(&bytes, enc).unwrap().lookup(&key(k));
                assert_eq!(got.unwrap(), want, "key {k}");
                // The one-time walk finds the same, range deletes included.
                assert_eq!(
                    lookup_encoded(&bytes, &key(k), enc).unwrap(),
                    want,
                    "key {k}"
                );
            }
            assert!(!lookup_encoded(&bytes, &key(70), enc).unwrap().is_empty());
            let cut = &bytes[..bytes.len() - 3];
            assert!(RawSegment::new(cut, enc).is_err());
        }
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
        // The messages' bytes add up; each piece's own two counts come on top.
        let counts = |s: &Segment| varint_len(s.points().len() as u64) + 1;
        let sum: usize = pieces.iter().map(|p| p.1.bytes() - counts(&p.1)).sum();
        assert_eq!(sum + counts(&whole), bytes);
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
        assert_eq!(Segment::decode(&buf, Encoding::Compact).unwrap(), s);
        let mut fixed = Vec::new();
        s.encode_in(Encoding::Fixed, &mut fixed);
        let sum: usize = s
            .points()
            .iter()
            .chain(s.ranges())
            .map(Msg::fixed_len)
            .sum();
        assert_eq!(fixed.len(), EMPTY_FIXED_SEGMENT + sum);
        assert_eq!(Segment::decode(&fixed, Encoding::Fixed).unwrap(), s);
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
        merged_run_equals_one_insert_at_a_time("k", 60, 40, 30);
    }

    #[test]
    fn a_merged_run_equals_one_insert_at_a_time_where_heads_tie() {
        // Keys that share their first 8 bytes (heads tie and the keys decide), in segments
        // large enough that the merge gallops over long stretches of old messages, and runs
        // both sparse and dense against them.
        merged_run_equals_one_insert_at_a_time("shared-prefix/", 2000, 600, 12);
        merged_run_equals_one_insert_at_a_time("shared-prefix/", 400, 300, 400);
    }

    fn merged_run_equals_one_insert_at_a_time(prefix: &str, keys: u64, base_n: u64, run_n: u64) {
        let mut x = 0x9e37_79b9_u64;
        let mut next = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let key = |i: u64| format!("{prefix}{i:04}");
        let mut seq = 0;
        for _ in 0..50 {
            let mut base = Segment::default();
            for _ in 0..next(base_n) {
                seq += 1;
                let k = key(next(keys));
                let m = match next(4) {
                    0 => up(&k, seq, next(9)),
                    _ => put(&k, seq, &"v".repeat(next(5) as usize)),
                };
                base.insert(m, Some(&AddU64));
            }
            seq += 1;
            let rd = Msg {
                key: key(keys / 2).into_bytes(),
                seq,
                body: Body::DeleteRange(key(keys / 2 + keys / 12).into_bytes()),
            };
            base.insert(rd, Some(&AddU64));
            let mut run: Vec<Msg> = (0..next(run_n))
                .map(|_| {
                    seq += 1;
                    let k = key(next(keys));
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

    #[test]
    fn gallop_counts_what_sorts_before() {
        let keys: Vec<Vec<u8>> = (0..37u32)
            .map(|i| format!("same-head{i:03}").into_bytes())
            .collect();
        let points: Vec<Msg> = keys
            .iter()
            .map(|k| put(std::str::from_utf8(k).unwrap(), 1, "v"))
            .collect();
        let heads: Vec<u64> = keys.iter().map(|k| head(k)).collect();
        for probe in 0..40u32 {
            let k = format!("same-head{probe:03}").into_bytes();
            let want = keys.iter().filter(|o| **o < k).count();
            assert_eq!(gallop(&heads, &points, head(&k), &k), want, "probe {probe}");
            // Just past a key, between two of them.
            let mut k = k.clone();
            k.push(0);
            let want = keys.iter().filter(|o| **o < k).count();
            assert_eq!(
                gallop(&heads, &points, head(&k), &k),
                want,
                "probe {probe} + 0"
            );
        }
        assert_eq!(gallop(&[], &[], 0, b""), 0);
    }

    fn m(key: &[u8], seq: u64, body: Body) -> Msg {
        Msg {
            key: key.to_vec(),
            seq,
            body,
        }
    }

    /// One message of each kind, as the compact encoding lays them out; and the same segment
    /// in the fixed encoding, byte for byte as older trees wrote it, still read.
    fn golden_segment() -> Segment {
        let mut s = Segment::default();
        s.insert(m(b"a", 300, Body::Put(Val::Inline(b"xy".to_vec()))), None);
        s.insert(
            m(
                b"b",
                5,
                Body::Put(Val::Blob {
                    id: 129,
                    len: 70_000,
                }),
            ),
            None,
        );
        s.insert(m(b"c", 6, Body::Delete), None);
        s.insert(m(b"d", 7, Body::Upsert(vec![9])), None);
        s.insert(m(b"e", 8, Body::DeleteRange(b"f".to_vec())), None);
        s
    }

    #[test]
    fn compact_golden_bytes() {
        let s = golden_segment();
        let mut b = Vec::new();
        s.encode(&mut b);
        #[rustfmt::skip]
        let want: &[u8] = &[
            4, 1,                                   // 4 points, 1 range delete
            1, 0xac, 0x02, 1, b'a', 2, b'x', b'y',  // put a@300 = "xy"
            2, 5, 1, b'b', 0xf0, 0xa2, 0x04, 0x81, 0x01, // blob b@5: 70000 bytes, id 129
            3, 6, 1, b'c',                          // delete c@6
            4, 7, 1, b'd', 1, 9,                    // upsert d@7 [9]
            5, 8, 1, b'e', 1, b'f',                 // delete [e, f) @8
        ];
        assert_eq!(b, want);
        assert_eq!(s.bytes(), want.len());
        assert_eq!(Segment::decode(want, Encoding::Compact).unwrap(), s);
        // The 8-byte pair of seed 001 (4-byte key and value) at a sequence number under 2^21:
        // 14 bytes, against 23 fixed.
        let pair = Msg {
            key: vec![0; 4],
            seq: 1 << 20,
            body: Body::Put(Val::Inline(vec![0; 4])),
        };
        assert_eq!((pair.encoded_len(), pair.fixed_len()), (14, 23));
    }

    #[test]
    fn the_fixed_encoding_is_still_read() {
        #[rustfmt::skip]
        let old: &[u8] = &[
            4, 0, 0, 0, 1, 0, 0, 0,
            1, 0x2c, 1, 0, 0, 0, 0, 0, 0, 1, 0, b'a', 2, 0, 0, 0, b'x', b'y',
            2, 5, 0, 0, 0, 0, 0, 0, 0, 1, 0, b'b', 0x70, 0x11, 1, 0, 0x81, 0, 0, 0, 0, 0, 0, 0,
            3, 6, 0, 0, 0, 0, 0, 0, 0, 1, 0, b'c',
            4, 7, 0, 0, 0, 0, 0, 0, 0, 1, 0, b'd', 1, 0, 0, 0, 9,
            5, 8, 0, 0, 0, 0, 0, 0, 0, 1, 0, b'e', 1, 0, b'f',
        ];
        let s = golden_segment();
        let got = Segment::decode(old, Encoding::Fixed).unwrap();
        assert_eq!(got, s);
        // Its accounting is the compact encoding's, which is what it is written back in.
        assert_eq!(got.bytes(), 35);
        let mut again = Vec::new();
        s.encode_in(Encoding::Fixed, &mut again);
        assert_eq!(again, old);
        // Either decoder refuses the other's bytes here rather than misreading them.
        assert!(Segment::decode(old, Encoding::Compact).is_err());
        let mut compact = Vec::new();
        s.encode(&mut compact);
        assert!(Segment::decode(&compact, Encoding::Fixed).is_err());
    }

    /// The shaped encoding's bytes, pinned for both forms: a format change must be a new block
    /// kind.
    #[test]
    fn shaped_golden_bytes() {
        // Mixed shapes: form 0, the messages compact, as `compact_golden_bytes` has them.
        let s = golden_segment();
        let mut b = Vec::new();
        s.encode_in(Encoding::Shaped, &mut b);
        let mut compact = Vec::new();
        s.encode(&mut compact);
        assert_eq!(b[..2], compact[..2]);
        assert_eq!(b[2], 0);
        assert_eq!(b[3..], compact[2..]);
        assert_eq!(Segment::decode(&b, Encoding::Shaped).unwrap(), s);

        // One shape (puts of 2-byte keys and 3-byte values) beside a range delete: form 1.
        let mut s = Segment::default();
        s.insert(m(b"ka", 300, Body::Put(Val::Inline(b"xyz".to_vec()))), None);
        s.insert(m(b"kb", 5, Body::Put(Val::Inline(b"uvw".to_vec()))), None);
        s.insert(m(b"z", 301, Body::DeleteRange(b"zz".to_vec())), None);
        let mut b = Vec::new();
        s.encode_in(Encoding::Shaped, &mut b);
        #[rustfmt::skip]
        let want: &[u8] = &[
            2, 1,                                   // 2 points, 1 range delete
            1, 1, 2, 3,                             // form 1: puts, 2-byte keys, 3-byte values
            0xac, 0x02, b'k', b'a', b'x', b'y', b'z', // ka@300 = "xyz"
            5, b'k', b'b', b'u', b'v', b'w',        // kb@5 = "uvw"
            5, 0xad, 0x02, 1, b'z', 2, b'z', b'z',  // delete [z, zz) @301, compact
        ];
        assert_eq!(b, want);
        // The accounting stays the compact encoding's: 3 bytes more a put, 4 fewer for the
        // form and the shape.
        assert_eq!(s.bytes(), want.len() + 2 * 3 - 4);
        assert_eq!(Segment::decode(want, Encoding::Shaped).unwrap(), s);
        for k in [&b"ka"[..], b"kb", b"kc", b"z", b"zy"] {
            let found: Vec<Msg> = s.lookup(k).cloned().collect();
            assert_eq!(lookup_encoded(want, k, Encoding::Shaped).unwrap(), found);
            let raw = RawSegment::new(want, Encoding::Shaped).unwrap();
            assert_eq!(raw.lookup(k).unwrap(), found);
        }

        // Deletes and upserts have shapes too; a delete's value length is 0.
        let mut d = Segment::default();
        d.insert(m(b"a", 1, Body::Delete), None);
        d.insert(m(b"b", 2, Body::Delete), None);
        let mut b = Vec::new();
        d.encode_in(Encoding::Shaped, &mut b);
        assert_eq!(b, [2, 0, 1, 3, 1, 0, 1, b'a', 2, b'b']);
        assert_eq!(Segment::decode(&b, Encoding::Shaped).unwrap(), d);

        // Bytes with a second reading are refused: form 0 where form 1 applies, a shape no
        // message can have, an unknown form, a shape with no points.
        let mut form0 = vec![2, 0, 0];
        for msg in d.points() {
            msg.encode(&mut form0);
        }
        assert!(Segment::decode(&form0, Encoding::Shaped)
            .unwrap_err()
            .contains("form"));
        for bad in [
            &[2u8, 0, 1, 2, 1, 0, 1, b'a', 2, b'b'][..], // tag 2 (blob puts) has no shape
            &[2, 0, 1, 3, 1, 1, 1, b'a', 0, 2, b'b', 0], // a delete with a value
            &[2, 0, 2, 3, 1, 0, 1, b'a', 2, b'b'],       // form 2
            &[0, 0, 1, 1, 1, 1],                         // a shape of no messages
        ] {
            assert!(Segment::decode(bad, Encoding::Shaped).is_err(), "{bad:?}");
            assert!(RawSegment::new(bad, Encoding::Shaped).is_err(), "{bad:?}");
        }
    }
}
