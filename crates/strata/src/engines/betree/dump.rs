//! `Engine::dump` for the Bε-tree: a level-order walk over node heads (no partition is loaded):
//! each node's id, kind, size, pivots, and per child the segment's buffered bytes and messages
//! and the runs spilled toward it. Read-only.

use super::*;
use crate::engine::dump::{level_order, Dump, DumpChild, DumpNode, DumpRun};

impl BeTree {
    pub(super) fn dump_levels(&mut self, levels: u32) -> Result<Dump> {
        let nodes = level_order(self.root, levels, |id, level| {
            let pin = self.store.get(id)?;
            let g = pin.read();
            let keys = |k: &Keys| k.iter().map(<[u8]>::to_vec).collect::<Vec<_>>();
            Ok(match &*g {
                Block::Internal(n) => (
                    DumpNode {
                        level,
                        id,
                        kind: "internal",
                        bytes: n.size() as u64,
                        entries: n.segs.iter().map(|s| s.count as u64).sum(),
                        pivots: keys(&n.pivots),
                        children: n
                            .children
                            .iter()
                            .zip(&n.segs)
                            .zip(&n.runs)
                            .map(|((&c, s), runs)| DumpChild {
                                id: c,
                                buffered_bytes: s.bytes as u64,
                                buffered_messages: s.count as u64,
                                runs: runs
                                    .iter()
                                    .map(|r| DumpRun {
                                        id: r.id,
                                        bytes: r.bytes as u64,
                                        messages: r.count as u64,
                                    })
                                    .collect(),
                            })
                            .collect(),
                        ..DumpNode::default()
                    },
                    n.children.clone(),
                ),
                Block::Leaf(l) => (
                    DumpNode {
                        level,
                        id,
                        kind: "leaf",
                        bytes: l.size() as u64,
                        entries: l.entries(),
                        pivots: keys(&l.pivots),
                        ..DumpNode::default()
                    },
                    Vec::new(),
                ),
                Block::Run(_) => {
                    let what = format!("node {id}: a run where a tree node was expected");
                    return Err(self.corrupt(id, what));
                }
            })
        })?;
        Ok(Dump {
            engine: "betree",
            height: self.height,
            nodes,
            notes: vec![format!(
                "geometry: {} B nodes, fanout {}, {} B basements; {} messages buffered, {} runs",
                self.geo.node_size, self.geo.fanout, self.geo.basement, self.buffered, self.runs
            )],
        })
    }
}
