//! `VersionedEngine::dump` for the copy-on-write B-tree: every node reachable from a live
//! version's root, once, in level order from the roots (a node shared by trees of different
//! heights is shown at the first depth it is reached), with its id, size as written,
//! separators (internal) or first and last key (leaf), and, for a root, the versions whose
//! root it is. `levels` limits the depth; the height is the tallest version's (each version's
//! tree is balanced: its leftmost path). Read-only: nodes are read through the buffer pool.

use std::collections::{BTreeMap, HashSet};

use super::*;
use crate::engine::dump::{Dump, DumpChild, DumpNode};

impl CowTree {
    pub(super) fn dump_levels(&mut self, levels: u32) -> Result<Dump> {
        let mut rooted: BTreeMap<NodeId, Vec<Version>> = BTreeMap::new();
        for (&v, &root) in &self.roots {
            if self.tree.is_live(v) {
                rooted.entry(root).or_default().push(v);
            }
        }
        let mut seen: HashSet<NodeId> = rooted.keys().copied().collect();
        let mut frontier: Vec<NodeId> = rooted.keys().copied().collect();
        let mut height = 0;
        for &root in rooted.keys() {
            height = height.max(self.leftmost_depth(root)?);
        }
        let (mut nodes, mut level) = (Vec::new(), 0u32);
        while !frontier.is_empty() && (levels == 0 || level < levels) {
            let mut next = Vec::new();
            for id in frontier {
                let node = self.load(id)?;
                let bytes = (crate::storage::block::BLOCK_HEADER + node.encode().1.len()) as u64;
                let mut d = DumpNode {
                    level,
                    id,
                    bytes,
                    versions: rooted.get(&id).cloned().unwrap_or_default(),
                    ..DumpNode::default()
                };
                match node {
                    Node::Leaf(es) => {
                        d.kind = "leaf";
                        d.entries = es.len() as u64;
                        d.range = es
                            .first()
                            .zip(es.last())
                            .map(|(a, b)| (a.0.clone(), b.0.clone()));
                    }
                    Node::Internal { seps, kids } => {
                        d.kind = "internal";
                        d.pivots = seps;
                        d.children = kids
                            .iter()
                            .map(|&c| DumpChild {
                                id: c,
                                ..DumpChild::default()
                            })
                            .collect();
                        next.extend(kids.into_iter().filter(|c| seen.insert(*c)));
                    }
                }
                nodes.push(d);
            }
            frontier = next;
            level += 1;
        }
        let shared = self.counts.values().filter(|&&n| n > 1).count();
        Ok(Dump {
            engine: "cow",
            height,
            nodes,
            notes: vec![format!(
                "{} live versions share {} nodes, {shared} of them by more than one pointer",
                self.tree.live().count(),
                self.counts.len()
            )],
        })
    }

    /// The nodes on the path from `id` down its first children to a leaf.
    fn leftmost_depth(&mut self, mut id: NodeId) -> Result<u32> {
        let mut depth = 1;
        while let Node::Internal { kids, .. } = self.load(id)? {
            id = kids[0];
            depth += 1;
        }
        Ok(depth)
    }
}
