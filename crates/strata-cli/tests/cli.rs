//! End-to-end tests of the `strata` binary: every test runs the real executable against
//! databases in temporary directories and checks its output and exit codes.

use std::path::Path;

use serde_json::Value;
use tempfile::TempDir;

mod common;
use common::{fails, ok, strata, text};

fn json(args: &[&str]) -> Value {
    let stdout = ok(args);
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("bad JSON ({e}): {stdout}"))
}

fn db_in(tmp: &TempDir) -> String {
    tmp.path().join("db").display().to_string()
}

fn f64_at(v: &Value, path: &str) -> f64 {
    v.pointer(path)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("no number at {path} in {v}"))
}

fn u64_at(v: &Value, path: &str) -> u64 {
    v.pointer(path)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("no integer at {path} in {v}"))
}

#[test]
fn sizes_take_units_and_bad_ones_are_rejected() {
    let tmp = TempDir::new().unwrap();
    let db = db_in(&tmp);
    let v = json(&[
        "load",
        "--engine",
        "btree",
        "--db",
        &db,
        "--keys",
        "10",
        "--node-size",
        "4KiB",
        "--cache",
        "1MiB",
        "--key-size",
        "16B",
        "--value-size",
        "1K",
        "--json",
    ]);
    assert_eq!(u64_at(&v, "/database/node_size"), 4096);
    assert_eq!(u64_at(&v, "/database/cache/budget_bytes"), 1 << 20);
    assert_eq!(u64_at(&v, "/load/value_size"), 1024);
    assert_eq!(u64_at(&v, "/database/live_bytes"), 10 * (16 + 1024));

    let fresh = tmp.path().join("fresh").display().to_string();
    for (flag, bad, why) in [
        ("--cache", "12XB", "unknown unit"),
        ("--node-size", "1.5MiB", "not a size"),
        ("--value-size", "99999999999TiB", "too large"),
    ] {
        let err = fails(
            &[
                "load", "--engine", "btree", "--db", &fresh, "--keys", "1", flag, bad,
            ],
            1,
        );
        assert!(err.contains(why), "{flag} {bad}: {err}");
    }
    let err = fails(
        &[
            "load",
            "--engine",
            "btree",
            "--db",
            &fresh,
            "--keys",
            "1",
            "--node-size",
            "3KiB",
        ],
        1,
    );
    assert!(
        err.starts_with("error: ") && err.contains("power of two"),
        "{err}"
    );
    assert!(!Path::new(&fresh).exists());
}

#[test]
fn load_reports_amplification_and_a_cold_read_pass() {
    let tmp = TempDir::new().unwrap();
    let db = db_in(&tmp);
    let v = json(&[
        "load",
        "--engine",
        "btree",
        "--db",
        &db,
        "--keys",
        "20000",
        "--node-size",
        "4KiB",
        "--reads",
        "2000",
        "--cold",
        "--json",
    ]);
    assert_eq!(u64_at(&v, "/load/keys"), 20000);
    assert_eq!(u64_at(&v, "/database/live_keys"), 20000);
    assert_eq!(
        u64_at(&v, "/load/logical_bytes_written"),
        20000 * (16 + 100)
    );
    assert!(f64_at(&v, "/load/write_amplification") > 0.0);
    assert!(f64_at(&v, "/database/space_amplification") > 0.0);
    // Space at rest: the closed database's log is its checkpoint marker, whatever length the
    // open one's files kept for writing over.
    assert_eq!(u64_at(&v, "/database/wal_file_bytes"), 32);
    assert!(f64_at(&v, "/load/ops_per_s") > 0.0);
    assert!(u64_at(&v, "/database/height") >= 2);
    assert_eq!(u64_at(&v, "/reads/reads"), 2000);
    // A cold cache must go to the device, but never more than once per level.
    let ra = f64_at(&v, "/reads/read_amplification");
    assert!(ra > 0.0 && ra <= 3.0, "RA {ra}");
    assert!(u64_at(&v, "/reads/cache_misses") > 0);
    assert!(u64_at(&v, "/peak_rss_bytes") > 0);

    // The table form has the same facts for people.
    let table = ok(&[
        "load",
        "--engine",
        "btree",
        "--db",
        &db,
        "--keys",
        "100",
        "--no-sync",
        "--reads",
        "10",
    ]);
    for label in ["WA", "SA", "RA", "peak RSS", "hits / misses", "throughput"] {
        assert!(table.contains(label), "no {label} in\n{table}");
    }
    assert!(fails(
        &["load", "--engine", "btree", "--db", &db, "--keys", "1", "--cold"],
        1
    )
    .contains("--reads"));
}

