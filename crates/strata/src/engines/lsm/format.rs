//! The LSM-tree's metadata: its configuration and the manifest's place in the superblock, and
//! the manifest block (the levels, their runs and tables, and the engine's counters), written
//! with every checkpoint (copy-on-write, like any block) and read at open.
//!
//! ```text
//! superblock: 0 tag u8 (3) | 1 version u8 | 2 policy u8 | 3 size ratio u32 | 7 level-0 runs u32 |
//!             11 memtable u32 | 15 table u32 | 19 block u32 | 23 filter bits f64 | 31 monkey u8 |
//!             32 manifest id u64 | 40 next seq u64 | 48 dynamic levels u8 (version 3)
//! manifest:   flushes u64 | merges u64 | trivial moves u64 | merge bytes read u64 |
//!             merge bytes written u64 | flush bytes u64 | levels u32, per level: runs u32,
//!             per run: tables u32, per table: id u64, bytes u64, points u64, puts u64, ranges u32,
//!             smallest key, largest key (keys: length u16, bytes)
//! ```
//! A newer version is refused, not guessed at.

use super::*;
use crate::codec::{Reader, Writer};
use crate::engine::{meta_reader, meta_writer};

/// 2: tables may be of kind `KIND_TABLE2` (format-2 blocks), which version 1 cannot read.
/// 3: a last byte, whether the levels are sized from the last (`Config::dynamic_levels`).
/// Versions 1 and 2 are still read, as trees with fixed level sizes, which they were.
pub(super) const META_VERSION: u8 = 3;
#[cfg(test)]
const META_LEN: usize = 49;
/// The least a table's manifest entry takes.
const TABLE_ENTRY: usize = 40;

/// The engine's running counters, kept in the manifest so that they survive a reopen.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Counters {
    pub flushes: u64,
    pub merges: u64,
    pub trivial_moves: u64,
    pub merge_read_bytes: u64,
    pub merge_write_bytes: u64,
    pub flush_bytes: u64,
}

pub(super) fn encode_meta(cfg: &Config, manifest: NodeId, next_seq: u64) -> Vec<u8> {
    let mut w = meta_writer(ENGINE_TAG, META_VERSION);
    w.u8(cfg.policy.byte())
        .u32(cfg.size_ratio)
        .u32(cfg.l0_runs)
        .u32(cfg.memtable_bytes as u32)
        .u32(cfg.table_bytes as u32)
        .u32(cfg.block_bytes as u32)
        .u64(cfg.filter_bits.to_bits())
        .u8(cfg.monkey as u8)
        .u64(manifest)
        .u64(next_seq)
        .u8(cfg.dynamic_levels as u8);
    w.finish()
}

/// The configuration, the manifest's id and the next sequence number.
pub(super) fn decode_meta(meta: &[u8], file: &str) -> Result<(Config, NodeId, u64)> {
    let bad = |what: &str| Error::corruption(file, 0, format!("LSM-tree metadata: {what}"));
    let (version, mut r) = meta_reader(meta, ENGINE_TAG, META_VERSION, file, bad)?;
    let field = |e: String| bad(&e);
    let policy = Policy::from_byte(r.u8().map_err(field)?).ok_or_else(|| bad("unknown policy"))?;
    let mut cfg = Config {
        policy,
        size_ratio: r.u32().map_err(field)?,
        l0_runs: r.u32().map_err(field)?,
        memtable_bytes: r.u32().map_err(field)? as usize,
        table_bytes: r.u32().map_err(field)? as usize,
        block_bytes: r.u32().map_err(field)? as usize,
        filter_bits: f64::from_bits(r.u64().map_err(field)?),
        monkey: r.u8().map_err(field)? != 0,
        dynamic_levels: false,
    };
    cfg.check().map_err(|_| bad("configuration out of range"))?;
    let manifest = r.u64().map_err(field)?;
    let next_seq = r.u64().map_err(field)?;
    if version >= 3 {
        cfg.dynamic_levels = match r.u8().map_err(field)? {
            0 => false,
            1 => true,
            _ => return Err(bad("dynamic levels neither 0 nor 1")),
        };
    }
    Ok((cfg, manifest, next_seq))
}

pub(super) fn encode_manifest(levels: &[Level], c: &Counters) -> Vec<u8> {
    let mut w = Writer::new();
    for v in [
        c.flushes,
        c.merges,
        c.trivial_moves,
        c.merge_read_bytes,
        c.merge_write_bytes,
        c.flush_bytes,
    ] {
        w.u64(v);
    }
    w.u32(levels.len() as u32);
    for l in levels {
        w.u32(l.runs.len() as u32);
        for run in &l.runs {
            w.u32(run.len() as u32);
            for t in run {
                w.u64(t.id)
                    .u64(t.bytes)
                    .u64(t.points)
                    .u64(t.puts)
                    .u32(t.ranges)
                    .key(&t.smallest)
                    .key(&t.largest);
            }
        }
    }
    w.finish()
}

