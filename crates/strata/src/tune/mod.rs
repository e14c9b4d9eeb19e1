//! The tuner: a device profile and a workload in, node sizes out, with the predicted cost of each
//! operation and the tables behind the choice.
//!
//! - B+-tree: every power of two from 4 KiB to 4 MiB is priced with `model::predict::btree`
//!   (Lemma 5 with the cached levels taken off) and the cheapest for the workload's mix wins.
//!   Corollary 7's closed-form optimum, (1 + αx)/ln(x + 1) minimised over x items, is reported
//!   beside it with its brute-force check.
//! - Bε-tree: every node size 64 KiB .. 16 MiB (powers of two), fanout 4 .. 64 and basement (a
//!   power of two from 4 KiB dividing B) is priced with `model::predict::betree_engine`: the
//!   engine's account, in which a flush into a leaf that is not in memory is spilled as a run
//!   beside it and the leaf is rewritten once per drain. Theorem 9's account
//!   (`betree_paper`: every flush rewrites the leaf) is reported beside the pick, labelled as the
//!   paper's, and so is Corollary 12's design F = 1/(α ln 1/α), B = F².
//! - Table 3's sensitivity: insert and query cost against node size for both trees (the
//!   Bε-tree's by the engine's account, with Theorem 9's insert beside it).
//! - Seed 002's table: IOPS by block size from the profile's measured points (its block-size
//!   benchmark's from 512 B, with power-law offsets beside uniform ones), hops = log_b N and
//!   queries per second.
//!
//! Invariants: recommendations are always sizes the engines accept; ties (costs within 1e-9
//! relative) are broken by the cold-cache cost, then by the smaller node. When the whole data set
//! fits in the cache, reads cost no IO at any node size, so the choice is made for a cold cache
//! and a note says so: the model prices IO only, and what remains then is CPU.

use serde::{Deserialize, Serialize};

#[cfg(test)]
mod pairing;

mod advise;
pub use advise::{advise, lsm_input, price, Advice, AdviseWorkload, EngineChoice, EngineShape};

use crate::engines::betree::{self, Geometry, Origin};
use crate::engines::btree;
use crate::error::Result;
use crate::model::optimal;
use crate::model::predict::{self, LoadWa, OpCost, PredictInput, Prediction};
use crate::model::Affine;
use crate::profile::DeviceProfile;

/// The B+-tree node whose write amplification `recommend`'s warning quotes beside the pick's:
/// a common fixed choice (strata's own bench used it), 16 times the 4 KiB the tuner picks once
/// the data outgrows the cache.
const WIDE_BTREE_NODE: u64 = 64 << 10;

/// Node sizes the B+-tree accepts.
pub const BTREE_MIN_NODE: u64 = btree::MIN_NODE_SIZE as u64;
pub const BTREE_MAX_NODE: u64 = btree::MAX_NODE_SIZE as u64;
/// Geometry the tuner searches for the Bε-tree (within what the engine accepts,
/// `Geometry::check`: the tests pair them).
pub const BETREE_MIN_NODE: u64 = 64 << 10;
pub const BETREE_MAX_NODE: u64 = 16 << 20;
pub const BETREE_MIN_FANOUT: u64 = 4;
pub const BETREE_MAX_FANOUT: u64 = 64;
pub const BASEMENT_MIN: u64 = 4 << 10;
/// The Bε-tree's node is at most 1/CACHE_NODES of the cache budget.
pub const CACHE_NODES: u64 = 4;

/// Which operations the workload consists of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mix {
    Point,
    /// Insert-heavy: 90% inserts, 10% point queries. A store that is never read needs no index,
    /// and with no reads at all the model would buy the cheapest inserts with any query cost
    /// (fanout 4 and basements as big as the node).
    Insert,
    Range,
    /// Half point queries, half inserts.
    Mixed,
}

