//! `strata version ...`: the versioned dictionary (seed 003, `VersionedDb`) from the command
//! line. `list` prints the version tree, `clone` makes a new leaf, `put`/`get`/`scan` write and
//! read at a version, `delete` deletes a version (or, with `--key`, a key at a leaf), `diff`
//! lists the keys whose values differ between two versions.
//!
//! Only `put` creates a database (like the plain `put`), and only when it writes to version 0,
//! the one version a new database has: anything else on a missing directory is refused before
//! the directory is made. Every refusal (unknown or deleted version, a write to an internal
//! version, a key or value too large) comes from the library's validation, which runs before
//! anything is logged, so a refused command changes nothing.

use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;
use strata::storage::env::DATA_FILE;
use strata::{
    CowConfig, SdaConfig, Version, VersionedDb, VersionedEngineOptions, VersionedOptions,
    MAX_KEY_LEN, MAX_VALUE_LEN, ROOT_VERSION,
};

use crate::kv::{Span, Target, ESCAPE_HELP};
use crate::report::print_json;
use crate::Failure;

#[derive(Subcommand)]
pub enum VersionCommand {
    List(ListArgs),
    Clone(CloneArgs),
    Put(PutArgs),
    Get(GetArgs),
    Scan(ScanArgs),
    Delete(DeleteArgs),
    Diff(DiffArgs),
}

/// Print the version tree: each version, its parent, whether it is a writable leaf, an
/// internal (cloned, read-only) version or a deleted one kept for its live descendants
#[derive(Args)]
pub struct ListArgs {
    /// Database directory
    #[arg(long, value_name = "DIR")]
    db: std::path::PathBuf,
    /// Print a JSON array instead of a table
    #[arg(long)]
    json: bool,
}

/// Make a new leaf version under VERSION (which becomes internal, read-only); print its number
#[derive(Args)]
pub struct CloneArgs {
    /// Database directory
    #[arg(long, value_name = "DIR")]
    db: std::path::PathBuf,
    /// The version to clone (0 is the root)
    version: Version,
}

/// The engine of a new versioned database.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EngineArg {
    /// The stratified doubling array (seed 003)
    Sda,
    /// The copy-on-write B-tree with clones (the baseline)
    Cow,
}

impl EngineArg {
    fn name(self) -> &'static str {
        match self {
            EngineArg::Sda => "sda",
            EngineArg::Cow => "cow",
        }
    }
}

/// Store VALUE under KEY at leaf VERSION (creates the database, with only version 0, if it
/// does not exist)
#[derive(Args)]
#[command(after_help = ESCAPE_HELP)]
pub struct PutArgs {
    #[command(flatten)]
    target: Target,
    /// Engine of a new database (an existing one keeps its own) [default: sda]
    #[arg(long, value_enum)]
    engine: Option<EngineArg>,
    /// A leaf version (never cloned)
    version: Version,
    key: String,
    value: String,
}

/// Print the value of KEY at VERSION (the nearest ancestor's write); exit 1 if there is none
#[derive(Args)]
#[command(after_help = ESCAPE_HELP)]
pub struct GetArgs {
    #[command(flatten)]
    target: Target,
    /// The version to read at
    version: Version,
    key: String,
}

/// Print `key<TAB>value` lines of VERSION for the keys in [--from, --to), in order
#[derive(Args)]
#[command(after_help = ESCAPE_HELP)]
pub struct ScanArgs {
    #[command(flatten)]
    target: Target,
    /// The version to read at
    version: Version,
    #[command(flatten)]
    span: Span,
}

/// Delete VERSION (it can no longer be read; what no live version reads is reclaimed), or with
/// --key, delete that key at leaf VERSION
#[derive(Args)]
#[command(after_help = ESCAPE_HELP)]
pub struct DeleteArgs {
    #[command(flatten)]
    target: Target,
    /// The version to delete (or, with --key, the leaf to delete the key at)
    version: Version,
    /// Delete this key at VERSION instead of the version
    #[arg(long, value_name = "KEY")]
    key: Option<String>,
}

/// Print the keys whose values differ between versions A and B: `-key<TAB>value` for A's
/// value, `+key<TAB>value` for B's (a key absent at one has only the other's line)
#[derive(Args)]
#[command(after_help = ESCAPE_HELP)]
pub struct DiffArgs {
    #[command(flatten)]
    target: Target,
    /// The version whose values the `-` lines show
    a: Version,
    /// The version whose values the `+` lines show
    b: Version,
}

pub fn run(c: VersionCommand) -> Result<ExitCode, Failure> {
    match c {
        VersionCommand::List(a) => list(a),
        VersionCommand::Clone(a) => clone(a),
        VersionCommand::Put(a) => put(a),
        VersionCommand::Get(a) => get(a),
        VersionCommand::Scan(a) => scan(a),
        VersionCommand::Delete(a) => delete(a),
        VersionCommand::Diff(a) => diff(a),
    }
}

pub(crate) fn open_existing(dir: &Path) -> Result<VersionedDb, Failure> {
    let opts = VersionedOptions {
        create_if_missing: false,
        ..VersionedOptions::default()
    };
    Ok(VersionedDb::open(dir, opts)?)
}

