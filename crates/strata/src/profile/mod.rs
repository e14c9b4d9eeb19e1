//! The device profile: what `strata profile` measures (seed 000 section 4) and what the tuner
//! reads. `bench` runs the microbenchmarks on a `target` (a real scratch file with O_DIRECT, or a
//! SimDevice), `plot` draws them, `errors` prices every measured point with each model (the DAM
//! included), and this file holds the result and its JSON form.
//!
//! A profile is saved as JSON at `--out` and at a default location (`saved_path`): $STRATA_PROFILE
//! if set, else $XDG_CONFIG_HOME/strata/profile.json, else ~/.config/strata/profile.json.
//!
//! Invariants: a profile that loads is valid (`validate`): finite, positive s, t, P ≥ 1,
//! bandwidths, 1/α = s/t at most 256 MiB and a version this build reads; anything else is
//! `Error::InvalidOptions` naming the file, never a panic. Derived figures (α, 1/α) are stored
//! for people reading the JSON but are always recomputed from s and t when used.

pub mod bench;
pub mod blocks;
pub mod errors;
pub mod plot;
pub mod target;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::model::fit::SegmentedFit;
use crate::model::{Affine, Pdam};
use crate::storage::sim::{SimModel, SimPreset, PDAM_BLOCK};

pub use bench::{profile, ProfileConfig, Progress, Silent};
pub use blocks::{BlockPoint, Offsets};
pub use errors::ModelErrors;
pub use target::{FileTarget, SimTarget, Target};

/// Format version of the profile JSON this build writes and the newest it reads.
pub const PROFILE_VERSION: u32 = 1;

/// The largest 1/α (bytes) a profile may hold (see `DeviceProfile::validate`).
pub const MAX_HALF_BANDWIDTH: f64 = (256u64 << 20) as f64;

/// The affine benchmark: mean latency of random reads at queue depth 1, by IO size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AffinePoint {
    pub bytes: u64,
    pub ios: u64,
    /// Mean time of a read: the median over the profiler's passes of each pass's mean.
    pub mean_s: f64,
    pub median_s: f64,
    pub stddev_s: f64,
    /// Whether the fit used this size (the model holds here).
    pub fitted: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AffineProfile {
    /// s, seconds.
    pub setup_s: f64,
    /// t, seconds per byte.
    pub per_byte_s: f64,
    /// α = t/s, per byte.
    pub alpha: f64,
    /// 1/α, bytes.
    pub half_bandwidth_bytes: f64,
    /// R² of the fit on the fitted sizes.
    pub r2: f64,
    pub fitted_sizes: Vec<u64>,
    /// Sizes whose mean is off the fitted line by more than `tolerance` (relative).
    pub excluded_sizes: Vec<u64>,
    pub tolerance: f64,
    pub points: Vec<AffinePoint>,
    /// What the device was found to follow: `Affine` (s + t·x), or `Roofline` (max(s, t·x): a
    /// throttled disk, IOPS-bound below s/t and bandwidth-bound above), when the affine fit
    /// could not measure t and the roofline fits (`bench::fit_affine`).
    #[serde(default)]
    pub shape: CostShape,
}

/// The shape of a device's cost per IO size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum CostShape {
    #[default]
    Affine,
    Roofline,
}

