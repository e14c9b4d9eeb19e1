//! Write batches: operations applied atomically, logged as one WAL record.
//!
//! Record payload: count u32, then per operation: tag u8 (1 put, 2 delete), key length u32,
//! value length u32 (puts only), key, value.

use crate::error::{Error, Result};
use crate::options::{MAX_BATCH_BYTES, MAX_KEY_LEN, MAX_VALUE_LEN};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Put { key: Vec<u8>, value: Vec<u8> },
    Delete { key: Vec<u8> },
}

impl Op {
    pub fn key(&self) -> &[u8] {
        match self {
            Op::Put { key, .. } | Op::Delete { key } => key,
        }
    }

    /// Bytes the application asked to write: key and value of a put, the key of a delete.
    pub fn logical_bytes(&self) -> u64 {
        match self {
            Op::Put { key, value } => (key.len() + value.len()) as u64,
            Op::Delete { key } => key.len() as u64,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteBatch {
    ops: Vec<Op>,
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

    pub fn ops(&self) -> &[Op] {
        &self.ops
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
            if op.key().len() > MAX_KEY_LEN {
                return Err(Error::KeyTooLarge {
                    len: op.key().len(),
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
        let mut out = Vec::with_capacity(4 + self.encoded);
        out.extend_from_slice(&(self.ops.len() as u32).to_le_bytes());
        for op in &self.ops {
            match op {
                Op::Put { key, value } => {
                    out.push(1);
                    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
                    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
                    out.extend_from_slice(key);
                    out.extend_from_slice(value);
                }
                Op::Delete { key } => {
                    out.push(2);
                    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
                    out.extend_from_slice(key);
                }
            }
        }
        out
    }

    pub(crate) fn decode(p: &[u8]) -> std::result::Result<WriteBatch, String> {
        let mut at = 0usize;
        let mut take = |n: usize| -> std::result::Result<&[u8], String> {
            let end = at
                .checked_add(n)
                .filter(|&e| e <= p.len())
                .ok_or("batch record truncated")?;
            let s = &p[at..end];
            at = end;
            Ok(s)
        };
        let u32_of = |b: &[u8]| u32::from_le_bytes(b.try_into().unwrap()) as usize;
        let n = u32_of(take(4)?);
        let mut b = WriteBatch::new();
        for _ in 0..n {
            match take(1)?[0] {
                1 => {
                    let klen = u32_of(take(4)?);
                    let vlen = u32_of(take(4)?);
                    let key = take(klen)?.to_vec();
                    let value = take(vlen)?.to_vec();
                    b.put(key, value);
                }
                2 => {
                    let klen = u32_of(take(4)?);
                    let key = take(klen)?.to_vec();
                    b.delete(key);
                }
                t => return Err(format!("unknown operation tag {t}")),
            }
        }
        if at != p.len() {
            return Err("trailing bytes after the last operation".into());
        }
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
        let e = b.encode();
        assert_eq!(e.len(), 4 + b.encoded);
        assert_eq!(WriteBatch::decode(&e).unwrap(), b);
        assert!(WriteBatch::decode(&e[..e.len() - 1]).is_err());
        assert_eq!(b.logical_bytes(), 2 + 4 + 300);
        b.put(vec![0u8; MAX_KEY_LEN + 1], b"");
        assert!(matches!(b.validate(), Err(Error::KeyTooLarge { .. })));
    }
}
