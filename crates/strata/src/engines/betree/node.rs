//! Bε-tree nodes: an internal node's buffer is cut into one segment per child, a leaf into
//! basement nodes, and each of those partitions can be resident or not on its own.
//!
//! On disk a node is one extent: a checksummed head (the block header of `storage::block`)
//! holding the node's directory, followed by its partitions, each with its own checksum in the
//! directory. So the head is read once and kept resident, and a query then reads only the one
//! partition it needs (`Pager::read_part`).
//!
//! ```text
//! head of an internal node: n u32, then per child: id u64, offset u32, length u32, xxh3 u64,
//!                           messages u32; then n - 1 pivots (length u16, key); then, only
//!                           if some child has spilled runs, per child: runs u16, and per run
//!                           (oldest first): id u64, bytes u32, messages u32, filter length
//!                           u32, filter bytes
//! head of a leaf:           m u32, then per basement: offset u32, length u32, xxh3 u64,
//!                           entries u32; then m - 1 pivots
//! head of a run:            as a leaf's, its partitions being segments (chunks of the run
//!                           by key) instead of basements
//! segment:                  see `kv::msg` (compact in the kinds written today; the fixed
//!                           encoding in the older internal and run kinds, still read)
//! basement:                 see `basement::Basement` (compact in the kind written today,
//!                           re-encoded from the fixed encoding of the older leaf kind as
//!                           it is read)
//! ```
//! Offsets count from the start of the extent. Child i (or basement i) holds the keys k with
//! pivot[i-1] <= k < pivot[i].
//!
//! Invariant the engine keeps: a dirty node is fully loaded (a node is written back whole), so
//! only clean nodes have partitions that are not resident. A clean node's segment may also be
//! held raw: its checked bytes as on disk, undecoded (`Part::raw`), which is all a point query
//! needs (`kv::msg::lookup_encoded` walks them); it is decoded when the node is to change.
//! A resident internal node keeps, in memory only, the heads of its children's runs that point
//! queries have read (`RunRef::dir`), charged to it.

use std::sync::{Arc, OnceLock};

use xxhash_rust::xxh3::{xxh3_64, Xxh3};

use super::basement::Basement;
use crate::codec::Reader;
use crate::error::{Error, Result};
use crate::kv::msg::{Encoding, RawSegment, Segment};
use crate::kv::{Filter, Keys};
use crate::storage::block::{self, kind, BLOCK_HEADER};
use crate::storage::{Chunk, NodeId, Pager, Sealed, StoredNode};

/// Block kinds of the Bε-tree's nodes and runs (after the B+-tree's). Nodes and runs are
/// written in the `_SHAPED` kinds, whose segments use `kv::msg`'s shaped encoding and whose
/// basements `basement`'s (lengths said once where every record has the same). The older
/// kinds are still read: `_COMPACT` (varint lengths on every record) and the first ones (fixed
/// widths); a node of an older kind is written back in the shaped kind.
pub const KIND_LEAF: u8 = kind::ENGINE_FIRST + 2;
pub const KIND_LEAF_COMPACT: u8 = kind::ENGINE_FIRST + 16;
pub const KIND_LEAF_SHAPED: u8 = kind::ENGINE_FIRST + 17;
pub const KIND_INTERNAL: u8 = kind::ENGINE_FIRST + 3;
pub const KIND_RUN: u8 = kind::ENGINE_FIRST + 4;
pub const KIND_INTERNAL_COMPACT: u8 = kind::ENGINE_FIRST + 13;
pub const KIND_RUN_COMPACT: u8 = kind::ENGINE_FIRST + 14;
pub const KIND_INTERNAL_SHAPED: u8 = kind::ENGINE_FIRST + 18;
pub const KIND_RUN_SHAPED: u8 = kind::ENGINE_FIRST + 19;

/// Every kind of a leaf, an internal node and a run, oldest first.
pub const LEAF_KINDS: [u8; 3] = [KIND_LEAF, KIND_LEAF_COMPACT, KIND_LEAF_SHAPED];
pub const INTERNAL_KINDS: [u8; 3] = [KIND_INTERNAL, KIND_INTERNAL_COMPACT, KIND_INTERNAL_SHAPED];
pub const RUN_KINDS: [u8; 3] = [KIND_RUN, KIND_RUN_COMPACT, KIND_RUN_SHAPED];

/// The encoding of the partitions (segments or basements) of a node of kind `k`.
pub fn segment_encoding(k: u8) -> Encoding {
    match k {
        KIND_INTERNAL | KIND_RUN | KIND_LEAF => Encoding::Fixed,
        KIND_INTERNAL_COMPACT | KIND_RUN_COMPACT | KIND_LEAF_COMPACT => Encoding::Compact,
        _ => Encoding::Shaped,
    }
}

