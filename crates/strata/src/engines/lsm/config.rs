//! The LSM-tree's configuration: the merge policy, its size ratio T, the memtable, table and
//! block sizes, and the filter memory; the limits each must keep. Fixed when the tree is created
//! and recorded in its metadata (`format`).

use super::*;

/// How runs merge as they move down the levels (Dostoevsky's design space, at its corners and
/// one point between).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// One run per level below level 0: an arriving run merges with the overlapping part of the
    /// next level, table by table. Least space and fewest runs to read; the most rewriting.
    Leveled,
    /// Up to T runs per level, merged together into one run of the next level when full. Each
    /// entry is written once per level; a lookup may probe T runs per level.
    Tiered,
    /// Tiered above the last level, one run at the last (Dostoevsky's lazy leveling): about
    /// tiered's writes with leveled's space.
    LazyLeveled,
}

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::Leveled => "leveled",
            Policy::Tiered => "tiered",
            Policy::LazyLeveled => "lazy-leveled",
        }
    }
    pub(super) fn byte(self) -> u8 {
        match self {
            Policy::Leveled => 0,
            Policy::Tiered => 1,
            Policy::LazyLeveled => 2,
        }
    }
    pub(super) fn from_byte(b: u8) -> Option<Policy> {
        [Policy::Leveled, Policy::Tiered, Policy::LazyLeveled]
            .into_iter()
            .find(|p| p.byte() == b)
    }
}

impl std::str::FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Policy, String> {
        [Policy::Leveled, Policy::Tiered, Policy::LazyLeveled]
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("unknown LSM policy {s:?}: leveled, tiered or lazy-leveled"))
    }
}

/// An LSM-tree's shape, fixed at creation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    pub policy: Policy,
    /// T: each level holds T times the one above (leveled), or up to T runs (tiered).
    pub size_ratio: u32,
    /// Level 0 is merged down when it holds this many runs (tiered and lazy leveling use T).
    pub l0_runs: u32,
    /// A memtable this large is written out as a run of level 0. Part of the cache budget.
    pub memtable_bytes: usize,
    /// Merges cut their output into tables of about this size: the unit of partial merges.
    pub table_bytes: usize,
    /// Tables are cut into blocks of about this size, each read on its own by a point query.
    pub block_bytes: usize,
    /// Bloom filter bits per key, averaged over all entries.
    pub filter_bits: f64,
    /// Share the filter bits out by level so as to minimise the expected false positives
    /// (Monkey) instead of the same bits for every run.
    pub monkey: bool,
    /// Leveled only: size the levels from the last one (RocksDB's
    /// `level_compaction_dynamic_level_bytes`; `policy::capacities`) instead of from level 0
    /// down, so that the last level holds most of the data. Trees made before it was recorded
    /// (metadata version 2 and older) open with it off.
    pub dynamic_levels: bool,
}

/// Leveled, T = 10, 8 level-0 runs, an 8 MiB memtable, 4 MiB tables of 4 KiB blocks, 10
/// filter bits per key shared out by Monkey. 4 KiB blocks because a point read that misses the
/// pool copies, checksums and searches one whole block (docs/lsm.md has the measurement).
/// 8 level-0 runs, not RocksDB's 4 files, because a flushed run is about two thirds of the
/// memtable's charge (which counts its map's overhead): level 0 merges down in batches twice
/// as large into a level 1 twice as large, and a load writes a third less (docs/lsm.md).
pub const DEFAULT_CONFIG: Config = Config {
    policy: Policy::Leveled,
    size_ratio: 10,
    l0_runs: 8,
    memtable_bytes: 8 << 20,
    table_bytes: 4 << 20,
    block_bytes: 4 << 10,
    filter_bits: 10.0,
    monkey: true,
    dynamic_levels: true,
};

impl Default for Config {
    fn default() -> Config {
        DEFAULT_CONFIG
    }
}

