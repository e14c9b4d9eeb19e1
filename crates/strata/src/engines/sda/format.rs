//! The SDA's metadata: its configuration and the manifest's place in the superblock, and the
//! manifest block (counters, the version tree, the levels with each array's id, size and
//! version set), written with every checkpoint (copy-on-write, like any block) and read at
//! open. The version tree lives in the manifest, not the superblock, because it grows with
//! every clone.
//!
//! ```text
//! superblock: 0 tag u8 (4) | 1 version u8 (4) | 2 buffer u32 | 6 level-0 entries u32 |
//!             10 block u32 | 14 filter bits f64 | 22 manifest id u64 | 30 next seq u64 |
//!             38 flags u8 (1: no density amplification; version 2 on, version 1 has none)
//! manifest:   flushes u64 | merges u64 | splits u64 | dropped entries u64 |
//!             merge bytes read u64 | merge bytes written u64 | [v3: reclaims u64] |
//!             version tree (engine::versions) |
//!             levels u32, per level: arrays u32, per array: id u64, entries u64, bytes u64,
//!             versions u32, each u64 (ascending) |
//!             [v3: written u32, each: version u64, entries u64 (ascending, summing to entries;
//!             none for an array carried over from a version 2 manifest)]
//! ```
//! The superblock's version is the manifest's too: versions 1 and 2 are read without the
//! reclaim counter and the per-version counts. Version 4 has version 3's fields and says the
//! file may hold arrays of varint entries (`array::KIND_ARRAY2`), which a reader of version 3
//! cannot read; versions 1 to 3 are still read, and their arrays (`KIND_ARRAY`) with them,
//! until merges rewrite them. A newer version is refused, not guessed at.

use super::policy::ArrayInfo;
use super::*;
use crate::codec::{Reader, Writer};
use crate::engine::{meta_reader, meta_writer};

/// Version 2 added the flags byte; version 1 (without it) is still read, as flags 0.
/// Version 3 added the manifest's reclaim counter and each array's entries per version.
/// Version 4: arrays of varint entries may be in the file (the manifest is version 3's).
pub(super) const META_VERSION: u8 = 4;
#[cfg(test)]
const META_LEN: usize = 39;
/// The flag of a configuration without density amplification.
const NO_DENSITY_AMPLIFICATION: u8 = 1;
/// The least an array's manifest entry takes.
const ARRAY_ENTRY: usize = 28;

/// The engine's running counters, kept in the manifest so that they survive a reopen.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Counters {
    pub flushes: u64,
    pub merges: u64,
    /// Merged arrays that were cut into more than one piece (density amplification).
    pub splits: u64,
    /// Entries merges dropped as live at no version they serve.
    pub dropped: u64,
    pub merge_read_bytes: u64,
    /// Bytes of arrays written, by flushes and merges alike.
    pub merge_write_bytes: u64,
    /// Arrays rewritten on their own to drop what version deletes left unreachable.
    pub reclaims: u64,
}

pub(super) fn encode_meta(cfg: &Config, manifest: NodeId, next_seq: u64) -> Vec<u8> {
    let mut w = meta_writer(ENGINE_TAG, META_VERSION);
    w.u32(cfg.buffer_bytes as u32)
        .u32(cfg.level0_entries)
        .u32(cfg.block_bytes as u32)
        .u64(cfg.filter_bits.to_bits())
        .u64(manifest)
        .u64(next_seq)
        .u8(if cfg.density_amplification {
            0
        } else {
            NO_DENSITY_AMPLIFICATION
        });
    w.finish()
}

/// The configuration, the manifest's id, the next sequence number and the format version.
pub(super) fn decode_meta(meta: &[u8], file: &str) -> Result<(Config, NodeId, u64, u8)> {
    let bad = |what: &str| Error::corruption(file, 0, format!("SDA metadata: {what}"));
    let (version, mut r) = meta_reader(meta, ENGINE_TAG, META_VERSION, file, bad)?;
    let field = |e: String| bad(&e);
    let mut cfg = Config {
        buffer_bytes: r.u32().map_err(field)? as usize,
        level0_entries: r.u32().map_err(field)?,
        block_bytes: r.u32().map_err(field)? as usize,
        filter_bits: f64::from_bits(r.u64().map_err(field)?),
        density_amplification: true,
        cache_bytes: Config::default().cache_bytes,
    };
    cfg.check().map_err(|_| bad("configuration out of range"))?;
    let manifest = r.u64().map_err(field)?;
    let next_seq = r.u64().map_err(field)?;
    if version >= 2 {
        let flags = r.u8().map_err(field)?;
        if flags & !NO_DENSITY_AMPLIFICATION != 0 {
            return Err(bad(&format!("unknown flags {flags:#x}")));
        }
        cfg.density_amplification = flags & NO_DENSITY_AMPLIFICATION == 0;
    }
    Ok((cfg, manifest, next_seq, version))
}