/// Nodes up to this size are read whole on a miss: below about the device's half-bandwidth
/// point (1/α ≈ 60–130 KiB here) a second, partial read costs more than reading the rest.
pub const WHOLE_READ_MAX: u64 = 64 << 10;

/// A point query reads a run of more than this many chunks' bytes (`run_read_whole_max`) by
/// its head and the one chunk its key falls in, not whole: most such reads come from the page
/// cache, where bytes cost more than a second call (at fanout 26 with 1 MiB nodes, 1M records
/// and a 16 MiB cache, runs of ~40 KiB in 4 KiB chunks read whole took point reads from 4.4 to
/// 11.6 KB each and their rate down by a fifth). A run of a chunk or two gains nothing by it.
pub const RUN_WHOLE_CHUNKS: u64 = 4;

/// The most bytes a run cut in chunks of `chunk` bytes may hold and still be read whole by a
/// point query: `RUN_WHOLE_CHUNKS` chunks, and never more than any block (`WHOLE_READ_MAX`).
pub fn run_read_whole_max(chunk: u64) -> u64 {
    (RUN_WHOLE_CHUNKS * chunk).min(WHOLE_READ_MAX)
}

/// Heap bytes a buffered message costs beyond its encoding, for the cache charge (a message
/// holds its key and value in heap objects of their own; a basement's charge is exact).
pub(crate) const MESSAGE_OVERHEAD: usize = 96;

/// A resident basement's bytes beyond its three vectors' capacity: its `Part` and the
/// allocator's header on each vector.
pub(crate) const BASEMENT_OVERHEAD: usize = 160;

/// Encoded bytes of a partition's directory entry in a leaf's or a run's head (offset, length,
/// xxh3, count), of a child's in an internal node's head (its id too), and the least a run's
/// entry takes (id, bytes, messages, filter length, empty filter): what the bytes left of a
/// head must hold for each entry a count promises.
const PART_LEN: usize = 20;
const CHILD_LEN: usize = 8 + PART_LEN;
const RUN_REF_LEN: usize = 20;

/// Where a partition lies in the node's current extent.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Loc {
    pub off: u32,
    pub len: u32,
    pub sum: u64,
}

/// A resident raw segment's bytes beyond its encoding and index (its boxes and the allocator's
/// headers).
pub(crate) const RAW_OVERHEAD: usize = 32;

/// A partition: resident (`data`) or only on disk (`loc`), or both when clean and loaded.
#[derive(Clone, Debug, PartialEq)]
pub struct Part<T> {
    pub data: Option<T>,
    /// A clean segment's bytes as at `loc`, checked against its checksum but not decoded: what
    /// a point query reads, so that answering it allocates nothing per message. Only while
    /// `data` is None; always None for basements (flat already).
    pub raw: Option<RawSegment>,
    pub count: u32,
    /// Encoded size; kept current while resident.
    pub bytes: usize,
    pub loc: Option<Loc>,
}

impl<T> Part<T> {
    pub fn new(data: T, count: u32, bytes: usize) -> Part<T> {
        Part {
            data: Some(data),
            raw: None,
            count,
            bytes,
            loc: None,
        }
    }
    pub fn get(&self) -> &T {
        self.data.as_ref().expect("partition is loaded")
    }
    pub fn get_mut(&mut self) -> &mut T {
        self.data.as_mut().expect("partition is loaded")
    }
}

/// A run spilled from a segment toward a leaf child that was not in the cache: a block of its
/// own (`Block::Run`), written once and never changed, listed in the parent's head with a filter
/// over its keys. Its messages are older than the segment's for their keys and newer than the
/// leaf's entries.
#[derive(Clone, Debug)]
pub struct RunRef {
    pub id: NodeId,
    pub bytes: u32,
    pub count: u32,
    pub filter: Filter,
    /// The run's head (its chunks' pivots and places, no chunk loaded), kept here in memory
    /// once read, so that a point query reads the one chunk it needs and never the run's head
    /// again, whatever the pool has shed. Not written: the run holds its own head on disk.
    pub dir: OnceLock<RunDir>,
}

/// A run's head kept in its parent (`RunRef::dir`), with the memory it takes. That is measured
/// once, when it is kept (a run never changes): the parent's charge sums it over all its runs at
/// every change, and measuring each head there (its pivots are allocations of their own) was a
/// quarter of the writer's time routing a flush into a level-1 node.
#[derive(Clone, Debug)]
pub struct RunDir {
    pub run: Arc<Run>,
    charge: usize,
}

