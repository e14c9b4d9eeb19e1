//! The node-size sweep (seed 000 section 7, issue 4 item 5): on a real directory with O_DIRECT
//! and a cache several times smaller than the data, time random inserts and random point queries
//! for a range of node sizes on the B+-tree and on the Bε-tree, beside the affine model's
//! prediction, the tuner's pick and the measured best. The paper's claim to check: past its
//! optimum the B+-tree's cost grows about linearly with the node size, the Bε-tree's much more
//! slowly; `TreeSummary::largest_over_best` is the figure that checks it.
//!
//! Per node size and tree, on a fresh database in its own subdirectory (removed afterwards):
//! 1. **Load**: `records` records (16-byte keys, 100-byte values) in a pseudo-random order, in
//!    batches of 1,000 with `Durability::None`, with a cache big enough to hold them all and
//!    without O_DIRECT (so the load runs at memory speed and its checkpoint is one buffered
//!    write-out and an fsync), then close. Random order leaves the trees as random inserts do
//!    (leaves about ln 2 full, Bε-tree buffers holding messages), which is the state the model
//!    predicts for; a sorted load would leave half-full leaves and empty buffers that the timed
//!    inserts would then fill for free.
//! 2. **Reopen** with O_DIRECT and the small cache, and warm the cache with random point
//!    queries until it is nearly full (or a bound on count or time is reached).
//! 3. **Repetitions**, each: `ops` point queries of random loaded keys (every value checked),
//!    then `ops` inserts of new random keys, each its own write with `Durability::None` (no
//!    fsync; the log goes to the page cache, the data file is O_DIRECT), then one checkpoint,
//!    timed with the inserts: it writes the dirty nodes they left in the cache, as the model's
//!    write-back rule with `ops` inserts per checkpoint assumes. A phase stops early past its
//!    time budget once `min_ops` operations are done, so huge B+-tree nodes do not stall the
//!    sweep; the ops actually done are reported.
//!
//! A point's µs/op is the median over repetitions; IO per op (from the data file's `IoStats`)
//! is summed over them. Predictions come from `model::predict` with the same N, record sizes,
//! cache and inserts per checkpoint, priced by the profile's affine model. The model prices IO
//! at queue depth 1 only; measured time also includes CPU (decoding, the log), so agreement is
//! expected in shape, not to the microsecond; `io_model_us` (the IO actually done, priced by
//! the same model) separates a wrong IO count from a wrong price.
//!
//! The Bε-tree's fanout and basement at each node size are the tuner's: the cheapest for the
//! mixed workload (½ insert, ½ point query) by `tune::recommend`'s table for nodes of 64 KiB and
//! more, and by the same search (`betree_geometry`) below that, where the tuner does not look.
//! The tuner's pick is `tune::recommend` for the mixed workload; it is added to the swept sizes
//! when it lies in range and off the grid, so it is measured whenever it is in range.
//!
//! Node sizes are powers of `step` from `min_node` to `max_node`. The B+-tree stops at 4 MiB,
//! its largest node; the Bε-tree may go on to 16 MiB, the tuner's largest, so that a pick
//! beyond 4 MiB can be measured too.
//!
//! **On a simulated device** (`Config::simulated`, `strata bench sweep --sim PRESET`): every
//! database lives on a `SimEnv` priced by the preset (seed 000's Tables 1 and 2), the profile is
//! the preset's own model (as a perfect profiler would measure it), and a phase's time is the
//! data file's IO priced by that model: what the simulator's clock charges for IOs issued one at
//! a time, which is how the trees issue them. CPU and the log are left out, so the curve is the
//! device's alone. Seed 000 §7's figure then has an exact answer to check against: α fitted to
//! the measured B+-tree curve (`AlphaFit`) against the preset's t/s.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;
use strata::model::fit;
use strata::model::predict::{self, PredictInput, Prediction};
use strata::model::{Affine, Pdam, SplitMix64};
use strata::profile::DeviceProfile;
use strata::storage::sim::{SimPreset, PDAM_BLOCK};
use strata::storage::SimEnv;
use strata::tune::{self, Mix, Workload};
use strata::{Db, Durability, Error, IoSnapshot, Options, Result, WriteBatch};

mod plot;

pub use plot::svg;

pub const KEY_BYTES: usize = 16;
pub const VALUE_BYTES: usize = 100;
/// Records per batch while loading.
const LOAD_BATCH: u64 = 1000;
/// The tuner considers Bε-tree nodes from this size up; below it the sweep searches itself.
const TUNER_BETREE_MIN: u64 = tune::BETREE_MIN_NODE;
/// Largest node each tree is swept to.
pub const MAX_NODE: u64 = tune::BETREE_MAX_NODE;
pub const MIN_NODE: u64 = tune::BTREE_MIN_NODE;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tree {
    BTree,
    BeTree,
}

