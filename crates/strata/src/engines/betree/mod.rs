//! The Bε-tree engine: strata's write-optimised dictionary (see docs/betree.md).
//!
//! Writes become messages injected at the root. An internal node buffers messages in one
//! segment per child; when a segment outgrows B/F bytes, or the node outgrows B, the heaviest
//! segment is flushed: its messages move into the child (its segments, or, at a leaf, its
//! entries). Queries collect the messages for their key along the root-to-leaf path and apply
//! them, newest last, to what the leaf holds, so answers are exact at every moment.
//!
//! Invariants (checked by `check`):
//! - all leaves are at depth `height`; pivots are strictly increasing and every key of child i
//!   (messages and entries alike) lies in [pivot i-1, pivot i), within the node's own range;
//! - internal nodes other than a collapsing root have at least two children and, after every
//!   operation, at most `fanout`;
//! - messages in a node are newer than the messages and entries below it (a segment is flushed
//!   whole, and a child receives a parent's messages only by a flush);
//! - a dirty node is fully resident (it is written back whole); only clean nodes are partial.
//! - values longer than `inline_max` live in blob blocks, freed when a newer message or a leaf
//!   update makes them unreachable.

pub(crate) mod basement;
pub(crate) mod msg;
pub(crate) mod node;

use std::collections::{BTreeMap, HashSet};
use std::ops::Bound;
use std::sync::Arc;

use basement::{Basement, ValRef};
use msg::{Body, Msg, Scratch, Segment, EMPTY_SEGMENT};
use node::{read_part, read_whole, Internal, Leaf, Node, Part, Run, RunRef};

use crate::engine::salvage::{self, Damage, Effect, Sink};
use crate::engine::{apply_each, CheckReport, Engine, EngineStats, MAX_HEIGHT};
use crate::error::{Error, Result};
use crate::kv::{
    free_blob, head, merge_operator, next_cursor, read_value, shortest_separator, within,
    write_blob, Filter, Keys, MergeOperator, Op, Val,
};
use crate::storage::{Checkpoint, Commit, Device, NodeId, NodeStore, Pager, Pin};

/// The first byte of the engine metadata in the superblock.
pub const ENGINE_TAG: u8 = 2;
/// Version 2 added the count of runs (version 1, without it, is read as having none).
const META_VERSION: u8 = 2;
const META_V1_LEN: usize = 2 + 12 + 8 + 4 + 7 * 8 + 1;
const META_LEN: usize = META_V1_LEN + 8;

/// Where a tree's geometry came from, recorded so that `stats` can say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Given in `Options`.
    Explicit,
    /// The built-in default: no device profile was saved.
    Default,
    /// Chosen by the tuner from the saved device profile.
    Profile,
}

impl Origin {
    fn byte(self) -> u8 {
        match self {
            Origin::Explicit => 0,
            Origin::Default => 1,
            Origin::Profile => 2,
        }
    }
    fn from_byte(b: u8) -> Origin {
        match b {
            1 => Origin::Default,
            2 => Origin::Profile,
            _ => Origin::Explicit,
        }
    }
    pub fn describe(self) -> &'static str {
        match self {
            Origin::Explicit => "given in the options",
            Origin::Default => "built-in default (no saved device profile)",
            Origin::Profile => "tuned from the saved device profile",
        }
    }
}

/// Node geometry, fixed when the tree is created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub node_size: usize,
    pub fanout: usize,
    pub basement: usize,
}

/// The geometry used when no device profile is saved: 1 MiB nodes, fanout 16, 64 KiB
/// basements.
pub const DEFAULT_GEOMETRY: Geometry = Geometry {
    node_size: 1 << 20,
    fanout: 16,
    basement: 64 << 10,
};

impl Geometry {
    pub fn check(&self) -> Result<()> {
        let Geometry {
            node_size,
            fanout,
            basement,
        } = *self;
        let bad = |why: String| Err(Error::InvalidOptions(why));
        if !node_size.is_power_of_two() || !(4 << 10..=64 << 20).contains(&node_size) {
            return bad(format!(
                "Bε-tree node size must be a power of two from 4 KiB to 64 MiB, not {node_size}"
            ));
        }
        if !(3..=256).contains(&fanout) {
            return bad(format!(
                "Bε-tree fanout must be from 3 to 256, not {fanout}"
            ));
        }
        if !basement.is_power_of_two() || basement < 1024 || basement > node_size {
            return bad(format!(
                "Bε-tree basement size must be a power of two from 1 KiB to the node size, not {basement}"
            ));
        }
        Ok(())
    }

    /// A segment larger than this is flushed: a query then reads at most about B/F bytes of
    /// buffer per level (Theorem 9).
    fn segment_cap(&self) -> usize {
        (self.node_size / self.fanout).max(EMPTY_SEGMENT + 1)
    }

    /// Values longer than this go out of line, so that one value never dominates a segment or
    /// a basement.
    fn inline_max(&self) -> usize {
        (self.basement / 4)
            .min(self.node_size / (4 * self.fanout))
            .max(64)
    }
}

pub struct BeTree {
    store: NodeStore<Node>,
    merge: Option<Arc<dyn MergeOperator>>,
    geo: Geometry,
    origin: Origin,
    root: NodeId,
    height: u32,
    next_seq: u64,
    live_keys: u64,
    live_bytes: u64,
    leaves: u64,
    internals: u64,
    blobs: u64,
    /// Messages in all segments and runs.
    buffered: u64,
    /// Runs spilled toward leaves and not yet drained.
    runs: u64,
    scratch: Scratch,
}

fn internal(n: &Node) -> &Internal {
    match n {
        Node::Internal(i) => i,
        _ => unreachable!("an internal node was expected"),
    }
}

fn internal_mut(n: &mut Node) -> &mut Internal {
    match n {
        Node::Internal(i) => i,
        _ => unreachable!("an internal node was expected"),
    }
}

fn leaf_mut(n: &mut Node) -> &mut Leaf {
    match n {
        Node::Leaf(l) => l,
        _ => unreachable!("a leaf was expected"),
    }
}

fn empty_seg() -> Part<Segment> {
    Part::new(Segment::default(), 0, EMPTY_SEGMENT)
}

fn before(key: &[u8], hi: Option<&[u8]>) -> bool {
    hi.is_none_or(|h| key < h)
}

/// Runs of at most this many point messages are applied to a basement in place.
const IN_PLACE_MAX: usize = 16;

/// Spilled runs a leaf may collect before a flush drains them into it: a point query probes
/// each run's filter, and about one probe in a hundred that misses still reads a chunk.
pub(crate) const MAX_RUNS: usize = 16;

/// A leaf's runs may hold up to this many node sizes before a flush drains them. A drain
/// rewrites the leaf, so the leaf level writes about 1 + (leaf bytes / this) bytes per byte
/// flushed into it. Loading 10M to 20M keys, 2 node sizes (with 16 runs) wrote about 15% less
/// in all than 1 (with 8), and 4 (with 32) about 8% less again, at the price of more data in
/// runs for scans to merge (docs/performance.md, "Step 3").
pub(crate) const RUN_BUDGET: f64 = 2.0;

/// A key's value while its messages are applied: the basement's entry until a message
/// replaces it (`new` is then `Some`, holding `None` once deleted).
struct Current<'a> {
    base: Option<ValRef<'a>>,
    new: Option<Option<Val>>,
}

/// Point messages sorted by key (then seq) as (key, that key's messages oldest first).
fn by_key(run: Vec<Msg>) -> impl Iterator<Item = (Vec<u8>, Vec<Msg>)> {
    let mut run = run.into_iter().peekable();
    std::iter::from_fn(move || {
        let first = run.next()?;
        let mut events = vec![first];
        while run.peek().is_some_and(|m| m.key == events[0].key) {
            events.push(run.next().expect("peeked"));
        }
        // The key moves out of the first message; settling reads only the bodies.
        let key = std::mem::take(&mut events[0].key);
        Some((key, events))
    })
}

/// A piece of a re-cut basement: its separator from the previous piece (none for the first).
type CutPiece = (Option<Vec<u8>>, Part<Basement>);

/// How `cut` shares entries out among the pieces.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fill {
    /// Fill each piece to the target and leave the rest to the last: for appends, which go on
    /// filling the last piece.
    Greedy,
    /// Pieces of about equal size, so that each has room to grow before it must be cut again.
    Even,
}

/// Cut a basement into basements of at most `target` bytes (at least one entry each, and one
/// empty basement for no entries): each with the separator before it, `None` for the first.
/// The entries move in blocks (`Basement::split_off`), never one by one.
fn cut(b: Basement, target: usize, fill: Fill) -> Vec<CutPiece> {
    let total = b.encoded_len();
    if total <= target {
        // The common case after a flush: one piece, kept as it is.
        let count = b.len() as u32;
        return vec![(None, Part::new(b, count, total))];
    }
    let close_at = match fill {
        Fill::Greedy => target,
        Fill::Even => total.div_ceil(total.div_ceil(target)),
    };
    // Where each piece after the first starts.
    let (mut starts, mut bytes) = (Vec::new(), 4);
    for i in 0..b.len() {
        let len = b.entry_bytes(i);
        if i > 0 && (bytes + len > target || bytes >= close_at) {
            starts.push(i);
            bytes = 4;
        }
        bytes += len;
    }
    let mut rest = b;
    let mut tails = Vec::with_capacity(starts.len());
    for &at in starts.iter().rev() {
        tails.push(rest.split_off(at));
    }
    rest.shrink();
    let mut out: Vec<CutPiece> = Vec::with_capacity(starts.len() + 1);
    let mut prev = rest;
    let mut sep = None;
    for next in tails.into_iter().rev() {
        let next_sep = shortest_separator(
            prev.last_key().expect("pieces are not empty"),
            next.first_key().expect("pieces are not empty"),
        );
        let (count, size) = (prev.len() as u32, prev.encoded_len());
        out.push((sep.replace(next_sep), Part::new(prev, count, size)));
        prev = next;
    }
    let (count, size) = (prev.len() as u32, prev.encoded_len());
    out.push((sep, Part::new(prev, count, size)));
    out
}

/// A whole leaf from sorted entries.
fn cut_basements(entries: Basement, target: usize) -> Leaf {
    let mut leaf = Leaf {
        pivots: Keys::default(),
        bases: Vec::new(),
    };
    for (sep, part) in cut(entries, target, Fill::Even) {
        if let Some(sep) = sep {
            leaf.pivots.push(sep);
        }
        leaf.bases.push(part);
    }
    leaf
}

/// Fold neighbouring basements together while one of them is under a quarter of `target`
/// and both fit in one.
fn merge_small_basements(l: &mut Leaf, target: usize) {
    let mut i = 0;
    while i + 1 < l.bases.len() {
        let (a, b) = (l.bases[i].bytes, l.bases[i + 1].bytes);
        if (a < target / 4 || b < target / 4) && a + b - 4 <= target {
            let right = l.bases.remove(i + 1).data.expect("resident");
            l.pivots.remove(i);
            let left = &mut l.bases[i];
            left.get_mut().append(&right);
            left.bytes = a + b - 4;
            left.count = left.get().len() as u32;
        } else {
            i += 1;
        }
    }
}

