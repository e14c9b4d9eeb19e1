//! Crash enumeration: a fixed workload on a simulated disk, crashed at every IO it does.
//!
//! For each engine configuration the workload (seeded: batches of puts, deletes, upserts and
//! range deletes, mostly synced, some not; `Db::sync`, foreground checkpoints, bulk batches
//! that start background checkpoints and log rotations; then a close, which moves the file's
//! tail into its holes) runs once to count its IOs, N. Then, for every crash point i in
//! 1..=N, a fresh database runs it again with the process killed at IO i
//! (`SimDisk::kill_at_io`: that IO and every later one fails and changes nothing, whichever
//! thread issues it: the writer, the log's sync thread or the checkpoint thread), and what
//! follows is one of these sequences, chosen by the point's seed:
//! - **process crash**: the files keep everything written before IO i (the page cache);
//! - **power cut**: some of what was not synced survives, any subset of pages, each at any
//!   point of its history (`SimEnv::power_cut`);
//! - **process crash, recovery, more work, power cut**: reopen on the page-cache state, write
//!   more synced batches, then cut the power (what recovery trusted must have been durable);
//! - **crash during recovery**: the reopen itself is killed at a random IO (during replay or
//!   the recovery checkpoint), then a process crash or a power cut, then the final reopen.
//!
//! The final reopen must succeed, `Db::check` must pass, and the contents must equal the
//! oracle after some prefix of the batches: every acknowledged synced batch (and, after a
//! process crash alone, every acknowledged batch) is in it, the batch in flight at the crash is
//! wholly there or wholly absent, and nothing else is.
//!
//! The default run tries every IO index once per configuration (at least 1,000 points each).
//! `cargo test --test crash -- --ignored` runs the long suite: several workload seeds and
//! every crash point with several survival seeds, at least 10,000 points per configuration.
//! A failure prints the configuration, workload seed, crash point and sequence; replay it with
//! `STRATA_CRASH_REPLAY=<config>:<workload seed>:<point>:<sequence seed>` (the checkpoint thread
//! races the writer, so an IO index can name a slightly different moment from run to run; the
//! replay runs the point several times).

mod common;

use std::collections::BTreeMap;

use common::{value, Rng};
use strata::storage::SimEnv;
use strata::{AddU64, Db, Durability, LsmConfig, LsmPolicy, Options, WriteBatch};

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Clone, Debug)]
enum W {
    Put(Vec<u8>, Vec<u8>),
    Del(Vec<u8>),
    Add(Vec<u8>, u64),
    DelRange(Vec<u8>, Vec<u8>),
}

#[derive(Clone, Debug)]
enum Step {
    Write(Vec<W>, Durability),
    Sync,
    Checkpoint,
}

fn apply(map: &mut Map, ws: &[W]) {
    for w in ws {
        match w {
            W::Put(k, v) => {
                map.insert(k.clone(), v.clone());
            }
            W::Del(k) => {
                map.remove(k);
            }
            W::Add(k, n) => {
                let sum = common::add_u64(map.get(k).map(|v| &v[..]), *n);
                map.insert(k.clone(), sum);
            }
            W::DelRange(a, b) => common::remove_range(map, a, b),
        }
    }
}

fn batch_of(ws: &[W]) -> WriteBatch {
    let mut b = WriteBatch::new();
    for w in ws {
        match w {
            W::Put(k, v) => b.put(k, v),
            W::Del(k) => b.delete(k),
            W::Add(k, n) => b.upsert(k, n.to_le_bytes()),
            W::DelRange(a, z) => b.delete_range(a, z),
        };
    }
    b
}

