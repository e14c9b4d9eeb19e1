//! `strata bench sweep`: the node-size sweep of `strata_bench::sweep`, printed as a table (or
//! JSON) with the tuner's pick, the measured best and how fast cost grows past it, and drawn as
//! an SVG with `--svg`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use strata::profile::DeviceProfile;
use strata_bench::sweep::{self, Config, Op, Report, Tree};

use crate::report::print_json;
use crate::sizes::{human, parse_size, SIZE_HELP};
use crate::Failure;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TreeArg {
    /// The B+-tree only
    Btree,
    /// The Bε-tree only
    Betree,
}

/// Node-size sweep: µs per random insert and point query against node size, both trees
///
/// Loads a data set several times the cache into a fresh database per node size and tree, then
/// with O_DIRECT and a small cache times random point queries (values checked) and random
/// inserts (one write each, no fsync, then a checkpoint), beside the affine model's prediction
/// from the device profile. Marks the tuner's pick and the measured best, and prints the cost at
/// the largest node over the cost at the best: seed 000 predicts it grows about linearly with
/// the node size for the B+-tree and much more slowly for the Bε-tree. Takes 2-3 minutes
/// (--quick about 10 seconds).
#[derive(Args)]
#[command(after_help = SIZE_HELP)]
pub struct SweepArgs {
    /// Directory for the databases (each removed when measured); default a new directory under
    /// the system's temporary directory, removed afterwards
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Records to load (16-byte keys, 100-byte values); default 1000000 (--quick 200000)
    #[arg(long, value_name = "N", conflicts_with = "data")]
    records: Option<u64>,
    /// Keys and values to load, as a size instead of --records
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    data: Option<u64>,
    /// Cache budget for the timed operations; default 8MiB (--quick 2MiB)
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    cache: Option<u64>,
    /// Smallest node size; default 4KiB
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    min_node: Option<u64>,
    /// Largest node size, up to 16MiB (the B+-tree stops at 4MiB); default 4MiB (--quick 1MiB)
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    max_node: Option<u64>,
    /// Node sizes are the smallest times powers of this (2 or 4); default 4
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(2..=4))]
    step: Option<u64>,
    /// Sweep one tree only; default both
    #[arg(long, value_enum)]
    tree: Option<TreeArg>,
    /// Timed inserts and timed queries per repetition; default 2000 (--quick 300)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    ops: Option<u64>,
    /// Repetitions of the timed phases (the median is reported); default 3 (--quick 1)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    repetitions: Option<u32>,
    /// Device profile (JSON from `strata profile`) to price the model with; default the saved
    /// profile, else the built-in figures of the machine strata was built on
    #[arg(long, value_name = "FILE")]
    profile: Option<PathBuf>,
    /// Write the plot (µs per operation against node size, model and measured) to FILE
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// A smaller run: less data and cache, nodes up to 1MiB, fewer operations
    #[arg(long)]
    quick: bool,
    /// Run on a simulated device preset (see `strata profile --list-presets`) instead of --dir:
    /// its own model prices the trees and times them (data-file IO only, no CPU)
    #[arg(long, value_name = "PRESET", conflicts_with_all = ["dir", "profile"])]
    sim: Option<String>,
    /// Print the report as JSON (and no progress)
    #[arg(long)]
    json: bool,
}

/// The profile, where it came from, and whether it is a stand-in.
fn load_profile(path: Option<&PathBuf>) -> Result<(DeviceProfile, String, bool), Failure> {
    if let Some(p) = path {
        let prof = DeviceProfile::load(p)?;
        return Ok((prof, format!("profile {}", p.display()), false));
    }
    if let Some((p, prof)) = DeviceProfile::load_saved()? {
        return Ok((prof, format!("saved profile {}", p.display()), false));
    }
    Ok((
        DeviceProfile::builtin(),
        "DEFAULT profile: the built-in `this-machine` preset (fio's figures for the machine \
         strata was built on), since no profile is saved; run `strata profile` to measure this \
         disk"
            .into(),
        true,
    ))
}

