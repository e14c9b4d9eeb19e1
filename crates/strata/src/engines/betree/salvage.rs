//! Salvage for the Bε-tree: the tolerant walk that copies every readable entry with the messages
//! buffered above it settled, routes around damaged nodes, segments and runs (recording what
//! their loss means: `Effect::Stale` where buffered writes are lost), and the raw reading of
//! message blocks for salvage's scan of a file with no checkpoint.

use super::*;

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
        k if node::INTERNAL_KINDS.contains(&k) => (28, 8),
        k if node::RUN_KINDS.contains(&k) => (20, 0),
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
        let Ok(seg) = Segment::decode(&part, node::segment_encoding(k)) else {
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
pub(super) fn touches(m: &Msg, lo: Option<&[u8]>, hi: Option<&[u8]>) -> bool {
    match &m.body {
        Body::DeleteRange(end) => {
            hi.is_none_or(|h| m.key.as_slice() < h) && lo.is_none_or(|l| end.as_slice() > l)
        }
        _ => crate::engine::salvage::in_range(&m.key, lo, hi),
    }
}

pub(super) fn bearing(msgs: &[Msg], lo: Option<&[u8]>, hi: Option<&[u8]>) -> Vec<Msg> {
    msgs.iter()
        .filter(|m| touches(m, lo, hi))
        .cloned()
        .collect()
}

/// A salvage walk of the Bε-tree: its holes keep the messages bound for them from above.
pub(super) type SalvageWalk<'a> = crate::engine::salvage::Walk<'a, Vec<Msg>>;

/// Which keys `salvage_keys` copies out.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Take {
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
    pub(super) fn salvage_node(
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
            Block::Run(_) => None,
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
                let (clo, chi) = crate::engine::salvage::narrow(lo, hi, clo, chi);
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
            Block::Leaf(l) => (l.bases.len(), l.pivots.clone()),
            _ => unreachable!("shape checked above"),
        };
        for b in 0..n {
            let blo = (b > 0).then(|| pivots.get(b - 1));
            let bhi = (b < pivots.len()).then(|| pivots.get(b));
            let (blo, bhi) = crate::engine::salvage::narrow(lo, hi, blo, bhi);
            let bm = bearing(&msgs, blo, bhi);
            if let Err(e) = self.load_part(&pin, b) {
                w.hole(Damage::new("basement", Some(id), e).keys(blo, bhi), bm);
                continue;
            }
            let bases: Vec<(Vec<u8>, Val)> = match &*pin.read() {
                Block::Leaf(l) => l.bases[b]
                    .get()
                    .iter()
                    // Outside its parent's range, an entry is not this checkpoint's.
                    .filter(|(k, _)| crate::engine::salvage::in_range(k, blo, bhi))
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
    pub(super) fn salvage_keys(
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
    pub(super) fn salvage_run(
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
            Block::Run(r) => r.pivots.clone(),
            _ => {
                let d = Damage::new("run", Some(id), self.not_a_run(id)).keys(lo, hi);
                w.lose(d.effect(Effect::Stale));
                return Ok(());
            }
        };
        for c in 0..=pivots.len() {
            let clo = (c > 0).then(|| pivots.get(c - 1));
            let chi = (c < pivots.len()).then(|| pivots.get(c));
            let (clo, chi) = crate::engine::salvage::narrow(lo, hi, clo, chi);
            if let (Some(a), Some(b)) = (clo, chi) {
                if a >= b {
                    continue; // the chunk holds nothing for [lo, hi)
                }
            }
            match self.load_part(&pin, c) {
                Ok(()) => {
                    let g = pin.read();
                    let Block::Run(r) = &*g else {
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
    pub(super) fn salvage_below_holes(&mut self, w: &mut SalvageWalk<'_>) -> Result<()> {
        if w.holes.is_empty() {
            return Ok(());
        }
        let unreached = w.unreached(self.store.pager());
        let mut tops = Vec::new();
        let mut below = HashSet::new();
        for id in unreached {
            // The kind byte, unchecked: blobs are read through what refers to them, and
            // loading a node checks everything.
            let k = self.store.pager().read_part(id, 20, 1).ok().map(|b| b[0]);
            match k {
                Some(k) if node::RUN_KINDS.contains(&k) => {
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
                Some(k) if node::LEAF_KINDS.contains(&k) || node::INTERNAL_KINDS.contains(&k) => {
                    match self.store.get(id) {
                        Ok(pin) => {
                            let key = match &*pin.read() {
                                Block::Internal(n) => {
                                    below.extend(n.children.iter().copied());
                                    n.pivots.first().map(<[u8]>::to_vec)
                                }
                                Block::Leaf(l) => l.pivots.first().map(<[u8]>::to_vec),
                                Block::Run(_) => None,
                            };
                            let key = match key {
                                Some(k) => Some(k),
                                // A leaf of one basement: its first entry.
                                None if pin.read().is_leaf() => self
                                    .load_part(&pin, 0)
                                    .ok()
                                    .and_then(|_| match &*pin.read() {
                                        Block::Leaf(l) => {
                                            l.bases[0].get().first_key().map(<[u8]>::to_vec)
                                        }
                                        _ => None,
                                    }),
                                None => None,
                            };
                            tops.push((id, key));
                        }
                        Err(e) => {
                            w.seen.insert(id);
                            w.lose(Damage::new("node below a damaged node", Some(id), e));
                        }
                    }
                }
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
    pub(super) fn salvage_settled(&mut self, w: &mut SalvageWalk<'_>) -> Result<()> {
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
