//! `VersionedDb`: the versioned dictionary's facade (seed 003), beside `Db` on floor 10. It
//! owns the write-ahead log and one `VersionedEngine` (the SDA, or the copy-on-write B-tree
//! baseline) on the same substrate, files and crash protocol as `Db`:
//!
//! - every change (a put or delete at a version, a batch of them, a clone, a version delete)
//!   is validated first
//!   against the version tree and the key and value limits (bad input changes nothing and
//!   writes nothing), then, under the state lock, given the next sequence number, appended to
//!   the log as one record, applied to the engine, and acknowledged once the log is synced
//!   (with `Durability::Sync`);
//! - checkpoints follow `Db`'s protocol. Past `checkpoint_wal_bytes` of log the writer has the
//!   engine seal its state (`VersionedEngine::begin_checkpoint`: the SDA flushes its buffer and
//!   writes its manifest, the CoW B-tree its dirty nodes and manifest; the pager writes the
//!   table) and moves the log to its other file; a thread of the checkpoint's own makes it
//!   durable (syncs, superblock) while changes go on, and the next change after that finishes
//!   it (`wal::Checkpointing`). At most one is in flight. `checkpoint` and `close` wait for it,
//!   then sync the log, checkpoint on the caller's thread and start the log over;
//! - reads go to the engine's shared reads (`VersionedEngine::shared`) holding the state
//!   lock shared, so readers run side by side and wait only while a change or a checkpoint
//!   holds it alone; a read that leaves the engine over its memory budget (dirty nodes
//!   readers may not write back) settles it, holding the lock alone. A range iterator fetches
//!   a page at a time from either end and holds no lock between pages (a snapshot only at an
//!   internal version, which nothing writes); `for_each_at` hands a visitor borrowed entries
//!   holding the lock shared, one walk, no page and no copy;
//! - open: the newest durable checkpoint, then the log records past its sequence number are
//!   replayed. A clone's record carries the version it made, so replay makes the same one.
//!
//! A directory holds either a `Db` or a `VersionedDb`: the file names are `Db`'s, and the
//! engine tag in the superblock tells them apart. An IO error in the middle of a change leaves
//! memory ahead of or behind the log, so it poisons the database (as `Db` does): later calls
//! fail until it is reopened.

use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::codec::{Reader, Writer};
use crate::engine::versioned::{DiffEntry, VersionedEngine, VersionedReads};
use crate::engine::versions::{Version, VersionInfo};
use crate::engine::{CheckReport, EngineStats};
use crate::engines::cow::{self, CowTree};
use crate::engines::sda::{self, Sda};
use crate::error::{Error, Result};
use crate::kv::{Op, Paged, WriteBatch, MAX_BATCH_BYTES, MAX_KEY_LEN, MAX_VALUE_LEN};
use crate::metrics::Metrics;
use crate::model::Affine;
use crate::options::Durability;
use crate::storage::{Device, Env, EnvLock, FileEnv, FileKind, IoStats, Metered, Pager};
use crate::wal::{self, Reopened, Wal};

use crate::storage::env::{DATA_FILE, WAL_FILE, WAL_FILE_2};

/// Which versioned engine a new database gets, and its shape (an existing database keeps its
/// own, named in its superblock).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum VersionedEngineOptions {
    /// The stratified doubling array (seed 003).
    Sda(sda::Config),
    /// The copy-on-write B-tree with clones (the baseline).
    Cow(cow::Config),
}

impl Default for VersionedEngineOptions {
    fn default() -> VersionedEngineOptions {
        VersionedEngineOptions::Sda(sda::Config::default())
    }
}

#[derive(Clone, Debug)]
pub struct VersionedOptions {
    pub engine: VersionedEngineOptions,
    pub durability: Durability,
    pub direct_io: bool,
    /// Checkpoint when the log grows past this many bytes.
    pub checkpoint_wal_bytes: u64,
    pub create_if_missing: bool,
    /// Cost model used to price IOs in the statistics.
    pub cost_model: Affine,
    /// The SDA's merges on a thread of their own (the default), else inline on the writer,
    /// as `Options::background_merges` is for `Db`'s engines.
    pub background_merges: bool,
}

impl Default for VersionedOptions {
    fn default() -> VersionedOptions {
        VersionedOptions {
            engine: VersionedEngineOptions::default(),
            durability: Durability::Sync,
            direct_io: false,
            checkpoint_wal_bytes: 64 << 20,
            create_if_missing: true,
            cost_model: Affine::default(),
            background_merges: true,
        }
    }
}

/// One logged change.
#[derive(Clone, Debug, PartialEq)]
enum Change {
    Put(Version, Vec<u8>, Vec<u8>),
    Delete(Version, Vec<u8>),
    /// The version cloned, and the version the clone made.
    Clone(Version, Version),
    DeleteVersion(Version),
    /// Puts (Some) and deletes (None) at one version, applied in order, all or none.
    Batch(Version, Vec<(Vec<u8>, Option<Vec<u8>>)>),
}

