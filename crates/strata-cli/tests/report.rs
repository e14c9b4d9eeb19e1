//! `strata bench rum` and `strata report` end to end, on tiny workloads in temporary
//! directories: every engine runs in its own worker process and reads back what it loaded, and
//! the report has every section.

use std::process::{Command, Output};

use serde_json::Value;

fn strata(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .output()
        .expect("run strata")
}

fn ok(args: &[&str]) -> String {
    let out = strata(args);
    assert!(
        out.status.success(),
        "strata {args:?} failed with {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The engines the default build has (no Go: the Go driver has its own test).
const ENGINES: &str = "strata-betree,strata-btree,redb,lmdb,fjall";

/// `bench seed001 --svg` writes the seed's Figures 1-3 beside the JSON rows.
#[test]
fn seed001_writes_its_figures() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("seed001.svg");
    let out = ok(&[
        "bench",
        "seed001",
        "--max-size",
        "64KiB",
        "--svg",
        svg.to_str().unwrap(),
        "--json",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    // Two sizes, two engines, six operations.
    assert_eq!(v["rows"].as_array().unwrap().len(), 2 * 2 * 6);
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<svg"), "{svg}");
    for title in ["Figure 1", "Figure 2", "Figure 3"] {
        assert!(svg.contains(title), "{title}");
    }
}

#[test]
fn rum_runs_every_engine_in_its_own_process() {
    let dir = tempfile::tempdir().unwrap();
    let scratch = dir.path().join("scratch");
    let svg = dir.path().join("rum.svg");
    let out = ok(&[
        "bench",
        "rum",
        "--records",
        "3000",
        "--scale",
        "2000",
        "--engines",
        ENGINES,
        "--cache",
        "8MiB",
        "--dir",
        scratch.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
        "--json",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let rows = v["rows"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["engine"].as_str().unwrap()).collect();
    assert_eq!(names, ENGINES.split(',').collect::<Vec<_>>());
    for r in rows {
        assert_eq!(r["wrong_reads"], 0, "{r}");
        for field in [
            "write_ops",
            "read_ops",
            "mixed_ops",
            "cold_read_ops",
            "space_amplification",
        ] {
            assert!(r[field].as_f64().unwrap() > 0.0, "{field} of {r}");
        }
        // Every engine writes at least its data once.
        assert!(r["write_amplification"].as_f64().unwrap() >= 1.0, "{r}");
        assert!(r["peak_rss_bytes"].as_u64().unwrap() > 0, "{r}");
        assert!(r["memory_bytes"].as_u64().unwrap() > 0, "{r}");
        // The durable rate includes the flush; the acknowledged one does not.
        assert!(
            r["write_ops"].as_f64().unwrap() <= r["acked_write_ops"].as_f64().unwrap(),
            "{r}"
        );
    }
    let strata_row = &rows[0];
    assert!(strata_row["engine_write_amplification"].as_f64().unwrap() >= 1.0);
    let scale = v["scale"].as_array().unwrap();
    // The main runs at 3,000 records and the extra scale at 2,000.
    assert_eq!(scale.len(), 10);
    assert_eq!(scale.iter().filter(|p| p["records"] == 2000).count(), 5);
    assert_eq!(scale.iter().filter(|p| p["records"] == 3000).count(), 5);
    assert!(std::fs::read_to_string(&svg)
        .unwrap()
        .contains("strata-betree"));
    assert!(!scratch.exists(), "scratch databases are removed");
    assert_eq!(v["spec"]["records"], 3000);
}

#[test]
fn an_unknown_engine_is_a_clear_error() {
    let out = strata(&["bench", "rum", "--records", "10", "--engines", "nosuch"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no engine \"nosuch\"") && err.contains("strata-betree"),
        "{err}"
    );
}

#[test]
fn report_quick_writes_every_section() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report");
    ok(&[
        "report",
        "--quick",
        "--out",
        out.to_str().unwrap(),
        "--dir",
        dir.path().join("scratch").to_str().unwrap(),
        "--sim",
        "samsung-860-pro",
        "--records",
        "2000",
        "--engines",
        "strata-betree,strata-btree,redb",
        "--seed001-max",
        "64KiB",
        "--sweep-records",
        "3000",
        "--versioned-inserts",
        "1200",
        "--at-scale",
        "3000",
    ]);
    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    let md = std::fs::read_to_string(out.join("index.md")).unwrap();
    for section in [
        "Device profile",
        "Tuning",
        "Seed 001",
        "Seed 003",
        "Seed 004",
        "Node-size sweep",
    ] {
        assert!(
            html.contains(&format!("<h2>{section}")),
            "HTML lacks {section}"
        );
        assert!(
            md.contains(&format!("## {section}")),
            "Markdown lacks {section}"
        );
    }
    // The figures are inline in the HTML and files beside the Markdown.
    assert!(html.matches("<svg").count() >= 3);
    for file in [
        "profile.svg",
        "rum.svg",
        "rum-fits.svg",
        "sweep.svg",
        "versioned.svg",
        "versioned.json",
        "profile.json",
        "rum.json",
        "seed001.json",
        "seed001.svg",
        "sweep.json",
        "tune.json",
    ] {
        assert!(out.join(file).exists(), "{file} missing");
    }
    let rum: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("rum.json")).unwrap()).unwrap();
    // Two settings of the same records: the data beyond the cache (at least 1 MiB, so not 4×
    // at this tiny size) and the seed's 256 MiB, where it fits.
    for (setting, cache) in [("beyond_memory", 1u64 << 20), ("fits_in_memory", 256 << 20)] {
        let o = &rum[setting];
        assert_eq!(o["rows"].as_array().unwrap().len(), 3, "{setting}");
        assert_eq!(o["spec"]["records"], 2000, "{setting}");
        assert_eq!(o["spec"]["cache_bytes"], cache, "{setting}");
        assert_eq!(o["spec"]["flush"], true, "{setting}");
    }
    for heading in ["### Data beyond the cache", "### Data within the cache"] {
        assert!(md.contains(heading), "Markdown lacks {heading}");
    }
    // The setting at scale, asked for here (--quick leaves it out otherwise): its own record
    // count at the seed's cache, on every engine quick enough above (all three at this size).
    let at_scale = &rum["at_scale"];
    assert_eq!(at_scale["spec"]["records"], 3000);
    assert_eq!(at_scale["spec"]["cache_bytes"], 256u64 << 20);
    assert_eq!(at_scale["rows"].as_array().unwrap().len(), 3);
    assert!(
        md.contains("### At scale: 3K records, 256 MiB cache"),
        "Markdown lacks the setting at scale"
    );
    // strata's two engines here, four priced phases each, in both settings the report
    // forecasts; the peer has none.
    for setting in ["beyond_memory", "at_scale"] {
        let f = rum["forecast"][setting].as_array().unwrap();
        assert_eq!(f.len(), 8, "{setting}");
        assert!(f.iter().all(|r| r["engine"] != "redb"));
        assert!(f
            .iter()
            .all(|r| r["measured"]["io_us"].as_f64().unwrap() > 0.0 || r["phase"] == "reads"));
    }
    assert!(
        md.contains("### Predicted against measured: strata's engines"),
        "Markdown lacks the forecast"
    );
    assert!(md.contains("| strata-betree | load |"), "{md}");
    // Every row's settings line states its flush.
    assert_eq!(md.matches("flush:").count(), 3, "{md}");
    assert!(
        !dir.path().join("scratch").exists(),
        "the scratch directory is removed"
    );
}
