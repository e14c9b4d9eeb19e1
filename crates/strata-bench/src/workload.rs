//! The workload spec: what every engine in a comparison is asked to do, as data. A spec is
//! serialised to JSON and handed unchanged to the worker processes and to the Go driver
//! (`compare/go`), so every engine sees the same records, the same order and the same choices;
//! it is printed with the results.
//!
//! Records come from `gen::Records` (record i's key and value are functions of the seed and i).
//! Phases run in order on one database:
//! - `load`: insert records 0..records in index order, in batches of `batch`;
//! - `reopen`: close the database and open it again;
//! - `reads`: point reads of loaded records, each value checked; `cold` drops the OS page cache
//!   of the database's files first (and the engine's cache, by reopening);
//! - `mixed`: rounds of `batch` operations, each a read, an update of a loaded record, an insert
//!   of a new record, a scan or a read-modify-write, in the stated percentages; a round's writes
//!   go in one batch, committed once at the end of the round (durably when `sync`);
//! - `scans`: range scans of `len` records starting at a chosen loaded key;
//! - `deletes`: delete `ops` distinct loaded records, in batches of `batch`.
//!
//! With `flush`, every phase that writes (load, mixed, deletes) ends with the engine's own
//! durable flush of whatever it buffers (`Store::flush`: a checkpoint, memtables written out),
//! timed and counted as part of the phase. With `read_group`, point reads go in groups of that
//! many under one read view on engines whose reads need one (`Store::begin_reads`).
//!
//! Choices of record come from a seeded stream per phase, so a phase does the same operations
//! whatever ran before it.

use serde::{Deserialize, Serialize};

use crate::gen::Order;

/// How a phase picks loaded records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dist {
    Uniform,
    /// YCSB's zipfian (θ = 0.99), popular records scattered over the key space.
    Zipfian,
    /// YCSB's "latest": zipfian over recency, the newest records most popular.
    Latest,
}

/// Percentages of each operation in a mixed round; they sum to 100.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Mix {
    #[serde(default)]
    pub read: u32,
    #[serde(default)]
    pub update: u32,
    #[serde(default)]
    pub insert: u32,
    #[serde(default)]
    pub scan: u32,
    #[serde(default)]
    pub read_modify_write: u32,
}

impl Mix {
    pub fn total(&self) -> u32 {
        self.read + self.update + self.insert + self.scan + self.read_modify_write
    }

