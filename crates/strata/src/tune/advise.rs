//! The engine advisor (seed 004's closing question): from a device profile and a workload
//! (records, read share, range share, cache), price each of strata's engines at its best
//! geometry for that workload, recommend the fastest, and say why in two sentences.
//!
//! Each engine's geometries are ranked by the workload's mix of operations, priced with the
//! affine model (`model::predict` for the trees, `model::lsm` for the LSM-tree) plus a CPU
//! floor per operation that is the same for every engine (`OP_CPU_S`, so that a workload whose
//! data fits in the cache is not predicted infinitely fast) and, for the LSM-tree, the CPU of
//! merging (`MERGE_CPU_PER_BYTE_S`). Throughput is one operation per predicted cost, one thread.

use serde::Serialize;

use super::*;
use crate::engines::lsm::{self, Policy};
use crate::model::lsm::{self as lsm_model, LsmInput};

/// CPU time of one operation on resident data, the same for every engine: about what a warm
/// point read costs here (`strata bench rum`, reads with the data cached: 0.6 to 1 µs).
pub const OP_CPU_S: f64 = 1.0e-6;
/// CPU time per byte a merge reads or writes (decoding, merging, encoding, hashing the keys
/// for the filter): an assumption the `--verify` runs check.
pub const MERGE_CPU_PER_BYTE_S: f64 = 2.0e-9;

/// What the advisor is asked about.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AdviseWorkload {
    pub keys: u64,
    pub key_bytes: u64,
    pub value_bytes: u64,
    pub cache_bytes: u64,
    /// Share of operations that are point reads, and that are range queries; the rest are
    /// writes (inserts or updates of random keys).
    pub read_fraction: f64,
    pub range_fraction: f64,
    pub range_items: u64,
}

impl AdviseWorkload {
    /// 16-byte keys, 100-byte values, ranges of 100, no ranges.
    pub fn new(keys: u64, read_fraction: f64, cache_bytes: u64) -> AdviseWorkload {
        AdviseWorkload {
            keys,
            key_bytes: 16,
            value_bytes: 100,
            cache_bytes,
            read_fraction,
            range_fraction: 0.0,
            range_items: 100,
        }
    }

    fn write_fraction(&self) -> f64 {
        (1.0 - self.read_fraction - self.range_fraction).max(0.0)
    }

    /// Seconds of one operation of the mix.
    fn cost(&self, point: f64, insert: f64, range: f64) -> f64 {
        OP_CPU_S
            + self.read_fraction * point
            + self.write_fraction() * insert
            + self.range_fraction * range
    }

    /// The trees' workload (checkpoints at the `Options` default).
    fn trees(&self) -> Workload {
        Workload {
            key_bytes: self.key_bytes,
            value_bytes: self.value_bytes,
            cache_bytes: self.cache_bytes,
            range_items: self.range_items,
            ..Workload::new(self.keys)
        }
    }
}

/// An engine and its geometry (`Options::advised` turns it into options).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum EngineShape {
    BTree { node_size: usize },
    BeTree(Geometry),
    Lsm(lsm::Config),
}

/// One engine at its best geometry for the workload.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EngineChoice {
    /// "strata-btree", "strata-betree" or "strata-lsm".
    pub engine: &'static str,
    pub settings: String,
    #[serde(skip)]
    pub shape: EngineShape,
    /// Bytes written per byte inserted, the log included.
    pub write_amp: f64,
    /// Device reads per point query.
    pub read_amp: f64,
    /// Bytes stored per byte of data.
    pub space_amp: f64,
    pub point_us: f64,
    pub write_us: f64,
    pub range_us: f64,
    pub ops_per_s: f64,
    /// The model's IO of one insert (an update costs the same) and of one point query, with
    /// the workload's cache, once the engine holds all the keys.
    pub insert: OpCost,
    pub point: OpCost,
    /// An insert averaged over a load of all the keys into an empty engine (the trees':
    /// `predict::load_average`; the LSM-tree's insert is its load's already, its merges played
    /// out over the load).
    pub load: OpCost,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Advice {
    pub workload: AdviseWorkload,
    /// Fastest first: the recommendation, then the runner-up.
    pub choices: Vec<EngineChoice>,
    /// Two sentences a person can act on.
    pub why: String,
}

impl Advice {
    pub fn pick(&self) -> &EngineChoice {
        &self.choices[0]
    }
    pub fn runner_up(&self) -> &EngineChoice {
        &self.choices[1]
    }
}

fn seconds(c: &OpCost) -> f64 {
    c.seconds + c.cpu_seconds
}

