//! Merge operators: what an upsert does. An upsert message carries an operand; when it meets the
//! key's current value (at a leaf, or when a query resolves it) the operator computes the new
//! value. The operator must be deterministic: the same upsert is applied again when the log is
//! replayed, and a Bε-tree may apply it at query time before it reaches a leaf.

use std::fmt::Debug;
use std::sync::Arc;

use crate::error::{Error, Result};

pub trait MergeOperator: Send + Sync + Debug {
    /// A stable name, for messages.
    fn name(&self) -> &str;
    /// The value after applying `operand` to `existing` (`None` when the key is absent).
    /// Returning `None` deletes the key.
    fn merge(&self, key: &[u8], existing: Option<&[u8]>, operand: &[u8]) -> Option<Vec<u8>>;
}

/// The operator an upsert needs, or the error that says how to provide one.
pub fn merge_operator(op: &Option<Arc<dyn MergeOperator>>) -> Result<&dyn MergeOperator> {
    require_merge(op.as_deref())
}

/// As `merge_operator`, for a borrowed operator.
pub fn require_merge(op: Option<&dyn MergeOperator>) -> Result<&dyn MergeOperator> {
    op.ok_or_else(|| {
        Error::InvalidOptions(
            "an upsert needs a merge operator: set Options::merge_operator".into(),
        )
    })
}

/// Counters: the value and the operand are little-endian u64s (missing bytes read as zero,
/// extra bytes ignored, an absent key counts as 0); the result is their wrapping sum, 8 bytes.
#[derive(Clone, Copy, Debug, Default)]
pub struct AddU64;

/// Concatenation: the operand is appended to the value (an absent key is empty).
#[derive(Clone, Copy, Debug, Default)]
pub struct Append;

fn le_u64(b: &[u8]) -> u64 {
    let mut x = [0u8; 8];
    let n = b.len().min(8);
    x[..n].copy_from_slice(&b[..n]);
    u64::from_le_bytes(x)
}

impl MergeOperator for AddU64 {
    fn name(&self) -> &str {
        "add_u64"
    }
    fn merge(&self, _key: &[u8], existing: Option<&[u8]>, operand: &[u8]) -> Option<Vec<u8>> {
        let sum = existing.map_or(0, le_u64).wrapping_add(le_u64(operand));
        Some(sum.to_le_bytes().to_vec())
    }
}

impl MergeOperator for Append {
    fn name(&self) -> &str {
        "append"
    }
    fn merge(&self, _key: &[u8], existing: Option<&[u8]>, operand: &[u8]) -> Option<Vec<u8>> {
        let mut v = existing.map_or_else(Vec::new, <[u8]>::to_vec);
        v.extend_from_slice(operand);
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_ins() {
        let two = AddU64.merge(b"k", None, &2u64.to_le_bytes()).unwrap();
        assert_eq!(
            AddU64.merge(b"k", Some(&two), &[3]).unwrap(),
            5u64.to_le_bytes()
        );
        assert_eq!(
            AddU64.merge(b"k", Some(&[0xff; 9]), &[1]).unwrap(),
            0u64.to_le_bytes()
        );
        assert_eq!(Append.merge(b"k", Some(b"ab"), b"c").unwrap(), b"abc");
        assert_eq!(Append.merge(b"k", None, b"c").unwrap(), b"c");
    }
}
