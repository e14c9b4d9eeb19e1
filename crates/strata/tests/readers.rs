//! Readers side by side: `Db::get` and range pages of the Bε-tree, the B+-tree and the LSM-tree
//! run under a shared lock (`SharedReads`), each loading what it misses without holding the
//! pool's lock; so do `VersionedDb`'s reads of the SDA and the copy-on-write B-tree
//! (`VersionedReads`). These tests hold that readers really are inside the engine together
//! (their device reads meet), that beside a writer they see whole batches (whole changes, in
//! order, and frozen versions that stay as they were) and never go back in time, and that the
//! memory budget still holds between calls.

mod common;

use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use common::wrap::{pass, pass_write, Hooked, WrapEnv};

use strata::storage::{Device, Env, SimEnv};
use strata::{
    CowConfig, Db, Durability, LsmConfig, Options, Result, SdaConfig, Version, VersionedDb,
    VersionedEngineOptions, VersionedOptions, WriteBatch, ROOT_VERSION,
};

/// The state of a data device that, once armed, holds every read until a second one is in
/// flight (or a deadline passes): two readers meet there only if both are inside the engine
/// at once (`meet`).
#[derive(Debug)]
struct Meeting {
    armed: AtomicBool,
    /// Reads that arrived while armed: the first waits for the second, later ones go on.
    arrivals: Mutex<usize>,
    arrived: Condvar,
    /// Reads that met another, and reads that waited in vain.
    met: AtomicU64,
    alone: AtomicU64,
}

fn meet(m: &Meeting) -> Result<()> {
    if !m.armed.load(Ordering::Relaxed) {
        return Ok(());
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut n = m.arrivals.lock().unwrap();
    *n += 1;
    m.arrived.notify_all();
    while *n < 2 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            m.alone.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        n = m.arrived.wait_timeout(n, left).unwrap().0;
    }
    m.met.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

type MeetingEnv = WrapEnv<Hooked<Meeting>>;

fn meeting(inner: Arc<dyn Device>) -> Hooked<Meeting> {
    Hooked {
        inner,
        state: Meeting {
            armed: AtomicBool::new(false),
            arrivals: Mutex::new(0),
            arrived: Condvar::new(),
            met: AtomicU64::new(0),
            alone: AtomicU64::new(0),
        },
        on_read: meet,
        on_write: pass_write,
    }
}

/// Arm `dev`, run `read(0)` and `read(1)` on two threads at once, and require that their
/// device reads met (`what` names them in the failure); the counts are reset for the next.
fn two_at_once(dev: &Meeting, what: &str, read: impl Fn(u64) + Sync) {
    *dev.arrivals.lock().unwrap() = 0;
    dev.met.store(0, Ordering::Relaxed);
    dev.armed.store(true, Ordering::Relaxed);
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let read = &read;
            s.spawn(move || read(t));
        }
    });
    assert_eq!(dev.alone.load(Ordering::Relaxed), 0, "{what} read alone");
    assert!(dev.met.load(Ordering::Relaxed) >= 2, "no two reads met");
}

fn key(i: u64) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}

/// A tree of 20,000 keys on small nodes (`engine` sets which), reopened with a pool far
/// smaller than it, so that reads miss.
fn cold_tree(env: &dyn Env, engine: fn(Options) -> Options) -> Db {
    let opts = || engine(Options::default().durability(Durability::None));
    let db = Db::open_in(env, opts().cache_bytes(16 << 20)).unwrap();
    for b in 0..20u64 {
        let mut batch = WriteBatch::new();
        for i in b * 1000..(b + 1) * 1000 {
            batch.put(key(i), i.to_le_bytes());
        }
        db.write(batch).unwrap();
    }
    db.close().unwrap();
    Db::open_in(env, opts().cache_bytes(64 << 10)).unwrap()
}

/// Two readers of keys that are not in memory are inside the engine at once: each one's device
/// read waits for the other's. With reads taking the database alone (as before the fifteenth
/// session), the first would wait its five seconds out, alone.
fn two_readers_read_the_device_at_once(engine: fn(Options) -> Options) {
    let env = MeetingEnv::new(meeting);
    let db = cold_tree(&env, engine);
    let dev = env.data();
    two_at_once(&dev.state, "a reader", |t| {
        let k = 3_000 + 11_000 * t;
        assert_eq!(db.get(key(k)).unwrap(), Some(k.to_le_bytes().to_vec()));
    });
    let m = db.metrics();
    assert!(m.engine.cache.resident_bytes <= m.engine.cache.budget_bytes);
}