impl RunDir {
    pub fn new(run: Arc<Run>) -> RunDir {
        let charge = DIR_OVERHEAD + run.head_len();
        RunDir { run, charge }
    }
}

/// Equal as written (`dir` is a cache).
impl PartialEq for RunRef {
    fn eq(&self, o: &RunRef) -> bool {
        (self.id, self.bytes, self.count, &self.filter) == (o.id, o.bytes, o.count, &o.filter)
    }
}

impl RunRef {
    pub fn new(id: NodeId, bytes: u32, count: u32, filter: Filter) -> RunRef {
        RunRef {
            id,
            bytes,
            count,
            filter,
            dir: OnceLock::new(),
        }
    }
    fn head_len(&self) -> usize {
        RUN_REF_LEN + self.filter.bytes().len()
    }
    /// Memory `dir` holds, for the parent's charge.
    pub fn dir_charge(&self) -> usize {
        self.dir.get().map_or(0, |d| d.charge)
    }
}

/// A kept run head's memory beyond its encoding: its `Arc`, vectors and their headers.
pub(crate) const DIR_OVERHEAD: usize = 96;

#[derive(Clone, Debug, PartialEq)]
pub struct Internal {
    pub pivots: Keys,
    pub children: Vec<NodeId>,
    pub segs: Vec<Part<Segment>>,
    /// Per child, its spilled runs, oldest first (empty unless the child is a leaf).
    pub runs: Vec<Vec<RunRef>>,
    /// How the segments on disk (at their `loc`, and held `raw`) are encoded: fixed for a node
    /// read from an older kind until it is written again.
    pub enc: Encoding,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Leaf {
    pub pivots: Keys,
    pub bases: Vec<Part<Basement>>,
    /// As `Internal::enc`, for the basements on disk (in memory they are always compact).
    pub enc: Encoding,
}

/// What the Bε-tree keeps in the buffer pool, one per block of the data file: a tree node
/// (internal or leaf), or a run spilled beside a leaf, which is not a node of the tree (no
/// pivot of a parent leads to it; its parent's head lists it with the child it belongs to).
#[derive(Clone, Debug, PartialEq)]
pub enum Block {
    Internal(Internal),
    Leaf(Leaf),
    /// A spilled run.
    Run(Run),
}

/// A spilled run: its messages cut by key into chunks of about a basement's size, so that a
/// point query that must look into it reads one chunk (`RunRef` has the rest).
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    pub pivots: Keys,
    pub chunks: Vec<Part<Segment>>,
    /// As `Internal::enc`.
    pub enc: Encoding,
}

impl Run {
    pub fn new(seg: Segment, chunk: usize) -> Run {
        let mut run = Run {
            pivots: Keys::default(),
            chunks: Vec::new(),
            enc: Encoding::Compact,
        };
        for (first, piece) in seg.cut(chunk) {
            if let Some(k) = first {
                run.pivots.push(k);
            }
            let (count, bytes) = (piece.len() as u32, piece.bytes());
            run.chunks.push(Part::new(piece, count, bytes));
        }
        run
    }
    pub fn chunk_for(&self, key: &[u8]) -> usize {
        self.pivots.rank(key, true)
    }
    /// The run as its head describes it: every chunk on disk, none loaded (what `load_head`
    /// reads). Only for a run that has been written.
    pub fn head_only(&self) -> Run {
        Run {
            pivots: self.pivots.clone(),
            chunks: self
                .chunks
                .iter()
                .map(|c| Part {
                    data: None,
                    raw: None,
                    count: c.count,
                    bytes: c.bytes,
                    loc: c.loc,
                })
                .collect(),
            enc: self.enc,
        }
    }
    pub(crate) fn head_len(&self) -> usize {
        4 + PART_LEN * self.chunks.len() + pivots_len(&self.pivots)
    }

    /// At most the bytes beside its messages that a run of `payload` bytes in chunks of
    /// `chunk` takes in its block, for keys of up to `key` bytes: the block header, the head's
    /// count, and per chunk a directory entry and (after the first) a pivot. Chunks close once
    /// they reach `chunk` bytes (`Segment::cut`), so there are at most payload/chunk + 1.
    pub fn overhead(payload: usize, chunk: usize, key: usize) -> usize {
        let chunks = payload / chunk.max(1) + 1;
        BLOCK_HEADER + 4 + chunks * PART_LEN + (chunks - 1) * (2 + key)
    }
}

fn pivots_len(p: &Keys) -> usize {
    p.iter().map(|k| 2 + k.len()).sum()
}

