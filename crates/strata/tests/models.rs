//! Model tests: fits recover known parameters from noisy synthetic data, the robust fit names
//! planted outliers, segmented regression finds planted breakpoints, Corollary 7's closed form
//! matches brute force, the simulator's batch pricing is the PDAM's, and the IO predictions
//! match cases computed by hand.

use strata::model::fit::{ols, robust_line, segmented, wls, Hinge};
use strata::model::optimal;
use strata::model::predict::{self, PredictInput};
use strata::model::{Affine, CostModel, Pdam, SplitMix64};
use strata::storage::sim::{SimPreset, PDAM_BLOCK};

fn close(got: f64, want: f64, rel: f64) -> bool {
    (got - want).abs() <= rel * want.abs()
}

/// Latencies of an affine device with multiplicative noise, several samples per size.
fn noisy_affine(s: f64, t: f64, noise: f64, seed: u64) -> (Vec<f64>, Vec<f64>) {
    let mut rng = SplitMix64::new(seed);
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    for k in 12..=20 {
        for _ in 0..20 {
            let x = (1u64 << k) as f64;
            xs.push(x);
            ys.push((s + t * x) * (1.0 + noise * rng.unit_noise()));
        }
    }
    (xs, ys)
}

#[test]
fn ols_and_wls_recover_s_and_t_from_noisy_latencies() {
    let (s, t) = (120e-6, 0.94e-9);
    let (xs, ys) = noisy_affine(s, t, 0.05, 1);
    let o = ols(&xs, &ys).unwrap();
    assert!(close(o.intercept, s, 0.05), "ols s {}", o.intercept);
    assert!(close(o.slope, t, 0.05), "ols t {}", o.slope);
    assert!(o.r2 > 0.98, "r2 {}", o.r2);
    let ws: Vec<f64> = ys.iter().map(|y| 1.0 / (y * y)).collect();
    let w = wls(&xs, &ys, &ws).unwrap();
    assert!(close(w.intercept, s, 0.03), "wls s {}", w.intercept);
    assert!(close(w.slope, t, 0.05), "wls t {}", w.slope);
}

#[test]
fn wls_with_equal_weights_is_ols() {
    let (xs, ys) = noisy_affine(1e-3, 2e-9, 0.1, 2);
    let a = ols(&xs, &ys).unwrap();
    let b = wls(&xs, &ys, &vec![3.0; xs.len()]).unwrap();
    assert!(close(a.intercept, b.intercept, 1e-9) && close(a.slope, b.slope, 1e-9));
}

#[test]
fn robust_line_names_planted_outliers_wherever_they_are() {
    let (s, t) = (15e-3, 8e-9);
    let xs: Vec<f64> = (12..=24).map(|k| (1u64 << k) as f64).collect();
    let mut rng = SplitMix64::new(3);
    let mut ys: Vec<f64> = xs
        .iter()
        .map(|x| (s + t * x) * (1.0 + 0.01 * rng.unit_noise()))
        .collect();
    ys[4] *= 2.5; // 64 KiB: a slow outlier in the middle
    ys[12] *= 0.4; // 16 MiB: implausibly fast
    let f = robust_line(&xs, &ys, 0.05).unwrap();
    let out: Vec<usize> = (0..xs.len()).filter(|&i| !f.inliers[i]).collect();
    assert_eq!(out, vec![4, 12]);
    assert!(close(f.fit.intercept, s, 0.03), "s {}", f.fit.intercept);
    assert!(close(f.fit.slope, t, 0.03), "t {}", f.fit.slope);
}

#[test]
fn segmented_flat_first_finds_a_planted_p() {
    // The PDAM shape, completion time L·max(1, p/P), with 3% noise, at p = 1, 2, 4, .., 64.
    for (p_true, seed) in [(2.9, 1), (3.3, 2), (5.5, 3), (12.0, 4)] {
        let mut rng = SplitMix64::new(seed);
        let xs: Vec<f64> = (0..7).map(|i| (1u64 << i) as f64).collect();
        let ys: Vec<f64> = xs
            .iter()
            .map(|&p| 100.0 * (p / p_true).max(1.0) * (1.0 + 0.03 * rng.unit_noise()))
            .collect();
        let ws: Vec<f64> = ys.iter().map(|y| 1.0 / (y * y)).collect();
        let f = segmented(&xs, &ys, Some(&ws), Hinge::FlatFirst).unwrap();
        assert!(
            close(f.breakpoint, p_true, 0.10),
            "planted {p_true}, found {}",
            f.breakpoint
        );
        assert!(close(f.slope_after, 100.0 / p_true, 0.10));
    }
}