const TAG_PUT: u8 = 1;
const TAG_DELETE: u8 = 2;
const TAG_CLONE: u8 = 3;
const TAG_DELETE_VERSION: u8 = 4;
const TAG_BATCH: u8 = 5;

impl Change {
    /// `tag u8 | version u64 | put: key, value length u32, value | delete: key | clone: new
    /// version u64 | version delete: nothing | batch: count u32, per change: tag u8 (1 put,
    /// 2 delete), key, a put's value length u32 and value` (keys: length u16, bytes).
    fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        match self {
            Change::Put(v, k, val) => {
                w.u8(TAG_PUT)
                    .u64(*v)
                    .key(k)
                    .u32(val.len() as u32)
                    .bytes(val);
            }
            Change::Delete(v, k) => {
                w.u8(TAG_DELETE).u64(*v).key(k);
            }
            Change::Clone(v, made) => {
                w.u8(TAG_CLONE).u64(*v).u64(*made);
            }
            Change::DeleteVersion(v) => {
                w.u8(TAG_DELETE_VERSION).u64(*v);
            }
            Change::Batch(v, ops) => {
                w.u8(TAG_BATCH).u64(*v).u32(ops.len() as u32);
                for (k, val) in ops {
                    match val {
                        Some(val) => {
                            w.u8(TAG_PUT).key(k).u32(val.len() as u32).bytes(val);
                        }
                        None => {
                            w.u8(TAG_DELETE).key(k);
                        }
                    }
                }
            }
        }
        w.finish()
    }

    fn decode(p: &[u8]) -> std::result::Result<Change, String> {
        let mut r = Reader::new(p);
        let tag = r.u8()?;
        let v = r.u64()?;
        let c = match tag {
            TAG_PUT => {
                let k = r.key()?.to_vec();
                let n = r.u32()? as usize;
                Change::Put(v, k, r.bytes(n)?.to_vec())
            }
            TAG_DELETE => Change::Delete(v, r.key()?.to_vec()),
            TAG_CLONE => Change::Clone(v, r.u64()?),
            TAG_DELETE_VERSION => Change::DeleteVersion(v),
            TAG_BATCH => {
                let n = r.u32()? as usize;
                // Each change takes at least 3 bytes: a count beyond them is damage.
                let mut ops = Vec::with_capacity(n.min(p.len() / 3));
                for _ in 0..n {
                    let tag = r.u8()?;
                    let k = r.key()?.to_vec();
                    let val = match tag {
                        TAG_PUT => {
                            let n = r.u32()? as usize;
                            Some(r.bytes(n)?.to_vec())
                        }
                        TAG_DELETE => None,
                        t => return Err(format!("unknown change {t} in a versioned batch")),
                    };
                    ops.push((k, val));
                }
                Change::Batch(v, ops)
            }
            t => return Err(format!("unknown versioned change {t}")),
        };
        r.finish()?;
        Ok(c)
    }

    /// Refuse what the engine would refuse, before anything is logged.
    fn validate(&self, engine: &dyn VersionedEngine) -> Result<()> {
        let tree = engine.versions();
        let key_ok = |k: &[u8]| {
            if k.len() > MAX_KEY_LEN {
                return Err(Error::KeyTooLarge {
                    len: k.len(),
                    max: MAX_KEY_LEN,
                });
            }
            Ok(())
        };
        match self {
            Change::Put(v, k, val) => {
                key_ok(k)?;
                if val.len() > MAX_VALUE_LEN {
                    return Err(Error::ValueTooLarge {
                        len: val.len(),
                        max: MAX_VALUE_LEN,
                    });
                }
                tree.check_writable(*v)
            }
            Change::Delete(v, k) => {
                key_ok(k)?;
                tree.check_writable(*v)
            }
            Change::Clone(v, _) | Change::DeleteVersion(v) => tree.check_live(*v),
            Change::Batch(v, ops) => {
                let mut bytes = 0;
                for (k, val) in ops {
                    key_ok(k)?;
                    let len = val.as_ref().map_or(0, Vec::len);
                    if len > MAX_VALUE_LEN {
                        return Err(Error::ValueTooLarge {
                            len,
                            max: MAX_VALUE_LEN,
                        });
                    }
                    bytes += 7 + k.len() + len;
                }
                if bytes + 13 > MAX_BATCH_BYTES {
                    return Err(Error::BatchTooLarge {
                        len: bytes + 13,
                        max: MAX_BATCH_BYTES,
                    });
                }
                tree.check_writable(*v)
            }
        }
    }

    /// The puts and deletes it holds, and their logical bytes (keys and values of puts, keys of
    /// deletes, as `Db` counts them); a clone or a version delete holds none.
    fn ops(&self) -> (u64, u64) {
        match self {
            Change::Put(_, k, val) => (1, (k.len() + val.len()) as u64),
            Change::Delete(_, k) => (1, k.len() as u64),
            Change::Batch(_, ops) => (
                ops.len() as u64,
                ops.iter()
                    .map(|(k, val)| (k.len() + val.as_ref().map_or(0, Vec::len)) as u64)
                    .sum(),
            ),
            Change::Clone(..) | Change::DeleteVersion(_) => (0, 0),
        }
    }

    /// Apply to the engine; returns the version a clone made.
    fn apply(&self, engine: &mut dyn VersionedEngine) -> Result<Option<Version>> {
        match self {
            Change::Put(v, k, val) => engine.put_at(*v, k, val).map(|_| None),
            Change::Delete(v, k) => engine.delete_at(*v, k).map(|_| None),
            Change::Clone(v, made) => {
                let w = engine.clone_version(*v)?;
                if w != *made {
                    return Err(Error::BadVersion {
                        version: w,
                        why: format!("the log says this clone made version {made}"),
                    });
                }
                Ok(Some(w))
            }
            Change::DeleteVersion(v) => engine.delete_version(*v).map(|_| None),
            Change::Batch(v, ops) => {
                for (k, val) in ops {
                    match val {
                        Some(val) => engine.put_at(*v, k, val)?,
                        None => engine.delete_at(*v, k)?,
                    }
                }
                Ok(None)
            }
        }
    }
}

