//! Seed 003 §8's experiment: the versioned dictionary as its data grows past memory, on three
//! lines: the copy-on-write B-tree, the SDA, and the SDA without density amplification.
//!
//! The workload, the same operation sequence on every line (one seeded generator): random
//! 100-byte pairs (a 16-byte random key, an 84-byte value) are put at random leaf versions;
//! every `clone_every` puts a new version is made, a clone of a random leaf with probability
//! 1/3 or of a random internal version with 2/3 (a leaf while there is no internal one), which
//! keeps about twice as many internal versions as leaves. At `points` evenly spaced moments the
//! puts stop for `ranges_per_point` range queries at random live versions, each taking the
//! first `range_len` entries of that version from a random key on (an open range read with
//! `VersionedDb::for_each_at` on every line, whose visitor stops it once it has them: the
//! entries are borrowed, not copied out, on both engines alike; the start is drawn below the end of the key space by an
//! interval expected to hold `range_len` of the version's entries, its width from the entries
//! the version sees, which the driver counts: keys are random, so none repeats). After the
//! last put: the space used against the live data, then again after half of the leaves are
//! deleted (and two checkpoints, after which the pager may reuse what they freed), then after
//! as many new puts as the deleted leaves had written, to see freed space reused.
//!
//! Measured per interval between points, per line: puts/s and range elements/s (wall clock,
//! the engine's merges and checkpoints included: each interval's puts end with
//! `VersionedDb::finish_merges`, so the merges they made due, on the SDA's merge thread or the
//! writer, and a checkpoint being made durable on its thread, are inside the interval that made
//! them, and the ranges read settled levels), and from
//! the data file's `IoStats` (exact counts, no drift) the IOs and bytes per put and per range
//! element. Blocks are bytes over the block size, the unit of seed 003's Table 1, whose bounds
//! (constants dropped) are computed beside them: CoW B-tree O(log_B N_v) reads and writes per
//! update, SDA O(log(N_v)/B); O(Z/B) for a range of Z, so 1/B per element; B counts pairs per
//! block and N_v the entries the written version sees.
//!
//! The databases live in `dir` (the data file with O_DIRECT, so the OS page cache does not
//! stand in for the engine's memory), or on a simulated disk when `dir` is None (tests). Both
//! engines get the same memory, `cache_bytes`: the CoW B-tree as its buffer pool; the SDA half
//! as its write buffer, the other half as its `cache_bytes`: its arrays' heads (filters and
//! block indexes, kept whole), the runs ranges keep, and a block cache of the smallest
//! levels in what they leave. Log writes use `Durability::None` (the paper's prototypes had
//! no log). On a simulated disk, `device` names a preset whose model prices the data file's
//! IO; the rates then count that modeled time beside the CPU's.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use serde::Serialize;
use strata::model::SplitMix64;
use strata::storage::sim::{SimModel, SimPreset};
use strata::storage::SimEnv;
use strata::{
    CowConfig, Durability, IoSnapshot, Result, SdaConfig, Version, VersionedDb,
    VersionedEngineOptions, VersionedOptions, ROOT_VERSION,
};

pub const KEY_BYTES: usize = 16;
pub const VALUE_BYTES: usize = 84;
/// Bytes of one pair, the seed's "100 byte key-value pairs".
pub const PAIR_BYTES: u64 = (KEY_BYTES + VALUE_BYTES) as u64;

/// The three lines of seed 003's figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Line {
    Cow,
    Sda,
    SdaNoDa,
}

impl Line {
    pub const ALL: [Line; 3] = [Line::Cow, Line::Sda, Line::SdaNoDa];