#[test]
fn segmented_free_finds_a_planted_knee_between_two_slopes() {
    let mut rng = SplitMix64::new(5);
    let xs: Vec<f64> = (0..60).map(|i| i as f64).collect();
    let ys: Vec<f64> = xs
        .iter()
        .map(|&x| {
            let clean = if x < 23.5 {
                2.0 + 0.5 * x
            } else {
                2.0 + 0.5 * 23.5 + 3.0 * (x - 23.5)
            };
            clean + 0.5 * rng.unit_noise()
        })
        .collect();
    let f = segmented(&xs, &ys, None, Hinge::Free).unwrap();
    assert!(close(f.breakpoint, 23.5, 0.05), "knee {}", f.breakpoint);
    assert!(close(f.slope_before, 0.5, 0.2), "{}", f.slope_before);
    assert!(close(f.slope_after, 3.0, 0.05), "{}", f.slope_after);
    assert!(f.r2 > 0.99);
}

#[test]
fn corollary7_matches_brute_force() {
    for alpha in [3e-2, 1e-2, 2.04e-4, 1e-4, 7.8e-6 * 26.0, 1e-5] {
        let x = optimal::btree_optimal_items(alpha);
        let hi = (x * 3.0) as u64 + 10;
        let b = optimal::brute_force_argmin(1, hi, |n| optimal::btree_cost(alpha, n as f64));
        assert!(
            b == x.floor() as u64 || b == x.ceil() as u64,
            "alpha {alpha}: closed form {x}, brute force {b}"
        );
        // The asymptotic form is within a small constant factor.
        let approx = optimal::btree_optimal_items_approx(alpha);
        assert!(x / approx > 0.5 && x / approx < 2.5, "{x} vs {approx}");
    }
    // Bigger α (costlier transfer) means smaller nodes.
    assert!(optimal::btree_optimal_items(1e-3) < optimal::btree_optimal_items(1e-4));
}

#[test]
fn simulator_batches_are_priced_as_the_pdam() {
    for name in ["samsung-860-pro", "samsung-970-pro", "sandisk-ultra-ii"] {
        let m = SimPreset::find(name).unwrap().model();
        let pdam = Pdam::new(m.parallelism, PDAM_BLOCK, m.affine.cost(PDAM_BLOCK));
        for p in [1usize, 2, 3, 4, 8, 64] {
            let sizes = vec![PDAM_BLOCK; p];
            assert!(
                close(m.batch_s(&sizes), pdam.concurrent_s(&sizes), 1e-9),
                "{name} p={p}"
            );
        }
        // Queue depth 1 is the affine cost.
        assert!(close(m.batch_s(&[1 << 20]), m.affine.io_s(1 << 20), 1e-12));
    }
}

const S: f64 = 100e-6;
const T: f64 = 1e-9;

fn hand_btree(cache: u64) -> PredictInput {
    // 8-byte keys and values: leaf entries of 7 + 8 + 8 = 23 B, (4096 − 28) / 23 = 176 per 4 KiB
    // leaf at fill 1; 1000 leaves; fanout 10 → levels 1, 10, 100, 1000.
    let mut p = PredictInput::new(4096, 176 * 1000, 8, 8, cache);
    p.fanout = Some(10);
    p.fill = 1.0;
    p.inserts_per_checkpoint = f64::INFINITY;
    // The paper's M: encoded node bytes only.
    p.heap_accounting = false;
    p
}

#[test]
fn btree_prediction_hand_computed() {
    let m = Affine::new(S, T);
    let io = S + T * 4096.0;

    let cold = predict::btree(&hand_btree(0), &m);
    assert_eq!(cold.height, 4);
    assert_eq!(cold.leaves, 1000.0);
    assert_eq!(cold.records_per_leaf, 176.0);
    assert_eq!(cold.point.reads, 4.0);
    assert_eq!(cold.point.read_bytes, 4.0 * 4096.0);
    assert!(close(cold.point.seconds, 4.0 * io, 1e-12));
    // Insert: the same four reads, the leaf written back, and per 176 inserts a split writing a
    // new leaf and the parent.
    assert!(close(cold.insert.writes, 1.0 + 2.0 / 176.0, 1e-12));
    assert!(close(cold.insert.seconds, (5.0 + 2.0 / 176.0) * io, 1e-12));
    // A range of 1 + 2·176 records crosses two more leaves.
    let mut r = hand_btree(0);
    r.range_items = 1 + 2 * 176;
    assert_eq!(predict::btree(&r, &m).range.reads, 6.0);

    // The cache charges encoded sizes: an internal node is 24 + 12 + 9·(10 + 8) = 198 B. It
    // holds the root and the 10 nodes below it: two levels off.
    let two = predict::btree(&hand_btree(11 * 198), &m);
    assert_eq!(two.point.reads, 2.0);
    assert_eq!(two.cached_levels, 2.0);
    // ... and half of the third level.
    let half = predict::btree(&hand_btree(61 * 198), &m);
    assert!(close(half.point.reads, 1.5, 1e-12));
}

