//! Minimal reproductions of bugs the model, corruption and bad-input suites found. Each test
//! says what it catches; all of them failed before their fix and must keep passing.

mod common;

use common::*;
use strata::storage::SimEnv;
use strata::{Db, Durability, Error, Options};

fn none() -> Options {
    Options::default().durability(Durability::None)
}

/// Catches: `Db::sync` returning without syncing after a reopen that replayed the log.
///
/// `Wal::open` (wal.rs) starts its sync state at `synced = last`, the last sequence number it
/// replayed, as if every replayed record were durable. After a process crash the replayed
/// records may still be only in the page cache (they were written with `Durability::None`),
/// so the next `Db::sync` sees `synced >= seq`, returns Ok at once, and a power loss then
/// loses writes the application was told are durable. Found by `model::*::prop_sim_none`
/// (shrunk to: put, process crash, sync, power loss).
#[test]
fn sync_after_process_crash_makes_replayed_writes_durable() {
    let env = SimEnv::new();
    let db = Db::open_in(&env, none()).unwrap();
    db.put(b"k", b"v").unwrap();
    drop(db); // process crash: the record is written but not synced
    let db = Db::open_in(&env, none()).unwrap();
    assert_eq!(
        db.get(b"k").unwrap().as_deref(),
        Some(&b"v"[..]),
        "replayed"
    );
    db.sync().unwrap(); // "make every write so far durable"
    drop(db);
    env.crash(); // power loss
    let db = Db::open_in(&env, none()).unwrap();
    assert_eq!(
        db.get(b"k").unwrap().as_deref(),
        Some(&b"v"[..]),
        "a write made durable by Db::sync was lost"
    );
}

/// Catches: a power loss with `Durability::None` that leaves the database unopenable.
///
/// Unsynced log records can reach the disk in any order (the page cache writes back pages, not
/// records). Here the last record lands (a torn write whose prefix holds the whole record) while
/// the unsynced records before it are lost, so the log reads: a gap of zeros, then a valid
/// record with a later sequence number. `Wal::open` takes that for "a damaged log record
/// followed by valid ones" and fails the open with `Corruption`, although only unsynced records
/// are missing and the rule for `Durability::None` is "some prefix survives". Found by
/// `model::*::torn_writes_none`.
#[test]
fn power_loss_with_unsynced_log_gap_reopens() {
    let env = SimEnv::new();
    let db = Db::open_in(&env, none()).unwrap();
    db.put(b"a", b"1").unwrap();
    db.put(b"b", b"2").unwrap();
    env.disk().tear_write_after(1, 1);
    assert!(db.put(b"c", b"3").is_err(), "the torn write fails");
    drop(db);
    env.crash();
    let db = Db::open_in(&env, none()).expect("a power loss must not make the database unopenable");
    db.check().unwrap();
    let got: Vec<Vec<u8>> = dump(&db).into_keys().collect();
    let prefixes: [&[&[u8]]; 4] = [&[], &[b"a"], &[b"a", b"b"], &[b"a", b"b", b"c"]];
    assert!(
        prefixes
            .iter()
            .any(|p| p.iter().map(|k| k.to_vec()).collect::<Vec<_>>() == got),
        "recovered {got:?}, which is no prefix of the writes"
    );
}

/// Catches: a power loss while a database is being created leaves a data file without a
/// superblock, and every later `Db::open` fails with `NotADatabase`, even with
/// `create_if_missing`. The creating open never succeeded, so there is no data to protect;
/// the directory should open as a new database (e.g. treat a data file whose superblock slots
/// are both blank as unfinished creation, or create it under a temporary name and rename).
#[test]
fn power_loss_during_create_leaves_an_openable_database() {
    for sectors in [0usize, 1] {
        let env = SimEnv::new();
        env.disk().tear_write_after(1, sectors);
        assert!(
            Db::open_in(&env, Options::default()).is_err(),
            "creation torn"
        );
        env.crash();
        let db = Db::open_in(&env, Options::default())
            .unwrap_or_else(|e| panic!("sectors {sectors}: reopen after a torn creation: {e}"));
        db.check().unwrap();
        assert!(dump(&db).is_empty());
    }
}

/// Catches: one corrupt block makes the whole database unopenable after a write touches it.
///
/// `Db::write_with` appends the batch to the log before applying it. When applying it fails
/// because the leaf it lands in is corrupt, the record stays in the log; every later open
/// replays it, hits the same block, and fails. Before that write the database opened fine and
/// every other key was readable. A batch that failed to apply was never acknowledged, so it
/// should not stay in the log (cut the log back to the record's start), or replay should not
/// make one damaged block fatal for the whole database.
#[test]
fn write_into_corrupt_leaf_keeps_database_openable() {
    let place = Place::sim();
    let opts = Options::default().btree(4096).cache_bytes(64 << 10);
    let db = place.open(opts.clone()).unwrap();
    for i in 0..600u32 {
        db.put(format!("key{i:05}"), value(i as u64, 100)).unwrap();
    }
    db.close().unwrap();
    let data = place.read(DATA).unwrap();
    let leaf = nodes(&data)
        .into_iter()
        .find(|(_, k)| *k == KIND_LEAF)
        .unwrap()
        .0;
    let inside = leaf_keys(&data, leaf.offset);
    place.corrupt(DATA, leaf.offset + 30, 0x40);

    let db = place.open(opts.clone()).unwrap();
    assert!(db.get(&inside[0]).unwrap_err().is_corruption());
    assert!(db.put(&inside[0], b"new").unwrap_err().is_corruption());
    drop(db);
    let db = place
        .open(opts)
        .expect("the database opened before the failed write; it must still open");
    assert_eq!(
        db.get(b"key00599").unwrap(),
        Some(value(599, 100)),
        "undamaged keys are still readable"
    );
    assert!(db.get(&inside[0]).unwrap_err().is_corruption());
}

