//! The versioned dictionary against its reference, for both engines behind `VersionedDb`:
//! random clones, puts, deletes, point and range reads (both directions), visitor scans
//! (`for_each_at`, both directions, stopped early or not), diffs and version deletes,
//! compared after every step with `VersionedMap` (a map per version), with
//! checkpoints, clean reopens and power losses (a simulated disk that loses every unsynced
//! write, or keeps a random part of them) mixed in. The engines run tiny: the SDA with a
//! 200-byte buffer and level-0 arrays of 2 entries (flushes, merges and density splits all the
//! time), the CoW B-tree with 4-entry leaves, fanout 4 and a 16 KiB pool (splits, shadowing
//! and eviction all the time).
//!
//! Asserted: every read equals the reference's; a change the reference refuses is refused
//! with the same error kind and changes nothing; with `Durability::Sync` a power loss loses
//! no acknowledged change, with `Durability::None` it leaves some prefix of the changes, at
//! least through the last checkpoint or close; after every reopen `check` passes (checksums,
//! the SDA's density and stratification, the CoW B-tree's reference counts, no leaked block)
//! and every live version's contents match. Then IO faults at many points of a run (crash,
//! failure once, torn write), the bad-input cases one by one, and edge cases. `long_sim` is
//! `#[ignore]`d (about two minutes).

mod common;

use std::ops::Bound::{self, Excluded, Included, Unbounded};

use common::wrap::{pass, pass_write, Hooked, WrapEnv};
use proptest::prelude::*;
use strata::storage::SimEnv;
use strata::{
    CowConfig, Db, Durability, Error, Options, SdaConfig, Version, VersionInfo, VersionedDb,
    VersionedEngineOptions, VersionedMap, VersionedOptions, WriteBatch, ROOT_VERSION,
};

/// The two engines behind `VersionedDb`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Sda,
    Cow,
}

const KINDS: [Kind; 2] = [Kind::Sda, Kind::Cow];

/// Engines larger than `opts`'s, for tests of thousands of changes (in debug builds too).
fn roomier(kind: Kind) -> VersionedEngineOptions {
    match kind {
        Kind::Sda => VersionedEngineOptions::Sda(SdaConfig {
            buffer_bytes: 16 << 10,
            level0_entries: 64,
            block_bytes: 1 << 10,
            ..SdaConfig::default()
        }),
        Kind::Cow => VersionedEngineOptions::Cow(CowConfig {
            leaf_entries: 32,
            fanout: 16,
            cache_bytes: 256 << 10,
        }),
    }
}

fn opts(kind: Kind, durability: Durability) -> VersionedOptions {
    let engine = match kind {
        // Smaller still than `tiny`: a flush every few writes, merges and splits all the time.
        Kind::Sda => VersionedEngineOptions::Sda(SdaConfig {
            buffer_bytes: 200,
            level0_entries: 2,
            block_bytes: 128,
            ..SdaConfig::tiny()
        }),
        // Leaves of 4 entries and a pool of 16 KiB: splits, shadowing and eviction throughout.
        Kind::Cow => VersionedEngineOptions::Cow(CowConfig::tiny()),
    };
    VersionedOptions {
        engine,
        durability,
        checkpoint_wal_bytes: 8 << 10,
        ..VersionedOptions::default()
    }
}

#[derive(Clone, Debug)]
enum Step {
    /// Versions are picked by index among the live ones (or the deleted ones, `Bad*`) when the
    /// step runs.
    Put(usize, u8, u16),
    Delete(usize, u8),
    /// Puts (a value's seed) and deletes (None) at one version, as one change (`write_at`).
    Batch(usize, Vec<(u8, Option<u16>)>),
    Clone(usize),
    DeleteVersion(usize),
    Get(usize, u8),
    Range(usize, u8, u8, bool),
    /// `for_each_at` over the bounds, either way, its visitor stopping after the given number
    /// of entries (0: never).
    Visit(usize, u8, u8, bool, u8),
    Diff(usize, usize),
    /// A write to a deleted version, or one never made.
    BadPut(usize, u8),
    Checkpoint,
    Reopen,
    /// Drop without closing, then a power loss: every unsynced write lost (None) or a random
    /// part of them kept, per page (the seed). With `Durability::None` the database comes back
    /// as some prefix of the changes, at least through the last checkpoint or close.
    PowerLoss(Option<u64>),
}

fn step() -> impl Strategy<Value = Step> {
    let v = 0..64usize;
    prop_oneof![
        30 => (v.clone(), 0..24u8, any::<u16>()).prop_map(|(v, k, x)| Step::Put(v, k, x)),
        8 => (v.clone(), 0..24u8).prop_map(|(v, k)| Step::Delete(v, k)),
        5 => (
            v.clone(),
            proptest::collection::vec((0..24u8, proptest::option::of(any::<u16>())), 0..6)
        )
            .prop_map(|(v, ops)| Step::Batch(v, ops)),
        6 => v.clone().prop_map(Step::Clone),
        3 => v.clone().prop_map(Step::DeleteVersion),
        10 => (v.clone(), 0..24u8).prop_map(|(v, k)| Step::Get(v, k)),
        6 => (v.clone(), 0..24u8, 0..24u8, any::<bool>())
            .prop_map(|(v, a, b, r)| Step::Range(v, a, b, r)),
        6 => (v.clone(), 0..24u8, 0..24u8, any::<bool>(), 0..6u8)
            .prop_map(|(v, a, b, r, n)| Step::Visit(v, a, b, r, n)),
        2 => (v.clone(), v.clone()).prop_map(|(a, b)| Step::Diff(a, b)),
        2 => (v.clone(), 0..24u8).prop_map(|(v, k)| Step::BadPut(v, k)),
        1 => Just(Step::Checkpoint),
        1 => Just(Step::Reopen),
        1 => proptest::option::of(any::<u64>()).prop_map(Step::PowerLoss),
    ]
}

fn key(k: u8) -> Vec<u8> {
    format!("key{k:02}").into_bytes()
}

/// A value of a few to a few hundred bytes, so buffers fill at different rates.
fn value(x: u16) -> Vec<u8> {
    let len = 1 + (x as usize % 7) * (x as usize % 40);
    let mut v = format!("{x}:").into_bytes();
    v.resize(len.max(v.len()), b'.');
    v
}

fn same_outcome<T: PartialEq + std::fmt::Debug>(
    got: strata::Result<T>,
    want: strata::Result<T>,
    what: &str,
) -> Result<(), TestCaseError> {
    match (got, want) {
        (Ok(g), Ok(w)) => prop_assert_eq!(g, w, "{}", what),
        (Err(Error::BadVersion { .. }), Err(Error::BadVersion { .. })) => {}
        (g, w) => prop_assert!(false, "{}: got {:?}, the reference {:?}", what, g, w),
    }
    Ok(())
}

fn bounds(a: u8, b: u8) -> (Vec<u8>, Vec<u8>) {
    (key(a.min(b)), key(a.max(b)))
}

/// Every live version's whole contents, and `check`.
fn all_match(db: &VersionedDb, m: &VersionedMap) -> Result<(), TestCaseError> {
    db.check().map_err(|e| TestCaseError::fail(e.to_string()))?;
    let live: Vec<Version> = m.versions().live().collect();
    let got: Vec<Version> = db
        .versions()
        .unwrap()
        .iter()
        .filter(|i| !i.deleted)
        .map(|i| i.version)
        .collect();
    prop_assert_eq!(&got, &live);
    for v in live {
        let got: Vec<_> = db
            .range_at::<&[u8], _>(v, ..)
            .unwrap()
            .collect::<strata::Result<_>>()
            .unwrap();
        let want = m.range_at(v, Unbounded, Unbounded).unwrap();
        prop_assert_eq!(&got, &want, "version {}", v);
        // The visitor sees the same, both ways.
        for rev in [false, true] {
            let mut seen = Vec::new();
            db.for_each_at::<&[u8], _>(v, .., rev, |k, x| {
                seen.push((k.to_vec(), x.to_vec()));
                true
            })
            .unwrap();
            if rev {
                seen.reverse();
            }
            prop_assert_eq!(&seen, &want, "visit version {} rev {}", v, rev);
        }
    }
    Ok(())
}