#[test]
fn two_readers_of_the_betree_read_the_device_at_once() {
    two_readers_read_the_device_at_once(|o| o.betree(16 << 10, 8, 4 << 10));
}

#[test]
fn two_readers_of_the_btree_read_the_device_at_once() {
    two_readers_read_the_device_at_once(|o| o.btree(4 << 10));
}

#[test]
fn two_readers_of_the_lsm_tree_read_the_device_at_once() {
    two_readers_read_the_device_at_once(|o| o.lsm(LsmConfig::default()));
}

/// Four readers beside a writer whose batch n sets every one of 16 keys to n. A reader sees a
/// key's value never go down, a range page holds one batch's values throughout (a page is
/// read whole under the shared lock), and after the writer's last batch every key has its
/// value. Between calls the pool keeps to its budget, however the readers and the writer met.
#[test]
fn betree_readers_beside_a_writer_see_whole_batches_in_order() {
    readers_beside_a_writer_see_whole_batches_in_order(|o| o.betree(16 << 10, 8, 4 << 10));
}

#[test]
fn btree_readers_beside_a_writer_see_whole_batches_in_order() {
    readers_beside_a_writer_see_whole_batches_in_order(|o| o.btree(4 << 10));
}

#[test]
fn lsm_readers_beside_a_writer_see_whole_batches_in_order() {
    readers_beside_a_writer_see_whole_batches_in_order(|o| o.lsm(LsmConfig::default()));
}

fn readers_beside_a_writer_see_whole_batches_in_order(engine: fn(Options) -> Options) {
    let env = SimEnv::new();
    let opts = engine(Options::default())
        .cache_bytes(96 << 10)
        .checkpoint_wal_bytes(256 << 10)
        .durability(Durability::None);
    let db = Db::open_in(&env, opts).unwrap();
    // Other data around the 16 keys, so that the tree has levels and the pool is too small.
    for b in 0..10u64 {
        let mut batch = WriteBatch::new();
        for i in b * 1000..(b + 1) * 1000 {
            batch.put(key(i), [7u8; 40]);
        }
        db.write(batch).unwrap();
    }
    let hot: Vec<Vec<u8>> = (0..16u64)
        .map(|i| format!("hot{i:02}").into_bytes())
        .collect();
    let mut batch = WriteBatch::new();
    for k in &hot {
        batch.put(k, 0u64.to_le_bytes());
    }
    db.write(batch).unwrap();
    let batches = 2_000u64;
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            for n in 1..=batches {
                let mut batch = WriteBatch::new();
                for k in &hot {
                    batch.put(k, n.to_le_bytes());
                }
                // Cold keys too, so that writes dirty the pool and checkpoints come.
                batch.put(key(n * 7 % 10_000), n.to_le_bytes());
                db.write(batch).unwrap();
            }
            done.store(true, Ordering::Release);
        });
        for r in 0..4u64 {
            let (db, hot, done) = (&db, &hot, &done);
            s.spawn(move || {
                let mut seen = vec![0u64; hot.len()];
                let mut rng = r + 1;
                let mut rounds = 0u64;
                while !done.load(Ordering::Acquire) || rounds < 50 {
                    rounds += 1;
                    rng = rng
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let i = (rng >> 33) as usize % hot.len();
                    let v =
                        u64::from_le_bytes(db.get(&hot[i]).unwrap().unwrap().try_into().unwrap());
                    assert!(
                        v >= seen[i],
                        "reader {r}: key {i} went from {} to {v}",
                        seen[i]
                    );
                    seen[i] = v;
                    // A cold read, to make the readers load and evict.
                    let c = (rng >> 20) % 10_000;
                    assert!(db.get(key(c)).unwrap().is_some(), "reader {r}: key {c}");
                    if rounds.is_multiple_of(8) {
                        let page: Vec<(Vec<u8>, Vec<u8>)> = db
                            .range::<&[u8], _>((
                                Bound::Included(b"hot".as_slice()),
                                Bound::Excluded(b"hou".as_slice()),
                            ))
                            .unwrap()
                            .map(|e| e.unwrap())
                            .collect();
                        assert_eq!(page.len(), hot.len(), "reader {r}");
                        assert!(
                            page.windows(2).all(|w| w[0].1 == w[1].1),
                            "reader {r}: a page mixes batches"
                        );
                    }
                }
            });
        }
    });
    for k in &hot {
        assert_eq!(db.get(k).unwrap(), Some(batches.to_le_bytes().to_vec()));
    }
    let m = db.metrics();
    assert!(
        m.engine.cache.resident_bytes <= m.engine.cache.budget_bytes,
        "{:?}",
        m.engine.cache
    );
    assert!(
        m.engine.checkpoints > 0,
        "checkpoints came during the reads"
    );
    db.close().unwrap();
}