impl BeTree {
    pub fn create(
        pager: Pager,
        geo: Geometry,
        origin: Origin,
        cache_bytes: usize,
        merge: Option<Arc<dyn MergeOperator>>,
    ) -> Result<BeTree> {
        geo.check()?;
        let mut store = NodeStore::new(pager, cache_bytes);
        let leaf = cut_basements(Basement::default(), geo.basement);
        let root = store.create(Node::Leaf(leaf))?.id();
        let mut t = BeTree {
            store,
            merge,
            geo,
            origin,
            root,
            height: 1,
            next_seq: 1,
            live_keys: 0,
            live_bytes: 0,
            leaves: 1,
            internals: 0,
            blobs: 0,
            buffered: 0,
            runs: 0,
            scratch: Scratch::default(),
        };
        t.checkpoint(0)?;
        Ok(t)
    }

    pub fn open(
        pager: Pager,
        cp: &Checkpoint,
        cache_bytes: usize,
        merge: Option<Arc<dyn MergeOperator>>,
    ) -> Result<BeTree> {
        let m = &cp.engine_meta;
        let bad = |what: &str| {
            Error::corruption(pager.file_name(), 0, format!("Bε-tree metadata: {what}"))
        };
        if m.len() < META_V1_LEN || m[0] != ENGINE_TAG {
            return Err(bad("missing or not a Bε-tree"));
        }
        if m[1] > META_VERSION {
            return Err(Error::UnsupportedVersion {
                file: pager.file_name().to_string(),
                found: m[1] as u32,
                supported: META_VERSION as u32,
            });
        }
        let u32_at = |i: usize| u32::from_le_bytes(m[i..i + 4].try_into().unwrap()) as usize;
        let u64_at = |i: usize| u64::from_le_bytes(m[i..i + 8].try_into().unwrap());
        let geo = Geometry {
            node_size: u32_at(2),
            fanout: u32_at(6),
            basement: u32_at(10),
        };
        geo.check().map_err(|_| bad("geometry out of range"))?;
        let runs = match m[1] {
            1 => 0,
            _ if m.len() < META_LEN => return Err(bad("metadata too short")),
            _ => u64_at(83),
        };
        let height = u32_at(22) as u32;
        // No tree is taller (see `btree::MAX_HEIGHT`), and height 0 underflows when the root
        // collapses.
        if !(1..=MAX_HEIGHT).contains(&height) {
            return Err(bad("height out of range"));
        }
        Ok(BeTree {
            store: NodeStore::new(pager, cache_bytes),
            merge,
            geo,
            origin: Origin::from_byte(m[82]),
            root: u64_at(14),
            height,
            next_seq: u64_at(26),
            live_keys: u64_at(34),
            live_bytes: u64_at(42),
            leaves: u64_at(50),
            internals: u64_at(58),
            blobs: u64_at(66),
            buffered: u64_at(74),
            runs,
            scratch: Scratch::default(),
        })
    }

    fn meta(&self) -> Vec<u8> {
        let mut m = vec![ENGINE_TAG, META_VERSION];
        for v in [self.geo.node_size, self.geo.fanout, self.geo.basement] {
            m.extend_from_slice(&(v as u32).to_le_bytes());
        }
        m.extend_from_slice(&self.root.to_le_bytes());
        m.extend_from_slice(&self.height.to_le_bytes());
        for v in [
            self.next_seq,
            self.live_keys,
            self.live_bytes,
            self.leaves,
            self.internals,
            self.blobs,
            self.buffered,
        ] {
            m.extend_from_slice(&v.to_le_bytes());
        }
        m.push(self.origin.byte());
        m.extend_from_slice(&self.runs.to_le_bytes());
        debug_assert_eq!(m.len(), META_LEN);
        m
    }

    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    // ---- partitions and values -------------------------------------------------------------

    /// Make partition i of a pinned node resident.
    fn load_part(&mut self, pin: &Pin<Node>, i: usize) -> Result<()> {
        let loc = {
            let g = pin.read();
            if g.loaded(i) {
                return Ok(());
            }
            g.loc(i).expect("an unloaded partition is on disk")
        };
        let bytes = read_part(self.store.pager(), pin.id(), i, loc)?;
        let installed = pin.write().install(i, &bytes);
        installed.map_err(|what| {
            let at = self.store.pager().offset_of(pin.id()) + loc.off as u64;
            Error::corruption(
                self.store.pager().file_name(),
                at,
                format!("node {}: {what}", pin.id()),
            )
        })?;
        self.store.recharge(pin);
        Ok(())
    }

    /// Make every partition resident (required before a node is changed): one read of the
    /// whole extent when more than one partition is missing.
    fn load_all(&mut self, pin: &Pin<Node>) -> Result<()> {
        let missing = {
            let g = pin.read();
            (0..g.parts()).filter(|&i| !g.loaded(i)).count()
        };
        match missing {
            0 => Ok(()),
            1 => {
                let i = (0..pin.read().parts())
                    .find(|&i| !pin.read().loaded(i))
                    .expect("one missing");
                self.load_part(pin, i)
            }
            _ => {
                let whole = read_whole(self.store.pager(), pin.id())?;
                pin.write()
                    .install_from(self.store.pager(), pin.id(), &whole)?;
                self.store.recharge(pin);
                Ok(())
            }
        }
    }

    fn read_val(&self, v: &Val) -> Result<Vec<u8>> {
        read_value(self.store.pager(), v)
    }

    fn read_ref(&self, v: ValRef) -> Result<Vec<u8>> {
        match v {
            ValRef::Inline(b) => Ok(b.to_vec()),
            ValRef::Blob { .. } => self.read_val(&v.to_val()),
        }
    }

    fn make_val(&mut self, bytes: Vec<u8>) -> Result<Val> {
        if bytes.len() <= self.geo.inline_max() {
            return Ok(Val::Inline(bytes));
        }
        let val = write_blob(self.store.pager_mut(), &bytes)?;
        self.blobs += 1;
        Ok(val)
    }

    fn free_val(&mut self, v: Val) {
        if free_blob(self.store.pager_mut(), v) {
            self.blobs -= 1;
        }
    }

    fn free_msgs(&mut self, dropped: Vec<Msg>) {
        for m in dropped {
            if let Body::Put(v) = m.body {
                self.free_val(v);
            }
        }
    }

    fn merge_op(&self) -> Result<&dyn MergeOperator> {
        merge_operator(&self.merge)
    }

    /// The value of `key` after applying `events` (seq order) to `base`: read-only.
    fn resolve(
        &self,
        key: &[u8],
        base: Option<ValRef>,
        events: &[&Msg],
    ) -> Result<Option<Vec<u8>>> {
        // Start from the last message that sets the value outright; upserts after it stack.
        let from = events
            .iter()
            .rposition(|m| !matches!(m.body, Body::Upsert(_)));
        let mut cur = match from {
            Some(i) => match &events[i].body {
                Body::Put(v) => Some(self.read_val(v)?),
                _ => None,
            },
            None => base.map(|v| self.read_ref(v)).transpose()?,
        };
        for m in &events[from.map_or(0, |i| i + 1)..] {
            if let Body::Upsert(op) = &m.body {
                cur = self.merge_op()?.merge(key, cur.as_deref(), op);
            }
        }
        Ok(cur)
    }

    // ---- messages into internal nodes ------------------------------------------------------

    /// Insert messages into a resident internal node's segments, clipping range deletes to
    /// each child they overlap. Messages come oldest first, or (with no range deletes among
    /// them) by key with each key's oldest first: see `Segment::into_messages`.
    fn route(&mut self, pin: &Pin<Node>, msgs: Vec<Msg>) {
        let merge = self.merge.clone();
        let mut dropped = Vec::new();
        let count_before: u64;
        let after: u64;
        {
            let mut g = pin.write();
            let n = internal_mut(&mut g);
            count_before = n.segs.iter().map(|s| s.count as u64).sum();
            let mergeable = msgs.len() > 1
                && msgs
                    .iter()
                    .all(|m| matches!(m.body, Body::Put(_) | Body::Delete))
                && msgs.windows(2).all(|w| w[0].key <= w[1].key);
            let msgs = if mergeable {
                // Sorted puts and deletes: each child's run is contiguous; merge it in whole.
                let mut msgs = msgs.into_iter().peekable();
                while let Some(first) = msgs.next() {
                    let j = n.child_for(&first.key);
                    let hi = n.bounds(j).1.map(<[u8]>::to_vec);
                    let mut run = vec![first];
                    while let Some(m) = msgs.next_if(|m| before(&m.key, hi.as_deref())) {
                        run.push(m);
                    }
                    dropped.extend(n.segs[j].get_mut().insert_run(run, &mut self.scratch));
                    n.refresh(j);
                }
                Vec::new()
            } else {
                msgs
            };
            for m in msgs {
                match &m.body {
                    Body::DeleteRange(end) => {
                        if m.key >= *end {
                            continue;
                        }
                        let (first, last) = (n.child_for(&m.key), n.child_below(end));
                        for j in first..=last {
                            let (lo, hi) = n.bounds(j);
                            let start = lo.map_or(m.key.as_slice(), |l| l.max(m.key.as_slice()));
                            let stop = hi.map_or(end.as_slice(), |h| h.min(end.as_slice()));
                            if start < stop {
                                let piece = Msg {
                                    key: start.to_vec(),
                                    seq: m.seq,
                                    body: Body::DeleteRange(stop.to_vec()),
                                };
                                dropped.extend(n.segs[j].get_mut().insert(piece, merge.as_deref()));
                                n.refresh(j);
                            }
                        }
                    }
                    _ => {
                        let j = n.child_for(&m.key);
                        dropped.extend(n.segs[j].get_mut().insert(m, merge.as_deref()));
                        n.refresh(j);
                    }
                }
            }
            after = n.segs.iter().map(|s| s.count as u64).sum();
        }
        self.buffered = self.buffered + after - count_before;
        self.free_msgs(dropped);
        self.store.mark_dirty(pin);
    }

    /// Flush from a resident internal node at `depth` (the root's is 1) while it is over its
    /// limits, heaviest segment first.
    fn settle(&mut self, pin: &Pin<Node>, depth: u32) -> Result<()> {
        loop {
            let pick = {
                let g = pin.read();
                let n = internal(&g);
                let (j, bytes) = n
                    .segs
                    .iter()
                    .map(|s| s.bytes)
                    .enumerate()
                    .max_by_key(|&(_, b)| b)
                    .expect("internal nodes have children");
                let over = n.size() > self.geo.node_size || bytes > self.geo.segment_cap();
                (over && bytes > EMPTY_SEGMENT).then_some(j)
            };
            let Some(j) = pick else { return Ok(()) };
            self.flush(pin, j, depth)?;
        }
    }

