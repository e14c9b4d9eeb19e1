//! Damaged files: a flipped byte in a node, a blob, the translation table, a superblock or a log
//! record, and a torn superblock write. Each must surface as `Error::Corruption` naming the file
//! and the offset of the damaged block or record (or, for the superblock, as a fall-back to the
//! older checkpoint that loses nothing the log still holds) — never a panic, never a wrong answer.
//! Every scenario runs on a simulated disk and on real files (bytes flipped with
//! `SimDevice::corrupt_byte` or `std::fs`), except the real torn write, which only the simulator
//! can make; its hand-built equivalent runs on both.

mod common;

use std::collections::BTreeMap;

use common::*;
use strata::storage::Device;
use strata::{Db, Durability, Error, Options};
use xxhash_rust::xxh3::xxh3_64;

type Map = BTreeMap<Vec<u8>, Vec<u8>>;
type Edit = Box<dyn Fn(&mut [u8])>;

fn opts() -> Options {
    // Small nodes and the smallest cache, so that reads reach the disk.
    Options::default()
        .btree(4096)
        .cache_bytes(64 << 10)
        .durability(Durability::Sync)
        .checkpoint_wal_bytes(1 << 30)
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

/// A closed database of 600 keys (every 50th value out of line), and its contents.
fn populated(place: &Place) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let db = place.open(opts()).unwrap();
    let mut oracle = BTreeMap::new();
    for i in 0..600u32 {
        let len = if i % 50 == 7 { 5_000 } else { 100 };
        let v = value(i as u64, len);
        db.put(key(i), &v).unwrap();
        oracle.insert(key(i), v);
    }
    db.close().unwrap();
    oracle
}

#[track_caller]
fn assert_corruption_at(place: &Place, e: &Error, name: &str, offset: u64) {
    match e {
        Error::Corruption {
            file, offset: at, ..
        } => {
            assert_eq!(
                std::path::Path::new(file),
                place.file_label(name),
                "file named in {e}"
            );
            assert_eq!(*at, offset, "offset named in {e}");
        }
        other => panic!("expected corruption in {name} at {offset}, got {other:?}"),
    }
}

/// Scan the whole database both ways: every item before the damage is right, the damage is
/// reported at `offset`, and the iterator then ends.
fn scan_stops_at(
    place: &Place,
    db: &Db,
    oracle: &BTreeMap<Vec<u8>, Vec<u8>>,
    offset: u64,
) -> (usize, usize) {
    let mut counts = (0, 0);
    for reverse in [false, true] {
        let mut it = db.iter().unwrap();
        let mut want: Box<dyn Iterator<Item = (&Vec<u8>, &Vec<u8>)>> = if reverse {
            Box::new(oracle.iter().rev())
        } else {
            Box::new(oracle.iter())
        };
        let mut good = 0;
        loop {
            let got = if reverse { it.next_back() } else { it.next() };
            match got {
                Some(Ok((k, v))) => {
                    let (wk, wv) = want.next().expect("no more items than stored");
                    assert_eq!((&k, &v), (wk, wv), "item {good} of the scan");
                    good += 1;
                }
                Some(Err(e)) => {
                    assert_corruption_at(place, &e, DATA, offset);
                    assert!(it.next().is_none() && it.next_back().is_none());
                    break;
                }
                None => panic!("scan ended without reporting the damaged block"),
            }
        }
        if reverse {
            counts.1 = good;
        } else {
            counts.0 = good;
        }
    }
    counts
}

/// Bytes inside a block to damage: checksum, owner id, payload length, kind, and payload.
fn block_positions(payload_len: usize) -> Vec<u64> {
    let mut v = vec![3, 9, 17, 20];
    for p in [0, payload_len / 2, payload_len - 1] {
        v.push((BLOCK_HEADER + p) as u64);
    }
    v
}

