//! Ingest figures for a Raft log (`--ignored`; run with `--nocapture` to see the table):
//! appends per second and bytes written per entry, for strata-raft's log store on strata's
//! Bε-tree and B+-tree, beside an in-memory log store written here (openraft's published
//! memstore implements the storage-v1 trait, which cannot be built beside storage-v2).
//!
//! ```sh
//! cargo test -p strata-raft --test ingest -- --ignored --nocapture
//! ```
//!
//! Each entry carries a `Set` of a 16-byte key and a 100-byte value. Three ways of appending:
//! one entry per append, each waited for (one fsync each); one entry per append from 8 tasks
//! at once (appends in flight share fsyncs, as openraft's pipelined appends do); 64 entries per
//! append. Every 10,000 entries the log is purged to its last 1,000, as openraft does after a
//! snapshot (with 8 in flight, once at the end). Bytes written count strata's log and data file from its own IO counters, and the
//! measured window ends with a checkpoint, so the data file's share is in the figure.
//! `STRATA_RAFT_INGEST_SCALE` multiplies the entry counts (default 1).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::RangeBounds;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use openraft::storage::{LogFlushed, RaftLogStorage, RaftLogStorageExt};
use openraft::{
    CommittedLeaderId, Entry, EntryPayload, LogId, LogState, OptionalSend, RaftLogReader,
    StorageError, Vote,
};
use strata_raft::{LogStore, Request, TypeConfig};

/// An in-memory log: the floor an on-disk store is measured against.
#[derive(Clone, Default)]
struct MemLog {
    inner: Arc<Mutex<MemInner>>,
}

#[derive(Default)]
struct MemInner {
    log: BTreeMap<u64, Entry<TypeConfig>>,
    vote: Option<Vote<u64>>,
    purged: Option<LogId<u64>>,
}

impl RaftLogReader<TypeConfig> for MemLog {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<u64>> {
        let g = self.inner.lock().unwrap();
        Ok(g.log.range(range).map(|(_, e)| e.clone()).collect())
    }
}

impl RaftLogStorage<TypeConfig> for MemLog {
    type LogReader = Self;
    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<u64>> {
        let g = self.inner.lock().unwrap();
        let last = g.log.values().next_back().map(|e| e.log_id).or(g.purged);
        Ok(LogState {
            last_purged_log_id: g.purged,
            last_log_id: last,
        })
    }
    async fn get_log_reader(&mut self) -> Self {
        self.clone()
    }
    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError<u64>> {
        self.inner.lock().unwrap().vote = Some(*vote);
        Ok(())
    }
    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError<u64>> {
        Ok(self.inner.lock().unwrap().vote)
    }
    async fn append<I>(
        &mut self,
        entries: I,
        cb: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut g = self.inner.lock().unwrap();
        for e in entries {
            g.log.insert(e.log_id.index, e);
        }
        cb.log_io_completed(Ok(()));
        Ok(())
    }
    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        self.inner.lock().unwrap().log.split_off(&log_id.index);
        Ok(())
    }
    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        let mut g = self.inner.lock().unwrap();
        g.log = g.log.split_off(&(log_id.index + 1));
        g.purged = Some(log_id);
        Ok(())
    }
}

fn entry(i: u64) -> Entry<TypeConfig> {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), i),
        payload: EntryPayload::Normal(Request::Set {
            key: format!("key-{:012}", i % 1_000_000).into_bytes(),
            value: vec![(i % 251) as u8; 100],
        }),
    }
}

const PURGE_EVERY: u64 = 10_000;
const KEEP: u64 = 1_000;

#[derive(Clone, Copy)]
enum Mode {
    OneAtATime,
    InFlight(u64),
    Batch(u64),
}