    /// Empty segment j of a resident internal node at `depth`: spill it as a run when child j
    /// is a leaf that is not in the cache and has room for more runs, else `drain` it into the
    /// child.
    ///
    /// A leaf that is not resident would be read whole and written whole for about B/F bytes of
    /// messages, about F bytes written per byte flushed. A run writes those bytes once, and the
    /// leaf is rewritten once for up to `RUN_BUDGET` node sizes of runs. A resident leaf takes
    /// the messages at once: it costs no read, and it is written once per checkpoint however
    /// many flushes it takes. Whether the child is a leaf follows from the depth, so deciding
    /// costs no IO.
    fn flush(&mut self, parent: &Pin<Node>, j: usize, depth: u32) -> Result<()> {
        let child_id = internal(&parent.read()).children[j];
        if depth + 1 == self.height && !self.fully_resident(child_id)? {
            let room = {
                let g = parent.read();
                let n = internal(&g);
                let runs = &n.runs[j];
                let run_bytes: usize = runs.iter().map(|r| r.bytes as usize).sum();
                runs.len() < MAX_RUNS
                    && (run_bytes + n.segs[j].bytes) as f64
                        <= RUN_BUDGET * self.geo.node_size as f64
            };
            if room {
                return self.spill(parent, j);
            }
        }
        let child = self.store.get(child_id)?;
        self.drain(parent, j, child, depth)
    }

    /// Whether node `id` is in the cache with every partition (no IO).
    fn fully_resident(&mut self, id: NodeId) -> Result<bool> {
        if !self.store.is_resident(id) {
            return Ok(false);
        }
        let pin = self.store.get(id)?;
        let g = pin.read();
        Ok((0..g.parts()).all(|i| g.loaded(i)))
    }

    /// Write segment j out as a run of child j's, leaving the child as it is.
    fn spill(&mut self, parent: &Pin<Node>, j: usize) -> Result<()> {
        let seg = {
            let mut g = parent.write();
            std::mem::replace(&mut internal_mut(&mut g).segs[j], empty_seg())
        };
        let seg = seg.data.expect("dirty nodes are resident");
        let filter = if seg.ranges().is_empty() {
            Filter::build(seg.points().iter().map(|m| m.key.as_slice()))
        } else {
            Filter::any()
        };
        let (bytes, count) = (seg.bytes() as u32, seg.len() as u32);
        let id = self
            .store
            .create(Node::Run(Run::new(seg, self.geo.basement)))?
            .id();
        self.runs += 1;
        internal_mut(&mut parent.write()).runs[j].push(RunRef {
            id,
            bytes,
            count,
            filter,
        });
        self.store.mark_dirty(parent);
        Ok(())
    }

    /// Take child j's runs out of a resident internal node: their messages, oldest first. The
    /// runs are freed.
    fn take_runs(&mut self, parent: &Pin<Node>, j: usize) -> Result<Vec<Msg>> {
        let refs = std::mem::take(&mut internal_mut(&mut parent.write()).runs[j]);
        if refs.is_empty() {
            return Ok(Vec::new());
        }
        self.store.mark_dirty(parent);
        let mut msgs = Vec::new();
        for r in refs {
            let run = self.load_run(r.id)?;
            self.store.free(r.id);
            self.runs -= 1;
            self.buffered -= run.len() as u64;
            msgs.extend(run);
        }
        Ok(msgs)
    }

    /// A run's messages, oldest first (a copy: a run is never changed, and may stay cached).
    fn load_run(&mut self, id: NodeId) -> Result<Vec<Msg>> {
        let pin = self.store.get(id)?;
        if !matches!(&*pin.read(), Node::Run(_)) {
            return Err(self.not_a_run(id));
        }
        self.load_all(&pin)?;
        let g = pin.read();
        let Node::Run(run) = &*g else {
            unreachable!("checked above")
        };
        let mut msgs: Vec<Msg> = run
            .chunks
            .iter()
            .flat_map(|c| c.get().points().iter().chain(c.get().ranges()).cloned())
            .collect();
        msgs.sort_by_key(|m| m.seq);
        Ok(msgs)
    }

    fn not_a_node(&self, id: NodeId) -> Error {
        self.corrupt(
            id,
            format!("node {id} is a run where a tree node was expected"),
        )
    }

    fn not_a_run(&self, id: NodeId) -> Error {
        self.corrupt(id, format!("node {id} is listed as a run but is not one"))
    }

    /// Corruption found in node `id`, reported at its extent.
    fn corrupt(&self, id: NodeId, what: String) -> Error {
        let pager = self.store.pager();
        Error::corruption(pager.file_name(), pager.offset_of(id), what)
    }

    /// Move child j's runs and segment j of a resident internal node into child j (pinned),
    /// then fix the child's shape.
    fn drain(&mut self, parent: &Pin<Node>, j: usize, child: Pin<Node>, depth: u32) -> Result<()> {
        let mut msgs = self.take_runs(parent, j)?;
        let seg = {
            let mut g = parent.write();
            std::mem::replace(&mut internal_mut(&mut g).segs[j], empty_seg())
        };
        self.buffered -= seg.count as u64;
        let seg = seg.data.expect("dirty nodes are resident");
        if msgs.is_empty() {
            msgs = seg.into_messages();
        } else {
            // Runs are older than the segment: everything oldest first.
            msgs.extend(seg.into_by_seq());
        }
        self.store.mark_dirty(parent);
        self.deliver(&child, msgs, depth + 1)?;
        self.fix_child(parent, j, child)
    }

    // ---- messages into leaves --------------------------------------------------------------

    /// Give `msgs` to `pin` (at `depth`), loaded whole: applied if it is a leaf, else routed
    /// into its segments, which then settle.
    fn deliver(&mut self, pin: &Pin<Node>, msgs: Vec<Msg>, depth: u32) -> Result<()> {
        self.load_all(pin)?;
        let is_leaf = pin.read().is_leaf();
        if is_leaf {
            self.apply_to_leaf(pin, msgs)
        } else {
            self.route(pin, msgs);
            self.settle(pin, depth)
        }
    }

    /// Apply messages (in an order `route` accepts) to a resident leaf. Only the basements the
    /// messages fall in are rebuilt (and re-cut to the basement size); the others are kept as
    /// they are.
    fn apply_to_leaf(&mut self, pin: &Pin<Node>, msgs: Vec<Msg>) -> Result<()> {
        if !msgs.is_empty() && !msgs.iter().any(|m| matches!(m.body, Body::DeleteRange(_))) {
            return self.apply_points_to_leaf(pin, msgs);
        }
        let (old_bases, old_pivots) = {
            let mut g = pin.write();
            let l = leaf_mut(&mut g);
            (
                std::mem::take(&mut l.bases),
                std::mem::take(&mut l.pivots).into_vec(),
            )
        };
        let (ranges, mut points): (Vec<Msg>, Vec<Msg>) = msgs
            .into_iter()
            .partition(|m| matches!(m.body, Body::DeleteRange(_)));
        points.sort_by(|a, b| (&a.key, a.seq).cmp(&(&b.key, b.seq)));
        // Point messages per basement (they are sorted, so each basement's run is contiguous).
        let n = old_bases.len();
        let mut runs: Vec<Vec<Msg>> = (0..n).map(|_| Vec::new()).collect();
        for m in points {
            let b = old_pivots.partition_point(|p| p.as_slice() <= m.key.as_slice());
            runs[b].push(m);
        }
        let mut out = Leaf {
            pivots: Keys::default(),
            bases: Vec::new(),
        };
        for (i, (base, run)) in old_bases.into_iter().zip(runs).enumerate() {
            let lo = (i > 0).then(|| old_pivots[i - 1].as_slice());
            let hi = old_pivots.get(i).map(|p| p.as_slice());
            let hit: Vec<&Msg> = ranges
                .iter()
                .filter(|r| match &r.body {
                    Body::DeleteRange(end) => {
                        before(&r.key, hi) && lo.is_none_or(|l| end.as_slice() > l)
                    }
                    _ => false,
                })
                .collect();
            let pieces = self.basement_pieces(base, run, &hit)?;
            for (sep, part) in pieces {
                if part.count == 0 && !(out.bases.is_empty() && i == n - 1) {
                    // An emptied basement disappears (the leaf keeps at least one).
                    continue;
                }
                if !out.bases.is_empty() {
                    // The old lower pivot still separates this piece from what came before.
                    out.pivots
                        .push(sep.unwrap_or_else(|| lo.expect("not the first").to_vec()));
                }
                out.bases.push(part);
            }
        }
        if out.bases.is_empty() {
            out.bases.push(Part::new(Basement::default(), 0, 4));
        }
        merge_small_basements(&mut out, self.geo.basement);
        *leaf_mut(&mut pin.write()) = out;
        self.store.mark_dirty(pin);
        Ok(())
    }

    /// Point messages only: rebuild just the basements they land in and splice the pieces in
    /// place, so that applying a few messages to a leaf of many basements (a root that is still
    /// a leaf takes every write this way) costs O(touched), not O(basements).
    fn apply_points_to_leaf(&mut self, pin: &Pin<Node>, mut msgs: Vec<Msg>) -> Result<()> {
        msgs.sort_by(|a, b| (&a.key, a.seq).cmp(&(&b.key, b.seq)));
        // (basement index, its run, the basement taken out), in ascending index order.
        let mut touched: Vec<(usize, Vec<Msg>, Part<Basement>)> = Vec::new();
        {
            let mut g = pin.write();
            let l = leaf_mut(&mut g);
            for m in msgs {
                let b = l.pivots.rank(&m.key, true);
                match touched.last_mut() {
                    Some((i, run, _)) if *i == b => run.push(m),
                    _ => touched.push((b, vec![m], Part::new(Basement::default(), 0, 4))),
                }
            }
            for (i, _, base) in &mut touched {
                std::mem::swap(base, &mut l.bases[*i]);
            }
        }
        let mut rebuilt = Vec::with_capacity(touched.len());
        for (i, run, base) in touched {
            rebuilt.push((i, self.basement_pieces(base, run, &[])?));
        }
        {
            let mut g = pin.write();
            let l = leaf_mut(&mut g);
            // From the right, so that splicing never moves an index still to be visited.
            for (i, pieces) in rebuilt.into_iter().rev() {
                let mut kept = pieces.into_iter().filter(|(_, p)| p.count > 0);
                match kept.next() {
                    Some((_, first)) => {
                        l.bases[i] = first;
                        for (j, (sep, part)) in kept.enumerate() {
                            l.pivots
                                .insert(i + j, sep.expect("later pieces have separators"));
                            l.bases.insert(i + j + 1, part);
                        }
                    }
                    // An emptied basement disappears with one of its fences (the leaf keeps
                    // at least one basement).
                    None if l.bases.len() > 1 => {
                        l.bases.remove(i);
                        l.pivots.remove(i.saturating_sub(1));
                    }
                    None => l.bases[i] = Part::new(Basement::default(), 0, 4),
                }
            }
            merge_small_basements(l, self.geo.basement);
        }
        self.store.mark_dirty(pin);
        Ok(())
    }

