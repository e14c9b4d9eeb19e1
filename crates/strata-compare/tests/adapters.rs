//! Every peer compiled in, and strata's own engines, through the harness: what each loaded it
//! reads back, in every phase (reads grouped under read views, each writing phase ended by a
//! flush), across a reopen and a cold cache; scans return data; a synced store keeps its data
//! across close and reopen; a group of reads sees what was committed before it began.

use std::path::Path;

use strata_bench::runner::{self, RunResult};
use strata_bench::store::{strata_engines, Config, Store, Subject, Write};
use strata_bench::workload::Spec;

/// Key and value bytes of one record in the spec below.
const RECORD: u64 = 16 + 100;

fn small_spec() -> Spec {
    Spec::every_phase(3000)
}

fn engines() -> Vec<Box<dyn Subject>> {
    strata_compare::peers()
        .into_iter()
        .chain(strata_engines())
        .collect()
}

fn run(engine: &dyn Subject, spec: &Spec) -> RunResult {
    let dir = tempfile::tempdir().unwrap();
    runner::run(engine, spec, &dir.path().join("db"), &mut |_, _, _| {}).unwrap()
}

fn check_run(r: &RunResult) {
    let labels: Vec<_> = r.phases.iter().map(|p| p.phase.as_str()).collect();
    assert_eq!(
        labels,
        [
            "load",
            "reads",
            "mixed",
            "reopen",
            "reads-cold",
            "scans",
            "deletes",
            "reads"
        ],
        "{}",
        r.engine
    );
    for p in &r.phases {
        assert_eq!(
            p.wrong_reads, 0,
            "{}: {} wrong reads in {}",
            r.engine, p.wrong_reads, p.phase
        );
    }
    let load = r.phase("load").unwrap();
    assert_eq!((load.ops, load.commits), (3000, 30), "{}", r.engine);
    // The flush is timed with the load: the durable rate is never above the acknowledged one.
    assert!(
        load.flush_secs > 0.0 && load.ops_per_sec <= load.acked_ops_per_sec,
        "{}: {load:?}",
        r.engine
    );
    assert_eq!(
        load.memory_bytes,
        load.rss_anon_bytes + load.cached_bytes,
        "{}",
        r.engine
    );
    assert!(load.rss_anon_bytes > 0, "{}", r.engine);
    assert!(r.disk_bytes_at_rest > 0, "{}: nothing at rest", r.engine);
    assert_eq!(
        r.live_bytes_at_rest,
        r.phases.last().unwrap().live_bytes,
        "{}",
        r.engine
    );
    assert_eq!(load.logical_bytes_written, 3000 * RECORD, "{}", r.engine);
    assert_eq!(load.live_bytes, 3000 * RECORD, "{}", r.engine);
    assert!(load.disk_bytes > 0, "{}: nothing on disk", r.engine);
    let mixed = r.phase("mixed").unwrap();
    // 10% inserts of 2000 operations: about 200 new records.
    let added = (mixed.live_bytes - load.live_bytes) / RECORD;
    assert!(
        (120..=280).contains(&added),
        "{}: {added} inserts",
        r.engine
    );
    let scans = r.phase("scans").unwrap();
    assert_eq!(scans.ops, 100, "{}", r.engine);
    let deletes = r.phase("deletes").unwrap();
    assert_eq!(deletes.live_bytes, mixed.live_bytes - 1000 * RECORD);
    assert_eq!(deletes.logical_bytes_written, 1000 * 16, "{}", r.engine);
}

#[test]
fn every_engine_reads_back_what_it_loaded() {
    let spec = small_spec();
    for engine in engines() {
        let r = run(engine.as_ref(), &spec);
        assert_eq!(r.engine, engine.name());
        assert_eq!(r.version, engine.version());
        check_run(&r);
    }
}

