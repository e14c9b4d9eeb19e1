//! Tuner tests: the B+-tree pick is the brute-force minimum of the predicted cost and Corollary 7's
//! closed form matches its brute force; picks move the right way when α, the key size or the
//! cache change; every pick is a geometry the engines accept; the Bε-tree behaves as Corollaries
//! 11–12 say (queries about as cheap as the B+-tree's, inserts much cheaper); the predicted write
//! amplification of a load follows what loads on the simulated disk measure.

mod common;

use common::keys::rum_key;
use strata::model::predict;
use strata::model::{Affine, Pdam};
use strata::profile::DeviceProfile;
use strata::storage::SimEnv;
use strata::tune::{self, Mix, Workload};
use strata::{Db, Durability, Options, WriteBatch};

fn profile(s: f64, t: f64) -> DeviceProfile {
    DeviceProfile::from_models(
        "synthetic",
        Affine::new(s, t),
        Pdam::new(3.0, 64 << 10, s + t * 65536.0),
        1e9,
        1e-3,
    )
}

fn ssd() -> DeviceProfile {
    profile(120e-6, 0.94e-9)
}

/// A workload much larger than its cache, so node size matters for reads.
fn big(mix: Mix) -> Workload {
    let mut w = Workload::new(1_000_000_000);
    w.cache_bytes = 64 << 20;
    w.mix = mix;
    w
}

#[test]
fn btree_pick_is_the_brute_force_minimum_of_the_predicted_cost() {
    for mix in [Mix::Point, Mix::Insert, Mix::Range, Mix::Mixed] {
        let w = big(mix);
        let r = tune::recommend(&ssd(), &w);
        let (wi, wp, wr) = mix.weights();
        let m = ssd().affine_model();
        // Independently: price every allowed size and take the cheapest.
        let mut best = (f64::INFINITY, 0);
        let mut b = tune::BTREE_MIN_NODE;
        while b <= tune::BTREE_MAX_NODE {
            let mut inp = predict::PredictInput::new(
                b,
                w.keys,
                w.key_bytes,
                w.value_bytes,
                r.effective_cache_bytes,
            );
            inp.range_items = w.range_items;
            let p = predict::btree(&inp, &m);
            let cost = wi * p.insert.seconds + wp * p.point.seconds + wr * p.range.seconds;
            if cost < best.0 {
                best = (cost, b);
            }
            b *= 2;
        }
        assert_eq!(r.btree.node_bytes, best.1, "{mix:?}");
        let c7 = &r.btree.corollary7;
        assert!(
            (c7.optimum_items - c7.brute_force_items as f64).abs() <= 1.0,
            "{c7:?}"
        );
    }
}

#[test]
fn btree_node_shrinks_as_alpha_grows() {
    // From an HDD-like α (transfer cheap against the seek) to a slow-transfer device.
    let mut last = u64::MAX;
    let mut picks = Vec::new();
    for t in [0.2e-9, 1e-9, 5e-9, 25e-9, 125e-9] {
        let r = tune::recommend(&profile(120e-6, t), &big(Mix::Point));
        let c7 = r.btree.corollary7.optimum_bytes;
        assert!(r.btree.node_bytes <= last, "t {t}: {picks:?}");
        last = r.btree.node_bytes;
        picks.push((t, r.btree.node_bytes, c7));
    }
    assert!(
        picks.first().unwrap().1 > picks.last().unwrap().1,
        "{picks:?}"
    );
    // Corollary 7's optimum in bytes falls strictly.
    assert!(picks.windows(2).all(|w| w[1].2 < w[0].2), "{picks:?}");
}

