//! A leaf's basement node: its entries kept in their on-disk encoding, in key order, in one
//! buffer, with an offset and an 8-byte key head per entry beside it.
//!
//! Why flat: an entry held as a key `Vec` and a value `Vec` costs two heap objects and about
//! 90 bytes of overhead, and every search probe that ties on the head chases a pointer. Here an
//! entry costs its encoding plus 12 bytes, reading a basement from disk allocates three
//! vectors whatever its size, and writing one back is a copy of `data`.
//!
//! ```text
//! entry (compact, written today): key length << 1 | blob varint, value length varint, key,
//!                                 value (inline) or blob id u64 (blob; the length is the
//!                                 blob's)
//! entry (fixed, leaves of the older kind, still read): key length u16, tag u8 (0 inline,
//!                                 1 blob), value length u32, key, value or blob id u64
//! basement (compact kind):        count u32, entries compact
//! basement (shaped kind, written today): count u32, form u8, then
//!                                 form 0: entries compact
//!                                 form 1: key length varint, value length varint, then per
//!                                 entry: key, value (every entry inline, of those lengths)
//! ```
//! A 16-byte key with a 100-byte value takes 2 bytes of lengths compact, 7 fixed: 4% of the
//! leaf level's bytes, on disk, in the cache and in every leaf write. Records of one size (a
//! benchmark's, a table of fixed-width rows) need no lengths per entry at all: form 1 says
//! them once a basement. Form 1 is written exactly when it applies (at least one entry, all
//! inline with one key length and one value length), so a basement has one encoding.
//!
//! Invariants: `data` is exactly the entries, compact, back to back, keys strictly increasing
//! (a basement read in another encoding is re-encoded compact as it is decoded, and a shaped
//! one of form 1 written from `data` with its lengths stripped); `offs[i]` is where entry i
//! starts and `heads[i] == keys::head(key(i))`.
//!
//! `data` is reference-counted so that a checkpoint can write a basement of mixed shapes from
//! another thread without a copy (`shaped`, form 0): a change to a basement whose bytes a
//! checkpoint still holds copies them first (`Arc::make_mut`), so the checkpoint writes the
//! bytes as they were. Form 1 is a copy made as the node is sealed.

use crate::codec::{put_varint, varint_len, Reader};
use crate::kv::entries::decode_entries;
use crate::kv::msg::Encoding;
use crate::kv::{head, Keys, Val};
use crate::storage::{Chunk, NodeId};
use std::cmp::Ordering;
use std::sync::Arc;

/// The fewest bytes an entry takes (compact: two one-byte lengths, an empty key and value).
const MIN_ENTRY: usize = 2;

/// A value as it lies in a basement, borrowed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ValRef<'a> {
    Inline(&'a [u8]),
    Blob { id: NodeId, len: u32 },
}

impl ValRef<'_> {
    pub fn to_val(self) -> Val {
        match self {
            ValRef::Inline(b) => Val::Inline(b.to_vec()),
            ValRef::Blob { id, len } => Val::Blob { id, len },
        }
    }
    pub fn logical_len(self) -> usize {
        match self {
            ValRef::Inline(b) => b.len(),
            ValRef::Blob { len, .. } => len as usize,
        }
    }
}

impl<'a> From<&'a Val> for ValRef<'a> {
    fn from(v: &'a Val) -> ValRef<'a> {
        match v {
            Val::Inline(b) => ValRef::Inline(b),
            Val::Blob { id, len } => ValRef::Blob { id: *id, len: *len },
        }
    }
}

/// An entry's two lengths as written: the key's with the blob bit, and the value's.
fn lengths(klen: usize, val: &Val) -> (u64, u64) {
    match val {
        Val::Inline(b) => ((klen as u64) << 1, b.len() as u64),
        Val::Blob { len, .. } => ((klen as u64) << 1 | 1, *len as u64),
    }
}

/// Bytes of an entry's lengths.
fn header_len(klen: usize, val: &Val) -> usize {
    let (k, v) = lengths(klen, val);
    varint_len(k) + varint_len(v)
}