/// The B+-tree with `node` bytes per node, priced for `w`.
fn price_btree(model: &Affine, w: &AdviseWorkload, node: u64) -> EngineChoice {
    let inp = w.trees().input(node, w.cache_bytes);
    let p = predict::btree(&inp, model);
    let logical = (w.key_bytes + w.value_bytes) as f64;
    let cost = w.cost(seconds(&p.point), seconds(&p.insert), seconds(&p.range));
    EngineChoice {
        engine: "strata-btree",
        settings: format!("B+-tree, {} nodes", human_bytes(node)),
        shape: EngineShape::BTree {
            node_size: node as usize,
        },
        write_amp: 1.0 + p.insert.write_bytes / logical,
        read_amp: p.point.reads,
        space_amp: p.leaves * p.node_bytes as f64 / (w.keys.max(1) as f64 * logical),
        point_us: seconds(&p.point) * 1e6,
        write_us: seconds(&p.insert) * 1e6,
        range_us: seconds(&p.range) * 1e6,
        ops_per_s: 1.0 / cost,
        insert: p.insert,
        point: p.point,
        load: predict::load_average(&inp, model, |i, m| predict::btree(i, m).insert),
    }
}

/// The Bε-tree of geometry `g`, priced for `w`.
fn price_betree(model: &Affine, w: &AdviseWorkload, g: Geometry) -> EngineChoice {
    let mut inp = w.trees().input(g.node_size as u64, w.cache_bytes);
    inp.fanout = Some(g.fanout as u64);
    inp.basement_bytes = g.basement as u64;
    let p = predict::betree_engine(&inp, model);
    let load = predict::betree_load(&inp, model);
    let logical = (w.key_bytes + w.value_bytes) as f64;
    let cost = w.cost(seconds(&p.point), seconds(&p.insert), seconds(&p.range));
    EngineChoice {
        engine: "strata-betree",
        settings: format!(
            "Bε-tree, {} nodes, fanout {}, {} basements",
            human_bytes(g.node_size as u64),
            g.fanout,
            human_bytes(g.basement as u64)
        ),
        shape: EngineShape::BeTree(g),
        write_amp: load.marginal,
        read_amp: p.point.reads,
        space_amp: p.leaves * p.node_bytes as f64 / (w.keys.max(1) as f64 * logical),
        point_us: seconds(&p.point) * 1e6,
        write_us: seconds(&p.insert) * 1e6,
        range_us: seconds(&p.range) * 1e6,
        ops_per_s: 1.0 / cost,
        insert: p.insert,
        point: p.point,
        load: predict::load_average(&inp, model, |i, m| predict::betree_engine(i, m).insert),
    }
}

/// The LSM-tree of shape `cfg`, priced for `w`.
fn price_lsm(model: &Affine, w: &AdviseWorkload, cfg: lsm::Config) -> EngineChoice {
    let p = lsm_model::lsm(&lsm_input(&cfg, w), model);
    let merge_cpu = (p.insert.read_bytes + p.insert.write_bytes) * MERGE_CPU_PER_BYTE_S;
    let write = seconds(&p.insert) + merge_cpu;
    let cost = w.cost(seconds(&p.point), write, seconds(&p.range));
    let logical = (w.key_bytes + w.value_bytes) as f64;
    let entry = logical + lsm_model::ENTRY_OVERHEAD;
    EngineChoice {
        engine: "strata-lsm",
        settings: format!("LSM-tree, {}", cfg.describe()),
        shape: EngineShape::Lsm(cfg),
        write_amp: p.write_amp,
        read_amp: p.point.reads,
        space_amp: p.space_amp * entry / logical,
        point_us: seconds(&p.point) * 1e6,
        write_us: write * 1e6,
        range_us: seconds(&p.range) * 1e6,
        ops_per_s: 1.0 / cost,
        insert: p.insert,
        point: p.point,
        load: p.insert,
    }
}

/// An engine of shape `shape`, priced for `w` on `profile`'s device.
pub fn price(profile: &DeviceProfile, shape: EngineShape, w: &AdviseWorkload) -> EngineChoice {
    let model = profile.affine_model();
    match shape {
        EngineShape::BTree { node_size } => price_btree(&model, w, node_size as u64),
        EngineShape::BeTree(g) => price_betree(&model, w, g),
        EngineShape::Lsm(cfg) => price_lsm(&model, w, cfg),
    }
}

