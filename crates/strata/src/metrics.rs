//! What a `Db` reports about itself: the three amplifications, IO by device, cache and tree shape.
//!
//! - WA = bytes written to the data file and the log / logical bytes written (keys and values
//!   of puts, keys of deletes), since the database was opened.
//! - SA = bytes the data file and the log occupy / live logical bytes (keys + values).
//! - RA = device reads per point query, since open.
//!
//! All three come from the engine's own counters; they can be cross-checked against the file
//! sizes and /proc/self/io.

use crate::engine::EngineStats;
use crate::storage::IoSnapshot;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Metrics {
    pub engine: EngineStats,
    pub data_io: IoSnapshot,
    pub wal_io: IoSnapshot,
    /// The log sequence number of the newest write batch (see `EngineStats::checkpoint_wal_seq`).
    pub write_seq: u64,
    pub batches: u64,
    pub ops_written: u64,
    pub logical_bytes_written: u64,
    pub point_queries: u64,
    /// Device reads the point queries made, each counted on the reading thread: other
    /// readers' and background work's reads meanwhile are not in it.
    pub point_query_reads: u64,
    pub data_file_bytes: u64,
    pub wal_file_bytes: u64,
    pub write_amplification: f64,
    pub space_amplification: f64,
    pub read_amplification: f64,
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

impl Metrics {
    pub(crate) fn finish(mut self) -> Metrics {
        let written = self.data_io.bytes_written + self.wal_io.bytes_written;
        self.write_amplification = ratio(written, self.logical_bytes_written);
        self.space_amplification = ratio(
            self.data_file_bytes + self.wal_file_bytes,
            self.engine.live_bytes,
        );
        self.read_amplification = ratio(self.point_query_reads, self.point_queries);
        self
    }

    /// IO on both devices together.
    pub fn total_io(&self) -> IoSnapshot {
        self.data_io.plus(&self.wal_io)
    }
}