impl Tree {
    pub fn name(self) -> &'static str {
        match self {
            Tree::BTree => "btree",
            Tree::BeTree => "betree",
        }
    }

    /// For people: "B+-tree", "Bε-tree".
    pub fn label(self) -> &'static str {
        match self {
            Tree::BTree => "B+-tree",
            Tree::BeTree => "Bε-tree",
        }
    }

    /// The largest node the sweep gives this tree.
    pub fn max_node(self) -> u64 {
        match self {
            Tree::BTree => tune::BTREE_MAX_NODE,
            Tree::BeTree => tune::BETREE_MAX_NODE,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Config {
    /// Parent directory; each point's database is a new subdirectory of it, removed after.
    pub dir: PathBuf,
    /// N, records loaded before timing.
    pub records: u64,
    /// The small cache the timed phases run with.
    pub cache_bytes: u64,
    pub min_node: u64,
    pub max_node: u64,
    /// Node sizes are min_node·step^k up to max_node (2 or 4).
    pub step: u64,
    pub trees: Vec<Tree>,
    /// Timed inserts and timed queries per repetition.
    pub ops: u64,
    /// A phase past its time budget stops once it has done this many.
    pub min_ops: u64,
    /// Seconds one timed phase may take before stopping early.
    pub phase_budget_s: f64,
    /// Seconds the cache warm-up may take.
    pub warmup_budget_s: f64,
    pub repetitions: u32,
    /// O_DIRECT on the data file (the sweep's point; off only for file systems without it).
    pub direct_io: bool,
    pub seed: u64,
    /// The device profile predictions are priced with.
    #[serde(skip)]
    pub profile: DeviceProfile,
    /// Where the profile came from, for the report.
    pub profile_source: String,
    /// The profile is a stand-in (no measured one was available), and the report says so.
    pub profile_is_default: bool,
    /// Run on this simulated device preset (storage::sim::PRESETS) instead of `dir`.
    pub sim: Option<String>,
}

impl Config {
    /// The default run: 1M records (116 MB of keys and values, 14x the cache) against an 8 MiB
    /// cache, nodes 4 KiB .. 4 MiB in powers of 4, both trees, 3 repetitions of 2,000
    /// operations (fewer where a phase passes 2 s); 2-3 minutes here.
    pub fn new(dir: impl Into<PathBuf>, profile: DeviceProfile, profile_source: &str) -> Config {
        Config {
            dir: dir.into(),
            records: 1_000_000,
            cache_bytes: 8 << 20,
            min_node: 4 << 10,
            max_node: 4 << 20,
            step: 4,
            trees: vec![Tree::BTree, Tree::BeTree],
            ops: 2000,
            min_ops: 30,
            phase_budget_s: 2.0,
            warmup_budget_s: 2.0,
            repetitions: 3,
            direct_io: true,
            seed: 1,
            profile,
            profile_source: profile_source.to_string(),
            profile_is_default: false,
            sim: None,
        }
    }

    /// The sweep on the simulated device `preset`, priced by the preset's own model: the default
    /// run's sizes, which take seconds here since no IO waits.
    pub fn simulated(preset: &str) -> Result<Config> {
        let found = SimPreset::find(preset).ok_or_else(|| {
            Error::InvalidOptions(format!(
                "no simulated device {preset:?}; the presets are {}",
                SimPreset::names().join(", ")
            ))
        })?;
        let m = found.model();
        let profile = DeviceProfile::from_models(
            &format!("simulated {}", found.name),
            m.affine,
            Pdam::new(m.parallelism, PDAM_BLOCK, m.affine.cost(PDAM_BLOCK)),
            m.bandwidth_bytes_per_s.unwrap_or(1.0 / m.affine.per_byte_s),
            m.sync_s,
        );
        let source = format!(
            "simulated device {} ({}), its own model",
            found.name, found.description
        );
        let mut cfg = Config::new(PathBuf::new(), profile, &source);
        cfg.sim = Some(found.name.to_string());
        Ok(cfg)
    }

    /// `--quick`: a fifth of the data and a quarter of the cache (still 11x), nodes only up to
    /// 1 MiB (a 4 MiB node would not fit in the cache, and loading the B+-tree with them is
    /// slow), fewer operations, one repetition. About 10 seconds here.
    pub fn quick(mut self) -> Config {
        self.records = 200_000;
        self.cache_bytes = 2 << 20;
        self.max_node = 1 << 20;
        self.ops = 300;
        self.min_ops = 20;
        self.phase_budget_s = 0.8;
        self.warmup_budget_s = 0.5;
        self.repetitions = 1;
        self
    }

    /// Check the configuration makes sense, before anything is created.
    pub fn validate(&self) -> Result<()> {
        let bad = |why: String| Err(Error::InvalidOptions(why));
        if self.records < 1000 {
            return bad(format!("at least 1000 records, not {}", self.records));
        }
        if self.cache_bytes < 64 << 10 {
            return bad("the cache must be at least 64 KiB".into());
        }
        let ok = |n: u64| n.is_power_of_two() && (MIN_NODE..=MAX_NODE).contains(&n);
        if !ok(self.min_node) || !ok(self.max_node) || self.min_node > self.max_node {
            return bad(format!(
                "node sizes must be powers of two from 4 KiB to 16 MiB (the B+-tree stops at \
                 4 MiB) with min ≤ max, not {} .. {}",
                self.min_node, self.max_node
            ));
        }
        if self.trees == [Tree::BTree] && self.min_node > Tree::BTree.max_node() {
            return bad("the B+-tree's nodes go up to 4 MiB only".into());
        }
        if self.step != 2 && self.step != 4 {
            return bad(format!("the step must be 2 or 4, not {}", self.step));
        }
        if self.ops == 0 || self.repetitions == 0 || self.trees.is_empty() {
            return bad("ops, repetitions and trees must not be empty".into());
        }
        if let Some(name) = &self.sim {
            if SimPreset::find(name).is_none() {
                return bad(format!(
                    "no simulated device {name:?}; the presets are {}",
                    SimPreset::names().join(", ")
                ));
            }
        }
        Ok(())
    }

    /// The workload the tuner is asked about: this data, this cache, half inserts and half
    /// point queries, a checkpoint every `ops` inserts (as the timed phase does).
    pub fn workload(&self) -> Workload {
        let mut w = Workload::new(self.records);
        w.key_bytes = KEY_BYTES as u64;
        w.value_bytes = VALUE_BYTES as u64;
        w.cache_bytes = self.cache_bytes;
        w.mix = Mix::Mixed;
        w.checkpoint_wal_bytes = (self.ops as f64
            * (KEY_BYTES + VALUE_BYTES) as f64
            * (1.0 + predict::WAL_OP_OVERHEAD / (KEY_BYTES + VALUE_BYTES) as f64))
            .ceil() as u64;
        w
    }

    /// The grid of node sizes for `tree`: powers of `step` from min to max, up to the tree's
    /// largest node.
    pub fn grid(&self, tree: Tree) -> Vec<u64> {
        let max = self.max_node.min(tree.max_node());
        std::iter::successors(Some(self.min_node), |&n| Some(n * self.step))
            .take_while(|&n| n <= max)
            .collect()
    }
}

/// One timed phase, summed over repetitions.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Phase {
    /// Operations per repetition actually done (a phase may stop early past its budget).
    pub ops: Vec<u64>,
    /// µs per operation in each repetition.
    pub us_per_op_reps: Vec<f64>,
    /// The median of `us_per_op_reps`.
    pub us_per_op: f64,
    /// All the time over all the operations: steadier than the median where a few costly
    /// events (Bε-tree flushes) fall unevenly between repetitions.
    pub mean_us_per_op: f64,
    /// Data-file IO per operation, over all repetitions.
    pub reads_per_op: f64,
    pub writes_per_op: f64,
    pub bytes_read_per_op: f64,
    pub bytes_written_per_op: f64,
    /// The data-file IO actually done, priced by the profile's affine model, µs per op.
    pub io_model_us: f64,
    /// Log bytes per operation (buffered, not O_DIRECT).
    pub wal_bytes_per_op: f64,
    pub cache_hit_rate: f64,
}

/// The model's prediction for one point.
#[derive(Clone, Debug, Serialize)]
pub struct Predicted {
    pub insert_us: f64,
    pub query_us: f64,
    /// ½ insert + ½ query: the tuner's objective for the mixed workload.
    pub mixed_us: f64,
    pub insert_reads: f64,
    pub insert_writes: f64,
    pub insert_bytes: f64,
    pub query_reads: f64,
    pub query_bytes: f64,
    pub height: u32,
    pub leaves: f64,
    pub cached_levels: f64,
}

impl Predicted {
    /// The predicted µs of one operation of kind `op`.
    pub fn of(&self, op: Op) -> f64 {
        match op {
            Op::Insert => self.insert_us,
            Op::Query => self.query_us,
            Op::Mixed => self.mixed_us,
        }
    }

    fn from(p: &Prediction) -> Predicted {
        Predicted {
            insert_us: p.insert.seconds * 1e6,
            query_us: p.point.seconds * 1e6,
            mixed_us: 0.5 * (p.insert.seconds + p.point.seconds) * 1e6,
            insert_reads: p.insert.reads,
            insert_writes: p.insert.writes,
            insert_bytes: p.insert.bytes(),
            query_reads: p.point.reads,
            query_bytes: p.point.read_bytes,
            height: p.height,
            leaves: p.leaves,
            cached_levels: p.cached_levels,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Point {
    pub tree: Tree,
    pub node_bytes: u64,
    /// Bε-tree only.
    pub fanout: Option<u64>,
    pub basement_bytes: Option<u64>,
    /// The tree after loading.
    pub height: u32,
    pub leaves: u64,
    pub internal_nodes: u64,
    pub buffered_messages: u64,
    pub data_file_bytes: u64,
    pub load_s: f64,
    pub insert: Phase,
    pub query: Phase,
    /// ½ insert + ½ query, measured µs.
    pub mixed_us: f64,
    pub predicted: Predicted,
}

impl Point {
    pub fn measured(&self, op: Op) -> f64 {
        match op {
            Op::Insert => self.insert.us_per_op,
            Op::Query => self.query.us_per_op,
            Op::Mixed => self.mixed_us,
        }
    }

    pub fn predicted(&self, op: Op) -> f64 {
        self.predicted.of(op)
    }
}

/// What a figure is about: random inserts, point queries, or the mixed workload (½ each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Insert,
    Query,
    Mixed,
}

impl Op {
    pub const ALL: [Op; 3] = [Op::Insert, Op::Query, Op::Mixed];

    pub fn label(self) -> &'static str {
        match self {
            Op::Insert => "random insert",
            Op::Query => "point query",
            Op::Mixed => "mixed (½ + ½)",
        }
    }
}

/// The tuner's choice for one tree (mixed workload).
#[derive(Clone, Debug, Serialize)]
pub struct TunerPick {
    pub node_bytes: u64,
    pub fanout: Option<u64>,
    pub basement_bytes: Option<u64>,
    /// Whether the pick lies in the swept range (and so was measured).
    pub in_sweep: bool,
}

/// Per operation: the node size that measured best, the model's best over the swept sizes, and
/// the cost at the largest swept node over the best measured cost.
#[derive(Clone, Debug, Serialize)]
pub struct Best {
    pub op: Op,
    pub measured_best_node: u64,
    pub measured_best_us: f64,
    pub predicted_best_node: u64,
    pub largest_node: u64,
    pub largest_us: f64,
    /// largest_us / measured_best_us.
    pub largest_over_best: f64,
    /// The same ratio in the model's curve (largest over its minimum).
    pub predicted_largest_over_best: f64,
    /// How cost grows past the measured best: ln(largest_us / best_us) / ln(largest node /
    /// best node), the log-log slope. 1 is linear growth in the node size, 0 flat. None when
    /// the best is the largest node.
    pub growth_exponent: Option<f64>,
    /// The same slope between the two largest nodes measured, where the affine model's cost
    /// 1 + αx is nearly linear for a B+-tree (x well past 1/α). None with one point.
    pub last_step_exponent: Option<f64>,
    /// The node size that step starts from.
    pub last_step_from: Option<u64>,
}

/// Seed 000 §7: the device's α read off the measured query curve, two ways, each fitted with
/// weights 1/y² so that every size counts alike.
///
/// - The seed's: past its best node size a tree's query costs about r·(1 + αB) setups, a line
///   in B whose slope over its intercept is α. In strata that slope is off α twice over: nodes
///   are written at their fill (about ln 2 of B), and the reads per query r grow with B as fewer
///   leaves fit in the cache. Fitted from the measured best node up.
/// - Through the tree's model: the model predicts, at each node size, r reads moving X bytes
///   per query (`Prediction::point`), which the device prices s·r + t·X; least squares of the
///   measured curve on (r, X) over the sizes of at most a quarter of the cache gives s and t,
///   and α = t/s. Not an identity: r and X are the model's, not the measured counts, so α comes
///   out right only where the model's shape of the tree is.
#[derive(Clone, Debug, Serialize)]
pub struct AlphaFit {
    /// The smallest node size of the seed's line (the measured best) and how many sizes it has.
    pub from_node: u64,
    pub sizes: usize,
    /// The seed's line: slope over intercept of µs per query against the node size.
    pub alpha_per_node_byte: f64,
    pub r2_node: f64,
    /// Through the model: the setup s and α = t/s.
    pub setup_us: f64,
    pub alpha: f64,
    /// 1/α, bytes.
    pub half_bandwidth_bytes: f64,
    pub r2: f64,
    /// The profile's α, for comparison.
    pub profile_alpha: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct TreeSummary {
    pub tree: Tree,
    pub tuner: TunerPick,
    /// Insert, query and mixed, in that order.
    pub best: Vec<Best>,
    /// α from the measured query curve past its best; None with fewer than three sizes there.
    pub alpha_fit: Option<AlphaFit>,
}

impl TreeSummary {
    pub fn best(&self, op: Op) -> &Best {
        self.best.iter().find(|b| b.op == op).expect("every op")
    }
}

/// The model's curve for one tree at every power of two in the swept range.
#[derive(Clone, Debug, Serialize)]
pub struct CurvePoint {
    pub tree: Tree,
    pub node_bytes: u64,
    pub fanout: Option<u64>,
    pub basement_bytes: Option<u64>,
    pub predicted: Predicted,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub config: Config,
    /// Keys and values loaded, bytes, and that over the cache.
    pub data_bytes: u64,
    pub data_over_cache: f64,
    pub profile: ProfileView,
    pub points: Vec<Point>,
    pub curve: Vec<CurvePoint>,
    pub trees: Vec<TreeSummary>,
    pub notes: Vec<String>,
    pub elapsed_s: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProfileView {
    pub source: String,
    /// A stand-in profile, not one measured on this machine.
    pub is_default: bool,
    pub device: String,
    pub setup_us: f64,
    pub per_byte_ns: f64,
    pub half_bandwidth_bytes: f64,
}

impl Report {
    pub fn points_of(&self, tree: Tree) -> impl Iterator<Item = &Point> {
        self.points.iter().filter(move |p| p.tree == tree)
    }

    pub fn summary(&self, tree: Tree) -> Option<&TreeSummary> {
        self.trees.iter().find(|s| s.tree == tree)
    }

    /// The SVG figure (see `svg`).
    pub fn svg(&self) -> String {
        svg(self)
    }
}

/// Loaded record i's key: an even 8-byte big-endian prefix spread over the key space, then 8
/// filler bytes. Inserted keys have odd prefixes, so they never collide with loaded ones and
/// fall uniformly between them.
fn loaded_key(i: u64, records: u64) -> [u8; KEY_BYTES] {
    let stride = (u64::MAX / records) & !1;
    key_of(i * stride)
}

fn key_of(prefix: u64) -> [u8; KEY_BYTES] {
    let mut k = [0u8; KEY_BYTES];
    k[..8].copy_from_slice(&prefix.to_be_bytes());
    k[8..].copy_from_slice(&SplitMix64::new(prefix).next_u64().to_le_bytes());
    k
}

/// A value determined by the key's prefix, so a query can check what it got.
fn value_of(key: &[u8; KEY_BYTES]) -> [u8; VALUE_BYTES] {
    let mut rng = SplitMix64::new(u64::from_be_bytes(key[..8].try_into().expect("8 bytes")));
    let mut v = [0u8; VALUE_BYTES];
    for chunk in v.chunks_mut(8) {
        let w = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
    v
}

/// A permutation of 0..n: i ↦ (a·i + c) mod n with a coprime to n, a pseudo-random order that
/// needs no table.
struct Permutation {
    n: u64,
    a: u64,
    c: u64,
}

impl Permutation {
    fn new(n: u64, seed: u64) -> Permutation {
        let mut rng = SplitMix64::new(seed);
        let gcd = |mut a: u64, mut b: u64| {
            while b != 0 {
                (a, b) = (b, a % b);
            }
            a
        };
        let mut a = (rng.below(n / 2) + n / 3) | 1;
        while gcd(a, n) != 1 {
            a += 2;
        }
        Permutation {
            n,
            a,
            c: rng.below(n),
        }
    }

    fn at(&self, i: u64) -> u64 {
        ((self.a as u128 * i as u128 + self.c as u128) % self.n as u128) as u64
    }
}

/// The longest value the Bε-tree keeps inline with this geometry (engines/betree
/// `Geometry::inline_max`); longer values go out of line, one block each, which the model does
/// not price.
pub fn betree_inline_max(node: u64, fanout: u64, basement: u64) -> u64 {
    (basement / 4).min(node / (4 * fanout)).max(64)
}

/// The Bε-tree (fanout, basement) the tuner's search chooses for node size `b`: the cheapest for
/// the workload's mix over fanouts 4..64 and basements of 4 KiB up to the node (powers of two);
/// ties go to the smaller fanout, then the smaller basement. Used below 64 KiB, where
/// `tune::recommend` does not look. Unlike the tuner it skips geometries that would put the
/// workload's values out of line: at 16 KiB the cheapest by the model is fanout 47, where the
/// engine stores 100-byte values as blobs and each insert writes a block the model never sees.
/// (From 64 KiB up every geometry keeps values of up to 256 bytes inline.)
pub fn betree_geometry(model: &Affine, w: &Workload, b: u64) -> (u64, u64) {
    let (wi, wp, wr) = w.mix.weights();
    let mut best: Option<(f64, u64, u64)> = None;
    for f in tune::BETREE_MIN_FANOUT..=tune::BETREE_MAX_FANOUT {
        let mut basement = tune::BASEMENT_MIN;
        while basement <= b {
            if betree_inline_max(b, f, basement) < w.value_bytes {
                basement *= 2;
                continue;
            }
            let p = predict::betree_engine(&input(w, b, Some(f), basement), model);
            let cost = wi * p.insert.seconds + wp * p.point.seconds + wr * p.range.seconds;
            if best.is_none_or(|(c, _, _)| cost < c * (1.0 - 1e-9)) {
                best = Some((cost, f, basement));
            }
            basement *= 2;
        }
    }
    // Fanout 4 with 4 KiB basements keeps values of up to 256 bytes inline at every size.
    let (_, f, basement) = best.expect("a geometry that keeps the values inline");
    (f, basement)
}

/// The prediction input for this workload, as `tune` builds it.
fn input(w: &Workload, node: u64, fanout: Option<u64>, basement: u64) -> PredictInput {
    let mut p = PredictInput::new(node, w.keys, w.key_bytes, w.value_bytes, w.cache_bytes);
    p.fanout = fanout;
    p.basement_bytes = basement;
    p.range_items = w.range_items;
    p.inserts_per_checkpoint =
        predict::checkpoint_inserts(w.checkpoint_wal_bytes, w.key_bytes, w.value_bytes);
    p
}

/// Everything fixed before measuring: the tuner's recommendation and the geometry per size.
struct Plan {
    model: Affine,
    workload: Workload,
    rec: tune::Recommendation,
}

impl Plan {
    fn new(cfg: &Config) -> Plan {
        let workload = cfg.workload();
        let rec = tune::recommend(&cfg.profile, &workload);
        Plan {
            model: cfg.profile.affine_model(),
            workload,
            rec,
        }
    }

    /// (fanout, basement) for a Bε-tree node size; None for the B+-tree.
    fn geometry(&self, tree: Tree, node: u64) -> Option<(u64, u64)> {
        match tree {
            Tree::BTree => None,
            Tree::BeTree if node >= TUNER_BETREE_MIN => self
                .rec
                .betree
                .table
                .iter()
                .find(|r| r.node_bytes == node)
                .map(|r| (r.fanout, r.basement_bytes))
                .or_else(|| Some(betree_geometry(&self.model, &self.workload, node))),
            Tree::BeTree => Some(betree_geometry(&self.model, &self.workload, node)),
        }
    }

    fn predict(&self, tree: Tree, node: u64, geo: Option<(u64, u64)>) -> Prediction {
        match (tree, geo) {
            (Tree::BeTree, Some((f, basement))) => {
                predict::betree_engine(&input(&self.workload, node, Some(f), basement), &self.model)
            }
            _ => predict::btree(&input(&self.workload, node, None, 4096), &self.model),
        }
    }

    fn tuner_pick(&self, tree: Tree, cfg: &Config) -> TunerPick {
        let (node, fanout, basement) = match tree {
            Tree::BTree => (self.rec.btree.node_bytes, None, None),
            Tree::BeTree => (
                self.rec.betree.node_bytes,
                Some(self.rec.betree.fanout),
                Some(self.rec.betree.basement_bytes),
            ),
        };
        TunerPick {
            node_bytes: node,
            fanout,
            basement_bytes: basement,
            in_sweep: (cfg.min_node..=cfg.max_node.min(tree.max_node())).contains(&node),
        }
    }
}

fn options(cfg: &Config, tree: Tree, node: u64, geo: Option<(u64, u64)>) -> Options {
    let o = Options::default()
        .direct_io(cfg.direct_io)
        .durability(Durability::None)
        // Checkpoints only where the sweep asks for them.
        .checkpoint_wal_bytes(1 << 40);
    let mut o = match (tree, geo) {
        (Tree::BeTree, Some((f, basement))) => {
            o.betree(node as usize, f as usize, basement as usize)
        }
        _ => o.btree(node as usize),
    };
    o.cost_model = cfg.profile.affine_model();
    o
}

/// IO and cache counters at one moment.
struct Counters {
    data: IoSnapshot,
    wal: IoSnapshot,
    hits: u64,
    misses: u64,
}

fn counters(db: &Db) -> Counters {
    let m = db.metrics();
    Counters {
        data: m.data_io,
        wal: m.wal_io,
        hits: m.engine.cache.hits,
        misses: m.engine.cache.misses,
    }
}

/// Sums over the repetitions of one phase.
#[derive(Default)]
struct Tally {
    phase: Phase,
    ops: u64,
    secs: f64,
    data: IoSnapshot,
    wal_bytes: u64,
    hits: u64,
    misses: u64,
}

impl Tally {
    fn add(&mut self, ops: u64, secs: f64, before: &Counters, after: &Counters) {
        self.phase.ops.push(ops);
        self.phase.us_per_op_reps.push(secs * 1e6 / ops as f64);
        self.ops += ops;
        self.secs += secs;
        self.data = self.data.plus(&(&after.data - &before.data));
        self.wal_bytes += after.wal.bytes_written - before.wal.bytes_written;
        self.hits += after.hits - before.hits;
        self.misses += after.misses - before.misses;
    }

    fn finish(mut self) -> Phase {
        let n = self.ops.max(1) as f64;
        let p = &mut self.phase;
        p.us_per_op = median(&p.us_per_op_reps);
        p.mean_us_per_op = self.secs * 1e6 / n;
        p.reads_per_op = self.data.reads as f64 / n;
        p.writes_per_op = self.data.writes as f64 / n;
        p.bytes_read_per_op = self.data.bytes_read as f64 / n;
        p.bytes_written_per_op = self.data.bytes_written as f64 / n;
        p.io_model_us = self.data.affine_ns as f64 / 1e3 / n;
        p.wal_bytes_per_op = self.wal_bytes as f64 / n;
        let lookups = self.hits + self.misses;
        p.cache_hit_rate = if lookups == 0 {
            0.0
        } else {
            self.hits as f64 / lookups as f64
        };
        self.phase
    }
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        n => 0.5 * (s[n / 2 - 1] + s[n / 2]),
    }
}

fn query(db: &Db, i: u64, records: u64) -> Result<()> {
    let key = loaded_key(i, records);
    match db.get(key)? {
        Some(v) if v == value_of(&key) => Ok(()),
        Some(_) => Err(Error::InvalidOptions(format!(
            "sweep: loaded record {i} came back with the wrong value"
        ))),
        None => Err(Error::InvalidOptions(format!(
            "sweep: loaded record {i} is missing"
        ))),
    }
}

/// Run `op` up to `ops` times, stopping early past `budget_s` once `min_ops` are done; the
/// count done and the seconds taken.
fn timed(
    ops: u64,
    min_ops: u64,
    budget_s: f64,
    mut op: impl FnMut(u64) -> Result<()>,
) -> Result<(u64, f64)> {
    let start = Instant::now();
    let mut done = 0;
    while done < ops {
        op(done)?;
        done += 1;
        if done >= min_ops && start.elapsed().as_secs_f64() > budget_s {
            break;
        }
    }
    Ok((done, start.elapsed().as_secs_f64()))
}

/// Where one point's database lives: a directory, or a simulated disk of its own.
enum Place<'a> {
    Dir(&'a Path),
    Sim(SimEnv),
}

impl Place<'_> {
    fn open(&self, opts: Options) -> Result<Db> {
        match self {
            Place::Dir(path) => Db::open(path, opts),
            Place::Sim(env) => Db::open_in(env, opts),
        }
    }

    /// Seconds a phase took: the wall clock, or on the simulator the data file's IO priced by
    /// the preset's model (`Options::cost_model` is the profile's, which is the preset's).
    fn seconds(&self, wall_s: f64, before: &Counters, after: &Counters) -> f64 {
        match self {
            Place::Dir(_) => wall_s,
            Place::Sim(_) => (after.data.affine_ns - before.data.affine_ns) as f64 / 1e9,
        }
    }
}

fn load(cfg: &Config, place: &Place, opts: &Options) -> Result<f64> {
    let start = Instant::now();
    // A cache that holds everything, and buffered writes: the load runs at memory speed and its
    // closing checkpoint writes each node once, not one O_DIRECT write at a time.
    let roomy = (cfg.records * 512).max(256 << 20) as usize;
    let db = place.open(opts.clone().cache_bytes(roomy).direct_io(false))?;
    let order = Permutation::new(cfg.records, cfg.seed);
    let mut i = 0;
    while i < cfg.records {
        let mut b = WriteBatch::new();
        for j in i..(i + LOAD_BATCH).min(cfg.records) {
            let key = loaded_key(order.at(j), cfg.records);
            b.put(key, value_of(&key));
        }
        db.write(b)?;
        i += LOAD_BATCH;
    }
    db.close()?;
    Ok(start.elapsed().as_secs_f64())
}

fn measure(
    cfg: &Config,
    plan: &Plan,
    tree: Tree,
    node: u64,
    progress: &mut dyn FnMut(&str),
) -> Result<Point> {
    let geo = plan.geometry(tree, node);
    let opts = options(cfg, tree, node, geo);
    let path = cfg.dir.join(format!(
        "strata-sweep-{}-{}-{node}",
        std::process::id(),
        tree.name()
    ));
    // The directory goes away however this ends.
    struct Remove<'a>(&'a Path);
    impl Drop for Remove<'_> {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(self.0);
        }
    }
    let mut _remove = None;
    let place = match &cfg.sim {
        // On the simulator nothing touches a directory.
        Some(name) => {
            let env = SimEnv::new();
            let preset = SimPreset::find(name).expect("validated");
            env.disk().set_sim_model(preset.model());
            Place::Sim(env)
        }
        None => {
            if path.exists() {
                return Err(Error::InvalidOptions(format!(
                    "sweep: {} already exists",
                    path.display()
                )));
            }
            _remove = Some(Remove(&path));
            Place::Dir(&path)
        }
    };
    let shape = match geo {
        Some((f, b)) => format!(
            "{} {} nodes, fanout {f}, {} basements",
            tree.label(),
            human(node),
            human(b)
        ),
        None => format!("{} {} nodes", tree.label(), human(node)),
    };
    progress(&format!("{shape}: loading {} records", cfg.records));
    let load_s = load(cfg, &place, &opts)?;

    let db = place.open(opts.clone().cache_bytes(cfg.cache_bytes as usize))?;
    let m = db.metrics();
    let (height, leaves, internal, buffered, file_bytes) = (
        m.engine.height,
        m.engine.leaf_nodes,
        m.engine.internal_nodes,
        m.engine.detail("buffered_messages"),
        m.data_file_bytes,
    );
    let mut rng = SplitMix64::new(cfg.seed ^ node ^ ((tree as u64) << 40));
    progress(&format!("{shape}: warming the cache"));
    let warm = Instant::now();
    let mut warm_ops = 0;
    while warm_ops < 20 * cfg.ops && warm.elapsed().as_secs_f64() < cfg.warmup_budget_s {
        query(&db, rng.below(cfg.records), cfg.records)?;
        warm_ops += 1;
        let c = db.metrics().engine.cache;
        if warm_ops % 16 == 0 && c.resident_bytes * 10 >= c.budget_bytes * 9 {
            break;
        }
    }

    let mut queries = Tally::default();
    let mut inserts = Tally::default();
    for rep in 0..cfg.repetitions {
        progress(&format!(
            "{shape}: repetition {}/{}: queries, inserts",
            rep + 1,
            cfg.repetitions
        ));
        let before = counters(&db);
        let (n, s) = timed(cfg.ops, cfg.min_ops, cfg.phase_budget_s, |_| {
            query(&db, rng.below(cfg.records), cfg.records)
        })?;
        let after = counters(&db);
        queries.add(n, place.seconds(s, &before, &after), &before, &after);

        let before = counters(&db);
        let start = Instant::now();
        let (n, _) = timed(cfg.ops, cfg.min_ops, cfg.phase_budget_s, |_| {
            let key = key_of(rng.next_u64() | 1);
            db.put(key, value_of(&key))
        })?;
        db.checkpoint()?;
        let after = counters(&db);
        let s = place.seconds(start.elapsed().as_secs_f64(), &before, &after);
        inserts.add(n, s, &before, &after);
    }
    db.close()?;

    let insert = inserts.finish();
    let query = queries.finish();
    let mixed_us = 0.5 * (insert.us_per_op + query.us_per_op);
    Ok(Point {
        tree,
        node_bytes: node,
        fanout: geo.map(|g| g.0),
        basement_bytes: geo.map(|g| g.1),
        height,
        leaves,
        internal_nodes: internal,
        buffered_messages: buffered,
        data_file_bytes: file_bytes,
        load_s,
        insert,
        query,
        mixed_us,
        predicted: Predicted::from(&plan.predict(tree, node, geo)),
    })
}

