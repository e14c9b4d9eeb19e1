//! `strata::salvage`: copying what is readable out of a damaged database. Every test checks the
//! same soundness rules (`assert_sound`): the source's files are byte for byte unchanged; the
//! copy passes `check`; every key it holds has the source's value, except in ranges reported
//! stale; every key of the source it lacks lies in a range reported lost. Then each test checks
//! what its damage must cost: nothing, exactly the keys of the damaged leaf, one key, ...
//! Each scenario runs on a simulated disk and, for the main ones, on real files.

mod common;

use std::collections::BTreeMap;

use common::*;
use strata::salvage::{salvage, salvage_in, Effect, SalvageReport, Slot};
use strata::storage::Device;
use strata::{AddU64, Durability, Error, Options, WriteBatch};

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

const WAL_1: &str = "strata.wal.1";
// The Bε-tree's kinds written today (shaped basements and segments; 32, 29 and 30, compact,
// and 18, 19 and 20, fixed, are still read).
const KIND_BE_LEAF: u8 = 33;
const KIND_BE_INTERNAL: u8 = 34;
const KIND_RUN: u8 = 35;

fn btree_opts() -> Options {
    Options::default()
        .btree(4096)
        .cache_bytes(64 << 10)
        .merge_operator(AddU64)
        .checkpoint_wal_bytes(1 << 30)
}

/// 8 KiB nodes: a leaf of one page takes no runs (`betree::policy`), and salvage must meet runs.
fn betree_opts() -> Options {
    Options::default()
        .betree(8 << 10, 4, 1 << 10)
        .cache_bytes(64 << 10)
        .merge_operator(AddU64)
        .checkpoint_wal_bytes(1 << 30)
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

/// Write `n` keys in random order in batches (every 40th value out of line), delete every 9th
/// and count some upserts, then close. Returns the contents.
fn populated(place: &Place, opts: &Options, n: u32) -> Map {
    let db = place.open(opts.clone()).unwrap();
    let mut model = Map::new();
    let mut order: Vec<u32> = (0..n).collect();
    let mut rng = Rng::new(7);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.range(0, i as u64 + 1) as usize);
    }
    for chunk in order.chunks(100) {
        let mut b = WriteBatch::new();
        for &i in chunk {
            let v = value(i as u64, if i % 40 == 3 { 1500 } else { 100 });
            b.put(key(i), &v);
            model.insert(key(i), v);
        }
        db.write(b).unwrap();
    }
    for i in (0..n).step_by(9) {
        db.delete(key(i)).unwrap();
        model.remove(&key(i));
    }
    for i in 0..20u64 {
        db.upsert(b"counter", i.to_le_bytes()).unwrap();
    }
    model.insert(
        b"counter".to_vec(),
        (0..20u64).sum::<u64>().to_le_bytes().to_vec(),
    );
    db.close().unwrap();
    model
}

fn files(place: &Place) -> Vec<Option<Vec<u8>>> {
    [DATA, WAL, WAL_1].iter().map(|n| place.read(n)).collect()
}

/// Salvage `place` into a new place of the same kind, and check that the source is unchanged.
fn salvage_of(place: &Place, opts: &Options) -> (Place, SalvageReport) {
    let before = files(place);
    let dst = Place::new(place.is_sim());
    let report = match (place, &dst) {
        (Place::Sim(a), Place::Sim(b)) => salvage_in(a, b, opts.clone()),
        (Place::Dir(a), Place::Dir(b)) => salvage(a.path(), b.path(), opts.clone()),
        _ => unreachable!(),
    }
    .unwrap();
    eprintln!("{report}");
    assert_eq!(files(place), before, "salvage changed its source");
    (dst, report)
}

/// The copy's contents, after `check` passes.
fn copied(dst: &Place, opts: &Options) -> Map {
    let db = dst.open(opts.clone().create_if_missing(false)).unwrap();
    db.check().unwrap();
    dump(&db)
}

/// The rules every salvage keeps (see the module comment).
fn assert_sound(copy: &Map, model: &Map, report: &SalvageReport) {
    let in_effect = |k: &[u8], effect: Effect| {
        report
            .damage
            .iter()
            .any(|d| d.effect == effect && d.range.as_ref().is_some_and(|r| r.contains(k)))
    };
    for (k, v) in copy {
        if model.get(k) != Some(v) {
            assert!(
                in_effect(k, Effect::Stale),
                "key {k:?} copied with a value the source does not hold"
            );
        }
    }
    for k in model.keys() {
        if !copy.contains_key(k) {
            assert!(
                in_effect(k, Effect::Lost) || in_effect(k, Effect::Stale),
                "key {k:?} left out but no damage covers it"
            );
        }
    }
    assert_eq!(report.keys, copy.len() as u64, "the report counts the copy");
}

