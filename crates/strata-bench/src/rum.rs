//! Seed 004's Table 4.1 on every engine: the read, write and mixed throughput and the write and
//! space amplification of one workload (`Spec::rum`), plus section 4.4's claim that write
//! amplification depends on scale (`scale_spec` at several record counts).
//!
//! This module turns runs into rows: ops/s is the median over repeated runs of an engine, the
//! amplifications come from the first run (they are counts, not times).
//! - Write ops/s is the records loaded over the load and the engine's durable flush after it
//!   (a checkpoint, memtables written out): what it took to get the records into the engine's
//!   files, not only its log. The acknowledged-only rate and the flush's own time are beside it.
//!   Mixed ops/s counts the flush that ends the mixed phase the same way.
//! - WA is the bytes the process handed to write calls (`/proc/self/io` wchar) during the load,
//!   its flush and the warm reads that follow, over the logical bytes loaded: an LSM-tree is
//!   still compacting after its flush, and that work belongs to the load. For strata the
//!   engine's own counter over the same phases is shown beside it as a cross-check.
//! - SA is the bytes the database occupies once closed after the last phase (every file under
//!   its directory, logs included) over the live logical bytes then: the files at rest, the
//!   same reference point for every engine.
//! - Memory is the most, at the end of any phase, of the process's anonymous resident memory
//!   plus the page cache held by the database's files, so an engine that lives in the page
//!   cache is charged for it.

use serde::{Deserialize, Serialize};

use crate::runner::{PhaseResult, RunResult};
use crate::store::EngineIo;
use crate::workload::{Phase, Spec};

/// The cache of the comparison's second setting, with the data beyond memory: the largest
/// power of two of at most a quarter of the logical bytes (so the data is at least 4× the
/// cache: 2 MiB for 100K records, 16 MiB for 1M, 256 MiB for 10M), and no less than 1 MiB.
pub fn beyond_memory_cache(spec: &Spec) -> u64 {
    let logical = spec.records * (spec.key_size + spec.value_size) as u64;
    let quarter = (logical / 4).max(1);
    (1u64 << quarter.ilog2()).max(1 << 20)
}

/// A load-only spec of `records`, for write and space amplification at scale.
pub fn scale_spec(records: u64) -> Spec {
    Spec {
        name: "rum-scale".into(),
        phases: vec![Phase::Load],
        ..Spec::rum(records)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub engine: String,
    pub version: String,
    pub settings: String,
    pub runs: usize,
    /// Records over (load + flush) seconds.
    pub write_ops: f64,
    /// Records over the load's seconds alone: acknowledged, maybe only in a log.
    #[serde(default)]
    pub acked_write_ops: f64,
    /// Seconds of the flush after the load and after the mixed phase.
    #[serde(default)]
    pub load_flush_secs: f64,
    #[serde(default)]
    pub mixed_flush_secs: f64,
    pub read_ops: f64,
    /// Mixed operations over (mixed + flush) seconds.
    pub mixed_ops: f64,
    pub cold_read_ops: f64,
    /// Device reads per cold point read (whole-device counter), where known.
    pub cold_device_reads_per_op: Option<f64>,
    pub write_amplification: f64,
    /// strata's own count of bytes written over the logical bytes, beside the process's.
    pub engine_write_amplification: Option<f64>,
    /// At rest, after the final close.
    pub space_amplification: f64,
    /// The most anonymous memory + page cache of its files at the end of any phase, over runs.
    #[serde(default)]
    pub memory_bytes: u64,
    pub peak_rss_bytes: u64,
    /// Latency quantiles in µs, each the median over runs (see `Latency`).
    pub latency: Latency,
    /// Reads that found nothing or a wrong value, over all runs and phases (must be 0).
    pub wrong_reads: u64,
    /// Writes that waited for background work in the load and mixed phases of the first run,
    /// and their seconds, where the engine counts them.
    #[serde(default)]
    pub write_stalls: Option<(u64, f64)>,
    /// The engine's own count of its data file's IO in each phase of the first run, where it
    /// keeps one (strata's engines; `forecast` sets it beside the model's).
    #[serde(default)]
    pub phase_io: Vec<PhaseIo>,
}

/// One phase's operations and the engine's data-file IO over them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseIo {
    pub phase: String,
    pub ops: u64,
    pub io: EngineIo,
}

