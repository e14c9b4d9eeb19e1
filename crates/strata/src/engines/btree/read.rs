//! Reading the B+-tree: the descent toward the leaf that holds a key (or the first or last
//! leaf of a scan's page, with the fence that says where the next page starts), and values
//! read from their blobs.

use super::*;

impl BTree {
    /// The leaf a scan visits next, and its fence: the nearest separator beyond it in the scan's
    /// direction (`None` when the leaf is the last one that way).
    pub(super) fn leaf_toward(
        &mut self,
        at: Bound<&[u8]>,
        reverse: bool,
    ) -> Result<(Pin<Node>, Option<Vec<u8>>)> {
        let mut fence = None;
        let mut pin = self.store.get(self.root)?;
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
                Some(child) => pin = self.store.get(child)?,
                None => return Ok((pin, fence)),
            }
        }
    }

    pub(super) fn read_val(&self, val: &Val) -> Result<Vec<u8>> {
        read_value(self.store.pager(), val)
    }
}
