//! `strata bench sweep` end to end, on a tiny data set: the JSON report parses and holds every
//! point with positive times and predictions, says when the model used a stand-in profile,
//! the SVG is written, and no database is left in the directory, given or default. On a
//! simulated preset (`--sim`) the times are the preset's price of the data file's IO. Bad
//! arguments fail with exit code 1. Nothing here asserts on timing.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;
use tempfile::TempDir;

/// A tiny sweep, priced with the built-in profile (STRATA_PROFILE points at nothing).
fn sweep(tmp: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_strata"));
    c.env("STRATA_PROFILE", tmp.join("no-profile.json"))
        .args(["bench", "sweep", "--quick", "--records", "20000", "--cache"])
        .args(["256KiB", "--ops", "30"])
        .args(extra);
    c
}

fn succeeded(out: &Output) -> String {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    assert!(
        out.status.success(),
        "failed with {}: {}",
        out.status,
        text(&out.stderr)
    );
    text(&out.stdout)
}

#[test]
fn quick_sweep_json() {
    let tmp = TempDir::new().unwrap();
    let dbs = tmp.path().join("dbs");
    std::fs::create_dir(&dbs).unwrap();
    let svg = tmp.path().join("sweep.svg");
    let out = sweep(
        tmp.path(),
        &[
            "--json",
            "--max-node",
            "16KiB",
            "--dir",
            dbs.to_str().unwrap(),
            "--svg",
            svg.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap();
    let stdout = succeeded(&out);
    let r: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));

    assert_eq!(r["config"]["records"], 20000);
    assert_eq!(r["config"]["cache_bytes"], 256 << 10);
    assert_eq!(r["profile"]["is_default"], true);
    assert!(r["profile"]["source"].as_str().unwrap().contains("DEFAULT"));
    let points = r["points"].as_array().unwrap();
    for tree in ["btree", "betree"] {
        let sizes: Vec<u64> = points
            .iter()
            .filter(|p| p["tree"] == tree)
            .map(|p| p["node_bytes"].as_u64().unwrap())
            .collect();
        assert!(sizes.starts_with(&[4096, 16384]), "{tree}: {sizes:?}");
    }
    for p in points {
        for path in [
            "/insert/us_per_op",
            "/query/us_per_op",
            "/predicted/insert_us",
            "/predicted/query_us",
            "/query/reads_per_op",
        ] {
            let v = p.pointer(path).and_then(Value::as_f64).unwrap();
            assert!(v > 0.0 && v.is_finite(), "{path} = {v} in {p}");
        }
    }
    let trees = r["trees"].as_array().unwrap();
    assert_eq!(trees.len(), 2);
    for t in trees {
        assert_eq!(t["best"].as_array().unwrap().len(), 3);
        assert!(t["tuner"]["node_bytes"].as_u64().unwrap() >= 4096);
        for b in t["best"].as_array().unwrap() {
            assert!(b["largest_over_best"].as_f64().unwrap() >= 1.0, "{b}");
        }
    }
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(picture.starts_with("<svg") && picture.contains(r#"class="measured betree""#));
    assert_eq!(std::fs::read_dir(&dbs).unwrap().count(), 0);
}

#[test]
fn table_and_default_directory() {
    let tmp = TempDir::new().unwrap();
    let child = sweep(tmp.path(), &["--tree", "btree", "--max-node", "4KiB"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let stdout = succeeded(&child.wait_with_output().unwrap());
    assert!(stdout.contains("B+-tree: tuner's pick"), "{stdout}");
    assert!(stdout.contains("DEFAULT profile"), "{stdout}");
    assert!(!stdout.contains("Bε-tree:"), "{stdout}");
    let default_dir = std::env::temp_dir().join(format!("strata-sweep-{pid}"));
    assert!(
        !default_dir.exists(),
        "{} left behind",
        default_dir.display()
    );
}

#[test]
fn bad_arguments_exit_1() {
    let tmp = TempDir::new().unwrap();
    for extra in [
        &["--min-node", "64KiB", "--max-node", "16KiB"][..],
        &["--min-node", "3KiB"],
        &["--max-node", "32MiB"],
        &["--records", "10"],
        &["--dir", "/nonexistent/strata-sweep"],
        &["--sim", "floppy"],
    ] {
        let out = sweep(tmp.path(), extra).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{extra:?}: {out:?}");
        assert!(!out.stderr.is_empty());
    }
}

#[test]
fn simulated_sweep_prices_the_data_files_io_with_the_preset() {
    let tmp = TempDir::new().unwrap();
    let out = sweep(
        tmp.path(),
        &["--sim", "wd-black-1tb-2011", "--tree", "btree", "--json"],
    )
    .output()
    .unwrap();
    let r: Value = serde_json::from_str(&succeeded(&out)).unwrap();
    assert_eq!(r["config"]["sim"], "wd-black-1tb-2011");
    assert!(r["profile"]["source"]
        .as_str()
        .unwrap()
        .contains("simulated"));
    // The preset's own s, and every phase's time is its IO priced by it.
    assert!((r["profile"]["setup_us"].as_f64().unwrap() - 12_000.0).abs() < 1e-6);
    let points = r["points"].as_array().unwrap();
    assert!(!points.is_empty());
    for p in points {
        for phase in ["insert", "query"] {
            let us = p[phase]["us_per_op"].as_f64().unwrap();
            let io = p[phase]["io_model_us"].as_f64().unwrap();
            assert!(us > 0.0 && (us / io - 1.0).abs() < 1e-9, "{p}");
        }
    }
    // Nothing was written under the temporary directory.
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}