fn argmin<'a, T>(items: impl Iterator<Item = &'a T>, f: impl Fn(&T) -> f64) -> Option<&'a T>
where
    T: 'a,
{
    items.min_by(|a, b| f(a).total_cmp(&f(b)))
}

/// `AlphaFit` of the measured point queries.
fn fit_alpha(pts: &[&Point], cache_bytes: u64, profile_alpha: f64) -> Option<AlphaFit> {
    let weights =
        |ys: &[f64]| -> Vec<f64> { ys.iter().map(|y| 1.0 / (y * y).max(1e-30)).collect() };
    let best = argmin(pts.iter().copied(), |p| p.measured(Op::Query))?;
    let past: Vec<&Point> = pts
        .iter()
        .copied()
        .filter(|p| p.node_bytes >= best.node_bytes)
        .collect();
    if past.len() < 3 {
        return None;
    }
    let ys: Vec<f64> = past.iter().map(|p| p.measured(Op::Query)).collect();
    let xs: Vec<f64> = past.iter().map(|p| p.node_bytes as f64).collect();
    // A line that falls, or starts at or below 0, is no affine curve.
    let line = fit::wls(&xs, &ys, &weights(&ys)).filter(|l| l.intercept > 0.0 && l.slope > 0.0)?;

    // Bytes in MiB keep the two columns of the normal equations within a few powers of ten.
    const MIB: f64 = (1u64 << 20) as f64;
    // Only nodes the cache holds several of (the tuner's own limit): with one or two, which
    // few of the leaves are resident is more than the per-level cache model can say.
    let held: Vec<&Point> = pts
        .iter()
        .copied()
        .filter(|p| p.node_bytes * tune::CACHE_NODES <= cache_bytes)
        .collect();
    let ys: Vec<f64> = held.iter().map(|p| p.measured(Op::Query)).collect();
    let reads: Vec<f64> = held.iter().map(|p| p.predicted.query_reads).collect();
    let mib: Vec<f64> = held.iter().map(|p| p.predicted.query_bytes / MIB).collect();
    let beta = fit::lstsq(&[reads.clone(), mib.clone()], &ys, &weights(&ys))?;
    let (s_us, t_us_per_mib) = (beta[0], beta[1]);
    if s_us <= 0.0 || t_us_per_mib <= 0.0 {
        return None;
    }
    let r2 = fit::r_squared(&ys, |i| s_us * reads[i] + t_us_per_mib * mib[i]);
    Some(AlphaFit {
        from_node: best.node_bytes,
        sizes: past.len(),
        alpha_per_node_byte: line.slope / line.intercept,
        r2_node: line.r2,
        setup_us: s_us,
        alpha: t_us_per_mib / MIB / s_us,
        half_bandwidth_bytes: s_us * MIB / t_us_per_mib,
        r2,
        profile_alpha,
    })
}