    /// Operations that write.
    pub fn write_percent(&self) -> u32 {
        self.update + self.insert + self.read_modify_write
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Phase {
    Load,
    Reopen,
    Reads {
        ops: u64,
        dist: Dist,
        #[serde(default)]
        cold: bool,
    },
    Mixed {
        ops: u64,
        mix: Mix,
        dist: Dist,
        /// Records per scan, for the scan share.
        #[serde(default = "default_scan_len")]
        scan_len: u64,
    },
    Scans {
        ops: u64,
        len: u64,
        dist: Dist,
    },
    Deletes {
        ops: u64,
    },
}

fn default_scan_len() -> u64 {
    100
}

impl Phase {
    /// The phase's name in tables: "load", "reads", "reads-cold", "mixed", ...
    pub fn label(&self) -> String {
        match self {
            Phase::Load => "load".into(),
            Phase::Reopen => "reopen".into(),
            Phase::Reads { cold: false, .. } => "reads".into(),
            Phase::Reads { cold: true, .. } => "reads-cold".into(),
            Phase::Mixed { .. } => "mixed".into(),
            Phase::Scans { .. } => "scans".into(),
            Phase::Deletes { .. } => "deletes".into(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Spec {
    pub name: String,
    pub records: u64,
    pub key_size: usize,
    pub value_size: usize,
    pub order: Order,
    /// Operations per write batch (load, deletes) and per mixed round.
    pub batch: u64,
    /// Every batch commit is durable (synced) before the next starts.
    pub sync: bool,
    /// The cache budget each engine is configured with, in bytes.
    pub cache_bytes: u64,
    pub seed: u64,
    pub phases: Vec<Phase>,
    /// Each writing phase ends with the engine's durable flush, timed and counted with it.
    #[serde(default)]
    pub flush: bool,
    /// Point reads per read view (a read transaction) on engines whose reads need one; a
    /// mixed round's reads share one view, ended before the round commits. 0: one per read.
    #[serde(default)]
    pub read_group: u64,
}

impl Spec {
    /// Seed 004's Table 4.1: 1M random 16-byte keys, 100-byte values, durable batches of 1,000;
    /// write, read and a 50/50 mixed workload, then reads with a cold cache. The load and the
    /// mixed phase end with each engine's durable flush; reads go in groups of 1,000 per read
    /// view; the cold phase makes 100,000 reads whatever the record count (uniform picks, so a
    /// small load has keys read more than once).
    pub fn rum(records: u64) -> Spec {
        let reads = records.min(1_000_000);
        Spec {
            name: "rum".into(),
            records,
            key_size: 16,
            value_size: 100,
            order: Order::Random,
            batch: 1000,
            sync: true,
            cache_bytes: 256 << 20,
            seed: 1,
            phases: vec![
                Phase::Load,
                Phase::Reads {
                    ops: reads,
                    dist: Dist::Uniform,
                    cold: false,
                },
                Phase::Mixed {
                    ops: reads.min(200_000),
                    mix: Mix {
                        read: 50,
                        update: 50,
                        ..Mix::default()
                    },
                    dist: Dist::Uniform,
                    scan_len: default_scan_len(),
                },
                Phase::Reads {
                    ops: 100_000,
                    dist: Dist::Uniform,
                    cold: true,
                },
            ],
            flush: true,
            read_group: 1000,
        }
    }

    /// A YCSB core workload (A to F) after a load of `records`, with `ops` operations, in
    /// rounds of 100 operations with a durable commit each.
    pub fn ycsb(letter: char, records: u64, ops: u64) -> Option<Spec> {
        let (mix, dist) = match letter.to_ascii_uppercase() {
            'A' => (
                Mix {
                    read: 50,
                    update: 50,
                    ..Mix::default()
                },
                Dist::Zipfian,
            ),
            'B' => (
                Mix {
                    read: 95,
                    update: 5,
                    ..Mix::default()
                },
                Dist::Zipfian,
            ),
            'C' => (
                Mix {
                    read: 100,
                    ..Mix::default()
                },
                Dist::Zipfian,
            ),
            'D' => (
                Mix {
                    read: 95,
                    insert: 5,
                    ..Mix::default()
                },
                Dist::Latest,
            ),
            'E' => (
                Mix {
                    scan: 95,
                    insert: 5,
                    ..Mix::default()
                },
                Dist::Zipfian,
            ),
            'F' => (
                Mix {
                    read: 50,
                    read_modify_write: 50,
                    ..Mix::default()
                },
                Dist::Zipfian,
            ),
            _ => return None,
        };
        Some(Spec {
            name: format!("ycsb-{}", letter.to_ascii_lowercase()),
            records,
            key_size: 16,
            value_size: 100,
            order: Order::Random,
            batch: 100,
            sync: true,
            cache_bytes: 256 << 20,
            seed: 1,
            phases: vec![
                Phase::Load,
                Phase::Mixed {
                    ops,
                    mix,
                    dist,
                    scan_len: 50,
                },
            ],
            flush: true,
            read_group: 1000,
        })
    }

    /// A small spec with every kind of phase, for tests of engines and drivers: `records`
    /// loaded in batches of 100, warm reads, a mix of every operation, a reopen, cold reads,
    /// scans, deletes of a third, and reads of what is left.
    pub fn every_phase(records: u64) -> Spec {
        Spec {
            name: "every-phase".into(),
            batch: 100,
            cache_bytes: 4 << 20,
            phases: vec![
                Phase::Load,
                Phase::Reads {
                    ops: records * 2 / 3,
                    dist: Dist::Uniform,
                    cold: false,
                },
                Phase::Mixed {
                    ops: records * 2 / 3,
                    mix: Mix {
                        read: 40,
                        update: 20,
                        insert: 10,
                        scan: 10,
                        read_modify_write: 20,
                    },
                    dist: Dist::Zipfian,
                    scan_len: 20,
                },
                Phase::Reopen,
                Phase::Reads {
                    ops: records / 6,
                    dist: Dist::Latest,
                    cold: true,
                },
                Phase::Scans {
                    ops: records / 30,
                    len: 50,
                    dist: Dist::Uniform,
                },
                Phase::Deletes { ops: records / 3 },
                Phase::Reads {
                    ops: records / 3,
                    dist: Dist::Uniform,
                    cold: false,
                },
            ],
            ..Spec::rum(records)
        }
    }

    /// Refuse specs that cannot run: no records, empty batches, mixes that do not sum to 100,
    /// key sizes that cannot hold distinct keys.
    pub fn validate(&self) -> Result<(), String> {
        if self.batch == 0 {
            return Err("the batch size must be at least 1".into());
        }
        crate::gen::Records::new(
            self.order,
            self.key_size,
            self.value_size,
            self.seed,
            self.records.saturating_mul(2),
        )?;
        let needs_records = self.phases.iter().any(|p| {
            matches!(
                p,
                Phase::Reads { .. } | Phase::Mixed { .. } | Phase::Scans { .. }
            )
        });
        if needs_records && self.records == 0 {
            return Err("reads, scans and mixed phases need at least one record".into());
        }
        for p in &self.phases {
            match p {
                Phase::Mixed { mix, .. } if mix.total() != 100 => {
                    return Err(format!(
                        "the mixed phase's percentages sum to {}, not 100",
                        mix.total()
                    ))
                }
                Phase::Deletes { ops } if *ops > self.records => {
                    return Err(format!("cannot delete {ops} of {} records", self.records))
                }
                _ => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_valid_and_round_trip_through_json() {
        let mut specs = vec![Spec::rum(1_000_000)];
        specs.extend("abcdef".chars().map(|c| Spec::ycsb(c, 1000, 1000).unwrap()));
        for s in specs {
            s.validate().unwrap();
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(serde_json::from_str::<Spec>(&json).unwrap(), s);
        }
        assert!(Spec::ycsb('g', 1, 1).is_none());
    }

    #[test]
    fn bad_specs_are_refused() {
        let mut s = Spec::rum(100);
        s.batch = 0;
        assert!(s.validate().unwrap_err().contains("batch"));
        let mut s = Spec::rum(100);
        s.phases.push(Phase::Mixed {
            ops: 10,
            mix: Mix {
                read: 60,
                update: 30,
                ..Mix::default()
            },
            dist: Dist::Uniform,
            scan_len: 10,
        });
        assert!(s.validate().unwrap_err().contains("sum to 90"));
        let mut s = Spec::rum(0);
        assert!(s.validate().unwrap_err().contains("at least one record"));
        s.records = 10;
        s.key_size = 4;
        assert!(s.validate().unwrap_err().contains("8 bytes"));
    }
}