#[track_caller]
fn assert_damage_at(report: &SalvageReport, place: &Place, offset: u64) -> usize {
    let label = place.file_label(DATA);
    report
        .damage
        .iter()
        .position(|d| {
            matches!(&d.error, Error::Corruption { file, offset: at, .. }
                if std::path::Path::new(file) == label && *at == offset)
        })
        .unwrap_or_else(|| panic!("no damage reported at {offset}: {report}"))
}

// ------------------------------------------------------------------------------------------
// No damage

fn undamaged(place: Place, opts: Options) {
    let model = populated(&place, &opts, 2000);
    let (dst, report) = salvage_of(&place, &opts);
    assert!(report.is_complete(), "{report}");
    assert!(report.damage.is_empty(), "{report}");
    assert_eq!(report.log.applied, 0);
    assert!(matches!(report.slots[0], Slot::Valid { .. }));
    assert!(matches!(report.slots[1], Slot::Valid { .. }));
    let copy = copied(&dst, &opts);
    assert_eq!(copy, model);
    // The copy has the source's engine and geometry.
    let (s, d) = (
        place.open(opts.clone()).unwrap().metrics().engine,
        dst.open(opts.clone()).unwrap().metrics().engine,
    );
    assert_eq!(
        (
            s.engine,
            s.node_size,
            s.detail("fanout"),
            s.detail("basement_size")
        ),
        (
            d.engine,
            d.node_size,
            d.detail("fanout"),
            d.detail("basement_size")
        )
    );
}

#[test]
fn undamaged_btree_copies_everything_sim() {
    undamaged(Place::sim(), btree_opts());
}

#[test]
fn undamaged_btree_copies_everything_file() {
    undamaged(Place::dir(), btree_opts());
}

#[test]
fn undamaged_betree_copies_everything_sim() {
    undamaged(Place::sim(), betree_opts());
}

#[test]
fn undamaged_betree_copies_everything_file() {
    undamaged(Place::dir(), betree_opts());
}

/// A destination that already holds a database is refused, and nothing is written to it.
#[test]
fn refuses_a_destination_that_holds_a_database() {
    let place = Place::dir();
    populated(&place, &btree_opts(), 100);
    let other = Place::dir();
    let theirs = populated(&other, &btree_opts(), 50);
    let e = salvage(place.path(), other.path(), btree_opts()).unwrap_err();
    assert!(matches!(e, Error::InvalidOptions(_)), "{e}");
    assert_eq!(dump(&other.open(btree_opts()).unwrap()), theirs);
}

// ------------------------------------------------------------------------------------------
// Damaged leaves

/// The B+-tree leaf in the middle of the key space.
fn middle_leaf(data: &[u8]) -> (Entry, Vec<Vec<u8>>) {
    let mut leaves: Vec<(Vec<u8>, Entry)> = nodes(data)
        .into_iter()
        .filter(|(_, k)| *k == KIND_LEAF)
        .map(|(e, _)| (leaf_keys(data, e.offset)[0].clone(), e))
        .collect();
    leaves.sort();
    let e = leaves[leaves.len() / 2].1;
    (e, leaf_keys(data, e.offset))
}

fn damaged_btree_leaf(place: Place) {
    let opts = btree_opts();
    let model = populated(&place, &opts, 2000);
    let data = place.read(DATA).unwrap();
    let (leaf, inside) = middle_leaf(&data);
    place.corrupt(DATA, leaf.offset + 100, 0x10);
    let (dst, report) = salvage_of(&place, &opts);
    let copy = copied(&dst, &opts);
    assert_sound(&copy, &model, &report);
    // Exactly the leaf's keys are missing, and the report names it and its range.
    let mut want = model.clone();
    for k in &inside {
        want.remove(k);
    }
    assert_eq!(copy, want);
    let d = &report.damage[assert_damage_at(&report, &place, leaf.offset)];
    assert_eq!(
        (d.what, d.node, d.effect),
        ("leaf", Some(leaf.id), Effect::Lost)
    );
    let range = d.range.as_ref().expect("a leaf's range is known");
    assert!(inside.iter().all(|k| range.contains(k)));
    assert!(!report.is_complete());
    assert_eq!(report.keys_copied, want.len() as u64);
}

#[test]
fn damaged_btree_leaf_sim() {
    damaged_btree_leaf(Place::sim());
}

#[test]
fn damaged_btree_leaf_file() {
    damaged_btree_leaf(Place::dir());
}

/// Where a Bε-tree node's partitions lie in its extent (from its head's directory).
fn parts(data: &[u8], e: Entry) -> Vec<(u64, u64)> {
    let blk = block_at(data, e.offset);
    let p = blk.payload;
    let u32_at = |i: usize| u32::from_le_bytes(p[i..i + 4].try_into().unwrap()) as u64;
    let (size, field) = match blk.kind {
        KIND_BE_INTERNAL => (28, 8),
        _ => (20, 0),
    };
    (0..u32_at(0) as usize)
        .map(|i| {
            let at = 4 + size * i + field;
            (u32_at(at), u32_at(at + 4))
        })
        .collect()
}

