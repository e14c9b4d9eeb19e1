//! End-to-end tests of `strata version ...` and `strata bench versioned`: the real executable
//! against versioned databases in temporary directories, over both engines; bad input exits
//! non-zero with a clear message and leaves every file as it was.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use tempfile::TempDir;

mod common;
use common::{fails, ok};

/// Every file of a directory and its bytes.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

/// The same session on either engine: writes, clones, reads that follow the nearest
/// ancestor, a key deleted at one leaf, a diff, the tree as a table and as JSON.
fn round_trip(engine: &str) {
    let tmp = TempDir::new().unwrap();
    let db = tmp.path().join("db").display().to_string();
    let v = |args: &[&str]| {
        let mut all = vec!["version"];
        all.extend_from_slice(args);
        all.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let run = |args: &[&str]| {
        let a = v(args);
        ok(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    run(&["put", "--db", &db, "--engine", engine, "0", "a", "1"]);
    run(&["put", "--db", &db, "0", "b", "2"]);
    assert_eq!(run(&["clone", "--db", &db, "0"]), "1\n");
    assert_eq!(run(&["clone", "--db", &db, "0"]), "2\n");
    run(&["put", "--db", &db, "1", "a", "one"]);
    run(&["put", "--db", &db, "1", "c", "tab\there"]);
    run(&["delete", "--db", &db, "2", "--key", "b"]);

    assert_eq!(run(&["get", "--db", &db, "1", "a"]), "one\n");
    assert_eq!(run(&["get", "--db", &db, "2", "a"]), "1\n");
    assert_eq!(run(&["get", "--db", &db, "0", "a"]), "1\n");
    assert_eq!(run(&["get", "--db", &db, "1", "b"]), "2\n");
    let err = fails(&["version", "get", "--db", &db, "2", "b"], 1);
    assert!(err.contains("not found"), "{err}");

    assert_eq!(
        run(&["scan", "--db", &db, "1"]),
        "a\tone\nb\t2\nc\ttab\\there\n"
    );
    assert_eq!(run(&["scan", "--db", &db, "2"]), "a\t1\n");
    assert_eq!(
        run(&["scan", "--db", &db, "0", "--reverse"]),
        "b\t2\na\t1\n"
    );
    assert_eq!(
        run(&["scan", "--db", &db, "1", "--from", "b", "--to", "c"]),
        "b\t2\n"
    );
    assert_eq!(
        run(&["scan", "--db", &db, "1", "--reverse", "--limit", "1"]),
        "c\ttab\\there\n"
    );
    assert_eq!(
        run(&["scan", "--db", &db, "1", "--hex", "--from", "63"]),
        "63\t7461620968657265\n"
    );

    // 1 against 2: a differs, b and c are 1's alone.
    assert_eq!(
        run(&["diff", "--db", &db, "1", "2"]),
        "-a\tone\n+a\t1\n-b\t2\n-c\ttab\\there\n"
    );
    assert_eq!(run(&["diff", "--db", &db, "0", "0"]), "");

    let table = run(&["list", "--db", &db]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{table}");
    assert!(lines[0].contains("version") && lines[0].contains("state"));
    assert!(lines[1].contains("internal") && lines[1].contains("1,2"));
    assert!(lines[2].contains("leaf") && lines[3].contains("leaf"));

    // Deleting leaf 2: it is gone from the tree; 1 is untouched.
    run(&["delete", "--db", &db, "2"]);
    let list: Value = serde_json::from_str(&run(&["list", "--db", &db, "--json"])).unwrap();
    let list = list.as_array().unwrap();
    let states: Vec<(u64, &str)> = list
        .iter()
        .map(|v| (v["version"].as_u64().unwrap(), v["state"].as_str().unwrap()))
        .collect();
    assert_eq!(states, vec![(0, "internal"), (1, "leaf")]);
    assert_eq!(list[1]["parent"], 0);
    assert_eq!(run(&["get", "--db", &db, "1", "a"]), "one\n");

    // Deleting internal version 0 keeps it as a ghost that 1 still reads through.
    run(&["delete", "--db", &db, "0"]);
    let list: Value = serde_json::from_str(&run(&["list", "--db", &db, "--json"])).unwrap();
    assert_eq!(list[0]["state"], "deleted");
    assert_eq!(run(&["get", "--db", &db, "1", "b"]), "2\n");
}

#[test]
fn versions_clone_read_write_and_diff_on_the_sda() {
    round_trip("sda");
}

#[test]
fn versions_clone_read_write_and_diff_on_the_cow_btree() {
    round_trip("cow");
}

#[test]
fn bad_versions_are_refused_and_change_nothing() {
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path().join("db");
    let db = dir.display().to_string();
    ok(&["version", "put", "--db", &db, "0", "k", "v"]);
    ok(&["version", "clone", "--db", &db, "0"]);
    ok(&["version", "clone", "--db", &db, "1"]);
    ok(&["version", "clone", "--db", &db, "0"]);
    ok(&["version", "delete", "--db", &db, "3"]);
    let before = files(&dir);
    let huge = "x".repeat(70_000);
    for (args, says) in [
        (vec!["put", "0", "k", "w"], "version 0: an internal version"),
        (vec!["put", "1", "k", "w"], "version 1: an internal version"),
        (vec!["delete", "0", "--key", "k"], "internal version"),
        (vec!["put", "9", "k", "w"], "version 9: no such version"),
        (vec!["put", "3", "k", "w"], "version 3: deleted"),
        (vec!["get", "3", "k"], "version 3: deleted"),
        (vec!["get", "9", "k"], "no such version"),
        (vec!["scan", "3"], "version 3: deleted"),
        (vec!["clone", "3"], "version 3: deleted"),
        (vec!["clone", "9"], "no such version"),
        (vec!["delete", "3"], "version 3: deleted"),
        (vec!["delete", "9"], "no such version"),
        (vec!["diff", "2", "3"], "version 3: deleted"),
        (vec!["diff", "9", "2"], "no such version"),
        (vec!["put", "2", &huge, "v"], "key"),
    ] {
        let mut all = vec!["version", args[0], "--db", &db];
        all.extend_from_slice(&args[1..]);
        let err = fails(&all, 1);
        assert!(
            err.starts_with("error: ") && err.contains(says),
            "{args:?}: {err}"
        );
        assert!(files(&dir) == before, "{args:?} changed a file");
    }
    // A second positional after the version is a usage error, not a version delete.
    fails(&["version", "delete", "--db", &db, "2", "k"], 1);
    // The engine of an existing database is its own.
    let err = fails(
        &[
            "version", "put", "--db", &db, "--engine", "cow", "2", "k", "v",
        ],
        1,
    );
    assert!(err.contains("sda database"), "{err}");
    assert!(files(&dir) == before);
    // Leaf 2 still takes writes, and reads through to 0's.
    assert_eq!(ok(&["version", "get", "--db", &db, "2", "k"]), "v\n");
    ok(&["version", "put", "--db", &db, "2", "k", "two"]);
    assert_eq!(ok(&["version", "get", "--db", &db, "2", "k"]), "two\n");
    assert_eq!(ok(&["version", "get", "--db", &db, "1", "k"]), "v\n");
}

#[test]
fn commands_on_a_missing_or_plain_db_fail_without_creating_one() {
    let tmp = TempDir::new().unwrap();
    let db = tmp.path().join("db").display().to_string();
    for args in [
        vec!["list"],
        vec!["clone", "0"],
        vec!["get", "0", "k"],
        vec!["scan", "0"],
        vec!["delete", "0"],
        vec!["delete", "0", "--key", "k"],
        vec!["diff", "0", "0"],
        vec!["put", "1", "k", "v"],
    ] {
        let mut all = vec!["version", args[0], "--db", &db];
        all.extend_from_slice(&args[1..]);
        let err = fails(&all, 1);
        assert!(
            err.starts_with("error: ") && err.contains(&db),
            "{args:?}: {err}"
        );
        assert!(!Path::new(&db).exists(), "{args:?} created {db}");
    }
    // A plain database is not a versioned one, and the other way round.
    let plain = tmp.path().join("plain").display().to_string();
    ok(&["put", "--db", &plain, "k", "v"]);
    let err = fails(&["version", "list", "--db", &plain], 1);
    assert!(err.contains("versioned"), "{err}");
    fails(&["version", "put", "--db", &plain, "0", "k", "v"], 1);
    assert_eq!(ok(&["get", "--db", &plain, "k"]), "v\n");
}

/// `strata stats`, `strata dump`, `strata check` and `strata salvage` on a versioned database
/// of either engine: the version tree's counts and the engine's figures; the SDA's arrays with
/// the versions they serve, or the CoW B-tree's nodes from each version's root; a clean check;
/// then one byte changed inside every copy of a value in the data file, check exits 2 naming
/// the file and an offset, and salvage copies what the other blocks or nodes hold.
fn stats_dump_and_check(engine: &str) {
    let tmp = TempDir::new().unwrap();
    let db = tmp.path().join("db").display().to_string();
    let marker = "a value check must find damaged";
    ok(&[
        "version", "put", "--db", &db, "--engine", engine, "0", "k0", marker,
    ]);
    for k in 1..20 {
        ok(&["version", "put", "--db", &db, "0", &format!("k{k}"), "v"]);
    }
    assert_eq!(ok(&["version", "clone", "--db", &db, "0"]), "1\n");
    assert_eq!(ok(&["version", "clone", "--db", &db, "0"]), "2\n");
    ok(&["version", "put", "--db", &db, "1", "k1", "one"]);
    ok(&["version", "delete", "--db", &db, "2"]);

    let table = ok(&["stats", "--db", &db]);
    assert!(
        table.contains("versions") && table.contains("2 (1 leaves)"),
        "{table}"
    );
    assert!(table.contains(engine), "{table}");
    let json: Value = serde_json::from_str(&ok(&["stats", "--db", &db, "--json"])).unwrap();
    assert_eq!(json["engine"], engine, "{json}");
    assert_eq!(json["versions"]["live"], 2, "{json}");
    assert_eq!(json["versions"]["leaves"], 1, "{json}");
    assert_eq!(json["versions"]["ghosts"], 0, "{json}");
    assert_eq!(json["versions"]["next"], 3, "{json}");
    assert!(json["data_file_bytes"].as_u64().unwrap() > 0, "{json}");

    // The live versions 0 and 1: served by the SDA's arrays, or roots of the CoW B-tree's.
    let dump = ok(&["dump", "--db", &db]);
    assert!(dump.starts_with(engine), "{dump}");
    let json: Value = serde_json::from_str(&ok(&["dump", "--db", &db, "--json"])).unwrap();
    let nodes = json["nodes"].as_array().unwrap();
    let mut versions: Vec<u64> = nodes
        .iter()
        .flat_map(|n| n["versions"].as_array().unwrap())
        .map(|v| v.as_u64().unwrap())
        .collect();
    versions.sort_unstable();
    versions.dedup();
    assert_eq!(versions, [0, 1], "{json}");
    if engine == "sda" {
        assert!(nodes.iter().all(|n| n["kind"] == "array"), "{json}");
        assert!(dump.contains("serves version"), "{dump}");
    } else {
        assert!(dump.contains("root of version 0") && dump.contains("root of version 1"));
    }

    let report = ok(&["check", "--db", &db]);
    assert!(report.contains(": ok"), "{report}");
    // The plain commands still refuse it, as not theirs rather than as damage.
    let err = fails(&["get", "--db", &db, "k0"], 1);
    assert!(err.contains("versioned"), "{err}");

    let path = Path::new(&db).join("strata.data");
    let mut bytes = std::fs::read(&path).unwrap();
    let m = marker.as_bytes();
    let at: Vec<usize> = (0..bytes.len() - m.len())
        .filter(|&i| &bytes[i..i + m.len()] == m)
        .collect();
    assert!(!at.is_empty(), "the value is in the data file");
    for i in at {
        bytes[i + 3] ^= 0x20;
    }
    std::fs::write(&path, bytes).unwrap();
    let err = fails(&["check", "--db", &db], 2);
    assert!(
        err.contains("corruption in") && err.contains("strata.data at offset"),
        "{err}"
    );

    // Salvage copies what still reads, with the version tree, and exits 2 for what it lost.
    let to = tmp.path().join("copy").display().to_string();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["salvage", "--db", &db, "--to", &to])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{text}");
    let what = if engine == "sda" {
        "SDA array block"
    } else {
        "CoW B-tree node"
    };
    assert!(
        text.contains(what) && text.contains("strata.data"),
        "{text}"
    );
    // The damaged value's block or leaf held every key: the copy has the version tree, and
    // no keys.
    let list: Value =
        serde_json::from_str(&ok(&["version", "list", "--db", &to, "--json"])).unwrap();
    let states: Vec<(u64, &str)> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["version"].as_u64().unwrap(), v["state"].as_str().unwrap()))
        .collect();
    assert_eq!(states, vec![(0, "internal"), (1, "leaf")]);
    assert_eq!(ok(&["version", "scan", "--db", &to, "1"]), "");
}

#[test]
fn stats_dump_and_check_know_the_sda_and_find_a_damaged_block() {
    stats_dump_and_check("sda");
}

#[test]
fn stats_dump_and_check_know_the_cow_btree_and_find_a_damaged_block() {
    stats_dump_and_check("cow");
}

/// The experiment's three lines on a simulated disk, tiny, with `--versions`: every line
/// makes the versions asked for and answers the same range queries with the same number of
/// elements, and the SDA splits where the other SDA cannot.
#[test]
fn bench_versioned_runs_three_lines_on_the_same_workload() {
    let tmp = TempDir::new().unwrap();
    let svg = tmp.path().join("v.svg");
    let out = ok(&[
        "bench",
        "versioned",
        "--sim",
        "--inserts",
        "1200",
        "--versions",
        "8",
        "--cache",
        "16KiB",
        "--block",
        "2KiB",
        "--points",
        "3",
        "--ranges",
        "3",
        "--svg",
        svg.to_str().unwrap(),
        "--json",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    // --versions 8: a new version every 1,200 / 8 puts, 8 versions in all at the end.
    assert_eq!(v["config"]["clone_every"], 150, "{}", v["config"]);
    let lines = v["lines"].as_array().unwrap();
    let names: Vec<&str> = lines.iter().map(|l| l["line"].as_str().unwrap()).collect();
    assert_eq!(names, ["cow", "sda", "sda-no-da"]);
    for l in lines {
        let last = l["points"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["live_versions"], 8, "{last}");
    }
    let elements = |l: &Value| -> Vec<u64> {
        l["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["range_elements"].as_u64().unwrap())
            .collect()
    };
    let first = elements(&lines[0]);
    assert_eq!(first.len(), 3);
    assert!(first.iter().sum::<u64>() > 0);
    for l in lines {
        assert_eq!(elements(l), first, "{} answered differently", l["line"]);
        let s = &l["summary"];
        assert!(s["inserts_per_sec"].as_f64().unwrap() > 0.0, "{l}");
        assert!(
            s["blocks_written_per_insert"].as_f64().unwrap() > 0.0,
            "{l}"
        );
        assert!(s["insert_bound"].as_f64().unwrap() > 0.0, "{l}");
        let sp = &l["space"];
        let live = |at: &str| sp[at]["live_bytes"].as_u64().unwrap();
        assert!(live("after_delete") < live("before_delete"), "{sp}");
        assert!(sp["leaves_deleted"].as_u64().unwrap() >= 1);
    }
    let detail = |l: &Value, name: &str| -> u64 {
        l["detail"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d[0] == name)
            .and_then(|d| d[1].as_u64())
            .unwrap()
    };
    assert!(
        detail(&lines[1], "splits") > 0,
        "density amplification split nothing"
    );
    assert_eq!(detail(&lines[2], "splits"), 0);
    assert!(std::fs::read_to_string(&svg).unwrap().contains("SDA"));
    let err = fails(&["bench", "versioned", "--sim", "--lines", "btree"], 1);
    assert!(err.contains("no line"), "{err}");
    let err = fails(&["bench", "versioned", "--sim", "--versions", "0"], 1);
    assert!(err.contains("--versions must be positive"), "{err}");
}