fn damaged_leaf(place: Place) {
    let oracle = populated(&place);
    let data = place.read(DATA).unwrap();
    assert!(data.len() as u64 > DATA_START);
    let leaves: Vec<Entry> = nodes(&data)
        .into_iter()
        .filter(|(_, k)| *k == KIND_LEAF)
        .map(|(e, _)| e)
        .collect();
    assert!(leaves.len() > 5, "{} leaves", leaves.len());
    // A leaf from the middle of the key space.
    let mut by_first: Vec<(Vec<u8>, Entry)> = leaves
        .iter()
        .map(|e| (leaf_keys(&data, e.offset)[0].clone(), *e))
        .collect();
    by_first.sort();
    let leaf = by_first[by_first.len() / 2].1;
    let inside = leaf_keys(&data, leaf.offset);
    let outside: Vec<&Vec<u8>> = oracle.keys().filter(|k| !inside.contains(k)).collect();
    let payload_len = block_at(&data, leaf.offset).payload.len();

    for pos in block_positions(payload_len) {
        place.corrupt(DATA, leaf.offset + pos, 0x24);
        let db = place
            .open(opts())
            .expect("open reads only the superblock and table");
        let e = db.check().unwrap_err();
        assert_corruption_at(&place, &e, DATA, leaf.offset);
        for k in [&inside[0], inside.last().unwrap()] {
            let e = db.get(k).unwrap_err();
            assert_corruption_at(&place, &e, DATA, leaf.offset);
        }
        for k in outside.iter().step_by(37) {
            assert_eq!(
                db.get(k).unwrap().as_ref(),
                oracle.get(*k),
                "other leaves still read"
            );
        }
        // Iterators fetch pages of entries, and a page that meets the damage is not delivered:
        // the scans stop at or before the damaged leaf, never past it.
        let (fwd, rev) = scan_stops_at(&place, &db, &oracle, leaf.offset);
        let before = oracle.keys().take_while(|k| *k < &inside[0]).count();
        assert!(fwd <= before, "forward scan stops at the damaged leaf");
        assert!(rev <= oracle.len() - before - inside.len());
        drop(db);
        place.corrupt(DATA, leaf.offset + pos, 0x24);
    }
    // Repaired, everything is back.
    let db = place.open(opts()).unwrap();
    db.check().unwrap();
    assert_eq!(dump(&db), oracle);
}

#[test]
fn damaged_leaf_sim() {
    damaged_leaf(Place::sim());
}

#[test]
fn damaged_leaf_file() {
    damaged_leaf(Place::dir());
}

fn damaged_internal_node(place: Place) {
    let oracle = populated(&place);
    let data = place.read(DATA).unwrap();
    let internal: Vec<Entry> = nodes(&data)
        .into_iter()
        .filter(|(_, k)| *k == KIND_INTERNAL)
        .map(|(e, _)| e)
        .collect();
    assert_eq!(
        internal.len(),
        1,
        "600 keys in 4 KiB nodes: a root over the leaves"
    );
    let root = internal[0];
    let payload_len = block_at(&data, root.offset).payload.len();
    for pos in block_positions(payload_len) {
        place.corrupt(DATA, root.offset + pos, 0x81);
        let db = place.open(opts()).unwrap();
        assert_corruption_at(&place, &db.check().unwrap_err(), DATA, root.offset);
        for k in oracle.keys().step_by(97) {
            assert_corruption_at(&place, &db.get(k).unwrap_err(), DATA, root.offset);
        }
        assert_eq!(scan_stops_at(&place, &db, &oracle, root.offset), (0, 0));
        drop(db);
        place.corrupt(DATA, root.offset + pos, 0x81);
    }
    place.open(opts()).unwrap().check().unwrap();
}

#[test]
fn damaged_internal_node_sim() {
    damaged_internal_node(Place::sim());
}

#[test]
fn damaged_internal_node_file() {
    damaged_internal_node(Place::dir());
}

