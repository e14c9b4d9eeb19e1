//! The merge policy, apart from the IO: given the levels' shape (which tables, how large, which
//! keys), decide the next merge, or none. `compact` carries it out. Pure: no IO, no engine
//! state but what it is handed, so every rule is testable on shapes alone.
//!
//! Rules, by policy (T the size ratio, capacities from `Config::level_capacity`):
//! - leveled: level 0 full (`l0_runs` runs) merges whole into level 1, with the level-1 tables
//!   it overlaps; a level i ≥ 1 over capacity merges one table (round robin by key) into the
//!   tables of level i+1 it overlaps, or moves it down untouched when it overlaps none;
//! - leveled with dynamic levels (`capacities`): the last level has no capacity; the one above
//!   it gets a T-th of its bytes, the next a T-th of that, none less than `level_capacity(1)`
//!   (the base: level 0's worth of memtables). When the last level outgrows what level 1's
//!   base would make it (base·T^(last−1)), every level moves one down and level 1 starts
//!   empty (`grow`): the tree deepens at the top, as RocksDB's base level moves up, so no level
//!   but a new level 1 is nearly empty, and once the last level is past T times the base it
//!   holds about (T−1)/T of the data;
//! - tiered: a level holding T runs merges them all into one new run, the newest of level i+1;
//! - lazy leveling: as tiered, except that the level above the last merges into the last
//!   level's one run, and a last level over capacity moves down a level untouched (the level it
//!   leaves becomes a tiered one).
//!
//! - leveled, at a checkpoint asked for (`settle_level0`): level 0 merges down below its
//!   trigger when the older copies its runs shadow are worth the rewrite, so that a tree at
//!   rest does not keep a batch of updates above the versions they replace.
//!
//! The most pressing merge goes first: the highest ratio of a level's fill to its trigger, at
//! least 1. A merge whose output lies at the bottom of the data (nothing older below it for its
//! keys) drops deletes and range deletes and settles upserts.

use super::config::{Config, Policy};
use crate::model::lsm::{LsmInput, Merging, ENTRY_OVERHEAD};
use crate::storage::NodeId;

/// What the manifest says of a table.
#[derive(Clone, Debug, PartialEq)]
pub struct TableInfo {
    pub id: NodeId,
    /// Bytes of its extent.
    pub bytes: u64,
    /// Point messages it holds, and how many of them are puts.
    pub points: u64,
    pub puts: u64,
    /// Range deletes it holds.
    pub ranges: u32,
    /// Its keys and range deletes lie within [smallest, largest] (a range delete's end, which
    /// is exclusive, may equal the next table's smallest key).
    pub smallest: Vec<u8>,
    pub largest: Vec<u8>,
}

impl TableInfo {
    pub fn overlaps(&self, lo: &[u8], hi: &[u8]) -> bool {
        self.smallest.as_slice() <= hi && lo <= self.largest.as_slice()
    }
}

/// A sorted run: tables in key order, their key ranges disjoint.
pub type Run = Vec<TableInfo>;

/// A level: its runs, newest first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Level {
    pub runs: Vec<Run>,
}

impl Level {
    pub fn bytes(&self) -> u64 {
        self.runs.iter().flatten().map(|t| t.bytes).sum()
    }
    pub fn points(&self) -> u64 {
        self.runs.iter().flatten().map(|t| t.points).sum()
    }
    pub fn is_empty(&self) -> bool {
        self.runs.iter().all(|r| r.is_empty())
    }
}

/// A merge to carry out.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    /// The level merged from: the shallowest of them for a merge at rest (`settle_job`),
    /// whose inputs are every run of the levels from it down to the target's.
    pub level: usize,
    /// Tables merged from `level` (and the levels below it, above `target`), by id, newest
    /// run first: whole runs, or one table of a leveled run.
    pub inputs: Vec<Vec<NodeId>>,
    pub target: usize,
    /// Tables of the target level's one run that the output replaces (leveled, and lazy
    /// leveling's last level); `None`: the output is a new run, the newest of the target level.
    pub into: Option<Vec<NodeId>>,
    /// Nothing older than the output lies below it for its keys.
    pub bottom: bool,
    /// Move the inputs down as they are, without reading or writing them.
    pub trivial: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    Merge(Job),
    /// Lazy leveling: the last level's run moves one level down, untouched.
    Deepen(usize),
    /// Dynamic levels: every level from 1 down moves one level down, untouched (`grow`).
    Grow,
}

