//! Queries, and the cursors that merges share with them.
//!
//! A point query asks the memtable, then each run from the newest (level 0's newest run) to the
//! oldest: in a run, the one table whose key range holds the key; in the table, its range
//! deletes (resident with its head), then its filter, then the one block the key may lie in. It
//! stops at the first run that settles the key (a put, a delete or a covering range delete),
//! since everything deeper is older (the level invariant), and applies what it gathered in
//! sequence order (`kv::merging::resolve`).
//!
//! A range query merges a cursor per run and one over the memtable (`kv::merging::next_group`)
//! and resolves each key against the range deletes of every table it passes.

use std::collections::VecDeque;

use super::*;
use crate::kv::merging::{next_group, resolve, Cursor};

use crate::kv::{above_lo, below_hi};
use crate::storage::{Pin, StoredNode};

/// What cursors read through: the pool, the memtable, and, for salvage, where damage goes
/// (a cursor then records what it cannot read and goes on).
pub(super) struct Ctx<'a> {
    pub store: Tables<'a>,
    pub mem: &'a Memtable,
    pub lost: Option<&'a mut Vec<Damage>>,
}

/// The pool as a reader has it: alone (`check`, salvage: what a miss loads is evicted with
/// write-backs as for any writer) or shared with other readers (`SharedReads`).
pub(super) enum Tables<'a> {
    Alone(&'a mut NodeStore<Table>),
    Shared(&'a NodeStore<Table>),
}

impl Tables<'_> {
    fn get(&mut self, id: NodeId) -> Result<Pin<Table>> {
        match self {
            Tables::Alone(s) => s.get(id),
            Tables::Shared(s) => s.get_shared(id),
        }
    }

    fn store(&self) -> &NodeStore<Table> {
        match self {
            Tables::Alone(s) => s,
            Tables::Shared(s) => s,
        }
    }
}

/// Make block `i` of a pinned table resident (its checked bytes), and give it. Readers sharing
/// the pool may read the same block at once: the first to take the table's lock installs it
/// and charges it, under that lock (as the Bε-tree's partitions are).
pub(super) fn load_block(
    store: &NodeStore<Table>,
    pin: &Pin<Table>,
    i: usize,
) -> Result<Arc<Vec<u8>>> {
    if let Some(raw) = &pin.read().blocks[i].data {
        return Ok(raw.clone());
    }
    let raw = Arc::new(pin.read().read_block(store.pager(), pin.id(), i)?);
    let mut t = pin.write();
    if let Some(there) = &t.blocks[i].data {
        return Ok(there.clone());
    }
    t.blocks[i].data = Some(raw.clone());
    // Charge the one block, not a re-count of every block in the table (a miss's cost).
    store.recharge_by(pin, 0, raw.len());
    debug_assert_eq!(store.charge_of(pin.id()), Some(StoredNode::charge(&*t)));
    Ok(raw)
}

/// Block `i` of a pinned table, decoded (for scans, which take every message).
pub(super) fn load_points(
    store: &NodeStore<Table>,
    pin: &Pin<Table>,
    i: usize,
) -> Result<Vec<Msg>> {
    let raw = load_block(store, pin, i)?;
    let pager = store.pager();
    pin.read().parse_block(
        pager.file_name(),
        pager.offset_of(pin.id()),
        pin.id(),
        i,
        &raw,
    )
}

/// A range delete met by a scan: [start, end) deleted at `seq`.
pub(super) struct RangeDel {
    start: Vec<u8>,
    end: Vec<u8>,
    seq: u64,
}

/// The sequence numbers of the range deletes among `ranges` that cover `key`.
pub(super) fn covering(ranges: &[RangeDel], key: &[u8]) -> Vec<u64> {
    ranges
        .iter()
        .filter(|r| r.start.as_slice() <= key && key < r.end.as_slice())
        .map(|r| r.seq)
        .collect()
}

/// Keys of the memtable a cursor takes at a time.
const MEM_BATCH: usize = 256;

