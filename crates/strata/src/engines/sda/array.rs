//! An array: a sorted run of (key, version, seq, value | tombstone) entries, written once as
//! one extent and never changed until a merge frees it. Its version set W is not here: W
//! changes with clones and version deletes, so it lives in the manifest.
//!
//! ```text
//! head:   entries u64 | blocks u32 | probes u8 | filter length u32, filter bytes |
//!         largest key | per block: part (layout::Part: off u32, len u32, xxh3 u64),
//!         entries u32, first key
//! block:  entries u32 | per entry: key | version u64 | seq u64 | tag u8 (0 value, 1 tombstone)
//!         | value: length u32, bytes (values only)
//! keys:   length u16, bytes
//! ```
//! Invariants (checked by `check`): entries are in `Entry::order` (key ascending, then version
//! descending, then seq descending) within and across blocks, with one entry per (key,
//! version); one key's entries share a block; each block's first key is the one in the head;
//! the filter holds every key.

use std::cmp::Ordering;

use crate::codec::{Reader, Writer};
use crate::engine::versions::Version;
use crate::error::{Error, Result};
use crate::kv::{Filter, Keys};
use crate::layout::Part;
use crate::storage::block::kind;
use crate::storage::{Chunk, NodeId, Pager, Sealed};

/// Block kinds of the SDA (after the LSM-tree's).
pub const KIND_ARRAY: u8 = kind::ENGINE_FIRST + 7;
pub const KIND_MANIFEST: u8 = kind::ENGINE_FIRST + 8;

