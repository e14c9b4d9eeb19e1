//! Bad input gets a clear error and changes nothing (rule 7 of DESIGN.md): oversized keys,
//! values and batches; paths that are not databases; options out of range; a database that is
//! already open; a newer format version. And the limits themselves are accepted.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::*;
use strata::storage::Device;
use strata::{Db, Durability, Error, Options, WriteBatch, MAX_KEY_LEN, MAX_VALUE_LEN};

fn opts() -> Options {
    Options::default()
        .btree(4096)
        .cache_bytes(64 << 10)
        .durability(Durability::Sync)
}

/// The files of a database as they are now.
fn files(place: &Place) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    (place.read(DATA), place.read(WAL))
}

fn oversized_input_changes_nothing(place: Place) {
    let db = place.open(opts()).unwrap();
    let mut oracle = BTreeMap::new();
    for i in 0..50u32 {
        let (k, v) = (format!("k{i:03}").into_bytes(), value(i as u64, 200));
        db.put(&k, &v).unwrap();
        oracle.insert(k, v);
    }
    let before = files(&place);
    let batches = db.metrics().batches;
    let long_key = vec![b'x'; MAX_KEY_LEN + 1];
    let long_value = vec![7u8; MAX_VALUE_LEN + 1];

    let e = db.put(&long_key, b"v").unwrap_err();
    assert!(
        matches!(e, Error::KeyTooLarge { len, max } if len == MAX_KEY_LEN + 1 && max == MAX_KEY_LEN),
        "{e:?}"
    );
    assert!(
        e.to_string().contains(&(MAX_KEY_LEN + 1).to_string()),
        "{e}"
    );
    let e = db.delete(&long_key).unwrap_err();
    assert!(matches!(e, Error::KeyTooLarge { .. }), "{e:?}");
    let e = db.put(b"k000", &long_value).unwrap_err();
    assert!(
        matches!(e, Error::ValueTooLarge { len, max } if len == MAX_VALUE_LEN + 1 && max == MAX_VALUE_LEN),
        "{e:?}"
    );

    // Valid operations in a batch with one bad one: none of them is applied.
    for (bad_key, durability) in [(true, Durability::Sync), (false, Durability::None)] {
        let mut b = WriteBatch::new();
        b.put(b"new key", b"new value");
        b.delete(b"k001");
        b.put(b"k002", b"overwritten");
        if bad_key {
            b.put(&long_key, b"v");
        } else {
            b.put(b"k003", &long_value);
        }
        b.put(b"after the bad one", b"v");
        let e = db.write_with(b, durability).unwrap_err();
        if bad_key {
            assert!(matches!(e, Error::KeyTooLarge { .. }), "{e:?}");
        } else {
            assert!(matches!(e, Error::ValueTooLarge { .. }), "{e:?}");
        }
    }
    let mut b = WriteBatch::new();
    b.delete(b"k004").delete(&long_key);
    assert!(matches!(db.write(b), Err(Error::KeyTooLarge { .. })));

    assert_eq!(dump(&db), oracle, "nothing was applied");
    assert_eq!(files(&place), before, "nothing reached the files");
    assert_eq!(db.metrics().batches, batches);
    // Not poisoned: the database takes good writes at once.
    db.put(b"good", b"write").unwrap();
    oracle.insert(b"good".to_vec(), b"write".to_vec());
    // Nothing of the refused writes is in the log either: a process crash replays only the good.
    drop(db);
    let db = place.open(opts()).unwrap();
    db.check().unwrap();
    assert_eq!(dump(&db), oracle);
}

#[test]
fn oversized_input_changes_nothing_sim() {
    oversized_input_changes_nothing(Place::sim());
}

#[test]
fn oversized_input_changes_nothing_file() {
    oversized_input_changes_nothing(Place::dir());
}

/// A batch over 1 GiB is one log record too many: refused whole, nothing written.
#[test]
fn batch_over_the_size_limit_is_refused() {
    let place = Place::sim();
    let db = place.open(opts().durability(Durability::None)).unwrap();
    db.put(b"a", b"1").unwrap();
    let before = files(&place);
    let big = vec![1u8; MAX_VALUE_LEN];
    let mut b = WriteBatch::new();
    for i in 0..(1usize << 30) / MAX_VALUE_LEN + 1 {
        b.put(format!("big{i}"), &big);
    }
    drop(big);
    let e = db.write(b).unwrap_err();
    assert!(
        matches!(e, Error::BatchTooLarge { len, max } if len > max && max == 1 << 30),
        "{e:?}"
    );
    assert_eq!(files(&place), before);
    assert_eq!(db.get(b"big0").unwrap(), None);
    db.put(b"b", b"2").unwrap();
}

