//! The microbenchmarks of seed 000 section 4, on any `Target`:
//!
//! 1. fill: write the scratch space sequentially in 4 MiB O_DIRECT writes and sync: the
//!    sequential write bandwidth (and a file whose blocks are really on the device);
//! 2. affine: random 4 KiB-aligned reads at queue depth 1 of each size 4 KiB .. 16 MiB, for a time
//!    budget per size, in passes over the sizes (up and down in turn, as for the PDAM below);
//!    a size's cost is the median of its passes' means, and a robust fit of s + t·x finds the
//!    sizes where the model holds;
//! 3. PDAM: p = 1, 2, 4, .., 64 threads reading random 64 KiB blocks for a time budget each, in
//!    several passes over the thread counts, up and down in turn; each count's throughput is the
//!    median of its passes. That gives the time for every thread to read a fixed amount (10 GiB,
//!    as in the seed), and a segmented regression of that time against p gives P and the
//!    saturation bandwidth. Passes, because a real device drifts by tens of percent from one
//!    second to the next (docs/models.md, "Profiling a real disk"): measured once each, in one
//!    sweep, p = 1 and p = 64 are taken at different moments and P, their ratio, carries the drift;
//! 4. fsync: a 4 KiB append then an fdatasync, timed on the sync, as a durable commit pays it;
//! 5. block sizes (seed 002, `blocks`): random reads of 512 B .. 64 KiB at queue depth 1, with
//!    uniform and power-law offsets.
//!
//! Invariants: budgets bound the time of each step (plus one IO); every size and thread count
//! gets at least a minimum number of IOs so a mean exists; offsets come from a seeded generator,
//! so on a simulated target the whole profile is a pure function of the model and the seed.

use super::target::{random_offset, Target};
use super::{
    AffinePoint, AffineProfile, CostShape, DeviceProfile, FsyncProfile, PdamPoint, PdamProfile,
    WriteProfile, PROFILE_VERSION,
};
use crate::error::{Error, Result};
use crate::model::fit::{robust_line, segmented, Hinge};
use crate::model::SplitMix64;
use crate::storage::device::AlignedBuf;

/// What the profiler is doing, for a progress bar.
pub trait Progress: Sync {
    /// A phase begins with this many steps.
    fn phase(&self, _name: &str, _steps: u64) {}
    /// One step of the current phase is done.
    fn step(&self, _detail: &str) {}
}

/// No progress reporting.
pub struct Silent;
impl Progress for Silent {}

#[derive(Clone, Debug, PartialEq)]
pub struct ProfileConfig {
    /// IO sizes of the affine benchmark.
    pub sizes: Vec<u64>,
    /// Measuring time per size and pass, seconds on the target's clock.
    pub size_budget_s: f64,
    /// Passes over the sizes (ascending, then descending, ...).
    pub affine_passes: u32,
    pub min_ios: u64,
    pub max_ios: u64,
    /// Thread counts of the PDAM benchmark.
    pub threads: Vec<u32>,
    pub pdam_block: u64,
    /// Measuring time per thread count and pass.
    pub thread_budget_s: f64,
    /// Passes over the thread counts (ascending, then descending, ...).
    pub pdam_passes: u32,
    pub min_per_thread: u64,
    /// Cap on reads per thread (only a virtual clock needs it: it cannot run out of time).
    pub max_per_thread: u64,
    /// Completion times are reported for every thread reading this much (seed 000: 10 GiB).
    pub per_thread_bytes: u64,
    pub fill_chunk: u64,
    pub fsync_samples: u32,
    /// Relative residual under which a size always counts as following the affine model.
    pub fit_floor: f64,
    /// Block sizes of seed 002's benchmark (`blocks`), and its time per size, distribution and
    /// pass; its passes are the affine step's.
    pub block_sizes: Vec<u64>,
    pub block_budget_s: f64,
    pub seed: u64,
    /// Recorded in the profile: made with the short budgets.
    pub quick: bool,
}

fn powers(lo: u64, hi: u64) -> Vec<u64> {
    std::iter::successors(Some(lo), |&x| Some(x * 2))
        .take_while(|&x| x <= hi)
        .collect()
}

impl ProfileConfig {
    /// The full profile: about 2 s per IO size and 2 s per thread count (three passes).
    pub fn full() -> ProfileConfig {
        ProfileConfig {
            sizes: powers(4 << 10, 16 << 20),
            size_budget_s: 0.7,
            affine_passes: 3,
            min_ios: 16,
            max_ios: 100_000,
            threads: powers(1, 64).into_iter().map(|t| t as u32).collect(),
            pdam_block: 64 << 10,
            thread_budget_s: 0.7,
            pdam_passes: 3,
            min_per_thread: 4,
            max_per_thread: 4096,
            per_thread_bytes: 10 << 30,
            fill_chunk: 4 << 20,
            fsync_samples: 50,
            fit_floor: 0.10,
            block_sizes: super::blocks::block_sizes(),
            block_budget_s: 0.4,
            seed: 0x5EED,
            quick: false,
        }
    }