    pub fn name(self) -> &'static str {
        match self {
            Line::Cow => "cow",
            Line::Sda => "sda",
            Line::SdaNoDa => "sda-no-da",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Line::Cow => "CoW B-tree",
            Line::Sda => "SDA",
            Line::SdaNoDa => "SDA, no density amplification",
        }
    }

    fn is_sda(self) -> bool {
        self != Line::Cow
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Config {
    /// Where the databases go, one subdirectory per line, removed afterwards; None: a
    /// simulated disk.
    pub dir: Option<PathBuf>,
    pub inserts: u64,
    /// Puts between two new versions (the seed: 100,000).
    pub clone_every: u64,
    /// Measuring points over the run (range queries at each).
    pub points: u64,
    pub ranges_per_point: u64,
    /// Entries a range query is sized to return (the seed: 1,000).
    pub range_len: u64,
    /// Memory of each engine (see the module header).
    pub cache_bytes: u64,
    /// The CoW B-tree's node size and the SDA's block size.
    pub block_bytes: u64,
    pub seed: u64,
    pub lines: Vec<Line>,
    /// With `dir` None: a simulated device preset (`SimPreset`) pricing the simulated disk's
    /// IO; each rate then counts the CPU time measured plus the modeled device time of the
    /// data file's IO (`Point::range_device_secs`, `insert_device_secs`). None: CPU only.
    pub device: Option<String>,
}

impl Config {
    /// The report's quick setting: 4 KiB blocks, 512 KiB of memory, the data growing to 8×
    /// that, a new version every 400 puts (100 versions: each still sees enough entries for
    /// ranges of 1,000; `--versions 1000` reaches seed 003's 1,000 with ranges of ~200).
    pub fn quick(dir: Option<PathBuf>) -> Config {
        Config {
            dir,
            inserts: 40_000,
            clone_every: 400,
            points: 8,
            ranges_per_point: 4,
            range_len: 1000,
            cache_bytes: 512 << 10,
            block_bytes: 4096,
            seed: 3,
            lines: Line::ALL.to_vec(),
            device: None,
        }
    }

    /// The setting of the full `strata report`, between the two: 8 KiB blocks, 1 MiB of
    /// memory, the data growing to 11× that, a new version every 1,200 puts (100 versions).
    pub fn report(dir: Option<PathBuf>) -> Config {
        Config {
            dir,
            inserts: 120_000,
            clone_every: 1_200,
            points: 10,
            ranges_per_point: 8,
            range_len: 1000,
            cache_bytes: 1 << 20,
            block_bytes: 8 << 10,
            seed: 3,
            lines: Line::ALL.to_vec(),
            device: None,
        }
    }

    /// The long setting: 16 KiB blocks, 8 MiB of memory, the data growing to 10× that, a new
    /// version every 800 puts: the 1,000 versions of seed 003's range figure (the seed made
    /// one every 100,000 puts, which at this size would be 8).
    pub fn full(dir: Option<PathBuf>) -> Config {
        Config {
            dir,
            inserts: 800_000,
            clone_every: 800,
            points: 10,
            ranges_per_point: 10,
            range_len: 1000,
            cache_bytes: 8 << 20,
            block_bytes: 16 << 10,
            seed: 3,
            lines: Line::ALL.to_vec(),
            device: None,
        }
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |why: &str| Err(strata::Error::InvalidOptions(format!("versioned: {why}")));
        if self.inserts == 0 || self.clone_every == 0 || self.points == 0 {
            return bad("inserts, clone_every and points must be positive");
        }
        if self.points > self.inserts {
            return bad("more points than inserts");
        }
        if self.range_len == 0 {
            return bad("range_len must be positive");
        }
        if self.block_bytes < 1024 || self.block_bytes > 1 << 22 {
            return bad("block_bytes must be within 1 KiB..=4 MiB");
        }
        if self.cache_bytes < 4 * self.block_bytes {
            return bad("cache_bytes must hold at least four blocks");
        }
        if self.lines.is_empty() {
            return bad("no lines to run");
        }
        if let Some(name) = &self.device {
            if self.dir.is_some() {
                return bad("a device preset prices the simulated disk only");
            }
            if SimPreset::find(name).is_none() {
                return bad(&format!(
                    "no device preset {name:?}; presets: {}",
                    SimPreset::names().join(", ")
                ));
            }
        }
        Ok(())
    }

    /// Pairs per block: Table 1's B.
    pub fn pairs_per_block(&self) -> f64 {
        self.block_bytes as f64 / PAIR_BYTES as f64
    }

    fn engine(&self, line: Line) -> VersionedEngineOptions {
        match line {
            Line::Cow => {
                // A leaf of pairs (each with 6 bytes of lengths) and an internal node of keys
                // and child ids fill about one block.
                let leaf = (self.block_bytes / (PAIR_BYTES + 6)).max(2) as u32;
                let fanout = (self.block_bytes / (KEY_BYTES as u64 + 10)).max(3) as u32;
                VersionedEngineOptions::Cow(CowConfig {
                    leaf_entries: leaf,
                    fanout,
                    cache_bytes: self.cache_bytes as usize,
                })
            }
            Line::Sda | Line::SdaNoDa => {
                let buffer = (self.cache_bytes / 2) as usize;
                // Level 0 holds a block's worth of entries, not a buffer's: with hundreds of
                // leaves a flush splits into a small dense piece per leaf, and a level 0 as
                // large as the buffer would keep each leaf's growing piece there, rewritten
                // whole by every flush (3 blocks read and written per put at 1,000 versions
                // in `--quick`, against 0.6 with this).
                let level0 =
                    (self.block_bytes as usize / (KEY_BYTES + VALUE_BYTES + 32)).max(1) as u32;
                VersionedEngineOptions::Sda(SdaConfig {
                    buffer_bytes: buffer,
                    level0_entries: level0,
                    block_bytes: self.block_bytes as usize,
                    filter_bits: 10.0,
                    density_amplification: line == Line::Sda,
                    // The other half: the arrays' heads first, the kept runs, then a block
                    // cache of the smallest levels in what is left.
                    cache_bytes: self.cache_bytes as usize - buffer,
                })
            }
        }
    }
}

/// What one interval between measuring points cost.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Point {
    /// Puts so far, and their bytes.
    pub inserted: u64,
    pub data_bytes: u64,
    pub live_versions: u64,
    pub leaves: u64,
    /// The interval's puts (and clones) and their seconds.
    pub inserts: u64,
    pub insert_secs: f64,
    pub inserts_per_sec: f64,
    /// Each put's own time (`put_at`'s return), the 99th percentile and the longest, in
    /// seconds: a put that flushes, or waits for merges, pays for them here. CPU only on a
    /// simulated disk.
    pub put_p99_secs: f64,
    pub slowest_put_secs: f64,
    /// The same in nanoseconds, one a put, for the summary's percentile.
    #[serde(skip)]
    pub put_nanos: Vec<u64>,
    pub insert_io: Io,
    /// Mean entries seen by the version each put went to.
    pub mean_nv: f64,
    pub ranges: u64,
    pub range_elements: u64,
    pub range_secs: f64,
    pub range_elements_per_sec: f64,
    pub range_io: Io,
    /// With a device preset: the modeled device seconds of the interval's puts (the data
    /// file's IOs, each priced alone: s + t·x) and of its ranges (the simulated disk's clock,
    /// which prices reads issued together as a batch); the rates above include them.
    pub insert_device_secs: f64,
    pub range_device_secs: f64,
}

