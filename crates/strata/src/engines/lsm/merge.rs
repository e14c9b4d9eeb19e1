//! A merge's work, apart from the engine, so that it can run on a thread of its own while the
//! writer goes on: read the input tables whole, merge them by key, and write the output tables.
//!
//! It touches nothing the writer uses. Input tables are immutable and stay in the manifest until
//! the writer installs the output (`compact.rs`), so their extents are neither freed nor reused
//! meanwhile; their bytes are read straight from the device at the extents the pager gave when
//! the merge began (one read per table, bypassing the pool, each head and block checked). The
//! output is written through a `BlockSink` (fresh ids and extents from the pager's shared
//! allocator); no manifest names it until it is installed, so a crash or an error leaves only
//! garbage that the next open reclaims (`Output::abandon` gives it back at once on an error).
//!
//! `Output` also writes a flush's tables, on the writer, so both paths cut tables the same way.

use std::collections::VecDeque;

use super::policy::TableInfo;
use super::table::{self, Table};
use super::*;
use crate::kv::merging::{next_group, reduce, Cursor};
use crate::storage::block;
use crate::storage::{BlockSink, Extent};

/// A table written but not yet in the manifest or the pager's table.
pub(super) struct Written {
    pub info: TableInfo,
    pub table: Table,
    pub ext: Extent,
}

/// At the bottom of the data a key keeps at most one message, a put older than anything written
/// later: its sequence number orders it against nothing, so it becomes 0, which takes one byte
/// in a block (RocksDB zeroes its bottommost sequence numbers the same way).
pub(super) fn zero_bottom_seq(kept: &mut [Msg]) {
    if let [m] = kept {
        if matches!(m.body, Body::Put(_)) {
            m.seq = 0;
        }
    }
}

/// Tables being written for one new run.
pub(super) struct Output {
    sink: BlockSink,
    block_bytes: usize,
    table_bytes: usize,
    filter_bits: f64,
    builder: table::Builder,
    /// Range deletes not yet given to a table (their starts at or above the last cut).
    ranges: Vec<Msg>,
    pub tables: Vec<Written>,
    pub written: u64,
}

impl Output {
    pub fn new(sink: BlockSink, cfg: &Config, filter_bits: f64, ranges: Vec<Msg>) -> Output {
        Output {
            sink,
            block_bytes: cfg.block_bytes,
            table_bytes: cfg.table_bytes,
            filter_bits,
            builder: table::Builder::new(cfg.block_bytes),
            ranges,
            tables: Vec::new(),
            written: 0,
        }
    }

    /// Add one key's messages (sorted by seq), cutting a table first if the current one is full.
    pub fn add(&mut self, key: &[u8], msgs: &[Msg]) -> Result<()> {
        if msgs.is_empty() {
            return Ok(());
        }
        if self.builder.bytes() >= self.table_bytes {
            self.cut(Some(key))?;
        }
        self.builder.add(msgs);
        Ok(())
    }

    /// Finish the current table: it takes the range deletes below `next` (the next table's
    /// first key; all of them when none follows), clipped there.
    fn cut(&mut self, next: Option<&[u8]>) -> Result<()> {
        let mut mine = Vec::new();
        let mut rest = Vec::new();
        for r in std::mem::take(&mut self.ranges) {
            let Body::DeleteRange(end) = &r.body else {
                unreachable!("ranges only")
            };
            match next {
                Some(n) if r.key.as_slice() >= n => rest.push(r),
                Some(n) if end.as_slice() > n => {
                    mine.push(Msg {
                        key: r.key.clone(),
                        seq: r.seq,
                        body: Body::DeleteRange(n.to_vec()),
                    });
                    rest.push(Msg {
                        key: n.to_vec(),
                        seq: r.seq,
                        body: Body::DeleteRange(end.clone()),
                    });
                }
                _ => mine.push(r),
            }
        }
        self.ranges = rest;
        let builder = std::mem::replace(&mut self.builder, table::Builder::new(self.block_bytes));
        let puts = builder.puts();
        let id = self.sink.new_id();
        let Some((t, sealed)) = builder.finish(mine, self.filter_bits, id) else {
            return Ok(());
        };
        let ext = self.sink.write(sealed)?;
        self.written += ext.len;
        self.tables.push(Written {
            info: TableInfo {
                id,
                bytes: ext.len,
                points: t.points,
                puts,
                ranges: t.ranges.len() as u32,
                smallest: t.smallest.clone(),
                largest: t.largest.clone(),
            },
            table: t,
            ext,
        });
        Ok(())
    }

    /// The tables written, the last one cut; on an error none of them is kept.
    pub fn finish(mut self) -> Result<Output> {
        match self.cut(None) {
            Ok(()) => Ok(self),
            Err(e) => Err(self.abandon(e)),
        }
    }

    /// After a failed read or write: give back the tables written so far (nothing names them),
    /// so that the engine is as it was before the flush or merge began.
    pub fn abandon(self, e: Error) -> Error {
        for t in self.tables {
            self.sink.discard(t.ext);
        }
        e
    }
}

