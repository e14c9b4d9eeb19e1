//! `VersionedEngine::dump` for the SDA: its levels from the manifest it holds in memory, each
//! array with its id, size, entries, key range (from its head, read once and kept) and W, the
//! versions it serves; the write buffer and a merge running on its own thread as notes.
//! `levels` limits how many levels are shown. Read-only.

use super::*;
use crate::engine::dump::{Dump, DumpNode};

impl Sda {
    pub(super) fn dump_levels(&mut self, levels: u32) -> Result<Dump> {
        let shown = if levels == 0 {
            self.levels.len()
        } else {
            self.levels.len().min(levels as usize)
        };
        let arrays: Vec<(usize, ArrayInfo)> = self
            .levels
            .iter()
            .enumerate()
            .take(shown)
            .flat_map(|(l, arrays)| arrays.iter().map(move |a| (l, a.clone())))
            .collect();
        let mut nodes = Vec::with_capacity(arrays.len());
        for (l, a) in arrays {
            let head = self.head(a.id)?;
            let first = head.firsts.first().unwrap_or_default().to_vec();
            nodes.push(DumpNode {
                level: l as u32,
                id: a.id,
                kind: "array",
                bytes: a.bytes,
                entries: a.entries,
                range: Some((first, head.largest.clone())),
                versions: a.versions.clone(),
                ..DumpNode::default()
            });
        }
        let mut notes = vec![format!(
            "write buffer: {} entries, {} B of {} B; {} live versions",
            self.buffer.len(),
            self.buffered_bytes,
            self.cfg.buffer_bytes,
            self.tree.live().count()
        )];
        if let Some([a, b]) = self.busy().get(..2).map(|x| [x[0], x[1]]) {
            notes.push(format!("merging on its own thread: arrays {a} and {b}"));
        }
        Ok(Dump {
            engine: "sda",
            height: self.levels.len() as u32,
            nodes,
            notes,
        })
    }
}
