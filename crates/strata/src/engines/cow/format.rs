//! The CoW B-tree's metadata: its configuration and the manifest's place in the superblock,
//! and the manifest block (the version tree, each live version's root and every node's
//! reference count), written with every checkpoint and read at open.
//!
//! ```text
//! superblock: 0 tag u8 (5) | 1 version u8 | 2 leaf entries u32 | 6 fanout u32 |
//!             10 cache bytes u64 | 18 manifest id u64
//! manifest:   version tree (engine::versions) | roots u32, per root: version u64, node u64 |
//!             counts u32, per node: id u64, count u32 (ascending ids)
//! ```
//! A newer version is refused, not guessed at.

use std::collections::BTreeMap;

use super::*;
use crate::codec::{Reader, Writer};
use crate::engine::{meta_reader, meta_writer};

pub(super) const META_VERSION: u8 = 1;

pub(super) fn encode_meta(cfg: &Config, manifest: NodeId) -> Vec<u8> {
    let mut w = meta_writer(ENGINE_TAG, META_VERSION);
    w.u32(cfg.leaf_entries)
        .u32(cfg.fanout)
        .u64(cfg.cache_bytes as u64)
        .u64(manifest);
    w.finish()
}

pub(super) fn decode_meta(meta: &[u8], file: &str) -> Result<(Config, NodeId)> {
    let bad = |what: &str| Error::corruption(file, 0, format!("CoW B-tree metadata: {what}"));
    let (_, mut r) = meta_reader(meta, ENGINE_TAG, META_VERSION, file, bad)?;
    let field = |e: String| bad(&e);
    let cfg = Config {
        leaf_entries: r.u32().map_err(field)?,
        fanout: r.u32().map_err(field)?,
        cache_bytes: r.u64().map_err(field)? as usize,
    };
    cfg.check().map_err(|_| bad("configuration out of range"))?;
    let manifest = r.u64().map_err(field)?;
    Ok((cfg, manifest))
}

pub(super) type Manifest = (
    VersionTree,
    BTreeMap<Version, NodeId>,
    BTreeMap<NodeId, u32>,
);

pub(super) fn encode_manifest(
    tree: &VersionTree,
    roots: &BTreeMap<Version, NodeId>,
    counts: &BTreeMap<NodeId, u32>,
) -> Vec<u8> {
    let mut w = Writer::new();
    tree.encode(&mut w);
    w.u32(roots.len() as u32);
    for (&v, &id) in roots {
        w.u64(v).u64(id);
    }
    w.u32(counts.len() as u32);
    for (&id, &n) in counts {
        w.u64(id).u32(n);
    }
    w.finish()
}

pub(super) fn decode_manifest(p: &[u8]) -> std::result::Result<Manifest, String> {
    let mut r = Reader::new(p);
    let tree = VersionTree::decode(&mut r)?;
    let mut roots = BTreeMap::new();
    for _ in 0..r.u32()? {
        let v = r.u64()?;
        if !tree.is_live(v) || roots.insert(v, r.u64()?).is_some() {
            return Err(format!("root of version {v}: not live, or twice"));
        }
    }
    if roots.len() != tree.live().count() {
        return Err("a live version without a root".into());
    }
    let mut counts = BTreeMap::new();
    for _ in 0..r.u32()? {
        let id = r.u64()?;
        let n = r.u32()?;
        if n == 0 || counts.insert(id, n).is_some() {
            return Err(format!("node {id}: count {n}, or twice"));
        }
    }
    r.finish()?;
    Ok((tree, roots, counts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_golden_bytes() {
        let meta = encode_meta(&Config::tiny(), 7);
        let hex: String = meta.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "0501040000000400000000400000000000000700000000000000");
        assert_eq!(decode_meta(&meta, "f").unwrap(), (Config::tiny(), 7));
        let mut newer = meta.clone();
        newer[1] = META_VERSION + 1;
        assert!(matches!(
            decode_meta(&newer, "f"),
            Err(Error::UnsupportedVersion { .. })
        ));
    }

    #[test]
    fn the_manifest_reads_back_and_needs_a_root_per_live_version() {
        let mut tree = VersionTree::new();
        let a = tree.clone_version(0).unwrap();
        let roots = BTreeMap::from([(0, 5), (a, 5)]);
        let counts = BTreeMap::from([(5, 2)]);
        let bytes = encode_manifest(&tree, &roots, &counts);
        assert_eq!(
            decode_manifest(&bytes).unwrap(),
            (tree.clone(), roots.clone(), counts.clone())
        );
        let fewer = BTreeMap::from([(0, 5)]);
        assert!(decode_manifest(&encode_manifest(&tree, &fewer, &counts)).is_err());
    }
}