#[test]
fn put_get_delete_scan_round_trip() {
    let tmp = TempDir::new().unwrap();
    let db = db_in(&tmp);
    for (k, v) in [("b", "2"), ("a", "1"), ("d", "4"), ("c", "tab\there")] {
        ok(&["put", "--db", &db, k, v]);
    }
    assert_eq!(ok(&["get", "--db", &db, "a"]), "1\n");
    assert_eq!(ok(&["get", "--db", &db, "c"]), "tab\\there\n");
    ok(&["put", "--db", &db, "a", "one"]);
    assert_eq!(ok(&["get", "--db", &db, "a"]), "one\n");

    assert_eq!(
        ok(&["scan", "--db", &db]),
        "a\tone\nb\t2\nc\ttab\\there\nd\t4\n"
    );
    assert_eq!(
        ok(&["scan", "--db", &db, "--reverse"]),
        "d\t4\nc\ttab\\there\nb\t2\na\tone\n"
    );
    assert_eq!(
        ok(&["scan", "--db", &db, "--from", "b", "--to", "d"]),
        "b\t2\nc\ttab\\there\n"
    );
    assert_eq!(
        ok(&[
            "scan",
            "--db",
            &db,
            "--from",
            "b",
            "--to",
            "d",
            "--reverse",
            "--limit",
            "1"
        ]),
        "c\ttab\\there\n"
    );
    assert_eq!(ok(&["scan", "--db", &db, "--from", "x"]), "");

    ok(&["delete", "--db", &db, "b"]);
    fails(&["get", "--db", &db, "b"], 1);
    assert_eq!(
        ok(&["scan", "--db", &db, "--limit", "2"]),
        "a\tone\nc\ttab\\there\n"
    );

    // Binary keys and values: hex in, hex out; text output escapes them.
    ok(&["put", "--db", &db, "--hex", "ff00", "0a01"]);
    assert_eq!(ok(&["get", "--db", &db, "--hex", "FF00"]), "0a01\n");
    assert_eq!(
        ok(&["scan", "--db", &db, "--from", "d"]),
        "d\t4\n\\xff\\x00\t\\n\\x01\n"
    );
    assert_eq!(
        ok(&["scan", "--db", &db, "--hex", "--from", "64"]),
        "64\t34\nff00\t0a01\n"
    );
    assert!(fails(&["get", "--db", &db, "--hex", "xyz"], 1).contains("not hex"));
}

#[test]
fn get_of_a_missing_key_exits_1() {
    let tmp = TempDir::new().unwrap();
    let db = db_in(&tmp);
    ok(&["put", "--db", &db, "here", "yes"]);
    let err = fails(&["get", "--db", &db, "absent"], 1);
    assert!(err.contains("not found"), "{err}");
}