pub(super) fn decode_manifest(p: &[u8]) -> std::result::Result<(Vec<Level>, Counters), String> {
    let mut r = Reader::new(p);
    let mut v = [0u64; 6];
    for x in &mut v {
        *x = r.u64()?;
    }
    let [flushes, merges, trivial_moves, merge_read_bytes, merge_write_bytes, flush_bytes] = v;
    let nlevels = r.u32()? as usize;
    if nlevels > MAX_LEVELS {
        return Err(format!("{nlevels} levels"));
    }
    let mut levels = Vec::with_capacity(nlevels);
    for _ in 0..nlevels {
        let nruns = r.u32()? as usize;
        let mut runs = Vec::with_capacity(r.capacity(nruns, 4));
        for _ in 0..nruns {
            let ntables = r.u32()? as usize;
            let mut run = Vec::with_capacity(r.capacity(ntables, TABLE_ENTRY));
            for _ in 0..ntables {
                let t = TableInfo {
                    id: r.u64()?,
                    bytes: r.u64()?,
                    points: r.u64()?,
                    puts: r.u64()?,
                    ranges: r.u32()?,
                    smallest: r.key()?.to_vec(),
                    largest: r.key()?.to_vec(),
                };
                if t.smallest > t.largest {
                    return Err(format!("table {}: smallest key above the largest", t.id));
                }
                if run
                    .last()
                    .is_some_and(|p: &TableInfo| p.largest > t.smallest)
                {
                    return Err(format!(
                        "table {} overlaps the one before it in its run",
                        t.id
                    ));
                }
                run.push(t);
            }
            runs.push(run);
        }
        levels.push(Level { runs });
    }
    r.finish()?;
    let c = Counters {
        flushes,
        merges,
        trivial_moves,
        merge_read_bytes,
        merge_write_bytes,
        flush_bytes,
    };
    Ok((levels, c))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The superblock bytes of a known configuration, fixed: a change to them is a format change
    /// (bump `META_VERSION` and keep reading the old one).
    #[test]
    fn metadata_golden_bytes() {
        // A fixed shape, not the default, so that a change of default is not a format change.
        let cfg = Config {
            block_bytes: 16 << 10,
            l0_runs: 4,
            ..Config::default()
        };
        let meta = encode_meta(&cfg, 7, 1234);
        assert_eq!(meta.len(), META_LEN);
        let hex: String = meta.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "0303000a000000040000000000800000004000004000000000000000002440010700000000000000\
             d20400000000000001"
        );
        // Versions 1 and 2 end before the last byte and open with fixed level sizes.
        let fixed = Config {
            dynamic_levels: false,
            ..cfg
        };
        for v in [1, 2] {
            let mut older = meta[..META_LEN - 1].to_vec();
            older[1] = v;
            assert_eq!(decode_meta(&older, "f").unwrap(), (fixed, 7, 1234));
        }
        let mut off = meta.clone();
        off[META_LEN - 1] = 0;
        assert_eq!(decode_meta(&off, "f").unwrap(), (fixed, 7, 1234));
        off[META_LEN - 1] = 2;
        assert!(decode_meta(&off, "f").is_err());
        assert!(
            decode_meta(&meta[..META_LEN - 1], "f").is_err(),
            "version 3 needs it"
        );
        let (back, manifest, seq) = decode_meta(&meta, "f").unwrap();
        assert_eq!((back, manifest, seq), (cfg, 7, 1234));
        let mut newer = meta.clone();
        newer[1] = META_VERSION + 1;
        assert!(matches!(
            decode_meta(&newer, "f"),
            Err(Error::UnsupportedVersion { .. })
        ));
    }

    #[test]
    fn the_manifest_reads_back_and_refuses_overlapping_tables() {
        let t = |id, lo: &[u8], hi: &[u8]| TableInfo {
            id,
            bytes: 4096 * id,
            points: id * 3,
            puts: id,
            ranges: 1,
            smallest: lo.to_vec(),
            largest: hi.to_vec(),
        };
        let levels = vec![
            Level {
                runs: vec![vec![t(1, b"a", b"c")], vec![t(2, b"b", b"d")]],
            },
            Level::default(),
            Level {
                runs: vec![vec![t(3, b"a", b"b"), t(4, b"b", b"z")]],
            },
        ];
        let c = Counters {
            flushes: 1,
            merges: 2,
            trivial_moves: 3,
            merge_read_bytes: 4,
            merge_write_bytes: 5,
            flush_bytes: 6,
        };
        let bytes = encode_manifest(&levels, &c);
        assert_eq!(decode_manifest(&bytes).unwrap(), (levels.clone(), c));
        let mut bad = levels;
        bad[2].runs[0][1].smallest = b"a".to_vec();
        assert!(decode_manifest(&encode_manifest(&bad, &c)).is_err());
    }
}
