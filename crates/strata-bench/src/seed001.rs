//! Seed 001's experiments: a fractal tree against a B+-tree, counted in DAM IOs.
//!
//! As in the seed: 8-byte pairs (4-byte keys, 4-byte values), 4 KiB nodes, a cache of 8 nodes,
//! data sizes doubling from 32 KiB to 32 MiB; sequential insert, random insert, sequential
//! search, random search and full range searches; the B+-tree beside a Bε-tree with about
//! √(B/8) pivots per node. As in the seed, the range search runs over the randomly inserted
//! tree, once (Figure 3, left: for the Bε-tree its first query meets every buffered message)
//! and as the mean of five consecutive queries, the first included (Figure 3, right). Everything runs on a simulated disk, so the counts are exact: a
//! measured IO is one 4 KiB block transfer of the data file (the log is not counted; the seed's
//! trees have none).
//!
//! The cache: the seed's 32 KiB is 8 blocks. strata charges its pool by memory, and a node of
//! 8-byte pairs costs several times its 4 KiB on the heap, so the budget is 8 nodes' charge,
//! not 32 KiB of bytes; both trees get the same budget.
//!
//! Predictions come from `strata::model::predict` (Lemma 5 for the B+-tree, Lemma 8 / Theorem
//! 9 for the Bε-tree) for the operations the model prices: random insert, random point query
//! and a range query over everything. Sequential inserts and searches are measured only.

use serde::Serialize;
use strata::model::predict::{self, PredictInput};
use strata::model::{Affine, SplitMix64};
use strata::storage::SimEnv;
use strata::{Db, Durability, Options, Result, WriteBatch};

pub const BLOCK: usize = 4096;
const PAIR: u64 = 8;

#[derive(Clone, Debug, Serialize)]
pub struct Config {
    pub min_bytes: u64,
    pub max_bytes: u64,
    /// Cache size in nodes (the seed: 8 blocks of 4 KiB).
    pub cache_nodes: usize,
    pub seed: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            min_bytes: 32 << 10,
            max_bytes: 32 << 20,
            cache_nodes: 8,
            seed: 1,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub data_bytes: u64,
    pub pairs: u64,
    pub engine: &'static str,
    pub op: &'static str,
    pub measured_ios: u64,
    /// None where the model has no prediction (sequential operations).
    pub predicted_ios: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub config: Config,
    pub node_bytes: usize,
    pub betree_fanout: usize,
    pub cache_bytes: usize,
    pub rows: Vec<Row>,
}

/// Bytes of pool budget a full 4 KiB node of 8-byte pairs is charged (encoding plus the
/// engines' per-entry heap overhead), so that `cache_nodes` nodes fit.
pub fn node_charge() -> usize {
    let entries = BLOCK / 15;
    BLOCK + entries * 96 + 256
}

fn key(i: u64) -> [u8; 4] {
    (i as u32).to_be_bytes()
}

