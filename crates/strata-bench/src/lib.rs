//! strata's experiment drivers. Each experiment runs on simulated devices where IO counts are
//! exact and returns a report that the CLI prints as a table or JSON.

pub mod seed001;