fn damaged_blob(place: Place) {
    let oracle = populated(&place);
    let data = place.read(DATA).unwrap();
    let table = table(&data);
    // The blob of some key, found through its leaf.
    let (owner_key, blob_id) = nodes(&data)
        .into_iter()
        .filter(|(_, k)| *k == KIND_LEAF)
        .flat_map(|(e, _)| leaf_entries(&data, e.offset))
        .filter_map(|(k, b)| b.map(|b| (k, b)))
        .nth(3)
        .expect("values of 5,000 bytes are out of line in 4 KiB nodes");
    let blob = *table.iter().find(|e| e.id == blob_id).unwrap();
    assert_eq!(block_at(&data, blob.offset).kind, KIND_BLOB);
    for pos in block_positions(5_000) {
        place.corrupt(DATA, blob.offset + pos, 0x10);
        let db = place.open(opts()).unwrap();
        assert_corruption_at(&place, &db.check().unwrap_err(), DATA, blob.offset);
        assert_corruption_at(&place, &db.get(&owner_key).unwrap_err(), DATA, blob.offset);
        let neighbour = oracle.range(owner_key.clone()..).nth(1).unwrap();
        assert_eq!(db.get(neighbour.0).unwrap().as_ref(), Some(neighbour.1));
        let (fwd, rev) = scan_stops_at(&place, &db, &oracle, blob.offset);
        assert!(fwd <= oracle.range(..owner_key.clone()).count());
        assert!(rev < oracle.range(owner_key.clone()..).count());
        drop(db);
        place.corrupt(DATA, blob.offset + pos, 0x10);
    }
    place.open(opts()).unwrap().check().unwrap();
}

#[test]
fn damaged_blob_sim() {
    damaged_blob(Place::sim());
}

#[test]
fn damaged_blob_file() {
    damaged_blob(Place::dir());
}

fn damaged_table_or_truncated_file(place: Place) {
    populated(&place);
    let data = place.read(DATA).unwrap();
    let sb = newest_superblock(&data);
    for pos in [3, 9, 30, 200] {
        place.corrupt(DATA, sb.table_offset + pos, 0x02);
        let e = place
            .open(opts())
            .err()
            .expect("a damaged table fails the open");
        assert_corruption_at(&place, &e, DATA, sb.table_offset);
        place.corrupt(DATA, sb.table_offset + pos, 0x02);
    }
    assert_eq!(
        place.read(DATA).unwrap(),
        data,
        "failed opens changed nothing"
    );
    // Cut the file short of the extents the checkpoint references.
    let cut = DATA_START + 4096;
    match &place {
        Place::Sim(env) => env.files().get(DATA).unwrap().set_len(cut).unwrap(),
        Place::Dir(d) => std::fs::OpenOptions::new()
            .write(true)
            .open(d.path().join(DATA))
            .unwrap()
            .set_len(cut)
            .unwrap(),
    }
    let e = place
        .open(opts())
        .err()
        .expect("a truncated file fails the open");
    match &e {
        Error::Corruption { file, .. } => {
            assert_eq!(std::path::Path::new(file), place.file_label(DATA), "{e}")
        }
        other => panic!("expected corruption, got {other:?}"),
    }
}

#[test]
fn damaged_table_or_truncated_file_sim() {
    damaged_table_or_truncated_file(Place::sim());
}

#[test]
fn damaged_table_or_truncated_file_file() {
    damaged_table_or_truncated_file(Place::dir());
}

// ------------------------------------------------------------------------------------------
// Superblocks

/// Keys 0..300 checkpointed, then keys 300..400 written (acknowledged with Sync) after it.
fn two_phases(place: &Place) -> (Db, Map, Map) {
    let db = place.open(opts()).unwrap();
    let mut first = BTreeMap::new();
    for i in 0..300u32 {
        let v = value(i as u64, 120);
        db.put(key(i), &v).unwrap();
        first.insert(key(i), v);
    }
    db.checkpoint().unwrap();
    let mut all = first.clone();
    for i in 300..400u32 {
        let v = value(i as u64 + 1_000, 120);
        db.put(key(i), &v).unwrap();
        all.insert(key(i), v);
    }
    // Overwrite and delete some of the checkpointed keys too.
    for i in (0..300u32).step_by(10) {
        db.delete(key(i)).unwrap();
        all.remove(&key(i));
    }
    (db, first, all)
}

