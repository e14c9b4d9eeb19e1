//! The peers strata is compared with, each behind `strata_bench::store::Subject`: kept out of the
//! core crates so that `strata` never compiles them.
//!
//! - `redb`: redb, a copy-on-write B-tree ("redb");
//! - `lmdb`: LMDB through heed ("lmdb");
//! - `fjall`: fjall, an LSM-tree ("fjall");
//! - `rocksdb`: RocksDB through rust-rocksdb ("rocksdb"), only with the `rocksdb` feature, which
//!   is off by default because its C++ build takes about 17 minutes and needs libclang.
//!
//! Every adapter commits each batch durably with the engine's own documented setting when the
//! workload asks for synced commits, and says in `settings` which setting that is, what cache it
//! was given and what compression it uses. `version` names the crate and the exact version in
//! Cargo.lock (read by `build.rs`).

use strata_bench::store::{strata_engines, strata_variants, Subject};

pub mod fjall;
pub mod go;
pub mod lmdb;
pub mod redb;
#[cfg(feature = "rocksdb")]
pub mod rocksdb;

/// The peer engines compiled into this build.
pub fn peers() -> Vec<Box<dyn Subject>> {
    #[allow(unused_mut)]
    let mut peers: Vec<Box<dyn Subject>> = vec![
        Box::new(redb::Redb),
        Box::new(lmdb::Lmdb),
        Box::new(fjall::Fjall),
    ];
    #[cfg(feature = "rocksdb")]
    peers.push(Box::new(rocksdb::RocksDb));
    peers
}

/// The engine called `name`: a peer compiled into this build, or one of strata's own.
pub fn engine(name: &str) -> Option<Box<dyn Subject>> {
    peers()
        .into_iter()
        .chain(strata_engines())
        .chain(strata_variants())
        .find(|e| e.name() == name)
}
