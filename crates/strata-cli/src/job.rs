//! `strata report`, the main job: profile the disk, tune for the standard workload, run seed
//! 001's IO experiment, seed 003's versioned dictionaries (SDA against CoW B-tree), seed 004's
//! comparison on every engine this build has in three settings (the data beyond every engine's
//! cache, the headline; within it; and at scale, 10M records, on the engines quick enough for
//! it), and a short node-size sweep; write everything to `DIR/index.md`, a self-contained
//! `DIR/index.html`, the figures as SVG and the raw results as JSON.
//!
//! The profile measured here is handed to the engines' worker processes (`STRATA_PROFILE`), so
//! the Bε-tree in the comparison has the geometry the tuner chose for this disk; the user's
//! saved profile is neither read nor replaced.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use strata::profile::{self, DeviceProfile, FileTarget, ProfileConfig, SimTarget, Target};
use strata::tune::{self, Mix, Workload};
use strata_bench::page::{Figure, Page, Section};
use strata_bench::workload::{Phase, Spec};
use strata_bench::{forecast, rum, seed001, sweep, versioned};

use crate::compare::{self, RumOutcome, RumPlan};
use crate::sizes::{parse_size, SIZE_HELP};
use crate::Failure;

/// Profile, tune, and run the experiments on every engine; write a report (Markdown and HTML)
///
/// The default takes about 15 minutes here; --quick one to two. Scratch databases and the
/// profile's scratch file go in --dir and are removed.
#[derive(Args)]
#[command(after_help = SIZE_HELP)]
pub struct ReportArgs {
    /// Small sizes everywhere (100K records, fewer operations): one to two minutes
    #[arg(long)]
    quick: bool,
    /// Where the report goes
    #[arg(long, value_name = "DIR", default_value = "strata-report")]
    out: PathBuf,
    /// Scratch directory on the device to measure (default: under the system's temp directory)
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Use this profile instead of measuring the disk
    #[arg(long, value_name = "FILE", conflicts_with = "sim")]
    profile: Option<PathBuf>,
    /// Profile a simulated device preset instead of the disk (see `strata profile --list-presets`)
    #[arg(long, value_name = "PRESET")]
    sim: Option<String>,
    /// Records in the comparison (default 1M, or 100K with --quick)
    #[arg(long, value_name = "N")]
    records: Option<u64>,
    /// Engines in the comparison, comma-separated (default: every one this build has)
    #[arg(long, value_delimiter = ',')]
    engines: Vec<String>,
    /// Largest data size of seed 001's experiment (default 2MiB, or 256KiB with --quick)
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    seed001_max: Option<u64>,
    /// Records the node-size sweep loads (default: its own, 1M or 200K with --quick)
    #[arg(long, value_name = "N")]
    sweep_records: Option<u64>,
    /// Puts in seed 003's versioned experiment (default 120K, or 40K with --quick), a new
    /// version every hundredth of them
    #[arg(long, value_name = "N")]
    versioned_inserts: Option<u64>,
    /// Records of the comparison's third setting, the data several times a 256 MiB cache
    /// (default 10M; none with --quick; 0 leaves it out)
    #[arg(long, value_name = "N")]
    at_scale: Option<u64>,
}

/// Warm reads and mixed operations per phase in the comparison of `--quick`.
const QUICK_OPS: u64 = 20_000;

/// Warm reads with the data beyond the cache (the seed's 200,000 mixed operations).
const BEYOND_WARM_READS: u64 = 200_000;

/// Records of the full report's setting at scale: 10M of 116 bytes, 4.3× its 256 MiB cache.
const AT_SCALE_RECORDS: u64 = 10_000_000;

/// The longest load the setting at scale lets an engine take, predicted from its write rate
/// with the data beyond the cache at the smaller count: the B-trees, at a few thousand to a
/// few tens of thousands of random inserts a second out of memory, take minutes to hours.
const AT_SCALE_MAX_LOAD_S: f64 = 180.0;