fn of_kind(data: &[u8], kind: u8) -> Vec<Entry> {
    nodes(data)
        .into_iter()
        .filter(|(_, k)| *k == kind)
        .map(|(e, _)| e)
        .collect()
}

/// A Bε-tree leaf damaged in its head (the whole leaf unreadable) or in one basement: every
/// key outside it is copied, keys inside it only if a message above settles them.
///
/// A node of up to 64 KiB is read whole, and one of its basements failing fails the whole
/// read, so the basement case uses nodes large enough to be read a partition at a time.
fn damaged_betree_leaf(place: Place, in_basement: bool) {
    let opts = if in_basement {
        betree_opts()
            .betree(128 << 10, 8, 4 << 10)
            .cache_bytes(256 << 10)
    } else {
        betree_opts()
    };
    let model = populated(&place, &opts, if in_basement { 12_000 } else { 3000 });
    let data = place.read(DATA).unwrap();
    let mut leaves = of_kind(&data, KIND_BE_LEAF);
    if in_basement {
        leaves.retain(|e| e.len > 64 << 10);
    }
    assert!(leaves.len() > 2, "{} leaves", leaves.len());
    let leaf = leaves[leaves.len() / 2];
    let (at, expect) = if in_basement {
        let (off, len) = parts(&data, leaf)[0];
        (leaf.offset + off + len / 2, leaf.offset + off)
    } else {
        (leaf.offset + 30, leaf.offset)
    };
    place.corrupt(DATA, at, 0x10);
    let (dst, report) = salvage_of(&place, &opts);
    let copy = copied(&dst, &opts);
    assert_sound(&copy, &model, &report);
    let d = &report.damage[assert_damage_at(&report, &place, expect)];
    let what = if in_basement { "basement" } else { "leaf" };
    assert_eq!(
        (d.what, d.node, d.effect),
        (what, Some(leaf.id), Effect::Lost)
    );
    let range = d.range.clone().expect("the range is known");
    let missing: Vec<&Vec<u8>> = model.keys().filter(|k| !copy.contains_key(*k)).collect();
    assert!(!missing.is_empty(), "the damaged leaf held keys");
    assert!(missing.iter().all(|k| range.contains(k)));
    let mut outside = model.iter().filter(|(k, _)| !range.contains(k));
    assert!(outside.all(|(k, v)| copy.get(k) == Some(v)));
    assert!(!report.is_complete());
}

#[test]
fn damaged_betree_leaf_sim() {
    damaged_betree_leaf(Place::sim(), false);
}

#[test]
fn damaged_betree_leaf_file() {
    damaged_betree_leaf(Place::dir(), false);
}

#[test]
fn damaged_betree_basement_sim() {
    damaged_betree_leaf(Place::sim(), true);
}

// ------------------------------------------------------------------------------------------
// Damage above the leaves

/// A damaged B+-tree root: every leaf is still in the translation table, so salvage finds them
/// below the hole and copies everything.
#[test]
fn damaged_btree_root_loses_nothing() {
    let place = Place::sim();
    let opts = btree_opts();
    let model = populated(&place, &opts, 2000);
    let data = place.read(DATA).unwrap();
    let internal = of_kind(&data, KIND_INTERNAL);
    let root = newest_root(&data, &internal);
    place.corrupt(DATA, root.offset + 40, 0x01);
    let (dst, report) = salvage_of(&place, &opts);
    let copy = copied(&dst, &opts);
    assert_sound(&copy, &model, &report);
    assert_eq!(copy, model);
    let d = &report.damage[assert_damage_at(&report, &place, root.offset)];
    assert_eq!(d.recovered, model.len() as u64, "{report}");
}

/// The internal node no other internal node points to.
fn newest_root(data: &[u8], internal: &[Entry]) -> Entry {
    let children: Vec<u64> = internal
        .iter()
        .flat_map(|e| {
            let p = block_at(data, e.offset).payload;
            let n = u32::from_le_bytes(p[..4].try_into().unwrap()) as usize;
            let mut ids = vec![u64::from_le_bytes(p[4..12].try_into().unwrap())];
            let mut at = 12;
            for _ in 1..n {
                let klen = u16::from_le_bytes(p[at..at + 2].try_into().unwrap()) as usize;
                at += 2 + klen;
                ids.push(u64::from_le_bytes(p[at..at + 8].try_into().unwrap()));
                at += 8;
            }
            ids
        })
        .collect();
    *internal
        .iter()
        .find(|e| !children.contains(&e.id))
        .expect("a root")
}

/// A damaged Bε-tree internal node: the nodes below it are found and copied; what its own
/// segments buffered is lost, so their keys are reported stale.
#[test]
fn damaged_betree_internal_node_recovers_below() {
    let place = Place::sim();
    let opts = betree_opts();
    let model = populated(&place, &opts, 3000);
    let data = place.read(DATA).unwrap();
    let internal = of_kind(&data, KIND_BE_INTERNAL);
    assert!(internal.len() > 2, "several levels");
    // Not the root: one whose subtree is part of the key space.
    let node = internal[internal.len() / 2];
    place.corrupt(DATA, node.offset + 30, 0x01);
    let (dst, report) = salvage_of(&place, &opts);
    let copy = copied(&dst, &opts);
    assert_sound(&copy, &model, &report);
    let d = &report.damage[assert_damage_at(&report, &place, node.offset)];
    assert!(d.recovered > 0, "{report}");
    assert!(copy.len() > model.len() * 9 / 10, "{report}");
}

