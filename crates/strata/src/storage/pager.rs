//! The pager: node ids mapped to extents of the data file through a translation table, and the
//! checkpoint that makes a new version of the file durable.
//!
//! File layout: two superblock slots at offsets 0 and 4096, then extents. A node is written
//! copy-on-write: `write_block` always puts it in a fresh extent and repoints the table, so the
//! extents the last checkpoint references stay intact until the next one commits.
//!
//! Commit protocol (`commit`, or its three steps apart):
//! 1. the caller has written every dirty node to a fresh extent, or placed it there
//!    (`place_sealed`) for step 3 to write;
//! 2. `begin_commit`: write the translation table to a fresh extent and seal the superblock
//!    (sequence number + 1, table location, WAL sequence, engine metadata, checksum);
//! 3. `Commit::make_durable`, which may run on another thread while the caller goes on writing
//!    nodes copy-on-write: write the placed blocks, sync the data file, write the superblock
//!    into the slot the previous commit did not use, and sync again: this is the commit point;
//! 4. `finish_commit`: release the extents the new checkpoint no longer references.
//!
//! Open reads both slots and takes the valid one with the higher sequence number, so a torn
//! superblock write falls back to the previous checkpoint, whose extents are still intact.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

use xxhash_rust::xxh3::{xxh3_64, Xxh3};

use super::alloc::{Allocator, Extent};
use super::block::{self, kind, PAGE};
use super::device::Device;
use crate::error::{Error, Result};

pub type NodeId = u64;

pub const MAGIC: [u8; 8] = *b"STRATAdb";
pub const FORMAT_VERSION: u32 = 1;
pub const SUPERBLOCK_SIZE: u64 = PAGE;
/// Extents start after the two superblock slots.
pub const DATA_START: u64 = 2 * SUPERBLOCK_SIZE;
const SB_FIXED: usize = 64;
pub const MAX_ENGINE_META: usize = SUPERBLOCK_SIZE as usize - SB_FIXED;
/// The largest write `write_sealed_run` makes of adjacent blocks: large enough that the
/// per-IO cost is a small part of it on any device profiled here, small enough to bound the
/// memory a write holds.
pub const MAX_RUN_IO: u64 = 4 << 20;
/// The owner id stamped on translation-table blocks.
const TABLE_OWNER: u64 = u64::MAX;
/// The largest sequence number or node id a superblock may hold.
const MAX_COUNTER: u64 = u64::MAX / 2;

/// What a committed checkpoint recorded besides the table.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Checkpoint {
    /// Commit counter; the slot is `seq % 2`.
    pub seq: u64,
    /// Every logged operation with a sequence number up to this one is in the checkpoint.
    pub wal_seq: u64,
    /// Opaque to the pager: the engine's roots, geometry and counters.
    pub engine_meta: Vec<u8>,
}

/// Part of a block's bytes: owned, or shared with the resident node it was cut from (which
/// copies it before changing it, so the bytes stay as they were sealed).
#[derive(Debug)]
pub enum Chunk {
    Owned(Vec<u8>),
    Shared(Arc<Vec<u8>>),
    /// Shared bytes that are records of `stride` bytes, each written without its first `skip`
    /// bytes (a Bε-tree basement of one shape, written without its entries' lengths). The
    /// copy that takes is made only as the block is written, so that a block sealed from a
    /// resident node holds no copy while it waits for a checkpoint's thread to write it.
    Strided {
        data: Arc<Vec<u8>>,
        stride: usize,
        skip: usize,
    },
}

impl Chunk {
    /// Bytes written.
    pub fn len(&self) -> usize {
        match self {
            Chunk::Owned(v) => v.len(),
            Chunk::Shared(v) => v.len(),
            Chunk::Strided { data, stride, skip } => data.len() / stride * (stride - skip),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes as written: borrowed, or (strided) copied out.
    pub fn bytes(&self) -> Cow<'_, [u8]> {
        match self {
            Chunk::Owned(v) => Cow::Borrowed(v),
            Chunk::Shared(v) => Cow::Borrowed(v),
            Chunk::Strided { data, stride, skip } => {
                let mut out = Vec::with_capacity(self.len());
                for r in data.chunks_exact(*stride) {
                    out.extend_from_slice(&r[*skip..]);
                }
                Cow::Owned(out)
            }
        }
    }

    /// Feed the bytes as written to `h`, without copying them.
    pub fn digest_into(&self, h: &mut Xxh3) {
        match self {
            Chunk::Strided { data, stride, skip } => {
                for r in data.chunks_exact(*stride) {
                    h.update(&r[*skip..]);
                }
            }
            c => h.update(&c.bytes()),
        }
    }
}

/// Write `chunks` at `offset` in one call, copying out only what is strided.
fn write_chunks<'a>(
    dev: &dyn Device,
    chunks: impl Iterator<Item = &'a Chunk>,
    offset: u64,
) -> Result<()> {
    let bytes: Vec<Cow<'_, [u8]>> = chunks.map(Chunk::bytes).collect();
    let parts: Vec<&[u8]> = bytes.iter().map(|b| &**b).collect();
    dev.write_parts_at(&parts, offset)
}

/// Write `blocks` at `exts` (one each, in order, from `Allocator::alloc_run`): one write per
/// run of adjacent extents of at most `MAX_RUN_IO` bytes, `done` told each run's indices once
/// it is written. On an error, the index of the first block not written, with the error.
fn write_adjacent(
    dev: &dyn Device,
    blocks: &[&Sealed],
    exts: &[Extent],
    mut done: impl FnMut(std::ops::Range<usize>),
) -> std::result::Result<(), (usize, Error)> {
    let mut i = 0;
    while i < blocks.len() {
        // The run: blocks i..j, each starting where the one before it ends.
        let mut j = i + 1;
        while j < blocks.len()
            && exts[j].offset == exts[j - 1].end()
            && exts[j].end() - exts[i].offset <= MAX_RUN_IO
        {
            j += 1;
        }
        let chunks = blocks[i..j].iter().flat_map(|s| s.chunks.iter());
        write_chunks(dev, chunks, exts[i].offset).map_err(|e| (i, e))?;
        done(i..j);
        i = j;
    }
    Ok(())
}

