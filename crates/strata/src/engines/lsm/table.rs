//! A table: part of a sorted run, written once as one extent and never changed until a merge
//! frees it.
//!
//! On disk the extent is a checksummed head (the block header of `storage::block`) followed by
//! the table's blocks of point messages, each with its own checksum in the head. The block kind
//! names the blocks' format: `KIND_TABLE2` (written now) blocks are `block.rs`'s, prefix-
//! compressed with restart points; `KIND_TABLE` (format 1, still read) blocks are
//! `kv::msg::Segment`s. The head stays resident once read (it holds the filter and the block
//! index); a point query then reads the one block its key may lie in (`Pager::read_part`), and
//! only if the filter lets the key through. A block is cached as its checked bytes, not
//! decoded: a query searches them for its key (`Table::lookup`), decoding only its own
//! messages, so a miss costs no allocation per message and the cache holds each block at its
//! size on disk.
//!
//! ```text
//! head:  points u64 | blocks u32 | ranges u32 | probes u8 | filter length u32, filter bytes |
//!        smallest key | largest key |
//!        per block: format 2: length u32, xxh3 u64
//!                   format 1: offset u32, length u32, xxh3 u64, messages u32 |
//!        blocks - 1 pivots |
//!        the range deletes (`Msg::encode`)
//! keys:  length u16, bytes
//! ```
//! Blocks follow one another from the end of the head. Invariants (checked by `check`): blocks
//! are sorted by (key, seq) within and across blocks, a key's messages in one block; pivot i
//! separates block i from the one before: above that one's last key, at most block i's first
//! key (format 1: its first key; format 2: the shortest such prefix of it); every key and range
//! delete lies within [smallest, largest]; the filter holds every point key.

use std::sync::Arc;

use xxhash_rust::xxh3::xxh3_64;

use super::block;
use crate::codec::{Reader, Writer};
use crate::error::{Error, Result};
#[cfg(test)]
use crate::kv::msg::EMPTY_FIXED_SEGMENT;
use crate::kv::msg::{lookup_encoded, Body, Encoding, Msg, Segment};
use crate::kv::{shortest_separator, Filter, Keys};
use crate::storage::block::{kind, BLOCK_HEADER};
use crate::storage::{Chunk, NodeId, Pager, Sealed, StoredNode};

/// Block kinds of the LSM-tree (after the Bε-tree's): a table with format-1 blocks
/// (`kv::msg` segments, read but no longer written), the manifest, and a table with format-2
/// blocks (`block.rs`).
pub const KIND_TABLE: u8 = kind::ENGINE_FIRST + 5;
pub const KIND_MANIFEST: u8 = kind::ENGINE_FIRST + 6;
pub const KIND_TABLE2: u8 = kind::ENGINE_FIRST + 12;

/// Whether a block of kind `k` is a table (of either format).
pub fn is_table(k: u8) -> bool {
    k == KIND_TABLE || k == KIND_TABLE2
}

