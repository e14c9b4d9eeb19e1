//! How far each model is from what the profiler measured: the affine model and the DAM against
//! the latency of one IO by size (queue depth 1), the PDAM and the DAM against the time p threads
//! take. `strata profile` and `strata report` print these beside the measurements, so that a
//! reader sees why the refined models matter (seed 000 §4: the DAM is off by up to 2× across IO
//! sizes and by about P for parallelism).
//!
//! The DAM here is Lemma 1's for the profile's affine fit (`Dam::from_affine`): blocks of
//! B = 1/α bytes, each costing what an affine IO of B costs, 2s. It has no parallelism, so p
//! threads' IOs are served one after another. One DAM prices both benchmarks.
//!
//! Invariants: an error is measured / model − 1 (the sign says which way the model is off, as in
//! the tables), a factor is max(measured / model, model / measured) ≥ 1; a profile without
//! measured points (made from models) has no errors and worst factors of 1.

use crate::model::{CostModel, Dam};

use super::DeviceProfile;

/// One size of the affine benchmark: measured mean latency against each model's.
#[derive(Clone, Debug, PartialEq)]
pub struct SizeErrors {
    pub bytes: u64,
    pub measured_s: f64,
    pub affine_s: f64,
    pub dam_s: f64,
}

/// One thread count of the PDAM benchmark: time for every thread to read its share, measured
/// against each model's.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadErrors {
    pub threads: u32,
    pub measured_s: f64,
    pub pdam_s: f64,
    pub dam_s: f64,
}

/// measured / model − 1.
pub fn error(measured: f64, model: f64) -> f64 {
    measured / model - 1.0
}

/// How many times off the model is, either way (1 when exact).
pub fn factor(measured: f64, model: f64) -> f64 {
    (measured / model).max(model / measured)
}

#[derive(Clone, Debug, PartialEq)]
pub struct ModelErrors {
    pub dam: Dam,
    pub sizes: Vec<SizeErrors>,
    pub threads: Vec<ThreadErrors>,
}

impl ModelErrors {
    /// Every model priced at every measured point of `p`.
    pub fn of(p: &DeviceProfile) -> ModelErrors {
        let affine = p.affine_model();
        let dam = Dam::from_affine(&affine);
        let pdam = p.pdam_model();
        let d = &p.pdam;
        let blocks = d.per_thread_bytes / d.block_bytes.max(1);
        let sizes = p
            .affine
            .points
            .iter()
            .map(|q| SizeErrors {
                bytes: q.bytes,
                measured_s: q.mean_s,
                affine_s: affine.cost(q.bytes),
                dam_s: dam.io_s(q.bytes),
            })
            .collect();
        let threads = d
            .points
            .iter()
            .map(|q| ThreadErrors {
                threads: q.threads,
                measured_s: q.completion_s,
                pdam_s: pdam.threads_s(q.threads as u64, blocks),
                // No parallelism: all p·blocks reads one after another.
                dam_s: q.threads as f64 * blocks as f64 * dam.io_s(d.block_bytes),
            })
            .collect();
        ModelErrors {
            dam,
            sizes,
            threads,
        }
    }

    /// The largest factor over the sizes: (affine, DAM).
    pub fn worst_by_size(&self) -> (f64, f64) {
        self.sizes.iter().fold((1.0, 1.0), |(a, d), s| {
            (
                a.max(factor(s.measured_s, s.affine_s)),
                d.max(factor(s.measured_s, s.dam_s)),
            )
        })
    }

    /// The largest factor over the thread counts: (PDAM, DAM).
    pub fn worst_by_threads(&self) -> (f64, f64) {
        self.threads.iter().fold((1.0, 1.0), |(p, d), t| {
            (
                p.max(factor(t.measured_s, t.pdam_s)),
                d.max(factor(t.measured_s, t.dam_s)),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Affine, Pdam};
    use crate::profile::{AffinePoint, PdamPoint};

    /// A device that is exactly affine (s 100 µs, t 1 ns/B: 1/α = 100,000 B) and exactly PDAM
    /// (P 4, 64 KiB blocks, a step of one 64 KiB read), measured at every size 4 KiB .. 16 MiB
    /// and 1 .. 64 threads.
    fn synthetic() -> DeviceProfile {
        let a = Affine::new(100e-6, 1e-9);
        let pdam = Pdam::new(4.0, 64 << 10, a.cost(64 << 10));
        let mut p = DeviceProfile::from_models("synthetic", a, pdam, 1e9, 1e-3);
        p.affine.points = (12..=24)
            .map(|k| {
                let bytes = 1u64 << k;
                AffinePoint {
                    bytes,
                    ios: 16,
                    mean_s: a.cost(bytes),
                    median_s: a.cost(bytes),
                    stddev_s: 0.0,
                    fitted: true,
                }
            })
            .collect();
        let blocks = p.pdam.per_thread_bytes / p.pdam.block_bytes;
        p.pdam.points = (0..=6)
            .map(|k| {
                let threads = 1u32 << k;
                PdamPoint {
                    threads,
                    ios: 1000,
                    elapsed_s: 1.0,
                    bytes_per_s: 0.0,
                    completion_s: pdam.threads_s(threads as u64, blocks),
                    passes_bytes_per_s: Vec::new(),
                }
            })
            .collect();
        p
    }

    #[test]
    fn the_dam_is_off_by_up_to_two_across_sizes_and_by_p_across_threads() {
        let p = synthetic();
        let e = ModelErrors::of(&p);
        assert_eq!(e.dam.block_bytes, 100_000);
        assert!((e.dam.block_s - 200e-6).abs() < 1e-15);
        // The refined models are exact on their own data.
        let (affine, dam) = e.worst_by_size();
        assert!((affine - 1.0).abs() < 1e-12, "{affine}");
        // 4 KiB: one block, 2s, against s + 4096 t.
        let small = &e.sizes[0];
        assert_eq!(small.bytes, 4096);
        assert!((error(small.measured_s, small.dam_s) - (104.096 / 200.0 - 1.0)).abs() < 1e-9);
        // 16 MiB: ⌈16,777,216 / 100,000⌉ = 168 blocks of 2s, against s + 16,777,216 t.
        let big = e.sizes.last().unwrap();
        assert!((big.dam_s - 168.0 * 200e-6).abs() < 1e-12);
        assert!((factor(big.measured_s, big.dam_s) - 33.6 / 16.877216).abs() < 1e-9);
        // Lemma 1: never more than 2× off, and nearly 2× at both ends.
        assert!(dam <= 2.0 && dam > 1.9, "{dam}");

        let (pdam, dam) = e.worst_by_threads();
        assert!((pdam - 1.0).abs() < 1e-12, "{pdam}");
        // One thread: the DAM prices a 64 KiB read at one block, 200 µs, against 165.536 µs.
        // From P threads on, the device serves 4 at once and the DAM still one: 4× more.
        let one = 200.0 / 165.536;
        let t1 = &e.threads[0];
        assert!((t1.dam_s / t1.measured_s - one).abs() < 1e-9);
        assert!((dam - 4.0 * one).abs() < 1e-9, "{dam}");
    }

    #[test]
    fn a_profile_made_from_models_has_no_errors() {
        let p = DeviceProfile::builtin();
        let e = ModelErrors::of(&p);
        assert!(e.sizes.is_empty() && e.threads.is_empty());
        assert_eq!(e.worst_by_size(), (1.0, 1.0));
        assert_eq!(e.worst_by_threads(), (1.0, 1.0));
    }
}
