//! `LogStore<C>`: openraft's `RaftLogStorage` and `RaftLogReader` over the log range and the
//! marks of one strata `Db` (key layout in `keys`).
//!
//! Invariants:
//! - An append is acknowledged (its `LogFlushed` callback run) only after a `Db::sync` that
//!   covers its batch: the flusher's contract. All of one append's entries are one batch.
//! - Vote, committed and purged marks return only once durable.
//! - `truncate` is one range delete; `purge` is the purged mark plus one range delete, in one
//!   atomic batch. So the log never has a hole, and a crash leaves a purge whole or absent.
//! - While a snapshot is being received, the purged mark does not pass the state machine's
//!   applied mark: the purge openraft asks for after handing over the snapshot's install is
//!   left to the install's batch.
//! - Entries are visible to readers once written, before they are durable; openraft reads only
//!   entries it asked to append.

use std::fmt::Debug;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{
    AnyError, ErrorSubject, ErrorVerb, LogId, LogState, OptionalSend, RaftLogId, RaftLogReader,
    RaftTypeConfig, StorageError, StorageIOError, Vote,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use strata::{Db, Durability, WriteBatch};

use crate::flusher::Flusher;
use crate::keys;

/// Entries returned by one `limited_get_log_entries` call, at most: bounds the memory a
/// replication stream takes per round.
const READ_LIMIT: u64 = 1024;

/// Bytes of entries per strata batch in one append, far below strata's 1 GiB batch limit.
const APPEND_BATCH_BYTES: usize = 64 << 20;

pub(crate) fn io_err<NID: openraft::NodeId>(
    subject: ErrorSubject<NID>,
    verb: ErrorVerb,
    e: impl std::error::Error + 'static,
) -> StorageError<NID> {
    StorageIOError::new(subject, verb, AnyError::new(&e)).into()
}

pub(crate) fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    postcard::to_stdvec(v).expect("serializing to a Vec does not fail")
}

pub(crate) fn decode<T: DeserializeOwned, NID: openraft::NodeId>(
    bytes: &[u8],
    subject: ErrorSubject<NID>,
) -> Result<T, StorageError<NID>> {
    postcard::from_bytes(bytes).map_err(|e| io_err(subject, ErrorVerb::Read, e))
}

/// A Raft node's log in a strata `Db`. Clones share the database; one is the log reader.
pub struct LogStore<C: RaftTypeConfig> {
    db: Arc<Db>,
    flusher: Arc<Flusher>,
    /// Set by the state machine from `begin_receiving_snapshot` until that snapshot's install
    /// (see `purge`).
    receiving: Arc<AtomicBool>,
    _c: PhantomData<C>,
}

impl<C: RaftTypeConfig> Clone for LogStore<C> {
    fn clone(&self) -> Self {
        LogStore {
            db: self.db.clone(),
            flusher: self.flusher.clone(),
            receiving: self.receiving.clone(),
            _c: PhantomData,
        }
    }
}

impl<C: RaftTypeConfig> LogStore<C> {
    pub(crate) fn new(db: Arc<Db>, flusher: Arc<Flusher>, receiving: Arc<AtomicBool>) -> Self {
        LogStore {
            db,
            flusher,
            receiving,
            _c: PhantomData,
        }
    }

    /// The database under this store (shared with the state machine).
    pub fn db(&self) -> &Arc<Db> {
        &self.db
    }

    /// Write `batch` and return once it is durable.
    async fn write_durable(
        &self,
        batch: WriteBatch,
        subject: ErrorSubject<C::NodeId>,
    ) -> Result<(), StorageError<C::NodeId>> {
        self.db
            .write_with(batch, Durability::None)
            .map_err(|e| io_err(subject.clone(), ErrorVerb::Write, e))?;
        self.flusher
            .sync()
            .await
            .map_err(|e| io_err(subject, ErrorVerb::Write, e))
    }

    fn get_mark<T: DeserializeOwned>(
        &self,
        key: &[u8],
        subject: ErrorSubject<C::NodeId>,
    ) -> Result<Option<T>, StorageError<C::NodeId>> {
        match self
            .db
            .get(key)
            .map_err(|e| io_err(subject.clone(), ErrorVerb::Read, e))?
        {
            Some(v) => decode(&v, subject).map(Some),
            None => Ok(None),
        }
    }

