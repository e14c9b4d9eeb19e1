//! Block framing: every node, blob and table that the pager writes is one checksummed block.
//!
//! ```text
//! 0        8         16          20     21        24
//! | xxh3   | owner id | payload len | kind | 0 0 0 | payload ... | zero padding to 4 KiB |
//! ```
//! The checksum covers bytes 8 .. 24 + len, so a block that lands at the wrong place (its owner id
//! differs) or is cut short is caught as surely as a flipped bit.

use xxhash_rust::xxh3::xxh3_64;

use crate::error::{Error, Result};

pub const BLOCK_HEADER: usize = 24;
/// Extents are allocated in units of this many bytes, and blocks padded to it.
pub const PAGE: u64 = 4096;

/// Block kinds, for the reader to check it got what it expected.
pub mod kind {
    pub const TABLE: u8 = 1;
    pub const BLOB: u8 = 2;
    /// Kinds from here on belong to the engines; each names its own (`engines` keeps them
    /// apart, docs/format.md lists them).
    pub const ENGINE_FIRST: u8 = 16;
}

/// Frame `payload` as a block owned by `owner`, padded to a whole number of pages.
pub fn seal(owner: u64, kind: u8, payload: &[u8]) -> Vec<u8> {
    seal_with_tail(owner, kind, payload, &[])
}

/// Frame `head` as a block and append `tail` after it, outside the block checksum: for nodes
/// whose head is a directory of separately checksummed partitions that are read on their own.
pub fn seal_with_tail(owner: u64, kind: u8, head: &[u8], tail: &[u8]) -> Vec<u8> {
    let mut out = seal_head(owner, kind, head);
    out.extend_from_slice(tail);
    out.resize(out.len() + padding(out.len()), 0);
    out
}

/// The block header and `head`, checksummed, without padding (see `seal_with_tail`).
pub fn seal_head(owner: u64, kind: u8, head: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(BLOCK_HEADER + head.len());
    out.extend_from_slice(&[0u8; 8]);
    out.extend_from_slice(&owner.to_le_bytes());
    out.extend_from_slice(&(head.len() as u32).to_le_bytes());
    out.push(kind);
    out.extend_from_slice(&[0u8; 3]);
    out.extend_from_slice(head);
    let sum = xxh3_64(&out[8..]);
    out[..8].copy_from_slice(&sum.to_le_bytes());
    out
}

/// Zero bytes that pad a block of `used` bytes to a whole number of pages.
pub fn padding(used: usize) -> usize {
    (used as u64).div_ceil(PAGE).max(1) as usize * PAGE as usize - used
}

/// The payload length a block header declares (the header must be at least 24 bytes).
pub fn declared_len(header: &[u8]) -> usize {
    u32::from_le_bytes(header[16..20].try_into().unwrap()) as usize
}

/// Check a block read from `file` at `offset` and return its kind and payload.
pub fn open<'a>(bytes: &'a [u8], owner: u64, file: &str, offset: u64) -> Result<(u8, &'a [u8])> {
    if bytes.len() < BLOCK_HEADER {
        return Err(Error::corruption(
            file,
            offset,
            "block shorter than its header",
        ));
    }
    let len = u32::from_le_bytes(bytes[16..20].try_into().unwrap()) as usize;
    if BLOCK_HEADER + len > bytes.len() {
        return Err(Error::corruption(
            file,
            offset,
            format!(
                "block claims {len} payload bytes but its extent holds {}",
                bytes.len()
            ),
        ));
    }
    let stored = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    if xxh3_64(&bytes[8..BLOCK_HEADER + len]) != stored {
        return Err(Error::corruption(file, offset, "block checksum mismatch"));
    }
    let got_owner = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
    if got_owner != owner {
        return Err(Error::corruption(
            file,
            offset,
            format!("block belongs to node {got_owner}, expected node {owner}"),
        ));
    }
    Ok((bytes[20], &bytes[BLOCK_HEADER..BLOCK_HEADER + len]))
}

/// Bytes a block with `payload_len` payload bytes occupies on disk.
pub fn sealed_len(payload_len: usize) -> u64 {
    ((BLOCK_HEADER + payload_len) as u64).div_ceil(PAGE) * PAGE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_open_round_trip_and_detects_damage() {
        let b = seal(42, kind::BLOB, b"payload");
        assert_eq!(b.len(), 4096);
        assert_eq!(open(&b, 42, "f", 0).unwrap(), (kind::BLOB, &b"payload"[..]));
        let e = open(&b, 43, "f", 8192).unwrap_err();
        assert!(matches!(e, Error::Corruption { offset: 8192, .. }), "{e}");
        for i in [0, 9, 17, 20, 24, 30] {
            let mut bad = b.clone();
            bad[i] ^= 0x10;
            assert!(
                open(&bad, 42, "f", 0).unwrap_err().is_corruption(),
                "byte {i}"
            );
        }
    }
}