fn fastest(choices: impl Iterator<Item = EngineChoice>) -> EngineChoice {
    choices
        .max_by(|a, b| a.ops_per_s.total_cmp(&b.ops_per_s))
        .expect("at least one shape")
}

fn btree_choice(model: &Affine, w: &AdviseWorkload) -> EngineChoice {
    fastest(powers(BTREE_MIN_NODE, BTREE_MAX_NODE).map(|b| price_btree(model, w, b)))
}

/// The Bε-tree's best geometry for `w`: among each node size's best (fanout, basement) for a
/// mixed workload (`betree_rows`), nodes at most 1/CACHE_NODES of the cache.
fn betree_choice(model: &Affine, w: &AdviseWorkload) -> EngineChoice {
    let rows = betree_rows(model, &w.trees(), w.cache_bytes);
    let fits = |node: u64| node.saturating_mul(CACHE_NODES) <= w.cache_bytes;
    let smallest = rows.iter().map(|(r, _)| r.node_bytes).min().unwrap_or(0);
    fastest(
        rows.iter()
            .filter(|(r, _)| fits(r.node_bytes) || r.node_bytes == smallest)
            .map(|(r, _)| {
                let g = Geometry {
                    node_size: r.node_bytes as usize,
                    fanout: r.fanout as usize,
                    basement: r.basement_bytes as usize,
                };
                price_betree(model, w, g)
            }),
    )
}

/// The LSM-tree's shapes the advisor ranks: each policy, T from 2 to 16, three block sizes,
/// 10 filter bits per key shared out by Monkey, the memtable a quarter of the cache.
fn lsm_candidates(w: &AdviseWorkload) -> impl Iterator<Item = lsm::Config> + '_ {
    let base = lsm::Config::for_cache(w.cache_bytes as usize);
    [Policy::Leveled, Policy::Tiered, Policy::LazyLeveled]
        .into_iter()
        .flat_map(|p| [2u32, 4, 6, 8, 10, 16].map(move |t| (p, t)))
        .flat_map(move |(p, t)| {
            [4usize << 10, 16 << 10, 64 << 10].map(move |block| lsm::Config {
                block_bytes: block,
                ..lsm::Config {
                    memtable_bytes: base.memtable_bytes,
                    ..lsm::Config::with(p, t)
                }
            })
        })
}

/// The model's input for an LSM-tree of shape `cfg` holding the workload.
pub fn lsm_input(cfg: &lsm::Config, w: &AdviseWorkload) -> LsmInput {
    let mut inp = lsm::policy::model_input(
        cfg,
        w.keys,
        (w.key_bytes + w.value_bytes) as f64 + lsm_model::ENTRY_OVERHEAD,
    );
    inp.key_bytes = w.key_bytes;
    inp.value_bytes = w.value_bytes;
    inp.cache_bytes = w.cache_bytes;
    inp.range_items = w.range_items;
    // The engine's policy played out on the load; its table bytes carry each entry's encoding
    // and its filter bits, and are counted per byte of key and value inserted, as the measured
    // write amplification is.
    let e = inp.entry_bytes();
    let sim = lsm::simulate::simulate_load(cfg, w.keys, e);
    let logical = (w.keys * (w.key_bytes + w.value_bytes)).max(1) as f64;
    let tables =
        (sim.flush_bytes + sim.merge_write_bytes) as f64 * (1.0 + cfg.filter_bits / 8.0 / e);
    inp.load_write_bytes = Some(tables / logical);
    inp
}

fn lsm_choice(model: &Affine, w: &AdviseWorkload) -> EngineChoice {
    fastest(lsm_candidates(w).map(|cfg| price_lsm(model, w, cfg)))
}

/// Price every engine at its best geometry for `w` on `profile`'s device, fastest first.
pub fn advise(profile: &DeviceProfile, w: &AdviseWorkload) -> Advice {
    let model = profile.affine_model();
    let mut choices = vec![
        lsm_choice(&model, w),
        betree_choice(&model, w),
        btree_choice(&model, w),
    ];
    choices.sort_by(|a, b| b.ops_per_s.total_cmp(&a.ops_per_s));
    // Within `TIE` the model cannot tell the first two apart on speed: less space, then fewer
    // bytes written, decide.
    if close(&choices[0], &choices[1])
        && (choices[1].space_amp, choices[1].write_amp)
            < (choices[0].space_amp, choices[0].write_amp)
    {
        choices.swap(0, 1);
    }
    let why = explain(w, &choices[0], &choices[1]);
    Advice {
        workload: w.clone(),
        choices,
        why,
    }
}