fn run(kind: Kind, steps: Vec<Step>, durability: Durability) -> Result<(), TestCaseError> {
    let env = SimEnv::new();
    let mut db = VersionedDb::open_in(&env, opts(kind, durability)).unwrap();
    let mut m = VersionedMap::new();
    let mut gone: Vec<Version> = Vec::new();
    // The changes the reference accepted, and how many of them are surely durable.
    let mut history: Vec<Step> = Vec::new();
    let mut durable = 0;
    for (i, s) in steps.into_iter().enumerate() {
        let live: Vec<Version> = m.versions().live().collect();
        let pick = |x: usize| live[x % live.len()];
        match s {
            Step::Put(..)
            | Step::Delete(..)
            | Step::Batch(..)
            | Step::Clone(..)
            | Step::DeleteVersion(..) => {
                // Resolve the version, then apply to both; keep what the reference accepted.
                let r = match s {
                    Step::Put(v, k, x) => Step::Put(pick(v) as usize, k, x),
                    Step::Delete(v, k) => Step::Delete(pick(v) as usize, k),
                    Step::Batch(v, ops) => Step::Batch(pick(v) as usize, ops),
                    Step::Clone(v) => Step::Clone(pick(v) as usize),
                    // Keep one live version, so that the run goes on.
                    Step::DeleteVersion(_) if live.len() < 2 => continue,
                    Step::DeleteVersion(v) => Step::DeleteVersion(pick(v) as usize),
                    _ => unreachable!(),
                };
                let want = try_model(&mut m, &r);
                let accepted = want.is_ok();
                same_outcome(apply_db(&db, &r), want, "change")?;
                if accepted {
                    if let Step::DeleteVersion(v) = r {
                        gone.push(v as Version);
                    }
                    history.push(r);
                }
            }
            Step::Get(v, k) => {
                let v = pick(v);
                same_outcome(db.get_at(v, key(k)), m.get_at(v, &key(k)), "get")?;
            }
            Step::Range(v, a, b, rev) => {
                let v = pick(v);
                let (lo, hi) = bounds(a, b);
                let want = m.range_at(v, Included(&lo[..]), Excluded(&hi[..])).unwrap();
                let it = db.range_at(v, lo.clone()..hi.clone()).unwrap();
                if rev {
                    let got: Vec<_> = it.rev().collect::<strata::Result<_>>().unwrap();
                    let mut want = want;
                    want.reverse();
                    prop_assert_eq!(got, want, "range rev at step {}", i);
                } else {
                    let got: Vec<_> = it.collect::<strata::Result<_>>().unwrap();
                    prop_assert_eq!(got, want, "range at step {}", i);
                }
            }
            Step::Visit(v, a, b, rev, stop) => {
                let v = pick(v);
                let (lo, hi) = bounds(a, b);
                let mut want = m.range_at(v, Included(&lo[..]), Excluded(&hi[..])).unwrap();
                if rev {
                    want.reverse();
                }
                if stop > 0 {
                    want.truncate(stop as usize);
                }
                let mut got = Vec::new();
                db.for_each_at(v, lo..hi, rev, |k, x| {
                    got.push((k.to_vec(), x.to_vec()));
                    stop == 0 || got.len() < stop as usize
                })
                .unwrap();
                prop_assert_eq!(got, want, "visit at step {}", i);
            }
            Step::Diff(a, b) => {
                let (a, b) = (pick(a), pick(b));
                same_outcome(
                    db.diff(a, b),
                    m.diff(a, b, Bound::Unbounded, Bound::Unbounded),
                    "diff",
                )?;
            }
            Step::BadPut(v, k) => {
                // A power loss may have taken back a delete, and a clone may since have made
                // the same number again.
                gone = m_gone(&m, &gone);
                let v = if gone.is_empty() {
                    1_000_000 + v as u64
                } else {
                    gone[v % gone.len()]
                };
                let got = db.put_at(v, key(k), b"x");
                prop_assert!(
                    matches!(got, Err(Error::BadVersion { version, .. }) if version == v),
                    "{:?}",
                    got
                );
                prop_assert!(m.put_at(v, &key(k), b"x").is_err());
            }
            Step::Checkpoint => {
                db.checkpoint().unwrap();
                durable = history.len();
            }
            Step::Reopen => {
                db.close().unwrap();
                durable = history.len();
                db = VersionedDb::open_in(&env, opts(kind, durability)).unwrap();
                all_match(&db, &m)?;
            }
            Step::PowerLoss(seed) => {
                drop(db);
                match seed {
                    None => env.crash(),
                    Some(seed) => env.power_cut(seed),
                }
                db = VersionedDb::open_in(&env, opts(kind, durability)).unwrap();
                if durability == Durability::Sync {
                    // Every acknowledged change was synced.
                    all_match(&db, &m)?;
                } else {
                    // Some prefix of the changes, at least through the last durable point.
                    let got = dump(&db);
                    let mut prefix = VersionedMap::new();
                    for r in &history[..durable] {
                        try_model(&mut prefix, r).unwrap();
                    }
                    let mut n = durable;
                    while dump_model(&prefix) != got {
                        prop_assert!(n < history.len(), "no prefix of the changes matches");
                        try_model(&mut prefix, &history[n]).unwrap();
                        n += 1;
                    }
                    history.truncate(n);
                    durable = n;
                    m = prefix;
                    db.check().map_err(|e| TestCaseError::fail(e.to_string()))?;
                }
            }
        }
    }
    all_match(&db, &m)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn prop_sda_sync(steps in proptest::collection::vec(step(), 1..300)) {
        run(Kind::Sda, steps, Durability::Sync)?;
    }

    #[test]
    fn prop_sda_none(steps in proptest::collection::vec(step(), 1..300)) {
        run(Kind::Sda, steps, Durability::None)?;
    }

    #[test]
    fn prop_cow_sync(steps in proptest::collection::vec(step(), 1..300)) {
        run(Kind::Cow, steps, Durability::Sync)?;
    }

    #[test]
    fn prop_cow_none(steps in proptest::collection::vec(step(), 1..300)) {
        run(Kind::Cow, steps, Durability::None)?;
    }
}

/// Longer sequences, more of them, both engines and both durabilities: about two minutes.
#[test]
#[ignore]
fn long_sim() {
    for (kind, durability) in KINDS
        .into_iter()
        .flat_map(|k| [(k, Durability::Sync), (k, Durability::None)])
    {
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
            cases: 256,
            ..ProptestConfig::default()
        });
        runner
            .run(&proptest::collection::vec(step(), 200..1500), |s| {
                run(kind, s, durability)
            })
            .unwrap();
    }
}

#[test]
fn bad_versions_are_refused_and_change_nothing() {
    for kind in KINDS {
        each_bad_versions_are_refused_and_change_nothing(kind);
    }
}

