//! `strata profile`: measure the device under a directory (or a simulated preset), fit the affine
//! and PDAM models, print them with predicted against measured time for every point, and save
//! the profile as JSON (at the default location the tuner reads, and at --out) with an SVG plot.
//!
//! A real run creates a scratch file in --dir, unlinked at once so it vanishes however the
//! process ends. A simulated run (--sim) is deterministic for a given --seed and is not saved as
//! the default profile, so a demo never replaces the measurement of the real disk.

use std::fmt;
use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use strata::profile::errors::error;
use strata::profile::{
    self, DeviceProfile, FileTarget, ModelErrors, ProfileConfig, Progress, SimTarget, Target,
};
use strata::storage::sim::PRESETS;

use crate::report::print_json;
use crate::sizes::{human, parse_size, SIZE_HELP};
use crate::Failure;

/// Measure the disk: affine (s, t) and PDAM (P, saturation) models, write bandwidth, fsync cost
///
/// Random reads of 4 KiB .. 16 MiB at queue depth 1 give s and t (fitted on the sizes where the
/// model holds; the others are named); 1 .. 64 threads of random 64 KiB reads give P and the
/// saturation bandwidth by segmented regression (seed 000, section 4). The profile is saved where
/// `strata tune` looks for it ($STRATA_PROFILE, else $XDG_CONFIG_HOME/strata/profile.json, else
/// ~/.config/strata/profile.json) unless --no-save or --sim.
#[derive(Args)]
#[command(after_help = SIZE_HELP)]
pub struct ProfileArgs {
    /// Directory on the device to measure; the scratch file is created there
    #[arg(long, value_name = "DIR", default_value = ".")]
    dir: PathBuf,
    /// Scratch file size [default: 8GiB, or 1GiB with --quick]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    size: Option<u64>,
    /// Short budgets: done in well under a minute
    #[arg(long)]
    quick: bool,
    /// Also write the profile (JSON) here
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Write a plot (SVG) here
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
    /// Profile a simulated device instead of --dir (see --list-presets)
    #[arg(long, value_name = "PRESET")]
    sim: Option<String>,
    /// Relative noise on each simulated IO's cost
    #[arg(long, value_name = "FRACTION", default_value_t = 0.03)]
    sim_noise: f64,
    /// Seed of the random offsets (and of the simulated noise)
    #[arg(long, value_name = "N", default_value_t = 0x5EED)]
    seed: u64,
    /// Do not save the profile at the default location
    #[arg(long)]
    no_save: bool,
    /// List the simulated devices and exit
    #[arg(long)]
    list_presets: bool,
    /// Print the profile as JSON instead of tables, and no progress bar
    #[arg(long)]
    json: bool,
}

/// A progress bar per phase on stderr, drawn only on a terminal.
struct Bar(ProgressBar);

impl Bar {
    fn new(quiet: bool) -> Bar {
        if quiet || !io::stderr().is_terminal() {
            return Bar(ProgressBar::hidden());
        }
        let style = ProgressStyle::with_template("{msg:>8} [{bar:40}] {pos}/{len} {prefix}")
            .map(|s| s.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        Bar(ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr()).with_style(style))
    }
}

impl Progress for Bar {
    fn phase(&self, name: &str, steps: u64) {
        let what = match name {
            "write" => "writing the scratch file sequentially",
            "affine" => "random reads at queue depth 1, by size",
            "pdam" => "random 64 KiB reads, by thread count",
            "fsync" => "4 KiB append + fdatasync",
            "block sizes" => "random reads of 512 B .. 64 KiB, uniform and power-law offsets",
            _ => "",
        };
        self.0.set_message(name.to_string());
        self.0.set_prefix(what);
        self.0.set_length(steps);
        self.0.set_position(0);
    }

    fn step(&self, detail: &str) {
        if !detail.is_empty() {
            self.0.set_prefix(format!("done {detail}"));
        }
        self.0.inc(1);
    }
}

/// Where the profile is written: (path, why).
fn destinations(a: &ProfileArgs, default: Option<PathBuf>) -> Vec<(PathBuf, &'static str)> {
    let mut out = Vec::new();
    if a.sim.is_none() && !a.no_save {
        if let Some(p) = default {
            out.push((p, "saved"));
        }
    }
    if let Some(p) = &a.out {
        if !out.iter().any(|(q, _)| q == p) {
            out.push((p.clone(), "written"));
        }
    }
    out
}

