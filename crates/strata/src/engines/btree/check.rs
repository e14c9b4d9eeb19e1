//! `check` for the B+-tree: every block's checksum, then a walk that checks key order and
//! ranges, depths, blobs and the counts the metadata keeps.

use super::*;
use crate::engine::check_reachable;

impl BTree {
    /// `Engine::check`: every block's checksum, then the walk and the metadata's counts.
    pub(super) fn check_tree(&mut self) -> Result<CheckReport> {
        let mut report = CheckReport::default();
        let pager = self.store.pager();
        pager.verify_extents()?;
        for id in pager.ids() {
            pager.read_block(id)?;
            report.blocks_verified += 1;
        }
        let mut walk = Walk {
            report,
            depth_seen: None,
            live_bytes: 0,
            reachable: Default::default(),
        };
        self.walk(self.root, None, None, 1, &mut walk)?;
        let mut report = walk.report;
        let file = self.store.pager().file_name().to_string();
        let bad = |what: String| Error::corruption(&file, 0, what);
        report.height = self.height;
        if (report.keys, walk.live_bytes) != (self.live_keys, self.live_bytes) {
            return Err(bad(format!(
                "tree holds {} keys / {} bytes, metadata says {} / {}",
                report.keys, walk.live_bytes, self.live_keys, self.live_bytes
            )));
        }
        if (report.leaf_nodes, report.internal_nodes, report.blobs)
            != (self.leaves, self.internals, self.blobs)
        {
            return Err(bad(format!(
                "found {} leaves, {} internal nodes, {} blobs; metadata says {}, {}, {}",
                report.leaf_nodes,
                report.internal_nodes,
                report.blobs,
                self.leaves,
                self.internals,
                self.blobs
            )));
        }
        check_reachable(self.store.pager(), &walk.reachable)?;
        Ok(report)
    }
}

pub(super) struct Walk {
    report: CheckReport,
    depth_seen: Option<u32>,
    live_bytes: u64,
    reachable: std::collections::HashSet<NodeId>,
}

impl BTree {
    pub(super) fn walk(
        &mut self,
        id: NodeId,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        depth: u32,
        w: &mut Walk,
    ) -> Result<()> {
        let file = self.store.pager().file_name().to_string();
        let at = self.store.pager().extent(id).map_or(0, |e| e.offset);
        let bad = |what: String| Error::corruption(&file, at, format!("node {id}: {what}"));
        w.reachable.insert(id);
        let pin = self.store.get(id)?;
        let is_root = id == self.root;
        let node = pin.read().clone();
        drop(pin);
        let keys = match &node {
            Node::Leaf(l) => &l.keys,
            Node::Internal(n) => &n.keys,
        };
        if keys.iter().zip(keys.iter().skip(1)).any(|(a, b)| a >= b) {
            return Err(bad("keys out of order".into()));
        }
        if let (Some(lo), Some(first)) = (lo, keys.first()) {
            if first < lo {
                return Err(bad("key below its lower fence".into()));
            }
        }
        if let (Some(hi), Some(last)) = (hi, keys.last()) {
            if last >= hi {
                return Err(bad("key at or above its upper fence".into()));
            }
        }
        match node {
            Node::Leaf(l) => {
                if l.keys.is_empty() && !is_root {
                    return Err(bad("empty non-root leaf".into()));
                }
                if *w.depth_seen.get_or_insert(depth) != depth || depth != self.height {
                    return Err(bad(format!(
                        "leaf at depth {depth}, tree height {}",
                        self.height
                    )));
                }
                w.report.leaf_nodes += 1;
                w.report.keys += l.keys.len() as u64;
                for (k, v) in l.keys.iter().zip(&l.vals) {
                    w.live_bytes += (k.len() + v.logical_len()) as u64;
                    if let Val::Blob { id, .. } = v {
                        w.reachable.insert(*id);
                        w.report.blobs += 1;
                        self.read_val(v)?;
                    }
                }
            }
            Node::Internal(n) => {
                if n.children.len() < 2 {
                    return Err(bad("internal node with fewer than two children".into()));
                }
                w.report.internal_nodes += 1;
                for (i, &c) in n.children.iter().enumerate() {
                    let clo = if i == 0 { lo } else { Some(n.keys.get(i - 1)) };
                    let chi = if i == n.keys.len() {
                        hi
                    } else {
                        Some(n.keys.get(i))
                    };
                    self.walk(c, clo, chi, depth + 1, w)?;
                }
            }
        }
        Ok(())
    }
}