struct Job {
    quick: bool,
    scratch: PathBuf,
    out: PathBuf,
    started: Instant,
    log: Vec<String>,
}

impl Job {
    fn say(&mut self, what: &str) {
        let line = format!("[{:>5.1}s] {what}", self.started.elapsed().as_secs_f64());
        eprintln!("{line}");
        self.log.push(line);
    }

    fn write(&self, name: &str, text: &str) -> Result<(), Failure> {
        let path = self.out.join(name);
        std::fs::write(&path, text)
            .map_err(|e| Failure::Invalid(format!("writing {}: {e}", path.display())))
    }
}

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string_pretty(v).expect("results serialise")
}

pub fn run(a: ReportArgs) -> Result<ExitCode, Failure> {
    std::fs::create_dir_all(&a.out)
        .map_err(|e| Failure::Invalid(format!("creating {}: {e}", a.out.display())))?;
    let scratch = a
        .dir
        .clone()
        .unwrap_or_else(|| compare::scratch_dir("report"));
    std::fs::create_dir_all(&scratch)
        .map_err(|e| Failure::Invalid(format!("creating {}: {e}", scratch.display())))?;
    let mut job = Job {
        quick: a.quick,
        scratch: scratch.clone(),
        out: a.out.clone(),
        started: Instant::now(),
        log: Vec::new(),
    };
    let result = sections(&a, &mut job);
    let _ = std::fs::remove_dir_all(&scratch);
    let sections = result?;
    let page = Page {
        title: "strata report".into(),
        intro: format!(
            "Made by `strata report{}` in {:.0} s on a machine with {} cores. Every engine ran \
             with durable commits, in a process of its own, on the same records.",
            if a.quick { " --quick" } else { "" },
            job.started.elapsed().as_secs_f64(),
            std::thread::available_parallelism().map_or(0, |n| n.get()),
        ),
        sections,
    };
    for sec in &page.sections {
        for f in &sec.figures {
            job.write(&f.file, &f.svg)?;
        }
    }
    job.write("index.md", &page.markdown())?;
    job.write("index.html", &page.html())?;
    job.say(&format!("wrote {}", job.out.join("index.html").display()));
    Ok(ExitCode::SUCCESS)
}

fn sections(a: &ReportArgs, job: &mut Job) -> Result<Vec<Section>, Failure> {
    let (profile, source, profile_section) = device_profile(a, job)?;
    let profile_path = job.out.join("profile.json");
    profile.save(&profile_path)?;
    let records = a
        .records
        .unwrap_or(if job.quick { 100_000 } else { 1_000_000 });
    let spec_cache = Spec::rum(records).cache_bytes;
    let mut out = vec![
        profile_section,
        tuning(&profile, &source, records, spec_cache, job)?,
    ];
    out.push(seed001_section(a, job)?);
    out.push(versioned_section(a, job)?);
    out.push(comparison(a, job, records, &profile_path)?);
    out.push(sweep_section(a, job, &profile, &source)?);
    Ok(out)
}