/// Latency quantiles of one engine, in µs: point reads warm and cold, and commits of a batch
/// in the load and in the mixed phase.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    pub read_p50_us: f64,
    pub read_p99_us: f64,
    pub cold_read_p50_us: f64,
    pub cold_read_p99_us: f64,
    pub load_commit_p50_us: f64,
    pub load_commit_p99_us: f64,
    pub mixed_commit_p50_us: f64,
    pub mixed_commit_p99_us: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// One engine's row from its runs (all of the same spec).
pub fn row(runs: &[RunResult]) -> Row {
    let Some(first) = runs.first() else {
        return Row::default();
    };
    let over_runs = |label: &str, f: fn(&PhaseResult) -> f64| {
        median(runs.iter().filter_map(|r| r.phase(label)).map(f).collect())
    };
    let ops = |label: &str| over_runs(label, |p| p.ops_per_sec);
    let flush = |label: &str| over_runs(label, |p| p.flush_secs);
    let load = first.phase("load").cloned().unwrap_or_default();
    let cold = first.phase("reads-cold");
    // The load's writes, and the background writes that trail into the read-only phases next.
    let trailing_phases = || {
        first
            .phases
            .iter()
            .skip_while(|p| p.phase != "load")
            .skip(1)
            .take_while(|p| {
                p.logical_bytes_written == 0 && p.phase != "reopen" && p.phase != "reads-cold"
            })
    };
    let trailing: u64 = trailing_phases().map(|p| p.process_bytes_written).sum();
    let trailing_own: u64 = trailing_phases()
        .filter_map(|p| p.engine_bytes_written)
        .sum();
    Row {
        engine: first.engine.clone(),
        version: first.version.clone(),
        settings: first.settings.clone(),
        runs: runs.len(),
        write_ops: ops("load"),
        acked_write_ops: over_runs("load", |p| p.acked_ops_per_sec),
        load_flush_secs: flush("load"),
        mixed_flush_secs: flush("mixed"),
        read_ops: ops("reads"),
        mixed_ops: ops("mixed"),
        cold_read_ops: ops("reads-cold"),
        cold_device_reads_per_op: cold.and_then(PhaseResult::device_reads_per_op),
        write_amplification: (load.process_bytes_written + trailing) as f64
            / load.logical_bytes_written.max(1) as f64,
        engine_write_amplification: load
            .engine_bytes_written
            .map(|b| (b + trailing_own) as f64 / load.logical_bytes_written.max(1) as f64),
        space_amplification: first.space_amplification_at_rest(),
        memory_bytes: runs.iter().map(RunResult::memory_bytes).max().unwrap_or(0),
        peak_rss_bytes: runs.iter().map(|r| r.peak_rss_bytes).max().unwrap_or(0),
        latency: Latency {
            read_p50_us: over_runs("reads", |p| p.read_p50_us),
            read_p99_us: over_runs("reads", |p| p.read_p99_us),
            cold_read_p50_us: over_runs("reads-cold", |p| p.read_p50_us),
            cold_read_p99_us: over_runs("reads-cold", |p| p.read_p99_us),
            load_commit_p50_us: over_runs("load", |p| p.commit_p50_us),
            load_commit_p99_us: over_runs("load", |p| p.commit_p99_us),
            mixed_commit_p50_us: over_runs("mixed", |p| p.commit_p50_us),
            mixed_commit_p99_us: over_runs("mixed", |p| p.commit_p99_us),
        },
        wrong_reads: runs
            .iter()
            .flat_map(|r| &r.phases)
            .map(|p| p.wrong_reads)
            .sum(),
        write_stalls: ["load", "mixed"]
            .iter()
            .filter_map(|l| first.phase(l)?.write_stalls)
            .reduce(|a, b| (a.0 + b.0, a.1 + b.1)),
        phase_io: first
            .phases
            .iter()
            .filter_map(|p| {
                Some(PhaseIo {
                    phase: p.phase.clone(),
                    ops: p.ops,
                    io: p.engine_io?,
                })
            })
            .collect(),
    }
}

