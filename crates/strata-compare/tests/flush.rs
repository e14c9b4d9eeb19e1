//! A peer's row includes its flush: fjall loads 20,000 records into a memtable far larger than
//! them (nothing reaches a table during the load), and the flush that ends the load writes them
//! out. The flush's bytes are at least the records once more, the row's WA counts the journal
//! and the table, the durable write rate pays for the flush's time, and SA is taken from the
//! files at rest after the close.
//!
//! The process counter is process-wide, so this file holds one test.

use strata_bench::rum;
use strata_bench::runner;
use strata_bench::workload::{Phase, Spec};

#[test]
fn fjall_row_counts_the_flush_of_its_memtable() {
    let spec = Spec {
        name: "flushed-load".into(),
        records: 20_000,
        cache_bytes: 8 << 20,
        phases: vec![Phase::Load],
        ..Spec::rum(20_000)
    };
    assert!(spec.flush);
    let dir = tempfile::tempdir().unwrap();
    let r = runner::run(
        &strata_compare::fjall::Fjall,
        &spec,
        &dir.path().join("db"),
        &mut |_, _, _| {},
    )
    .unwrap();
    let load = r.phase("load").unwrap();
    let logical = 20_000 * 116;
    assert_eq!(load.logical_bytes_written, logical);
    assert!(load.flush_secs > 0.0);
    assert!(load.ops_per_sec < load.acked_ops_per_sec);
    let row = rum::row(std::slice::from_ref(&r));
    assert_eq!(row.write_ops, load.ops_per_sec);
    assert_eq!(row.load_flush_secs, load.flush_secs);
    if cfg!(target_os = "linux") {
        assert!(
            load.flush_bytes_written >= logical,
            "the flush wrote {} bytes for {logical} in the memtable",
            load.flush_bytes_written
        );
        // The journal had every record before the flush wrote the table.
        assert!(
            row.write_amplification >= 2.0,
            "WA {} leaves the table out",
            row.write_amplification
        );
    }
    assert_eq!(r.live_bytes_at_rest, logical);
    assert_eq!(
        row.space_amplification,
        r.disk_bytes_at_rest as f64 / logical as f64
    );
    assert!(
        row.space_amplification >= 1.0,
        "SA {} at rest",
        row.space_amplification
    );
}
