//! Reading the Bε-tree: the descent from the root to the leaf that holds a key, collecting the
//! messages buffered for it on the way, and their resolution against the leaf's entry (newest
//! last), so that an answer is exact however much is still buffered.

use super::node::{read_part, run_read_whole_max, RunDir};
use super::*;
use crate::kv::msg::lookup_encoded;

impl BeTree {
    /// The value of `key` after applying `events` (seq order) to `base`: read-only.
    pub(super) fn resolve(
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

    // ---- reads -----------------------------------------------------------------------------

    /// Keep run k of child i's head in the resident internal node `pin` (`RunRef::dir`),
    /// charged to it. `run` must be that run, read from disk.
    fn keep_run_head(&self, pin: &Pin<Block>, i: usize, k: usize, run: &Pin<Block>) {
        let dir = match &*run.read() {
            Block::Run(r) if r.chunks.iter().all(|c| c.loc.is_some()) => Arc::new(r.head_only()),
            _ => return,
        };
        // Under the node's write lock, as `fetch_part` charges partitions.
        let g = pin.write();
        let r = &internal(&g).runs[i][k];
        if r.dir.set(RunDir::new(dir)).is_err() {
            return;
        }
        self.store.recharge_by(pin, 0, r.dir_charge());
        debug_assert_eq!(
            self.store.charge_of(pin.id()),
            Some(StoredNode::charge(&*g))
        );
    }

    /// Descend toward `at` (a key, or a scan's cursor), letting `collect` take what it needs
    /// from the segment on the path at each level, and from the runs of the child it goes to
    /// (for a point query, `probe`, only those whose filter may hold the key, and segments
    /// held raw are searched in place for the key instead of being decoded). Returns the
    /// leaf, its fences (the nearest pivots on either side, when `fences` asks for them) and
    /// what was collected.
    ///
    /// A point query stops as soon as what it collected settles its key (a put, a delete or a
    /// range delete: everything below is older): it probes a child's runs newest first and
    /// skips the older ones, and the levels below, leaf included; then there is no leaf.
    #[allow(clippy::type_complexity)]
    pub(super) fn descend(
        &self,
        at: Bound<&[u8]>,
        reverse: bool,
        fences: bool,
        probe: Option<&[u8]>,
        collect: impl Fn(&Segment, &mut Vec<Msg>),
    ) -> Result<(
        Option<Pin<Block>>,
        Option<Vec<u8>>,
        Option<Vec<u8>>,
        Vec<Msg>,
    )> {
        let (mut lo, mut hi): (Option<Vec<u8>>, Option<Vec<u8>>) = (None, None);
        let mut msgs = Vec::new();
        let hashed = probe.map(Filter::hash);
        let mut pin = self.store.get_shared(self.root)?;
        loop {
            let step = match &*pin.read() {
                Block::Internal(n) => {
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
                Block::Leaf(_) => None,
                Block::Run(_) => return Err(self.not_a_node(pin.id())),
            };
            let Some((i, child)) = step else {
                return Ok((Some(pin), lo, hi, msgs));
            };
            let settled = |msgs: &[Msg]| {
                probe.is_some() && msgs.iter().any(|m| !matches!(m.body, Body::Upsert(_)))
            };
            self.fetch_part(&pin, i, probe.is_none())?;
            let whole_max = run_read_whole_max(self.geo.basement as u64);
            let runs: Vec<(usize, NodeId, bool, Option<Arc<Run>>)> = {
                let g = pin.read();
                let n = internal(&g);
                take(&n.segs[i], probe, &collect, &mut msgs)
                    .map_err(|what| self.corrupt(pin.id(), format!("segment {i}: {what}")))?;
                if settled(&msgs) {
                    return Ok((None, lo, hi, msgs));
                }
                let all = n.runs[i].iter().enumerate().map(|(k, r)| {
                    let large = r.bytes as u64 > whole_max;
                    (k, r, large)
                });
                // A scan takes every run oldest first; a point query probes newest first.
                let picked: Box<dyn Iterator<Item = _>> = match hashed {
                    None => Box::new(all),
                    Some(h) => {
                        Box::new(all.rev().filter(move |(_, r, _)| r.filter.may_hold_hash(h)))
                    }
                };
                picked
                    .map(|(k, r, large)| (k, r.id, large, r.dir.get().map(|d| d.run.clone())))
                    .collect()
            };
            for (k, id, large, dir) in runs {
                if settled(&msgs) {
                    return Ok((None, lo, hi, msgs));
                }
                if let (Some(key), Some(dir)) = (probe, &dir) {
                    if !self.store.is_resident(id) {
                        // The one chunk, read and walked once, not kept: a head-only copy of
                        // the run made for the pool, and the chunk indexed there, cost a point
                        // query more than the read (the OS page cache still holds the bytes).
                        let c = dir.chunk_for(key);
                        let loc = dir.chunks[c].loc.expect("a kept head is of a written run");
                        let bytes = read_part(self.store.pager(), id, c, loc)?;
                        msgs.extend(
                            lookup_encoded(&bytes, key, dir.enc)
                                .map_err(|what| self.corrupt(id, format!("chunk {c}: {what}")))?,
                        );
                        continue;
                    }
                }
                // A point query reads the one chunk its key falls in; a scan reads them all. Of
                // a large run (`run_read_whole_max`) a point query reads the head only if its
                // parent has not kept it yet, and then keeps it.
                let run = match (probe, dir) {
                    (Some(_), Some(dir)) => self
                        .store
                        .get_or_make_shared(id, || Block::Run(dir.head_only()))?,
                    (Some(_), None) if large => {
                        let run = self.store.get_head_shared(id)?;
                        self.keep_run_head(&pin, i, k, &run);
                        run
                    }
                    _ => self.store.get_shared(id)?,
                };
                let chunks = match (&*run.read(), probe) {
                    (Block::Run(r), Some(k)) => vec![r.chunk_for(k)],
                    (Block::Run(r), None) => (0..r.chunks.len()).collect(),
                    _ => return Err(self.not_a_run(id)),
                };
                for c in chunks {
                    self.fetch_part(&run, c, probe.is_none())?;
                    let g = run.read();
                    let Block::Run(r) = &*g else {
                        unreachable!("checked above")
                    };
                    take(&r.chunks[c], probe, &collect, &mut msgs)
                        .map_err(|what| self.corrupt(id, format!("chunk {c}: {what}")))?;
                }
            }
            if settled(&msgs) {
                return Ok((None, lo, hi, msgs));
            }
            pin = self.store.get_shared(child)?;
        }
    }
}

/// A point query and a range page through `&self`: readers run side by side under `Db`'s
/// shared lock. What they load goes into the pool through its lock (`NodeStore::get_shared`),
/// partitions into their pinned nodes under the node's lock (`fetch_part`); nothing else of
/// the tree changes on a read.
impl SharedReads for BeTree {
    fn over_budget(&self) -> bool {
        self.store.over_budget()
    }

    fn get_shared(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let (leaf, _, _, mut msgs) =
            self.descend(Bound::Included(key), false, false, Some(key), |seg, out| {
                out.extend(seg.lookup(key).cloned())
            })?;
        msgs.sort_by_key(|m| m.seq);
        let refs: Vec<&Msg> = msgs.iter().collect();
        // A put or a delete above the leaf settles the value: the descent stopped there.
        let Some(leaf) = leaf else {
            return self.resolve(key, None, &refs);
        };
        let i = match &*leaf.read() {
            Block::Leaf(l) => l.basement_for(key),
            _ => unreachable!("descent ends at a leaf"),
        };
        self.load_part(&leaf, i)?;
        let g = leaf.read();
        let Block::Leaf(l) = &*g else {
            unreachable!("descent ends at a leaf")
        };
        let b = l.bases[i].get();
        let base = b.search(key).ok().map(|j| b.val(j));
        self.resolve(key, base, &refs)
    }

    fn scan_shared(
        &self,
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
            let leaf = leaf.expect("a scan's descent ends at a leaf");
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
            if let Block::Leaf(l) = &*leaf.read() {
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
}

/// What a descent takes from a resident segment: `collect`'s pick from a decoded one, or, for a
/// point query, the messages for its key found in the raw bytes.
fn take(
    part: &Part<Segment>,
    probe: Option<&[u8]>,
    collect: &impl Fn(&Segment, &mut Vec<Msg>),
    out: &mut Vec<Msg>,
) -> std::result::Result<(), String> {
    match (&part.data, &part.raw, probe) {
        (Some(seg), _, _) => collect(seg, out),
        (None, Some(raw), Some(key)) => out.extend(raw.lookup(key)?),
        _ => unreachable!("a descent makes the partitions it reads resident"),
    }
    Ok(())
}
