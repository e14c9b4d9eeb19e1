//! Databases written by an earlier build open, check clean and read back: the on-disk format
//! (superblocks, translation table, blocks of every kind, log records) is a promise that a
//! change of code must keep.
//!
//! `tests/fixtures/<name>/` holds the files of small databases made once by
//! `make_fixtures` (run with `--ignored`; it makes the missing ones and remakes none unless
//! `STRATA_FIXTURES_REMAKE` is set, since a remade fixture proves nothing about the old format). Each fixture's contents
//! follow from a seeded script of operations, so the expected map is recomputed here without
//! any engine code: puts small and blob-sized, deletes, range deletes and `AddU64` upserts,
//! with a checkpoint in the middle and the last part left only in the log (the database was
//! dropped without a close, as a crash would), so opening it replays records too.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{add_u64, remove_range, Rng};
use strata::{AddU64, Db, Durability, Options};

struct Fixture {
    name: &'static str,
    options: fn() -> Options,
    ops: usize,
    seed: u64,
    /// Every inline value this long (as `AddU64`'s are), not 8 to 107 bytes: records of one
    /// size, which shaped partitions write without lengths.
    one_size: bool,
}

const FIXTURES: &[Fixture] = &[
    Fixture {
        name: "btree-4k",
        options: || Options::default().btree(4096),
        ops: 3000,
        seed: 1,
        one_size: false,
    },
    // Leaves with fixed basements (block kind 18), from before the compact ones.
    Fixture {
        name: "betree-16k",
        options: || Options::default().betree(16 << 10, 4, 1024),
        ops: 12000,
        seed: 2,
        one_size: false,
    },
    // Leaves with compact basements (block kind 32).
    Fixture {
        name: "betree-16k-compact",
        options: || Options::default().betree(16 << 10, 4, 1024),
        ops: 12000,
        seed: 3,
        one_size: false,
    },
    // Leaves, internal nodes and runs with shaped basements and segments (block kinds 33, 34
    // and 35), with records of one size so that some partitions are written in form 1.
    Fixture {
        name: "betree-16k-shaped",
        options: || Options::default().betree(16 << 10, 4, 1024),
        ops: 12000,
        seed: 4,
        one_size: true,
    },
];

enum Op {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    DeleteRange(Vec<u8>, Vec<u8>),
    Upsert(Vec<u8>, u64),
    Checkpoint,
}

fn key(i: u64) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

/// The fixture's operations: deterministic in its seed, the same for every build.
fn script(f: &Fixture) -> Vec<Op> {
    let mut rng = Rng::new(f.seed);
    let mut ops = Vec::with_capacity(f.ops + 1);
    for n in 0..f.ops {
        if n == f.ops * 2 / 3 {
            ops.push(Op::Checkpoint);
        }
        let k = rng.next_u64() % 2000;
        let op = match rng.next_u64() % 100 {
            0..=59 => {
                // Every 25th value is larger than a B+-tree leaf's quarter: a blob.
                let len = if rng.next_u64().is_multiple_of(25) {
                    3000
                } else {
                    let len = 8 + (rng.next_u64() % 100) as usize;
                    if f.one_size {
                        8
                    } else {
                        len
                    }
                };
                let byte = rng.next_u64() as u8;
                let val: Vec<u8> = (0..len).map(|i| byte.wrapping_add(i as u8)).collect();
                Op::Put(key(k), val)
            }
            60..=74 => Op::Delete(key(k)),
            75..=77 => Op::DeleteRange(key(k), key(k + 1 + rng.next_u64() % 40)),
            _ => Op::Upsert(key(k), rng.next_u64() % 1000),
        };
        ops.push(op);
    }
    ops
}

fn expected(ops: &[Op]) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut m = BTreeMap::new();
    for op in ops {
        match op {
            Op::Put(k, v) => {
                m.insert(k.clone(), v.clone());
            }
            Op::Delete(k) => {
                m.remove(k);
            }
            Op::DeleteRange(a, b) => remove_range(&mut m, a, b),
            Op::Upsert(k, n) => {
                let v = add_u64(m.get(k).map(|v| v.as_slice()), *n);
                m.insert(k.clone(), v);
            }
            Op::Checkpoint => {}
        }
    }
    m
}

