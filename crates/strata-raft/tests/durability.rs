//! What strata-raft must keep across a restart and what its snapshots must mean, beyond
//! openraft's conformance suite:
//! - a store dropped without closing (as a crashed process leaves it) reopens with its log,
//!   vote, committed and purged marks, applied state and current snapshot;
//! - a snapshot built while applies go on is exactly the map at the snapshot's log index.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::{
    CommittedLeaderId, Entry, EntryPayload, LogId, RaftLogReader, RaftSnapshotBuilder, Vote,
};
use strata_raft::{Request, TypeConfig};

fn log_id(index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(1, 1), index)
}

fn entry(index: u64, req: Request) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(index),
        payload: EntryPayload::Normal(req),
    }
}

/// The command at log index `i` of a deterministic workload over `keys` keys: mostly
/// overwrites, some deletes.
fn command(i: u64, keys: u64) -> Request {
    let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17);
    let key = format!("k{:06}", h % keys).into_bytes();
    if h.is_multiple_of(7) {
        Request::Delete { key }
    } else {
        Request::Set {
            key,
            value: format!("v{i}").into_bytes(),
        }
    }
}

fn model(through: u64, keys: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut m = BTreeMap::new();
    for i in 1..=through {
        match command(i, keys) {
            Request::Set { key, value } => m.insert(key, value),
            Request::Delete { key } => m.remove(&key),
        };
    }
    m.into_iter().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopen_recovers_log_marks_state_and_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || strata::Options::default().cache_bytes(4 << 20);
    let (meta, entries) = {
        let (mut log, mut sm) = strata_raft::open(dir.path(), opts()).unwrap();
        let entries: Vec<_> = (1..=50).map(|i| entry(i, command(i, 20))).collect();
        log.blocking_append(entries.clone()).await.unwrap();
        log.save_vote(&Vote::new_committed(3, 2)).await.unwrap();
        log.save_committed(Some(log_id(30))).await.unwrap();
        sm.apply(entries[..30].to_vec()).await.unwrap();
        let snap = sm
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        log.purge(log_id(10)).await.unwrap();
        log.truncate(log_id(41)).await.unwrap();
        (snap.meta, entries)
        // Dropped here without `close`: strata replays its log on the next open.
    };
    let (mut log, mut sm) = strata_raft::open(dir.path(), opts()).unwrap();
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(10)));
    assert_eq!(state.last_log_id, Some(log_id(40)));
    let got = log.try_get_log_entries(0..100).await.unwrap();
    assert_eq!(got, entries[10..40].to_vec());
    assert_eq!(
        log.read_vote().await.unwrap(),
        Some(Vote::new_committed(3, 2))
    );
    assert_eq!(log.read_committed().await.unwrap(), Some(log_id(30)));
    assert_eq!(sm.applied_state().await.unwrap().0, Some(log_id(30)));
    assert_eq!(sm.pairs().unwrap(), model(30, 20));
    let cur = sm.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(cur.meta, meta);
    assert_eq!(cur.meta.last_log_id, Some(log_id(30)));
}

/// Applies `from..=to` in batches of 8 from another task while a snapshot is built, then checks
/// the snapshot (installed on a fresh replica) against the model at its index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_is_the_map_at_its_index_while_applies_go_on() {
    const KEYS: u64 = 4000;
    let dir = tempfile::tempdir().unwrap();
    let (_log, mut sm) = strata_raft::open(dir.path(), strata::Options::default()).unwrap();
    let mut next = 1u64;
    // A map of several build pages before the first build.
    while next <= 3 * KEYS {
        let batch: Vec<_> = (next..next + 64)
            .map(|i| entry(i, command(i, KEYS)))
            .collect();
        sm.apply(batch).await.unwrap();
        next += 64;
    }
    let mut overlapped = 0;
    for round in 0..5 {
        let stop = Arc::new(AtomicBool::new(false));
        let applier = {
            let (mut sm, stop) = (sm.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let batch: Vec<_> = (next..next + 8)
                        .map(|i| entry(i, command(i, KEYS)))
                        .collect();
                    sm.apply(batch).await.unwrap();
                    next += 8;
                    tokio::task::yield_now().await;
                }
                next
            })
        };
        tokio::task::yield_now().await;
        let snap = sm
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        let applied_after = sm.last_applied().unwrap().index;
        stop.store(true, Ordering::Relaxed);
        next = applier.await.unwrap();
        let at = snap.meta.last_log_id.unwrap().index;
        if applied_after > at {
            overlapped += 1;
        }
        let other = tempfile::tempdir().unwrap();
        let (_l, mut replica) =
            strata_raft::open(other.path(), strata::Options::default()).unwrap();
        replica
            .install_snapshot(&snap.meta, snap.snapshot)
            .await
            .unwrap();
        assert_eq!(
            replica.pairs().unwrap(),
            model(at, KEYS),
            "round {round}: the snapshot at {at} is not the map at {at}"
        );
        assert_eq!(
            replica.applied_state().await.unwrap().0,
            snap.meta.last_log_id
        );
    }
    println!("{overlapped} of 5 builds overlapped applies");
    assert!(
        overlapped > 0,
        "no build ran while applies went on: the test proved nothing"
    );
}
