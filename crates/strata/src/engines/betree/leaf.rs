//! Applying messages to a leaf: messages reach a leaf's basements (in place for a few, by
//! rebuilding the basement for many), each key's messages are settled against its entry in
//! sequence order, and basements are re-cut to their target size.
//!
//! The work is a function of the leaf and the messages (`Settle`), apart from the tree: what it
//! changes outside the leaf (the live counts, the blobs it replaced) is handed back in
//! `Settled` for the tree to take in. So a drain can run it on a thread of its own
//! (`drainer`); only upserts need the tree's pager (their blobs), and those drain inline.

use std::sync::atomic::AtomicBool;

use super::*;

/// Runs of at most this many point messages are applied to a basement in place.
pub(super) const IN_PLACE_MAX: usize = 16;

/// A key's value while its messages are applied: the basement's entry until a message
/// replaces it (`new` is then `Some`, holding `None` once deleted).
pub(super) struct Current<'a> {
    base: Option<ValRef<'a>>,
    new: Option<Option<Val>>,
}

/// Point messages sorted by key (then seq) as (key, that key's messages oldest first).
pub(super) fn by_key(run: Vec<Msg>) -> impl Iterator<Item = (Vec<u8>, Vec<Msg>)> {
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
pub(super) type CutPiece = (Option<Vec<u8>>, Part<Basement>);

/// How `cut` shares entries out among the pieces.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Fill {
    /// Fill each piece to the target and leave the rest to the last: for appends, which go on
    /// filling the last piece.
    Greedy,
    /// Pieces of about equal size, so that each has room to grow before it must be cut again.
    Even,
}