#[test]
fn stats_on_a_loaded_db() {
    let tmp = TempDir::new().unwrap();
    let db = db_in(&tmp);
    ok(&[
        "load",
        "--engine",
        "btree",
        "--db",
        &db,
        "--keys",
        "5000",
        "--order",
        "sequential",
        "--node-size",
        "8KiB",
        "--no-sync",
        "--json",
    ]);
    let v = json(&["stats", "--db", &db, "--json"]);
    assert_eq!(v["engine"], "btree");
    assert_eq!(u64_at(&v, "/node_size"), 8192);
    assert_eq!(u64_at(&v, "/live_keys"), 5000);
    assert_eq!(u64_at(&v, "/live_bytes"), 5000 * 116);
    assert!(u64_at(&v, "/height") >= 2);
    assert!(u64_at(&v, "/leaf_nodes") > 1);
    assert!(u64_at(&v, "/data_file_bytes") > 5000 * 116);
    assert!(f64_at(&v, "/space_amplification") > 1.0);
    assert!(u64_at(&v, "/cache/budget_bytes") > 0);
    let table = ok(&["stats", "--db", &db]);
    assert!(
        table.contains("live keys") && table.contains("5000"),
        "{table}"
    );
}

#[test]
fn check_passes_on_a_good_db() {
    let tmp = TempDir::new().unwrap();
    let db = db_in(&tmp);
    ok(&[
        "load",
        "--engine",
        "btree",
        "--db",
        &db,
        "--keys",
        "3000",
        "--node-size",
        "4KiB",
        "--no-sync",
        "--json",
    ]);
    let out = ok(&["check", "--db", &db]);
    assert!(out.contains("ok") && out.contains("3000"), "{out}");
}

#[test]
fn check_finds_a_flipped_byte_and_exits_2() {
    let tmp = TempDir::new().unwrap();
    let db = db_in(&tmp);
    ok(&[
        "load",
        "--engine",
        "btree",
        "--db",
        &db,
        "--keys",
        "20000",
        "--node-size",
        "4KiB",
        "--no-sync",
        "--json",
    ]);
    // Some pages after the superblocks are free holes, so damage byte 100 of every page from
    // 8192 on: whichever live node `check` reads first must be reported.
    let path = tmp.path().join("db").join("strata.data");
    let mut data = std::fs::read(&path).unwrap();
    assert!(data.len() > 8192);
    for at in (8192 + 100..data.len()).step_by(4096) {
        data[at] ^= 0x55;
    }
    std::fs::write(&path, data).unwrap();
    let err = fails(&["check", "--db", &db], 2);
    assert!(
        err.starts_with("error: ") && err.contains("offset") && err.contains("strata.data"),
        "{err}"
    );
}

#[test]
fn commands_on_a_missing_db_fail_without_creating_it() {
    let tmp = TempDir::new().unwrap();
    let db = db_in(&tmp);
    for args in [
        vec!["get", "--db", &db, "k"],
        vec!["stats", "--db", &db],
        vec!["stats", "--db", &db, "--json"],
        vec!["check", "--db", &db],
        vec!["scan", "--db", &db],
        vec!["delete", "--db", &db, "k"],
    ] {
        let err = fails(&args, 1);
        assert!(
            err.starts_with("error: ") && err.contains(&db),
            "{args:?}: {err}"
        );
        assert!(!Path::new(&db).exists(), "{args:?} created {db}");
    }
    // An existing directory that holds no database is refused too.
    std::fs::create_dir(&db).unwrap();
    let err = fails(&["stats", "--db", &db], 1);
    assert!(err.contains("not a strata database"), "{err}");
}

#[test]
fn cache_budget_holds_during_a_large_load() {
    cache_budget_holds("btree", "4KiB");
}

/// The Bε-tree's pool sheds partitions and evicts whole nodes; the budget holds the same way.
#[test]
fn cache_budget_holds_during_a_large_betree_load() {
    cache_budget_holds("betree", "64KiB");
}