struct State {
    engine: Box<dyn VersionedEngine>,
    next_seq: u64,
    /// The checkpoint being made durable on its own thread, if any (`wal::Checkpointing`).
    checkpointing: Option<wal::Checkpointing>,
}

/// What `metrics` reports beside the engine's and the devices' figures, since the open, as
/// `Db` keeps them.
#[derive(Default)]
struct Counters {
    changes: AtomicU64,
    ops: AtomicU64,
    logical_bytes: AtomicU64,
    point_queries: AtomicU64,
    point_query_reads: AtomicU64,
}

pub struct VersionedDb {
    opts: VersionedOptions,
    /// Changes and checkpoints hold it alone, reads shared.
    state: RwLock<State>,
    wal: Wal,
    data_stats: Arc<IoStats>,
    wal_stats: Arc<IoStats>,
    counters: Counters,
    poison: Mutex<Option<String>>,
    _lock: EnvLock,
}

fn open_engine(
    pager: Pager,
    cp: Option<&crate::storage::Checkpoint>,
    opts: &VersionedOptions,
) -> Result<Box<dyn VersionedEngine>> {
    match cp {
        None => match opts.engine {
            VersionedEngineOptions::Sda(cfg) => Ok(Box::new(
                Sda::create(pager, cfg)?.background(opts.background_merges),
            )),
            VersionedEngineOptions::Cow(cfg) => Ok(Box::new(CowTree::create(pager, cfg)?)),
        },
        Some(cp) => match cp.engine_meta.first() {
            Some(&sda::ENGINE_TAG) => {
                let mut t = Sda::open(pager, cp)?.background(opts.background_merges);
                // The cache's size is not in the superblock: the options' if they name the SDA.
                if let VersionedEngineOptions::Sda(cfg) = opts.engine {
                    t.set_cache_bytes(cfg.cache_bytes);
                }
                Ok(Box::new(t))
            }
            Some(&cow::ENGINE_TAG) => Ok(Box::new(CowTree::open(pager, cp)?)),
            other => Err(Error::NotADatabase {
                path: pager.file_name().to_string(),
                why: format!("engine tag {other:?} is not a versioned dictionary's"),
            }),
        },
    }
}

impl VersionedDb {
    /// Open the versioned database in directory `path`, creating it if absent (unless told
    /// not to).
    pub fn open(path: impl AsRef<Path>, opts: VersionedOptions) -> Result<VersionedDb> {
        let env = FileEnv::new(path, opts.direct_io);
        VersionedDb::open_in(&env, opts)
    }