    /// A basement after its point messages (`run`, sorted by key then seq) and the range
    /// deletes that reach it (`hit`), cut into pieces of the basement size; the first piece has
    /// no separator, each later one the separator from its predecessor. One piece with no
    /// entries means the basement emptied.
    fn basement_pieces(
        &mut self,
        base: Part<Basement>,
        run: Vec<Msg>,
        hit: &[&Msg],
    ) -> Result<Vec<CutPiece>> {
        let appends = hit.is_empty()
            && run.first().is_some_and(|m| {
                base.get()
                    .last_key()
                    .is_none_or(|last| last < m.key.as_slice())
            });
        Ok(if run.is_empty() && hit.is_empty() {
            vec![(None, base)]
        } else if appends {
            // Every message lands past the basement's last key: push, and re-cut only when
            // the basement outgrows its size (amortised O(1) per sequential insert).
            let mut b = base.data.expect("dirty nodes are resident");
            for (key, events) in by_key(run) {
                if let Some(v) = self.settle_key(&key, None, events, Vec::new())? {
                    b.push(&key, &v);
                }
            }
            self.recut(b, Fill::Greedy)
        } else if hit.is_empty() && run.len() <= IN_PLACE_MAX {
            // A few messages: update or insert each entry where it stands. Moving the tail of
            // the basement (a memmove) is cheaper than rebuilding it.
            let mut b = base.data.expect("dirty nodes are resident");
            for (key, events) in by_key(run) {
                match b.search(&key) {
                    Ok(j) => match self.settle_key(&key, Some(b.val(j)), events, Vec::new())? {
                        Some(v) => b.set(j, &v),
                        None => b.remove(j),
                    },
                    Err(j) => {
                        if let Some(v) = self.settle_key(&key, None, events, Vec::new())? {
                            b.insert(j, &key, &v);
                        }
                    }
                }
            }
            self.recut(b, Fill::Even)
        } else {
            let b = base.data.expect("dirty nodes are resident");
            let merged = self.apply_to_basement(b, run, hit)?;
            cut(merged, self.geo.basement, Fill::Even)
        })
    }

    /// A basement as one piece, or cut into several when it outgrew its size.
    fn recut(&self, b: Basement, fill: Fill) -> Vec<CutPiece> {
        if b.encoded_len() > self.geo.basement {
            cut(b, self.geo.basement, fill)
        } else {
            let (count, bytes) = (b.len() as u32, b.encoded_len());
            vec![(None, Part::new(b, count, bytes))]
        }
    }

    /// One basement's entries after its point messages (sorted by key, then seq) and the range
    /// deletes that reach it.
    fn apply_to_basement(
        &mut self,
        b: Basement,
        run: Vec<Msg>,
        ranges: &[&Msg],
    ) -> Result<Basement> {
        let run_bytes: usize = run.iter().map(|m| m.encoded_len()).sum();
        let mut out = Basement::with_capacity(b.len() + run.len(), b.encoded_len() + run_bytes);
        if ranges.is_empty() {
            // Entries between the messages' keys are copied as they are encoded.
            let mut i = 0;
            for (key, events) in by_key(run) {
                let (j, found) = match b.search_from(i, &key) {
                    Ok(j) => (j, true),
                    Err(j) => (j, false),
                };
                out.extend_from(&b, i..j);
                i = j + found as usize;
                let base = found.then(|| b.val(j));
                if let Some(v) = self.settle_key(&key, base, events, Vec::new())? {
                    out.push(&key, &v);
                }
            }
            out.extend_from(&b, i..b.len());
            return Ok(out);
        }
        // Range deletes reach entries no message names: every entry is looked at.
        let mut pts = by_key(run).peekable();
        let mut i = 0;
        loop {
            let take_old = match (i < b.len(), pts.peek()) {
                (false, None) => break,
                (true, None) => true,
                (false, Some(_)) => false,
                (true, Some((k, _))) => b.key(i) <= k.as_slice(),
            };
            let (key, base, events) = if take_old {
                i += 1;
                let key = b.key(i - 1);
                let events = match pts.next_if(|(k, _)| k.as_slice() == key) {
                    Some((_, events)) => events,
                    None => Vec::new(),
                };
                (key.to_vec(), Some(b.val(i - 1)), events)
            } else {
                let (key, events) = pts.next().expect("peeked");
                (key, None, events)
            };
            let covering: Vec<u64> = ranges
                .iter()
                .filter(|r| r.covers(&key))
                .map(|r| r.seq)
                .collect();
            let v = if events.is_empty() && covering.is_empty() {
                base.map(ValRef::to_val)
            } else {
                self.settle_key(&key, base, events, covering)?
            };
            if let Some(v) = v {
                out.push(&key, &v);
            }
        }
        Ok(out)
    }

    /// One key's new leaf value: `base` with point `events` and range deletes at `covering`
    /// sequence numbers applied in order. Frees what it replaces and keeps the live counts.
    /// The base is borrowed from its basement and copied only if it survives.
    fn settle_key(
        &mut self,
        key: &[u8],
        base: Option<ValRef>,
        events: Vec<Msg>,
        covering: Vec<u64>,
    ) -> Result<Option<Val>> {
        if let Some(v) = base {
            self.live_keys -= 1;
            self.live_bytes -= (key.len() + v.logical_len()) as u64;
        }
        let mut cur = Current { base, new: None };
        if covering.is_empty() {
            // Events come oldest first.
            for m in events {
                self.apply_body(key, &mut cur, m.body)?;
            }
        } else {
            // Range deletes (rare) are interleaved by sequence number.
            let mut order: Vec<(u64, Option<Msg>)> =
                events.into_iter().map(|m| (m.seq, Some(m))).collect();
            order.extend(covering.into_iter().map(|s| (s, None)));
            order.sort_by_key(|e| e.0);
            for (_, m) in order {
                self.apply_body(key, &mut cur, m.map_or(Body::Delete, |m| m.body))?;
            }
        }
        let out = match cur.new {
            Some(v) => v,
            None => cur.base.map(ValRef::to_val),
        };
        if let Some(v) = &out {
            self.live_keys += 1;
            self.live_bytes += (key.len() + v.logical_len()) as u64;
        }
        Ok(out)
    }

    /// One message body applied to a key's current value.
    fn apply_body(&mut self, key: &[u8], cur: &mut Current, body: Body) -> Result<()> {
        let next = match body {
            Body::Put(v) => Some(v),
            Body::Delete | Body::DeleteRange(_) => None,
            Body::Upsert(op) => {
                let old = match (&cur.new, cur.base) {
                    (Some(v), _) => v.as_ref().map(|v| self.read_val(v)).transpose()?,
                    (None, b) => b.map(|b| self.read_ref(b)).transpose()?,
                };
                let new = self.merge_op()?.merge(key, old.as_deref(), &op);
                new.map(|b| self.make_val(b)).transpose()?
            }
        };
        // What the key held until now is replaced: free it (a blob's block goes back).
        match cur.new.replace(next) {
            Some(old) => {
                if let Some(v) = old {
                    self.free_val(v);
                }
            }
            None => {
                if let Some(ValRef::Blob { id, len }) = cur.base.take() {
                    self.free_val(Val::Blob { id, len });
                }
            }
        }
        Ok(())
    }

    // ---- shape: splits, merges, the root ---------------------------------------------------

    fn too_big(&self, n: &Node) -> bool {
        match n {
            Node::Leaf(l) => l.size() > self.geo.node_size && l.entries() >= 2,
            Node::Internal(n) => n.children.len() > self.geo.fanout,
            Node::Run(_) => false,
        }
    }

    fn too_small(&self, n: &Node) -> bool {
        match n {
            Node::Leaf(l) => l.size() < self.geo.node_size / 4,
            Node::Internal(n) => n.children.len() < (self.geo.fanout / 4).max(2),
            Node::Run(_) => false,
        }
    }

    /// Split a resident node into pieces: (separator before each piece after the first, piece).
    /// Split a leaf by its entries into pieces of about `target` bytes: (separator, piece), the
    /// first separator empty. The pieces are re-cut into even basements: moving whole basements
    /// instead copies less but keeps their uneven fill and spare capacity, and measured slower
    /// (1M-record load, reads and mixed rounds: 435K / 796K / 427K ops/s against 502K / 1,037K /
    /// 636K, 190 MiB of cache charge against 160).
    fn split_leaf(&self, l: &mut Leaf, pieces: usize, target: usize) -> Vec<(Vec<u8>, Leaf)> {
        let mut all = Basement::with_capacity(l.entries() as usize, l.size());
        for b in l.bases.drain(..) {
            all.append(b.get());
        }
        let (mut starts, mut bytes) = (Vec::new(), 0);
        for i in 0..all.len() {
            if bytes >= target && i > 0 && starts.len() + 1 < pieces {
                starts.push(i);
                bytes = 0;
            }
            bytes += all.entry_bytes(i);
        }
        let mut out = Vec::with_capacity(starts.len() + 1);
        for &at in starts.iter().rev() {
            let entries = all.split_off(at);
            let sep = shortest_separator(
                all.last_key().expect("pieces are not empty"),
                entries.first_key().expect("pieces are not empty"),
            );
            out.push((sep, cut_basements(entries, self.geo.basement)));
        }
        out.push((Vec::new(), cut_basements(all, self.geo.basement)));
        out.reverse();
        out
    }

    fn split(&mut self, pin: &Pin<Node>) -> Vec<(Vec<u8>, Node)> {
        let mut g = pin.write();
        match &mut *g {
            Node::Leaf(l) => {
                // Pieces of about equal bytes, at most 3/4 of a node each, at least two.
                let total = l.size();
                let pieces = total.div_ceil(self.geo.node_size * 3 / 4).max(2);
                let target = total / pieces;
                let mut out = self.split_leaf(l, pieces, target);
                let (_, first) = out.remove(0);
                *g = Node::Leaf(first);
                out.into_iter()
                    .map(|(sep, l)| (sep, Node::Leaf(l)))
                    .collect()
            }
            Node::Internal(n) => {
                // Pieces of about equal child counts, at most `fanout` each, at least two (a
                // batch can leave a node with more than twice its fanout). Cutting from the
                // right: children [at, ..) take pivots [at, ..); pivot at-1 moves up.
                let len = n.children.len();
                let pieces = len.div_ceil(self.geo.fanout).max(2);
                let mut out = Vec::with_capacity(pieces - 1);
                for p in (1..pieces).rev() {
                    let at = len * p / pieces;
                    let mut pivots = n.pivots.split_off(at - 1);
                    let sep = pivots.remove(0);
                    let right = Internal {
                        pivots,
                        children: n.children.split_off(at),
                        segs: n.segs.split_off(at),
                        runs: n.runs.split_off(at),
                    };
                    out.push((sep, Node::Internal(right)));
                }
                out.reverse();
                out
            }
            Node::Run(_) => unreachable!("runs are never split"),
        }
    }