fn cache_budget_holds(engine: &str, node_size: &str) {
    let tmp = TempDir::new().unwrap();
    let db = db_in(&tmp);
    let v = json(&[
        "load",
        "--engine",
        engine,
        "--db",
        &db,
        "--keys",
        "1000000",
        "--cache",
        "16MiB",
        "--no-sync",
        "--node-size",
        node_size,
        "--reads",
        "1000",
        "--json",
    ]);
    // Every key read back (the read pass checks values); the leaves count those already
    // flushed to them.
    assert_eq!(u64_at(&v, "/reads/reads"), 1000);
    assert!(u64_at(&v, "/database/live_keys") <= 1_000_000);
    let budget = u64_at(&v, "/database/cache/budget_bytes");
    let peak = u64_at(&v, "/database/cache/peak_bytes");
    assert_eq!(budget, 16 << 20);
    assert!(
        u64_at(&v, "/database/cache/evictions") > 0,
        "the load never filled the cache"
    );
    // Only the pinned root-to-leaf path may be over budget.
    assert!(
        peak <= budget + (1 << 20),
        "peak {peak} over budget {budget}"
    );
    // And the process as a whole, measured by the kernel rather than by the pool's own count:
    // the budget plus a fixed allowance for code, the log and the generator.
    let rss = u64_at(&v, "/peak_rss_bytes");
    assert!(
        rss <= budget + (64 << 20),
        "peak RSS {rss} for a {budget}-byte cache"
    );
}