/// Write and space amplification of one engine at one scale.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScalePoint {
    pub engine: String,
    pub records: u64,
    pub write_amplification: f64,
    pub space_amplification: f64,
    pub write_ops: f64,
}

/// WA of the load and its flush; SA at rest after the close.
pub fn scale_point(run: &RunResult) -> ScalePoint {
    let load = run.phase("load").cloned().unwrap_or_default();
    ScalePoint {
        engine: run.engine.clone(),
        records: run.spec.records,
        write_amplification: load.write_amplification(),
        space_amplification: run.space_amplification_at_rest(),
        write_ops: load.ops_per_sec,
    }
}

/// Thousands as "412K", millions as "1.15M".
pub fn ops(v: f64) -> String {
    match v {
        v if v <= 0.0 => "-".into(),
        v if v >= 1e6 => format!("{:.2}M", v / 1e6),
        v if v >= 1e3 => format!("{:.0}K", v / 1e3),
        v => format!("{v:.0}"),
    }
}

/// The rows as a Markdown table.
pub fn markdown(rows: &[Row]) -> String {
    let mut s = String::from(
        "| engine | write ops/s (load + flush) | flush s | write ops/s acked | read ops/s | mixed ops/s (+ flush) | mixed flush s | cold read ops/s | device reads per cold read | WA | SA at rest | memory |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let wa = match r.engine_write_amplification {
            Some(own) => format!("{:.2}× (own count {own:.2}×)", r.write_amplification),
            None => format!("{:.2}×", r.write_amplification),
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {wa} | {:.2}× | {} MiB |\n",
            r.engine,
            ops(r.write_ops),
            seconds(r.load_flush_secs),
            ops(r.acked_write_ops),
            ops(r.read_ops),
            ops(r.mixed_ops),
            seconds(r.mixed_flush_secs),
            ops(r.cold_read_ops),
            r.cold_device_reads_per_op
                .map_or_else(|| "-".into(), |v| format!("{v:.2}")),
            r.space_amplification,
            r.memory_bytes >> 20,
        ));
    }
    s
}

/// A flush's time: "0.41", "12.3"; "-" for none.
fn seconds(s: f64) -> String {
    match s {
        s if s <= 0.0 => "-".into(),
        s if s < 10.0 => format!("{s:.2}"),
        s => format!("{s:.1}"),
    }
}

/// Latency quantiles as a Markdown table, "p50 / p99" in µs per cell.
pub fn latency_markdown(rows: &[Row]) -> String {
    let mut s = String::from(
        "| engine | read µs (p50 / p99) | cold read µs | load commit µs | mixed commit µs | write stalls (load + mixed) |\n|---|---|---|---|---|---|\n",
    );
    let pair = |p50: f64, p99: f64| {
        if p50 <= 0.0 && p99 <= 0.0 {
            "-".to_string()
        } else {
            format!("{} / {}", micros(p50), micros(p99))
        }
    };
    for r in rows {
        let l = &r.latency;
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            r.engine,
            pair(l.read_p50_us, l.read_p99_us),
            pair(l.cold_read_p50_us, l.cold_read_p99_us),
            pair(l.load_commit_p50_us, l.load_commit_p99_us),
            pair(l.mixed_commit_p50_us, l.mixed_commit_p99_us),
            r.write_stalls
                .map_or_else(|| "-".to_string(), |(n, s)| format!("{n}, {s:.2} s in all")),
        ));
    }
    s
}