fn device_profile(
    a: &ReportArgs,
    job: &mut Job,
) -> Result<(DeviceProfile, String, Section), Failure> {
    let (p, source) = if let Some(path) = &a.profile {
        job.say(&format!("profile: reading {}", path.display()));
        (
            DeviceProfile::load(path)?,
            format!("read from {}", path.display()),
        )
    } else {
        let target: Box<dyn Target> = match &a.sim {
            Some(preset) => Box::new(SimTarget::preset(preset, 0.03, 0x5EED)?),
            None => Box::new(FileTarget::create(&job.scratch, 1 << 30)?),
        };
        let what = a.sim.as_ref().map_or_else(
            || format!("the disk under {}", job.scratch.display()),
            |s| format!("the simulated device {s}"),
        );
        job.say(&format!("profile: measuring {what} (quick)"));
        let p = profile::profile(target.as_ref(), &ProfileConfig::quick(), &profile::Silent)?;
        (p, format!("measured now, {what}"))
    };
    let section = Section {
        title: "Device profile".into(),
        markdown: format!(
            "The affine model (an IO of x bytes costs s + t·x) and the PDAM model (P IOs in \
             parallel per step) fitted to {source}, each against every measured point beside \
             the DAM (one fixed cost per block, no parallelism), which is off by up to 2× \
             across IO sizes and by about P across threads (seed 000 §4). Seed 002's block \
             sizes: random reads of 512 B to 64 KiB with uniform and power-law offsets.\n\n\
             ```\n{}```",
            crate::profile::render(&p)
        ),
        figures: vec![Figure {
            file: "profile.svg".into(),
            caption: "Latency against IO size with the fitted affine line; time against threads \
                      with the PDAM segments."
                .into(),
            svg: profile::plot::svg(&p),
        }],
    };
    Ok((p, source, section))
}

fn tuning(
    p: &DeviceProfile,
    source: &str,
    records: u64,
    cache: u64,
    job: &mut Job,
) -> Result<Section, Failure> {
    job.say("tune: node sizes for the comparison's workload");
    let mut w = Workload::new(records);
    w.key_bytes = 16;
    w.value_bytes = 100;
    w.cache_bytes = cache;
    w.mix = Mix::Mixed;
    let r = tune::recommend(p, &w);
    job.write("tune.json", &json(&r))?;
    Ok(Section {
        title: "Tuning".into(),
        markdown: format!(
            "Node sizes for {} records of 16-byte keys and 100-byte values, a {} MiB cache and a \
             mixed workload, from the profile above. The Bε-tree in the comparison below uses \
             this choice where the data fits; with the smaller cache it gets the tuner's choice \
             for that cache (its settings line says which).\n\n```\n{}```",
            rum::count(records),
            cache >> 20,
            crate::tune::render(&r, source)
        ),
        figures: Vec::new(),
    })
}

fn seed001_section(a: &ReportArgs, job: &mut Job) -> Result<Section, Failure> {
    let max = a
        .seed001_max
        .unwrap_or(if job.quick { 256 << 10 } else { 2 << 20 });
    job.say(&format!(
        "seed 001: IO counts on a simulated disk, up to {} KiB",
        max >> 10
    ));
    let cfg = seed001::Config {
        max_bytes: max,
        ..Default::default()
    };
    let report = seed001::run(&cfg, |_| {})?;
    job.write("seed001.json", &json(&report))?;
    Ok(Section {
        title: "Seed 001: fractal tree against B+-tree, in IOs".into(),
        markdown: format!(
            "Measured against predicted block transfers; `strata bench seed001` runs the full \
             range.\n\n```\n{}```",
            crate::bench::render_seed001(&report)
        ),
        figures: vec![Figure {
            file: "seed001.svg".into(),
            caption: "IOs against the data size for inserts, searches and range searches, \
                      measured and predicted, B+-tree and Bε-tree (seed 001's Figures 1–3; the \
                      range panel's second pair of lines is the mean of five consecutive \
                      queries)."
                .into(),
            svg: report.svg(),
        }],
    })
}

