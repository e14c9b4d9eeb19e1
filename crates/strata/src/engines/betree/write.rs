//! Writing into the Bε-tree: messages are made from operations (values too long to sit inline
//! go to blobs) and injected at the root, routed into the root's segments by pivot, or
//! appended straight to the rightmost leaf when keys arrive in order.

use super::*;

impl BeTree {
    // ---- messages into internal nodes ------------------------------------------------------

    /// Insert messages into a resident internal node's segments, clipping range deletes to
    /// each child they overlap. Messages come oldest first, or (with no range deletes among
    /// them) by key with each key's oldest first: see `Segment::into_messages`.
    pub(super) fn route(&mut self, pin: &Pin<Block>, msgs: Vec<Msg>) {
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

    /// The sequential-insert fast path: apply `m` straight to its leaf when that is the same as
    /// buffering it (no segment on its path holds any message, so nothing older for its key
    /// waits above), costs no IO (the path's nodes and the leaf are resident and fully loaded)
    /// and appends (its key is past the leaf's last key). Sequential inserts keep the rightmost
    /// path's buffers empty and so always take it; random inserts almost never do. Returns the
    /// message back when the fast path does not apply.
    pub(super) fn append_to_rightmost(&mut self, m: Msg) -> Result<Option<Msg>> {
        if matches!(m.body, Body::DeleteRange(_)) || !self.store.is_resident(self.root) {
            return Ok(Some(m));
        }
        let mut path: Vec<(Pin<Block>, usize)> = Vec::new();
        let mut pin = self.store.get(self.root)?;
        loop {
            let step = match &*pin.read() {
                Block::Internal(n) => {
                    let i = n.child_for(&m.key);
                    let ok = n.segs[i].count == 0
                        && n.runs[i].is_empty()
                        && self.store.is_resident(n.children[i]);
                    ok.then_some((i, n.children[i]))
                }
                Block::Leaf(l) => {
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
                Block::Run(_) => return Err(self.not_a_node(pin.id())),
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
    pub(super) fn inject(&mut self, body: Body, key: &[u8]) -> Result<()> {
        self.reap(false)?;
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
            self.relieve(&root, 1)?;
        }
        drop(root);
        self.fix_root()
    }

    pub(super) fn put_body(&mut self, value: &[u8]) -> Result<Body> {
        Ok(Body::Put(self.make_val(value.to_vec())?))
    }
}
