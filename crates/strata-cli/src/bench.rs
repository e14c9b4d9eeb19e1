//! `strata bench NAME`: the experiments of `strata-bench`, printed as a table or JSON.

use std::io::Write;
use std::process::ExitCode;

use std::path::PathBuf;

use clap::{Args, Subcommand};
use strata_bench::{readers, seed001, versioned};

use crate::report::print_json;
use crate::sizes::{human, parse_size, SIZE_HELP};
use crate::Failure;

#[derive(Subcommand)]
pub enum Experiment {
    /// Seed 001: a fractal tree against a B+-tree in DAM IOs, measured and predicted
    ///
    /// 8-byte pairs, 4 KiB nodes, a cache of 8 nodes, data from 32 KiB to 32 MiB; sequential
    /// and random inserts and searches and full range searches (one, and the mean of five), on a
    /// simulated disk.
    Seed001(Seed001Args),
    Sweep(crate::sweep::SweepArgs),
    Rum(crate::compare::RumArgs),
    /// Seed 003 §8: the SDA against the copy-on-write B-tree as versioned data outgrows memory
    ///
    /// Random 100-byte pairs put at random leaf versions, a new version every --clone-every
    /// puts (a clone of a random leaf, 1/3, or of a random internal version, 2/3), range
    /// queries of ~1,000 at random versions along the way; three lines: the CoW B-tree, the
    /// SDA and the SDA without density amplification. Prints puts/s, range elements/s and the
    /// IO per put and per element beside seed 003's Table 1, and the space used against the
    /// live data before and after deleting half of the leaves.
    Versioned(VersionedArgs),
    /// Point reads of one database from several threads at once, alone or beside a writer
    ///
    /// Loads --records random 16-byte keys with 100-byte values, reopens the database with
    /// --cache of memory, then for each count of --threads reads random keys from that many
    /// threads for --seconds (beside one writer of batches of 100, with --writer). Prints
    /// reads/s of all readers together, their median and 99th-percentile latency and the
    /// device reads per read.
    Readers(ReadersArgs),
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
    /// Also write seed 001's Figures 1-3 (IOs against data size) as SVG to this file
    #[arg(long, value_name = "FILE")]
    svg: Option<std::path::PathBuf>,
}

