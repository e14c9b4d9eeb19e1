//! Salvage for the B+-tree: the tolerant walk that copies every readable entry, routes around
//! damaged nodes and blobs, and copies the keys of nodes found below a damaged one.

use super::*;

impl BTree {
    /// Copy out the readable entries of node `id`, whose keys lie in [lo, hi), at `depth` (the
    /// root's is 1; `None` when unknown: a node found below a damaged one). A node that does not
    /// read becomes a hole in the key space, looked for later below it.
    pub(super) fn salvage_node(
        &mut self,
        id: NodeId,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        depth: Option<u32>,
        w: &mut crate::engine::salvage::Walk<'_, ()>,
    ) -> Result<()> {
        let what = match depth {
            Some(d) if d == self.height => "leaf",
            Some(_) => "internal node",
            None => "node",
        };
        if !w.seen.insert(id) {
            let e = self.corrupt_node(id, "reached twice in one walk".into());
            w.lose(Damage::new(what, Some(id), e).keys(lo, hi));
            return Ok(());
        }
        let node = match self.store.get(id) {
            Ok(pin) => pin.read().clone(),
            Err(e) => {
                w.hole(Damage::new(what, Some(id), e).keys(lo, hi), ());
                return Ok(());
            }
        };
        let is_leaf = matches!(node, Node::Leaf(_));
        if let Some(d) = depth.filter(|&d| is_leaf != (d == self.height)) {
            let e = self.corrupt_node(
                id,
                format!("at depth {d} of a tree of height {}", self.height),
            );
            w.hole(Damage::new(what, Some(id), e).keys(lo, hi), ());
            return Ok(());
        }
        match node {
            Node::Leaf(l) => {
                for (k, v) in l.keys.iter().zip(&l.vals) {
                    // Outside its parent's range, an entry is not this checkpoint's.
                    if !crate::engine::salvage::in_range(k, lo, hi) {
                        continue;
                    }
                    match self.read_val(v) {
                        Ok(bytes) => w.emit(k, &bytes)?,
                        Err(e) => {
                            let blob = match v {
                                Val::Blob { id, .. } => Some(*id),
                                Val::Inline(_) => None,
                            };
                            w.lose(Damage::new("blob", blob, e).key(k));
                        }
                    }
                }
                self.store.evict_to_budget()?;
            }
            Node::Internal(n) => {
                for (i, &c) in n.children.iter().enumerate() {
                    let clo = (i > 0).then(|| n.keys.get(i - 1));
                    let chi = (i < n.keys.len()).then(|| n.keys.get(i));
                    let (clo, chi) = crate::engine::salvage::narrow(lo, hi, clo, chi);
                    self.salvage_node(c, clo, chi, depth.map(|d| d + 1), w)?;
                }
            }
        }
        Ok(())
    }

    pub(super) fn corrupt_node(&self, id: NodeId, what: String) -> Error {
        let pager = self.store.pager();
        Error::corruption(
            pager.file_name(),
            pager.offset_of(id),
            format!("node {id}: {what}"),
        )
    }

    /// The nodes of the table the walk never reached lie below damaged nodes: walk each
    /// subtree whose top was not reached either, within the hole its keys fall in.
    pub(super) fn salvage_below_holes(
        &mut self,
        w: &mut crate::engine::salvage::Walk<'_, ()>,
    ) -> Result<()> {
        if w.holes.is_empty() {
            return Ok(());
        }
        let unreached = w.unreached(self.store.pager());
        // (node, a key inside it), and every node some unreached node points to.
        let mut tops = Vec::new();
        let mut below = HashSet::new();
        for id in unreached {
            // The kind byte, unchecked: only tree nodes matter (blobs are read through their
            // leaves), and loading one checks everything.
            let tree = self
                .store
                .pager()
                .read_part(id, 20, 1)
                .is_ok_and(|b| b[0] == node::KIND_LEAF || b[0] == node::KIND_INTERNAL);
            if !tree {
                continue;
            }
            match self.store.get(id) {
                Ok(pin) => {
                    let key = match &*pin.read() {
                        Node::Internal(n) => {
                            below.extend(n.children.iter().copied());
                            n.keys.first().map(<[u8]>::to_vec)
                        }
                        Node::Leaf(l) => l.keys.first().map(<[u8]>::to_vec),
                    };
                    tops.push((id, key));
                }
                Err(e) => {
                    w.seen.insert(id);
                    w.lose(Damage::new("node below a damaged node", Some(id), e));
                }
            }
        }
        for (id, key) in tops {
            if below.contains(&id) {
                continue;
            }
            // An empty node holds nothing; a node under no hole is no part of this checkpoint.
            let Some(h) = key.and_then(|k| w.hole_of(&k)) else {
                continue;
            };
            let range = w.holes[h].range.clone();
            let before = w.copied;
            self.salvage_node(id, range.lo.as_deref(), range.hi.as_deref(), None, w)?;
            let damage = w.holes[h].damage;
            w.lost[damage].recovered += w.copied - before;
        }
        Ok(())
    }
}