/// A checkpoint whose superblock write is torn by a power cut, on a simulated disk. The slot
/// then holds a prefix of the new superblock over the old one; whichever superblock open picks,
/// every acknowledged write must be there, because the log is emptied only after the new
/// superblock is durable.
#[test]
fn torn_superblock_write_loses_nothing_sim() {
    for sectors in [0usize, 1, 8] {
        for damage_after in [false, true] {
            let mut landed = false;
            for n in 1..500u64 {
                let place = Place::sim();
                let (db, _, all) = two_phases(&place);
                let before = newest_superblock(&place.read(DATA).unwrap());
                place.env().disk().tear_write_after(n, sectors);
                let Err(e) = db.checkpoint() else {
                    break; // n is past the last write of the checkpoint
                };
                let Error::Io { context, .. } = &e else {
                    panic!("torn write reports an IO error, got {e:?}")
                };
                drop(db);
                place.env().crash();
                let slot = (before.seq + 1) % 2;
                if !context.contains(&format!("at {} of {DATA}", slot * SB_SIZE)) {
                    // The tear hit a node or the table; the checkpoint never committed.
                    let db = place.open(opts()).unwrap();
                    assert_eq!(dump(&db), all, "tear at write {n} ({context})");
                    continue;
                }
                landed = true;
                if damage_after {
                    // A device without atomic sectors: the new superblock's checksummed header
                    // itself is torn.
                    place.corrupt(DATA, slot * SB_SIZE + 30, 0x01);
                }
                let data = place.read(DATA).unwrap();
                let used = newest_superblock(&data);
                let db = place.open(opts()).unwrap();
                db.check().unwrap();
                assert_eq!(dump(&db), all, "sectors {sectors}, damaged {damage_after}");
                assert_eq!(db.metrics().engine.checkpoints, used.seq);
                if sectors == 0 || damage_after {
                    assert_eq!(used.seq, before.seq, "fell back to the older checkpoint");
                    assert_eq!(used.slot_offset, before.slot_offset);
                } else {
                    assert_eq!(
                        used.seq,
                        before.seq + 1,
                        "the sector prefix holds the header"
                    );
                }
                // And it keeps working.
                db.put(b"after", b"x").unwrap();
                db.close().unwrap();
                let db = place.open(opts()).unwrap();
                assert_eq!(db.get(b"after").unwrap().as_deref(), Some(&b"x"[..]));
                break;
            }
            assert!(landed, "found the superblock write of the checkpoint");
        }
    }
}

/// The same situation built by hand, so that it runs on real files too: the newest superblock
/// is damaged while the log still holds every record since the older one (as after a torn
/// superblock write, before the log is emptied). Open falls back and replays: nothing is lost.
fn damaged_newest_superblock_with_log(place: Place) {
    let (db, _, all) = two_phases(&place);
    let wal = place.read(WAL).unwrap();
    assert!(!wal_records(&wal).is_empty());
    db.checkpoint().unwrap();
    drop(db);
    let after = place.read(WAL).unwrap();
    assert_eq!(
        after.len(),
        wal.len(),
        "a checkpoint keeps the log's length"
    );
    assert_eq!(
        wal_records(&after).len(),
        1,
        "a checkpoint starts the log over with its checkpoint marker"
    );
    // Put the log back as it was before the checkpoint, and damage the new superblock.
    match &place {
        Place::Sim(env) => {
            let dev = env.files().get(WAL).unwrap();
            dev.write_at(&wal, 0).unwrap();
            dev.sync().unwrap();
        }
        Place::Dir(d) => std::fs::write(d.path().join(WAL), &wal).unwrap(),
    }
    let data = place.read(DATA).unwrap();
    let newest = newest_superblock(&data);
    place.corrupt(DATA, newest.slot_offset + 30, 0x01);
    let db = place.open(opts()).unwrap();
    db.check().unwrap();
    assert_eq!(
        db.metrics().engine.checkpoints,
        newest.seq - 1,
        "older checkpoint"
    );
    assert_eq!(dump(&db), all);
}

#[test]
fn damaged_newest_superblock_with_log_sim() {
    damaged_newest_superblock_with_log(Place::sim());
}

#[test]
fn damaged_newest_superblock_with_log_file() {
    damaged_newest_superblock_with_log(Place::dir());
}

