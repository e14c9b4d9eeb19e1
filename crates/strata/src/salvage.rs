//! Salvage: copy every key still readable from a damaged database into a new one, and say what
//! could not be read.
//!
//! Invariants:
//! - the source is never written: its files are opened through `ReadOnly`, which refuses every
//!   write, resize and sync, and its lock is taken so that no writer changes it meanwhile;
//! - every value copied comes from a block, partition or log record that passed its checksum,
//!   for a key inside the key range its parent gives that block; where it may not be the key's
//!   newest value (a damaged Bε-tree buffer above it, an older checkpoint, a raw scan), the
//!   report says so for the range;
//! - what is left out is reported: every block, partition, blob or log record that failed, with
//!   its file and offset, its node, and the key range it covered when known.
//!
//! How (docs/format.md, "Salvage"):
//! 1. the checkpoint: the newest superblock whose table and engine metadata read; an older slot
//!    when the newest fails (its extents may since have been reused: blocks that no longer
//!    belong to it fail their owner check and are reported like any damage); then a damaged
//!    slot read as if its checksum held, if its table checks out;
//! 2. the tree: the engine's tolerant walk (`Engine::salvage`) copies every readable entry,
//!    routes around what fails, then reads the nodes of the table it never reached (those below
//!    a damaged node) and copies their keys that fall in the damaged ranges; with no
//!    checkpoint at all, a raw scan of the data file for intact leaf blocks (`raw_scan`);
//! 3. the log: both files are read record by record (a small reader of the record format,
//!    read-only: `Wal::open` would trim the source); every intact write batch past the
//!    checkpoint is applied to the copy in sequence order, and gaps and damaged stretches are
//!    reported;
//! 4. the copy is checkpointed and closed.
//!
//! A versioned database (`salvage_versioned`) goes through step 1 the same way; then its
//! engine's readable entries (the SDA's intact blocks, the CoW B-tree's readable nodes from
//! each version's root) go with its manifest's version tree into a new engine of its kind,
//! and its log's changes past the checkpoint are replayed through `VersionedDb`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use xxhash_rust::xxh3::xxh3_64;

use crate::codec::Reader;
use crate::db::{Db, DATA_FILE, WAL_FILE, WAL_FILE_2};
use crate::engine::versioned::VersionedEngine;
use crate::engine::Engine;
use crate::engines::betree::basement::Basement;
use crate::engines::betree::{self, BeTree};
use crate::engines::btree::{self, BTree};
use crate::engines::cow::{self, CowTree};
use crate::engines::lsm::{self, Lsm};
use crate::engines::sda::{self, Sda};
use crate::error::{Error, Result};
use crate::kv::entries::decode_entries;
use crate::kv::msg::Encoding;
use crate::kv::Val;
use crate::kv::{Op, WriteBatch};
use crate::options::{Durability, Options};
use crate::storage::block::{self, kind, BLOCK_HEADER, PAGE};
use crate::storage::pager::{DATA_START, MAGIC, SUPERBLOCK_SIZE};
use crate::storage::{Checkpoint, Device, Env, FileEnv, FileKind, Pager};
use crate::versioned_db::{VersionedDb, VersionedEngineOptions, VersionedOptions};

pub use crate::engine::salvage::{escape, Damage, Effect, KeyRange, Sink};

// ------------------------------------------------------------------------------------------
// The source, read-only

/// A source file as salvage sees it: reads pass through, every change is refused, and stretches
/// may read as other bytes (`overlay`): a superblock slot hidden (zeros) so that the pager
/// opens the other, or shown with its checksum recomputed.
#[derive(Debug)]
struct ReadOnly {
    inner: Arc<dyn Device>,
    overlay: Vec<(u64, Vec<u8>)>,
}

impl ReadOnly {
    fn refuse(&self, what: &str) -> Error {
        Error::io(
            format!("{what} {}", self.inner.name()),
            std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "salvage never writes its source",
            ),
        )
    }
}

impl Device for ReadOnly {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.inner.read_at(buf, offset)?;
        let end = offset + buf.len() as u64;
        for (at, bytes) in &self.overlay {
            let (a, b) = (offset.max(*at), end.min(at + bytes.len() as u64));
            if a < b {
                buf[(a - offset) as usize..(b - offset) as usize]
                    .copy_from_slice(&bytes[(a - at) as usize..(b - at) as usize]);
            }
        }
        Ok(())
    }
    fn write_at(&self, _data: &[u8], _offset: u64) -> Result<()> {
        Err(self.refuse("write"))
    }
    fn sync(&self) -> Result<()> {
        Err(self.refuse("sync"))
    }
    fn write_out(&self, _offset: u64, _len: u64) -> Result<()> {
        Err(self.refuse("write"))
    }
    fn len(&self) -> Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, _len: u64) -> Result<()> {
        Err(self.refuse("resize"))
    }
}

/// A file opened for reading only (`FileDevice` opens for writing too, which a read-only
/// source, or a file system mounted read-only after damage, would refuse).
#[derive(Debug)]
struct FileReader {
    file: File,
    name: String,
}

impl FileReader {
    fn open(path: &Path) -> Result<Option<FileReader>> {
        match File::open(path) {
            Ok(file) => Ok(Some(FileReader {
                file,
                name: path.display().to_string(),
            })),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(format!("open {}", path.display()), e)),
        }
    }
}

