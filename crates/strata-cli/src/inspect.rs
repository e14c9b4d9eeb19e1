//! The commands that look at a database without changing its contents: `stats` prints its
//! metrics, `check` verifies every checksum and the engine's invariants.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::report::{print_json, print_table, DbView, Table};
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

pub fn stats(a: StatsArgs) -> Result<ExitCode, Failure> {
    let db = open_existing(&a.db)?;
    let view = DbView::from(&db.metrics());
    if a.json {
        print_json(&view)?;
    } else {
        let mut t = Table::default();
        view.rows(&mut t);
        print_table(&t)?;
    }
    Ok(ExitCode::SUCCESS)
}

pub fn check(a: CheckArgs) -> Result<ExitCode, Failure> {
    let db = open_existing(&a.db)?;
    let r = db.check().map_err(Failure::CheckFailed)?;
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
