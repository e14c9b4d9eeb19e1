//! The Bε-tree's metadata in the superblock, written with every checkpoint and read at open.
//!
//! ```text
//! 0 tag u8 (2) | 1 version u8 | 2 node size u32 | 6 fanout u32 | 10 basement u32 | 14 root u64 |
//! 22 height u32 | 26 next seq u64 | 34 live keys u64 | 42 live bytes u64 | 50 leaves u64 |
//! 58 internal nodes u64 | 66 blobs u64 | 74 buffered messages u64 | 82 origin u8 | 83 runs u64
//! ```
//! Version 1 ends before `runs` (read as none). A newer version is refused, not guessed at.

use super::*;
use crate::engine::{meta_reader, meta_writer};

/// Version 2 added the count of runs (version 1, without it, is read as having none).
pub(super) const META_VERSION: u8 = 2;

#[cfg(test)]
const META_V1_LEN: usize = 2 + 12 + 8 + 4 + 7 * 8 + 1;
#[cfg(test)]
const META_LEN: usize = META_V1_LEN + 8;

impl BeTree {
    pub fn open(
        pager: Pager,
        cp: &Checkpoint,
        cache_bytes: usize,
        merge: Option<Arc<dyn MergeOperator>>,
    ) -> Result<BeTree> {
        let file = pager.file_name().to_string();
        let bad = |what: &str| Error::corruption(&file, 0, format!("Bε-tree metadata: {what}"));
        let (version, mut r) = meta_reader(&cp.engine_meta, ENGINE_TAG, META_VERSION, &file, bad)?;
        let field = |e: String| bad(&e);
        let geo = Geometry {
            node_size: r.u32().map_err(field)? as usize,
            fanout: r.u32().map_err(field)? as usize,
            basement: r.u32().map_err(field)? as usize,
        };
        geo.check().map_err(|_| bad("geometry out of range"))?;
        let root = r.u64().map_err(field)?;
        let height = r.u32().map_err(field)?;
        // No tree is taller (see `MAX_HEIGHT`), and height 0 underflows when the root collapses.
        if !(1..=MAX_HEIGHT).contains(&height) {
            return Err(bad("height out of range"));
        }
        let mut counts = [0u64; 7];
        for c in &mut counts {
            *c = r.u64().map_err(field)?;
        }
        let [next_seq, live_keys, live_bytes, leaves, internals, blobs, buffered] = counts;
        let origin = Origin::from_byte(r.u8().map_err(field)?);
        let runs = match version {
            1 => 0,
            _ => r.u64().map_err(field)?,
        };
        Ok(BeTree {
            store: node_store(pager, cache_bytes),
            merge,
            geo,
            origin,
            root,
            height,
            next_seq,
            live_keys,
            live_bytes,
            leaves,
            internals,
            blobs,
            buffered,
            runs,
            run_merges: 0,
            scratch: Scratch::default(),
            background: true,
            drainer: None,
            syncing: Default::default(),
            drains: Default::default(),
        })
    }

    pub(super) fn meta(&self) -> Vec<u8> {
        let mut w = meta_writer(ENGINE_TAG, META_VERSION);
        for v in [self.geo.node_size, self.geo.fanout, self.geo.basement] {
            w.u32(v as u32);
        }
        w.u64(self.root).u32(self.height);
        for v in [
            self.next_seq,
            self.live_keys,
            self.live_bytes,
            self.leaves,
            self.internals,
            self.blobs,
            self.buffered,
        ] {
            w.u64(v);
        }
        w.u8(self.origin.byte()).u64(self.runs);
        w.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> BeTree {
        sim_tree(Origin::Profile, 1 << 20, None)
    }

    /// The metadata's bytes are a format: a change of code must not change them.
    #[test]
    fn metadata_golden_bytes() {
        let mut t = tree();
        t.root = 0x0102_0304_0506_0708;
        t.next_seq = 9;
        (t.live_keys, t.live_bytes, t.leaves, t.internals) = (10, 11, 12, 13);
        (t.blobs, t.buffered, t.runs) = (14, 15, 16);
        let mut want = vec![ENGINE_TAG, 2];
        want.extend([0, 0, 1, 0, 8, 0, 0, 0, 0, 16, 0, 0]); // 64 KiB, 8, 4 KiB
        want.extend([8, 7, 6, 5, 4, 3, 2, 1]); // root
        want.extend([1, 0, 0, 0]); // height
        for v in [9u8, 10, 11, 12, 13, 14, 15] {
            want.extend([v, 0, 0, 0, 0, 0, 0, 0]);
        }
        want.push(2); // origin: the tuner
        want.extend([16, 0, 0, 0, 0, 0, 0, 0]); // runs
        assert_eq!(t.meta(), want);
        assert_eq!(want.len(), META_LEN);
    }

    /// Version 1 (before the count of runs) still opens, as having none.
    #[test]
    fn version_1_metadata_opens_with_no_runs() {
        let t = tree();
        let mut m = t.meta();
        m.truncate(META_V1_LEN);
        m[1] = 1;
        let pager = t.store.pager();
        let cp = Checkpoint {
            engine_meta: m.clone(),
            ..pager.last_checkpoint().clone()
        };
        let dev = pager.device().clone();
        let (p, _) = Pager::open(dev).unwrap();
        let opened = BeTree::open(p, &cp, 1 << 20, None).unwrap();
        assert_eq!(opened.runs, 0);
        assert_eq!(opened.geo, t.geo);
        m[1] = 3;
        let cp = Checkpoint {
            engine_meta: m,
            ..cp
        };
        let (p, _) = Pager::open(t.store.pager().device().clone()).unwrap();
        assert!(matches!(
            BeTree::open(p, &cp, 1 << 20, None),
            Err(Error::UnsupportedVersion { found: 3, .. })
        ));
    }
}