/// Data-file IO over some span.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Io {
    pub reads: u64,
    pub writes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
}

impl Io {
    fn between(a: &IoSnapshot, b: &IoSnapshot) -> Io {
        Io {
            reads: b.reads - a.reads,
            writes: b.writes - a.writes,
            bytes_read: b.bytes_read - a.bytes_read,
            bytes_written: b.bytes_written - a.bytes_written,
        }
    }

    fn add(&mut self, o: &Io) {
        self.reads += o.reads;
        self.writes += o.writes;
        self.bytes_read += o.bytes_read;
        self.bytes_written += o.bytes_written;
    }
}

/// Space at one moment: what the engine references and what the file holds (referenced plus
/// free extents), against the live data (pairs some live version reads).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Space {
    pub live_bytes: u64,
    pub used_bytes: u64,
    pub file_bytes: u64,
    pub used_over_live: f64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct SpaceResult {
    pub before_delete: Space,
    /// Half of the leaves deleted, then two checkpoints.
    pub after_delete: Space,
    pub leaves_deleted: u64,
    /// As many new puts as the deleted leaves held, at the remaining leaves.
    pub after_refill: Space,
    pub refill_inserts: u64,
}

/// Per-operation costs over the points with the data at least 4× the memory (or the last
/// point, if none is), beside Table 1's bounds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    /// The data over the memory where the summary starts.
    pub from_data_over_cache: f64,
    pub inserts_per_sec: f64,
    pub range_elements_per_sec: f64,
    /// Over the same puts: the 99th percentile of a put's time and the longest, in seconds.
    pub put_p99_secs: f64,
    pub slowest_put_secs: f64,
    pub ios_per_insert: f64,
    pub bytes_per_insert: f64,
    /// Bytes read and written per put, in blocks.
    pub blocks_read_per_insert: f64,
    pub blocks_written_per_insert: f64,
    /// Table 1's update bound for this structure, per put (reads, and writes alike).
    pub insert_bound: f64,
    pub ios_per_element: f64,
    pub bytes_per_element: f64,
    pub blocks_per_element: f64,
    /// Table 1's range bound per element, 1/B.
    pub element_bound: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct LineResult {
    pub line: Line,
    pub label: &'static str,
    pub settings: String,
    pub points: Vec<Point>,
    pub summary: Summary,
    pub space: SpaceResult,
    pub secs: f64,
    /// Engine counters at the end (merges, splits, copies...).
    pub detail: Vec<(String, u64)>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub config: Config,
    pub pairs_per_block: f64,
    pub lines: Vec<LineResult>,
}

/// The version tree as the driver sees it, and the puts per version (for N_v and the live
/// data).
struct Tree {
    parent: HashMap<Version, Version>,
    leaves: Vec<Version>,
    internal: Vec<Version>,
    writes: HashMap<Version, u64>,
}

impl Tree {
    fn new() -> Tree {
        Tree {
            parent: HashMap::new(),
            leaves: vec![ROOT_VERSION],
            internal: Vec::new(),
            writes: HashMap::new(),
        }
    }

    /// Entries version `v` sees: its ancestors' puts and its own (keys never repeat).
    fn seen(&self, mut v: Version) -> u64 {
        let mut n = self.writes.get(&v).copied().unwrap_or(0);
        while let Some(&p) = self.parent.get(&v) {
            n += self.writes.get(&p).copied().unwrap_or(0);
            v = p;
        }
        n
    }

    fn live(&self) -> Vec<Version> {
        let mut all: Vec<Version> = self.leaves.iter().chain(&self.internal).copied().collect();
        all.sort_unstable();
        all
    }

    /// Bytes of the pairs some live version reads: every internal version is live (only
    /// leaves are deleted), so the puts of every version not deleted.
    fn live_bytes(&self) -> u64 {
        self.live()
            .iter()
            .map(|v| self.writes.get(v).copied().unwrap_or(0))
            .sum::<u64>()
            * PAIR_BYTES
    }
}

fn pair(rng: &mut SplitMix64) -> ([u8; KEY_BYTES], [u8; VALUE_BYTES]) {
    let mut key = [0u8; KEY_BYTES];
    key[..8].copy_from_slice(&rng.next_u64().to_be_bytes());
    key[8..].copy_from_slice(&rng.next_u64().to_be_bytes());
    let mut value = [0u8; VALUE_BYTES];
    for (i, chunk) in value.chunks_mut(8).enumerate() {
        let word = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ^ u64::from_le_bytes(key[..8].try_into().expect("8 bytes"));
        chunk.copy_from_slice(&word.to_le_bytes()[..chunk.len()]);
    }
    (key, value)
}

/// A key interval that version `v`'s `seen` entries fill with about `len` (keys are uniform
/// in their first 8 bytes).
fn interval(rng: &mut SplitMix64, seen: u64, len: u64) -> (Vec<u8>, Vec<u8>) {
    if seen <= len {
        return (vec![], vec![0xff; KEY_BYTES + 1]);
    }
    let width = ((u64::MAX as f64) * len as f64 / seen as f64) as u64;
    let start = rng.below(u64::MAX - width);
    (
        start.to_be_bytes().to_vec(),
        (start + width).to_be_bytes().to_vec(),
    )
}