/// The memtable's messages within a range, a batch of keys at a time.
pub(super) struct MemCursor {
    buf: VecDeque<Msg>,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    reverse: bool,
    done: bool,
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k),
        Bound::Excluded(k) => Bound::Excluded(k),
        Bound::Unbounded => Bound::Unbounded,
    }
}

fn owned(b: Bound<&[u8]>) -> Bound<Vec<u8>> {
    b.map(<[u8]>::to_vec)
}

impl MemCursor {
    pub fn new(lo: Bound<&[u8]>, hi: Bound<&[u8]>, reverse: bool) -> MemCursor {
        MemCursor {
            buf: VecDeque::new(),
            lo: owned(lo),
            hi: owned(hi),
            reverse,
            done: false,
        }
    }
}

impl<'a> Cursor<Ctx<'a>> for MemCursor {
    fn fill(&mut self, ctx: &mut Ctx<'a>) -> Result<bool> {
        if self.buf.is_empty() && !self.done {
            let batch = ctx
                .mem
                .batch(as_ref(&self.lo), as_ref(&self.hi), self.reverse, MEM_BATCH);
            match batch.last() {
                None => self.done = true,
                Some(last) => {
                    let next = Bound::Excluded(last.key.clone());
                    if self.reverse {
                        self.hi = next;
                    } else {
                        self.lo = next;
                    }
                }
            }
            self.buf.extend(batch);
        }
        Ok(!self.buf.is_empty())
    }
    fn head(&self) -> &Msg {
        &self.buf[0]
    }
    fn pop(&mut self) -> Msg {
        self.buf.pop_front().expect("filled")
    }
}

/// A run's messages within a range, a block at a time through the pool.
pub(super) struct RunCursor {
    tables: VecDeque<TableInfo>,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    reverse: bool,
    /// The current table and the blocks of it still to read, in the cursor's order.
    cur: Option<(Pin<Table>, VecDeque<usize>)>,
    buf: VecDeque<Msg>,
}

impl RunCursor {
    /// `run`'s tables that may hold keys within (`lo`, `hi`).
    pub fn new(run: &[TableInfo], lo: Bound<&[u8]>, hi: Bound<&[u8]>, reverse: bool) -> RunCursor {
        let mut tables: VecDeque<TableInfo> = run
            .iter()
            .filter(|t| below_hi(&t.smallest, hi) && above_lo(&t.largest, lo))
            .cloned()
            .collect();
        if reverse {
            tables.make_contiguous().reverse();
        }
        RunCursor {
            tables,
            lo: owned(lo),
            hi: owned(hi),
            reverse,
            cur: None,
            buf: VecDeque::new(),
        }
    }

    fn keep(&self, key: &[u8]) -> bool {
        above_lo(key, as_ref(&self.lo)) && below_hi(key, as_ref(&self.hi))
    }

    fn take(&mut self, msgs: &[Msg]) {
        let keep: Vec<Msg> = msgs.iter().filter(|m| self.keep(&m.key)).cloned().collect();
        if self.reverse {
            // Keys descending; a key's messages stay together (their order does not matter).
            self.buf.extend(keep.into_iter().rev());
        } else {
            self.buf.extend(keep);
        }
    }

    /// Open the next table: pin its head and list the blocks to read.
    fn open_next(&mut self, ctx: &mut Ctx<'_>) -> Result<bool> {
        while let Some(info) = self.tables.pop_front() {
            let pin = match ctx.store.get(info.id) {
                Ok(pin) => pin,
                Err(e) => match ctx.lost.as_deref_mut() {
                    Some(lost) => {
                        lost.push(
                            Damage::new("table", Some(info.id), e).keys(Some(&info.smallest), None),
                        );
                        continue;
                    }
                    None => return Err(e),
                },
            };
            let blocks = {
                let t = pin.read();
                let first = match as_ref(&self.lo) {
                    Bound::Included(k) | Bound::Excluded(k) => t.block_for(k),
                    Bound::Unbounded => 0,
                };
                let last = match as_ref(&self.hi) {
                    Bound::Included(k) | Bound::Excluded(k) => t.block_for(k),
                    Bound::Unbounded => t.blocks.len() - 1,
                };
                let mut v: VecDeque<usize> = (first..=last.max(first)).collect();
                if self.reverse {
                    v.make_contiguous().reverse();
                }
                v
            };
            self.cur = Some((pin, blocks));
            return Ok(true);
        }
        Ok(false)
    }
}