#[test]
fn btree_checkpoint_write_back_when_leaves_are_cached() {
    let m = Affine::new(S, T);
    // Everything cached: each checkpoint writes each dirtied leaf once. 1000 leaves and 1000
    // inserts per checkpoint dirty 1000·(1 − 1/e) leaves.
    let mut p = hand_btree(1 << 30);
    p.inserts_per_checkpoint = 1000.0;
    let pr = predict::btree(&p, &m);
    assert_eq!(pr.point.reads, 0.0);
    let want = 1.0 - (-1.0f64).exp() + 2.0 / 176.0;
    assert!(close(pr.insert.writes, want, 1e-9), "{}", pr.insert.writes);
}

fn hand_betree(cache: u64) -> PredictInput {
    // 64 KiB nodes, fanout 8, 4 KiB basements, 8-byte keys and values, fill 1:
    // internal head 28 + 8·(30 + 8) = 332 B, buffer 65204 B, segment 8150.5 → 8 KiB read;
    // leaf (65536 − 28) / 18 = 3639 records (8 + 8 bytes and two length varints); 64 leaves →
    // levels 1, 8, 64.
    let mut p = PredictInput::new(64 << 10, 3639 * 64, 8, 8, cache);
    p.fanout = Some(8);
    p.basement_bytes = 4096;
    p.fill = 1.0;
    p.inserts_per_checkpoint = f64::INFINITY;
    p.heap_accounting = false;
    p
}

#[test]
fn betree_prediction_hand_computed() {
    let m = Affine::new(S, T);
    // Heads: 332 + 8·332 + 64·(28 + 16 basements·(22 + 8)) = 35500 B; then the root's buffer.
    let heads = 332 + 8 * 332 + 64 * 508;
    let p = predict::betree_paper(&hand_betree(heads + 65204), &m);
    assert_eq!(p.height, 3);
    assert_eq!(p.leaves, 64.0);
    // Point: one 8 KiB segment at level 1, one 4 KiB basement at the leaf.
    assert_eq!(p.point.reads, 2.0);
    assert_eq!(p.point.read_bytes, 8192.0 + 4096.0);
    assert!(close(p.point.seconds, 2.0 * S + T * 12288.0, 1e-12));
    // Insert: 23-byte messages (8 + 8 + 7, compact), flushes of 65204 / 8 B; at each of the two
    // levels below the root a flush reads and rewrites a 64 KiB node.
    let f = 23.0 / (65204.0 / 8.0);
    assert!(close(p.insert.reads, 2.0 * f, 1e-12));
    assert!(close(p.insert.writes, 2.0 * f, 1e-12));
    assert!(close(p.insert.write_bytes, 2.0 * f * 65536.0, 1e-12));
    // In the paper's normalisation, r·(F/B + αF) per level per element, read and written.
    let per_level = 23.0 * (8.0 / 65204.0 + (T / S) * 8.0 * 65536.0 / 65204.0);
    assert!(close(p.insert.normalised(&m), 2.0 * 2.0 * per_level, 1e-9));

    // No cache: the heads are read too (the root stays pinned).
    let cold = predict::betree_paper(&hand_betree(0), &m);
    assert_eq!(cold.point.reads, 4.0);
    assert_eq!(cold.point.read_bytes, 4096.0 + 8192.0 + 4096.0 + 4096.0);

    // A range of 1 + 3639 records reaches the next leaf: its parent's segment and the records'
    // remaining bytes.
    let mut r = hand_betree(heads + 65204);
    r.range_items = 3640;
    let rp = predict::betree_paper(&r, &m);
    assert_eq!(rp.range.reads, 4.0);
    assert!(close(
        rp.range.read_bytes,
        12288.0 + 8192.0 + (3640.0 * 18.0 - 4096.0),
        1e-12
    ));
}

#[test]
fn the_cache_is_charged_as_the_engines_charge_it() {
    // With the engines' heap overhead (96 B per entry) the same cache holds fewer levels.
    let m = Affine::new(S, T);
    let mut p = hand_btree(110 * 4096);
    assert_eq!(
        predict::btree(&p, &m).point.reads,
        1.0 - (110.0 * 4096.0 - 111.0 * 198.0) / (1000.0 * 4076.0)
    );
    p.heap_accounting = true;
    let charged = predict::btree(&p, &m);
    // Internal nodes cost 198 + 128 + 9·48 = 758 B each, leaves 4076 + 128 + 176·96 = 21100 B.
    let left = 110.0 * 4096.0 - 111.0 * 758.0;
    assert!(close(
        charged.point.reads,
        1.0 - left / (1000.0 * 21100.0),
        1e-12
    ));
}

#[test]
fn betree_queries_read_less_than_a_node_per_level() {
    // Theorem 9's point: per uncached level a query reads about B/F, not B.
    let m = Affine::default_ssd();
    let mut p = PredictInput::new(4 << 20, 100_000_000, 16, 100, 256 << 20);
    p.fanout = Some(32);
    let pr = predict::betree_paper(&p, &m);
    let levels_read = pr.point.reads.max(1.0);
    assert!(pr.point.read_bytes / levels_read < (4 << 20) as f64 / 16.0);
    assert!(!pr.derivation.is_empty());
}
