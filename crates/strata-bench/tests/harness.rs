//! The harness on strata's own engines: a spec runs end to end, every read checks out, the
//! measures add up, and the workload is the same for the same seed.

use strata_bench::runner::{self, RunResult};
use strata_bench::store::{self, Subject};
use strata_bench::workload::{Dist, Mix, Phase, Spec};

fn small_spec() -> Spec {
    Spec::every_phase(3000)
}

fn run(engine: &dyn Subject, spec: &Spec) -> RunResult {
    let dir = tempfile::tempdir().unwrap();
    runner::run(engine, spec, &dir.path().join("db"), &mut |_, _, _| {}).unwrap()
}

#[test]
fn strata_engines_read_back_what_they_loaded() {
    let spec = small_spec();
    for engine in store::strata_engines() {
        let r = run(engine.as_ref(), &spec);
        assert_eq!(r.engine, engine.name());
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
            ]
        );
        for p in &r.phases {
            assert_eq!(
                p.wrong_reads, 0,
                "{}: {} wrong reads in {}",
                r.engine, p.wrong_reads, p.phase
            );
        }
        let load = r.phase("load").unwrap();
        assert_eq!((load.ops, load.commits), (3000, 30));
        assert_eq!(load.logical_bytes_written, 3000 * 116);
        assert_eq!(load.live_bytes, 3000 * 116);
        assert!(load.disk_bytes > 0);
        // strata counts its own writes: at least the log records of the logical bytes.
        assert!(load.engine_bytes_written.unwrap() >= load.logical_bytes_written);
        let mixed = r.phase("mixed").unwrap();
        // 10% inserts of 2000 ops: about 200 new records.
        let added = (mixed.live_bytes - load.live_bytes) / 116;
        assert!((120..=280).contains(&added), "{added} inserts");
        let deletes = r.phase("deletes").unwrap();
        assert_eq!(deletes.live_bytes, mixed.live_bytes - 1000 * 116);
        assert_eq!(deletes.logical_bytes_written, 1000 * 16);
        assert!(r.peak_rss_bytes >= r.rss_bytes);
    }
}

#[test]
fn the_mixed_phase_holds_its_ratio() {
    let mut spec = small_spec();
    spec.phases = vec![
        Phase::Load,
        Phase::Mixed {
            ops: 10_000,
            mix: Mix {
                read: 70,
                update: 30,
                ..Mix::default()
            },
            dist: Dist::Uniform,
            scan_len: 0,
        },
    ];
    let r = run(&store::Strata::btree(), &spec);
    let mixed = r.phase("mixed").unwrap();
    assert_eq!(mixed.ops, 10_000);
    assert_eq!(mixed.commits, 100);
    // Each update writes one 116-byte record: 30% of 10,000 is 3,000 ± sampling noise.
    let updates = mixed.logical_bytes_written / 116;
    assert!((2_800..=3_200).contains(&updates), "{updates} updates");
    assert_eq!(mixed.wrong_reads, 0);
}

#[test]
fn the_same_seed_does_the_same_work() {
    let spec = small_spec();
    let strip = |r: RunResult| {
        r.phases
            .into_iter()
            .map(|p| {
                (
                    p.phase,
                    p.ops,
                    p.commits,
                    p.logical_bytes_written,
                    p.live_bytes,
                )
            })
            .collect::<Vec<_>>()
    };
    let a = strip(run(&store::Strata::btree(), &spec));
    let b = strip(run(&store::Strata::btree(), &spec));
    assert_eq!(a, b);
    let mut other = spec.clone();
    other.seed = 2;
    let c = strip(run(&store::Strata::btree(), &other));
    assert_ne!(a, c, "a different seed should write a different mix");
}
