//! A table's data block, format 2 (tables of kind `KIND_TABLE2`): point messages with their keys
//! prefix-compressed against the message before, lengths and sequence numbers as varints, and
//! restart points, so that a point query binary-searches the restarts and walks at most
//! `RESTART` messages instead of the whole block.
//!
//! ```text
//! block:   messages | restart offsets u32 each | restarts u32 | messages u32
//! message: shared varint | unshared varint | key suffix | tag u8 | seq varint |
//!          for a put (tag 1) or an upsert (tag 4): length varint, bytes
//! ```
//! Varints are LEB128 (7 bits a byte, low first, at most 10 bytes, shortest form; `codec`). `shared` is how many leading
//! bytes the key has in common with the previous message's key; every `RESTART`-th message
//! (0, 16, 32, ...) is a restart: `shared` is 0 and its offset is in the restart list.
//! Invariants (checked by `decode`): messages in (key, seq) order; a restart at exactly every
//! `RESTART`-th message; offsets within the messages. Deletes (tag 3) carry no body; range
//! deletes live in the table's head, and values are always inline in the LSM-tree (no blobs).
//!
//! Format 1 (kind `KIND_TABLE`) blocks are `kv::msg` segments; they are still read.

use std::cmp::Ordering;

use crate::codec::{put_varint, read_varint};
use crate::kv::msg::{Body, Msg};
use crate::kv::Val;

/// A restart every this many messages: a lookup walks at most this many past its restart.
pub const RESTART: usize = 16;

/// An empty block's bytes: no restarts, no messages.
pub const EMPTY_BLOCK: usize = 8;

/// A cursor over a block's message bytes; every read is bounds-checked.
struct Cur<'a> {
    p: &'a [u8],
    at: usize,
}

impl<'a> Cur<'a> {
    fn u8(&mut self) -> Result<u8, String> {
        let b = *self
            .p
            .get(self.at)
            .ok_or_else(|| format!("block ends at {} inside a message", self.at))?;
        self.at += 1;
        Ok(b)
    }
    fn varint(&mut self) -> Result<u64, String> {
        let (v, n) = read_varint(&self.p[self.at..]).map_err(|e| format!("{e} at {}", self.at))?;
        self.at += n;
        Ok(v)
    }
    fn len(&mut self) -> Result<usize, String> {
        let n = self.varint()?;
        if n > (self.p.len() - self.at) as u64 {
            return Err(format!(
                "a length of {n} runs past the block at {}",
                self.at
            ));
        }
        Ok(n as usize)
    }
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], String> {
        let b = self
            .p
            .get(self.at..self.at + n)
            .ok_or_else(|| format!("block ends at {} inside a message", self.at))?;
        self.at += n;
        Ok(b)
    }
    /// The key's shared length and suffix; `key` (the previous key) becomes this one.
    fn key(&mut self, key: &mut Vec<u8>) -> Result<(), String> {
        let shared = self.varint()? as usize;
        if shared > key.len() {
            return Err(format!("a key sharing {shared} bytes of a shorter one"));
        }
        let n = self.len()?;
        key.truncate(shared);
        key.extend_from_slice(self.bytes(n)?);
        Ok(())
    }
    /// The tag and sequence, then the body: decoded, or skipped when `skip`.
    fn body(&mut self, skip: bool) -> Result<(u64, Option<Body>), String> {
        let tag = self.u8()?;
        let seq = self.varint()?;
        let body = match tag {
            1 | 4 => {
                let n = self.len()?;
                let v = self.bytes(n)?;
                (!skip).then(|| match tag {
                    1 => Body::Put(Val::Inline(v.to_vec())),
                    _ => Body::Upsert(v.to_vec()),
                })
            }
            3 => (!skip).then_some(Body::Delete),
            t => return Err(format!("unknown block message tag {t}")),
        };
        Ok((seq, body))
    }
}

/// Builds one block from point messages in (key, seq) order.
#[derive(Default)]
pub struct Writer {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    count: u32,
    last: Vec<u8>,
}