impl Internal {
    pub fn child_for(&self, key: &[u8]) -> usize {
        self.pivots.rank(key, true)
    }
    pub fn child_below(&self, key: &[u8]) -> usize {
        self.pivots.rank(key, false)
    }
    pub fn head_len(&self) -> usize {
        4 + CHILD_LEN * self.children.len() + pivots_len(&self.pivots) + self.runs_len()
    }
    fn has_runs(&self) -> bool {
        self.runs.iter().any(|r| !r.is_empty())
    }
    /// The head's run section: absent when no child has runs.
    fn runs_len(&self) -> usize {
        if !self.has_runs() {
            return 0;
        }
        let refs: usize = self.runs.iter().flatten().map(RunRef::head_len).sum();
        2 * self.runs.len() + refs
    }
    /// Bytes of the whole node as written.
    pub fn size(&self) -> usize {
        BLOCK_HEADER + self.head_len() + self.segs.iter().map(|s| s.bytes).sum::<usize>()
    }
    /// Keep a resident segment's size and count current after changing it.
    pub fn refresh(&mut self, i: usize) {
        let s = &mut self.segs[i];
        let seg = s.data.as_ref().expect("partition is loaded");
        s.bytes = seg.bytes();
        s.count = seg.len() as u32;
    }
    /// The key range [lo, hi) of child i within this node's own range.
    pub fn bounds(&self, i: usize) -> (Option<&[u8]>, Option<&[u8]>) {
        let lo = (i > 0).then(|| self.pivots.get(i - 1));
        let hi = (i < self.pivots.len()).then(|| self.pivots.get(i));
        (lo, hi)
    }
}

impl Leaf {
    pub fn basement_for(&self, key: &[u8]) -> usize {
        self.pivots.rank(key, true)
    }
    pub fn head_len(&self) -> usize {
        4 + PART_LEN * self.bases.len() + pivots_len(&self.pivots)
    }
    pub fn size(&self) -> usize {
        BLOCK_HEADER + self.head_len() + self.bases.iter().map(|b| b.bytes).sum::<usize>()
    }
    pub fn entries(&self) -> u64 {
        self.bases.iter().map(|b| b.count as u64).sum()
    }
}

impl Block {
    pub fn is_leaf(&self) -> bool {
        matches!(self, Block::Leaf(_))
    }

    /// Whether partition i is resident.
    pub fn loaded(&self, i: usize) -> bool {
        match self {
            Block::Internal(n) => n.segs[i].data.is_some(),
            Block::Leaf(l) => l.bases[i].data.is_some(),
            Block::Run(r) => r.chunks[i].data.is_some(),
        }
    }

    /// Whether partition i is in memory, decoded or raw (reading it needs no IO).
    pub fn present(&self, i: usize) -> bool {
        self.loaded(i) || self.raw(i).is_some()
    }

    /// How this node's partitions on disk (and segments held raw) are encoded.
    pub fn enc(&self) -> Encoding {
        match self {
            Block::Internal(n) => n.enc,
            Block::Run(r) => r.enc,
            Block::Leaf(l) => l.enc,
        }
    }

    /// Partition i's raw bytes, if it is held raw (segments only).
    fn raw(&self, i: usize) -> Option<&[u8]> {
        match self {
            Block::Internal(Internal { segs, .. }) | Block::Run(Run { chunks: segs, .. }) => {
                segs[i].raw.as_ref().map(RawSegment::bytes)
            }
            Block::Leaf(_) => None,
        }
    }

    /// Keep partition i's checked bytes: raw for a segment, decoded for a basement.
    pub fn install_raw(&mut self, i: usize, bytes: &[u8]) -> std::result::Result<(), String> {
        let enc = self.enc();
        match self {
            Block::Internal(Internal { segs, .. }) | Block::Run(Run { chunks: segs, .. }) => {
                segs[i].raw = Some(RawSegment::new(bytes, enc)?);
                Ok(())
            }
            Block::Leaf(_) => self.install(i, bytes),
        }
    }

    /// Decode partition i if it is held raw; whether it was.
    pub fn decode_raw(&mut self, i: usize) -> std::result::Result<bool, String> {
        let raw = match self {
            Block::Internal(Internal { segs, .. }) | Block::Run(Run { chunks: segs, .. }) => {
                segs[i].raw.take()
            }
            Block::Leaf(_) => None,
        };
        match raw {
            Some(raw) => self.install(i, raw.bytes()).map(|()| true),
            None => Ok(false),
        }
    }

