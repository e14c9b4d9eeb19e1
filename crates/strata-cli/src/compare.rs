//! Engines side by side: `strata bench rum` (seed 004's table on every engine) and the hidden
//! `strata bench worker` it is built on.
//!
//! Each run of an engine is its own process (this binary re-executed as a worker, or the Go
//! driver for Pebble and bbolt), so its process IO counters and peak resident memory are its
//! alone and no engine inherits another's heap or page-cache state. Workers print their result
//! as JSON on stdout and progress lines on stderr; runs go in turn (engine after engine, repeated
//! runs interleaved) so that a noisy stretch of the machine spreads over all engines.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use strata_bench::rum::{self, Row, ScalePoint};
use strata_bench::runner::{self, RunResult};
use strata_bench::workload::Spec;
use strata_bench::{chart, store};

use crate::report::print_json;
use crate::sizes::{parse_size, SIZE_HELP};
use crate::Failure;

/// The marker of a progress line on a worker's stderr.
const PROGRESS: &str = "@progress";

/// Run one engine on a spec in this process and print the result as JSON (used by `rum`)
#[derive(Args)]
pub struct WorkerArgs {
    #[arg(long)]
    engine: String,
    /// The spec, as JSON
    #[arg(long)]
    spec: PathBuf,
    #[arg(long)]
    dir: PathBuf,
}

pub fn worker(a: WorkerArgs) -> Result<ExitCode, Failure> {
    let text = std::fs::read_to_string(&a.spec)
        .map_err(|e| Failure::Invalid(format!("reading {}: {e}", a.spec.display())))?;
    let spec: Spec = serde_json::from_str(&text)
        .map_err(|e| Failure::Invalid(format!("{}: {e}", a.spec.display())))?;
    let engine = strata_compare::engine(&a.engine)
        .ok_or_else(|| Failure::Invalid(format!("no engine named {:?} in this build", a.engine)))?;
    let mut last = std::time::Instant::now();
    let mut progress = |label: &str, done: u64, total: u64| {
        if last.elapsed().as_millis() >= 100 || done == total {
            last = std::time::Instant::now();
            eprintln!("{PROGRESS}\t{label}\t{done}\t{total}");
        }
    };
    let result =
        runner::run(engine.as_ref(), &spec, &a.dir, &mut progress).map_err(Failure::Invalid)?;
    print_json(&result)?;
    Ok(ExitCode::SUCCESS)
}

/// The engines this build can run: strata's own, the compiled-in peers, and (`with_go`) Pebble
/// and bbolt when Go can build their driver. The notes say what is missing and why.
pub fn available_engines(with_go: bool) -> (Vec<String>, Vec<String>) {
    let mut names: Vec<String> = store::strata_engines()
        .iter()
        .chain(strata_compare::peers().iter())
        .map(|e| e.name().to_string())
        .collect();
    // A departure every engine shares: the allocator of the process it runs in (`main.rs`).
    let mut notes = vec![
        "allocator: each engine runs in a `strata` process of its own, whose Rust allocations \
         (strata's engines, fjall, redb) go to mimalloc, built without requests for transparent \
         huge pages; RocksDB's C++ and LMDB's C allocate through the C library's malloc, Pebble \
         and bbolt through Go's runtime"
            .to_string(),
    ];
    if !names.iter().any(|n| n == "rocksdb") {
        notes.push(
            "RocksDB not built (build with `--features rocksdb`; its C++ takes ~17 minutes)".into(),
        );
    }
    if with_go {
        match strata_compare::go::available() {
            Ok(_) => names.extend(strata_compare::go::ENGINES.iter().map(|s| s.to_string())),
            Err(why) => notes.push(format!("Pebble and bbolt skipped: {why}")),
        }
    }
    (names, notes)
}

/// Run `engine` on `spec` in `dir` in a process of its own.
/// With `profile`, strata's workers tune from that profile instead of the saved one.
pub fn run_isolated(
    engine: &str,
    spec: &Spec,
    dir: &Path,
    profile: Option<&Path>,
    bar: &ProgressBar,
) -> Result<RunResult, String> {
    let spec_file = dir.with_extension("spec.json");
    std::fs::write(
        &spec_file,
        serde_json::to_string_pretty(spec).expect("a spec serialises"),
    )
    .map_err(|e| format!("writing {}: {e}", spec_file.display()))?;
    let mut cmd = if strata_compare::go::ENGINES.contains(&engine) {
        let driver = strata_compare::go::available()?;
        let mut c = Command::new(driver);
        c.args(["--engine", engine]);
        c
    } else {
        let exe = std::env::current_exe().map_err(|e| format!("finding this program: {e}"))?;
        let mut c = Command::new(exe);
        c.args(["bench", "worker", "--engine", engine]);
        c
    };
    cmd.arg("--spec").arg(&spec_file).arg("--dir").arg(dir);
    if let Some(p) = profile {
        cmd.env("STRATA_PROFILE", p);
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting the {engine} worker: {e}"))?;
    let mut stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        stdout.read_to_string(&mut s).map(|_| s)
    });
    let mut errors = String::new();
    for line in BufReader::new(child.stderr.take().expect("piped")).lines() {
        let Ok(line) = line else { break };
        let mut f = line.split('\t');
        if f.next() == Some(PROGRESS) {
            let (label, done, total) = (f.next(), f.next(), f.next());
            if let (Some(label), Some(done), Some(total)) = (label, done, total) {
                bar.set_message(format!("{engine}: {label}"));
                bar.set_length(total.parse().unwrap_or(0));
                bar.set_position(done.parse().unwrap_or(0));
            }
        } else {
            errors.push_str(&line);
            errors.push('\n');
        }
    }
    let status = child
        .wait()
        .map_err(|e| format!("waiting for the {engine} worker: {e}"))?;
    let out = reader
        .join()
        .expect("reader thread")
        .map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&spec_file);
    if !status.success() {
        return Err(format!(
            "the {engine} run failed ({status}): {}",
            errors.trim()
        ));
    }
    serde_json::from_str(&out).map_err(|e| format!("the {engine} worker's result: {e}"))
}

