//! The peers strata is compared with, each behind `strata_bench::store::Engine`: kept out of the
//! core crates so that `strata` never compiles them.

use strata_bench::store::Engine;

/// The peer engines compiled into this build.
pub fn peers() -> Vec<Box<dyn Engine>> {
    Vec::new()
}
