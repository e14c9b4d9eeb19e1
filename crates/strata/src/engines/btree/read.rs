//! Reading the B+-tree: the descent toward the leaf that holds a key (or the first or last
//! leaf of a scan's page, with the fence that says where the next page starts), and values
//! read from their blobs; the reads `Db` shares among readers (`SharedReads`).

use super::*;

impl BTree {
    /// The leaf a scan visits next, and its fence: the nearest separator beyond it in the scan's
    /// direction (`None` when the leaf is the last one that way).
    pub(super) fn leaf_toward(
        &self,
        at: Bound<&[u8]>,
        reverse: bool,
    ) -> Result<(Pin<Node>, Option<Vec<u8>>)> {
        let mut fence = None;
        let mut pin = self.store.get_shared(self.root)?;
        loop {
            let next = match &*pin.read() {
                Node::Internal(n) => {
                    let i = match (at, reverse) {
                        (Bound::Unbounded, false) => 0,
                        (Bound::Unbounded, true) => n.children.len() - 1,
                        (Bound::Included(k), _) => n.child_for(k),
                        (Bound::Excluded(k), false) => n.child_for(k),
                        (Bound::Excluded(k), true) => n.child_below(k),
                    };
                    if !reverse && i < n.keys.len() {
                        fence = Some(n.keys.get(i).to_vec());
                    }
                    if reverse && i > 0 {
                        fence = Some(n.keys.get(i - 1).to_vec());
                    }
                    Some(n.children[i])
                }
                Node::Leaf(_) => None,
            };
            match next {
                Some(child) => pin = self.store.get_shared(child)?,
                None => return Ok((pin, fence)),
            }
        }
    }

    pub(super) fn read_val(&self, val: &Val) -> Result<Vec<u8>> {
        read_value(self.store.pager(), val)
    }
}

/// A point query and a range page through `&self`: readers run side by side under `Db`'s
/// shared lock, loading what they miss through the pool's lock (`NodeStore::get_shared`);
/// nothing of the tree changes on a read.
impl SharedReads for BTree {
    fn over_budget(&self) -> bool {
        self.store.over_budget()
    }

    fn get_shared(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let (leaf, _) = self.leaf_toward(Bound::Included(key), false)?;
        let val = {
            let g = leaf.read();
            let Node::Leaf(l) = &*g else {
                unreachable!("descent ends at a leaf")
            };
            match l.search(key) {
                Ok(i) => l.vals[i].clone(),
                Err(_) => return Ok(None),
            }
        };
        self.read_val(&val).map(Some)
    }

    fn scan_shared(
        &self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        reverse: bool,
        limit: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<()> {
        let mut cursor: Bound<Vec<u8>> = if reverse { hi } else { lo }.map(|k| k.to_vec());
        let mut taken = 0;
        loop {
            let (leaf, fence) = self.leaf_toward(cursor.as_ref().map(|k| k.as_slice()), reverse)?;
            let picked: Vec<(Vec<u8>, Val)> = {
                let g = leaf.read();
                let Node::Leaf(l) = &*g else {
                    unreachable!("descent ends at a leaf")
                };
                // Entries before the cursor: those < k when k is included, <= k when excluded.
                let pos = |k: &[u8], incl: bool| l.keys.rank(k, !incl);
                let mut v = Vec::new();
                if reverse {
                    let end = match &cursor {
                        Bound::Unbounded => l.keys.len(),
                        Bound::Included(k) => pos(k, false),
                        Bound::Excluded(k) => pos(k, true),
                    };
                    for i in (0..end).rev() {
                        if !above_lo(l.keys.get(i), lo) || taken + v.len() == limit {
                            break;
                        }
                        v.push((l.keys.get(i).to_vec(), l.vals[i].clone()));
                    }
                } else {
                    let start = match &cursor {
                        Bound::Unbounded => 0,
                        Bound::Included(k) => pos(k, true),
                        Bound::Excluded(k) => pos(k, false),
                    };
                    for i in start..l.keys.len() {
                        if !below_hi(l.keys.get(i), hi) || taken + v.len() == limit {
                            break;
                        }
                        v.push((l.keys.get(i).to_vec(), l.vals[i].clone()));
                    }
                }
                v
            };
            drop(leaf);
            taken += picked.len();
            for (k, v) in picked {
                let v = self.read_val(&v)?;
                out.push((k, v));
            }
            match next_cursor(fence, lo, hi, reverse, taken >= limit) {
                Some(next) => cursor = next,
                None => return Ok(()),
            }
        }
    }
}