/// The last level holding anything, if any but level 0 does.
fn last_level(levels: &[Level]) -> Option<usize> {
    levels
        .iter()
        .rposition(|l| !l.is_empty())
        .filter(|&i| i >= 1)
}

/// Bytes each level i ≥ 1 holds before it merges down (index 0 unused: level 0 counts runs).
/// Fixed (`Config::level_capacity`), or with dynamic levels from the last level's bytes S:
/// level i of last L gets S/T^(L−i), at least the base `level_capacity(1)` (as RocksDB sets
/// no level below its base size, so that level 0's batches do not land in a level smaller
/// than themselves); the last level and any below it are unbounded.
pub fn capacities(levels: &[Level], cfg: &Config) -> Vec<u64> {
    let n = levels.len().max(2);
    if !cfg.dynamic() {
        return (0..n).map(|i| cfg.level_capacity(i.max(1))).collect();
    }
    let base = cfg.level_capacity(1);
    let t = cfg.size_ratio as u64;
    let Some(last) = last_level(levels) else {
        return vec![u64::MAX; n];
    };
    let mut caps = vec![u64::MAX; n];
    let mut cap = levels[last].bytes();
    for i in (1..last).rev() {
        cap /= t;
        caps[i] = cap.max(base);
    }
    caps
}

/// Dynamic levels: the last level is past what a tree of its depth holds with level 1 at its
/// base, so the tree grows a level at the top.
fn due_to_grow(levels: &[Level], cfg: &Config) -> bool {
    let Some(last) = last_level(levels) else {
        return false;
    };
    let t = cfg.size_ratio as u64;
    let most = (1..last).fold(cfg.level_capacity(1), |c, _| c.saturating_mul(t));
    cfg.dynamic() && levels.len() < super::MAX_LEVELS && levels[last].bytes() > most
}

/// Nothing lies in levels below `level`.
fn nothing_below(levels: &[Level], level: usize) -> bool {
    levels.iter().skip(level + 1).all(Level::is_empty)
}

/// The key range [lo, hi] of `tables`.
fn span<'a>(tables: impl Iterator<Item = &'a TableInfo>) -> Option<(&'a [u8], &'a [u8])> {
    tables.fold(None, |acc, t| match acc {
        None => Some((t.smallest.as_slice(), t.largest.as_slice())),
        Some((lo, hi)) => Some((lo.min(t.smallest.as_slice()), hi.max(t.largest.as_slice()))),
    })
}

/// The ids of the target level's one run's tables overlapping [lo, hi].
fn overlapping(levels: &[Level], target: usize, lo: &[u8], hi: &[u8]) -> Vec<NodeId> {
    levels
        .get(target)
        .and_then(|l| l.runs.first())
        .map(|run| {
            run.iter()
                .filter(|t| t.overlaps(lo, hi))
                .map(|t| t.id)
                .collect()
        })
        .unwrap_or_default()
}

/// Merge every run of `level` into `target`: into its one run (`into_run`), or as a new run.
fn merge_level(levels: &[Level], level: usize, into_run: bool) -> Job {
    let runs = &levels[level].runs;
    let inputs: Vec<Vec<NodeId>> = runs
        .iter()
        .map(|r| r.iter().map(|t| t.id).collect())
        .collect();
    let target = level + 1;
    let into = into_run.then(|| match span(runs.iter().flatten()) {
        Some((lo, hi)) => overlapping(levels, target, lo, hi),
        None => Vec::new(),
    });
    let target_older = levels
        .get(target)
        .is_some_and(|l| !l.is_empty() && into.is_none());
    Job {
        level,
        inputs: inputs.clone(),
        target,
        trivial: into.as_ref().is_some_and(|i| i.is_empty()) && inputs.len() == 1,
        into,
        bottom: nothing_below(levels, target) && !target_older,
    }
}