fn versioned_section(a: &ReportArgs, job: &mut Job) -> Result<Section, Failure> {
    let dir = Some(job.scratch.join("versioned"));
    let mut cfg = if job.quick {
        versioned::Config::quick(dir)
    } else {
        versioned::Config::report(dir)
    };
    if let Some(n) = a.versioned_inserts {
        cfg.inserts = n;
        cfg.clone_every = (n / 100).max(1);
        cfg.points = cfg.points.min(n);
    }
    job.say(&format!(
        "seed 003: versioned dictionaries, {} puts, {} KiB of memory",
        rum::count(cfg.inserts),
        cfg.cache_bytes >> 10
    ));
    std::fs::create_dir_all(job.scratch.join("versioned"))
        .map_err(|e| Failure::Invalid(format!("creating the versioned scratch: {e}")))?;
    let report = versioned::run(&cfg, |_| {})?;
    job.write("versioned.json", &json(&report))?;
    Ok(Section {
        title: "Seed 003: the stratified doubling array against the copy-on-write B-tree".into(),
        markdown: format!(
            "Seed 003 §8's experiment (`strata bench versioned`; docs/versioned.md): {}. Three \
             lines as in the seed: the CoW B-tree, the SDA, and the SDA without density \
             amplification. Both engines get the same memory: the CoW B-tree as its buffer \
             pool, the SDA half of it as its write buffer and the other half for its arrays' \
             filters and indexes, the runs ranges keep and a block cache. Times are wall clock \
             with the engine's merges and checkpoints inside: each interval's puts end once \
             the merges they made due, and a checkpoint being made durable on its thread, are \
             done (`VersionedDb::finish_merges`); IOs come from \
             the data file's own counters. Space is measured settled after the last put, after \
             deleting half of the leaf versions (and two checkpoints), and after as many new \
             puts as those leaves held.\n\n{}",
            report.setting(),
            report.markdown()
        ),
        figures: vec![Figure {
            file: "versioned.svg".into(),
            caption: "Puts/s and range elements/s against the data put, the memory marked \
                      (seed 003's Figures 3 and 4)."
                .into(),
            svg: report.svg(),
        }],
    })
}