impl<'a> Cursor<Ctx<'a>> for RunCursor {
    fn fill(&mut self, ctx: &mut Ctx<'a>) -> Result<bool> {
        while self.buf.is_empty() {
            let Some((pin, blocks)) = &mut self.cur else {
                if !self.open_next(ctx)? {
                    return Ok(false);
                }
                continue;
            };
            let Some(i) = blocks.pop_front() else {
                self.cur = None;
                continue;
            };
            let pin = pin.clone();
            match load_points(ctx.store.store(), &pin, i) {
                Ok(points) => self.take(&points),
                Err(e) => match ctx.lost.as_deref_mut() {
                    Some(lost) => {
                        let t = pin.read();
                        let lo = if i == 0 {
                            Some(t.smallest.as_slice())
                        } else {
                            Some(t.pivots.get(i - 1))
                        };
                        let hi = (i < t.pivots.len()).then(|| t.pivots.get(i));
                        lost.push(Damage::new("table block", Some(pin.id()), e).keys(lo, hi));
                    }
                    None => return Err(e),
                },
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

impl Lsm {
    /// A point query (`SharedReads`: readers side by side).
    pub(super) fn point(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let (points, mut ranges) = self.mem.lookup(key);
        let mut msgs: Vec<Msg> = points.to_vec();
        let mut settled = !ranges.is_empty() || settles(&msgs);
        'runs: for level in 0..self.levels.len() {
            for r in 0..self.levels[level].runs.len() {
                if settled {
                    break 'runs;
                }
                let run = &self.levels[level].runs[r];
                // The last table whose smallest key is not above the key.
                let at = run.partition_point(|t| t.smallest.as_slice() <= key);
                if at == 0 || run[at - 1].largest.as_slice() < key {
                    continue;
                }
                let id = run[at - 1].id;
                let pin = self.store.get_shared(id)?;
                let (covering, maybe, block) = {
                    let t = pin.read();
                    let covering: Vec<u64> = t
                        .ranges
                        .iter()
                        .filter(|m| m.covers(key))
                        .map(|m| m.seq)
                        .collect();
                    (covering, t.filter.may_hold(key), t.block_for(key))
                };
                settled |= !covering.is_empty();
                ranges.extend(covering);
                if maybe {
                    let found = self.lookup_in(&pin, block, key)?;
                    settled |= settles(&found);
                    msgs.extend(found);
                }
            }
        }
        resolve(key, &mut msgs, &ranges, self.merge.as_deref(), |_| {
            Err(Error::corruption(
                self.store.pager().file_name(),
                0,
                "an out-of-line value in an LSM table".to_string(),
            ))
        })
    }

    /// The messages for `key` in block `block` of a pinned table, the block made resident.
    fn lookup_in(&self, pin: &Pin<Table>, block: usize, key: &[u8]) -> Result<Vec<Msg>> {
        let raw = load_block(&self.store, pin, block)?;
        let t = pin.read();
        t.lookup(&raw, key).map_err(|e| {
            let (pager, id) = (self.store.pager(), pin.id());
            t.block_error(pager.file_name(), pager.offset_of(id), id, block, e)
        })
    }

    /// The level of the newest run older than run `run` of level `level` that holds a point
    /// message for `key`, if any: a filter's yes is confirmed in the block, so a false
    /// positive does not count.
    pub(super) fn held_below(
        &mut self,
        key: &[u8],
        level: usize,
        run: usize,
    ) -> Result<Option<usize>> {
        for l in level..self.levels.len() {
            let first = if l == level { run } else { 0 };
            for r in first..self.levels[l].runs.len() {
                let tables = &self.levels[l].runs[r];
                let at = tables.partition_point(|t| t.smallest.as_slice() <= key);
                if at == 0 || tables[at - 1].largest.as_slice() < key {
                    continue;
                }
                let pin = self.store.get(tables[at - 1].id)?;
                let (maybe, block) = {
                    let t = pin.read();
                    (t.filter.may_hold(key), t.block_for(key))
                };
                if maybe && !self.lookup_in(&pin, block, key)?.is_empty() {
                    return Ok(Some(l));
                }
            }
        }
        Ok(None)
    }

    /// A cursor per run and one over the memtable, within (`lo`, `hi`).
    pub(super) fn cursors<'a>(
        &self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        reverse: bool,
    ) -> Vec<Box<dyn Cursor<Ctx<'a>>>> {
        let mut cursors: Vec<Box<dyn Cursor<Ctx<'a>>>> =
            vec![Box::new(MemCursor::new(lo, hi, reverse))];
        for run in self.levels.iter().flat_map(|l| l.runs.iter()) {
            cursors.push(Box::new(RunCursor::new(run, lo, hi, reverse)));
        }
        cursors
    }
}

/// A point query and a range page through `&self`, for readers side by side under `Db`'s
/// shared lock: tables and their blocks load through the pool's lock, each block installed
/// under its table's lock (`load_block`); the memtable and the levels are only read.
impl SharedReads for Lsm {
    fn over_budget(&self) -> bool {
        self.store.over_budget()
    }