/// The workload of `seed`: `steps` steps over a few hundred keys.
fn workload(seed: u64, steps: usize) -> Vec<Step> {
    let mut r = Rng::new(seed);
    // Odd seeds put values of one size, the size `AddU64`'s sums have too, so that the
    // Bε-tree writes basements (and segments of puts alone) in their shaped form 1.
    let one_size = seed % 2 == 1;
    let key = |r: &mut Rng| format!("k{:03}", r.range(0, 300)).into_bytes();
    let mut out = Vec::with_capacity(steps);
    for _ in 0..steps {
        let roll = r.range(0, 100);
        let step = if roll < 4 {
            Step::Sync
        } else if roll < 7 {
            Step::Checkpoint
        } else {
            let bulk = roll < 17;
            let n = if bulk {
                r.range(40, 120)
            } else {
                r.range(1, 8)
            };
            let ws = (0..n)
                .map(|_| match r.range(0, 20) {
                    0..=10 => {
                        // Now and then a value long enough to go out of line.
                        let len = if r.chance(1, 30) {
                            3000
                        } else {
                            let len = r.range(0, 160);
                            if one_size {
                                8
                            } else {
                                len
                            }
                        };
                        W::Put(key(&mut r), value(r.next_u64(), len as usize))
                    }
                    11..=14 => W::Del(key(&mut r)),
                    15..=18 => W::Add(key(&mut r), r.range(1, 1000)),
                    _ => {
                        let a = key(&mut r);
                        let mut z = a.clone();
                        z[3] = z[3].saturating_add(r.range(1, 4) as u8);
                        W::DelRange(a, z)
                    }
                })
                .collect();
            let durability = if r.chance(3, 4) {
                Durability::Sync
            } else {
                Durability::None
            };
            Step::Write(ws, durability)
        };
        out.push(step);
    }
    out
}

/// The oracle: the batches in the order they were given to the database, and which prefixes
/// a recovered database may hold.
#[derive(Default)]
struct Model {
    batches: Vec<Vec<W>>,
    /// Batches known durable: a recovered database holds at least this many.
    durable: usize,
    /// Batches acknowledged (the call returned Ok).
    acked: usize,
}

impl Model {
    /// The states the database may recover to: every prefix from `min` batches to all the
    /// batches it was given (the last may have failed, and is then wholly in or out).
    fn allowed(&self, min: usize) -> Vec<(usize, Map)> {
        let mut map = Map::new();
        let mut out = Vec::new();
        for (i, b) in self.batches.iter().enumerate() {
            if i >= min {
                out.push((i, map.clone()));
            }
            apply(&mut map, b);
        }
        out.push((self.batches.len(), map));
        out
    }

    /// The database came back holding exactly `n` batches: the rest never happened.
    fn keep(&mut self, n: usize) {
        self.batches.truncate(n);
        self.durable = n;
        self.acked = n;
    }
}