#[derive(Args)]
#[command(after_help = SIZE_HELP)]
pub struct VersionedArgs {
    /// The small setting of `strata report --quick` (40K puts, 512 KiB of memory, 4 KiB
    /// blocks, 100 versions) instead of the long one (800K puts, 8 MiB, 16 KiB blocks, 1,000
    /// versions)
    #[arg(long)]
    quick: bool,
    /// Puts in all
    #[arg(long, value_name = "N")]
    inserts: Option<u64>,
    /// Puts between new versions
    #[arg(long, value_name = "N", conflicts_with = "versions")]
    clone_every: Option<u64>,
    /// Versions to make over the run: a new version every inserts / N puts (seed 003's
    /// ranges are measured "with 1,000 versions")
    #[arg(long, value_name = "N")]
    versions: Option<u64>,
    /// Memory of each engine (the CoW B-tree's pool; half of it the SDA's write buffer)
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    cache: Option<u64>,
    /// Node size of the CoW B-tree and block size of the SDA
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    block: Option<u64>,
    /// Measuring points (range queries at each)
    #[arg(long, value_name = "N")]
    points: Option<u64>,
    /// Range queries at each point
    #[arg(long, value_name = "N")]
    ranges: Option<u64>,
    /// Lines to run, comma-separated: cow, sda, sda-no-da (default: all three)
    #[arg(long, value_delimiter = ',', value_name = "LINES")]
    lines: Vec<String>,
    /// Scratch directory for the databases (default: under the system's temp directory)
    #[arg(long, value_name = "DIR", conflicts_with = "sim")]
    dir: Option<PathBuf>,
    /// Run on a simulated disk in memory instead (times are then CPU only)
    #[arg(long)]
    sim: bool,
    /// With --sim: price the simulated disk's IO as this device preset (`strata profile
    /// --list-presets`; e.g. wd-black-1tb-2011, an HDD of seed 000), adding the modeled IO
    /// time of the data file to the CPU time
    #[arg(long, value_name = "PRESET", requires = "sim")]
    device: Option<String>,
    /// Also write the chart (puts/s and range elements/s against data put) to FILE
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// Print the report as JSON
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
#[command(after_help = SIZE_HELP)]
pub struct ReadersArgs {
    /// Records to load
    #[arg(long, value_name = "N", default_value_t = 1_000_000)]
    records: u64,
    /// Memory of the database
    #[arg(long, value_name = "SIZE", default_value = "32MiB", value_parser = parse_size)]
    cache: u64,
    /// Reader threads at each point, comma-separated
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "N,…",
        default_value = "1,2,4"
    )]
    threads: Vec<usize>,
    /// Seconds each point runs
    #[arg(long, value_name = "S", default_value_t = 3.0)]
    seconds: f64,
    /// One writer of batches of 100 random records beside the readers
    #[arg(long)]
    writer: bool,
    /// Engine: betree (the default engine), btree (4 KiB nodes), lsm, or a versioned
    /// dictionary read and written at its root version: sda or cow
    #[arg(long, value_name = "ENGINE", default_value = "betree")]
    engine: String,
    /// Read through the OS page cache instead of with O_DIRECT
    #[arg(long)]
    buffered: bool,
    /// Scratch directory for the database (default: under the system's temp directory)
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Print the report as JSON
    #[arg(long)]
    json: bool,
}

fn readers_cmd(a: ReadersArgs) -> Result<ExitCode, Failure> {
    if !(a.seconds > 0.0 && a.seconds.is_finite()) {
        return Err(Failure::Invalid("--seconds must be positive".into()));
    }
    let engine = match a.engine.as_str() {
        "betree" => readers::Engine::BeTree,
        "btree" => readers::Engine::BTree,
        "lsm" => readers::Engine::Lsm,
        "sda" => readers::Engine::Sda,
        "cow" => readers::Engine::Cow,
        other => {
            return Err(Failure::Invalid(format!(
                "no engine {other:?}: the engines are betree, btree, lsm, sda and cow"
            )))
        }
    };
    let cfg = readers::Config {
        records: a.records,
        cache_bytes: a.cache,
        threads: a.threads.clone(),
        seconds: a.seconds,
        writer: a.writer,
        engine,
        direct_io: !a.buffered,
    };
    let dir = a
        .dir
        .clone()
        .unwrap_or_else(|| crate::compare::scratch_dir("readers"));
    std::fs::create_dir_all(&dir)
        .map_err(|e| Failure::Invalid(format!("creating {}: {e}", dir.display())))?;
    let quiet = a.json;
    let outcome = readers::run(&cfg, &dir, |stage| {
        if !quiet {
            eprintln!("  {stage}");
        }
    });
    if a.dir.is_none() {
        // Only a directory this command chose is removed whole.
        let _ = std::fs::remove_dir_all(&dir);
    }
    let report = outcome.map_err(|e| Failure::Invalid(e.to_string()))?;
    if a.json {
        return print_json(&report).map(|_| ExitCode::SUCCESS);
    }
    std::io::stdout()
        .lock()
        .write_all(render_readers(&report).as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// The readers report as a text table.
fn render_readers(r: &readers::Report) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: {} records ({} on disk), {} of memory{}",
        r.engine,
        r.records,
        human(r.data_bytes),
        human(r.cache_bytes),
        if r.writer {
            ", one writer beside the readers"
        } else {
            ""
        }
    );
    let _ = writeln!(
        out,
        "{:>7} {:>11} {:>7} {:>9} {:>9} {:>12} {:>12}",
        "readers", "reads/s", "× 1", "p50 µs", "p99 µs", "dev. reads", "writes/s"
    );
    let one = r.points.first().map_or(1.0, |p| p.reads_per_s);
    for p in &r.points {
        let _ = writeln!(
            out,
            "{:>7} {:>11.0} {:>7.2} {:>9.1} {:>9.1} {:>12.2} {:>12.0}",
            p.threads,
            p.reads_per_s,
            p.reads_per_s / one,
            p.p50_us,
            p.p99_us,
            p.device_reads_per_read,
            p.writes_per_s
        );
    }
    out
}