#[test]
fn names_versions_and_settings() {
    let names: Vec<String> = strata_compare::peers()
        .iter()
        .map(|e| e.name().to_string())
        .collect();
    for expected in ["redb", "lmdb", "fjall"] {
        assert!(names.iter().any(|n| n == expected), "{expected} missing");
    }
    assert_eq!(
        names.iter().any(|n| n == "rocksdb"),
        cfg!(feature = "rocksdb")
    );
    let cfg = Config {
        cache_bytes: 64 << 20,
        sync: true,
        expected_records: 1000,
    };
    for engine in engines() {
        let name = engine.name().to_string();
        let found = strata_compare::engine(&name).expect("found by name");
        assert_eq!(found.name(), name);
        let version = engine.version();
        assert!(
            !version.contains("unknown") && version.chars().any(|c| c.is_ascii_digit()),
            "{name}: version {version:?}"
        );
        assert!(!engine.settings(&cfg).is_empty());
    }
    assert!(strata_compare::engine("no-such-engine").is_none());
    // The versions come from Cargo.lock: check one against it by hand.
    let lock =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.lock"))
            .unwrap();
    let redb = strata_compare::engine("redb").unwrap().version();
    let locked = redb.strip_prefix("redb ").unwrap();
    assert!(
        lock.contains(&format!("name = \"redb\"\nversion = \"{locked}\"")),
        "{redb} is not the locked redb"
    );
}

fn put(key: &[u8], value: &[u8]) -> Write {
    Write {
        key: key.to_vec(),
        value: Some(value.to_vec()),
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

fn value(i: u32, round: u32) -> Vec<u8> {
    format!("value {i} of round {round}").into_bytes()
}

fn open(engine: &dyn Subject, dir: &Path, sync: bool) -> Box<dyn Store> {
    let cfg = Config {
        cache_bytes: 4 << 20,
        sync,
        expected_records: 1000,
    };
    engine.open(dir, &cfg).unwrap()
}

#[test]
fn synced_writes_survive_close_and_reopen() {
    for engine in engines() {
        let name = engine.name().to_string();
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(engine.as_ref(), dir.path(), true);
        for round in 0..3 {
            let batch: Vec<Write> = (0..500).map(|i| put(&key(i), &value(i, round))).collect();
            store.write(&batch).unwrap();
        }
        let deletes: Vec<Write> = (0..100)
            .map(|i| Write {
                key: key(i),
                value: None,
            })
            .collect();
        store.write(&deletes).unwrap();
        store.close().unwrap();

        let mut store = open(engine.as_ref(), dir.path(), true);
        let mut out = Vec::new();
        for i in 0..500 {
            let found = store.get(&key(i), &mut out).unwrap();
            if i < 100 {
                assert!(!found, "{name}: deleted key {i} came back");
            } else {
                assert!(found, "{name}: key {i} lost");
                assert_eq!(out, value(i, 2), "{name}: key {i}");
            }
        }
        assert!(!store.get(b"absent", &mut out).unwrap(), "{name}");
        // Scans: from the first live key, bounded by the limit and by the end of the data.
        assert_eq!(store.scan(b"", 50).unwrap(), 50, "{name}");
        assert_eq!(store.scan(&key(0), 1000).unwrap(), 400, "{name}");
        assert_eq!(store.scan(&key(450), 1000).unwrap(), 50, "{name}");
        assert_eq!(store.scan(b"zzz", 10).unwrap(), 0, "{name}");
        store.close().unwrap();
    }
}

#[test]
fn read_groups_see_what_was_committed_before_them() {
    for engine in engines() {
        let name = engine.name().to_string();
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(engine.as_ref(), dir.path(), false);
        let mut out = Vec::new();
        for round in 0..3u32 {
            let batch: Vec<Write> = (0..100).map(|i| put(&key(i), &value(i, round))).collect();
            store.write(&batch).unwrap();
            store.begin_reads().unwrap();
            for i in (0..100).step_by(7) {
                assert!(store.get(&key(i), &mut out).unwrap(), "{name}: key {i}");
                assert_eq!(out, value(i, round), "{name}: key {i} in round {round}");
            }
            assert_eq!(store.scan(&key(50), 1000).unwrap(), 50, "{name}");
            store.end_reads().unwrap();
        }
        store.flush().unwrap();
        store.close().unwrap();
    }
}