    /// After child j of a resident internal node changed, split or merge it as needed.
    fn fix_child(&mut self, parent: &Pin<Node>, j: usize, child: Pin<Node>) -> Result<()> {
        let (big, small) = {
            let g = child.read();
            (self.too_big(&g), self.too_small(&g))
        };
        if big {
            let pieces = self.split(&child);
            self.store.mark_dirty(&child);
            let leaf = child.read().is_leaf();
            let seg = {
                let mut g = parent.write();
                std::mem::replace(&mut internal_mut(&mut g).segs[j], empty_seg())
            };
            self.buffered -= seg.count as u64;
            for (k, (sep, node)) in pieces.into_iter().enumerate() {
                let id = self.store.create(node)?.id();
                if leaf {
                    self.leaves += 1;
                } else {
                    self.internals += 1;
                }
                let mut g = parent.write();
                let n = internal_mut(&mut g);
                n.pivots.insert(j + k, sep);
                n.children.insert(j + k + 1, id);
                n.segs.insert(j + k + 1, empty_seg());
                n.runs.insert(j + k + 1, Vec::new());
            }
            // Messages bound for the old child go to the pieces they now belong to.
            self.route(parent, seg.data.expect("resident").into_by_seq());
            return Ok(());
        }
        let siblings = internal(&parent.read()).children.len();
        if !small || siblings < 2 {
            return Ok(());
        }
        let (li, ri) = if j > 0 { (j - 1, j) } else { (j, j + 1) };
        let oi = if j > 0 { li } else { ri };
        let other_id = internal(&parent.read()).children[oi];
        let other = self.store.get(other_id)?;
        self.load_all(&other)?;
        // The sibling's runs go into it first: they are older than anything re-routed below.
        let runs = self.take_runs(parent, oi)?;
        if !runs.is_empty() {
            self.apply_to_leaf(&other, runs)?;
        }
        let (left, right) = if j > 0 {
            (other, child)
        } else {
            (child, other)
        };
        let (sep, right_seg) = {
            let mut g = parent.write();
            let n = internal_mut(&mut g);
            let sep = n.pivots.remove(li);
            n.children.remove(ri);
            n.runs.remove(ri);
            (sep, n.segs.remove(ri))
        };
        self.buffered -= right_seg.count as u64;
        {
            let mut lg = left.write();
            let mut rg = right.write();
            match (&mut *lg, &mut *rg) {
                (Node::Leaf(l), Node::Leaf(r)) => {
                    l.pivots.push(sep);
                    let mut rp = std::mem::take(&mut r.pivots);
                    l.pivots.append(&mut rp);
                    l.bases.append(&mut r.bases);
                    self.leaves -= 1;
                }
                (Node::Internal(l), Node::Internal(r)) => {
                    l.pivots.push(sep);
                    let mut rp = std::mem::take(&mut r.pivots);
                    l.pivots.append(&mut rp);
                    l.children.append(&mut r.children);
                    l.segs.append(&mut r.segs);
                    l.runs.append(&mut r.runs);
                    self.internals -= 1;
                }
                _ => {
                    return Err(Error::corruption(
                        self.store.pager().file_name(),
                        self.store.pager().offset_of(parent.id()),
                        format!("children of node {} are at different heights", parent.id()),
                    ))
                }
            }
        }
        let right_id = right.id();
        drop(right);
        self.store.free(right_id);
        self.store.mark_dirty(&left);
        // The merged child's buffer: both segments' messages, re-inserted oldest first.
        let mut msgs = right_seg.data.expect("resident").into_by_seq();
        {
            let mut g = parent.write();
            let n = internal_mut(&mut g);
            let left_seg = std::mem::replace(&mut n.segs[li], empty_seg());
            self.buffered -= left_seg.count as u64;
            msgs.extend(left_seg.data.expect("resident").into_by_seq());
        }
        msgs.sort_by_key(|m| m.seq);
        self.route(parent, msgs);
        // A merge of basements may leave them ragged; a merged node may be too big again.
        let is_leaf = left.read().is_leaf();
        if is_leaf {
            self.apply_to_leaf(&left, Vec::new())?;
        }
        self.fix_child(parent, li, left)
    }

    /// Keep the root in shape: split it when too big, drop it when it has one child.
    fn fix_root(&mut self) -> Result<()> {
        loop {
            let root = self.store.get(self.root)?;
            self.load_all(&root)?;
            let (big, only_child) = {
                let g = root.read();
                let only = match &*g {
                    Node::Internal(n) if n.children.len() == 1 => Some(n.children[0]),
                    _ => None,
                };
                (self.too_big(&g), only)
            };
            if big {
                let mut top = Internal {
                    pivots: Keys::default(),
                    children: vec![root.id()],
                    segs: vec![empty_seg()],
                    runs: vec![Vec::new()],
                };
                let pieces = self.split(&root);
                self.store.mark_dirty(&root);
                let leaf = root.read().is_leaf();
                for (sep, node) in pieces {
                    let id = self.store.create(node)?.id();
                    if leaf {
                        self.leaves += 1;
                    } else {
                        self.internals += 1;
                    }
                    top.pivots.push(sep);
                    top.children.push(id);
                    top.segs.push(empty_seg());
                    top.runs.push(Vec::new());
                }
                drop(root);
                self.root = self.store.create(Node::Internal(top))?.id();
                self.internals += 1;
                self.height += 1;
                continue;
            }
            let Some(child) = only_child else {
                return Ok(());
            };
            let empty = {
                let g = root.read();
                let n = internal(&g);
                n.segs[0].bytes <= EMPTY_SEGMENT && n.runs[0].is_empty()
            };
            if !empty {
                // Into the only child, runs and all: the root is about to go.
                let child = self.store.get(child)?;
                self.drain(&root, 0, child, 1)?;
                continue;
            }
            let old = root.id();
            drop(root);
            self.store.free(old);
            self.internals -= 1;
            self.height -= 1;
            self.root = child;
        }
    }

    /// The sequential-insert fast path: apply `m` straight to its leaf when that is the same as
    /// buffering it (no segment on its path holds any message, so nothing older for its key
    /// waits above), costs no IO (the path's nodes and the leaf are resident and fully loaded)
    /// and appends (its key is past the leaf's last key). Sequential inserts keep the rightmost
    /// path's buffers empty and so always take it; random inserts almost never do. Returns the
    /// message back when the fast path does not apply.
    fn append_to_rightmost(&mut self, m: Msg) -> Result<Option<Msg>> {
        if matches!(m.body, Body::DeleteRange(_)) || !self.store.is_resident(self.root) {
            return Ok(Some(m));
        }
        let mut path: Vec<(Pin<Node>, usize)> = Vec::new();
        let mut pin = self.store.get(self.root)?;
        loop {
            let step = match &*pin.read() {
                Node::Internal(n) => {
                    let i = n.child_for(&m.key);
                    let ok = n.segs[i].count == 0
                        && n.runs[i].is_empty()
                        && self.store.is_resident(n.children[i]);
                    ok.then_some((i, n.children[i]))
                }
                Node::Leaf(l) => {
                    let full = l.bases.iter().all(|b| b.data.is_some());
                    let past = l
                        .bases
                        .last()
                        .and_then(|b| b.data.as_ref())
                        .and_then(|b| b.last_key());
                    let appends = past.is_some_and(|last| m.key.as_slice() > last);
                    if !(full && appends) || path.is_empty() {
                        return Ok(Some(m));
                    }
                    break;
                }
                Node::Run(_) => return Err(self.not_a_node(pin.id())),
            };
            let Some((i, child)) = step else {
                return Ok(Some(m));
            };
            let child = self.store.get(child)?;
            path.push((pin, i));
            pin = child;
        }
        if path
            .iter()
            .any(|(p, _)| (0..p.read().parts()).any(|i| !p.read().loaded(i)))
        {
            return Ok(Some(m));
        }
        self.apply_to_leaf(&pin, vec![m])?;
        // Splits climb the path as far as they go.
        let mut child = pin;
        while let Some((parent, i)) = path.pop() {
            self.fix_child(&parent, i, child)?;
            child = parent;
        }
        Ok(None)
    }

    /// Send one message into the tree.
    fn inject(&mut self, body: Body, key: &[u8]) -> Result<()> {
        let m = Msg {
            key: key.to_vec(),
            seq: self.next_seq,
            body,
        };
        self.next_seq += 1;
        let m = match self.append_to_rightmost(m)? {
            None => return self.fix_root(),
            Some(m) => m,
        };
        let root = self.store.get(self.root)?;
        self.load_all(&root)?;
        let is_leaf = root.read().is_leaf();
        if is_leaf {
            self.apply_to_leaf(&root, vec![m])?;
        } else {
            self.route(&root, vec![m]);
            self.settle(&root, 1)?;
        }
        drop(root);
        self.fix_root()
    }

    fn put_body(&mut self, value: &[u8]) -> Result<Body> {
        Ok(Body::Put(self.make_val(value.to_vec())?))
    }

    // ---- reads -----------------------------------------------------------------------------

    /// Descend toward `at` (a key, or a scan's cursor), letting `collect` take what it needs
    /// from the segment on the path at each level, and from the runs of the child it goes to
    /// (for a point query, `probe`, only those whose filter may hold the key). Returns the
    /// leaf, its fences (the nearest pivots on either side, when `fences` asks for them) and
    /// what was collected.
    #[allow(clippy::type_complexity)]
    fn descend(
        &mut self,
        at: Bound<&[u8]>,
        reverse: bool,
        fences: bool,
        probe: Option<&[u8]>,
        collect: impl Fn(&Segment, &mut Vec<Msg>),
    ) -> Result<(Pin<Node>, Option<Vec<u8>>, Option<Vec<u8>>, Vec<Msg>)> {
        let (mut lo, mut hi): (Option<Vec<u8>>, Option<Vec<u8>>) = (None, None);
        let mut msgs = Vec::new();
        let mut pin = self.store.get(self.root)?;
        loop {
            let step = match &*pin.read() {
                Node::Internal(n) => {
                    let i = match (at, reverse) {
                        (Bound::Unbounded, false) => 0,
                        (Bound::Unbounded, true) => n.children.len() - 1,
                        (Bound::Included(k), _) | (Bound::Excluded(k), false) => n.child_for(k),
                        (Bound::Excluded(k), true) => n.child_below(k),
                    };
                    if fences {
                        let (l, h) = n.bounds(i);
                        if let Some(l) = l {
                            lo = Some(l.to_vec());
                        }
                        if let Some(h) = h {
                            hi = Some(h.to_vec());
                        }
                    }
                    Some((i, n.children[i]))
                }
                Node::Leaf(_) => None,
                Node::Run(_) => return Err(self.not_a_node(pin.id())),
            };
            let Some((i, child)) = step else {
                return Ok((pin, lo, hi, msgs));
            };
            self.load_part(&pin, i)?;
            let runs: Vec<NodeId> = {
                let g = pin.read();
                let n = internal(&g);
                collect(n.segs[i].get(), &mut msgs);
                n.runs[i]
                    .iter()
                    .filter(|r| probe.is_none_or(|k| r.filter.may_hold(k)))
                    .map(|r| r.id)
                    .collect()
            };
            for id in runs {
                // A point query reads the one chunk its key falls in; a scan reads them all.
                let run = self.store.get(id)?;
                let chunks = match (&*run.read(), probe) {
                    (Node::Run(r), Some(k)) => vec![r.chunk_for(k)],
                    (Node::Run(r), None) => (0..r.chunks.len()).collect(),
                    _ => return Err(self.not_a_run(id)),
                };
                for c in chunks {
                    self.load_part(&run, c)?;
                    let g = run.read();
                    let Node::Run(r) = &*g else {
                        unreachable!("checked above")
                    };
                    collect(r.chunks[c].get(), &mut msgs);
                }
            }
            pin = self.store.get(child)?;
        }
    }
}

