//! strata-raft: strata as the storage engine under openraft (0.9, storage v2).
//!
//! One strata `Db` holds a node's whole Raft state, in key ranges of its own (`keys`): the log
//! and its marks behind [`LogStore`] (`RaftLogStorage` + `RaftLogReader`), and a replicated
//! key-value map with its snapshots behind [`StateMachine`] (`RaftStateMachine` +
//! `RaftSnapshotBuilder`). [`open`] gives both over one database; [`cluster`] runs them as a
//! node of a key-value service over TCP (the `raft-kv` example and the failover test use it).
//!
//! Durability, in one place: every write goes into strata's one ordered log; what openraft must
//! find after a crash (appended entries, vote, committed and purged marks, snapshots) is
//! acknowledged only after a `Db::sync` covering it, shared by all waiters (`flusher`).
//!
//! Only strata's public API is used.

// openraft's traits fix the error type (`StorageError`, some 200 bytes); the helpers that build
// it return it as the traits do rather than boxing it only to unbox it at the trait's edge.
#![allow(clippy::result_large_err)]

pub mod cluster;
mod flusher;
pub mod keys;
mod log_store;
mod state_machine;
mod types;

use std::path::Path;
use std::sync::Arc;

pub use log_store::LogStore;
pub use state_machine::{command_fits, StateMachine, MAX_COMMAND_BYTES};
pub use types::{NodeId, Raft, Request, Response, TypeConfig};

/// Open (or create) the strata database at `path` and the Raft log store and state machine
/// over it. The options' durability is not used: each write chooses its own (see above).
pub fn open(
    path: impl AsRef<Path>,
    opts: strata::Options,
) -> strata::Result<(LogStore<TypeConfig>, StateMachine)> {
    let db = Arc::new(strata::Db::open(path, opts)?);
    over(db)
}

/// The log store and state machine over an open database, which they then share.
pub fn over(db: Arc<strata::Db>) -> strata::Result<(LogStore<TypeConfig>, StateMachine)> {
    let flusher = Arc::new(
        flusher::Flusher::start(db.clone()).map_err(|e| strata::Error::Io {
            context: "start the strata-raft flusher thread".into(),
            source: e,
        })?,
    );
    let receiving = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sm = StateMachine::open(db.clone(), flusher.clone(), receiving.clone()).map_err(|e| {
        strata::Error::Io {
            context: "read the state machine's applied mark".into(),
            source: std::io::Error::other(e.to_string()),
        }
    })?;
    Ok((LogStore::new(db, flusher, receiving), sm))
}
