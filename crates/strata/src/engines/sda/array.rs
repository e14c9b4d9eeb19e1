//! An array: a sorted run of (key, version, seq, value | tombstone) entries, written once as
//! one extent and never changed until a merge frees it. Its version set W is not here: W
//! changes with clones and version deletes, so it lives in the manifest.
//!
//! ```text
//! head:   entries u64 | blocks u32 | probes u8 | filter length u32, filter bytes |
//!         largest key | per block: part (layout::Part: off u32, len u32, xxh3 u64),
//!         entries u32, first key
//! block:  entries u32 | per entry (kind KIND_ARRAY2, written since): key varint length,
//!         bytes | version varint | seq varint | value varint (0: tombstone, n + 1: a value
//!         of n bytes), bytes
//!         per entry (kind KIND_ARRAY, the first format, still read): key | version u64 |
//!         seq u64 | tag u8 (0 value, 1 tombstone) | value: length u32, bytes (values only)
//! keys:   length u16, bytes
//! ```
//! The block kind says which entry encoding an array's blocks use (`Encoding`); the head is
//! the same in both. Invariants (checked by `check`): entries are in `Entry::order` (key
//! ascending, then version descending, then seq descending) within and across blocks, with
//! one entry per (key, version); one key's entries share a block; each block's first key is
//! the one in the head; the filter holds every key.
//!
//! A block is parsed into a `BlockView`: where each entry's key and value lie in the block's
//! bytes, which it shares, so that a range scan walks entries without copying them.

use std::cmp::Ordering;
use std::sync::Arc;

use crate::codec::{put_varint, varint_len, Reader, Writer};
use crate::engine::versions::Version;
use crate::error::{Error, Result};
use crate::kv::{Filter, Keys};
use crate::layout::Part;
use crate::storage::block::kind;
use crate::storage::{Chunk, Device, Extent, NodeId, Pager, Sealed};

/// Block kinds of the SDA (after the LSM-tree's): arrays of the first, fixed-width entry
/// encoding, the manifest, and arrays of varint entries (written since).
pub const KIND_ARRAY: u8 = kind::ENGINE_FIRST + 7;
pub const KIND_MANIFEST: u8 = kind::ENGINE_FIRST + 8;
pub const KIND_ARRAY2: u8 = kind::ENGINE_FIRST + 15;

/// The least an entry takes encoded, for `Reader::capacity`: the fixed encoding's 19, the
/// varint one's 4 (an empty key, one-byte version, seq and tombstone).
const MIN_ENTRY_FIXED: usize = 19;
const MIN_ENTRY_VARINT: usize = 4;
const MIN_BLOCK_ENTRY: usize = crate::layout::PART_ENTRY + 6;

/// How an array's block encodes its entries (its block kind says which).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// `KIND_ARRAY`: u64 version and seq, a tag byte, a u32 value length.
    Fixed,
    /// `KIND_ARRAY2`: varint lengths, version and seq; 16 bytes less per entry at seed 003's
    /// sizes (107 bytes for a 100-byte pair against 123).
    Varint,
}

impl Encoding {
    fn kind(self) -> u8 {
        match self {
            Encoding::Fixed => KIND_ARRAY,
            Encoding::Varint => KIND_ARRAY2,
        }
    }