    /// What partition i adds to the node's cache charge (`StoredNode::charge`): so that loading
    /// one partition of a wide node re-charges it without measuring every other one.
    pub fn part_charge(&self, i: usize) -> usize {
        let segment = |s: &Part<Segment>| match (&s.data, &s.raw) {
            (Some(_), _) => s.bytes + s.count as usize * MESSAGE_OVERHEAD,
            (None, Some(raw)) => raw.heap_bytes() + RAW_OVERHEAD,
            (None, None) => 0,
        };
        match self {
            Block::Internal(n) => segment(&n.segs[i]),
            Block::Run(r) => segment(&r.chunks[i]),
            Block::Leaf(l) => l.bases[i]
                .data
                .as_ref()
                .map_or(0, |b| BASEMENT_OVERHEAD + b.heap_bytes()),
        }
    }

    pub fn parts(&self) -> usize {
        match self {
            Block::Internal(n) => n.segs.len(),
            Block::Leaf(l) => l.bases.len(),
            Block::Run(r) => r.chunks.len(),
        }
    }

    pub fn loc(&self, i: usize) -> Option<Loc> {
        match self {
            Block::Internal(n) => n.segs[i].loc,
            Block::Leaf(l) => l.bases[i].loc,
            Block::Run(r) => r.chunks[i].loc,
        }
    }

    /// Decode partition i's bytes (already checked against its checksum) and make it resident.
    pub fn install(&mut self, i: usize, bytes: &[u8]) -> std::result::Result<(), String> {
        let enc = self.enc();
        match self {
            Block::Internal(Internal { segs, .. }) | Block::Run(Run { chunks: segs, .. }) => {
                let seg = Segment::decode(bytes, enc)?;
                if seg.len() as u32 != segs[i].count {
                    return Err(format!(
                        "segment {i} holds {} messages, head says {}",
                        seg.len(),
                        segs[i].count
                    ));
                }
                segs[i].data = Some(seg);
                segs[i].raw = None;
            }
            Block::Leaf(l) => {
                let b = Basement::decode(bytes, enc)?;
                if b.len() as u32 != l.bases[i].count {
                    return Err(format!(
                        "basement {i} holds {} entries, head says {}",
                        b.len(),
                        l.bases[i].count
                    ));
                }
                l.bases[i].data = Some(b);
            }
        }
        Ok(())
    }

    pub(crate) fn encode_head(&self, out: &mut Vec<u8>) -> u8 {
        match self {
            Block::Internal(n) => {
                out.extend_from_slice(&(n.children.len() as u32).to_le_bytes());
                for (c, s) in n.children.iter().zip(&n.segs) {
                    let loc = s.loc.expect("located before encoding");
                    out.extend_from_slice(&c.to_le_bytes());
                    out.extend_from_slice(&loc.off.to_le_bytes());
                    out.extend_from_slice(&loc.len.to_le_bytes());
                    out.extend_from_slice(&loc.sum.to_le_bytes());
                    out.extend_from_slice(&s.count.to_le_bytes());
                }
                encode_pivots(&n.pivots, out);
                if n.has_runs() {
                    for runs in &n.runs {
                        out.extend_from_slice(&(runs.len() as u16).to_le_bytes());
                        for r in runs {
                            out.extend_from_slice(&r.id.to_le_bytes());
                            out.extend_from_slice(&r.bytes.to_le_bytes());
                            out.extend_from_slice(&r.count.to_le_bytes());
                            let f = r.filter.bytes();
                            out.extend_from_slice(&(f.len() as u32).to_le_bytes());
                            out.extend_from_slice(f);
                        }
                    }
                }
                KIND_INTERNAL_SHAPED
            }
            Block::Leaf(l) => {
                encode_parts(&l.bases, &l.pivots, out);
                KIND_LEAF_SHAPED
            }
            Block::Run(r) => {
                encode_parts(&r.chunks, &r.pivots, out);
                KIND_RUN_SHAPED
            }
        }
    }