fn each_bad_versions_are_refused_and_change_nothing(kind: Kind) {
    let env = SimEnv::new();
    let db = VersionedDb::open_in(&env, opts(kind, Durability::Sync)).unwrap();
    db.put_at(ROOT_VERSION, "a", "1").unwrap();
    let child = db.clone_version(ROOT_VERSION).unwrap();
    let io_before = db.data_io();
    let is_bad = |r: strata::Result<()>, v: Version, why: &str| match r {
        Err(Error::BadVersion { version, why: w }) => {
            assert_eq!(version, v);
            assert!(w.contains(why), "{w}");
        }
        other => panic!("{other:?}"),
    };
    // The root was cloned: internal, read-only.
    is_bad(db.put_at(ROOT_VERSION, "a", "2"), ROOT_VERSION, "internal");
    is_bad(db.delete_at(ROOT_VERSION, "a"), ROOT_VERSION, "internal");
    let mut b = WriteBatch::new();
    b.put("a", "2").delete("b");
    is_bad(
        db.write_at(ROOT_VERSION, b.clone()),
        ROOT_VERSION,
        "internal",
    );
    is_bad(
        db.write_at(ROOT_VERSION, WriteBatch::new()),
        ROOT_VERSION,
        "internal",
    );
    is_bad(db.write_at(77, b), 77, "no such version");
    // Never made.
    is_bad(db.put_at(77, "a", "2"), 77, "no such version");
    is_bad(db.get_at(77, "a").map(|_| ()), 77, "no such version");
    is_bad(db.clone_version(77).map(|_| ()), 77, "no such version");
    is_bad(db.delete_version(77), 77, "no such version");
    is_bad(
        db.range_at::<&str, _>(77, ..).map(|_| ()),
        77,
        "no such version",
    );
    is_bad(db.diff(ROOT_VERSION, 77).map(|_| ()), 77, "no such version");
    let mut visited = 0;
    let mut count = |_: &[u8], _: &[u8]| {
        visited += 1;
        true
    };
    is_bad(
        db.for_each_at::<&str, _>(77, .., false, &mut count),
        77,
        "no such version",
    );
    // Deleted.
    db.delete_version(child).unwrap();
    is_bad(db.put_at(child, "a", "2"), child, "deleted");
    is_bad(db.get_at(child, "a").map(|_| ()), child, "deleted");
    is_bad(
        db.for_each_at::<&str, _>(child, .., true, &mut count),
        child,
        "deleted",
    );
    assert_eq!(
        visited, 0,
        "a bad version is refused before anything is visited"
    );
    is_bad(db.delete_version(child), child, "deleted");
    // Too large a key; a batch whose second change is bad, or which asks for what a versioned
    // database does not have, is refused whole (its first put is not applied either).
    let other = db.clone_version(ROOT_VERSION).unwrap();
    assert!(matches!(
        db.put_at(other, vec![0u8; 5000], "v"),
        Err(Error::KeyTooLarge { .. })
    ));
    let mut b = WriteBatch::new();
    b.put("a", "3").put(vec![0u8; 5000], "v");
    assert!(matches!(
        db.write_at(other, b),
        Err(Error::KeyTooLarge { .. })
    ));
    let mut b = WriteBatch::new();
    b.put("a", "3")
        .put("c", vec![0u8; strata::MAX_VALUE_LEN + 1]);
    assert!(matches!(
        db.write_at(other, b),
        Err(Error::ValueTooLarge { .. })
    ));
    for bad in [
        WriteBatch::new().put("a", "3").upsert("a", "x").clone(),
        WriteBatch::new()
            .put("a", "3")
            .delete_range("a", "b")
            .clone(),
    ] {
        let got = db.write_at(other, bad);
        assert!(
            matches!(&got, Err(Error::Unsupported(w)) if w.contains("puts and deletes")),
            "{got:?}"
        );
    }
    assert_eq!(db.get_at(other, "a").unwrap(), Some(b"1".to_vec()));
    assert_eq!(db.data_io().writes, io_before.writes, "nothing written");
    assert_eq!(db.get_at(ROOT_VERSION, "a").unwrap(), Some(b"1".to_vec()));
    // Nothing refused reached the log either: a reopen replays the same state.
    drop(db);
    env.crash();
    let db = VersionedDb::open_in(&env, opts(kind, Durability::Sync)).unwrap();
    let versions: Vec<(Version, bool)> = db
        .versions()
        .unwrap()
        .iter()
        .map(|i| (i.version, i.leaf))
        .collect();
    assert_eq!(versions, vec![(ROOT_VERSION, false), (other, true)]);
    assert_eq!(db.get_at(other, "a").unwrap(), Some(b"1".to_vec()));
    db.check().unwrap();
}

#[test]
fn clones_isolate_writes_and_ranges_run_both_ways() {
    for kind in KINDS {
        each_clones_isolate_writes_and_ranges_run_both_ways(kind);
    }
}

fn each_clones_isolate_writes_and_ranges_run_both_ways(kind: Kind) {
    let env = SimEnv::new();
    let db = VersionedDb::open_in(&env, opts(kind, Durability::None)).unwrap();
    for k in 0..100u32 {
        db.put_at(ROOT_VERSION, format!("{k:03}"), format!("r{k}"))
            .unwrap();
    }
    let a = db.clone_version(ROOT_VERSION).unwrap();
    let b = db.clone_version(ROOT_VERSION).unwrap();
    for k in (0..100u32).step_by(3) {
        db.put_at(a, format!("{k:03}"), format!("a{k}")).unwrap();
    }
    for k in (0..100u32).step_by(5) {
        db.delete_at(b, format!("{k:03}")).unwrap();
    }
    let snap = db.clone_version(a).unwrap();
    assert_eq!(
        db.get_at(ROOT_VERSION, "003").unwrap(),
        Some(b"r3".to_vec())
    );
    assert_eq!(db.get_at(a, "003").unwrap(), Some(b"a3".to_vec()));
    assert_eq!(db.get_at(snap, "003").unwrap(), Some(b"a3".to_vec()));
    assert_eq!(db.get_at(b, "005").unwrap(), None);
    assert_eq!(db.get_at(b, "003").unwrap(), Some(b"r3".to_vec()));
    let fwd: Vec<_> = db
        .range_at(b, "010".."020")
        .unwrap()
        .map(|e| e.unwrap().0)
        .collect();
    let mut back: Vec<_> = db
        .range_at(b, "010".."020")
        .unwrap()
        .rev()
        .map(|e| e.unwrap().0)
        .collect();
    back.reverse();
    assert_eq!(fwd, back);
    assert_eq!(fwd.len(), 8, "10 keys less 010 and 015");
    let d = db.diff(a, b).unwrap();
    // Keys rewritten at a (34) or deleted at b (20), less the 7 multiples of 15 that are both.
    assert_eq!(d.len(), 34 + 20 - 7);
    assert!(d.windows(2).all(|w| w[0].0 < w[1].0));
    let st = db.stats().unwrap();
    assert!(
        match kind {
            Kind::Sda => st.detail("merges") > 0 && st.detail("flushes") > 0,
            Kind::Cow => st.detail("copies") > 0 && st.detail("shared_nodes") > 0,
        },
        "{st:?}"
    );
    db.check().unwrap();
}

#[test]
fn a_db_directory_is_not_a_versioned_one_and_back() {
    let kind = Kind::Cow;
    let env = SimEnv::new();
    Db::open_in(&env, Options::default())
        .unwrap()
        .close()
        .unwrap();
    assert!(matches!(
        VersionedDb::open_in(&env, opts(kind, Durability::Sync)),
        Err(Error::NotADatabase { .. })
    ));
    let env = SimEnv::new();
    VersionedDb::open_in(&env, opts(kind, Durability::Sync))
        .unwrap()
        .close()
        .unwrap();
    let err = Db::open_in(&env, Options::default())
        .err()
        .expect("refused");
    assert!(err.to_string().contains("engine tag"), "{err}");
}

/// Everything a database shows: the version tree (ghosts and the next clone's number
/// included, which tell apart states with the same live contents), and each live version's
/// whole contents.
type Dump = (
    Vec<VersionInfo>,
    Version,
    Vec<(Version, Vec<(Vec<u8>, Vec<u8>)>)>,
);

fn dump(db: &VersionedDb) -> Dump {
    let versions = db.versions().unwrap();
    let contents = versions
        .iter()
        .filter(|i| !i.deleted)
        .map(|i| {
            (
                i.version,
                db.range_at::<&[u8], _>(i.version, ..)
                    .unwrap()
                    .collect::<strata::Result<_>>()
                    .unwrap(),
            )
        })
        .collect();
    (versions, db.next_version().unwrap(), contents)
}

fn dump_model(m: &VersionedMap) -> Dump {
    let contents = m
        .versions()
        .live()
        .map(|v| (v, m.range_at(v, Unbounded, Unbounded).unwrap()))
        .collect();
    (
        m.versions().versions(),
        m.versions().next_version(),
        contents,
    )
}

/// One change, picked by a deterministic generator among those the model accepts.
fn random_change(rng: &mut u64, m: &VersionedMap) -> Step {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    let r = *rng;
    let leaves: Vec<Version> = m
        .versions()
        .versions()
        .iter()
        .filter(|i| i.leaf)
        .map(|i| i.version)
        .collect();
    if leaves.is_empty() {
        // Every leaf deleted: a clone of an internal version makes one.
        let live: Vec<Version> = m.versions().live().collect();
        return Step::Clone(live[(r >> 8) as usize % live.len()] as usize);
    }
    let leaf = leaves[(r >> 8) as usize % leaves.len()];
    match r % 100 {
        0..=59 => Step::Put(leaf as usize, (r >> 20) as u8 % 24, (r >> 32) as u16),
        60..=69 => {
            // Up to four changes, a put or a delete each, from the draw's upper bits.
            let ops = (0..1 + (r >> 60) % 4)
                .map(|i| {
                    let bits = r >> (20 + 10 * i);
                    let put = bits & 1 == 0;
                    ((bits >> 1) as u8 % 24, put.then_some((bits >> 5) as u16))
                })
                .collect();
            Step::Batch(leaf as usize, ops)
        }
        70..=84 => Step::Delete(leaf as usize, (r >> 20) as u8 % 24),
        85..=95 => Step::Clone(leaf as usize),
        _ if m.versions().live().count() > 2 => Step::DeleteVersion(leaf as usize),
        _ => Step::Clone(leaf as usize),
    }
}