/// Predicted throughputs closer than the model can tell apart: the scaled-down verification
/// runs (`strata advise --verify --all`, docs/lsm.md) put the three engines' measured ops/s
/// at 0.4–0.9× predicted, so one engine's lead under 10% says nothing about the order.
const TIE: f64 = 0.10;

fn close(a: &EngineChoice, b: &EngineChoice) -> bool {
    (a.ops_per_s - b.ops_per_s).abs() <= TIE * a.ops_per_s.max(b.ops_per_s)
}

/// Two sentences: why the pick beats the runner-up for this mix, and what it costs.
fn explain(w: &AdviseWorkload, a: &EngineChoice, b: &EngineChoice) -> String {
    let share = |f: f64| format!("{:.0}%", 100.0 * f);
    let mix = if w.range_fraction > 0.0 {
        format!(
            "{} point reads, {} range queries and {} writes",
            share(w.read_fraction),
            share(w.range_fraction),
            share(w.write_fraction())
        )
    } else {
        format!(
            "{} reads and {} writes",
            share(w.read_fraction),
            share(w.write_fraction())
        )
    };
    // Which operation class makes the difference.
    let gains = [
        (
            w.write_fraction() * (b.write_us - a.write_us),
            "writes",
            a.write_us,
            b.write_us,
        ),
        (
            w.read_fraction * (b.point_us - a.point_us),
            "point reads",
            a.point_us,
            b.point_us,
        ),
        (
            w.range_fraction * (b.range_us - a.range_us),
            "range queries",
            a.range_us,
            b.range_us,
        ),
    ];
    let (_, what, mine, theirs) = gains
        .iter()
        .copied()
        .max_by(|x, y| x.0.total_cmp(&y.0))
        .expect("three classes");
    let first = if close(a, b) {
        format!(
            "For {mix} over {} records with {} of cache, {} and {} are predicted within 10% of \
             each other ({:.0} and {:.0} ops/s), closer than the model tells apart, so \
             {} ({}) is chosen for storing {:.2}× the data to {:.2}× and writing {:.1}× to {:.1}×.",
            w.keys,
            human_bytes(w.cache_bytes),
            a.engine,
            b.engine,
            a.ops_per_s,
            b.ops_per_s,
            a.engine,
            a.settings,
            a.space_amp,
            b.space_amp,
            a.write_amp,
            b.write_amp,
        )
    } else {
        format!(
            "For {mix} over {} records with {} of cache, {} ({}) is predicted fastest at {:.0} \
             ops/s against {:.0} for {}, because its {what} cost {mine:.2} µs of IO and \
             merging each to {theirs:.2} µs.",
            w.keys,
            human_bytes(w.cache_bytes),
            a.engine,
            a.settings,
            a.ops_per_s,
            b.ops_per_s,
            b.engine,
        )
    };
    let second = format!(
        "It writes {:.1}× the data, reads {:.2} blocks per lookup and stores {:.2}× (the \
         runner-up: {:.1}×, {:.2}, {:.2}×); choose {} instead if {} matters more than speed.",
        a.write_amp,
        a.read_amp,
        a.space_amp,
        b.write_amp,
        b.read_amp,
        b.space_amp,
        b.engine,
        if b.write_amp < a.write_amp {
            "device wear (write amplification)"
        } else if b.space_amp < a.space_amp {
            "space"
        } else {
            "read latency"
        }
    );
    format!("{first} {second}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile() -> DeviceProfile {
        DeviceProfile::builtin()
    }

    #[test]
    fn write_heavy_out_of_cache_picks_a_write_optimised_engine_and_reads_a_read_optimised_one() {
        let p = profile();
        let writes = advise(&p, &AdviseWorkload::new(10_000_000, 0.0, 64 << 20));
        assert_ne!(writes.pick().engine, "strata-btree", "{}", writes.why);
        let reads = advise(&p, &AdviseWorkload::new(10_000_000, 1.0, 64 << 20));
        assert!(
            reads.pick().read_amp <= writes.pick().read_amp + 1e-9,
            "{} / {}",
            reads.why,
            writes.why
        );
        for a in [&writes, &reads] {
            assert_eq!(a.choices.len(), 3);
            assert!(a
                .choices
                .windows(2)
                .all(|c| c[0].ops_per_s >= 0.99 * c[1].ops_per_s));
            assert!(a.why.contains(a.pick().engine) && a.why.contains(a.runner_up().engine));
            for c in &a.choices {
                assert!(c.write_amp >= 1.0 && c.space_amp > 0.5, "{c:?}");
            }
        }
    }
}
