//! The Raft type configuration of the replicated key-value map: its commands and replies.
//! Node ids are `u64`, nodes carry their address (`BasicNode`), snapshots travel as bytes.
//!
//! Invariant: these types are stored (log entries, postcard) and sent (TCP frames) without a
//! version tag; changing them changes both formats, so a database or a peer written with other
//! types is not readable.

use std::io::Cursor;

use serde::{Deserialize, Serialize};

/// A command of the replicated map: what a log entry carries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    Set { key: Vec<u8>, value: Vec<u8> },
    Delete { key: Vec<u8> },
}

/// The reply to a command once applied: the log index it was applied at. Applies are blind
/// writes (no read of the old value), which is what a Bε-tree makes cheap.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    pub index: u64,
}

openraft::declare_raft_types!(
    /// The type configuration of the strata-backed key-value service.
    pub TypeConfig:
        D = Request,
        R = Response,
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type NodeId = u64;
pub type Raft = openraft::Raft<TypeConfig>;