/// Catches: `Corruption` for a log record that passes its checksum but does not decode names
/// the bare "strata.wal" rather than the log's path, unlike every other corruption error.
/// `Db::open_in` (db.rs) builds it with `Error::corruption(WAL_FILE, ..)`; it should use the
/// log device's name.
#[test]
fn undecodable_log_record_names_the_log_path() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    db.put(b"k", b"v").unwrap();
    drop(db);
    let wal_path = dir.path().join(WAL);
    let mut wal = std::fs::read(&wal_path).unwrap();
    let at = wal.len() as u64;
    // A record with a good checksum whose batch has an operation tag that does not exist.
    let payload = [1, 0, 0, 0, 9, 1, 0, 0, 0, b'k'];
    let mut rec = vec![0u8; 8];
    rec.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    rec.extend_from_slice(&[0, 0, 0, 0]); // a write batch
    rec.extend_from_slice(&2u64.to_le_bytes()); // sequence
    rec.extend_from_slice(&1u64.to_le_bytes()); // durable watermark
    rec.extend_from_slice(&payload);
    let sum = xxhash_rust::xxh3::xxh3_64(&rec[8..]);
    rec[..8].copy_from_slice(&sum.to_le_bytes());
    wal.extend_from_slice(&rec);
    std::fs::write(&wal_path, &wal).unwrap();
    match Db::open(dir.path(), Options::default()) {
        Err(Error::Corruption { file, offset, .. }) => {
            assert_eq!(offset, at);
            assert_eq!(std::path::Path::new(&file), wal_path);
        }
        other => panic!("{:?}", other.err()),
    }
}

/// Catches: a superblock with a valid checksum whose table extent overflows `offset + len`
/// panics in `Extent::end` (add overflow, called from `pager::read_table`) instead of
/// reporting corruption; built without overflow checks the sum wraps, passes the bounds check,
/// and the table read then asks for an impossible allocation. Rule 4: never a panic. Use
/// `checked_add` for extent ends in `read_table` (and for the table's entries and
/// `verify_extents`). Only a forged or buggy superblock gets here: a flipped bit fails the
/// checksum first.
#[test]
fn forged_superblock_with_overflowing_table_extent_is_corruption() {
    let place = Place::sim();
    let db = place.open(Options::default()).unwrap();
    db.put(b"k", b"v").unwrap();
    db.close().unwrap();
    let data = place.read(DATA).unwrap();
    let sb = newest_superblock(&data);
    let at = sb.slot_offset as usize;
    let mut b = data[at..at + SB_SIZE as usize].to_vec();
    b[56..64].copy_from_slice(&(u64::MAX - 4095).to_le_bytes());
    reseal_superblock(&mut b);
    place.overwrite(DATA, sb.slot_offset, &b);
    match place.open(Options::default()) {
        Err(Error::Corruption { offset, .. }) => assert_eq!(offset, sb.table_offset),
        other => panic!("{:?}", other.err()),
    }
}

/// Catches: `SimEnv::lock` takes no lock, so two `Db`s can open one simulated disk at once and
/// overwrite each other's files, where real files give `Error::Locked` (the `Env::lock`
/// contract). Tests that forget to drop a `Db` before reopening pass silently on the simulator.
#[test]
fn sim_env_refuses_a_second_open() {
    let env = SimEnv::new();
    let first = Db::open_in(&env, Options::default()).unwrap();
    let second = Db::open_in(&env, Options::default());
    assert!(
        matches!(second, Err(Error::Locked { .. })),
        "{:?}",
        second.is_ok()
    );
    drop(first);
}

/// Catches: an internal node left with more children than its fanout after a batch.
///
/// `BeTree::apply_batch` merges a whole batch into the root's segments before settling, so one
/// flush can carry many times a segment's share into a child, the leaves below split several
/// ways, and their parent gains more than twice its fanout in children. `split` cut internal
/// nodes in two only, so both halves kept more than `fanout` children. Found by
/// `model::betree_4k_tiny_cache::*` ("node 11: 5 children, fanout 4" from `check`); fixed by
/// splitting an internal node into as many pieces as its fanout needs.
#[test]
fn a_big_batch_into_a_small_fanout_tree_keeps_every_node_within_its_fanout() {
    let env = SimEnv::new();
    let db = Db::open_in(&env, none().betree(4 << 10, 4, 1 << 10)).unwrap();
    let key = |i: u64| format!("{:08x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32);
    // Grow the root past a leaf, then land batches bigger than a node on it.
    for round in 0..20u64 {
        let mut b = strata::WriteBatch::new();
        for i in round * 200..(round + 1) * 200 {
            b.put(key(i), [i as u8; 40]);
        }
        db.write(b).unwrap();
        db.check().unwrap();
    }
    for i in 0..4000u64 {
        assert_eq!(db.get(key(i)).unwrap().as_deref(), Some(&[i as u8; 40][..]));
    }
}
