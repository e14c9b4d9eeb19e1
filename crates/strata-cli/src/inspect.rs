//! The commands that look at a database without changing its contents: `stats` prints its
//! metrics, `check` verifies every checksum and the engine's invariants, `dump` prints the
//! engine's structure level by level. `stats` and `check` take a plain database or a
//! versioned one (seed 003's `VersionedDb`, told apart by the engine tag in its superblock);
//! for a versioned one `stats` adds its version tree's counts.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use serde::Serialize;
use strata::{Db, VersionedDb};

use crate::kv::escape;
use crate::report::{print_json, print_table, DbView, Table};
use crate::sizes::human;
use crate::{open_existing, Failure};

/// Print the database's shape, space use and cache statistics
#[derive(Args)]
pub struct StatsArgs {
    /// Database directory
    #[arg(long, value_name = "DIR")]
    db: PathBuf,
    /// Print one JSON object instead of a table
    #[arg(long)]
    json: bool,
}

/// Verify every block checksum and the tree's invariants; exit 2 on corruption
#[derive(Args)]
pub struct CheckArgs {
    /// Database directory
    #[arg(long, value_name = "DIR")]
    db: PathBuf,
}

/// Print the tree level by level: each node's id, kind, size, pivots, and (Bε-tree) buffered
/// bytes and runs per child; for the LSM-tree, its levels' runs and tables with key ranges; for
/// a versioned database, the SDA's arrays with the versions each serves, or the copy-on-write
/// B-tree's nodes from the versions' roots
#[derive(Args)]
pub struct DumpArgs {
    /// Database directory
    #[arg(long, value_name = "DIR")]
    db: PathBuf,
    /// Show only the top N levels [default: all]
    #[arg(long, value_name = "N")]
    levels: Option<u32>,
    /// Print the dump as JSON: keys as the CLI prints them (text, other bytes escaped)
    #[arg(long)]
    json: bool,
}

/// A database of either facade.
enum Opened {
    Plain(Db),
    Versioned(VersionedDb),
}

/// Open the database in `dir`, plain or versioned: `Db` refuses a versioned directory as not
/// its own, and then `VersionedDb` opens it. When neither can, `Db`'s reason is given, unless
/// `VersionedDb` found damage.
fn open_any(dir: &Path) -> Result<Opened, Failure> {
    match open_existing(dir) {
        Ok(db) => Ok(Opened::Plain(db)),
        Err(Failure::Db(e @ strata::Error::NotADatabase { .. })) => {
            match crate::version::open_existing(dir) {
                Ok(db) => Ok(Opened::Versioned(db)),
                Err(Failure::Db(v)) if v.is_corruption() => Err(Failure::Db(v)),
                Err(_) => Err(Failure::Db(e)),
            }
        }
        Err(e) => Err(e),
    }
}

/// A versioned database's version tree, in numbers.
#[derive(Serialize)]
struct VersionCounts {
    /// Versions that can be read: leaves and internal ones.
    live: u64,
    /// Live versions that take writes.
    leaves: u64,
    /// Deleted versions kept for their live descendants.
    ghosts: u64,
    /// The number the next clone gets.
    next: u64,
}

#[derive(Serialize)]
struct VersionedView {
    #[serde(flatten)]
    db: DbView,
    versions: VersionCounts,
}

pub fn stats(a: StatsArgs) -> Result<ExitCode, Failure> {
    let (view, versions) = match open_any(&a.db)? {
        Opened::Plain(db) => (DbView::from(&db.metrics()), None),
        Opened::Versioned(db) => {
            let all = db.versions()?;
            let counts = VersionCounts {
                live: all.iter().filter(|v| !v.deleted).count() as u64,
                leaves: all.iter().filter(|v| !v.deleted && v.leaf).count() as u64,
                ghosts: all.iter().filter(|v| v.deleted).count() as u64,
                next: db.next_version()?,
            };
            (DbView::from(&db.metrics()?), Some(counts))
        }
    };
    if a.json {
        match versions {
            Some(versions) => print_json(&VersionedView { db: view, versions })?,
            None => print_json(&view)?,
        }
    } else {
        let mut t = Table::default();
        if let Some(c) = &versions {
            t.section("versions");
            t.row("live", format!("{} ({} leaves)", c.live, c.leaves));
            t.row("deleted, kept as ghosts", c.ghosts);
            t.row("next clone", c.next);
        }
        view.rows(&mut t);
        print_table(&t)?;
    }
    Ok(ExitCode::SUCCESS)
}

pub fn check(a: CheckArgs) -> Result<ExitCode, Failure> {
    let r = match open_any(&a.db)? {
        Opened::Plain(db) => db.check(),
        Opened::Versioned(db) => db.check(),
    }
    .map_err(Failure::CheckFailed)?;
    let mut t = Table::default();
    t.section(&format!("{}: ok", a.db.display()));
    t.row("blocks verified", r.blocks_verified);
    t.row("keys", r.keys);
    t.row("height", r.height);
    t.row("leaf nodes", r.leaf_nodes);
    t.row("internal nodes", r.internal_nodes);
    t.row("blobs", r.blobs);
    for (name, v) in &r.detail {
        t.row(&name.replace('_', " "), v);
    }
    print_table(&t)?;
    Ok(ExitCode::SUCCESS)
}

