//! Write batches: operations applied atomically, logged as one WAL record.
//!
//! Record payload: a head u32 (the count of operations, its top bit set), then per operation a
//! tag u8, the lengths of its byte strings as varints (shortest form), and the byte strings:
//! 1 put (key, value), 2 delete (key), 3 upsert (key, operand), 4 range delete (start, end).
//! A head without the top bit is the first encoding, still read: each length a u32. A put of
//! a 16-byte key and a 100-byte value takes 3 bytes besides them instead of 9 (the log was
//! 1.08 times the bytes put, docs/performance.md).
//!
//! A decoded record is held to the limits `validate` puts on a batch before it is logged, since
//! replay applies it to the engine without another check.

use crate::codec::{put_varint, Reader};
use crate::error::{Error, Result};

/// The longest key (range bounds included): node formats store key lengths in a u16.
pub const MAX_KEY_LEN: usize = 4096;
pub const MAX_VALUE_LEN: usize = 16 << 20;
/// One batch is one log record; keep records well inside the u32 length field.
pub const MAX_BATCH_BYTES: usize = 1 << 30;

/// The head's top bit: the lengths are varints. Counts stay below it (an operation takes at
/// least 2 bytes of a record of at most `MAX_BATCH_BYTES`).
const VARINT_LENGTHS: u32 = 1 << 31;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Put {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Delete {
        key: Vec<u8>,
    },
    /// Apply the merge operator to the key's value with this operand.
    Upsert {
        key: Vec<u8>,
        operand: Vec<u8>,
    },
    /// Delete every key in [start, end).
    DeleteRange {
        start: Vec<u8>,
        end: Vec<u8>,
    },
}

impl Op {
    /// The key the operation is addressed to (a range delete's start).
    pub fn key(&self) -> &[u8] {
        match self {
            Op::Put { key, .. } | Op::Delete { key } | Op::Upsert { key, .. } => key,
            Op::DeleteRange { start, .. } => start,
        }
    }

    /// Bytes the application asked to write: every key and value the operation carries.
    pub fn logical_bytes(&self) -> u64 {
        match self {
            Op::Put { key, value: b } | Op::Upsert { key, operand: b } => {
                (key.len() + b.len()) as u64
            }
            Op::Delete { key } => key.len() as u64,
            Op::DeleteRange { start, end } => (start.len() + end.len()) as u64,
        }
    }

