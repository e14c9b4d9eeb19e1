//! The LSM-tree engine on its own: every policy against a reference map through flushes,
//! merges, range deletes, upserts and reopens; the shape each policy leaves; its counters.
//! (The shared oracle suite runs it too, with crashes: tests/oracle.rs.)

mod common;

use std::collections::BTreeMap;

use common::{add_u64, dump, remove_range, Place, Rng};
use strata::{AddU64, Db, LsmConfig, LsmPolicy, Options};

fn tiny(policy: LsmPolicy) -> LsmConfig {
    LsmConfig {
        l0_runs: 2,
        memtable_bytes: 64 << 10,
        table_bytes: 64 << 10,
        block_bytes: 1 << 10,
        ..LsmConfig::with(policy, 3)
    }
}

fn opts(cfg: LsmConfig) -> Options {
    Options::default()
        .lsm(cfg)
        .cache_bytes(256 << 10)
        .checkpoint_wal_bytes(16 << 10)
        .merge_operator(AddU64)
}

fn key(i: u64) -> Vec<u8> {
    format!("k{:06}", i).into_bytes()
}

/// Random puts, deletes, upserts and range deletes over `keys` keys, checked against a map
/// with point reads and scans both ways, reopening every `reopen` operations.
fn random_ops(policy: LsmPolicy, seed: u64, ops: u64, keys: u64, reopen: u64) -> Db {
    random_ops_on(tiny(policy), seed, ops, keys, reopen)
}

