//! `StateMachine`: openraft's `RaftStateMachine` and `RaftSnapshotBuilder` for a replicated
//! key-value map kept in the `D` range of the same strata `Db` as the log (layout in `keys`).
//!
//! Invariants:
//! - One `apply` call is one atomic strata batch: the commands' writes together with the new
//!   last-applied log id and membership. The state on disk is always the state after some
//!   log index, never a part of an apply. Applies are written without their own fsync: strata's
//!   log is one ordered file, so the next durable write (an append, a mark) makes them durable,
//!   and what a crash loses is re-applied by openraft from the durable committed mark.
//! - A snapshot is the map as of one log index. The builder copies the map a page at a time,
//!   holding the state lock only for one page; while it runs, an apply that changes a key the
//!   builder has not copied yet first records the key's value as of the snapshot's index (its
//!   pre-image). The builder takes pre-images over the live values. So applies wait at most one
//!   page, and the snapshot still matches `last_log_id` exactly.
//! - Installing a snapshot is one atomic batch: the map cleared by a range delete, the
//!   snapshot's pairs, the last-applied mark, the stored snapshot and the purge of the log it
//!   covers (openraft asks for that purge without waiting for the install: see
//!   `LogStore::purge`). A build in flight sees the
//!   install (a generation number) and starts again from the installed state.
//! - The current snapshot is stored in the `P` range, meta and chunks in one batch, durable
//!   before `build_snapshot` or `install_snapshot` returns. Snapshots are held in memory
//!   (openraft's default `Cursor<Vec<u8>>`) and installed in one strata batch, so a map must
//!   stay well under strata's 1 GiB batch limit: a limit of this first version.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use openraft::storage::RaftStateMachine;
use openraft::{
    BasicNode, EntryPayload, ErrorSubject, ErrorVerb, LogId, OptionalSend, RaftSnapshotBuilder,
    Snapshot, SnapshotMeta, StorageError, StoredMembership,
};
use strata::{Db, Durability, WriteBatch, MAX_KEY_LEN, MAX_VALUE_LEN};

use crate::flusher::Flusher;
use crate::keys;
use crate::log_store::{decode, encode, io_err};
use crate::types::{NodeId, Request, Response, TypeConfig};

type Err = StorageError<NodeId>;
type Membership = StoredMembership<NodeId, BasicNode>;

/// Pairs copied per lock acquisition while a snapshot is built.
const BUILD_PAGE: usize = 512;
/// Stored snapshot chunk size, well under strata's value limit.
const CHUNK: usize = 1 << 20;

/// How far a snapshot build has copied the map.
enum Copied {
    Nothing,
    Through(Vec<u8>),
}

/// A build in flight: its progress and the pre-images of keys changed since it started.
struct Capture {
    copied: Copied,
    preimages: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
}

impl Capture {
    fn not_copied(&self, key: &[u8]) -> bool {
        match &self.copied {
            Copied::Nothing => true,
            Copied::Through(k) => key > k.as_slice(),
        }
    }
}

/// The map as of `applied`, in snapshot data format, copied under `generation`.
struct MapCopy {
    generation: u64,
    applied: Option<LogId<NodeId>>,
    membership: Membership,
    data: Vec<u8>,
}

struct State {
    last_applied: Option<LogId<NodeId>>,
    membership: Membership,
    /// Bumped by every snapshot install: a build that saw an older one starts again.
    generation: u64,
    build: Option<Capture>,
}

struct Inner {
    db: Arc<Db>,
    flusher: Arc<Flusher>,
    state: Mutex<State>,
    /// One build at a time: the capture in `State` belongs to it.
    build_lock: tokio::sync::Mutex<()>,
    builds: AtomicU64,
    /// Up from `begin_receiving_snapshot` to the install that follows it: the log store then
    /// leaves a purge past the applied mark to the install (`LogStore::purge`).
    receiving: Arc<AtomicBool>,
}

/// The replicated key-value map. Clones share the state; one is the snapshot builder.
#[derive(Clone)]
pub struct StateMachine {
    inner: Arc<Inner>,
}

/// Key and value bytes of one command, at most: its log entry (the command and some 40 bytes
/// of framing) must also fit in one strata value.
pub const MAX_COMMAND_BYTES: usize = MAX_VALUE_LEN - (8 << 10);

