//! `strata advise`: which of strata's engines to use for a workload on this device, at what
//! geometry, with each engine's predicted amplifications and throughput and two sentences of
//! why (the library's `tune::advise`). `--verify` runs the pick and the runner-up on a
//! scaled-down copy of the workload and prints predicted against measured.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use strata::tune::{self, Advice, AdviseWorkload, EngineChoice};
use strata_bench::runner::{self, RunResult};
use strata_bench::store::Strata;
use strata_bench::workload::{Dist, Mix, Phase, Spec};

use crate::report::print_json;
use crate::sizes::{human, parse_size, SIZE_HELP};
use crate::tune::load_profile;
use crate::Failure;

/// Recommend an engine (B+-tree, Bε-tree or LSM-tree) and its geometry for a workload
///
/// Prices each engine at its best geometry with the device profile's affine model and the
/// workload's mix of point reads, range queries and writes, and explains the choice.
#[derive(Args)]
#[command(after_help = SIZE_HELP)]
pub struct AdviseArgs {
    /// Number of records
    #[arg(long, value_name = "N")]
    keys: u64,
    /// Share of operations that are point reads, 0 to 1
    #[arg(long, value_name = "R")]
    read_fraction: f64,
    /// Share of operations that are range queries, 0 to 1 (the rest are writes)
    #[arg(long, value_name = "X", default_value_t = 0.0)]
    range_fraction: f64,
    /// Cache budget
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = parse_size)]
    cache: u64,
    /// Bytes per key
    #[arg(long, value_name = "SIZE", default_value = "16", value_parser = parse_size)]
    key_size: u64,
    /// Bytes per value
    #[arg(long, value_name = "SIZE", default_value = "100", value_parser = parse_size)]
    value_size: u64,
    /// Device profile (JSON from `strata profile`); default: the saved profile, else built-in
    /// figures
    #[arg(long, value_name = "FILE")]
    profile: Option<PathBuf>,
    /// Run the pick and the runner-up on a copy of the workload scaled down by --scale (records
    /// and cache alike) and print predicted against measured
    #[arg(long)]
    verify: bool,
    /// With --verify, run every engine, not only the pick and the runner-up
    #[arg(long, requires = "verify")]
    all: bool,
    /// With --verify, open the data files with O_DIRECT so that what the cache misses is read
    /// from the device, as the model prices it, not from the OS page cache
    #[arg(long, requires = "verify")]
    direct: bool,
    /// How much smaller the --verify copy is
    #[arg(long, value_name = "K", default_value_t = 10)]
    scale: u64,
    /// Directory for the --verify databases (default: under the system's temp directory)
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Print one JSON object instead of text
    #[arg(long)]
    json: bool,
}

/// What a --verify run measured beside what was predicted for it.
#[derive(serde::Serialize)]
struct Verified {
    engine: String,
    settings: String,
    records: u64,
    cache_bytes: u64,
    predicted_ops_per_s: f64,
    measured_ops_per_s: f64,
    predicted_write_amp: f64,
    measured_write_amp: f64,
}

fn check(a: &AdviseArgs) -> Result<(), Failure> {
    let share = |x: f64| (0.0..=1.0).contains(&x);
    if a.keys == 0 {
        return Err(Failure::Invalid("--keys must be at least 1".into()));
    }
    if !share(a.read_fraction)
        || !share(a.range_fraction)
        || a.read_fraction + a.range_fraction > 1.0
    {
        return Err(Failure::Invalid(
            "--read-fraction and --range-fraction must lie in 0..1 and sum to at most 1".into(),
        ));
    }
    if a.scale == 0 || a.keys / a.scale == 0 {
        return Err(Failure::Invalid(
            "--scale must leave at least one record".into(),
        ));
    }
    Ok(())
}