/// Append entries 1..=n in `mode`, purging as openraft would; returns the seconds taken.
async fn ingest<L: RaftLogStorage<TypeConfig> + Clone>(log: &L, n: u64, mode: Mode) -> f64 {
    let t = Instant::now();
    let purge = |mut log: L, upto: u64| async move {
        if upto.is_multiple_of(PURGE_EVERY) && upto > KEEP {
            let id = LogId::new(CommittedLeaderId::new(1, 1), upto - KEEP);
            log.purge(id).await.unwrap();
        }
    };
    match mode {
        Mode::OneAtATime | Mode::Batch(_) => {
            let per = if let Mode::Batch(b) = mode { b } else { 1 };
            let mut log = log.clone();
            let mut i = 1;
            while i <= n {
                let end = (i + per - 1).min(n);
                log.blocking_append((i..=end).map(entry)).await.unwrap();
                for j in i..=end {
                    purge(log.clone(), j).await;
                }
                i = end + 1;
            }
        }
        Mode::InFlight(k) => {
            let mut tasks = Vec::new();
            for t in 0..k {
                let mut log = log.clone();
                tasks.push(tokio::spawn(async move {
                    let mut i = 1 + t;
                    while i <= n {
                        log.blocking_append([entry(i)]).await.unwrap();
                        i += k;
                    }
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
            // Purges as one: concurrent appenders would race a purge past an unwritten index.
            purge(log.clone(), n - n % PURGE_EVERY).await;
        }
    }
    t.elapsed().as_secs_f64()
}

fn scale() -> u64 {
    std::env::var("STRATA_RAFT_INGEST_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn ingest_figures() {
    let s = scale();
    let modes = [
        ("1 entry/append, waited", Mode::OneAtATime, 2_000 * s),
        ("1 entry/append, 8 in flight", Mode::InFlight(8), 20_000 * s),
        ("64 entries/append", Mode::Batch(64), 200_000 * s),
    ];
    let encoded = postcard::to_stdvec(&entry(1)).unwrap().len();
    println!("entry: 16-byte key, 100-byte value, {encoded} bytes encoded");
    println!(
        "| store | appending | entries | appends/s (entries/s) | bytes written/entry (log + data) | fsyncs/entry |"
    );
    println!("|---|---|---:|---:|---:|---:|");
    for (what, mode, n) in modes {
        let mem = MemLog::default();
        let secs = ingest(&mem, n, mode).await;
        println!(
            "| in-memory | {what} | {n} | {:.0} | 0 | 0 |",
            n as f64 / secs
        );
        for (name, opts) in [
            ("strata Bε-tree", strata::Options::default()),
            (
                "strata B+-tree 64 KiB",
                strata::Options::default().btree(64 << 10),
            ),
            (
                "strata LSM-tree",
                strata::Options::default().lsm(strata::LsmConfig::default()),
            ),
        ] {
            // On the disk under target/, as strata's own long suites use.
            let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
            let (log, _sm): (LogStore<TypeConfig>, _) =
                strata_raft::open(dir.path(), opts).unwrap();
            let db = log.db().clone();
            let before = db.metrics();
            let t = Instant::now();
            ingest(&log, n, mode).await;
            db.checkpoint().unwrap();
            let secs = t.elapsed().as_secs_f64();
            let after = db.metrics();
            let wal = after.wal_io.bytes_written - before.wal_io.bytes_written;
            let data = after.data_io.bytes_written - before.data_io.bytes_written;
            let syncs = after.total_io().syncs - before.total_io().syncs;
            assert!(
                wal >= n * encoded as u64,
                "every entry went through strata's log"
            );
            println!(
                "| {name} ({}) | {what} | {n} | {:.0} | {:.0} ({:.0} + {:.0}) | {:.3} |",
                after.engine.geometry_origin,
                n as f64 / secs,
                (wal + data) as f64 / n as f64,
                wal as f64 / n as f64,
                data as f64 / n as f64,
                syncs as f64 / n as f64,
            );
            let e = &after.engine;
            eprintln!(
                "  {name}: data-file writes {} ({} bytes), tree height {}, {} internal + {} leaf nodes, {} live keys, {} buffered messages, data file {} bytes",
                after.data_io.writes - before.data_io.writes,
                data,
                e.height,
                e.internal_nodes,
                e.leaf_nodes,
                e.live_keys,
                e.detail("buffered_messages"),
                after.data_file_bytes,
            );
        }
    }
}