#[derive(Serialize)]
struct VersionView {
    version: Version,
    parent: Option<Version>,
    children: Vec<Version>,
    /// "leaf", "internal" or "deleted".
    state: &'static str,
}

fn list(a: ListArgs) -> Result<ExitCode, Failure> {
    let db = open_existing(&a.db)?;
    let views: Vec<VersionView> = db
        .versions()?
        .into_iter()
        .map(|v| VersionView {
            state: if v.deleted {
                "deleted"
            } else if v.leaf {
                "leaf"
            } else {
                "internal"
            },
            version: v.version,
            parent: v.parent,
            children: v.children,
        })
        .collect();
    if a.json {
        return print_json(&views).map(|_| ExitCode::SUCCESS);
    }
    let mut out = BufWriter::new(io::stdout().lock());
    writeln!(
        out,
        "{:>8}  {:>8}  {:<8}  children",
        "version", "parent", "state"
    )?;
    for v in &views {
        let parent = v.parent.map_or_else(|| "-".into(), |p| p.to_string());
        let children: Vec<String> = v.children.iter().map(|c| c.to_string()).collect();
        writeln!(
            out,
            "{:>8}  {:>8}  {:<8}  {}",
            v.version,
            parent,
            v.state,
            if children.is_empty() {
                "-".into()
            } else {
                children.join(",")
            }
        )?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn clone(a: CloneArgs) -> Result<ExitCode, Failure> {
    let db = open_existing(&a.db)?;
    let w = db.clone_version(a.version)?;
    db.close()?;
    writeln!(io::stdout().lock(), "{w}")?;
    Ok(ExitCode::SUCCESS)
}

fn put(a: PutArgs) -> Result<ExitCode, Failure> {
    let (key, value) = (a.target.bytes(&a.key)?, a.target.bytes(&a.value)?);
    // The limits checked before the directory may be made (the library checks them again).
    if key.len() > MAX_KEY_LEN {
        let (len, max) = (key.len(), MAX_KEY_LEN);
        return Err(strata::Error::KeyTooLarge { len, max }.into());
    }
    if value.len() > MAX_VALUE_LEN {
        let (len, max) = (value.len(), MAX_VALUE_LEN);
        return Err(strata::Error::ValueTooLarge { len, max }.into());
    }
    let dir = &a.target.db;
    let exists = dir.join(DATA_FILE).exists();
    if !exists && a.version != ROOT_VERSION {
        // Refused before the directory is made: a new database has only version 0.
        return Err(strata::Error::BadVersion {
            version: a.version,
            why: format!(
                "no such version (there is no database at {}; a new one has only version 0)",
                dir.display()
            ),
        }
        .into());
    }
    let engine = a.engine.unwrap_or(EngineArg::Sda);
    let opts = VersionedOptions {
        engine: match engine {
            EngineArg::Sda => VersionedEngineOptions::Sda(SdaConfig::default()),
            EngineArg::Cow => VersionedEngineOptions::Cow(CowConfig::default()),
        },
        ..VersionedOptions::default()
    };
    let db = VersionedDb::open(dir, opts)?;
    if let Some(asked) = a.engine {
        let has = db.stats()?.engine;
        if exists && has != asked.name() {
            return Err(Failure::Invalid(format!(
                "{} holds a {has} database; --engine {} applies to a new database only",
                dir.display(),
                asked.name()
            )));
        }
    }
    db.put_at(a.version, key, value)?;
    db.close()?;
    Ok(ExitCode::SUCCESS)
}

fn get(a: GetArgs) -> Result<ExitCode, Failure> {
    let key = a.target.bytes(&a.key)?;
    let db = open_existing(&a.target.db)?;
    match db.get_at(a.version, &key)? {
        Some(value) => {
            writeln!(io::stdout().lock(), "{}", a.target.show(&value))?;
            Ok(ExitCode::SUCCESS)
        }
        None => {
            eprintln!("not found");
            Ok(ExitCode::from(1))
        }
    }
}

fn scan(a: ScanArgs) -> Result<ExitCode, Failure> {
    let range = a.span.bounds(&a.target)?;
    let db = open_existing(&a.target.db)?;
    let iter = db.range_at::<Vec<u8>, _>(a.version, range)?;
    a.span.print(&a.target, iter)
}

fn delete(a: DeleteArgs) -> Result<ExitCode, Failure> {
    let key = a.key.as_deref().map(|k| a.target.bytes(k)).transpose()?;
    let db = open_existing(&a.target.db)?;
    match key {
        Some(k) => db.delete_at(a.version, k)?,
        None => db.delete_version(a.version)?,
    }
    db.close()?;
    Ok(ExitCode::SUCCESS)
}

fn diff(a: DiffArgs) -> Result<ExitCode, Failure> {
    let db = open_existing(&a.target.db)?;
    let entries = db.diff(a.a, a.b)?;
    let mut out = BufWriter::new(io::stdout().lock());
    for (k, at_a, at_b) in entries {
        let key = a.target.show(&k);
        if let Some(v) = at_a {
            writeln!(out, "-{key}\t{}", a.target.show(&v))?;
        }
        if let Some(v) = at_b {
            writeln!(out, "+{key}\t{}", a.target.show(&v))?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
