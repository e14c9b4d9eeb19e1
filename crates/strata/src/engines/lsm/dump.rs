//! `Engine::dump` for the LSM-tree: its levels from the manifest it holds in memory (no IO),
//! each run's tables with id, size, messages and key range, newest run last; and the memtable.
//! `levels` limits how many levels are shown. Read-only.

use super::*;
use crate::engine::dump::{Dump, DumpNode};

impl Lsm {
    pub(super) fn dump_levels(&mut self, levels: u32) -> Result<Dump> {
        let shown = if levels == 0 {
            self.levels.len()
        } else {
            self.levels.len().min(levels as usize)
        };
        let mut nodes = Vec::new();
        for (l, level) in self.levels.iter().enumerate().take(shown) {
            for (r, run) in level.runs.iter().enumerate() {
                for t in run {
                    nodes.push(DumpNode {
                        level: l as u32,
                        id: t.id,
                        kind: "table",
                        bytes: t.bytes,
                        entries: t.points + t.ranges as u64,
                        range: Some((t.smallest.clone(), t.largest.clone())),
                        run: Some(r as u32),
                        ..DumpNode::default()
                    });
                }
            }
        }
        Ok(Dump {
            engine: "lsm",
            height: self.levels.len() as u32,
            nodes,
            notes: vec![format!(
                "memtable: {} messages, {} B; policy {:?}",
                self.mem.messages(),
                self.mem.bytes(),
                self.cfg.policy
            )],
        })
    }
}