/// What a comparison ran and found.
#[derive(Serialize)]
pub struct RumOutcome {
    pub spec: Spec,
    pub rows: Vec<Row>,
    pub scale: Vec<ScalePoint>,
    pub notes: Vec<String>,
    pub runs: Vec<RunResult>,
    pub scale_runs: Vec<RunResult>,
}

impl RumOutcome {
    pub fn markdown(&self) -> String {
        let mut s = rum::markdown(&self.rows);
        s.push('\n');
        s.push_str(&rum::latency_markdown(&self.rows));
        // With one record count the scale table would only repeat the main table's WA and SA.
        let first = self.scale.first().map(|p| p.records);
        if self.scale.iter().any(|p| Some(p.records) != first) {
            s.push('\n');
            s.push_str(&rum::scale_markdown(&self.scale));
        }
        for n in &self.notes {
            s.push_str(&format!("\n- {n}"));
        }
        s
    }

    /// Write, read and mixed ops/s per engine, log scale (seed 004's Figure 4.1).
    pub fn svg(&self) -> String {
        let groups: Vec<String> = self.rows.iter().map(|r| r.engine.clone()).collect();
        let series = |f: fn(&Row) -> f64| self.rows.iter().map(f).collect::<Vec<f64>>();
        chart::log_bars(
            &format!(
                "{} random {}-byte keys, {}-byte values, batches of {}{}",
                rum::count(self.spec.records),
                self.spec.key_size,
                self.spec.value_size,
                self.spec.batch,
                if self.spec.sync { ", synced" } else { "" }
            ),
            "operations per second",
            &groups,
            &[
                ("write".into(), series(|r| r.write_ops)),
                ("read".into(), series(|r| r.read_ops)),
                ("mixed 50/50".into(), series(|r| r.mixed_ops)),
                ("read, cold cache".into(), series(|r| r.cold_read_ops)),
            ],
        )
    }
}

/// How to run a comparison.
pub struct RumPlan {
    pub spec: Spec,
    pub engines: Vec<String>,
    pub runs: usize,
    pub scales: Vec<u64>,
    pub dir: PathBuf,
    pub notes: Vec<String>,
    /// The device profile strata's engines tune from (else the saved one).
    pub profile: Option<PathBuf>,
}

fn bar(quiet: bool) -> ProgressBar {
    if quiet || !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        return ProgressBar::hidden();
    }
    let style = ProgressStyle::with_template("{msg:>24} [{bar:40}] {pos}/{len} {elapsed}")
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    ProgressBar::new(0).with_style(style)
}

/// Run every engine of the plan; a failing engine becomes a note, not the end of the run.
pub fn run_plan(plan: RumPlan, quiet: bool) -> Result<RumOutcome, Failure> {
    std::fs::create_dir_all(&plan.dir)
        .map_err(|e| Failure::Invalid(format!("creating {}: {e}", plan.dir.display())))?;
    let mut notes = plan.notes;
    let mut by_engine: Vec<Vec<RunResult>> = vec![Vec::new(); plan.engines.len()];
    let bar = bar(quiet);
    let one = |engine: &str, spec: &Spec, tag: String, notes: &mut Vec<String>| {
        let dir = plan.dir.join(format!("{engine}-{tag}"));
        let _ = std::fs::remove_dir_all(&dir);
        let r = run_isolated(engine, spec, &dir, plan.profile.as_deref(), &bar);
        let _ = std::fs::remove_dir_all(&dir);
        match r {
            Ok(r) => Some(r),
            Err(e) => {
                notes.push(e);
                None
            }
        }
    };
    for run in 0..plan.runs {
        for (k, engine) in plan.engines.iter().enumerate() {
            if run > 0 && by_engine[k].is_empty() {
                continue; // failed before; its note says why
            }
            if let Some(r) = one(engine, &plan.spec, format!("run{run}"), &mut notes) {
                by_engine[k].push(r);
            }
        }
    }
    let mut scale_runs = Vec::new();
    for &records in plan.scales.iter().filter(|&&n| n != plan.spec.records) {
        let mut spec = rum::scale_spec(records);
        spec.cache_bytes = plan.spec.cache_bytes;
        for engine in &plan.engines {
            if let Some(r) = one(engine, &spec, format!("scale{records}"), &mut notes) {
                scale_runs.push(r);
            }
        }
    }
    bar.finish_and_clear();
    let _ = std::fs::remove_dir_all(&plan.dir);
    let rows: Vec<Row> = by_engine
        .iter()
        .filter(|r| !r.is_empty())
        .map(|r| rum::row(r))
        .collect();
    for r in &rows {
        if r.wrong_reads > 0 {
            notes.push(format!(
                "{}: {} reads returned a missing or wrong value",
                r.engine, r.wrong_reads
            ));
        }
    }
    Ok(RumOutcome {
        spec: plan.spec,
        rows,
        // The main runs' loads are points of the scale table too.
        scale: by_engine
            .iter()
            .filter_map(|runs| runs.first())
            .chain(&scale_runs)
            .map(rum::scale_point)
            .collect(),
        notes,
        runs: by_engine.into_iter().flatten().collect(),
        scale_runs,
    })
}