/// A node's block, framed (`block::seal_head`, then the tail, then padding), not yet placed.
#[derive(Debug)]
pub struct Sealed {
    chunks: Vec<Chunk>,
    len: u64,
}

impl Sealed {
    /// `head` is covered by the block checksum; `tail` follows it outside (partitions that
    /// carry checksums of their own).
    pub fn new(owner: NodeId, kind: u8, head: &[u8], tail: Vec<Chunk>) -> Sealed {
        let mut chunks = Vec::with_capacity(tail.len() + 2);
        chunks.push(Chunk::Owned(block::seal_head(owner, kind, head)));
        chunks.extend(tail);
        let used: usize = chunks.iter().map(Chunk::len).sum();
        let pad = block::padding(used);
        if pad > 0 {
            chunks.push(Chunk::Owned(vec![0; pad]));
        }
        Sealed {
            chunks,
            len: (used + pad) as u64,
        }
    }

    /// Its bytes on the device, padding included.
    pub fn bytes(&self) -> u64 {
        self.len
    }

    /// Whether some of the bytes are shared with a resident node, so that writing them later
    /// costs no copy.
    pub fn shares(&self) -> bool {
        self.chunks
            .iter()
            .any(|c| matches!(c, Chunk::Shared(_) | Chunk::Strided { .. }))
    }
}

/// A block placed in the file and in the table whose bytes are still to be written.
#[derive(Debug)]
pub struct BlockWrite {
    offset: u64,
    chunks: Vec<Chunk>,
}

impl BlockWrite {
    /// Wait until the device has the block (not durably: see `Device::write_out`).
    fn write_out(&self, dev: &dyn Device) -> Result<()> {
        let len = self.chunks.iter().map(|c| c.len() as u64).sum();
        dev.write_out(self.offset, len)
    }

    /// Write the block; writing it twice writes the same bytes.
    pub fn write_to(&self, dev: &dyn Device) -> Result<()> {
        write_chunks(dev, self.chunks.iter(), self.offset)
    }
}

/// Writes new blocks from a thread other than the pager's owner (an LSM-tree's background
/// merges): each takes a fresh id and a fresh extent from the pager's shared allocator, and is
/// written at once. Nothing references the block until the owner enters it in the table
/// (`Pager::adopt_written`); one never adopted is garbage that the next open reclaims, or is
/// given back with `discard`. The copy-on-write rule holds as for any fresh extent: the
/// allocator never hands out space a durable checkpoint references.
#[derive(Clone, Debug)]
pub struct BlockSink {
    dev: Arc<dyn Device>,
    alloc: Arc<Mutex<Allocator>>,
    next_id: Arc<AtomicU64>,
}

impl BlockSink {
    pub fn new_id(&self) -> NodeId {
        self.next_id.fetch_add(1, Relaxed)
    }

    pub fn device(&self) -> &Arc<dyn Device> {
        &self.dev
    }

    /// Write `sealed` to a fresh extent; on an error the extent is given back.
    pub fn write(&self, sealed: Sealed) -> Result<Extent> {
        let ext = self.lock().alloc(sealed.len);
        let w = BlockWrite {
            offset: ext.offset,
            chunks: sealed.chunks,
        };
        if let Err(e) = w.write_to(&*self.dev) {
            self.discard(ext);
            return Err(e);
        }
        Ok(ext)
    }

    /// Write `blocks` to fresh extents, adjacent where a hole takes them together
    /// (`Allocator::alloc_run_within`, holes filled before the file grows: these are many
    /// small blocks, a flush's or a merge's arrays, not a pool's write-back), one write per
    /// run of them (`write_adjacent`). Their extents, in order; on an error all are given back.
    pub fn write_run(&self, blocks: Vec<Sealed>) -> Result<Vec<Extent>> {
        let lens: Vec<u64> = blocks.iter().map(|s| s.len).collect();
        let exts = self.lock().alloc_run_within(&lens, 0.0);
        let sealed: Vec<&Sealed> = blocks.iter().collect();
        if let Err((_, e)) = write_adjacent(&*self.dev, &sealed, &exts, |_| {}) {
            let mut a = self.lock();
            for &ext in &exts {
                a.free(ext);
            }
            return Err(e);
        }
        Ok(exts)
    }

    /// Give back an extent written but never adopted.
    pub fn discard(&self, ext: Extent) {
        self.lock().free(ext);
    }

    fn lock(&self) -> MutexGuard<'_, Allocator> {
        self.alloc.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A checkpoint whose table is written and whose superblock is sealed, not yet durable.
#[derive(Debug)]
pub struct Commit {
    dev: Arc<dyn Device>,
    /// Node blocks placed in the table but not yet written.
    writes: Vec<Arc<BlockWrite>>,
    superblock: Vec<u8>,
    checkpoint: Checkpoint,
    table: Extent,
}

impl Commit {
    /// Step 3 of the protocol, safe on any thread: the blocks still to be written (each let go
    /// once written), a sync, then the superblock. A block whose write failed is kept, with
    /// those after it: its node is read back from there, so eviction must still find it
    /// (`NodeStore::write_placed`) for as long as this commit lives.
    pub fn make_durable(&mut self) -> Result<()> {
        let mut writes = std::mem::take(&mut self.writes).into_iter();
        while let Some(w) = writes.next() {
            if let Err(e) = w.write_to(&*self.dev).and_then(|_| w.write_out(&*self.dev)) {
                self.writes = std::iter::once(w).chain(writes).collect();
                return Err(e);
            }
        }
        self.dev.sync()?;
        let slot = self.checkpoint.seq % 2;
        self.dev
            .write_at(&self.superblock, slot * SUPERBLOCK_SIZE)?;
        self.dev.sync()
    }