#[test]
fn btree_node_grows_with_the_key_size() {
    // Corollary 7 in bytes rises strictly with the item size (fewer items per node, more bytes).
    // The tuner's pick also counts whole levels, which are discrete: between neighbouring key
    // sizes a level can appear or vanish and the pick jump either way, so its direction is
    // checked between far-apart sizes.
    let pick = |key: u64| {
        let mut w = big(Mix::Point);
        w.key_bytes = key;
        w.cache_bytes = 1 << 20;
        let r = tune::recommend(&ssd(), &w);
        (r.btree.node_bytes, r.btree.corollary7.optimum_bytes)
    };
    let picks: Vec<(u64, f64)> = [8u64, 32, 128, 512, 2048]
        .iter()
        .map(|&k| pick(k))
        .collect();
    assert!(picks.windows(2).all(|w| w[1].1 > w[0].1), "{picks:?}");
    assert!(
        picks.last().unwrap().0 > picks.first().unwrap().0,
        "{picks:?}"
    );
}

#[test]
fn btree_node_shrinks_once_the_cache_holds_the_upper_levels() {
    // With next to no cache every level is read and Corollary 7's trade-off sets the size; once
    // the cache holds every internal level only the leaf is read, and the smallest leaf is
    // cheapest. (In between, the pick follows whole levels entering the cache.)
    let pick = |cache: u64| {
        let mut w = big(Mix::Point);
        w.cache_bytes = cache;
        tune::recommend(&ssd(), &w).btree.node_bytes
    };
    let cold = pick(1 << 20);
    let warm = pick(4 << 30);
    assert_eq!(warm, tune::BTREE_MIN_NODE);
    assert!(cold > warm, "{cold} vs {warm}");
    assert_eq!(pick(64 << 30), tune::BTREE_MIN_NODE);
}

#[test]
fn every_pick_is_a_geometry_the_engines_accept() {
    for (s, t) in [(120e-6, 0.94e-9), (12e-3, 8.5e-9), (20e-6, 0.3e-9)] {
        for mix in [Mix::Point, Mix::Insert, Mix::Range, Mix::Mixed] {
            for keys in [1_000u64, 1_000_000, 1_000_000_000] {
                let mut w = Workload::new(keys);
                w.mix = mix;
                let r = tune::recommend(&profile(s, t), &w);
                let b = r.btree.node_bytes;
                assert!(b.is_power_of_two() && (4 << 10..=4 << 20).contains(&b));
                let e = &r.betree;
                assert!(e.node_bytes.is_power_of_two());
                assert!((64 << 10..=16 << 20).contains(&e.node_bytes));
                assert!((4..=64).contains(&e.fanout));
                assert!(e.basement_bytes.is_power_of_two() && e.basement_bytes >= 4096);
                assert_eq!(e.node_bytes % e.basement_bytes, 0);
            }
        }
    }
}

#[test]
fn betree_queries_match_the_btree_and_inserts_are_far_cheaper() {
    // Corollaries 11 and 12: with per-child segments the Bε-tree's point query costs about what
    // the B+-tree's does, while its inserts are much cheaper. (The cache must hold the resident
    // node heads, about 1% of the data here; a smaller one costs the Bε-tree a head read per
    // level.)
    let mut w = big(Mix::Mixed);
    w.cache_bytes = 16 << 30;
    let r = tune::recommend(&ssd(), &w);
    let (bt, be) = (&r.btree.prediction, &r.betree.prediction);
    assert!(
        be.point.seconds <= 1.25 * bt.point.seconds,
        "{} vs {}",
        be.point.seconds,
        bt.point.seconds
    );
    assert!(be.insert.seconds * 5.0 < bt.insert.seconds);
    // Table 3's sensitivity: past the B+-tree's best size its cost climbs much faster than the
    // Bε-tree's.
    let at = |b: u64| r.sensitivity.iter().find(|s| s.node_bytes == b).unwrap();
    let bt_growth = at(4 << 20).btree_point_s / at(256 << 10).btree_point_s;
    let be_growth = at(4 << 20).betree_point_s / at(256 << 10).betree_point_s;
    assert!(bt_growth > 2.0 * be_growth, "{bt_growth} vs {be_growth}");
}