/// Encoded bytes of one entry.
pub fn entry_len(key: &[u8], val: &Val) -> usize {
    header_len(key.len(), val) + key.len() + val.encoded_len()
}

fn encode_entry(key: &[u8], val: &Val, out: &mut Vec<u8>) {
    let at = out.len();
    out.resize(at + entry_len(key, val), 0);
    write_entry(&mut out[at..], key, val);
}

/// Write an entry into `dst`, which is exactly `entry_len` bytes.
fn write_entry(dst: &mut [u8], key: &[u8], val: &Val) {
    let h = write_header(dst, key.len(), val);
    dst[h..h + key.len()].copy_from_slice(key);
    write_value(&mut dst[h + key.len()..], val);
}

/// Write an entry's lengths at the start of `dst`; their length.
fn write_header(dst: &mut [u8], klen: usize, val: &Val) -> usize {
    let (k, v) = lengths(klen, val);
    let n = put_varint_at(dst, k);
    n + put_varint_at(&mut dst[n..], v)
}

fn put_varint_at(dst: &mut [u8], mut v: u64) -> usize {
    let mut i = 0;
    while v >= 0x80 {
        dst[i] = v as u8 | 0x80;
        v >>= 7;
        i += 1;
    }
    dst[i] = v as u8;
    i + 1
}

/// A varint of `data` at `at`, which the basement wrote or checked when it decoded it.
#[inline]
fn varint_at(data: &[u8], at: &mut usize) -> u64 {
    let b = data[*at];
    *at += 1;
    if b < 0x80 {
        return b as u64;
    }
    let mut v = (b & 0x7f) as u64;
    let mut shift = 7;
    loop {
        let b = data[*at];
        *at += 1;
        v |= ((b & 0x7f) as u64) << shift;
        if b < 0x80 {
            return v;
        }
        shift += 7;
    }
}

/// Where entry parts lie in `data`, for the entry starting at `o`.
struct Layout {
    /// Where the key starts (the lengths end).
    key: usize,
    klen: usize,
    blob: bool,
    vlen: u64,
}

#[inline]
fn layout(data: &[u8], o: usize) -> Layout {
    let mut at = o;
    let k = varint_at(data, &mut at);
    let vlen = varint_at(data, &mut at);
    Layout {
        key: at,
        klen: (k >> 1) as usize,
        blob: k & 1 == 1,
        vlen,
    }
}