    /// The log sequence number the checkpoint covers.
    pub fn wal_seq(&self) -> u64 {
        self.checkpoint.wal_seq
    }
}

#[derive(Debug)]
pub struct Pager {
    dev: Arc<dyn Device>,
    table: HashMap<NodeId, Extent>,
    /// Shared with the `BlockSink`s handed to background writers (an LSM-tree's merges), so
    /// that they take fresh extents and ids while the writer goes on.
    alloc: Arc<Mutex<Allocator>>,
    next_id: Arc<AtomicU64>,
    table_extent: Option<Extent>,
    last: Checkpoint,
    /// Where blocks were written since the device was last asked to start writing them out
    /// (`Device::start_write_out`), and how many bytes.
    unstarted: (u64, u64, u64),
    /// Bytes of blocks written between two such requests; 0: never (`set_write_out_every`).
    write_out_every: u64,
}

impl Pager {
    /// A pager for an empty device; nothing is on disk until the first `commit`.
    pub fn create(dev: Arc<dyn Device>) -> Pager {
        Pager {
            dev,
            table: HashMap::new(),
            alloc: Arc::new(Mutex::new(Allocator::new(DATA_START))),
            next_id: Arc::new(AtomicU64::new(1)),
            table_extent: None,
            last: Checkpoint::default(),
            unstarted: (u64::MAX, 0, 0),
            write_out_every: 0,
        }
    }

    /// Whether `dev` holds nothing a database ever committed: empty, or a creation cut short
    /// before its first superblock was durable (both slots blank, and no more data than a new
    /// database's first checkpoint writes, so a real database with damaged superblocks is never
    /// mistaken for one).
    pub fn is_unfinished(dev: &dyn Device) -> Result<bool> {
        let len = dev.len()?;
        if len > DATA_START + 4 * PAGE {
            return Ok(false);
        }
        let head = len.min(DATA_START) as usize;
        let mut buf = vec![0u8; head];
        if head > 0 {
            dev.read_at(&mut buf, 0)?;
        }
        Ok(buf.iter().all(|&b| b == 0))
    }

    /// Open the newest valid checkpoint on `dev`.
    pub fn open(dev: Arc<dyn Device>) -> Result<(Pager, Checkpoint)> {
        let name = dev.name().to_string();
        let len = dev.len()?;
        let mut slots = Vec::new();
        let mut magic_seen = false;
        let mut first_err = None;
        // A slot that failed to decode but is not blank: it may have held the newest checkpoint.
        let mut damaged_slot = None;
        for slot in 0..2u64 {
            let off = slot * SUPERBLOCK_SIZE;
            if off >= len {
                continue;
            }
            let mut buf = vec![0u8; SUPERBLOCK_SIZE.min(len - off) as usize];
            dev.read_at(&mut buf, off)?;
            if buf.len() >= 8 && buf[..8] == MAGIC {
                magic_seen = true;
            }
            match decode_superblock(&buf, &name, off) {
                Ok(sb) => slots.push(sb),
                Err(e) => {
                    if matches!(e, Error::UnsupportedVersion { .. }) {
                        return Err(e);
                    }
                    if buf.iter().any(|&b| b != 0) {
                        damaged_slot = Some(off);
                    }
                    first_err.get_or_insert(e);
                }
            }
        }
        if !magic_seen {
            return Err(Error::NotADatabase {
                path: name,
                why: "no strata superblock at offset 0 or 4096".into(),
            });
        }
        let Some(sb) = slots.into_iter().max_by_key(|s| s.checkpoint.seq) else {
            return Err(
                first_err.unwrap_or_else(|| Error::corruption(&name, 0, "no valid superblock"))
            );
        };
        let table_ext = Extent {
            offset: sb.table_offset,
            len: sb.table_len,
        };
        let table = match (read_table(&*dev, table_ext, len), damaged_slot) {
            (Ok(t), _) => t,
            // The damaged slot may have held the newest checkpoint, whose commit released this
            // older one's extents (and trimmed the file): report the damage that caused the
            // fall-back, not the table it left unreachable.
            (Err(e), Some(off)) if e.is_corruption() => {
                return Err(Error::corruption(
                    &name,
                    off,
                    format!(
                        "superblock damaged, and the other slot's checkpoint {} is unreadable: {e}",
                        sb.checkpoint.seq
                    ),
                ))
            }
            (Err(e), _) => return Err(e),
        };
        let alloc = Allocator::from_used(
            DATA_START,
            table.values().copied().chain(std::iter::once(table_ext)),
        );
        let pager = Pager {
            dev,
            table,
            alloc: Arc::new(Mutex::new(alloc)),
            next_id: Arc::new(AtomicU64::new(sb.next_id)),
            table_extent: Some(table_ext),
            last: sb.checkpoint.clone(),
            unstarted: (u64::MAX, 0, 0),
            write_out_every: 0,
        };
        Ok((pager, sb.checkpoint))
    }

    pub fn device(&self) -> &Arc<dyn Device> {
        &self.dev
    }

    pub fn file_name(&self) -> &str {
        self.dev.name()
    }

    pub fn last_checkpoint(&self) -> &Checkpoint {
        &self.last
    }

    pub fn new_id(&mut self) -> NodeId {
        self.next_id.fetch_add(1, Relaxed)
    }

    fn alloc(&self) -> MutexGuard<'_, Allocator> {
        // The allocator's state is consistent between its calls: a panic elsewhere while the
        // lock was held leaves nothing half done.
        self.alloc.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A handle that writes new blocks from another thread (`BlockSink`).
    pub fn block_sink(&self) -> BlockSink {
        BlockSink {
            dev: self.dev.clone(),
            alloc: self.alloc.clone(),
            next_id: self.next_id.clone(),
        }
    }

    /// Enter node `id`, already written at `ext` by a `BlockSink`, in the table.
    pub fn adopt_written(&mut self, id: NodeId, ext: Extent) {
        self.repoint(id, ext);
    }

    pub fn extent(&self, id: NodeId) -> Option<Extent> {
        self.table.get(&id).copied()
    }

    fn extent_or_corrupt(&self, id: NodeId) -> Result<Extent> {
        self.extent(id).ok_or_else(|| {
            let at = self.table_extent.map_or(0, |e| e.offset);
            Error::corruption(
                self.file_name(),
                at,
                format!("node {id} is not in the translation table"),
            )
        })
    }

