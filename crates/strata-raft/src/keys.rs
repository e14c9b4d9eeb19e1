//! The key layout of the one strata `Db` that holds a Raft node's whole state.
//!
//! Every key starts with a one-byte tag naming its range, so each range is a contiguous span
//! that one `delete_range` can clear:
//!
//! - `L` + index (u64, big-endian): a log entry. Big-endian so key order is index order and the
//!   last entry is the last key of the range.
//! - `M` + name: the log store's marks (vote, committed, last purged log id).
//! - `S` + `a`: the state machine's last applied log id and membership, in that order (the
//!   log store reads the log id alone, as a prefix of the value).
//! - `D` + user key: the state machine's key-value map.
//! - `P` + `m`: the current snapshot's meta; `P` + `c` + chunk number (u32, big-endian): its
//!   data, cut into chunks below strata's value limit.
//!
//! Invariant: no range's exclusive end (`tag + 1`, a one-byte key) is a key of another range,
//! since every stored key is at least two bytes long.

pub const LOG: u8 = b'L';
pub const MARK: u8 = b'M';
pub const SM_META: u8 = b'S';
pub const DATA: u8 = b'D';
pub const SNAPSHOT: u8 = b'P';

pub const VOTE: &[u8] = b"Mv";
pub const COMMITTED: &[u8] = b"Mc";
pub const PURGED: &[u8] = b"Mp";
pub const APPLIED: &[u8] = b"Sa";
pub const SNAPSHOT_META: &[u8] = b"Pm";
pub const SNAPSHOT_CHUNKS: &[u8] = b"Pc";
pub const SNAPSHOT_CHUNKS_END: &[u8] = b"Pd";

pub fn log(index: u64) -> [u8; 9] {
    let mut k = [LOG; 9];
    k[1..].copy_from_slice(&index.to_be_bytes());
    k
}

/// The exclusive end of the log range.
pub fn log_end() -> [u8; 1] {
    [LOG + 1]
}

/// The exclusive end of the log entries with index at most `index`.
pub fn log_through(index: u64) -> Vec<u8> {
    match index.checked_add(1) {
        Some(next) => log(next).to_vec(),
        None => log_end().to_vec(),
    }
}

pub fn log_index(key: &[u8]) -> Option<u64> {
    match key {
        [LOG, rest @ ..] => Some(u64::from_be_bytes(rest.try_into().ok()?)),
        _ => None,
    }
}

pub fn data(user_key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + user_key.len());
    k.push(DATA);
    k.extend_from_slice(user_key);
    k
}

pub fn data_start() -> [u8; 1] {
    [DATA]
}

pub fn data_end() -> [u8; 1] {
    [DATA + 1]
}

pub fn snapshot_chunk(n: u32) -> Vec<u8> {
    let mut k = SNAPSHOT_CHUNKS.to_vec();
    k.extend_from_slice(&n.to_be_bytes());
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_keys_sort_by_index_and_stay_inside_the_range() {
        let idx = [0u64, 1, 255, 256, 1 << 40, u64::MAX];
        for w in idx.windows(2) {
            assert!(log(w[0]) < log(w[1]));
        }
        for i in idx {
            assert_eq!(log_index(&log(i)), Some(i));
            assert!(log(i).as_slice() < log_end().as_slice());
            assert!(log(i).as_slice() < log_through(i).as_slice());
        }
        assert_eq!(log_through(u64::MAX), log_end().to_vec());
        // Marks sit after the log's end: a truncate to the end never touches them.
        assert!(log_end().as_slice() <= VOTE && log_end().as_slice() <= PURGED);
        assert!(data(b"").as_slice() >= data_start().as_slice());
        assert!(data(&[0xff; 8]).as_slice() < data_end().as_slice());
        assert!(snapshot_chunk(u32::MAX).as_slice() < SNAPSHOT_CHUNKS_END);
    }
}