    /// Open the versioned database that lives in `env` (a directory, or a simulated disk).
    pub fn open_in(env: &dyn Env, opts: VersionedOptions) -> Result<VersionedDb> {
        match opts.engine {
            VersionedEngineOptions::Sda(cfg) => cfg.check()?,
            VersionedEngineOptions::Cow(cfg) => cfg.check()?,
        }
        if opts.checkpoint_wal_bytes == 0 {
            return Err(Error::InvalidOptions(
                "checkpoint_wal_bytes must be positive".into(),
            ));
        }
        let lock = env.lock(DATA_FILE, opts.create_if_missing)?;
        let data_stats = Arc::new(IoStats::new(opts.cost_model, 4096));
        let wal_stats = Arc::new(IoStats::new(opts.cost_model, 4096));
        let metered = |dev: Arc<dyn Device>, stats: &Arc<IoStats>| -> Arc<dyn Device> {
            Arc::new(Metered::new(dev, stats.clone()))
        };
        // As `Db::open_in`: what a dead process left in the page cache is made durable before
        // anything is built on it.
        let existing = env.open(DATA_FILE, FileKind::Data, false)?;
        if let Some(dev) = &existing {
            dev.sync()?;
        }
        let mut log_empty = true;
        for name in [WAL_FILE, WAL_FILE_2] {
            if let Some(log) = env.open(name, FileKind::Log, false)? {
                log.sync()?;
                log_empty &= log.len()? == 0;
            }
        }
        let mut engine;
        let checkpoint_seq;
        let mut checkpoint_slot = 0;
        match existing {
            Some(dev) if !(Pager::is_unfinished(&*dev)? && log_empty) => {
                let (pager, cp) = Pager::open(metered(dev, &data_stats))?;
                engine = open_engine(pager, Some(&cp), &opts)?;
                checkpoint_seq = cp.wal_seq;
                checkpoint_slot = cp.seq % 2;
            }
            _ => {
                if !opts.create_if_missing {
                    return Err(Error::NotADatabase {
                        path: env.location(),
                        why: "no database here and create_if_missing is off".into(),
                    });
                }
                let dev = env.open(DATA_FILE, FileKind::Data, true)?.expect("created");
                dev.set_len(0)?;
                let pager = Pager::create(metered(dev, &data_stats));
                engine = open_engine(pager, None, &opts)?;
                checkpoint_seq = 0;
            }
        }
        let log = |name| -> Result<Arc<dyn Device>> {
            let dev = env.open(name, FileKind::Log, true)?.expect("created");
            Ok(metered(dev, &wal_stats))
        };
        let logs = [log(WAL_FILE)?, log(WAL_FILE_2)?];
        let data_name = engine.device().name().to_string();
        let newer_slot = (1 - checkpoint_slot) * crate::storage::pager::SUPERBLOCK_SIZE;
        let replay = |r: wal::Record<'_>| match r.kind {
            wal::Kind::Batch => {
                let bad = |what: String| {
                    Error::corruption(r.file, r.offset, format!("versioned log record: {what}"))
                };
                let change = Change::decode(r.payload).map_err(bad)?;
                match change.apply(&mut *engine) {
                    Err(Error::BadVersion { version, why }) => {
                        Err(bad(format!("version {version}: {why}")))
                    }
                    Err(e) => Err(e),
                    Ok(_) => engine.settle(),
                }
            }
            // As in `Db::open`: the log continues a checkpoint newer than the superblock found,
            // so the newer superblock is damaged, and its extents may since have been reused.
            wal::Kind::Checkpoint => Err(Error::corruption(
                &data_name,
                newer_slot,
                format!(
                    "the log continues a checkpoint covering sequence {}, but the newest valid \
                     superblock covers only {checkpoint_seq}: the newer superblock is damaged",
                    r.seq
                ),
            )),
        };
        let (wal, last_seq, reopened) = Wal::open(logs, checkpoint_seq, replay)?;
        match reopened {
            Reopened::Ready => {}
            Reopened::CheckpointFirst => {
                engine.checkpoint(last_seq)?;
                wal.reset(last_seq)?;
            }
            Reopened::Restart => wal.reset(last_seq)?,
        }
        Ok(VersionedDb {
            opts,
            state: RwLock::new(State {
                engine,
                next_seq: last_seq + 1,
                checkpointing: None,
            }),
            wal,
            data_stats,
            wal_stats,
            counters: Counters::default(),
            poison: Mutex::new(None),
            _lock: lock,
        })
    }

    fn check_poison(&self) -> Result<()> {
        match &*self.poison.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(cause) => Err(Error::Poisoned {
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    /// The state, held alone (changes, checkpoints, and what needs the engine `&mut`). The
    /// poison is checked once the lock is held, as `Db`'s: a change that fails poisons the
    /// database before letting go, and one queued behind it must not go on into what it left.
    fn state(&self) -> Result<RwLockWriteGuard<'_, State>> {
        let st = self.state.write().unwrap_or_else(|e| e.into_inner());
        self.check_poison()?;
        Ok(st)
    }

    /// The state, shared with other readers (`VersionedEngine::shared`); the poison checked
    /// as in `state`.
    fn reading(&self) -> Result<RwLockReadGuard<'_, State>> {
        let st = self.state.read().unwrap_or_else(|e| e.into_inner());
        self.check_poison()?;
        Ok(st)
    }

    /// Run `read` on the engine's shared reads, holding the state shared; then, if it left the
    /// engine over its budget, settle it (`settle_if`). Even a failed read may have loaded
    /// nodes: its own error comes first.
    fn shared_read<T>(&self, read: impl FnOnce(&dyn VersionedReads) -> Result<T>) -> Result<T> {
        let st = self.reading()?;
        let got = read(st.engine.shared());
        let settle = st.engine.shared().over_budget();
        drop(st);
        let settled = self.settle_if(settle);
        got.and_then(|got| settled.map(|()| got))
    }

    /// After a read that left the engine over its budget: write back what readers could not
    /// evict, holding the state alone. A failure there leaves memory ahead of the data file's
    /// blocks, so it poisons the database.
    fn settle_if(&self, over_budget: bool) -> Result<()> {
        if over_budget {
            self.state()?
                .engine
                .settle()
                .map_err(|e| self.poisoned(e))?;
        }
        Ok(())
    }

    fn poisoned(&self, e: Error) -> Error {
        self.poison
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert_with(|| e.to_string());
        e
    }

    /// Validate, log, apply, maybe checkpoint; then wait for the log's sync.
    fn change(&self, make: impl FnOnce(&dyn VersionedEngine) -> Change) -> Result<Option<Version>> {
        let (seq, made) = {
            let mut st = self.state()?;
            self.finish_checkpoint(&mut st, false)?;
            let change = make(&*st.engine);
            change.validate(&*st.engine)?;
            let seq = st.next_seq;
            let at = self
                .wal
                .append(wal::Kind::Batch, seq, &change.encode())
                .map_err(|e| self.poisoned(e))?;
            st.next_seq += 1;
            if self.opts.durability == Durability::Sync {
                self.wal.request_sync(seq);
            }
            let (ops, logical) = change.ops();
            let applied = change
                .apply(&mut *st.engine)
                .and_then(|made| st.engine.settle().map(|_| made));
            let made = match applied {
                Ok(made) => made,
                Err(e) => {
                    // As in `Db::write_with`: the record goes, or every reopen would replay
                    // into the same failure.
                    if let Err(cut) = self.wal.retract(at, seq) {
                        self.poisoned(Error::io(
                            format!("take back log record {seq} of a failed change ({e})"),
                            std::io::Error::other(cut.to_string()),
                        ));
                    }
                    return Err(self.poisoned(e));
                }
            };
            self.counters.changes.fetch_add(1, Relaxed);
            self.counters.ops.fetch_add(ops, Relaxed);
            self.counters.logical_bytes.fetch_add(logical, Relaxed);
            if self.wal.size() >= self.opts.checkpoint_wal_bytes {
                self.begin_checkpoint(&mut st)?;
            }
            (seq, made)
        };
        if self.opts.durability == Durability::Sync {
            self.wal.sync_through(seq).map_err(|e| self.poisoned(e))?;
        }
        Ok(made)
    }

    /// Apply a change as a log record of `file` at `offset` encodes it (salvage replays a
    /// damaged database's log into its copy), logged anew. A record that does not decode is
    /// corruption there; a clone that would not make the version it names (one before it was
    /// lost) is refused before anything is logged, as any change this database would refuse.
    pub(crate) fn replay(&self, payload: &[u8], file: &str, offset: u64) -> Result<()> {
        let change = Change::decode(payload).map_err(|what| {
            Error::corruption(file, offset, format!("versioned log record: {what}"))
        })?;
        if let Change::Clone(_, made) = change {
            let next = self.next_version()?;
            if made != next {
                return Err(Error::BadVersion {
                    version: made,
                    why: format!("the copy's next clone makes {next}: a clone before it was lost"),
                });
            }
        }
        self.change(|_| change).map(|_| ())
    }

    /// Every version in the tree (deleted ones kept as ghosts for their live descendants
    /// included), ascending.
    pub fn versions(&self) -> Result<Vec<VersionInfo>> {
        Ok(self.reading()?.engine.versions().versions())
    }

    /// The version the next clone will make.
    pub fn next_version(&self) -> Result<Version> {
        Ok(self.reading()?.engine.versions().next_version())
    }

    /// Make a new leaf under `v`, which becomes internal (read-only); returns the new version.
    pub fn clone_version(&self, v: Version) -> Result<Version> {
        let made = self.change(|e| Change::Clone(v, e.versions().next_version()))?;
        Ok(made.expect("a clone makes a version"))
    }

    /// Write `key` = `value` at leaf version `v`.
    pub fn put_at(&self, v: Version, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let (k, val) = (key.as_ref().to_vec(), value.as_ref().to_vec());
        self.change(|_| Change::Put(v, k, val)).map(|_| ())
    }

    /// Delete `key` at leaf version `v` (its ancestors keep their value).
    pub fn delete_at(&self, v: Version, key: impl AsRef<[u8]>) -> Result<()> {
        let k = key.as_ref().to_vec();
        self.change(|_| Change::Delete(v, k)).map(|_| ())
    }

    /// Apply `batch`'s puts and deletes at leaf version `v` as one change: one log record, one
    /// sync (with `Durability::Sync`), applied in order, and after a crash there all or not at
    /// all. Readers see it whole. A batch with an upsert or a range delete is refused
    /// (`Error::Unsupported`: the versioned engines have neither), as is one that breaks a
    /// key or value limit, before anything is written; an empty batch changes nothing.
    pub fn write_at(&self, v: Version, batch: WriteBatch) -> Result<()> {
        let mut ops = Vec::with_capacity(batch.len());
        for op in batch.into_ops() {
            ops.push(match op {
                Op::Put { key, value } => (key, Some(value)),
                Op::Delete { key } => (key, None),
                Op::Upsert { .. } | Op::DeleteRange { .. } => {
                    return Err(Error::Unsupported(
                        "a versioned database's batches take puts and deletes only".into(),
                    ))
                }
            });
        }
        if ops.is_empty() {
            // Still refused at a version no write may go to, as any write.
            return self.reading()?.engine.versions().check_writable(v);
        }
        self.change(|_| Change::Batch(v, ops)).map(|_| ())
    }

    /// Delete version `v`: it can no longer be read or written; what no live version reads is
    /// reclaimed (docs/versioned.md says when).
    pub fn delete_version(&self, v: Version) -> Result<()> {
        self.change(|_| Change::DeleteVersion(v)).map(|_| ())
    }

    /// The value of `key` at version `v`: the nearest ancestor-or-self's write.
    pub fn get_at(&self, v: Version, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        // This thread's reads: not those of other readers, or of background work, meanwhile.
        // A poisoned database refuses the read uncounted.
        self.check_poison()?;
        let before = crate::storage::iostats::thread_reads();
        let got = self.shared_read(|e| e.get_at_shared(v, key.as_ref()));
        self.counters.point_queries.fetch_add(1, Relaxed);
        self.counters
            .point_query_reads
            .fetch_add(crate::storage::iostats::thread_reads() - before, Relaxed);
        got
    }

    /// The entries of version `v` in `range`, in key order (`.rev()` for descending). Pages
    /// are fetched as the iterator goes, holding no lock between pages: 256 entries first,
    /// each next page from the same end twice the last, up to 4,096 (`kv::bounds::Paged`), so
    /// taking the first n entries resolves fewer than 2n + 256. Each key comes at most once,
    /// in order.
    /// At an internal version (frozen) this is a snapshot; at a leaf, a write made after this
    /// call to a key not yet reached is seen. Fails at once if `v` is not live, and yields
    /// the error of a later page (`v` deleted meanwhile, an IO error) as an item.
    pub fn range_at<K: AsRef<[u8]>, R: RangeBounds<K>>(
        &self,
        v: Version,
        range: R,
    ) -> Result<VersionedRange<'_>> {
        self.reading()?.engine.versions().check_live(v)?;
        Ok(VersionedRange {
            db: self,
            version: v,
            paged: Paged::new(
                range.start_bound().map(AsRef::as_ref),
                range.end_bound().map(AsRef::as_ref),
            ),
        })
    }

    /// Hand each entry of version `v` in `range` to `visit`, in key order (descending with
    /// `reverse`), until it returns false: the streaming form of `range_at`, with the same
    /// answers and the same error for a bad version (refused at the call, before anything is
    /// visited; nothing changes). The key and value are borrowed from the engine's memory,
    /// so nothing is allocated per entry, and one call resolves only what `visit` takes.
    /// The whole walk holds the database's lock shared: other readers run beside it, writers
    /// wait until it ends, and `visit` must not call this database (behind a waiting writer
    /// it would wait on itself). Nodes it loads into a pool left dirty by writes stay until
    /// the walk ends, then are written back. An IO error ends the walk and is returned.
    ///
    /// ```no_run
    /// # fn main() -> strata::Result<()> {
    /// let db = strata::VersionedDb::open("versions.db", Default::default())?;
    /// let mut first = Vec::new();
    /// db.for_each_at(strata::ROOT_VERSION, &b"a"[..].., false, |k, _| {
    ///     first.push(k.to_vec());
    ///     first.len() < 10
    /// })?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn for_each_at<K: AsRef<[u8]>, R: RangeBounds<K>>(
        &self,
        v: Version,
        range: R,
        reverse: bool,
        mut visit: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        let (lo, hi) = (
            range.start_bound().map(AsRef::as_ref),
            range.end_bound().map(AsRef::as_ref),
        );
        self.shared_read(|e| e.scan_with_shared(v, lo, hi, reverse, &mut visit))
    }

    /// Up to `limit` entries of `v` within (`lo`, `hi`), from the low end or (`reverse`) the
    /// high one.
    fn scan_page(
        &self,
        v: Version,
        lo: &Bound<Vec<u8>>,
        hi: &Bound<Vec<u8>>,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let (lo, hi) = (
            lo.as_ref().map(Vec::as_slice),
            hi.as_ref().map(Vec::as_slice),
        );
        let mut out = Vec::new();
        self.shared_read(|e| e.scan_at_shared(v, lo, hi, reverse, limit, &mut out))?;
        Ok(out)
    }

    /// The keys whose values differ between versions `v` and `w`, ascending, with the value at
    /// each (None: absent).
    pub fn diff(&self, v: Version, w: Version) -> Result<Vec<DiffEntry>> {
        self.shared_read(|e| e.diff_shared(v, w, Bound::Unbounded, Bound::Unbounded))
    }

    /// Write a checkpoint now and start the log over.
    pub fn checkpoint(&self) -> Result<()> {
        let mut st = self.state()?;
        self.checkpoint_locked(&mut st)
    }

    fn checkpoint_locked(&self, st: &mut State) -> Result<()> {
        self.finish_checkpoint(st, true)?;
        let seq = st.next_seq - 1;
        // The log durable through `seq` before a superblock says the checkpoint covers it.
        self.wal.sync_through(seq).map_err(|e| self.poisoned(e))?;
        st.engine.checkpoint(seq).map_err(|e| self.poisoned(e))?;
        self.wal.reset(seq).map_err(|e| self.poisoned(e))
    }

    /// Past `checkpoint_wal_bytes` of log, as `Db` does: the engine seals its state on the
    /// writer (the SDA flushes its buffer and writes its manifest, the CoW B-tree its dirty
    /// nodes), the log moves to its other file, and a thread of the checkpoint's own makes it
    /// durable while changes go on (`wal::Checkpointing`).
    fn begin_checkpoint(&self, st: &mut State) -> Result<()> {
        // One in flight at a time: its extents and the log file it left behind are in use.
        self.finish_checkpoint(st, true)?;
        let seq = st.next_seq - 1;
        let started = st
            .engine
            .begin_checkpoint(seq)
            .and_then(|c| wal::Checkpointing::start(&self.wal, seq, c))
            .map_err(|e| self.poisoned(e))?;
        st.checkpointing = Some(started);
        Ok(())
    }

    /// Complete the checkpoint in flight if it is durable (or, with `wait`, once it is): the
    /// space only the previous checkpoint needed is released.
    fn finish_checkpoint(&self, st: &mut State, wait: bool) -> Result<()> {
        let State {
            engine,
            checkpointing,
            ..
        } = st;
        wal::Checkpointing::finish(checkpointing, wait, |c| engine.finish_checkpoint(c))
            .map_err(|e| self.poisoned(e))
    }

    /// Wait for the merges running on their own thread and run every merge due, so that the
    /// engine is settled (as RocksDB's `wait_for_compact`; the SDA's, others have none), and
    /// for a checkpoint being made durable on its thread: nothing then runs in the background
    /// (the bench's intervals end here, with all their work inside). A close does this first;
    /// a checkpoint does not wait for merges.
    pub fn finish_merges(&self) -> Result<()> {
        let mut st = self.state()?;
        self.finish_checkpoint(&mut st, true)?;
        st.engine.finish_merges().map_err(|e| self.poisoned(e))
    }

    /// Make every change so far durable.
    pub fn sync(&self) -> Result<()> {
        let seq = self.reading()?.next_seq - 1;
        self.wal.sync_through(seq).map_err(|e| self.poisoned(e))
    }

    /// Checkpoint and close. Dropping without closing is safe: the log is replayed on open.
    ///
    /// As `Db::close`: when more than a tenth of the data file is holes after the checkpoint
    /// (the SDA's merges leave their inputs' extents behind, the copy-on-write B-tree its
    /// shadowed nodes'), the blocks of the file's tail move down into them and a second
    /// checkpoint shortens the file; the holes left are given back to the file system, so
    /// the closed database takes about the space its live blocks take.
    pub fn close(self) -> Result<()> {
        let mut st = self.state()?;
        // Merges done first, so that a closed database is settled (a checkpoint does not
        // wait for them).
        st.engine.finish_merges().map_err(|e| self.poisoned(e))?;
        self.checkpoint_locked(&mut st)?;
        let free = st.engine.stats().free_bytes;
        let file = st.engine.device().len()?;
        if free * 10 > file && st.engine.relocate_tail().map_err(|e| self.poisoned(e))? > 0 {
            self.checkpoint_locked(&mut st)?;
        }
        st.engine.release_free().map_err(|e| self.poisoned(e))?;
        // The checkpoint covers every record: the log files' space goes back too.
        self.wal.trim()
    }

    /// Verify every checksum and the engine's invariants.
    pub fn check(&self) -> Result<CheckReport> {
        let mut st = self.state()?;
        // The checker reads every block from the file: the checkpoint in flight first.
        self.finish_checkpoint(&mut st, true)?;
        // The levels are checked settled: the flush and merges in flight installed, those due
        // run. These change the engine, and one that fails has taken its inputs out of memory
        // (the frozen buffer, a merge's arrays): that poisons, as it does in a change.
        st.engine.finish_merges().map_err(|e| self.poisoned(e))?;
        st.engine.check()
    }

    /// The engine's structure, `levels` of it (0: all): the SDA's arrays level by level with
    /// the versions each serves, or the copy-on-write B-tree's nodes from the versions' roots.
    pub fn dump(&self, levels: u32) -> Result<crate::engine::dump::Dump> {
        self.state()?.engine.dump(levels)
    }

    pub fn stats(&self) -> Result<EngineStats> {
        Ok(self.reading()?.engine.stats())
    }

    /// `Db::metrics`' view of this database: the engine's figures, both files' IO and sizes,
    /// and since the open the changes (as `batches`), their puts and deletes and logical
    /// bytes, and the point reads (`get_at`) with their own device reads: so WA, SA and RA
    /// are counted as `Db`'s are.
    pub fn metrics(&self) -> Result<Metrics> {
        let st = self.reading()?;
        let c = &self.counters;
        Ok(Metrics {
            engine: st.engine.stats(),
            data_io: self.data_stats.snapshot(),
            wal_io: self.wal_stats.snapshot(),
            write_seq: st.next_seq - 1,
            batches: c.changes.load(Relaxed),
            ops_written: c.ops.load(Relaxed),
            logical_bytes_written: c.logical_bytes.load(Relaxed),
            point_queries: c.point_queries.load(Relaxed),
            point_query_reads: c.point_query_reads.load(Relaxed),
            data_file_bytes: st.engine.device().len().unwrap_or(0),
            wal_file_bytes: self.wal.file_bytes(),
            ..Metrics::default()
        }
        .finish())
    }

    /// Reads and writes of the data file so far.
    pub fn data_io(&self) -> crate::storage::IoSnapshot {
        self.data_stats.snapshot()
    }
}

