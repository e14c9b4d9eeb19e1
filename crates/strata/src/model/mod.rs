//! Device cost models. The affine model prices an IO of x bytes at s + t·x seconds.
//!
//! This is the part the storage substrate needs (pricing IOs for IoStats and SimDevice);
//! fitting and the PDAM model live beside it as they are built.

/// Affine cost model: an IO of `x` bytes costs `setup_s + x * per_byte_s` seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
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

    /// α = t / s: the normalised cost of one byte.
    pub fn alpha(&self) -> f64 {
        self.per_byte_s / self.setup_s
    }

    /// The IO size whose transfer time equals its setup time, 1/α bytes.
    pub fn half_bandwidth_bytes(&self) -> f64 {
        self.setup_s / self.per_byte_s
    }
}

impl Default for Affine {
    fn default() -> Self {
        Affine::default_ssd()
    }
}