    fn read_range(
        &self,
        lo: Bound<u64>,
        hi: Bound<u64>,
        limit: u64,
    ) -> Result<Vec<C::Entry>, StorageError<C::NodeId>> {
        let key = |b: Bound<u64>| b.map(|i| keys::log(i).to_vec());
        let hi = match key(hi) {
            Bound::Unbounded => Bound::Excluded(keys::log_end().to_vec()),
            b => b,
        };
        let lo = match key(lo) {
            Bound::Unbounded => Bound::Included(keys::log(0).to_vec()),
            b => b,
        };
        let iter = self
            .db
            .range::<Vec<u8>, _>((lo, hi))
            .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Read, e))?;
        let mut out = Vec::new();
        for kv in iter.take(limit as usize) {
            let (_, v) = kv.map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Read, e))?;
            out.push(decode::<C::Entry, _>(&v, ErrorSubject::Logs)?);
        }
        Ok(out)
    }
}

impl<C: RaftTypeConfig> RaftLogReader<C> for LogStore<C> {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<C::Entry>, StorageError<C::NodeId>> {
        self.read_range(
            range.start_bound().cloned(),
            range.end_bound().cloned(),
            u64::MAX,
        )
    }

    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<C::Entry>, StorageError<C::NodeId>> {
        self.read_range(Bound::Included(start), Bound::Excluded(end), READ_LIMIT)
    }
}

impl<C: RaftTypeConfig> RaftLogStorage<C> for LogStore<C> {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<C>, StorageError<C::NodeId>> {
        let last_purged: Option<LogId<C::NodeId>> =
            self.get_mark(keys::PURGED, ErrorSubject::Logs)?;
        let last = self
            .db
            .range(&keys::log(0)[..]..&keys::log_end()[..])
            .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Read, e))?
            .next_back()
            .transpose()
            .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Read, e))?;
        let last_log_id = match last {
            Some((_, v)) => Some(
                decode::<C::Entry, _>(&v, ErrorSubject::Logs)?
                    .get_log_id()
                    .clone(),
            ),
            None => last_purged.clone(),
        };
        Ok(LogState {
            last_purged_log_id: last_purged,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        let mut b = WriteBatch::new();
        b.put(keys::VOTE, encode(vote));
        self.write_durable(b, ErrorSubject::Vote).await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<C::NodeId>>, StorageError<C::NodeId>> {
        self.get_mark(keys::VOTE, ErrorSubject::Vote)
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<C::NodeId>>,
    ) -> Result<(), StorageError<C::NodeId>> {
        let mut b = WriteBatch::new();
        match &committed {
            Some(c) => b.put(keys::COMMITTED, encode(c)),
            None => b.delete(keys::COMMITTED),
        };
        self.write_durable(b, ErrorSubject::Store).await
    }

    async fn read_committed(
        &mut self,
    ) -> Result<Option<LogId<C::NodeId>>, StorageError<C::NodeId>> {
        self.get_mark(keys::COMMITTED, ErrorSubject::Store)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<C>,
    ) -> Result<(), StorageError<C::NodeId>>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // Written now (readers see them), acknowledged when the flusher's sync covers them.
        // Batches are cut well below strata's batch limit; written in index order, so a crash
        // between two leaves a prefix of the entries, never a hole.
        let write = |b: WriteBatch| {
            self.db
                .write_with(b, Durability::None)
                .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Write, e))
        };
        let (mut b, mut bytes) = (WriteBatch::new(), 0usize);
        for e in entries {
            let v = encode(&e);
            bytes += v.len();
            b.put(keys::log(e.get_log_id().index), v);
            if bytes >= APPEND_BATCH_BYTES {
                write(std::mem::take(&mut b))?;
                bytes = 0;
            }
        }
        write(b)?;
        self.flusher
            .after_sync(Box::new(move |r| callback.log_io_completed(r)));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        let mut b = WriteBatch::new();
        b.delete_range(keys::log(log_id.index), keys::log_end());
        self.write_durable(b, ErrorSubject::Logs).await
    }

    async fn purge(&mut self, log_id: LogId<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        // openraft purges the entries a received snapshot covers right after handing the
        // snapshot to the state machine to install, without waiting for the install. Written
        // here, that purge could become durable before the install and leave, after a crash,
        // a log purged past the state machine, which no restart repairs. So while a snapshot
        // is being received, a purge past the applied mark is left to the install's own
        // batch, which makes it with the state it installs (`StateMachine::install_snapshot`).
        // The applied mark's value begins with the last applied log id (`keys`).
        if self.receiving.load(Ordering::SeqCst) {
            let applied: Option<LogId<C::NodeId>> =
                self.get_mark(keys::APPLIED, ErrorSubject::StateMachine)?;
            if applied.is_none_or(|a| a.index < log_id.index) {
                return Ok(());
            }
        }
        let mut b = WriteBatch::new();
        b.put(keys::PURGED, encode(&log_id));
        b.delete_range(keys::log(0), keys::log_through(log_id.index));
        self.write_durable(b, ErrorSubject::Logs).await
    }
}