fn space(db: &VersionedDb, tree: &Tree) -> Result<Space> {
    let s = db.stats()?;
    let live = tree.live_bytes();
    Ok(Space {
        live_bytes: live,
        used_bytes: s.referenced_bytes,
        file_bytes: s.referenced_bytes + s.free_bytes,
        used_over_live: s.referenced_bytes as f64 / live.max(1) as f64,
    })
}

/// Run every line of `cfg`; `progress` hears what starts.
pub fn run(cfg: &Config, mut progress: impl FnMut(&str)) -> Result<Report> {
    cfg.validate()?;
    let mut lines = Vec::new();
    for &line in &cfg.lines {
        progress(&format!(
            "{}: {} puts, a version every {}",
            line.label(),
            cfg.inserts,
            cfg.clone_every
        ));
        lines.push(run_line(cfg, line)?);
    }
    Ok(Report {
        config: cfg.clone(),
        pairs_per_block: cfg.pairs_per_block(),
        lines,
    })
}

fn run_line(cfg: &Config, line: Line) -> Result<LineResult> {
    let engine = cfg.engine(line);
    let opts = VersionedOptions {
        engine,
        durability: Durability::None,
        direct_io: cfg.dir.is_some(),
        ..VersionedOptions::default()
    };
    let settings = match engine {
        VersionedEngineOptions::Cow(c) => format!(
            "leaves of {} pairs, fanout {}, a pool of {} KiB",
            c.leaf_entries,
            c.fanout,
            c.cache_bytes >> 10
        ),
        VersionedEngineOptions::Sda(c) => format!(
            "a {} KiB write buffer, level-0 arrays of {} entries, {} KiB blocks, {} bits per key, density amplification {}",
            c.buffer_bytes >> 10,
            c.level0_entries,
            c.block_bytes >> 10,
            c.filter_bits,
            if c.density_amplification { "on" } else { "off" }
        ),
    };
    let started = Instant::now();
    let model = cfg
        .device
        .as_deref()
        .and_then(SimPreset::find)
        .map(|p| p.model());
    let env = match &model {
        Some(m) => SimEnv::with_sim_model(m.clone()),
        None => SimEnv::new(),
    };
    let sub = cfg.dir.as_ref().map(|d| d.join(line.name()));
    if let Some(d) = &sub {
        let _ = std::fs::remove_dir_all(d);
    }
    let db = match &sub {
        Some(d) => VersionedDb::open(d, opts)?,
        None => VersionedDb::open_in(&env, opts)?,
    };
    let result = drive(cfg, &db, &env, model.as_ref());
    drop(db);
    if let Some(d) = &sub {
        let _ = std::fs::remove_dir_all(d);
    }
    let (points, space, detail) = result?;
    let summary = summarise(cfg, line, &points);
    Ok(LineResult {
        line,
        label: line.label(),
        settings,
        points,
        summary,
        space,
        secs: started.elapsed().as_secs_f64(),
        detail,
    })
}

type Driven = (Vec<Point>, SpaceResult, Vec<(String, u64)>);

fn drive(cfg: &Config, db: &VersionedDb, env: &SimEnv, model: Option<&SimModel>) -> Result<Driven> {
    let mut rng = SplitMix64::new(cfg.seed);
    let mut tree = Tree::new();
    let mut points = Vec::new();
    let mut done = 0u64;
    for p in 1..=cfg.points {
        let until = cfg.inserts * p / cfg.points;
        let mut point = Point {
            inserts: until - done,
            ..Point::default()
        };
        let io0 = db.data_io();
        let t0 = Instant::now();
        let mut nv_sum = 0u64;
        while done < until {
            if done > 0 && done.is_multiple_of(cfg.clone_every) {
                clone_one(db, &mut tree, &mut rng)?;
            }
            let v = tree.leaves[rng.below(tree.leaves.len() as u64) as usize];
            let (k, val) = pair(&mut rng);
            let t = Instant::now();
            db.put_at(v, k, val)?;
            point.put_nanos.push(t.elapsed().as_nanos() as u64);
            *tree.writes.entry(v).or_default() += 1;
            nv_sum += tree.seen(v);
            done += 1;
        }
        // The merges these puts made due, inside their interval (none left for the next one,
        // or for after the last).
        db.finish_merges()?;
        point.insert_secs = t0.elapsed().as_secs_f64();
        point.put_nanos.sort_unstable();
        point.put_p99_secs = quantile(&point.put_nanos, 0.99) as f64 / 1e9;
        point.slowest_put_secs = point.put_nanos.last().copied().unwrap_or(0) as f64 / 1e9;
        point.insert_io = Io::between(&io0, &db.data_io());
        if let Some(m) = model {
            // The data file's IOs alone, one at a time (the log, which the seed's prototypes
            // did not have, is not priced).
            let io = &point.insert_io;
            point.insert_device_secs = (io.reads + io.writes) as f64 * m.affine.setup_s
                + (io.bytes_read + io.bytes_written) as f64 * m.affine.per_byte_s;
        }
        point.inserts_per_sec =
            point.inserts as f64 / (point.insert_secs + point.insert_device_secs).max(1e-9);
        point.mean_nv = nv_sum as f64 / point.inserts.max(1) as f64;
        point.inserted = done;
        point.data_bytes = done * PAIR_BYTES;
        let live = tree.live();
        point.live_versions = live.len() as u64;
        point.leaves = tree.leaves.len() as u64;
        let io0 = db.data_io();
        let clock0 = env.disk().clock_s();
        let t0 = Instant::now();
        for _ in 0..cfg.ranges_per_point {
            let v = live[rng.below(live.len() as u64) as usize];
            let (lo, _) = interval(&mut rng, tree.seen(v), cfg.range_len);
            // The streaming scan, on both lines alike: each entry borrowed, none copied.
            let mut taken = 0u64;
            if cfg.range_len > 0 {
                db.for_each_at(v, lo.as_slice().., false, |k, x| {
                    std::hint::black_box((k, x));
                    taken += 1;
                    taken < cfg.range_len
                })?;
            }
            point.range_elements += taken;
            point.ranges += 1;
        }
        point.range_secs = t0.elapsed().as_secs_f64();
        point.range_io = Io::between(&io0, &db.data_io());
        if model.is_some() {
            // Ranges only read the data file: the clock moved by their reads alone.
            point.range_device_secs = env.disk().clock_s() - clock0;
        }
        point.range_elements_per_sec =
            point.range_elements as f64 / (point.range_secs + point.range_device_secs).max(1e-9);
        points.push(point);
    }
    let space = space_phases(db, &mut tree, &mut rng)?;
    let detail = db
        .stats()?
        .detail
        .iter()
        .map(|(k, v)| (k.to_string(), *v))
        .collect();
    Ok((points, space, detail))
}