/// A damaged blob costs its one key.
#[test]
fn damaged_blob_costs_one_key() {
    let place = Place::sim();
    let opts = btree_opts();
    let model = populated(&place, &opts, 2000);
    let data = place.read(DATA).unwrap();
    let (owner, blob_id) = nodes(&data)
        .into_iter()
        .filter(|(_, k)| *k == KIND_LEAF)
        .flat_map(|(e, _)| leaf_entries(&data, e.offset))
        .find_map(|(k, b)| b.map(|b| (k, b)))
        .expect("a value out of line");
    let blob = table(&data).into_iter().find(|e| e.id == blob_id).unwrap();
    place.corrupt(DATA, blob.offset + 500, 0x02);
    let (dst, report) = salvage_of(&place, &opts);
    let copy = copied(&dst, &opts);
    assert_sound(&copy, &model, &report);
    let mut want = model.clone();
    want.remove(&owner);
    assert_eq!(copy, want);
    let d = &report.damage[assert_damage_at(&report, &place, blob.offset)];
    assert_eq!(d.range.as_ref().unwrap().single(), Some(&owner[..]));
}

/// A damaged run: the keys below it are copied as the leaf holds them, and reported stale.
#[test]
fn damaged_run_is_reported_stale() {
    let place = Place::sim();
    let opts = betree_opts();
    let db = place.open(opts.clone()).unwrap();
    let mut model = Map::new();
    let mut rng = Rng::new(3);
    for _ in 0..40 {
        let mut b = WriteBatch::new();
        for _ in 0..200 {
            let k = rng.next_u64().to_be_bytes().to_vec();
            let v = value(rng.next_u64(), 60);
            b.put(&k, &v);
            model.insert(k, v);
        }
        db.write(b).unwrap();
    }
    db.close().unwrap();
    let data = place.read(DATA).unwrap();
    let runs = of_kind(&data, KIND_RUN);
    assert!(!runs.is_empty(), "no run on disk");
    let run = runs[runs.len() / 2];
    place.corrupt(DATA, run.offset + 30, 0x01);
    let (dst, report) = salvage_of(&place, &opts);
    let copy = copied(&dst, &opts);
    assert_sound(&copy, &model, &report);
    let d = &report.damage[assert_damage_at(&report, &place, run.offset)];
    assert_eq!((d.what, d.effect), ("run", Effect::Stale));
    assert!(!report.is_complete());
}

// ------------------------------------------------------------------------------------------
// Superblocks, table and log

