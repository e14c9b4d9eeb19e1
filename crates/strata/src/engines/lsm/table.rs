//! A table: part of a sorted run, written once as one extent and never changed until a merge
//! frees it.
//!
//! On disk the extent is a checksummed head (the block header of `storage::block`) followed by
//! the table's blocks, each a `kv::msg::Segment` of point messages with its own checksum in the
//! head. The head stays resident once read (it holds the filter and the block index); a point
//! query then reads the one block its key may lie in (`Pager::read_part`), and only if the
//! filter lets the key through. A block is cached as its checked bytes, not decoded: a query
//! walks them for its key (`kv::msg::lookup_encoded`), so a miss costs no allocation per
//! message and the cache holds each block at its size on disk.
//!
//! ```text
//! head:  points u64 | blocks u32 | ranges u32 | probes u8 | filter length u32, filter bytes |
//!        smallest key | largest key |
//!        per block: offset u32, length u32, xxh3 u64, messages u32 |
//!        blocks - 1 pivots (the first key of each block after the first) |
//!        the range deletes (`Msg::encode`)
//! keys:  length u16, bytes
//! ```
//! Block offsets count from the end of the head. Invariants (checked by `check`): blocks are
//! sorted by (key, seq) within and across blocks, a key's messages in one block; the pivots are
//! each block's first key; every key and range delete lies within [smallest, largest]; the
//! filter holds every point key.

use std::sync::Arc;

use xxhash_rust::xxh3::xxh3_64;

use crate::codec::{Reader, Writer};
use crate::error::{Error, Result};
use crate::kv::msg::{Body, Msg, Segment, EMPTY_SEGMENT};
use crate::kv::{Filter, Keys};
use crate::storage::block::{kind, BLOCK_HEADER};
use crate::storage::{Chunk, NodeId, Pager, Sealed, StoredNode};

/// Block kinds of the LSM-tree (after the Bε-tree's).
pub const KIND_TABLE: u8 = kind::ENGINE_FIRST + 5;
pub const KIND_MANIFEST: u8 = kind::ENGINE_FIRST + 6;

/// The least a block's index entry and a range delete take encoded, for `Reader::capacity`.
const BLOCK_ENTRY: usize = 20;
const MIN_RANGE: usize = 13;

/// Where a block lies after the head.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Loc {
    pub off: u32,
    pub len: u32,
    pub sum: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TableBlock {
    pub loc: Loc,
    pub count: u32,
    /// The block's bytes, checked against its checksum, when resident.
    pub data: Option<Arc<Vec<u8>>>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    pub points: u64,
    pub filter: Filter,
    pub smallest: Vec<u8>,
    pub largest: Vec<u8>,
    pub pivots: Keys,
    pub blocks: Vec<TableBlock>,
    /// Range deletes, clipped to the table's key range.
    pub ranges: Vec<Msg>,
    head_len: usize,
}

impl Table {
    /// The block `key` would lie in.
    pub fn block_for(&self, key: &[u8]) -> usize {
        self.pivots.rank(key, true)
    }

    /// Where block `i` starts within the extent.
    fn block_at(&self, i: usize) -> u64 {
        (BLOCK_HEADER + self.head_len) as u64 + self.blocks[i].loc.off as u64
    }

    /// Block `i`'s bytes read from the device and checked against its checksum.
    pub fn read_block(&self, pager: &Pager, id: NodeId, i: usize) -> Result<Vec<u8>> {
        let loc = self.blocks[i].loc;
        let bytes = pager.read_part(id, self.block_at(i), loc.len as usize)?;
        self.check_sum(pager.file_name(), pager.offset_of(id), id, i, &bytes)?;
        Ok(bytes)
    }

    /// Block `i`'s bytes against the checksum its index entry holds.
    fn check_sum(&self, file: &str, base: u64, id: NodeId, i: usize, bytes: &[u8]) -> Result<()> {
        if xxh3_64(bytes) != self.blocks[i].loc.sum {
            return Err(self.block_error(file, base, id, i, "checksum mismatch".into()));
        }
        Ok(())
    }

