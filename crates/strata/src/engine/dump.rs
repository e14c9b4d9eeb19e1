//! What `strata dump` shows of an engine: its nodes level by level, root first (`Engine::dump`,
//! `VersionedEngine::dump`). The types name no engine, so one renderer serves the B+-tree, the
//! Bε-tree, the LSM-tree, the SDA and the copy-on-write B-tree.
//! A dump is read-only: it reads node heads through the buffer pool (or, for the LSM-tree, only
//! the manifest it holds in memory) and changes nothing.

/// An engine's structure in level order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Dump {
    pub engine: &'static str,
    /// Levels the structure has (tree height, or LSM levels in use).
    pub height: u32,
    /// Nodes in level order; within a level, in key order.
    pub nodes: Vec<DumpNode>,
    /// What is not a node but matters for reading the dump (an LSM memtable, say).
    pub notes: Vec<String>,
}

/// One node (or, for the LSM-tree, one table of a run).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DumpNode {
    /// 0 at the root (the LSM-tree: its level number).
    pub level: u32,
    pub id: u64,
    /// "internal", "leaf", "table" or "array".
    pub kind: &'static str,
    /// Bytes of the node as written.
    pub bytes: u64,
    /// Entries a leaf or table holds, or messages an internal node buffers.
    pub entries: u64,
    /// Separator keys: between children, or between a Bε-tree leaf's basements.
    pub pivots: Vec<Vec<u8>>,
    /// Per child of an internal node, in key order.
    pub children: Vec<DumpChild>,
    /// Smallest and largest key held, where the node records them (leaves, tables).
    pub range: Option<(Vec<u8>, Vec<u8>)>,
    /// Which run of its level a table belongs to (the LSM-tree; 0 the oldest).
    pub run: Option<u32>,
    /// Versions, for a versioned engine: the ones an SDA array serves (its W), or those whose
    /// root a copy-on-write B-tree node is. Empty elsewhere.
    pub versions: Vec<u64>,
}

/// An internal node's child, with what the node buffers for it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DumpChild {
    pub id: u64,
    pub buffered_bytes: u64,
    pub buffered_messages: u64,
    /// Runs spilled toward the child (Bε-tree), oldest first.
    pub runs: Vec<DumpRun>,
}

/// A run spilled beside a Bε-tree leaf.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DumpRun {
    pub id: u64,
    pub bytes: u64,
    pub messages: u64,
}

/// Visit a tree in level order from `root` down to `levels` levels (0: all), calling `node` on
/// each id with its level; `node` describes it and returns its children's ids.
pub(crate) fn level_order<E>(
    root: u64,
    levels: u32,
    mut node: impl FnMut(u64, u32) -> std::result::Result<(DumpNode, Vec<u64>), E>,
) -> std::result::Result<Vec<DumpNode>, E> {
    let mut out = Vec::new();
    let mut frontier = vec![root];
    let mut level = 0;
    while !frontier.is_empty() && (levels == 0 || level < levels) {
        let mut next = Vec::new();
        for id in frontier {
            let (d, children) = node(id, level)?;
            out.push(d);
            next.extend(children);
        }
        frontier = next;
        level += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_order_visits_each_level_before_the_next_and_stops_at_the_limit() {
        // 1 -> (2, 3), 2 -> (4), 3 -> (5)
        let kids = |id: u64| match id {
            1 => vec![2, 3],
            2 => vec![4],
            3 => vec![5],
            _ => vec![],
        };
        let visit = |id: u64, level: u32| -> std::result::Result<_, ()> {
            Ok((
                DumpNode {
                    id,
                    level,
                    ..DumpNode::default()
                },
                kids(id),
            ))
        };
        let all = level_order(1, 0, visit).unwrap();
        let seen: Vec<(u64, u32)> = all.iter().map(|n| (n.id, n.level)).collect();
        assert_eq!(seen, vec![(1, 0), (2, 1), (3, 1), (4, 2), (5, 2)]);
        let two = level_order(1, 2, visit).unwrap();
        assert_eq!(two.iter().map(|n| n.id).collect::<Vec<_>>(), vec![1, 2, 3]);
    }
}
