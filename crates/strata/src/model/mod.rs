//! Device cost models (seed 000, section 2): DAM, affine and PDAM, each able to price one IO or a
//! sequence of IOs, plus the fitting (`fit`), optimal node sizes (`optimal`) and per-operation IO
//! predictions for the trees (`predict`) and the LSM-tree (`lsm`) built on them.
//!
//! - DAM: every IO moves whole blocks of B bytes and each block transfer costs the same.
//! - Affine: an IO of x bytes costs s + t·x seconds; normalised by s, 1 + αx with α = t/s. The
//!   half-bandwidth point is 1/α bytes.
//! - PDAM: per time step the device serves up to P IOs of B bytes; one client issuing one IO at a
//!   time gets no parallelism, P clients saturate the device at P·B bytes per step.
//!
//! Invariants: costs are in seconds and never negative; a model with non-positive or non-finite
//! parameters is a caller bug (profiles are validated when loaded, see `profile`). The existing
//! `Affine` API is used by the substrate (IoStats, SimDevice) and must keep its meaning.

pub mod fit;
pub mod lsm;
pub mod optimal;
pub mod predict;

use serde::{Deserialize, Serialize};

/// Anything that can price IOs issued one after another by a single client.
pub trait CostModel {
    /// Seconds one IO of `bytes` takes.
    fn io_s(&self, bytes: u64) -> f64;
    /// Seconds a sequence of IOs takes when each waits for the previous one (queue depth 1).
    fn seq_s(&self, ios: &[u64]) -> f64 {
        ios.iter().map(|&b| self.io_s(b)).sum()
    }
}

/// Affine cost model: an IO of `x` bytes costs `setup_s + x * per_byte_s` seconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Affine {
    pub setup_s: f64,
    pub per_byte_s: f64,
}

impl Affine {
    pub const fn new(setup_s: f64, per_byte_s: f64) -> Affine {
        Affine {
            setup_s,
            per_byte_s,
        }
    }

    /// The SSD of the machine this project runs on, as fio measured it:
    /// s ≈ 120 µs, t ≈ 0.94 ns/B (half-bandwidth point ≈ 128 KiB).
    pub const fn default_ssd() -> Affine {
        Affine::new(120e-6, 0.94e-9)
    }

    /// Seconds one IO of `bytes` costs.
    pub fn cost(&self, bytes: u64) -> f64 {
        self.setup_s + self.per_byte_s * bytes as f64
    }

    /// The same cost for a fractional byte count (expected sizes in predictions).
    pub fn cost_f(&self, bytes: f64) -> f64 {
        self.setup_s + self.per_byte_s * bytes
    }

    /// The paper's normalised cost of an IO, 1 + αx: the cost in units of one setup.
    pub fn normalised(&self, bytes: u64) -> f64 {
        self.cost(bytes) / self.setup_s
    }

    /// α = t / s: the normalised cost of one byte.
    pub fn alpha(&self) -> f64 {
        self.per_byte_s / self.setup_s
    }

    /// The IO size whose transfer time equals its setup time, 1/α bytes.
    pub fn half_bandwidth_bytes(&self) -> f64 {
        self.setup_s / self.per_byte_s
    }

    /// Bytes per second an IO of `bytes` achieves at queue depth 1.
    pub fn bandwidth(&self, bytes: u64) -> f64 {
        bytes as f64 / self.cost(bytes)
    }
}

impl Default for Affine {
    fn default() -> Self {
        Affine::default_ssd()
    }
}

impl CostModel for Affine {
    fn io_s(&self, bytes: u64) -> f64 {
        self.cost(bytes)
    }
}

/// DAM: IOs move blocks of `block_bytes`; each block transfer costs `block_s` seconds (1 if you
/// only count IOs). An IO of x bytes moves ceil(x / B) blocks, at least one.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dam {
    pub block_bytes: u64,
    pub block_s: f64,
}

impl Dam {
    pub fn new(block_bytes: u64, block_s: f64) -> Dam {
        Dam {
            block_bytes: block_bytes.max(1),
            block_s,
        }
    }

    /// Lemma 1's DAM for an affine device: B = 1/α (the half-bandwidth point), and each block
    /// costs what an affine IO of B bytes costs, 2s. Then affine(x) ≤ dam(x) ≤ 2·affine(x).
    pub fn from_affine(a: &Affine) -> Dam {
        let b = a.half_bandwidth_bytes().round().max(1.0) as u64;
        Dam::new(b, a.cost(b))
    }

    /// Block transfers one IO of `bytes` counts for.
    pub fn blocks(&self, bytes: u64) -> u64 {
        bytes.div_ceil(self.block_bytes).max(1)
    }
}