/// The limits themselves work: keys of exactly MAX_KEY_LEN, values of 1 MiB and of exactly
/// MAX_VALUE_LEN, the empty key, empty values; in small and large nodes, across a reopen.
fn limits_are_accepted(place: Place, node_size: usize) {
    let o = opts().btree(node_size);
    let db = place.open(o.clone()).unwrap();
    let mut oracle = BTreeMap::new();
    let max_key = vec![b'k'; MAX_KEY_LEN];
    let mut entries: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (max_key.clone(), b"longest key".to_vec()),
        (Vec::new(), b"empty key".to_vec()),
        (b"empty value".to_vec(), Vec::new()),
        (b"one mebibyte".to_vec(), value(1, 1 << 20)),
        (b"largest value".to_vec(), value(2, MAX_VALUE_LEN)),
    ];
    // Longest keys that differ only in their last byte: separators as long as keys can be.
    for i in 0..40u8 {
        let mut k = max_key.clone();
        k[MAX_KEY_LEN - 1] = i;
        entries.push((k, vec![i; 300]));
    }
    for (k, v) in &entries {
        db.put(k, v).unwrap();
        oracle.insert(k.clone(), v.clone());
    }
    db.check().unwrap();
    assert_eq!(
        db.get(&max_key).unwrap().as_deref(),
        Some(&b"longest key"[..])
    );
    assert_eq!(db.get(b"").unwrap().as_deref(), Some(&b"empty key"[..]));
    assert_eq!(db.get(b"empty value").unwrap().as_deref(), Some(&b""[..]));
    db.close().unwrap();
    let db = place.open(o.clone()).unwrap();
    db.check().unwrap();
    assert_eq!(dump(&db), oracle);
    let first: Vec<u8> = db.iter().unwrap().next().unwrap().unwrap().0;
    assert!(first.is_empty(), "the empty key sorts first");
    // Delete them again, in a batch, and the long keys one by one.
    let mut b = WriteBatch::new();
    b.delete(b"").delete(b"largest value").delete(&max_key);
    db.write(b).unwrap();
    for k in [b"".as_slice(), b"largest value", &max_key] {
        oracle.remove(k);
    }
    for i in (0..40u8).step_by(2) {
        let mut k = max_key.clone();
        k[MAX_KEY_LEN - 1] = i;
        db.delete(&k).unwrap();
        oracle.remove(&k);
    }
    db.check().unwrap();
    drop(db);
    let db = place.open(o).unwrap();
    db.check().unwrap();
    assert_eq!(dump(&db), oracle);
}

#[test]
fn limits_are_accepted_sim_4k() {
    limits_are_accepted(Place::sim(), 4096);
}

#[test]
fn limits_are_accepted_sim_64k() {
    limits_are_accepted(Place::sim(), 64 << 10);
}

