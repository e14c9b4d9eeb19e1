//! `Db`: the database facade. It owns the write-ahead log and one engine, and follows every
//! operation from the API to the engine:
//!
//! - `write(batch)`: validate everything first (bad input changes nothing); under the write lock,
//!   take the next sequence number, append the batch as one log record, start the log's sync for
//!   synced durability, apply the batch to the engine while that sync runs; release the lock;
//!   then wait for a log sync that covers the record (group commit). A batch is visible to
//!   readers once applied, which may be before its sync ends; it is acknowledged only after.
//! - checkpoints: past `checkpoint_wal_bytes` of log, and once the log is at least as long as
//!   the dirty nodes, the writer writes the dirty nodes and the table (`Engine::begin_checkpoint`) and moves the log to its other file (`Wal::rotate`);
//!   a thread of the checkpoint's own makes it durable (the data file's syncs and the
//!   superblock) while writers go on; the next write after that finishes it (the log file left
//!   behind is then obsolete, and the next rotation writes over it). At most one checkpoint is
//!   in flight: a writer that reaches the next threshold first waits for it. `checkpoint` and
//!   `close` checkpoint on the caller's thread; `close` then gives the log files' space back.
//! - `get`, `range`: the same lock, shared by readers (every engine reads through `&self`:
//!   `Engine::shared`); straight to the engine. A read that leaves the pool above its budget
//!   takes the lock alone after it to settle the pool. Range iterators fetch a page of entries
//!   at a time and hold no lock between pages; they see each key at most once, in order, but
//!   are not a snapshot (a page is one batch's state).
//! - open: read the newest checkpoint, replay log records past its sequence number.
//!
//! An IO error in the middle of a write leaves memory ahead of or behind the log, so it poisons
//! the database: later calls fail with `Poisoned` until it is reopened, and reopening recovers
//! from the checkpoint and the log.

use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::engine::dump::Dump;
use crate::engine::{CheckReport, Engine};
use crate::engines::betree::{self, BeTree, Geometry, Origin};
use crate::engines::btree::{self, BTree};
use crate::engines::cow;
use crate::engines::lsm::{self, Lsm};
use crate::engines::sda;
use crate::error::{Error, Result};
use crate::kv::{Paged, WriteBatch};
use crate::metrics::Metrics;
use crate::options::{Durability, EngineOptions, Options};
use crate::storage::{Device, Env, EnvLock, FileEnv, FileKind, IoStats, Metered, Pager};
use crate::wal::{self, Reopened, Wal};

pub use crate::storage::env::{DATA_FILE, WAL_FILE, WAL_FILE_2};

struct State {
    engine: Box<dyn Engine>,
    next_seq: u64,
    /// The checkpoint being made durable on its own thread, if any (`wal::Checkpointing`).
    checkpointing: Option<wal::Checkpointing>,
}

#[derive(Default)]
struct Counters {
    batches: AtomicU64,
    ops: AtomicU64,
    logical_bytes: AtomicU64,
    point_queries: AtomicU64,
    point_query_reads: AtomicU64,
}

pub struct Db {
    opts: Options,
    state: RwLock<State>,
    wal: Wal,
    data_stats: Arc<IoStats>,
    wal_stats: Arc<IoStats>,
    counters: Counters,
    poison: Mutex<Option<String>>,
    _lock: EnvLock,
}

fn apply(engine: &mut dyn Engine, batch: WriteBatch) -> Result<()> {
    engine.apply_batch(batch.into_ops())
}

