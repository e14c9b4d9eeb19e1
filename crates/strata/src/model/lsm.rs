//! The LSM-tree's cost model: its shape in steady state, write, read and space amplification,
//! Monkey's allocation of filter memory (Dayan, Athanassoulis, Idreos, SIGMOD 2017), and the
//! affine cost of an insert, a point query and a range query (Dostoevsky's design space, Dayan
//! and Idreos, SIGMOD 2018, priced with the affine model instead of in IOs).
//!
//! The shape is the engine's (`engines::lsm`, whose parameters are inputs here; `tune/pairing`
//! tests that they agree): a memtable of M bytes flushes as one run of level 0; level 0 merges
//! down at `l0_runs` runs; level i ≥ 1 holds M·l0_runs·T^(i-1) bytes (leveled: one run), or T
//! runs of that size each (tiered, and lazy leveling above its last level). With dynamic levels
//! (leveled) the levels count the same, but are sized from the last: each level above it holds
//! a T-th of the one below, none less than the base M·l0_runs (`LsmInput::level_bytes`).
//!
//! Write amplification counts every byte written per byte inserted: the log (1), the flush (1),
//! and the merges. Leveled merges are partial (a table at a time into the overlapping tables of
//! the next level, each level kept at its capacity), so a byte entering level i+1 rewrites about
//! T bytes there: 1 + T per level from level 2 on, 2 into level 1 (level 0 is one level-1
//! capacity), and 1 + r into the last level, r its size over the one above's. Tiered: each byte
//! is written once per level. Lazy leveling: once per level above the last, 1 + r into it.
//!
//! Invariants: every figure is finite and non-negative for positive inputs; more filter bits
//! never raise a false-positive rate; Monkey's false positives never exceed uniform bits'.

use serde::{Deserialize, Serialize};

use super::predict::OpCost;
use super::Affine;

/// How runs merge (the engine's `Policy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Merging {
    Leveled,
    Tiered,
    LazyLeveled,
}

impl Merging {
    pub fn name(self) -> &'static str {
        match self {
            Merging::Leveled => "leveled",
            Merging::Tiered => "tiered",
            Merging::LazyLeveled => "lazy-leveled",
        }
    }
}

/// Bytes a message takes in a table beyond its key and value: in a format-2 block, a tag and
/// varints for the shared and unshared key lengths, the sequence and the value's length (the
/// prefix a key shares with the one before about pays for a sequence above 127).
pub const ENTRY_OVERHEAD: f64 = 5.0;

/// An LSM-tree's shape and its data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LsmInput {
    pub merging: Merging,
    /// T.
    pub size_ratio: f64,
    /// Runs level 0 holds before it merges down (T for tiered and lazy leveling).
    pub l0_runs: f64,
    pub memtable_bytes: f64,
    pub table_bytes: f64,
    pub block_bytes: f64,
    /// Filter bits per entry, on average over all runs.
    pub filter_bits: f64,
    /// Share the bits out by Monkey's rule (else the same bits for every run).
    pub monkey: bool,
    /// Leveled with levels sized from the last (the engine's `dynamic_levels`).
    #[serde(default)]
    pub dynamic_levels: bool,
    pub records: u64,
    pub key_bytes: u64,
    pub value_bytes: u64,
    /// The memory budget: memtable, then table heads (filters and indexes), then blocks.
    pub cache_bytes: u64,
    /// Records a range query returns.
    pub range_items: u64,
    /// Bytes a load from empty makes the flushes and merges write per byte of key and value
    /// inserted, when known from the engine's policy played out on the load
    /// (`tune::lsm_input`); the write
    /// amplification then uses it instead of the full-level estimate, which a load from empty
    /// does not reach.
    #[serde(default)]
    pub load_write_bytes: Option<f64>,
}

/// One level in steady state, full: its runs and their entries.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LevelShape {
    pub runs: f64,
    pub entries_per_run: f64,
    /// Filter bits per key of its runs.
    pub bits: f64,
    /// False-positive rate of one of its runs.
    pub fpr: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LsmPrediction {
    pub merging: Merging,
    pub size_ratio: f64,
    /// Levels below level 0.
    pub levels: u32,
    /// Level 0 first.
    pub shape: Vec<LevelShape>,
    /// Bytes written per byte inserted, the log included: the estimate and its range.
    pub write_amp: f64,
    pub write_amp_range: (f64, f64),
    /// Expected false-positive block reads of a lookup that passes every run (a miss).
    pub false_positives: f64,
    /// Device reads of a point query with nothing cached: one block, plus false positives.
    pub read_amp: f64,
    /// Entries stored per live entry at worst (`LsmInput::space_amp`).
    pub space_amp: f64,
    /// Fraction of data blocks the cache holds.
    pub blocks_cached: f64,
    pub insert: OpCost,
    pub point: OpCost,
    pub range: OpCost,
    pub derivation: String,
}

