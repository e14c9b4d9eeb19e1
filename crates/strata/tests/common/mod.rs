//! Helpers shared by the integration suites: one handle over the two kinds of "disk" a database
//! can live on (a `SimEnv` and a real directory), deterministic values and randomness, and
//! readers for the on-disk formats (superblocks, translation table, blocks, log records) so that
//! tests can find the exact bytes they damage.
#![allow(dead_code)]

pub mod keys;
pub mod wrap;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use strata::storage::SimEnv;
use strata::{Db, Options, Result};
use xxhash_rust::xxh3::xxh3_64;

pub const DATA: &str = "strata.data";
pub const WAL: &str = "strata.wal";
pub const SB_SIZE: u64 = 4096;
pub const DATA_START: u64 = 8192;
pub const BLOCK_HEADER: usize = 24;
pub const WAL_HEADER: usize = 32;
pub const KIND_TABLE: u8 = 1;
pub const KIND_BLOB: u8 = 2;
pub const KIND_LEAF: u8 = 16;
pub const KIND_INTERNAL: u8 = 17;

/// Where a database lives: a simulated disk, or a temporary directory of real files.
pub enum Place {
    Sim(SimEnv),
    Dir(tempfile::TempDir),
}

impl Place {
    pub fn sim() -> Place {
        Place::Sim(SimEnv::new())
    }

    pub fn dir() -> Place {
        Place::Dir(tempfile::tempdir().expect("tempdir"))
    }

    pub fn new(sim: bool) -> Place {
        if sim {
            Place::sim()
        } else {
            Place::dir()
        }
    }

    pub fn is_sim(&self) -> bool {
        matches!(self, Place::Sim(_))
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Place::Sim(_) => "sim",
            Place::Dir(_) => "file",
        }
    }

    pub fn env(&self) -> &SimEnv {
        match self {
            Place::Sim(e) => e,
            Place::Dir(_) => panic!("not a simulated environment"),
        }
    }

    pub fn path(&self) -> &Path {
        match self {
            Place::Dir(d) => d.path(),
            Place::Sim(_) => panic!("a simulated environment has no path"),
        }
    }

    pub fn open(&self, opts: Options) -> Result<Db> {
        match self {
            Place::Sim(env) => Db::open_in(env, opts),
            Place::Dir(d) => Db::open(d.path(), opts),
        }
    }

    /// The bytes of file `name` as a reader sees them now, or None if it does not exist.
    pub fn read(&self, name: &str) -> Option<Vec<u8>> {
        match self {
            Place::Sim(env) => env.files().get(name).map(|d| d.contents()),
            Place::Dir(d) => std::fs::read(d.path().join(name)).ok(),
        }
    }

    /// Flip the bits `xor` of the byte at `offset` of file `name` (media corruption).
    pub fn corrupt(&self, name: &str, offset: u64, xor: u8) {
        assert_ne!(xor, 0);
        match self {
            Place::Sim(env) => {
                let dev = env.files().get(name).expect("file exists");
                assert!(
                    offset < dev.contents().len() as u64,
                    "offset inside the file"
                );
                dev.corrupt_byte(offset, xor);
            }
            Place::Dir(d) => {
                let p = d.path().join(name);
                let mut bytes = std::fs::read(&p).expect("read file");
                bytes[offset as usize] ^= xor;
                std::fs::write(&p, bytes).expect("write file");
            }
        }
    }

    /// Overwrite bytes of file `name` at `offset` (for forging a superblock).
    pub fn overwrite(&self, name: &str, offset: u64, data: &[u8]) {
        let old = self.read(name).expect("file exists");
        for (i, (&new, &was)) in data.iter().zip(&old[offset as usize..]).enumerate() {
            if new != was {
                self.corrupt(name, offset + i as u64, new ^ was);
            }
        }
    }

    /// Power loss: on a simulated disk, keep a random part of the unsynced writes (any subset
    /// of pages, `SimEnv::power_cut`) and return true; every other one drops them all, the
    /// classic case. The seeds follow from a count kept per thread, so a test run repeats. Real
    /// files have no power-loss simulation (a dropped `Db` is a process crash), so this returns
    /// false.
    pub fn power_loss(&self) -> bool {
        thread_local!(static CUTS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) });
        match self {
            Place::Sim(env) => {
                let n = CUTS.with(|c| c.replace(c.get() + 1));
                if n.is_multiple_of(2) {
                    env.crash();
                } else {
                    env.power_cut(n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
                }
                true
            }
            Place::Dir(_) => false,
        }
    }

    /// The name a `Corruption` error should carry for file `name`: the bare name on a simulated
    /// disk, a path ending in it for real files.
    pub fn file_label(&self, name: &str) -> PathBuf {
        match self {
            Place::Sim(_) => PathBuf::from(name),
            Place::Dir(d) => d.path().join(name),
        }
    }
}

