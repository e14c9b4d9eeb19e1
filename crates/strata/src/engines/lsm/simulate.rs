//! The merge policy played out on synthetic tables: what a load from empty of unique, uniformly
//! random keys makes the engine write, without writing anything.
//!
//! The closed-form write amplification (`model::lsm`) prices every level full; a load from
//! empty never is. Each new level starts empty, and the tables first moved into it are disjoint
//! from the ones left above, so whole runs go down untouched (at 200,000 keys, 308 of 503
//! leveled merges were such moves) and the last level is usually far below its capacity. Here
//! the engine's own `policy` decides every step, on tables that carry no data: a key range over
//! the 64-bit key space (keys are the big-endian bytes of a position) and a byte count spread
//! evenly over it. A flush is one run over the whole key space; a merge's output is the sum of
//! its inputs' densities, cut into tables of `table_bytes`. Merges complete at once (the
//! engine's background thread lets level 0 run a little deeper meanwhile, which only lowers
//! what is written). Every key is new, so a merge drops nothing.
//!
//! Invariants: the bytes of every level sum to the bytes flushed; the policy sees the same
//! shapes it would see in the engine for such a load.

use super::config::Config;
use super::memtable;
use super::policy::{self, pick, Action, Level, Run, TableInfo};

/// What a load wrote, in table bytes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoadSim {
    pub flush_bytes: u64,
    pub merge_write_bytes: u64,
    /// `merge_write_bytes` by the level merged into (index 1 is level 1).
    pub merge_bytes_by_target: Vec<u64>,
    pub merges: u64,
    pub trivial_moves: u64,
    /// Levels below level 0 at the end.
    pub levels: usize,
    /// Bytes of each level at the end, level 0 first.
    pub level_bytes: Vec<u64>,
}

fn key(pos: u64) -> Vec<u8> {
    pos.to_be_bytes().to_vec()
}

fn pos(key: &[u8]) -> f64 {
    u64::from_be_bytes(key.try_into().expect("synthetic keys are 8 bytes")) as f64
}

/// Tables over [lo, hi] cut from `pieces` (start, end, bytes per key-space unit), each about
/// `table_bytes`.
fn cut(pieces: &[(f64, f64, f64)], table_bytes: f64, next_id: &mut u64) -> Run {
    let mut bounds: Vec<f64> = pieces.iter().flat_map(|&(a, b, _)| [a, b]).collect();
    bounds.sort_by(f64::total_cmp);
    bounds.dedup();
    let mut out = Vec::new();
    // Keys are whole: a table ends at a key and the next begins one above, so that neighbours
    // do not overlap (`TableInfo::overlaps` is inclusive).
    let mut start = bounds.first().copied().unwrap_or(0.0) as u64;
    let mut acc = 0.0;
    let mut push = |lo: &mut u64, hi: f64, bytes: f64, out: &mut Run| {
        *next_id += 1;
        let hi = (hi as u64).max(*lo);
        out.push(TableInfo {
            id: *next_id,
            bytes: bytes.round() as u64,
            points: 0,
            puts: 0,
            ranges: 0,
            smallest: key(*lo),
            largest: key(hi),
        });
        *lo = hi.saturating_add(1);
    };
    for w in bounds.windows(2) {
        let (a, b) = (w[0], w[1]);
        let density: f64 = pieces
            .iter()
            .filter(|&&(s, e, _)| s <= a && b <= e)
            .map(|&(_, _, d)| d)
            .sum();
        let mut x = a;
        while density > 0.0 && acc + density * (b - x) >= table_bytes {
            let at = x + (table_bytes - acc) / density;
            push(&mut start, at, table_bytes, &mut out);
            x = at;
            acc = 0.0;
        }
        acc += density * (b - x);
    }
    if acc >= 1.0 {
        push(&mut start, *bounds.last().unwrap_or(&0.0), acc, &mut out);
    }
    out
}

