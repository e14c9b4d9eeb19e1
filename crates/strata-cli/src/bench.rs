//! `strata bench NAME`: the experiments of `strata-bench`, printed as a table or JSON.

use std::io::Write;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use strata_bench::seed001;

use crate::report::print_json;
use crate::sizes::{human, parse_size};
use crate::Failure;

#[derive(Subcommand)]
pub enum Experiment {
    /// Seed 001: a fractal tree against a B+-tree in DAM IOs, measured and predicted
    ///
    /// 8-byte pairs, 4 KiB nodes, a cache of 8 nodes, data from 32 KiB to 32 MiB; sequential
    /// and random inserts and searches and one full range search, on a simulated disk.
    Seed001(Seed001Args),
    Sweep(crate::sweep::SweepArgs),
    Rum(crate::compare::RumArgs),
    #[command(hide = true)]
    Worker(crate::compare::WorkerArgs),
}

#[derive(Args)]
pub struct Seed001Args {
    /// Smallest data size
    #[arg(long, value_name = "SIZE", default_value = "32KiB", value_parser = parse_size)]
    min_size: u64,
    /// Largest data size
    #[arg(long, value_name = "SIZE", default_value = "32MiB", value_parser = parse_size)]
    max_size: u64,
    /// Print the report as JSON
    #[arg(long)]
    json: bool,
}

pub fn run(e: Experiment) -> Result<ExitCode, Failure> {
    match e {
        Experiment::Seed001(a) => seed001_cmd(a),
        Experiment::Sweep(a) => crate::sweep::run(a),
        Experiment::Rum(a) => crate::compare::rum_cmd(a),
        Experiment::Worker(a) => crate::compare::worker(a),
    }
}

fn fmt_ratio(r: Option<f64>) -> String {
    r.map_or_else(|| "-".into(), |r| format!("{r:.2}"))
}

fn seed001_cmd(a: Seed001Args) -> Result<ExitCode, Failure> {
    if a.min_size < 8 || a.min_size > a.max_size {
        return Err(Failure::Invalid(
            "--min-size must be at least 8 bytes and at most --max-size".into(),
        ));
    }
    let cfg = seed001::Config {
        min_bytes: a.min_size,
        max_bytes: a.max_size,
        ..Default::default()
    };
    let quiet = a.json;
    let report = seed001::run(&cfg, |stage| {
        if !quiet {
            eprintln!("  {stage}");
        }
    })?;
    if a.json {
        return print_json(&report).map(|_| ExitCode::SUCCESS);
    }
    std::io::stdout()
        .lock()
        .write_all(render_seed001(&report).as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// Seed 001's report as text tables.
pub fn render_seed001(report: &seed001::Report) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "seed 001: 8-byte pairs, {} nodes, cache of {} nodes ({} as strata charges it), Bε-tree fanout {}",
        human(report.node_bytes as u64),
        report.config.cache_nodes,
        human(report.cache_bytes as u64),
        report.betree_fanout
    );
    let _ = writeln!(
        out,
        "IOs are 4 KiB block transfers of the data file on a simulated disk.\n"
    );
    let _ = writeln!(
        out,
        "{:>9} {:>8} {:<7} {:<18} {:>12} {:>12} {:>7}",
        "data", "pairs", "engine", "operation", "measured", "predicted", "m/p"
    );
    for r in &report.rows {
        let (p, ratio) = match r.predicted_ios {
            Some(p) => (
                format!("{p:.0}"),
                fmt_ratio((p > 0.0).then(|| r.measured_ios as f64 / p)),
            ),
            None => ("-".into(), "-".into()),
        };
        let _ = writeln!(
            out,
            "{:>9} {:>8} {:<7} {:<18} {:>12} {:>12} {:>7}",
            human(r.data_bytes),
            r.pairs,
            r.engine,
            r.op,
            r.measured_ios,
            p,
            ratio
        );
    }
    let _ = writeln!(
        out,
        "\n{:>9}  {:>22}  {:>22}",
        "data", "random insert B+/Bε", "random search Bε/B+"
    );
    let _ = writeln!(
        out,
        "{:>9}  {:>10} {:>11}  {:>10} {:>11}",
        "", "measured", "predicted", "measured", "predicted"
    );
    for (size, [im, ip, sm, sp]) in report.ratios() {
        let _ = writeln!(
            out,
            "{:>9}  {:>10} {:>11}  {:>10} {:>11}",
            human(size),
            fmt_ratio(im),
            fmt_ratio(ip),
            fmt_ratio(sm),
            fmt_ratio(sp)
        );
    }
    let _ = writeln!(out, "\nSeed 001 reports random inserts needing ~29.5x fewer IOs than its B+-tree (predicted 11x) and searches 1.91x more (predicted 2x).");
    out
}
