//! The copy-on-write B-tree's side of salvage (`crate::salvage`): a live version's entries,
//! read from its root with every node that fails routed around (it costs its key range, the
//! one its parent's separators give it, at every version whose tree holds it); and a new tree
//! given a version tree and each live version's entries (`import_tree`, `import_version`).
//! Only the damage list and the new tree are written.
//!
//! The copy shares no node between versions: each live version's tree is built from its own
//! entries (the source's sharing came from its history of clones and writes, which is gone).
//! Its space is then about the sum of what each version sees, where the source's was what the
//! shadowing of its writes copied.

use std::collections::HashSet;

use super::*;
use crate::engine::salvage::Damage;

impl CowTree {
    /// Version `v`'s entries, ascending, as far as its nodes read. A node that fails is
    /// reported once (`reported` holds those already), with its key range.
    pub(crate) fn salvage_version(
        &mut self,
        v: Version,
        damage: &mut Vec<Damage>,
        reported: &mut HashSet<NodeId>,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        // Depth first, children pushed right to left so that keys come out ascending.
        let mut stack: Vec<Visit> = vec![(self.roots[&v], None, None)];
        while let Some((id, lo, hi)) = stack.pop() {
            let node = match self.load(id) {
                Ok(n) => n,
                Err(e) if e.is_corruption() => {
                    if reported.insert(id) {
                        let d = Damage::new("CoW B-tree node", Some(id), e)
                            .keys(lo.as_deref(), hi.as_deref());
                        damage.push(d);
                    }
                    continue;
                }
                Err(e) => return Err(e),
            };
            match node {
                Node::Leaf(es) => out.extend(es),
                Node::Internal { seps, kids } => {
                    for (i, &k) in kids.iter().enumerate().rev() {
                        stack.push(child_visit(k, i, &seps, &lo, &hi));
                    }
                }
            }
        }
        Ok(out)
    }

    /// Give a new tree the version tree `tree`: every live version gets an empty root of its
    /// own (`import_version` fills them).
    pub(crate) fn import_tree(&mut self, tree: VersionTree) -> Result<()> {
        if self.roots.len() != 1 || self.tree.next_version() != 1 {
            return Err(Error::InvalidOptions(
                "a CoW B-tree is imported into only when new".into(),
            ));
        }
        let old = self.roots.remove(&ROOT).expect("a new tree has its root");
        self.release(old)?;
        for v in tree.live() {
            let leaf = self.create_node(Node::Leaf(Vec::new()))?;
            self.roots.insert(v, leaf);
        }
        self.tree = tree;
        Ok(())
    }

    /// Put `entries` into version `v`'s tree, internal versions too.
    pub(crate) fn import_version(
        &mut self,
        v: Version,
        entries: &[(Vec<u8>, Vec<u8>)],
    ) -> Result<()> {
        for (k, x) in entries {
            self.put_in(v, k, x)?;
        }
        self.after_change()
    }
}