/// The next merge for `levels` under `cfg`, if any is due. `cursors[i]` is the largest key of
/// the table last merged down from leveled level i (the round robin's place).
pub fn pick(levels: &[Level], cfg: &Config, cursors: &[Vec<u8>]) -> Option<Action> {
    let t = cfg.size_ratio as f64;
    let last = levels.iter().rposition(|l| !l.is_empty())?;
    // Lazy leveling first pushes an overfull last level down: it costs no IO.
    if cfg.policy == Policy::LazyLeveled
        && last >= 1
        && levels[last].runs.len() == 1
        && levels[last].bytes() > cfg.level_capacity(last)
    {
        return Some(Action::Deepen(last));
    }
    if due_to_grow(levels, cfg) {
        return Some(Action::Grow);
    }
    let caps = capacities(levels, cfg);
    let mut best: Option<(f64, usize)> = None;
    for (i, l) in levels.iter().enumerate() {
        let score = match (cfg.policy, i) {
            (_, 0) => l.runs.len() as f64 / cfg.l0_trigger() as f64,
            (Policy::Leveled, _) => l.bytes() as f64 / caps[i] as f64,
            (Policy::Tiered, _) => l.runs.len() as f64 / t,
            (Policy::LazyLeveled, _) if i == last => 0.0,
            (Policy::LazyLeveled, _) => l.runs.len() as f64 / t,
        };
        if score >= 1.0 && best.is_none_or(|(s, _)| score > s) {
            best = Some((score, i));
        }
    }
    let (_, i) = best?;
    let job = match (cfg.policy, i) {
        (Policy::Leveled, 0) => merge_level(levels, 0, true),
        (Policy::Leveled, _) => {
            let run = &levels[i].runs[0];
            let after = cursors.get(i).map(|c| c.as_slice());
            let t = run
                .iter()
                .find(|t| after.is_some_and(|c| t.smallest.as_slice() > c))
                .unwrap_or(&run[0]);
            let into = overlapping(levels, i + 1, &t.smallest, &t.largest);
            Job {
                level: i,
                inputs: vec![vec![t.id]],
                target: i + 1,
                trivial: into.is_empty(),
                into: Some(into),
                bottom: nothing_below(levels, i + 1),
            }
        }
        (Policy::Tiered, _) => merge_level(levels, i, false),
        (Policy::LazyLeveled, _) => merge_level(levels, i, i + 1 >= last),
    };
    Some(Action::Merge(job))
}

/// At a checkpoint asked for (flush and close), leveled: the level every level above merges
/// down into now (`settle_job`, one merge), if any, so that a tree at rest does not keep
/// newer versions of keys above the older copies they replace. `shadows[i][j]` is the
/// estimated bytes of level i whose key has its nearest older copy in level j (j = i: an
/// older run of level 0), sampled by the engine (`Lsm::sample_shadows`). Merging everything
/// above level d into d frees the copies with j ≤ d and rewrites levels 1..=d (level 0's own
/// bytes are not counted: its trigger merges them anyway); the deepest d whose freed bytes
/// times 2T are at least the bytes it rewrites is chosen. So a load of fresh keys settles
/// nothing; the copies a tree keeps at rest are under a 2T-th of what settling them would
/// rewrite (at most the tree: 5% at T = 10); and settling writes at most 2T bytes per byte
/// it frees, what a byte written costs through two leveled levels (T + 1 into each).
pub fn settle_target(levels: &[Level], cfg: &Config, shadows: &[Vec<u64>]) -> Option<usize> {
    if cfg.policy != Policy::Leveled {
        return None;
    }
    let last = levels.iter().rposition(|l| !l.is_empty())?;
    let at = |i: usize, j: usize| shadows.get(i).and_then(|r| r.get(j)).copied().unwrap_or(0);
    let mut best = None;
    let (mut freed, mut rewritten) = (0u64, 0u64);
    for d in 1..=last.max(1) {
        // Copies in level d of keys above it, and level d-1's of keys in level d-1 (level 0's
        // older runs) or level d.
        freed += (0..d).map(|i| at(i, d)).sum::<u64>() + if d == 1 { at(0, 0) } else { 0 };
        rewritten += levels.get(d).map_or(0, Level::bytes);
        if freed > 0 && freed.saturating_mul(2 * cfg.size_ratio as u64) >= rewritten {
            best = Some(d);
        }
    }
    best
}