    /// Corruption in block `i` of table `id`, whose extent starts at `base` in `file`.
    pub fn block_error(&self, file: &str, base: u64, id: NodeId, i: usize, what: String) -> Error {
        Error::corruption(
            file,
            base + self.block_at(i),
            format!("table {id}: block {i}: {what}"),
        )
    }

    /// Block `i` decoded from its checked bytes, and checked against its index entry.
    pub fn parse_block(
        &self,
        file: &str,
        base: u64,
        id: NodeId,
        i: usize,
        bytes: &[u8],
    ) -> Result<Segment> {
        let bad = |what: String| self.block_error(file, base, id, i, what);
        let seg = Segment::decode(bytes).map_err(bad)?;
        if seg.points().len() != self.blocks[i].count as usize || !seg.ranges().is_empty() {
            return Err(bad("holds other messages than its index entry says".into()));
        }
        Ok(seg)
    }

    /// Block `i` from its bytes (read alone, or cut from the whole extent), for table `id`
    /// whose extent starts at `base` in `file` (for the error's offset).
    pub fn decode_block(
        &self,
        file: &str,
        base: u64,
        id: NodeId,
        i: usize,
        bytes: &[u8],
    ) -> Result<Segment> {
        self.check_sum(file, base, id, i, bytes)?;
        self.parse_block(file, base, id, i, bytes)
    }

    /// Block `i`'s bytes within the whole extent `whole`.
    pub fn slice<'a>(&self, whole: &'a [u8], i: usize) -> Option<&'a [u8]> {
        let at = self.block_at(i) as usize;
        whole.get(at..at + self.blocks[i].loc.len as usize)
    }

    fn encode_head(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.u64(self.points)
            .u32(self.blocks.len() as u32)
            .u32(self.ranges.len() as u32)
            .u8(self.filter.probes() as u8)
            .u32(self.filter.bytes().len() as u32)
            .bytes(self.filter.bytes())
            .key(&self.smallest)
            .key(&self.largest);
        for b in &self.blocks {
            w.u32(b.loc.off).u32(b.loc.len).u64(b.loc.sum).u32(b.count);
        }
        for p in self.pivots.iter() {
            w.key(p);
        }
        let mut out = w.finish();
        for r in &self.ranges {
            r.encode(&mut out);
        }
        out
    }

    pub fn decode_head(p: &[u8]) -> std::result::Result<Table, String> {
        let mut r = Reader::new(p);
        let points = r.u64()?;
        let nblocks = r.u32()? as usize;
        let nranges = r.u32()? as usize;
        let probes = r.u8()? as u32;
        let flen = r.u32()? as usize;
        let filter = r.bytes(flen)?.to_vec();
        if !filter.is_empty() && !(1..=crate::kv::filter::MAX_PROBES).contains(&probes) {
            return Err(format!("filter probe count {probes} out of range"));
        }
        let smallest = r.key()?.to_vec();
        let largest = r.key()?.to_vec();
        if nblocks == 0 {
            return Err("a table without blocks".into());
        }
        let mut blocks = Vec::with_capacity(r.capacity(nblocks, BLOCK_ENTRY));
        let mut end = 0u64;
        for _ in 0..nblocks {
            let loc = Loc {
                off: r.u32()?,
                len: r.u32()?,
                sum: r.u64()?,
            };
            if loc.off as u64 != end {
                return Err("blocks do not follow one another".into());
            }
            end += loc.len as u64;
            blocks.push(TableBlock {
                loc,
                count: r.u32()?,
                data: None,
            });
        }
        let mut pivots = Keys::with_capacity(nblocks - 1);
        for _ in 1..nblocks {
            let k = r.key()?.to_vec();
            if pivots.last().is_some_and(|l| l >= k.as_slice()) {
                return Err("pivots out of order".into());
            }
            pivots.push(k);
        }
        let mut ranges = Vec::with_capacity(r.capacity(nranges, MIN_RANGE));
        for _ in 0..nranges {
            let m = Msg::decode(&mut r)?;
            if !m.is_range() {
                return Err("a point message among the range deletes".into());
            }
            ranges.push(m);
        }
        r.finish()?;
        if smallest > largest {
            return Err("smallest key above the largest".into());
        }
        Ok(Table {
            points,
            filter: Filter::from_parts(filter, probes.max(1)),
            smallest,
            largest,
            pivots,
            blocks,
            ranges,
            head_len: p.len(),
        })
    }
}

