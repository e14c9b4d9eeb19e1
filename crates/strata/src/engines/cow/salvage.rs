//! The copy-on-write B-tree's side of salvage (`crate::salvage`): a live version's entries,
//! read from its root with every node that fails routed around (it costs its key range, the
//! one its parent's separators give it, at every version whose tree holds it); and a new tree
//! given a version tree and each live version's entries (`import_tree`, `import_version`).
//! Only the damage list and the new tree are written.
//!
//! The copy shares nodes between versions: a version's tree starts as its nearest live
//! ancestor's, shared, and takes what differs (`import_version`), so the copy holds about what
//! the versions' differences need, as the source's clones and writes had made it; the
//! source's history itself (which writes came when) is gone, so the sharing is by content.

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

    /// Put `entries` (version `v`'s, ascending) into `v`'s tree, internal versions too. Called
    /// for the live versions in ascending order, so a version's live ancestors come first:
    /// `v` starts from its nearest live ancestor's tree, shared, and takes only what differs
    /// from it (the keys it changed, added and does not have), so the copy shares nodes
    /// wherever versions agree, as clones and writes had made the source's.
    pub(crate) fn import_version(
        &mut self,
        v: Version,
        entries: &[(Vec<u8>, Vec<u8>)],
    ) -> Result<()> {
        let base = self
            .tree
            .ancestry(v)
            .into_iter()
            .skip(1)
            .find(|&a| self.tree.is_live(a));
        let Some(p) = base else {
            for (k, x) in entries {
                self.put_in(v, k, x)?;
            }
            return self.after_change();
        };
        // The ancestor as this copy holds it (nothing here is damaged).
        let from = self.salvage_version(p, &mut Vec::new(), &mut HashSet::new())?;
        let shared = self.roots[&p];
        *self.counts.get_mut(&shared).expect("counted") += 1;
        let empty = self
            .roots
            .insert(v, shared)
            .expect("import_tree gave it a root");
        self.release(empty)?;
        let (mut i, mut j) = (0, 0);
        while i < from.len() || j < entries.len() {
            match (from.get(i), entries.get(j)) {
                (Some((a, x)), Some((b, y))) if a == b => {
                    if x != y {
                        self.put_in(v, b, y)?;
                    }
                    i += 1;
                    j += 1;
                }
                (Some((a, _)), Some((b, _))) if a < b => {
                    self.delete_in(v, a)?;
                    i += 1;
                }
                (Some((a, _)), None) => {
                    self.delete_in(v, a)?;
                    i += 1;
                }
                (_, Some((b, y))) => {
                    self.put_in(v, b, y)?;
                    j += 1;
                }
                (None, None) => unreachable!("the loop runs while either has entries"),
            }
        }
        self.after_change()
    }
}
