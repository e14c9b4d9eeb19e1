//! A tiny node-size sweep on a real directory: every planned point is measured with positive
//! times and a prediction, the reported bests are the argmins of the measured points, the ratio
//! of the largest node's cost to the best is what the points say, the SVG draws a measured line
//! and a model curve per tree and marks the bests and the tuner's picks, and nothing is left
//! behind. Nothing here asserts on how fast anything was.

use std::path::PathBuf;

use strata::profile::DeviceProfile;
use strata_bench::sweep::{self, Config, Op, Tree};

/// A fresh directory under Cargo's scratch space for integration tests, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tiny(dir: &std::path::Path) -> Config {
    // The built-in profile, so the tuner's picks do not depend on this machine's saved one.
    let mut cfg = Config::new(dir, DeviceProfile::builtin(), "built-in (test)");
    cfg.profile_is_default = true;
    cfg.records = 20_000;
    cfg.cache_bytes = 256 << 10;
    cfg.min_node = 4 << 10;
    cfg.max_node = 64 << 10;
    cfg.ops = 40;
    cfg.min_ops = 40;
    cfg.phase_budget_s = 60.0;
    cfg.warmup_budget_s = 1.0;
    cfg.repetitions = 2;
    cfg
}

#[test]
fn tiny_sweep_measures_every_point_and_marks_the_bests() {
    let scratch = Scratch::new("sweep");
    let cfg = tiny(&scratch.0);
    let mut stages = Vec::new();
    let r = sweep::run(&cfg, |s| stages.push(s.to_string())).unwrap();
    assert!(stages.iter().any(|s| s.contains("loading")), "{stages:?}");

    for tree in [Tree::BTree, Tree::BeTree] {
        let summary = r.summary(tree).expect("a summary per tree");
        // The grid, plus the tuner's pick when it is in range.
        let mut want = cfg.grid(tree);
        if summary.tuner.in_sweep && !want.contains(&summary.tuner.node_bytes) {
            want.push(summary.tuner.node_bytes);
            want.sort_unstable();
        }
        let got: Vec<u64> = r.points_of(tree).map(|p| p.node_bytes).collect();
        assert_eq!(got, want, "{tree:?}");
        let curve: Vec<u64> = r
            .curve
            .iter()
            .filter(|c| c.tree == tree)
            .map(|c| c.node_bytes)
            .collect();
        assert_eq!(curve, [4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10]);

        for p in r.points_of(tree) {
            assert_eq!(p.fanout.is_some(), tree == Tree::BeTree, "{p:?}");
            for phase in [&p.insert, &p.query] {
                assert_eq!(phase.ops, [40, 40], "{p:?}");
                assert_eq!(phase.us_per_op_reps.len(), 2);
                assert!(
                    phase.us_per_op > 0.0 && phase.us_per_op.is_finite(),
                    "{p:?}"
                );
            }
            // The data is ~10x the cache: queries must read, inserts (and their checkpoint)
            // must write.
            assert!(p.query.reads_per_op > 0.0, "{p:?}");
            assert!(p.insert.writes_per_op > 0.0, "{p:?}");
            for op in Op::ALL {
                assert!(
                    p.predicted(op) > 0.0 && p.predicted(op).is_finite(),
                    "{p:?}"
                );
            }
            assert!(p.height >= 2 && p.leaves > 1, "{p:?}");
        }

        let pts: Vec<_> = r.points_of(tree).collect();
        let largest = pts.iter().map(|p| p.node_bytes).max().unwrap();
        for op in Op::ALL {
            let b = summary.best(op);
            let min = pts
                .iter()
                .map(|p| p.measured(op))
                .fold(f64::INFINITY, f64::min);
            assert_eq!(b.measured_best_us, min, "{tree:?} {op:?}");
            let at = pts
                .iter()
                .find(|p| p.node_bytes == b.measured_best_node)
                .unwrap();
            assert_eq!(at.measured(op), min);
            assert_eq!(b.largest_node, largest);
            assert!(b.largest_over_best >= 1.0);
            let at_largest = pts.iter().find(|p| p.node_bytes == largest).unwrap();
            assert!((b.largest_over_best - at_largest.measured(op) / min).abs() < 1e-12);
            assert_eq!(b.growth_exponent.is_some(), b.measured_best_node < largest);
        }
    }

    // With the built-in profile the tuner's B+-tree pick lies in 4..64 KiB and is measured.
    let bt = &r.summary(Tree::BTree).unwrap().tuner;
    assert!(bt.in_sweep, "{bt:?}");

    let svg = r.svg();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    for tree in ["btree", "betree"] {
        // One measured line and one model curve per tree in each of the three panels.
        assert_eq!(
            svg.matches(&format!(r#"class="measured {tree}""#)).count(),
            3
        );
        assert_eq!(
            svg.matches(&format!(r#"class="predicted {tree}""#)).count(),
            3
        );
        assert_eq!(
            svg.matches(&format!(r#"class="measured-best {tree}""#))
                .count(),
            3
        );
        let marks = svg
            .matches(&format!(r#"class="tuner-pick {tree}""#))
            .count()
            + svg
                .matches(&format!(r#"class="tuner-pick-outside {tree}""#))
                .count();
        assert_eq!(marks, 3, "{tree}");
    }
    assert!(svg.contains(r#"class="tuner-pick btree""#));
    assert!(svg.contains("built-in (test)"));

    let left: Vec<_> = std::fs::read_dir(&scratch.0).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn bad_configurations_are_refused_before_anything_is_made() {
    let scratch = Scratch::new("sweep-bad");
    let mut cfg = tiny(&scratch.0);
    cfg.min_node = 128 << 10;
    cfg.max_node = 64 << 10;
    assert!(sweep::run(&cfg, |_| {}).is_err());
    let mut cfg = tiny(&scratch.0.join("missing"));
    cfg.max_node = 8 << 10;
    assert!(sweep::run(&cfg, |_| {}).is_err());
    assert!(std::fs::read_dir(&scratch.0).unwrap().next().is_none());
}