    fn get_shared(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.point(key)
    }

    fn scan_shared(
        &self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        reverse: bool,
        limit: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<()> {
        let mut ctx = Ctx {
            store: Tables::Shared(&self.store),
            mem: &self.mem,
            lost: None,
        };
        let ranges = ranges_within(&self.levels, &mut ctx, lo, hi)?;
        let mut cursors = self.cursors(lo, hi, reverse);
        let mut taken = 0;
        while taken < limit {
            let Some((key, mut msgs)) = next_group(&mut cursors, &mut ctx, reverse)? else {
                break;
            };
            let covering = covering(&ranges, &key);
            let v = resolve(&key, &mut msgs, &covering, self.merge.as_deref(), |_| {
                Err(Error::corruption(
                    self.store.pager().file_name(),
                    0,
                    "an out-of-line value in an LSM table".to_string(),
                ))
            })?;
            if let Some(v) = v {
                out.push((key, v));
                taken += 1;
            }
        }
        Ok(())
    }
}

/// The range deletes of the memtable and of every table that may cover keys within
/// (`lo`, `hi`), the tables pinned through `ctx`.
pub(super) fn ranges_within(
    levels: &[Level],
    ctx: &mut Ctx<'_>,
    lo: Bound<&[u8]>,
    hi: Bound<&[u8]>,
) -> Result<Vec<RangeDel>> {
    let mut out: Vec<RangeDel> = Vec::new();
    let mut take = |m: &Msg| {
        if let Body::DeleteRange(end) = &m.body {
            if below_hi(&m.key, hi) && above_lo_exclusive_end(end, lo) {
                out.push(RangeDel {
                    start: m.key.clone(),
                    end: end.clone(),
                    seq: m.seq,
                });
            }
        }
    };
    ctx.mem.ranges().iter().for_each(&mut take);
    let ids = levels
        .iter()
        .flat_map(|l| l.runs.iter().flatten())
        .filter(|t| t.ranges > 0 && below_hi(&t.smallest, hi) && above_lo(&t.largest, lo))
        .map(|t| t.id);
    for id in ids {
        match ctx.store.get(id) {
            Ok(pin) => pin.read().ranges.iter().for_each(&mut take),
            Err(e) => match ctx.lost.as_deref_mut() {
                Some(l) => l.push(Damage::new("table", Some(id), e)),
                None => return Err(e),
            },
        }
    }
    Ok(out)
}

/// A put or a delete among `msgs` settles the key.
fn settles(msgs: &[Msg]) -> bool {
    msgs.iter()
        .any(|m| matches!(m.body, Body::Put(_) | Body::Delete))
}

/// A range ending (exclusively) at `end` reaches above `lo`.
fn above_lo_exclusive_end(end: &[u8], lo: Bound<&[u8]>) -> bool {
    match lo {
        Bound::Included(l) | Bound::Excluded(l) => end > l,
        Bound::Unbounded => true,
    }
}