/// A range's entries.
type Page = Vec<(Vec<u8>, Vec<u8>)>;

fn sda() -> VersionedEngineOptions {
    VersionedEngineOptions::Sda(SdaConfig {
        buffer_bytes: 16 << 10,
        level0_entries: 64,
        block_bytes: 1 << 10,
        cache_bytes: 16 << 10,
        ..SdaConfig::default()
    })
}

fn cow() -> VersionedEngineOptions {
    VersionedEngineOptions::Cow(CowConfig {
        leaf_entries: 64,
        fanout: 16,
        cache_bytes: 64 << 10,
    })
}

fn versioned_opts(engine: VersionedEngineOptions) -> VersionedOptions {
    VersionedOptions {
        engine,
        durability: Durability::None,
        ..VersionedOptions::default()
    }
}

/// As `two_readers_read_the_device_at_once`, for a versioned dictionary: `keys` keys at the
/// root version, closed and reopened, then two readers of keys far apart. (The copy-on-write
/// B-tree checks its counts after every change in debug builds: it gets fewer keys.)
fn two_versioned_readers_read_the_device_at_once(
    engine: fn() -> VersionedEngineOptions,
    keys: u64,
) {
    let env = MeetingEnv::new(meeting);
    let db = VersionedDb::open_in(&env, versioned_opts(engine())).unwrap();
    for i in 0..keys {
        db.put_at(ROOT_VERSION, key(i), i.to_le_bytes()).unwrap();
    }
    db.close().unwrap();
    let db = VersionedDb::open_in(&env, versioned_opts(engine())).unwrap();
    let dev = env.data();
    two_at_once(&dev.state, "a reader", |t| {
        let k = (3 + 11 * t) * keys / 20;
        assert_eq!(
            db.get_at(ROOT_VERSION, key(k)).unwrap(),
            Some(k.to_le_bytes().to_vec())
        );
    });
    two_at_once(&dev.state, "a scan", |t| {
        let lo = (6 + 11 * t) * keys / 20;
        let got: Vec<_> = db
            .range_at(ROOT_VERSION, key(lo)..key(lo + 100))
            .unwrap()
            .map(|e| e.unwrap().0)
            .collect();
        assert_eq!(got, (lo..lo + 100).map(key).collect::<Vec<_>>());
    });
}

#[test]
fn two_readers_of_the_sda_read_the_device_at_once() {
    two_versioned_readers_read_the_device_at_once(sda, 20_000);
}

#[test]
fn two_readers_of_the_cow_btree_read_the_device_at_once() {
    two_versioned_readers_read_the_device_at_once(cow, 3_000);
}

#[test]
fn sda_readers_beside_a_writer_see_whole_changes_in_order() {
    versioned_readers_beside_a_writer_see_whole_changes_in_order(sda, 5_000);
}

#[test]
fn cow_readers_beside_a_writer_see_whole_changes_in_order() {
    versioned_readers_beside_a_writer_see_whole_changes_in_order(cow, 1_000);
}