    /// Read and check node `id`'s whole block: its kind and payload.
    pub fn read_block(&self, id: NodeId) -> Result<(u8, Vec<u8>)> {
        let ext = self.extent_or_corrupt(id)?;
        let mut buf = vec![0u8; ext.len as usize];
        self.dev.read_at(&mut buf, ext.offset)?;
        let (k, payload) = block::open(&buf, id, self.file_name(), ext.offset)?;
        let len = payload.len();
        buf.drain(..block::BLOCK_HEADER);
        buf.truncate(len);
        Ok((k, buf))
    }

    /// Read node `id`'s block, require `kind`, and decode its payload with `decode`; any failure
    /// is corruption at the block's extent, named `what` ("LSM manifest").
    pub fn read_decoded<T>(
        &self,
        id: NodeId,
        kind: u8,
        what: &str,
        decode: impl FnOnce(&[u8]) -> std::result::Result<T, String>,
    ) -> Result<T> {
        let (k, payload) = self.read_block(id)?;
        let bad = |why: String| {
            Error::corruption(
                self.file_name(),
                self.offset_of(id),
                format!("{what}: {why}"),
            )
        };
        if k != kind {
            return Err(bad(format!("block kind {k}, not kind {kind}")));
        }
        decode(&payload).map_err(bad)
    }

    /// Read just the checksummed head of node `id`'s block (its kind and payload), not what
    /// follows it: one read of the first page, and a second only if the head is longer.
    pub fn read_head(&self, id: NodeId) -> Result<(u8, Vec<u8>)> {
        let ext = self.extent_or_corrupt(id)?;
        let first = ext.len.min(PAGE) as usize;
        let mut buf = vec![0u8; first];
        self.dev.read_at(&mut buf, ext.offset)?;
        // An extent too short for a header (a damaged table) is left to `open` to report.
        let want = if buf.len() >= block::BLOCK_HEADER {
            block::BLOCK_HEADER + block::declared_len(&buf)
        } else {
            0
        };
        if want > first && want as u64 <= ext.len {
            buf.resize(want, 0);
            self.dev
                .read_at(&mut buf[first..], ext.offset + first as u64)?;
        }
        let (k, payload) = block::open(&buf, id, self.file_name(), ext.offset)?;
        Ok((k, payload.to_vec()))
    }

    /// The byte offset in the file of node `id`'s extent (for error messages).
    pub fn offset_of(&self, id: NodeId) -> u64 {
        self.extent(id).map_or(0, |e| e.offset)
    }

    /// Read `len` raw bytes at `offset` within node `id`'s extent, for engines that load one
    /// partition of a node at a time and checksum partitions themselves.
    pub fn read_part(&self, id: NodeId, offset: u64, len: usize) -> Result<Vec<u8>> {
        let at = self.part_at(id, offset, len)?;
        let mut buf = vec![0u8; len];
        self.dev.read_at(&mut buf, at)?;
        Ok(buf)
    }

    /// Where in the file `len` bytes at `offset` within node `id`'s extent lie; corruption if
    /// they run past it.
    fn part_at(&self, id: NodeId, offset: u64, len: usize) -> Result<u64> {
        let ext = self.extent_or_corrupt(id)?;
        if offset + len as u64 > ext.len {
            return Err(Error::corruption(
                self.file_name(),
                ext.offset,
                format!("read of {len} bytes at {offset} runs past node {id}'s extent"),
            ));
        }
        Ok(ext.offset + offset)
    }

    /// `read_part` for several (node, offset, len) at once, the reads outstanding together
    /// (`Device::read_many`).
    pub fn read_parts(&self, reqs: &[(NodeId, u64, usize)]) -> Result<Vec<Vec<u8>>> {
        let mut at = Vec::with_capacity(reqs.len());
        for &(id, offset, len) in reqs {
            at.push(self.part_at(id, offset, len)?);
        }
        let mut bufs: Vec<Vec<u8>> = reqs.iter().map(|&(_, _, len)| vec![0u8; len]).collect();
        let mut batch: Vec<(u64, &mut [u8])> = at
            .into_iter()
            .zip(bufs.iter_mut())
            .map(|(o, b)| (o, b.as_mut_slice()))
            .collect();
        self.dev.read_many(&mut batch)?;
        Ok(bufs)
    }

    /// Write node `id` copy-on-write: a fresh extent, then repoint the table.
    pub fn write_block(&mut self, id: NodeId, kind: u8, payload: &[u8]) -> Result<()> {
        self.write_sealed(id, Sealed::new(id, kind, payload, Vec::new()))
    }

    /// Write a sealed block for node `id` now, copy-on-write.
    pub fn write_sealed(&mut self, id: NodeId, sealed: Sealed) -> Result<()> {
        let ext = self.alloc().alloc(sealed.len);
        let w = BlockWrite {
            offset: ext.offset,
            chunks: sealed.chunks,
        };
        if let Err(e) = w.write_to(&*self.dev) {
            self.alloc().free(ext);
            return Err(e);
        }
        self.repoint(id, ext);
        self.written(ext);
        Ok(())
    }

    /// Ask the device to start writing out the blocks written (`write_sealed`,
    /// `write_sealed_run`) every `bytes` of them, so that the page cache holds no more than
    /// that of them until a checkpoint's sync. For an engine whose written blocks live long
    /// (the Bε-tree's runs and leaves): one that frees and rewrites its blocks soon (the
    /// B+-tree's leaves, evicted one per insert) would lose what the page cache merges of
    /// writes to reused extents (the B+-tree loaded 200K keys into 8 MiB at 0.55× its rate
    /// with this on). 0 (the default) never asks.
    pub fn set_write_out_every(&mut self, bytes: u64) {
        self.write_out_every = bytes;
    }