/// A Bloom filter's false-positive rate at `bits` per key with the best probe count.
pub fn fpr(bits: f64) -> f64 {
    (-bits.max(0.0) * std::f64::consts::LN_2.powi(2))
        .exp()
        .min(1.0)
}

/// Bits per key for a false-positive rate `p` (0 < p ≤ 1).
pub fn bits_for_fpr(p: f64) -> f64 {
    (-p.clamp(f64::MIN_POSITIVE, 1.0).ln() / std::f64::consts::LN_2.powi(2)).max(0.0)
}

/// Monkey: bits per key for each group of runs, `groups` being (entries per run, runs), that
/// minimise the expected false positives Σ runs·fpr subject to Σ entries·runs·bits =
/// `total_bits`. At the optimum (Lagrange) each run's false-positive rate is proportional to its
/// entries, capped at 1 (no filter); λ is found by bisection on the memory it uses.
pub fn monkey_bits(groups: &[(f64, f64)], total_bits: f64) -> Vec<f64> {
    let used = |lam: f64| -> f64 {
        groups
            .iter()
            .map(|&(e, r)| e * r * bits_for_fpr((lam * e).min(1.0)))
            .sum()
    };
    if groups.is_empty() || total_bits <= 0.0 {
        return vec![0.0; groups.len()];
    }
    // Memory falls as λ grows; bisect in log space.
    let (mut lo, mut hi) = (1e-40f64, 1e10f64);
    for _ in 0..200 {
        let mid = (lo * hi).sqrt();
        if used(mid) > total_bits {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    groups
        .iter()
        .map(|&(e, _)| bits_for_fpr((hi * e).min(1.0)))
        .collect()
}

/// Σ runs·fpr(bits) over the groups.
pub fn false_positives(groups: &[(f64, f64)], bits: &[f64]) -> f64 {
    groups
        .iter()
        .zip(bits)
        .map(|(&(_, r), &b)| r * fpr(b))
        .sum()
}

impl LsmInput {
    pub fn entry_bytes(&self) -> f64 {
        (self.key_bytes + self.value_bytes) as f64 + ENTRY_OVERHEAD
    }

    /// Bytes level `i` ≥ 1 holds when full (the engine's `Config::level_capacity`).
    pub fn level_capacity(&self, i: u32) -> f64 {
        let base = self.memtable_bytes * self.l0_runs;
        let cap = base * self.size_ratio.powi(i as i32 - 1);
        match self.merging {
            Merging::Leveled => cap,
            _ => cap * self.size_ratio,
        }
    }

    /// Levels below level 0 the data takes, and the bytes of the last.
    pub fn levels(&self) -> (u32, f64) {
        let mut left = self.records as f64 * self.entry_bytes();
        let mut i = 1;
        loop {
            let cap = self.level_capacity(i);
            if left <= cap || i >= 40 {
                return (i, left.max(0.0));
            }
            left -= cap;
            i += 1;
        }
    }

    /// Whether the levels are sized from the last (leveled only, as in the engine).
    fn dynamic(&self) -> bool {
        self.dynamic_levels && self.merging == Merging::Leveled
    }

    /// Bytes of each level below level 0 (index 0 is level 1), every level at its capacity but
    /// the last, which holds the rest. With dynamic levels the last level's bytes S solve
    /// S + Σ_k max(S/T^k, base) = data, the levels above it each a T-th of the one below and
    /// at least the base, as the engine's `policy::capacities` sizes them.
    pub fn level_bytes(&self) -> Vec<f64> {
        let (levels, last_bytes) = self.levels();
        if !self.dynamic() {
            return (1..=levels)
                .map(|i| {
                    if i == levels {
                        last_bytes
                    } else {
                        self.level_capacity(i)
                    }
                })
                .collect();
        }
        let data = self.records as f64 * self.entry_bytes();
        let base = self.level_capacity(1);
        let t = self.size_ratio;
        let shape = |s: f64| -> Vec<f64> {
            let mut v: Vec<f64> = (1..levels)
                .map(|i| (s / t.powi((levels - i) as i32)).max(base))
                .collect();
            v.push(s);
            v
        };
        // The total grows with S: bisect for the S that holds the data.
        let (mut lo, mut hi) = (0.0, data.max(1.0));
        for _ in 0..100 {
            let mid = 0.5 * (lo + hi);
            if shape(mid).iter().sum::<f64>() > data {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        shape(lo)
    }

    /// (entries per run, runs) by level, level 0 first, every level full but the last.
    pub fn groups(&self) -> Vec<(f64, f64)> {
        let e = self.entry_bytes();
        let t = self.size_ratio;
        let (levels, _) = self.levels();
        let sizes = self.level_bytes();
        let mut g = vec![(self.memtable_bytes / e, self.l0_runs)];
        for i in 1..=levels {
            let bytes = sizes[i as usize - 1];
            let runs = match self.merging {
                Merging::Leveled => 1.0,
                Merging::LazyLeveled if i == levels => 1.0,
                // A tiered level's runs are each a T-th of its capacity.
                _ => (bytes / (self.level_capacity(i) / t)).ceil().max(1.0),
            };
            g.push((bytes / e / runs, runs));
        }
        g
    }

    /// Bits per key by level: Monkey's, or the same everywhere.
    pub fn bits(&self, groups: &[(f64, f64)]) -> Vec<f64> {
        if !self.monkey {
            return vec![self.filter_bits; groups.len()];
        }
        let entries: f64 = groups.iter().map(|(e, r)| e * r).sum();
        monkey_bits(groups, self.filter_bits * entries)
    }

    /// Write amplification: (estimate, low, high), the log included: the load's own figure
    /// when known (`load_write_bytes`), within the full-level range.
    pub fn write_amp(&self) -> (f64, f64, f64) {
        let (est, lo, hi) = self.full_level_write_amp();
        match self.load_write_bytes {
            Some(x) => (1.0 + x, lo.min(1.0 + x), hi.max(1.0 + x)),
            None => (est, lo, hi),
        }
    }

    /// Write amplification with every level but the last full: (estimate, low, high).
    fn full_level_write_amp(&self) -> (f64, f64, f64) {
        let t = self.size_ratio;
        let (levels, _) = self.levels();
        let sizes = self.level_bytes();
        let last = sizes[levels as usize - 1];
        let above = if levels >= 2 {
            sizes[levels as usize - 2]
        } else {
            self.memtable_bytes * self.l0_runs
        };
        // The last level's size over the one above it: what a byte entering it rewrites.
        let r = (last / above).clamp(0.0, t);
        let middle = levels.saturating_sub(1) as f64;
        match self.merging {
            Merging::Leveled => {
                // Into level 1 (when it is not the last): 1 + its size, about level 0's.
                let l = levels as f64;
                let (est, lo) = if levels == 1 {
                    (3.0 + r, 3.0 + r / 2.0)
                } else {
                    let mid = (l - 2.0).max(0.0);
                    (
                        4.0 + mid * (1.0 + t) + 1.0 + r,
                        4.0 + mid * (1.0 + t / 2.0) + 1.0 + r / 2.0,
                    )
                };
                (est, lo, (2.0 + (1.0 + t) * l).max(est))
            }
            Merging::Tiered => {
                let est = 2.0 + levels as f64;
                (est, est, est)
            }
            Merging::LazyLeveled => {
                let est = 2.0 + middle + 1.0 + r;
                (est, 2.0 + middle + 1.0 + r / 2.0, 2.0 + middle + 1.0 + t)
            }
        }
    }

    /// Space amplification in entries stored per live entry, at worst: every key of the
    /// upper levels an obsolete copy of one below (leveled, lazy leveling: 1 + the upper levels
    /// over the last), or each of the last level's runs a copy of the same keys (tiered).
    pub fn space_amp(&self) -> f64 {
        let groups = self.groups();
        let (last_entries, last_runs) = *groups.last().expect("at least level 0");
        let last = last_entries * last_runs;
        let upper: f64 = groups[..groups.len() - 1].iter().map(|(e, r)| e * r).sum();
        match self.merging {
            Merging::Tiered => last_runs.max(1.0) + upper / last.max(1.0),
            _ => 1.0 + upper / last.max(1.0),
        }
    }
}

/// Predict an LSM-tree's amplifications and operation costs on device `m`.
pub fn lsm(inp: &LsmInput, m: &Affine) -> LsmPrediction {
    let e = inp.entry_bytes();
    let groups = inp.groups();
    let bits = inp.bits(&groups);
    let fp = false_positives(&groups, &bits);
    let (levels, _) = inp.levels();
    let (wa, wa_lo, wa_hi) = inp.write_amp();
    let n = inp.records as f64;
    let data = n * e;
    // Memory: the memtable, then every table head (filter and block index), then blocks.
    let heads: f64 = groups
        .iter()
        .zip(&bits)
        .map(|(&(ent, r), &b)| ent * r * b / 8.0)
        .sum::<f64>()
        + data / inp.block_bytes * (inp.key_bytes as f64 + 22.0);
    let left = inp.cache_bytes as f64 - inp.memtable_bytes - heads;
    // Blocks are cached as their bytes on disk (the engine's charge).
    let cached = (left / data).clamp(0.0, 1.0);
    let block_io = m.cost_f(page(inp.block_bytes));
    let miss = 1.0 - cached;
    // A lookup of a present key (in the last level, the common case) reads its block and the
    // false positives of the runs above.
    let last_fpr = groups
        .last()
        .zip(bits.last())
        .map_or(0.0, |(&(_, r), &b)| r * fpr(b));
    let point_reads = miss * (1.0 + fp - last_fpr);
    let point = OpCost {
        reads: point_reads,
        read_bytes: point_reads * page(inp.block_bytes),
        seconds: point_reads * block_io,
        ..OpCost::default()
    };
    // An insert writes WA − 1 bytes (the log is the Db's) in table-sized IOs and merges read
    // all but the flushed byte back.
    let table_io = |bytes: f64| bytes / inp.table_bytes * m.setup_s + bytes * m.per_byte_s;
    let written = (wa - 1.0) * e;
    let reread = (wa - 2.0).max(0.0) * e;
    let insert = OpCost {
        reads: reread / inp.table_bytes,
        read_bytes: reread,
        writes: written / inp.table_bytes,
        write_bytes: written,
        seconds: table_io(written) + table_io(reread),
        cpu_seconds: 0.0,
    };
    // A range query seeks in every run and reads its share of the records.
    let runs: f64 = groups.iter().map(|(_, r)| r).sum();
    let range_reads = miss * (runs + inp.range_items as f64 * e / inp.block_bytes);
    let range = OpCost {
        reads: range_reads,
        read_bytes: range_reads * page(inp.block_bytes),
        seconds: range_reads * block_io,
        ..OpCost::default()
    };
    let shape: Vec<LevelShape> = groups
        .iter()
        .zip(&bits)
        .map(|(&(ent, r), &b)| LevelShape {
            runs: r,
            entries_per_run: ent,
            bits: b,
            fpr: fpr(b),
        })
        .collect();
    let derivation = format!(
        "{} T={}: {} levels below level 0, {:.0} runs; WA {:.2} (range {:.2}..{:.2}, the log \
         included); filters {:.1} bits/key on average{}, {:.4} false-positive reads per miss; \
         {:.0}% of blocks cached",
        inp.merging.name(),
        inp.size_ratio,
        levels,
        runs,
        wa,
        wa_lo,
        wa_hi,
        inp.filter_bits,
        if inp.monkey { " (Monkey)" } else { "" },
        fp,
        100.0 * cached
    );
    LsmPrediction {
        merging: inp.merging,
        size_ratio: inp.size_ratio,
        levels,
        shape,
        write_amp: wa,
        write_amp_range: (wa_lo, wa_hi),
        false_positives: fp,
        read_amp: 1.0 + fp - last_fpr,
        space_amp: inp.space_amp(),
        blocks_cached: cached,
        insert,
        point,
        range,
        derivation,
    }
}

fn page(bytes: f64) -> f64 {
    (bytes / 4096.0).ceil().max(1.0) * 4096.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(merging: Merging, t: f64, records: u64) -> LsmInput {
        LsmInput {
            merging,
            size_ratio: t,
            l0_runs: if merging == Merging::Leveled { 4.0 } else { t },
            memtable_bytes: (1u64 << 20) as f64,
            table_bytes: (4u64 << 20) as f64,
            block_bytes: 16384.0,
            filter_bits: 10.0,
            monkey: true,
            dynamic_levels: false,
            records,
            key_bytes: 16,
            value_bytes: 100,
            cache_bytes: 64 << 20,
            range_items: 100,
            load_write_bytes: None,
        }
    }

    #[test]
    fn fpr_follows_the_formula_and_inverts() {
        assert!((fpr(10.0) - 0.0082).abs() < 0.0002);
        assert!((bits_for_fpr(fpr(7.5)) - 7.5).abs() < 1e-9);
        assert_eq!(fpr(0.0), 1.0);
    }

    #[test]
    fn levels_follow_the_capacities() {
        // Leveled, 1 MiB memtable, 4 runs: level 1 holds 4 MiB, level 2 40 MiB.
        let mib = (1u64 << 20) as f64;
        let per = 116.0 + ENTRY_OVERHEAD;
        let at = |bytes: f64| {
            input(Merging::Leveled, 10.0, (bytes / per) as u64)
                .levels()
                .0
        };
        assert_eq!(at(3.9 * mib), 1);
        assert_eq!(at(4.1 * mib), 2);
        assert_eq!(at(43.9 * mib), 2);
        assert_eq!(at(44.1 * mib), 3);
    }

    #[test]
    fn dynamic_levels_hold_most_of_the_data_in_the_last() {
        let fixed = input(Merging::Leveled, 10.0, 10_000_000);
        let dynamic = LsmInput {
            dynamic_levels: true,
            ..fixed.clone()
        };
        let data = 10_000_000.0 * fixed.entry_bytes();
        let base = fixed.level_capacity(1);
        let sizes = dynamic.level_bytes();
        assert_eq!(sizes.len(), fixed.level_bytes().len(), "as many levels");
        assert!((sizes.iter().sum::<f64>() / data - 1.0).abs() < 1e-9);
        for w in sizes.windows(2) {
            let want = (w[1] / 10.0).max(base);
            assert!((w[0] / want - 1.0).abs() < 1e-9, "{sizes:?}");
        }
        // The last level: about 90% of the data, where fixed sizes leave it 62%.
        let last = |i: &LsmInput| *i.level_bytes().last().unwrap() / data;
        assert!(last(&dynamic) > 0.88 && last(&fixed) < 0.65, "{sizes:?}");
        assert!(dynamic.space_amp() < 1.13 && fixed.space_amp() > 1.6);
        // Tiered ignores it.
        let tiered = input(Merging::Tiered, 10.0, 10_000_000);
        let t2 = LsmInput {
            dynamic_levels: true,
            ..tiered.clone()
        };
        assert_eq!(tiered.groups(), t2.groups());
    }

    #[test]
    fn write_amplification_grows_with_t_and_levels_and_tiered_writes_once_per_level() {
        let small = input(Merging::Leveled, 10.0, 1_000_000).write_amp();
        let big = input(Merging::Leveled, 10.0, 100_000_000).write_amp();
        assert!(big.0 > small.0, "{small:?} {big:?}");
        let t4 = input(Merging::Leveled, 4.0, 10_000_000).write_amp();
        let t10 = input(Merging::Leveled, 10.0, 10_000_000).write_amp();
        assert!(t10.0 > t4.0);
        for w in [small, big, t4, t10] {
            assert!(w.1 <= w.0 && w.0 <= w.2, "{w:?}");
        }
        let tiered = input(Merging::Tiered, 10.0, 10_000_000);
        let (levels, _) = tiered.levels();
        assert_eq!(tiered.write_amp().0, 2.0 + levels as f64);
        let lazy = input(Merging::LazyLeveled, 10.0, 10_000_000).write_amp().0;
        assert!(tiered.write_amp().0 <= lazy && lazy < t10.0);
    }

    #[test]
    fn monkey_uses_the_memory_given_and_beats_uniform_bits() {
        let groups = [(1e4, 4.0), (4e4, 1.0), (4e5, 1.0), (4e6, 1.0)];
        let entries: f64 = groups.iter().map(|(e, r)| e * r).sum();
        for avg in [2.0, 5.0, 10.0] {
            let bits = monkey_bits(&groups, avg * entries);
            let used: f64 = groups.iter().zip(&bits).map(|((e, r), b)| e * r * b).sum();
            assert!((used / (avg * entries) - 1.0).abs() < 1e-6, "{used}");
            let uniform = false_positives(&groups, &vec![avg; groups.len()]);
            let monkey = false_positives(&groups, &bits);
            assert!(monkey < uniform, "{monkey} vs {uniform} at {avg} bits");
            assert!(
                bits.windows(2).all(|w| w[0] >= w[1]),
                "deeper runs get fewer: {bits:?}"
            );
        }
        // Equal runs: the same bits everywhere.
        let eq = monkey_bits(&[(1e5, 3.0), (1e5, 2.0)], 8.0 * 5e5);
        assert!(
            (eq[0] - 8.0).abs() < 1e-6 && (eq[1] - 8.0).abs() < 1e-6,
            "{eq:?}"
        );
    }

    #[test]
    fn fewer_bits_cost_more_reads_and_a_bigger_cache_fewer() {
        let m = Affine::default_ssd();
        let mut a = input(Merging::Leveled, 10.0, 10_000_000);
        let rich = lsm(&a, &m);
        a.filter_bits = 2.0;
        let poor = lsm(&a, &m);
        assert!(poor.point.reads > rich.point.reads);
        a.cache_bytes = 4 << 30;
        assert_eq!(lsm(&a, &m).point.reads, 0.0, "all cached");
    }
}