impl Drop for VersionedDb {
    /// A checkpoint still in flight is waited for (not finished: the next open reads whichever
    /// superblock is durable), so that nothing writes the files once the lock is released.
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(thread) = st.checkpointing.take() {
            let _ = thread.join();
        }
    }
}

/// A version's entries in a key range, fetched a page at a time from either end (see
/// `VersionedDb::range_at`).
pub struct VersionedRange<'a> {
    db: &'a VersionedDb,
    version: Version,
    paged: Paged,
}

impl VersionedRange<'_> {
    fn step(&mut self, reverse: bool) -> Option<Result<(Vec<u8>, Vec<u8>)>> {
        let (db, v) = (self.db, self.version);
        self.paged.step(reverse, |lo, hi, reverse, limit| {
            db.scan_page(v, lo, hi, reverse, limit)
        })
    }
}

impl Iterator for VersionedRange<'_> {
    type Item = Result<(Vec<u8>, Vec<u8>)>;
    fn next(&mut self) -> Option<Self::Item> {
        self.step(false)
    }
}

impl DoubleEndedIterator for VersionedRange<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.step(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log record's bytes, fixed: a change to them is a format change.
    #[test]
    fn change_records_golden_bytes() {
        let hex = |c: &Change| {
            c.encode()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        };
        let put = Change::Put(2, b"k".to_vec(), b"vv".to_vec());
        assert_eq!(
            hex(&put),
            "0102000000000000000100 6b020000007676".replace(' ', "")
        );
        let clone = Change::Clone(1, 5);
        assert_eq!(hex(&clone), "0301000000000000000500000000000000");
        let batch = Change::Batch(
            7,
            vec![(b"k".to_vec(), Some(b"v".to_vec())), (b"j".to_vec(), None)],
        );
        assert_eq!(
            hex(&batch),
            "05 0700000000000000 02000000 01 0100 6b 01000000 76 02 0100 6a".replace(' ', "")
        );
        for c in [
            put,
            clone,
            batch,
            Change::Batch(2, Vec::new()),
            Change::Delete(3, b"".to_vec()),
            Change::DeleteVersion(4),
        ] {
            assert_eq!(Change::decode(&c.encode()).unwrap(), c);
        }
        assert!(Change::decode(&[9, 0, 0, 0, 0, 0, 0, 0, 0]).is_err());
        assert!(Change::decode(&[TAG_DELETE_VERSION, 0, 0, 0, 0, 0, 0, 0, 0, 1]).is_err());
        // A batch that claims more changes than it holds, or a change of an unknown kind.
        let mut short = Change::Batch(1, vec![(b"k".to_vec(), None)]).encode();
        short[9] = 2;
        assert!(Change::decode(&short).is_err());
        let mut odd = Change::Batch(1, vec![(b"k".to_vec(), None)]).encode();
        odd[13] = 9;
        assert!(Change::decode(&odd).is_err());
    }
}