fn summarise(
    cfg: &Config,
    plan: &Plan,
    points: &[Point],
    curve: &[CurvePoint],
) -> Vec<TreeSummary> {
    cfg.trees
        .iter()
        .filter_map(|&tree| {
            let pts: Vec<&Point> = points.iter().filter(|p| p.tree == tree).collect();
            let largest = *pts.iter().max_by_key(|p| p.node_bytes)?;
            let before = pts
                .iter()
                .filter(|p| p.node_bytes < largest.node_bytes)
                .max_by_key(|p| p.node_bytes)
                .copied();
            let slope = |a: &Point, b: &Point, op: Op| {
                (b.measured(op) / a.measured(op)).ln()
                    / (b.node_bytes as f64 / a.node_bytes as f64).ln()
            };
            let best = Op::ALL
                .iter()
                .map(|&op| {
                    let m = argmin(pts.iter().copied(), |p| p.measured(op)).expect("points");
                    let p = argmin(pts.iter().copied(), |p| p.predicted(op)).expect("points");
                    let curve_min = curve
                        .iter()
                        .filter(|c| c.tree == tree)
                        .map(|c| c.predicted.of(op))
                        .fold(f64::INFINITY, f64::min);
                    Best {
                        op,
                        measured_best_node: m.node_bytes,
                        measured_best_us: m.measured(op),
                        predicted_best_node: p.node_bytes,
                        largest_node: largest.node_bytes,
                        largest_us: largest.measured(op),
                        largest_over_best: largest.measured(op) / m.measured(op),
                        predicted_largest_over_best: largest.predicted(op) / curve_min,
                        growth_exponent: (largest.node_bytes > m.node_bytes)
                            .then(|| slope(m, largest, op)),
                        last_step_exponent: before.map(|b| slope(b, largest, op)),
                        last_step_from: before.map(|b| b.node_bytes),
                    }
                })
                .collect();
            Some(TreeSummary {
                tree,
                tuner: plan.tuner_pick(tree, cfg),
                best,
                alpha_fit: fit_alpha(&pts, cfg.cache_bytes, plan.model.alpha()),
            })
        })
        .collect()
}