fn write_value(dst: &mut [u8], val: &Val) {
    match val {
        Val::Inline(b) => dst.copy_from_slice(b),
        Val::Blob { id, .. } => dst.copy_from_slice(&id.to_le_bytes()),
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Basement {
    data: Arc<Vec<u8>>,
    offs: Vec<u32>,
    heads: Vec<u64>,
}

impl Basement {
    pub fn with_capacity(entries: usize, bytes: usize) -> Basement {
        Basement {
            data: Arc::new(Vec::with_capacity(bytes)),
            offs: Vec::with_capacity(entries),
            heads: Vec::with_capacity(entries),
        }
    }

    pub fn len(&self) -> usize {
        self.offs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offs.is_empty()
    }

    /// Bytes of the basement as written: the count, then the entries.
    pub fn encoded_len(&self) -> usize {
        4 + self.data.len()
    }

    /// Heap bytes held, for the cache charge.
    pub fn heap_bytes(&self) -> usize {
        self.data.capacity() + 4 * self.offs.capacity() + 8 * self.heads.capacity()
    }

    fn start(&self, i: usize) -> usize {
        self.offs[i] as usize
    }

    fn end(&self, i: usize) -> usize {
        self.offs
            .get(i + 1)
            .map_or(self.data.len(), |&o| o as usize)
    }

    /// Encoded bytes of entry i.
    pub fn entry_bytes(&self, i: usize) -> usize {
        self.end(i) - self.start(i)
    }

    pub fn key(&self, i: usize) -> &[u8] {
        let l = layout(&self.data, self.start(i));
        &self.data[l.key..l.key + l.klen]
    }

    pub fn val(&self, i: usize) -> ValRef<'_> {
        let l = layout(&self.data, self.start(i));
        let body = &self.data[l.key + l.klen..self.end(i)];
        if l.blob {
            ValRef::Blob {
                id: u64::from_le_bytes(body[..8].try_into().expect("8 bytes")),
                len: l.vlen as u32,
            }
        } else {
            ValRef::Inline(body)
        }
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&[u8], ValRef<'_>)> + '_ {
        (0..self.len()).map(|i| (self.key(i), self.val(i)))
    }

    pub fn first_key(&self) -> Option<&[u8]> {
        (!self.is_empty()).then(|| self.key(0))
    }

    pub fn last_key(&self) -> Option<&[u8]> {
        (!self.is_empty()).then(|| self.key(self.len() - 1))
    }

    /// Ok(i) if `key` is entry i, else Err(where it would go). Compares the heads first and
    /// reads a key from `data` only when the heads tie.
    pub fn search(&self, key: &[u8]) -> Result<usize, usize> {
        self.search_from(0, key)
    }

    /// `search` among the entries from `from` on (`key` must not sort before entry `from`).
    pub fn search_from(&self, from: usize, key: &[u8]) -> Result<usize, usize> {
        let h = head(key);
        let (mut lo, mut hi) = (from, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            let ord = match self.heads[mid].cmp(&h) {
                Ordering::Equal => self.key(mid).cmp(key),
                o => o,
            };
            match ord {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    /// Append an entry whose key is above every key here.
    pub fn push(&mut self, key: &[u8], val: &Val) {
        debug_assert!(self.last_key().is_none_or(|l| l < key));
        self.offs.push(self.data.len() as u32);
        self.heads.push(head(key));
        encode_entry(key, val, self.data_mut());
    }

    /// Append entries `range` of `other` as they are encoded (their keys must be above every
    /// key here).
    pub fn extend_from(&mut self, other: &Basement, range: std::ops::Range<usize>) {
        if range.is_empty() {
            return;
        }
        debug_assert!(self.last_key().is_none_or(|l| l < other.key(range.start)));
        let (from, to) = (other.start(range.start), other.end(range.end - 1));
        let shift = self.data.len() as i64 - from as i64;
        self.offs.extend(
            other.offs[range.clone()]
                .iter()
                .map(|&o| (o as i64 + shift) as u32),
        );
        self.heads.extend_from_slice(&other.heads[range]);
        self.data_mut().extend_from_slice(&other.data[from..to]);
    }

    /// Put an entry at position i, which must keep the keys in order.
    pub fn insert(&mut self, i: usize, key: &[u8], val: &Val) {
        let at = if i == self.len() {
            self.data.len()
        } else {
            self.start(i)
        };
        let len = entry_len(key, val);
        self.open_gap(at, 0, len);
        write_entry(&mut self.data_mut()[at..at + len], key, val);
        for o in &mut self.offs[i..] {
            *o += len as u32;
        }
        self.offs.insert(i, at as u32);
        self.heads.insert(i, head(key));
    }

    /// Give entry i the value `val`.
    pub fn set(&mut self, i: usize, val: &Val) {
        let (at, end) = (self.start(i), self.end(i));
        let l = layout(&self.data, at);
        let (old_key, klen) = (l.key - at, l.klen);
        let new_key = header_len(klen, val);
        let len = new_key + klen + val.encoded_len();
        // The key is moved within the entry only when the lengths' bytes change size: before
        // the entry shrinks (its old span still holds both places), after it grows.
        let move_key = |data: &mut Vec<u8>| {
            if new_key != old_key {
                data.copy_within(at + old_key..at + old_key + klen, at + new_key);
            }
        };
        if len < end - at {
            move_key(self.data_mut());
            self.open_gap(at, end - at, len);
        } else {
            self.open_gap(at, end - at, len);
            move_key(self.data_mut());
        }
        let dst = &mut self.data_mut()[at..at + len];
        write_header(dst, klen, val);
        write_value(&mut dst[new_key + klen..], val);
        if len != end - at {
            for o in &mut self.offs[i + 1..] {
                *o = (*o as usize + len - (end - at)) as u32;
            }
        }
    }

    /// Make the `old` bytes at `at` span `new` bytes, moving what follows (the bytes of the
    /// span itself are left as they were, up to the shorter of the two).
    fn open_gap(&mut self, at: usize, old: usize, new: usize) {
        let tail = at + old;
        let data = self.data_mut();
        let len = data.len();
        if new > old {
            data.resize(len + new - old, 0);
            data.copy_within(tail..len, at + new);
        } else if new < old {
            data.copy_within(tail..len, at + new);
            data.truncate(len - (old - new));
        }
    }

    /// The entries' bytes to change, copied first if a checkpoint still holds them.
    fn data_mut(&mut self) -> &mut Vec<u8> {
        Arc::make_mut(&mut self.data)
    }

    pub fn remove(&mut self, i: usize) {
        let (at, end) = (self.start(i), self.end(i));
        self.data_mut().drain(at..end);
        self.offs.remove(i);
        self.heads.remove(i);
        for o in &mut self.offs[i..] {
            *o -= (end - at) as u32;
        }
    }

    /// Entries from `at` on move to the returned basement.
    pub fn split_off(&mut self, at: usize) -> Basement {
        if at == self.len() {
            return Basement::default();
        }
        let cut = self.start(at);
        let data = Arc::new(self.data_mut().split_off(cut));
        let mut offs = self.offs.split_off(at);
        for o in &mut offs {
            *o -= cut as u32;
        }
        let heads = self.heads.split_off(at);
        Basement { data, offs, heads }
    }

    /// Give back spare capacity when more than a third of it is unused.
    pub fn shrink(&mut self) {
        if self.data.capacity() > self.data.len() + self.data.len() / 2 {
            self.data_mut().shrink_to_fit();
            self.offs.shrink_to_fit();
            self.heads.shrink_to_fit();
        }
    }

    /// Append `other`, whose keys must all be above this basement's.
    pub fn append(&mut self, other: &Basement) {
        debug_assert!(other
            .first_key()
            .is_none_or(|f| self.last_key().is_none_or(|l| l < f)));
        let base = self.data.len() as u32;
        self.data_mut().extend_from_slice(&other.data);
        self.offs.extend(other.offs.iter().map(|o| o + base));
        self.heads.extend_from_slice(&other.heads);
    }

    /// The compact encoding in one buffer (nodes write `shaped`'s pieces).
    #[cfg(test)]
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.count());
        out.extend_from_slice(&self.data);
    }

    fn count(&self) -> [u8; 4] {
        (self.len() as u32).to_le_bytes()
    }

    /// The shaped kinds' encoding, in the two pieces a node writes back to back: the count,
    /// the form and (form 1) the shape; then the entries, shared with this basement without a
    /// copy (it copies them before its next change while they are held), in form 1 each
    /// written without its lengths (`Chunk::Strided`: stripped only as the block is written).
    pub fn shaped(&self) -> (Vec<u8>, Chunk) {
        let mut out = Vec::with_capacity(16);
        out.extend_from_slice(&self.count());
        let Some((h, klen, vlen)) = self.shape() else {
            out.push(0);
            return (out, Chunk::Shared(self.data.clone()));
        };
        out.push(1);
        put_varint(&mut out, klen as u64);
        put_varint(&mut out, vlen as u64);
        let body = Chunk::Strided {
            data: self.data.clone(),
            stride: h + klen + vlen,
            skip: h,
        };
        (out, body)
    }

    /// (bytes of an entry's lengths, key length, value length) when every entry has them and
    /// is inline, and there is one: then every entry starts with the same length bytes and
    /// they lie `e` bytes apart.
    fn shape(&self) -> Option<(usize, usize, usize)> {
        if self.is_empty() {
            return None;
        }
        let l = layout(&self.data, 0);
        if l.blob {
            return None;
        }
        let (h, klen, vlen) = (l.key, l.klen, l.vlen as usize);
        let e = h + klen + vlen;
        if self.data.len() != e * self.len() {
            return None;
        }
        let first = &self.data[..h];
        let same = (0..self.len()).all(|i| {
            let at = i * e;
            self.offs[i] as usize == at && &self.data[at..at + h] == first
        });
        same.then_some((h, klen, vlen))
    }

    /// A basement from its encoding, checking every length, tag and the key order; a fixed
    /// one is re-encoded compact.
    pub fn decode(p: &[u8], enc: Encoding) -> std::result::Result<Basement, String> {
        match enc {
            Encoding::Compact => Basement::decode_compact(p, 4),
            Encoding::Fixed => Basement::decode_fixed(p),
            Encoding::Shaped => Basement::decode_shaped(p),
        }
    }

    /// A basement whose count is `p`'s first 4 bytes and whose compact entries start at `at`.
    fn decode_compact(p: &[u8], at: usize) -> std::result::Result<Basement, String> {
        let mut r = Reader::new(p);
        let n = r.u32()? as usize;
        r.bytes(at - 4)?;
        let body = &p[at..];
        let cap = r.capacity(n, MIN_ENTRY);
        let mut b = Basement {
            data: Arc::default(),
            offs: Vec::with_capacity(cap),
            heads: Vec::with_capacity(cap),
        };
        let mut prev: Option<&[u8]> = None;
        for _ in 0..n {
            let start = r.position() - at;
            let k = r.varint()?;
            let vlen = r.varint()?;
            if k >> 1 > u16::MAX as u64 || vlen > u32::MAX as u64 {
                return Err(format!(
                    "an entry's lengths {} and {vlen} are too long",
                    k >> 1
                ));
            }
            let key = r.bytes((k >> 1) as usize)?;
            if k & 1 == 1 {
                r.u64()?;
            } else {
                r.bytes(vlen as usize)?;
            }
            if prev.is_some_and(|p| p >= key) {
                return Err("entries out of order".into());
            }
            prev = Some(key);
            b.offs.push(start as u32);
            b.heads.push(head(key));
        }
        r.finish()?;
        b.data = Arc::new(body.to_vec());
        Ok(b)
    }

    fn decode_shaped(p: &[u8]) -> std::result::Result<Basement, String> {
        let mut r = Reader::new(p);
        let n = r.u32()? as usize;
        match r.u8()? {
            0 => {
                let b = Basement::decode_compact(p, 5)?;
                if b.shape().is_some() {
                    return Err("a shaped basement in the wrong form".into());
                }
                Ok(b)
            }
            1 => {
                let (klen, vlen) = (r.varint()?, r.varint()?);
                if klen > u16::MAX as u64 || vlen > u32::MAX as u64 {
                    return Err(format!(
                        "a shape of {klen}-byte keys and {vlen}-byte values"
                    ));
                }
                let (klen, vlen) = (klen as usize, vlen as usize);
                let size = klen + vlen;
                let body = &p[r.position()..];
                // Keys are distinct, so only one entry can have an empty key: that bounds n
                // by the bytes even when an entry takes none.
                if n == 0 || body.len() != n.saturating_mul(size) || (klen == 0 && n > 1) {
                    return Err(format!(
                        "{n} entries of {size} bytes in a basement of {} bytes",
                        body.len()
                    ));
                }
                let mut lengths = Vec::with_capacity(8);
                put_varint(&mut lengths, (klen as u64) << 1);
                put_varint(&mut lengths, vlen as u64);
                let h = lengths.len();
                let e = h + size;
                // One buffer, filled entry by entry in place: a point read that misses decodes
                // a basement, and growing a vector per entry cost it twice the compact decode.
                let mut data = vec![0u8; n * e];
                let mut offs = Vec::with_capacity(n);
                let mut heads = Vec::with_capacity(n);
                let mut prev: Option<&[u8]> = None;
                for (i, dst) in data.chunks_exact_mut(e).enumerate() {
                    let entry = &body[i * size..(i + 1) * size];
                    let key = &entry[..klen];
                    if prev.is_some_and(|p| p >= key) {
                        return Err("entries out of order".into());
                    }
                    prev = Some(key);
                    dst[..h].copy_from_slice(&lengths);
                    dst[h..].copy_from_slice(entry);
                    offs.push((i * e) as u32);
                    heads.push(head(key));
                }
                Ok(Basement {
                    data: Arc::new(data),
                    offs,
                    heads,
                })
            }
            f => Err(format!("unknown basement form {f}")),
        }
    }

    /// The entries of an encoded basement as keys and values (for salvage, which reads blocks
    /// without a tree).
    pub fn entries(p: &[u8], enc: Encoding) -> std::result::Result<(Keys, Vec<Val>), String> {
        let b = Basement::decode(p, enc)?;
        let mut keys = Keys::default();
        let vals = b
            .iter()
            .map(|(k, v)| {
                keys.push(k.to_vec());
                v.to_val()
            })
            .collect();
        Ok((keys, vals))
    }

    /// A basement written in the fixed encoding (leaves of the older kind, `kv::entries`),
    /// re-encoded.
    fn decode_fixed(p: &[u8]) -> std::result::Result<Basement, String> {
        let mut r = Reader::new(p);
        let (keys, vals) = decode_entries(&mut r)?;
        r.finish()?;
        let mut b = Basement::with_capacity(vals.len(), p.len());
        for (k, v) in keys.iter().zip(&vals) {
            b.push(k, v);
        }
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inline(s: &str) -> Val {
        Val::Inline(s.as_bytes().to_vec())
    }

    /// The shaped encoding in one buffer.
    fn shaped(b: &Basement) -> Vec<u8> {
        let (mut out, body) = b.shaped();
        out.extend_from_slice(&body.bytes());
        out
    }

    /// The shaped kind's bytes, pinned for both forms (a format change must be a new block
    /// kind), and the bytes with a second reading that it refuses.
    #[test]
    fn the_shaped_encoding_is_pinned_and_has_one_reading() {
        let mut b = Basement::default();
        b.push(b"ka", &inline("xyz"));
        b.push(b"kb", &inline("uvw"));
        let (_, body) = b.shaped();
        // Stripped of the lengths as it is written, from the basement's own bytes.
        assert!(matches!(&body, Chunk::Strided { data, stride: 7, skip: 2 }
            if Arc::ptr_eq(data, &b.data)));
        let first = shaped(&b);
        assert_eq!(body.len() + 7, first.len());
        let hex: String = first.iter().map(|x| format!("{x:02x}")).collect();
        // count 2, form 1, key length 2, value length 3, then each key and value.
        assert_eq!(
            hex,
            "02000000 01 02 03 6b61 78797a 6b62 757677".replace(' ', "")
        );
        assert_eq!(Basement::decode(&first, Encoding::Shaped).unwrap(), b);
        // Two bytes of lengths fewer an entry than compact; the form and the shape cost 3.
        let mut compact = Vec::new();
        b.encode(&mut compact);
        assert_eq!(compact.len() + 3, first.len() + 2 * 2);

        // Another value length, or blobs: form 0, the compact entries shared, not copied.
        let mut mixed = b.clone();
        mixed.push(b"kc", &inline("a longer value"));
        let mut blobs = Basement::default();
        blobs.push(b"a", &Val::Blob { id: 1, len: 500 });
        blobs.push(b"b", &Val::Blob { id: 2, len: 500 });
        for m in [&mixed, &blobs, &Basement::default()] {
            let (first, body) = m.shaped();
            assert_eq!(first[..], [m.len() as u8, 0, 0, 0, 0]);
            assert!(matches!(&body, Chunk::Shared(d) if Arc::ptr_eq(d, &m.data)));
            assert_eq!(Basement::decode(&shaped(m), Encoding::Shaped).unwrap(), *m);
        }

        let refused = |p: &[u8], why: &str| {
            let e = Basement::decode(p, Encoding::Shaped).unwrap_err();
            assert!(e.contains(why), "{p:?}: {e}");
        };
        // Form 0 where form 1 applies.
        let mut form0 = vec![2, 0, 0, 0, 0];
        form0.extend_from_slice(&b.data);
        refused(&form0, "form");
        refused(&[1, 0, 0, 0, 2], "form");
        refused(&[2, 0, 0, 0, 1, 1, 1, b'b', b'x', b'a', b'y'], "order");
        refused(&first[..first.len() - 1], "entries");
        refused(&[0, 0, 0, 0, 1, 1, 1], "entries");
        // Two empty keys (entries of no bytes: the count alone cannot size anything).
        refused(&[0xff, 0xff, 0xff, 0xff, 1, 0, 0], "entries");
    }

    /// The basement's entries as owned pairs, for comparing against a plain model.
    fn pairs(b: &Basement) -> Vec<(Vec<u8>, Val)> {
        b.iter().map(|(k, v)| (k.to_vec(), v.to_val())).collect()
    }

    #[test]
    fn edits_agree_with_a_sorted_vector_and_survive_encoding() {
        let mut model: Vec<(Vec<u8>, Val)> = Vec::new();
        let mut b = Basement::default();
        // Keys that tie on their 8-byte heads, blobs, empty values, and value sizes that
        // change on update, so offsets shift both ways.
        let ops: Vec<(&str, Option<Val>)> = vec![
            ("m", Some(inline("1"))),
            ("abcdefgh", Some(inline(""))),
            ("abcdefgh\0", Some(Val::Blob { id: 9, len: 5000 })),
            ("abcdefgi", Some(inline("a longer value"))),
            ("m", Some(inline("a much longer value than before"))),
            ("abcdefgh", None),
            ("z", Some(inline("zz"))),
            ("m", Some(inline("x"))),
            ("", Some(inline("empty key"))),
            ("abcdefgh\0", None),
            ("q", Some(inline("q"))),
        ];
        for (k, v) in ops {
            let k = k.as_bytes();
            let at = model.binary_search_by(|(mk, _)| mk.as_slice().cmp(k));
            assert_eq!(b.search(k), at, "search {k:?}");
            match (at, v) {
                (Ok(i), Some(v)) => {
                    b.set(i, &v);
                    model[i].1 = v;
                }
                (Ok(i), None) => {
                    b.remove(i);
                    model.remove(i);
                }
                (Err(i), Some(v)) => {
                    b.insert(i, k, &v);
                    model.insert(i, (k.to_vec(), v));
                }
                (Err(_), None) => {}
            }
            assert_eq!(pairs(&b), model);
            let size: usize = model.iter().map(|(k, v)| entry_len(k, v)).sum();
            assert_eq!(b.encoded_len(), 4 + size);
            assert_eq!(Basement::decode(&shaped(&b), Encoding::Shaped).unwrap(), b);
        }
        let mut enc = Vec::new();
        b.encode(&mut enc);
        assert_eq!(enc.len(), b.encoded_len());
        assert_eq!(Basement::decode(&enc, Encoding::Compact).unwrap(), b);

        // Split and rejoin at every position, and rebuild entry by entry.
        for at in 0..=b.len() {
            let mut left = b.clone();
            let right = left.split_off(at);
            assert_eq!(pairs(&left), model[..at]);
            assert_eq!(pairs(&right), model[at..]);
            left.append(&right);
            assert_eq!(left, b);
        }
        let mut copy = Basement::default();
        for i in 0..b.len() {
            copy.extend_from(&b, i..i + 1);
        }
        assert_eq!(copy, b);
        for mid in 0..=b.len() {
            let mut copy = Basement::default();
            copy.extend_from(&b, 0..mid);
            copy.extend_from(&b, mid..mid);
            copy.extend_from(&b, mid..b.len());
            assert_eq!(copy, b);
            assert_eq!(b.search_from(mid, b"zz"), Err(b.len()));
        }
    }

    #[test]
    fn decode_rejects_bad_order_lengths_and_varints() {
        let mut b = Basement::default();
        b.push(b"a", &inline("1"));
        b.push(b"b", &inline("2"));
        let mut enc = Vec::new();
        b.encode(&mut enc);
        let decode = |p: &[u8]| Basement::decode(p, Encoding::Compact);
        assert_eq!(decode(&enc).unwrap(), b);
        let mut swapped = enc.clone();
        swapped[4 + MIN_ENTRY] = b'c';
        assert!(decode(&swapped).unwrap_err().contains("order"));
        assert!(decode(&enc[..enc.len() - 1]).is_err());
        let mut long = enc.clone();
        long.push(0);
        assert!(decode(&long).is_err());
        // A length not in its shortest form (0x82 0x00 for 2) has a second encoding: refused.
        let mut padded = enc[..4].to_vec();
        padded.extend_from_slice(&[0x82, 0x00]);
        padded.extend_from_slice(&enc[5..]);
        assert!(decode(&padded).unwrap_err().contains("shortest"));
    }

    /// The compact encoding's bytes, pinned: a format change must be a new block kind.
    #[test]
    fn the_compact_encoding_is_pinned() {
        let mut b = Basement::default();
        b.push(b"k", &inline("v1"));
        b.push(
            b"long",
            &Val::Blob {
                id: 0x0102,
                len: 300,
            },
        );
        let mut enc = Vec::new();
        b.encode(&mut enc);
        let hex: String = enc.iter().map(|x| format!("{x:02x}")).collect();
        // count 2; "k": key 1 << 1, value 2, key, value; "long": key 4 << 1 | 1 (a blob),
        // length 300 as a varint (ac 02), key, blob id u64.
        assert_eq!(
            hex,
            "0200000002026b7631 09ac026c6f6e670201000000000000".replace(' ', "")
        );
        assert_eq!(b.encoded_len(), enc.len());
        assert_eq!(entry_len(b"k", &inline("v1")), 5);
    }

    #[test]
    fn a_fixed_basement_is_read_and_re_encoded_compact() {
        let entries: Vec<(&[u8], Val)> = vec![
            (b"", inline("")),
            (b"a", inline("one")),
            (b"b", Val::Blob { id: 7, len: 70_000 }),
            (b"c", inline(&"x".repeat(200))),
        ];
        // Written as the B+-tree writes its leaves (the same fixed format).
        let mut keys = Keys::default();
        let mut compact = Basement::default();
        for (k, v) in &entries {
            keys.push(k.to_vec());
            compact.push(k, v);
        }
        let vals: Vec<Val> = entries.iter().map(|(_, v)| v.clone()).collect();
        let mut fixed = Vec::new();
        crate::kv::entries::encode_entries(&keys, &vals, &mut fixed);
        let read = Basement::decode(&fixed, Encoding::Fixed).unwrap();
        assert_eq!(read, compact);
        assert_eq!(
            pairs(&read),
            entries
                .iter()
                .map(|(k, v)| (k.to_vec(), v.clone()))
                .collect::<Vec<_>>()
        );
        // 7 bytes of lengths per entry fixed, 2 to 4 compact.
        assert_eq!(fixed.len() - read.encoded_len(), 4 * 7 - (2 + 2 + 4 + 3));
        let mut bad_tag = fixed.clone();
        bad_tag[4 + 2] = 7;
        assert!(Basement::decode(&bad_tag, Encoding::Fixed)
            .unwrap_err()
            .contains("tag"));
        assert!(Basement::decode(&fixed[..fixed.len() - 1], Encoding::Fixed).is_err());
    }

    #[test]
    fn set_moves_the_key_when_the_lengths_change_size() {
        // Values crossing 127 and 16383 bytes change the value length's varint size, both
        // ways, and a blob's logical length can be larger than an inline value it replaces.
        let sizes = [0usize, 1, 127, 128, 300, 16_383, 16_384, 5];
        let mut b = Basement::default();
        for k in [&b"a"[..], b"key-two", b"z"] {
            b.push(k, &inline("seed"));
        }
        let mut model = pairs(&b);
        for (n, &size) in sizes.iter().enumerate() {
            for i in 0..b.len() {
                let v = if (n + i) % 3 == 0 {
                    Val::Blob {
                        id: n as u64,
                        len: size as u32 * 1000,
                    }
                } else {
                    Val::Inline(vec![b'0' + (n % 10) as u8; size])
                };
                b.set(i, &v);
                model[i].1 = v;
                assert_eq!(pairs(&b), model, "value size {size} at entry {i}");
            }
            let size: usize = model.iter().map(|(k, v)| entry_len(k, v)).sum();
            assert_eq!(b.encoded_len(), 4 + size);
            let mut enc = Vec::new();
            b.encode(&mut enc);
            assert_eq!(Basement::decode(&enc, Encoding::Compact).unwrap(), b);
        }
    }
}