/// Apply `s` (whose numbers are versions, not indices) to the database, or to the model.
fn apply_db(db: &VersionedDb, s: &Step) -> strata::Result<()> {
    match *s {
        Step::Put(v, k, x) => db.put_at(v as u64, key(k), value(x)),
        Step::Delete(v, k) => db.delete_at(v as u64, key(k)),
        Step::Batch(v, ref ops) => db.write_at(v as u64, batch(ops)),
        Step::Clone(v) => db.clone_version(v as u64).map(|_| ()),
        Step::DeleteVersion(v) => db.delete_version(v as u64),
        _ => unreachable!("changes only"),
    }
}

/// A batch's changes as a `WriteBatch`.
fn batch(ops: &[(u8, Option<u16>)]) -> WriteBatch {
    let mut b = WriteBatch::new();
    for &(k, x) in ops {
        match x {
            Some(x) => b.put(key(k), value(x)),
            None => b.delete(key(k)),
        };
    }
    b
}

/// A batch applied to the reference: refused whole at a version no write may go to, else
/// its changes in order.
fn batch_model(m: &mut VersionedMap, v: Version, ops: &[(u8, Option<u16>)]) -> strata::Result<()> {
    m.versions().check_writable(v)?;
    for &(k, x) in ops {
        match x {
            Some(x) => m.put_at(v, &key(k), &value(x))?,
            None => m.delete_at(v, &key(k))?,
        }
    }
    Ok(())
}

/// Versions of `gone` that the reference now refuses (after a power loss that took back
/// some version deletes, a version may be live again).
fn m_gone(m: &VersionedMap, gone: &[Version]) -> Vec<Version> {
    gone.iter()
        .copied()
        .filter(|&v| m.versions().check_live(v).is_err())
        .collect()
}

/// Apply `s` (whose numbers are versions) to the reference, as the database would.
fn try_model(m: &mut VersionedMap, s: &Step) -> strata::Result<()> {
    match *s {
        Step::Put(v, k, x) => m.put_at(v as u64, &key(k), &value(x)),
        Step::Delete(v, k) => m.delete_at(v as u64, &key(k)),
        Step::Batch(v, ref ops) => batch_model(m, v as u64, ops),
        Step::Clone(v) => m.clone_version(v as u64).map(|_| ()),
        Step::DeleteVersion(v) => m.delete_version(v as u64),
        _ => unreachable!("changes only"),
    }
}

fn apply_model(m: &mut VersionedMap, s: &Step) {
    match *s {
        Step::Put(v, k, x) => m.put_at(v as u64, &key(k), &value(x)).unwrap(),
        Step::Delete(v, k) => m.delete_at(v as u64, &key(k)).unwrap(),
        Step::Batch(v, ref ops) => batch_model(m, v as u64, ops).unwrap(),
        Step::Clone(v) => {
            m.clone_version(v as u64).unwrap();
        }
        Step::DeleteVersion(v) => m.delete_version(v as u64).unwrap(),
        _ => unreachable!("changes only"),
    }
}

/// A fault at IO number n of a run, for n over 44 points (flushes, merges, checkpoints and log
/// appends alike): a process crash (that IO and every later one fail), sometimes with a power
/// loss; an IO that fails once, then a power loss; or a torn write (a prefix of its sectors
/// lands, the write fails), then a power loss. The change that met the fault fails, the
/// database refuses changes after it, and a reopen shows every acknowledged change and the
/// failed one wholly or not at all.
#[test]
fn a_fault_at_any_io_keeps_every_acknowledged_change() {
    for kind in KINDS {
        each_a_fault_at_any_io_keeps_every_acknowledged_change(kind, (1..400).step_by(9));
    }
}

/// The same at every IO from the first to the 1,500th, both engines (`cargo test -p strata
/// --release --test versioned -- --ignored`): checkpoints every 8 KiB of log meet merges
/// running on their thread at every step.
#[test]
#[ignore]
fn a_fault_at_every_io_keeps_every_acknowledged_change() {
    for kind in KINDS {
        each_a_fault_at_any_io_keeps_every_acknowledged_change(kind, 1..1_500);
    }
}

/// A fault at each IO number of `at`, one run each.
fn each_a_fault_at_any_io_keeps_every_acknowledged_change(
    kind: Kind,
    at: impl Iterator<Item = u64>,
) {
    let mut failures = 0;
    for n in at {
        let env = SimEnv::new();
        let db = VersionedDb::open_in(&env, opts(kind, Durability::Sync)).unwrap();
        let mut m = VersionedMap::new();
        let mut rng = 0x2545_f491_4f6c_dd1d ^ n;
        for _ in 0..40 {
            let s = random_change(&mut rng, &m);
            apply_db(&db, &s).unwrap();
            apply_model(&mut m, &s);
        }
        let fault = n % 4;
        match fault {
            0 | 1 => env.disk().kill_at_io(n),
            2 => env.disk().fail_io_after(n, false),
            _ => env.disk().tear_write_after(1 + n / 8, (n % 8) as usize),
        }
        let mut failed = None;
        for _ in 0..200 {
            let s = random_change(&mut rng, &m);
            match apply_db(&db, &s) {
                Ok(()) => apply_model(&mut m, &s),
                Err(e) => {
                    assert!(
                        matches!(e, Error::Io { .. } | Error::Poisoned { .. }),
                        "{e:?}"
                    );
                    failed = Some(s);
                    break;
                }
            }
        }
        let Some(failed) = failed else { continue };
        failures += 1;
        assert!(
            matches!(
                apply_db(&db, &Step::Clone(0)),
                Err(Error::Poisoned { .. } | Error::Io { .. })
            ),
            "refused after a failure"
        );
        drop(db);
        if fault == 1 {
            // A process crash alone: what was written stays.
            env.disk().clear_faults();
        } else {
            env.crash();
        }
        let db = VersionedDb::open_in(&env, opts(kind, Durability::Sync)).unwrap();
        db.check().unwrap();
        let got = dump(&db);
        if got != dump_model(&m) {
            apply_model(&mut m, &failed);
            assert_eq!(
                got,
                dump_model(&m),
                "{kind:?}, fault {fault} at {n}: neither without nor with {failed:?}"
            );
        }
        // It takes changes again.
        let live = m.versions().live().next().expect("a live version");
        assert_eq!(
            db.clone_version(live).unwrap(),
            m.clone_version(live).unwrap()
        );
    }
    assert!(failures > 30, "only {failures} runs met their fault");
}

/// Values far larger than a block or a node, and the empty key, through flushes, merges,
/// splits and a reopen.
/// The SDA's merges on a thread of their own (the default): random changes with larger
/// values than the other tests put, so that merges reach the size handed to the thread, read
/// back against the reference after every change, and through a reopen; some merges ran on
/// the thread, and flushes waited for them.
#[test]
fn merges_on_their_own_thread_keep_every_answer() {
    let env = SimEnv::new();
    let opts = opts(Kind::Sda, Durability::None);
    let mut db = VersionedDb::open_in(&env, opts.clone()).unwrap();
    let mut m = VersionedMap::new();
    let mut rng = 0x5851_f42d_4c95_7f2du64;
    let (mut background, mut stalls) = (0, 0);
    for round in 0..4 {
        for i in 0..600 {
            let s = match random_change(&mut rng, &m) {
                Step::Put(v, k, x) => {
                    let val = vec![x as u8; 40 + (x as usize % 200)];
                    db.put_at(v as u64, key(k), &val).unwrap();
                    m.put_at(v as u64, &key(k), &val).unwrap();
                    continue;
                }
                s => s,
            };
            apply_db(&db, &s).unwrap();
            apply_model(&mut m, &s);
            if i % 50 == 0 {
                assert_eq!(dump(&db), dump_model(&m), "round {round}, change {i}");
            }
        }
        let st = db.stats().unwrap();
        background += st.detail("background_merges");
        stalls += st.detail("stalls");
        db.check().unwrap();
        assert_eq!(dump(&db), dump_model(&m), "round {round}");
        drop(db);
        db = VersionedDb::open_in(&env, opts.clone()).unwrap();
        assert_eq!(dump(&db), dump_model(&m), "round {round}, reopened");
    }
    assert!(background > 20, "{background} merges on the thread");
    assert!(stalls > 0, "no flush waited for merges");
}

