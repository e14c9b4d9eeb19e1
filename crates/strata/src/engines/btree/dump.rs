//! `Engine::dump` for the B+-tree: a level-order walk from the root giving each node's id, kind,
//! size as written, separators (internal) or first and last key (leaf). Read-only.

use super::*;
use crate::engine::dump::{level_order, Dump, DumpChild, DumpNode};
use node::{Internal, Leaf, Node};

impl BTree {
    pub(super) fn dump_levels(&mut self, levels: u32) -> Result<Dump> {
        let nodes = level_order(self.root, levels, |id, level| {
            let pin = self.store.get(id)?;
            let g = pin.read();
            Ok(match &*g {
                Node::Internal(Internal {
                    keys,
                    children,
                    bytes,
                }) => (
                    DumpNode {
                        level,
                        id,
                        kind: "internal",
                        bytes: (BLOCK_HEADER + bytes) as u64,
                        pivots: keys.iter().map(<[u8]>::to_vec).collect(),
                        children: children
                            .iter()
                            .map(|&c| DumpChild {
                                id: c,
                                ..DumpChild::default()
                            })
                            .collect(),
                        ..DumpNode::default()
                    },
                    children.clone(),
                ),
                Node::Leaf(Leaf { keys, bytes, .. }) => (
                    DumpNode {
                        level,
                        id,
                        kind: "leaf",
                        bytes: (BLOCK_HEADER + bytes) as u64,
                        entries: keys.len() as u64,
                        range: (!keys.is_empty())
                            .then(|| (keys.get(0).to_vec(), keys.get(keys.len() - 1).to_vec())),
                        ..DumpNode::default()
                    },
                    Vec::new(),
                ),
            })
        })?;
        Ok(Dump {
            engine: "btree",
            height: self.height,
            nodes,
            notes: vec![format!("node size {} B", self.node_size)],
        })
    }
}
