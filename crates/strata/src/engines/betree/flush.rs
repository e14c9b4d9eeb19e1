//! The flusher: an internal node over its limits empties its heaviest segment into the child,
//! by spilling it as a run beside a leaf that is not in memory (within the run budget,
//! `policy`), by merging it with the leaf's newest small runs into one run, or by draining it,
//! with the child's runs, into the child.
//!
//! Invariant: a child's runs are ordered oldest first, and key by key every message of a run is
//! older than the messages of the runs after it and of the segment (a range delete counts for
//! every key it covers); a merge replaces the newest runs, so the order holds. Layers are not
//! ordered as a whole: a spill may keep a segment's last keys back (`spill_fitted`), only when
//! the segment holds no range delete, and those keys' messages go down whole with a later
//! flush, after their older ones.

use super::*;

impl BeTree {
    /// Flush from a resident internal node at `depth` (the root's is 1) while it is over its
    /// limits, heaviest segment first.
    pub(super) fn relieve(&mut self, pin: &Pin<Block>, depth: u32) -> Result<()> {
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
    pub(super) fn flush(&mut self, parent: &Pin<Block>, j: usize, depth: u32) -> Result<()> {
        let child_id = internal(&parent.read()).children[j];
        let (sizes, incoming) = {
            let g = parent.read();
            let n = internal(&g);
            let sizes: Vec<u32> = n.runs[j].iter().map(|r| r.bytes).collect();
            (sizes, n.segs[j].bytes)
        };
        if self.draining(child_id) {
            // Its leaf changes only by the drain's install (`drainer`).
            if drainer::held_room(&sizes, incoming, self.geo.node_size) {
                return self.spill_fitted(parent, j);
            }
            return self.await_drain(parent, j);
        }
        if depth + 1 == self.height && !self.fully_resident(child_id)? {
            match policy::plan(&sizes, incoming, self.geo.node_size) {
                policy::Flush::Spill => return self.spill_fitted(parent, j),
                policy::Flush::Merge(from) if self.can_offload() => {
                    return self.offload_merge(parent, j, from)
                }
                policy::Flush::Merge(from) => return self.merge_runs(parent, j, from),
                // The slow drains: a leaf read and rewritten with up to three node sizes of
                // messages. A resident leaf's drain is one flush's worth, inline.
                policy::Flush::Drain if self.can_offload() => {
                    return self.offload(parent, j, depth)
                }
                policy::Flush::Drain => {}
            }
        }
        let child = self.store.get(child_id)?;
        self.drain(parent, j, child, depth)
    }

    /// Whether node `id` is in the cache with every partition (no IO).
    pub(super) fn fully_resident(&mut self, id: NodeId) -> Result<bool> {
        if !self.store.is_resident(id) {
            return Ok(false);
        }
        let pin = self.store.get(id)?;
        let g = pin.read();
        Ok((0..g.parts()).all(|i| g.loaded(i)))
    }

    /// Write segment j out as a run of child j's, leaving the child as it is.
    pub(super) fn spill(&mut self, parent: &Pin<Block>, j: usize) -> Result<()> {
        let seg = {
            let mut g = parent.write();
            std::mem::replace(&mut internal_mut(&mut g).segs[j], empty_seg())
        };
        let seg = seg.data.expect("dirty nodes are resident");
        self.add_run(parent, j, seg)
    }

    /// `spill`, filling the run's pages (`policy::fit_run`): the keys past the last page
    /// boundary stay in segment j when they would take a page for less than half of it.
    /// Their messages go down whole with a later flush, each key's after its older ones.
    pub(super) fn spill_fitted(&mut self, parent: &Pin<Block>, j: usize) -> Result<()> {
        let mut seg = {
            let mut g = parent.write();
            let s = std::mem::replace(&mut internal_mut(&mut g).segs[j], empty_seg());
            s.data.expect("dirty nodes are resident")
        };
        let key = seg.points().iter().map(|m| m.key.len()).max().unwrap_or(0);
        let overhead = Run::overhead(seg.bytes(), self.geo.basement, key);
        if let Some(rest) = policy::fit_run(seg.bytes(), overhead).and_then(|b| seg.split_tail(b)) {
            let mut g = parent.write();
            let n = internal_mut(&mut g);
            n.segs[j] = Part::new(rest, 0, 0);
            n.refresh(j);
        }
        self.add_run(parent, j, seg)
    }

    /// Append `seg` to child j's runs as a new run (the newest).
    fn add_run(&mut self, parent: &Pin<Block>, j: usize, seg: Segment) -> Result<()> {
        let filter = run_filter(&seg);
        let r = self.new_run(seg, filter)?;
        internal_mut(&mut parent.write()).runs[j].push(r);
        self.store.mark_dirty(parent);
        Ok(())
    }

    /// A new run block holding `seg`, and the parent's reference to it.
    pub(super) fn new_run(&mut self, seg: Segment, filter: Filter) -> Result<RunRef> {
        let (bytes, count) = (seg.bytes() as u32, seg.len() as u32);
        let id = self
            .store
            .create(Block::Run(Run::new(seg, self.geo.basement)))?
            .id();
        self.runs += 1;
        Ok(RunRef::new(id, bytes, count, filter))
    }

    /// Merge child j's runs from index `from` on and segment j into one run in their place
    /// (`policy::Flush::Merge`). Messages made obsolete by newer ones for the same key are
    /// dropped, as a segment drops them; the leaf is not touched.
    pub(super) fn merge_runs(&mut self, parent: &Pin<Block>, j: usize, from: usize) -> Result<()> {
        // Read every input before changing anything, so a failed read leaves the tree whole.
        let ids: Vec<NodeId> = internal(&parent.read()).runs[j][from..]
            .iter()
            .map(|r| r.id)
            .collect();
        let mut msgs = Vec::new();
        for &id in &ids {
            msgs.extend(self.take_in_run(id)?);
        }
        let seg = {
            let mut g = parent.write();
            let n = internal_mut(&mut g);
            n.runs[j].truncate(from);
            std::mem::replace(&mut n.segs[j], empty_seg())
        };
        for id in ids {
            self.store.free(id);
            self.runs -= 1;
        }
        msgs.extend(seg.data.expect("dirty nodes are resident").into_by_seq());
        let before = msgs.len();
        let merge = self.merge.clone();
        let (merged, dropped) = merge_msgs(msgs, merge.as_deref(), &mut self.scratch);
        self.buffered -= (before - merged.len()) as u64;
        self.run_merges += 1;
        self.free_msgs(dropped);
        self.add_run(parent, j, merged)
    }

    /// Take child j's runs out of a resident internal node: their messages, oldest first. The
    /// runs are freed.
    pub(super) fn take_runs(&mut self, parent: &Pin<Block>, j: usize) -> Result<Vec<Msg>> {
        let refs = std::mem::take(&mut internal_mut(&mut parent.write()).runs[j]);
        if refs.is_empty() {
            return Ok(Vec::new());
        }
        self.store.mark_dirty(parent);
        let mut msgs = Vec::new();
        for r in refs {
            let run = self.take_in_run(r.id)?;
            self.store.free(r.id);
            self.runs -= 1;
            self.buffered -= run.len() as u64;
            msgs.extend(run);
        }
        Ok(msgs)
    }

    /// The messages, oldest first, of a run about to be freed: copied from the cache if it holds
    /// the run whole, else read from the device without passing through the cache (which
    /// would decode it there, only to copy it out and drop it).
    pub(super) fn take_in_run(&mut self, id: NodeId) -> Result<Vec<Msg>> {
        if self.fully_resident(id)? {
            return self.load_run(id);
        }
        let ext = self
            .store
            .pager()
            .extent(id)
            .ok_or_else(|| self.corrupt(id, format!("run {id} is not in the pager's table")))?;
        drainer::read_run(&**self.store.pager().device(), id, ext)
    }

    /// A run's messages, oldest first (a copy: a run is never changed, and may stay cached).
    pub(super) fn load_run(&mut self, id: NodeId) -> Result<Vec<Msg>> {
        let pin = self.store.get(id)?;
        if !matches!(&*pin.read(), Block::Run(_)) {
            return Err(self.not_a_run(id));
        }
        self.load_all(&pin)?;
        let g = pin.read();
        let Block::Run(run) = &*g else {
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

    /// Move child j's runs and segment j of a resident internal node into child j (pinned),
    /// then fix the child's shape.
    pub(super) fn drain(
        &mut self,
        parent: &Pin<Block>,
        j: usize,
        child: Pin<Block>,
        depth: u32,
    ) -> Result<()> {
        if child.read().is_leaf() {
            self.drains.inline += 1;
        }
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
    /// into its segments, which are then relieved (flushed while over their limits).
    pub(super) fn deliver(&mut self, pin: &Pin<Block>, msgs: Vec<Msg>, depth: u32) -> Result<()> {
        self.load_all(pin)?;
        let is_leaf = pin.read().is_leaf();
        if is_leaf {
            self.apply_to_leaf(pin, msgs)
        } else {
            self.route(pin, msgs);
            self.relieve(pin, depth)
        }
    }
}

/// Messages of runs, oldest first, merged into one segment: a key's older messages that a newer
/// one makes obsolete are dropped (and returned, for their blobs), as a segment drops them.
/// With puts and deletes only, one sort and merge; `merge` combines upserts.
pub(super) fn merge_msgs(
    mut msgs: Vec<Msg>,
    merge: Option<&dyn MergeOperator>,
    scratch: &mut Scratch,
) -> (Segment, Vec<Msg>) {
    let mut merged = Segment::default();
    let dropped = if msgs
        .iter()
        .all(|m| matches!(m.body, Body::Put(_) | Body::Delete))
    {
        // By key, each key's oldest first (a stable sort keeps the order by age within a key).
        msgs.sort_by(|a, b| a.key.cmp(&b.key));
        merged.insert_run(msgs, scratch)
    } else {
        let mut dropped = Vec::new();
        for m in msgs {
            dropped.extend(merged.insert(m, merge));
        }
        dropped
    };
    (merged, dropped)
}

/// A run's filter: its point keys', or one that lets every key through when it holds range
/// deletes (which cover keys they do not name).
pub(super) fn run_filter(seg: &Segment) -> Filter {
    if seg.ranges().is_empty() {
        Filter::build_bits(
            seg.points().iter().map(|m| m.key.as_slice()),
            policy::RUN_FILTER_BITS,
        )
    } else {
        Filter::any()
    }
}