/// Microseconds with the precision that matters: "0.84", "12.3", "4,210".
fn micros(us: f64) -> String {
    match us {
        us if us < 10.0 => format!("{us:.2}"),
        us if us < 100.0 => format!("{us:.1}"),
        us if us < 1000.0 => format!("{us:.0}"),
        us => {
            let n = us.round() as u64;
            format!("{},{:03}", n / 1000, n % 1000)
        }
    }
}

/// Scale points as a Markdown table: one row per engine, WA and SA per record count.
pub fn scale_markdown(points: &[ScalePoint]) -> String {
    let mut scales: Vec<u64> = points.iter().map(|p| p.records).collect();
    scales.sort_unstable();
    scales.dedup();
    let mut engines: Vec<&str> = Vec::new();
    for p in points {
        if !engines.contains(&p.engine.as_str()) {
            engines.push(&p.engine);
        }
    }
    let mut s = String::from("| engine |");
    for n in &scales {
        s.push_str(&format!(" WA at {} | SA at {} |", count(*n), count(*n)));
    }
    s.push_str("\n|---|");
    s.push_str(&"---|---|".repeat(scales.len()));
    s.push('\n');
    for e in engines {
        s.push_str(&format!("| {e} |"));
        for n in &scales {
            match points.iter().find(|p| p.engine == e && p.records == *n) {
                Some(p) => s.push_str(&format!(
                    " {:.2}× | {:.2}× |",
                    p.write_amplification, p.space_amplification
                )),
                None => s.push_str(" - | - |"),
            }
        }
        s.push('\n');
    }
    s
}

/// A record count as "100K", "1M", "10M".
pub fn count(n: u64) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{}K", n / 1_000),
        n => n.to_string(),
    }
}