fn shuffled(n: u64, seed: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    let mut rng = SplitMix64::new(seed);
    for i in (1..v.len()).rev() {
        v.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    v
}

/// Consecutive full range searches whose mean the seed plots (Figure 3, right).
pub const RANGE_QUERIES: u64 = 5;

/// Data-file block transfers while `f` runs.
fn counted(db: &Db, f: impl FnOnce(&Db) -> Result<()>) -> Result<u64> {
    let before = db.metrics().data_io.dam_ios;
    f(db)?;
    Ok(db.metrics().data_io.dam_ios - before)
}

fn insert(db: &Db, order: &[u64]) -> Result<()> {
    for chunk in order.chunks(1000) {
        let mut b = WriteBatch::new();
        for &i in chunk {
            b.put(key(i), (i as u32).to_le_bytes());
        }
        db.write(b)?;
    }
    Ok(())
}

fn search(db: &Db, order: &[u64]) -> Result<()> {
    for &i in order {
        if db.get(key(i))?.is_none() {
            return Err(strata::Error::InvalidOptions(format!(
                "seed001: key {i} is missing"
            )));
        }
    }
    Ok(())
}

fn scan_all(db: &Db, n: u64) -> Result<()> {
    let mut count = 0;
    for kv in db.iter()? {
        kv?;
        count += 1;
    }
    if count != n {
        return Err(strata::Error::InvalidOptions(format!(
            "seed001: range found {count} of {n} keys"
        )));
    }
    Ok(())
}

pub fn run(cfg: &Config, mut progress: impl FnMut(&str)) -> Result<Report> {
    let fanout = ((BLOCK as u64 / PAIR) as f64).sqrt().round() as usize;
    let cache = cfg.cache_nodes * node_charge();
    let engines: [(&'static str, Options); 2] = [
        ("btree", Options::default().btree(BLOCK)),
        ("betree", Options::default().betree(BLOCK, fanout, BLOCK)),
    ];
    let model = Affine::default_ssd();
    let mut rows = Vec::new();
    let mut bytes = cfg.min_bytes;
    while bytes <= cfg.max_bytes {
        let n = bytes / PAIR;
        for (engine, opts) in &engines {
            progress(&format!("{engine}: {n} pairs ({} KiB)", bytes >> 10));
            let opts = opts
                .clone()
                .cache_bytes(cache)
                .durability(Durability::None)
                .checkpoint_wal_bytes(1 << 40);
            let mut inp = PredictInput::new(BLOCK as u64, n, 4, 4, cache as u64);
            inp.inserts_per_checkpoint = f64::INFINITY;
            inp.range_items = n;
            if *engine == "betree" {
                inp.fanout = Some(fanout as u64);
                inp.basement_bytes = BLOCK as u64;
            }
            let p = if *engine == "betree" {
                predict::betree_engine(&inp, &model)
            } else {
                predict::btree(&inp, &model)
            };
            let ops = n as f64;
            let mut row = |op: &'static str, measured: u64, predicted: Option<f64>| {
                rows.push(Row {
                    data_bytes: bytes,
                    pairs: n,
                    engine,
                    op,
                    measured_ios: measured,
                    predicted_ios: predicted,
                })
            };
            let sequential: Vec<u64> = (0..n).collect();
            let random = shuffled(n, cfg.seed ^ n);

            let db = Db::open_in(&SimEnv::new(), opts.clone())?;
            row(
                "sequential insert",
                counted(&db, |db| insert(db, &sequential))?,
                None,
            );
            row(
                "sequential search",
                counted(&db, |db| search(db, &sequential))?,
                None,
            );
            row(
                "random search",
                counted(&db, |db| search(db, &random))?,
                Some(p.point.reads * ops),
            );
            drop(db);

            let db = Db::open_in(&SimEnv::new(), opts)?;
            row(
                "random insert",
                counted(&db, |db| insert(db, &random))?,
                Some((p.insert.reads + p.insert.writes) * ops),
            );
            let first = counted(&db, |db| scan_all(db, n))?;
            row("range search", first, Some(p.range.reads));
            let mut all = first;
            for _ in 1..RANGE_QUERIES {
                all += counted(&db, |db| scan_all(db, n))?;
            }
            row(
                "range search, mean of 5",
                (all as f64 / RANGE_QUERIES as f64).round() as u64,
                Some(p.range.reads),
            );
        }
        bytes *= 2;
    }
    Ok(Report {
        config: cfg.clone(),
        node_bytes: BLOCK,
        betree_fanout: fanout,
        cache_bytes: cache,
        rows,
    })
}

impl Report {
    fn find(&self, bytes: u64, engine: &str, op: &str) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.data_bytes == bytes && r.engine == engine && r.op == op)
    }

    /// Per data size: measured and predicted ratios of the two headline comparisons, B+-tree
    /// over Bε-tree IOs for random inserts and Bε-tree over B+-tree IOs for random searches.
    pub fn ratios(&self) -> Vec<(u64, [Option<f64>; 4])> {
        let mut sizes: Vec<u64> = self.rows.iter().map(|r| r.data_bytes).collect();
        sizes.dedup();
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        };
        sizes
            .into_iter()
            .map(|s| {
                let get = |e: &str, op: &str| self.find(s, e, op);
                let m = |e: &str, op: &str| get(e, op).map(|r| r.measured_ios as f64);
                let p = |e: &str, op: &str| get(e, op).and_then(|r| r.predicted_ios);
                (
                    s,
                    [
                        ratio(m("btree", "random insert"), m("betree", "random insert")),
                        ratio(p("btree", "random insert"), p("betree", "random insert")),
                        ratio(m("betree", "random search"), m("btree", "random search")),
                        ratio(p("betree", "random search"), p("btree", "random search")),
                    ],
                )
            })
            .collect()
    }
}

impl Report {
    /// Seed 001's Figures 1–3 side by side: IOs against the data size (log2 of KiB, so the
    /// doubling sizes fall evenly) for inserts, searches and range searches, measured and
    /// predicted, on a log axis. The legend is the first panel's: in the range panel the
    /// "sequential" lines are the mean of five consecutive queries.
    pub fn svg(&self) -> String {
        let line = |engine: &str, op: &str, predicted: bool| -> Vec<(f64, f64)> {
            self.rows
                .iter()
                .filter(|r| r.engine == engine && r.op == op)
                .filter_map(|r| {
                    let y = if predicted {
                        r.predicted_ios?
                    } else {
                        r.measured_ios as f64
                    };
                    Some(((r.data_bytes as f64 / 1024.0).log2(), y))
                })
                .collect()
        };
        let panel = |title: &str, random: &str, other: &str| crate::chart::LinePanel {
            title: title.into(),
            x_label: "data, log2 KiB (5 = 32 KiB, 15 = 32 MiB)".into(),
            y_label: "IOs".into(),
            series: vec![
                ("B+-tree, random".into(), line("btree", random, false)),
                (
                    "B+-tree, random, predicted".into(),
                    line("btree", random, true),
                ),
                ("Bε-tree, random".into(), line("betree", random, false)),
                (
                    "Bε-tree, random, predicted".into(),
                    line("betree", random, true),
                ),
                (
                    "B+-tree, sequential (range: mean of 5)".into(),
                    line("btree", other, false),
                ),
                (
                    "Bε-tree, sequential (range: mean of 5)".into(),
                    line("betree", other, false),
                ),
            ],
            x_marker: None,
        };
        crate::chart::log_lines_panels(&[
            panel("insert (Figure 1)", "random insert", "sequential insert"),
            panel("search (Figure 2)", "random search", "sequential search"),
            panel(
                "range search, one query (Figure 3)",
                "range search",
                "range search, mean of 5",
            ),
        ])
    }
}