    pub(crate) fn decode_head(k: u8, p: &[u8]) -> std::result::Result<Block, String> {
        let mut r = Reader::new(p);
        let n = r.u32()? as usize;
        let node = match k {
            KIND_INTERNAL | KIND_INTERNAL_COMPACT | KIND_INTERNAL_SHAPED => {
                let cap = r.capacity(n, CHILD_LEN);
                let mut children = Vec::with_capacity(cap);
                let mut segs = Vec::with_capacity(cap);
                for _ in 0..n {
                    children.push(r.u64()?);
                    segs.push(decode_part(&mut r)?);
                }
                let pivots = decode_pivots(&mut r, n.saturating_sub(1))?;
                let mut runs = vec![Vec::new(); n];
                if r.position() < p.len() {
                    for child in &mut runs {
                        let count = r.u16()? as usize;
                        child.reserve_exact(r.capacity(count, RUN_REF_LEN));
                        for _ in 0..count {
                            let (id, bytes, count) = (r.u64()?, r.u32()?, r.u32()?);
                            let len = r.u32()? as usize;
                            let filter = Filter::from_bytes(r.bytes(len)?.to_vec());
                            child.push(RunRef::new(id, bytes, count, filter));
                        }
                    }
                }
                Block::Internal(Internal {
                    pivots,
                    children,
                    segs,
                    runs,
                    enc: segment_encoding(k),
                })
            }
            KIND_LEAF | KIND_LEAF_COMPACT | KIND_LEAF_SHAPED => {
                let bases = decode_parts(&mut r, n)?;
                let pivots = decode_pivots(&mut r, n.saturating_sub(1))?;
                Block::Leaf(Leaf {
                    pivots,
                    bases,
                    enc: segment_encoding(k),
                })
            }
            KIND_RUN | KIND_RUN_COMPACT | KIND_RUN_SHAPED => {
                let chunks = decode_parts(&mut r, n)?;
                let pivots = decode_pivots(&mut r, n.saturating_sub(1))?;
                Block::Run(Run {
                    pivots,
                    chunks,
                    enc: segment_encoding(k),
                })
            }
            k => return Err(format!("block kind {k} is not a Bε-tree node")),
        };
        r.finish()?;
        if n == 0 {
            return Err("node without partitions".into());
        }
        Ok(node)
    }
}

/// A leaf's or a run's head: its partitions' directory, then its pivots.
fn encode_parts<T>(parts: &[Part<T>], pivots: &Keys, out: &mut Vec<u8>) {
    out.extend_from_slice(&(parts.len() as u32).to_le_bytes());
    for p in parts {
        let loc = p.loc.expect("located before encoding");
        out.extend_from_slice(&loc.off.to_le_bytes());
        out.extend_from_slice(&loc.len.to_le_bytes());
        out.extend_from_slice(&loc.sum.to_le_bytes());
        out.extend_from_slice(&p.count.to_le_bytes());
    }
    encode_pivots(pivots, out);
}

/// The directory of a leaf's or a run's `n` partitions, none of them resident yet.
fn decode_parts<T>(r: &mut Reader<'_>, n: usize) -> std::result::Result<Vec<Part<T>>, String> {
    let mut parts = Vec::with_capacity(r.capacity(n, PART_LEN));
    for _ in 0..n {
        parts.push(decode_part(r)?);
    }
    Ok(parts)
}

/// One partition's directory entry (offset, length, xxh3, count), not resident.
fn decode_part<T>(r: &mut Reader<'_>) -> std::result::Result<Part<T>, String> {
    let loc = Loc {
        off: r.u32()?,
        len: r.u32()?,
        sum: r.u64()?,
    };
    let count = r.u32()?;
    Ok(Part {
        data: None,
        raw: None,
        count,
        bytes: loc.len as usize,
        loc: Some(loc),
    })
}

fn encode_pivots(p: &Keys, out: &mut Vec<u8>) {
    for k in p.iter() {
        out.extend_from_slice(&(k.len() as u16).to_le_bytes());
        out.extend_from_slice(k);
    }
}

fn decode_pivots(r: &mut Reader<'_>, n: usize) -> std::result::Result<Keys, String> {
    let mut keys = Keys::with_capacity(r.capacity(n, 2));
    for _ in 0..n {
        let len = r.u16()? as usize;
        let k = r.bytes(len)?.to_vec();
        if keys.last().is_some_and(|l| l >= k.as_slice()) {
            return Err("pivots out of order".into());
        }
        keys.push(k);
    }
    Ok(keys)
}

/// The whole extent of node `id`, in one read.
pub fn read_whole(pager: &Pager, id: NodeId) -> Result<Vec<u8>> {
    let len = pager.extent(id).map_or(0, |e| e.len) as usize;
    pager.read_part(id, 0, len)
}

impl Block {
    /// Make resident every partition not yet resident, from `whole` (the node's extent as
    /// read), checking each against its checksum: decoded if `decode`, else segments raw.
    pub fn install_from(
        &mut self,
        pager: &Pager,
        id: NodeId,
        whole: &[u8],
        decode: bool,
    ) -> Result<()> {
        self.install_all(pager.file_name(), pager.offset_of(id), id, whole, decode)
    }