/// Replace the log's first file with `bytes`.
fn put_log(place: &Place, bytes: &[u8]) {
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

/// A checkpoint whose superblock is damaged while the log still holds every batch since the
/// older one (as after a torn superblock write): the older checkpoint and the log give back
/// everything.
fn damaged_newest_superblock(place: Place, opts: Options) {
    let db = place.open(opts.clone()).unwrap();
    let mut model = Map::new();
    for i in 0..800u32 {
        let v = value(i as u64, 120);
        db.put(key(i), &v).unwrap();
        model.insert(key(i), v);
    }
    db.checkpoint().unwrap();
    for i in 800..1000u32 {
        let v = value(i as u64, 120);
        db.put(key(i), &v).unwrap();
        model.insert(key(i), v);
    }
    for i in (0..800u32).step_by(7) {
        db.delete(key(i)).unwrap();
        model.remove(&key(i));
    }
    let wal = place.read(WAL).unwrap();
    db.checkpoint().unwrap();
    drop(db);
    put_log(&place, &wal);
    let data = place.read(DATA).unwrap();
    let newest = newest_superblock(&data);
    place.corrupt(DATA, newest.slot_offset + 30, 0x01);
    let (dst, report) = salvage_of(&place, &opts);
    let copy = copied(&dst, &opts);
    assert_sound(&copy, &model, &report);
    assert_eq!(copy, model, "{report}");
    assert_eq!(
        report.slots[(newest.slot_offset / SB_SIZE) as usize],
        Slot::Damaged
    );
    assert_eq!(report.checkpoint.map(|c| c.0), Some(newest.seq - 1));
    assert!(report.log.applied > 0 && report.log.missing.is_empty());
    assert!(report.is_complete(), "the damage cost nothing: {report}");
}

#[test]
fn damaged_newest_superblock_btree_sim() {
    damaged_newest_superblock(Place::sim(), btree_opts());
}

#[test]
fn damaged_newest_superblock_btree_file() {
    damaged_newest_superblock(Place::dir(), btree_opts());
}

#[test]
fn damaged_newest_superblock_betree_sim() {
    damaged_newest_superblock(Place::sim(), betree_opts());
}

/// A damaged translation table: the older checkpoint is used, and the report says the log
/// continues a newer one whose batches it no longer holds.
#[test]
fn damaged_table_falls_back_and_says_what_is_missing() {
    let place = Place::sim();
    let opts = btree_opts();
    let db = place.open(opts.clone()).unwrap();
    for i in 0..300u32 {
        db.put(key(i), value(i as u64, 50)).unwrap();
    }
    db.checkpoint().unwrap();
    for i in 300..400u32 {
        db.put(key(i), value(i as u64, 50)).unwrap();
    }
    // One checkpoint past the first (`close` may add a second, moving blocks down).
    db.checkpoint().unwrap();
    // The log starts over after it: records of the same size, written over those of
    // 300..400, so that the log no longer holds them.
    for i in 400..500u32 {
        db.put(key(i), value(i as u64, 50)).unwrap();
    }
    drop(db);
    let data = place.read(DATA).unwrap();
    let newest = newest_superblock(&data);
    place.corrupt(DATA, newest.table_offset + 40, 0x01);
    let (dst, report) = salvage_of(&place, &opts);
    let copy = copied(&dst, &opts);
    assert_eq!(
        report.checkpoint.map(|c| c.0),
        Some(newest.seq - 1),
        "{report}"
    );
    assert_eq!(report.log.newer_checkpoint, Some(newest.wal_seq));
    assert!(!report.is_complete());
    assert_eq!(report.log.missing.len(), 1, "{report}");
    // What it copied is what the older checkpoint held, or part of it, and the batches past
    // the newer checkpoint.
    for (k, v) in &copy {
        let i: u32 = std::str::from_utf8(&k[3..]).unwrap().parse().unwrap();
        assert!(!(300..400).contains(&i) && i < 500 && v == &value(i as u64, 50));
    }
}

/// A process crash with batches in the log, and a damaged leaf: the log is replayed into the
/// copy; keys of the damaged leaf that the log rewrote are back.
#[test]
fn log_is_replayed_over_a_damaged_leaf() {
    let place = Place::sim();
    let opts = btree_opts().durability(Durability::Sync);
    let mut model = populated(&place, &opts, 2000);
    let data = place.read(DATA).unwrap();
    let (leaf, inside) = middle_leaf(&data);
    let db = place.open(opts.clone()).unwrap();
    let rewritten = inside[1].clone();
    db.put(&rewritten, b"from the log").unwrap();
    model.insert(rewritten.clone(), b"from the log".to_vec());
    db.put(b"new", b"key").unwrap();
    model.insert(b"new".to_vec(), b"key".to_vec());
    // An upsert of a key the damaged leaf held cannot be replayed: its base is lost.
    db.upsert(&inside[2], 5u64.to_le_bytes()).unwrap();
    let upserted = model.get(&inside[2]).cloned();
    drop(db);
    place.corrupt(DATA, leaf.offset + 100, 0x10);
    let (dst, report) = salvage_of(&place, &opts);
    let copy = copied(&dst, &opts);
    assert_sound(&copy, &model, &report);
    assert_eq!(report.log.applied, 3, "{report}");
    assert_eq!(
        copy.get(&rewritten).map(|v| &v[..]),
        Some(&b"from the log"[..])
    );
    assert_eq!(copy.get(&b"new"[..]).map(|v| &v[..]), Some(&b"key"[..]));
    assert!(!copy.contains_key(&inside[2]), "{upserted:?}");
}

/// A damaged record in the middle of the log: the batches after it are still applied, and the
/// report names the gap.
#[test]
fn damaged_log_record_is_a_gap() {
    let place = Place::sim();
    let opts = btree_opts().durability(Durability::Sync);
    let mut model = populated(&place, &opts, 200);
    let db = place.open(opts.clone()).unwrap();
    for i in 0..5u32 {
        db.put(format!("log{i}"), b"v").unwrap();
        model.insert(format!("log{i}").into_bytes(), b"v".to_vec());
    }
    drop(db);
    let recs = wal_records(&place.read(WAL).unwrap());
    let third = recs[3]; // the marker, then batches 1, 2, 3, ...
    place.corrupt(WAL, third.offset + 40, 0x01);
    let (dst, report) = salvage_of(&place, &opts);
    let copy = copied(&dst, &opts);
    model.remove(&b"log2"[..]);
    assert_eq!(copy, model, "{report}");
    assert_eq!(report.log.missing, vec![(third.seq, third.seq)]);
    assert_eq!(report.log.applied, 4);
    assert!(report.damage.iter().any(|d| matches!(&d.error,
        Error::Corruption { file, offset, .. } if file == WAL && *offset == third.offset)));
}

/// Both superblocks and their tables damaged: no checkpoint reads, and salvage falls back to a
/// raw scan of the data file for intact leaf blocks. Every key the source held is found (its
/// checkpoint's leaves are intact); which version of a block is the newest is unknowable, so
/// the whole key space is reported stale.
fn raw_scan(opts: Options) {
    let place = Place::sim();
    let model = populated(&place, &opts, 2000);
    let data = place.read(DATA).unwrap();
    // Both superblocks, and the table each points to (a superblock whose checksum fails is
    // still tried for its table).
    for slot in 0..2 {
        let sb = superblock(&data, slot).unwrap();
        place.corrupt(DATA, sb.table_offset + 30, 0x01);
        place.corrupt(DATA, slot * SB_SIZE + 30, 0x01);
    }
    let (dst, report) = salvage_of(&place, &opts);
    let copy = copied(&dst, &opts);
    assert_sound(&copy, &model, &report);
    assert!(report.checkpoint.is_none());
    let raw = report.raw.clone().expect("a raw scan");
    assert!(raw.leaves > 0);
    let found = model.keys().filter(|k| copy.contains_key(*k)).count();
    if opts.engine == btree_opts().engine {
        assert_eq!(found, model.len(), "{report}");
        assert_eq!(copy, model, "no older version of a leaf disagrees here");
    } else {
        // Keys only upserts or range deletes name are left out.
        assert!(
            found >= model.len() * 95 / 100,
            "{found} of {}: {report}",
            model.len()
        );
    }
    assert!(!report.is_complete());
}

#[test]
fn raw_scan_btree() {
    raw_scan(btree_opts());
}

#[test]
fn raw_scan_betree() {
    raw_scan(betree_opts());
}

/// Both superblocks damaged, their tables intact: the newest is read as if its checksum held,
/// its table checks out, and everything is copied; the report says which fields went unchecked.
#[test]
fn both_superblocks_damaged_uses_the_newest_unchecked() {
    let place = Place::sim();
    let opts = btree_opts();
    let model = populated(&place, &opts, 2000);
    let newest = newest_superblock(&place.read(DATA).unwrap());
    // The checksum field of one slot, a counter (live keys) of the other.
    place.corrupt(DATA, newest.slot_offset + 9, 0x01);
    place.corrupt(DATA, (SB_SIZE - newest.slot_offset) + 64 + 14, 0x01);
    let (dst, report) = salvage_of(&place, &opts);
    assert_eq!(report.slots, [Slot::Damaged, Slot::Damaged]);
    assert_eq!(report.checkpoint.map(|c| c.0), Some(newest.seq), "{report}");
    assert!(report.raw.is_none());
    assert_eq!(copied(&dst, &opts), model);
    assert!(report
        .damage
        .iter()
        .any(|d| d.what == "superblock used unchecked"));
}

// ------------------------------------------------------------------------------------------
// A versioned database (the SDA)

use strata::{SdaConfig, VersionedDb, VersionedEngineOptions, VersionedOptions};

/// Every live version's contents: (version, its keys and values).
type Versions = Vec<(u64, Vec<(Vec<u8>, Vec<u8>)>)>;

fn versioned_opts(engine: VersionedEngineOptions) -> VersionedOptions {
    VersionedOptions {
        engine,
        durability: Durability::None,
        checkpoint_wal_bytes: 1 << 30,
        background_merges: false,
        ..VersionedOptions::default()
    }
}

/// A small SDA: many arrays on few levels.
fn small_sda() -> VersionedEngineOptions {
    VersionedEngineOptions::Sda(SdaConfig {
        buffer_bytes: 8 << 10,
        level0_entries: 16,
        block_bytes: 1 << 10,
        ..SdaConfig::default()
    })
}

fn contents(db: &VersionedDb) -> Versions {
    db.versions()
        .unwrap()
        .iter()
        .filter(|v| !v.deleted)
        .map(|v| {
            let all: Vec<(Vec<u8>, Vec<u8>)> = db
                .range_at::<&[u8], _>(v.version, ..)
                .unwrap()
                .collect::<strata::Result<_>>()
                .unwrap();
            (v.version, all)
        })
        .collect()
}

/// Root keys, clones (leaves and internal ones), rewrites and deletes at the leaves, a
/// deleted internal version its leaves read through, and a marker value only one leaf holds.
/// Returns the database (open) and the marker's version and key.
fn versioned_history(
    dir: &std::path::Path,
    engine: VersionedEngineOptions,
) -> (VersionedDb, u64, Vec<u8>) {
    let db = VersionedDb::open(dir, versioned_opts(engine)).unwrap();
    for i in 0..400u32 {
        db.put_at(0, key(i), value(i as u64, 60)).unwrap();
    }
    let a = db.clone_version(0).unwrap();
    let b = db.clone_version(0).unwrap();
    let a1 = db.clone_version(a).unwrap();
    let a2 = db.clone_version(a).unwrap();
    for i in 0..400u32 {
        match i % 5 {
            0 => db.put_at(a1, key(i), b"a1").unwrap(),
            1 => db.delete_at(a2, key(i)).unwrap(),
            2 => db
                .put_at(b, key(1000 + i), value(i as u64 + 7, 80))
                .unwrap(),
            _ => {}
        }
    }
    let marker = b"the marker only leaf a1 holds".to_vec();
    db.put_at(a1, key(1500), &marker).unwrap();
    // `a` goes, kept as a ghost that a1 and a2 read through.
    db.delete_version(a).unwrap();
    (db, a1, key(1500))
}

/// A small CoW B-tree: many nodes.
fn small_cow() -> VersionedEngineOptions {
    VersionedEngineOptions::Cow(strata::CowConfig {
        leaf_entries: 16,
        fanout: 8,
        ..strata::CowConfig::default()
    })
}

/// With nothing damaged, the copy has every live version's contents, the version tree, and
/// the changes the log held past the checkpoint; the source is unchanged.
#[test]
fn undamaged_versioned_sda_copies_every_version_and_the_log() {
    undamaged_versioned(small_sda(), "sda");
}

#[test]
fn undamaged_versioned_cow_btree_copies_every_version_and_the_log() {
    undamaged_versioned(small_cow(), "cow");
}

fn undamaged_versioned(engine: VersionedEngineOptions, name: &str) {
    let src = tempfile::TempDir::new().unwrap();
    let dst = tempfile::TempDir::new().unwrap();
    let (db, a1, _) = versioned_history(src.path(), engine);
    db.checkpoint().unwrap();
    let source_bytes = db.stats().unwrap().referenced_bytes;
    // Past the checkpoint, in the log only: a clone and writes on both sides of it.
    db.put_at(a1, b"after the checkpoint", b"1").unwrap();
    let c = db.clone_version(a1).unwrap();
    db.put_at(c, b"at the clone", b"2").unwrap();
    db.delete_at(c, key(3)).unwrap();
    let want = contents(&db);
    let tree = db.versions().unwrap();
    drop(db);
    let before: Vec<Option<Vec<u8>>> = ["strata.data", "strata.wal", WAL_1]
        .iter()
        .map(|n| std::fs::read(src.path().join(n)).ok())
        .collect();
    let report = salvage(src.path(), dst.path(), Options::default()).unwrap();
    eprintln!("{report}");
    let after: Vec<Option<Vec<u8>>> = ["strata.data", "strata.wal", WAL_1]
        .iter()
        .map(|n| std::fs::read(src.path().join(n)).ok())
        .collect();
    assert_eq!(before, after, "salvage changed its source");
    assert!(report.is_complete(), "{report}");
    assert_eq!(report.engine, name);
    assert_eq!(report.log.applied, 4, "{report}");
    if name == "sda" {
        assert!(report.to_string().contains("entries (a key at a version)"));
    } else {
        let keys: u64 = want.iter().map(|(_, kv)| kv.len() as u64).sum();
        assert_eq!(report.keys, keys, "{report}");
    }
    let copy = VersionedDb::open(dst.path(), versioned_opts(engine)).unwrap();
    copy.check().unwrap();
    assert_eq!(copy.versions().unwrap(), tree);
    assert_eq!(contents(&copy), want);
    if name == "cow" {
        // Built from shared trees, not one tree per version: about the source's space (a
        // tree per version took 1.24x here).
        let copy_bytes = copy.stats().unwrap().referenced_bytes;
        assert!(
            copy_bytes * 10 <= source_bytes * 11,
            "{copy_bytes} bytes copied of {source_bytes}"
        );
    }
    // The copy takes writes, which win over everything copied.
    copy.put_at(c, key(1), b"new").unwrap();
    assert_eq!(copy.get_at(c, key(1)).unwrap(), Some(b"new".to_vec()));
}

/// Thirty leaves cloned from a root of 400 keys, each rewriting two: a copy with a tree per
/// version would hold thirty-one trees of 400 keys; each version starts from its nearest
/// live ancestor's tree instead, so the copy takes about the source's space.
#[test]
fn a_salvaged_cow_btree_shares_nodes_where_versions_agree() {
    let src = tempfile::TempDir::new().unwrap();
    let dst = tempfile::TempDir::new().unwrap();
    let db = VersionedDb::open(src.path(), versioned_opts(small_cow())).unwrap();
    for i in 0..400u32 {
        db.put_at(0, key(i), value(i as u64, 60)).unwrap();
    }
    for c in 0..30u32 {
        let leaf = db.clone_version(0).unwrap();
        db.put_at(leaf, key(c * 13), b"rewritten").unwrap();
        db.delete_at(leaf, key(c * 13 + 1)).unwrap();
    }
    db.checkpoint().unwrap();
    let source_bytes = db.stats().unwrap().referenced_bytes;
    let want = contents(&db);
    drop(db);
    let report = salvage(src.path(), dst.path(), Options::default()).unwrap();
    assert!(report.is_complete(), "{report}");
    let copy = VersionedDb::open(dst.path(), versioned_opts(small_cow())).unwrap();
    copy.check().unwrap();
    assert_eq!(contents(&copy), want);
    let copy_bytes = copy.stats().unwrap().referenced_bytes;
    assert!(
        copy_bytes * 10 <= source_bytes * 12,
        "{copy_bytes} bytes copied of {source_bytes}"
    );
}

/// One damaged block of one array (the SDA) or one damaged leaf (the CoW B-tree): it is
/// reported with the file, the offset and its keys, and costs only entries in its key range;
/// every other key of every live version is copied as it was.
#[test]
fn a_damaged_sda_block_costs_only_its_keys() {
    damaged_versioned(small_sda());
}

#[test]
fn a_damaged_cow_btree_leaf_costs_only_its_keys() {
    damaged_versioned(small_cow());
}

fn damaged_versioned(engine: VersionedEngineOptions) {
    let src = tempfile::TempDir::new().unwrap();
    let dst = tempfile::TempDir::new().unwrap();
    let (db, a1, marked) = versioned_history(src.path(), engine);
    let want = contents(&db);
    db.close().unwrap();
    let path = src.path().join("strata.data");
    let mut bytes = std::fs::read(&path).unwrap();
    let m = b"the marker only leaf a1 holds";
    let at: Vec<usize> = (0..bytes.len() - m.len())
        .filter(|&i| &bytes[i..i + m.len()] == m)
        .collect();
    assert!(!at.is_empty());
    for i in at {
        bytes[i + 4] ^= 0x20;
    }
    std::fs::write(&path, bytes).unwrap();
    let report = salvage(src.path(), dst.path(), Options::default()).unwrap();
    eprintln!("{report}");
    assert!(!report.is_complete(), "{report}");
    let lost: Vec<_> = report
        .damage
        .iter()
        .filter(|d| d.effect == Effect::Lost)
        .collect();
    assert_eq!(lost.len(), 1, "{report}");
    let range = lost[0].range.clone().expect("a block's keys are known");
    assert!(range.contains(&marked), "{report}");
    assert!(
        matches!(&lost[0].error, Error::Corruption { file, .. } if file.ends_with("strata.data")),
        "{report}"
    );
    let copy = VersionedDb::open(dst.path(), versioned_opts(engine)).unwrap();
    copy.check().unwrap();
    let got = contents(&copy);
    assert_eq!(got.len(), want.len());
    let mut differ = 0;
    for ((v, w), (gv, g)) in want.iter().zip(&got) {
        assert_eq!(v, gv);
        let outside = |kv: &&(Vec<u8>, Vec<u8>)| !range.contains(&kv.0);
        assert_eq!(
            w.iter().filter(outside).collect::<Vec<_>>(),
            g.iter().filter(outside).collect::<Vec<_>>(),
            "version {v}: keys outside the damaged block differ"
        );
        differ += (w != g) as usize;
    }
    assert!(differ >= 1, "the damaged block cost something");
    assert_ne!(
        copy.get_at(a1, &marked).unwrap(),
        Some(b"the marker only leaf a1 holds".to_vec())
    );
}

/// A clone's log record damaged: the changes before it are replayed, the clone is reported
/// missing, and a write to the version it would have made is refused and reported, not
/// applied to some other version.
#[test]
fn a_lost_clone_in_the_log_stops_the_changes_to_its_version() {
    let src = tempfile::TempDir::new().unwrap();
    let dst = tempfile::TempDir::new().unwrap();
    let (db, a1, _) = versioned_history(src.path(), small_sda());
    db.checkpoint().unwrap();
    let before = b"written just before the clone";
    db.put_at(a1, b"k-before", before).unwrap();
    let c = db.clone_version(a1).unwrap();
    db.put_at(c, b"k-after", b"written at the clone").unwrap();
    drop(db);
    // The log record after the one holding `before` is the clone's: change a byte of its
    // sequence number, which its checksum covers.
    let log = src.path().join("strata.wal");
    let mut bytes = std::fs::read(&log).unwrap();
    let at = bytes
        .windows(before.len())
        .position(|w| w == before)
        .expect("the put is in the log");
    bytes[at + before.len() + 16] ^= 1;
    std::fs::write(&log, bytes).unwrap();
    let report = salvage(src.path(), dst.path(), Options::default()).unwrap();
    eprintln!("{report}");
    assert!(!report.is_complete(), "{report}");
    assert_eq!(report.log.applied, 1, "{report}");
    assert_eq!(report.log.missing.len(), 1, "{report}");
    let refused = report
        .damage
        .iter()
        .filter(|d| d.what == "log record" && matches!(d.error, Error::BadVersion { .. }))
        .count();
    assert_eq!(refused, 1, "{report}");
    let copy = VersionedDb::open(dst.path(), versioned_opts(small_sda())).unwrap();
    assert_eq!(copy.get_at(a1, b"k-before").unwrap(), Some(before.to_vec()));
    assert!(copy.versions().unwrap().iter().all(|v| v.version != c));
    assert_eq!(copy.get_at(a1, b"k-after").unwrap(), None);
}