/// Every run of the levels above `target` merged whole, in one merge, into the target
/// level's tables they overlap (`settle_target`'s choice): each input byte is read and written
/// once, where merging level by level would write level 0's bytes once per level.
pub fn settle_job(levels: &[Level], target: usize) -> Job {
    let above = &levels[..target.min(levels.len())];
    let level = above.iter().position(|l| !l.is_empty()).unwrap_or(0);
    let runs: Vec<&Run> = above.iter().flat_map(|l| &l.runs).collect();
    let into = match span(runs.iter().copied().flatten()) {
        Some((lo, hi)) => overlapping(levels, target, lo, hi),
        None => Vec::new(),
    };
    Job {
        level,
        inputs: runs
            .iter()
            .map(|r| r.iter().map(|t| t.id).collect())
            .collect(),
        target,
        trivial: into.is_empty() && runs.len() == 1,
        into: Some(into),
        bottom: nothing_below(levels, target),
    }
}

/// The levels a job takes its inputs from: `level` alone, or (a merge at rest) every level
/// from it down to the target's.
fn sources(job: &Job) -> std::ops::Range<usize> {
    job.level..job.target.max(job.level + 1)
}

/// The tables a merge reads: its input runs, then the target's tables it replaces.
pub fn inputs(levels: &[Level], job: &Job) -> Vec<Run> {
    let mut runs: Vec<Run> = job
        .inputs
        .iter()
        .map(|ids| find_tables(levels, sources(job), ids))
        .collect();
    let into = job.into.as_deref().unwrap_or_default();
    if !into.is_empty() {
        runs.push(find_tables(levels, job.target..job.target + 1, into));
    }
    runs
}

/// The tables `ids` of the levels `within`, in the order of `ids`.
fn find_tables(levels: &[Level], within: std::ops::Range<usize>, ids: &[NodeId]) -> Vec<TableInfo> {
    let tables = || {
        levels
            .get(within.clone())
            .unwrap_or_default()
            .iter()
            .flat_map(|l| l.runs.iter().flatten())
    };
    ids.iter()
        .filter_map(|id| tables().find(|t| t.id == *id).cloned())
        .collect()
}

/// Take the tables `ids` out of the levels `within` (emptied runs go too).
fn drop_tables(levels: &mut [Level], within: std::ops::Range<usize>, ids: &[NodeId]) {
    let end = within.end.min(levels.len());
    for l in levels
        .get_mut(within.start.min(end)..end)
        .unwrap_or_default()
    {
        for run in &mut l.runs {
            run.retain(|t| !ids.contains(&t.id));
        }
        l.runs.retain(|r| !r.is_empty());
    }
}

fn level_mut(levels: &mut Vec<Level>, i: usize) -> &mut Level {
    while levels.len() <= i {
        levels.push(Level::default());
    }
    &mut levels[i]
}

/// Put `tables` (in key order) into the target level's first run, in key order.
fn place_in_run(levels: &mut Vec<Level>, target: usize, tables: Vec<TableInfo>) {
    let level = level_mut(levels, target);
    if level.runs.is_empty() {
        level.runs.push(Vec::new());
    }
    let run = &mut level.runs[0];
    run.extend(tables);
    run.sort_by(|a, b| a.smallest.cmp(&b.smallest));
}

/// Drop empty levels at the bottom.
pub fn trim(levels: &mut Vec<Level>) {
    levels.truncate(
        levels
            .iter()
            .rposition(|l| !l.is_empty())
            .map_or(0, |i| i + 1),
    );
}

/// Lazy leveling's `Deepen`: the last level's run moves one level down.
pub fn deepen(levels: &mut Vec<Level>, level: usize) {
    let run = levels[level].runs.remove(0);
    level_mut(levels, level + 1).runs.insert(0, run);
}

/// Dynamic levels' `Grow`: an empty level 1 above the others, each of which moves one down
/// with its round-robin place. Every level keeps its runs and their order, so what is newer
/// stays above what is older.
pub fn grow(levels: &mut Vec<Level>, cursors: &mut Vec<Vec<u8>>) {
    level_mut(levels, 1);
    levels.insert(1, Level::default());
    if cursors.len() > 1 {
        cursors.insert(1, Vec::new());
    }
}

/// A trivial job: its inputs move down to the target as they are.
pub fn move_down(levels: &mut Vec<Level>, job: &Job) {
    let tables: Vec<TableInfo> = inputs(levels, job).concat();
    drop_tables(levels, sources(job), &job.inputs.concat());
    place_in_run(levels, job.target, tables);
}