    /// `install_from` for a node read at `offset` of `file` by whoever holds no pager (a drain's
    /// thread).
    pub fn install_all(
        &mut self,
        file: &str,
        offset: u64,
        id: NodeId,
        whole: &[u8],
        decode: bool,
    ) -> Result<()> {
        for i in 0..self.parts() {
            if self.loaded(i) || (!decode && self.present(i)) {
                continue;
            }
            let loc = self.loc(i).expect("an unloaded partition is on disk");
            let at = offset + loc.off as u64;
            let bad = |what: String| Error::corruption(file, at, format!("node {id}: {what}"));
            let end = loc.off as usize + loc.len as usize;
            let bytes = whole
                .get(loc.off as usize..end)
                .ok_or_else(|| bad(format!("partition {i} lies outside the extent")))?;
            if xxh3_64(bytes) != loc.sum {
                return Err(bad(format!("partition {i} checksum mismatch")));
            }
            let installed = if decode {
                self.install(i, bytes)
            } else {
                self.install_raw(i, bytes)
            };
            installed.map_err(bad)?;
        }
        Ok(())
    }
}

/// Read partition i of node `id` and check it against the directory.
pub fn read_part(pager: &Pager, id: NodeId, i: usize, loc: Loc) -> Result<Vec<u8>> {
    let bytes = pager.read_part(id, loc.off as u64, loc.len as usize)?;
    if xxh3_64(&bytes) != loc.sum {
        return Err(Error::corruption(
            pager.file_name(),
            pager.offset_of(id) + loc.off as u64,
            format!("node {id}: partition {i} checksum mismatch"),
        ));
    }
    Ok(bytes)
}

impl StoredNode for Block {
    fn charge(&self) -> usize {
        let head = match self {
            Block::Internal(n) => {
                n.head_len()
                    + n.runs
                        .iter()
                        .flatten()
                        .map(RunRef::dir_charge)
                        .sum::<usize>()
            }
            Block::Leaf(l) => l.head_len(),
            Block::Run(r) => r.head_len(),
        };
        256 + head
            + (0..self.parts())
                .map(|i| self.part_charge(i))
                .sum::<usize>()
    }

    fn load(pager: &Pager, id: NodeId) -> Result<Block> {
        let at = pager.offset_of(id);
        let bad =
            |what: String| Error::corruption(pager.file_name(), at, format!("node {id}: {what}"));
        if pager.extent(id).is_some_and(|e| e.len <= WHOLE_READ_MAX) {
            let whole = read_whole(pager, id)?;
            let (k, head) = block::open(&whole, id, pager.file_name(), at)?;
            let mut node = Block::decode_head(k, head).map_err(bad)?;
            // Segments stay raw until something must change them: a point query reads them
            // in place.
            node.install_from(pager, id, &whole, false)?;
            return Ok(node);
        }
        Block::load_head(pager, id)
    }

    fn load_head(pager: &Pager, id: NodeId) -> Result<Block> {
        let at = pager.offset_of(id);
        let (k, head) = pager.read_head(id)?;
        Block::decode_head(k, &head)
            .map_err(|what| Error::corruption(pager.file_name(), at, format!("node {id}: {what}")))
    }

    fn seal(&mut self, id: NodeId) -> Sealed {
        let head_len = match self {
            Block::Internal(n) => n.head_len(),
            Block::Leaf(l) => l.head_len(),
            Block::Run(r) => r.head_len(),
        };
        // Partitions are located and summed as they are laid out after the head. Segments are
        // encoded into one buffer; basements are written from their own buffers, uncopied
        // until written (`Basement::shaped`), so a checkpoint's thread writes them.
        let mut at = BLOCK_HEADER + head_len;
        let mut place = |len: usize, sum: u64| {
            let loc = Loc {
                off: at as u32,
                len: len as u32,
                sum,
            };
            at += len;
            loc
        };
        let tail = match self {
            Block::Internal(Internal { segs, enc, .. })
            | Block::Run(Run {
                chunks: segs, enc, ..
            }) => {
                // Written in the shaped encoding, whatever kind it was read from.
                *enc = Encoding::Shaped;
                let mut buf = Vec::with_capacity(segs.iter().map(|s| s.bytes + 1).sum());
                for s in segs {
                    let start = buf.len();
                    s.get().encode_in(Encoding::Shaped, &mut buf);
                    s.loc = Some(place(buf.len() - start, xxh3_64(&buf[start..])));
                }
                vec![Chunk::Owned(buf)]
            }
            Block::Leaf(l) => {
                // Every basement in memory is compact, and a written node is fully loaded.
                l.enc = Encoding::Shaped;
                let mut tail = Vec::with_capacity(2 * l.bases.len());
                for b in &mut l.bases {
                    // A written basement gives back the slack its in-place inserts left.
                    b.get_mut().shrink();
                    let (first, body) = b.get().shaped();
                    let mut sum = Xxh3::new();
                    sum.update(&first);
                    body.digest_into(&mut sum);
                    b.loc = Some(place(first.len() + body.len(), sum.digest()));
                    tail.push(Chunk::Owned(first));
                    tail.push(body);
                }
                tail
            }
        };
        let mut head = Vec::with_capacity(head_len);
        let k = self.encode_head(&mut head);
        debug_assert_eq!(head.len(), head_len);
        Sealed::new(id, k, &head, tail)
    }