/// Run the sweep; `progress` hears what is being measured.
pub fn run(cfg: &Config, mut progress: impl FnMut(&str)) -> Result<Report> {
    cfg.validate()?;
    if cfg.sim.is_none() && !cfg.dir.is_dir() {
        return Err(Error::InvalidOptions(format!(
            "sweep: {} is not a directory",
            cfg.dir.display()
        )));
    }
    let start = Instant::now();
    let plan = Plan::new(cfg);
    let mut notes = Vec::new();

    // The model's curve at every power of two in range, and the sizes to measure: the grid
    // plus the tuner's pick.
    let mut curve = Vec::new();
    let mut jobs = Vec::new();
    for &tree in &cfg.trees {
        let mut node = cfg.min_node;
        while node <= cfg.max_node.min(tree.max_node()) {
            let geo = plan.geometry(tree, node);
            curve.push(CurvePoint {
                tree,
                node_bytes: node,
                fanout: geo.map(|g| g.0),
                basement_bytes: geo.map(|g| g.1),
                predicted: Predicted::from(&plan.predict(tree, node, geo)),
            });
            node *= 2;
        }
        let mut sizes = cfg.grid(tree);
        let pick = plan.tuner_pick(tree, cfg);
        if pick.in_sweep && !sizes.contains(&pick.node_bytes) {
            sizes.push(pick.node_bytes);
            sizes.sort_unstable();
        }
        if !pick.in_sweep {
            notes.push(format!(
                "The tuner's {} pick, {} nodes, lies outside the swept {} .. {} and was not measured.",
                tree.label(),
                human(pick.node_bytes),
                human(cfg.min_node),
                human(cfg.max_node.min(tree.max_node()))
            ));
        }
        jobs.extend(sizes.into_iter().map(|n| (tree, n)));
    }

    let mut points = Vec::new();
    for (k, &(tree, node)) in jobs.iter().enumerate() {
        let mut tagged = |s: &str| progress(&format!("[{}/{}] {s}", k + 1, jobs.len()));
        points.push(measure(cfg, &plan, tree, node, &mut tagged)?);
    }
    let trees = summarise(cfg, &plan, &points, &curve);
    let data_bytes = cfg.records * (KEY_BYTES + VALUE_BYTES) as u64;
    let model = plan.model;
    Ok(Report {
        config: cfg.clone(),
        data_bytes,
        data_over_cache: data_bytes as f64 / cfg.cache_bytes as f64,
        profile: ProfileView {
            source: cfg.profile_source.clone(),
            is_default: cfg.profile_is_default,
            device: cfg.profile.device.clone(),
            setup_us: model.setup_s * 1e6,
            per_byte_ns: model.per_byte_s * 1e9,
            half_bandwidth_bytes: model.half_bandwidth_bytes(),
        },
        points,
        curve,
        trees,
        notes,
        elapsed_s: start.elapsed().as_secs_f64(),
    })
}