    /// The byte strings of the operation, in log order, with its tag.
    fn parts(&self) -> (u8, [&[u8]; 2], usize) {
        match self {
            Op::Put { key, value } => (1, [key, value], 2),
            Op::Delete { key } => (2, [key, &[]], 1),
            Op::Upsert { key, operand } => (3, [key, operand], 2),
            Op::DeleteRange { start, end } => (4, [start, end], 2),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteBatch {
    ops: Vec<Op>,
    /// The operations' size in the first encoding (u32 lengths): a bound on the current one's,
    /// since no length here needs more than 4 varint bytes.
    encoded: usize,
}

impl WriteBatch {
    pub fn new() -> WriteBatch {
        WriteBatch::default()
    }

    pub fn put(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> &mut Self {
        let (key, value) = (key.as_ref().to_vec(), value.as_ref().to_vec());
        self.encoded += 9 + key.len() + value.len();
        self.ops.push(Op::Put { key, value });
        self
    }

    pub fn delete(&mut self, key: impl AsRef<[u8]>) -> &mut Self {
        let key = key.as_ref().to_vec();
        self.encoded += 5 + key.len();
        self.ops.push(Op::Delete { key });
        self
    }

    /// Apply the database's merge operator to `key` with `operand` (see `Options::merge_operator`).
    pub fn upsert(&mut self, key: impl AsRef<[u8]>, operand: impl AsRef<[u8]>) -> &mut Self {
        let (key, operand) = (key.as_ref().to_vec(), operand.as_ref().to_vec());
        self.encoded += 9 + key.len() + operand.len();
        self.ops.push(Op::Upsert { key, operand });
        self
    }

    /// Delete every key k with `start <= k < end` (nothing when `start >= end`); both bounds are
    /// keys, at most `MAX_KEY_LEN` bytes.
    pub fn delete_range(&mut self, start: impl AsRef<[u8]>, end: impl AsRef<[u8]>) -> &mut Self {
        let (start, end) = (start.as_ref().to_vec(), end.as_ref().to_vec());
        self.encoded += 9 + start.len() + end.len();
        self.ops.push(Op::DeleteRange { start, end });
        self
    }

    pub(crate) fn has_upserts(&self) -> bool {
        self.ops.iter().any(|op| matches!(op, Op::Upsert { .. }))
    }

    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// The operations, for an engine to take apart.
    pub fn into_ops(self) -> Vec<Op> {
        self.ops
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub fn clear(&mut self) {
        self.ops.clear();
        self.encoded = 0;
    }

    pub fn logical_bytes(&self) -> u64 {
        self.ops.iter().map(Op::logical_bytes).sum()
    }

    /// Refuse the whole batch if any part is out of bounds, before anything is written.
    pub(crate) fn validate(&self) -> Result<()> {
        for op in &self.ops {
            // A range's end is stored as a key (its length in a u16), so it has a key's limit.
            let end = match op {
                Op::DeleteRange { end, .. } => end.len(),
                _ => 0,
            };
            let longest = op.key().len().max(end);
            if longest > MAX_KEY_LEN {
                return Err(Error::KeyTooLarge {
                    len: longest,
                    max: MAX_KEY_LEN,
                });
            }
            if let Op::Put { value, .. } = op {
                if value.len() > MAX_VALUE_LEN {
                    return Err(Error::ValueTooLarge {
                        len: value.len(),
                        max: MAX_VALUE_LEN,
                    });
                }
            }
        }
        if self.encoded + 4 > MAX_BATCH_BYTES {
            return Err(Error::BatchTooLarge {
                len: self.encoded + 4,
                max: MAX_BATCH_BYTES,
            });
        }
        Ok(())
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        self.encode_in(true)
    }

    /// The first encoding (u32 lengths), which this build no longer writes: for tests that
    /// read logs holding it.
    #[cfg(test)]
    pub(crate) fn encode_first(&self) -> Vec<u8> {
        self.encode_in(false)
    }

    fn encode_in(&self, varints: bool) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + self.encoded);
        let head = self.ops.len() as u32 | if varints { VARINT_LENGTHS } else { 0 };
        out.extend_from_slice(&head.to_le_bytes());
        for op in &self.ops {
            let (tag, parts, n) = op.parts();
            out.push(tag);
            for p in &parts[..n] {
                if varints {
                    put_varint(&mut out, p.len() as u64);
                } else {
                    out.extend_from_slice(&(p.len() as u32).to_le_bytes());
                }
            }
            for p in &parts[..n] {
                out.extend_from_slice(p);
            }
        }
        out
    }

    pub(crate) fn decode(p: &[u8]) -> std::result::Result<WriteBatch, String> {
        let mut r = Reader::new(p);
        let truncated = |e: String| format!("batch record truncated: {e}");
        let head = r.u32().map_err(truncated)?;
        let varints = head & VARINT_LENGTHS != 0;
        let n = (head & !VARINT_LENGTHS) as usize;
        // An operation takes at least 2 bytes (a delete of the empty key; 5 with u32
        // lengths): reserve no more than the record can hold, whatever its count says.
        let mut b = WriteBatch {
            ops: Vec::with_capacity(r.capacity(n, if varints { 2 } else { 5 })),
            encoded: 0,
        };
        for _ in 0..n {
            let tag = r.u8().map_err(truncated)?;
            let fields = match tag {
                2 => 1,
                1 | 3 | 4 => 2,
                t => return Err(format!("unknown operation tag {t}")),
            };
            let mut lens = [0u64; 2];
            for l in lens.iter_mut().take(fields) {
                *l = if varints {
                    r.varint()
                        .map_err(|e| format!("an operation's length: {e}"))?
                } else {
                    r.u32().map_err(truncated)? as u64
                };
            }
            let mut string = |len: u64| {
                let len = usize::try_from(len).unwrap_or(usize::MAX);
                r.bytes(len).map(<[u8]>::to_vec).map_err(truncated)
            };
            let a = string(lens[0])?;
            let c = string(lens[1])?;
            match tag {
                1 => b.put(a, c),
                2 => b.delete(a),
                3 => b.upsert(a, c),
                _ => b.delete_range(a, c),
            };
        }
        r.finish()
            .map_err(|e| format!("{e} after the last operation"))?;
        // Replay applies what the log holds without `validate`: a record over the limits was
        // not written by this build, and its keys would not fit the engines' formats.
        b.validate().map_err(|e| e.to_string())?;
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_trip_and_limits() {
        let mut b = WriteBatch::new();
        b.put(b"k", b"v").delete(b"gone").put(b"", vec![0u8; 300]);
        b.upsert(b"n", 7u64.to_le_bytes()).delete_range(b"a", b"c");
        let e = b.encode();
        // `encoded` is the first encoding's size, a bound on this one's: of the 9 lengths,
        // each 4 bytes there, only the 300 takes 2 bytes as a varint.
        assert_eq!(e.len(), 4 + b.encoded - 9 * 4 + 8 + 2);
        assert_eq!(WriteBatch::decode(&e).unwrap(), b);
        assert!(WriteBatch::decode(&e[..e.len() - 1]).is_err());
        assert_eq!(b.logical_bytes(), 2 + 4 + 300 + 9 + 2);
        b.put(vec![0u8; MAX_KEY_LEN + 1], b"");
        assert!(matches!(b.validate(), Err(Error::KeyTooLarge { .. })));
    }

    /// The record's bytes, pinned: a put, a delete and an upsert with varint lengths (the
    /// head's top bit set), and the same batch in the first encoding, u32 lengths, which logs
    /// written before still hold and replay decodes to the same batch.
    #[test]
    fn the_batch_encoding_is_pinned_and_the_first_one_still_reads() {
        let mut b = WriteBatch::new();
        b.put(b"key", b"value").delete(b"k2").upsert(b"n", [7u8]);
        let hex = |v: &[u8]| v.iter().map(|x| format!("{x:02x}")).collect::<String>();
        let now = b.encode();
        assert_eq!(
            hex(&now),
            concat!(
                "03000080",               // 3 operations, varint lengths
                "0103056b657976616c7565", // put: lengths 3, 5; "key", "value"
                "02026b32",               // delete: length 2; "k2"
                "0301016e07",             // upsert: lengths 1, 1; "n", 7
            )
        );
        let old = b.encode_first();
        assert_eq!(
            hex(&old),
            concat!(
                "03000000",
                "0103000000050000006b657976616c7565",
                "02020000006b32",
                "0301000000010000006e07",
            )
        );
        // Five lengths, 3 bytes shorter each.
        assert_eq!(old.len(), now.len() + 5 * 3);
        assert_eq!(WriteBatch::decode(&old).unwrap(), b);
        assert_eq!(WriteBatch::decode(&now).unwrap(), b);
        // One encoding per batch: a length not in its shortest form is refused, and so are
        // bytes after the last operation.
        let mut long = now.clone();
        long.splice(16..17, [0x82, 0x00]);
        assert!(WriteBatch::decode(&long).is_err());
        let mut more = now.clone();
        more.push(0);
        assert!(WriteBatch::decode(&more).unwrap_err().contains("trailing"));
    }
}
