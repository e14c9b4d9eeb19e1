//! strata: an embeddable key-value storage engine whose data structures are tuned with cost
//! models of the real device. Start at [`Db`].
//!
//! The modules stand on floors, and a module uses only lower floors (docs/architecture.md;
//! `tests/architecture.rs` enforces it):
//!
//! ```text
//! 13 decode_fuzz (tests only)
//! 12 this file: the public API, a curated `pub use` list
//! 11 salvage
//! 10 db  versioned_db             the facades: log, sequence numbers, checkpoints
//!  9 options  wal  metrics
//!  8 tune                          pairs models with engines
//!  7 profile                       measures devices, fits models
//!  6 engines/{btree, betree, lsm,  never import each other
//!            sda, cow}
//!  5 engine                        the Engine and VersionedEngine traits, the version
//!                                  tree, stats, check, salvage walk
//!  4 layout                        the node-encoding toolkit: part directories
//!  3 kv                            ops, merge, messages, merging, values and blobs, keys,
//!                                  bounds, filter
//!  2 storage                       devices, IoStats, allocator, blocks, pager, pool
//!  1 model                         pure cost models
//!  0 error  codec
//! ```

mod codec;
mod db;
#[cfg(test)]
mod decode_fuzz;
mod engine;
mod engines;
mod error;
mod kv;
mod layout;
mod metrics;
pub mod model;
mod options;
pub mod profile;
pub mod salvage;
pub mod storage;
pub mod tune;
mod versioned_db;
mod wal;

pub use db::{Db, RangeIter};
pub use engine::dump::{Dump, DumpChild, DumpNode, DumpRun};
pub use engine::versioned::{DiffEntry, VersionedEngine, VersionedMap, VersionedReads};
pub use engine::versions::{Version, VersionInfo, VersionTree, ROOT as ROOT_VERSION};
pub use engine::{CheckReport, Engine, EngineStats, SharedReads};
pub use engines::betree::{BeTree, Geometry, Origin};
pub use engines::btree::BTree;
pub use engines::cow::{Config as CowConfig, CowTree};
pub use engines::lsm::{Config as LsmConfig, Lsm, Policy as LsmPolicy};
pub use engines::sda::{Config as SdaConfig, Sda};
pub use error::{Error, Result};
pub use kv::{AddU64, Append, MergeOperator, Op, WriteBatch, MAX_KEY_LEN, MAX_VALUE_LEN};
pub use metrics::Metrics;
pub use options::{Durability, EngineOptions, Options, LARGE_BASEMENTS_BETREE};
pub use profile::DeviceProfile;
pub use storage::{CacheStats, IoSnapshot};
pub use tune::{recommend, Recommendation, Workload};
pub use versioned_db::{VersionedDb, VersionedEngineOptions, VersionedOptions, VersionedRange};