/// Cut a basement into basements of at most `target` bytes (at least one entry each, and one
/// empty basement for no entries): each with the separator before it, `None` for the first.
/// The entries move in blocks (`Basement::split_off`), never one by one.
pub(super) fn cut(b: Basement, target: usize, fill: Fill) -> Vec<CutPiece> {
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
pub(super) fn cut_basements(entries: Basement, target: usize) -> Leaf {
    let mut leaf = Leaf::default();
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
pub(super) fn merge_small_basements(l: &mut Leaf, target: usize) {
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

/// What applying messages to a leaf changed outside it, for the tree to take in.
#[derive(Debug, Default)]
pub(super) struct Settled {
    pub live_keys: i64,
    pub live_bytes: i64,
    /// Values the messages replaced: blobs among them go back to the pager.
    pub freed: Vec<Val>,
    /// Blobs written for upserts' results.
    pub blobs_made: u64,
}

impl Settled {
    /// Take in what a later application changed.
    pub(super) fn absorb(&mut self, o: Settled) {
        self.live_keys += o.live_keys;
        self.live_bytes += o.live_bytes;
        self.freed.extend(o.freed);
        self.blobs_made += o.blobs_made;
    }
}

/// Applying messages to a leaf, apart from the tree.
pub(super) struct Settle<'a> {
    /// The basement size pieces are cut to.
    basement: usize,
    inline_max: usize,
    merge: Option<&'a dyn MergeOperator>,
    /// Where upserts read and write blobs: the tree's pager. None on a drain's thread, which
    /// is given no upserts.
    pager: Option<&'a mut Pager>,
    /// On the drain thread: offer the core between basements while this is up.
    syncing: Option<&'a AtomicBool>,
    pub out: Settled,
}

impl<'a> Settle<'a> {
    pub(super) fn new(
        geo: Geometry,
        merge: Option<&'a dyn MergeOperator>,
        pager: Option<&'a mut Pager>,
    ) -> Settle<'a> {
        Settle {
            basement: geo.basement,
            inline_max: geo.inline_max(),
            merge,
            pager,
            syncing: None,
            out: Settled::default(),
        }
    }

    /// Offer the core between basements while `syncing` is up (the drain thread's Settle).
    pub(super) fn yielding_to(mut self, syncing: &'a AtomicBool) -> Settle<'a> {
        self.syncing = Some(syncing);
        self
    }

    fn offer_core(&self) {
        if let Some(s) = self.syncing {
            super::drainer::offer_core(s);
        }
    }

    /// Apply messages (in an order `route` accepts) to a whole leaf. Only the basements the
    /// messages fall in are rebuilt (and re-cut to the basement size); the others are kept as
    /// they are.
    pub(super) fn apply(&mut self, leaf: &mut Leaf, msgs: Vec<Msg>) -> Result<()> {
        if !msgs.is_empty() && !msgs.iter().any(|m| matches!(m.body, Body::DeleteRange(_))) {
            return self.apply_points(leaf, msgs);
        }
        let old_bases = std::mem::take(&mut leaf.bases);
        let old_pivots = std::mem::take(&mut leaf.pivots).into_vec();
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
        // Untouched basements keep their places in the old block, in its encoding.
        let mut out = Leaf {
            enc: leaf.enc,
            ..Leaf::default()
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
            self.offer_core();
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
        merge_small_basements(&mut out, self.basement);
        *leaf = out;
        Ok(())
    }

    /// Point messages only: rebuild just the basements they land in and splice the pieces in
    /// place, so that applying a few messages to a leaf of many basements (a root that is still
    /// a leaf takes every write this way) costs O(touched), not O(basements).
    fn apply_points(&mut self, l: &mut Leaf, mut msgs: Vec<Msg>) -> Result<()> {
        msgs.sort_by(|a, b| (&a.key, a.seq).cmp(&(&b.key, b.seq)));
        // (basement index, its run, the basement taken out), in ascending index order.
        let mut touched: Vec<(usize, Vec<Msg>, Part<Basement>)> = Vec::new();
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
        let mut rebuilt = Vec::with_capacity(touched.len());
        for (i, run, base) in touched {
            self.offer_core();
            rebuilt.push((i, self.basement_pieces(base, run, &[])?));
        }
        {
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
            merge_small_basements(l, self.basement);
        }
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
            cut(merged, self.basement, Fill::Even)
        })
    }

    /// A basement as one piece, or cut into several when it outgrew its size.
    fn recut(&self, b: Basement, fill: Fill) -> Vec<CutPiece> {
        if b.encoded_len() > self.basement {
            cut(b, self.basement, fill)
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
            self.out.live_keys -= 1;
            self.out.live_bytes -= (key.len() + v.logical_len()) as i64;
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
            self.out.live_keys += 1;
            self.out.live_bytes += (key.len() + v.logical_len()) as i64;
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
                    (Some(v), _) => v.clone(),
                    (None, b) => b.map(ValRef::to_val),
                };
                let old = match old {
                    Some(Val::Inline(b)) => Some(b),
                    Some(blob) => Some(read_value(self.pager(), &blob)?),
                    None => None,
                };
                let new = require_merge(self.merge)?.merge(key, old.as_deref(), &op);
                new.map(|b| self.make_val(b)).transpose()?
            }
        };
        // What the key held until now is replaced: free it (a blob's block goes back).
        match cur.new.replace(next) {
            Some(old) => self.out.freed.extend(old),
            None => {
                if let Some(ValRef::Blob { id, len }) = cur.base.take() {
                    self.out.freed.push(Val::Blob { id, len });
                }
            }
        }
        Ok(())
    }

    fn pager(&mut self) -> &mut Pager {
        self.pager
            .as_deref_mut()
            .expect("upserts are applied on the writer, with the tree's pager (drainer::offload)")
    }

    /// An upsert's result, inline or in a new blob.
    fn make_val(&mut self, bytes: Vec<u8>) -> Result<Val> {
        if bytes.len() <= self.inline_max {
            return Ok(Val::Inline(bytes));
        }
        let val = write_blob(self.pager(), &bytes)?;
        self.out.blobs_made += 1;
        Ok(val)
    }
}

impl BeTree {
    /// Apply messages to a resident leaf, here on the writer, and take in what that changed.
    pub(super) fn apply_to_leaf(&mut self, pin: &Pin<Block>, msgs: Vec<Msg>) -> Result<()> {
        let mut leaf = std::mem::take(leaf_mut(&mut pin.write()));
        let merge = self.merge.clone();
        let mut s = Settle::new(self.geo, merge.as_deref(), Some(self.store.pager_mut()));
        let done = s.apply(&mut leaf, msgs);
        let settled = s.out;
        *leaf_mut(&mut pin.write()) = leaf;
        self.store.mark_dirty(pin);
        self.take_in(settled);
        done
    }

    /// What a leaf's messages changed outside it.
    pub(super) fn take_in(&mut self, s: Settled) {
        self.live_keys = self.live_keys.wrapping_add_signed(s.live_keys);
        self.live_bytes = self.live_bytes.wrapping_add_signed(s.live_bytes);
        self.blobs += s.blobs_made;
        for v in s.freed {
            self.free_val(v);
        }
    }
}