    fn min_entry(self) -> usize {
        match self {
            Encoding::Fixed => MIN_ENTRY_FIXED,
            Encoding::Varint => MIN_ENTRY_VARINT,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub key: Vec<u8>,
    pub version: Version,
    /// Orders writes of one (key, version): the larger is the later.
    pub seq: u64,
    /// None: a tombstone.
    pub value: Option<Vec<u8>>,
}

impl Entry {
    /// Key ascending, then version descending (a version's number is above its ancestors', so
    /// the first entry of a key that a version can see is its nearest), then newest first.
    pub fn order(&self, other: &Entry) -> Ordering {
        self.key
            .cmp(&other.key)
            .then(other.version.cmp(&self.version))
            .then(other.seq.cmp(&self.seq))
    }

    /// Bytes of the entry in `enc`.
    pub fn encoded_len(&self, enc: Encoding) -> usize {
        match enc {
            Encoding::Fixed => {
                2 + self.key.len() + 17 + self.value.as_ref().map_or(0, |v| 4 + v.len())
            }
            Encoding::Varint => {
                let value = self
                    .value
                    .as_ref()
                    .map_or(1, |v| varint_len(v.len() as u64 + 1) + v.len());
                varint_len(self.key.len() as u64)
                    + self.key.len()
                    + varint_len(self.version)
                    + varint_len(self.seq)
                    + value
            }
        }
    }

    fn encode(&self, w: &mut Writer, enc: Encoding) {
        match enc {
            Encoding::Fixed => {
                w.key(&self.key).u64(self.version).u64(self.seq);
                match &self.value {
                    Some(v) => {
                        w.u8(0).u32(v.len() as u32).bytes(v);
                    }
                    None => {
                        w.u8(1);
                    }
                }
            }
            Encoding::Varint => {
                let mut p = Vec::with_capacity(30);
                put_varint(&mut p, self.key.len() as u64);
                w.bytes(&p).bytes(&self.key);
                p.clear();
                put_varint(&mut p, self.version);
                put_varint(&mut p, self.seq);
                put_varint(
                    &mut p,
                    self.value.as_ref().map_or(0, |v| v.len() as u64 + 1),
                );
                w.bytes(&p);
                if let Some(v) = &self.value {
                    w.bytes(v);
                }
            }
        }
    }
}

/// Where one entry of a block lies: its key's and value's places in the block's bytes, its
/// version and seq. `value_len` is `TOMBSTONE` for a tombstone.
#[derive(Clone, Copy, Debug)]
struct At {
    key: u32,
    key_len: u32,
    value: u32,
    value_len: u32,
    version: Version,
    seq: u64,
}

const TOMBSTONE: u32 = u32::MAX;

/// Where each entry of block `i` of `head` (its verified bytes `block`) lies in it.
fn parse(head: &Head, i: usize, block: &[u8]) -> std::result::Result<Vec<At>, String> {
    let mut r = Reader::new(block);
    let n = r.u32()? as usize;
    if n != head.blocks[i].entries as usize {
        return Err(format!(
            "{n} entries, the head says {}",
            head.blocks[i].entries
        ));
    }
    let mut entries = Vec::with_capacity(r.capacity(n, head.encoding.min_entry()));
    for _ in 0..n {
        let key_len = match head.encoding {
            Encoding::Fixed => r.u16()? as usize,
            Encoding::Varint => r.varint()? as usize,
        };
        let key = r.position();
        r.bytes(key_len)?;
        let (version, seq, value_len) = match head.encoding {
            Encoding::Fixed => {
                let (version, seq) = (r.u64()?, r.u64()?);
                match r.u8()? {
                    0 => (version, seq, r.u32()? as u64),
                    1 => (version, seq, TOMBSTONE as u64),
                    t => return Err(format!("entry tag {t}")),
                }
            }
            Encoding::Varint => {
                let (version, seq) = (r.varint()?, r.varint()?);
                match r.varint()? {
                    0 => (version, seq, TOMBSTONE as u64),
                    n => (version, seq, n - 1),
                }
            }
        };
        let value = r.position();
        if value_len != TOMBSTONE as u64 {
            if value_len > r.remaining() as u64 {
                return Err(format!("a value of {value_len} bytes past the block's end"));
            }
            r.bytes(value_len as usize)?;
        }
        // Offsets within one block: a block is far below 4 GiB (`Config::check`).
        entries.push(At {
            key: key as u32,
            key_len: key_len as u32,
            value: value as u32,
            value_len: value_len as u32,
            version,
            seq,
        });
    }
    r.finish()?;
    Ok(entries)
}

/// Entry `e` of `block`, copied out.
fn entry_of(block: &[u8], e: &At) -> Entry {
    Entry {
        key: block[e.key as usize..(e.key + e.key_len) as usize].to_vec(),
        version: e.version,
        seq: e.seq,
        value: (e.value_len != TOMBSTONE)
            .then(|| block[e.value as usize..(e.value + e.value_len) as usize].to_vec()),
    }
}

/// A block's entries, parsed but not copied: each entry's place in the bytes it shares (a
/// run of blocks read with one IO), the block starting at `base`. One allocation per block,
/// not two per entry.
#[derive(Debug)]
pub struct BlockView {
    bytes: Arc<Vec<u8>>,
    base: usize,
    entries: Vec<At>,
}

impl BlockView {
    /// A view of no entries (a cursor's before its first block).
    pub fn empty() -> BlockView {
        BlockView {
            bytes: Arc::new(Vec::new()),
            base: 0,
            entries: Vec::new(),
        }
    }

    /// A view of `bytes` with no entries (tests of what holds views).
    #[cfg(test)]
    pub fn unparsed(bytes: Vec<u8>) -> BlockView {
        BlockView {
            bytes: Arc::new(bytes),
            base: 0,
            entries: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The same view over a copy of its own `len` bytes, so that keeping it does not keep
    /// the rest of the run it was read with.
    pub fn detached(&self, len: usize) -> BlockView {
        BlockView {
            bytes: Arc::new(self.block()[..len].to_vec()),
            base: 0,
            entries: self.entries.clone(),
        }
    }

    /// Memory a view takes per entry besides the block's bytes (the entry's place).
    pub const ENTRY_CHARGE: usize = std::mem::size_of::<At>();

    /// Memory the view takes when it holds its block alone (`detached`): the bytes and the
    /// place of each entry.
    pub fn charge(&self) -> usize {
        self.bytes.len() - self.base + self.entries.len() * Self::ENTRY_CHARGE
    }

    fn block(&self) -> &[u8] {
        &self.bytes[self.base..]
    }

    pub fn key(&self, i: usize) -> &[u8] {
        let e = &self.entries[i];
        &self.block()[e.key as usize..(e.key + e.key_len) as usize]
    }

    pub fn version(&self, i: usize) -> Version {
        self.entries[i].version
    }

    pub fn seq(&self, i: usize) -> u64 {
        self.entries[i].seq
    }

    /// None: a tombstone.
    pub fn value(&self, i: usize) -> Option<&[u8]> {
        let e = &self.entries[i];
        (e.value_len != TOMBSTONE)
            .then(|| &self.block()[e.value as usize..(e.value + e.value_len) as usize])
    }

    /// Every entry, copied out.
    pub fn to_entries(&self) -> Vec<Entry> {
        self.entries
            .iter()
            .map(|e| entry_of(self.block(), e))
            .collect()
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct BlockInfo {
    pub part: Part,
    pub entries: u32,
}

/// What an array's head holds; kept in memory once read.
#[derive(Clone, Debug, PartialEq)]
pub struct Head {
    pub entries: u64,
    pub filter: Filter,
    pub largest: Vec<u8>,
    pub blocks: Vec<BlockInfo>,
    /// Each block's first key.
    pub firsts: Keys,
    pub head_len: usize,
    /// How the blocks encode their entries (from the array's block kind; not in the head).
    pub encoding: Encoding,
}

impl Head {
    fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.u64(self.entries)
            .u32(self.blocks.len() as u32)
            .u8(self.filter.probes() as u8)
            .u32(self.filter.bytes().len() as u32)
            .bytes(self.filter.bytes())
            .key(&self.largest);
        for (b, first) in self.blocks.iter().zip(self.firsts.iter()) {
            b.part.encode(&mut w);
            w.u32(b.entries).key(first);
        }
        w.finish()
    }

    pub fn decode(p: &[u8], encoding: Encoding) -> std::result::Result<Head, String> {
        let mut r = Reader::new(p);
        let entries = r.u64()?;
        let nblocks = r.u32()? as usize;
        let probes = r.u8()? as u32;
        let flen = r.u32()? as usize;
        let filter = r.bytes(flen)?.to_vec();
        if !filter.is_empty() && !(1..=crate::kv::filter::MAX_PROBES).contains(&probes) {
            return Err(format!("filter probe count {probes} out of range"));
        }
        let largest = r.key()?.to_vec();
        if nblocks == 0 {
            return Err("an array without blocks".into());
        }
        let mut blocks = Vec::with_capacity(r.capacity(nblocks, MIN_BLOCK_ENTRY));
        let mut firsts = Keys::with_capacity(blocks.capacity());
        let (mut end, mut total) = (0u64, 0u64);
        for _ in 0..nblocks {
            let part = Part::decode(&mut r, end)?;
            end += part.len as u64;
            let n = r.u32()?;
            total += n as u64;
            let first = r.key()?.to_vec();
            if firsts.last().is_some_and(|l| l >= first.as_slice()) {
                return Err("block first keys out of order".into());
            }
            firsts.push(first);
            blocks.push(BlockInfo { part, entries: n });
        }
        r.finish()?;
        if total != entries {
            return Err(format!("{entries} entries, but its blocks hold {total}"));
        }
        if firsts.last().is_some_and(|l| l > largest.as_slice()) {
            return Err("a block starts above the largest key".into());
        }
        Ok(Head {
            entries,
            filter: Filter::from_parts(filter, probes.max(1)),
            largest,
            blocks,
            firsts,
            head_len: p.len(),
            encoding,
        })
    }

    /// Read the head of array `id`.
    pub fn load(pager: &Pager, id: NodeId) -> Result<Head> {
        let (k, head) = pager.read_head(id)?;
        let bad = |what: String| {
            Error::corruption(
                pager.file_name(),
                pager.offset_of(id),
                format!("SDA array {id}: {what}"),
            )
        };
        let encoding = match k {
            KIND_ARRAY => Encoding::Fixed,
            KIND_ARRAY2 => Encoding::Varint,
            _ => return Err(bad(format!("block kind {k}, not an array"))),
        };
        Head::decode(&head, encoding).map_err(bad)
    }

    /// Whether the array may hold an entry of `key`: within its keys and passed by its filter.
    pub fn may_hold(&self, key: &[u8]) -> bool {
        let first = self.firsts.first().unwrap_or_default();
        first <= key && key <= self.largest.as_slice() && self.filter.may_hold(key)
    }

    /// The block `key` would lie in.
    pub fn block_for(&self, key: &[u8]) -> usize {
        self.firsts.rank(key, true).saturating_sub(1)
    }

    /// Block `i` read from the device, checked and parsed.
    pub fn read_block(&self, pager: &Pager, id: NodeId, i: usize) -> Result<BlockView> {
        let what = format!("SDA array {id}: block {i}");
        let bytes = self.blocks[i].part.read(pager, id, self.head_len, &what)?;
        let len = bytes.len();
        self.view(i, Arc::new(bytes), 0, len).map_err(|e| {
            Error::corruption(
                pager.file_name(),
                pager.offset_of(id) + self.blocks[i].part.at(self.head_len),
                format!("{what}: {e}"),
            )
        })
    }

    /// The bytes of blocks `first..=last`, read from the device with one IO (an array's
    /// blocks follow one another in its extent), unchecked: `run_block` checks and parses
    /// each block of it when it is wanted.
    pub fn read_run(
        &self,
        pager: &Pager,
        id: NodeId,
        first: usize,
        last: usize,
    ) -> Result<Vec<u8>> {
        let (id, start, len) = self.run_extent(id, first, last);
        pager.read_part(id, start, len)
    }

    /// Where `read_run` reads blocks `first..=last` of array `id`: (id, offset in its
    /// extent, length), for `Pager::read_parts`.
    pub fn run_extent(&self, id: NodeId, first: usize, last: usize) -> (NodeId, u64, usize) {
        let start = self.blocks[first].part.at(self.head_len);
        let end = self.blocks[last].part.at(self.head_len) + self.blocks[last].part.len as u64;
        (id, start, (end - start) as usize)
    }

    /// Block `i` of a run read by `read_run` from block `first`, checked against its checksum
    /// and parsed in place (the view shares the run's bytes).
    pub fn run_block(
        &self,
        pager: &Pager,
        id: NodeId,
        run: &Arc<Vec<u8>>,
        first: usize,
        i: usize,
    ) -> Result<BlockView> {
        let part = &self.blocks[i].part;
        let at = (part.at(self.head_len) - self.blocks[first].part.at(self.head_len)) as usize;
        let bad = |what: String| {
            Error::corruption(
                pager.file_name(),
                pager.offset_of(id) + part.at(self.head_len),
                format!("SDA array {id}: block {i}: {what}"),
            )
        };
        let bytes = run
            .get(at..at + part.len as usize)
            .ok_or_else(|| bad("past the run read".into()))?;
        if !part.matches(bytes) {
            return Err(bad("checksum mismatch".into()));
        }
        self.view(i, run.clone(), at, part.len as usize)
            .map_err(bad)
    }

    /// Block `i` parsed from its bytes as `build_blocks` made them (just written, so not
    /// checked against the checksum).
    pub fn block_view(
        &self,
        i: usize,
        bytes: Arc<Vec<u8>>,
    ) -> std::result::Result<BlockView, String> {
        let len = bytes.len();
        self.view(i, bytes, 0, len)
    }

    /// Memory the head takes: its filter, its block directory and first keys.
    pub fn charge(&self) -> usize {
        self.filter.bytes().len()
            + self.largest.len()
            + self.blocks.len() * std::mem::size_of::<BlockInfo>()
            + self.firsts.iter().map(|k| k.len() + 32).sum::<usize>()
    }

    /// Block `i` from its verified bytes, `bytes[start..start + len]`, parsed.
    fn view(
        &self,
        i: usize,
        bytes: Arc<Vec<u8>>,
        start: usize,
        len: usize,
    ) -> std::result::Result<BlockView, String> {
        let block = bytes
            .get(start..start + len)
            .ok_or_else(|| "past the bytes read".to_string())?;
        let entries = parse(self, i, block)?;
        Ok(BlockView {
            bytes,
            base: start,
            entries,
        })
    }

    /// Block `i` from its verified bytes, decoded into owned entries.
    pub fn decode_block(&self, i: usize, bytes: &[u8]) -> std::result::Result<Vec<Entry>, String> {
        Ok(parse(self, i, bytes)?
            .iter()
            .map(|e| entry_of(bytes, e))
            .collect())
    }

    /// Every entry of array `id`, read with one IO and verified.
    pub fn read_all(&self, pager: &Pager, id: NodeId) -> Result<Vec<Entry>> {
        let ext = pager.extent(id).ok_or_else(|| {
            Error::corruption(
                pager.file_name(),
                0,
                format!("SDA array {id} is not in the pager's table"),
            )
        })?;
        self.read_all_at(&**pager.device(), id, ext)
    }

    /// `read_all` of the array at `ext`, straight from the device: for a merge on a thread of
    /// its own, which holds no pager (the array stays in the levels, so its extent is not
    /// reused, until the merge is installed).
    pub fn read_all_at(&self, dev: &dyn Device, id: NodeId, ext: Extent) -> Result<Vec<Entry>> {
        let mut whole = vec![0u8; ext.len as usize];
        dev.read_at(&mut whole, ext.offset)?;
        let mut out = Vec::with_capacity(self.entries as usize);
        for (i, b) in self.blocks.iter().enumerate() {
            let at = ext.offset + b.part.at(self.head_len);
            let bad = |what: String| {
                Error::corruption(dev.name(), at, format!("SDA array {id}: block {i}: {what}"))
            };
            let bytes = b
                .part
                .slice(&whole, self.head_len)
                .ok_or_else(|| bad("past the extent".into()))?;
            if !b.part.matches(bytes) {
                return Err(bad("checksum mismatch".into()));
            }
            out.extend(self.decode_block(i, bytes).map_err(bad)?);
        }
        Ok(out)
    }
}

/// The head and the sealed block of an array of `entries` (in `Entry::order`, one per (key,
/// version), not empty) for node `id`, in the current encoding (varint).
#[cfg(test)]
pub fn build(
    entries: &[Entry],
    block_bytes: usize,
    filter_bits: f64,
    id: NodeId,
) -> (Head, Sealed) {
    build_in(entries, block_bytes, filter_bits, id, Encoding::Varint)
}

/// The head and the sealed block of an array of `entries` (in `Entry::order`, one per (key,
/// version), not empty) for node `id`, in encoding `enc` (the engine writes varint; tests
/// write the first format too, to read it back).
#[cfg(test)]
pub fn build_in(
    entries: &[Entry],
    block_bytes: usize,
    filter_bits: f64,
    id: NodeId,
    enc: Encoding,
) -> (Head, Sealed) {
    let entries: Vec<&Entry> = entries.iter().collect();
    let (head, sealed, _) = build_blocks(&entries, block_bytes, filter_bits, id, enc);
    (head, sealed)
}

/// `build_in`, and each block's bytes, shared with the sealed block (not copied), so that a
/// block cache can keep what was just written (`Head::block_view`). The entries are borrowed:
/// a merge's pieces take theirs from its one sorted list, not copies.
pub fn build_blocks(
    entries: &[&Entry],
    block_bytes: usize,
    filter_bits: f64,
    id: NodeId,
    enc: Encoding,
) -> (Head, Sealed, Vec<Arc<Vec<u8>>>) {
    debug_assert!(!entries.is_empty());
    debug_assert!(entries
        .windows(2)
        .all(|w| w[0].order(w[1]) == Ordering::Less
            && (w[0].key != w[1].key || w[0].version != w[1].version)));
    let mut blocks = Vec::new();
    let mut firsts = Keys::with_capacity(0);
    let mut tail = Vec::new();
    let mut shared = Vec::new();
    let mut off = 0u32;
    let mut i = 0;
    while i < entries.len() {
        // A block takes whole keys until it reaches the target size.
        let mut w = Writer::new();
        w.u32(0);
        let (mut n, mut bytes) = (0u32, 4usize);
        let first = entries[i].key.clone();
        while i < entries.len() {
            let key_start = i;
            let mut j = i;
            let mut add = 0;
            while j < entries.len() && entries[j].key == entries[key_start].key {
                add += entries[j].encoded_len(enc);
                j += 1;
            }
            if n > 0 && bytes + add > block_bytes {
                break;
            }
            for e in &entries[i..j] {
                e.encode(&mut w, enc);
            }
            n += (j - i) as u32;
            bytes += add;
            i = j;
        }
        let mut block = w.finish();
        block[..4].copy_from_slice(&n.to_le_bytes());
        let part = Part::of(&block, off);
        off += part.len;
        blocks.push(BlockInfo { part, entries: n });
        firsts.push(first);
        let block = Arc::new(block);
        shared.push(block.clone());
        tail.push(Chunk::Shared(block));
    }
    let mut keys: Vec<&[u8]> = entries.iter().map(|e| e.key.as_slice()).collect();
    keys.dedup();
    let filter = Filter::build_with(keys.iter().copied(), filter_bits);
    let mut head = Head {
        entries: entries.len() as u64,
        filter,
        largest: entries.last().expect("not empty").key.clone(),
        blocks,
        firsts,
        head_len: 0,
        encoding: enc,
    };
    let bytes = head.encode();
    head.head_len = bytes.len();
    (head, Sealed::new(id, enc.kind(), &bytes, tail), shared)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::sim::{SimDevice, SimDisk};
    use std::sync::Arc;

    pub(crate) fn e(k: u32, version: Version, seq: u64, value: Option<&[u8]>) -> Entry {
        Entry {
            key: k.to_be_bytes().to_vec(),
            version,
            seq,
            value: value.map(|v| v.to_vec()),
        }
    }

    /// Both encodings read back whole, block by block and run by run, and the views of a
    /// block (parsed in place) give exactly the entries the owned decoding gives.
    #[test]
    fn an_array_reads_back_block_by_block_and_whole() {
        let disk = SimDisk::new(Default::default(), 0.0);
        let mut pager = Pager::create(Arc::new(SimDevice::new("data", disk)));
        let mut entries = Vec::new();
        for k in 0..300u32 {
            entries.push(e(k, 3 + k as u64 * 1000, k as u64 + 100, Some(&[7; 20])));
            if k % 3 == 0 {
                entries.push(e(k, 0, k as u64 * 1_000_000, None));
            }
            if k % 7 == 0 {
                entries.push(e(k, 0, 5, Some(&[])));
            }
        }
        entries.sort_by(|x, y| x.order(y));
        entries.dedup_by(|a, b| a.key == b.key && a.version == b.version);
        let mut sizes = Vec::new();
        for enc in [Encoding::Fixed, Encoding::Varint] {
            let id = pager.new_id();
            let (head, sealed) = build_in(&entries, 256, 10.0, id, enc);
            pager.write_sealed(id, sealed).unwrap();
            let back = Head::load(&pager, id).unwrap();
            assert_eq!(back, head);
            assert_eq!(back.encoding, enc);
            assert!(back.blocks.len() > 10);
            assert_eq!(back.read_all(&pager, id).unwrap(), entries);
            let mut seen = Vec::new();
            for i in 0..back.blocks.len() {
                let view = back.read_block(&pager, id, i).unwrap();
                for j in 0..view.len() {
                    let x = Entry {
                        key: view.key(j).to_vec(),
                        version: view.version(j),
                        seq: view.seq(j),
                        value: view.value(j).map(<[u8]>::to_vec),
                    };
                    assert_eq!(back.block_for(&x.key), i, "a key's entries share a block");
                    assert!(back.filter.may_hold(&x.key));
                    seen.push(x);
                }
                assert_eq!(view.to_entries(), seen[seen.len() - view.len()..]);
            }
            assert_eq!(seen, entries);
            // A run of blocks 2..=6 read with one IO: each block's view, in place, is the
            // block's decoding.
            let run = Arc::new(back.read_run(&pager, id, 2, 6).unwrap());
            for i in 2..=6 {
                let view = back.run_block(&pager, id, &run, 2, i).unwrap();
                let alone = back.read_block(&pager, id, i).unwrap();
                assert_eq!(view.to_entries(), alone.to_entries());
            }
            sizes.push(pager.extent(id).unwrap().len);
        }
        assert!(sizes[1] < sizes[0], "varint entries are smaller: {sizes:?}");
    }

    /// Damaged blocks are refused the same way by the view and the owned decoding: a count
    /// that disagrees with the head, a value running past the end, trailing bytes.
    #[test]
    fn damaged_blocks_are_refused_by_both_decodings() {
        let entries = [e(1, 2, 9, Some(b"v")), e(1, 0, 3, None)];
        for enc in [Encoding::Fixed, Encoding::Varint] {
            let (head, _) = build_in(&entries, 4096, 0.0, 5, enc);
            let mut w = Writer::new();
            w.u32(2);
            entries.iter().for_each(|x| x.encode(&mut w, enc));
            let good = w.finish();
            assert_eq!(head.decode_block(0, &good).unwrap(), entries);
            let mut wrong_count = good.clone();
            wrong_count[0] = 3;
            let mut trailing = good.clone();
            trailing.push(0);
            for bad in [wrong_count, good[..good.len() - 1].to_vec(), trailing] {
                let len = bad.len();
                assert!(head.decode_block(0, &bad).is_err());
                assert!(head.view(0, Arc::new(bad), 0, len).is_err());
            }
        }
    }

    /// An array's bytes, fixed: a change to them is a format change.
    #[test]
    fn array_golden_bytes() {
        let entries = [e(1, 2, 9, Some(b"v")), e(1, 0, 3, None)];
        let (head, _) = build_in(&entries, 4096, 0.0, 5, Encoding::Fixed);
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        // entries 2 | blocks 1 | probes 7 | no filter | largest key 00000001 |
        // block 0: off 0, len 55, xxh3, 2 entries, first key 00000001
        assert_eq!(
            hex(&head.encode()),
            "0200000000000000010000000700000000040000000001\
             0000000037000000b3b4e621ffe8bb3c02000000040000000001"
        );
        assert_eq!(head.blocks[0].part.sum, 0x3cbb_e8ff_21e6_b4b3);
        let mut w = Writer::new();
        w.u32(2);
        entries
            .iter()
            .for_each(|x| x.encode(&mut w, Encoding::Fixed));
        // count | key, version 2, seq 9, value "v" | key, version 0, seq 3, tombstone
        let block = w.finish();
        assert!(head.blocks[0].part.matches(&block));
        assert_eq!(
            hex(&block),
            "02000000\
             04000000000102000000000000000900000000000000000100000076\
             0400000000010000000000000000030000000000000001"
        );
        // The varint encoding (KIND_ARRAY2): the same head fields, smaller entries.
        let (head, _) = build(&entries, 4096, 0.0, 5);
        assert_eq!(head.encoding, Encoding::Varint);
        let mut w = Writer::new();
        w.u32(2);
        entries
            .iter()
            .for_each(|x| x.encode(&mut w, Encoding::Varint));
        // count | key length 4, key, version 2, seq 9, value of 1 byte (2), "v" |
        // key length 4, key, version 0, seq 3, tombstone (0)
        let block = w.finish();
        assert!(head.blocks[0].part.matches(&block));
        assert_eq!(
            hex(&block),
            "02000000\
             040000000102090276\
             0400000001000300"
        );
        assert_eq!(head.blocks[0].part.len as usize, block.len());
    }
}