impl Device for FileReader {
    fn name(&self) -> &str {
        &self.name
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.file.read_exact_at(buf, offset).map_err(|e| {
            Error::io(
                format!("read {} bytes at {offset} of {}", buf.len(), self.name),
                e,
            )
        })
    }
    fn write_at(&self, _data: &[u8], _offset: u64) -> Result<()> {
        unreachable!("wrapped in ReadOnly")
    }
    fn sync(&self) -> Result<()> {
        unreachable!("wrapped in ReadOnly")
    }
    fn len(&self) -> Result<u64> {
        self.file
            .metadata()
            .map(|m| m.len())
            .map_err(|e| Error::io(format!("stat {}", self.name), e))
    }
    fn set_len(&self, _len: u64) -> Result<()> {
        unreachable!("wrapped in ReadOnly")
    }
}

/// The source's files: the data file and the log files that exist.
struct Source {
    data: Arc<dyn Device>,
    logs: Vec<Arc<dyn Device>>,
}

fn read_only(inner: Arc<dyn Device>) -> Arc<dyn Device> {
    Arc::new(ReadOnly {
        inner,
        overlay: Vec::new(),
    })
}

// ------------------------------------------------------------------------------------------
// The report

/// What a superblock slot held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// All zeros: never written.
    Blank,
    /// Not blank, but its magic, length or checksum fails.
    Damaged,
    Valid {
        /// The checkpoint's sequence number and the log sequence number it covers.
        seq: u64,
        wal_seq: u64,
    },
}

/// What salvage found in the log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogReport {
    /// Write batches past the checkpoint applied to the copy, and the first and last of their
    /// sequence numbers.
    pub applied: u64,
    pub first: Option<u64>,
    pub last: Option<u64>,
    /// Sequence numbers past the checkpoint, up to the last batch found or the newer
    /// checkpoint a marker names, that were not applied (inclusive ranges): batches lost.
    pub missing: Vec<(u64, u64)>,
    /// The newest checkpoint marker in the log, when newer than the checkpoint copied: the log
    /// continues a checkpoint whose superblock or table could not be read.
    pub newer_checkpoint: Option<u64>,
    /// Bytes of the log that hold no intact record.
    pub unreadable_bytes: u64,
}

/// What `salvage` did.
#[derive(Debug)]
pub struct SalvageReport {
    pub source: String,
    pub destination: String,
    /// "btree", "betree", "lsm", "sda" or "cow" (a versioned database), or "unknown" when no
    /// checkpoint could be read.
    pub engine: &'static str,
    /// The two superblock slots.
    pub slots: [Slot; 2],
    /// The checkpoint copied (sequence number, log sequence number it covers), if any.
    pub checkpoint: Option<(u64, u64)>,
    /// Keys copied from the checkpoint's tree (or found by the raw scan).
    pub keys_copied: u64,
    /// When no checkpoint could be read: what the raw scan of the data file found.
    pub raw: Option<RawScan>,
    pub log: LogReport,
    /// Keys in the copy when salvage finished (the tree's, then the log's batches applied).
    pub keys: u64,
    /// Everything that could not be read, in the order found.
    pub damage: Vec<Damage>,
}

impl SalvageReport {
    /// What `keys_copied` and `keys` count: keys; for the SDA entries (a key at a version:
    /// its value or a tombstone); for the CoW B-tree each live version's keys, summed.
    fn unit(&self) -> &'static str {
        match self.engine {
            "sda" => "entries (a key at a version)",
            "cow" => "keys, summed over the live versions",
            _ => "keys",
        }
    }

    /// Whether everything the source held was copied: no damage cost a key or a batch.
    pub fn is_complete(&self) -> bool {
        self.damage.iter().all(|d| d.effect == Effect::None) && self.log.missing.is_empty()
    }
}

impl fmt::Display for SalvageReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "salvage of {} into {}", self.source, self.destination)?;
        let slot = |s: &Slot| match s {
            Slot::Blank => "blank".to_string(),
            Slot::Damaged => "damaged".to_string(),
            Slot::Valid { seq, wal_seq } => format!("checkpoint {seq} (log through {wal_seq})"),
        };
        writeln!(
            f,
            "  superblocks:  slot 0 {}; slot 1 {}",
            slot(&self.slots[0]),
            slot(&self.slots[1])
        )?;
        match self.checkpoint {
            Some((seq, wal)) => writeln!(
                f,
                "  copied:       checkpoint {seq} ({} engine, log through {wal}): {} {}",
                self.engine,
                self.keys_copied,
                self.unit()
            )?,
            None => writeln!(f, "  copied:       no checkpoint could be read")?,
        }
        if let Some(r) = &self.raw {
            writeln!(
                f,
                "  raw scan:     {} keys from {} intact leaf blocks, {} blobs and {} buffered \
                 puts; {} keys in blocks that disagree, {} without their blob. Without a \
                 checkpoint the newest version of a block is unknowable: a key may hold an \
                 older value, a deleted key may be back",
                self.keys_copied, r.leaves, r.blobs, r.from_messages, r.conflicts, r.missing_blobs
            )?;
        }
        let l = &self.log;
        match (l.first, l.last) {
            (Some(a), Some(b)) => writeln!(
                f,
                "  log:          replayed {} batches (sequence {a} to {b})",
                l.applied
            )?,
            _ => writeln!(f, "  log:          nothing past the checkpoint to replay")?,
        }
        for (a, b) in &l.missing {
            writeln!(f, "  log:          batches {a} to {b} missing")?;
        }
        if let Some(m) = l.newer_checkpoint {
            writeln!(
                f,
                "  log:          continues a newer checkpoint (log through {m}) that could not be read"
            )?;
        }
        if l.unreadable_bytes > 0 {
            writeln!(f, "  log:          {} bytes unreadable", l.unreadable_bytes)?;
        }
        writeln!(f, "  in the copy:  {} {}", self.keys, self.unit())?;
        if self.damage.is_empty() {
            writeln!(f, "  damage:       none")?;
        }
        for d in &self.damage {
            writeln!(f, "  damage:       {d}")?;
        }
        write!(
            f,
            "  result:       {}",
            if self.is_complete() {
                "complete: nothing was lost"
            } else {
                "incomplete: see the damage above"
            }
        )
    }
}