fn comparison(
    a: &ReportArgs,
    job: &mut Job,
    records: u64,
    profile: &Path,
) -> Result<Section, Failure> {
    let with_go = compare::wants_go(&a.engines);
    if with_go {
        // The first run builds the Go driver here (minutes); say so, or seed 001 seems slow.
        job.say("rum: finding the engines (the Go driver is built if its sources changed)");
    }
    let (available, notes) = compare::available_engines(with_go);
    let engines = if a.engines.is_empty() {
        available
    } else {
        a.engines.clone()
    };
    let mut fits_spec = Spec::rum(records);
    if job.quick {
        // Fewer warm reads and mixed operations keep --quick short; the cold phase
        // keeps its 100,000 reads.
        for p in &mut fits_spec.phases {
            match p {
                Phase::Reads {
                    ops, cold: false, ..
                }
                | Phase::Mixed { ops, .. } => *ops = (*ops).min(QUICK_OPS),
                _ => {}
            }
        }
    }
    let mut beyond_spec = fits_spec.clone();
    beyond_spec.cache_bytes = rum::beyond_memory_cache(&beyond_spec);
    cap_warm_reads(&mut beyond_spec);
    let logical = records * (fits_spec.key_size + fits_spec.value_size) as u64;
    // Two settings, the same records and engines: the data beyond every engine's cache (the
    // headline), and the seed's setting, where it fits.
    let mut outcomes = Vec::new();
    for (tag, spec) in [("beyond", beyond_spec), ("fits", fits_spec)] {
        job.say(&format!(
            "rum: {} records, {} MiB cache, on {}",
            rum::count(records),
            spec.cache_bytes >> 20,
            engines.join(", ")
        ));
        // Beside the data-fits run's own load: one smaller scale, for WA and SA by scale.
        let scales = if job.quick || tag == "beyond" {
            Vec::new()
        } else {
            vec![100_000]
        };
        let plan = RumPlan {
            spec,
            engines: engines.clone(),
            runs: 1,
            scales,
            dir: job.scratch.join(format!("rum-{tag}")),
            notes: if tag == "beyond" {
                notes.clone()
            } else {
                Vec::new()
            },
            profile: Some(profile.to_path_buf()),
        };
        outcomes.push(compare::run_plan(plan, false)?);
    }
    let fits = outcomes.pop().expect("two settings");
    let beyond = outcomes.pop().expect("two settings");
    let at_scale = match a
        .at_scale
        .unwrap_or(if job.quick { 0 } else { AT_SCALE_RECORDS })
    {
        0 => None,
        n => Some(run_at_scale(job, n, &beyond, profile)?),
    };
    // strata's engines, each phase's data-file IO against its cost model, with the profile
    // their processes read.
    let device = strata::DeviceProfile::load(profile)?;
    let subjects = strata_bench::store::strata_engines();
    let predicted =
        |o: &compare::RumOutcome| forecast::forecast(&o.rows, &subjects, &o.spec, Some(&device));
    let beyond_forecast = predicted(&beyond);
    let scale_forecast = at_scale.as_ref().map(|(o, _)| predicted(o));
    job.write(
        "rum.json",
        &json(&serde_json::json!({
            "beyond_memory": &beyond,
            "fits_in_memory": &fits,
            "at_scale": at_scale.as_ref().map(|(o, _)| o),
            "forecast": {
                "beyond_memory": &beyond_forecast,
                "at_scale": &scale_forecast,
            },
        })),
    )?;
    let mib = |b: u64| b >> 20;
    let mut md = format!(
        "Seed 004's Table 4.1 on every engine: {n} random 16-byte keys, 100-byte values, batches \
         of 1,000 with durable commits, each engine in a process of its own. Two settings with \
         the same records: the data beyond the cache ({beyond} MiB each, the data {ratio:.1}× \
         that), and the seed's, where it fits ({fits} MiB).\n\n\
         Rules, the same for every engine (docs/bench.md): the load and the mixed phase end with \
         the engine's own durable flush (strata: a checkpoint; RocksDB: flush and wait for \
         compactions; fjall: rotate the memtable and wait; Pebble: Flush; the B-trees write at \
         commit), so write ops/s is records / (load + flush) and mixed ops/s includes its flush; \
         the acknowledged-only rate and each flush's seconds are beside them. Time is counted \
         inside the engine's calls only, for the Rust and the Go driver alike. Point reads go in \
         groups of 1,000 under one read transaction on LMDB, redb and bbolt, whose reads need \
         one; the others (strata has no snapshots yet) read each key directly. The cold read \
         follows the mixed phase's flush, a reopen and a drop of the OS page cache of the \
         database's files: 100,000 reads. WA is the \
         bytes the process handed to write calls during the load, its flush and the warm reads \
         after it, per logical byte loaded (`/proc/self/io` wchar; strata's own count beside \
         it). SA is the bytes allocated to the database's files, logs included, once it is \
         closed after the last phase, per live logical byte. Memory is the most, at the end of \
         any phase, of the process's anonymous resident memory plus the page cache held by the \
         database's files: every engine here reads through the page cache, so the cache \
         budget bounds none of them, and this column shows what each held. With the data \
         beyond the cache the warm read phase makes at most {BEYOND_WARM_READS} reads.{quick}\n\n\
         ### Data beyond the cache: {n} records, {beyond} MiB cache\n\n{bmd}\n\n\
         ### Data within the cache: {n} records, {fits} MiB cache\n\n{fmd}\n",
        n = rum::count(records),
        beyond = mib(beyond.spec.cache_bytes),
        fits = mib(fits.spec.cache_bytes),
        ratio = logical as f64 / beyond.spec.cache_bytes as f64,
        bmd = beyond.markdown(),
        fmd = fits.markdown(),
        quick = if job.quick {
            format!(" With --quick the warm reads and the mixed phase make {QUICK_OPS} operations each.")
        } else {
            String::new()
        },
    );
    if let Some((o, skipped)) = &at_scale {
        md.push_str(&format!(
            "\n### At scale: {n} records, {c} MiB cache (the data {ratio:.1}× the cache)\n\n\
             The same phases as the setting beyond the cache, on the engines whose load of {n} \
             records is predicted to take under {max:.0} s from their write rate above.{skip}\n\n{md}\n",
            n = rum::count(o.spec.records),
            c = mib(o.spec.cache_bytes),
            ratio = (o.spec.records * (o.spec.key_size + o.spec.value_size) as u64) as f64
                / o.spec.cache_bytes as f64,
            max = AT_SCALE_MAX_LOAD_S,
            skip = if skipped.is_empty() {
                String::new()
            } else {
                format!(" Left out: {}.", skipped.join("; "))
            },
            md = o.markdown(),
        ));
    }
    md.push_str(&format!(
        "\n### Predicted against measured: strata's engines\n\n\
         Each phase's reads and writes of the data file per operation, and their bytes, as the \
         engine counted them, beside its cost model's at the geometry it ran with \
         (`strata::tune::price`, the workload's records and cache); both sides priced with the \
         profile's s + t·x. The model claims to hold within {claim:.0}% where no reason is \
         given; writes include each phase's flush; the log's writes are left out (the same for \
         every engine).\n\n\
         Data beyond the cache ({beyond} MiB):\n\n{bmd}",
        claim = forecast::CLAIM * 100.0,
        beyond = mib(beyond.spec.cache_bytes),
        bmd = forecast::markdown(&beyond_forecast),
    ));
    if let (Some((o, _)), Some(f)) = (&at_scale, &scale_forecast) {
        md.push_str(&format!(
            "\nAt scale ({} records, {} MiB):\n\n{}",
            rum::count(o.spec.records),
            mib(o.spec.cache_bytes),
            forecast::markdown(f)
        ));
    }
    md.push_str("\n### Engines and settings\n\n");
    md.push_str(&format!(
        "As run with the {} MiB cache; the data-fits run differs only in the cache, the run at \
         scale in the cache and the records.\n\n",
        mib(beyond.spec.cache_bytes)
    ));
    for r in &beyond.rows {
        md.push_str(&format!("- {} ({}): {}\n", r.engine, r.version, r.settings));
    }
    md.push_str("\n### Measured on this machine before, outside the harness (1M keys)\n\n");
    md.push_str(rum::REFERENCE);
    Ok(Section {
        title: "Seed 004: read, write and space amplification on every engine".into(),
        markdown: md,
        figures: vec![
            Figure {
                file: "rum.svg".into(),
                caption: format!(
                    "Throughput by workload and engine (log scale), like seed 004's Figure 4.1, \
                     with the data beyond the {} MiB cache.",
                    mib(beyond.spec.cache_bytes)
                ),
                svg: beyond.svg(),
            },
            Figure {
                file: "rum-fits.svg".into(),
                caption: format!(
                    "The same with the data within the {} MiB cache.",
                    mib(fits.spec.cache_bytes)
                ),
                svg: fits.svg(),
            },
        ],
    })
}