/// Run `steps` on `db`, stopping at the first error. Returns whether all ran.
fn run_steps(db: &Db, steps: &[Step], model: &mut Model) -> bool {
    for step in steps {
        let ok = match step {
            Step::Write(ws, durability) => {
                model.batches.push(ws.clone());
                let ok = db.write_with(batch_of(ws), *durability).is_ok();
                if ok {
                    model.acked = model.batches.len();
                    if *durability == Durability::Sync {
                        model.durable = model.acked;
                    }
                }
                ok
            }
            Step::Sync | Step::Checkpoint => {
                let ok = match step {
                    Step::Sync => db.sync().is_ok(),
                    _ => db.checkpoint().is_ok(),
                };
                if ok {
                    model.durable = model.acked;
                }
                ok
            }
        };
        if !ok {
            return false;
        }
    }
    true
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sequence {
    ProcessCrash,
    PowerCut,
    ProcessCrashThenPowerCut,
    CrashDuringRecovery,
}

const SEQUENCES: [Sequence; 4] = [
    Sequence::ProcessCrash,
    Sequence::PowerCut,
    Sequence::ProcessCrashThenPowerCut,
    Sequence::CrashDuringRecovery,
];

struct Config {
    name: &'static str,
    opts: Options,
}

fn configs() -> Vec<Config> {
    let small = |o: Options| {
        o.cache_bytes(64 << 10)
            .checkpoint_wal_bytes(8 << 10)
            .merge_operator(AddU64)
    };
    vec![
        Config {
            name: "btree_4k_tiny_cache",
            opts: small(Options::default().btree(4 << 10)),
        },
        Config {
            name: "btree_64k",
            opts: Options::default()
                .btree(64 << 10)
                .checkpoint_wal_bytes(16 << 10)
                .merge_operator(AddU64),
        },
        Config {
            // 8 KiB: a leaf of one page takes no runs (`betree::policy`), and a crash must
            // meet runs being spilled and drained.
            name: "betree_8k_tiny_cache",
            opts: small(Options::default().betree(8 << 10, 4, 1 << 10)),
        },
        Config {
            name: "betree_64k",
            opts: Options::default()
                .betree(64 << 10, 8, 4 << 10)
                .checkpoint_wal_bytes(16 << 10)
                .merge_operator(AddU64),
        },
        // Every checkpoint flushes the memtable; two level-0 runs (T = 2) merge down, so the
        // crash points fall inside flushes and merges alike.
        Config {
            name: "lsm_leveled_tiny",
            opts: small(Options::default().lsm(tiny_lsm(LsmPolicy::Leveled, 2))),
        },
        Config {
            name: "lsm_tiered_tiny",
            opts: small(Options::default().lsm(tiny_lsm(LsmPolicy::Tiered, 2))),
        },
    ]
}

fn tiny_lsm(policy: LsmPolicy, t: u32) -> LsmConfig {
    LsmConfig {
        l0_runs: 2,
        memtable_bytes: 64 << 10,
        table_bytes: 64 << 10,
        block_bytes: 1 << 10,
        ..LsmConfig::with(policy, t)
    }
}

/// What one crash point showed, for the summary.
#[derive(Default, Debug)]
struct Tally {
    points: u64,
    by_sequence: [u64; 4],
    /// Crash points where the batch in flight came back.
    in_flight_survived: u64,
    /// Points where unacknowledged-durable (unsynced) batches beyond the durable ones survived.
    beyond_durable: u64,
    /// Points where the kill fell inside the first open (creation).
    killed_in_create: u64,
    /// Crashes during recovery that hit before the open finished.
    recovery_killed: u64,
}

/// Reopen after the crash and hold the database to the model; returns the batch count it
/// holds.
fn verify(env: &SimEnv, opts: &Options, model: &Model, min: usize, what: &str) -> usize {
    let db = Db::open_in(env, opts.clone()).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    let got: Map = common::dump(&db);
    let allowed = model.allowed(min);
    let Some((n, _)) = allowed.iter().rev().find(|(_, m)| *m == got) else {
        let (n, want) = allowed.last().unwrap();
        panic!(
            "{what}: recovered {} keys, which is no state between {min} and {n} batches \
             (durable {}, acked {}); the full state has {} keys; first difference: {}",
            got.len(),
            model.durable,
            model.acked,
            want.len(),
            first_difference(want, &got)
        );
    };
    db.check()
        .unwrap_or_else(|e| panic!("{what}: check after recovery: {e}"));
    *n
}

fn first_difference(want: &Map, got: &Map) -> String {
    for (k, v) in want {
        match got.get(k) {
            None => return format!("{} missing", k.escape_ascii()),
            Some(g) if g != v => return format!("{} differs", k.escape_ascii()),
            _ => {}
        }
    }
    match got.keys().find(|k| !want.contains_key(*k)) {
        Some(k) => format!("{} should not be there", k.escape_ascii()),
        None => "none".into(),
    }
}

/// One crash point: run the workload killed at IO `point`, then the sequence, then verify.
fn crash_point(
    cfg: &Config,
    (workload_seed, steps): (u64, &[Step]),
    point: u64,
    seq_seed: u64,
    seq: Sequence,
    tally: &mut Tally,
) {
    let what = format!(
        "{}: point {point}, {seq:?} (replay with \
         STRATA_CRASH_REPLAY={}:{workload_seed:#x}:{point}:{seq_seed:#x})",
        cfg.name, cfg.name
    );
    let env = SimEnv::new();
    let disk = env.disk().clone();
    disk.kill_at_io(point);
    let mut model = Model::default();
    match Db::open_in(&env, cfg.opts.clone()) {
        Ok(db) => {
            // A workload that ran to its end closes the database: a checkpoint, and when the
            // file is holey, its tail moved down and a second checkpoint.
            if run_steps(&db, steps, &mut model) && db.close().is_ok() {
                model.durable = model.acked;
            }
        }
        Err(_) => tally.killed_in_create += 1,
    }
    let mut r = Rng::new(seq_seed);
    r.next_u64(); // the draw that chose `seq`
    let mut min = model.durable;
    match seq {
        Sequence::ProcessCrash => {
            disk.clear_faults();
            // The files keep every acknowledged batch.
            min = model.acked;
        }
        Sequence::PowerCut => env.power_cut(r.next_u64()),
        Sequence::ProcessCrashThenPowerCut => {
            disk.clear_faults();
            let n = verify(&env, &cfg.opts, &model, model.acked, &what);
            model.keep(n);
            let db = Db::open_in(&env, cfg.opts.clone()).unwrap();
            let more = workload(r.next_u64(), 30);
            let more: Vec<Step> = more
                .into_iter()
                .filter(|s| matches!(s, Step::Write(..)))
                .map(|s| match s {
                    Step::Write(ws, _) => Step::Write(ws, Durability::Sync),
                    other => other,
                })
                .collect();
            assert!(
                run_steps(&db, &more, &mut model),
                "{what}: writes after recovery"
            );
            drop(db);
            env.power_cut(r.next_u64());
            min = model.durable;
        }
        Sequence::CrashDuringRecovery => {
            disk.clear_faults();
            // Recovery's IOs: syncs, the superblock and table, the log, the nodes replay
            // touches, and a checkpoint when the older log file was needed.
            disk.kill_at_io(if r.chance(3, 4) {
                r.range(1, 16)
            } else {
                r.range(1, 120)
            });
            match Db::open_in(&env, cfg.opts.clone()) {
                Ok(db) => drop(db),
                Err(_) => tally.recovery_killed += 1,
            }
            if r.chance(1, 2) {
                disk.clear_faults();
                min = model.acked;
            } else {
                env.power_cut(r.next_u64());
            }
        }
    }
    let n = verify(&env, &cfg.opts, &model, min, &what);
    tally.points += 1;
    tally.by_sequence[SEQUENCES.iter().position(|s| *s == seq).unwrap()] += 1;
    if n == model.batches.len() && n > model.acked {
        tally.in_flight_survived += 1;
    }
    if n > model.durable.max(min) {
        tally.beyond_durable += 1;
    }
}

/// What a workload run without faults showed: its IOs, the LSM-tree's merges, and whether its
/// close left the data file shorter (moved blocks down into holes).
struct Coverage {
    ios: u64,
    /// Checkpoints started in the background (log rotations), not asked for.
    background: u64,
    merges: u64,
    close_shrank: bool,
}

/// Run the workload without faults, counting its IOs, its background checkpoints, merges and
/// what its close did.
fn count_ios(cfg: &Config, steps: &[Step]) -> Coverage {
    let env = SimEnv::new();
    let db = Db::open_in(&env, cfg.opts.clone()).unwrap();
    let mut model = Model::default();
    assert!(run_steps(&db, steps, &mut model), "{}: workload", cfg.name);
    // Each checkpoint syncs the data file twice; one is the creation's, some are asked for.
    let checkpoints = db.metrics().data_io.syncs / 2;
    let asked = steps
        .iter()
        .filter(|s| matches!(s, Step::Checkpoint))
        .count() as u64;
    let background = checkpoints.saturating_sub(asked + 1);
    let merges = db.metrics().engine.detail("merges");
    let data = |env: &SimEnv| env.files().get(common::DATA).unwrap().contents().len();
    let open_len = data(&env);
    db.close().unwrap();
    let closed_len = data(&env);
    eprintln!(
        "{}: {merges} merges; data file {open_len} bytes open, {closed_len} closed",
        cfg.name
    );
    Coverage {
        ios: env.disk().ios(),
        background,
        merges,
        close_shrank: closed_len < open_len,
    }
}

/// Every crash point of `cfg`'s workload for each workload seed, in rounds with other sequence
/// seeds, until at least `min_points` were tried.
fn enumerate(cfg: &Config, workload_seeds: &[u64], steps: usize, min_points: u64) -> Tally {
    let mut tally = Tally::default();
    let (mut background, mut merges) = (0, 0);
    let mut shrank = Vec::new();
    let mut workloads: Vec<(u64, Vec<Step>, u64)> = Vec::new();
    let mut count = |ws: u64, shrank: &mut Vec<bool>| {
        let steps = workload(ws, steps);
        let c = count_ios(cfg, &steps);
        eprintln!("{}: workload {ws:#x}: {} IOs", cfg.name, c.ios);
        background += c.background;
        merges += c.merges;
        shrank.push(c.close_shrank);
        (ws, steps, c.ios)
    };
    for &ws in workload_seeds {
        workloads.push(count(ws, &mut shrank));
    }
    // Coverage, over the suite's workloads: crash points fall in background checkpoints (two
    // a workload on average), in the LSM-tree's merges, and in the moves of a close that finds
    // more than a tenth of the file free. Whether a close does depends on where the last
    // background checkpoint fell, and for the Bε-tree on when its drain thread's work was
    // installed, which a loaded machine moves: in the tiny-cache trees' files it did in three
    // workloads of four or more, and in two of four once with six suites on two cores. So
    // those suites take more workloads (new seeds) until three in four of theirs have moved,
    // at most twice as many again.
    let n = workload_seeds.len();
    let moves = ["btree_4k_tiny_cache", "betree_8k_tiny_cache"].contains(&cfg.name);
    let moved_enough = |shrank: &[bool]| 4 * shrank.iter().filter(|&&s| s).count() >= 3 * n;
    let mut extra = 0u64;
    while moves && !moved_enough(&shrank) && workloads.len() < 3 * n {
        extra += 1;
        let ws = workload_seeds[0] ^ (extra << 40);
        workloads.push(count(ws, &mut shrank));
    }
    let n = n as u64;
    assert!(
        background >= 2 * n,
        "{}: {background} background checkpoints in {n} workloads: at least two each, on average",
        cfg.name
    );
    if cfg.name.starts_with("lsm") {
        assert!(
            merges >= 5,
            "{}: {merges} merges: crash points must fall in merges",
            cfg.name
        );
    }
    let moved = shrank.iter().filter(|&&s| s).count();
    assert!(
        !moves || moved_enough(&shrank),
        "{}: close moves the file's tail into its holes in {moved} of {} workloads, so crash \
         points fall in the moves",
        cfg.name,
        shrank.len()
    );
    let mut round = 0u64;
    while tally.points < min_points {
        for (ws, steps, n) in &workloads {
            for point in 1..=n + 2 {
                let seq_seed = ws ^ (round << 48) ^ point.wrapping_mul(0x9e37_79b9_7f4a_7c15);
                let seq = SEQUENCES[(Rng::new(seq_seed).next_u64() % 4) as usize];
                crash_point(cfg, (*ws, steps), point, seq_seed, seq, &mut tally);
            }
        }
        round += 1;
    }
    tally
}

fn report(cfg: &Config, tally: &Tally, min_points: u64) {
    eprintln!("{}: {tally:?}", cfg.name);
    assert!(
        tally.points >= min_points,
        "{}: {} crash points, fewer than {min_points}",
        cfg.name,
        tally.points
    );
    assert!(
        tally.by_sequence.iter().all(|&n| n > 0),
        "every sequence ran"
    );
    assert!(tally.recovery_killed > 0, "some recoveries were cut short");
    assert!(
        tally.beyond_durable > 0,
        "some unsynced batches survived a crash: the crash model keeps page-cache state"
    );
}

/// Steps a workload: enough log for two background checkpoints a workload on average in
/// every configuration (200 were, until write batches gave their lengths as varints and the
/// log shrank; the tiered LSM-tree's workload then had one, as its memtable's charge, which
/// a checkpoint waits for the log to reach, stayed what it was).
const STEPS: usize = 230;

fn replay_from_env() -> Option<()> {
    let spec = std::env::var("STRATA_CRASH_REPLAY").ok()?;
    let parts: Vec<&str> = spec.split(':').collect();
    let [name, ws, point, seq_seed] = parts[..] else {
        panic!("STRATA_CRASH_REPLAY={spec}: want <config>:<workload seed>:<point>:<seed>");
    };
    let num = |s: &str| {
        match s.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => s.parse(),
        }
        .unwrap_or_else(|_| panic!("bad number {s}"))
    };
    let cfg = configs()
        .into_iter()
        .find(|c| c.name == name)
        .expect("config");
    let ws = num(ws);
    let steps = workload(ws, STEPS);
    let seq_seed = num(seq_seed);
    let seq = SEQUENCES[(Rng::new(seq_seed).next_u64() % 4) as usize];
    for _ in 0..20 {
        let mut tally = Tally::default();
        crash_point(&cfg, (ws, &steps), num(point), seq_seed, seq, &mut tally);
    }
    Some(())
}