impl Engine for BeTree {
    fn name(&self) -> &'static str {
        "betree"
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let (leaf, _, _, mut msgs) =
            self.descend(Bound::Included(key), false, false, Some(key), |seg, out| {
                out.extend(seg.lookup(key).cloned())
            })?;
        let i = match &*leaf.read() {
            Node::Leaf(l) => l.basement_for(key),
            _ => unreachable!("descent ends at a leaf"),
        };
        msgs.sort_by_key(|m| m.seq);
        let refs: Vec<&Msg> = msgs.iter().collect();
        if refs.iter().any(|m| !matches!(m.body, Body::Upsert(_))) {
            // A put or a delete above the leaf settles the value: the leaf's entry is not read.
            return self.resolve(key, None, &refs);
        }
        self.load_part(&leaf, i)?;
        let g = leaf.read();
        let Node::Leaf(l) = &*g else {
            unreachable!("descent ends at a leaf")
        };
        let b = l.bases[i].get();
        let base = b.search(key).ok().map(|j| b.val(j));
        self.resolve(key, base, &refs)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let body = self.put_body(value)?;
        self.inject(body, key)
    }

    fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.inject(Body::Delete, key)
    }

    fn upsert(&mut self, key: &[u8], operand: &[u8]) -> Result<()> {
        self.merge_op()?;
        self.inject(Body::Upsert(operand.to_vec()), key)
    }

    /// Random puts and deletes: sorted by key and merged into the root's segments in one pass
    /// per segment (`Segment::insert_run`), or applied to the root while it is still a leaf,
    /// then the root settles once. Anything else goes one operation at a time: upserts and
    /// range deletes, and keys in ascending order, which take the sequential fast path.
    fn apply_batch(&mut self, ops: Vec<Op>) -> Result<()> {
        fn key(op: &Op) -> Option<&[u8]> {
            match op {
                Op::Put { key, .. } | Op::Delete { key } => Some(key),
                _ => None,
            }
        }
        let merge = ops.len() > 1
            && ops.iter().all(|op| key(op).is_some())
            && !ops.windows(2).all(|w| key(&w[0]) < key(&w[1]));
        if !merge {
            return apply_each(self, &ops);
        }
        let mut msgs = Vec::with_capacity(ops.len());
        for op in ops {
            let (key, body) = match op {
                Op::Put { key, value } => (key, Body::Put(self.make_val(value)?)),
                Op::Delete { key } => (key, Body::Delete),
                _ => unreachable!("only puts and deletes are merged"),
            };
            msgs.push(Msg {
                key,
                seq: self.next_seq,
                body,
            });
            self.next_seq += 1;
        }
        // By key, each key's messages oldest first (their batch order). Sorting small (head,
        // position) pairs, keys compared only when heads tie, moves far less than the messages.
        let mut order: Vec<(u64, u32)> = msgs
            .iter()
            .enumerate()
            .map(|(i, m)| (head(&m.key), i as u32))
            .collect();
        order.sort_unstable_by(|&(ha, a), &(hb, b)| {
            ha.cmp(&hb)
                .then_with(|| msgs[a as usize].key.cmp(&msgs[b as usize].key))
                .then(a.cmp(&b))
        });
        let mut slots: Vec<Option<Msg>> = msgs.into_iter().map(Some).collect();
        let msgs: Vec<Msg> = order
            .into_iter()
            .map(|(_, i)| slots[i as usize].take().expect("each position once"))
            .collect();
        let root = self.store.get(self.root)?;
        self.deliver(&root, msgs, 1)?;
        drop(root);
        self.fix_root()
    }

    fn delete_range(&mut self, start: &[u8], end: &[u8]) -> Result<()> {
        if start >= end {
            return Ok(());
        }
        self.inject(Body::DeleteRange(end.to_vec()), start)
    }

    fn scan(
        &mut self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        reverse: bool,
        limit: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<()> {
        let inside = |k: &[u8]| within(k, lo, hi);
        let mut cursor: Bound<Vec<u8>> = if reverse { hi } else { lo }.map(|k| k.to_vec());
        let mut taken = 0;
        loop {
            let at = cursor.as_ref().map(|k| k.as_slice());
            let (leaf, lf, hf, msgs) = self.descend(at, reverse, true, None, |seg, out| {
                out.extend(seg.points().iter().chain(seg.ranges()).cloned())
            })?;
            let in_leaf =
                |k: &[u8]| lf.as_deref().is_none_or(|l| k >= l) && before(k, hf.as_deref());
            let beyond_cursor = |k: &[u8]| match (&cursor, reverse) {
                (Bound::Unbounded, _) => true,
                (Bound::Included(c), false) => k >= c.as_slice(),
                (Bound::Excluded(c), false) => k > c.as_slice(),
                (Bound::Included(c), true) => k <= c.as_slice(),
                (Bound::Excluded(c), true) => k < c.as_slice(),
            };
            let wanted = |k: &[u8]| in_leaf(k) && inside(k) && beyond_cursor(k);
            let n = leaf.read().parts();
            for i in 0..n {
                self.load_part(&leaf, i)?;
            }
            // Base entries and the messages for them, key by key.
            let mut keys: BTreeMap<Vec<u8>, (Option<Val>, Vec<&Msg>)> = BTreeMap::new();
            if let Node::Leaf(l) = &*leaf.read() {
                for b in &l.bases {
                    let b = b.get();
                    for (k, v) in b.iter() {
                        if wanted(k) {
                            keys.insert(k.to_vec(), (Some(v.to_val()), Vec::new()));
                        }
                    }
                }
            }
            let mut ranges = Vec::new();
            for m in &msgs {
                if matches!(m.body, Body::DeleteRange(_)) {
                    ranges.push(m);
                } else if wanted(&m.key) {
                    keys.entry(m.key.clone())
                        .or_insert((None, Vec::new()))
                        .1
                        .push(m);
                }
            }
            let mut page = Vec::new();
            let ordered: Box<dyn Iterator<Item = _>> = if reverse {
                Box::new(keys.into_iter().rev())
            } else {
                Box::new(keys.into_iter())
            };
            for (k, (base, mut events)) in ordered {
                if taken + page.len() == limit {
                    break;
                }
                events.extend(ranges.iter().filter(|r| r.covers(&k)));
                events.sort_by_key(|m| m.seq);
                if let Some(v) = self.resolve(&k, base.as_ref().map(ValRef::from), &events)? {
                    page.push((k, v));
                }
            }
            drop(leaf);
            taken += page.len();
            out.extend(page);
            let fence = if reverse { lf } else { hf };
            match next_cursor(fence, lo, hi, reverse, taken >= limit) {
                Some(next) => cursor = next,
                None => return Ok(()),
            }
        }
    }

    fn begin_checkpoint(&mut self, wal_seq: u64) -> Result<Commit> {
        let meta = self.meta();
        self.store.begin_checkpoint(wal_seq, meta)
    }

    fn finish_checkpoint(&mut self, c: Commit) -> Result<()> {
        self.store.pager_mut().finish_commit(c)
    }

    fn settle(&mut self) -> Result<()> {
        self.store.evict_to_budget()
    }

    fn dirty_bytes(&self) -> u64 {
        self.store.dirty_bytes() as u64
    }

    fn stats(&self) -> EngineStats {
        EngineStats {
            engine: "betree",
            node_size: self.geo.node_size as u64,
            geometry_origin: self.origin.describe(),
            live_keys: self.live_keys,
            live_bytes: self.live_bytes,
            height: self.height,
            internal_nodes: self.internals,
            leaf_nodes: self.leaves,
            blobs: self.blobs,
            detail: vec![
                ("fanout", self.geo.fanout as u64),
                ("basement_size", self.geo.basement as u64),
                ("buffered_messages", self.buffered),
                ("runs", self.runs),
            ],
            ..EngineStats::substrate(&self.store)
        }
    }

    fn check(&mut self) -> Result<CheckReport> {
        let pager = self.store.pager();
        pager.verify_extents()?;
        let mut report = CheckReport::default();
        for id in pager.ids() {
            // Every block's head; partitions are checked as the walk loads them.
            pager.read_head(id)?;
            report.blocks_verified += 1;
        }
        let mut w = Walk {
            report,
            live_bytes: 0,
            buffered: 0,
            runs: 0,
            reachable: HashSet::new(),
            depth: None,
        };
        self.walk(self.root, None, None, 1, &mut w)?;
        let mut report = w.report;
        report.height = self.height;
        report.detail = vec![("runs", w.runs)];
        let file = self.store.pager().file_name().to_string();
        let bad = |what: String| Error::corruption(&file, 0, what);
        if (report.keys, w.live_bytes) != (self.live_keys, self.live_bytes) {
            return Err(bad(format!(
                "leaves hold {} keys / {} bytes, metadata says {} / {}",
                report.keys, w.live_bytes, self.live_keys, self.live_bytes
            )));
        }
        if w.buffered != self.buffered {
            return Err(bad(format!(
                "segments hold {} messages, metadata says {}",
                w.buffered, self.buffered
            )));
        }
        if (
            report.leaf_nodes,
            report.internal_nodes,
            report.blobs,
            w.runs,
        ) != (self.leaves, self.internals, self.blobs, self.runs)
        {
            return Err(bad(format!(
                "found {} leaves, {} internal nodes, {} blobs, {} runs; metadata says {}, {}, \
                 {}, {}",
                report.leaf_nodes,
                report.internal_nodes,
                report.blobs,
                w.runs,
                self.leaves,
                self.internals,
                self.blobs,
                self.runs
            )));
        }
        for id in self.store.pager().ids() {
            if !w.reachable.contains(&id) {
                return Err(bad(format!(
                    "node {id} is in the translation table but unreachable"
                )));
            }
        }
        // What a reader sees: every key with its messages applied, a page at a time.
        report.keys = 0;
        let mut cursor: Option<Vec<u8>> = None;
        loop {
            let mut page = Vec::new();
            let lo = cursor.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
            self.scan(lo, Bound::Unbounded, false, 1024, &mut page)?;
            let Some((last, _)) = page.last() else { break };
            cursor = Some(last.clone());
            report.keys += page.len() as u64;
        }
        Ok(report)
    }

    fn device(&self) -> &Arc<dyn Device> {
        self.store.pager().device()
    }

    fn salvage(&mut self, out: &mut Sink<'_>, lost: &mut Vec<Damage>) -> Result<()> {
        let mut w = salvage::Walk::new(out, lost);
        self.salvage_node(self.root, None, None, Some(1), Vec::new(), &mut w)?;
        self.salvage_below_holes(&mut w)?;
        self.salvage_settled(&mut w)
    }
}