fn open_engine(
    pager: Pager,
    opts: &Options,
    cp: Option<&crate::storage::Checkpoint>,
    auto: Option<(Geometry, Origin)>,
) -> Result<Box<dyn Engine>> {
    let merge = opts.merge_operator.clone();
    match cp {
        None => match opts.engine {
            EngineOptions::Auto => {
                let (geo, origin) = match auto {
                    Some(choice) => choice,
                    None => crate::tune::auto_geometry(
                        opts.expected_keys,
                        opts.cache_bytes as u64,
                        opts.checkpoint_wal_bytes,
                    )?,
                };
                Ok(Box::new(
                    BeTree::create(pager, geo, origin, opts.cache_bytes, merge)?
                        .background(opts.background_merges),
                ))
            }
            EngineOptions::BTree { node_size } => Ok(Box::new(BTree::create(
                pager,
                node_size,
                opts.cache_bytes,
                merge,
            )?)),
            EngineOptions::BeTree {
                node_size,
                fanout,
                basement,
            } => {
                let geo = Geometry {
                    node_size,
                    fanout,
                    basement,
                };
                Ok(Box::new(
                    BeTree::create(pager, geo, Origin::Explicit, opts.cache_bytes, merge)?
                        .background(opts.background_merges),
                ))
            }
            EngineOptions::Lsm(cfg) => Ok(Box::new(
                Lsm::create(pager, cfg, opts.cache_bytes, merge)?
                    .background(opts.background_merges),
            )),
        },
        Some(cp) => match cp.engine_meta.first() {
            Some(&btree::ENGINE_TAG) => {
                Ok(Box::new(BTree::open(pager, cp, opts.cache_bytes, merge)?))
            }
            Some(&betree::ENGINE_TAG) => Ok(Box::new(
                BeTree::open(pager, cp, opts.cache_bytes, merge)?
                    .background(opts.background_merges),
            )),
            Some(&lsm::ENGINE_TAG) => Ok(Box::new(
                Lsm::open(pager, cp, opts.cache_bytes, merge)?.background(opts.background_merges),
            )),
            // Not damage: a directory of the other facade's.
            Some(&tag @ (sda::ENGINE_TAG | cow::ENGINE_TAG)) => Err(Error::NotADatabase {
                path: pager.file_name().to_string(),
                why: format!(
                    "engine tag {tag} is a versioned dictionary's: open it with VersionedDb \
                     (`strata version ...`)"
                ),
            }),
            other => Err(Error::corruption(
                pager.file_name(),
                0,
                format!("unknown engine tag {other:?} in the superblock"),
            )),
        },
    }
}

