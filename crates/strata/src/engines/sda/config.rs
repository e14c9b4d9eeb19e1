//! The shape of a stratified doubling array: the write buffer, the size of level 0's arrays
//! (level ℓ holds arrays of [base·2^ℓ, base·2^(ℓ+1)) entries), the block size of an array's
//! parts and the Bloom filter's bits per key, kept in the superblock; and the memory for the
//! arrays' heads and a block cache, a choice of each open (not kept). Validated by `check`.

use crate::error::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    /// Bytes of entries the write buffer holds before it is flushed as arrays of level 0.
    pub buffer_bytes: usize,
    /// Entries of a level-0 array (the `base` of the doubling).
    pub level0_entries: u32,
    /// Target bytes of one block (part) of an array; a key's entries share a block.
    pub block_bytes: usize,
    /// Bloom filter bits per key of each array (0: no filter).
    pub filter_bits: f64,
    /// Split a merged array that is not dense into dense pieces (seed 003's density
    /// amplification). Off only to measure what it buys (seed 003 §8's "SDA without density
    /// amplification"): then every flush and merge writes one array, density is not promised
    /// and a read may scan many entries its version cannot see.
    pub density_amplification: bool,
    /// Memory for the arrays' heads (filters and block directories, kept whole), the runs
    /// range scans keep, and a block cache of the smallest levels in what they leave
    /// (`cache`). Not in the superblock: each open chooses it (`VersionedDb` takes it from
    /// its options when they name the SDA).
    pub cache_bytes: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            buffer_bytes: 4 << 20,
            level0_entries: 4096,
            block_bytes: 16 << 10,
            filter_bits: 10.0,
            density_amplification: true,
            cache_bytes: 4 << 20,
        }
    }
}

impl Config {
    /// A configuration that flushes and merges all the time, for tests.
    pub fn tiny() -> Config {
        Config {
            buffer_bytes: 512,
            level0_entries: 4,
            block_bytes: 256,
            filter_bits: 10.0,
            density_amplification: true,
            cache_bytes: 16 << 10,
        }
    }

    pub fn check(&self) -> Result<()> {
        let bad = |why: &str| Err(Error::InvalidOptions(format!("SDA: {why}")));
        if !(64..=1 << 30).contains(&self.buffer_bytes) {
            return bad("buffer_bytes must be within 64 B..=1 GiB");
        }
        if !(1..=1 << 24).contains(&self.level0_entries) {
            return bad("level0_entries must be within 1..=2^24");
        }
        if !(64..=1 << 24).contains(&self.block_bytes) {
            return bad("block_bytes must be within 64 B..=16 MiB");
        }
        if !(0.0..=64.0).contains(&self.filter_bits) {
            return bad("filter_bits must be within 0..=64");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_tiny_pass_and_nonsense_is_refused() {
        Config::default().check().unwrap();
        Config::tiny().check().unwrap();
        let mut c = Config::tiny();
        c.level0_entries = 0;
        assert!(c.check().is_err());
        let mut c = Config::tiny();
        c.filter_bits = f64::NAN;
        assert!(c.check().is_err());
    }
}