#[test]
fn limits_are_accepted_file_4k() {
    limits_are_accepted(Place::dir(), 4096);
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_regular_file_is_not_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("notes.txt");
    fs::write(&file, b"some notes, not a database\n").unwrap();
    let e = Db::open(&file, opts())
        .err()
        .expect("a file is not a database");
    match &e {
        Error::NotADatabase { path, .. } => assert_eq!(Path::new(path), file),
        other => panic!("{other:?}"),
    }
    assert_eq!(fs::read(&file).unwrap(), b"some notes, not a database\n");
    assert_eq!(
        listing(dir.path()),
        vec!["notes.txt"],
        "nothing created beside it"
    );
    // A path under the file: a clear error, and nothing created.
    let under = file.join("sub");
    let e = Db::open(&under, opts())
        .err()
        .expect("cannot live under a file");
    assert!(
        matches!(e, Error::Io { .. } | Error::NotADatabase { .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("notes.txt"), "names the path: {e}");
    assert!(fs::metadata(&file).unwrap().is_file());
    assert_eq!(fs::read(&file).unwrap(), b"some notes, not a database\n");
}

#[test]
fn garbage_data_file_is_not_a_database() {
    for garbage in [vec![0x5a; 20 << 10], vec![0x5a; 100], b"STRATAd".to_vec()] {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(DATA), &garbage).unwrap();
        let e = Db::open(dir.path(), opts())
            .err()
            .expect("garbage is no database");
        assert!(matches!(e, Error::NotADatabase { .. }), "{e:?}");
        assert!(e.to_string().contains(DATA), "{e}");
        assert_eq!(
            fs::read(dir.path().join(DATA)).unwrap(),
            garbage,
            "unchanged"
        );
        assert!(!dir.path().join(WAL).exists(), "no log created");
        // Also without create_if_missing, and on a simulated disk.
        let e = Db::open(dir.path(), opts().create_if_missing(false))
            .err()
            .unwrap();
        assert!(matches!(e, Error::NotADatabase { .. }), "{e:?}");
        assert_eq!(fs::read(dir.path().join(DATA)).unwrap(), garbage);

        let place = Place::sim();
        let dev = place.env().files().get_or_create(DATA);
        dev.write_at(&garbage, 0).unwrap();
        let e = place.open(opts()).err().expect("garbage is no database");
        assert!(matches!(e, Error::NotADatabase { .. }), "{e:?}");
        assert_eq!(place.read(DATA).unwrap(), garbage);
        assert_eq!(place.read(WAL), None, "no log created");
    }
}

#[test]
fn missing_database_without_create_if_missing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent");
    let e = Db::open(&path, opts().create_if_missing(false))
        .err()
        .expect("nothing to open");
    assert!(
        matches!(e, Error::Io { .. } | Error::NotADatabase { .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("absent"), "names the path: {e}");
    assert!(!path.exists(), "the directory was not created");
    assert!(listing(dir.path()).is_empty());

    // An existing empty directory: not a database, and no database files appear in it.
    let empty = dir.path().join("empty");
    fs::create_dir(&empty).unwrap();
    let e = Db::open(&empty, opts().create_if_missing(false))
        .err()
        .unwrap();
    assert!(matches!(e, Error::NotADatabase { .. }), "{e:?}");
    assert!(!empty.join(DATA).exists() && !empty.join(WAL).exists());

    // A simulated disk with nothing on it.
    let place = Place::sim();
    let e = place.open(opts().create_if_missing(false)).err().unwrap();
    assert!(matches!(e, Error::NotADatabase { .. }), "{e:?}");
    assert_eq!((place.read(DATA), place.read(WAL)), (None, None));
}

/// A directory we may not enter. Tests often run as root, whom permissions do not stop; then
/// the assertion is skipped with a note, and the IO error is checked through a data file that
/// is a directory instead, which stops root too.
#[test]
fn unreadable_database_gives_an_io_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let locked = dir.path().join("locked");
    fs::create_dir(&locked).unwrap();
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o000)).unwrap();
    let root = unsafe { libc::geteuid() } == 0;
    match Db::open(&locked, opts()) {
        Ok(_) if root => {
            eprintln!("note: running as root, so a mode 000 directory does not stop the open")
        }
        Ok(_) => panic!("opened a directory without permission"),
        Err(e) => {
            assert!(matches!(e, Error::Io { .. }), "{e:?}");
            assert!(e.to_string().contains("locked"), "{e}");
        }
    }
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o755)).unwrap();

    let odd = dir.path().join("odd");
    fs::create_dir_all(odd.join(DATA)).unwrap();
    let e = Db::open(&odd, opts())
        .err()
        .expect("the data file is a directory");
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
    assert!(
        e.to_string()
            .contains(&odd.join(DATA).display().to_string()),
        "{e}"
    );
    assert!(!odd.join(WAL).exists());
}