/// Four readers beside a writer that, round n, sets 16 hot keys to n at the current leaf
/// version, in odd rounds one by one in key order and in even rounds as one batch
/// (`write_at`), and every 100 rounds clones that leaf and goes on at the clone (the leaf it
/// leaves is frozen). A reader reads at the newest leaf the writer published:
/// - a key's value never goes down;
/// - a range page over the hot keys is one moment's: values n down to n - 1, falling once
///   at most, in key order (a change is applied whole under the lock), and never in the
///   middle of a batch (a page that falls from n has n odd);
/// - a frozen version reads the same at the end as when the reader first saw it frozen;
/// - after the last round every key has its value, and the pool keeps to its budget.
///
/// `cold` keys around the hot ones make reads miss and the pool evict.
fn versioned_readers_beside_a_writer_see_whole_changes_in_order(
    engine: fn() -> VersionedEngineOptions,
    cold: u64,
) {
    let env = SimEnv::new();
    let db = VersionedDb::open_in(
        &env,
        VersionedOptions {
            checkpoint_wal_bytes: 256 << 10,
            ..versioned_opts(engine())
        },
    )
    .unwrap();
    for i in 0..cold {
        db.put_at(ROOT_VERSION, key(i), [7u8; 40]).unwrap();
    }
    let hot: Vec<Vec<u8>> = (0..16u64)
        .map(|i| format!("hot{i:02}").into_bytes())
        .collect();
    for k in &hot {
        db.put_at(ROOT_VERSION, k, 0u64.to_le_bytes()).unwrap();
    }
    let rounds = 600u64;
    let leaf = AtomicU64::new(ROOT_VERSION);
    let done = AtomicBool::new(false);
    let value = |got: Option<Vec<u8>>| u64::from_le_bytes(got.unwrap().try_into().unwrap());
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut at: Version = ROOT_VERSION;
            for n in 1..=rounds {
                if n % 100 == 0 {
                    at = db.clone_version(at).unwrap();
                    leaf.store(at, Ordering::Release);
                }
                if n % 2 == 1 {
                    for k in &hot {
                        db.put_at(at, k, n.to_le_bytes()).unwrap();
                    }
                } else {
                    let mut batch = WriteBatch::new();
                    for k in &hot {
                        batch.put(k, n.to_le_bytes());
                    }
                    db.write_at(at, batch).unwrap();
                }
                db.put_at(at, key(n * 7 % cold), n.to_le_bytes()).unwrap();
            }
            done.store(true, Ordering::Release);
        });
        for r in 0..4u64 {
            let (db, hot, done, leaf) = (&db, &hot, &done, &leaf);
            s.spawn(move || {
                let mut seen = vec![0u64; hot.len()];
                let mut frozen: Option<(Version, Page)> = None;
                let mut last_leaf = ROOT_VERSION;
                let mut rng = r + 1;
                let mut reads = 0u64;
                let page = |v: Version| -> Page {
                    db.range_at(v, b"hot".to_vec()..b"hou".to_vec())
                        .unwrap()
                        .map(|e| e.unwrap())
                        .collect()
                };
                // Until the writer is done and this reader has seen a leaf frozen (after a
                // fast writer, at least its last clone).
                while !done.load(Ordering::Acquire) || reads < 50 || frozen.is_none() {
                    reads += 1;
                    let v = leaf.load(Ordering::Acquire);
                    if v != last_leaf && frozen.is_none() {
                        frozen = Some((last_leaf, page(last_leaf)));
                    }
                    last_leaf = v;
                    rng = rng
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let i = (rng >> 33) as usize % hot.len();
                    let got = value(db.get_at(v, &hot[i]).unwrap());
                    assert!(
                        got >= seen[i],
                        "reader {r}: key {i} went from {} to {got}",
                        seen[i]
                    );
                    seen[i] = got;
                    let c = (rng >> 20) % cold;
                    assert!(
                        db.get_at(v, key(c)).unwrap().is_some(),
                        "reader {r}: key {c}"
                    );
                    if reads.is_multiple_of(8) {
                        let vals: Vec<u64> =
                            page(v).into_iter().map(|(_, x)| value(Some(x))).collect();
                        assert_eq!(vals.len(), hot.len(), "reader {r}");
                        let (first, last) = (vals[0], vals[hot.len() - 1]);
                        assert!(
                            vals.windows(2).all(|w| w[0] == w[1] || w[0] == w[1] + 1)
                                && first <= last + 1
                                && (first == last || first % 2 == 1),
                            "reader {r}: a page of many moments: {vals:?}"
                        );
                    }
                }
                let (v, then) = frozen.expect("the loop ends once one is frozen");
                assert_eq!(page(v), then, "reader {r}: frozen version {v} changed");
            });
        }
    });
    let v = leaf.load(Ordering::Acquire);
    for k in &hot {
        assert_eq!(
            db.get_at(v, k).unwrap(),
            Some(rounds.to_le_bytes().to_vec())
        );
    }
    let m = db.metrics().unwrap();
    assert!(
        m.engine.cache.resident_bytes <= m.engine.cache.budget_bytes,
        "{:?}",
        m.engine.cache
    );
    db.close().unwrap();
}