pub(super) fn encode_manifest(
    c: &Counters,
    tree: &VersionTree,
    levels: &[Vec<ArrayInfo>],
) -> Vec<u8> {
    let mut w = Writer::new();
    for v in [
        c.flushes,
        c.merges,
        c.splits,
        c.dropped,
        c.merge_read_bytes,
        c.merge_write_bytes,
        c.reclaims,
    ] {
        w.u64(v);
    }
    tree.encode(&mut w);
    w.u32(levels.len() as u32);
    for l in levels {
        w.u32(l.len() as u32);
        for a in l {
            w.u64(a.id)
                .u64(a.entries)
                .u64(a.bytes)
                .u32(a.versions.len() as u32);
            for &v in &a.versions {
                w.u64(v);
            }
            w.u32(a.by_version.len() as u32);
            for &(v, n) in &a.by_version {
                w.u64(v).u64(n);
            }
        }
    }
    w.finish()
}

pub(super) type Manifest = (Counters, VersionTree, Vec<Vec<ArrayInfo>>);

/// The manifest of format `version` (the superblock's).
pub(super) fn decode_manifest(p: &[u8], version: u8) -> std::result::Result<Manifest, String> {
    let mut r = Reader::new(p);
    let mut v = [0u64; 7];
    let counters = if version >= 3 { 7 } else { 6 };
    for x in &mut v[..counters] {
        *x = r.u64()?;
    }
    let [flushes, merges, splits, dropped, merge_read_bytes, merge_write_bytes, reclaims] = v;
    let tree = VersionTree::decode(&mut r)?;
    let nlevels = r.u32()? as usize;
    if nlevels > MAX_LEVELS {
        return Err(format!("{nlevels} levels"));
    }
    let mut levels = Vec::with_capacity(nlevels);
    for _ in 0..nlevels {
        let n = r.u32()? as usize;
        let mut arrays = Vec::with_capacity(r.capacity(n, ARRAY_ENTRY));
        for _ in 0..n {
            let id = r.u64()?;
            let entries = r.u64()?;
            let bytes = r.u64()?;
            let nv = r.u32()? as usize;
            let mut versions = Vec::with_capacity(r.capacity(nv, 8));
            for _ in 0..nv {
                let v = r.u64()?;
                if versions.last().is_some_and(|&l| l >= v) || !tree.is_live(v) {
                    return Err(format!("array {id}: version {v} out of order or not live"));
                }
                versions.push(v);
            }
            if versions.is_empty() || entries == 0 {
                return Err(format!("array {id} serves no version or holds nothing"));
            }
            let mut by_version = Vec::new();
            if version >= 3 {
                let n = r.u32()? as usize;
                by_version.reserve(r.capacity(n, 16));
                let mut total = 0u64;
                for _ in 0..n {
                    let (v, count) = (r.u64()?, r.u64()?);
                    if by_version.last().is_some_and(|&(l, _)| l >= v) || count == 0 {
                        return Err(format!("array {id}: counts per version out of order"));
                    }
                    total = total.saturating_add(count);
                    by_version.push((v, count));
                }
                // None at all: an array carried over from a version 2 manifest.
                if n > 0 && total != entries {
                    return Err(format!(
                        "array {id}: {entries} entries, its counts per version sum to {total}"
                    ));
                }
            }
            arrays.push(ArrayInfo {
                id,
                entries,
                bytes,
                versions,
                by_version,
                dead: 0,
                tombstones: None,
            });
        }
        levels.push(arrays);
    }
    r.finish()?;
    let c = Counters {
        flushes,
        merges,
        splits,
        dropped,
        merge_read_bytes,
        merge_write_bytes,
        reclaims,
    };
    Ok((c, tree, levels))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engines::sda::array::{build, Encoding, Entry, Head};

    /// The superblock bytes of a known configuration, fixed: a change to them is a format
    /// change (bump `META_VERSION` and keep reading the old one).
    #[test]
    fn metadata_golden_bytes() {
        // The cache's size is each open's choice, not stored: what comes back has the default.
        let tiny = Config {
            cache_bytes: Config::default().cache_bytes,
            ..Config::tiny()
        };
        let meta = encode_meta(&Config::tiny(), 7, 1234);
        assert_eq!(meta.len(), META_LEN);
        let hex: String = meta.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "040400020000040000000001000000000000000024400700000000000000d20400000000000000"
        );
        let got = decode_meta(&meta, "f").unwrap();
        assert_eq!(got, (tiny, 7, 1234, META_VERSION));
        let off = Config {
            density_amplification: false,
            ..tiny
        };
        let meta_off = encode_meta(&off, 7, 1234);
        assert_eq!(meta_off[META_LEN - 1], NO_DENSITY_AMPLIFICATION);
        assert_eq!(decode_meta(&meta_off, "f").unwrap().0, off);
        let mut unknown = meta_off.clone();
        unknown[META_LEN - 1] = 0x80;
        assert!(decode_meta(&unknown, "f").is_err());
        // Version 1, written before the flags byte: density amplification on.
        let v1 = hex_bytes(
            "040100020000040000000001000000000000000024400700000000000000d204000000000000",
        );
        assert_eq!(decode_meta(&v1, "f").unwrap(), (tiny, 7, 1234, 1));
        // Versions 2 and 3: the same bytes as version 4's (their manifests or arrays differ).
        for old in [2, 3] {
            let mut v = meta.clone();
            v[1] = old;
            assert_eq!(decode_meta(&v, "f").unwrap(), (tiny, 7, 1234, old));
        }
        let mut newer = meta.clone();
        newer[1] = META_VERSION + 1;
        assert!(matches!(
            decode_meta(&newer, "f"),
            Err(Error::UnsupportedVersion { .. })
        ));
    }

    fn hex_bytes(hex: &str) -> Vec<u8> {
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn the_manifest_reads_back_and_refuses_versions_not_live() {
        let mut tree = VersionTree::new();
        let a = tree.clone_version(0).unwrap();
        let levels = vec![
            vec![ArrayInfo {
                id: 3,
                entries: 4,
                bytes: 4096,
                versions: vec![0, a],
                by_version: vec![(0, 1), (a, 3)],
                dead: 0,
                tombstones: None,
            }],
            vec![],
        ];
        let c = Counters {
            flushes: 1,
            merges: 2,
            splits: 3,
            dropped: 4,
            merge_read_bytes: 5,
            merge_write_bytes: 6,
            reclaims: 7,
        };
        let bytes = encode_manifest(&c, &tree, &levels);
        assert_eq!(
            decode_manifest(&bytes, META_VERSION).unwrap(),
            (c, tree.clone(), levels.clone())
        );
        let mut gone = tree.clone();
        gone.delete(a).unwrap();
        let bad = encode_manifest(&c, &gone, &levels);
        assert!(decode_manifest(&bad, META_VERSION).is_err());
        // Counts per version that do not add up to the entries are refused.
        let mut wrong = levels.clone();
        wrong[0][0].by_version = vec![(0, 1), (a, 2)];
        let bad = encode_manifest(&c, &tree, &wrong);
        assert!(decode_manifest(&bad, META_VERSION).is_err());
        // Version 2: no reclaim counter, no counts per version.
        let mut w = Writer::new();
        for x in 1..=6 {
            w.u64(x);
        }
        tree.encode(&mut w);
        w.u32(1).u32(1).u64(3).u64(4).u64(4096).u32(2).u64(0).u64(a);
        let (c2, tree2, levels2) = decode_manifest(&w.finish(), 2).unwrap();
        assert_eq!(c2, Counters { reclaims: 0, ..c });
        assert_eq!(tree2, tree);
        let mut old = levels[0].clone();
        old[0].by_version.clear();
        assert_eq!(levels2, vec![old]);
    }

    proptest::proptest! {
        /// Damaged metadata is an error, never a panic or a huge allocation: arbitrary bytes,
        /// and valid encodings with one byte changed or cut short.
        #[test]
        fn decoders_refuse_garbage(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            at in 0usize..1000,
            to in proptest::prelude::any::<u8>(),
        ) {
            let _ = decode_manifest(&bytes, META_VERSION);
            let _ = decode_manifest(&bytes, 2);
            let _ = Head::decode(&bytes, Encoding::Fixed);
            let _ = Head::decode(&bytes, Encoding::Varint);
            let _ = VersionTree::decode(&mut Reader::new(&bytes));
            let _ = decode_meta(&bytes, "f");
            let mut tree = VersionTree::new();
            let a = tree.clone_version(0).unwrap();
            let levels = vec![vec![ArrayInfo {
                id: 3, entries: 4, bytes: 4096, versions: vec![0, a], by_version: vec![(a, 4)], dead: 0,
                tombstones: None,
            }]];
            let good = encode_manifest(&Counters::default(), &tree, &levels);
            let mut bad = good.clone();
            let i = at % bad.len();
            bad[i] = to;
            let _ = decode_manifest(&bad, META_VERSION);
            let _ = decode_manifest(&good[..i], META_VERSION);
            let entries = [Entry { key: b"k".to_vec(), version: a, seq: 1, value: Some(b"v".to_vec()) }];
            let (head, _) = build(&entries, 64, 10.0, 9);
            let _ = head.decode_block(0, &bytes);
            let _ = head.decode_block(0, &bad);
            let mut fixed = head.clone();
            fixed.encoding = Encoding::Fixed;
            let _ = fixed.decode_block(0, &bytes);
            let _ = fixed.decode_block(0, &bad);
        }
    }
}