/// The least an entry takes encoded, for `Reader::capacity`.
const MIN_ENTRY: usize = 19;
const MIN_BLOCK_ENTRY: usize = crate::layout::PART_ENTRY + 6;

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

    pub fn encoded_len(&self) -> usize {
        2 + self.key.len() + 17 + self.value.as_ref().map_or(0, |v| 4 + v.len())
    }

    fn encode(&self, w: &mut Writer) {
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

    fn decode(r: &mut Reader<'_>) -> std::result::Result<Entry, String> {
        let key = r.key()?.to_vec();
        let version = r.u64()?;
        let seq = r.u64()?;
        let value = match r.u8()? {
            0 => {
                let n = r.u32()? as usize;
                Some(r.bytes(n)?.to_vec())
            }
            1 => None,
            t => return Err(format!("entry tag {t}")),
        };
        Ok(Entry {
            key,
            version,
            seq,
            value,
        })
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

    pub fn decode(p: &[u8]) -> std::result::Result<Head, String> {
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
        if k != KIND_ARRAY {
            return Err(bad(format!("block kind {k}, not an array")));
        }
        Head::decode(&head).map_err(bad)
    }

    /// The block `key` would lie in.
    pub fn block_for(&self, key: &[u8]) -> usize {
        self.firsts.rank(key, true).saturating_sub(1)
    }

    /// Block `i` read from the device, checked and decoded.
    pub fn read_block(&self, pager: &Pager, id: NodeId, i: usize) -> Result<Vec<Entry>> {
        let what = format!("SDA array {id}: block {i}");
        let bytes = self.blocks[i].part.read(pager, id, self.head_len, &what)?;
        self.decode_block(i, &bytes).map_err(|e| {
            Error::corruption(
                pager.file_name(),
                pager.offset_of(id) + self.blocks[i].part.at(self.head_len),
                format!("{what}: {e}"),
            )
        })
    }

    /// The bytes of blocks `first..=last`, read from the device with one IO (an array's
    /// blocks follow one another in its extent), unchecked: `run_block` checks and decodes
    /// each block of it when it is wanted.
    pub fn read_run(
        &self,
        pager: &Pager,
        id: NodeId,
        first: usize,
        last: usize,
    ) -> Result<Vec<u8>> {
        let start = self.blocks[first].part.at(self.head_len);
        let end = self.blocks[last].part.at(self.head_len) + self.blocks[last].part.len as u64;
        pager.read_part(id, start, (end - start) as usize)
    }

    /// Block `i` of a run read by `read_run` from block `first`, checked against its checksum
    /// and decoded.
    pub fn run_block(
        &self,
        pager: &Pager,
        id: NodeId,
        run: &[u8],
        first: usize,
        i: usize,
    ) -> Result<Vec<Entry>> {
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
        self.decode_block(i, bytes).map_err(bad)
    }

    /// Block `i` from its verified bytes.
    pub fn decode_block(&self, i: usize, bytes: &[u8]) -> std::result::Result<Vec<Entry>, String> {
        let mut r = Reader::new(bytes);
        let n = r.u32()? as usize;
        if n != self.blocks[i].entries as usize {
            return Err(format!(
                "{n} entries, the head says {}",
                self.blocks[i].entries
            ));
        }
        let mut out = Vec::with_capacity(r.capacity(n, MIN_ENTRY));
        for _ in 0..n {
            out.push(Entry::decode(&mut r)?);
        }
        r.finish()?;
        Ok(out)
    }

    /// Every entry of array `id`, read with one IO and verified.
    pub fn read_all(&self, pager: &Pager, id: NodeId) -> Result<Vec<Entry>> {
        let ext_len = pager.extent(id).map_or(0, |e| e.len) as usize;
        let whole = pager.read_part(id, 0, ext_len)?;
        let mut out = Vec::with_capacity(self.entries as usize);
        for (i, b) in self.blocks.iter().enumerate() {
            let at = pager.offset_of(id) + b.part.at(self.head_len);
            let bad = |what: String| {
                Error::corruption(
                    pager.file_name(),
                    at,
                    format!("SDA array {id}: block {i}: {what}"),
                )
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
/// version), not empty) for node `id`.
pub fn build(
    entries: &[Entry],
    block_bytes: usize,
    filter_bits: f64,
    id: NodeId,
) -> (Head, Sealed) {
    debug_assert!(!entries.is_empty());
    debug_assert!(entries
        .windows(2)
        .all(|w| w[0].order(&w[1]) == Ordering::Less
            && (w[0].key != w[1].key || w[0].version != w[1].version)));
    let mut blocks = Vec::new();
    let mut firsts = Keys::with_capacity(0);
    let mut tail = Vec::new();
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
                add += entries[j].encoded_len();
                j += 1;
            }
            if n > 0 && bytes + add > block_bytes {
                break;
            }
            for e in &entries[i..j] {
                e.encode(&mut w);
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
        tail.push(Chunk::Owned(block));
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
    };
    let bytes = head.encode();
    head.head_len = bytes.len();
    (head, Sealed::new(id, KIND_ARRAY, &bytes, tail))
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

    #[test]
    fn an_array_reads_back_block_by_block_and_whole() {
        let disk = SimDisk::new(Default::default(), 0.0);
        let mut pager = Pager::create(Arc::new(SimDevice::new("data", disk)));
        let mut entries = Vec::new();
        for k in 0..300u32 {
            entries.push(e(k, 3, k as u64 + 100, Some(&[7; 20])));
            if k % 3 == 0 {
                entries.push(e(k, 0, k as u64, None));
            }
        }
        let id = pager.new_id();
        let (head, sealed) = build(&entries, 256, 10.0, id);
        pager.write_sealed(id, sealed).unwrap();
        let back = Head::load(&pager, id).unwrap();
        assert_eq!(back, head);
        assert!(back.blocks.len() > 10);
        assert_eq!(back.read_all(&pager, id).unwrap(), entries);
        let mut seen = Vec::new();
        for i in 0..back.blocks.len() {
            for x in back.read_block(&pager, id, i).unwrap() {
                assert_eq!(back.block_for(&x.key), i, "a key's entries share a block");
                assert!(back.filter.may_hold(&x.key));
                seen.push(x);
            }
        }
        assert_eq!(seen, entries);
    }

    /// An array's bytes, fixed: a change to them is a format change.
    #[test]
    fn array_golden_bytes() {
        let entries = [e(1, 2, 9, Some(b"v")), e(1, 0, 3, None)];
        let (head, _) = build(&entries, 4096, 0.0, 5);
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
        entries.iter().for_each(|x| x.encode(&mut w));
        // count | key, version 2, seq 9, value "v" | key, version 0, seq 3, tombstone
        let block = w.finish();
        assert!(head.blocks[0].part.matches(&block));
        assert_eq!(
            hex(&block),
            "02000000\
             04000000000102000000000000000900000000000000000100000076\
             0400000000010000000000000000030000000000000001"
        );
    }
}