impl Mix {
    /// Weights of (insert, point, range) in the objective.
    pub fn weights(self) -> (f64, f64, f64) {
        match self {
            Mix::Point => (0.0, 1.0, 0.0),
            Mix::Insert => (0.9, 0.1, 0.0),
            Mix::Range => (0.0, 0.0, 1.0),
            Mix::Mixed => (0.5, 0.5, 0.0),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mix::Point => "point",
            Mix::Insert => "insert",
            Mix::Range => "range",
            Mix::Mixed => "mixed",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    /// N, records in the database.
    pub keys: u64,
    pub key_bytes: u64,
    pub value_bytes: u64,
    /// M, the cache budget.
    pub cache_bytes: u64,
    pub mix: Mix,
    /// Records a range query returns.
    pub range_items: u64,
    /// Log bytes between checkpoints (sets how often cached dirty nodes are written).
    pub checkpoint_wal_bytes: u64,
}

impl Workload {
    /// 16-byte keys, 100-byte values, a 1 GiB cache, a mixed workload, ranges of 100,
    /// checkpoints every 64 MiB of log.
    pub fn new(keys: u64) -> Workload {
        Workload {
            keys,
            key_bytes: 16,
            value_bytes: 100,
            cache_bytes: 1 << 30,
            mix: Mix::Mixed,
            range_items: 100,
            checkpoint_wal_bytes: 64 << 20,
        }
    }

    /// Bytes the records take in the cache (encoded entry plus the engines' 96 bytes of heap per
    /// entry): what must fit for reads to cost nothing.
    pub fn data_bytes(&self) -> f64 {
        self.keys as f64 * (self.key_bytes + self.value_bytes + 7 + 96) as f64
    }

    fn input(&self, node_bytes: u64, cache_bytes: u64) -> PredictInput {
        let mut p = PredictInput::new(
            node_bytes,
            self.keys,
            self.key_bytes,
            self.value_bytes,
            cache_bytes,
        );
        p.range_items = self.range_items;
        p.run_budget = betree::RUN_BUDGET;
        p.max_runs = betree::MAX_RUNS as u64;
        p.inserts_per_checkpoint = predict::checkpoint_inserts(
            self.checkpoint_wal_bytes,
            self.key_bytes,
            self.value_bytes,
        );
        p
    }

    fn objective(&self, p: &Prediction) -> f64 {
        let (wi, wp, wr) = self.mix.weights();
        let cost = |c: &OpCost| c.seconds + c.cpu_seconds;
        wi * cost(&p.insert) + wp * cost(&p.point) + wr * cost(&p.range)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProfileSummary {
    pub device: String,
    pub setup_s: f64,
    pub per_byte_s: f64,
    pub alpha: f64,
    pub half_bandwidth_bytes: f64,
    pub parallelism: f64,
    pub saturation_bytes_per_s: f64,
    pub fsync_s: f64,
}

/// Corollary 7 for this workload, in items of one separator (key + child pointer).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Corollary7 {
    pub item_bytes: f64,
    pub alpha_per_item: f64,
    /// The minimiser of (1 + αx)/ln(x + 1), by root-finding.
    pub optimum_items: f64,
    /// The same by evaluating every whole x.
    pub brute_force_items: u64,
    /// 1/(α ln(1/α)), the asymptotic form.
    pub approx_items: f64,
    pub optimum_bytes: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BTreeRow {
    pub node_bytes: u64,
    pub height: u32,
    pub cached_levels: f64,
    pub point: OpCost,
    pub insert: OpCost,
    pub range: OpCost,
    pub objective_s: f64,
    /// The objective with nothing cached.
    pub cold_objective_s: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BTreeChoice {
    pub node_bytes: u64,
    pub prediction: Prediction,
    pub corollary7: Corollary7,
    pub table: Vec<BTreeRow>,
}

/// Corollary 12 for this workload, in items of one buffered message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Corollary12 {
    pub item_bytes: f64,
    pub alpha_per_item: f64,
    pub fanout: f64,
    pub node_items: f64,
    pub node_bytes: f64,
}

/// The best (fanout, basement) for one Bε-tree node size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BeTreeRow {
    pub node_bytes: u64,
    pub fanout: u64,
    pub basement_bytes: u64,
    pub height: u32,
    pub cached_levels: f64,
    pub point: OpCost,
    pub insert: OpCost,
    pub range: OpCost,
    pub objective_s: f64,
    pub cold_objective_s: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BeTreeChoice {
    pub node_bytes: u64,
    pub fanout: u64,
    pub basement_bytes: u64,
    pub prediction: Prediction,
    /// Write amplification of loading the workload's records into an empty tree of this
    /// geometry with the workload's cache (`predict::betree_load`, the engine's account averaged
    /// over the load). Reported, not ranked: the choice is made with `prediction`, the engine's
    /// account at the workload's size.
    #[serde(default)]
    pub load_wa: LoadWa,
    /// Theorem 9's insert at the pick (`predict::betree_paper`: every flush rewrites the leaf),
    /// shown beside the engine's for comparison; never ranked with.
    #[serde(default)]
    pub paper_insert: OpCost,
    pub corollary12: Corollary12,
    pub table: Vec<BeTreeRow>,
}

/// Table 3's sensitivity: cost against node size for both trees (the Bε-tree at the chosen
/// fanout and basement).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SensitivityRow {
    pub node_bytes: u64,
    pub btree_point_s: f64,
    pub btree_insert_s: f64,
    pub betree_point_s: f64,
    /// The engine's account (what the tuner ranks with).
    pub betree_insert_s: f64,
    /// Theorem 9's account of the same insert (every flush rewrites the leaf).
    #[serde(default)]
    pub betree_insert_paper_s: f64,
    /// Whether each engine accepts this node size.
    pub btree_allowed: bool,
    pub betree_allowed: bool,
}

/// Seed 002's table: how many point queries per second each block size allows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IopsRow {
    pub block_bytes: u64,
    /// 1 / mean latency at queue depth 1.
    pub iops: f64,
    /// From the profile's measured points, or from the model where it has none.
    pub measured: bool,
    /// Keys per node, b = block / (key + child pointer).
    pub keys_per_node: f64,
    /// log_b N: IOs per query with nothing cached.
    pub hops: f64,
    pub queries_per_s: f64,
    /// IOPS and queries per second with power-law offsets (seed 002's second curve), where the
    /// profile measured the block size (`profile::blocks`: 512 B .. 64 KiB).
    #[serde(default)]
    pub power_iops: Option<f64>,
    #[serde(default)]
    pub power_queries_per_s: Option<f64>,
    /// Reads per query with the workload's cache (from the B+-tree prediction).
    pub cached_hops: f64,
    /// iops / cached_hops; None when nothing is read.
    pub cached_queries_per_s: Option<f64>,
    /// The seed's pick: the most queries per second with nothing cached.
    #[serde(default)]
    pub best: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Recommendation {
    pub profile: ProfileSummary,
    pub workload: Workload,
    /// The cache the choice was made for: the workload's, or 0 if the data fits in it.
    pub effective_cache_bytes: u64,
    pub btree: BTreeChoice,
    pub betree: BeTreeChoice,
    pub sensitivity: Vec<SensitivityRow>,
    pub iops: Vec<IopsRow>,
    pub notes: Vec<String>,
}

fn human_bytes(b: u64) -> String {
    if b >= 1 << 20 {
        format!("{} MiB", b >> 20)
    } else {
        format!("{} KiB", b >> 10)
    }
}

fn powers(lo: u64, hi: u64) -> impl Iterator<Item = u64> {
    std::iter::successors(Some(lo), |&x| Some(x * 2)).take_while(move |&x| x <= hi)
}

/// `a` is better than `b`: cheaper, or as cheap and cheaper cold, or as cheap cold and smaller.
fn better(a: (f64, f64, u64), b: (f64, f64, u64)) -> bool {
    let same = |x: f64, y: f64| (x - y).abs() <= 1e-9 * x.abs().max(y.abs()) + 1e-15;
    if !same(a.0, b.0) {
        return a.0 < b.0;
    }
    if !same(a.1, b.1) {
        return a.1 < b.1;
    }
    a.2 < b.2
}

fn corollary7(model: &Affine, w: &Workload) -> Corollary7 {
    let item = (w.key_bytes + 10) as f64;
    let alpha = model.alpha() * item;
    let optimum = optimal::btree_optimal_items(alpha);
    let brute = optimal::brute_force_argmin(1, (optimum * 4.0).ceil() as u64 + 16, |x| {
        optimal::btree_cost(alpha, x as f64)
    });
    Corollary7 {
        item_bytes: item,
        alpha_per_item: alpha,
        optimum_items: optimum,
        brute_force_items: brute,
        approx_items: optimal::btree_optimal_items_approx(alpha),
        optimum_bytes: optimum * item,
    }
}

fn corollary12(model: &Affine, w: &Workload) -> Corollary12 {
    let item = w.key_bytes as f64 + w.value_bytes as f64 + predict::BE_MESSAGE_OVERHEAD;
    let alpha = model.alpha() * item;
    let (f, b) = optimal::corollary12(alpha);
    Corollary12 {
        item_bytes: item,
        alpha_per_item: alpha,
        fanout: f,
        node_items: b,
        node_bytes: b * item,
    }
}

fn btree_rows(model: &Affine, w: &Workload, cache: u64) -> Vec<(BTreeRow, Prediction)> {
    powers(BTREE_MIN_NODE, BTREE_MAX_NODE)
        .map(|b| {
            let p = predict::btree(&w.input(b, cache), model);
            let cold = predict::btree(&w.input(b, 0), model);
            let row = BTreeRow {
                node_bytes: b,
                height: p.height,
                cached_levels: p.cached_levels,
                point: p.point,
                insert: p.insert,
                range: p.range,
                objective_s: w.objective(&p),
                cold_objective_s: w.objective(&cold),
            };
            (row, p)
        })
        .collect()
}

/// The cheapest (fanout, basement) at each Bε-tree node size.
/// What a Bε-tree's internal nodes take of the cache, by the model's charges.
fn internal_charge(p: &Prediction) -> f64 {
    let n = p.levels.len().saturating_sub(1);
    p.levels[..n]
        .iter()
        .map(|l| l.nodes * (l.cache_bytes + l.header_bytes))
        .sum()
}

fn betree_rows(model: &Affine, w: &Workload, cache: u64) -> Vec<(BeTreeRow, Prediction)> {
    let mut rows = Vec::new();
    for b in powers(BETREE_MIN_NODE, BETREE_MAX_NODE) {
        let mut best: Option<(BeTreeRow, Prediction)> = None;
        for f in BETREE_MIN_FANOUT..=BETREE_MAX_FANOUT {
            for basement in powers(BASEMENT_MIN, b) {
                let mut inp = w.input(b, cache);
                inp.fanout = Some(f);
                inp.basement_bytes = basement;
                let p = predict::betree_engine(&inp, model);
                if cache > 0 && f < BETREE_MAX_FANOUT && internal_charge(&p) > cache as f64 / 2.0 {
                    continue;
                }
                let objective = w.objective(&p);
                if let Some((row, _)) = &best {
                    // Cold costs only break ties; skip computing them for clear losers.
                    if objective > row.objective_s * (1.0 + 1e-9) + 1e-15 {
                        continue;
                    }
                }
                inp.cache_bytes = 0;
                let cold = w.objective(&predict::betree_engine(&inp, model));
                let row = BeTreeRow {
                    node_bytes: b,
                    fanout: f,
                    basement_bytes: basement,
                    height: p.height,
                    cached_levels: p.cached_levels,
                    point: p.point,
                    insert: p.insert,
                    range: p.range,
                    objective_s: objective,
                    cold_objective_s: cold,
                };
                let replace = best.as_ref().is_none_or(|(r, _)| {
                    better(
                        (objective, cold, b * 1000 + f),
                        (r.objective_s, r.cold_objective_s, b * 1000 + r.fanout),
                    )
                });
                if replace {
                    best = Some((row, p));
                }
            }
        }
        rows.extend(best);
    }
    rows
}

fn iops_table(profile: &DeviceProfile, w: &Workload, cache: u64) -> Vec<IopsRow> {
    let model = profile.affine_model();
    // (block, uniform latency, power-law latency, measured), by block size: the block-size
    // benchmark's points where it has them (both curves from one run), else the affine
    // benchmark's, else the model.
    let mut points: Vec<(u64, f64, Option<f64>, bool)> = if profile.affine.points.is_empty() {
        powers(4 << 10, 16 << 20)
            .map(|b| (b, model.cost(b), None, false))
            .collect()
    } else {
        profile
            .affine
            .points
            .iter()
            .map(|p| (p.bytes, p.mean_s, None, true))
            .collect()
    };
    for b in &profile.blocks {
        let row = (b.bytes, b.uniform_s, Some(b.power_s), true);
        match points.iter_mut().find(|p| p.0 == b.bytes) {
            Some(p) => *p = row,
            None => points.push(row),
        }
    }
    points.sort_by_key(|p| p.0);
    let n = w.keys.max(2) as f64;
    let mut rows: Vec<IopsRow> = points
        .into_iter()
        .map(|(block, latency, power, measured)| {
            let iops = 1.0 / latency;
            let b = block as f64 / (w.key_bytes + 10) as f64;
            let hops = (n.ln() / b.ln()).max(1.0);
            let cached = predict::btree(&w.input(block, cache), &model).point.reads;
            IopsRow {
                block_bytes: block,
                iops,
                measured,
                keys_per_node: b,
                hops,
                queries_per_s: iops / hops,
                power_iops: power.map(|p| 1.0 / p),
                power_queries_per_s: power.map(|p| 1.0 / p / hops),
                cached_hops: cached,
                cached_queries_per_s: (cached > 1e-9).then(|| iops / cached),
                best: false,
            }
        })
        .collect();
    if let Some(best) = rows
        .iter_mut()
        .max_by(|a, b| a.queries_per_s.total_cmp(&b.queries_per_s))
    {
        best.best = true;
    }
    rows
}

/// Node sizes for both engines from a device profile and a workload.
pub fn recommend(profile: &DeviceProfile, workload: &Workload) -> Recommendation {
    let model = profile.affine_model();
    let w = workload;
    let mut notes = Vec::new();
    if let Err(why) = profile.affine_holds() {
        notes.push(format!(
            "Warning: {why}. The tuner prices IOs as s + t·x, so the node sizes below rest on \
             a model this profile does not support: profile again, or give the geometry \
             yourself; a new database with EngineOptions::Auto tunes from the built-in \
             figures instead of this profile."
        ));
    }
    let fits = w.data_bytes() <= w.cache_bytes as f64;
    let cache = if fits {
        notes.push(format!(
            "The data (about {:.0} MiB in the cache) fits in the {:.0} MiB cache: once warm, reads \
             cost no IO at any node size and IO is only checkpoint write-back. The choice below \
             is made for a cold cache (as when the data outgrows it), with the CPU cost of \
             rebuilding basements on flushes added to the IO.",
            w.data_bytes() / (1u64 << 20) as f64,
            w.cache_bytes as f64 / (1u64 << 20) as f64
        ));
        0
    } else {
        w.cache_bytes
    };

    let bt = btree_rows(&model, w, cache);
    let (bt_row, bt_pred) = bt
        .iter()
        .reduce(|best, x| {
            let key =
                |(r, _): &(BTreeRow, Prediction)| (r.objective_s, r.cold_objective_s, r.node_bytes);
            if better(key(x), key(best)) {
                x
            } else {
                best
            }
        })
        .cloned()
        .expect("at least one B+-tree node size");
    let c7 = corollary7(&model, w);
    let be = betree_rows(&model, w, cache);
    // A flush holds the pinned root, the parent and the child at once, so a node must fit in
    // the cache several times over; past that the tree thrashes, which the per-level cache
    // model misses (`strata bench sweep` with an 8 MiB cache: flat up to 4 MiB nodes, a
    // collapse to 32 ms per insert at 16 MiB).
    let fits_cache = |r: &BeTreeRow| r.node_bytes.saturating_mul(CACHE_NODES) <= w.cache_bytes;
    if be.iter().any(|(r, _)| !fits_cache(r)) {
        notes.push(format!(
            "Bε-tree nodes larger than 1/{CACHE_NODES} of the cache are not considered."
        ));
    }
    let (be_row, be_pred) = be
        .iter()
        .filter(|(r, _)| fits_cache(r) || r.node_bytes == BETREE_MIN_NODE)
        .reduce(|best, x| {
            let key = |(r, _): &(BeTreeRow, Prediction)| {
                (r.objective_s, r.cold_objective_s, r.node_bytes)
            };
            if better(key(x), key(best)) {
                x
            } else {
                best
            }
        })
        .cloned()
        .expect("at least one Bε-tree geometry");

    let sensitivity = powers(BTREE_MIN_NODE, BETREE_MAX_NODE)
        .map(|b| {
            let bp = predict::btree(&w.input(b, cache), &model);
            let mut inp = w.input(b, cache);
            inp.fanout = Some(be_row.fanout);
            inp.basement_bytes = be_row.basement_bytes.min(b);
            let ep = predict::betree_engine(&inp, &model);
            SensitivityRow {
                node_bytes: b,
                btree_point_s: bp.point.seconds,
                btree_insert_s: bp.insert.seconds,
                betree_point_s: ep.point.seconds,
                betree_insert_s: ep.insert.seconds,
                betree_insert_paper_s: predict::betree_paper(&inp, &model).insert.seconds,
                btree_allowed: (BTREE_MIN_NODE..=BTREE_MAX_NODE).contains(&b),
                betree_allowed: (BETREE_MIN_NODE..=BETREE_MAX_NODE).contains(&b),
            }
        })
        .collect();

    // The load's WA is asked of the real cache even when the choice was made cold: a load into
    // a cache that holds everything writes little beyond the log and the checkpoints.
    let load_wa = {
        let mut inp = w.input(be_row.node_bytes, w.cache_bytes);
        inp.fanout = Some(be_row.fanout);
        inp.basement_bytes = be_row.basement_bytes;
        predict::betree_load(&inp, &model)
    };
    let paper_insert = {
        let mut inp = w.input(be_row.node_bytes, cache);
        inp.fanout = Some(be_row.fanout);
        inp.basement_bytes = be_row.basement_bytes;
        predict::betree_paper(&inp, &model).insert
    };

    // Once the leaves leave the cache, a B+-tree insert rewrites a leaf: the textbook B-tree's
    // write amplification, which a user choosing it by mistake should hear about. Both figures
    // include the log; the Bε-tree's is its engine's account (runs spilled beside leaves).
    // The leaf is rewritten whole, so the WA grows with the node: the 64 KiB figure is there
    // for whoever runs the B+-tree with nodes of that size (strata's bench did: 263× measured
    // at 300K records and 8 MiB, against 25× with the 4 KiB the tuner picks).
    if !fits {
        let logical = (w.key_bytes + w.value_bytes) as f64;
        let wa = |p: &Prediction| p.insert.write_bytes / logical + load_wa.log;
        let bt_wa = wa(&bt_pred);
        let be_wa = load_wa.marginal;
        if bt_wa >= 10.0 && bt_wa > 2.0 * be_wa {
            let large = bt
                .iter()
                .find(|(r, _)| r.node_bytes == WIDE_BTREE_NODE && r.node_bytes != bt_row.node_bytes)
                .map(|(r, p)| format!(" ({:.0}× with {} nodes)", wa(p), human_bytes(r.node_bytes)))
                .unwrap_or_default();
            notes.push(format!(
                "The data outgrows the cache (about {:.1}× it): a B+-tree insert then rewrites a \
                 {} leaf, a predicted {bt_wa:.0}× write amplification (log included){large} \
                 against {be_wa:.1}× for the Bε-tree. Choose the B+-tree for read-mostly work \
                 only.",
                w.data_bytes() / w.cache_bytes.max(1) as f64,
                human_bytes(bt_row.node_bytes)
            ));
        }
    }

    if profile.affine.points.is_empty() {
        notes.push(format!(
            "No measured points in the profile ({}): IOPS come from the model.",
            profile.device
        ));
    }
    notes.push(format!(
        "Predicted IO time per insert: B+-tree {:.2} µs, Bε-tree {:.2} µs; per point query: \
         B+-tree {:.2} µs, Bε-tree {:.2} µs.",
        bt_row.insert.seconds * 1e6,
        be_row.insert.seconds * 1e6,
        bt_row.point.seconds * 1e6,
        be_row.point.seconds * 1e6,
    ));

    Recommendation {
        profile: ProfileSummary {
            device: profile.device.clone(),
            setup_s: model.setup_s,
            per_byte_s: model.per_byte_s,
            alpha: model.alpha(),
            half_bandwidth_bytes: model.half_bandwidth_bytes(),
            parallelism: profile.pdam.parallelism,
            saturation_bytes_per_s: profile.pdam.saturation_bytes_per_s,
            fsync_s: profile.fsync.mean_s,
        },
        workload: w.clone(),
        effective_cache_bytes: cache,
        btree: BTreeChoice {
            node_bytes: bt_row.node_bytes,
            prediction: bt_pred,
            corollary7: c7,
            table: bt.into_iter().map(|(r, _)| r).collect(),
        },
        betree: BeTreeChoice {
            node_bytes: be_row.node_bytes,
            fanout: be_row.fanout,
            basement_bytes: be_row.basement_bytes,
            prediction: be_pred,
            load_wa,
            paper_insert,
            corollary12: corollary12(&model, w),
            table: be.into_iter().map(|(r, _)| r).collect(),
        },
        sensitivity,
        iops: iops_table(profile, w, cache),
        notes,
    }
}

/// The tuner's Bε-tree choice as an engine geometry.
pub fn geometry(profile: &DeviceProfile, workload: &Workload) -> Geometry {
    betree_geometry(&recommend(profile, workload).betree)
}

fn betree_geometry(b: &BeTreeChoice) -> Geometry {
    Geometry {
        node_size: b.node_bytes as usize,
        fanout: b.fanout as usize,
        basement: b.basement_bytes as usize,
    }
}

/// The Bε-tree geometry a new database gets with `EngineOptions::Auto`: the tuner's for this
/// many records, cache and log between checkpoints, priced with the saved device profile
/// (`strata profile`), or with `DeviceProfile::builtin()` (an SSD) when no profile is saved or
/// its affine fit does not hold (`DeviceProfile::affine_holds`). Reads the saved profile.
/// Tuning from built-in figures rather than using a fixed geometry: the cache and the record
/// count decide as much as the device does (a fixed 64 KiB basement read 12× slower than the
/// tuned 4 KiB with the data beyond the cache).
pub fn auto_geometry(
    expected_keys: u64,
    cache_bytes: u64,
    checkpoint_wal_bytes: u64,
) -> Result<(Geometry, Origin)> {
    let saved = DeviceProfile::load_saved()?.map(|(_, p)| p);
    Ok(auto_geometry_with(
        saved.as_ref(),
        expected_keys,
        cache_bytes,
        checkpoint_wal_bytes,
    ))
}

/// The B+-tree node size `strata tune` picks for this many records and cache, priced with the
/// saved device profile or the built-in figures, as `auto_geometry` does for the Bε-tree. Once
/// the data outgrows the cache every insert writes a leaf back, so the pick is small (4 KiB
/// at 1M records and 32 MiB); a fixed 64 KiB node writes about 16 times the bytes there.
pub fn auto_btree_node(
    expected_keys: u64,
    cache_bytes: u64,
    checkpoint_wal_bytes: u64,
) -> Result<(usize, Origin)> {
    let saved = DeviceProfile::load_saved()?.map(|(_, p)| p);
    Ok(auto_btree_node_with(
        saved.as_ref(),
        expected_keys,
        cache_bytes,
        checkpoint_wal_bytes,
    ))
}

/// `auto_btree_node` with the profile given (`None`: no saved profile).
pub fn auto_btree_node_with(
    profile: Option<&DeviceProfile>,
    expected_keys: u64,
    cache_bytes: u64,
    checkpoint_wal_bytes: u64,
) -> (usize, Origin) {
    let (r, origin) = auto_recommend(profile, expected_keys, cache_bytes, checkpoint_wal_bytes);
    (r.btree.node_bytes as usize, origin)
}

/// The tuner's recommendation a new database's automatic geometry comes from: priced with
/// `profile` when its affine fit holds, else with the built-in figures.
fn auto_recommend(
    profile: Option<&DeviceProfile>,
    expected_keys: u64,
    cache_bytes: u64,
    checkpoint_wal_bytes: u64,
) -> (Recommendation, Origin) {
    let mut w = Workload::new(expected_keys);
    w.cache_bytes = cache_bytes;
    w.checkpoint_wal_bytes = checkpoint_wal_bytes;
    match profile {
        Some(p) if p.affine_holds().is_ok() => (recommend(p, &w), Origin::Profile),
        _ => (recommend(&DeviceProfile::builtin(), &w), Origin::Builtin),
    }
}

/// `auto_geometry` with the profile given (`None`: no saved profile): the same rule, for
/// whoever needs to know what geometry an engine opened with a saved profile got.
pub fn auto_geometry_with(
    profile: Option<&DeviceProfile>,
    expected_keys: u64,
    cache_bytes: u64,
    checkpoint_wal_bytes: u64,
) -> (Geometry, Origin) {
    let (r, origin) = auto_recommend(profile, expected_keys, cache_bytes, checkpoint_wal_bytes);
    (betree_geometry(&r.betree), origin)
}