fn default_suite(index: usize) {
    if replay_from_env().is_some() {
        return;
    }
    let cfg = &configs()[index];
    let tally = enumerate(cfg, &[0xc0ffee + index as u64], STEPS, 1000);
    report(cfg, &tally, 1000);
}

fn long_suite(index: usize) {
    let cfg = &configs()[index];
    let seeds: Vec<u64> = (0..4).map(|i| 0x10_0000 + i * 7 + index as u64).collect();
    let tally = enumerate(cfg, &seeds, STEPS, 10_000);
    report(cfg, &tally, 10_000);
}

#[test]
fn every_io_btree_4k_tiny_cache() {
    default_suite(0);
}

#[test]
fn every_io_btree_64k() {
    default_suite(1);
}

#[test]
fn every_io_betree_8k_tiny_cache() {
    default_suite(2);
}

#[test]
fn every_io_betree_64k() {
    default_suite(3);
}

#[test]
fn every_io_lsm_leveled_tiny() {
    default_suite(4);
}

#[test]
fn every_io_lsm_tiered_tiny() {
    default_suite(5);
}

#[test]
#[ignore = "long: 10,000+ crash points per configuration"]
fn long_every_io_lsm_leveled_tiny() {
    long_suite(4);
}

#[test]
#[ignore = "long: 10,000+ crash points per configuration"]
fn long_every_io_lsm_tiered_tiny() {
    long_suite(5);
}

#[test]
#[ignore = "long: 10,000+ crash points per configuration"]
fn long_every_io_btree_4k_tiny_cache() {
    long_suite(0);
}

#[test]
#[ignore = "long: 10,000+ crash points per configuration"]
fn long_every_io_btree_64k() {
    long_suite(1);
}

#[test]
#[ignore = "long: 10,000+ crash points per configuration"]
fn long_every_io_betree_8k_tiny_cache() {
    long_suite(2);
}

#[test]
#[ignore = "long: 10,000+ crash points per configuration"]
fn long_every_io_betree_64k() {
    long_suite(3);
}