/// The state of a data device whose next write, once armed, waits for the test's word and
/// then fails (`held_write`).
#[derive(Debug)]
struct Held {
    armed: AtomicBool,
    /// None until the armed write arrives; then false while it is held, true to let it fail.
    held: Mutex<Option<bool>>,
    changed: Condvar,
}

fn held_write(h: &Held, data: &[u8], offset: u64) -> Result<()> {
    if !h.armed.swap(false, Ordering::SeqCst) {
        return Ok(());
    }
    let mut held = h.held.lock().unwrap();
    *held = Some(false);
    h.changed.notify_all();
    while *held != Some(true) {
        held = h.changed.wait(held).unwrap();
    }
    Err(strata::Error::Io {
        context: format!("write {} bytes at {offset}", data.len()),
        source: std::io::Error::other("injected IO error"),
    })
}

/// A batch fails on a data-file write made while it holds the state (its apply and settle),
/// and poisons the database. A reader and a synced writer queued on the state meanwhile got
/// past the poison check before the failure: they must still get the poison, not the part of
/// the batch memory holds (the reader) or a log record numbered after the one taken back,
/// which replay would never reach (the writer, acknowledged and then lost).
#[test]
fn a_reader_and_a_writer_queued_behind_a_failing_batch_get_the_poison() {
    let env = WrapEnv::new(|inner| Hooked {
        inner,
        state: Held {
            armed: AtomicBool::new(false),
            held: Mutex::new(None),
            changed: Condvar::new(),
        },
        on_read: pass,
        on_write: held_write,
    });
    let opts = Options::default()
        .durability(Durability::Sync)
        .cache_bytes(256 << 10)
        .background_merges(false);
    let db = Db::open_in(&env, opts).unwrap();
    db.put("a", "old").unwrap();
    let dev = env.data();
    dev.state.armed.store(true, Ordering::SeqCst);
    std::thread::scope(|s| {
        let batch = s.spawn(|| {
            // More than the pool holds: the settle writes nodes back.
            let mut b = WriteBatch::new();
            b.put("a", "new");
            for i in 0..4000 {
                b.put(key(i), [7u8; 200]);
            }
            db.write(b)
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        while *dev.state.held.lock().unwrap() != Some(false) {
            assert!(
                !batch.is_finished(),
                "the batch wrote nothing to the data file"
            );
            assert!(Instant::now() < deadline, "no write came");
            std::thread::sleep(Duration::from_millis(1));
        }
        let reader = s.spawn(|| db.get("a"));
        let writer = s.spawn(|| db.put("b", "x"));
        // Both reach the state's lock and wait there.
        std::thread::sleep(Duration::from_millis(100));
        *dev.state.held.lock().unwrap() = Some(true);
        dev.state.changed.notify_all();
        assert!(batch.join().unwrap().is_err());
        let read = reader.join().unwrap();
        assert!(
            matches!(read, Err(strata::Error::Poisoned { .. })),
            "the reader got {read:?}"
        );
        let wrote = writer.join().unwrap();
        assert!(
            matches!(wrote, Err(strata::Error::Poisoned { .. })),
            "the writer got {wrote:?}"
        );
    });
    drop(db);
    let db = Db::open_in(&env, Options::default()).unwrap();
    assert_eq!(db.get("a").unwrap().as_deref(), Some(&b"old"[..]));
    assert_eq!(db.get("b").unwrap(), None);
}
