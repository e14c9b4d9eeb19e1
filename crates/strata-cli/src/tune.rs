//! `strata tune`: node sizes for each engine from a device profile and a workload, with the
//! predicted cost of each operation and the tables behind the choice (the library's
//! `tune::recommend`), as text or JSON.
//!
//! The profile comes from --profile, else the saved profile (`strata profile` writes it), else
//! the built-in figures for the machine strata was built on; the output says which.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use strata::profile::DeviceProfile;
use strata::tune::{self, Mix, Recommendation, Workload};

use crate::report::print_json;
use crate::sizes::{human, parse_size, SIZE_HELP};
use crate::Failure;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum WorkloadKind {
    /// Random point queries
    Point,
    /// Insert-heavy: 90% random inserts, 10% point queries
    Insert,
    /// Range queries of --range-items records
    Range,
    /// Half point queries, half inserts
    Mixed,
}

impl From<WorkloadKind> for Mix {
    fn from(k: WorkloadKind) -> Mix {
        match k {
            WorkloadKind::Point => Mix::Point,
            WorkloadKind::Insert => Mix::Insert,
            WorkloadKind::Range => Mix::Range,
            WorkloadKind::Mixed => Mix::Mixed,
        }
    }
}

/// Choose node sizes for the B+-tree and the Bε-tree from a device profile and a workload
///
/// Prices every allowed geometry with the affine model (seed 000: Lemma 5 for the B+-tree; for
/// the Bε-tree the engine's account, which spills flushes into uncached leaves as runs, with
/// Theorem 9's beside it; the levels the cache holds taken off) and prints the cheapest
/// for the workload, Corollary 7 and 12's closed forms beside it, the cost of both trees against
/// node size (Table 3's sensitivity) and the IOPS-by-block-size table of seed 002.
#[derive(Args)]
#[command(after_help = SIZE_HELP)]
pub struct TuneArgs {
    /// Device profile (JSON from `strata profile`); default: the saved profile, else built-in
    /// figures
    #[arg(long, value_name = "FILE")]
    profile: Option<PathBuf>,
    /// Number of records
    #[arg(long, value_name = "N")]
    keys: u64,
    /// Bytes per key
    #[arg(long, value_name = "SIZE", default_value = "16", value_parser = parse_size)]
    key_size: u64,
    /// Bytes per value
    #[arg(long, value_name = "SIZE", default_value = "100", value_parser = parse_size)]
    value_size: u64,
    /// Cache budget
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = parse_size)]
    cache: u64,
    /// What the workload does
    #[arg(long, value_enum, default_value_t = WorkloadKind::Mixed)]
    workload: WorkloadKind,
    /// Records per range query
    #[arg(long, value_name = "N", default_value_t = 100)]
    range_items: u64,
    /// Print one JSON object instead of tables
    #[arg(long)]
    json: bool,
}

/// The profile to use and a sentence saying where it came from.
pub fn load_profile(path: Option<&PathBuf>) -> Result<(DeviceProfile, String), Failure> {
    if let Some(p) = path {
        let prof = DeviceProfile::load(p)?;
        return Ok((prof, format!("profile {}", p.display())));
    }
    if let Some((p, prof)) = DeviceProfile::load_saved()? {
        return Ok((prof, format!("saved profile {}", p.display())));
    }
    Ok((
        DeviceProfile::builtin(),
        "built-in figures (no saved profile: run `strata profile` to measure this disk)".into(),
    ))
}