/// The value below which a fraction `q` of the sorted `xs` fall (0 for none).
fn quantile(xs: &[u64], q: f64) -> u64 {
    match xs.len() {
        0 => 0,
        n => xs[((n as f64 * q) as usize).min(n - 1)],
    }
}

/// A clone of a random leaf (1/3) or a random internal version (2/3, while there is one).
fn clone_one(db: &VersionedDb, tree: &mut Tree, rng: &mut SplitMix64) -> Result<()> {
    let of_leaf = tree.internal.is_empty() || rng.below(3) == 0;
    let v = if of_leaf {
        let i = rng.below(tree.leaves.len() as u64) as usize;
        let v = tree.leaves.swap_remove(i);
        tree.internal.push(v);
        v
    } else {
        tree.internal[rng.below(tree.internal.len() as u64) as usize]
    };
    let w = db.clone_version(v)?;
    tree.parent.insert(w, v);
    tree.leaves.push(w);
    Ok(())
}

/// Each space is measured settled: the merges and reclaims due done (`finish_merges`), then
/// checkpoints.
fn space_phases(db: &VersionedDb, tree: &mut Tree, rng: &mut SplitMix64) -> Result<SpaceResult> {
    let mut out = SpaceResult::default();
    db.finish_merges()?;
    db.checkpoint()?;
    out.before_delete = space(db, tree)?;
    let mut freed = 0;
    let n = tree.leaves.len() / 2;
    for _ in 0..n {
        let i = rng.below(tree.leaves.len() as u64) as usize;
        let v = tree.leaves.swap_remove(i);
        db.delete_version(v)?;
        freed += tree.writes.remove(&v).unwrap_or(0);
    }
    out.leaves_deleted = n as u64;
    db.finish_merges()?;
    // The first checkpoint stops referencing what the deletes freed; after the second, no
    // durable checkpoint needs it and the pager may reuse it.
    db.checkpoint()?;
    db.checkpoint()?;
    out.after_delete = space(db, tree)?;
    for _ in 0..freed {
        let v = tree.leaves[rng.below(tree.leaves.len() as u64) as usize];
        let (k, val) = pair(rng);
        db.put_at(v, k, val)?;
        *tree.writes.entry(v).or_default() += 1;
    }
    out.refill_inserts = freed;
    db.finish_merges()?;
    db.checkpoint()?;
    out.after_refill = space(db, tree)?;
    Ok(out)
}

fn summarise(cfg: &Config, line: Line, points: &[Point]) -> Summary {
    let over = |p: &Point| p.data_bytes as f64 / cfg.cache_bytes as f64;
    let mut chosen: Vec<&Point> = points.iter().filter(|p| over(p) >= 4.0).collect();
    if chosen.is_empty() {
        chosen.extend(points.last());
    }
    let from = chosen.first().map_or(0.0, |p| over(p));
    let mut ins = Io::default();
    let mut rng_io = Io::default();
    let (mut n, mut secs, mut elems, mut rsecs, mut nv) = (0u64, 0.0, 0u64, 0.0, 0.0);
    for p in &chosen {
        ins.add(&p.insert_io);
        rng_io.add(&p.range_io);
        n += p.inserts;
        secs += p.insert_secs + p.insert_device_secs;
        elems += p.range_elements;
        rsecs += p.range_secs + p.range_device_secs;
        nv += p.mean_nv * p.inserts as f64;
    }
    let mut nanos: Vec<u64> = chosen
        .iter()
        .flat_map(|p| p.put_nanos.iter().copied())
        .collect();
    nanos.sort_unstable();
    let per = |x: u64, d: u64| x as f64 / d.max(1) as f64;
    let block = cfg.block_bytes;
    let b = cfg.pairs_per_block();
    let nv = (nv / n.max(1) as f64).max(2.0);
    Summary {
        from_data_over_cache: from,
        inserts_per_sec: n as f64 / f64::max(secs, 1e-9),
        range_elements_per_sec: elems as f64 / f64::max(rsecs, 1e-9),
        put_p99_secs: quantile(&nanos, 0.99) as f64 / 1e9,
        slowest_put_secs: nanos.last().copied().unwrap_or(0) as f64 / 1e9,
        ios_per_insert: per(ins.reads + ins.writes, n),
        bytes_per_insert: per(ins.bytes_read + ins.bytes_written, n),
        blocks_read_per_insert: per(ins.bytes_read, n) / block as f64,
        blocks_written_per_insert: per(ins.bytes_written, n) / block as f64,
        insert_bound: if line.is_sda() {
            nv.log2() / b
        } else {
            nv.ln() / b.ln()
        },
        ios_per_element: per(rng_io.reads + rng_io.writes, elems),
        bytes_per_element: per(rng_io.bytes_read + rng_io.bytes_written, elems),
        blocks_per_element: per(rng_io.bytes_read + rng_io.bytes_written, elems) / block as f64,
        element_bound: 1.0 / b,
    }
}