/// A merge's output `tables` in place of its inputs.
pub fn install(levels: &mut Vec<Level>, job: &Job, tables: Vec<TableInfo>) {
    drop_tables(levels, sources(job), &job.inputs.concat());
    let into = job.into.as_deref().unwrap_or_default();
    drop_tables(levels, job.target..job.target + 1, into);
    if !tables.is_empty() {
        match job.into {
            Some(_) => place_in_run(levels, job.target, tables),
            None => level_mut(levels, job.target).runs.insert(0, tables),
        }
    }
    trim(levels);
}

/// Leveled round robin: the next merge from `job.level` starts after this one's table.
pub fn advance_cursor(levels: &[Level], cursors: &mut Vec<Vec<u8>>, cfg: &Config, job: &Job) {
    if cfg.policy != Policy::Leveled || job.level == 0 {
        return;
    }
    let last = job.inputs[0][0];
    let Some(largest) = levels
        .iter()
        .flat_map(|l| l.runs.iter().flatten())
        .find(|t| t.id == last)
        .map(|t| t.largest.clone())
    else {
        return;
    };
    while cursors.len() <= job.level {
        cursors.push(Vec::new());
    }
    cursors[job.level] = largest;
}

/// Level 0 runs at which writes stall until merges bring it below: twice the merge trigger and
/// four more, so that a merge of a deeper level may run to its end without a write waiting,
/// while point reads never probe more than this many level-0 runs.
pub fn stall_runs(cfg: &Config) -> usize {
    2 * cfg.l0_trigger() + 4
}

/// Whether writes must wait for merges now.
pub fn stalled(levels: &[Level], cfg: &Config) -> bool {
    levels
        .first()
        .is_some_and(|l| l.runs.len() >= stall_runs(cfg))
}

/// The model's description of an LSM-tree of shape `cfg` holding `entries` entries of
/// `entry_bytes` each (`model::lsm`, which prices it and shares its filter bits out).
pub fn model_input(cfg: &Config, entries: u64, entry_bytes: f64) -> LsmInput {
    LsmInput {
        merging: match cfg.policy {
            Policy::Leveled => Merging::Leveled,
            Policy::Tiered => Merging::Tiered,
            Policy::LazyLeveled => Merging::LazyLeveled,
        },
        size_ratio: cfg.size_ratio as f64,
        l0_runs: cfg.l0_trigger() as f64,
        memtable_bytes: cfg.memtable_bytes as f64,
        table_bytes: cfg.table_bytes as f64,
        block_bytes: cfg.block_bytes as f64,
        filter_bits: cfg.filter_bits,
        monkey: cfg.monkey,
        dynamic_levels: cfg.dynamic(),
        records: entries,
        key_bytes: 0,
        value_bytes: (entry_bytes - ENTRY_OVERHEAD).max(0.0).round() as u64,
        cache_bytes: 0,
        range_items: 0,
        load_write_bytes: None,
    }
}