pub fn run(a: AdviseArgs) -> Result<ExitCode, Failure> {
    check(&a)?;
    let (profile, source) = load_profile(a.profile.as_ref())?;
    let w = AdviseWorkload {
        keys: a.keys,
        key_bytes: a.key_size,
        value_bytes: a.value_size,
        cache_bytes: a.cache,
        read_fraction: a.read_fraction,
        range_fraction: a.range_fraction,
        range_items: 100,
    };
    let advice = tune::advise(&profile, &w);
    let verified = if a.verify {
        let small = AdviseWorkload {
            keys: a.keys / a.scale,
            cache_bytes: (a.cache / a.scale).max(1 << 20),
            ..w.clone()
        };
        let run = if a.all { advice.choices.len() } else { 2 };
        // Each engine runs the copy at its best geometry for the copy, not the full workload's:
        // a node sized for the full cache may not fit the copy's smaller one several times over
        // (16 MiB Bε-tree nodes, chosen for 64 MiB, thrashed in a 6.4 MiB copy at 49× WA).
        let for_copy = tune::advise(&profile, &small);
        let mut out = Vec::new();
        for choice in advice.choices.iter().take(run) {
            let shaped = for_copy
                .choices
                .iter()
                .find(|c| c.engine == choice.engine)
                .unwrap_or(choice);
            out.push(verify(&profile, shaped, &small, &a)?);
        }
        out
    } else {
        Vec::new()
    };
    if a.json {
        #[derive(serde::Serialize)]
        struct Out<'a> {
            profile_source: &'a str,
            #[serde(flatten)]
            advice: &'a Advice,
            verified: &'a [Verified],
        }
        print_json(&Out {
            profile_source: &source,
            advice: &advice,
            verified: &verified,
        })?;
    } else {
        std::io::stdout()
            .lock()
            .write_all(render(&advice, &source, &verified).as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The workload as a harness spec: a load, then the mix (updates of random existing keys for
/// the writes), each ended by the engine's durable flush.
fn spec(w: &AdviseWorkload) -> Spec {
    let pct = |x: f64| (x * 100.0).round() as u32;
    let (read, scan) = (pct(w.read_fraction), pct(w.range_fraction));
    let mut spec = Spec::rum(w.keys);
    spec.name = "advise".into();
    spec.key_size = w.key_bytes as usize;
    spec.value_size = w.value_bytes as usize;
    spec.cache_bytes = w.cache_bytes;
    spec.phases = vec![
        Phase::Load,
        Phase::Mixed {
            ops: w.keys.clamp(10_000, 200_000),
            mix: Mix {
                read,
                scan,
                update: 100u32.saturating_sub(read + scan),
                ..Mix::default()
            },
            dist: Dist::Uniform,
            scan_len: w.range_items,
        },
    ];
    spec
}

fn verify(
    profile: &strata::DeviceProfile,
    choice: &EngineChoice,
    w: &AdviseWorkload,
    a: &AdviseArgs,
) -> Result<Verified, Failure> {
    let predicted = tune::price(profile, choice.shape, w);
    let root = a
        .dir
        .clone()
        .unwrap_or_else(std::env::temp_dir)
        .join(format!(
            "strata-advise-{}-{}",
            std::process::id(),
            choice.engine
        ));
    let engine = Strata::shaped(choice.engine, choice.shape).direct_io(a.direct);
    let spec = spec(w);
    let mut progress = |_: &str, _: u64, _: u64| {};
    let result = runner::run(&engine, &spec, &root, &mut progress).map_err(Failure::Invalid);
    let _ = std::fs::remove_dir_all(&root);
    let result: RunResult = result?;
    let mixed = result.phase("mixed").expect("the spec has a mixed phase");
    let load = result.phase("load").expect("the spec has a load");
    Ok(Verified {
        engine: choice.engine.to_string(),
        settings: choice.settings.clone(),
        records: w.keys,
        cache_bytes: w.cache_bytes,
        predicted_ops_per_s: predicted.ops_per_s,
        measured_ops_per_s: mixed.ops_per_sec,
        predicted_write_amp: predicted.write_amp,
        measured_write_amp: load.write_amplification(),
    })
}

fn render(a: &Advice, source: &str, verified: &[Verified]) -> String {
    let w = &a.workload;
    let mut s = format!(
        "Device: {source}\nWorkload: {} records of {} + {} bytes, {} cache, {:.0}% point reads, \
         {:.0}% range queries of {}, the rest writes\n\n",
        w.keys,
        w.key_bytes,
        w.value_bytes,
        human(w.cache_bytes),
        100.0 * w.read_fraction,
        100.0 * w.range_fraction,
        w.range_items
    );
    s.push_str(
        "| engine | geometry | predicted ops/s | write µs | point µs | range µs | WA | reads per lookup | SA |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for c in &a.choices {
        s.push_str(&format!(
            "| {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.1}× | {:.2} | {:.2}× |\n",
            c.engine,
            c.settings,
            c.ops_per_s,
            c.write_us,
            c.point_us,
            c.range_us,
            c.write_amp,
            c.read_amp,
            c.space_amp
        ));
    }
    s.push_str(&format!(
        "\nRecommended: {}, {}.\n{}\n",
        a.pick().engine,
        a.pick().settings,
        a.why
    ));
    if !verified.is_empty() {
        s.push_str(
            "\nVerified on a scaled-down copy, each engine at its best geometry for the copy (one \
             run each; a noisy machine moves ops/s, not WA):\n\n\
             | engine | geometry | records | cache | predicted ops/s | measured ops/s | predicted WA | measured WA |\n|---|---|---|---|---|---|---|---|\n",
        );
        for v in verified {
            s.push_str(&format!(
                "| {} | {} | {} | {} | {:.0} | {:.0} | {:.1}× | {:.1}× |\n",
                v.engine,
                v.settings,
                v.records,
                human(v.cache_bytes),
                v.predicted_ops_per_s,
                v.measured_ops_per_s,
                v.predicted_write_amp,
                v.measured_write_amp
            ));
        }
    }
    s
}
