//! Writing into the B+-tree: the descent that pins the path a write may split or merge, and
//! values written to and freed from blobs.

use super::*;

impl BTree {
    pub(super) fn descend(&mut self, key: &[u8]) -> Result<(Path, Pin<Node>)> {
        let mut path = Vec::with_capacity(self.height as usize);
        let mut pin = self.store.get(self.root)?;
        loop {
            let next = match &*pin.read() {
                Node::Internal(n) => {
                    let i = n.child_for(key);
                    Some((i, n.children[i]))
                }
                Node::Leaf(_) => None,
            };
            let Some((i, child)) = next else {
                return Ok((path, pin));
            };
            let child = self.store.get(child)?;
            path.push((pin, i));
            pin = child;
        }
    }

    pub(super) fn write_blob(&mut self, value: &[u8]) -> Result<Val> {
        let val = write_blob(self.store.pager_mut(), value)?;
        self.blobs += 1;
        Ok(val)
    }

    pub(super) fn drop_val(&mut self, val: Val) {
        if free_blob(self.store.pager_mut(), val) {
            self.blobs -= 1;
        }
    }
}