// ---- salvage: the tolerant walk -----------------------------------------------------------

/// A put (`Some` value) or delete (`None`) found by salvage's raw scan, with its key and
/// sequence number.
pub(crate) type RawMessage = (Vec<u8>, u64, Option<Val>);

/// For salvage's raw scan: the puts and deletes buffered in the internal node or run whose
/// intact block (kind `k`, checksummed head `head`) starts at `at` of `data`, from each
/// partition that passes its checksum, as (key, sequence number, the value put or `None`).
/// Upserts and range deletes are left out: without the base they apply to, and without
/// knowing which entries below are older, they cannot be resolved.
pub(crate) fn raw_messages(
    data: &dyn Device,
    at: u64,
    k: u8,
    head: &[u8],
) -> Result<Vec<RawMessage>> {
    // Directory entries: internal (id u64, offset u32, length u32, xxh3 u64, count u32), run
    // (offset u32, length u32, xxh3 u64, count u32).
    let (size, skip) = match k {
        node::KIND_INTERNAL => (28, 8),
        node::KIND_RUN => (20, 0),
        _ => return Ok(Vec::new()),
    };
    let u32_at = |i: usize| {
        head.get(i..i + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
    };
    let Some(n) = u32_at(0) else {
        return Ok(Vec::new());
    };
    let len = data.len()?;
    let mut out = Vec::new();
    for i in 0..n as usize {
        let e = 4 + size * i + skip;
        let (Some(off), Some(plen), Some(sum)) = (
            u32_at(e),
            u32_at(e + 4),
            head.get(e + 8..e + 16)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap())),
        ) else {
            break;
        };
        let (off, plen) = (off as u64, plen as u64);
        if at + off + plen > len {
            continue;
        }
        let mut part = vec![0u8; plen as usize];
        data.read_at(&mut part, at + off)?;
        if xxhash_rust::xxh3::xxh3_64(&part) != sum {
            continue;
        }
        let Ok(seg) = Segment::decode(&part) else {
            continue;
        };
        for m in seg.points() {
            match &m.body {
                Body::Put(v) => out.push((m.key.clone(), m.seq, Some(v.clone()))),
                Body::Delete => out.push((m.key.clone(), m.seq, None)),
                _ => {}
            }
        }
    }
    Ok(out)
}

/// Whether message `m` bears on keys in [lo, hi).
fn touches(m: &Msg, lo: Option<&[u8]>, hi: Option<&[u8]>) -> bool {
    match &m.body {
        Body::DeleteRange(end) => {
            hi.is_none_or(|h| m.key.as_slice() < h) && lo.is_none_or(|l| end.as_slice() > l)
        }
        _ => salvage::in_range(&m.key, lo, hi),
    }
}

fn bearing(msgs: &[Msg], lo: Option<&[u8]>, hi: Option<&[u8]>) -> Vec<Msg> {
    msgs.iter()
        .filter(|m| touches(m, lo, hi))
        .cloned()
        .collect()
}

/// A salvage walk of the Bε-tree: its holes keep the messages bound for them from above.
type SalvageWalk<'a> = salvage::Walk<'a, Vec<Msg>>;

/// Which keys `salvage_keys` copies out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Take {
    /// The entries and every key a message names.
    All,
    /// The entries only (with their messages applied).
    Entries,
    /// The keys some put or delete among the messages settles, that were not copied already.
    Settled,
}

impl BeTree {
    /// Copy out the readable keys of node `id`, whose keys lie in [lo, hi), at `depth` (the
    /// root's is 1; `None` for a node found below a damaged one), with `msgs` the messages
    /// bound for it from above. A segment or run that does not read is left out (the keys below
    /// are copied as they stand beneath it: stale, perhaps); a node or basement that does not
    /// read becomes a hole, looked for later below it, its settled keys copied from `msgs`.
    fn salvage_node(
        &mut self,
        id: NodeId,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        depth: Option<u32>,
        msgs: Vec<Msg>,
        w: &mut SalvageWalk<'_>,
    ) -> Result<()> {
        let what = match depth {
            Some(d) if d == self.height => "leaf",
            Some(_) => "internal node",
            None => "node",
        };
        if !w.seen.insert(id) {
            let e = self.corrupt(id, format!("node {id} reached twice in one walk"));
            w.lose(Damage::new(what, Some(id), e).keys(lo, hi));
            return Ok(());
        }
        let pin = match self.store.get(id) {
            Ok(pin) => pin,
            Err(e) => {
                w.hole(Damage::new(what, Some(id), e).keys(lo, hi), msgs);
                return Ok(());
            }
        };
        let shape = match &*pin.read() {
            Node::Run(_) => None,
            n => Some(n.is_leaf()),
        };
        let wrong = match (shape, depth) {
            (None, _) => Some("a run where a tree node was expected".to_string()),
            (Some(leaf), Some(d)) if leaf != (d == self.height) => {
                Some(format!("at depth {d} of a tree of height {}", self.height))
            }
            _ => None,
        };
        if let Some(why) = wrong {
            let e = self.corrupt(id, format!("node {id}: {why}"));
            w.hole(Damage::new(what, Some(id), e).keys(lo, hi), msgs);
            return Ok(());
        }
        if shape == Some(false) {
            let (children, pivots, runs) = {
                let g = pin.read();
                let n = internal(&g);
                (n.children.clone(), n.pivots.clone(), n.runs.clone())
            };
            for (i, &c) in children.iter().enumerate() {
                let clo = (i > 0).then(|| pivots.get(i - 1));
                let chi = (i < pivots.len()).then(|| pivots.get(i));
                let (clo, chi) = salvage::narrow(lo, hi, clo, chi);
                let mut cm = bearing(&msgs, clo, chi);
                for r in &runs[i] {
                    self.salvage_run(r.id, clo, chi, &mut cm, w)?;
                }
                match self.load_part(&pin, i) {
                    Ok(()) => {
                        let g = pin.read();
                        let seg = internal(&g).segs[i].get();
                        let mine = seg.points().iter().chain(seg.ranges());
                        cm.extend(mine.filter(|m| touches(m, clo, chi)).cloned());
                    }
                    Err(e) => {
                        let d = Damage::new("segment", Some(id), e).keys(clo, chi);
                        w.lose(d.effect(Effect::Stale));
                    }
                }
                self.salvage_node(c, clo, chi, depth.map(|d| d + 1), cm, w)?;
            }
            return Ok(());
        }
        let (n, pivots) = match &*pin.read() {
            Node::Leaf(l) => (l.bases.len(), l.pivots.clone()),
            _ => unreachable!("shape checked above"),
        };
        for b in 0..n {
            let blo = (b > 0).then(|| pivots.get(b - 1));
            let bhi = (b < pivots.len()).then(|| pivots.get(b));
            let (blo, bhi) = salvage::narrow(lo, hi, blo, bhi);
            let bm = bearing(&msgs, blo, bhi);
            if let Err(e) = self.load_part(&pin, b) {
                w.hole(Damage::new("basement", Some(id), e).keys(blo, bhi), bm);
                continue;
            }
            let bases: Vec<(Vec<u8>, Val)> = match &*pin.read() {
                Node::Leaf(l) => l.bases[b]
                    .get()
                    .iter()
                    // Outside its parent's range, an entry is not this checkpoint's.
                    .filter(|(k, _)| salvage::in_range(k, blo, bhi))
                    .map(|(k, v)| (k.to_vec(), v.to_val()))
                    .collect(),
                _ => unreachable!("shape checked above"),
            };
            // Below a hole, where the node's true range is unknown, only its own entries:
            // a key only a message names is left to `salvage_settled`.
            let which = if depth.is_some() {
                Take::All
            } else {
                Take::Entries
            };
            self.salvage_keys(bases, &bm, which, w)?;
        }
        drop(pin);
        self.store.evict_to_budget()
    }

    /// Copy out keys, the messages bearing on each applied to its leaf entry (from `bases`,
    /// sorted), as `which` says.
    fn salvage_keys(
        &mut self,
        bases: Vec<(Vec<u8>, Val)>,
        msgs: &[Msg],
        which: Take,
        w: &mut SalvageWalk<'_>,
    ) -> Result<()> {
        let mut keys: BTreeMap<Vec<u8>, (Option<Val>, Vec<&Msg>)> = bases
            .into_iter()
            .map(|(k, v)| (k, (Some(v), Vec::new())))
            .collect();
        let mut ranges = Vec::new();
        for m in msgs {
            if m.is_range() {
                ranges.push(m);
            } else if which == Take::Entries {
                if let Some(e) = keys.get_mut(&m.key) {
                    e.1.push(m);
                }
            } else {
                keys.entry(m.key.clone())
                    .or_insert((None, Vec::new()))
                    .1
                    .push(m);
            }
        }
        for (k, (base, mut events)) in keys {
            events.extend(ranges.iter().filter(|r| r.covers(&k)));
            events.sort_by_key(|m| m.seq);
            if which == Take::Settled {
                let settles = events.iter().any(|m| !matches!(m.body, Body::Upsert(_)));
                if !settles || w.found.as_ref().is_some_and(|f| f.contains(&k)) {
                    continue;
                }
            }
            match self.resolve(&k, base.as_ref().map(ValRef::from), &events) {
                Ok(Some(v)) => w.emit(&k, &v)?,
                Ok(None) => {}
                Err(e) => {
                    w.lose(Damage::new("value", None, e).key(&k));
                }
            }
        }
        Ok(())
    }