impl StoredNode for Table {
    fn charge(&self) -> usize {
        self.head_len
            + self
                .blocks
                .iter()
                .filter_map(|b| b.data.as_ref())
                .map(|d| d.len())
                .sum::<usize>()
    }

    fn load(pager: &Pager, id: NodeId) -> Result<Table> {
        let (k, head) = pager.read_head(id)?;
        let bad = |what: String| {
            Error::corruption(
                pager.file_name(),
                pager.offset_of(id),
                format!("table {id}: {what}"),
            )
        };
        if k != KIND_TABLE {
            return Err(bad(format!("block kind {k}, not a table")));
        }
        Table::decode_head(&head).map_err(bad)
    }

    fn seal(&mut self, _id: NodeId) -> Sealed {
        unreachable!("tables are written whole when built, and never dirty")
    }

    fn shed(&mut self) -> bool {
        let mut shed = false;
        for b in &mut self.blocks {
            shed |= b.data.take().is_some();
        }
        shed
    }
}

/// Builds a table from point messages in (key, seq) order, a key's messages at a time.
pub struct Builder {
    block_bytes: usize,
    /// Finished blocks: first key, encoded bytes, message count.
    done: Vec<(Vec<u8>, Vec<u8>, u32)>,
    cur: Vec<u8>,
    cur_count: u32,
    cur_first: Vec<u8>,
    keys: Vec<Vec<u8>>,
    points: u64,
    puts: u64,
    bytes: usize,
}

impl Builder {
    pub fn new(block_bytes: usize) -> Builder {
        Builder {
            block_bytes,
            done: Vec::new(),
            cur: Vec::new(),
            cur_count: 0,
            cur_first: Vec::new(),
            keys: Vec::new(),
            points: 0,
            puts: 0,
            bytes: 0,
        }
    }

    /// Encoded bytes so far.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Puts among the messages added.
    pub fn puts(&self) -> u64 {
        self.puts
    }

    /// The last key added.
    pub fn last_key(&self) -> Option<&[u8]> {
        self.keys.last().map(|k| k.as_slice())
    }

    fn close_block(&mut self) {
        if self.cur_count == 0 {
            return;
        }
        self.cur[..4].copy_from_slice(&self.cur_count.to_le_bytes());
        let first = std::mem::take(&mut self.cur_first);
        self.done
            .push((first, std::mem::take(&mut self.cur), self.cur_count));
        self.cur_count = 0;
    }

    /// Add one key's messages (sorted by seq, all for one key above the last added).
    pub fn add(&mut self, msgs: &[Msg]) {
        let Some(first) = msgs.first() else { return };
        debug_assert!(self.last_key().is_none_or(|l| l < first.key.as_slice()));
        if self.cur.len() >= self.block_bytes {
            self.close_block();
        }
        if self.cur_count == 0 {
            self.cur.clear();
            self.cur.extend_from_slice(&[0u8; EMPTY_SEGMENT]);
            self.cur_first = first.key.clone();
            self.bytes += EMPTY_SEGMENT;
        }
        for m in msgs {
            let before = self.cur.len();
            m.encode(&mut self.cur);
            self.bytes += self.cur.len() - before;
            self.cur_count += 1;
            self.points += 1;
            self.puts += matches!(m.body, Body::Put(_)) as u64;
        }
        self.keys.push(first.key.clone());
    }