/// A byte flipped in the newest superblock of a closed database (whose log is empty): open
/// may fall back to the older checkpoint or report corruption, but what it opens must be a
/// consistent checkpoint — exactly the state at the older checkpoint or the newest — and pass
/// `check`.
fn damaged_newest_superblock_closed(place: Place) {
    let (db, first, all) = two_phases(&place);
    db.close().unwrap();
    let data = place.read(DATA).unwrap();
    let newest = newest_superblock(&data);
    let older = superblock(&data, 1 - newest.slot_offset / SB_SIZE).expect("both slots valid");
    assert_eq!(older.seq + 1, newest.seq);
    let mut outcomes = Vec::new();
    for pos in [0u64, 8, 17, 21, 24, 33, 49, 70] {
        place.corrupt(DATA, newest.slot_offset + pos, 0x08);
        match place.open(opts()) {
            Ok(db) => {
                db.check().unwrap();
                let got = dump(&db);
                assert!(
                    got == first || got == all,
                    "byte {pos}: opened a state that is no checkpoint ({} keys)",
                    got.len()
                );
                outcomes.push((pos, if got == all { "newest" } else { "older" }));
            }
            Err(e) => {
                assert!(
                    matches!(
                        e,
                        Error::Corruption { .. } | Error::UnsupportedVersion { .. }
                    ),
                    "byte {pos}: {e:?}"
                );
                outcomes.push((pos, "error"));
            }
        }
        place.corrupt(DATA, newest.slot_offset + pos, 0x08);
    }
    eprintln!("damaged newest superblock ({}): {outcomes:?}", place.kind());
    assert_eq!(dump(&place.open(opts()).unwrap()), all, "repaired");
}

#[test]
fn damaged_newest_superblock_closed_sim() {
    damaged_newest_superblock_closed(Place::sim());
}

#[test]
fn damaged_newest_superblock_closed_file() {
    damaged_newest_superblock_closed(Place::dir());
}

fn both_superblocks_damaged(place: Place) {
    populated(&place);
    let before = place.read(DATA).unwrap();
    for pos in [8u64, 30, 60] {
        place.corrupt(DATA, pos, 0x04);
        place.corrupt(DATA, SB_SIZE + pos, 0x04);
        let e = place.open(opts()).err().expect("no valid superblock");
        match &e {
            Error::Corruption { file, offset, .. } => {
                assert_eq!(std::path::Path::new(file), place.file_label(DATA));
                assert!(*offset == 0 || *offset == SB_SIZE, "{e}");
            }
            other => panic!("byte {pos}: expected corruption, got {other:?}"),
        }
        place.corrupt(DATA, pos, 0x04);
        place.corrupt(DATA, SB_SIZE + pos, 0x04);
    }
    // Damage to both magic numbers: the file no longer looks like a database at all.
    place.corrupt(DATA, 2, 0x04);
    place.corrupt(DATA, SB_SIZE + 2, 0x04);
    let e = place.open(opts()).err().expect("no valid superblock");
    assert!(
        matches!(e, Error::Corruption { .. } | Error::NotADatabase { .. }),
        "{e:?}"
    );
    place.corrupt(DATA, 2, 0x04);
    place.corrupt(DATA, SB_SIZE + 2, 0x04);
    assert_eq!(
        place.read(DATA).unwrap(),
        before,
        "failed opens changed nothing"
    );
    place.open(opts()).unwrap().check().unwrap();
}

#[test]
fn both_superblocks_damaged_sim() {
    both_superblocks_damaged(Place::sim());
}

#[test]
fn both_superblocks_damaged_file() {
    both_superblocks_damaged(Place::dir());
}

// ------------------------------------------------------------------------------------------
// The log

/// Five synced batches left in the log by a process crash (drop without close).
fn logged(place: &Place) -> (Vec<Record>, BTreeMap<Vec<u8>, Vec<u8>>) {
    let db = place.open(opts()).unwrap();
    let mut oracle = BTreeMap::new();
    for i in 0..5u32 {
        let v = value(i as u64, 40 + i as usize);
        db.put(key(i), &v).unwrap();
        oracle.insert(key(i), v);
    }
    drop(db);
    let recs = wal_records(&place.read(WAL).unwrap());
    assert_eq!(recs.len(), 5);
    (recs, oracle)
}