// ------------------------------------------------------------------------------------------
// Salvage

/// Copy what is readable of the database in directory `src` into a new database in `dst`
/// (created; refused if it already holds one). The copy has the source's engine and geometry
/// when its checkpoint reads, else `opts.engine`; `opts` also gives the cache budget (of the
/// source's walk and of the copy) and the merge operator that replaying upserts needs. The
/// source's files are opened read-only and its lock is held meanwhile.
pub fn salvage(
    src: impl AsRef<Path>,
    dst: impl AsRef<Path>,
    opts: Options,
) -> Result<SalvageReport> {
    let dir = src.as_ref();
    let env = FileEnv::new(dir, false);
    let _lock = env.lock(DATA_FILE, false)?;
    let open = |name: &str| -> Result<Option<Arc<dyn Device>>> {
        Ok(FileReader::open(&dir.join(name))?.map(|f| read_only(Arc::new(f))))
    };
    let data = open(DATA_FILE)?.ok_or_else(|| Error::NotADatabase {
        path: dir.display().to_string(),
        why: format!("it has no {DATA_FILE}"),
    })?;
    let logs = [WAL_FILE, WAL_FILE_2]
        .into_iter()
        .filter_map(|n| open(n).transpose())
        .collect::<Result<Vec<_>>>()?;
    let dst_env = FileEnv::new(dst.as_ref(), opts.direct_io);
    run(
        Source { data, logs },
        dir.display().to_string(),
        &dst_env,
        opts,
    )
}

/// `salvage` between environments (a simulated disk in tests): the source's devices are
/// wrapped so that nothing is written to them.
pub fn salvage_in(src: &dyn Env, dst: &dyn Env, opts: Options) -> Result<SalvageReport> {
    let _lock = src.lock(DATA_FILE, false)?;
    let data = src
        .open(DATA_FILE, FileKind::Data, false)?
        .ok_or_else(|| Error::NotADatabase {
            path: src.location(),
            why: format!("it has no {DATA_FILE}"),
        })?;
    let mut logs = Vec::new();
    for name in [WAL_FILE, WAL_FILE_2] {
        if let Some(d) = src.open(name, FileKind::Log, false)? {
            logs.push(read_only(d));
        }
    }
    run(
        Source {
            data: read_only(data),
            logs,
        },
        src.location(),
        dst,
        opts,
    )
}

/// What a superblock slot holds, by the format's rules (magic, body length, checksum).
fn probe_slot(dev: &dyn Device, slot: u64) -> Result<Slot> {
    let off = slot * SUPERBLOCK_SIZE;
    let len = dev.len()?;
    if off >= len {
        return Ok(Slot::Blank);
    }
    let mut b = vec![0u8; SUPERBLOCK_SIZE.min(len - off) as usize];
    dev.read_at(&mut b, off)?;
    if b.iter().all(|&x| x == 0) {
        return Ok(Slot::Blank);
    }
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
    if b.len() < 64 || b[..8] != MAGIC {
        return Ok(Slot::Damaged);
    }
    let body = u32::from_le_bytes(b[16..20].try_into().unwrap()) as usize;
    if body < 48 || 16 + body > b.len() || xxh3_64(&b[16..16 + body]) != u64_at(8) {
        return Ok(Slot::Damaged);
    }
    Ok(Slot::Valid {
        seq: u64_at(24),
        wal_seq: u64_at(32),
    })
}

/// An engine a checkpoint names, opened.
enum Opened {
    Plain(Box<dyn Engine>),
    /// A versioned database's engine (`salvage_versioned`).
    Sda(Box<Sda>),
    Cow(Box<CowTree>),
}

/// The engine a checkpoint's metadata names, opened over `pager`.
fn open_engine(pager: Pager, cp: &Checkpoint, opts: &Options) -> Result<Opened> {
    let merge = opts.merge_operator.clone();
    let plain = |e: Box<dyn Engine>| Ok(Opened::Plain(e));
    match cp.engine_meta.first() {
        Some(&btree::ENGINE_TAG) => {
            plain(Box::new(BTree::open(pager, cp, opts.cache_bytes, merge)?))
        }
        Some(&betree::ENGINE_TAG) => {
            plain(Box::new(BeTree::open(pager, cp, opts.cache_bytes, merge)?))
        }
        Some(&lsm::ENGINE_TAG) => plain(Box::new(Lsm::open_tolerant(
            pager,
            cp,
            opts.cache_bytes,
            merge,
        )?)),
        Some(&sda::ENGINE_TAG) => {
            let mut t = Sda::open(pager, cp)?;
            t.set_cache_bytes(opts.cache_bytes);
            Ok(Opened::Sda(Box::new(t)))
        }
        Some(&cow::ENGINE_TAG) => Ok(Opened::Cow(Box::new(CowTree::open(pager, cp)?))),
        other => Err(Error::corruption(
            pager.file_name(),
            0,
            format!("unknown engine tag {other:?} in the superblock"),
        )),
    }
}