/// The least a block's index entry and a range delete take encoded, for `Reader::capacity`.
const BLOCK_ENTRY: usize = 12;
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
    /// Its message count, in a format-1 head (a format-2 block's trailer holds it).
    pub count: Option<u32>,
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
    /// The blocks' format: `KIND_TABLE` or `KIND_TABLE2`.
    kind: u8,
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

    /// Block `i`'s messages decoded from its checked bytes, and checked against its index
    /// entry.
    pub fn parse_block(
        &self,
        file: &str,
        base: u64,
        id: NodeId,
        i: usize,
        bytes: &[u8],
    ) -> Result<Vec<Msg>> {
        let bad = |what: String| self.block_error(file, base, id, i, what);
        let points = if self.kind == KIND_TABLE {
            let seg = Segment::decode(bytes, Encoding::Fixed).map_err(bad)?;
            if !seg.ranges().is_empty() {
                return Err(bad("holds range deletes".into()));
            }
            seg.into_points()
        } else {
            block::decode(bytes).map_err(bad)?
        };
        if self.blocks[i]
            .count
            .is_some_and(|n| n as usize != points.len())
        {
            return Err(bad("holds other messages than its index entry says".into()));
        }
        Ok(points)
    }

    /// The messages for `key` in a block's checked bytes, decoding no others.
    pub fn lookup(&self, bytes: &[u8], key: &[u8]) -> std::result::Result<Vec<Msg>, String> {
        if self.kind == KIND_TABLE {
            lookup_encoded(bytes, key, Encoding::Fixed)
        } else {
            block::lookup(bytes, key)
        }
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
    ) -> Result<Vec<Msg>> {
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
            match b.count {
                Some(n) => w.u32(b.loc.off).u32(b.loc.len).u64(b.loc.sum).u32(n),
                None => w.u32(b.loc.len).u64(b.loc.sum),
            };
        }
        for p in self.pivots.iter() {
            w.key(p);
        }
        let mut out = w.finish();
        for r in &self.ranges {
            r.encode_fixed(&mut out);
        }
        out
    }

    /// The head of a table of block kind `kind`.
    pub fn decode_head(kind: u8, p: &[u8]) -> std::result::Result<Table, String> {
        if !is_table(kind) {
            return Err(format!("block kind {kind}, not a table"));
        }
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
        let one = kind == KIND_TABLE;
        for _ in 0..nblocks {
            let off = if one { r.u32()? } else { end as u32 };
            let loc = Loc {
                off,
                len: r.u32()?,
                sum: r.u64()?,
            };
            if loc.off as u64 != end {
                return Err("blocks do not follow one another".into());
            }
            end += loc.len as u64;
            if end > u32::MAX as u64 {
                return Err("blocks past 4 GiB".into());
            }
            let count = if one { Some(r.u32()?) } else { None };
            blocks.push(TableBlock {
                loc,
                count,
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
            let m = Msg::decode(&mut r, Encoding::Fixed)?;
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
            kind,
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
        Table::decode_head(k, &head).map_err(bad)
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

/// The block being built: format 2, or format 1 for tests that read old tables.
enum Open {
    Two(block::Writer),
    #[cfg(test)]
    One(Vec<u8>, u32),
}

impl Open {
    /// A block of about `bytes`.
    fn new(kind: u8, bytes: usize) -> Open {
        match kind {
            #[cfg(test)]
            KIND_TABLE => Open::One(vec![0u8; EMPTY_FIXED_SEGMENT], 0),
            // A block closes once past `bytes`: room for a message or two more.
            _ => Open::Two(block::Writer::with_capacity(bytes + bytes / 8)),
        }
    }
    fn len(&self) -> usize {
        match self {
            Open::Two(w) => w.len(),
            #[cfg(test)]
            Open::One(b, _) => b.len(),
        }
    }
    fn count(&self) -> u32 {
        match self {
            Open::Two(w) => w.count(),
            #[cfg(test)]
            Open::One(_, n) => *n,
        }
    }
    fn add(&mut self, m: &Msg) {
        match self {
            Open::Two(w) => w.add(m),
            #[cfg(test)]
            Open::One(b, n) => {
                m.encode_fixed(b);
                *n += 1;
            }
        }
    }
    fn finish(self) -> Vec<u8> {
        match self {
            Open::Two(w) => w.finish(),
            #[cfg(test)]
            Open::One(mut b, n) => {
                b[..4].copy_from_slice(&n.to_le_bytes());
                b
            }
        }
    }
}

/// Builds a table from point messages in (key, seq) order, a key's messages at a time.
pub struct Builder {
    block_bytes: usize,
    kind: u8,
    /// Finished blocks: first key, encoded bytes, message count.
    done: Vec<(Vec<u8>, Vec<u8>, u32)>,
    cur: Open,
    cur_first: Vec<u8>,
    /// Bytes of the finished blocks.
    done_bytes: usize,
    /// Each key's `Filter::hash`, for the filter, and the first and last key added.
    hashes: Vec<u64>,
    first: Vec<u8>,
    last: Option<Vec<u8>>,
    points: u64,
    puts: u64,
}

impl Builder {
    pub fn new(block_bytes: usize) -> Builder {
        Builder {
            block_bytes,
            kind: KIND_TABLE2,
            done: Vec::new(),
            cur: Open::new(KIND_TABLE2, block_bytes),
            cur_first: Vec::new(),
            done_bytes: 0,
            hashes: Vec::new(),
            first: Vec::new(),
            last: None,
            points: 0,
            puts: 0,
        }
    }

    /// A builder of format-1 tables, as older versions wrote them.
    #[cfg(test)]
    pub fn format1(block_bytes: usize) -> Builder {
        Builder {
            kind: KIND_TABLE,
            cur: Open::new(KIND_TABLE, block_bytes),
            ..Builder::new(block_bytes)
        }
    }

    /// Encoded bytes so far.
    pub fn bytes(&self) -> usize {
        self.done_bytes + self.cur.len()
    }

    /// Puts among the messages added.
    pub fn puts(&self) -> u64 {
        self.puts
    }

    /// The last key added.
    pub fn last_key(&self) -> Option<&[u8]> {
        self.last.as_deref()
    }

    fn close_block(&mut self) {
        if self.cur.count() == 0 {
            return;
        }
        let open = std::mem::replace(&mut self.cur, Open::new(self.kind, self.block_bytes));
        let count = open.count();
        let bytes = open.finish();
        self.done_bytes += bytes.len();
        let first = std::mem::take(&mut self.cur_first);
        self.done.push((first, bytes, count));
    }

    /// Add one key's messages (sorted by seq, all for one key above the last added).
    pub fn add(&mut self, msgs: &[Msg]) {
        let Some(first) = msgs.first() else { return };
        debug_assert!(self.last_key().is_none_or(|l| l < first.key.as_slice()));
        if self.cur.len() >= self.block_bytes {
            self.close_block();
        }
        if self.cur.count() == 0 {
            self.cur_first = match self.last_key() {
                // The block's pivot: in format 2 the shortest prefix of its first key above the
                // previous block's last key (as good for `block_for`, and a few bytes instead
                // of a whole key in the resident head).
                Some(prev) if self.kind == KIND_TABLE2 => shortest_separator(prev, &first.key),
                _ => first.key.clone(),
            };
        }
        for m in msgs {
            self.cur.add(m);
            self.points += 1;
            self.puts += matches!(m.body, Body::Put(_)) as u64;
        }
        self.hashes.push(Filter::hash(&first.key));
        match &mut self.last {
            Some(last) => {
                last.clear();
                last.extend_from_slice(&first.key);
            }
            None => {
                self.first = first.key.clone();
                self.last = Some(first.key.clone());
            }
        }
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
            self.done
                .push((Vec::new(), Open::new(self.kind, 0).finish(), 0));
        }
        let filter = Filter::build_hashed(self.hashes.iter().copied(), filter_bits);
        let mut lo: Option<&[u8]> = self.last.is_some().then_some(self.first.as_slice());
        let mut hi: Option<&[u8]> = self.last.as_deref();
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
                count: (self.kind == KIND_TABLE).then_some(count),
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
            kind: self.kind,
        };
        let head = t.encode_head();
        t.head_len = head.len();
        let sealed = Sealed::new(id, self.kind, &head, tail);
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

    /// Both formats: the one written now, and format 1, which older versions wrote and which
    /// is still read.
    #[test]
    fn a_built_table_reads_back_block_by_block() {
        for (name, builder) in [
            ("format 2", Builder::new as fn(usize) -> Builder),
            ("format 1", Builder::format1),
        ] {
            let disk = SimDisk::new(Default::default(), 0.0);
            let dev = Arc::new(SimDevice::new("data", disk));
            let mut pager = Pager::create(dev);
            let mut b = builder(1024);
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
            assert_eq!(back, t, "{name}");
            assert!(
                back.blocks.len() > 20,
                "{name}: {} blocks",
                back.blocks.len()
            );
            assert_eq!(back.ranges, vec![range]);
            assert_eq!(back.largest, 2_000u32.to_be_bytes().to_vec());
            let mut seen = 0;
            for i in 0..back.blocks.len() {
                let raw = back.read_block(&pager, id, i).unwrap();
                let points = back.parse_block("sim", 0, id, i, &raw).unwrap();
                for m in &points {
                    assert_eq!(back.block_for(&m.key), i);
                    assert!(back.filter.may_hold(&m.key));
                    assert_eq!(back.lookup(&raw, &m.key).unwrap(), vec![m.clone()]);
                    let absent =
                        (u32::from_be_bytes(m.key[..4].try_into().unwrap()) + 1).to_be_bytes();
                    assert!(back.lookup(&raw, &absent).unwrap().is_empty(), "{name}");
                    seen += 1;
                }
            }
            assert_eq!(seen, 500, "{name}");
            assert_eq!(back.points, 500);
        }
    }

    /// Format 2 takes less room than format 1 for the same messages: the prefix-shared keys
    /// and the varint lengths and sequence numbers.
    #[test]
    fn format_2_is_smaller() {
        let size = |mut b: Builder| {
            for k in 0..2_000u32 {
                b.add(&[put(k * 7, k as u64 + 1)]);
            }
            b.bytes()
        };
        let (one, two) = (size(Builder::format1(4096)), size(Builder::new(4096)));
        // 4-byte keys and 50-byte values: format 1 takes 11 + 4 + 4 + 50 bytes a message,
        // format 2 about 1 + 1 + 2 + 1 + 2 + 1 + 50.
        assert!(one >= 2_000 * 69, "format 1: {one} bytes");
        assert!(two < 2_000 * 60, "format 2: {two} bytes");
    }

    /// A format-2 table's head and blocks, fixed: a change to them is a format change (a new
    /// table kind, and this one still read).
    #[test]
    fn format_2_golden_bytes() {
        let mut b = Builder::new(1024);
        let big = |k: &[u8], seq| Msg {
            key: k.to_vec(),
            seq,
            body: Body::Put(Val::Inline(vec![9; 1020])),
        };
        b.add(&[big(b"ant", 1)]);
        b.add(&[big(b"bee", 2)]);
        let (t, _) = b.finish(Vec::new(), 0.0, 5).unwrap();
        // Each block: shared 0, 3 key bytes, put, seq, length 1020 (varint fc 07), the value,
        // one restart at 0, one restart, one message: 1,041 bytes.
        let block = |key: &[u8], seq: u8| {
            let mut v = vec![0, 3];
            v.extend_from_slice(key);
            v.extend_from_slice(&[1, seq, 0xfc, 0x07]);
            v.extend_from_slice(&[9; 1020]);
            v.extend_from_slice(&[0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0]);
            v
        };
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        let sum = |b: Vec<u8>| hex(&xxh3_64(&b).to_le_bytes());
        let want = format!(
            "0200000000000000 02000000 00000000 {probes:02x} 00000000 0300616e74 0300626565 \
             11040000 {} 11040000 {} 010062",
            sum(block(b"ant", 1)),
            sum(block(b"bee", 2)),
            probes = t.filter.probes(),
        );
        assert_eq!(hex(&t.encode_head()), want.replace(' ', ""));
        assert!(t.filter.bytes().is_empty());
    }
}