/// Whether a command fits strata's limits. Replicas apply the same check, so a command that
/// does not fit is skipped everywhere alike (the service refuses it before it is proposed).
pub fn command_fits(req: &Request) -> bool {
    match req {
        Request::Set { key, value } => {
            key.len() < MAX_KEY_LEN && key.len() + value.len() <= MAX_COMMAND_BYTES
        }
        Request::Delete { key } => key.len() < MAX_KEY_LEN,
    }
}

/// Snapshot data: each pair as key length (u32 LE), key, value length (u32 LE), value.
fn put_pair(out: &mut Vec<u8>, k: &[u8], v: &[u8]) {
    out.extend_from_slice(&(k.len() as u32).to_le_bytes());
    out.extend_from_slice(k);
    out.extend_from_slice(&(v.len() as u32).to_le_bytes());
    out.extend_from_slice(v);
}

/// Pairs borrowed from snapshot data.
type Pairs<'a> = Vec<(&'a [u8], &'a [u8])>;

fn parse_pairs(mut p: &[u8]) -> Result<Pairs<'_>, String> {
    fn field<'a>(p: &mut &'a [u8]) -> Result<&'a [u8], String> {
        let short = || "snapshot data truncated".to_string();
        let (len, rest) = p.split_at_checked(4).ok_or_else(short)?;
        let n = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
        let (f, rest) = rest.split_at_checked(n).ok_or_else(short)?;
        *p = rest;
        Ok(f)
    }
    let mut out = Vec::new();
    while !p.is_empty() {
        let k = field(&mut p)?;
        let v = field(&mut p)?;
        if k.len() >= MAX_KEY_LEN || v.len() > MAX_VALUE_LEN {
            return Err("snapshot pair over strata's limits".into());
        }
        out.push((k, v));
    }
    Ok(out)
}