    /// Add to `into` the messages of run `id` that bear on [lo, hi); a run or chunk that does
    /// not read is reported (the keys below it are still copied: stale, perhaps).
    fn salvage_run(
        &mut self,
        id: NodeId,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        into: &mut Vec<Msg>,
        w: &mut SalvageWalk<'_>,
    ) -> Result<()> {
        w.seen.insert(id);
        let pin = match self.store.get(id) {
            Ok(pin) => pin,
            Err(e) => {
                w.lose(
                    Damage::new("run", Some(id), e)
                        .keys(lo, hi)
                        .effect(Effect::Stale),
                );
                return Ok(());
            }
        };
        let pivots = match &*pin.read() {
            Node::Run(r) => r.pivots.clone(),
            _ => {
                let d = Damage::new("run", Some(id), self.not_a_run(id)).keys(lo, hi);
                w.lose(d.effect(Effect::Stale));
                return Ok(());
            }
        };
        for c in 0..=pivots.len() {
            let clo = (c > 0).then(|| pivots.get(c - 1));
            let chi = (c < pivots.len()).then(|| pivots.get(c));
            let (clo, chi) = salvage::narrow(lo, hi, clo, chi);
            if let (Some(a), Some(b)) = (clo, chi) {
                if a >= b {
                    continue; // the chunk holds nothing for [lo, hi)
                }
            }
            match self.load_part(&pin, c) {
                Ok(()) => {
                    let g = pin.read();
                    let Node::Run(r) = &*g else {
                        unreachable!("checked above")
                    };
                    let seg = r.chunks[c].get();
                    let mine = seg.points().iter().chain(seg.ranges());
                    into.extend(mine.filter(|m| touches(m, lo, hi)).cloned());
                }
                Err(e) => {
                    let d = Damage::new("run chunk", Some(id), e).keys(clo, chi);
                    w.lose(d.effect(Effect::Stale));
                }
            }
        }
        Ok(())
    }

    /// The nodes of the table the walk never reached lie below damaged nodes. Runs among them
    /// give their messages to the holes their keys fall in; then each subtree whose top was not
    /// reached either is walked within the hole its keys fall in, with the hole's messages.
    fn salvage_below_holes(&mut self, w: &mut SalvageWalk<'_>) -> Result<()> {
        if w.holes.is_empty() {
            return Ok(());
        }
        let unreached: Vec<NodeId> = self
            .store
            .pager()
            .ids()
            .into_iter()
            .filter(|id| !w.seen.contains(id))
            .collect();
        let mut tops = Vec::new();
        let mut below = HashSet::new();
        for id in unreached {
            // The kind byte, unchecked: blobs are read through what refers to them, and
            // loading a node checks everything.
            let k = self.store.pager().read_part(id, 20, 1).ok().map(|b| b[0]);
            match k {
                Some(node::KIND_RUN) => {
                    let (mut msgs, first) = (Vec::new(), w.lost.len());
                    self.salvage_run(id, None, None, &mut msgs, w)?;
                    for d in &mut w.lost[first..] {
                        d.what = "run below a damaged node";
                        d.range = None;
                    }
                    for m in msgs {
                        for h in &mut w.holes {
                            let (lo, hi) = (h.range.lo.as_deref(), h.range.hi.as_deref());
                            if touches(&m, lo, hi) {
                                h.extra.push(m.clone());
                            }
                        }
                    }
                }
                Some(node::KIND_LEAF | node::KIND_INTERNAL) => match self.store.get(id) {
                    Ok(pin) => {
                        let key = match &*pin.read() {
                            Node::Internal(n) => {
                                below.extend(n.children.iter().copied());
                                n.pivots.first().map(<[u8]>::to_vec)
                            }
                            Node::Leaf(l) => l.pivots.first().map(<[u8]>::to_vec),
                            Node::Run(_) => None,
                        };
                        let key = match key {
                            Some(k) => Some(k),
                            // A leaf of one basement: its first entry.
                            None if pin.read().is_leaf() => {
                                self.load_part(&pin, 0)
                                    .ok()
                                    .and_then(|_| match &*pin.read() {
                                        Node::Leaf(l) => {
                                            l.bases[0].get().first_key().map(<[u8]>::to_vec)
                                        }
                                        _ => None,
                                    })
                            }
                            None => None,
                        };
                        tops.push((id, key));
                    }
                    Err(e) => {
                        w.seen.insert(id);
                        w.lose(Damage::new("node below a damaged node", Some(id), e));
                    }
                },
                _ => {}
            }
        }
        w.found = Some(HashSet::new());
        for (id, key) in tops {
            if below.contains(&id) {
                continue;
            }
            // An empty node holds nothing; a node under no hole is no part of this checkpoint.
            let Some(h) = key.and_then(|k| w.hole_of(&k)) else {
                continue;
            };
            let range = w.holes[h].range.clone();
            let msgs = w.holes[h].extra.clone();
            let before = w.copied;
            self.salvage_node(id, range.lo.as_deref(), range.hi.as_deref(), None, msgs, w)?;
            let d = &mut w.lost[w.holes[h].damage];
            d.recovered += w.copied - before;
            if d.what == "internal node" && d.recovered > 0 {
                // Found below it, without the messages its own segments buffered.
                d.effect = Effect::Stale;
            }
        }
        Ok(())
    }

    /// Last, the keys in each hole that the messages bound for it settle (a put or a delete
    /// above the damage decides the value without the entry below), so that they overwrite
    /// whatever older value was found below the hole.
    fn salvage_settled(&mut self, w: &mut SalvageWalk<'_>) -> Result<()> {
        if w.found.is_none() {
            w.found = Some(HashSet::new());
        }
        for h in 0..w.holes.len() {
            let msgs = std::mem::take(&mut w.holes[h].extra);
            let before = w.copied;
            self.salvage_keys(Vec::new(), &msgs, Take::Settled, w)?;
            let d = w.holes[h].damage;
            w.lost[d].recovered += w.copied - before;
        }
        Ok(())
    }
}

impl BeTree {
    /// Every message of run `id` lies in its chunk's key range.
    fn check_run_chunks(&mut self, id: NodeId) -> Result<()> {
        let pin = self.store.get(id)?;
        self.load_all(&pin)?;
        let g = pin.read();
        let Node::Run(run) = &*g else {
            return Err(self.not_a_run(id));
        };
        for (i, c) in run.chunks.iter().enumerate() {
            let (lo, hi) = (
                (i > 0).then(|| run.pivots.get(i - 1)),
                (i < run.pivots.len()).then(|| run.pivots.get(i)),
            );
            let inside = |k: &[u8]| lo.is_none_or(|l| k >= l) && before(k, hi);
            if !c.get().points().iter().all(|m| inside(&m.key)) {
                let what = format!("run {id}: a message of chunk {i} is outside its range");
                return Err(self.corrupt(id, what));
            }
        }
        Ok(())
    }
}

struct Walk {
    report: CheckReport,
    live_bytes: u64,
    buffered: u64,
    runs: u64,
    reachable: HashSet<NodeId>,
    depth: Option<u32>,
}

impl BeTree {
    fn walk(
        &mut self,
        id: NodeId,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        depth: u32,
        w: &mut Walk,
    ) -> Result<()> {
        let file = self.store.pager().file_name().to_string();
        let at = self.store.pager().offset_of(id);
        let bad = |what: String| Error::corruption(&file, at, format!("node {id}: {what}"));
        let inside = |k: &[u8]| lo.is_none_or(|l| k >= l) && before(k, hi);
        w.reachable.insert(id);
        let pin = self.store.get(id)?;
        self.load_all(&pin)?;
        let node = pin.read().clone();
        drop(pin);
        let pivots = match &node {
            Node::Internal(n) => &n.pivots,
            Node::Leaf(l) => &l.pivots,
            Node::Run(_) => return Err(bad("a run where a tree node was expected".into())),
        };
        if pivots
            .iter()
            .zip(pivots.iter().skip(1))
            .any(|(a, b)| a >= b)
            || !pivots.iter().all(inside)
        {
            return Err(bad("pivots out of order or outside the node's range".into()));
        }
        match node {
            Node::Internal(n) => {
                if n.children.len() < 2 || n.children.len() > self.geo.fanout {
                    return Err(bad(format!(
                        "{} children, fanout {}",
                        n.children.len(),
                        self.geo.fanout
                    )));
                }
                w.report.internal_nodes += 1;
                for (i, &c) in n.children.iter().enumerate() {
                    let (l, h) = n.bounds(i);
                    let (cl, ch) = (l.or(lo), h.or(hi));
                    let seg = n.segs[i].get();
                    if !n.runs[i].is_empty() && depth + 1 != self.height {
                        return Err(bad(format!("child {c} has runs but is not a leaf")));
                    }
                    // Runs oldest first, then the segment: each strictly newer than the last.
                    let mut layers = Vec::with_capacity(n.runs[i].len() + 1);
                    for r in &n.runs[i] {
                        w.reachable.insert(r.id);
                        w.runs += 1;
                        self.check_run_chunks(r.id)?;
                        let run = self.load_run(r.id)?;
                        let keys_pass = run
                            .iter()
                            .all(|m| m.is_range() || r.filter.may_hold(&m.key));
                        if run.len() != r.count as usize || !keys_pass {
                            return Err(bad(format!(
                                "run {} of child {c} does not match its count or filter",
                                r.id
                            )));
                        }
                        layers.push(run);
                    }
                    layers.push(seg.points().iter().chain(seg.ranges()).cloned().collect());
                    let mut newest = 0;
                    for layer in &layers {
                        if layer.iter().any(|m| m.seq <= newest) {
                            return Err(bad(format!(
                                "messages for child {c} are not newer than the runs before them"
                            )));
                        }
                        newest = layer.iter().map(|m| m.seq).max().unwrap_or(newest);
                    }
                    let fits = |k: &[u8]| cl.is_none_or(|l| k >= l) && before(k, ch);
                    let msgs = layers.iter().flatten();
                    w.buffered += msgs.clone().count() as u64;
                    for m in msgs {
                        let end_ok = match &m.body {
                            Body::DeleteRange(e) => {
                                ch.is_none_or(|h| e.as_slice() <= h) && m.key < *e
                            }
                            _ => true,
                        };
                        if !fits(&m.key) || !end_ok {
                            return Err(bad(format!(
                                "a message in segment {i} is outside child {c}'s range"
                            )));
                        }
                        if let Body::Put(Val::Blob { id, .. }) = &m.body {
                            w.reachable.insert(*id);
                            w.report.blobs += 1;
                        }
                    }
                    self.walk(c, cl, ch, depth + 1, w)?;
                }
            }
            Node::Leaf(l) => {
                if *w.depth.get_or_insert(depth) != depth || depth != self.height {
                    return Err(bad(format!(
                        "leaf at depth {depth}, tree height {}",
                        self.height
                    )));
                }
                w.report.leaf_nodes += 1;
                for (i, b) in l.bases.iter().enumerate() {
                    let b = b.get();
                    let (bl, bh) = (
                        (i > 0).then(|| l.pivots.get(i - 1)),
                        (i < l.pivots.len()).then(|| l.pivots.get(i)),
                    );
                    for (k, v) in b.iter() {
                        if !inside(k) || bl.is_some_and(|x| k < x) || !before(k, bh) {
                            return Err(bad(format!(
                                "an entry of basement {i} is outside its range"
                            )));
                        }
                        w.report.keys += 1;
                        w.live_bytes += (k.len() + v.logical_len()) as u64;
                        if let ValRef::Blob { id, .. } = v {
                            w.reachable.insert(id);
                            w.report.blobs += 1;
                            self.read_ref(v)?;
                        }
                    }
                }
            }
            Node::Run(_) => unreachable!("refused above"),
        }
        Ok(())
    }
}