impl CostModel for Dam {
    fn io_s(&self, bytes: u64) -> f64 {
        self.blocks(bytes) as f64 * self.block_s
    }
}

/// PDAM: each time step of `step_s` seconds the device serves up to `parallelism` (P) IOs of
/// `block_bytes` (B). P may be fractional: it is the fitted effective parallelism (seed 000
/// Table 1 reports 2.9 .. 5.5), and time scales as the fluid limit max(1, k/P) steps for k
/// outstanding block IOs, which is also the steady state of P servers fed by a closed loop.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pdam {
    pub parallelism: f64,
    pub block_bytes: u64,
    pub step_s: f64,
}

impl Pdam {
    pub fn new(parallelism: f64, block_bytes: u64, step_s: f64) -> Pdam {
        Pdam {
            parallelism: parallelism.max(1.0),
            block_bytes: block_bytes.max(1),
            step_s,
        }
    }

    /// Bytes per second with at least P IOs always outstanding: P·B per step.
    pub fn saturation_bytes_per_s(&self) -> f64 {
        self.parallelism * self.block_bytes as f64 / self.step_s
    }

    fn blocks(&self, bytes: u64) -> f64 {
        bytes.div_ceil(self.block_bytes).max(1) as f64
    }

    /// Seconds for a set of IOs all outstanding at once (issued by enough clients):
    /// max(1, blocks / P) steps.
    pub fn concurrent_s(&self, ios: &[u64]) -> f64 {
        if ios.is_empty() {
            return 0.0;
        }
        let blocks: f64 = ios.iter().map(|&b| self.blocks(b)).sum();
        (blocks / self.parallelism).max(1.0) * self.step_s
    }

    /// Seconds for `threads` clients each issuing `per_thread` block IOs back to back: the
    /// benchmark of seed 000 section 4.1. Flat up to P threads, linear after.
    pub fn threads_s(&self, threads: u64, per_thread: u64) -> f64 {
        per_thread as f64 * (threads as f64 / self.parallelism).max(1.0) * self.step_s
    }
}

impl CostModel for Pdam {
    /// One client, one IO: the device spreads its blocks over P slots, so an IO of k blocks
    /// takes max(1, k/P) steps.
    fn io_s(&self, bytes: u64) -> f64 {
        (self.blocks(bytes) / self.parallelism).max(1.0) * self.step_s
    }
}

/// SplitMix64: a small, fast, seeded generator for benchmark offsets and simulated noise, so that
/// runs on a SimDevice repeat exactly.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in 0..n (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        // Multiply-shift keeps the bias below 2^-64 · n, far under anything a benchmark sees.
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// A draw with mean 0 and standard deviation 1 (uniform on ±√3: bounded, so a noisy cost can
    /// never go negative as long as the relative noise is below 1/√3).
    pub fn unit_noise(&mut self) -> f64 {
        (self.next_f64() * 2.0 - 1.0) * 3f64.sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dam_from_affine_is_within_factor_two_lemma_1() {
        let a = Affine::new(120e-6, 0.94e-9);
        let d = Dam::from_affine(&a);
        for bytes in [1u64, 512, 4096, 65536, 127_000, 128_000, 300_000, 1 << 24] {
            let (af, dm) = (a.cost(bytes), d.io_s(bytes));
            assert!(dm >= af * 0.999, "{bytes}: dam {dm} < affine {af}");
            assert!(dm <= 2.0 * af * 1.001, "{bytes}: dam {dm} > 2 affine {af}");
        }
    }

    #[test]
    fn pdam_is_flat_up_to_p_then_linear() {
        let p = Pdam::new(4.0, 65536, 1e-3);
        assert_eq!(p.threads_s(1, 10), p.threads_s(4, 10));
        assert!((p.threads_s(8, 10) - 2.0 * p.threads_s(4, 10)).abs() < 1e-12);
        assert!((p.saturation_bytes_per_s() - 4.0 * 65536.0 / 1e-3).abs() < 1e-6);
        // One client reading 8 blocks in one IO gets the parallelism: 2 steps, not 8.
        assert!((p.io_s(8 * 65536) - 2e-3).abs() < 1e-12);
        assert!((p.concurrent_s(&[65536; 6]) - 1.5e-3).abs() < 1e-12);
    }

    #[test]
    fn sequences_sum_single_ios() {
        let a = Affine::new(1e-4, 1e-9);
        let ios = [4096, 8192, 1 << 20];
        let want: f64 = ios.iter().map(|&b| a.cost(b)).sum();
        assert!((a.seq_s(&ios) - want).abs() < 1e-15);
        assert!((a.normalised(4096) - (1.0 + a.alpha() * 4096.0)).abs() < 1e-12);
    }
}