#[test]
fn invalid_options_are_refused_before_anything_happens() {
    let bad = [
        ("node size 3000", Options::default().btree(3000)),
        ("node size 8 MiB", Options::default().btree(8 << 20)),
        ("node size 2 KiB", Options::default().btree(2048)),
        ("node size 0", Options::default().btree(0)),
        ("cache 1 KiB", Options::default().cache_bytes(1 << 10)),
        (
            "log of 100 bytes",
            Options::default().checkpoint_wal_bytes(100),
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (what, o) in bad {
        let path = dir.path().join("db");
        let e = Db::open(&path, o.clone()).err().unwrap();
        assert!(matches!(e, Error::InvalidOptions(_)), "{what}: {e:?}");
        assert!(!path.exists(), "{what}: nothing created");
        let place = Place::sim();
        let e = place.open(o.clone()).err().unwrap();
        assert!(matches!(e, Error::InvalidOptions(_)), "{what}: {e:?}");
        assert!(place.env().files().names().is_empty(), "{what}");
    }
    // Also for an existing database, whose files stay as they were.
    let place = Place::dir();
    place.open(opts()).unwrap().close().unwrap();
    let before = files(&place);
    let e = place.open(opts().cache_bytes(100)).err().unwrap();
    assert!(matches!(e, Error::InvalidOptions(_)), "{e:?}");
    assert_eq!(files(&place), before);
    // The limits are fine.
    for o in [
        Options::default().btree(4096).cache_bytes(64 << 10),
        Options::default().btree(4 << 20),
    ] {
        Place::sim().open(o).unwrap().check().unwrap();
    }
}

/// Geometry is fixed when a database is created: a later open with other options uses it.
#[test]
fn an_existing_database_keeps_its_geometry() {
    let place = Place::dir();
    let db = place.open(opts().btree(4096)).unwrap();
    for i in 0..200u32 {
        db.put(i.to_be_bytes(), [1u8; 100]).unwrap();
    }
    db.close().unwrap();
    let db = place.open(opts().btree(64 << 10)).unwrap();
    assert_eq!(db.metrics().engine.node_size, 4096);
    assert!(db.metrics().engine.height >= 2);
    db.check().unwrap();
}

#[test]
fn a_second_open_is_locked_out() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    db.put(b"k", b"v").unwrap();
    let before = (
        fs::read(dir.path().join(DATA)).unwrap(),
        fs::read(dir.path().join(WAL)).unwrap(),
    );
    for o in [opts(), opts().create_if_missing(false), Options::default()] {
        let e = Db::open(dir.path(), o).err().expect("already open");
        match &e {
            Error::Locked { path } => assert_eq!(Path::new(path), dir.path()),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        (
            fs::read(dir.path().join(DATA)).unwrap(),
            fs::read(dir.path().join(WAL)).unwrap()
        ),
        before
    );
    // The first handle is unaffected; once it is gone the database opens again.
    db.put(b"k2", b"v2").unwrap();
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
    drop(db);
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(db.get(b"k2").unwrap().as_deref(), Some(&b"v2"[..]));
}

fn newer_format_version_is_refused(place: Place) {
    let db = place.open(opts()).unwrap();
    db.put(b"k", b"v").unwrap();
    db.checkpoint().unwrap();
    db.close().unwrap();
    let data = place.read(DATA).unwrap();
    for slot in [newest_superblock(&data).slot_offset / SB_SIZE, 0, 1] {
        let at = (slot * SB_SIZE) as usize;
        let mut sb = data[at..at + SB_SIZE as usize].to_vec();
        sb[20..24].copy_from_slice(&99u32.to_le_bytes());
        reseal_superblock(&mut sb);
        place.overwrite(DATA, slot * SB_SIZE, &sb);
        let forged = place.read(DATA).unwrap();
        let wal = place.read(WAL);
        let e = place.open(opts()).err().expect("a newer version");
        match &e {
            Error::UnsupportedVersion {
                file,
                found,
                supported,
            } => {
                assert_eq!(*found, 99);
                assert!(*supported < 99);
                assert_eq!(Path::new(file), place.file_label(DATA));
            }
            other => panic!("slot {slot}: {other:?}"),
        }
        assert!(e.to_string().contains("99"), "{e}");
        assert_eq!(place.read(DATA).unwrap(), forged, "unchanged");
        assert_eq!(place.read(WAL), wal, "unchanged");
        place.overwrite(DATA, slot * SB_SIZE, &data[at..at + SB_SIZE as usize]);
    }
    let db = place.open(opts()).unwrap();
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
}

#[test]
fn newer_format_version_is_refused_sim() {
    newer_format_version_is_refused(Place::sim());
}

#[test]
fn newer_format_version_is_refused_file() {
    newer_format_version_is_refused(Place::dir());
}

/// An upsert needs a merge operator; without one the whole batch is refused before anything is
/// logged, and the database stays usable.
#[test]
fn upsert_without_a_merge_operator_changes_nothing() {
    let place = Place::sim();
    let db = place.open(Options::default()).unwrap();
    db.put(b"k", b"v").unwrap();
    let before = files(&place);
    let mut batch = WriteBatch::new();
    batch.put(b"other", b"x").upsert(b"k", 1u64.to_le_bytes());
    match db.write(batch) {
        Err(Error::InvalidOptions(why)) => assert!(why.contains("merge operator"), "{why}"),
        other => panic!("expected InvalidOptions, got {other:?}"),
    }
    assert!(matches!(
        db.upsert(b"k", [1]),
        Err(Error::InvalidOptions(_))
    ));
    assert_eq!(files(&place), before, "a refused upsert changed the files");
    assert_eq!(db.get(b"other").unwrap(), None);
    db.put(b"still", b"writable").unwrap();
}