#[test]
fn data_that_fits_in_the_cache_is_tuned_cold_and_says_so() {
    let w = Workload::new(1_000_000);
    let r = tune::recommend(&ssd(), &w);
    assert_eq!(r.effective_cache_bytes, 0);
    assert!(
        r.notes.iter().any(|n| n.contains("fits in the")),
        "{:?}",
        r.notes
    );
    let mut large = big(Mix::Mixed);
    large.cache_bytes = 1 << 30;
    assert_eq!(
        tune::recommend(&ssd(), &large).effective_cache_bytes,
        1 << 30
    );
}

#[test]
fn seed002_table_uses_the_measured_points() {
    let mut p = ssd();
    // Two measured sizes: the table has exactly those rows, with their IOPS.
    p.affine.points = [(4096u64, 200e-6), (65536, 400e-6)]
        .iter()
        .map(|&(bytes, mean_s)| strata::profile::AffinePoint {
            bytes,
            ios: 10,
            mean_s,
            median_s: mean_s,
            stddev_s: 0.0,
            fitted: true,
        })
        .collect();
    let w = Workload::new(1_000_000_000);
    let r = tune::recommend(&p, &w);
    assert_eq!(r.iops.len(), 2);
    assert!((r.iops[0].iops - 5000.0).abs() < 1e-6);
    // hops = log_b N with b = 4096 / 26 keys per node.
    let b: f64 = 4096.0 / 26.0;
    assert!((r.iops[0].hops - 1e9f64.ln() / b.ln()).abs() < 1e-9);
    assert!((r.iops[0].queries_per_s - 5000.0 / r.iops[0].hops).abs() < 1e-6);
    assert!(r.iops.iter().all(|i| i.measured));
    serde_json::to_string(&r).unwrap();
}

#[test]
fn betree_insert_cpu_grows_as_basements_shrink() {
    let m = ssd().affine_model();
    let cpu = |basement: u64| {
        let mut inp = predict::PredictInput::new(4 << 20, 1_000_000, 16, 100, 0);
        inp.fanout = Some(43);
        inp.basement_bytes = basement;
        predict::betree_engine(&inp, &m).insert.cpu_seconds
    };
    // A flush of ~740 messages rebuilds most of a 4 KiB-basement leaf, few 64 KiB basements.
    assert!(
        cpu(4 << 10) > 1.5 * cpu(64 << 10),
        "{} {}",
        cpu(4 << 10),
        cpu(64 << 10)
    );
    assert!(cpu(16 << 10) < cpu(4 << 10));
    // The B+-tree prices IO only.
    let bt = predict::btree(
        &predict::PredictInput::new(64 << 10, 1_000_000, 16, 100, 0),
        &m,
    );
    assert_eq!(bt.insert.cpu_seconds, 0.0);
}

#[test]
fn betree_nodes_stay_a_small_part_of_the_cache() {
    for cache in [1u64 << 20, 8 << 20, 64 << 20, 1 << 30] {
        let mut w = Workload::new(100_000_000);
        w.cache_bytes = cache;
        let r = tune::recommend(&ssd(), &w);
        let node = r.betree.node_bytes;
        assert!(
            node * tune::CACHE_NODES <= cache || node == tune::BETREE_MIN_NODE,
            "{node} with a {cache}-byte cache"
        );
    }
}