    /// Under a minute on a real disk: shorter budgets, fewer fsyncs.
    pub fn quick() -> ProfileConfig {
        ProfileConfig {
            size_budget_s: 0.15,
            min_ios: 8,
            thread_budget_s: 0.35,
            min_per_thread: 2,
            max_per_thread: 256,
            fsync_samples: 16,
            block_budget_s: 0.1,
            quick: true,
            ..ProfileConfig::full()
        }
    }
}

/// Mean, median and standard deviation of a non-empty sample.
pub(super) fn stats(mut xs: Vec<f64>) -> (f64, f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    xs.sort_by(f64::total_cmp);
    let m = xs.len();
    let median = if m % 2 == 1 {
        xs[m / 2]
    } else {
        0.5 * (xs[m / 2 - 1] + xs[m / 2])
    };
    (mean, median, var.sqrt())
}

/// Write the whole span sequentially, then sync: the write bandwidth.
fn fill(t: &dyn Target, cfg: &ProfileConfig, progress: &dyn Progress) -> Result<WriteProfile> {
    let span = t.span();
    let chunk = cfg.fill_chunk.min(span) as usize;
    let mut buf = AlignedBuf::zeroed(chunk);
    let mut rng = SplitMix64::new(cfg.seed);
    for w in buf.as_mut_slice().chunks_exact_mut(8) {
        w.copy_from_slice(&rng.next_u64().to_le_bytes());
    }
    progress.phase("write", span.div_ceil(chunk as u64));
    let start = t.now_s();
    let mut off = 0;
    while off < span {
        let len = (span - off).min(chunk as u64) as usize;
        // Stamp each page with its offset so no two pages are alike (no dedup, no compression).
        for page in buf.as_mut_slice()[..len].chunks_mut(4096) {
            page[..8].copy_from_slice(&off.to_le_bytes());
        }
        t.write(&buf.as_slice()[..len], off)?;
        off += len as u64;
        progress.step("");
    }
    t.sync()?;
    let elapsed_s = t.now_s() - start;
    Ok(WriteProfile {
        bytes: span,
        chunk_bytes: chunk as u64,
        elapsed_s,
        bytes_per_s: span as f64 / elapsed_s,
    })
}

/// The order of pass `pass` over `n` points: up, then down, then up. A device that speeds up or
/// slows down during the profile then meets the first and the last point alike, and the median
/// over three passes sets aside the one pass a passing disturbance spoiled.
fn pass_order(pass: u32, n: usize) -> Vec<usize> {
    if pass.is_multiple_of(2) {
        (0..n).collect()
    } else {
        (0..n).rev().collect()
    }
}

fn affine(
    t: &dyn Target,
    cfg: &ProfileConfig,
    progress: &dyn Progress,
) -> Result<Vec<AffinePoint>> {
    let mut rng = SplitMix64::new(cfg.seed ^ 0xAFF1);
    let sizes: Vec<u64> = cfg
        .sizes
        .iter()
        .copied()
        .filter(|&s| s <= t.span() / 2)
        .collect();
    let n = sizes.len();
    let passes = cfg.affine_passes.max(1);
    progress.phase("affine", passes as u64 * n as u64);
    // Per size: every read's time, and each pass's mean.
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut means: Vec<Vec<f64>> = vec![Vec::new(); n];
    for pass in 0..passes {
        for i in pass_order(pass, n) {
            let size = sizes[i];
            let mut buf = AlignedBuf::zeroed(size as usize);
            // One read untimed: the first IO of a size may pay for a cold path.
            t.read(buf.as_mut_slice(), random_offset(&mut rng, t.span(), size))?;
            let mut these = Vec::new();
            let start = t.now_s();
            loop {
                let off = random_offset(&mut rng, t.span(), size);
                let t0 = t.now_s();
                t.read(buf.as_mut_slice(), off)?;
                these.push(t.now_s() - t0);
                let k = these.len() as u64;
                if k >= cfg.max_ios || (k >= cfg.min_ios && t.now_s() - start >= cfg.size_budget_s)
                {
                    break;
                }
            }
            means[i].push(these.iter().sum::<f64>() / these.len() as f64);
            times[i].extend(these);
            progress.step(&format!("{size} B"));
        }
    }
    Ok(sizes
        .iter()
        .zip(times.into_iter().zip(means))
        .map(|(&bytes, (times, means))| {
            let ios = times.len() as u64;
            let (_, median_s, stddev_s) = stats(times);
            AffinePoint {
                bytes,
                ios,
                mean_s: stats(means).1,
                median_s,
                stddev_s,
                fitted: false,
            }
        })
        .collect())
}