/// Slot `slot`'s bytes with the checksum recomputed, when its magic and body length are
/// intact (its checksum failed): its sequence number (unchecked) and the bytes.
fn resealed(dev: &dyn Device, slot: u64) -> Option<(u64, Vec<u8>)> {
    let off = slot * SUPERBLOCK_SIZE;
    let mut b = vec![0u8; SUPERBLOCK_SIZE as usize];
    dev.read_at(&mut b, off).ok()?;
    let body = u32::from_le_bytes(b[16..20].try_into().unwrap()) as usize;
    if b[..8] != MAGIC || !(48..=SUPERBLOCK_SIZE as usize - 16).contains(&body) {
        return None;
    }
    let sum = xxh3_64(&b[16..16 + body]);
    b[8..16].copy_from_slice(&sum.to_le_bytes());
    Some((u64::from_le_bytes(b[24..32].try_into().unwrap()), b))
}

/// The newest checkpoint that opens: each valid slot, newest first, with the other hidden;
/// then each damaged slot whose magic and length are intact, read as if its checksum held (a
/// bit flipped in a counter or in the checksum itself leaves the fields that matter right; a
/// wrong table location fails the table's own checks). Failures are recorded as damage that
/// cost nothing yet (the walk says what it costs).
fn open_checkpoint<T>(
    src: &Source,
    slots: &[Slot; 2],
    damage: &mut Vec<Damage>,
    open: impl Fn(Pager, &Checkpoint) -> Result<T>,
) -> Option<(T, Checkpoint)> {
    // (seq, slot, the slot's bytes when resealed)
    let mut tries: Vec<(u64, u64, Option<Vec<u8>>)> = (0..2u64)
        .filter_map(|i| match slots[i as usize] {
            Slot::Valid { seq, .. } => Some((seq, i, None)),
            _ => None,
        })
        .collect();
    tries.sort_unstable_by(|a, b| b.cmp(a));
    let mut damaged: Vec<(u64, u64, Option<Vec<u8>>)> = (0..2u64)
        .filter(|&i| slots[i as usize] == Slot::Damaged)
        .filter_map(|i| resealed(&*src.data, i).map(|(seq, b)| (seq, i, Some(b))))
        .collect();
    damaged.sort_unstable_by(|a, b| b.cmp(a));
    tries.extend(damaged);
    for (_, slot, bytes) in tries {
        let unchecked = bytes.is_some();
        let opened = Pager::open(slot_view(src, slot, bytes)).and_then(|(pager, cp)| {
            let engine = open(pager, &cp)?;
            Ok((engine, cp))
        });
        match opened {
            Ok(found) => {
                if unchecked {
                    let e = Error::corruption(
                        src.data.name(),
                        slot * SUPERBLOCK_SIZE,
                        "superblock checksum mismatch: its fields were used anyway, since its \
                         table checked out; a damaged counter or log position among them would \
                         go unnoticed",
                    );
                    let d = Damage::new("superblock used unchecked", None, e).keys(None, None);
                    damage.push(d.effect(Effect::Stale));
                }
                return Some(found);
            }
            Err(e) => {
                let what = match &e {
                    Error::Corruption { offset, .. } if *offset < 2 * SUPERBLOCK_SIZE => {
                        "superblock"
                    }
                    _ => "translation table",
                };
                damage.push(Damage::new(what, None, e).effect(Effect::None));
            }
        }
    }
    None
}

/// The engine tag of the newest superblock whose table opens, whatever its engine's metadata
/// holds.
fn named_tag(src: &Source, slots: &[Slot; 2]) -> Option<u8> {
    let mut valid: Vec<(u64, u64)> = (0..2u64)
        .filter_map(|i| match slots[i as usize] {
            Slot::Valid { seq, .. } => Some((seq, i)),
            _ => None,
        })
        .collect();
    valid.sort_unstable_by(|a, b| b.cmp(a));
    valid.into_iter().find_map(|(_, slot)| {
        let (_, cp) = Pager::open(slot_view(src, slot, None)).ok()?;
        cp.engine_meta.first().copied()
    })
}

/// The source's data file as a pager sees it with superblock slot `slot` alone (the other
/// reads as zeros), and that slot's bytes replaced by `resealed` when given.
fn slot_view(src: &Source, slot: u64, resealed: Option<Vec<u8>>) -> Arc<dyn Device> {
    let mut overlay = vec![(
        (1 - slot) * SUPERBLOCK_SIZE,
        vec![0u8; SUPERBLOCK_SIZE as usize],
    )];
    overlay.extend(resealed.map(|b| (slot * SUPERBLOCK_SIZE, b)));
    Arc::new(ReadOnly {
        inner: src.data.clone(),
        overlay,
    })
}

/// The options of the copy: the source's engine and geometry, the caller's cache and merge
/// operator, no sync per batch (the copy is checkpointed when done).
fn copy_options(engine: Option<&dyn Engine>, opts: &Options) -> Options {
    let mut o = opts
        .clone()
        .durability(Durability::None)
        .create_if_missing(true);
    if let Some(e) = engine {
        let s = e.stats();
        let n = s.node_size as usize;
        o = match s.engine {
            "btree" => o.btree(n),
            _ => o.betree(
                n,
                s.detail("fanout") as usize,
                s.detail("basement_size") as usize,
            ),
        };
    }
    o
}

/// Batches of puts into the copy, each about `CHUNK` bytes.
struct Copier<'a> {
    db: &'a Db,
    batch: WriteBatch,
    bytes: usize,
}

const CHUNK: usize = 4 << 20;

