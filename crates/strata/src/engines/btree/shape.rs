//! Keeping the B+-tree's shape: a node whose block would exceed the node size splits (up the
//! path, growing the root), and one below a quarter of it borrows from or merges with a
//! sibling (collapsing the root when it is left with one child).

use super::*;

pub(super) type Path = Vec<(Pin<Node>, usize)>;

pub(super) enum Fix {
    Merged,
    Moved(Vec<u8>),
}

impl BTree {
    pub(super) fn overflows(&self, node: &Node) -> bool {
        match node {
            Node::Leaf(l) => BLOCK_HEADER + l.bytes > self.node_size && l.keys.len() >= 2,
            Node::Internal(n) => BLOCK_HEADER + n.bytes > self.node_size && n.children.len() >= 4,
        }
    }

    pub(super) fn underflows(&self, node: &Node) -> bool {
        match node {
            Node::Leaf(l) => l.keys.is_empty() || BLOCK_HEADER + l.bytes < self.node_size / 4,
            Node::Internal(n) => {
                n.children.len() < 2 || BLOCK_HEADER + n.bytes < self.node_size / 4
            }
        }
    }

    /// Split `node` while it overflows, pushing separators up the path.
    pub(super) fn split_up(&mut self, mut path: Path, mut node: Pin<Node>) -> Result<()> {
        loop {
            let split = {
                let mut g = node.write();
                if !self.overflows(&g) {
                    return Ok(());
                }
                match &mut *g {
                    Node::Leaf(l) => {
                        let right = l.split_off(l.byte_midpoint());
                        let sep = shortest_separator(
                            l.keys.last().expect("left half"),
                            right.keys.get(0),
                        );
                        self.leaves += 1;
                        (sep, Node::Leaf(right))
                    }
                    Node::Internal(n) => {
                        let m = n.split_point();
                        let keys = n.keys.split_off(m + 1);
                        let sep = n.keys.pop().expect("split point has a key");
                        let children = n.children.split_off(m + 1);
                        n.recount();
                        let mut r = Internal {
                            keys,
                            children,
                            bytes: 0,
                        };
                        r.recount();
                        self.internals += 1;
                        (sep, Node::Internal(r))
                    }
                }
            };
            let (sep, right) = split;
            self.store.mark_dirty(&node);
            let right = self.store.create(right)?;
            match path.pop() {
                Some((parent, i)) => {
                    internal_mut(&mut parent.write()).insert_after(i, sep, right.id());
                    self.store.mark_dirty(&parent);
                    node = parent;
                }
                None => {
                    let mut root = Internal {
                        keys: Keys::from(vec![sep]),
                        children: vec![node.id(), right.id()],
                        bytes: 0,
                    };
                    root.recount();
                    self.root = self.store.create(Node::Internal(root))?.id();
                    self.height += 1;
                    self.internals += 1;
                    return Ok(());
                }
            }
        }
    }

    /// Fix underflowing nodes from `node` upwards, then shorten the tree if the root has one child.
    pub(super) fn rebalance_up(&mut self, mut path: Path, mut node: Pin<Node>) -> Result<()> {
        while let Some((parent, i)) = path.pop() {
            let under = self.underflows(&node.read());
            if !under {
                break;
            }
            self.fix_child(&parent, i, node)?;
            node = parent;
        }
        drop(node);
        loop {
            let root = self.store.get(self.root)?;
            let only = match &*root.read() {
                Node::Internal(n) if n.children.len() == 1 => Some(n.children[0]),
                _ => None,
            };
            drop(root);
            let Some(child) = only else { return Ok(()) };
            self.store.free(self.root);
            self.root = child;
            self.height -= 1;
            self.internals -= 1;
        }
    }

    /// Merge child `i` of `parent` with a sibling, or move entries between them.
    pub(super) fn fix_child(
        &mut self,
        parent: &Pin<Node>,
        i: usize,
        child: Pin<Node>,
    ) -> Result<()> {
        let (li, sibling_id, sep) = {
            let g = parent.read();
            let Node::Internal(p) = &*g else {
                unreachable!("parents are internal")
            };
            if p.children.len() < 2 {
                return Ok(());
            }
            let li = if i > 0 { i - 1 } else { 0 };
            let sib = if i > 0 {
                p.children[i - 1]
            } else {
                p.children[i + 1]
            };
            (li, sib, p.keys.get(li).to_vec())
        };
        let sibling = self.store.get(sibling_id)?;
        let (left, right) = if i > 0 {
            (sibling, child)
        } else {
            (child, sibling)
        };
        let fix = {
            let mut lg = left.write();
            let mut rg = right.write();
            match (&mut *lg, &mut *rg) {
                (Node::Leaf(l), Node::Leaf(r)) => {
                    let fits = BLOCK_HEADER + l.bytes + r.bytes - LEAF_FIXED <= self.node_size;
                    l.append(r);
                    if fits || l.keys.len() < 2 {
                        self.leaves -= 1;
                        Fix::Merged
                    } else {
                        *r = l.split_off(l.byte_midpoint());
                        Fix::Moved(shortest_separator(
                            l.keys.last().expect("left half"),
                            r.keys.get(0),
                        ))
                    }
                }
                (Node::Internal(l), Node::Internal(r)) => {
                    let fits = BLOCK_HEADER + l.bytes + r.bytes - INTERNAL_FIXED
                        + node::sep_len(&sep)
                        <= self.node_size;
                    l.keys.push(sep);
                    l.keys.append(&mut r.keys);
                    l.children.append(&mut r.children);
                    l.recount();
                    if fits || l.children.len() < 4 {
                        self.internals -= 1;
                        Fix::Merged
                    } else {
                        let m = l.split_point();
                        r.keys = l.keys.split_off(m + 1);
                        let up = l.keys.pop().expect("split point has a key");
                        r.children = l.children.split_off(m + 1);
                        l.recount();
                        r.recount();
                        Fix::Moved(up)
                    }
                }
                _ => {
                    let at = self
                        .store
                        .pager()
                        .extent(parent.id())
                        .map_or(0, |e| e.offset);
                    return Err(Error::corruption(
                        self.store.pager().file_name(),
                        at,
                        format!("children of node {} are at different heights", parent.id()),
                    ));
                }
            }
        };
        match fix {
            Fix::Merged => {
                internal_mut(&mut parent.write()).remove_after(li);
                self.store.mark_dirty(&left);
                let right_id = right.id();
                drop(right);
                self.store.free(right_id);
            }
            Fix::Moved(up) => {
                {
                    let mut g = parent.write();
                    let p = internal_mut(&mut g);
                    p.keys.replace(li, up);
                    p.recount();
                }
                self.store.mark_dirty(&left);
                self.store.mark_dirty(&right);
            }
        }
        self.store.mark_dirty(parent);
        Ok(())
    }
}