fn pdam(t: &dyn Target, cfg: &ProfileConfig, progress: &dyn Progress) -> Result<Vec<PdamPoint>> {
    let n = cfg.threads.len();
    let passes = cfg.pdam_passes.max(1);
    progress.phase("pdam", passes as u64 * n as u64);
    // Per thread count: (IOs, seconds) of each pass.
    let mut runs: Vec<Vec<(u64, f64)>> = vec![Vec::new(); n];
    for pass in 0..passes {
        for i in pass_order(pass, n) {
            let p = cfg.threads[i];
            let run = t.concurrent_reads(
                p,
                cfg.pdam_block,
                cfg.thread_budget_s,
                cfg.min_per_thread,
                cfg.max_per_thread,
                cfg.seed ^ (0xD0 + i as u64) ^ ((pass as u64) << 32),
            )?;
            runs[i].push((run.ios, run.elapsed_s));
            progress.step(&format!("{p} threads"));
        }
    }
    let blocks_per_thread = cfg.per_thread_bytes as f64 / cfg.pdam_block as f64;
    let block = cfg.pdam_block as f64;
    Ok(cfg
        .threads
        .iter()
        .zip(runs)
        .map(|(&p, runs)| {
            let passes_bytes_per_s: Vec<f64> = runs
                .iter()
                .map(|&(ios, s)| ios as f64 * block / s)
                .collect();
            let (_, median, _) = stats(passes_bytes_per_s.clone());
            PdamPoint {
                threads: p,
                ios: runs.iter().map(|r| r.0).sum(),
                elapsed_s: runs.iter().map(|r| r.1).sum(),
                bytes_per_s: median,
                completion_s: p as f64 * blocks_per_thread * block / median,
                passes_bytes_per_s,
            }
        })
        .collect())
}

/// Append 4 KiB past the end and fdatasync, as the write-ahead log commits: the file grows, so
/// the sync must also make the new size durable (on ext4, a journal commit). Overwriting a block
/// in place would time only the device's cache flush, which is not what a commit pays.
fn fsync(t: &dyn Target, cfg: &ProfileConfig, progress: &dyn Progress) -> Result<FsyncProfile> {
    progress.phase("fsync", cfg.fsync_samples as u64);
    let mut page = AlignedBuf::zeroed(4096);
    let mut times = Vec::new();
    for i in 0..cfg.fsync_samples.max(1) {
        page.as_mut_slice()[..4].copy_from_slice(&i.to_le_bytes());
        t.write(page.as_slice(), t.span() + i as u64 * 4096)?;
        let t0 = t.now_s();
        t.sync()?;
        times.push(t.now_s() - t0);
        progress.step("");
    }
    let samples = times.len() as u32;
    let (mean_s, median_s, _) = stats(times);
    Ok(FsyncProfile {
        mean_s,
        median_s,
        samples,
    })
}

fn no_fit(what: &str) -> Error {
    Error::InvalidOptions(format!(
        "the {what} measurements do not determine a fit (too few distinct points)"
    ))
}

/// Fit s and t on the sizes where the affine model holds.
///
/// When that fit cannot have measured t (its sizes never reach past twice 1/α = s/t, or its R²
/// is poor) and the roofline max(s, t·x) fits all the sizes better, the roofline is reported
/// instead: a throttled disk costs max(1/IOPS, x/bandwidth), and a robust affine fit keeps its
/// flat small sizes and sets aside the large ones, which are exactly the ones that carry t.
pub fn fit_affine(mut points: Vec<AffinePoint>, floor: f64) -> Result<AffineProfile> {
    let xs: Vec<f64> = points.iter().map(|p| p.bytes as f64).collect();
    let ys: Vec<f64> = points.iter().map(|p| p.mean_s).collect();
    let rf = robust_line(&xs, &ys, floor).ok_or_else(|| no_fit("affine"))?;
    let (s, t) = (rf.fit.intercept, rf.fit.slope);
    let reach = xs
        .iter()
        .zip(&rf.inliers)
        .filter(|(_, &i)| i)
        .map(|(&x, _)| x)
        .fold(0.0, f64::max);
    let measured_t = t > 0.0 && reach >= 2.0 * s / t && rf.fit.r2 >= super::MIN_AFFINE_R2;
    if !measured_t {
        // Relative weights, as the affine fit uses: a 16 MiB read must not outweigh 4 KiB.
        let ws: Vec<f64> = ys.iter().map(|y| 1.0 / (y * y)).collect();
        let roof = segmented(&xs, &ys, Some(&ws), Hinge::FlatFirst)
            .filter(|f| f.slope_after > 0.0 && f.intercept > 0.0 && f.r2 >= super::MIN_AFFINE_R2);
        if let Some(f) = roof {
            // y = s for x up to the knee, then s + t·(x − knee): with the knee at s/t, max(s, t·x).
            let (s, t) = (f.intercept, f.slope_after);
            for p in &mut points {
                p.fitted = true;
            }
            return Ok(AffineProfile {
                setup_s: s,
                per_byte_s: t,
                alpha: t / s,
                half_bandwidth_bytes: s / t,
                r2: f.r2,
                fitted_sizes: points.iter().map(|p| p.bytes).collect(),
                excluded_sizes: Vec::new(),
                tolerance: rf.tolerance,
                points,
                shape: CostShape::Roofline,
            });
        }
    }
    for (p, &inlier) in points.iter_mut().zip(&rf.inliers) {
        p.fitted = inlier;
    }
    Ok(AffineProfile {
        setup_s: s,
        per_byte_s: t,
        alpha: t / s,
        half_bandwidth_bytes: s / t,
        r2: rf.fit.r2,
        fitted_sizes: points
            .iter()
            .filter(|p| p.fitted)
            .map(|p| p.bytes)
            .collect(),
        excluded_sizes: points
            .iter()
            .filter(|p| !p.fitted)
            .map(|p| p.bytes)
            .collect(),
        tolerance: rf.tolerance,
        points,
        shape: CostShape::Affine,
    })
}