    /// The table with `ranges` (range deletes within its key range) and a filter of
    /// `filter_bits` per key, and the block to write for it as node `id`. None when it would
    /// hold nothing.
    pub fn finish(
        mut self,
        ranges: Vec<Msg>,
        filter_bits: f64,
        id: NodeId,
    ) -> Option<(Table, Sealed)> {
        self.close_block();
        if self.done.is_empty() && ranges.is_empty() {
            return None;
        }
        if self.done.is_empty() {
            // Range deletes alone: one empty block keeps the format uniform.
            let mut empty = vec![0u8; EMPTY_SEGMENT];
            empty[..4].copy_from_slice(&0u32.to_le_bytes());
            self.done.push((Vec::new(), empty, 0));
        }
        let filter = Filter::build_with(self.keys.iter().map(|k| k.as_slice()), filter_bits);
        let mut lo: Option<&[u8]> = self.keys.first().map(|k| k.as_slice());
        let mut hi: Option<&[u8]> = self.keys.last().map(|k| k.as_slice());
        for r in &ranges {
            let Body::DeleteRange(end) = &r.body else {
                unreachable!("ranges only")
            };
            lo = Some(lo.map_or(r.key.as_slice(), |l| l.min(r.key.as_slice())));
            hi = Some(hi.map_or(end.as_slice(), |h| h.max(end.as_slice())));
        }
        let (smallest, largest) = (lo.unwrap_or(&[]).to_vec(), hi.unwrap_or(&[]).to_vec());
        let mut blocks = Vec::with_capacity(self.done.len());
        let mut pivots = Keys::with_capacity(self.done.len());
        let mut tail = Vec::with_capacity(self.done.len());
        let mut off = 0u32;
        for (i, (first, bytes, count)) in self.done.into_iter().enumerate() {
            if i > 0 {
                pivots.push(first);
            }
            let loc = Loc {
                off,
                len: bytes.len() as u32,
                sum: xxh3_64(&bytes),
            };
            off += loc.len;
            blocks.push(TableBlock {
                loc,
                count,
                data: None,
            });
            tail.push(Chunk::Owned(bytes));
        }
        let mut t = Table {
            points: self.points,
            filter,
            smallest,
            largest,
            pivots,
            blocks,
            ranges,
            head_len: 0,
        };
        let head = t.encode_head();
        t.head_len = head.len();
        let sealed = Sealed::new(id, KIND_TABLE, &head, tail);
        Some((t, sealed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::Val;
    use crate::storage::sim::{SimDevice, SimDisk};

    fn put(k: u32, seq: u64) -> Msg {
        Msg {
            key: k.to_be_bytes().to_vec(),
            seq,
            body: Body::Put(Val::Inline(vec![7; 50])),
        }
    }

    #[test]
    fn a_built_table_reads_back_block_by_block() {
        let disk = SimDisk::new(Default::default(), 0.0);
        let dev = Arc::new(SimDevice::new("data", disk));
        let mut pager = Pager::create(dev);
        let mut b = Builder::new(1024);
        for k in 0..500u32 {
            b.add(&[put(k * 2, k as u64 + 1)]);
        }
        let range = Msg {
            key: 100u32.to_be_bytes().to_vec(),
            seq: 9_999,
            body: Body::DeleteRange(2_000u32.to_be_bytes().to_vec()),
        };
        let id = pager.new_id();
        let (t, sealed) = b.finish(vec![range.clone()], 10.0, id).unwrap();
        pager.write_sealed(id, sealed).unwrap();
        let back = Table::load(&pager, id).unwrap();
        assert_eq!(back, t);
        assert!(back.blocks.len() > 20, "{} blocks", back.blocks.len());
        assert_eq!(back.ranges, vec![range]);
        assert_eq!(back.largest, 2_000u32.to_be_bytes().to_vec());
        let mut seen = 0;
        for i in 0..back.blocks.len() {
            let raw = back.read_block(&pager, id, i).unwrap();
            let seg = back.parse_block("sim", 0, id, i, &raw).unwrap();
            for m in seg.points() {
                assert_eq!(back.block_for(&m.key), i);
                assert!(back.filter.may_hold(&m.key));
                seen += 1;
            }
        }
        assert_eq!(seen, 500);
        assert_eq!(back.points, 500);
    }
}