    /// Blocks were written at `ext`: every `write_out_every` bytes, ask the device to start
    /// writing out the span written since the last time.
    fn written(&mut self, ext: Extent) {
        if self.write_out_every == 0 {
            return;
        }
        let (lo, hi, bytes) = &mut self.unstarted;
        *lo = (*lo).min(ext.offset);
        *hi = (*hi).max(ext.end());
        *bytes += ext.len;
        if *bytes >= self.write_out_every {
            self.dev.start_write_out(*lo, *hi - *lo);
            self.unstarted = (u64::MAX, 0, 0);
        }
    }

    /// Write several sealed blocks now, copy-on-write, in the order given: fresh extents from
    /// `Allocator::alloc_run`, adjacent where the free space allows, and one write per run of
    /// adjacent extents, at most `MAX_RUN_IO` bytes each. The table is repointed only for the
    /// blocks written; on an error the others keep their old extents (their nodes stay dirty
    /// in the caller). Returns the writes made.
    pub fn write_sealed_run(&mut self, blocks: Vec<(NodeId, Sealed)>) -> Result<usize> {
        let lens: Vec<u64> = blocks.iter().map(|(_, s)| s.len).collect();
        let exts = self.alloc().alloc_run(&lens);
        let sealed: Vec<&Sealed> = blocks.iter().map(|(_, s)| s).collect();
        let dev = self.dev.clone();
        let mut ios = 0;
        let wrote = write_adjacent(&*dev, &sealed, &exts, |run| {
            ios += 1;
            for ((id, _), &ext) in blocks[run.clone()].iter().zip(&exts[run]) {
                self.repoint(*id, ext);
                self.written(ext);
            }
        });
        if let Err((first, e)) = wrote {
            let mut a = self.alloc();
            for &ext in &exts[first..] {
                a.free(ext);
            }
            return Err(e);
        }
        Ok(ios)
    }

    /// Give node `id` a fresh extent for `sealed` and repoint the table at it, leaving the
    /// write to the caller: the block must be written before anything reads it there, and
    /// before the next sync that a checkpoint relies on.
    pub fn place_sealed(&mut self, id: NodeId, sealed: Sealed) -> BlockWrite {
        let ext = self.alloc().alloc(sealed.len);
        self.repoint(id, ext);
        BlockWrite {
            offset: ext.offset,
            chunks: sealed.chunks,
        }
    }

    fn repoint(&mut self, id: NodeId, ext: Extent) {
        if let Some(old) = self.table.insert(id, ext) {
            self.alloc().free(old);
        }
    }

    /// Move blocks from the end of the file into free space below them, highest first, until
    /// one does not fit: copy the bytes, repoint the table (copy-on-write: the old extents stay
    /// intact until the next checkpoint is durable). Blocks carry no offsets (a partition's is
    /// relative to its extent), so a block reads the same wherever it lies. The next commit
    /// makes the move durable and gives back the tail (`finish_commit`). Returns the bytes
    /// moved, read once and written once each.
    pub fn relocate_tail(&mut self) -> Result<u64> {
        let mut by_end: Vec<(NodeId, Extent)> = self.table.iter().map(|(&i, &e)| (i, e)).collect();
        by_end.sort_by_key(|(_, e)| std::cmp::Reverse(e.offset));
        let mut moved = 0;
        for (id, ext) in by_end {
            let Some(to) = self.alloc().alloc_below(ext.len, ext.offset) else {
                break;
            };
            let mut buf = vec![0u8; ext.len as usize];
            let copied = self
                .dev
                .read_at(&mut buf, ext.offset)
                .and_then(|()| self.dev.write_at(&buf, to.offset));
            if let Err(e) = copied {
                self.alloc().free(to);
                return Err(e);
            }
            self.repoint(id, to);
            moved += ext.len;
        }
        Ok(moved)
    }

    /// Give the space of every free extent back to the file system as a hole: the closed file
    /// then takes only what its live blocks take. Safe for the free map's extents, which no
    /// durable checkpoint references; the allocator's lock is held throughout, so none is
    /// handed out meanwhile. Returns the bytes given back.
    pub fn release_free(&mut self) -> Result<u64> {
        let a = self.alloc();
        let mut released = 0;
        for e in a.free_extents() {
            self.dev.discard(e.offset, e.len)?;
            released += e.len;
        }
        Ok(released)
    }

    /// Forget node `id`; its extent is reused once no durable checkpoint references it.
    pub fn free(&mut self, id: NodeId) {
        if let Some(ext) = self.table.remove(&id) {
            self.alloc().free(ext);
        }
    }

    /// Make the current table durable as a new checkpoint (steps 2–4 of the protocol).
    pub fn commit(&mut self, wal_seq: u64, engine_meta: Vec<u8>) -> Result<()> {
        let mut c = self.begin_commit(wal_seq, engine_meta, Vec::new())?;
        c.make_durable()?;
        self.finish_commit(c)
    }

    /// Step 2: write the current table and seal the superblock that will point to it. Until
    /// `finish_commit`, the extents the last durable checkpoint references stay untouched and so
    /// do those of this one, whatever the caller writes or frees meanwhile. `writes` are blocks
    /// already placed in the table (`place_sealed`) that `make_durable` writes first.
    pub fn begin_commit(
        &mut self,
        wal_seq: u64,
        engine_meta: Vec<u8>,
        writes: Vec<Arc<BlockWrite>>,
    ) -> Result<Commit> {
        if engine_meta.len() > MAX_ENGINE_META {
            return Err(Error::InvalidOptions(format!(
                "engine metadata of {} bytes does not fit in a superblock",
                engine_meta.len()
            )));
        }
        let mut payload = Vec::with_capacity(8 + 24 * self.table.len());
        payload.extend_from_slice(&(self.table.len() as u64).to_le_bytes());
        let mut entries: Vec<_> = self.table.iter().collect();
        entries.sort_unstable();
        for (id, ext) in entries {
            payload.extend_from_slice(&id.to_le_bytes());
            payload.extend_from_slice(&ext.offset.to_le_bytes());
            payload.extend_from_slice(&ext.len.to_le_bytes());
        }
        let sealed = block::seal(TABLE_OWNER, kind::TABLE, &payload);
        // The lowest hole that fits, so that the table never holds up the file's tail.
        let len = sealed.len() as u64;
        let table = {
            let mut a = self.alloc();
            let end = a.end();
            a.alloc_below(len, end).unwrap_or_else(|| a.alloc(len))
        };
        if let Err(e) = self.dev.write_at(&sealed, table.offset) {
            self.alloc().free(table);
            return Err(e);
        }
        let checkpoint = Checkpoint {
            seq: self.last.seq + 1,
            wal_seq,
            engine_meta,
        };
        self.alloc().begin_commit(self.table_extent);
        Ok(Commit {
            dev: self.dev.clone(),
            writes,
            superblock: encode_superblock(&checkpoint, self.next_id.load(Relaxed), table),
            checkpoint,
            table,
        })
    }