/// Everything in the database, in key order, through the forward iterator.
pub fn dump(db: &Db) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut prev: Option<Vec<u8>> = None;
    for kv in db.iter().expect("iter") {
        let (k, v) = kv.expect("scan");
        if let Some(p) = &prev {
            assert!(p < &k, "iterator out of order: {p:?} then {k:?}");
        }
        prev = Some(k.clone());
        out.insert(k, v);
    }
    out
}

/// The oracles' reading of `AddU64`: the old value's first 8 bytes as a little-endian u64
/// (missing bytes are zero, extra bytes ignored), plus `n`, wrapping.
pub fn add_u64(old: Option<&[u8]>, n: u64) -> Vec<u8> {
    let mut b = [0u8; 8];
    if let Some(v) = old {
        let m = v.len().min(8);
        b[..m].copy_from_slice(&v[..m]);
    }
    u64::from_le_bytes(b).wrapping_add(n).to_le_bytes().to_vec()
}

/// Remove every key k with `start <= k < end` from an oracle's map.
pub fn remove_range<V>(map: &mut BTreeMap<Vec<u8>, V>, start: &[u8], end: &[u8]) {
    let doomed: Vec<Vec<u8>> = map
        .range(start.to_vec()..)
        .take_while(|(k, _)| k.as_slice() < end)
        .map(|(k, _)| k.clone())
        .collect();
    for k in doomed {
        map.remove(&k);
    }
}

/// A seeded generator for test runs and value contents: the library's SplitMix64.
#[derive(Clone, Debug)]
pub struct Rng(strata::model::SplitMix64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(strata::model::SplitMix64::new(seed))
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    /// Uniform in lo..hi (hi exclusive, hi > lo).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo)
    }
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.next_u64() % den < num
    }
    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.range(0, xs.len() as u64) as usize]
    }
}

/// The value named by (seed, len): deterministic bytes that differ between seeds.
pub fn value(seed: u64, len: usize) -> Vec<u8> {
    let mut r = Rng::new(seed ^ ((len as u64) << 32));
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        v.extend_from_slice(&r.next_u64().to_le_bytes());
    }
    v.truncate(len);
    v
}

/// A decoded superblock header.
#[derive(Clone, Debug, PartialEq)]
pub struct Superblock {
    pub slot_offset: u64,
    pub version: u32,
    pub seq: u64,
    pub wal_seq: u64,
    pub next_id: u64,
    pub table_offset: u64,
    pub table_len: u64,
    pub body_len: usize,
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().unwrap())
}

/// Decode the superblock in slot `slot` (0 or 1) of a data file, if it is intact.
pub fn superblock(data: &[u8], slot: u64) -> Option<Superblock> {
    let off = (slot * SB_SIZE) as usize;
    let b = data.get(off..off + SB_SIZE as usize)?;
    if &b[..8] != b"STRATAdb" {
        return None;
    }
    let body_len = u32_at(b, 16) as usize;
    if !(48..=SB_SIZE as usize - 16).contains(&body_len) {
        return None;
    }
    if xxh3_64(&b[16..16 + body_len]) != u64_at(b, 8) {
        return None;
    }
    Some(Superblock {
        slot_offset: off as u64,
        version: u32_at(b, 20),
        seq: u64_at(b, 24),
        wal_seq: u64_at(b, 32),
        next_id: u64_at(b, 40),
        table_offset: u64_at(b, 48),
        table_len: u64_at(b, 56),
        body_len,
    })
}

/// The valid superblock with the highest sequence number.
pub fn newest_superblock(data: &[u8]) -> Superblock {
    [superblock(data, 0), superblock(data, 1)]
        .into_iter()
        .flatten()
        .max_by_key(|s| s.seq)
        .expect("a valid superblock")
}