#[test]
fn large_values_and_the_empty_key_round_trip() {
    for kind in KINDS {
        let env = SimEnv::new();
        let db = VersionedDb::open_in(&env, opts(kind, Durability::None)).unwrap();
        let big = |i: u8| vec![i; 300_000 + i as usize];
        for i in 0..6u8 {
            db.put_at(ROOT_VERSION, [i], big(i)).unwrap();
        }
        db.put_at(ROOT_VERSION, b"", b"empty").unwrap();
        let a = db.clone_version(ROOT_VERSION).unwrap();
        db.put_at(a, [2u8], big(9)).unwrap();
        db.close().unwrap();
        let db = VersionedDb::open_in(&env, opts(kind, Durability::None)).unwrap();
        db.check().unwrap();
        assert_eq!(db.get_at(a, [2u8]).unwrap(), Some(big(9)));
        assert_eq!(db.get_at(ROOT_VERSION, [2u8]).unwrap(), Some(big(2)));
        assert_eq!(db.get_at(a, b"").unwrap(), Some(b"empty".to_vec()));
        let all: Vec<_> = db
            .range_at::<&[u8], _>(a, ..)
            .unwrap()
            .collect::<strata::Result<_>>()
            .unwrap();
        assert_eq!(all.len(), 7);
        assert_eq!(all[0].0, b"".to_vec());
        assert_eq!(all[3], (vec![2u8], big(9)), "{kind:?}");
    }
}

/// Deleting every version leaves an empty tree that stays empty across a reopen, with
/// nothing stored, and every version refused.
#[test]
fn deleting_every_version_frees_everything() {
    for kind in KINDS {
        let env = SimEnv::new();
        let db = VersionedDb::open_in(&env, opts(kind, Durability::Sync)).unwrap();
        for k in 0..50u8 {
            db.put_at(ROOT_VERSION, key(k), value(k as u16 * 7))
                .unwrap();
        }
        let a = db.clone_version(ROOT_VERSION).unwrap();
        db.put_at(a, key(1), b"a").unwrap();
        db.delete_version(ROOT_VERSION).unwrap();
        assert_eq!(
            db.get_at(a, key(2)).unwrap(),
            Some(value(14)),
            "through the ghost"
        );
        db.delete_version(a).unwrap();
        assert!(db.versions().unwrap().is_empty());
        db.close().unwrap();
        let db = VersionedDb::open_in(&env, opts(kind, Durability::Sync)).unwrap();
        assert!(db.versions().unwrap().is_empty());
        assert_eq!(db.next_version().unwrap(), a + 1);
        let report = db.check().unwrap();
        assert_eq!(report.keys, 0, "{kind:?}");
        assert!(matches!(
            db.clone_version(ROOT_VERSION),
            Err(Error::BadVersion { .. })
        ));
        let st = db.stats().unwrap();
        assert!(st.referenced_bytes <= 8192, "{kind:?}: {st:?}");
    }
}

/// Range iterators fetch pages as they go: taking the first 10 entries of a range of 2,000
/// reads a small part of what the whole range reads; a range walked from both ends at once,
/// past several pages each way, returns every key once, in order; and a key written to a leaf
/// after its iterator was made is seen if the iterator has not passed it yet.
#[test]
fn ranges_fetch_pages_as_they_go_from_both_ends() {
    for kind in KINDS {
        let engine = match kind {
            Kind::Sda => VersionedEngineOptions::Sda(SdaConfig {
                buffer_bytes: 16 << 10,
                level0_entries: 64,
                block_bytes: 1024,
                ..SdaConfig::tiny()
            }),
            Kind::Cow => VersionedEngineOptions::Cow(CowConfig {
                leaf_entries: 32,
                fanout: 16,
                ..CowConfig::tiny()
            }),
        };
        let env = SimEnv::new();
        let opts = VersionedOptions {
            engine,
            durability: Durability::None,
            ..VersionedOptions::default()
        };
        let db = VersionedDb::open_in(&env, opts).unwrap();
        let k = |i: u32| format!("k{i:05}").into_bytes();
        for i in 0..2000 {
            db.put_at(ROOT_VERSION, k(2 * i), [i as u8; 40]).unwrap();
        }
        let a = db.clone_version(ROOT_VERSION).unwrap();
        db.checkpoint().unwrap();
        // The levels settled, so that the arrays a read consults (and whose heads the first
        // read loads) do not depend on how far the merges' and flushes' threads got.
        db.finish_merges().unwrap();
        let read = |f: &dyn Fn() -> usize| {
            let before = db.data_io().bytes_read;
            let n = f();
            (n, db.data_io().bytes_read - before)
        };
        let (n, few) = read(&|| {
            let it = db.range_at::<&[u8], _>(ROOT_VERSION, ..).unwrap();
            it.take(10)
                .collect::<strata::Result<Vec<_>>>()
                .unwrap()
                .len()
        });
        assert_eq!(n, 10);
        let (n, all) = read(&|| {
            let it = db.range_at::<&[u8], _>(a, ..).unwrap();
            it.collect::<strata::Result<Vec<_>>>().unwrap().len()
        });
        assert_eq!(n, 2000);
        assert!(
            few * 4 < all,
            "{kind:?}: 10 entries read {few} bytes, 2,000 read {all}"
        );

        // Both ends at once.
        let mut it = db.range_at(a, k(100)..k(3901)).unwrap();
        let (mut front, mut back) = (Vec::new(), Vec::new());
        while let Some(e) = it.next() {
            front.push(e.unwrap().0);
            match it.next_back() {
                Some(e) => back.push(e.unwrap().0),
                None => break,
            }
        }
        back.reverse();
        front.extend(back);
        let want: Vec<Vec<u8>> = (50..1951).map(|i| k(2 * i)).collect();
        assert_eq!(front, want, "{kind:?}");

        // Writes to the leaf while it is being read: ahead of the iterator they are seen.
        let mut it = db.range_at::<&[u8], _>(a, ..).unwrap();
        assert_eq!(it.next().unwrap().unwrap().0, k(0));
        db.put_at(a, k(1), b"behind").unwrap();
        db.put_at(a, k(3999), b"ahead").unwrap();
        let rest: Vec<_> = it.map(|e| e.unwrap()).collect();
        assert_eq!(
            rest.len(),
            2000,
            "{kind:?}: 1,999 old keys and the one ahead"
        );
        assert!(rest.contains(&(k(3999), b"ahead".to_vec())));
        assert!(rest.iter().all(|(key, _)| *key != k(1)));
        // A version deleted under an iterator: the next page is an error, not a panic.
        let b = db.clone_version(a).unwrap();
        let mut it = db.range_at::<&[u8], _>(b, ..).unwrap();
        assert!(it.next().unwrap().is_ok());
        db.delete_version(b).unwrap();
        let err = it
            .find_map(|e| e.err())
            .expect("an error once the page runs out");
        assert!(matches!(err, Error::BadVersion { .. }), "{err}");
    }
}