impl Copier<'_> {
    fn put(&mut self, k: &[u8], v: &[u8]) -> Result<()> {
        self.batch.put(k, v);
        self.bytes += k.len() + v.len();
        if self.bytes >= CHUNK || self.batch.len() >= 4096 {
            self.flush()?;
        }
        Ok(())
    }
    fn flush(&mut self) -> Result<()> {
        self.bytes = 0;
        if self.batch.is_empty() {
            return Ok(());
        }
        self.db.write(std::mem::take(&mut self.batch))
    }
}

fn run(src: Source, source: String, dst: &dyn Env, opts: Options) -> Result<SalvageReport> {
    if let Some(d) = dst.open(DATA_FILE, FileKind::Data, false)? {
        if d.len()? > 0 {
            return Err(Error::InvalidOptions(format!(
                "{} already holds a database: salvage writes a new one",
                dst.location()
            )));
        }
    }
    let slots = [probe_slot(&*src.data, 0)?, probe_slot(&*src.data, 1)?];
    let mut damage = Vec::new();
    for (i, s) in slots.iter().enumerate() {
        if *s == Slot::Damaged {
            let at = i as u64 * SUPERBLOCK_SIZE;
            let e = Error::corruption(src.data.name(), at, "superblock does not decode");
            damage.push(Damage::new("superblock", None, e).effect(Effect::None));
        }
    }
    let found = open_checkpoint(&src, &slots, &mut damage, |pager, cp| {
        open_engine(pager, cp, &opts)
    });
    let found = match found {
        Some((Opened::Plain(e), cp)) => Some((e, cp)),
        Some((Opened::Sda(sda), cp)) => {
            return salvage_versioned(Versioned::Sda(sda), cp, src, source, dst, slots, damage)
        }
        Some((Opened::Cow(cow), cp)) => {
            return salvage_versioned(Versioned::Cow(cow), cp, src, source, dst, slots, damage)
        }
        None => None,
    };
    if found.is_none() {
        if let Some(tag) =
            named_tag(&src, &slots).filter(|&t| t == sda::ENGINE_TAG || t == cow::ENGINE_TAG)
        {
            let first = damage.first().map_or(String::new(), |d| format!(": {d}"));
            return Err(Error::corruption(
                src.data.name(),
                0,
                format!(
                    "a versioned database (engine tag {tag}) whose checkpoint could not be read{first}; \
                     salvage rebuilds one only from its manifest's version tree, and copied nothing"
                ),
            ));
        }
        let e = Error::corruption(
            src.data.name(),
            0,
            "no checkpoint could be read: keys were copied from a raw scan of the data file",
        );
        damage.push(
            Damage::new("checkpoint", None, e)
                .keys(None, None)
                .effect(Effect::Stale),
        );
    }
    let (mut engine, cp) = match found {
        Some((e, cp)) => (Some(e), Some(cp)),
        None => (None, None),
    };
    let db = Db::open_in(dst, copy_options(engine.as_deref(), &opts))?;
    let mut copier = Copier {
        db: &db,
        batch: WriteBatch::new(),
        bytes: 0,
    };
    let mut keys_copied = 0;
    let mut raw = None;
    {
        let mut out = |k: &[u8], v: &[u8]| {
            keys_copied += 1;
            copier.put(k, v)
        };
        match &mut engine {
            Some(engine) => engine.salvage(&mut out, &mut damage)?,
            None => raw = Some(raw_scan(&*src.data, &mut out, &mut damage)?),
        }
    }
    copier.flush()?;
    // Without a checkpoint, the log's own marker says which checkpoint it continues.
    let after = cp.as_ref().map(|c| c.wal_seq);
    let log = replay_log(&src.logs, after, &db, &mut damage)?;
    let mut keys = 0;
    for kv in db.iter()? {
        kv?;
        keys += 1;
    }
    let engine_name = engine.as_ref().map_or("unknown", |e| e.name());
    db.close()?;
    Ok(SalvageReport {
        source,
        destination: dst.location(),
        engine: engine_name,
        slots,
        checkpoint: cp.map(|c| (c.seq, c.wal_seq)),
        keys_copied,
        raw,
        log,
        keys,
        damage,
    })
}

// ------------------------------------------------------------------------------------------
// A versioned database (the SDA or the copy-on-write B-tree)

/// A versioned database's engine, opened from its checkpoint.
enum Versioned {
    Sda(Box<Sda>),
    Cow(Box<CowTree>),
}