/// Run the benchmarks the arguments ask for.
fn measure(a: &ProfileArgs, progress: &dyn Progress) -> Result<DeviceProfile, Failure> {
    let mut cfg = if a.quick {
        ProfileConfig::quick()
    } else {
        ProfileConfig::full()
    };
    cfg.seed = a.seed;
    let target: Box<dyn Target> = match &a.sim {
        Some(name) => {
            if !(0.0..=0.5).contains(&a.sim_noise) {
                return Err(Failure::Invalid(
                    "--sim-noise must be between 0 and 0.5".into(),
                ));
            }
            Box::new(SimTarget::preset(name, a.sim_noise, a.seed)?)
        }
        None => {
            let size = a.size.unwrap_or(if a.quick { 1 << 30 } else { 8 << 30 });
            Box::new(FileTarget::create(&a.dir, size)?)
        }
    };
    Ok(profile::profile(target.as_ref(), &cfg, progress)?)
}

pub fn run(a: ProfileArgs) -> Result<ExitCode, Failure> {
    if a.list_presets {
        let mut out = io::stdout().lock();
        for p in PRESETS {
            writeln!(out, "{:<20} {}", p.name, p.description)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let bar = Bar::new(a.json);
    let measured = measure(&a, &bar);
    bar.0.finish_and_clear();
    let p = measured?;
    let mut written = Vec::new();
    for (path, why) in destinations(&a, DeviceProfile::saved_path()) {
        p.save(&path)?;
        written.push(format!("{why} {}", path.display()));
    }
    if let Some(plot) = &a.plot {
        write_file(plot, &profile::plot::svg(&p))?;
        written.push(format!("plot {}", plot.display()));
    }
    if a.json {
        print_json(&p)?;
    } else {
        let mut text = render(&p);
        for w in &written {
            text.push_str(&format!("{w}\n"));
        }
        io::stdout().lock().write_all(text.as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}

fn write_file(path: &Path, text: &str) -> Result<(), Failure> {
    std::fs::write(path, text)
        .map_err(|e| Failure::Invalid(format!("cannot write {}: {e}", path.display())))
}

fn us(s: f64) -> String {
    format!("{:.1}", s * 1e6)
}

fn sizes(list: &[u64]) -> String {
    list.iter()
        .map(|&b| human(b))
        .collect::<Vec<_>>()
        .join(", ")
}

struct Pct(f64);

impl fmt::Display for Pct {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:+.1}%", 100.0 * self.0)
    }
}

/// The profile as tables: the fitted figures, then predicted against measured for every point.
pub fn render(p: &DeviceProfile) -> String {
    let mut o = String::new();
    let a = &p.affine;
    let d = &p.pdam;
    o.push_str(&format!(
        "device: {}{}\naffine model (random reads, queue depth 1)\n",
        p.device,
        if p.quick { " (quick)" } else { "" }
    ));
    let mut rows: Vec<(&str, String)> = vec![
        ("s", format!("{} µs", us(a.setup_s))),
        (
            "t",
            format!(
                "{:.4} ns/B ({}/s streaming)",
                a.per_byte_s * 1e9,
                human((1.0 / a.per_byte_s) as u64)
            ),
        ),
        ("α", format!("{:.3e} per byte", a.alpha)),
        (
            "1/α",
            format!(
                "{} (half-bandwidth point)",
                human(a.half_bandwidth_bytes as u64)
            ),
        ),
        (
            "R²",
            format!(
                "{:.4} on {} sizes: {}",
                a.r2,
                a.fitted_sizes.len(),
                sizes(&a.fitted_sizes)
            ),
        ),
    ];
    if !a.excluded_sizes.is_empty() {
        rows.push((
            "off the line",
            format!(
                "{} (more than {:.0}% from the fit: not used)",
                sizes(&a.excluded_sizes),
                100.0 * a.tolerance
            ),
        ));
    }
    rows.push((
        "holds",
        match p.affine_holds() {
            Ok(()) => "yes".to_string(),
            Err(why) => {
                format!("NO: {why}; `strata tune` warns and Auto tunes from built-in SSD figures")
            }
        },
    ));
    for (l, v) in rows.drain(..) {
        o.push_str(&format!("  {l:<12} {v}\n"));
    }
    o.push_str(&format!(
        "PDAM model (random {} reads, p threads)\n",
        human(d.block_bytes)
    ));
    rows.push((
        "P",
        format!(
            "{:.2} (flat level / slope past the knee; the segments meet at p = {:.2})",
            d.parallelism, d.knee
        ),
    ));
    rows.push((
        "saturation",
        format!("{}/s", human(d.saturation_bytes_per_s as u64)),
    ));
    rows.push(("step", format!("{} µs per P blocks", us(d.step_s))));
    rows.push(("R²", format!("{:.4} (segmented regression)", d.r2)));
    // How far a point's passes spread: the device's drift during the profile.
    let spread = d
        .points
        .iter()
        .filter(|q| q.passes_bytes_per_s.len() > 1)
        .map(|q| {
            let v = &q.passes_bytes_per_s;
            let (lo, hi) = v
                .iter()
                .fold((f64::INFINITY, 0.0f64), |(l, h), &x| (l.min(x), h.max(x)));
            ((hi - lo) / q.bytes_per_s, q.threads, v.len())
        })
        .max_by(|a, b| a.0.total_cmp(&b.0));
    if let Some((wide, threads, passes)) = spread {
        rows.push((
            "passes",
            format!(
                "{passes}, each point their median; widest spread {:.1}% of it, at p = {threads}",
                100.0 * wide
            ),
        ));
    }
    for (l, v) in rows.drain(..) {
        o.push_str(&format!("  {l:<12} {v}\n"));
    }
    o.push_str("durability\n");
    o.push_str(&format!(
        "  {:<12} {}/s ({} written in {} writes, then one sync)\n",
        "seq. write",
        human(p.write.bytes_per_s as u64),
        human(p.write.bytes),
        human(p.write.chunk_bytes)
    ));
    o.push_str(&format!(
        "  {:<12} {:.3} ms mean, {:.3} ms median ({} samples)\n",
        "fsync",
        p.fsync.mean_s * 1e3,
        p.fsync.median_s * 1e3,
        p.fsync.samples
    ));

    if !p.blocks.is_empty() {
        o.push_str(
            "block sizes (seed 002): random reads at queue depth 1, offsets uniform and from a \
             power law (half of them in the first 1/16 of the file)\n",
        );
        o.push_str(&format!(
            "  {:>8} {:>7} {:>11} {:>9} {:>11} {:>9} {:>11}\n",
            "block", "IOs", "uniform µs", "IOPS", "power µs", "IOPS", "power/unif."
        ));
        for b in &p.blocks {
            o.push_str(&format!(
                "  {:>8} {:>7} {:>11} {:>9.0} {:>11} {:>9.0} {:>11.3}\n",
                human(b.bytes),
                b.ios,
                us(b.uniform_s),
                1.0 / b.uniform_s,
                us(b.power_s),
                1.0 / b.power_s,
                b.uniform_s / b.power_s
            ));
        }
    }

    let errors = ModelErrors::of(p);
    o.push_str(&format!(
        "\naffine model and DAM against measurement (error = measured / model − 1)\n  DAM: \
         Lemma 1's, blocks of 1/α = {} costing {} µs each (2s); no parallelism\n",
        human(errors.dam.block_bytes),
        us(errors.dam.block_s)
    ));
    o.push_str(&format!(
        "  {:>8} {:>7} {:>12} {:>12} {:>10} {:>12} {:>10} {:>8}  {}\n",
        "size", "IOs", "measured µs", "s + t·x µs", "error", "DAM µs", "error", "sd µs", "fitted"
    ));
    for (q, e) in a.points.iter().zip(&errors.sizes) {
        o.push_str(&format!(
            "  {:>8} {:>7} {:>12} {:>12} {:>10} {:>12} {:>10} {:>8}  {}\n",
            human(q.bytes),
            q.ios,
            us(q.mean_s),
            us(e.affine_s),
            Pct(error(q.mean_s, e.affine_s)).to_string(),
            us(e.dam_s),
            Pct(error(q.mean_s, e.dam_s)).to_string(),
            us(q.stddev_s),
            if q.fitted { "yes" } else { "no" }
        ));
    }
    o.push_str(&format!(
        "\nPDAM against measurement: time for each thread to read {} (from the measured \
         throughput)\n",
        human(d.per_thread_bytes)
    ));
    o.push_str(&format!(
        "  {:>7} {:>8} {:>11} {:>12} {:>12} {:>8} {:>12} {:>8} {:>12} {:>8}\n",
        "threads",
        "IOs",
        "MiB/s",
        "measured s",
        "segments s",
        "error",
        "PDAM s",
        "error",
        "DAM s",
        "error"
    ));
    for (q, e) in d.points.iter().zip(&errors.threads) {
        let seg = d.fit.predict(q.threads as f64);
        o.push_str(&format!(
            "  {:>7} {:>8} {:>11.1} {:>12.1} {:>12.1} {:>8} {:>12.1} {:>8} {:>12.1} {:>8}\n",
            q.threads,
            q.ios,
            q.bytes_per_s / (1u64 << 20) as f64,
            q.completion_s,
            seg,
            Pct(error(q.completion_s, seg)).to_string(),
            e.pdam_s,
            Pct(error(q.completion_s, e.pdam_s)).to_string(),
            e.dam_s,
            Pct(error(q.completion_s, e.dam_s)).to_string()
        ));
    }
    if !errors.sizes.is_empty() || !errors.threads.is_empty() {
        let (affine, dam_sizes) = errors.worst_by_size();
        let (pdam, dam_threads) = errors.worst_by_threads();
        o.push_str(&format!(
            "\nworst factor off: across IO sizes affine {affine:.2}×, DAM {dam_sizes:.2}×; \
             across threads PDAM {pdam:.2}×, DAM {dam_threads:.2}× (the DAM prices every IO \
             at one block cost and has no parallelism)\n"
        ));
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ProfileArgs,
    }

    fn args(list: &[&str]) -> ProfileArgs {
        let mut v = vec!["profile"];
        v.extend_from_slice(list);
        Cli::try_parse_from(v).unwrap().args
    }

    #[test]
    fn sim_profile_recovers_the_preset_and_renders_every_point() {
        let a = args(&["--sim", "samsung-970-pro", "--quick"]);
        let p = measure(&a, &strata::profile::Silent).unwrap();
        let truth = strata::storage::sim::SimPreset::find("samsung-970-pro")
            .unwrap()
            .model();
        assert!((p.affine.setup_s / truth.affine.setup_s - 1.0).abs() < 0.05);
        assert!((p.pdam.parallelism / truth.parallelism - 1.0).abs() < 0.10);
        let text = render(&p);
        assert!(text.contains("half-bandwidth point"), "{text}");
        // The DAM's columns and its worst factor, which on an SSD with P 5.5 is several times
        // the PDAM's.
        assert!(text.contains("DAM µs") && text.contains("DAM s"), "{text}");
        let (pdam, dam) = ModelErrors::of(&p).worst_by_threads();
        assert!(dam > 3.0 * pdam, "{pdam} {dam}");
        assert!(text.contains("worst factor off"), "{text}");
        // Seed 002's block sizes from 512 B (the simulator reads any size) to 64 KiB.
        assert_eq!(p.blocks.first().map(|b| b.bytes), Some(512));
        assert_eq!(p.blocks.last().map(|b| b.bytes), Some(64 << 10));
        assert!(text.contains("block sizes (seed 002)"), "{text}");
        // One line per measured point in each comparison table.
        let lines = text.lines().filter(|l| l.contains('%')).count();
        assert!(
            lines >= p.affine.points.len() + p.pdam.points.len(),
            "{text}"
        );
    }

    #[test]
    fn unknown_preset_is_a_clear_error() {
        let a = args(&["--sim", "floppy", "--quick"]);
        let Err(Failure::Db(e)) = measure(&a, &strata::profile::Silent) else {
            panic!("expected an error");
        };
        assert!(e.to_string().contains("samsung-860-pro"), "{e}");
    }

    #[test]
    fn simulated_profiles_are_not_saved_as_the_default() {
        let default = Some(PathBuf::from("/cfg/strata/profile.json"));
        let sim = args(&["--sim", "samsung-860-pro", "--out", "x.json"]);
        assert_eq!(
            destinations(&sim, default.clone()),
            vec![(PathBuf::from("x.json"), "written")]
        );
        let real = args(&["--out", "x.json"]);
        assert_eq!(destinations(&real, default.clone()).len(), 2);
        let nosave = args(&["--no-save"]);
        assert!(destinations(&nosave, default).is_empty());
    }
}