impl StateMachine {
    pub(crate) fn open(
        db: Arc<Db>,
        flusher: Arc<Flusher>,
        receiving: Arc<AtomicBool>,
    ) -> Result<StateMachine, Err> {
        let applied = db
            .get(keys::APPLIED)
            .map_err(|e| io_err(ErrorSubject::StateMachine, ErrorVerb::Read, e))?;
        let (last_applied, membership) = match applied {
            Some(v) => {
                decode::<(Option<LogId<NodeId>>, Membership), _>(&v, ErrorSubject::StateMachine)?
            }
            None => (None, Membership::default()),
        };
        Ok(StateMachine {
            inner: Arc::new(Inner {
                db,
                flusher,
                state: Mutex::new(State {
                    last_applied,
                    membership,
                    generation: 0,
                    build: None,
                }),
                build_lock: tokio::sync::Mutex::new(()),
                builds: AtomicU64::new(0),
                receiving,
            }),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The map's value for `key` on this replica (as of its last applied entry).
    pub fn get(&self, key: &[u8]) -> strata::Result<Option<Vec<u8>>> {
        self.inner.db.get(keys::data(key))
    }

    /// Every pair of the map on this replica, in key order.
    pub fn pairs(&self) -> strata::Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let _st = self.state();
        self.inner
            .db
            .range(&keys::data_start()[..]..&keys::data_end()[..])?
            .map(|kv| kv.map(|(k, v)| (k[1..].to_vec(), v)))
            .collect()
    }

    pub fn last_applied(&self) -> Option<LogId<NodeId>> {
        self.state().last_applied
    }

    /// Copy the map as of the last applied entry; see the module comment.
    /// `None` when a snapshot install replaced the map before the copy was done.
    fn copy_map(&self) -> Result<Option<MapCopy>, Err> {
        let db = &self.inner.db;
        let rerr = |e: strata::Error| io_err(ErrorSubject::StateMachine, ErrorVerb::Read, e);
        let (generation, applied, membership) = {
            let mut st = self.state();
            st.build = Some(Capture {
                copied: Copied::Nothing,
                preimages: BTreeMap::new(),
            });
            (st.generation, st.last_applied, st.membership.clone())
        };
        let mut data = Vec::new();
        loop {
            let mut st = self.state();
            if st.generation != generation {
                return Ok(None);
            }
            let cap = st
                .build
                .as_mut()
                .expect("only installs clear a build, and they bump the generation");
            let lo = match &cap.copied {
                Copied::Nothing => Bound::Included(keys::data_start().to_vec()),
                Copied::Through(k) => Bound::Excluded(k.clone()),
            };
            let page = db
                .range::<Vec<u8>, _>((lo, Bound::Excluded(keys::data_end().to_vec())))
                .map_err(rerr)?
                .take(BUILD_PAGE)
                .collect::<strata::Result<Vec<_>>>()
                .map_err(rerr)?;
            let page_end = (page.len() == BUILD_PAGE).then(|| page[page.len() - 1].0.clone());
            // The pre-images of this page's span: every one up to its end.
            let taken = match &page_end {
                None => std::mem::take(&mut cap.preimages),
                Some(end) => {
                    let later = cap.preimages.split_off(end);
                    let mut taken = std::mem::replace(&mut cap.preimages, later);
                    if let Some(v) = cap.preimages.remove(end) {
                        taken.insert(end.clone(), v);
                    }
                    taken
                }
            };
            let mut live = page.into_iter().peekable();
            let mut pre = taken.into_iter().peekable();
            loop {
                let next = match (live.peek(), pre.peek()) {
                    (None, None) => break,
                    (Some(_), None) => live.next().map(|(k, v)| (k, Some(v))),
                    (None, Some(_)) => pre.next(),
                    (Some((lk, _)), Some((pk, _))) => match lk.cmp(pk) {
                        std::cmp::Ordering::Less => live.next().map(|(k, v)| (k, Some(v))),
                        std::cmp::Ordering::Greater => pre.next(),
                        std::cmp::Ordering::Equal => {
                            live.next();
                            pre.next()
                        }
                    },
                };
                if let Some((k, Some(v))) = next {
                    put_pair(&mut data, &k[1..], &v);
                }
            }
            match page_end {
                Some(end) => cap.copied = Copied::Through(end),
                None => {
                    st.build = None;
                    return Ok(Some(MapCopy {
                        generation,
                        applied,
                        membership,
                        data,
                    }));
                }
            }
        }
    }

    /// Store `data` as the current snapshot in `b` (meta and chunks, replacing the old one).
    fn stage_snapshot(b: &mut WriteBatch, meta: &SnapshotMeta<NodeId, BasicNode>, data: &[u8]) {
        b.delete_range(keys::SNAPSHOT_CHUNKS, keys::SNAPSHOT_CHUNKS_END);
        for (i, chunk) in data.chunks(CHUNK).enumerate() {
            b.put(keys::snapshot_chunk(i as u32), chunk);
        }
        b.put(keys::SNAPSHOT_META, encode(meta));
    }

    fn snapshot_id(&self, applied: &Option<LogId<NodeId>>) -> String {
        let n = self.inner.builds.fetch_add(1, Ordering::Relaxed);
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros())
            .unwrap_or(0);
        match applied {
            Some(l) => format!(
                "{}-{}-{}-{t}-{n}",
                l.leader_id.term, l.leader_id.node_id, l.index
            ),
            None => format!("none-{t}-{n}"),
        }
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, Err> {
        let _one = self.inner.build_lock.lock().await;
        loop {
            let Some(MapCopy {
                generation,
                applied,
                membership,
                data,
            }) = self.copy_map()?
            else {
                continue; // an install came in between: copy the installed state
            };
            let meta = SnapshotMeta {
                last_log_id: applied,
                last_membership: membership,
                snapshot_id: self.snapshot_id(&applied),
            };
            let werr = |e: String| {
                openraft::StorageIOError::write_snapshot(
                    Some(meta.signature()),
                    openraft::AnyError::error(e),
                )
            };
            {
                let st = self.state();
                if st.generation != generation {
                    continue;
                }
                let mut b = WriteBatch::new();
                Self::stage_snapshot(&mut b, &meta, &data);
                self.inner
                    .db
                    .write_with(b, Durability::None)
                    .map_err(|e| werr(e.to_string()))?;
            }
            self.inner
                .flusher
                .sync()
                .await
                .map_err(|e| werr(e.to_string()))?;
            return Ok(Snapshot {
                meta,
                snapshot: Box::new(Cursor::new(data)),
            });
        }
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> Result<(Option<LogId<NodeId>>, Membership), Err> {
        let st = self.state();
        Ok((st.last_applied, st.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>, Err>
    where
        I: IntoIterator<Item = openraft::Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let db = self.inner.db.clone();
        let mut st = self.state();
        let mut b = WriteBatch::new();
        let mut replies = Vec::new();
        let (mut applied, mut membership) = (st.last_applied, st.membership.clone());
        for e in entries {
            applied = Some(e.log_id);
            if let EntryPayload::Normal(req) = &e.payload {
                if command_fits(req) {
                    let key = match req {
                        Request::Set { key, .. } | Request::Delete { key } => keys::data(key),
                    };
                    if let Some(cap) = st.build.as_mut() {
                        if cap.not_copied(&key) && !cap.preimages.contains_key(&key) {
                            // The batch is not written yet: this reads the value as of the
                            // snapshot's index, or of an earlier change recorded already.
                            let before = db.get(&key).map_err(|err| {
                                io_err(ErrorSubject::Apply(e.log_id), ErrorVerb::Read, err)
                            })?;
                            cap.preimages.insert(key.clone(), before);
                        }
                    }
                    match req {
                        Request::Set { value, .. } => b.put(key, value),
                        Request::Delete { .. } => b.delete(key),
                    };
                }
            }
            if let EntryPayload::Membership(m) = e.payload {
                membership = StoredMembership::new(Some(e.log_id), m);
            }
            replies.push(Response {
                index: e.log_id.index,
            });
        }
        if replies.is_empty() {
            return Ok(replies);
        }
        b.put(keys::APPLIED, encode(&(applied, &membership)));
        db.write_with(b, Durability::None)
            .map_err(|e| io_err(ErrorSubject::StateMachine, ErrorVerb::Write, e))?;
        st.last_applied = applied;
        st.membership = membership;
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, Err> {
        self.inner.receiving.store(true, Ordering::SeqCst);
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), Err> {
        let subject = ErrorSubject::Snapshot(Some(meta.signature()));
        let data = snapshot.into_inner();
        let pairs = parse_pairs(&data)
            .map_err(|e| io_err(subject.clone(), ErrorVerb::Read, std::io::Error::other(e)))?;
        let mut b = WriteBatch::new();
        b.delete_range(keys::data_start(), keys::data_end());
        for (k, v) in pairs {
            b.put(keys::data(k), v);
        }
        b.put(
            keys::APPLIED,
            encode(&(meta.last_log_id, &meta.last_membership)),
        );
        // The log the snapshot covers is purged in the same batch: openraft's purge of it may
        // come before this install, and `LogStore::purge` leaves it to this batch.
        if let Some(last) = &meta.last_log_id {
            let purged: Option<LogId<NodeId>> = match self
                .inner
                .db
                .get(keys::PURGED)
                .map_err(|e| io_err(subject.clone(), ErrorVerb::Read, e))?
            {
                Some(v) => Some(decode(&v, subject.clone())?),
                None => None,
            };
            if purged.as_ref().is_none_or(|p| p < last) {
                b.put(keys::PURGED, encode(last));
                b.delete_range(keys::log(0), keys::log_through(last.index));
            }
        }
        Self::stage_snapshot(&mut b, meta, &data);
        {
            let mut st = self.state();
            self.inner
                .db
                .write_with(b, Durability::None)
                .map_err(|e| io_err(subject.clone(), ErrorVerb::Write, e))?;
            st.generation += 1;
            st.build = None;
            st.last_applied = meta.last_log_id;
            st.membership = meta.last_membership.clone();
        }
        self.inner.receiving.store(false, Ordering::SeqCst);
        self.inner
            .flusher
            .sync()
            .await
            .map_err(|e| io_err(subject, ErrorVerb::Write, e))
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, Err> {
        let subject = ErrorSubject::Snapshot(None);
        let rerr = |e: strata::Error| io_err(ErrorSubject::Snapshot(None), ErrorVerb::Read, e);
        // Under the state lock: snapshots are stored under it, so meta and chunks match.
        let _st = self.state();
        let db = &self.inner.db;
        let Some(meta) = db.get(keys::SNAPSHOT_META).map_err(rerr)? else {
            return Ok(None);
        };
        let meta: SnapshotMeta<NodeId, BasicNode> = decode(&meta, subject)?;
        let mut data = Vec::new();
        for kv in db
            .range(keys::SNAPSHOT_CHUNKS..keys::SNAPSHOT_CHUNKS_END)
            .map_err(rerr)?
        {
            data.extend_from_slice(&kv.map_err(rerr)?.1);
        }
        Ok(Some(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        }))
    }
}
