//! The shape of the copy-on-write B-tree: the most entries a leaf holds, the most children an
//! internal node has, and the buffer pool's budget. Validated by `check`, kept in the
//! superblock.

use crate::error::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    pub leaf_entries: u32,
    pub fanout: u32,
    /// Byte budget of the buffer pool.
    pub cache_bytes: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            leaf_entries: 64,
            fanout: 64,
            cache_bytes: 64 << 20,
        }
    }
}

impl Config {
    /// Nodes that split all the time and a pool that evicts all the time, for tests.
    pub fn tiny() -> Config {
        Config {
            leaf_entries: 4,
            fanout: 4,
            cache_bytes: 16 << 10,
        }
    }

    pub fn check(&self) -> Result<()> {
        let bad = |why: &str| Err(Error::InvalidOptions(format!("CoW B-tree: {why}")));
        if !(2..=1 << 16).contains(&self.leaf_entries) {
            return bad("leaf_entries must be within 2..=65536");
        }
        if !(3..=1 << 16).contains(&self.fanout) {
            return bad("fanout must be within 3..=65536");
        }
        if self.cache_bytes < 4096 || self.cache_bytes as u64 > u32::MAX as u64 * 4096 {
            return bad("cache_bytes must be at least 4 KiB");
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
        c.fanout = 2;
        assert!(c.check().is_err());
        let mut c = Config::tiny();
        c.leaf_entries = 1;
        assert!(c.check().is_err());
    }
}