/// The PDAM benchmark at one thread count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PdamPoint {
    pub threads: u32,
    /// Reads completed in the measured interval, all threads together.
    pub ios: u64,
    pub elapsed_s: f64,
    /// The median of the passes' throughputs (`passes_bytes_per_s`).
    pub bytes_per_s: f64,
    /// Time for every thread to read `per_thread_bytes`, from the measured throughput.
    pub completion_s: f64,
    /// Throughput of each pass over the thread counts, in the order measured (empty in profiles
    /// written before passes, or made from models).
    #[serde(default)]
    pub passes_bytes_per_s: Vec<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PdamProfile {
    /// P = the flat segment's level / the slope past the knee: IOs per step at saturation.
    pub parallelism: f64,
    /// Where the fitted segments meet (equal to P on ideal PDAM data).
    pub knee: f64,
    pub block_bytes: u64,
    /// Throughput once saturated, from the slope past the knee: bytes per second.
    pub saturation_bytes_per_s: f64,
    /// Time step of the PDAM: P blocks per step at saturation, P·B / bandwidth; which is also
    /// one thread's time per block IO on the flat segment.
    pub step_s: f64,
    pub r2: f64,
    /// Completion times are for each thread reading this many bytes (seed 000: 10 GiB).
    pub per_thread_bytes: u64,
    /// The segmented fit of completion time against threads.
    pub fit: SegmentedFit,
    pub points: Vec<PdamPoint>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WriteProfile {
    /// Bytes written sequentially (the scratch file) in `chunk_bytes` writes, then synced.
    pub bytes: u64,
    pub chunk_bytes: u64,
    pub elapsed_s: f64,
    pub bytes_per_s: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FsyncProfile {
    /// fdatasync after appending 4 KiB to the file, as a log commit does it.
    pub mean_s: f64,
    pub median_s: f64,
    pub samples: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceProfile {
    pub version: u32,
    /// What was measured: a directory's file system or a simulated preset.
    pub device: String,
    /// Seconds since the Unix epoch when the profile was made.
    pub created_unix_s: u64,
    /// Made with the shorter `--quick` budgets.
    pub quick: bool,
    pub affine: AffineProfile,
    pub pdam: PdamProfile,
    pub write: WriteProfile,
    pub fsync: FsyncProfile,
    /// Seed 002's random reads by block size, 512 B to 64 KiB, uniform and power-law offsets
    /// (empty in profiles made before it, or made from models).
    #[serde(default)]
    pub blocks: Vec<BlockPoint>,
}

/// Below this R² on the fitted sizes, the affine model is not taken to describe the device.
pub const MIN_AFFINE_R2: f64 = 0.9;

impl DeviceProfile {
    /// Whether the affine fit describes the device well enough to choose node sizes with: R² of
    /// at least `MIN_AFFINE_R2`, and fitted sizes that reach past twice the half-bandwidth point
    /// 1/α = s/t, where the transfer t·x outweighs the setup s. A fit whose sizes all lie below
    /// it has not measured t: on a throttled disk, whose cost is max(1/IOPS, x/bandwidth), the
    /// large sizes that carry t are the ones a robust fit sets aside as "off the line". The
    /// error says why not.
    pub fn affine_holds(&self) -> std::result::Result<(), String> {
        let a = &self.affine;
        if a.points.is_empty() {
            // Made from a model (`from_models`, `builtin`), not fitted to measurements.
            return Ok(());
        }
        if a.shape == CostShape::Roofline {
            return Err(format!(
                "this device follows max(s, t·x) (s {:.1} ms, t {:.2} ns/B, R² {:.2}), not s + t·x: \
                 a throttled disk, IOPS-bound below {:.0} KiB and bandwidth-bound above",
                a.setup_s * 1e3,
                a.per_byte_s * 1e9,
                a.r2,
                a.half_bandwidth_bytes / 1024.0
            ));
        }
        if a.r2 < MIN_AFFINE_R2 {
            return Err(format!(
                "the affine fit of this profile has R² = {:.2} (below {MIN_AFFINE_R2}) on {} sizes",
                a.r2,
                a.fitted_sizes.len()
            ));
        }
        let reach = a.fitted_sizes.iter().copied().max().unwrap_or(0) as f64;
        if reach < 2.0 * a.half_bandwidth_bytes {
            return Err(format!(
                "the affine fit of this profile used sizes up to {:.0} KiB only, below twice its \
                 half-bandwidth point 1/α = {:.0} KiB, so its t is not measured{}",
                reach / 1024.0,
                a.half_bandwidth_bytes / 1024.0,
                if a.excluded_sizes.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (set aside as off the line: {})",
                        a.excluded_sizes
                            .iter()
                            .map(|b| format!("{} KiB", b >> 10))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }
            ));
        }
        Ok(())
    }

    /// The affine model the profile fitted.
    pub fn affine_model(&self) -> Affine {
        Affine::new(self.affine.setup_s, self.affine.per_byte_s)
    }

    /// The PDAM model the profile fitted.
    pub fn pdam_model(&self) -> Pdam {
        Pdam::new(
            self.pdam.parallelism,
            self.pdam.block_bytes,
            self.pdam.step_s,
        )
    }

    /// A simulated disk that behaves like this profile: its s and t, its P, its saturation
    /// bandwidth as the shared channel, its fsync cost.
    pub fn sim_model(&self) -> SimModel {
        SimModel {
            affine: self.affine_model(),
            parallelism: self.pdam.parallelism,
            bandwidth_bytes_per_s: Some(self.pdam.saturation_bytes_per_s),
            sync_s: self.fsync.mean_s,
            noise: 0.0,
            seed: 0,
        }
    }

    /// A profile written from models rather than measured: no points, R² 1. The tuner falls
    /// back to `builtin()` when there is no saved profile.
    pub fn from_models(
        device: &str,
        affine: Affine,
        pdam: Pdam,
        write_bytes_per_s: f64,
        fsync_s: f64,
    ) -> DeviceProfile {
        let per_thread = 10u64 << 30;
        let sat = pdam.saturation_bytes_per_s();
        let flat = per_thread as f64 * pdam.parallelism / sat;
        DeviceProfile {
            version: PROFILE_VERSION,
            device: device.to_string(),
            created_unix_s: 0,
            quick: false,
            affine: AffineProfile {
                setup_s: affine.setup_s,
                per_byte_s: affine.per_byte_s,
                alpha: affine.alpha(),
                half_bandwidth_bytes: affine.half_bandwidth_bytes(),
                r2: 1.0,
                fitted_sizes: Vec::new(),
                excluded_sizes: Vec::new(),
                tolerance: 0.0,
                points: Vec::new(),
                shape: CostShape::Affine,
            },
            pdam: PdamProfile {
                parallelism: pdam.parallelism,
                knee: pdam.parallelism,
                block_bytes: pdam.block_bytes,
                saturation_bytes_per_s: sat,
                step_s: pdam.step_s,
                r2: 1.0,
                per_thread_bytes: per_thread,
                fit: SegmentedFit {
                    hinge: crate::model::fit::Hinge::FlatFirst,
                    breakpoint: pdam.parallelism,
                    intercept: flat,
                    slope_before: 0.0,
                    slope_after: flat / pdam.parallelism,
                    r2: 1.0,
                },
                points: Vec::new(),
            },
            write: WriteProfile {
                bytes: 0,
                chunk_bytes: 0,
                elapsed_s: 0.0,
                bytes_per_s: write_bytes_per_s,
            },
            fsync: FsyncProfile {
                mean_s: fsync_s,
                median_s: fsync_s,
                samples: 0,
            },
            blocks: Vec::new(),
        }
    }

    /// The figures fio measured on the machine strata was built on (the `this-machine` preset),
    /// for when nothing better is known.
    pub fn builtin() -> DeviceProfile {
        let preset = SimPreset::find("this-machine").expect("the this-machine preset exists");
        let m = preset.model();
        let step = m.affine.cost(PDAM_BLOCK);
        DeviceProfile::from_models(
            "built-in: this machine's SSD as fio measured it",
            m.affine,
            Pdam::new(m.parallelism, PDAM_BLOCK, step),
            m.bandwidth_bytes_per_s.unwrap_or(1.0 / m.affine.per_byte_s),
            m.sync_s,
        )
    }

    /// Check that every figure the models use is meaningful.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.version > PROFILE_VERSION {
            return Err(format!(
                "profile format version {} is newer than this build reads ({PROFILE_VERSION})",
                self.version
            ));
        }
        let positive = [
            ("affine.setup_s", self.affine.setup_s),
            ("affine.per_byte_s", self.affine.per_byte_s),
            (
                "pdam.saturation_bytes_per_s",
                self.pdam.saturation_bytes_per_s,
            ),
            ("pdam.step_s", self.pdam.step_s),
        ];
        for (name, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("{name} must be a positive number, not {v}"));
            }
        }
        // 1/α = s/t, the IO size whose transfer takes as long as its setup: about 100 KiB for
        // SSDs, a few MiB for disks. Far beyond that the figures are a measurement gone wrong,
        // and the tuner's search for the best B+-tree node (Corollary 7, checked by brute force
        // over up to four times the optimum) grows with 1/α until it overflows.
        let half_bandwidth = self.affine.setup_s / self.affine.per_byte_s;
        if half_bandwidth > MAX_HALF_BANDWIDTH {
            return Err(format!(
                "affine.setup_s / affine.per_byte_s (1/α, {half_bandwidth:.3e} bytes) must be at \
                 most {MAX_HALF_BANDWIDTH:.0} bytes"
            ));
        }
        if !(self.pdam.parallelism.is_finite() && self.pdam.parallelism >= 1.0) {
            return Err(format!(
                "pdam.parallelism must be at least 1, not {}",
                self.pdam.parallelism
            ));
        }
        if self.pdam.block_bytes == 0 {
            return Err("pdam.block_bytes must be positive".into());
        }
        if !(self.fsync.mean_s.is_finite() && self.fsync.mean_s >= 0.0) {
            return Err(format!(
                "fsync.mean_s must be a non-negative number, not {}",
                self.fsync.mean_s
            ));
        }
        Ok(())
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a profile always serialises")
    }

    /// Parse and validate; `origin` names where the text came from, for the error.
    pub fn from_json(text: &str, origin: &str) -> Result<DeviceProfile> {
        let p: DeviceProfile = serde_json::from_str(text).map_err(|e| {
            Error::InvalidOptions(format!(
                "{origin} is not a strata device profile: {e} (make one with `strata profile`)"
            ))
        })?;
        p.validate()
            .map_err(|why| Error::InvalidOptions(format!("device profile {origin}: {why}")))?;
        Ok(p)
    }

    /// Read a profile from `path`.
    pub fn load(path: &Path) -> Result<DeviceProfile> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::io(format!("read device profile {shown}"), e))?;
        DeviceProfile::from_json(&text, &shown)
    }

    /// Write the profile to `path` (creating its directory), atomically: a temporary file
    /// renamed over the target, so a reader never sees half a profile.
    pub fn save(&self, path: &Path) -> Result<()> {
        let shown = path.display().to_string();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::io(format!("create directory {}", dir.display()), e))?;
        }
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, self.to_json())
            .map_err(|e| Error::io(format!("write device profile {}", tmp.display()), e))?;
        std::fs::rename(&tmp, path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            Error::io(format!("rename device profile into {shown}"), e)
        })
    }

    /// Where `strata profile` saves by default and where the tuner looks: $STRATA_PROFILE, else
    /// $XDG_CONFIG_HOME/strata/profile.json, else $HOME/.config/strata/profile.json. None when
    /// none of them is set.
    pub fn saved_path() -> Option<PathBuf> {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        if let Some(p) = var("STRATA_PROFILE") {
            return Some(PathBuf::from(p));
        }
        // The XDG spec says to ignore a relative XDG_CONFIG_HOME.
        if let Some(x) = var("XDG_CONFIG_HOME").map(PathBuf::from) {
            if x.is_absolute() {
                return Some(x.join("strata").join("profile.json"));
            }
        }
        var("HOME").map(|h| PathBuf::from(h).join(".config/strata/profile.json"))
    }

    /// The saved profile, if there is one. A saved profile that does not parse is an error, not
    /// silently ignored.
    pub fn load_saved() -> Result<Option<(PathBuf, DeviceProfile)>> {
        let Some(path) = DeviceProfile::saved_path() else {
            return Ok(None);
        };
        if !path.exists() {
            return Ok(None);
        }
        let p = DeviceProfile::load(&path)?;
        Ok(Some((path, p)))
    }
}