/// Monkey's filter bits per key for a table of `level`: the filter memory (`filter_bits` per
/// entry) shared out over the full shape the data held now takes (`LsmInput::groups`: level 0
/// at its trigger, each level below at capacity, the last holding the rest) so that the
/// expected false positives per lookup are least: each run's false-positive rate proportional
/// to its entries, so deeper, larger runs get fewer bits per key.
pub fn monkey_bits(levels: &[Level], cfg: &Config, level: usize) -> f64 {
    let entries: u64 = levels.iter().map(Level::points).sum();
    let bytes: u64 = levels.iter().map(Level::bytes).sum();
    if entries == 0 {
        return cfg.filter_bits;
    }
    let inp = model_input(cfg, entries, bytes as f64 / entries as f64);
    let groups = inp.groups();
    let bits = inp.bits(&groups);
    bits[level.min(bits.len() - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(id: NodeId, lo: u8, hi: u8, bytes: u64) -> TableInfo {
        TableInfo {
            id,
            bytes,
            points: bytes / 100,
            puts: bytes / 100,
            ranges: 0,
            smallest: vec![lo],
            largest: vec![hi],
        }
    }

    /// A 1 MiB memtable, T = 4, 4 level-0 runs; fixed level sizes (`dynamic` for the others).
    fn cfg(policy: Policy) -> Config {
        let c = Config::with(policy, 4);
        Config {
            memtable_bytes: 1 << 20,
            l0_runs: if policy == Policy::Leveled {
                4
            } else {
                c.l0_runs
            },
            dynamic_levels: false,
            ..c
        }
    }

    fn dynamic() -> Config {
        Config {
            dynamic_levels: true,
            ..cfg(Policy::Leveled)
        }
    }

    /// One run of `tables` disjoint tables of `each` bytes, ids from `first_id`.
    fn run(first_id: NodeId, tables: u64, each: u64) -> Level {
        Level {
            runs: vec![(0..tables)
                .map(|i| table(first_id + i, 2 * i as u8, 2 * i as u8 + 1, each))
                .collect()],
        }
    }

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_tree_at_rest_settles_into_the_level_holding_what_it_shadows() {
        let c = dynamic();
        // T = 4, a 4 MiB base: two level-0 runs (below the trigger of 4) of 1 MiB, level 1 of
        // 3 MiB, level 2 of 16 MiB; nothing due.
        let l0 = Level {
            runs: vec![vec![table(40, 0, 255, MIB)], vec![table(41, 0, 255, MIB)]],
        };
        let levels = vec![l0.clone(), run(1, 3, MIB), run(10, 8, 2 * MIB)];
        let sh = |pairs: &[((usize, usize), u64)]| {
            let mut m = vec![vec![0u64; 3]; 3];
            for &((i, j), b) in pairs {
                m[i][j] = b;
            }
            m
        };
        assert_eq!(pick(&levels, &c, &[]), None);
        // A load of fresh keys shadows nothing.
        assert_eq!(settle_target(&levels, &c, &sh(&[])), None);
        // 2T = 8: level 0 shadowing 384 KiB of level 1 pays for rewriting level 1 (3 MiB);
        // a byte less does not.
        let kib = MIB / 1024;
        assert_eq!(
            settle_target(&levels, &c, &sh(&[((0, 1), 384 * kib)])),
            Some(1)
        );
        assert_eq!(
            settle_target(&levels, &c, &sh(&[((0, 1), 384 * kib - 1)])),
            None
        );
        // Copies in level 2 are freed only by rewriting levels 1 and 2 (19 MiB): 2.5 MiB of
        // them, from levels 0 and 1, pay for it; 2.25 MiB with level 0's own do not.
        let deep = sh(&[((0, 2), MIB), ((1, 2), 3 * MIB / 2)]);
        assert_eq!(settle_target(&levels, &c, &deep), Some(2));
        let shallow = sh(&[((0, 0), MIB / 4), ((0, 2), MIB / 2), ((1, 2), 3 * MIB / 2)]);
        assert_eq!(settle_target(&levels, &c, &shallow), None);
        // With nothing below level 0, its older runs' copies are freed for nothing rewritten.
        assert_eq!(
            settle_target(std::slice::from_ref(&l0), &c, &sh(&[((0, 0), 1)])),
            Some(1)
        );
        let job = settle_job(std::slice::from_ref(&l0), 1);
        assert!(job.bottom && !job.trivial && job.into == Some(vec![]));
        // Into level 1: level 0's two runs and the level-1 tables they overlap.
        let job = settle_job(&levels, 1);
        assert_eq!(
            (
                job.inputs.len(),
                job.into.as_ref().map(Vec::len),
                job.bottom
            ),
            (2, Some(3), false)
        );
        // Into level 2, in one merge: level 0's runs, then level 1's, over level 2's tables;
        // the output replaces all of them, newest run first among the inputs.
        let job = settle_job(&levels, 2);
        assert_eq!(job.inputs, vec![vec![40], vec![41], vec![1, 2, 3]]);
        assert_eq!(
            (job.level, job.target, job.bottom, job.trivial),
            (0, 2, true, false)
        );
        let read = inputs(&levels, &job);
        assert_eq!(
            read.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![1, 1, 3, 8]
        );
        let mut after = levels.clone();
        install(&mut after, &job, vec![table(99, 0, 255, 20 * MIB)]);
        assert_eq!(after.len(), 3);
        assert!(after[0].is_empty() && after[1].is_empty());
        assert_eq!(after[2].runs, vec![vec![table(99, 0, 255, 20 * MIB)]]);
        // Tiered and lazy leveling merge level 0 into a new run, which drops nothing below.
        for p in [Policy::Tiered, Policy::LazyLeveled] {
            assert_eq!(settle_target(&levels, &cfg(p), &deep), None);
        }
    }

    #[test]
    fn nothing_is_due_below_the_triggers() {
        for p in [Policy::Leveled, Policy::Tiered, Policy::LazyLeveled] {
            assert_eq!(pick(&[], &cfg(p), &[]), None);
            let l0 = Level {
                runs: vec![vec![table(1, 0, 9, MIB)]],
            };
            assert_eq!(pick(&[l0], &cfg(p), &[]), None, "{p:?}");
        }
    }

    #[test]
    fn leveled_merges_level_0_with_the_overlapping_level_1_tables() {
        let c = cfg(Policy::Leveled);
        let l0 = Level {
            runs: (0..4).map(|i| vec![table(10 + i, 20, 40, MIB)]).collect(),
        };
        let l1 = Level {
            runs: vec![vec![
                table(1, 0, 10, MIB),
                table(2, 15, 25, MIB),
                table(3, 30, 50, MIB),
                table(4, 60, 70, MIB),
            ]],
        };
        let Some(Action::Merge(job)) = pick(&[l0, l1], &c, &[]) else {
            panic!("level 0 is full")
        };
        assert_eq!(job.level, 0);
        assert_eq!(job.inputs.len(), 4);
        assert_eq!(job.into, Some(vec![2, 3]));
        assert!(job.bottom && !job.trivial);
    }

    #[test]
    fn leveled_moves_a_table_down_when_it_overlaps_nothing_and_goes_round_robin() {
        let c = cfg(Policy::Leveled);
        // Level 1 holds 4 MiB at most (memtable × 4 runs): 5 MiB is over.
        let l1 = Level {
            runs: vec![(0..5)
                .map(|i| table(i + 1, i as u8 * 10, i as u8 * 10 + 5, MIB))
                .collect()],
        };
        let l2 = Level {
            runs: vec![vec![table(9, 21, 23, MIB)]],
        };
        let levels = [Level::default(), l1, l2];
        let Some(Action::Merge(job)) = pick(&levels, &c, &[]) else {
            panic!("level 1 is over capacity")
        };
        assert_eq!((job.level, job.inputs.clone()), (1, vec![vec![1]]));
        assert!(job.trivial);
        let cursors = vec![Vec::new(), vec![15]];
        let Some(Action::Merge(job)) = pick(&levels, &c, &cursors) else {
            panic!()
        };
        assert_eq!(job.inputs, vec![vec![3]]);
        assert_eq!(job.into, Some(vec![9]));
        assert!(!job.trivial && job.bottom);
    }

    #[test]
    fn fixed_capacities_are_the_configured_ones_and_dynamic_ones_come_from_the_last_level() {
        let levels = [Level::default(), run(1, 2, MIB), run(10, 100, MIB)];
        let fixed = cfg(Policy::Leveled);
        assert_eq!(capacities(&levels, &fixed)[1..], [4 * MIB, 16 * MIB]);
        // Base 4 MiB (1 MiB memtable × 4 runs); the last level, 100 MiB, sets level 1's 25.
        let d = dynamic();
        assert_eq!(capacities(&levels, &d)[1..], [25 * MIB, u64::MAX]);
        // Never below the base.
        let small = [Level::default(), run(1, 2, MIB), run(10, 8, MIB)];
        assert_eq!(capacities(&small, &d)[1..], [4 * MIB, u64::MAX]);
        // Three levels: each a T-th of the one below, the floor applied level by level.
        let deep = [
            Level::default(),
            run(1, 1, MIB),
            run(5, 10, MIB),
            run(30, 128, 2 * MIB),
        ];
        assert_eq!(capacities(&deep, &d)[1..], [16 * MIB, 64 * MIB, u64::MAX]);
        // Level 0 alone: nothing below it is bounded yet.
        let l0 = [run(1, 1, MIB)];
        assert!(capacities(&l0, &d).iter().all(|&c| c == u64::MAX));
    }

    #[test]
    fn dynamic_levels_merge_level_0_into_the_last_until_it_outgrows_the_base_then_grow() {
        let d = dynamic();
        let l0 = Level {
            runs: (0..4).map(|i| vec![table(100 + i, 0, 9, MIB)]).collect(),
        };
        // Level 1 is the last: level 0 merges into it, at the bottom, however large it is.
        let levels = vec![l0.clone(), run(1, 4, MIB)];
        let Some(Action::Merge(job)) = pick(&levels, &d, &[]) else {
            panic!("level 0 is full")
        };
        assert_eq!((job.level, job.target, job.bottom), (0, 1, true));
        assert_eq!(job.into, Some(vec![1, 2, 3, 4]));
        // Past the base (4 MiB), the tree grows a level at the top, before any merge.
        let mut levels = vec![l0, run(1, 5, MIB)];
        assert_eq!(pick(&levels, &d, &[]), Some(Action::Grow));
        let mut cursors = vec![Vec::new(), vec![3]];
        grow(&mut levels, &mut cursors);
        assert_eq!(levels.len(), 3);
        assert!(levels[1].is_empty() && levels[2] == run(1, 5, MIB));
        assert_eq!(cursors, vec![Vec::new(), Vec::new(), vec![3]]);
        // Then level 0 merges into the new, empty level 1: a new run, not at the bottom.
        let Some(Action::Merge(job)) = pick(&levels, &d, &cursors) else {
            panic!("level 0 is still full")
        };
        assert_eq!((job.target, job.into.clone()), (1, Some(vec![])));
        assert!(!job.trivial && !job.bottom);
        // A level over max(the one below / T, base) pushes a table down; the last never does.
        let levels = vec![
            Level::default(),
            run(1, 3, MIB),
            run(10, 20, MIB),
            run(40, 64, MIB),
        ];
        let Some(Action::Merge(job)) = pick(&levels, &d, &[]) else {
            panic!("level 2 holds 20 MiB of at most 64 / 4")
        };
        assert_eq!((job.level, job.target), (2, 3));
        let levels = vec![Level::default(), run(1, 5, MIB), run(20, 16, MIB)];
        let Some(Action::Merge(job)) = pick(&levels, &d, &[]) else {
            panic!("level 1 holds 5 MiB of at most the base, 4")
        };
        assert_eq!((job.level, job.target), (1, 2));
        let levels = vec![Level::default(), run(1, 3, MIB), run(20, 16, MIB)];
        assert_eq!(pick(&levels, &d, &[]), None);
        // A tree with fixed sizes never grows at the top: level 1 over 4 MiB moves down.
        let levels = vec![Level::default(), run(1, 5, MIB)];
        let Some(Action::Merge(job)) = pick(&levels, &cfg(Policy::Leveled), &[]) else {
            panic!()
        };
        assert!(job.trivial && job.target == 2);
    }

    #[test]
    fn tiered_merges_a_full_level_into_a_new_run_below() {
        let c = cfg(Policy::Tiered);
        let full = |base: NodeId| Level {
            runs: (0..4).map(|i| vec![table(base + i, 0, 9, MIB)]).collect(),
        };
        let Some(Action::Merge(job)) = pick(&[full(10)], &c, &[]) else {
            panic!()
        };
        assert_eq!((job.target, job.into.clone()), (1, None));
        assert!(job.bottom, "nothing lies below or in level 1");
        let one = Level {
            runs: vec![vec![table(1, 0, 9, 4 * MIB)]],
        };
        let Some(Action::Merge(job)) = pick(&[full(10), one], &c, &[]) else {
            panic!()
        };
        assert!(!job.bottom, "level 1's older run lies below the output");
    }

    #[test]
    fn lazy_leveling_merges_into_the_last_run_and_deepens_it_when_full() {
        let c = cfg(Policy::LazyLeveled);
        let l0 = Level {
            runs: (0..4).map(|i| vec![table(10 + i, 0, 9, MIB)]).collect(),
        };
        let last = Level {
            runs: vec![vec![table(1, 0, 4, MIB), table(2, 5, 9, MIB)]],
        };
        let Some(Action::Merge(job)) = pick(&[l0.clone(), last], &c, &[]) else {
            panic!()
        };
        assert_eq!(job.into, Some(vec![1, 2]));
        assert!(job.bottom);
        // Level 1's capacity under lazy leveling: 4 runs of 4 MiB.
        let big = Level {
            runs: vec![vec![table(1, 0, 9, 17 * MIB)]],
        };
        assert_eq!(
            pick(&[l0.clone(), big.clone()], &c, &[]),
            Some(Action::Deepen(1))
        );
        // Once deeper, level 1 is tiered: level 0 becomes a new run there.
        let levels = [l0, Level::default(), big];
        let Some(Action::Merge(job)) = pick(&levels, &c, &[]) else {
            panic!()
        };
        assert_eq!((job.target, job.into.clone(), job.bottom), (1, None, false));
    }
}