/// `4 KiB`, `1 MiB`: node sizes for people.
pub fn human(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seed 000 §7 on a simulated HDD (wd-black-1tb-2011: s 12 ms, t 35 µs/4K, 1/α 1.34 MiB),
    /// the B+-tree from 16 KiB to `max_node` in powers of two with data about 4–6× the cache.
    fn hdd_sweep(records: u64, cache: u64, max_node: u64, ops: u64) -> Report {
        let mut cfg = Config::simulated("wd-black-1tb-2011").unwrap();
        cfg.records = records;
        cfg.cache_bytes = cache;
        cfg.min_node = 16 << 10;
        cfg.max_node = max_node;
        cfg.step = 2;
        cfg.trees = vec![Tree::BTree];
        cfg.ops = ops;
        cfg.min_ops = ops;
        cfg.repetitions = 1;
        run(&cfg, |_| {}).unwrap()
    }

    /// What §7 checks at any scale: the tuner's pick within one power of two of the measured
    /// best for the mixed workload it was asked about; past the best query the cost grows as a
    /// line in the node size (R² ≥ 0.9), as 1 + αB does; on the simulator a phase's time is its
    /// data-file IO priced by the preset.
    fn check_hdd_sweep(r: &Report) -> &AlphaFit {
        let s = r.summary(Tree::BTree).unwrap();
        let best = s.best(Op::Mixed).measured_best_node;
        let steps = (s.tuner.node_bytes as f64 / best as f64).log2().abs();
        assert!(
            s.tuner.in_sweep && steps <= 1.0,
            "pick {} best {best}",
            s.tuner.node_bytes
        );
        for p in r.points_of(Tree::BTree) {
            assert!((p.query.us_per_op / p.query.io_model_us - 1.0).abs() < 1e-9);
        }
        let f = s.alpha_fit.as_ref().expect("three sizes past the best");
        assert_eq!(f.profile_alpha, r.config.profile.affine_model().alpha());
        assert!(f.alpha_per_node_byte > 0.0 && f.r2_node >= 0.9, "{f:?}");
        f
    }

    /// Seed 000 §7 on the simulated HDD, as `strata bench sweep --sim wd-black-1tb-2011 --tree
    /// btree --records 100000 --cache 2MiB --min-node 16KiB --max-node 1MiB --step 2 --ops 200
    /// --repetitions 1` runs it (about 10 s in a debug build): besides `check_hdd_sweep`, α
    /// through the tree's model within 25% of the device's and s within 10% (the model's
    /// B+-tree reads more bytes per query than the tree at large nodes, so α comes out low),
    /// and the seed's line 0.6–1.0 times α (nodes are written at their fill, about ln 2 of B,
    /// and more queries miss as nodes grow). At a third of the data and nodes up to 256 KiB
    /// the fitted α moves by ±40% with the reads per query: the sizes must reach toward 1/α.
    #[test]
    fn simulated_hdd_sweep_recovers_alpha_and_the_tuners_pick() {
        let r = hdd_sweep(100_000, 2 << 20, 1 << 20, 200);
        let f = check_hdd_sweep(&r);
        eprintln!("{f:?}");
        let device = r.config.profile.affine_model();
        assert!((f.alpha / device.alpha() - 1.0).abs() < 0.25, "{f:?}");
        assert!(
            (f.setup_us / (device.setup_s * 1e6) - 1.0).abs() < 0.1,
            "{f:?}"
        );
        let seed = f.alpha_per_node_byte / device.alpha();
        assert!((0.6..=1.0).contains(&seed), "{f:?}");
    }

    #[test]
    fn permutation_visits_every_index_once() {
        for n in [1000u64, 1024, 4099] {
            let p = Permutation::new(n, 7);
            let mut seen = vec![false; n as usize];
            for i in 0..n {
                let j = p.at(i) as usize;
                assert!(!seen[j], "n {n}: {j} twice");
                seen[j] = true;
            }
        }
    }

    #[test]
    fn loaded_keys_are_sorted_and_even_inserted_keys_odd() {
        let n = 1_000_000;
        let keys: Vec<_> = (0..n).step_by(997).map(|i| loaded_key(i, n)).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        assert!(keys.iter().all(|k| k[7] & 1 == 0));
        assert_eq!(key_of(12345 | 1)[7] & 1, 1);
        assert_eq!(value_of(&keys[3]), value_of(&keys[3]));
        assert_ne!(value_of(&keys[3]), value_of(&keys[4]));
    }

    #[test]
    fn geometry_below_the_tuner_keeps_values_inline() {
        // The second model and the small workload are where the unconstrained search picks
        // fanout 47 at 16 KiB, and the engine would put every value out of line.
        let models = [
            DeviceProfile::builtin().affine_model(),
            Affine::new(57e-6, 0.61e-9),
        ];
        for model in models {
            for (keys, cache) in [(200_000, 2 << 20), (1_000_000, 8 << 20)] {
                let mut w = Workload::new(keys);
                w.cache_bytes = cache;
                for node in [4 << 10, 8 << 10, 16 << 10, 32 << 10] {
                    let (f, basement) = betree_geometry(&model, &w, node);
                    assert!((tune::BETREE_MIN_FANOUT..=tune::BETREE_MAX_FANOUT).contains(&f));
                    assert!(basement.is_power_of_two() && basement <= node);
                    assert!(betree_inline_max(node, f, basement) >= VALUE_BYTES as u64);
                }
            }
        }
    }

    #[test]
    fn grid_stops_the_btree_at_4_mib() {
        let mut cfg = Config::new(".", DeviceProfile::builtin(), "built-in");
        cfg.max_node = 16 << 20;
        cfg.validate().unwrap();
        assert_eq!(cfg.grid(Tree::BTree).last(), Some(&(4 << 20)));
        assert_eq!(cfg.grid(Tree::BeTree).last(), Some(&(16 << 20)));
        assert_eq!(cfg.grid(Tree::BTree).len(), 6);
        cfg.step = 3;
        assert!(cfg.validate().is_err());
        cfg.step = 2;
        cfg.min_node = 3 << 10;
        assert!(cfg.validate().is_err());
        cfg.min_node = 32 << 20;
        assert!(cfg.validate().is_err());
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