/// The rest of a salvage whose checkpoint opened as a versioned database: what its engine
/// still reads, written with its version tree into a new engine of its kind and
/// configuration, checkpointed; then the log's changes past the checkpoint replayed through
/// `VersionedDb`, in sequence order. The SDA's arrays are read block by block
/// (`Sda::salvage_entries`) and written as dense arrays (`Sda::import`); the CoW B-tree's
/// versions are read one at a time from their roots (`CowTree::salvage_version`) and each
/// built from its nearest live ancestor's tree, shared, taking what differs
/// (`CowTree::import_version`, in ascending order). A clone's record names the version
/// it made, so after a lost clone the changes of the versions it would have made are refused,
/// each reported.
fn salvage_versioned(
    source_engine: Versioned,
    cp: Checkpoint,
    src: Source,
    source: String,
    dst: &dyn Env,
    slots: [Slot; 2],
    mut damage: Vec<Damage>,
) -> Result<SalvageReport> {
    let (engine, name, keys_copied) = {
        // The lock makes the directory; `VersionedDb` takes it again below.
        let _lock = dst.lock(DATA_FILE, true)?;
        let dev = dst.open(DATA_FILE, FileKind::Data, true)?.expect("created");
        dev.set_len(0)?;
        let pager = Pager::create(dev);
        match source_engine {
            Versioned::Sda(mut sda) => {
                let entries = sda.salvage_entries(&mut damage)?;
                let n = entries.len() as u64;
                let (tree, cfg) = (sda.versions().clone(), sda.config());
                drop(sda);
                let mut copy = Sda::create(pager, cfg)?;
                copy.import(tree, entries)?;
                copy.checkpoint(0)?;
                (VersionedEngineOptions::Sda(cfg), "sda", n)
            }
            Versioned::Cow(mut cow) => {
                let (tree, cfg) = (cow.versions().clone(), cow.config());
                let mut copy = CowTree::create(pager, cfg)?;
                copy.import_tree(tree.clone())?;
                let (mut n, mut reported) = (0, HashSet::new());
                for v in tree.live() {
                    let entries = cow.salvage_version(v, &mut damage, &mut reported)?;
                    n += entries.len() as u64;
                    copy.import_version(v, &entries)?;
                }
                copy.checkpoint(0)?;
                (VersionedEngineOptions::Cow(cfg), "cow", n)
            }
        }
    };
    let opts = VersionedOptions {
        engine,
        durability: Durability::None,
        create_if_missing: false,
        ..VersionedOptions::default()
    };
    let db = VersionedDb::open_in(dst, opts)?;
    let log = replay_records(&src.logs, Some(cp.wal_seq), &mut damage, |r, _| {
        db.replay(&r.payload, &r.file, r.offset)
    })?;
    let keys = if name == "sda" {
        db.stats()?.detail("entries")
    } else {
        // Each live version's keys.
        let mut n = 0;
        for v in db.versions()?.iter().filter(|v| !v.deleted) {
            db.for_each_at::<&[u8], _>(v.version, .., false, |_, _| {
                n += 1;
                true
            })?;
        }
        n
    };
    db.close()?;
    Ok(SalvageReport {
        source,
        destination: dst.location(),
        engine: name,
        slots,
        checkpoint: Some((cp.seq, cp.wal_seq)),
        keys_copied,
        raw: None,
        log,
        keys,
        damage,
    })
}

// ------------------------------------------------------------------------------------------
// No checkpoint: a raw scan

/// What a raw scan of the data file found, when no checkpoint could be read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawScan {
    /// Intact leaf blocks (B+-tree leaves, Bε-tree leaves' heads) found.
    pub leaves: u64,
    /// Intact blob blocks found.
    pub blobs: u64,
    /// Keys found in leaf blocks that disagree on their value: the copy holds the one from
    /// the block of the highest node id (the most recently created node), perhaps not the
    /// newest value.
    pub conflicts: u64,
    /// Keys left out because their value's blob block was not found intact.
    pub missing_blobs: u64,
    /// Keys found only in puts buffered in Bε-tree internal nodes and runs.
    pub from_messages: u64,
}

/// One key found by the raw scan: the node whose block held it, its value, and whether other
/// blocks disagreed.
struct Found {
    owner: u64,
    val: Val,
    conflict: bool,
}

/// Scan every page of the data file for intact blocks: B+-tree leaves, Bε-tree leaves (each
/// basement checked against its head), blobs; copy out every key found, sorted. Without a
/// table, which blocks belong to the newest checkpoint is unknowable: a freed block stays
/// intact until its extent is reused, so a key may come back with an older value, or after
/// it was deleted, and Bε-tree messages buffered above the leaves are not applied.
fn raw_scan(data: &dyn Device, out: &mut Sink<'_>, damage: &mut Vec<Damage>) -> Result<RawScan> {
    let len = data.len()?;
    let mut scan = RawScan::default();
    let mut blobs: HashMap<u64, u64> = HashMap::new();
    let mut keys: BTreeMap<Vec<u8>, Found> = BTreeMap::new();
    // Bε-tree puts and deletes buffered above the leaves, the newest per key.
    let mut msgs: BTreeMap<Vec<u8>, (u64, Option<Val>)> = BTreeMap::new();
    let mut header = [0u8; BLOCK_HEADER];
    let mut at = DATA_START;
    while at + BLOCK_HEADER as u64 <= len {
        data.read_at(&mut header, at)?;
        let here = at;
        at += PAGE;
        let (kind, owner) = (
            header[20],
            u64::from_le_bytes(header[8..16].try_into().unwrap()),
        );
        let plen = u32::from_le_bytes(header[16..20].try_into().unwrap()) as u64;
        let (leaf, messages) = (
            betree::node::LEAF_KINDS.contains(&kind),
            betree::node::INTERNAL_KINDS.contains(&kind) || betree::node::RUN_KINDS.contains(&kind),
        );
        let wanted = kind == kind::BLOB || kind == btree::node::KIND_LEAF || leaf || messages;
        if !wanted || header[21..24] != [0, 0, 0] || here + BLOCK_HEADER as u64 + plen > len {
            continue;
        }
        let mut blk = vec![0u8; BLOCK_HEADER + plen as usize];
        data.read_at(&mut blk, here)?;
        let Ok((_, payload)) = block::open(&blk, owner, data.name(), here) else {
            continue;
        };
        let mut entries = Vec::new();
        match kind {
            kind::BLOB => {
                scan.blobs += 1;
                blobs.insert(owner, here);
            }
            btree::node::KIND_LEAF => {
                if let Ok((k, v)) = decode_entries(&mut Reader::new(payload)) {
                    scan.leaves += 1;
                    entries.push((k, v));
                }
            }
            _ if messages => {
                for (k, seq, v) in betree::raw_messages(data, here, kind, payload)? {
                    if msgs.get(&k).is_none_or(|(s, _)| *s < seq) {
                        msgs.insert(k, (seq, v));
                    }
                }
            }
            _ => {
                scan.leaves += 1;
                let enc = betree::node::segment_encoding(kind);
                raw_basements(data, here, payload, enc, &mut entries)?;
            }
        }
        for (ks, vs) in entries {
            for (k, v) in ks.iter().zip(vs) {
                match keys.get_mut(k) {
                    None => {
                        keys.insert(
                            k.to_vec(),
                            Found {
                                owner,
                                val: v,
                                conflict: false,
                            },
                        );
                    }
                    Some(f) if f.val != v => {
                        f.conflict = true;
                        if owner > f.owner {
                            (f.owner, f.val) = (owner, v);
                        }
                    }
                    Some(_) => {}
                }
            }
        }
    }
    // A key only messages name takes its newest put (a delete leaves it out). A key a leaf
    // holds keeps the leaf's value: leaf entries carry no sequence number to order them by.
    for (k, (_, v)) in msgs {
        if let (Some(val), false) = (v, keys.contains_key(&k)) {
            scan.from_messages += 1;
            let (owner, conflict) = (0, false);
            keys.insert(
                k,
                Found {
                    owner,
                    val,
                    conflict,
                },
            );
        }
    }
    for (k, f) in keys {
        scan.conflicts += f.conflict as u64;
        let bytes = match f.val {
            Val::Inline(b) => Some(b),
            Val::Blob { id, len: vlen } => blobs.get(&id).and_then(|&off| {
                let mut blk = vec![0u8; BLOCK_HEADER + vlen as usize];
                data.read_at(&mut blk, off).ok()?;
                let (_, p) = block::open(&blk, id, data.name(), off).ok()?;
                Some(p.to_vec())
            }),
        };
        match bytes {
            Some(v) => out(&k, &v)?,
            None => {
                scan.missing_blobs += 1;
                let e = Error::corruption(
                    data.name(),
                    0,
                    "the value's blob block was not found intact by the raw scan",
                );
                damage.push(Damage::new("blob", None, e).key(&k));
            }
        }
    }
    Ok(scan)
}

