//! The storage substrate every engine shares: devices, IO accounting, extent allocation, the
//! pager with its translation table and checkpoints, and the buffer pool.

pub mod alloc;
pub mod block;
pub mod cache;
pub mod device;
pub mod env;
pub mod iostats;
pub mod pager;
pub mod sim;

pub use alloc::Extent;
pub use cache::{CacheStats, NodeStore, Pin, StoredNode};
pub use device::{AlignedBuf, Device, FileDevice, Metered};
pub use env::{Env, EnvLock, FileEnv, FileKind, SimEnv};
pub use iostats::{IoSnapshot, IoStats};
pub use pager::{BlockSink, BlockWrite, Checkpoint, Chunk, Commit, NodeId, Pager, Sealed};
pub use sim::{IoKind, SimDevice, SimDisk};
