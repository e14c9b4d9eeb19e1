//! Keeping the tree's shape: splitting nodes that outgrow B, merging and rebalancing those
//! that fall below a quarter of it, and growing or collapsing the root, so that every leaf
//! stays at depth `height` and every internal node keeps between 2 and F children.

use super::*;

impl BeTree {
    // ---- shape: splits, merges, the root ---------------------------------------------------

    pub(super) fn too_big(&self, n: &Block) -> bool {
        match n {
            Block::Leaf(l) => leaf_too_big(l, &self.geo),
            Block::Internal(n) => n.children.len() > self.geo.fanout,
            Block::Run(_) => false,
        }
    }

    pub(super) fn too_small(&self, n: &Block) -> bool {
        match n {
            Block::Leaf(l) => l.size() < self.geo.node_size / 4,
            Block::Internal(n) => n.children.len() < (self.geo.fanout / 4).max(2),
            Block::Run(_) => false,
        }
    }

    /// Split a resident node into pieces: (separator before each piece after the first, piece).
    pub(super) fn split(&mut self, pin: &Pin<Block>) -> Vec<(Vec<u8>, Block)> {
        let mut g = pin.write();
        match &mut *g {
            Block::Leaf(l) => {
                let mut out = cut_leaf(std::mem::take(l), &self.geo).into_iter();
                let (_, first) = out.next().expect("a leaf cuts into pieces");
                *g = Block::Leaf(first);
                out.map(|(sep, l)| (sep, Block::Leaf(l))).collect()
            }
            Block::Internal(n) => {
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
                        enc: Encoding::Compact,
                    };
                    out.push((sep, Block::Internal(right)));
                }
                out.reverse();
                out
            }
            Block::Run(_) => unreachable!("runs are never split"),
        }
    }

    /// Child j of a resident internal node was cut (it keeps the first piece; `pieces` are the
    /// others, each with the separator before it): put the pieces beside it as children of
    /// their own, and send the messages the parent holds for the old child to the pieces they
    /// now belong to.
    pub(super) fn put_pieces(
        &mut self,
        parent: &Pin<Block>,
        j: usize,
        pieces: Vec<(Vec<u8>, Block)>,
    ) -> Result<()> {
        let seg = {
            let mut g = parent.write();
            std::mem::replace(&mut internal_mut(&mut g).segs[j], empty_seg())
        };
        self.buffered -= seg.count as u64;
        for (k, (sep, node)) in pieces.into_iter().enumerate() {
            let id = self.create_piece(node)?;
            let mut g = parent.write();
            let n = internal_mut(&mut g);
            n.pivots.insert(j + k, sep);
            n.children.insert(j + k + 1, id);
            n.segs.insert(j + k + 1, empty_seg());
            n.runs.insert(j + k + 1, Vec::new());
        }
        self.route(parent, seg.data.expect("resident").into_by_seq());
        Ok(())
    }

    /// A new node for a piece of a split, counted as a leaf or an internal node.
    fn create_piece(&mut self, node: Block) -> Result<NodeId> {
        let leaf = node.is_leaf();
        let id = self.store.create(node)?.id();
        if leaf {
            self.leaves += 1;
        } else {
            self.internals += 1;
        }
        Ok(id)
    }

    /// After child j of a resident internal node changed, split or merge it as needed.
    pub(super) fn fix_child(
        &mut self,
        parent: &Pin<Block>,
        j: usize,
        child: Pin<Block>,
    ) -> Result<()> {
        let (big, small) = {
            let g = child.read();
            (self.too_big(&g), self.too_small(&g))
        };
        if big {
            let pieces = self.split(&child);
            self.store.mark_dirty(&child);
            return self.put_pieces(parent, j, pieces);
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
                (Block::Leaf(l), Block::Leaf(r)) => {
                    l.pivots.push(sep);
                    let mut rp = std::mem::take(&mut r.pivots);
                    l.pivots.append(&mut rp);
                    l.bases.append(&mut r.bases);
                    self.leaves -= 1;
                }
                (Block::Internal(l), Block::Internal(r)) => {
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
    pub(super) fn fix_root(&mut self) -> Result<()> {
        loop {
            let root = self.store.get(self.root)?;
            self.load_all(&root)?;
            let (big, only_child) = {
                let g = root.read();
                let only = match &*g {
                    Block::Internal(n) if n.children.len() == 1 => Some(n.children[0]),
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
                    enc: Encoding::Compact,
                };
                let pieces = self.split(&root);
                self.store.mark_dirty(&root);
                for (sep, node) in pieces {
                    let id = self.create_piece(node)?;
                    top.pivots.push(sep);
                    top.children.push(id);
                    top.segs.push(empty_seg());
                    top.runs.push(Vec::new());
                }
                drop(root);
                self.root = self.store.create(Block::Internal(top))?.id();
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
}

/// Whether a leaf must be cut: it outgrew a node and has two entries to part.
pub(super) fn leaf_too_big(l: &Leaf, geo: &Geometry) -> bool {
    l.size() > geo.node_size && l.entries() >= 2
}

/// A leaf as the pieces a split makes of it, (separator before it, piece), the first
/// separator empty; the leaf whole when it is not too big. Pieces of about equal bytes, at
/// most 3/4 of a node each, at least two. They are cut by their entries and re-cut into even
/// basements: moving whole basements instead copies less but keeps their uneven fill and
/// spare capacity, and measured slower (1M-record load, reads and mixed rounds: 435K / 796K /
/// 427K ops/s against 502K / 1,037K / 636K, 190 MiB of cache charge against 160). A pure
/// function of the leaf, so that the drain thread cuts the leaves it makes (`drainer`).
pub(super) fn cut_leaf(mut l: Leaf, geo: &Geometry) -> Vec<(Vec<u8>, Leaf)> {
    if !leaf_too_big(&l, geo) {
        return vec![(Vec::new(), l)];
    }
    let total = l.size();
    let pieces = total.div_ceil(geo.node_size * 3 / 4).max(2);
    let target = total / pieces;
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
        out.push((sep, cut_basements(entries, geo.basement)));
    }
    out.push((Vec::new(), cut_basements(all, geo.basement)));
    out.reverse();
    out
}