/// Beyond the cache the slowest engines read a few thousand keys a second: the seed's million
/// warm reads would take minutes each, so a setting with the data beyond the cache makes as
/// many as its mixed phase has operations.
fn cap_warm_reads(spec: &mut Spec) {
    for p in &mut spec.phases {
        if let Phase::Reads {
            ops, cold: false, ..
        } = p
        {
            *ops = (*ops).min(BEYOND_WARM_READS);
        }
    }
}

/// The comparison's third setting: `records` at the seed's 256 MiB cache, the warm reads as
/// beyond the cache, on the engines `beyond` shows can load them in reasonable time. Returns
/// the outcome and, for each engine left out, why.
fn run_at_scale(
    job: &mut Job,
    records: u64,
    beyond: &RumOutcome,
    profile: &Path,
) -> Result<(RumOutcome, Vec<String>), Failure> {
    let mut spec = Spec::rum(records);
    cap_warm_reads(&mut spec);
    let (engines, skipped) = at_scale_engines(&beyond.rows, records);
    job.say(&format!(
        "rum: {} records, {} MiB cache, on {}",
        rum::count(records),
        spec.cache_bytes >> 20,
        engines.join(", ")
    ));
    let plan = RumPlan {
        spec,
        engines,
        runs: 1,
        scales: Vec::new(),
        dir: job.scratch.join("rum-at-scale"),
        notes: Vec::new(),
        profile: Some(profile.to_path_buf()),
    };
    Ok((compare::run_plan(plan, false)?, skipped))
}