pub fn run(a: TuneArgs) -> Result<ExitCode, Failure> {
    if a.keys == 0 {
        return Err(Failure::Invalid("--keys must be at least 1".into()));
    }
    if a.key_size == 0 || a.key_size > strata::MAX_KEY_LEN as u64 {
        return Err(Failure::Invalid(format!(
            "--key-size must be 1 to {} bytes",
            strata::MAX_KEY_LEN
        )));
    }
    if a.value_size > strata::MAX_VALUE_LEN as u64 {
        return Err(Failure::Invalid(format!(
            "--value-size must be at most {} bytes",
            strata::MAX_VALUE_LEN
        )));
    }
    let (profile, source) = load_profile(a.profile.as_ref())?;
    let mut w = Workload::new(a.keys);
    w.key_bytes = a.key_size;
    w.value_bytes = a.value_size;
    w.cache_bytes = a.cache;
    w.mix = a.workload.into();
    w.range_items = a.range_items.max(1);
    let r = tune::recommend(&profile, &w);
    if a.json {
        #[derive(serde::Serialize)]
        struct Out<'a> {
            profile_source: &'a str,
            #[serde(flatten)]
            recommendation: &'a Recommendation,
        }
        print_json(&Out {
            profile_source: &source,
            recommendation: &r,
        })?;
    } else {
        std::io::stdout()
            .lock()
            .write_all(render(&r, &source).as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}

fn us(seconds: f64) -> String {
    format!("{:.2}", seconds * 1e6)
}

/// The recommendation as text: the picks, then each table.
pub fn render(r: &Recommendation, source: &str) -> String {
    let mut o = String::new();
    let p = &r.profile;
    let w = &r.workload;
    let line = |o: &mut String, s: String| {
        o.push_str(&s);
        o.push('\n');
    };
    line(&mut o, format!("device: {} ({source})", p.device));
    line(
        &mut o,
        format!(
            "  s {:.1} µs, t {:.3} ns/B, α {:.3e}/B, 1/α {}, P {:.2}, saturation {}/s, fsync {:.2} ms",
            p.setup_s * 1e6,
            p.per_byte_s * 1e9,
            p.alpha,
            human(p.half_bandwidth_bytes as u64),
            p.parallelism,
            human(p.saturation_bytes_per_s as u64),
            p.fsync_s * 1e3
        ),
    );
    line(
        &mut o,
        format!(
            "workload: {} records of {} B keys + {} B values, cache {}, {} (ranges of {})",
            w.keys,
            w.key_bytes,
            w.value_bytes,
            human(w.cache_bytes),
            w.mix.name(),
            w.range_items
        ),
    );
    line(&mut o, String::new());
    line(&mut o, "recommendation".into());
    let bp = &r.btree.prediction;
    line(
        &mut o,
        format!(
            "  B+-tree   node {:>8}                         insert {:>8} µs  point {:>8} µs  range {:>8} µs",
            human(r.btree.node_bytes),
            us(bp.insert.seconds),
            us(bp.point.seconds),
            us(bp.range.seconds)
        ),
    );
    let ep = &r.betree.prediction;
    line(
        &mut o,
        format!(
            "  Bε-tree   node {:>8}, fanout {:>2}, basement {:>7}  insert {:>8} µs  point {:>8} µs  range {:>8} µs",
            human(r.betree.node_bytes),
            r.betree.fanout,
            human(r.betree.basement_bytes),
            us(ep.insert.seconds),
            us(ep.point.seconds),
            us(ep.range.seconds)
        ),
    );
    line(
        &mut o,
        format!(
            "  Bε-tree   the paper's account (Theorem 9: every flush rewrites the leaf) would say \
             insert {} µs, {:.0} B written",
            us(r.betree.paper_insert.seconds),
            r.betree.paper_insert.write_bytes
        ),
    );
    let wa = &r.betree.load_wa;
    line(
        &mut o,
        format!(
            "  Bε-tree   write amplification loading {} records into a {} cache: {:.1}× predicted \
             (log {:.2}, leaves {:.2}, internal {:.2}; {:.1}× per insert at the end)",
            w.keys,
            human(w.cache_bytes),
            wa.total,
            wa.log,
            wa.leaves,
            wa.internal,
            wa.marginal
        ),
    );
    for n in &r.notes {
        line(&mut o, format!("  note: {n}"));
    }
    line(&mut o, String::new());

    let c7 = &r.btree.corollary7;
    line(
        &mut o,
        format!(
            "B+-tree: Corollary 7 with items of {:.0} B (α = {:.3e} per item): optimum {:.0} items \
             ({}), brute force {} items, 1/(α ln 1/α) = {:.0}",
            c7.item_bytes,
            c7.alpha_per_item,
            c7.optimum_items,
            human(c7.optimum_bytes as u64),
            c7.brute_force_items,
            c7.approx_items
        ),
    );
    line(
        &mut o,
        format!(
            "  cost by node size with the cache ({}) taken off; µs of IO per operation",
            human(r.effective_cache_bytes)
        ),
    );
    line(
        &mut o,
        format!(
            "  {:>8} {:>6} {:>7} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "node", "height", "cached", "reads/pt", "point", "insert", "range", "objective"
        ),
    );
    for row in &r.btree.table {
        let mark = if row.node_bytes == r.btree.node_bytes {
            " <"
        } else {
            ""
        };
        line(
            &mut o,
            format!(
                "  {:>8} {:>6} {:>7.2} {:>10.3} {:>10} {:>10} {:>10} {:>10}{mark}",
                human(row.node_bytes),
                row.height,
                row.cached_levels,
                row.point.reads,
                us(row.point.seconds),
                us(row.insert.seconds),
                us(row.range.seconds),
                us(row.objective_s)
            ),
        );
    }
    line(&mut o, String::new());

    let c12 = &r.betree.corollary12;
    line(
        &mut o,
        format!(
            "Bε-tree: Corollary 12 with items of {:.0} B: fanout {:.0}, node {:.0} items ({}); \
             best fanout and basement per node size:",
            c12.item_bytes,
            c12.fanout,
            c12.node_items,
            human(c12.node_bytes as u64)
        ),
    );
    line(
        &mut o,
        format!(
            "  {:>8} {:>6} {:>9} {:>6} {:>10} {:>10} {:>10} {:>10}",
            "node", "fanout", "basement", "height", "point", "insert", "range", "objective"
        ),
    );
    for row in &r.betree.table {
        let mark = if row.node_bytes == r.betree.node_bytes {
            " <"
        } else {
            ""
        };
        line(
            &mut o,
            format!(
                "  {:>8} {:>6} {:>9} {:>6} {:>10} {:>10} {:>10} {:>10}{mark}",
                human(row.node_bytes),
                row.fanout,
                human(row.basement_bytes),
                row.height,
                us(row.point.seconds),
                us(row.insert.seconds),
                us(row.range.seconds),
                us(row.objective_s)
            ),
        );
    }
    line(&mut o, String::new());

    line(
        &mut o,
        format!(
            "Sensitivity (Table 3): µs of IO per operation against node size (Bε-tree at fanout \
             {}, basement {}); ×: relative to each column's best allowed size",
            r.betree.fanout,
            human(r.betree.basement_bytes)
        ),
    );
    let best = |f: &dyn Fn(&tune::SensitivityRow) -> Option<f64>| {
        r.sensitivity
            .iter()
            .filter_map(f)
            .fold(f64::INFINITY, f64::min)
    };
    let bpt = best(&|s| s.btree_allowed.then_some(s.btree_point_s));
    let bins = best(&|s| s.btree_allowed.then_some(s.btree_insert_s));
    let ept = best(&|s| s.betree_allowed.then_some(s.betree_point_s));
    let eins = best(&|s| s.betree_allowed.then_some(s.betree_insert_s));
    let epap = best(&|s| s.betree_allowed.then_some(s.betree_insert_paper_s));
    let rel = |v: f64, b: f64| {
        if b > 0.0 {
            format!("{:.2}×", v / b)
        } else {
            "-".into()
        }
    };
    line(
        &mut o,
        format!(
            "  {:>8} {:>18} {:>18} {:>18} {:>18} {:>18}",
            "node", "B+ point", "B+ insert", "Bε point", "Bε insert", "Bε ins. Thm 9"
        ),
    );
    for s in &r.sensitivity {
        let cell = |ok: bool, v: f64, b: f64| {
            if ok {
                format!("{:>9} {:>8}", us(v), rel(v, b))
            } else {
                format!("{:>9} {:>8}", format!("({})", us(v)), "")
            }
        };
        line(
            &mut o,
            format!(
                "  {:>8} {:>18} {:>18} {:>18} {:>18} {:>18}",
                human(s.node_bytes),
                cell(s.btree_allowed, s.btree_point_s, bpt),
                cell(s.btree_allowed, s.btree_insert_s, bins),
                cell(s.betree_allowed, s.betree_point_s, ept),
                cell(s.betree_allowed, s.betree_insert_s, eins),
                cell(s.betree_allowed, s.betree_insert_paper_s, epap)
            ),
        );
    }
    line(
        &mut o,
        "  (parenthesised: a size that engine does not accept; Bε insert is the engine's account, \
         which the tuner ranks with, Thm 9 the paper's)"
            .into(),
    );
    line(&mut o, String::new());

    line(
        &mut o,
        format!(
            "Block size table (seed 002): IOPS at queue depth 1, b = block / {} B per key, hops = \
             log_b N; power: offsets from a power law; cached hops: B+-tree reads per query \
             with a cache of {}; < the most queries per second with nothing cached",
            w.key_bytes + 10,
            human(r.effective_cache_bytes)
        ),
    );
    line(
        &mut o,
        format!(
            "  {:>8} {:>9} {:>10} {:>9} {:>6} {:>9} {:>10} {:>11} {:>11}",
            "block",
            "IOPS",
            "power IOPS",
            "keys",
            "hops",
            "q/s",
            "power q/s",
            "cached hops",
            "cached q/s"
        ),
    );
    let opt = |x: Option<f64>| x.map_or("-".to_string(), |q| format!("{q:.0}"));
    for i in &r.iops {
        line(
            &mut o,
            format!(
                "  {:>8} {:>9.0} {:>10} {:>9.0} {:>6.2} {:>9.0} {:>10} {:>11.3} {:>11}{}{}",
                human(i.block_bytes),
                i.iops,
                opt(i.power_iops),
                i.keys_per_node,
                i.hops,
                i.queries_per_s,
                opt(i.power_queries_per_s),
                i.cached_hops,
                opt(i.cached_queries_per_s),
                if i.measured { "" } else { "  (model)" },
                if i.best { " <" } else { "" }
            ),
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_marks_each_pick_and_prints_every_table_row() {
        let mut w = Workload::new(100_000_000);
        w.mix = Mix::Point;
        let r = tune::recommend(&DeviceProfile::builtin(), &w);
        let text = render(&r, "test");
        // The B+-tree and Bε-tree tables each mark their pick, and the block size table its
        // best block size.
        assert_eq!(text.matches(" <\n").count(), 3, "{text}");
        let best: Vec<_> = r.iops.iter().filter(|i| i.best).collect();
        assert_eq!(best.len(), 1);
        assert!(r
            .iops
            .iter()
            .all(|i| i.queries_per_s <= best[0].queries_per_s));
        let rows = r.btree.table.len() + r.betree.table.len() + r.sensitivity.len() + r.iops.len();
        let numeric = text
            .lines()
            .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
            .count();
        assert_eq!(numeric, rows, "{text}");
        assert!(text.contains(&human(r.btree.node_bytes)));
    }

    #[test]
    fn a_profile_that_does_not_parse_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.json");
        std::fs::write(&path, "[1, 2").unwrap();
        let Err(Failure::Db(e)) = load_profile(Some(&path)) else {
            panic!("expected an error");
        };
        assert!(e.to_string().contains("not a strata device profile"), "{e}");
    }
}