fn damaged_log_record(place: Place) {
    let (recs, oracle) = logged(&place);
    let wal = place.read(WAL).unwrap();
    for target in [0usize, 2] {
        let r = recs[target];
        // Checksum, length, sequence number, payload.
        for pos in [3u64, 9, 13, WAL_HEADER as u64 + 5] {
            place.corrupt(WAL, r.offset + pos, 0x20);
            let e = place
                .open(opts())
                .err()
                .expect("damage before valid records");
            assert_corruption_at(&place, &e, WAL, r.offset);
            place.corrupt(WAL, r.offset + pos, 0x20);
            assert_eq!(
                place.read(WAL).unwrap(),
                wal,
                "the failed open left the log alone"
            );
        }
    }
    // Damage in the last record is indistinguishable from a torn tail: that batch is dropped.
    let last = recs[4];
    place.corrupt(WAL, last.offset + WAL_HEADER as u64 + 1, 0x20);
    let db = place.open(opts()).unwrap();
    db.check().unwrap();
    let mut want = oracle.clone();
    want.remove(&key(4));
    assert_eq!(dump(&db), want);
}

#[test]
fn damaged_log_record_sim() {
    damaged_log_record(Place::sim());
}

#[test]
fn damaged_log_record_file() {
    damaged_log_record(Place::dir());
}

fn write_log(place: &Place, bytes: &[u8]) {
    match place {
        Place::Sim(env) => {
            let dev = env.files().get(WAL).unwrap();
            dev.set_len(0).unwrap();
            dev.write_at(bytes, 0).unwrap();
            dev.sync().unwrap();
        }
        Place::Dir(d) => std::fs::write(d.path().join(WAL), bytes).unwrap(),
    }
}

fn record(seq: u64, payload: &[u8]) -> Vec<u8> {
    let mut r = vec![0u8; 8];
    r.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    r.extend_from_slice(&[0, 0, 0, 0]); // a write batch
    r.extend_from_slice(&seq.to_le_bytes());
    r.extend_from_slice(&(seq - 1).to_le_bytes()); // everything before it was durable
    r.extend_from_slice(payload);
    let sum = xxh3_64(&r[8..]);
    r[..8].copy_from_slice(&sum.to_le_bytes());
    r
}

/// A record whose checksum is right but whose batch does not decode (an operation tag that does
/// not exist, or an operation cut short) is corruption at that record.
fn undecodable_log_record(place: Place) {
    let (recs, _) = logged(&place);
    let wal = place.read(WAL).unwrap();
    let next = recs[4].seq + 1;
    let mut bad_tag = 1u32.to_le_bytes().to_vec();
    bad_tag.extend_from_slice(&[9, 1, 0, 0, 0, b'k']);
    let mut cut_short = 1u32.to_le_bytes().to_vec();
    cut_short.extend_from_slice(&[1, 5, 0, 0, 0, 9, 0, 0, 0, b'a']);
    for payload in [bad_tag, cut_short] {
        let mut forged = wal.clone();
        forged.extend_from_slice(&record(next, &payload));
        write_log(&place, &forged);
        let e = place.open(opts()).err().expect("undecodable batch");
        assert_corruption_at(&place, &e, WAL, wal.len() as u64);
    }
    write_log(&place, &wal);
    place.open(opts()).unwrap().check().unwrap();
}

#[test]
fn undecodable_log_record_sim() {
    undecodable_log_record(Place::sim());
}

#[test]
fn undecodable_log_record_file() {
    undecodable_log_record(Place::dir());
}

/// A log whose first record leaves a gap after the checkpoint: the records between were lost.
fn log_gap_after_checkpoint(place: Place) {
    let (recs, _) = logged(&place);
    let wal = place.read(WAL).unwrap();
    let mut payload = 1u32.to_le_bytes().to_vec();
    payload.extend_from_slice(&[2, 1, 0, 0, 0, b'k']);
    write_log(&place, &record(recs[4].seq + 6, &payload));
    let e = place.open(opts()).err().expect("gap after the checkpoint");
    assert_corruption_at(&place, &e, WAL, 0);
    write_log(&place, &wal);
    place.open(opts()).unwrap().check().unwrap();
}

#[test]
fn log_gap_after_checkpoint_sim() {
    log_gap_after_checkpoint(Place::sim());
}

#[test]
fn log_gap_after_checkpoint_file() {
    log_gap_after_checkpoint(Place::dir());
}

// ------------------------------------------------------------------------------------------
// Superblocks whose checksum is right but whose contents are not (a bug, or a forged file)