/// Seed 004's Table 4.1 on every engine: write, read and mixed ops/s, WA and SA
///
/// Every engine gets the same records (random keys, incompressible values), the same batches,
/// durable commits and the same cache budget, and runs in a process of its own. Afterwards,
/// WA and SA of a load alone at each --scale.
#[derive(Args)]
#[command(after_help = SIZE_HELP)]
pub struct RumArgs {
    /// Records to load
    #[arg(long, value_name = "N", default_value_t = 1_000_000)]
    records: u64,
    /// Engines to run, comma-separated (default: every one this build has)
    #[arg(long, value_delimiter = ',')]
    engines: Vec<String>,
    /// Runs per engine; throughput is the median
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..))]
    runs: u64,
    /// Further record counts for the WA/SA-by-scale table, beside --records (none: --scale "")
    #[arg(long, value_delimiter = ',', default_value = "100000,10000000")]
    scale: Vec<String>,
    /// Cache budget per engine
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = parse_size)]
    cache: u64,
    /// Directory for the databases (default: under the system's temp directory); removed after
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Write the throughput chart (SVG) here
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// Print everything as JSON
    #[arg(long)]
    json: bool,
}

/// Whether an engine list (empty: every engine) needs the Go driver, which takes a while to
/// build the first time.
pub fn wants_go(engines: &[String]) -> bool {
    engines.is_empty()
        || engines
            .iter()
            .any(|e| strata_compare::go::ENGINES.contains(&e.as_str()))
}

/// Default scratch directory for a comparison.
pub fn scratch_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("strata-{name}-{}", std::process::id()))
}

pub fn rum_cmd(a: RumArgs) -> Result<ExitCode, Failure> {
    let (available, notes) = available_engines(wants_go(&a.engines));
    let engines = if a.engines.is_empty() {
        available
    } else {
        let variants: Vec<String> = store::strata_variants()
            .iter()
            .map(|v| v.name().to_string())
            .collect();
        for e in &a.engines {
            if !available.contains(e) && !variants.contains(e) {
                return Err(Failure::Invalid(format!(
                    "no engine {e:?} here; this build has {} (and, when named, {})",
                    available.join(", "),
                    variants.join(", ")
                )));
            }
        }
        a.engines.clone()
    };
    let scales = a
        .scale
        .iter()
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<u64>()
                .map_err(|_| Failure::Invalid(format!("--scale {s:?} is not a record count")))
        })
        .collect::<Result<Vec<u64>, Failure>>()?;
    let mut spec = Spec::rum(a.records);
    spec.cache_bytes = a.cache;
    spec.validate().map_err(Failure::Invalid)?;
    let plan = RumPlan {
        spec,
        engines,
        runs: a.runs as usize,
        scales,
        dir: a.dir.unwrap_or_else(|| scratch_dir("rum")),
        notes,
        profile: None,
    };
    let outcome = run_plan(plan, a.json)?;
    if let Some(path) = &a.svg {
        std::fs::write(path, outcome.svg())
            .map_err(|e| Failure::Invalid(format!("writing {}: {e}", path.display())))?;
    }
    if a.json {
        print_json(&outcome)?;
    } else {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", outcome.markdown())?;
        for r in &outcome.rows {
            writeln!(out, "- {} ({}): {}", r.engine, r.version, r.settings)?;
        }
        // strata's engines against their cost models, with the profile their processes read.
        let saved = strata::DeviceProfile::load_saved()?.map(|(_, p)| p);
        let f = strata_bench::forecast::forecast(
            &outcome.rows,
            &store::strata_engines(),
            &outcome.spec,
            saved.as_ref(),
        );
        if !f.is_empty() {
            writeln!(
                out,
                "\nPredicted against measured, strata's engines (data file IO per operation):\n\n{}",
                strata_bench::forecast::markdown(&f)
            )?;
        }
    }
    let wrong = outcome.rows.iter().any(|r| r.wrong_reads > 0);
    Ok(if wrong {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}