pub fn dump(a: DumpArgs) -> Result<ExitCode, Failure> {
    if a.levels == Some(0) {
        return Err(Failure::Invalid("--levels must be at least 1".into()));
    }
    let levels = a.levels.unwrap_or(0);
    let d = match open_any(&a.db)? {
        Opened::Plain(db) => db.dump(levels)?,
        Opened::Versioned(db) => db.dump(levels)?,
    };
    if a.json {
        print_json(&dump_json(&d))?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = std::io::stdout().lock();
    std::io::Write::write_all(&mut out, render_dump(&d).as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// The dump as JSON, field for field (`strata::Dump`), keys escaped as the text shows them.
pub fn dump_json(d: &strata::Dump) -> serde_json::Value {
    use serde_json::json;
    let keys = |ks: &[Vec<u8>]| ks.iter().map(|k| escape(k)).collect::<Vec<_>>();
    let nodes: Vec<_> = d
        .nodes
        .iter()
        .map(|n| {
            json!({
                "level": n.level,
                "id": n.id,
                "kind": n.kind,
                "bytes": n.bytes,
                "entries": n.entries,
                "pivots": keys(&n.pivots),
                "range": n.range.as_ref().map(|(lo, hi)| [escape(lo), escape(hi)]),
                "run": n.run,
                "versions": n.versions,
                "children": n.children.iter().map(|c| json!({
                    "id": c.id,
                    "buffered_bytes": c.buffered_bytes,
                    "buffered_messages": c.buffered_messages,
                    "runs": c.runs.iter().map(|r| json!({
                        "id": r.id,
                        "bytes": r.bytes,
                        "messages": r.messages,
                    })).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "engine": d.engine,
        "height": d.height,
        "notes": d.notes,
        "nodes": nodes,
    })
}

/// Versions as `v1 v2 ...`, the first 16 and a count of the rest.
fn versions_list(vs: &[u64]) -> String {
    let mut out: Vec<String> = vs.iter().take(16).map(u64::to_string).collect();
    if vs.len() > 16 {
        out.push(format!("and {} more", vs.len() - 16));
    }
    format!(
        "version{} {}",
        if vs.len() == 1 { "" } else { "s" },
        out.join(" ")
    )
}

fn quoted(keys: &[Vec<u8>]) -> String {
    keys.iter()
        .map(|k| format!("\"{}\"", escape(k)))
        .collect::<Vec<_>>()
        .join(" | ")
}

/// The dump as text: one block per level, one line per node (a line per child beneath an
/// internal node that buffers messages).
pub fn render_dump(d: &strata::Dump) -> String {
    let mut o = String::new();
    let shown = d.nodes.iter().map(|n| n.level + 1).max().unwrap_or(0);
    let leveled = d.engine == "lsm" || d.engine == "sda";
    o.push_str(&format!(
        "{}: {} {}",
        d.engine,
        if leveled { "levels" } else { "height" },
        d.height
    ));
    if !leveled && shown < d.height {
        o.push_str(&format!(", showing the top {shown}"));
    }
    o.push('\n');
    for note in &d.notes {
        o.push_str(&format!("{note}\n"));
    }
    for level in 0..shown {
        let nodes: Vec<&strata::DumpNode> = d.nodes.iter().filter(|n| n.level == level).collect();
        let what = match (d.engine, nodes.len()) {
            ("lsm", 1) => "table",
            ("lsm", _) => "tables",
            ("sda", 1) => "array",
            ("sda", _) => "arrays",
            (_, 1) => "node",
            (_, _) => "nodes",
        };
        o.push_str(&format!("level {level} ({} {what})\n", nodes.len()));
        for n in nodes {
            render_node(n, d.engine == "betree", &mut o);
        }
    }
    o
}

fn render_node(n: &strata::DumpNode, buffers: bool, o: &mut String) {
    let run = n.run.map_or(String::new(), |r| format!(" (run {r})"));
    o.push_str(&format!("  {} {}{run}: {}", n.kind, n.id, human(n.bytes)));
    match n.kind {
        "internal" => {
            o.push_str(&format!(", {} children", n.children.len()));
            if buffers {
                o.push_str(&format!(", {} messages buffered", n.entries));
            }
        }
        "table" => o.push_str(&format!(", {} messages", n.entries)),
        _ => o.push_str(&format!(", {} entries", n.entries)),
    }
    if let Some((lo, hi)) = &n.range {
        o.push_str(&format!(", keys \"{}\" .. \"{}\"", escape(lo), escape(hi)));
    }
    if !n.versions.is_empty() {
        let what = if n.kind == "array" {
            "serves"
        } else {
            "root of"
        };
        o.push_str(&format!(", {what} {}", versions_list(&n.versions)));
    }
    o.push('\n');
    if !n.pivots.is_empty() {
        let what = if n.kind == "leaf" {
            "basement pivots"
        } else {
            "pivots"
        };
        o.push_str(&format!("    {what}: {}\n", quoted(&n.pivots)));
    }
    if buffers {
        for c in &n.children {
            o.push_str(&format!(
                "    child {}: {} buffered ({} messages)",
                c.id,
                human(c.buffered_bytes),
                c.buffered_messages
            ));
            if !c.runs.is_empty() {
                let runs: Vec<String> = c
                    .runs
                    .iter()
                    .map(|r| format!("{} ({}, {} messages)", r.id, human(r.bytes), r.messages))
                    .collect();
                o.push_str(&format!(", runs {}", runs.join(", ")));
            }
            o.push('\n');
        }
    } else if !n.children.is_empty() {
        let ids: Vec<String> = n.children.iter().map(|c| c.id.to_string()).collect();
        o.push_str(&format!("    children: {}\n", ids.join(" ")));
    }
}