#[test]
fn predicted_load_write_amplification_follows_measured_loads() {
    // The load at a small scale: random 16-byte keys and 100-byte values in batches of
    // 1,000, the data about 4× the cache, a checkpoint every 4 MiB of log (so a handful during
    // the load, as 64 MiB gives at 2M records). Measured WA counts the log and the data file.
    let (n, cache, checkpoint) = (150_000u64, 4u64 << 20, 4u64 << 20);
    let m = ssd().affine_model();
    let mut rows = Vec::new();
    for (node, fanout) in [(128u64 << 10, 4u64), (128 << 10, 8), (256 << 10, 16)] {
        let opts = Options::default()
            .betree(node as usize, fanout as usize, 4096)
            .cache_bytes(cache as usize)
            .checkpoint_wal_bytes(checkpoint)
            .durability(Durability::None);
        let db = Db::open_in(&SimEnv::new(), opts).unwrap();
        for b in 0..n / 1000 {
            let mut batch = WriteBatch::new();
            for i in b * 1000..(b + 1) * 1000 {
                batch.put(rum_key(i), [i as u8; 100]);
            }
            db.write(batch).unwrap();
        }
        let measured = db.metrics().write_amplification;
        let mut inp = predict::PredictInput::new(node, n, 16, 100, cache);
        inp.fanout = Some(fanout);
        inp.basement_bytes = 4096;
        inp.inserts_per_checkpoint = predict::checkpoint_inserts(checkpoint, 16, 100);
        let load = predict::betree_load(&inp, &m);
        let paper = predict::betree_paper(&inp, &m).insert.write_bytes / 116.0 + load.log;
        eprintln!(
            "node {node} F {fanout}: measured WA {measured:.2}, predicted {load:?}, paper's \
             account at N {paper:.2}"
        );
        assert!(
            (load.total / measured - 1.0).abs() <= 0.35,
            "node {node} F {fanout}: predicted {:.2}, measured {measured:.2}",
            load.total
        );
        rows.push((measured, load.total));
    }
    // Flushes into uncached leaves are spilled as runs, so a leaf is rewritten about once per
    // its size in runs whatever the fanout; what a small fanout costs is more internal nodes,
    // fewer of them cached. The engine and the model alike write more at 128 KiB / F 4 than
    // at 256 KiB / F 16 (F 8 falls within the model's error of either).
    for pick in [|r: &(f64, f64)| r.0, |r: &(f64, f64)| r.1] {
        assert!(pick(&rows[0]) > pick(&rows[2]), "{rows:?}");
    }
}

#[test]
fn the_tuner_reports_the_write_amplification_of_its_pick() {
    let mut w = Workload::new(10_000_000);
    w.cache_bytes = 256 << 20;
    let r = tune::recommend(&ssd(), &w);
    let wa = r.betree.load_wa;
    // The log alone is (116 + 10) / 116; leaves are rewritten whole, F/fill times per byte at
    // most, so the pick's WA lies between the log and that plus the internal levels.
    assert!((wa.log - 126.0 / 116.0).abs() < 1e-12);
    assert!((wa.total - (wa.log + wa.leaves + wa.internal)).abs() < 1e-9);
    assert!(wa.leaves > 0.0 && wa.internal > 0.0);
    assert!(wa.leaves < r.betree.fanout as f64 * 131.0 / 116.0, "{wa:?}");
    // Later inserts cost more than the load's average: early on the leaves fit in the cache.
    assert!(wa.marginal > wa.total, "{wa:?}");
}

