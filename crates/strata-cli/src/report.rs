//! Output shared by the commands: serialisable views of the library's metrics (its types do not
//! implement `Serialize`), a two-column table for people, and number formatting.

use std::io::{self, Write};

use serde::Serialize;
use strata::{CacheStats, Metrics};

use crate::sizes::human;
use crate::Failure;

/// `a / b`, or 0 when there is nothing to divide by (keeps JSON free of NaN).
pub fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        0.0
    } else {
        a / b
    }
}

/// The database's shape and footprint: what `stats` prints and `load` ends with.
#[derive(Serialize)]
pub struct DbView {
    pub engine: &'static str,
    pub node_size: u64,
    pub geometry: &'static str,
    /// What only this engine has (the Bε-tree's fanout, basement size, buffered messages and
    /// runs), by name.
    pub detail: std::collections::BTreeMap<&'static str, u64>,
    pub live_keys: u64,
    pub live_bytes: u64,
    pub data_file_bytes: u64,
    pub wal_file_bytes: u64,
    pub space_amplification: f64,
    pub height: u32,
    pub leaf_nodes: u64,
    pub internal_nodes: u64,
    pub blobs: u64,
    pub checkpoints: u64,
    pub referenced_bytes: u64,
    pub free_bytes: u64,
    pub cache: CacheView,
}

#[derive(Serialize)]
pub struct CacheView {
    pub budget_bytes: u64,
    pub resident_bytes: u64,
    pub peak_bytes: u64,
    pub entries: u64,
    pub hits: u64,
    pub misses: u64,
    pub hit_rate: f64,
    pub evictions: u64,
    pub writebacks: u64,
    pub writeback_ios: u64,
    pub checkpoint_nodes: u64,
    pub checkpoint_ios: u64,
}

impl From<&CacheStats> for CacheView {
    fn from(c: &CacheStats) -> Self {
        CacheView {
            budget_bytes: c.budget_bytes,
            resident_bytes: c.resident_bytes,
            peak_bytes: c.peak_bytes,
            entries: c.entries,
            hits: c.hits,
            misses: c.misses,
            hit_rate: ratio(c.hits as f64, (c.hits + c.misses) as f64),
            evictions: c.evictions,
            writebacks: c.writebacks,
            writeback_ios: c.writeback_ios,
            checkpoint_nodes: c.checkpoint_nodes,
            checkpoint_ios: c.checkpoint_ios,
        }
    }
}

impl From<&Metrics> for DbView {
    fn from(m: &Metrics) -> Self {
        let e = &m.engine;
        DbView {
            engine: e.engine,
            node_size: e.node_size,
            geometry: e.geometry_origin,
            detail: e.detail.iter().copied().collect(),
            live_keys: e.live_keys,
            live_bytes: e.live_bytes,
            data_file_bytes: m.data_file_bytes,
            wal_file_bytes: m.wal_file_bytes,
            space_amplification: m.space_amplification,
            height: e.height,
            leaf_nodes: e.leaf_nodes,
            internal_nodes: e.internal_nodes,
            blobs: e.blobs,
            checkpoints: e.checkpoints,
            referenced_bytes: e.referenced_bytes,
            free_bytes: e.free_bytes,
            cache: CacheView::from(&e.cache),
        }
    }
}

impl DbView {
    /// Add the tree, space and cache sections to `t`.
    pub fn rows(&self, t: &mut Table) {
        t.section("tree");
        let mut shape = format!("{}, {} nodes", self.engine, human(self.node_size));
        if let (Some(f), Some(b)) = (self.detail.get("fanout"), self.detail.get("basement_size")) {
            shape += &format!(", fanout {f}, {} basements", human(*b));
        }
        t.row("engine", shape);
        t.row("geometry", self.geometry);
        for (name, v) in &self.detail {
            if !matches!(*name, "fanout" | "basement_size") {
                t.row(&name.replace('_', " "), v);
            }
        }
        t.row("height", self.height);
        t.row(
            "nodes",
            format!(
                "{} ({} leaves, {} internal), {} blobs",
                self.leaf_nodes + self.internal_nodes,
                self.leaf_nodes,
                self.internal_nodes,
                self.blobs
            ),
        );
        t.row("checkpoints", self.checkpoints);
        t.section("space");
        t.row("live keys", self.live_keys);
        t.row("live bytes", bytes(self.live_bytes));
        t.row("data file", bytes(self.data_file_bytes));
        t.row(
            "  referenced / free",
            format!(
                "{} / {}",
                human(self.referenced_bytes),
                human(self.free_bytes)
            ),
        );
        t.row("wal file", bytes(self.wal_file_bytes));
        t.row("SA", format!("{:.3}", self.space_amplification));
        let c = &self.cache;
        t.section("cache");
        t.row("budget", bytes(c.budget_bytes));
        t.row(
            "resident / peak",
            format!(
                "{} / {} ({} nodes)",
                human(c.resident_bytes),
                human(c.peak_bytes),
                c.entries
            ),
        );
        t.row(
            "hits / misses",
            format!("{} / {} ({})", c.hits, c.misses, hit_rate(c.hit_rate)),
        );
        t.row(
            "evictions / writebacks (writes)",
            format!("{} / {} ({})", c.evictions, c.writebacks, c.writeback_ios),
        );
    }
}

/// Rows of `label  value` under section headings, aligned when printed.
#[derive(Default)]
pub struct Table {
    lines: Vec<(String, Option<String>)>,
}

impl Table {
    pub fn section(&mut self, name: &str) {
        self.lines.push((name.to_string(), None));
    }

    pub fn row(&mut self, label: &str, value: impl ToString) {
        self.lines
            .push((label.to_string(), Some(value.to_string())));
    }

    pub fn render(&self) -> String {
        let width = self
            .lines
            .iter()
            .filter(|(_, v)| v.is_some())
            .map(|(l, _)| l.len())
            .max()
            .unwrap_or(0);
        let mut out = String::new();
        for (label, value) in &self.lines {
            match value {
                Some(v) => out.push_str(&format!("  {label:<width$}  {v}\n")),
                None => out.push_str(&format!("{label}\n")),
            }
        }
        out
    }
}

/// A byte count for a table: human-readable, then exact.
pub fn bytes(n: u64) -> String {
    if n < 1024 {
        human(n)
    } else {
        format!("{} ({n} B)", human(n))
    }
}

pub fn hit_rate(fraction: f64) -> String {
    format!("{:.2}% hit", 100.0 * fraction)
}

/// Print `value` to stdout as one pretty-printed JSON object.
pub fn print_json(value: &impl Serialize) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| Failure::Invalid(format!("encoding JSON: {e}")))?;
    writeln!(io::stdout().lock(), "{text}")?;
    Ok(())
}

/// Print a table to stdout.
pub fn print_table(t: &Table) -> Result<(), Failure> {
    io::stdout().lock().write_all(t.render().as_bytes())?;
    Ok(())
}