/// An input table: what the manifest says of it and where it lies.
pub(super) struct Src {
    pub info: TableInfo,
    pub ext: Extent,
}

/// Everything a merge needs, taken from the engine when it begins.
pub(super) struct Work {
    /// The input runs, newest first, each in key order.
    pub runs: Vec<Vec<Src>>,
    /// Every range delete of the inputs, for shadowing (and carried down unless `bottom`).
    pub ranges: Vec<Msg>,
    pub bottom: bool,
    pub cfg: Config,
    pub filter_bits: f64,
    pub merge: Option<Arc<dyn MergeOperator>>,
    pub sink: BlockSink,
}

impl Work {
    /// Merge the inputs into the tables of one new run.
    pub fn run(self) -> Result<Output> {
        let carried = if self.bottom {
            Vec::new()
        } else {
            self.ranges.clone()
        };
        let mut out = Output::new(self.sink.clone(), &self.cfg, self.filter_bits, carried);
        let dev = self.sink.device().clone();
        let mut cursors: Vec<Box<dyn Cursor<()>>> = self
            .runs
            .iter()
            .map(|run| {
                Box::new(WholeCursor::new(
                    dev.clone(),
                    run.iter().map(|s| (s.info.id, s.ext)).collect(),
                )) as Box<dyn Cursor<()>>
            })
            .collect();
        loop {
            let (key, mut msgs) = match next_group(&mut cursors, &mut (), false) {
                Ok(Some(group)) => group,
                Ok(None) => break,
                Err(e) => return Err(out.abandon(e)),
            };
            msgs.sort_unstable_by_key(|m| m.seq);
            let shadow = self
                .ranges
                .iter()
                .filter(|r| r.covers(&key))
                .map(|r| r.seq)
                .max();
            let mut kept = reduce(&key, msgs, shadow, self.merge.as_deref(), self.bottom);
            if self.bottom {
                zero_bottom_seq(&mut kept);
            }
            if let Err(e) = out.add(&key, &kept) {
                return Err(out.abandon(e));
            }
        }
        out.finish()
    }
}

/// A run's messages in key order, a table at a time in one read of its extent, decoded a block
/// at a time: only one block's messages are alive at once, so their allocations are reused
/// rather than a whole table's held (tens of thousands of small ones, which fragment the heap).
struct WholeCursor {
    dev: Arc<dyn Device>,
    tables: VecDeque<(NodeId, Extent)>,
    /// The table being read: its id, extent, head, bytes, and next block to decode.
    cur: Option<Open>,
    buf: VecDeque<Msg>,
}

struct Open {
    id: NodeId,
    ext: Extent,
    table: Table,
    whole: Vec<u8>,
    next: usize,
}

impl WholeCursor {
    fn new(dev: Arc<dyn Device>, tables: VecDeque<(NodeId, Extent)>) -> WholeCursor {
        WholeCursor {
            dev,
            tables,
            cur: None,
            buf: VecDeque::new(),
        }
    }

    /// Read table `id` whole at `ext` and check its head; its blocks are checked as decoded.
    fn read(&self, id: NodeId, ext: Extent) -> Result<Open> {
        let file = self.dev.name();
        let mut whole = vec![0u8; ext.len as usize];
        self.dev.read_at(&mut whole, ext.offset)?;
        let (kind, head) = block::open(&whole, id, file, ext.offset)?;
        let table = Table::decode_head(kind, head)
            .map_err(|what| Error::corruption(file, ext.offset, format!("table {id}: {what}")))?;
        Ok(Open {
            id,
            ext,
            table,
            whole,
            next: 0,
        })
    }

    /// The next block's messages into `buf`; false when the run has no more blocks.
    fn next_block(&mut self) -> Result<bool> {
        loop {
            if let Some(o) = &mut self.cur {
                if o.next < o.table.blocks.len() {
                    let (file, i) = (self.dev.name(), o.next);
                    o.next += 1;
                    let bytes = o.table.slice(&o.whole, i).ok_or_else(|| {
                        Error::corruption(
                            file,
                            o.ext.offset,
                            format!("table {}: block {i} lies outside its extent", o.id),
                        )
                    })?;
                    self.buf
                        .extend(o.table.decode_block(file, o.ext.offset, o.id, i, bytes)?);
                    return Ok(true);
                }
            }
            let Some((id, ext)) = self.tables.pop_front() else {
                self.cur = None;
                return Ok(false);
            };
            // The finished table's buffer goes before the next is read.
            self.cur = None;
            self.cur = Some(self.read(id, ext)?);
        }
    }
}

impl Cursor<()> for WholeCursor {
    fn fill(&mut self, _: &mut ()) -> Result<bool> {
        while self.buf.is_empty() {
            if !self.next_block()? {
                return Ok(false);
            }
        }
        Ok(true)
    }
    fn head(&self) -> &Msg {
        &self.buf[0]
    }
    fn pop(&mut self) -> Msg {
        self.buf.pop_front().expect("filled")
    }
}
