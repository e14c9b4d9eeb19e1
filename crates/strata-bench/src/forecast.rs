//! Predicted against measured, for strata's engines in the comparison (`rum`): per phase, the
//! data file's reads and writes per operation and their bytes as the engine counted them,
//! beside what its cost model (`strata::tune::price`, at the geometry the engine ran
//! with) predicts, and both priced with the device profile's affine model (s per IO plus t per
//! byte), so one ratio says how far the model is off.
//!
//! What the model prices, phase by phase: the load, an insert averaged over the load's sizes
//! (`predict::load_average`; the LSM-tree's merges played out over the load); the warm
//! reads, a point query with the cache in its steady state; the mixed phase, half point
//! queries and half updates (an update costs an insert); the cold reads, a point query with
//! the cache warm, which the phase, starting from an empty cache, is not: the model does not
//! claim to hold there, and the row says so. Writes are the data file's only (the log's are
//! the same for every engine and not the model's subject); the phases' flushes count.
//!
//! Invariants: a row only for an engine that counts its IO and has a shape; ratios compare
//! the affine prices of the two sides, never a count with a time.

use serde::{Deserialize, Serialize};
use strata::model::Affine;
use strata::tune::{price, AdviseWorkload};
use strata::DeviceProfile;

use crate::rum::Row;
use crate::store::{Config, EngineIo, Subject};
use crate::workload::Spec;

/// Where the model claims to hold, it should be within this of the measured IO time.
pub const CLAIM: f64 = 0.15;

/// IO time per operation below which a side counts as doing no IO, µs.
const NOTHING_US: f64 = 0.01;

/// IO per operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PerOp {
    pub reads: f64,
    pub read_bytes: f64,
    pub writes: f64,
    pub write_bytes: f64,
    /// The IO priced with the profile's affine model, µs.
    pub io_us: f64,
}

impl PerOp {
    fn priced(reads: f64, read_bytes: f64, writes: f64, write_bytes: f64, m: &Affine) -> PerOp {
        PerOp {
            reads,
            read_bytes,
            writes,
            write_bytes,
            io_us: ((reads + writes) * m.setup_s + (read_bytes + write_bytes) * m.per_byte_s) * 1e6,
        }
    }

