//! Pebble and bbolt through the Go driver (`compare/go`): when `go` is installed, the driver
//! builds, runs a small spec with every kind of phase on both engines, reads back what it loaded,
//! and makes the very choices the Rust harness makes (the same logical and live bytes, phase by
//! phase, as strata's B+-tree run through `strata_bench::runner`). Without `go` the test says so
//! and passes.

use strata_bench::runner::{self, RunResult};
use strata_bench::store::Strata;
use strata_bench::workload::Spec;
use strata_compare::go;

fn small_spec() -> Spec {
    Spec {
        name: "go-small".into(),
        ..Spec::every_phase(3000)
    }
}

const LABELS: [&str; 8] = [
    "load",
    "reads",
    "mixed",
    "reopen",
    "reads-cold",
    "scans",
    "deletes",
    "reads",
];

fn check(r: &RunResult, engine: &str, spec: &Spec) {
    assert_eq!(r.engine, engine);
    assert_eq!(&r.spec, spec, "{engine} printed back a different spec");
    assert!(
        r.version.contains(engine) && r.version.contains(" v"),
        "{engine}: version {:?}",
        r.version
    );
    assert!(!r.settings.is_empty());
    let labels: Vec<_> = r.phases.iter().map(|p| p.phase.as_str()).collect();
    assert_eq!(labels, LABELS, "{engine}");
    for p in &r.phases {
        assert_eq!(
            p.wrong_reads, 0,
            "{engine}: {} wrong reads in {}",
            p.wrong_reads, p.phase
        );
        assert!(p.secs >= 0.0 && p.disk_bytes > 0, "{engine}: {p:?}");
        assert_eq!(p.engine_bytes_written, None, "{engine}: {p:?}");
    }
    let record = (spec.key_size + spec.value_size) as u64;
    let load = &r.phases[0];
    assert_eq!(load.ops, spec.records);
    assert_eq!(load.commits, spec.records / spec.batch);
    assert_eq!(load.logical_bytes_written, spec.records * record);
    assert_eq!(load.live_bytes, spec.records * record);
    assert!(load.ops_per_sec > 0.0 && load.commit_p99_us >= load.commit_p50_us);
    let reads = &r.phases[1];
    assert!(reads.read_p50_us > 0.0 && reads.read_p99_us >= reads.read_p50_us);
    assert_eq!(reads.commits, 0);
    assert!(r.peak_rss_bytes >= r.rss_bytes && r.rss_bytes > 0 && r.secs > 0.0);
}

#[test]
fn pebble_and_bbolt_run_the_harness_workload() {
    if go::go_command().is_none() {
        eprintln!("note: `go` is not installed; Pebble and bbolt (compare/go) are not tested");
        return;
    }
    let driver = go::available().unwrap_or_else(|why| panic!("{why}"));
    assert!(driver.ends_with(go::BINARY));
    // Built once: a second call finds the same binary.
    assert_eq!(go::available().unwrap(), driver);
    let spec = small_spec();
    let rust = {
        let dir = tempfile::tempdir().unwrap();
        runner::run(
            &Strata::btree(),
            &spec,
            &dir.path().join("db"),
            &mut |_, _, _| {},
        )
        .unwrap()
    };
    for engine in go::ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let r = go::run(&driver, engine, &spec, &dir.path().join("db"))
            .unwrap_or_else(|e| panic!("{e}"));
        check(&r, engine, &spec);
        // The same workload as the Rust harness: the same writes and live records, phase by
        // phase (a different pick of record or operation would change these).
        for (g, s) in r.phases.iter().zip(&rust.phases) {
            assert_eq!(
                (g.ops, g.commits, g.logical_bytes_written, g.live_bytes),
                (s.ops, s.commits, s.logical_bytes_written, s.live_bytes),
                "{engine} and strata differ in phase {}",
                g.phase
            );
        }
    }
}

#[test]
fn bad_requests_are_refused_with_a_reason() {
    if go::go_command().is_none() {
        eprintln!("note: `go` is not installed; the Go driver is not tested");
        return;
    }
    let driver = go::available().unwrap_or_else(|why| panic!("{why}"));
    let dir = tempfile::tempdir().unwrap();
    let spec = small_spec();
    let err = go::run(&driver, "leveldb", &spec, dir.path()).unwrap_err();
    assert!(err.contains("pebble and bbolt"), "{err}");
    let mut bad = spec.clone();
    bad.batch = 0;
    let err = go::run(&driver, "bbolt", &bad, &dir.path().join("db")).unwrap_err();
    assert!(err.contains("batch size"), "{err}");
}
