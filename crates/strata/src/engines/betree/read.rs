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
    fn keep_run_head(&mut self, pin: &Pin<Block>, i: usize, k: usize, run: &Pin<Block>) {
        let dir = match &*run.read() {
            Block::Run(r) if r.chunks.iter().all(|c| c.loc.is_some()) => Arc::new(r.head_only()),
            _ => return,
        };
        let added = {
            let g = pin.read();
            let r = &internal(&g).runs[i][k];
            if r.dir.set(RunDir::new(dir)).is_err() {
                return;
            }
            r.dir_charge()
        };
        self.store.recharge_by(pin, 0, added);
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
        &mut self,
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
        let mut pin = self.store.get(self.root)?;
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
                    (Some(_), Some(dir)) => {
                        self.store.get_or_make(id, || Block::Run(dir.head_only()))?
                    }
                    (Some(_), None) if large => {
                        let run = self.store.get_head(id)?;
                        self.keep_run_head(&pin, i, k, &run);
                        run
                    }
                    _ => self.store.get(id)?,
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
            pin = self.store.get(child)?;
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