/// A B+-tree chosen for data that outgrows the cache rewrites a leaf per insert; the tuner says
/// so, with both trees' predicted write amplification, and says nothing when the data fits.
#[test]
fn the_tuner_warns_of_the_btrees_write_amplification_beyond_the_cache() {
    let p = DeviceProfile::builtin();
    let mut big = Workload::new(100_000_000);
    big.cache_bytes = 64 << 20;
    let r = tune::recommend(&p, &big);
    let warning = r
        .notes
        .iter()
        .find(|n| n.starts_with("The data outgrows the cache"))
        .unwrap_or_else(|| panic!("no warning: {:?}", r.notes));
    let logical = (big.key_bytes + big.value_bytes) as f64;
    let bt_wa = r.btree.prediction.insert.write_bytes / logical + r.betree.load_wa.log;
    assert!(
        bt_wa > 4.0 * r.betree.load_wa.marginal,
        "{bt_wa} {:?}",
        r.betree.load_wa
    );
    assert!(warning.contains(&format!("{bt_wa:.0}×")), "{warning}");
    // The ratio that makes it wrong, and the WA of 64 KiB nodes, which rewrite more per insert.
    let ratio = big.data_bytes() / big.cache_bytes as f64;
    assert!(ratio > 100.0, "{ratio}");
    assert!(
        warning.contains(&format!("about {ratio:.1}× it")),
        "{warning}"
    );
    assert_ne!(r.btree.node_bytes, 64 << 10);
    let wide = r
        .btree
        .table
        .iter()
        .find(|row| row.node_bytes == 64 << 10)
        .expect("64 KiB is priced");
    let wide_wa = wide.insert.write_bytes / logical + r.betree.load_wa.log;
    assert!(wide_wa > bt_wa, "{wide_wa} {bt_wa}");
    assert!(
        warning.contains(&format!("({wide_wa:.0}× with 64 KiB nodes)")),
        "{warning}"
    );
    let mut small = Workload::new(100_000);
    small.cache_bytes = 1 << 30;
    let r = tune::recommend(&p, &small);
    assert!(
        !r.notes
            .iter()
            .any(|n| n.starts_with("The data outgrows the cache")),
        "{:?}",
        r.notes
    );
}

/// IO per operation measured on the simulated device, from the data file's counters.
#[derive(Clone, Copy, Debug, Default)]
struct Io {
    reads: f64,
    read_bytes: f64,
    writes: f64,
    write_bytes: f64,
}

impl Io {
    fn between(a: &strata::IoSnapshot, b: &strata::IoSnapshot, ops: u64) -> Io {
        let n = ops as f64;
        Io {
            reads: (b.reads - a.reads) as f64 / n,
            read_bytes: (b.bytes_read - a.bytes_read) as f64 / n,
            writes: (b.writes - a.writes) as f64 / n,
            write_bytes: (b.bytes_written - a.bytes_written) as f64 / n,
        }
    }

    fn ios(&self) -> f64 {
        self.reads + self.writes
    }

    fn bytes(&self) -> f64 {
        self.read_bytes + self.write_bytes
    }

    /// What the simulated device charges for these IOs, one at a time: each IO of x bytes
    /// costs s + t·x, so the sum is s per IO plus t per byte.
    fn seconds(&self, m: &Affine) -> f64 {
        self.ios() * m.setup_s + self.bytes() * m.per_byte_s
    }
}

/// Load `n0` random records (16-byte keys, 100-byte values, batches of 1,000) into a Bε-tree
/// of this geometry on the simulated device, then measure the data file's IO over `window`
/// more inserts, and over `queries` point queries of loaded keys. Returns (insert, point), per
/// operation.
fn measure_betree(row: &tune::BeTreeRow, w: &Workload, n0: u64, window: u64) -> (Io, Io) {
    let opts = Options::default()
        .betree(
            row.node_bytes as usize,
            row.fanout as usize,
            row.basement_bytes as usize,
        )
        .cache_bytes(w.cache_bytes as usize)
        .checkpoint_wal_bytes(w.checkpoint_wal_bytes)
        .durability(Durability::None)
        // Drains inline: the same drains at the same points on every run, as the account
        // prices them (on the drain thread, one still running when the queries start keeps
        // its runs through them).
        .background_merges(false);
    let db = Db::open_in(&SimEnv::new(), opts).unwrap();
    let put = |from: u64, to: u64| {
        for b in (from..to).step_by(1000) {
            let mut batch = WriteBatch::new();
            for i in b..(b + 1000).min(to) {
                batch.put(rum_key(i), [i as u8; 100]);
            }
            db.write(batch).unwrap();
        }
    };
    // The queries are measured halfway through the window, at the size the tuner priced.
    let mid = n0 + window / 2;
    put(0, n0);
    let a = db.metrics().data_io;
    put(n0, mid);
    let b = db.metrics().data_io;
    let queries = 2_000;
    let mut rng = strata::model::SplitMix64::new(7);
    for _ in 0..queries {
        let k = rum_key(rng.below(mid));
        assert!(db.get(k).unwrap().is_some());
    }
    let c = db.metrics().data_io;
    put(mid, n0 + window);
    let d = db.metrics().data_io;
    let (first, second) = (Io::between(&a, &b, window), Io::between(&c, &d, window));
    let inserts = Io {
        reads: first.reads + second.reads,
        read_bytes: first.read_bytes + second.read_bytes,
        writes: first.writes + second.writes,
        write_bytes: first.write_bytes + second.write_bytes,
    };
    (inserts, Io::between(&b, &c, queries))
}