#[test]
fn salvage_copies_what_is_readable_and_exits_2_when_something_was_not() {
    let tmp = TempDir::new().unwrap();
    let db = db_in(&tmp);
    ok(&[
        "load",
        "--engine",
        "btree",
        "--db",
        &db,
        "--keys",
        "3000",
        "--node-size",
        "4KiB",
        "--no-sync",
        "--json",
    ]);
    // Undamaged: everything, exit 0.
    let whole = tmp.path().join("whole").display().to_string();
    let out = ok(&["salvage", "--db", &db, "--to", &whole]);
    assert!(out.contains("complete: nothing was lost"), "{out}");
    assert!(ok(&["check", "--db", &whole]).contains("3000"));
    // A refused destination: it already holds a database.
    let err = fails(&["salvage", "--db", &db, "--to", &whole], 1);
    assert!(err.contains("already holds a database"), "{err}");

    // Damage byte 100 of every 16th page but those of the newest checkpoint's translation
    // table (without which salvage falls back to a raw scan): some leaves, perhaps a blob.
    let path = tmp.path().join("db").join("strata.data");
    let mut data = std::fs::read(&path).unwrap();
    let le = |at: usize| u64::from_le_bytes(data[at..at + 8].try_into().unwrap());
    let newest = if le(24) > le(4096 + 24) { 0 } else { 4096 };
    let table = le(newest + 48) as usize..(le(newest + 48) + le(newest + 56)) as usize;
    for at in (8192 + 100..data.len()).step_by(16 * 4096) {
        if !table.contains(&at) {
            data[at] ^= 0x55;
        }
    }
    std::fs::write(&path, &data).unwrap();
    let copy = tmp.path().join("copy").display().to_string();
    let out = strata(&["salvage", "--db", &db, "--to", &copy, "--json"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["complete"], Value::Bool(false));
    let keys = u64_at(&v, "/keys");
    assert!(keys > 0 && keys < 3000, "{v}");
    let damage = v["damage"].as_array().unwrap();
    assert!(!damage.is_empty());
    for d in damage {
        assert!(
            d["file"].as_str().unwrap().ends_with("strata.data") && d["offset"].is_u64(),
            "{d}"
        );
    }
    // The source is untouched; the copy is a sound database holding what was copied.
    assert_eq!(std::fs::read(&path).unwrap(), data);
    assert!(ok(&["check", "--db", &copy]).contains(&keys.to_string()));
    let scanned = ok(&["scan", "--db", &copy]);
    assert_eq!(scanned.lines().count() as u64, keys);
}

#[test]
fn advise_recommends_an_engine_explains_and_verifies() {
    let tmp = TempDir::new().unwrap();
    let profile = tmp.path().join("profile.json");
    // A profile of this machine's built-in figures, so that the test does not depend on a
    // saved one.
    ok(&[
        "profile",
        "--sim",
        "this-machine",
        "--quick",
        "--out",
        profile.to_str().unwrap(),
    ]);
    let p = profile.to_str().unwrap();
    let v = json(&[
        "advise",
        "--keys",
        "20000",
        "--read-fraction",
        "0.5",
        "--cache",
        "8MiB",
        "--profile",
        p,
        "--verify",
        "--all",
        "--scale",
        "4",
        "--dir",
        tmp.path().to_str().unwrap(),
        "--json",
    ]);
    let choices = v["choices"].as_array().expect("choices");
    assert_eq!(choices.len(), 3, "{v}");
    let names: Vec<&str> = choices
        .iter()
        .map(|c| c["engine"].as_str().unwrap())
        .collect();
    for e in ["strata-btree", "strata-betree", "strata-lsm"] {
        assert!(names.contains(&e), "{names:?}");
    }
    let why = v["why"].as_str().unwrap();
    assert!(why.contains(names[0]) && why.contains(names[1]), "{why}");
    let verified = v["verified"].as_array().expect("verified");
    assert_eq!(verified.len(), 3, "--all verifies every engine");
    for r in verified {
        assert_eq!(u64_at(r, "/records"), 5000);
        assert!(f64_at(r, "/measured_ops_per_s") > 0.0, "{r}");
        assert!(f64_at(r, "/measured_write_amp") >= 1.0, "{r}");
        // The copy runs each engine at a geometry for the copy's cache: a Bε-tree node fits
        // it four times over (the tuner's rule), whatever the full cache allowed.
        let settings = r["settings"].as_str().unwrap();
        if let Some(rest) = settings.strip_prefix("Bε-tree, ") {
            let mut words = rest.split(' ');
            let n: u64 = words.next().unwrap().parse().unwrap();
            let node = match words.next().unwrap() {
                "KiB" => n << 10,
                "MiB" => n << 20,
                unit => panic!("{unit} in {settings}"),
            };
            let cache = u64_at(r, "/cache_bytes");
            assert!(
                node * 4 <= cache || node <= 64 << 10,
                "{settings} for {cache}"
            );
        }
    }
    let err = fails(&["advise", "--keys", "10", "--read-fraction", "1.5"], 1);
    assert!(err.contains("--read-fraction"), "{err}");
}

/// A figure from `strata check`'s table, by its label.
fn check_figure(check: &str, label: &str) -> usize {
    check
        .lines()
        .find_map(|l| l.trim().strip_prefix(label)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {label} in {check}"))
}

/// The lines of a dump's level `level`, up to the next level's header.
fn dump_level(dump: &str, level: usize) -> Vec<&str> {
    let header = format!("level {level} (");
    dump.lines()
        .skip_while(|l| !l.starts_with(&header))
        .skip(1)
        .take_while(|l| !l.starts_with("level "))
        .collect()
}

#[test]
fn dump_shows_the_tree_level_by_level_with_pivots() {
    for (engine, extra) in [
        ("betree", &["--fanout", "4", "--basement", "2KiB"][..]),
        ("btree", &[][..]),
    ] {
        let tmp = TempDir::new().unwrap();
        let db = db_in(&tmp);
        let mut args = vec![
            "load",
            "--engine",
            engine,
            "--db",
            &db,
            "--keys",
            "20000",
            "--node-size",
            "16KiB",
            "--no-sync",
            "--json",
        ];
        args.extend_from_slice(extra);
        ok(&args);
        let check = ok(&["check", "--db", &db]);
        let height = check_figure(&check, "height");
        assert!(
            height >= 2,
            "{engine}: a one-node tree shows nothing: {check}"
        );
        let dump = ok(&["dump", "--db", &db]);
        assert!(
            dump.starts_with(&format!("{engine}: height {height}\n")),
            "{dump}"
        );
        // The root: one internal node whose pivots separate its children.
        let root = dump_level(&dump, 0);
        assert!(root[0].starts_with("  internal "), "{engine}: {dump}");
        let children: usize = root[0]
            .split(", ")
            .find_map(|f| f.strip_suffix(" children")?.parse().ok())
            .unwrap_or_else(|| panic!("no child count in {}", root[0]));
        let pivots = root[1]
            .strip_prefix("    pivots: \"")
            .unwrap_or_else(|| panic!("{engine}: no pivots under the root: {dump}"));
        assert_eq!(pivots.split("\" | \"").count(), children - 1, "{dump}");
        // The deepest level holds every leaf and nothing else; the levels between, internal
        // nodes; and together they are the nodes `check` counted.
        let leaves = dump_level(&dump, height - 1);
        let leaf_lines: Vec<_> = leaves.iter().filter(|l| !l.starts_with("    ")).collect();
        assert!(
            leaf_lines.iter().all(|l| l.starts_with("  leaf ")),
            "{dump}"
        );
        assert_eq!(
            leaf_lines.len(),
            check_figure(&check, "leaf nodes"),
            "{dump}"
        );
        let internals = (0..height - 1)
            .flat_map(|l| dump_level(&dump, l))
            .filter(|l| l.starts_with("  internal "))
            .count();
        assert_eq!(internals, check_figure(&check, "internal nodes"), "{dump}");
        if engine == "betree" {
            assert!(
                dump.contains("    child ") && dump.contains(" buffered ("),
                "{dump}"
            );
        }
        // --json: the same nodes, field for field: as many leaves and internal nodes as
        // `check` counted, the root's pivots one fewer than its children.
        let j: serde_json::Value =
            serde_json::from_str(&ok(&["dump", "--db", &db, "--json"])).unwrap();
        assert_eq!(j["engine"], engine, "{j}");
        assert_eq!(j["height"], height as u64, "{j}");
        let nodes = j["nodes"].as_array().unwrap();
        let kind = |k: &str| nodes.iter().filter(|n| n["kind"] == k).count();
        assert_eq!(kind("leaf"), check_figure(&check, "leaf nodes"), "{j}");
        assert_eq!(
            kind("internal"),
            check_figure(&check, "internal nodes"),
            "{j}"
        );
        let root = &nodes[0];
        assert_eq!(root["level"], 0);
        assert_eq!(
            root["pivots"].as_array().unwrap().len() + 1,
            root["children"].as_array().unwrap().len(),
            "{root}"
        );
        assert_eq!(root["children"].as_array().unwrap().len(), children);
        // --levels cuts the walk below the top levels.
        let top = ok(&["dump", "--db", &db, "--levels", "1"]);
        assert!(top.contains(", showing the top 1\n"), "{top}");
        assert!(
            !top.contains("level 1 (") && !top.contains("  leaf "),
            "{top}"
        );
    }
    let tmp = TempDir::new().unwrap();
    let db = db_in(&tmp);
    ok(&[
        "load",
        "--engine",
        "lsm",
        "--db",
        &db,
        "--keys",
        "50000",
        "--cache",
        "1MiB",
        "--no-sync",
        "--json",
    ]);
    let dump = ok(&["dump", "--db", &db]);
    assert!(dump.starts_with("lsm: levels "), "{dump}");
    assert!(
        dump.lines()
            .any(|l| l.starts_with("  table ") && l.contains(", keys \"")),
        "{dump}"
    );
    let j: serde_json::Value = serde_json::from_str(&ok(&["dump", "--db", &db, "--json"])).unwrap();
    assert_eq!(j["engine"], "lsm");
    assert!(
        j["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["kind"] == "table" && n["range"].as_array().is_some_and(|r| r.len() == 2)),
        "{j}"
    );
    let err = fails(&["dump", "--db", &db, "--levels", "0"], 1);
    assert!(err.contains("--levels"), "{err}");
}