/// The experiment's configuration from the arguments.
fn versioned_config(a: &VersionedArgs, dir: Option<PathBuf>) -> Result<versioned::Config, Failure> {
    let mut cfg = if a.quick {
        versioned::Config::quick(dir)
    } else {
        versioned::Config::full(dir)
    };
    let set = |field: &mut u64, v: Option<u64>| {
        if let Some(v) = v {
            *field = v;
        }
    };
    set(&mut cfg.inserts, a.inserts);
    set(&mut cfg.clone_every, a.clone_every);
    if let Some(n) = a.versions {
        if n == 0 {
            return Err(Failure::Invalid("--versions must be positive".into()));
        }
        cfg.clone_every = (cfg.inserts / n).max(1);
    }
    set(&mut cfg.cache_bytes, a.cache);
    set(&mut cfg.block_bytes, a.block);
    set(&mut cfg.points, a.points);
    set(&mut cfg.ranges_per_point, a.ranges);
    cfg.device = a.device.clone();
    if !a.lines.is_empty() {
        cfg.lines = a
            .lines
            .iter()
            .map(|name| {
                versioned::Line::ALL
                    .into_iter()
                    .find(|l| l.name() == name)
                    .ok_or_else(|| {
                        Failure::Invalid(format!(
                            "no line {name:?}: the lines are cow, sda and sda-no-da"
                        ))
                    })
            })
            .collect::<Result<_, _>>()?;
    }
    cfg.validate()?;
    Ok(cfg)
}

fn versioned_cmd(a: VersionedArgs) -> Result<ExitCode, Failure> {
    let scratch = if a.sim {
        None
    } else {
        Some(
            a.dir
                .clone()
                .unwrap_or_else(|| crate::compare::scratch_dir("versioned")),
        )
    };
    let cfg = versioned_config(&a, scratch.clone())?;
    if let Some(d) = &scratch {
        std::fs::create_dir_all(d)
            .map_err(|e| Failure::Invalid(format!("creating {}: {e}", d.display())))?;
    }
    let quiet = a.json;
    let outcome = versioned::run(&cfg, |stage| {
        if !quiet {
            eprintln!("  {stage}");
        }
    });
    if let (Some(d), None) = (&scratch, &a.dir) {
        // Only a directory this command chose is removed whole.
        let _ = std::fs::remove_dir_all(d);
    }
    let report = outcome?;
    if let Some(path) = &a.svg {
        std::fs::write(path, report.svg())
            .map_err(|e| Failure::Invalid(format!("writing {}: {e}", path.display())))?;
    }
    if a.json {
        return print_json(&report).map(|_| ExitCode::SUCCESS);
    }
    std::io::stdout()
        .lock()
        .write_all(report.render().as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

pub fn run(e: Experiment) -> Result<ExitCode, Failure> {
    match e {
        Experiment::Seed001(a) => seed001_cmd(a),
        Experiment::Versioned(a) => versioned_cmd(a),
        Experiment::Readers(a) => readers_cmd(a),
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
    if let Some(path) = &a.svg {
        std::fs::write(path, report.svg())?;
    }
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
        "{:>9} {:>8} {:<7} {:<23} {:>12} {:>12} {:>7}",
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
            "{:>9} {:>8} {:<7} {:<23} {:>12} {:>12} {:>7}",
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