impl Report {
    pub fn line(&self, line: Line) -> Option<&LineResult> {
        self.lines.iter().find(|l| l.line == line)
    }

    /// The SDA's figure over the CoW B-tree's, where both ran.
    pub fn sda_over_cow(&self, f: impl Fn(&Summary) -> f64) -> Option<f64> {
        let (s, c) = (self.line(Line::Sda)?, self.line(Line::Cow)?);
        let c = f(&c.summary);
        (c > 0.0).then(|| f(&s.summary) / c)
    }

    /// One line of what ran: the workload, the memory and the block size.
    pub fn setting(&self) -> String {
        let c = &self.config;
        format!(
            "{} puts of {}-byte pairs at random leaves, a new version every {}, {} range \
             queries of ~{} at each of {} points; memory {} KiB, blocks of {} KiB (B = {:.0} \
             pairs){}",
            c.inserts,
            PAIR_BYTES,
            c.clone_every,
            c.ranges_per_point,
            c.range_len,
            c.points,
            c.cache_bytes >> 10,
            c.block_bytes >> 10,
            self.pairs_per_block,
            match (&c.dir, &c.device) {
                (Some(_), _) => ", data file O_DIRECT".to_string(),
                (None, Some(d)) => format!(
                    ", simulated disk priced as {d} (times: CPU plus the modeled IO of the \
                     data file)"
                ),
                (None, None) => ", simulated disk (times: CPU only)".to_string(),
            }
        )
    }

    /// Each line's settings and its points: throughput and IOs (device calls) per operation
    /// as the data grows.
    pub fn render_points(&self) -> String {
        use std::fmt::Write as _;
        let c = &self.config;
        let mut out = String::new();
        for l in &self.lines {
            let _ = writeln!(out, "{} ({}): {}", l.label, l.line.name(), l.settings);
            let _ = writeln!(
                out,
                "{:>9} {:>7} {:>9} {:>10} {:>9} {:>9} {:>9} {:>12} {:>11}",
                "data",
                "data/M",
                "versions",
                "puts/s",
                "p99 µs",
                "max ms",
                "IO/put",
                "range el/s",
                "IO/element"
            );
            for p in &l.points {
                let _ = writeln!(
                    out,
                    "{:>9} {:>7.1} {:>9} {:>10.0} {:>9.1} {:>9.1} {:>9.3} {:>12.0} {:>11.4}",
                    human(p.data_bytes),
                    p.data_bytes as f64 / c.cache_bytes as f64,
                    p.live_versions,
                    p.inserts_per_sec,
                    p.put_p99_secs * 1e6,
                    p.slowest_put_secs * 1e3,
                    ratio(p.insert_io.reads + p.insert_io.writes, p.inserts),
                    p.range_elements_per_sec,
                    ratio(p.range_io.reads + p.range_io.writes, p.range_elements),
                );
            }
            out.push('\n');
        }
        out
    }

    /// Rows of the summary beside Table 1: (line, cells).
    fn summary_rows(&self) -> Vec<(&'static str, [String; 9])> {
        self.lines
            .iter()
            .map(|l| {
                let s = &l.summary;
                (
                    l.label,
                    [
                        format!("{:.0}", s.inserts_per_sec),
                        format!("{:.1}", s.put_p99_secs * 1e6),
                        format!("{:.1}", s.slowest_put_secs * 1e3),
                        format!("{:.0}", s.range_elements_per_sec),
                        format!("{:.4}", s.blocks_read_per_insert),
                        format!("{:.4}", s.blocks_written_per_insert),
                        format!("{:.4}", s.insert_bound),
                        format!("{:.5}", s.blocks_per_element),
                        format!("{:.5}", s.element_bound),
                    ],
                )
            })
            .collect()
    }

    fn space_rows(&self) -> Vec<(&'static str, [String; 3])> {
        let cell = |s: &Space| {
            format!(
                "{:.2}× ({} / {})",
                s.used_over_live,
                human(s.used_bytes),
                human(s.file_bytes)
            )
        };
        self.lines
            .iter()
            .map(|l| {
                let sp = &l.space;
                (
                    l.label,
                    [
                        cell(&sp.before_delete),
                        cell(&sp.after_delete),
                        cell(&sp.after_refill),
                    ],
                )
            })
            .collect()
    }