/// Recompute a superblock's checksum after editing its body (bytes 16 .. 16 + body_len).
pub fn reseal_superblock(sb: &mut [u8]) {
    let body_len = u32_at(sb, 16) as usize;
    let sum = xxh3_64(&sb[16..16 + body_len]);
    sb[8..16].copy_from_slice(&sum.to_le_bytes());
}

/// One entry of the translation table: node id, and where its block lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Entry {
    pub id: u64,
    pub offset: u64,
    pub len: u64,
}

/// A block's header and payload, checked.
pub struct Block<'a> {
    pub owner: u64,
    pub kind: u8,
    pub payload: &'a [u8],
}

pub fn block_at(data: &[u8], offset: u64) -> Block<'_> {
    let b = &data[offset as usize..];
    let len = u32_at(b, 16) as usize;
    assert_eq!(
        xxh3_64(&b[8..BLOCK_HEADER + len]),
        u64_at(b, 0),
        "block at {offset} is intact"
    );
    Block {
        owner: u64_at(b, 8),
        kind: b[20],
        payload: &b[BLOCK_HEADER..BLOCK_HEADER + len],
    }
}

/// The translation table of the newest checkpoint.
pub fn table(data: &[u8]) -> Vec<Entry> {
    let sb = newest_superblock(data);
    let blk = block_at(data, sb.table_offset);
    assert_eq!(blk.kind, KIND_TABLE);
    let n = u64_at(blk.payload, 0) as usize;
    let mut out: Vec<Entry> = blk.payload[8..]
        .chunks_exact(24)
        .map(|e| Entry {
            id: u64_at(e, 0),
            offset: u64_at(e, 8),
            len: u64_at(e, 16),
        })
        .collect();
    assert_eq!(out.len(), n);
    out.sort();
    out
}

/// Every node of the newest checkpoint with its block kind.
pub fn nodes(data: &[u8]) -> Vec<(Entry, u8)> {
    table(data)
        .into_iter()
        .map(|e| {
            let b = block_at(data, e.offset);
            assert_eq!(b.owner, e.id, "block owner matches the table");
            (e, b.kind)
        })
        .collect()
}

/// The keys held by the B+-tree leaf whose block is at `offset`.
pub fn leaf_keys(data: &[u8], offset: u64) -> Vec<Vec<u8>> {
    leaf_entries(data, offset)
        .into_iter()
        .map(|e| e.0)
        .collect()
}

/// One log record: where it starts, its sequence number and payload length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub offset: u64,
    pub seq: u64,
    pub len: usize,
}

/// The valid records at the start of a log, in order: write batches and checkpoint markers
/// with consecutive sequence numbers (a file started over keeps older records past its tail,
/// and a released file begins with a head of kind 2 and holds none).
pub fn wal_records(wal: &[u8]) -> Vec<Record> {
    let mut out: Vec<Record> = Vec::new();
    let mut at = 0usize;
    while at + WAL_HEADER <= wal.len() {
        let len = u32_at(wal, at + 8) as usize;
        let end = at + WAL_HEADER + len;
        if end > wal.len() || xxh3_64(&wal[at + 8..end]) != u64_at(wal, at) || wal[at + 12] > 1 {
            break;
        }
        let seq = u64_at(wal, at + 16);
        if out.last().is_some_and(|r| r.seq + 1 != seq) {
            break;
        }
        out.push(Record {
            offset: at as u64,
            seq,
            len,
        });
        at = end;
    }
    out
}

/// The entries of the B+-tree leaf at `offset`: key, and the blob id when the value is out of line.
pub fn leaf_entries(data: &[u8], offset: u64) -> Vec<(Vec<u8>, Option<u64>)> {
    let blk = block_at(data, offset);
    assert_eq!(blk.kind, KIND_LEAF);
    let p = blk.payload;
    let n = u32_at(p, 0) as usize;
    let mut at = 4;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let klen = u16::from_le_bytes(p[at..at + 2].try_into().unwrap()) as usize;
        let tag = p[at + 2];
        let vlen = u32_at(p, at + 3) as usize;
        at += 7;
        let key = p[at..at + klen].to_vec();
        at += klen;
        if tag == 0 {
            out.push((key, None));
            at += vlen;
        } else {
            out.push((key, Some(u64_at(p, at))));
            at += 8;
        }
    }
    assert_eq!(at, p.len());
    out
}