/// Play out a load of `records` entries of `entry_bytes` each (encoded) into an empty tree of
/// shape `cfg`, flushing at every full memtable and at the end.
pub fn simulate_load(cfg: &Config, records: u64, entry_bytes: f64) -> LoadSim {
    let per_memtable = (cfg.memtable_bytes as f64 / (entry_bytes + memtable::OVERHEAD as f64))
        .floor()
        .max(1.0);
    let flush = per_memtable * entry_bytes;
    let table = cfg.table_bytes as f64;
    let space = u64::MAX as f64;
    let mut levels: Vec<Level> = Vec::new();
    let mut cursors: Vec<Vec<u8>> = Vec::new();
    let mut sim = LoadSim::default();
    let mut next_id = 0;
    let mut left = records as f64;
    while left > 0.0 {
        let bytes = flush.min(left * entry_bytes);
        left -= per_memtable;
        let run = cut(&[(0.0, space, bytes / space)], table, &mut next_id);
        sim.flush_bytes += run.iter().map(|t| t.bytes).sum::<u64>();
        if levels.is_empty() {
            levels.push(Level::default());
        }
        levels[0].runs.insert(0, run);
        while let Some(action) = pick(&levels, cfg, &cursors) {
            let job = match action {
                Action::Deepen(level) => {
                    policy::deepen(&mut levels, level);
                    sim.trivial_moves += 1;
                    continue;
                }
                Action::Grow => {
                    policy::grow(&mut levels, &mut cursors);
                    continue;
                }
                Action::Merge(job) => job,
            };
            policy::advance_cursor(&levels, &mut cursors, cfg, &job);
            if job.trivial {
                policy::move_down(&mut levels, &job);
                sim.trivial_moves += 1;
                continue;
            }
            let pieces: Vec<(f64, f64, f64)> = policy::inputs(&levels, &job)
                .iter()
                .flatten()
                .map(|t| {
                    let (a, b) = (pos(&t.smallest), pos(&t.largest));
                    (a, b, t.bytes as f64 / (b - a).max(1.0))
                })
                .collect();
            let out = cut(&pieces, table, &mut next_id);
            let written = out.iter().map(|t| t.bytes).sum::<u64>();
            sim.merge_write_bytes += written;
            if sim.merge_bytes_by_target.len() <= job.target {
                sim.merge_bytes_by_target.resize(job.target + 1, 0);
            }
            sim.merge_bytes_by_target[job.target] += written;
            sim.merges += 1;
            policy::install(&mut levels, &job, out);
        }
        policy::trim(&mut levels);
    }
    sim.levels = levels.len().saturating_sub(1);
    sim.level_bytes = levels.iter().map(Level::bytes).collect();
    sim
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engines::lsm::Policy;

    #[test]
    fn cutting_keeps_the_bytes_and_the_table_size() {
        let mut id = 0;
        let run = cut(
            &[(0.0, 1000.0, 10.0), (500.0, 1500.0, 10.0)],
            4000.0,
            &mut id,
        );
        let total: u64 = run.iter().map(|t| t.bytes).sum();
        assert_eq!(total, 20_000);
        assert!(run.iter().all(|t| t.bytes <= 4000));
        assert!(run.windows(2).all(|w| w[0].largest < w[1].smallest));
    }

    #[test]
    fn a_load_keeps_its_bytes_and_tiered_writes_each_byte_once_per_level() {
        let cfg = Config {
            memtable_bytes: 256 << 10,
            table_bytes: 64 << 10,
            ..Config::with(Policy::Tiered, 4)
        };
        let sim = simulate_load(&cfg, 200_000, 131.0);
        let data = 200_000.0 * 131.0;
        assert!((sim.flush_bytes as f64 - data).abs() < 0.01 * data);
        // Every byte is merged once per level it passed through, at most.
        let per_byte = sim.merge_write_bytes as f64 / data;
        assert!(per_byte > 1.0 && per_byte <= sim.levels as f64, "{sim:?}");
    }

    #[test]
    fn a_leveled_load_from_empty_writes_less_than_full_levels_cost() {
        let cfg = Config {
            memtable_bytes: 256 << 10,
            table_bytes: 64 << 10,
            ..Config::with(Policy::Leveled, 4)
        };
        let sim = simulate_load(&cfg, 200_000, 131.0);
        let data = 200_000.0 * 131.0;
        let per_byte = sim.merge_write_bytes as f64 / data;
        // Full levels would cost 1 + T per byte per level below level 1.
        assert!(
            per_byte > 1.0 && per_byte < 1.0 + 5.0 * sim.levels as f64,
            "{sim:?}"
        );
        assert!(sim.trivial_moves > 0, "new levels fill by moves: {sim:?}");
        assert_eq!(
            sim.merge_bytes_by_target.iter().sum::<u64>(),
            sim.merge_write_bytes
        );
    }

    /// Levels sized from the last write less on the default shapes' loads than fixed ones (at
    /// 10M, level 0's third batch lands in a new, empty level 1 instead of a level 1 of 512 MiB).
    #[test]
    fn dynamic_levels_write_less_on_a_load_than_fixed_ones() {
        for (n, cache) in [(1_000_000u64, 16usize << 20), (10_000_000, 256 << 20)] {
            let dynamic = Config::for_cache(cache);
            assert!(dynamic.dynamic_levels);
            let fixed = Config {
                dynamic_levels: false,
                ..dynamic
            };
            let (d, f) = (
                simulate_load(&dynamic, n, 122.0),
                simulate_load(&fixed, n, 122.0),
            );
            assert!(d.merge_write_bytes < f.merge_write_bytes, "{d:?}\n{f:?}");
            assert_eq!(d.level_bytes.iter().sum::<u64>(), d.flush_bytes);
        }
    }

    /// What loads of 1M, 3M and 10M keys write at the default shape for their budget (16, 64
    /// and 256 MiB) and beside it, level by level
    /// (`cargo test -p strata --lib load_shapes -- --ignored --nocapture`).
    #[test]
    #[ignore]
    fn load_shapes() {
        let e = 121.0 + 10.0 / 8.0;
        for (n, cache) in [
            (1_000_000u64, 16usize << 20),
            (3_000_000, 64 << 20),
            (10_000_000, 256 << 20),
        ] {
            let base = Config::for_cache(cache);
            let data = n as f64 * 116.0;
            let fixed = Config {
                dynamic_levels: false,
                ..base
            };
            for (name, cfg) in [
                ("default", base),
                ("fixed levels", fixed),
                (
                    "fixed levels, l0_runs 4",
                    Config {
                        l0_runs: 4,
                        ..fixed
                    },
                ),
                ("l0_runs 4", Config { l0_runs: 4, ..base }),
                ("l0_runs 2", Config { l0_runs: 2, ..base }),
                ("l0_runs 8", Config { l0_runs: 8, ..base }),
                (
                    "T 6",
                    Config {
                        size_ratio: 6,
                        ..base
                    },
                ),
                (
                    "T 16",
                    Config {
                        size_ratio: 16,
                        ..base
                    },
                ),
                (
                    "memtable x2",
                    Config {
                        memtable_bytes: 2 * base.memtable_bytes,
                        ..base
                    },
                ),
            ] {
                let sim = simulate_load(&cfg, n, e);
                let by: Vec<String> = sim
                    .merge_bytes_by_target
                    .iter()
                    .map(|b| format!("{:.2}", *b as f64 / data))
                    .collect();
                let at_end: Vec<String> = sim
                    .level_bytes
                    .iter()
                    .map(|b| format!("{:.2}", *b as f64 / data))
                    .collect();
                eprintln!(
                    "{n} {} MiB {name}: flush {:.2}, merges {:.2} (by level merged into {by:?}), {} merges, {} moves, {} levels holding {at_end:?}",
                    cache >> 20,
                    sim.flush_bytes as f64 / data,
                    sim.merge_write_bytes as f64 / data,
                    sim.merges,
                    sim.trivial_moves,
                    sim.levels
                );
                assert_eq!(
                    sim.merge_bytes_by_target.iter().sum::<u64>(),
                    sim.merge_write_bytes
                );
            }
        }
    }
}