    fn measured(io: &EngineIo, ops: u64, m: &Affine) -> PerOp {
        let n = ops.max(1) as f64;
        PerOp::priced(
            io.reads as f64 / n,
            io.read_bytes as f64 / n,
            io.writes as f64 / n,
            io.write_bytes as f64 / n,
            m,
        )
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ForecastRow {
    pub engine: String,
    pub phase: String,
    pub predicted: PerOp,
    pub measured: PerOp,
    /// predicted / measured IO time.
    pub ratio: f64,
    /// Why the model does not claim to hold here; None where it does.
    pub unclaimed: Option<String>,
}

impl ForecastRow {
    /// Within `CLAIM` where the model claims to hold.
    pub fn holds(&self) -> bool {
        (self.ratio - 1.0).abs() <= CLAIM
    }
}

/// The rows for every engine of `rows` that `subjects` can shape and that counted its IO,
/// run under `spec` with the device `profile` their processes read (None: none saved). Priced
/// with that profile where its affine fit holds, else with the built-in one, as the engines'
/// geometry was chosen.
pub fn forecast(
    rows: &[Row],
    subjects: &[Box<dyn Subject>],
    spec: &Spec,
    profile: Option<&DeviceProfile>,
) -> Vec<ForecastRow> {
    let builtin = DeviceProfile::builtin();
    let pricing = profile
        .filter(|p| p.affine_holds().is_ok())
        .unwrap_or(&builtin);
    let m = pricing.affine_model();
    let cfg = Config {
        cache_bytes: spec.cache_bytes,
        sync: spec.sync,
        expected_records: spec.records,
    };
    let mut w = AdviseWorkload::new(spec.records, 0.5, spec.cache_bytes);
    w.key_bytes = spec.key_size as u64;
    w.value_bytes = spec.value_size as u64;
    let mut out = Vec::new();
    for row in rows {
        let Some(shape) = subjects
            .iter()
            .find(|s| s.name() == row.engine)
            .and_then(|s| s.shape(&cfg, profile))
        else {
            continue;
        };
        let c = price(pricing, shape, &w);
        for p in &row.phase_io {
            let (i, q) = (&c.insert, &c.point);
            let (predicted, unclaimed) = match p.phase.as_str() {
                "load" => {
                    let l = &c.load;
                    let load = PerOp::priced(l.reads, l.read_bytes, l.writes, l.write_bytes, &m);
                    (load, None)
                }
                "reads" => (PerOp::priced(q.reads, q.read_bytes, 0.0, 0.0, &m), None),
                "mixed" => (
                    PerOp::priced(
                        (q.reads + i.reads) / 2.0,
                        (q.read_bytes + i.read_bytes) / 2.0,
                        i.writes / 2.0,
                        i.write_bytes / 2.0,
                        &m,
                    ),
                    None,
                ),
                "reads-cold" => (
                    PerOp::priced(q.reads, q.read_bytes, 0.0, 0.0, &m),
                    Some(
                        "the model prices a warm cache; this phase starts from an empty one"
                            .to_string(),
                    ),
                ),
                _ => continue,
            };
            let measured = PerOp::measured(&p.io, p.ops, &m);
            // Both sides under a hundredth of a µs: no IO either way, which agrees.
            let ratio = if predicted.io_us.max(measured.io_us) < NOTHING_US {
                1.0
            } else {
                predicted.io_us / measured.io_us.max(1e-9)
            };
            out.push(ForecastRow {
                engine: row.engine.clone(),
                phase: p.phase.clone(),
                predicted,
                measured,
                ratio,
                unclaimed,
            });
        }
    }
    out
}

/// The rows as a markdown table.
pub fn markdown(rows: &[ForecastRow]) -> String {
    let mut md = String::from(
        "| engine | phase | reads/op predicted / measured | KB read/op | writes/op | KB written/op \
         | IO µs/op | predicted / measured | |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    let kb = |b: f64| b / 1e3;
    for r in rows {
        let (p, m) = (&r.predicted, &r.measured);
        let verdict = match &r.unclaimed {
            Some(why) => format!("not claimed: {why}"),
            None if r.holds() => format!("within {:.0}%", CLAIM * 100.0),
            None => format!("off by more than {:.0}%", CLAIM * 100.0),
        };
        md.push_str(&format!(
            "| {} | {} | {:.3} / {:.3} | {:.2} / {:.2} | {:.4} / {:.4} | {:.2} / {:.2} | {:.1} / \
             {:.1} | {:.2} | {} |\n",
            r.engine,
            r.phase,
            p.reads,
            m.reads,
            kb(p.read_bytes),
            kb(m.read_bytes),
            p.writes,
            m.writes,
            kb(p.write_bytes),
            kb(m.write_bytes),
            p.io_us,
            m.io_us,
            r.ratio,
            verdict
        ));
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rum::PhaseIo;
    use crate::store::strata_engines;

    #[test]
    fn each_strata_phase_sets_the_model_beside_the_engine_count() {
        let profile = DeviceProfile::builtin();
        let spec = Spec {
            cache_bytes: 16 << 20,
            ..Spec::rum(1_000_000)
        };
        let io = EngineIo {
            reads: 1_000,
            read_bytes: 4_096_000,
            writes: 10,
            write_bytes: 1_000_000,
        };
        let phase = |name: &str| PhaseIo {
            phase: name.into(),
            ops: 1_000,
            io,
        };
        let rows: Vec<Row> = ["strata-betree", "strata-btree", "strata-lsm", "fjall"]
            .iter()
            .map(|e| Row {
                engine: e.to_string(),
                phase_io: ["load", "reopen", "reads", "mixed", "reads-cold"]
                    .iter()
                    .map(|p| phase(p))
                    .collect(),
                ..Row::default()
            })
            .collect();
        let f = forecast(&rows, &strata_engines(), &spec, Some(&profile));
        // Four priced phases (not the reopen) for each of strata's engines; none for a peer.
        assert_eq!(f.len(), 12);
        assert!(f.iter().all(|r| r.engine != "fjall" && r.phase != "reopen"));
        let m = profile.affine_model();
        for r in &f {
            // The measured side is the engine's count per operation, priced by the profile.
            assert_eq!(r.measured.reads, 1.0);
            assert_eq!(r.measured.write_bytes, 1_000.0);
            let want = (1.01 * m.setup_s + 5_096.0 * m.per_byte_s) * 1e6;
            assert!((r.measured.io_us / want - 1.0).abs() < 1e-9);
            assert!((r.ratio - r.predicted.io_us / r.measured.io_us).abs() < 1e-9);
            // Reads write nothing; the cold phase is never claimed.
            if r.phase.starts_with("reads") {
                assert_eq!(r.predicted.write_bytes, 0.0);
            }
            assert_eq!(r.unclaimed.is_some(), r.phase == "reads-cold", "{r:?}");
        }
        // The Bε-tree's load writes what its load account says, beyond the cache.
        let be = f
            .iter()
            .find(|r| r.engine == "strata-betree" && r.phase == "load")
            .unwrap();
        assert!(be.predicted.write_bytes > 100.0, "{be:?}");
        assert!(be.unclaimed.is_none());
        // No IO predicted or measured agrees.
        let mut idle = rows[0].clone();
        idle.phase_io = vec![PhaseIo {
            phase: "reads".into(),
            ops: 1_000,
            io: EngineIo::default(),
        }];
        let spec_fits = Spec {
            cache_bytes: 1 << 30,
            ..Spec::rum(10_000)
        };
        let f0 = forecast(&[idle], &strata_engines(), &spec_fits, Some(&profile));
        assert_eq!(f0.len(), 1);
        assert!(f0[0].holds(), "{:?}", f0[0]);
        let md = markdown(&f);
        assert_eq!(md.lines().count(), 2 + f.len());
        assert!(md.contains("not claimed: the model prices a warm cache"));
    }
}
