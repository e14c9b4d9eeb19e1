//! The seed 001 driver on small sizes: every operation is measured for both trees, the
//! predicted ones carry predictions, and once the data outgrows the cache the headline results
//! hold: random inserts cost the Bε-tree fewer IOs than the B+-tree, random searches cost it
//! more.

use strata_bench::seed001::{self, Config};

#[test]
fn seed001_small_sizes() {
    let cfg = Config {
        min_bytes: 32 << 10,
        max_bytes: 1 << 20,
        ..Config::default()
    };
    let report = seed001::run(&cfg, |_| {}).unwrap();
    // Six sizes, two engines, six operations.
    assert_eq!(report.rows.len(), 6 * 2 * 6);
    for r in &report.rows {
        // Data under the budget may stay resident (the Bε-tree's flat basements are charged
        // little beyond their encoding): only operations on data that outgrows it must do IO.
        let fits = (r.data_bytes as usize) < report.cache_bytes;
        assert!(
            r.measured_ios > 0 || r.op.contains("search") || fits,
            "{r:?}"
        );
        let predicted = matches!(
            r.op,
            "random insert" | "random search" | "range search" | "range search, mean of 5"
        );
        assert_eq!(r.predicted_ios.is_some(), predicted, "{r:?}");
    }
    // The mean of five consecutive range searches is at most the first one's IOs (later ones
    // find what the first settled), and both read the data at the largest size.
    let get = |e: &str, op: &str| {
        report
            .rows
            .iter()
            .find(|r| r.data_bytes == 1 << 20 && r.engine == e && r.op == op)
            .unwrap()
            .measured_ios
    };
    for e in ["btree", "betree"] {
        let (first, mean) = (get(e, "range search"), get(e, "range search, mean of 5"));
        eprintln!("1 MiB {e}: range search {first} IOs, mean of 5 {mean}");
        assert!(
            mean <= first && mean >= (1 << 20) / 4096,
            "{e}: {first} then {mean}"
        );
    }
    // Figures 1–3: three panels, each with the measured and predicted lines.
    let svg = report.svg();
    for title in [
        "insert (Figure 1)",
        "search (Figure 2)",
        "range search, one query",
    ] {
        assert!(svg.contains(title), "{title}");
    }
    assert!(svg.matches("<polyline").count() >= 3 * 4, "{svg}");
    let (size, [ins_m, _, search_m, _]) = *report.ratios().last().unwrap();
    assert_eq!(size, 1 << 20);
    eprintln!("1 MiB: random insert B+/Bε {ins_m:?}, random search Bε/B+ {search_m:?}");
    assert!(
        ins_m.unwrap() > 2.0,
        "random inserts: B+-tree over Bε-tree IOs {ins_m:?}"
    );
    assert!(
        search_m.unwrap() > 1.0,
        "random searches: Bε-tree over B+-tree IOs {search_m:?}"
    );
}