    /// The SDA against the CoW B-tree, one sentence, where both ran.
    pub fn verdict(&self) -> Option<String> {
        let i = self.sda_over_cow(|s| s.inserts_per_sec)?;
        let r = self.sda_over_cow(|s| s.range_elements_per_sec)?;
        let from = self.line(Line::Sda)?.summary.from_data_over_cache;
        Some(format!(
            "From {from:.1}× the memory on, the SDA makes {i:.1}× the CoW B-tree's puts/s and \
             {r:.1}× its range elements/s (seed 003: two orders of magnitude on updates, more \
             than 10× on ranges, on a disk doing ~100 random IOs/s)."
        ))
    }

    /// Everything as text: the setting, the points, the summary beside Table 1, the space.
    pub fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut out = format!("seed 003 §8: {}\n\n", self.setting());
        out.push_str(&self.render_points());
        let _ = writeln!(
            out,
            "Per put and per range element once the data is ≥ 4× the memory, in blocks (bytes / \
             block size), beside seed 003 Table 1 (constants dropped)"
        );
        let _ = writeln!(
            out,
            "{:<32} {:>10} {:>9} {:>9} {:>12} {:>9} {:>9} {:>9} {:>11} {:>9}",
            "line",
            "puts/s",
            "p99 µs",
            "max ms",
            "range el/s",
            "rd/put",
            "wr/put",
            "bound",
            "blk/elem",
            "bound"
        );
        for (label, c) in self.summary_rows() {
            let _ = writeln!(
                out,
                "{label:<32} {:>10} {:>9} {:>9} {:>12} {:>9} {:>9} {:>9} {:>11} {:>9}",
                c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8]
            );
        }
        let _ = writeln!(out, "{BOUNDS}");
        let _ = writeln!(
            out,
            "\nSpace used against the live data (engine-referenced / file)"
        );
        let _ = writeln!(
            out,
            "{:<32} {:>26} {:>26} {:>26}",
            "line", "before deletes", "half the leaves deleted", "after as many new puts"
        );
        for (label, c) in self.space_rows() {
            let _ = writeln!(out, "{label:<32} {:>26} {:>26} {:>26}", c[0], c[1], c[2]);
        }
        if let Some(v) = self.verdict() {
            let _ = writeln!(out, "\n{v}");
        }
        out
    }

    /// The summary and space as Markdown tables, and the points as a code block.
    pub fn markdown(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::from(
            "| line | puts/s | put p99 (µs) | slowest put (ms) | range elements/s | blocks read \
             per put | blocks written per put | Table 1 bound per put | blocks per range element \
             | Table 1 bound (1/B) |\n|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for (label, c) in self.summary_rows() {
            let _ = writeln!(out, "| {label} | {} |", c.join(" | "));
        }
        let _ = writeln!(out, "\n{BOUNDS}\n");
        out.push_str(
            "| line | space / live data, before deletes | half the leaves deleted | after as \
             many new puts |\n|---|---|---|---|\n",
        );
        for (label, c) in self.space_rows() {
            let _ = writeln!(out, "| {label} | {} |", c.join(" | "));
        }
        if let Some(v) = self.verdict() {
            let _ = writeln!(out, "\n{v}");
        }
        let _ = write!(out, "\n```\n{}```\n", self.render_points());
        out
    }

    /// Two panels: puts/s and range elements/s against the data put, one line per structure.
    pub fn svg(&self) -> String {
        let series = |f: fn(&Point) -> f64| -> Vec<(String, Vec<(f64, f64)>)> {
            self.lines
                .iter()
                .map(|l| {
                    (
                        l.label.to_string(),
                        l.points
                            .iter()
                            .map(|p| (p.data_bytes as f64 / (1 << 20) as f64, f(p)))
                            .collect(),
                    )
                })
                .collect()
        };
        let marker = self.config.cache_bytes as f64 / (1 << 20) as f64;
        crate::chart::log_lines_panels(&[
            crate::chart::LinePanel {
                title: "updates".into(),
                x_label: "data put (MiB)".into(),
                y_label: "puts/s".into(),
                series: series(|p| p.inserts_per_sec),
                x_marker: Some((marker, "memory".into())),
            },
            crate::chart::LinePanel {
                title: "range queries of ~1,000".into(),
                x_label: "data put (MiB)".into(),
                y_label: "elements/s".into(),
                series: series(|p| p.range_elements_per_sec),
                x_marker: Some((marker, "memory".into())),
            },
        ])
    }
}

/// What the bound columns are.
const BOUNDS: &str = "Bounds (seed 003 Table 1, constants dropped; B pairs per block, N_v the \
entries the written version sees): CoW B-tree log_B N_v reads and as many writes per put; SDA \
log2(N_v)/B of each; a range of Z costs Z/B, so 1/B per element. Space cells: used over live \
data (used / file), used being what the engine references.";

fn ratio(a: u64, b: u64) -> f64 {
    a as f64 / b.max(1) as f64
}

fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.0} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_hold_about_the_asked_share_of_the_keys() {
        let mut rng = SplitMix64::new(1);
        let keys: Vec<[u8; KEY_BYTES]> = (0..20_000).map(|_| pair(&mut rng).0).collect();
        let mut total = 0;
        for _ in 0..50 {
            let (lo, hi) = interval(&mut rng, keys.len() as u64, 1000);
            total += keys
                .iter()
                .filter(|k| k.as_slice() >= lo.as_slice() && k.as_slice() < hi.as_slice())
                .count();
        }
        // 50 intervals of ~1,000 each, within sampling noise.
        assert!((45_000..55_000).contains(&total), "{total}");
        // A version that sees no more than asked gets everything.
        let (lo, hi) = interval(&mut rng, 10, 1000);
        assert!(keys
            .iter()
            .all(|k| lo.as_slice() <= k.as_slice() && k.as_slice() < hi.as_slice()));
    }

    /// On a simulated disk priced as a preset, each interval's ranges carry the device time
    /// of their reads (an HDD preset serves one IO at a time: exactly s + t·x each), and the
    /// rates count it beside the CPU; a preset with a real directory, or an unknown one, is
    /// refused.
    #[test]
    fn a_device_preset_prices_the_ranges_reads() {
        let cfg = Config {
            inserts: 6_000,
            clone_every: 500,
            points: 2,
            ranges_per_point: 3,
            lines: vec![Line::Sda],
            device: Some("wd-black-1tb-2011".into()),
            ..Config::quick(None)
        };
        let r = run(&cfg, |_| {}).unwrap();
        let m = SimPreset::find("wd-black-1tb-2011").unwrap().model();
        for p in &r.lines[0].points {
            let io = &p.range_io;
            assert!(io.reads > 0, "{p:?}");
            let priced =
                io.reads as f64 * m.affine.setup_s + io.bytes_read as f64 * m.affine.per_byte_s;
            assert!((p.range_device_secs - priced).abs() < 1e-9, "{p:?}");
            let rate = p.range_elements as f64 / (p.range_secs + p.range_device_secs);
            assert!(
                (p.range_elements_per_sec - rate).abs() < 1e-6 * rate,
                "{p:?}"
            );
            assert!(p.insert_device_secs > 0.0, "{p:?}");
        }
        let mut bad = cfg.clone();
        bad.device = Some("no-such-disk".into());
        assert!(bad.validate().is_err());
        bad.device = Some("wd-black-1tb-2011".into());
        bad.dir = Some(PathBuf::from("/tmp"));
        assert!(bad.validate().is_err());
    }

    /// The summary keeps the points with the data at least 4× the memory, counts bytes in
    /// blocks, and prices Table 1's bounds with B = pairs per block and the points' N_v.
    #[test]
    fn the_summary_takes_the_points_beyond_4x_memory_and_prices_table_1() {
        let cfg = Config {
            cache_bytes: 1000 * PAIR_BYTES,
            block_bytes: 4096,
            ..Config::quick(None)
        };
        let point = |inserted: u64, bytes_read: u64, mean_nv: f64| Point {
            inserted,
            data_bytes: inserted * PAIR_BYTES,
            inserts: 1000,
            insert_secs: 0.5,
            insert_io: Io {
                reads: 10,
                writes: 30,
                bytes_read,
                bytes_written: 2 * bytes_read,
            },
            mean_nv,
            range_elements: 500,
            range_secs: 0.25,
            range_io: Io {
                reads: 5,
                bytes_read: 5 * 4096,
                ..Io::default()
            },
            ..Point::default()
        };
        // The first point, at 2× memory, is left out.
        let mut points = [
            point(2000, 999_999, 10.0),
            point(4000, 4096 * 100, 5000.0),
            point(5000, 4096 * 300, 5000.0),
        ];
        // Puts of 1 to 200 µs over the two points kept, and a slow one in the point left out.
        points[0].put_nanos = vec![9_000_000_000];
        points[1].put_nanos = (1..=100).map(|us| us * 1000).collect();
        points[2].put_nanos = (101..=200).map(|us| us * 1000).collect();
        let b = 4096.0 / PAIR_BYTES as f64;
        let s = summarise(&cfg, Line::Sda, &points);
        assert_eq!(s.from_data_over_cache, 4.0);
        assert_eq!(s.inserts_per_sec, 2000.0);
        assert_eq!(s.range_elements_per_sec, 2000.0);
        assert_eq!(s.put_p99_secs, 199e-6);
        assert_eq!(s.slowest_put_secs, 200e-6);
        assert_eq!(s.ios_per_insert, 0.04);
        assert_eq!(s.blocks_read_per_insert, 0.2);
        assert_eq!(s.blocks_written_per_insert, 0.4);
        assert_eq!(s.blocks_per_element, 0.01);
        assert!((s.insert_bound - 5000f64.log2() / b).abs() < 1e-12);
        assert!((s.element_bound - 1.0 / b).abs() < 1e-12);
        let c = summarise(&cfg, Line::Cow, &points);
        assert!((c.insert_bound - 5000f64.ln() / b.ln()).abs() < 1e-12);
        // With no point that far, the last one stands in.
        assert_eq!(
            summarise(&cfg, Line::Cow, &points[..1]).from_data_over_cache,
            2.0
        );
    }

    #[test]
    fn the_tree_counts_what_each_version_sees() {
        let mut t = Tree::new();
        t.writes.insert(0, 5);
        t.parent.insert(1, 0);
        t.parent.insert(2, 1);
        t.writes.insert(1, 3);
        t.writes.insert(2, 2);
        t.leaves = vec![2];
        t.internal = vec![0, 1];
        assert_eq!((t.seen(0), t.seen(1), t.seen(2)), (5, 8, 10));
        assert_eq!(t.live_bytes(), 10 * PAIR_BYTES);
    }
}