/// A closed database gives the free space its merges and shadowed nodes left back: the tail's
/// blocks move down into the holes and a second checkpoint shortens the file
/// (`VersionedDb::close`, as `Db::close`). A fault at any IO of that close (a crash, with or
/// without a power loss; a failure once; a torn write) loses nothing: every change was
/// acknowledged before it, and a reopen shows them all and passes `check`. Merges and flushes
/// run inline here, so that every run of the workload leaves the same file and its close
/// makes the same IOs.
#[test]
fn a_fault_at_any_io_of_a_close_keeps_every_change() {
    for kind in KINDS {
        // No merge on a thread, and no checkpoint but those the setup asks for (one begun
        // past `checkpoint_wal_bytes` is made durable on a thread, and the layout would
        // depend on when it is finished): the same IOs every run.
        let opts = |kind, durability| VersionedOptions {
            background_merges: false,
            checkpoint_wal_bytes: 64 << 20,
            ..opts(kind, durability)
        };
        // The same changes every run: `rng` is seeded alike.
        let changes = 500;
        let setup = || {
            let env = SimEnv::new();
            let db = VersionedDb::open_in(&env, opts(kind, Durability::Sync)).unwrap();
            let mut m = VersionedMap::new();
            let mut rng = 0x9e37_79b9_7f4a_7c15u64;
            for i in 0..changes {
                let s = random_change(&mut rng, &m);
                apply_db(&db, &s).unwrap();
                apply_model(&mut m, &s);
                if i % 50 == 49 {
                    db.checkpoint().unwrap();
                }
            }
            // Most versions deleted, so that the file has room below its tail (in either
            // build: a debug build's checks walk the CoW B-tree's pool and lay it out
            // otherwise); dirty nodes written, so that the file measured below is what the
            // close starts from.
            let live: Vec<Version> = m.versions().live().collect();
            for &v in &live[..live.len().saturating_sub(2)] {
                let s = Step::DeleteVersion(v as usize);
                if try_model(&mut m, &s).is_ok() {
                    apply_db(&db, &s).unwrap();
                }
            }
            db.checkpoint().unwrap();
            (env, db, m)
        };
        // A clean close first: how many IOs it takes, and that it shortened the file.
        let (env, db, m) = setup();
        let file = db.metrics().unwrap().data_file_bytes;
        let before = env.disk().ios();
        db.close().unwrap();
        let close_ios = env.disk().ios() - before;
        let db = VersionedDb::open_in(&env, opts(kind, Durability::Sync)).unwrap();
        let closed = db.metrics().unwrap().data_file_bytes;
        assert!(
            closed < file,
            "{kind:?}: the close left {closed} of {file} bytes"
        );
        assert_eq!(dump(&db), dump_model(&m), "{kind:?}");
        drop(db);
        // Two checkpoints at least (each writes, syncs and writes the superblock) and a move.
        assert!(close_ios >= 8, "{kind:?}: a close of {close_ios} IOs");
        eprintln!("{kind:?}: a close of {close_ios} IOs, the file {file} -> {closed} bytes");
        for n in 1..=close_ios {
            let (env, db, m) = setup();
            let fault = n % 4;
            match fault {
                0 | 1 => env.disk().kill_at_io(n),
                2 => env.disk().fail_io_after(n, false),
                _ => env.disk().tear_write_after(1 + n / 8, (n % 8) as usize),
            }
            let closed = db.close();
            if fault == 1 {
                env.disk().clear_faults();
            } else {
                env.crash();
            }
            let db = VersionedDb::open_in(&env, opts(kind, Durability::Sync)).unwrap();
            db.check()
                .unwrap_or_else(|e| panic!("{kind:?}, fault {fault} at {n} ({closed:?}): {e}"));
            assert_eq!(
                dump(&db),
                dump_model(&m),
                "{kind:?}, fault {fault} at IO {n} of the close ({closed:?})"
            );
        }
    }
}

/// On a file system: what the closed database takes on disk is about what its live blocks
/// take (the holes are punched, `Db::close`'s test for the versioned engines), and it reopens
/// with every value.
#[test]
fn a_closed_database_gives_its_free_space_back() {
    use std::os::unix::fs::MetadataExt;
    for kind in KINDS {
        let opts = VersionedOptions {
            durability: Durability::None,
            ..opts(kind, Durability::None)
        };
        let opts = VersionedOptions {
            engine: roomier(kind),
            checkpoint_wal_bytes: 256 << 10,
            ..opts
        };
        let dir = tempfile::tempdir().unwrap();
        let db = VersionedDb::open(dir.path(), opts.clone()).unwrap();
        let n = 3_000u32;
        // Rounds over the same keys: merges and shadowing leave the old copies' extents.
        for round in 0..3u8 {
            for i in 0..n {
                db.put_at(ROOT_VERSION, i.to_be_bytes(), [round; 100])
                    .unwrap();
            }
            db.checkpoint().unwrap();
        }
        db.close().unwrap();
        let meta = std::fs::metadata(dir.path().join("strata.data")).unwrap();
        let db = VersionedDb::open(dir.path(), opts).unwrap();
        let st = db.stats().unwrap();
        let allocated = meta.blocks() * 512;
        assert!(
            allocated <= st.referenced_bytes + (64 << 10),
            "{kind:?}: allocated {allocated}, length {}, referenced {}, free {}",
            meta.len(),
            st.referenced_bytes,
            st.free_bytes
        );
        for i in (0..n).step_by(97) {
            assert_eq!(
                db.get_at(ROOT_VERSION, i.to_be_bytes()).unwrap().as_deref(),
                Some(&[2u8; 100][..])
            );
        }
        db.check().unwrap();
        eprintln!(
            "{kind:?}: length {}, allocated {allocated}, referenced {}",
            meta.len(),
            st.referenced_bytes
        );
    }
}

/// `metrics` counts a versioned database's changes as `Db`'s: puts, deletes and batches with
/// their logical bytes (so WA is at least the log's share, which carries every key and
/// value), and point reads with their own device reads; a clone is a change with no bytes.
#[test]
fn metrics_count_changes_and_reads() {
    for kind in KINDS {
        let env = SimEnv::new();
        let db = VersionedDb::open_in(&env, opts(kind, Durability::Sync)).unwrap();
        for i in 0..50u8 {
            db.put_at(ROOT_VERSION, key(i), [i; 30]).unwrap();
        }
        db.delete_at(ROOT_VERSION, key(3)).unwrap();
        let mut b = WriteBatch::new();
        b.put(key(60), [1u8; 10]).delete(key(4));
        db.write_at(ROOT_VERSION, b).unwrap();
        let v = db.clone_version(ROOT_VERSION).unwrap();
        let before = db.metrics().unwrap();
        assert_eq!(before.point_queries, 0);
        for i in 0..20u8 {
            db.get_at(v, key(i)).unwrap();
        }
        let m = db.metrics().unwrap();
        let k = key(0).len() as u64;
        assert_eq!(m.batches, 50 + 1 + 1 + 1, "{kind:?}");
        assert_eq!(m.ops_written, 50 + 1 + 2, "{kind:?}");
        assert_eq!(
            m.logical_bytes_written,
            50 * (k + 30) + k + (k + 10) + k,
            "{kind:?}"
        );
        assert!(
            m.wal_io.bytes_written >= m.logical_bytes_written,
            "{kind:?}: {m:?}"
        );
        assert!(m.write_amplification >= 1.0, "{kind:?}: {m:?}");
        assert_eq!(m.point_queries, 20, "{kind:?}");
        // The reads' own device reads: at most all of the data file's meanwhile (the SDA's
        // merge thread may have read too).
        assert!(
            m.point_query_reads <= m.data_io.reads - before.data_io.reads,
            "{kind:?}: {m:?}"
        );
        assert_eq!(
            m.read_amplification,
            m.point_query_reads as f64 / 20.0,
            "{kind:?}"
        );
    }
}

/// A `for_each_at` holds the database's lock for its whole walk, so no writer can write back
/// the dirty nodes its loads push out: the CoW B-tree's pool, left full of dirty nodes by the
/// writes before it, goes over its budget, but never past twice it (the pool's readers then
/// drop clean nodes, dirty victims or not), and is back within it once the walk is done.
#[test]
fn a_walk_over_a_pool_left_dirty_keeps_within_twice_its_budget() {
    let env = SimEnv::new();
    let o = VersionedOptions {
        checkpoint_wal_bytes: 64 << 20,
        ..opts(Kind::Cow, Durability::None)
    };
    let db = VersionedDb::open_in(&env, o).unwrap();
    for i in 0..1_500u32 {
        db.put_at(ROOT_VERSION, i.to_be_bytes(), [7u8; 20]).unwrap();
    }
    let budget = db.stats().unwrap().cache.budget_bytes;
    let before = db.stats().unwrap().cache;
    assert!(
        before.writebacks > 0,
        "the pool wrote back dirty nodes: {before:?}"
    );
    let mut n = 0;
    db.for_each_at::<&[u8], _>(ROOT_VERSION, .., false, |_, _| {
        n += 1;
        true
    })
    .unwrap();
    assert_eq!(n, 1_500);
    let after = db.stats().unwrap().cache;
    assert!(
        after.misses > before.misses + 100,
        "the walk read the tree: {after:?}"
    );
    // Twice the budget, and the walk's pinned path (a few nodes of a few hundred bytes).
    assert!(
        after.peak_bytes <= 2 * budget + (4 << 10),
        "the walk held {} bytes for a budget of {budget}",
        after.peak_bytes
    );
    assert!(after.resident_bytes <= budget, "{after:?}");
}