/// The default directory: made here, removed when dropped, however the sweep ends.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<TempDir, Failure> {
        let path = std::env::temp_dir().join(format!("strata-sweep-{}", std::process::id()));
        std::fs::create_dir(&path)
            .map_err(|e| Failure::Invalid(format!("cannot create {}: {e}", path.display())))?;
        Ok(TempDir(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn config(a: &SweepArgs, dir: &Path) -> Result<Config, Failure> {
    let mut cfg = match &a.sim {
        Some(preset) => Config::simulated(preset)
            .map_err(|e| Failure::Invalid(e.to_string().replace("invalid options: ", "")))?,
        None => {
            let (profile, source, is_default) = load_profile(a.profile.as_ref())?;
            let mut cfg = Config::new(dir, profile, &source);
            cfg.profile_is_default = is_default;
            cfg
        }
    };
    if a.quick {
        cfg = cfg.quick();
    }
    if let Some(n) = a.records {
        cfg.records = n;
    }
    if let Some(bytes) = a.data {
        cfg.records = bytes / (sweep::KEY_BYTES + sweep::VALUE_BYTES) as u64;
    }
    if let Some(c) = a.cache {
        cfg.cache_bytes = c;
    }
    if let Some(n) = a.min_node {
        cfg.min_node = n;
    }
    if let Some(n) = a.max_node {
        cfg.max_node = n;
    }
    if let Some(s) = a.step {
        cfg.step = s;
    }
    if let Some(n) = a.ops {
        cfg.ops = n;
        cfg.min_ops = cfg.min_ops.min(n);
    }
    if let Some(r) = a.repetitions {
        cfg.repetitions = r;
    }
    cfg.trees = match a.tree {
        Some(TreeArg::Btree) => vec![Tree::BTree],
        Some(TreeArg::Betree) => vec![Tree::BeTree],
        None => vec![Tree::BTree, Tree::BeTree],
    };
    // Say what is wrong before a temporary directory is made.
    cfg.validate()
        .map_err(|e| Failure::Invalid(e.to_string().replace("invalid options: ", "")))?;
    Ok(cfg)
}

pub fn run(a: SweepArgs) -> Result<ExitCode, Failure> {
    if let Some(dir) = &a.dir {
        if !dir.is_dir() {
            return Err(Failure::Invalid(format!(
                "--dir {} is not a directory",
                dir.display()
            )));
        }
    }
    // Check the arguments against a placeholder before making the temporary directory.
    config(&a, Path::new("."))?;
    let temp = match (&a.dir, &a.sim) {
        (None, None) => Some(TempDir::new()?),
        _ => None,
    };
    let dir = match (&a.dir, &temp) {
        (Some(d), _) => d.clone(),
        (None, Some(t)) => t.0.clone(),
        // On the simulator nothing is written to a directory.
        (None, None) => PathBuf::new(),
    };
    let cfg = config(&a, &dir)?;
    let quiet = a.json;
    let report = sweep::run(&cfg, |stage| {
        if !quiet {
            eprintln!("  {stage}");
        }
    })?;
    drop(temp);
    if let Some(path) = &a.svg {
        std::fs::write(path, report.svg())
            .map_err(|e| Failure::Invalid(format!("cannot write {}: {e}", path.display())))?;
    }
    if a.json {
        return print_json(&report).map(|_| ExitCode::SUCCESS);
    }
    std::io::stdout()
        .lock()
        .write_all(render(&report, a.svg.as_deref()).as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

fn opt(v: Option<u64>, f: impl Fn(u64) -> String) -> String {
    v.map_or_else(|| "-".into(), f)
}

/// The report as text: the setup, a table of every point, and per tree the tuner's pick, the
/// bests and how cost grows past them.
pub fn render(r: &Report, svg: Option<&Path>) -> String {
    use std::fmt::Write as _;
    let c = &r.config;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Node-size sweep: {} records (16 B keys, 100 B values; {} of data, {:.1}x the {} cache), \
         data file {}.",
        c.records,
        human(r.data_bytes),
        r.data_over_cache,
        human(c.cache_bytes),
        match (&c.sim, c.direct_io) {
            (Some(p), _) => format!(
                "on the simulated {p}: µs/op is its model's price of the data file's IO (no CPU, \
                 no log)"
            ),
            (None, true) => "O_DIRECT".into(),
            (None, false) => "buffered".into(),
        }
    );
    let _ = writeln!(
        out,
        "Model priced with the {}: s = {:.1} µs, t = {:.3} ns/B (1/α = {}).",
        r.profile.source,
        r.profile.setup_us,
        r.profile.per_byte_ns,
        human(r.profile.half_bandwidth_bytes as u64)
    );
    let _ = writeln!(
        out,
        "Per point: load in random order, reopen with the small cache, warm it with queries; then \
         {} repetition(s) of {} point queries of loaded keys (values checked) and {} inserts of \
         new random keys (one write each, Durability::None: no fsync), closed by a checkpoint \
         timed with them. µs/op is the median over repetitions; IO per op is the data file's, \
         from the engine's counters. `model` is the affine prediction, `io@m` the IO actually \
         done priced by the same model. Bε-tree fanout and basement at each size: the tuner's \
         best for that size (mixed workload; under 64 KiB, where the tuner does not look, the \
         same search restricted to geometries that keep 100-byte values inline).\n",
        c.repetitions, c.ops, c.ops
    );
    let _ = writeln!(
        out,
        "{:<8} {:>7} {:>3} {:>7} {:>2} | {:>8} {:>8} {:>7} {:>5} {:>5} {:>8} | {:>8} {:>8} {:>7} {:>5} {:>8}",
        "", "", "", "", "", "insert", "", "", "", "", "", "query", "", "", "", ""
    );
    let _ = writeln!(
        out,
        "{:<8} {:>7} {:>3} {:>7} {:>2} | {:>8} {:>8} {:>7} {:>5} {:>5} {:>8} | {:>8} {:>8} {:>7} {:>5} {:>8}",
        "tree", "node", "F", "basemnt", "h", "µs/op", "model", "io@m", "rd/op", "wr/op", "KiB/op",
        "µs/op", "model", "io@m", "rd/op", "KiB/op"
    );
    for p in &r.points {
        let i = &p.insert;
        let q = &p.query;
        let _ = writeln!(
            out,
            "{:<8} {:>7} {:>3} {:>7} {:>2} | {:>8.1} {:>8.1} {:>7.1} {:>5.2} {:>5.2} {:>8.1} | {:>8.1} {:>8.1} {:>7.1} {:>5.2} {:>8.1}",
            p.tree.label(),
            human(p.node_bytes),
            opt(p.fanout, |f| f.to_string()),
            opt(p.basement_bytes, human),
            p.height,
            i.us_per_op,
            p.predicted.insert_us,
            i.io_model_us,
            i.reads_per_op,
            i.writes_per_op,
            (i.bytes_read_per_op + i.bytes_written_per_op) / 1024.0,
            q.us_per_op,
            p.predicted.query_us,
            q.io_model_us,
            q.reads_per_op,
            q.bytes_read_per_op / 1024.0,
        );
    }
    let short = |op: Op| match op {
        Op::Insert => "insert",
        Op::Query => "query",
        Op::Mixed => "mixed",
    };
    for s in &r.trees {
        let t = &s.tuner;
        let geo = match (t.fanout, t.basement_bytes) {
            (Some(f), Some(b)) => format!(", fanout {f}, {} basements", human(b)),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "\n{}: tuner's pick (mixed workload) {}{geo}{}",
            s.tree.label(),
            human(t.node_bytes),
            if t.in_sweep {
                ""
            } else {
                " (outside the swept range, not measured)"
            }
        );
        for b in &s.best {
            let growth = b.growth_exponent.map_or_else(
                || "the best is the largest node".into(),
                |e| format!("log-log slope past the best {e:.2}"),
            );
            let last = match (b.last_step_from, b.last_step_exponent) {
                (Some(from), Some(e)) => {
                    format!(", over {}..{} {e:.2}", human(from), human(b.largest_node))
                }
                _ => String::new(),
            };
            let _ = writeln!(
                out,
                "  {:<6} measured best {:>7} ({:.1} µs), model's best {:>7}; at {}: {:.1} µs = {:.2}x the best (model {:.2}x); {growth}{last}",
                short(b.op),
                human(b.measured_best_node),
                b.measured_best_us,
                human(b.predicted_best_node),
                human(b.largest_node),
                b.largest_us,
                b.largest_over_best,
                b.predicted_largest_over_best,
            );
        }
        if let Some(f) = &s.alpha_fit {
            let _ = writeln!(
                out,
                "  α from the measured query curve: the seed's line against the node size from {} \
                 up ({} sizes) {:.3e} per byte (R² {:.3}); through the tree's model (its reads \
                 and bytes per query at each size) s = {:.0} µs, α = {:.3e}, 1/α = {} (R² \
                 {:.3}); the profile's α {:.3e} ({:+.0}%)",
                human(f.from_node),
                f.sizes,
                f.alpha_per_node_byte,
                f.r2_node,
                f.setup_us,
                f.alpha,
                human(f.half_bandwidth_bytes as u64),
                f.r2,
                f.profile_alpha,
                100.0 * (f.alpha / f.profile_alpha - 1.0)
            );
        }
    }
    let _ = writeln!(
        out,
        "\nSeed 000 predicts that past its optimum the B+-tree's cost grows about linearly with \
         the node size (log-log slope near 1 once nodes are well past 1/α) and the Bε-tree's \
         much more slowly."
    );
    for n in &r.notes {
        let _ = writeln!(out, "Note: {n}");
    }
    if let Some(p) = svg {
        let _ = writeln!(out, "Plot: {}", p.display());
    }
    let _ = writeln!(out, "Took {:.0} s.", r.elapsed_s);
    out
}
