//! `check` for the Bε-tree: every block's checksum, then a walk of the whole tree that checks
//! pivots and key ranges, depths, segment and run contents against their directories and
//! filters, and the counts the metadata keeps, then a paged scan of what a reader sees.

use super::*;
use crate::engine::check_reachable;

impl BeTree {
    /// `Engine::check`: every block's checksum, then the walk, then what a reader sees.
    pub(super) fn check_tree(&mut self) -> Result<CheckReport> {
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
        check_reachable(self.store.pager(), &w.reachable)?;
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
}

impl BeTree {
    /// Every message of run `id` lies in its chunk's key range.
    pub(super) fn check_run_chunks(&mut self, id: NodeId) -> Result<()> {
        let pin = self.store.get(id)?;
        self.load_all(&pin)?;
        let g = pin.read();
        let Block::Run(run) = &*g else {
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

pub(super) struct Walk {
    report: CheckReport,
    live_bytes: u64,
    buffered: u64,
    runs: u64,
    reachable: HashSet<NodeId>,
    depth: Option<u32>,
}

impl BeTree {
    pub(super) fn walk(
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
            Block::Internal(n) => &n.pivots,
            Block::Leaf(l) => &l.pivots,
            Block::Run(_) => return Err(bad("a run where a tree node was expected".into())),
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
            Block::Internal(n) => {
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
                    // Runs oldest first, then the segment (`layers_in_order`).
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
                    if !layers_in_order(&layers) {
                        return Err(bad(format!(
                            "messages for child {c} are not newer than the runs before them"
                        )));
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
            Block::Leaf(l) => {
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
            Block::Run(_) => unreachable!("refused above"),
        }
        Ok(())
    }
}

/// Whether each layer's messages are newer, key by key, than the earlier layers': a point
/// message than every earlier one for its key and every earlier range delete covering it, a
/// range delete than every earlier message in its range. Layers need not be newer as a whole:
/// a spill may leave a segment's last keys behind (`flush::spill_fitted`), older than a later
/// run's messages for other keys.
fn layers_in_order(layers: &[Vec<Msg>]) -> bool {
    let mut points: BTreeMap<&[u8], u64> = BTreeMap::new();
    let mut ranges: Vec<(&[u8], &[u8], u64)> = Vec::new();
    for layer in layers {
        for m in layer {
            let ok = match &m.body {
                Body::DeleteRange(end) => {
                    let (lo, hi) = (m.key.as_slice(), end.as_slice());
                    lo >= hi
                        || (points.range(lo..hi).all(|(_, &s)| s < m.seq)
                            && ranges
                                .iter()
                                .all(|&(a, b, s)| s < m.seq || b <= lo || hi <= a))
                }
                _ => {
                    let k = m.key.as_slice();
                    points.get(k).is_none_or(|&s| s < m.seq)
                        && ranges.iter().all(|&(a, b, s)| s < m.seq || k < a || b <= k)
                }
            };
            if !ok {
                return false;
            }
        }
        for m in layer {
            match &m.body {
                Body::DeleteRange(end) => ranges.push((&m.key, end, m.seq)),
                _ => {
                    let s = points.entry(&m.key).or_insert(m.seq);
                    *s = (*s).max(m.seq);
                }
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(k: &str, seq: u64) -> Msg {
        Msg {
            key: k.as_bytes().to_vec(),
            seq,
            body: Body::Put(Val::Inline(vec![1])),
        }
    }

    fn range(a: &str, b: &str, seq: u64) -> Msg {
        Msg {
            key: a.as_bytes().to_vec(),
            seq,
            body: Body::DeleteRange(b.as_bytes().to_vec()),
        }
    }

    #[test]
    fn layers_are_ordered_key_by_key() {
        // A segment's last key left behind by a spill: older than the run after it, for
        // another key. In order.
        assert!(layers_in_order(&[
            vec![put("a", 1), put("b", 3)],
            vec![put("c", 2)],
            vec![put("a", 4), put("b", 5)],
        ]));
        // One key older in a later layer: out of order.
        assert!(!layers_in_order(&[vec![put("a", 4)], vec![put("a", 3)]]));
        // A later point under an earlier, newer range delete.
        assert!(!layers_in_order(&[
            vec![range("a", "m", 5)],
            vec![put("c", 4)]
        ]));
        // The same point outside the range, or newer than it: in order.
        assert!(layers_in_order(&[
            vec![range("a", "m", 5)],
            vec![put("m", 4)]
        ]));
        assert!(layers_in_order(&[
            vec![range("a", "m", 5)],
            vec![put("c", 6)]
        ]));
        // A later range delete over an earlier, newer point, or an overlapping newer range.
        assert!(!layers_in_order(&[
            vec![put("c", 6)],
            vec![range("a", "m", 5)]
        ]));
        assert!(!layers_in_order(&[
            vec![range("k", "z", 6)],
            vec![range("a", "l", 5)]
        ]));
        // Ranges that only touch do not overlap.
        assert!(layers_in_order(&[
            vec![range("m", "z", 6)],
            vec![range("a", "m", 5)]
        ]));
    }
}