fn log_is_empty(env: &dyn Env) -> Result<bool> {
    for name in [WAL_FILE, WAL_FILE_2] {
        if let Some(log) = env.open(name, FileKind::Log, false)? {
            if log.len()? > 0 {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

impl Db {
    /// Open the database in directory `path`, creating it if absent (unless told not to).
    pub fn open(path: impl AsRef<Path>, opts: Options) -> Result<Db> {
        let env = FileEnv::new(path, opts.direct_io);
        Db::open_in(&env, opts)
    }

    /// Open the database that lives in `env` (a directory, or a simulated disk in tests).
    pub fn open_in(env: &dyn Env, opts: Options) -> Result<Db> {
        opts.validate()?;
        // A new database's tuned geometry is settled before anything is created, so that a
        // saved profile that does not parse leaves no trace.
        let fresh = match env.open(DATA_FILE, FileKind::Data, false)? {
            None => true,
            Some(dev) => dev.len()? == 0,
        };
        let auto = match opts.engine {
            EngineOptions::Auto if fresh && opts.create_if_missing => {
                Some(crate::tune::auto_geometry(
                    opts.expected_keys,
                    opts.cache_bytes as u64,
                    opts.checkpoint_wal_bytes,
                )?)
            }
            _ => None,
        };
        let lock = env.lock(DATA_FILE, opts.create_if_missing)?;
        let data_stats = Arc::new(IoStats::new(opts.cost_model, 4096));
        let wal_stats = Arc::new(IoStats::new(opts.cost_model, 4096));
        let metered = |dev: Arc<dyn Device>, stats: &Arc<IoStats>| -> Arc<dyn Device> {
            Arc::new(Metered::new(dev, stats.clone()))
        };
        let existing = env.open(DATA_FILE, FileKind::Data, false)?;
        // A process that died may have left writes in the page cache that never reached the
        // disk: a superblock, log records. Make them durable before trusting them, or a power
        // cut later could revert them after we built on them (reused the extents an older
        // checkpoint needs, emptied the log an unsynced checkpoint covered).
        if let Some(dev) = &existing {
            dev.sync()?;
        }
        for name in [WAL_FILE, WAL_FILE_2] {
            if let Some(log) = env.open(name, FileKind::Log, false)? {
                log.sync()?;
            }
        }
        let mut engine;
        let checkpoint_seq;
        let mut checkpoint_slot = 0;
        match existing {
            Some(dev) if !(Pager::is_unfinished(&*dev)? && log_is_empty(env)?) => {
                let (pager, cp) = Pager::open(metered(dev, &data_stats))?;
                engine = open_engine(pager, &opts, Some(&cp), None)?;
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
                // Absent, empty, or a creation that a crash cut short before its first
                // superblock was durable: start afresh.
                let dev = env.open(DATA_FILE, FileKind::Data, true)?.expect("created");
                dev.set_len(0)?;
                engine = open_engine(Pager::create(metered(dev, &data_stats)), &opts, None, auto)?;
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
                let batch = WriteBatch::decode(r.payload).map_err(|what| {
                    Error::corruption(r.file, r.offset, format!("log record: {what}"))
                })?;
                apply(&mut *engine, batch)?;
                engine.settle()
            }
            // The log continues a checkpoint newer than the superblock we found: the newer
            // superblock is damaged, and its extents may since have been reused.
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
        if let Some(flag) = engine.yield_to_syncs() {
            wal.raise_while_syncing(flag);
        }
        match reopened {
            Reopened::Ready => {}
            Reopened::CheckpointFirst => {
                // A crash came before a background checkpoint was durable: the log's older file
                // still holds records, so checkpoint them before the next rotation reuses it.
                engine.checkpoint(last_seq)?;
                wal.reset(last_seq)?;
            }
            // The checkpoint (durable: synced above) covers everything the log holds.
            Reopened::Restart => wal.reset(last_seq)?,
        }
        Ok(Db {
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

    fn poisoned(&self, e: Error) -> Error {
        self.poison
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert_with(|| e.to_string());
        e
    }

    /// The state, alone: writes, checkpoints, and the pool's settling after a read. The
    /// poison is checked once the lock is held: a writer that fails poisons the database
    /// before letting go, and one queued behind it must not go on into what it left (a
    /// batch applied in part, a log record taken back).
    fn state(&self) -> Result<RwLockWriteGuard<'_, State>> {
        let st = self.state.write().unwrap_or_else(|e| e.into_inner());
        self.check_poison()?;
        Ok(st)
    }

    /// The state, shared with other readers (`Engine::shared`); the poison checked as in
    /// `state`.
    fn reading(&self) -> Result<RwLockReadGuard<'_, State>> {
        let st = self.state.read().unwrap_or_else(|e| e.into_inner());
        self.check_poison()?;
        Ok(st)
    }

    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.put(key, value);
        self.write(b)
    }

    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete(key);
        self.write(b)
    }

    /// Apply the merge operator (`Options::merge_operator`) to `key`'s value with `operand`.
    pub fn upsert(&self, key: impl AsRef<[u8]>, operand: impl AsRef<[u8]>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.upsert(key, operand);
        self.write(b)
    }

    /// Delete every key k with `start <= k < end`.
    pub fn delete_range(&self, start: impl AsRef<[u8]>, end: impl AsRef<[u8]>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete_range(start, end);
        self.write(b)
    }

    /// Apply `batch` atomically with the database's default durability.
    pub fn write(&self, batch: WriteBatch) -> Result<()> {
        self.write_with(batch, self.opts.durability)
    }

    /// Apply `batch` atomically; with `Durability::Sync`, return once it is on stable storage.
    pub fn write_with(&self, batch: WriteBatch, durability: Durability) -> Result<()> {
        batch.validate()?;
        if batch.has_upserts() {
            crate::kv::merge_operator(&self.opts.merge_operator)?;
        }
        if batch.is_empty() {
            return Ok(());
        }
        let payload = batch.encode();
        let seq = {
            let mut st = self.state()?;
            self.finish_checkpoint(&mut st, false)?;
            let seq = st.next_seq;
            let at = self
                .wal
                .append(wal::Kind::Batch, seq, &payload)
                .map_err(|e| self.poisoned(e))?;
            st.next_seq += 1;
            if durability == Durability::Sync {
                // The log syncs on its own thread while the batch is applied below.
                self.wal.request_sync(seq);
            }
            let (ops, logical) = (batch.len() as u64, batch.logical_bytes());
            if let Err(e) = apply(&mut *st.engine, batch).and_then(|_| st.engine.settle()) {
                // Memory may hold part of the batch; the log must not, or every reopen would
                // replay into the same failure. The batch was never acknowledged.
                if let Err(cut) = self.wal.retract(at, seq) {
                    // The record may come back after a crash: say so in the poison's cause.
                    self.poisoned(Error::io(
                        format!("take back log record {seq} of a failed batch ({e})"),
                        std::io::Error::other(cut.to_string()),
                    ));
                }
                return Err(self.poisoned(e));
            }
            self.counters.batches.fetch_add(1, Relaxed);
            self.counters.ops.fetch_add(ops, Relaxed);
            self.counters.logical_bytes.fetch_add(logical, Relaxed);
            // A checkpoint writes every dirty node: wait until the log is at least that long
            // too, so that checkpoints never write more than the log did since the last one.
            let log = self.wal.size();
            if log >= self.opts.checkpoint_wal_bytes && log >= st.engine.dirty_bytes() {
                self.begin_checkpoint(&mut st)?;
            }
            seq
        };
        if durability == Durability::Sync {
            self.wal.sync_through(seq).map_err(|e| self.poisoned(e))?;
        }
        Ok(())
    }

    /// The value of `key`. Readers run side by side, waiting only while a write or a
    /// checkpoint's start holds the state.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        let key = key.as_ref();
        // This thread's reads: not those of other readers, or of background work, meanwhile.
        let before = crate::storage::iostats::thread_reads();
        let st = self.reading()?;
        let got = st.engine.shared().get_shared(key);
        let settle = st.engine.shared().over_budget();
        drop(st);
        // Even a failed read may have loaded nodes; its own error comes first.
        let settled = self.settle_if(settle);
        let got = got.and_then(|got| settled.map(|()| got));
        self.counters.point_queries.fetch_add(1, Relaxed);
        self.counters
            .point_query_reads
            .fetch_add(crate::storage::iostats::thread_reads() - before, Relaxed);
        got
    }

    /// Iterate over the keys in `range`, in order; `.rev()` iterates backwards.
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Result<RangeIter<'_>> {
        self.check_poison()?;
        Ok(RangeIter {
            db: self,
            paged: Paged::new(
                range.start_bound().map(AsRef::as_ref),
                range.end_bound().map(AsRef::as_ref),
            ),
        })
    }

    /// Iterate over every key.
    pub fn iter(&self) -> Result<RangeIter<'_>> {
        self.range::<&[u8], _>(..)
    }

    fn scan_page(
        &self,
        lo: &Bound<Vec<u8>>,
        hi: &Bound<Vec<u8>>,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let (lo, hi) = (
            lo.as_ref().map(|k| k.as_slice()),
            hi.as_ref().map(|k| k.as_slice()),
        );
        let mut out = Vec::new();
        let st = self.reading()?;
        let scanned = st
            .engine
            .shared()
            .scan_shared(lo, hi, reverse, limit, &mut out);
        let settle = st.engine.shared().over_budget();
        drop(st);
        // Even a failed scan may have loaded nodes: the pool goes back within its budget.
        let settled = self.settle_if(settle);
        scanned?;
        settled?;
        Ok(out)
    }

    /// After a shared read that left the pool above its budget: bring it back, alone.
    fn settle_if(&self, over_budget: bool) -> Result<()> {
        if over_budget {
            self.state()?.engine.settle()?;
        }
        Ok(())
    }

    /// Write a checkpoint now and start the log over.
    pub fn checkpoint(&self) -> Result<()> {
        let mut st = self.state()?;
        self.checkpoint_locked(&mut st)
    }

    fn checkpoint_locked(&self, st: &mut State) -> Result<()> {
        self.finish_checkpoint(st, true)?;
        let seq = st.next_seq - 1;
        // The log durable through `seq` before a superblock says the checkpoint covers it: the
        // log then never ends below a durable checkpoint, whatever a power cut leaves of the
        // reset that follows.
        self.wal.sync_through(seq).map_err(|e| self.poisoned(e))?;
        st.engine.checkpoint(seq).map_err(|e| self.poisoned(e))?;
        self.wal.reset(seq).map_err(|e| self.poisoned(e))
    }

    /// Write a checkpoint's nodes and table, move the log to its other file, and leave the
    /// syncs to a thread of their own (see the module comment).
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
    /// space and the log file only the previous checkpoint needed are released.
    fn finish_checkpoint(&self, st: &mut State, wait: bool) -> Result<()> {
        let State {
            engine,
            checkpointing,
            ..
        } = st;
        wal::Checkpointing::finish(checkpointing, wait, |c| engine.finish_checkpoint(c))
            .map_err(|e| self.poisoned(e))
    }

    /// Make every write so far durable.
    pub fn sync(&self) -> Result<()> {
        let seq = self.state()?.next_seq - 1;
        self.wal.sync_through(seq).map_err(|e| self.poisoned(e))
    }

    /// Checkpoint and close. Dropping a `Db` without closing it is safe: the log is replayed on
    /// the next open.
    ///
    /// After the checkpoint, when more than a tenth of the data file is holes (copy-on-write
    /// leaves the old copies of rewritten blocks behind; an LSM-tree's merges leave their
    /// inputs' extents), move the blocks of the file's tail down into them and checkpoint again,
    /// so that the closed file ends at its last live block. The moves are counted IO like any.
    /// The holes that remain are given back to the file system (punched), so the closed
    /// database takes about the space its live blocks take.
    pub fn close(self) -> Result<()> {
        let mut st = self.state()?;
        self.checkpoint_locked(&mut st)?;
        let stats = st.engine.stats();
        let file = st.engine.device().len()?;
        if stats.free_bytes * 10 > file && st.engine.relocate_tail()? > 0 {
            self.checkpoint_locked(&mut st)?;
        }
        st.engine.release_free()?;
        // The checkpoint covers every record: the log files' space goes back too.
        self.wal.trim()
    }

    /// Verify every checksum and the engine's invariants.
    pub fn check(&self) -> Result<CheckReport> {
        let mut st = self.state()?;
        // The checker reads every block from the file, and a checkpoint in flight may not
        // have written all of its blocks yet.
        self.finish_checkpoint(&mut st, true)?;
        st.engine.check()
    }

    /// The engine's structure level by level from the root, down to `levels` levels (0: all),
    /// for `strata dump`. Reads node heads through the cache; changes nothing.
    pub fn dump(&self, levels: u32) -> Result<Dump> {
        self.state()?.engine.dump(levels)
    }

    pub fn options(&self) -> &Options {
        &self.opts
    }

    pub fn metrics(&self) -> Metrics {
        let st = self.state.read().unwrap_or_else(|e| e.into_inner());
        let engine = st.engine.stats();
        let write_seq = st.next_seq - 1;
        let data_file_bytes = st.engine.device().len().unwrap_or(0);
        drop(st);
        let c = &self.counters;
        Metrics {
            engine,
            data_io: self.data_stats.snapshot(),
            wal_io: self.wal_stats.snapshot(),
            write_seq,
            batches: c.batches.load(Relaxed),
            ops_written: c.ops.load(Relaxed),
            logical_bytes_written: c.logical_bytes.load(Relaxed),
            point_queries: c.point_queries.load(Relaxed),
            point_query_reads: c.point_query_reads.load(Relaxed),
            data_file_bytes,
            wal_file_bytes: self.wal.file_bytes(),
            ..Default::default()
        }
        .finish()
    }
}

impl Drop for Db {
    /// A checkpoint still in flight is waited for (not finished: the next open reads whichever
    /// superblock is durable), so that nothing writes the files once the lock is released.
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(thread) = st.checkpointing.take() {
            let _ = thread.join();
        }
    }
}

/// An iterator over a key range, from either end. Not a snapshot: see the module comment.
pub struct RangeIter<'a> {
    db: &'a Db,
    paged: Paged,
}

impl RangeIter<'_> {
    fn step(&mut self, reverse: bool) -> Option<Result<(Vec<u8>, Vec<u8>)>> {
        let db = self.db;
        self.paged.step(reverse, |lo, hi, reverse, limit| {
            db.scan_page(lo, hi, reverse, limit)
        })
    }
}

impl Iterator for RangeIter<'_> {
    type Item = Result<(Vec<u8>, Vec<u8>)>;
    fn next(&mut self) -> Option<Self::Item> {
        self.step(false)
    }
}

impl DoubleEndedIterator for RangeIter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.step(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::SimEnv;

    #[test]
    fn the_log_raises_the_flag_the_betree_drains_yield_to() {
        let db = Db::open_in(&SimEnv::new(), Options::default()).unwrap();
        let st = db.state().unwrap();
        let engine_flag = st
            .engine
            .yield_to_syncs()
            .expect("the default engine yields");
        let log_flag = db.wal.syncing_flag().expect("the log was given a flag");
        assert!(Arc::ptr_eq(&engine_flag, log_flag));
    }
}