/// Issue 19: the tuner ranks Bε-tree geometries with the engine's account (runs spilled beside
/// leaves that are not in memory), and what it predicts is what the engine does. On three
/// simulated devices (seed 000's Table 1 SSDs and a Table 2 HDD) the tuner's best geometry at
/// every node size the cache allows is loaded with 120K records (data about 3–6× the cache), then
/// 320K more inserts are measured, and 2,000 point queries halfway through them (at the size the
/// tuner priced), IO counted exactly and priced with the device's s + t·x. Checkpoints are kept
/// out of the window (a 1 TiB log interval), so the window measures flushes, spills, drains and
/// evictions only. The window is long enough to hold a whole cycle of drains: a leaf drains its
/// runs after up to 16 spills, and with 60K inserts, as this test had before, a geometry could
/// catch most of its leaves between two drains and measure half its write cost.
///
/// - The pick is within one power of two of the measured best node size, or its measured cost
///   within 15% of the best's.
/// - Geometries the account sets clearly apart (predicted costs 25% or more apart) are measured
///   in the same order.
/// - Predicted IOs and bytes per insert are within a factor of 1.7 of measured at every
///   geometry, and the bytes are closer than Theorem 9's (which rewrites a leaf on every flush).
///   On the last run: IOs 1.15–1.47× measured (the account counts more IOs than the engine
///   does), bytes 0.62–1.34×.
/// - Point reads within 15% of measured from 256 KiB nodes up (0.93–1.06× on the last run;
///   0.83–1.32× at all sizes).
#[test]
fn the_betree_ranking_follows_measured_io_on_the_simulator() {
    let (n0, window) = (120_000u64, 320_000u64);
    // The three devices run side by side: each is a load of its own on a SimEnv of its own.
    let presets = [
        ("samsung-860-pro", Mix::Insert, 4u64 << 20),
        ("samsung-970-pro", Mix::Mixed, 8 << 20),
        ("wd-black-1tb-2011", Mix::Insert, 8 << 20),
    ];
    std::thread::scope(|s| {
        for (name, mix, cache) in presets {
            s.spawn(move || {
                let sim = strata::storage::sim::SimPreset::find(name).unwrap().model();
                let m = sim.affine;
                let p = DeviceProfile::from_models(
                    name,
                    m,
                    Pdam::new(sim.parallelism, 64 << 10, m.cost(64 << 10)),
                    sim.bandwidth_bytes_per_s.unwrap_or(1e9),
                    sim.sync_s,
                );
                let mut w = Workload::new(n0 + window / 2);
                w.cache_bytes = cache;
                w.mix = mix;
                w.checkpoint_wal_bytes = 1 << 40;
                let r = tune::recommend(&p, &w);
                let (wi, wp, _) = mix.weights();
                // (node, predicted IO seconds, measured IO seconds) per geometry. The tuner's objective
                // also has a CPU term; IO alone is what the device measures.
                let mut rows = Vec::new();
                for row in r
                    .betree
                    .table
                    .iter()
                    .filter(|r| r.node_bytes * tune::CACHE_NODES <= cache)
                {
                    let (ins, pt) = measure_betree(row, &w, n0, window);
                    let predicted = wi * row.insert.seconds + wp * row.point.seconds;
                    let measured = wi * ins.seconds(&m) + wp * pt.seconds(&m);
                    let mut inp = predict::PredictInput::new(row.node_bytes, w.keys, 16, 100, cache);
                    inp.fanout = Some(row.fanout);
                    inp.basement_bytes = row.basement_bytes;
                    inp.inserts_per_checkpoint = f64::INFINITY;
                    let paper = predict::betree_paper(&inp, &m).insert;
                    let what = format!(
                        "{name} {mix:?}: node {} KiB F {} basement {} KiB",
                        row.node_bytes >> 10,
                        row.fanout,
                        row.basement_bytes >> 10
                    );
                    eprintln!(
                        "{what}: per insert predicted {:.4} IOs {:.0} B, measured {:.4} IOs {:.0} B, \
                         Theorem 9 {:.4} IOs {:.0} B; per query predicted {:.2} IOs, measured {:.2}; \
                         objective predicted {:.1} µs, measured {:.1} µs",
                        row.insert.ios(),
                        row.insert.bytes(),
                        ins.ios(),
                        ins.bytes(),
                        paper.ios(),
                        paper.bytes(),
                        row.point.reads,
                        pt.reads,
                        predicted * 1e6,
                        measured * 1e6
                    );
                    let within = |p: f64, m: f64| p / m <= 1.7 && m / p <= 1.7;
                    assert!(within(row.insert.ios(), ins.ios()), "{what}: IOs");
                    assert!(within(row.insert.bytes(), ins.bytes()), "{what}: bytes");
                    // Nodes of 256 KiB and more hold their internal levels in the cache, where the
                    // account claims point reads to 15%. (Before it let a put buffered above the leaf
                    // settle a query, it counted a basement read for those too: 10–27% over here.)
                    if row.node_bytes >= 256 << 10 {
                        assert!(
                            (row.point.reads / pt.reads - 1.0).abs() <= 0.15,
                            "{what}: point reads {:.3} predicted, {:.3} measured",
                            row.point.reads,
                            pt.reads
                        );
                    }
                    assert!(
                        (row.insert.bytes() / ins.bytes()).ln().abs()
                            < (paper.bytes() / ins.bytes()).ln().abs(),
                        "{what}: Theorem 9's bytes are closer"
                    );
                    rows.push((row.node_bytes, predicted, measured));
                }
                let best = rows
                    .iter()
                    .min_by(|a, b| a.2.total_cmp(&b.2))
                    .copied()
                    .unwrap();
                let pick = *rows.iter().find(|x| x.0 == r.betree.node_bytes).unwrap();
                let steps = (pick.0 as f64 / best.0 as f64).log2().abs();
                eprintln!(
                    "{name}: pick {} KiB, F {}, measured best {} KiB",
                    pick.0 >> 10,
                    r.betree.fanout,
                    best.0 >> 10
                );
                assert!(
                    steps <= 1.0 || pick.2 <= 1.15 * best.2,
                    "{name}: pick {} KiB measures {:.1} µs, best {} KiB {:.1} µs",
                    pick.0 >> 10,
                    pick.2 * 1e6,
                    best.0 >> 10,
                    best.2 * 1e6
                );
                for a in &rows {
                    for b in &rows {
                        if a.1 * 1.25 <= b.1 {
                            assert!(
                                a.2 < b.2,
                                "{name}: predicted {} KiB ({:.1} µs) well below {} KiB ({:.1} µs), \
                                 measured {:.1} against {:.1} µs",
                                a.0 >> 10,
                                a.1 * 1e6,
                                b.0 >> 10,
                                b.1 * 1e6,
                                a.2 * 1e6,
                                b.2 * 1e6
                            );
                        }
                    }
                }
            });
        }
    });
}