/// Which engines of `rows` (measured with the data beyond the cache) run at `records`: those
/// whose load is predicted, from their write rate there, to take at most AT_SCALE_MAX_LOAD_S.
/// A rough rule: at scale the data is a smaller multiple of its cache (4.3× against 7.3× at
/// 1M and 16 MiB), but every tree is a level deeper. LMDB, predicted 125 s from its 80K
/// writes/s at 1M, took 227 s at 10M in the full report of 2026-11-26.
fn at_scale_engines(rows: &[rum::Row], records: u64) -> (Vec<String>, Vec<String>) {
    let mut engines = Vec::new();
    let mut skipped = Vec::new();
    for r in rows {
        let predicted = records as f64 / r.write_ops.max(1.0);
        if predicted <= AT_SCALE_MAX_LOAD_S {
            engines.push(r.engine.clone());
        } else {
            skipped.push(format!(
                "{} ({:.0}K writes/s above, a load of about {:.0} min)",
                r.engine,
                r.write_ops / 1e3,
                predicted / 60.0
            ));
        }
    }
    (engines, skipped)
}

fn sweep_section(
    a: &ReportArgs,
    job: &mut Job,
    profile: &DeviceProfile,
    source: &str,
) -> Result<Section, Failure> {
    let mut cfg = sweep::Config::new(job.scratch.join("sweep"), profile.clone(), source).quick();
    if !job.quick {
        // The report's sweep: the quick grid with three repetitions, medians taken.
        cfg.repetitions = 3;
    }
    if let Some(n) = a.sweep_records {
        cfg.records = n;
    }
    job.say(&format!(
        "sweep: node sizes on the real disk, {} records, {} MiB cache",
        rum::count(cfg.records),
        cfg.cache_bytes >> 20
    ));
    std::fs::create_dir_all(&cfg.dir)
        .map_err(|e| Failure::Invalid(format!("creating {}: {e}", cfg.dir.display())))?;
    let report = sweep::run(&cfg, |_| {})?;
    job.write("sweep.json", &json(&report))?;
    Ok(Section {
        title: "Node-size sweep".into(),
        markdown: format!(
            "Seed 000 section 7: random inserts and point queries with the data several times \
             the cache (O_DIRECT), for each node size, beside the model's prediction; `strata \
             bench sweep` runs the full grid.\n\n```\n{}```",
            crate::sweep::render(&report, None)
        ),
        figures: vec![Figure {
            file: "sweep.svg".into(),
            caption: "µs per operation against node size, measured and predicted, with the \
                      tuner's pick and the measured best."
                .into(),
            svg: report.svg(),
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(engine: &str, write_ops: f64) -> rum::Row {
        rum::Row {
            engine: engine.into(),
            write_ops,
            ..rum::Row::default()
        }
    }

    #[test]
    fn the_setting_at_scale_leaves_out_the_engines_whose_load_would_take_too_long() {
        let rows = [
            row("fast", 200_000.0),
            row("slow", 29_000.0),
            row("edge", 10e6 / 180.0),
        ];
        let (run, skipped) = at_scale_engines(&rows, 10_000_000);
        assert_eq!(run, ["fast", "edge"]);
        assert_eq!(skipped.len(), 1);
        assert!(skipped[0].starts_with("slow (29K writes/s"), "{skipped:?}");
        assert!(skipped[0].contains("about 6 min"), "{skipped:?}");
        // A failed row (no writes) is left out, not divided by zero.
        let (run, skipped) = at_scale_engines(&[row("broken", 0.0)], 10_000_000);
        assert!(run.is_empty() && skipped.len() == 1);
    }
}
