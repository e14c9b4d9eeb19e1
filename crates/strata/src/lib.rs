//! strata: an embeddable key-value storage engine whose data structures are tuned with cost
//! models of the real device. Start at [`Db`].

mod codec;
mod db;
#[cfg(test)]
mod decode_fuzz;
mod engine;
mod engines;
mod error;
mod kv;
mod metrics;
pub mod model;
mod options;
pub mod profile;
pub mod salvage;
pub mod storage;
pub mod tune;
mod wal;

pub use db::{Db, RangeIter};
pub use engine::{CheckReport, Engine, EngineStats};
pub use engines::betree::{BeTree, Geometry, Origin};
pub use engines::btree::BTree;
pub use error::{Error, Result};
pub use kv::{AddU64, Append, MergeOperator, Op, WriteBatch, MAX_KEY_LEN, MAX_VALUE_LEN};
pub use metrics::Metrics;
pub use options::{Durability, EngineOptions, Options, DEFAULT_BETREE};
pub use profile::DeviceProfile;
pub use storage::{CacheStats, IoSnapshot};
pub use tune::{recommend, Recommendation, Workload};
