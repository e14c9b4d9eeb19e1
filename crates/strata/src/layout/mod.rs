//! Floor 4, the node-encoding toolkit engines share (docs/architecture.md): an extent that is a
//! checksummed head (`storage::block`) followed by parts, each with its own checksum in the
//! head's part directory, so that one part is read and verified without the rest.
//!
//! Its first user is the versioned dictionary's arrays (engines/sda). The LSM-tree's tables
//! and the Bε-tree's partitioned nodes hold the same idea in their own copies today; they move
//! here when their engines' owners next change those files (their on-disk bytes are the same:
//! `off u32 | len u32 | xxh3 u64`).
//!
//! Invariant: the parts follow one another from the end of the head, in directory order, with
//! no gap (`decode` refuses anything else), so a part's place is `BLOCK_HEADER + head length +
//! off` within the extent.

use xxhash_rust::xxh3::xxh3_64;

use crate::codec::{Reader, Writer};
use crate::error::{Error, Result};
use crate::storage::block::BLOCK_HEADER;
use crate::storage::{NodeId, Pager};

/// One part's place after the head and its checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    pub off: u32,
    pub len: u32,
    pub sum: u64,
}

/// Bytes a directory entry takes.
pub const PART_ENTRY: usize = 16;

impl Part {
    /// The entry for `bytes`, placed at `off`.
    pub fn of(bytes: &[u8], off: u32) -> Part {
        Part {
            off,
            len: bytes.len() as u32,
            sum: xxh3_64(bytes),
        }
    }

    pub fn encode(&self, w: &mut Writer) {
        w.u32(self.off).u32(self.len).u64(self.sum);
    }

    /// The next entry of a directory whose parts so far end at `end`.
    pub fn decode(r: &mut Reader<'_>, end: u64) -> std::result::Result<Part, String> {
        let p = Part {
            off: r.u32()?,
            len: r.u32()?,
            sum: r.u64()?,
        };
        if p.off as u64 != end {
            return Err("parts do not follow one another".into());
        }
        Ok(p)
    }

    /// Where the part starts within its extent, after a head of `head_len` bytes.
    pub fn at(&self, head_len: usize) -> u64 {
        (BLOCK_HEADER + head_len) as u64 + self.off as u64
    }

    /// The part's bytes within the whole extent `whole`, if it holds them.
    pub fn slice<'a>(&self, whole: &'a [u8], head_len: usize) -> Option<&'a [u8]> {
        let at = self.at(head_len) as usize;
        whole.get(at..at + self.len as usize)
    }

    /// Whether `bytes` are this part's (its checksum).
    pub fn matches(&self, bytes: &[u8]) -> bool {
        bytes.len() == self.len as usize && xxh3_64(bytes) == self.sum
    }

    /// Read the part of node `id` from the device and verify it; damage is reported at the
    /// part's offset in the file, with `what` naming it.
    pub fn read(&self, pager: &Pager, id: NodeId, head_len: usize, what: &str) -> Result<Vec<u8>> {
        let at = self.at(head_len);
        let bytes = pager.read_part(id, at, self.len as usize)?;
        if !self.matches(&bytes) {
            return Err(Error::corruption(
                pager.file_name(),
                pager.offset_of(id) + at,
                format!("{what}: checksum mismatch"),
            ));
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_entry_reads_back_and_parts_must_be_contiguous() {
        let a = Part::of(b"hello", 0);
        let b = Part::of(b"world!", 5);
        let mut w = Writer::new();
        a.encode(&mut w);
        b.encode(&mut w);
        let bytes = w.finish();
        assert_eq!(bytes.len(), 2 * PART_ENTRY);
        let mut r = Reader::new(&bytes);
        assert_eq!(Part::decode(&mut r, 0).unwrap(), a);
        assert_eq!(Part::decode(&mut r, 5).unwrap(), b);
        assert!(Part::decode(&mut Reader::new(&bytes[PART_ENTRY..]), 0).is_err());
        assert!(a.matches(b"hello") && !a.matches(b"hellO"));
    }
}