fn forge_newest(place: &Place, edit: impl Fn(&mut [u8])) -> Superblock {
    let data = place.read(DATA).unwrap();
    let sb = newest_superblock(&data);
    let at = sb.slot_offset as usize;
    let mut b = data[at..at + SB_SIZE as usize].to_vec();
    edit(&mut b);
    reseal_superblock(&mut b);
    place.overwrite(DATA, sb.slot_offset, &b);
    sb
}

fn restore(place: &Place, original: &[u8]) {
    place.overwrite(DATA, 0, &original[..2 * SB_SIZE as usize]);
}

fn forged_superblock_fields(place: Place) {
    let oracle = populated(&place);
    let original = place.read(DATA).unwrap();
    let some_key = oracle.keys().nth(100).unwrap().clone();
    let is_superblock = |off: u64| off == 0 || off == SB_SIZE;

    // The table where no extent can start.
    forge_newest(&place, |b| {
        b[48..56].copy_from_slice(&5000u64.to_le_bytes())
    });
    let e = place.open(opts()).err().expect("table off the page grid");
    assert_corruption_at(&place, &e, DATA, 5000);
    restore(&place, &original);

    // An engine this build does not know, engine metadata cut short, a node size out of range.
    let edits: [(&str, Edit); 3] = [
        ("engine tag", Box::new(|b: &mut [u8]| b[64] = 0x77)),
        (
            "short metadata",
            Box::new(|b: &mut [u8]| b[16..20].copy_from_slice(&60u32.to_le_bytes())),
        ),
        (
            "node size",
            Box::new(|b: &mut [u8]| b[66..70].copy_from_slice(&3000u32.to_le_bytes())),
        ),
    ];
    for (what, edit) in edits {
        forge_newest(&place, edit);
        match place.open(opts()).err() {
            Some(Error::Corruption { file, offset, .. }) => {
                assert_eq!(
                    std::path::Path::new(&file),
                    place.file_label(DATA),
                    "{what}"
                );
                assert!(is_superblock(offset), "{what}: offset {offset}");
            }
            other => panic!("{what}: {other:?}"),
        }
        restore(&place, &original);
    }

    // A newer version of the engine's metadata.
    forge_newest(&place, |b| b[65] = 9);
    match place.open(opts()).err() {
        Some(Error::UnsupportedVersion { found: 9, .. }) => {}
        other => panic!("engine metadata version: {other:?}"),
    }
    restore(&place, &original);

    // A root that is not in the table: open succeeds (it reads only the table), but any read
    // and the checker report it.
    let sb = forge_newest(&place, |b| {
        b[70..78].copy_from_slice(&999_999u64.to_le_bytes())
    });
    let db = place.open(opts()).unwrap();
    assert_corruption_at(
        &place,
        &db.get(&some_key).unwrap_err(),
        DATA,
        sb.table_offset,
    );
    assert_corruption_at(&place, &db.check().unwrap_err(), DATA, sb.table_offset);
    assert!(db.iter().unwrap().next().unwrap().is_err());
    drop(db);
    restore(&place, &original);

    // A wrong height or key count: the checker notices.
    for (what, at, v) in [("height", 118usize, 7u64), ("live keys", 78, 12_345)] {
        forge_newest(&place, |b| {
            if what == "height" {
                b[at..at + 4].copy_from_slice(&(v as u32).to_le_bytes())
            } else {
                b[at..at + 8].copy_from_slice(&v.to_le_bytes())
            }
        });
        let db = place.open(opts()).unwrap();
        assert!(db.check().unwrap_err().is_corruption(), "{what}");
        drop(db);
        restore(&place, &original);
    }

    assert_eq!(place.read(DATA).unwrap(), original);
    let db = place.open(opts()).unwrap();
    db.check().unwrap();
    assert_eq!(dump(&db), oracle);
}

#[test]
fn forged_superblock_fields_sim() {
    forged_superblock_fields(Place::sim());
}

#[test]
fn forged_superblock_fields_file() {
    forged_superblock_fields(Place::dir());
}

