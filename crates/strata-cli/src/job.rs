//! `strata report`, the main job: profile the disk, tune for the standard workload, run seed
//! 001's IO experiment, seed 004's comparison on every engine this build has, and a short
//! node-size sweep; write everything to `DIR/index.md`, a self-contained `DIR/index.html`, the
//! figures as SVG and the raw results as JSON.
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
use strata_bench::workload::Spec;
use strata_bench::{rum, seed001, sweep};

use crate::compare::{self, RumPlan};
use crate::sizes::{parse_size, SIZE_HELP};
use crate::Failure;

/// Profile, tune, and run the experiments on every engine; write a report (Markdown and HTML)
///
/// The default takes about 4 minutes here; --quick under a minute. Scratch databases and the
/// profile's scratch file go in --dir and are removed.
#[derive(Args)]
#[command(after_help = SIZE_HELP)]
pub struct ReportArgs {
    /// Small sizes everywhere: done in under a minute
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
}

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
             parallel per step) fitted to {source}.\n\n```\n{}```",
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
             this choice.\n\n```\n{}```",
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
        figures: Vec::new(),
    })
}

fn comparison(
    a: &ReportArgs,
    job: &mut Job,
    records: u64,
    profile: &Path,
) -> Result<Section, Failure> {
    let (available, notes) = compare::available_engines(compare::wants_go(&a.engines));
    let engines = if a.engines.is_empty() {
        available
    } else {
        a.engines.clone()
    };
    // Beside the main run's own load: one smaller scale, for WA and SA by scale.
    let scales = if job.quick { Vec::new() } else { vec![100_000] };
    job.say(&format!(
        "rum: {} records on {}",
        rum::count(records),
        engines.join(", ")
    ));
    let plan = RumPlan {
        spec: Spec::rum(records),
        engines,
        runs: 1,
        scales,
        dir: job.scratch.join("rum"),
        notes,
        profile: Some(profile.to_path_buf()),
    };
    let outcome = compare::run_plan(plan, false)?;
    job.write("rum.json", &json(&outcome))?;
    let mut md = format!(
        "Seed 004's Table 4.1 on every engine: {} random 16-byte keys, 100-byte values, batches \
         of 1,000 with durable commits, a {} MiB cache each. Write is the load; read is random \
         point reads, warm; mixed is 50% reads and 50% updates, one durable commit per 1,000 \
         operations; the cold read follows a reopen with the OS page cache of the database \
         dropped. WA is the bytes the process handed to write calls during the load and the \
         warm reads after it (an LSM-tree is still compacting when the load returns) per \
         logical byte loaded (`/proc/self/io` wchar; strata's own count beside it); SA is the \
         bytes allocated on disk after the load per live logical byte.\n\n{}\n",
        rum::count(records),
        outcome.spec.cache_bytes >> 20,
        outcome.markdown()
    );
    md.push_str("\n### Engines and settings\n\n");
    for r in &outcome.rows {
        md.push_str(&format!("- {} ({}): {}\n", r.engine, r.version, r.settings));
    }
    md.push_str("\n### Measured on this machine before, outside the harness (1M keys)\n\n");
    md.push_str(rum::REFERENCE);
    Ok(Section {
        title: "Seed 004: read, write and space amplification on every engine".into(),
        markdown: md,
        figures: vec![Figure {
            file: "rum.svg".into(),
            caption: "Throughput by workload and engine (log scale), like seed 004's Figure 4.1."
                .into(),
            svg: outcome.svg(),
        }],
    })
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