/// What was measured on this machine before strata's harness existed (issue 5, 1M keys,
/// batches of 1,000, synced, two runs each: ranges of ops/s), for the report to show beside
/// the harness's own figures.
pub const REFERENCE: &str = "\
| engine | write ops/s | read ops/s | mixed ops/s | WA | SA |
|---|---|---|---|---|---|
| Pebble | 415–432K | 93–102K | 61–76K | 4.7× | 1.24× |
| RocksDB | 347–399K | 113–129K | 139–157K | 2.1× | 1.06× |
| fjall | 301–356K | 150–184K | 199–222K | 2.06× | 1.11× |
| LMDB (heed) | 53–56K | 875–891K | 60–65K | 42× | 1.73× |
| redb | 40–44K | 709–746K | 54–56K | 43× | 1.60× |
| bbolt | 39–45K | 621–691K | 51–55K | 44× | 1.75× |
";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::PhaseResult;

    fn phase(label: &str, ops_per_sec: f64) -> PhaseResult {
        PhaseResult {
            phase: label.into(),
            ops: 1000,
            secs: 1000.0 / ops_per_sec,
            ops_per_sec,
            ..PhaseResult::default()
        }
    }

    fn run(write: f64, read: f64) -> RunResult {
        let mut load = phase("load", write);
        load.acked_ops_per_sec = write * 2.0;
        load.flush_secs = 0.5;
        load.logical_bytes_written = 116_000;
        // The flush's bytes are part of the phase's.
        load.process_bytes_written = 232_000;
        load.flush_bytes_written = 116_000;
        load.engine_bytes_written = Some(348_000);
        // SA comes from the files at rest, not from the load.
        load.disk_bytes = 999_000;
        load.live_bytes = 116_000;
        load.memory_bytes = 5 << 20;
        // Compaction trailing into the reads counts towards the load's WA.
        let mut reads = phase("reads", read);
        reads.process_bytes_written = 116_000;
        reads.read_p50_us = read / 10.0;
        reads.read_p99_us = read;
        let mut cold = phase("reads-cold", 10.0);
        cold.device_reads = Some(1500);
        cold.memory_bytes = 7 << 20;
        load.commit_p50_us = 1234.4;
        load.commit_p99_us = 56.78;
        let mut mixed = phase("mixed", 5.0);
        mixed.flush_secs = 2.0;
        load.write_stalls = Some((3, 0.5));
        mixed.write_stalls = Some((1, 0.25));
        RunResult {
            engine: "e".into(),
            version: "e 1".into(),
            settings: "s".into(),
            spec: Spec::rum(1000),
            phases: vec![load, reads, mixed, cold],
            peak_rss_bytes: 3 << 20,
            rss_bytes: 1 << 20,
            secs: 1.0,
            disk_bytes_at_rest: 145_000,
            live_bytes_at_rest: 116_000,
        }
    }

    #[test]
    fn rows_take_median_throughput_and_first_run_amplification() {
        let r = row(&[run(100.0, 7.0), run(300.0, 9.0), run(200.0, 8.0)]);
        assert_eq!((r.write_ops, r.read_ops, r.runs), (200.0, 8.0, 3));
        assert_eq!(r.acked_write_ops, 400.0);
        assert_eq!((r.load_flush_secs, r.mixed_flush_secs), (0.5, 2.0));
        assert_eq!(r.write_amplification, 3.0);
        assert_eq!(r.engine_write_amplification, Some(3.0));
        assert_eq!(r.space_amplification, 1.25);
        assert_eq!(r.memory_bytes, 7 << 20);
        assert_eq!(r.cold_device_reads_per_op, Some(1.5));
        assert_eq!(median(vec![4.0, 1.0]), 2.5);
        assert_eq!((r.latency.read_p50_us, r.latency.read_p99_us), (0.8, 8.0));
        assert_eq!(r.latency.load_commit_p50_us, 1234.4);
        assert_eq!(
            r.write_stalls,
            Some((4, 0.75)),
            "load and mixed stalls, summed"
        );
        assert!(latency_markdown(std::slice::from_ref(&r)).contains("| 4, 0.75 s in all |"));
        let lat = latency_markdown(std::slice::from_ref(&r));
        assert!(
            lat.contains("| e | 0.80 / 8.00 | - | 1,234 / 56.8 | - |"),
            "{lat}"
        );
        let md = markdown(&[r]);
        assert!(
            md.contains(
                "| e | 200 | 0.50 | 400 | 8 | 5 | 2.00 | 10 | 1.50 | 3.00× (own count 3.00×) | 1.25× | 7 MiB |"
            ),
            "{md}"
        );
    }

    #[test]
    fn the_beyond_memory_cache_is_at_most_a_quarter_of_the_data() {
        let cache = |n| beyond_memory_cache(&Spec::rum(n));
        assert_eq!(cache(100_000), 2 << 20);
        assert_eq!(cache(1_000_000), 16 << 20);
        assert_eq!(cache(10_000_000), 256 << 20);
        assert_eq!(cache(1000), 1 << 20);
        for n in [100_000, 1_000_000, 3_000_000, 10_000_000] {
            assert!(n * 116 >= 4 * cache(n), "{n}");
        }
    }

    #[test]
    fn scale_table_has_a_column_pair_per_scale() {
        let mut a = run(1.0, 1.0);
        a.spec.records = 100_000;
        let mut b = run(1.0, 1.0);
        b.spec.records = 1_000_000;
        let md = scale_markdown(&[scale_point(&a), scale_point(&b)]);
        assert!(
            md.starts_with("| engine | WA at 100K | SA at 100K | WA at 1M | SA at 1M |"),
            "{md}"
        );
        assert!(md.contains("| e | 2.00× | 1.25× | 2.00× | 1.25× |"), "{md}");
    }
}