/// A data file whose syncs wait while the gate is shut (the log's do not).
#[derive(Debug)]
struct Gated {
    inner: std::sync::Arc<dyn strata::storage::Device>,
    shut: std::sync::Mutex<bool>,
    opened: std::sync::Condvar,
    waiting: std::sync::atomic::AtomicU64,
}

impl Gated {
    fn set(&self, shut: bool) {
        *self.shut.lock().unwrap() = shut;
        self.opened.notify_all();
    }
}

impl strata::storage::Device for Gated {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> strata::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, data: &[u8], offset: u64) -> strata::Result<()> {
        self.inner.write_at(data, offset)
    }
    fn sync(&self) -> strata::Result<()> {
        let mut shut = self.shut.lock().unwrap();
        if *shut {
            self.waiting
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            while *shut {
                shut = self.opened.wait(shut).unwrap();
            }
            self.waiting
                .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        }
        drop(shut);
        self.inner.sync()
    }
    fn len(&self) -> strata::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> strata::Result<()> {
        self.inner.set_len(len)
    }
}

/// A simulated environment whose data file is `Gated`.
type GatedEnv = WrapEnv<Gated>;

fn gated(inner: std::sync::Arc<dyn strata::storage::Device>) -> Gated {
    Gated {
        inner,
        shut: std::sync::Mutex::new(false),
        opened: std::sync::Condvar::new(),
        waiting: std::sync::atomic::AtomicU64::new(0),
    }
}

/// Options for the tests that hold the checkpoint thread's syncs: room for thousands of
/// changes between checkpoints, so that the writer does not reach the next one, which waits
/// for the held one, before its thread has come to the sync.
fn gated_opts(kind: Kind) -> VersionedOptions {
    VersionedOptions {
        engine: roomier(kind),
        background_merges: false,
        checkpoint_wal_bytes: 256 << 10,
        ..opts(kind, Durability::Sync)
    }
}

/// A checkpoint begun past `checkpoint_wal_bytes` is made durable on a thread of its own, as
/// `Db`'s: with the data file's syncs held, the writer goes on acknowledging synced changes
/// (the log is not held) while the checkpoint's thread waits in its sync; once the syncs go
/// through, the checkpoint is finished, and everything reads back after a power loss.
#[test]
fn checkpoints_are_made_durable_beside_the_writer() {
    use std::sync::atomic::Ordering::SeqCst;
    for kind in KINDS {
        let env = GatedEnv::new(gated);
        let opts = gated_opts(kind);
        let db = VersionedDb::open_in(&env, opts.clone()).unwrap();
        let gate = env.data();
        let checkpoints = db.stats().unwrap().checkpoints;
        let mut m = VersionedMap::new();
        gate.set(true);
        let (mut i, mut after) = (0u32, 0);
        let stop = std::sync::atomic::AtomicBool::new(false);
        // Until the checkpoint's thread waits in its sync, and 40 changes more.
        let done = std::thread::scope(|s| {
            let writer = s.spawn(|| {
                while after < 40 && i < 100_000 && !stop.load(SeqCst) {
                    let (k, v) = (i.to_be_bytes(), [i as u8; 24]);
                    db.put_at(ROOT_VERSION, k, v).unwrap();
                    m.put_at(ROOT_VERSION, &k, &v).unwrap();
                    i += 1;
                    if gate.waiting.load(SeqCst) > 0 {
                        after += 1;
                    }
                }
            });
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while !writer.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            let done = writer.is_finished();
            // Let a writer stuck in the checkpoint's sync go, so that the scope can end.
            stop.store(true, SeqCst);
            gate.set(false);
            writer.join().unwrap();
            done
        });
        assert!(
            done,
            "{kind:?}: the writer waited for the checkpoint's sync"
        );
        assert_eq!(after, 40, "{kind:?}: no checkpoint began in {i} changes");
        assert_eq!(db.stats().unwrap().checkpoints, checkpoints, "{kind:?}");
        // A change once the thread is done finishes it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while db.stats().unwrap().checkpoints == checkpoints {
            assert!(
                std::time::Instant::now() < deadline,
                "{kind:?}: never finished"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
            db.put_at(ROOT_VERSION, "last", "x").unwrap();
        }
        m.put_at(ROOT_VERSION, b"last", b"x").unwrap();
        db.check().unwrap();
        drop(db);
        env.sim.crash();
        let db = VersionedDb::open_in(&env, opts).unwrap();
        db.check().unwrap();
        assert_eq!(dump(&db), dump_model(&m), "{kind:?}");
    }
}

/// As `Db`'s (`flip_sweep`'s `damaged_newest_superblock_is_named_not_the_log`): once a
/// checkpoint made durable on its thread has released the older log file, the log begins
/// with that checkpoint's marker. With the newest superblock damaged, the open finds the one
/// before, older than the marker, and reports the damaged superblock, at its slot in the data
/// file, rather than opening the older checkpoint without the changes between.
#[test]
fn a_damaged_newest_superblock_is_reported_at_its_slot() {
    for kind in KINDS {
        let env = SimEnv::new();
        let o = VersionedOptions {
            background_merges: false,
            ..opts(kind, Durability::Sync)
        };
        let db = VersionedDb::open_in(&env, o.clone()).unwrap();
        let start = db.stats().unwrap().checkpoints;
        let mut i = 0u32;
        while db.stats().unwrap().checkpoints < start + 2 {
            db.put_at(ROOT_VERSION, i.to_be_bytes(), [1u8; 40]).unwrap();
            i += 1;
            assert!(i < 100_000, "{kind:?}: no checkpoint finished");
        }
        db.put_at(ROOT_VERSION, "after", "x").unwrap();
        // A process crash: the checkpoint in flight, if any, is waited for.
        drop(db);
        let newest = {
            let db = VersionedDb::open_in(&env, o.clone()).unwrap();
            assert_eq!(
                db.get_at(ROOT_VERSION, "after").unwrap().as_deref(),
                Some(&b"x"[..])
            );
            db.stats().unwrap().checkpoints
        };
        // The open wrote no checkpoint of its own (nothing in the older log file to cover).
        let slot = (newest % 2) * 4096;
        env.files()
            .get("strata.data")
            .unwrap()
            .corrupt_byte(slot + 50, 0x40);
        match VersionedDb::open_in(&env, o) {
            Err(Error::Corruption { file, offset, .. }) => {
                assert_eq!(file, "strata.data", "{kind:?}: the superblock, not the log");
                assert!(offset == 0 || offset == 4096, "{kind:?}: at {offset}");
            }
            Err(e) => panic!("{kind:?}: {e}"),
            Ok(_) => panic!("{kind:?}: a checkpoint older than the log's marker was opened"),
        }
    }
}