fn random_ops_on(cfg: LsmConfig, seed: u64, ops: u64, keys: u64, reopen: u64) -> Db {
    let place = Place::sim();
    let mut db = place.open(opts(cfg)).unwrap();
    let mut want: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut rng = Rng::new(seed);
    for i in 0..ops {
        let k = key(rng.range(0, keys));
        match rng.range(0, 20) {
            0..=10 => {
                let v = vec![b'v'; 20 + rng.range(0, 200) as usize];
                db.put(&k, &v).unwrap();
                want.insert(k, v);
            }
            11..=13 => {
                db.delete(&k).unwrap();
                want.remove(&k);
            }
            14..=16 => {
                let n = rng.range(0, 100);
                db.upsert(&k, n.to_le_bytes()).unwrap();
                let v = add_u64(want.get(&k).map(|v| v.as_slice()), n);
                want.insert(k, v);
            }
            17 => {
                let end = key(rng.range(0, keys));
                db.delete_range(&k, &end).unwrap();
                remove_range(&mut want, &k, &end);
            }
            _ => {
                assert_eq!(
                    db.get(&k).unwrap(),
                    want.get(&k).cloned(),
                    "get {k:?} at {i}"
                );
            }
        }
        if i % reopen == reopen - 1 {
            drop(db);
            db = place.open(opts(cfg)).unwrap();
            db.check().unwrap();
        }
        if i % 1000 == 999 {
            let lo = key(rng.range(0, keys));
            let hi = key(rng.range(0, keys));
            let got: Vec<_> = db
                .range(lo.clone()..hi.clone())
                .unwrap()
                .map(|r| r.unwrap())
                .collect();
            let exp: Vec<_> = want
                .range(lo.clone()..hi.clone().max(lo.clone()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            assert_eq!(got.len(), exp.len(), "range {lo:?}..{hi:?} at {i}");
            assert!(got == exp, "range {lo:?}..{hi:?} at {i}");
            let mut back: Vec<_> = db
                .range(lo.clone()..hi.clone())
                .unwrap()
                .rev()
                .map(|r| r.unwrap())
                .collect();
            back.reverse();
            assert!(back == exp, "reverse range {lo:?}..{hi:?} at {i}");
        }
    }
    assert!(dump(&db) == want, "final contents");
    db.check().unwrap();
    db
}

#[test]
fn leveled_agrees_with_a_map() {
    let db = random_ops(LsmPolicy::Leveled, 1, 30_000, 3_000, 7_000);
    let m = db.metrics();
    assert!(m.engine.detail("merges") > 5, "{:?}", m.engine.detail);
}

/// Levels sized from the last: a load grows the tree at the top (level 1 starts empty, every
/// level moves one down) while the last level keeps most of the data; everything reads back,
/// before and after a reopen, and `check` holds the shape.
#[test]
fn dynamic_levels_grow_at_the_top_and_keep_most_data_in_the_last() {
    let place = Place::sim();
    let cfg = tiny(LsmPolicy::Leveled);
    assert!(cfg.dynamic_levels);
    let db = place.open(opts(cfg)).unwrap();
    let n = 20_000;
    for i in 0..n {
        db.put(key(i), [i as u8; 100]).unwrap();
    }
    db.checkpoint().unwrap();
    let e = db.metrics().engine;
    // Base 128 KiB (a 64 KiB memtable, 2 runs), T = 3: about 2.4 MB of tables takes level 1
    // past the base, then past base·T, so the tree grows twice to three levels below level 0
    // (the last level never merges down: every level below 1 came from a growth at the top).
    assert!(e.detail("levels") >= 4, "{:?}", e.detail);
    let last = e.detail("last_level_bytes") as f64 / e.live_bytes as f64;
    assert!(last > 0.5, "{last} {:?}", e.detail);
    db.check().unwrap();
    drop(db);
    let db = place.open(opts(cfg)).unwrap();
    db.check().unwrap();
    for i in (0..n).step_by(7) {
        assert_eq!(db.get(key(i)).unwrap(), Some(vec![i as u8; 100]), "{i}");
    }
    assert_eq!(db.range(key(0)..key(n)).unwrap().count() as u64, n);
}

/// Leveled with fixed level sizes, as trees made before dynamic levels open.
#[test]
fn leveled_with_fixed_level_sizes_agrees_with_a_map() {
    let cfg = LsmConfig {
        dynamic_levels: false,
        ..tiny(LsmPolicy::Leveled)
    };
    let db = random_ops_on(cfg, 4, 30_000, 3_000, 7_000);
    let m = db.metrics();
    assert!(m.engine.detail("merges") > 5, "{:?}", m.engine.detail);
}

#[test]
fn tiered_agrees_with_a_map() {
    let db = random_ops(LsmPolicy::Tiered, 2, 30_000, 3_000, 7_000);
    assert!(db.metrics().engine.detail("merges") > 5);
}

#[test]
fn lazy_leveling_agrees_with_a_map() {
    let db = random_ops(LsmPolicy::LazyLeveled, 3, 30_000, 3_000, 7_000);
    assert!(db.metrics().engine.detail("merges") > 5);
}

#[test]
fn a_small_scan_after_flushes() {
    let place = Place::sim();
    let db = place.open(opts(tiny(LsmPolicy::Leveled))).unwrap();
    for i in 0..2_000 {
        db.put(key(i), b"x").unwrap();
    }
    db.checkpoint().unwrap();
    let got: Vec<_> = db
        .range(key(10)..key(20))
        .unwrap()
        .map(|r| r.unwrap().0)
        .collect();
    assert_eq!(got, (10..20).map(key).collect::<Vec<_>>());
    let got: Vec<_> = db
        .range(key(10)..key(20))
        .unwrap()
        .rev()
        .map(|r| r.unwrap().0)
        .collect();
    assert_eq!(got, (10..20).rev().map(key).collect::<Vec<_>>());
    assert_eq!(db.get(key(1999)).unwrap(), Some(b"x".to_vec()));
    assert_eq!(db.get(key(2000)).unwrap(), None);
}

/// A database on the simulated disk with merges inline and no log syncs, so that byte counts
/// repeat exactly: the place (which must outlive it) and the database.
fn inline_sim(cfg: LsmConfig) -> (Place, Db) {
    let place = Place::sim();
    let db = place
        .open(
            Options::default()
                .lsm(cfg)
                .cache_bytes(4 << 20)
                .durability(strata::Durability::None)
                .background_merges(false),
        )
        .unwrap();
    (place, db)
}

/// The model's write amplification (`model::lsm` on the engine's own shape, as the advisor
/// prices it) against the engine's: `n` random 16-byte keys with 100-byte values loaded in
/// batches of 100, then a checkpoint; measured is every byte written to the log and the data
/// file over the logical bytes.
fn wa_predicted_and_measured(policy: LsmPolicy, n: u64) -> (f64, (f64, f64), f64) {
    let cfg = LsmConfig {
        memtable_bytes: 256 << 10,
        table_bytes: 64 << 10,
        block_bytes: 4 << 10,
        ..LsmConfig::with(policy, 4)
    };
    let w = strata::tune::AdviseWorkload::new(n, 0.0, 4 << 20);
    let p = strata::model::lsm::lsm(
        &strata::tune::lsm_input(&cfg, &w),
        &strata::model::Affine::new(100e-6, 1e-9),
    );
    let (_place, db) = inline_sim(cfg);
    let mut rng = Rng::new(n ^ policy as u64);
    let mut logical = 0u64;
    for _ in 0..n / 100 {
        let mut b = strata::WriteBatch::new();
        for _ in 0..100 {
            let k = format!("{:016x}", rng.next_u64());
            b.put(k.as_bytes(), [7u8; 100]);
            logical += 116;
        }
        db.write(b).unwrap();
    }
    db.checkpoint().unwrap();
    let m = db.metrics();
    let measured = (m.wal_io.bytes_written + m.data_io.bytes_written) as f64 / logical as f64;
    eprintln!(
        "{policy:?} {n} keys: {} levels predicted, WA predicted {:.2} ({:.2}..{:.2}), measured {measured:.2} (log {:.2}); {:?}",
        p.levels, p.write_amp, p.write_amp_range.0, p.write_amp_range.1,
        m.wal_io.bytes_written as f64 / logical as f64, m.engine.detail
    );
    (p.write_amp, p.write_amp_range, measured)
}

/// The model's write amplification within 20% of measured (the LSM issue's bar), leveled and
/// tiered, on shapes two to four levels deep. The model plays the engine's policy out on the
/// load (`engines::lsm::simulate`), since a load from empty never has the full levels the
/// closed form prices: new levels fill by moving whole tables down untouched. Merges run inline
/// here so that every run merges at the same points; on their own thread level 0 runs a little
/// deeper before it merges, which only lowers what is written. (The 64 KiB-table,
/// 256 KiB-memtable tree at T = 4 holding 60,000 and 200,000 entries stands in for a 4 MiB-table
/// tree holding 1M and 10M.)
#[test]
fn write_amplification_against_the_model() {
    let mut bad = Vec::new();
    for policy in [LsmPolicy::Leveled, LsmPolicy::Tiered] {
        for n in [60_000, 200_000] {
            let (predicted, (lo, hi), measured) = wa_predicted_and_measured(policy, n);
            if (predicted - measured).abs() > 0.2 * measured {
                bad.push(format!(
                    "{policy:?}, {n} keys: predicted {predicted:.2} ({lo:.2}..{hi:.2}), measured {measured:.2}"
                ));
            }
        }
    }
    assert!(bad.is_empty(), "{bad:?}");
}

/// The memtable and the buffer pool share one memory budget: the pool gives up what the
/// memtable holds, and gets it back once the memtable is written out.
#[test]
fn the_pool_gets_what_the_memtable_leaves() {
    let place = Place::sim();
    let cache = 1 << 20;
    let db = place
        .open(opts(tiny(LsmPolicy::Leveled)).cache_bytes(cache))
        .unwrap();
    for i in 0..200 {
        db.put(key(i), [7u8; 100]).unwrap();
    }
    let e = db.metrics().engine;
    let mem = e.detail("memtable_bytes");
    assert!(mem > 10_000, "{mem}");
    assert_eq!(e.cache.budget_bytes, cache as u64 - mem);
    db.checkpoint().unwrap();
    db.put(key(0), b"x").unwrap();
    let e = db.metrics().engine;
    let mem = e.detail("memtable_bytes");
    assert!(mem < 100, "{mem}");
    assert_eq!(e.cache.budget_bytes, cache as u64 - mem);
}

/// Issue 17's SA bar on a small instance, deterministic (inline merges, simulated disk): a
/// load of fresh keys gives a checkpoint nothing to settle, and a tenth of the keys rewritten
/// do not stay above the versions they replace, in level 0 or level 1: the checkpoint merges
/// the levels down into the one holding the old copies (`policy::settle_target`), and the
/// tables hold no more than after the load. Without that merge they hold the rewritten tenth
/// twice (+0.11 here).
#[test]
fn a_checkpoint_merges_down_updates_that_shadow_older_copies() {
    let cfg = LsmConfig {
        memtable_bytes: 256 << 10,
        table_bytes: 64 << 10,
        block_bytes: 4 << 10,
        ..LsmConfig::with(LsmPolicy::Leveled, 10)
    };
    let (_place, db) = inline_sim(cfg);
    let n = 40_000u64;
    let mut rng = Rng::new(17);
    let k = |x: u64| x.to_be_bytes().repeat(2);
    let loaded = load_random(&db, n, &mut rng, k);
    db.checkpoint().unwrap();
    let tables = |e: &strata::EngineStats| e.live_bytes as f64 / (n * 116) as f64;
    let e = db.metrics().engine;
    let after_load = tables(&e);
    assert_eq!(e.detail("rest_merges"), 0, "{:?}", e.detail);
    for chunk in loaded[..n as usize / 10].chunks(1000) {
        let mut b = strata::WriteBatch::new();
        for &x in chunk {
            b.put(k(x), [9u8; 100]);
        }
        db.write(b).unwrap();
    }
    let e = db.metrics().engine;
    let before = (e.detail("runs"), e.detail("flushes"));
    db.checkpoint().unwrap();
    let e = db.metrics().engine;
    eprintln!(
        "tables over logical bytes: {after_load:.4} after the load, {:.4} after the updates; \
         runs and flushes before the checkpoint {before:?}; {:?}",
        tables(&e),
        e.detail
    );
    assert!(tables(&e) <= after_load + 0.01, "{}", tables(&e));
    assert_eq!(e.detail("rest_merges"), 1);
    for &x in &loaded[..100] {
        assert_eq!(db.get(k(x)).unwrap(), Some(vec![9u8; 100]));
    }
}

/// The model's WA and point-read IOs against a real load at the scale of the bars
/// (`n` random 16-byte keys, 100-byte values, batches of 1,000, the default shape for `cache`
/// and merges on their own thread, as `strata bench rum` runs the engine), on files. Measured
/// WA counts every byte written to the log and the data file over the logical bytes, after a
/// checkpoint; measured reads are the device reads per point query of a random loaded key after a
/// reopen and a warm-up as long as the measurement, against the model's `point.reads` (a
/// block, plus the false positives above it, times the share of blocks the cache misses).
/// Load `n` random keys (`key` of a random u64) with 100-byte values, in batches of 1,000;
/// returns the u64s loaded, in load order.
fn load_random(db: &strata::Db, n: u64, rng: &mut Rng, key: impl Fn(u64) -> Vec<u8>) -> Vec<u64> {
    let mut loaded = Vec::with_capacity(n as usize);
    for _ in 0..n / 1000 {
        let mut b = strata::WriteBatch::new();
        for _ in 0..1000 {
            let x = rng.next_u64();
            loaded.push(x);
            b.put(key(x), [7u8; 100]);
        }
        db.write(b).unwrap();
    }
    loaded
}

/// Prints one table row per policy (docs/lsm.md) and holds both within 20%.
fn model_at_scale(n: u64, cache: usize) {
    for policy in [LsmPolicy::Leveled, LsmPolicy::Tiered] {
        let cfg = LsmConfig {
            policy,
            l0_runs: LsmConfig::with(policy, 10).l0_runs,
            ..LsmConfig::for_cache(cache)
        };
        let w = strata::tune::AdviseWorkload::new(n, 0.0, cache as u64);
        let p = strata::model::lsm::lsm(
            &strata::tune::lsm_input(&cfg, &w),
            &strata::model::Affine::new(100e-6, 1e-9),
        );
        let place = Place::dir();
        let o = Options::default()
            .lsm(cfg)
            .cache_bytes(cache)
            .durability(strata::Durability::None);
        let db = place.open(o.clone()).unwrap();
        let mut rng = Rng::new(n ^ policy as u64);
        let k = |x: u64| format!("{x:016x}").into_bytes();
        let loaded = load_random(&db, n, &mut rng, k);
        let logical = loaded.len() as u64 * 116;
        db.checkpoint().unwrap();
        let m = db.metrics();
        let wa = (m.wal_io.bytes_written + m.data_io.bytes_written) as f64 / logical as f64;
        let e = m.engine.detail.clone();
        db.close().unwrap();
        // Loaded keys picked at random, not in load order: a tiered tree keeps keys loaded
        // together in one run, so reads in load order would find their run's blocks cached.
        let reads = (n / 5).min(200_000);
        let db = place.open(o).unwrap();
        let (mut q, mut r) = (0, 0);
        for i in 0..2 * reads {
            if i == reads {
                let m = db.metrics();
                (q, r) = (m.point_queries, m.point_query_reads);
            }
            let x = *rng.pick(&loaded);
            assert!(db.get(k(x)).unwrap().is_some());
        }
        let m = db.metrics();
        let ra = (m.point_query_reads - r) as f64 / (m.point_queries - q) as f64;
        eprintln!(
            "| {n} | {} MiB | {} | {:.2} ({:.2}..{:.2}) | {wa:.2} | {:+.0}% | {:.3} | {ra:.3} | {:+.0}% | {} |",
            cache >> 20,
            policy.name(),
            p.write_amp,
            p.write_amp_range.0,
            p.write_amp_range.1,
            100.0 * (p.write_amp / wa - 1.0),
            p.point.reads,
            100.0 * (p.point.reads / ra - 1.0),
            p.derivation
        );
        eprintln!("    {e:?}");
        // The bar: predicted within 20% of measured, both figures.
        assert!(
            (p.write_amp / wa - 1.0).abs() <= 0.2,
            "WA {} vs {wa}",
            p.write_amp
        );
        assert!(
            (p.point.reads / ra - 1.0).abs() <= 0.2,
            "reads {} vs {ra}",
            p.point.reads
        );
    }
}

/// `cargo test --release -p strata --test lsm model_at_1m -- --ignored --nocapture` (about a
/// minute): the rows of docs/lsm.md's model table at 1M keys and a 16 MiB budget.
#[test]
#[ignore]
fn model_at_1m() {
    model_at_scale(1_000_000, 16 << 20);
}

/// As `model_at_1m`, at 10M keys and 256 MiB (about six minutes).
#[test]
#[ignore]
fn model_at_10m() {
    model_at_scale(10_000_000, 256 << 20);
}

/// Bytes allocated to the files under `dir` (holes not counted), as `strata bench rum` counts
/// space at rest.
fn allocated(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().blocks() * 512)
        .sum()
}

/// Space at rest after seed 004's sequence as `strata bench rum` runs it at 1M keys and a
/// 16 MiB budget (the shape `cfg`, merges on their own thread): a load of random binary 16-byte
/// keys with 100-byte values in batches of 1,000, a checkpoint, then 200 rounds of 1,000
/// operations, half reads and half updates of random loaded keys (one batch a round), a
/// checkpoint and close. Returns the bytes allocated under the directory over the live logical
/// bytes, and prints what the levels hold.
fn space_at_rest(cfg: LsmConfig) -> f64 {
    let n = 1_000_000u64;
    let cache = 16 << 20;
    let place = Place::dir();
    let o = Options::default()
        .lsm(cfg)
        .cache_bytes(cache)
        .durability(strata::Durability::None);
    let db = place.open(o).unwrap();
    let mut rng = Rng::new(1);
    // Random binary keys, as the benchmark's: 8 random bytes, then 8 more from them.
    let k = |x: u64| {
        [
            x.to_be_bytes(),
            x.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes(),
        ]
        .concat()
    };
    let loaded = load_random(&db, n, &mut rng, k);
    db.checkpoint().unwrap();
    let logical = (n * 116) as f64;
    let m = db.metrics().engine;
    let (load_tables, after_load) = (m.live_bytes as f64 / logical, m.detail);
    for _ in 0..200 {
        let mut b = strata::WriteBatch::new();
        for _ in 0..1000 {
            let x = *rng.pick(&loaded);
            if rng.chance(1, 2) {
                assert!(db.get(k(x)).unwrap().is_some());
            } else {
                b.put(k(x), [9u8; 100]);
            }
        }
        db.write(b).unwrap();
    }
    db.checkpoint().unwrap();
    let m = db.metrics().engine;
    let (tables, e) = (m.live_bytes as f64 / logical, m.detail);
    db.close().unwrap();
    let sa = allocated(place.path()) as f64 / logical;
    eprintln!(
        "{}: SA at rest {sa:.4}; tables over logical bytes {load_tables:.4} after the load, \
         {tables:.4} at close\n  after the load {after_load:?}\n  at close {e:?}",
        cfg.describe()
    );
    sa
}

/// The bar, SA ≤ 1.15× after flush and close, on the default shape and with fixed
/// level sizes. It used to turn on whether level 0 reached its trigger during the updates
/// (1.16× with fixed sizes, 1.12× to 1.13× with dynamic ones); the checkpoint after them now
/// merges the updates down onto their old copies (`policy::settle_target`): 1.046× for both
/// (docs/lsm.md) (`cargo test --release -p strata --test lsm space_at_rest_at_1m -- --ignored
/// --nocapture`, under a minute).
#[test]
#[ignore]
fn space_at_rest_at_1m() {
    let cfg = LsmConfig::for_cache(16 << 20);
    for cfg in [
        LsmConfig {
            dynamic_levels: false,
            ..cfg
        },
        cfg,
    ] {
        let sa = space_at_rest(cfg);
        assert!(sa <= 1.15, "{}: SA {sa:.4}", cfg.describe());
    }
}