    /// Step 4, once `c` is durable: release what the previous checkpoint alone referenced, and
    /// give back the file's free tail.
    pub fn finish_commit(&mut self, c: Commit) -> Result<()> {
        self.table_extent = Some(c.table);
        self.last = c.checkpoint;
        // The lock is held through the truncation: a `BlockSink` that took an extent past the
        // end meanwhile would otherwise lose its write to it.
        let mut a = self.alloc();
        a.commit_done();
        let end = a.end().max(DATA_START);
        if self.dev.len()? > end {
            self.dev.set_len(end)?;
        }
        Ok(())
    }

    pub fn node_count(&self) -> usize {
        self.table.len()
    }

    pub fn ids(&self) -> Vec<NodeId> {
        let mut v: Vec<_> = self.table.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// Bytes in extents the table references.
    pub fn referenced_bytes(&self) -> u64 {
        self.table.values().map(|e| e.len).sum()
    }

    /// Tests: one past the last byte the allocator has handed out or holds free.
    #[cfg(test)]
    pub(crate) fn allocated_end(&self) -> u64 {
        self.alloc().end()
    }

    pub fn free_bytes(&self) -> u64 {
        self.alloc().free_bytes()
    }

    pub fn pending_bytes(&self) -> u64 {
        self.alloc().pending_bytes()
    }

    /// Check that no two referenced extents overlap and all lie inside the file.
    pub fn verify_extents(&self) -> Result<()> {
        let len = self.dev.len()?;
        let mut all: Vec<(Extent, NodeId)> = self.table.iter().map(|(&id, &e)| (e, id)).collect();
        if let Some(t) = self.table_extent {
            all.push((t, TABLE_OWNER));
        }
        all.sort();
        let mut prev_end = DATA_START;
        for (e, id) in all {
            if e.offset < prev_end
                || !e.offset.is_multiple_of(PAGE)
                || e.offset.checked_add(e.len).is_none_or(|end| end > len)
            {
                return Err(Error::corruption(
                    self.file_name(),
                    e.offset,
                    format!(
                        "extent of node {id} ({} bytes) overlaps another or lies outside the file",
                        e.len
                    ),
                ));
            }
            prev_end = e.end();
        }
        Ok(())
    }
}

pub(crate) struct Superblock {
    checkpoint: Checkpoint,
    next_id: u64,
    table_offset: u64,
    table_len: u64,
}

fn encode_superblock(c: &Checkpoint, next_id: u64, table: Extent) -> Vec<u8> {
    let mut b = vec![0u8; SUPERBLOCK_SIZE as usize];
    let body_len = SB_FIXED - 16 + c.engine_meta.len();
    b[..8].copy_from_slice(&MAGIC);
    b[16..20].copy_from_slice(&(body_len as u32).to_le_bytes());
    b[20..24].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    b[24..32].copy_from_slice(&c.seq.to_le_bytes());
    b[32..40].copy_from_slice(&c.wal_seq.to_le_bytes());
    b[40..48].copy_from_slice(&next_id.to_le_bytes());
    b[48..56].copy_from_slice(&table.offset.to_le_bytes());
    b[56..64].copy_from_slice(&table.len.to_le_bytes());
    b[SB_FIXED..SB_FIXED + c.engine_meta.len()].copy_from_slice(&c.engine_meta);
    let sum = xxh3_64(&b[16..16 + body_len]);
    b[8..16].copy_from_slice(&sum.to_le_bytes());
    b
}

pub(crate) fn decode_superblock(b: &[u8], file: &str, off: u64) -> Result<Superblock> {
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
    if b.len() < SB_FIXED || b[..8] != MAGIC {
        return Err(Error::corruption(file, off, "superblock magic missing"));
    }
    let body_len = u32_at(16) as usize;
    if body_len < SB_FIXED - 16 || 16 + body_len > b.len() {
        return Err(Error::corruption(
            file,
            off,
            "superblock length out of range",
        ));
    }
    if xxh3_64(&b[16..16 + body_len]) != u64_at(8) {
        return Err(Error::corruption(file, off, "superblock checksum mismatch"));
    }
    let version = u32_at(20);
    if version > FORMAT_VERSION {
        return Err(Error::UnsupportedVersion {
            file: file.to_string(),
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let (seq, wal_seq, next_id) = (u64_at(24), u64_at(32), u64_at(40));
    // No database counts this far (2^63 checkpoints, batches or nodes), and the pager and the
    // log's replay count on the next number fitting.
    if [seq, wal_seq, next_id].into_iter().any(|c| c > MAX_COUNTER) {
        return Err(Error::corruption(
            file,
            off,
            "superblock counters out of range",
        ));
    }
    Ok(Superblock {
        checkpoint: Checkpoint {
            seq,
            wal_seq,
            engine_meta: b[SB_FIXED..16 + body_len].to_vec(),
        },
        next_id,
        table_offset: u64_at(48),
        table_len: u64_at(56),
    })
}

pub(crate) fn read_table(
    dev: &dyn Device,
    ext: Extent,
    file_len: u64,
) -> Result<HashMap<NodeId, Extent>> {
    let name = dev.name();
    if ext.offset < DATA_START
        || !ext.offset.is_multiple_of(PAGE)
        || ext
            .offset
            .checked_add(ext.len)
            .is_none_or(|end| end > file_len)
    {
        return Err(Error::corruption(
            name,
            ext.offset,
            "translation table lies outside the file",
        ));
    }
    let mut buf = vec![0u8; ext.len as usize];
    dev.read_at(&mut buf, ext.offset)?;
    let (k, payload) = block::open(&buf, TABLE_OWNER, name, ext.offset)?;
    let bad = |what: &str| Error::corruption(name, ext.offset, what.to_string());
    if k != kind::TABLE || payload.len() < 8 {
        return Err(bad("translation table block has the wrong kind or size"));
    }
    let n = u64::from_le_bytes(payload[..8].try_into().unwrap());
    // Compared by division: the count is untrusted, and 8 + 24·n can overflow.
    let entries = payload.len() - 8;
    if entries % 24 != 0 || (entries / 24) as u64 != n {
        return Err(bad(
            "translation table length does not match its entry count",
        ));
    }
    let n = n as usize;
    let mut table = HashMap::with_capacity(n);
    for e in payload[8..].chunks_exact(24) {
        let id = u64::from_le_bytes(e[..8].try_into().unwrap());
        let offset = u64::from_le_bytes(e[8..16].try_into().unwrap());
        let len = u64::from_le_bytes(e[16..24].try_into().unwrap());
        if offset < DATA_START
            || offset % PAGE != 0
            || len == 0
            || offset.checked_add(len).is_none_or(|end| end > file_len)
        {
            return Err(bad(&format!(
                "translation entry for node {id} points outside the file"
            )));
        }
        table.insert(id, Extent { offset, len });
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::sim::{SimDevice, SimDisk};

    fn sim() -> Arc<SimDevice> {
        Arc::new(SimDevice::new(
            "data",
            SimDisk::new(Default::default(), 0.0),
        ))
    }

    /// A device that records the spans it was asked to start writing out.
    #[derive(Debug)]
    struct Starts {
        inner: Arc<SimDevice>,
        spans: Mutex<Vec<(u64, u64)>>,
    }

    impl Device for Starts {
        fn name(&self) -> &str {
            self.inner.name()
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
            self.inner.read_at(buf, offset)
        }
        fn write_at(&self, data: &[u8], offset: u64) -> Result<()> {
            self.inner.write_at(data, offset)
        }
        fn sync(&self) -> Result<()> {
            self.inner.sync()
        }
        fn start_write_out(&self, offset: u64, len: u64) {
            self.spans.lock().unwrap().push((offset, len));
        }
        fn len(&self) -> Result<u64> {
            self.inner.len()
        }
        fn set_len(&self, len: u64) -> Result<()> {
            self.inner.set_len(len)
        }
    }

    /// Blocks written between checkpoints are handed to the device to write out every
    /// `set_write_out_every` bytes, each time the span written since the last: every block
    /// written falls in one span, and no more than a span's worth waits. Off by default.
    #[test]
    fn written_blocks_are_started_out_as_they_accumulate() {
        let dev = Arc::new(Starts {
            inner: sim(),
            spans: Mutex::new(Vec::new()),
        });
        let mut p = Pager::create(dev.clone());
        let block = vec![7u8; 100 << 10];
        let first = p.new_id();
        p.write_block(first, kind::BLOB, &block).unwrap();
        assert!(dev.spans.lock().unwrap().is_empty());
        p.set_write_out_every(1 << 20);
        let mut exts = Vec::new();
        for _ in 0..35 {
            let id = p.new_id();
            p.write_block(id, kind::BLOB, &block).unwrap();
            exts.push(p.extent(id).unwrap());
        }
        let spans = dev.spans.lock().unwrap().clone();
        // 35 blocks of a little over 100 KiB: 3.4 MiB, three spans of 1 MiB or more.
        assert_eq!(spans.len(), 3, "{spans:?}");
        let covered = |e: &Extent| {
            spans
                .iter()
                .any(|&(o, l)| o <= e.offset && e.end() <= o + l)
        };
        let started = exts.iter().filter(|e| covered(e)).count();
        assert!(
            (30..35).contains(&started),
            "{started} of 35 started: {spans:?}"
        );
    }

    #[test]
    fn commit_then_open_sees_the_nodes_and_meta() {
        let dev = sim();
        let mut p = Pager::create(dev.clone());
        let a = p.new_id();
        p.write_block(a, kind::BLOB, b"alpha").unwrap();
        p.commit(7, b"meta".to_vec()).unwrap();
        let (q, c) = Pager::open(dev).unwrap();
        assert_eq!(
            (c.seq, c.wal_seq, c.engine_meta.as_slice()),
            (1, 7, &b"meta"[..])
        );
        assert_eq!(q.read_block(a).unwrap(), (kind::BLOB, b"alpha".to_vec()));
    }

    #[test]
    fn a_run_of_blocks_is_one_write_and_each_reads_back_after_reopen() {
        use crate::storage::{IoStats, Metered};
        let dev = sim();
        let stats = Arc::new(IoStats::new(Default::default(), 4096));
        let metered: Arc<dyn Device> = Arc::new(Metered::new(dev.clone(), stats.clone()));
        let mut p = Pager::create(metered);
        let ids: Vec<NodeId> = (0..5).map(|_| p.new_id()).collect();
        let payload = |i: usize| vec![i as u8; 3000 + 2000 * i];
        let blocks = ids
            .iter()
            .enumerate()
            .map(|(i, &id)| (id, Sealed::new(id, kind::BLOB, &payload(i), Vec::new())))
            .collect();
        let before = stats.snapshot();
        assert_eq!(p.write_sealed_run(blocks).unwrap(), 1);
        let after = stats.snapshot();
        assert_eq!(after.writes - before.writes, 1, "five blocks, one write");
        let exts: Vec<Extent> = ids.iter().map(|&id| p.extent(id).unwrap()).collect();
        for w in exts.windows(2) {
            assert_eq!(w[0].end(), w[1].offset, "adjacent, in the order given");
        }
        assert_eq!(
            after.bytes_written - before.bytes_written,
            exts[4].end() - exts[0].offset
        );
        p.commit(1, Vec::new()).unwrap();
        let (q, _) = Pager::open(dev).unwrap();
        for (i, &id) in ids.iter().enumerate() {
            assert_eq!(q.read_block(id).unwrap(), (kind::BLOB, payload(i)));
        }
        q.verify_extents().unwrap();
    }

    /// A sink's run (an SDA flush's or merge's arrays): its blocks adjacent in one write, each
    /// read back once adopted and committed; after a failed write every extent is given back,
    /// so the next run takes the same place.
    #[test]
    fn a_sinks_run_is_one_write_and_a_failed_one_gives_its_extents_back() {
        use crate::storage::{IoStats, Metered};
        let disk = SimDisk::new(Default::default(), 0.0);
        let dev = Arc::new(SimDevice::new("data", disk.clone()));
        let stats = Arc::new(IoStats::new(Default::default(), 4096));
        let metered: Arc<dyn Device> = Arc::new(Metered::new(dev.clone(), stats.clone()));
        let mut p = Pager::create(metered);
        let sink = p.block_sink();
        let payload = |i: usize| vec![i as u8; 1000 + 3000 * i];
        let run = |ids: &[NodeId]| -> Vec<Sealed> {
            ids.iter()
                .enumerate()
                .map(|(i, &id)| Sealed::new(id, kind::BLOB, &payload(i), Vec::new()))
                .collect()
        };
        let ids: Vec<NodeId> = (0..6).map(|_| sink.new_id()).collect();
        let start = p.alloc().end();
        disk.fail_io_after(0, false);
        assert!(sink.write_run(run(&ids)).is_err());
        disk.clear_faults();
        let before = stats.snapshot();
        let exts = sink.write_run(run(&ids)).unwrap();
        let after = stats.snapshot();
        assert_eq!(after.writes - before.writes, 1, "six blocks, one write");
        assert_eq!(
            exts[0].offset, start,
            "the failed run's extents were given back"
        );
        for w in exts.windows(2) {
            assert_eq!(w[0].end(), w[1].offset, "adjacent, in the order given");
        }
        for (&id, &ext) in ids.iter().zip(&exts) {
            p.adopt_written(id, ext);
        }
        p.commit(1, Vec::new()).unwrap();
        let (q, _) = Pager::open(dev).unwrap();
        for (i, &id) in ids.iter().enumerate() {
            assert_eq!(q.read_block(id).unwrap(), (kind::BLOB, payload(i)));
        }
        q.verify_extents().unwrap();
    }

    /// A strided chunk is written as its records without their first bytes, placed and summed
    /// by that length, and shares its bytes (so a checkpoint's thread writes it); placed now
    /// and written later, or written in a run, the block reads back the same.
    #[test]
    fn a_strided_chunk_is_written_stripped_and_shared_until_then() {
        let data = Arc::new((0u8..60).collect::<Vec<u8>>());
        let strided = || Chunk::Strided {
            data: data.clone(),
            stride: 6,
            skip: 2,
        };
        let want: Vec<u8> = data.chunks(6).flat_map(|r| r[2..].to_vec()).collect();
        assert_eq!((strided().len(), &*strided().bytes()), (40, &want[..]));
        let mut h = Xxh3::new();
        strided().digest_into(&mut h);
        assert_eq!(h.digest(), xxh3_64(&want));
        let dev = sim();
        let mut p = Pager::create(dev.clone());
        let (a, b) = (p.new_id(), p.new_id());
        let sealed = |id| Sealed::new(id, kind::BLOB, b"head", vec![strided()]);
        assert!(sealed(a).shares());
        let later = p.place_sealed(a, sealed(a));
        later.write_to(&*dev).unwrap();
        p.write_sealed_run(vec![(b, sealed(b))]).unwrap();
        for id in [a, b] {
            let ext = p.extent(id).unwrap();
            let whole = p.read_part(id, 0, ext.len as usize).unwrap();
            let at = block::BLOCK_HEADER + 4;
            assert_eq!(&whole[at..at + 40], &want[..]);
        }
    }

    #[test]
    fn torn_superblock_falls_back_to_the_previous_checkpoint() {
        let dev = sim();
        let mut p = Pager::create(dev.clone());
        let a = p.new_id();
        p.write_block(a, kind::BLOB, b"one").unwrap();
        p.commit(1, vec![]).unwrap();
        p.write_block(a, kind::BLOB, b"two").unwrap();
        p.commit(2, vec![]).unwrap();
        // Damage the newest superblock (slot 0, sequence 2).
        dev.corrupt_byte(30, 0xff);
        let (q, c) = Pager::open(dev.clone()).unwrap();
        assert_eq!(c.seq, 1);
        assert_eq!(
            q.read_block(a).unwrap().1,
            b"one".to_vec(),
            "old extents were kept intact"
        );
        dev.corrupt_byte(SUPERBLOCK_SIZE + 30, 0xff);
        assert!(Pager::open(dev).unwrap_err().is_corruption());
    }

    #[test]
    fn garbage_is_not_a_database_and_newer_versions_are_refused() {
        let dev = sim();
        dev.write_at(&[0x5a; 10_000], 0).unwrap();
        assert!(matches!(
            Pager::open(dev.clone()),
            Err(Error::NotADatabase { .. })
        ));
        let mut p = Pager::create(sim());
        p.commit(0, vec![]).unwrap();
        let d2 = p.device().clone();
        let mut sb = vec![0u8; 4096];
        d2.read_at(&mut sb, 4096).unwrap();
        sb[20..24].copy_from_slice(&99u32.to_le_bytes());
        let body = u32::from_le_bytes(sb[16..20].try_into().unwrap()) as usize;
        let sum = xxh3_64(&sb[16..16 + body]);
        sb[8..16].copy_from_slice(&sum.to_le_bytes());
        d2.write_at(&sb, 4096).unwrap();
        assert!(matches!(
            Pager::open(d2),
            Err(Error::UnsupportedVersion { found: 99, .. })
        ));
    }
}