    fn shed(&mut self) -> bool {
        // Only partitions that are also on disk can be dropped and read again.
        let mut any = false;
        let mut drop_data = |data_some: bool, loc_some: bool| {
            let drop = data_some && loc_some;
            any |= drop;
            drop
        };
        match self {
            Block::Internal(Internal { segs, .. }) | Block::Run(Run { chunks: segs, .. }) => {
                segs.iter_mut().for_each(|s| {
                    if drop_data(s.data.is_some() || s.raw.is_some(), s.loc.is_some()) {
                        s.data = None;
                        s.raw = None;
                    }
                })
            }
            Block::Leaf(l) => l.bases.iter_mut().for_each(|b| {
                if drop_data(b.data.is_some(), b.loc.is_some()) {
                    b.data = None;
                }
            }),
        }
        any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::msg::{Body, Msg};
    use crate::kv::Val;

    fn seg(keys: &[&str], seq: u64) -> Segment {
        let mut s = Segment::default();
        for (i, k) in keys.iter().enumerate() {
            let m = Msg {
                key: k.as_bytes().to_vec(),
                seq: seq + i as u64,
                body: Body::Put(Val::Inline(vec![i as u8; 4])),
            };
            s.insert(m, None);
        }
        s
    }

    /// A node of the older internal kinds holds fixed-encoding or compact segments: its head
    /// reads as the shaped kind's does, its segments decode in their kind's encoding (fixed
    /// ones not as compact), and it is written back in the shaped kind.
    #[test]
    fn an_internal_node_of_an_older_kind_is_read_and_written_back_shaped() {
        let segs = [seg(&["a", "b", "c"], 1 << 20), seg(&["m", "x"], 7)];
        let mut pivots = Keys::default();
        pivots.push(b"m".to_vec());
        let mut node = Block::Internal(Internal {
            pivots,
            children: vec![5, 6],
            segs: segs
                .iter()
                .map(|s| Part::new(s.clone(), s.len() as u32, s.bytes()))
                .collect(),
            runs: vec![Vec::new(), Vec::new()],
            enc: Encoding::Compact,
        });
        node.seal(9);
        let mut head = Vec::new();
        assert_eq!(node.encode_head(&mut head), KIND_INTERNAL_SHAPED);
        // Under the compact kind, the compact bytes are read.
        let mut compact_node = Block::decode_head(KIND_INTERNAL_COMPACT, &head).unwrap();
        for (i, s) in segs.iter().enumerate() {
            let mut compact = Vec::new();
            s.encode(&mut compact);
            compact_node.install(i, &compact).unwrap();
        }
        assert_eq!(compact_node.enc(), Encoding::Compact);
        // The same head under the older kind: the head's layout did not change.
        let mut old = Block::decode_head(KIND_INTERNAL, &head).unwrap();
        assert_eq!(old.enc(), Encoding::Fixed);
        for (i, s) in segs.iter().enumerate() {
            let (mut fixed, mut compact) = (Vec::new(), Vec::new());
            s.encode_in(Encoding::Fixed, &mut fixed);
            s.encode(&mut compact);
            assert!(
                old.install(i, &compact).is_err(),
                "compact bytes in a fixed node"
            );
            old.install(i, &fixed).unwrap();
            let Block::Internal(n) = &old else {
                unreachable!()
            };
            assert_eq!(n.segs[i].get(), s);
        }
        for n in [&mut old, &mut compact_node] {
            n.seal(9);
            assert_eq!(n.enc(), Encoding::Shaped);
            let mut again = Vec::new();
            assert_eq!(n.encode_head(&mut again), KIND_INTERNAL_SHAPED);
            assert_eq!(again, head);
        }
        assert_eq!(segment_encoding(KIND_RUN), Encoding::Fixed);
        assert_eq!(segment_encoding(KIND_RUN_COMPACT), Encoding::Compact);
        assert_eq!(segment_encoding(KIND_RUN_SHAPED), Encoding::Shaped);
        assert_eq!(segment_encoding(KIND_LEAF_SHAPED), Encoding::Shaped);
    }
}