/// A run (a Bε-tree segment spilled toward an uncached leaf, a block of its own) damaged in its
/// head or in one of its chunks: the check names the data file and an offset inside the run's
/// extent, and the repaired file reads back whole.
fn damaged_run(place: Place) {
    const KIND_RUN: u8 = 35; // the shaped kind written today
    let opts = Options::default()
        .betree(64 << 10, 8, 4 << 10)
        .cache_bytes(512 << 10)
        .durability(Durability::Sync);
    let db = place.open(opts.clone()).unwrap();
    let mut oracle = BTreeMap::new();
    for b in 0..60u32 {
        let mut batch = strata::WriteBatch::new();
        for i in b * 500..(b + 1) * 500 {
            let k = xxh3_64(&i.to_le_bytes()).to_be_bytes().to_vec();
            let v = value(i as u64, 100);
            batch.put(&k, &v);
            oracle.insert(k, v);
        }
        db.write(batch).unwrap();
    }
    assert!(db.metrics().engine.detail("runs") > 0);
    db.close().unwrap();
    let data = place.read(DATA).unwrap();
    let runs: Vec<Entry> = nodes(&data)
        .into_iter()
        .filter(|(_, k)| *k == KIND_RUN)
        .map(|(e, _)| e)
        .collect();
    assert!(!runs.is_empty(), "no run on disk");
    let run = runs[runs.len() / 2];
    let payload_len = block_at(&data, run.offset).payload.len();
    // The block checksum (the head), then a byte of the first chunk after the head (the
    // chunk's own checksum, reported at the chunk).
    for (pos, at_head) in [
        (3u64, true),
        ((BLOCK_HEADER + payload_len + 10) as u64, false),
    ] {
        place.corrupt(DATA, run.offset + pos, 0x5a);
        let db = place.open(opts.clone()).unwrap();
        match db.check().unwrap_err() {
            Error::Corruption { file, offset, .. } => {
                assert_eq!(std::path::Path::new(&file), place.file_label(DATA));
                if at_head {
                    assert_eq!(offset, run.offset);
                } else {
                    let chunk = run.offset + (BLOCK_HEADER + payload_len) as u64;
                    assert!((chunk..=run.offset + pos).contains(&offset), "{offset}");
                }
            }
            other => panic!("expected corruption in the run, got {other:?}"),
        }
        drop(db);
        place.corrupt(DATA, run.offset + pos, 0x5a);
    }
    let db = place.open(opts).unwrap();
    db.check().unwrap();
    assert_eq!(dump(&db), oracle);
}

#[test]
fn damaged_run_sim() {
    damaged_run(Place::sim());
}

#[test]
fn damaged_run_file() {
    damaged_run(Place::dir());
}

/// A Bε-tree leaf of many basements, one of them damaged: `check` reads the whole node and
/// fails at that basement. The basements before it stay installed, and the pool is charged
/// for them (it was not: the next read of another basement of that leaf then found the
/// node's charge out of step with what it held, and a debug build panicked). Every other key
/// still reads, and the damaged ones report the corruption.
#[test]
fn a_damaged_basement_found_by_check_leaves_the_rest_of_its_leaf_readable() {
    let place = Place::sim();
    let opts = || {
        Options::default()
            .betree(1 << 20, 16, 4096)
            .cache_bytes(64 << 10)
            .durability(Durability::Sync)
    };
    let mut oracle = BTreeMap::new();
    {
        let db = place.open(opts()).unwrap();
        for i in 0..2000u32 {
            let v = value(i as u64, 100);
            db.put(key(i), &v).unwrap();
            oracle.insert(key(i), v);
        }
        db.close().unwrap();
    }
    let data = place.read(DATA).unwrap();
    let (leaf, _) = nodes(&data)
        .into_iter()
        .max_by_key(|(e, _)| e.len)
        .expect("a node");
    place.corrupt(DATA, leaf.offset + leaf.len * 3 / 4, 0x24);
    let db = place.open(opts()).unwrap();
    assert!(matches!(db.check(), Err(Error::Corruption { .. })));
    let (mut good, mut bad) = (0, 0);
    for (k, v) in &oracle {
        match db.get(k) {
            Ok(got) => {
                assert_eq!(got.as_ref(), Some(v));
                good += 1;
            }
            Err(Error::Corruption { .. }) => bad += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        good > oracle.len() / 2 && bad > 0,
        "{good} read, {bad} damaged"
    );
}
