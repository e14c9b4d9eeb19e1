//! The logical vocabulary every engine shares: operations and their limits, merge operators,
//! values and blobs, messages and their segments, merging sorted message streams, sorted keys
//! with their heads and separators, key bounds and paged-scan cursors, and the Bloom filter.
//! Nothing here knows an engine's node format; what two engines need moves here when it gets
//! its second user.
//!
//! Floor: above `storage` (blobs are blocks of the pager), below `layout`, `engine` and the
//! engines.

pub mod bounds;
pub mod entries;
pub mod filter;
pub mod keys;
pub mod merge;
pub mod merging;
pub mod msg;
pub mod ops;
pub mod value;

pub use bounds::{above_lo, below_hi, next_cursor, within, Paged};
pub use filter::Filter;
pub use keys::{head, shortest_separator, Keys};
pub use merge::{merge_operator, require_merge, AddU64, Append, MergeOperator};
pub(crate) use ops::MAX_BATCH_BYTES;
pub use ops::{Op, WriteBatch, MAX_KEY_LEN, MAX_VALUE_LEN};
pub use value::{free_blob, read_value, write_blob, Val};
