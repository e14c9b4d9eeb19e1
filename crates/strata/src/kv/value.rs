//! Values as engines hold them: inline bytes, or a blob block of their own for a value too long
//! to sit in a node (each engine picks its inline limit). A blob is written once, read whole and
//! checked (kind and length) against the reference that names it, and freed with the entry that
//! owns it; the engine keeps the count.

use crate::error::{Error, Result};
use crate::storage::block::kind;
use crate::storage::{NodeId, Pager};

#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    Inline(Vec<u8>),
    Blob { id: NodeId, len: u32 },
}

impl Val {
    /// Bytes the value takes inside its node: the bytes, or a blob's id.
    pub fn encoded_len(&self) -> usize {
        match self {
            Val::Inline(v) => v.len(),
            Val::Blob { .. } => 8,
        }
    }
    pub fn logical_len(&self) -> usize {
        match self {
            Val::Inline(v) => v.len(),
            Val::Blob { len, .. } => *len as usize,
        }
    }
}

/// Write `value` into a new blob block.
pub fn write_blob(pager: &mut Pager, value: &[u8]) -> Result<Val> {
    let id = pager.new_id();
    pager.write_block(id, kind::BLOB, value)?;
    Ok(Val::Blob {
        id,
        len: value.len() as u32,
    })
}

/// Free `val`'s blob block; true when it had one.
pub fn free_blob(pager: &mut Pager, val: Val) -> bool {
    match val {
        Val::Blob { id, .. } => {
            pager.free(id);
            true
        }
        Val::Inline(_) => false,
    }
}

/// A value's bytes: inline, or read (and checked) from its blob block.
pub fn read_value(pager: &Pager, val: &Val) -> Result<Vec<u8>> {
    match val {
        Val::Inline(v) => Ok(v.clone()),
        Val::Blob { id, len } => {
            let (k, bytes) = pager.read_block(*id)?;
            if k != kind::BLOB || bytes.len() != *len as usize {
                return Err(Error::corruption(
                    pager.file_name(),
                    pager.offset_of(*id),
                    format!(
                        "blob {id} should hold {len} bytes, holds {} (kind {k})",
                        bytes.len()
                    ),
                ));
            }
            Ok(bytes)
        }
    }
}