/// Segmented regression of completion time on threads: flat, then linear. The PDAM's parameters
/// come from the two segments: one thread completes one block IO per step, so the flat level
/// L = (blocks per thread)·step; past saturation each thread adds per_thread_bytes at the
/// saturation bandwidth, the slope b. P = L / b, how many IOs a step serves at saturation. On
/// ideal PDAM data (flat, then a line through the origin) that is exactly the knee of the fit; on
/// a device whose throughput rises gradually (no flat region) the knee sits near p = 1 while L/b
/// still gives the saturated-to-single-thread throughput ratio, and keeps the model's prediction
/// right at both ends. Both are reported.
pub fn fit_pdam(points: Vec<PdamPoint>, block: u64, per_thread_bytes: u64) -> Result<PdamProfile> {
    let xs: Vec<f64> = points.iter().map(|p| p.threads as f64).collect();
    let ys: Vec<f64> = points.iter().map(|p| p.completion_s).collect();
    // Relative weights: times span 1..64×, and the knee is at the small end.
    let ws: Vec<f64> = ys.iter().map(|y| 1.0 / (y * y)).collect();
    let fit = segmented(&xs, &ys, Some(&ws), Hinge::FlatFirst).ok_or_else(|| no_fit("PDAM"))?;
    let level = fit.intercept;
    let (parallelism, saturation) = if fit.slope_after > 0.0 && level > 0.0 {
        (
            (level / fit.slope_after).max(1.0),
            per_thread_bytes as f64 / fit.slope_after,
        )
    } else {
        // No saturation within the thread counts measured: P is at least the throughput ratio.
        let best = points.iter().map(|p| p.bytes_per_s).fold(0.0, f64::max);
        let one = points.first().map_or(best, |p| p.bytes_per_s);
        ((best / one).max(1.0), best)
    };
    Ok(PdamProfile {
        parallelism,
        knee: fit.breakpoint,
        block_bytes: block,
        saturation_bytes_per_s: saturation,
        // = level / blocks: one thread's time per block.
        step_s: parallelism * block as f64 / saturation,
        r2: fit.r2,
        per_thread_bytes,
        fit,
        points,
    })
}

/// Run every benchmark on `t` and fit the models.
pub fn profile(
    t: &dyn Target,
    cfg: &ProfileConfig,
    progress: &dyn Progress,
) -> Result<DeviceProfile> {
    let write = fill(t, cfg, progress)?;
    let points = affine(t, cfg, progress)?;
    let threads = pdam(t, cfg, progress)?;
    let fsync = fsync(t, cfg, progress)?;
    let blocks = super::blocks::measure(
        t,
        &cfg.block_sizes,
        cfg.affine_passes,
        cfg.block_budget_s,
        (cfg.min_ios, cfg.max_ios),
        cfg.seed,
        progress,
    )?;
    let created_unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let profile = DeviceProfile {
        version: PROFILE_VERSION,
        device: t.describe(),
        created_unix_s,
        quick: cfg.quick,
        affine: fit_affine(points, cfg.fit_floor)?,
        pdam: fit_pdam(threads, cfg.pdam_block, cfg.per_thread_bytes)?,
        write,
        fsync,
        blocks,
    };
    profile.validate().map_err(|why| {
        Error::InvalidOptions(format!(
            "the measurements of {} give an unusable profile: {why}",
            t.describe()
        ))
    })?;
    Ok(profile)
}
