//! The B+-tree's metadata in the superblock, written with every checkpoint and read at open.
//!
//! ```text
//! 0 tag u8 (1) | 1 version u8 | 2 node size u32 | 6 root u64 | 14 live keys u64 |
//! 22 live bytes u64 | 30 leaves u64 | 38 internal nodes u64 | 46 blobs u64 | 54 height u32
//! ```
//! A newer version is refused, not guessed at.

use super::*;
use crate::engine::{meta_reader, meta_writer};

pub(super) const META_VERSION: u8 = 1;

impl BTree {
    pub fn open(
        pager: Pager,
        cp: &Checkpoint,
        cache_bytes: usize,
        merge: Option<Arc<dyn MergeOperator>>,
    ) -> Result<BTree> {
        let file = pager.file_name().to_string();
        let bad = |what: &str| Error::corruption(&file, 0, format!("B+-tree metadata: {what}"));
        let (_, mut r) = meta_reader(&cp.engine_meta, ENGINE_TAG, META_VERSION, &file, bad)?;
        let field = |e: String| bad(&e);
        let node_size = r.u32().map_err(field)? as usize;
        Self::check_node_size(node_size).map_err(|_| bad("node size out of range"))?;
        let root = r.u64().map_err(field)?;
        let mut counts = [0u64; 5];
        for c in &mut counts {
            *c = r.u64().map_err(field)?;
        }
        let [live_keys, live_bytes, leaves, internals, blobs] = counts;
        let height = r.u32().map_err(field)?;
        // A write's descent reserves a path of `height` nodes, and height 0 underflows when
        // the root collapses.
        if !(1..=MAX_HEIGHT).contains(&height) {
            return Err(bad("height out of range"));
        }
        Ok(BTree {
            store: BTree::pool(pager, cache_bytes),
            merge,
            root,
            node_size,
            inline_max: node_size / 4,
            height,
            live_keys,
            live_bytes,
            leaves,
            internals,
            blobs,
        })
    }

    pub(super) fn meta(&self) -> Vec<u8> {
        let mut w = meta_writer(ENGINE_TAG, META_VERSION);
        w.u32(self.node_size as u32);
        for v in [
            self.root,
            self.live_keys,
            self.live_bytes,
            self.leaves,
            self.internals,
            self.blobs,
        ] {
            w.u64(v);
        }
        w.u32(self.height);
        w.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{SimDevice, SimDisk};

    /// The metadata's bytes are a format: a change of code must not change them.
    #[test]
    fn metadata_golden_bytes() {
        let disk = SimDisk::new(Default::default(), 0.0);
        let pager = Pager::create(Arc::new(SimDevice::new("data", disk)));
        let mut t = BTree::create(pager, 4096, 1 << 20, None).unwrap();
        t.root = 0x0102_0304_0506_0708;
        (t.live_keys, t.live_bytes, t.leaves, t.internals, t.blobs) = (10, 11, 12, 13, 14);
        t.height = 3;
        let mut want = vec![ENGINE_TAG, 1];
        want.extend([0, 16, 0, 0]); // 4 KiB nodes
        want.extend([8, 7, 6, 5, 4, 3, 2, 1]); // root
        for v in [10u8, 11, 12, 13, 14] {
            want.extend([v, 0, 0, 0, 0, 0, 0, 0]);
        }
        want.extend([3, 0, 0, 0]); // height
        assert_eq!(t.meta(), want);
    }
}
