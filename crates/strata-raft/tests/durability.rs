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

/// Power cuts on strata's simulated disk (each keeps a random part of the unsynced writes, or
/// none): every append, vote and committed mark acknowledged before the cut is there after it,
/// the log has no hole, and the applied state is the map at its applied index, whatever of the
/// unacknowledged appends and applies in flight at the cut survived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_entries_and_marks_survive_power_cuts() {
    const KEYS: u64 = 50;
    let (mut raced, mut unapplied) = (0, 0);
    for round in 0..12u64 {
        let env = strata::storage::SimEnv::new();
        let opts = || {
            strata::Options::default()
                .cache_bytes(1 << 20)
                .checkpoint_wal_bytes(64 << 10)
        };
        let open = |env: &strata::storage::SimEnv| {
            let db = Arc::new(strata::Db::open_in(env, opts()).unwrap());
            strata_raft::over(db).unwrap()
        };
        let (acked, term) = {
            let (mut log, mut sm) = open(&env);
            let mut next = 1u64;
            let rounds = 5 + round % 4;
            let mut last_batch = Vec::new();
            // Acknowledged appends, committed and applied as a leader would.
            for r in 0..rounds {
                let batch: Vec<_> = (next..next + 40)
                    .map(|i| entry(i, command(i, KEYS)))
                    .collect();
                log.blocking_append(batch.clone()).await.unwrap();
                next += 40;
                log.save_committed(Some(log_id(next - 1))).await.unwrap();
                if r + 1 < rounds {
                    sm.apply(batch).await.unwrap();
                } else {
                    last_batch = batch;
                }
            }
            let term = 2 + round;
            log.save_vote(&Vote::new_committed(term, 1)).await.unwrap();
            let acked = next - 1;
            // In flight at the cut: the last apply (applies are made durable by the next
            // durable write, and none follows) and an append never waited for.
            sm.apply(last_batch).await.unwrap();
            let batch: Vec<_> = (next..next + 40)
                .map(|i| entry(i, command(i, KEYS)))
                .collect();
            let mut racing = log.clone();
            let append = tokio::spawn(async move { racing.blocking_append(batch).await });
            for _ in 0..round * 3 {
                tokio::task::yield_now().await;
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
            append.abort();
            let _ = append.await;
            (acked, term)
            // The stores and the database drop here as a crashed process leaves them.
        };
        if round % 2 == 0 {
            env.crash();
        } else {
            env.power_cut(round.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        }
        let (mut log, mut sm) = open(&env);
        let state = log.get_log_state().await.unwrap();
        let last = state.last_log_id.map_or(0, |l| l.index);
        assert!(
            last >= acked,
            "round {round}: log ends at {last}, {acked} acknowledged"
        );
        let got = log.try_get_log_entries(1..last + 1).await.unwrap();
        let want: Vec<_> = (1..=last).map(|i| entry(i, command(i, KEYS))).collect();
        assert_eq!(
            got, want,
            "round {round}: the log has a hole or a wrong entry"
        );
        assert_eq!(
            log.read_vote().await.unwrap(),
            Some(Vote::new_committed(term, 1)),
            "round {round}"
        );
        assert_eq!(log.read_committed().await.unwrap(), Some(log_id(acked)));
        let applied = sm.applied_state().await.unwrap().0.map_or(0, |l| l.index);
        assert!(
            applied <= last,
            "round {round}: applied {applied} past the log's end {last}"
        );
        assert_eq!(sm.pairs().unwrap(), model(applied, KEYS), "round {round}");
        raced += usize::from(last > acked);
        unapplied += usize::from(applied < acked);
    }
    println!("of 12 cuts: {raced} kept the unacknowledged append, {unapplied} lost the last apply");
}

/// openraft purges the log a received snapshot covers right after handing the snapshot's
/// install to the state machine, without waiting for it. A crash between the two must not
/// leave the log purged past the state machine (no restart repairs that): the store leaves
/// that purge to the install's batch, which purges with the state it installs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_ahead_of_its_snapshots_install_never_outruns_the_state_machine() {
    const KEYS: u64 = 30;
    // The leader's snapshot at 500.
    let leader = tempfile::tempdir().unwrap();
    let snap = {
        let (_log, mut sm) = strata_raft::open(leader.path(), strata::Options::default()).unwrap();
        sm.apply(
            (1..=500)
                .map(|i| entry(i, command(i, KEYS)))
                .collect::<Vec<_>>(),
        )
        .await
        .unwrap();
        sm.get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap()
    };
    let env = strata::storage::SimEnv::new();
    let open = |env: &strata::storage::SimEnv| {
        let db = Arc::new(strata::Db::open_in(env, strata::Options::default()).unwrap());
        strata_raft::over(db).unwrap()
    };
    {
        let (mut log, mut sm) = open(&env);
        let entries: Vec<_> = (1..=10).map(|i| entry(i, command(i, KEYS))).collect();
        log.blocking_append(entries.clone()).await.unwrap();
        log.save_committed(Some(log_id(10))).await.unwrap();
        sm.apply(entries).await.unwrap();
        // The follower receives the snapshot; openraft hands over the install and purges.
        let _data = sm.begin_receiving_snapshot().await.unwrap();
        log.purge(log_id(500)).await.unwrap();
        // A durable write after it: whatever the purge wrote is durable too.
        log.save_vote(&Vote::new_committed(2, 1)).await.unwrap();
    }
    env.crash();
    {
        let (mut log, mut sm) = open(&env);
        let state = log.get_log_state().await.unwrap();
        let applied = sm.applied_state().await.unwrap().0;
        assert_eq!(applied, Some(log_id(10)));
        assert!(
            state.last_purged_log_id <= applied,
            "purged {:?} past applied {applied:?}",
            state.last_purged_log_id
        );
        assert_eq!(log.try_get_log_entries(0..20).await.unwrap().len(), 10);
        // This time the install comes: it purges the log it covers with its state.
        let _data = sm.begin_receiving_snapshot().await.unwrap();
        log.purge(log_id(500)).await.unwrap();
        let meta = snap.meta.clone();
        let data = std::io::Cursor::new(snap.snapshot.get_ref().clone());
        sm.install_snapshot(&meta, Box::new(data)).await.unwrap();
        // A later purge the snapshot covers goes through as before.
        log.purge(log_id(500)).await.unwrap();
    }
    env.crash();
    let (mut log, mut sm) = open(&env);
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(500)));
    assert_eq!(state.last_log_id, Some(log_id(500)));
    assert!(log.try_get_log_entries(0..600).await.unwrap().is_empty());
    assert_eq!(sm.applied_state().await.unwrap().0, Some(log_id(500)));
    assert_eq!(sm.pairs().unwrap(), model(500, KEYS));
}