impl Writer {
    /// A writer whose buffer holds `bytes` without growing: one allocation a block rather than
    /// a doubling series (each large one makes glibc consolidate its fast bins).
    pub fn with_capacity(bytes: usize) -> Writer {
        Writer {
            buf: Vec::with_capacity(bytes),
            restarts: Vec::with_capacity(bytes / 1024),
            ..Writer::default()
        }
    }

    /// Bytes the block would take if finished now.
    pub fn len(&self) -> usize {
        self.buf.len() + 4 * self.restarts.len() + EMPTY_BLOCK
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    pub fn add(&mut self, m: &Msg) {
        debug_assert!(self.count == 0 || self.last.as_slice() <= m.key.as_slice());
        let shared = if (self.count as usize).is_multiple_of(RESTART) {
            self.restarts.push(self.buf.len() as u32);
            0
        } else {
            self.last
                .iter()
                .zip(&m.key)
                .take_while(|(a, b)| a == b)
                .count()
        };
        put_varint(&mut self.buf, shared as u64);
        put_varint(&mut self.buf, (m.key.len() - shared) as u64);
        self.buf.extend_from_slice(&m.key[shared..]);
        let (tag, value) = match &m.body {
            Body::Put(Val::Inline(v)) => (1u8, Some(v)),
            Body::Upsert(v) => (4, Some(v)),
            Body::Delete => (3, None),
            Body::Put(Val::Blob { .. }) | Body::DeleteRange(_) => {
                unreachable!("LSM blocks hold inline puts, deletes and upserts only")
            }
        };
        self.buf.push(tag);
        put_varint(&mut self.buf, m.seq);
        if let Some(v) = value {
            put_varint(&mut self.buf, v.len() as u64);
            self.buf.extend_from_slice(v);
        }
        self.last.clear();
        self.last.extend_from_slice(&m.key);
        self.count += 1;
    }

    pub fn finish(mut self) -> Vec<u8> {
        for r in &self.restarts {
            self.buf.extend_from_slice(&r.to_le_bytes());
        }
        self.buf
            .extend_from_slice(&(self.restarts.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(&self.count.to_le_bytes());
        self.buf
    }
}

/// A block's trailer: where the messages end, the restart count and the message count.
struct Trailer<'a> {
    p: &'a [u8],
    end: usize,
    restarts: usize,
    count: usize,
}

fn word(p: &[u8], at: usize) -> usize {
    u32::from_le_bytes(p[at..at + 4].try_into().expect("4 bytes")) as usize
}

impl<'a> Trailer<'a> {
    fn read(p: &'a [u8]) -> Result<Trailer<'a>, String> {
        if p.len() < EMPTY_BLOCK {
            return Err(format!("a block of {} bytes", p.len()));
        }
        let count = word(p, p.len() - 4);
        let restarts = word(p, p.len() - 8);
        if restarts != count.div_ceil(RESTART) || restarts > (p.len() - EMPTY_BLOCK) / 4 {
            return Err(format!("{restarts} restarts for {count} messages"));
        }
        let end = p.len() - EMPTY_BLOCK - 4 * restarts;
        Ok(Trailer {
            p,
            end,
            restarts,
            count,
        })
    }

    /// Restart `i`'s offset, checked to lie within the messages.
    fn restart(&self, i: usize) -> Result<usize, String> {
        let at = word(self.p, self.end + 4 * i);
        if at >= self.end || (i == 0 && at != 0) {
            return Err(format!("restart {i} at {at}, outside the messages"));
        }
        Ok(at)
    }

    fn messages(&self) -> Cur<'a> {
        Cur {
            p: &self.p[..self.end],
            at: 0,
        }
    }
}

/// Every message of the block, checked: the restarts, the order, the count.
pub fn decode(p: &[u8]) -> Result<Vec<Msg>, String> {
    let t = Trailer::read(p)?;
    let mut c = t.messages();
    let mut out: Vec<Msg> = Vec::with_capacity(t.count.min(t.end / 4));
    let mut key = Vec::new();
    for i in 0..t.count {
        if i.is_multiple_of(RESTART) {
            if c.at != t.restart(i / RESTART)? {
                return Err(format!("message {i} is not at its restart offset"));
            }
            key.clear();
        }
        c.key(&mut key)?;
        let (seq, body) = c.body(false)?;
        let m = Msg {
            key: key.clone(),
            seq,
            body: body.expect("decoded"),
        };
        if out
            .last()
            .is_some_and(|l| (&l.key, l.seq) >= (&m.key, m.seq))
        {
            return Err(format!("message {i} out of (key, sequence) order"));
        }
        out.push(m);
    }
    if c.at != t.end {
        return Err(format!("{} bytes after the last message", t.end - c.at));
    }
    Ok(out)
}

/// The messages for `key`, oldest first: a binary search over the restarts for the last one
/// whose key is below `key`, then a walk from there that compares each key with `key` through
/// the prefix it shares with the one before (no key is rebuilt), decoding only `key`'s
/// messages.
pub fn lookup(p: &[u8], key: &[u8]) -> Result<Vec<Msg>, String> {
    let t = Trailer::read(p)?;
    let msgs = &p[..t.end];
    let restart_key = |i: usize| -> Result<&[u8], String> {
        let mut c = Cur {
            p: msgs,
            at: t.restart(i)?,
        };
        if c.varint()? != 0 {
            return Err(format!("restart {i} shares a prefix"));
        }
        let n = c.len()?;
        c.bytes(n)
    };
    // Restarts [0, lo) have keys below `key`.
    let (mut lo, mut hi) = (0, t.restarts);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if restart_key(mid)? < key {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    let first = lo.saturating_sub(1);
    if t.restarts == 0 {
        return Ok(Vec::new());
    }
    let mut c = Cur {
        p: msgs,
        at: t.restart(first)?,
    };
    // The previous key's length, and how many leading bytes it shares with `key` (it is not
    // above `key`, or the walk would have stopped).
    let (mut prev_len, mut common) = (0usize, 0usize);
    let mut found = Vec::new();
    for _ in first * RESTART..t.count {
        let shared = c.varint()? as usize;
        if shared > prev_len {
            return Err(format!("a key sharing {shared} bytes of a shorter one"));
        }
        let n = c.len()?;
        let suffix = c.bytes(n)?;
        prev_len = shared + n;
        let order = if shared > common {
            // It agrees with the previous key past where that one fell below `key`.
            Ordering::Less
        } else {
            // Its first `shared` bytes are `key`'s.
            let rest = &key[shared..];
            let same = suffix.iter().zip(rest).take_while(|(a, b)| a == b).count();
            common = shared + same;
            suffix[same..].cmp(&rest[same..])
        };
        match order {
            Ordering::Less => {
                c.body(true)?;
            }
            Ordering::Equal => {
                let (seq, body) = c.body(false)?;
                found.push(Msg {
                    key: key.to_vec(),
                    seq,
                    body: body.expect("decoded"),
                });
            }
            Ordering::Greater => break,
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(key: &[u8], seq: u64, body: Body) -> Msg {
        Msg {
            key: key.to_vec(),
            seq,
            body,
        }
    }

    fn block(msgs: &[Msg]) -> Vec<u8> {
        let mut w = Writer::default();
        msgs.iter().for_each(|m| w.add(m));
        let len = w.len();
        let b = w.finish();
        assert_eq!(b.len(), len);
        b
    }

    /// The bytes of a known block, fixed: a change to them is a format change (a new table
    /// kind, and the old one still read).
    #[test]
    fn block_golden_bytes() {
        let b = block(&[
            msg(b"apple", 3, Body::Put(Val::Inline(b"v".to_vec()))),
            msg(b"apply", 300, Body::Delete),
            msg(b"apply", 301, Body::Upsert(b"+1".to_vec())),
        ]);
        let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
        assert_eq!(
            hex,
            "00056170706c6501030176\
             04017903ac02\
             050004ad02022b31\
             000000000100000003000000"
        );
        assert_eq!(decode(&b).unwrap().len(), 3);
    }

    #[test]
    fn lookups_find_what_decoding_finds_across_restarts() {
        // 200 keys, some with several messages, so that a key's messages straddle restarts.
        let mut msgs = Vec::new();
        let mut seq = 1;
        for k in 0..200u32 {
            for _ in 0..(1 + k % 3) {
                let body = match seq % 3 {
                    0 => Body::Delete,
                    1 => Body::Put(Val::Inline(vec![k as u8; (k % 40) as usize])),
                    _ => Body::Upsert(vec![1; 8]),
                };
                msgs.push(msg(&(k * 2).to_be_bytes(), seq, body));
                seq += 1;
            }
        }
        let b = block(&msgs);
        assert_eq!(decode(&b).unwrap(), msgs);
        for k in 0..401u32 {
            let key = k.to_be_bytes();
            let want: Vec<Msg> = msgs.iter().filter(|m| m.key == key).cloned().collect();
            assert_eq!(lookup(&b, &key).unwrap(), want, "key {k}");
        }
        assert!(lookup(&block(&[]), b"x").unwrap().is_empty());
        assert!(decode(&block(&[])).unwrap().is_empty());
    }

    #[test]
    fn damaged_blocks_are_refused_not_trusted() {
        let msgs: Vec<Msg> = (0..40u32)
            .map(|k| msg(&k.to_be_bytes(), k as u64 + 1, Body::Delete))
            .collect();
        let b = block(&msgs);
        // Every truncation and every single flipped byte either decodes to the same messages
        // (a byte that changes nothing checked here) or fails; none panics.
        for n in 0..b.len() {
            assert!(decode(&b[..n]).is_err(), "truncated to {n}");
            let _ = lookup(&b[..n], &5u32.to_be_bytes());
        }
        for i in 0..b.len() {
            let mut bad = b.clone();
            bad[i] ^= 0x41;
            if let Ok(back) = decode(&bad) {
                assert_ne!(back, msgs, "byte {i} changed nothing");
            }
            let _ = lookup(&bad, &5u32.to_be_bytes());
        }
        // Out of order.
        let mut w = Writer::default();
        w.add(&msgs[1]);
        w.add(&msgs[1]);
        assert!(decode(&w.finish()).is_err());
    }
}

/// How long a lookup in a resident 4 KiB block takes in each format (`cargo test -p strata
/// --lib block_lookup_timing -- --ignored --nocapture`): what a point read pays per block it
/// searches, beside the pool and the filter.
#[cfg(test)]
mod timing {
    use super::*;
    use crate::kv::msg::{lookup_encoded, Encoding, Segment};

    #[test]
    #[ignore]
    fn block_lookup_timing() {
        // 16-byte keys spread like 1M random ones (two bytes in common with the one before),
        // 100-byte values: a 4 KiB block's worth.
        let msgs: Vec<Msg> = (0..31u64)
            .map(|i| {
                let mut key = [0x5au8; 16];
                key[2..10].copy_from_slice(&(i * 0x0123_4567_89ab).to_be_bytes());
                Msg {
                    key: key.to_vec(),
                    seq: 1_000_000 + i,
                    body: Body::Put(Val::Inline(vec![7; 100])),
                }
            })
            .collect();
        let mut w = Writer::default();
        msgs.iter().for_each(|m| w.add(m));
        let two = w.finish();
        let mut seg = Segment::default();
        msgs.iter().for_each(|m| {
            seg.insert(m.clone(), None);
        });
        let mut one = Vec::new();
        seg.encode_in(Encoding::Fixed, &mut one);
        let time = |f: &dyn Fn(&[u8]) -> usize| {
            let rounds = 200_000;
            let t = std::time::Instant::now();
            let mut n = 0;
            for r in 0..rounds {
                n += f(&msgs[r % msgs.len()].key);
            }
            assert_eq!(n, rounds);
            t.elapsed().as_nanos() as f64 / rounds as f64
        };
        let ns1 = time(&|k| lookup_encoded(&one, k, Encoding::Fixed).unwrap().len());
        let ns2 = time(&|k| lookup(&two, k).unwrap().len());
        println!(
            "format 1: {} bytes, {ns1:.0} ns a lookup; format 2: {} bytes, {ns2:.0} ns",
            one.len(),
            two.len()
        );
    }
}