/// The entries of each intact basement of the Bε-tree leaf whose block is at `at` with head
/// `head` (docs/format.md: m u32, then per basement offset u32, length u32, xxh3 u64,
/// entries u32; then the pivots).
fn raw_basements(
    data: &dyn Device,
    at: u64,
    head: &[u8],
    enc: Encoding,
    out: &mut Vec<(crate::kv::Keys, Vec<Val>)>,
) -> Result<()> {
    let mut r = Reader::new(head);
    let Ok(m) = r.u32() else { return Ok(()) };
    let len = data.len()?;
    for _ in 0..m {
        let (Ok(off), Ok(plen), Ok(sum), Ok(_)) = (r.u32(), r.u32(), r.u64(), r.u32()) else {
            return Ok(());
        };
        let (off, plen) = (off as u64, plen as u64);
        if at + off + plen > len {
            continue;
        }
        let mut part = vec![0u8; plen as usize];
        data.read_at(&mut part, at + off)?;
        if xxh3_64(&part) != sum {
            continue;
        }
        if let Ok(e) = Basement::entries(&part, enc) {
            out.push(e);
        }
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------
// The log, read-only

/// `batch` without its upserts of keys whose value was lost (in a `lost` range, absent from
/// the copy, and not set earlier in the batch): merged with no value they would give a value
/// the source never held. Each one left out is reported.
fn replayable(
    batch: WriteBatch,
    lost: &[KeyRange],
    db: &Db,
    r: &LogRecord,
    damage: &mut Vec<Damage>,
) -> Result<WriteBatch> {
    let mut keep = WriteBatch::new();
    let mut set: Vec<KeyRange> = Vec::new();
    for op in batch.into_ops() {
        match op {
            Op::Put { key, value } => {
                set.push(KeyRange::key(&key));
                keep.put(key, value);
            }
            Op::Delete { key } => {
                set.push(KeyRange::key(&key));
                keep.delete(key);
            }
            Op::DeleteRange { start, end } => {
                set.push(KeyRange::new(Some(&start), Some(&end)));
                keep.delete_range(start, end);
            }
            Op::Upsert { key, operand } => {
                let unknown = lost.iter().any(|l| l.contains(&key))
                    && !set.iter().any(|s| s.contains(&key))
                    && db.get(&key)?.is_none();
                if unknown {
                    let e = Error::corruption(
                        &r.file,
                        r.offset,
                        format!(
                            "upsert of batch {} not replayed: the key's value was in a damaged block",
                            r.seq
                        ),
                    );
                    damage.push(Damage::new("log upsert", None, e).key(&key));
                } else {
                    keep.upsert(key, operand);
                }
            }
        }
    }
    Ok(keep)
}

const LOG_HEADER: usize = 32;

/// A stretch of a file: offset and length.
type Stretch = (u64, u64);

/// One intact log record.
struct LogRecord {
    file: String,
    offset: u64,
    seq: u64,
    marker: bool,
    payload: Vec<u8>,
}

/// The intact record at `at`, if any: header fields plausible, then the checksum.
fn record_at(buf: &[u8], at: usize) -> Option<(u64, bool, usize)> {
    let h = buf.get(at..at + LOG_HEADER)?;
    if h[13..16] != [0, 0, 0] || h[12] > 1 {
        return None;
    }
    let len = u32::from_le_bytes(h[8..12].try_into().unwrap()) as usize;
    let body = buf.get(at + 8..(at + LOG_HEADER).checked_add(len)?)?;
    if xxh3_64(body) != u64::from_le_bytes(h[..8].try_into().unwrap()) {
        return None;
    }
    Some((
        u64::from_le_bytes(h[16..24].try_into().unwrap()),
        h[12] == 1,
        len,
    ))
}

/// Every intact record of one log file, and its unreadable stretches (offset, length): past
/// a bad stretch the next intact record is searched for byte by byte.
///
/// Log files are written over, not emptied (`wal`'s "Files are overwritten"), so a file may
/// hold an earlier round's records past its current ones, and neither is damage: the head a
/// checkpoint writes over a file it has released, and the stretch where the current round's
/// last record ends inside an earlier round's (the next intact record goes back in sequence).
/// The records read past them are intact history like any other, replayed only when past the
/// checkpoint copied.
fn read_log(dev: &dyn Device) -> Result<(Vec<LogRecord>, Vec<Stretch>)> {
    let len = dev.len()? as usize;
    let mut buf = vec![0u8; len];
    if len > 0 {
        dev.read_at(&mut buf, 0)?;
    }
    let (mut recs, mut bad): (Vec<LogRecord>, _) = (Vec::new(), Vec::new());
    let mut at = if crate::wal::released(&buf) {
        LOG_HEADER
    } else {
        0
    };
    while at < len {
        if let Some((seq, marker, n)) = record_at(&buf, at) {
            recs.push(LogRecord {
                file: dev.name().to_string(),
                offset: at as u64,
                seq,
                marker,
                payload: buf[at + LOG_HEADER..at + LOG_HEADER + n].to_vec(),
            });
            at += LOG_HEADER + n;
            continue;
        }
        let found = (at + 1..len).find_map(|p| record_at(&buf, p).map(|(seq, ..)| (p, seq)));
        let next = found.map_or(len, |(p, _)| p);
        let seam = found.is_some_and(|(_, seq)| recs.last().is_some_and(|r| seq <= r.seq));
        if !seam {
            bad.push((at as u64, (next - at) as u64));
        }
        at = next;
    }
    Ok((recs, bad))
}

/// Apply every intact write batch past `after` to the copy, in sequence order; report the
/// gaps, the newer checkpoint a marker may name, and the unreadable stretches.
fn replay_log(
    logs: &[Arc<dyn Device>],
    after: Option<u64>,
    db: &Db,
    damage: &mut Vec<Damage>,
) -> Result<LogReport> {
    // Keys whose value was lost: an upsert of one cannot be replayed (see `replayable`).
    let lost: Vec<KeyRange> = damage
        .iter()
        .filter(|d| d.effect == Effect::Lost)
        .filter_map(|d| d.range.clone())
        .collect();
    replay_records(logs, after, damage, |r, damage| {
        WriteBatch::decode(&r.payload)
            .map_err(|what| Error::corruption(&r.file, r.offset, format!("log record: {what}")))
            .and_then(|b| replayable(b, &lost, db, r, damage))
            .and_then(|b| db.write(b))
    })
}

/// Apply every intact record past `after` with `apply`, in sequence order; report the gaps,
/// the newer checkpoint a marker may name, and the unreadable stretches.
fn replay_records(
    logs: &[Arc<dyn Device>],
    after: Option<u64>,
    damage: &mut Vec<Damage>,
    mut apply: impl FnMut(&LogRecord, &mut Vec<Damage>) -> Result<()>,
) -> Result<LogReport> {
    let mut report = LogReport::default();
    let mut batches = BTreeMap::new();
    let mut read = Vec::new();
    for dev in logs {
        read.push((dev, read_log(&**dev)?));
    }
    // Without a checkpoint: the newest the log's markers name, else the first batch's.
    let after = after.unwrap_or_else(|| {
        let recs = || read.iter().flat_map(|(_, (recs, _))| recs);
        let marker = recs().filter(|r| r.marker).map(|r| r.seq).max();
        let first = recs().filter(|r| !r.marker).map(|r| r.seq - 1).min();
        marker.or(first).unwrap_or(0)
    });
    for (dev, (recs, bad)) in read {
        for (offset, len) in bad {
            report.unreadable_bytes += len;
            let e = Error::corruption(
                dev.name(),
                offset,
                format!("{len} bytes of the log hold no intact record"),
            );
            damage.push(Damage::new("log", None, e));
        }
        for r in recs {
            if r.marker {
                if r.seq > after {
                    report.newer_checkpoint = report.newer_checkpoint.max(Some(r.seq));
                }
            } else if r.seq > after {
                batches.entry(r.seq).or_insert(r);
            }
        }
    }
    // Sequence numbers that must have been written: past the checkpoint, up to the last
    // batch found or the newer checkpoint a marker names.
    let end = batches.keys().next_back().copied().unwrap_or(after);
    let end = end.max(report.newer_checkpoint.unwrap_or(after));
    let mut applied_seqs = Vec::new();
    for (seq, r) in batches {
        match apply(&r, damage) {
            Ok(()) => {
                report.applied += 1;
                report.first.get_or_insert(seq);
                report.last = Some(seq);
                applied_seqs.push(seq);
            }
            // The copy failing to write is fatal; a batch that does not decode, or that the
            // copy refuses (an upsert without a merge operator), is lost.
            Err(e @ (Error::Io { .. } | Error::Poisoned { .. })) => return Err(e),
            Err(e) => damage.push(Damage::new("log record", None, e)),
        }
    }
    let mut expect = after + 1;
    for seq in applied_seqs.into_iter().chain(std::iter::once(end + 1)) {
        if seq > expect {
            report.missing.push((expect, seq - 1));
        }
        expect = seq + 1;
    }
    Ok(report)
}
