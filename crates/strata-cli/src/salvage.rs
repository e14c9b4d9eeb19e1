//! `strata salvage`: copy every key still readable from a damaged database into a new one, and
//! say what could not be read (`strata::salvage`). The source is only read; the copy is a new
//! database with the source's engine and geometry. Exit 0 when nothing was lost, 2 when some
//! keys or log batches could not be copied (the copy is written either way), 1 on errors.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use serde_json::{json, Value};
use strata::salvage::{escape, Effect, SalvageReport, Slot};
use strata::{AddU64, Append, Error, Options};

use crate::report::print_json;
use crate::sizes::parse_size;
use crate::Failure;

/// Copy every key still readable from a damaged database into a new one; exit 2 if any were lost
#[derive(Args)]
pub struct SalvageArgs {
    /// The damaged database (opened read-only)
    #[arg(long, value_name = "DIR")]
    db: PathBuf,
    /// Where to create the copy; must not already hold a database
    #[arg(long, value_name = "NEW")]
    to: PathBuf,
    /// Buffer pool budget, for reading the source and for the copy
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = parse_size)]
    cache: u64,
    /// The merge operator the database's upserts used, to replay those in its log
    #[arg(long, value_enum)]
    merge: Option<Merge>,
    /// Print one JSON object instead of text
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum Merge {
    /// Little-endian u64 counters, added
    AddU64,
    /// Operands appended to the value
    Append,
}

pub fn run(a: SalvageArgs) -> Result<ExitCode, Failure> {
    let cache = usize::try_from(a.cache)
        .map_err(|_| Failure::Invalid(format!("--cache {} is too large", a.cache)))?;
    let mut opts = Options::default().cache_bytes(cache);
    opts = match a.merge {
        Some(Merge::AddU64) => opts.merge_operator(AddU64),
        Some(Merge::Append) => opts.merge_operator(Append),
        None => opts,
    };
    let report = strata::salvage::salvage(&a.db, &a.to, opts)?;
    if a.json {
        print_json(&to_json(&report))?;
    } else {
        println!("{report}");
    }
    Ok(if report.is_complete() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

fn to_json(r: &SalvageReport) -> Value {
    let slot = |s: &Slot| match s {
        Slot::Blank => json!("blank"),
        Slot::Damaged => json!("damaged"),
        Slot::Valid { seq, wal_seq } => json!({"checkpoint": seq, "wal_seq": wal_seq}),
    };
    let damage: Vec<Value> = r
        .damage
        .iter()
        .map(|d| {
            let (file, offset) = match &d.error {
                Error::Corruption { file, offset, .. } => (Some(file.clone()), Some(*offset)),
                _ => (None, None),
            };
            let key = |k: &Option<Vec<u8>>| k.as_deref().map(escape);
            json!({
                "what": d.what,
                "node": d.node,
                "file": file,
                "offset": offset,
                "error": d.error.to_string(),
                "keys": d.range.as_ref().map(|k| json!({"from": key(&k.lo), "to": key(&k.hi)})),
                "effect": match d.effect {
                    Effect::Lost => "lost",
                    Effect::Stale => "stale",
                    Effect::None => "none",
                },
                "recovered": d.recovered,
            })
        })
        .collect();
    json!({
        "source": r.source,
        "destination": r.destination,
        "engine": r.engine,
        "superblocks": [slot(&r.slots[0]), slot(&r.slots[1])],
        "checkpoint": r.checkpoint.map(|(seq, wal)| json!({"seq": seq, "wal_seq": wal})),
        "keys_copied": r.keys_copied,
        "raw_scan": r.raw.as_ref().map(|s| json!({
            "leaves": s.leaves,
            "blobs": s.blobs,
            "from_messages": s.from_messages,
            "conflicts": s.conflicts,
            "missing_blobs": s.missing_blobs,
        })),
        "log": {
            "applied": r.log.applied,
            "first": r.log.first,
            "last": r.log.last,
            "missing": r.log.missing,
            "newer_checkpoint": r.log.newer_checkpoint,
            "unreadable_bytes": r.log.unreadable_bytes,
        },
        "keys": r.keys,
        "damage": damage,
        "complete": r.is_complete(),
    })
}