fn fixture_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn options(f: &Fixture) -> Options {
    (f.options)()
        .merge_operator(AddU64)
        .durability(Durability::Sync)
        .cache_bytes(1 << 20)
}

#[test]
#[ignore = "writes tests/fixtures; run once with the build whose format the fixtures keep"]
fn make_fixtures() {
    let remake = std::env::var_os("STRATA_FIXTURES_REMAKE").is_some();
    for f in FIXTURES {
        let dir = fixture_dir(f.name);
        if dir.exists() {
            if !remake {
                eprintln!("{} exists: kept", dir.display());
                continue;
            }
            std::fs::remove_dir_all(&dir).unwrap();
        }
        let db = Db::open(&dir, options(f)).unwrap();
        for op in script(f) {
            match op {
                Op::Put(k, v) => db.put(k, v).unwrap(),
                Op::Delete(k) => db.delete(k).unwrap(),
                Op::DeleteRange(a, b) => db.delete_range(a, b).unwrap(),
                Op::Upsert(k, n) => db.upsert(k, n.to_le_bytes()).unwrap(),
                Op::Checkpoint => db.checkpoint().unwrap(),
            }
        }
        // Every write was synced; leave the tail in the log, as a crash would.
        std::mem::forget(db);
    }
}

#[test]
fn fixtures_from_an_earlier_build_open_check_clean_and_read_back() {
    for f in FIXTURES {
        let src = fixture_dir(f.name);
        assert!(src.is_dir(), "fixture {} is missing", src.display());
        // Opening replays and may checkpoint: work on a copy.
        let tmp = tempfile::tempdir().unwrap();
        let mut files = 0;
        for entry in std::fs::read_dir(&src).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), tmp.path().join(entry.file_name())).unwrap();
            files += 1;
        }
        assert!(files >= 2, "fixture {} has a data file and a log", f.name);
        let want = expected(&script(f));
        assert!(want.len() > 500, "the script leaves a real database");
        for round in 0..2 {
            let db = Db::open(tmp.path(), options(f).create_if_missing(false)).unwrap();
            let report = db.check().unwrap();
            assert!(report.blocks_verified > 0, "{}: check read blocks", f.name);
            if round == 0 {
                // The fixture holds what it claims to: a tree of more than one level, blobs,
                // and for the Bε-tree, buffered messages or spilled runs.
                let st = db.metrics().engine;
                eprintln!("{}: {st:?}", f.name);
                assert!(st.height >= 2, "{}: height {}", f.name, st.height);
                assert!(st.blobs > 0, "{}: no blobs", f.name);
                if st.engine == "betree" {
                    assert!(
                        st.detail("runs") > 0 && st.detail("buffered_messages") > 0,
                        "{}: no runs",
                        f.name
                    );
                }
            }
            let got = common::dump(&db);
            assert_eq!(got.len(), want.len(), "{} round {round}: key count", f.name);
            assert!(got == want, "{} round {round}: contents differ", f.name);
            for (k, v) in want.iter().step_by(97) {
                assert_eq!(db.get(k).unwrap().as_ref(), Some(v), "{}: get", f.name);
            }
            db.close().unwrap();
        }
        // Every key written again (to its own value): every leaf is rewritten in the kind
        // written today, beside blocks still of the fixture's, and reads back the same.
        let db = Db::open(tmp.path(), options(f).create_if_missing(false)).unwrap();
        for (k, v) in &want {
            db.put(k, v).unwrap();
        }
        db.close().unwrap();
        let db = Db::open(tmp.path(), options(f).create_if_missing(false)).unwrap();
        db.check().unwrap();
        assert!(
            common::dump(&db) == want,
            "{}: contents differ rewritten",
            f.name
        );
        db.close().unwrap();
    }
}