/// The same, when the last process died between a background checkpoint's superblock and
/// its release of the log file it left behind: that file, all of whose records the
/// checkpoint covers, is released at the next open, so a damaged newest superblock is still
/// reported (unreleased, the file's records would reach the newer file's marker and the
/// open would take the checkpoint before, whose extents that process may have reused).
#[test]
fn a_damaged_newest_superblock_is_reported_after_a_crash_before_the_logs_release() {
    use std::sync::atomic::Ordering::SeqCst;
    for kind in KINDS {
        let env = GatedEnv::new(gated);
        let o = gated_opts(kind);
        let db = VersionedDb::open_in(&env, o.clone()).unwrap();
        let gate = env.data();
        gate.set(true);
        // Changes until a checkpoint's thread waits in its first sync of the data file; on a
        // thread, so that a writer held up by the gate fails the test instead of hanging it.
        let i = std::thread::scope(|s| {
            let writer = s.spawn(|| {
                let mut i = 0u32;
                while gate.waiting.load(SeqCst) == 0 && i < 100_000 {
                    db.put_at(ROOT_VERSION, i.to_be_bytes(), [1u8; 40]).unwrap();
                    i += 1;
                }
                i
            });
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while !writer.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            let held = !writer.is_finished();
            if held {
                gate.set(false);
            }
            let i = writer.join().unwrap();
            assert!(
                !held,
                "{kind:?}: the writer waited for the checkpoint's sync"
            );
            i
        });
        assert!(i < 100_000, "{kind:?}: no checkpoint began");
        // Nothing else does IO now: the thread's sync, the superblock, its sync, then the
        // release's head, at which the process dies.
        let disk = env.sim.disk().clone();
        let before = disk.ios();
        disk.kill_at_io(4);
        gate.set(false);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while disk.ios() < before + 4 {
            assert!(std::time::Instant::now() < deadline, "{kind:?}: stuck");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        drop(db);
        disk.clear_faults();
        env.sim.crash();
        let newest = {
            let db = VersionedDb::open_in(&env, o.clone()).unwrap();
            let last = (i - 1).to_be_bytes();
            assert!(db.get_at(ROOT_VERSION, last).unwrap().is_some(), "{kind:?}");
            db.stats().unwrap().checkpoints
        };
        let slot = (newest % 2) * 4096;
        env.sim
            .files()
            .get("strata.data")
            .unwrap()
            .corrupt_byte(slot + 50, 0x40);
        match VersionedDb::open_in(&env, o) {
            Err(Error::Corruption { file, offset, .. }) => {
                assert_eq!(file, "strata.data", "{kind:?}: the superblock, not the log");
                assert_eq!(offset, slot, "{kind:?}");
            }
            Err(e) => panic!("{kind:?}: {e}"),
            Ok(_) => panic!("{kind:?}: a checkpoint older than the log's marker was opened"),
        }
    }
}

/// The state of a data file whose reads from the SDA's merge thread wait while the gate is
/// shut (`merge_read`).
#[derive(Debug)]
struct MergeGate {
    shut: std::sync::Mutex<bool>,
    opened: std::sync::Condvar,
    held: std::sync::atomic::AtomicU64,
}

impl MergeGate {
    fn open(&self) {
        *self.shut.lock().unwrap() = false;
        self.opened.notify_all();
    }
}

fn merge_read(g: &MergeGate) -> strata::Result<()> {
    if std::thread::current().name() == Some("strata-sda-merge") {
        let mut shut = g.shut.lock().unwrap();
        if *shut {
            g.held.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        while *shut {
            shut = g.opened.wait(shut).unwrap();
        }
    }
    Ok(())
}

/// Opens the gate when dropped: a failing test must not leave the merge thread held, or the
/// database's drop would wait for it forever.
struct OpenOnDrop(std::sync::Arc<Hooked<MergeGate>>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.state.open();
    }
}

/// Checkpoints flush the buffer without waiting for a merge running on its thread, so while
/// one runs level 0 may hold any number of arrays serving a version. Scans must not count on
/// one array a level: their cursors at a key were a bitmask of 64 (and debug builds asserted
/// at most 48), so past that a key was answered from the wrong cursor.
#[test]
fn scans_take_any_number_of_arrays_at_a_level_while_a_merge_runs() {
    let env = WrapEnv::new(|inner| Hooked {
        inner,
        state: MergeGate {
            shut: std::sync::Mutex::new(true),
            opened: std::sync::Condvar::new(),
            held: std::sync::atomic::AtomicU64::new(0),
        },
        on_read: merge_read,
        on_write: pass_write,
    });
    // No block cache: the merge reads its inputs from the device, where it is held.
    let o = VersionedOptions {
        engine: VersionedEngineOptions::Sda(SdaConfig {
            cache_bytes: 0,
            ..SdaConfig::default()
        }),
        durability: Durability::None,
        ..VersionedOptions::default()
    };
    let db = VersionedDb::open_in(&env, o).unwrap();
    let dev = OpenOnDrop(env.data());
    let mut want = Vec::new();
    for i in 0..80u32 {
        db.put_at(ROOT_VERSION, i.to_be_bytes(), i.to_le_bytes())
            .unwrap();
        want.push((i.to_be_bytes().to_vec(), i.to_le_bytes().to_vec()));
        db.checkpoint().unwrap();
        // A merge of the first flushes' arrays is due by now: hold it there.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while i == 3 && dev.0.state.held.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "no merge was under way"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    let got: Vec<_> = db
        .range_at::<&[u8], _>(ROOT_VERSION, ..)
        .unwrap()
        .collect::<strata::Result<_>>()
        .unwrap();
    assert_eq!(got, want);
    let mut back = Vec::new();
    db.for_each_at::<&[u8], _>(ROOT_VERSION, .., true, |k, v| {
        back.push((k.to_vec(), v.to_vec()));
        true
    })
    .unwrap();
    want.reverse();
    assert_eq!(back, want);
    drop(dev);
    db.close().unwrap();
}

/// The state of a data file whose writes from the SDA's flush thread, once armed, wait for
/// the test's word and then fail (`flush_write`).
#[derive(Debug)]
struct FlushFails {
    armed: std::sync::atomic::AtomicBool,
    /// Writes held so far, and whether to let them fail.
    held: std::sync::Mutex<(u64, bool)>,
    changed: std::sync::Condvar,
}

impl FlushFails {
    fn held(&self) -> u64 {
        self.held.lock().unwrap().0
    }

    fn let_fail(&self) {
        self.held.lock().unwrap().1 = true;
        self.changed.notify_all();
    }
}

fn flush_write(f: &FlushFails, data: &[u8], offset: u64) -> strata::Result<()> {
    if !f.armed.load(std::sync::atomic::Ordering::SeqCst)
        || std::thread::current().name() != Some("strata-sda-flush")
    {
        return Ok(());
    }
    let mut held = f.held.lock().unwrap();
    held.0 += 1;
    while !held.1 {
        held = f.changed.wait(held).unwrap();
    }
    Err(strata::Error::Io {
        context: format!("write {} bytes at {offset}", data.len()),
        source: std::io::Error::other("injected IO error"),
    })
}

/// `check` settles the SDA first: it installs the flush running on its thread. When that
/// flush failed, the frozen buffer's changes are out of memory, so `check` must poison the
/// database as a change that met the failure would, not leave it answering without them
/// (and a later checkpoint covering their log records). Reopened, the log has them all.
#[test]
fn a_check_that_meets_a_failed_flush_poisons_the_database() {
    let env = WrapEnv::new(|inner| Hooked {
        inner,
        state: FlushFails {
            armed: std::sync::atomic::AtomicBool::new(false),
            held: std::sync::Mutex::new((0, false)),
            changed: std::sync::Condvar::new(),
        },
        on_read: pass,
        on_write: flush_write,
    });
    let o = VersionedOptions {
        engine: VersionedEngineOptions::Sda(SdaConfig {
            buffer_bytes: 16 << 10,
            ..SdaConfig::default()
        }),
        durability: Durability::Sync,
        ..VersionedOptions::default()
    };
    let db = VersionedDb::open_in(&env, o.clone()).unwrap();
    let dev = env.data();
    dev.state
        .armed
        .store(true, std::sync::atomic::Ordering::SeqCst);
    // Changes until the buffer is handed to the flush thread and its write is held; then
    // none, so that no change meets the failure before `check` does. On a thread, so that a
    // writer held by the next buffer's wait for the flush fails the test instead of hanging.
    let n = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut n = 0u32;
            while dev.state.held() == 0 && n < 100_000 {
                db.put_at(ROOT_VERSION, n.to_be_bytes(), [5u8; 40]).unwrap();
                n += 1;
                // A buffer takes some 300 changes: the flush thread has that long to come
                // to its write before the next buffer would wait for it.
                std::thread::sleep(std::time::Duration::from_micros(500));
            }
            n
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !writer.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let stuck = !writer.is_finished();
        dev.state.let_fail();
        let n = writer.join();
        assert!(!stuck, "the writer waited for the held flush");
        n.unwrap()
    });
    assert!(n < 100_000, "no flush began");
    dev.state.let_fail();
    assert!(db.check().is_err(), "the failed flush is reported");
    let got = db.get_at(ROOT_VERSION, 0u32.to_be_bytes());
    assert!(
        matches!(got, Err(Error::Poisoned { .. })),
        "a read after it: {got:?}"
    );
    drop(db);
    dev.state
        .armed
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let db = VersionedDb::open_in(&env, o).unwrap();
    for i in 0..n {
        assert!(
            db.get_at(ROOT_VERSION, i.to_be_bytes()).unwrap().is_some(),
            "key {i} of {n}"
        );
    }
}