impl Config {
    /// The default shape with `policy` and T.
    pub fn with(policy: Policy, size_ratio: u32) -> Config {
        Config {
            policy,
            size_ratio,
            l0_runs: match policy {
                Policy::Leveled => DEFAULT_CONFIG.l0_runs,
                _ => size_ratio,
            },
            ..DEFAULT_CONFIG
        }
    }

    /// The default shape for a memory budget of `cache_bytes`: a memtable of a quarter of it
    /// (from 1 MiB to 64 MiB, RocksDB's default write buffer), the rest the buffer pool.
    pub fn for_cache(cache_bytes: usize) -> Config {
        Config {
            memtable_bytes: (cache_bytes / 4).clamp(1 << 20, 64 << 20),
            ..DEFAULT_CONFIG
        }
    }

    pub fn check(&self) -> Result<()> {
        let bad = |why: String| Err(Error::InvalidOptions(why));
        if !(2..=64).contains(&self.size_ratio) {
            return bad(format!(
                "LSM size ratio must be from 2 to 64, not {}",
                self.size_ratio
            ));
        }
        if !(1..=64).contains(&self.l0_runs) {
            return bad(format!(
                "LSM level-0 run count must be from 1 to 64, not {}",
                self.l0_runs
            ));
        }
        if !(64 << 10..=1 << 30).contains(&self.memtable_bytes) {
            return bad(format!(
                "LSM memtable size must be from 64 KiB to 1 GiB, not {}",
                self.memtable_bytes
            ));
        }
        if !(64 << 10..=1 << 30).contains(&self.table_bytes) {
            return bad(format!(
                "LSM table size must be from 64 KiB to 1 GiB, not {}",
                self.table_bytes
            ));
        }
        if !(1 << 10..=4 << 20).contains(&self.block_bytes) || self.block_bytes > self.table_bytes {
            return bad(format!(
                "LSM block size must be from 1 KiB to 4 MiB and at most the table size, not {}",
                self.block_bytes
            ));
        }
        if !(0.0..=64.0).contains(&self.filter_bits) {
            return bad(format!(
                "LSM filter bits per key must be from 0 to 64, not {}",
                self.filter_bits
            ));
        }
        Ok(())
    }

    /// Runs level 0 holds before it is merged down.
    pub(super) fn l0_trigger(&self) -> usize {
        match self.policy {
            Policy::Leveled => self.l0_runs as usize,
            Policy::Tiered | Policy::LazyLeveled => self.size_ratio as usize,
        }
    }

    /// Bytes level `i` ≥ 1 holds before it is merged down (leveled), or that its runs reach
    /// before the last level is pushed one level deeper (lazy leveling): level 0's worth of
    /// memtables times T^(i-1), times T once more for a tiered level's T runs. With
    /// `dynamic_levels` the capacities come from the last level instead
    /// (`policy::capacities`), and `level_capacity(1)` is the least any level above it gets.
    pub(crate) fn level_capacity(&self, i: usize) -> u64 {
        let t = self.size_ratio as u64;
        let base = self.memtable_bytes as u64 * self.l0_trigger() as u64;
        let mut cap = base;
        for _ in 1..i {
            cap = cap.saturating_mul(t);
        }
        match self.policy {
            Policy::Leveled => cap,
            Policy::Tiered | Policy::LazyLeveled => cap.saturating_mul(t),
        }
    }

    /// Levels are sized from the last one: leveled with `dynamic_levels`.
    pub(crate) fn dynamic(&self) -> bool {
        self.dynamic_levels && self.policy == Policy::Leveled
    }

    /// One line for stats and reports.
    pub fn describe(&self) -> String {
        format!(
            "{}{} T={} memtable {} KiB, tables {} KiB, blocks {} KiB, {} filter bits/key{}",
            self.policy.name(),
            if self.dynamic() {
                " (dynamic levels)"
            } else {
                ""
            },
            self.size_ratio,
            self.memtable_bytes >> 10,
            self.table_bytes >> 10,
            self.block_bytes >> 10,
            self.filter_bits,
            if self.monkey { " (Monkey)" } else { "" }
        )
    }
}
