//! strata's benchmark harness and experiment drivers.
//!
//! - `workload`: the spec every engine is driven through; `gen`: its deterministic records.
//! - `store`: the adapter an engine implements (strata's here, peers in `strata-compare`).
//! - `runner`: runs a spec on one engine and measures it from outside; `measure`: the readings.
//! - `rum`: seed 004's comparison as rows; `forecast`: strata's engines in it, predicted by
//!   their cost models against what they counted.
//! - Experiments: `seed001` (simulated disk, exact IO counts), `sweep` (node sizes on the real
//!   disk), `versioned` (seed 003 §8: the SDA against the CoW B-tree), `readers` (point reads
//!   from several threads at once); each returns a report that the CLI prints as a table or
//!   JSON.

pub mod chart;
pub mod forecast;
pub mod gen;
pub mod measure;
pub mod page;
pub mod readers;
pub mod rum;
pub mod runner;
pub mod seed001;
pub mod store;
pub mod sweep;
pub mod versioned;
pub mod workload;
