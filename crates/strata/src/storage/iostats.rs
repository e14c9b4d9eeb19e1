//! Per-device IO counters: every read, write and sync that reaches a device is charged here.
//!
//! Counters are atomics so that concurrent readers and the committing writer can charge without
//! a lock. `snapshot()` copies them into plain numbers; subtracting two snapshots measures one
//! phase alone. Besides counts and bytes, each IO is priced in the DAM model (blocks of
//! `dam_block` bytes) and in the affine model the stats were created with.

use std::cell::Cell;
use std::ops::Sub;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::model::Affine;

thread_local! {
    /// Reads this thread has charged, to any `IoStats`.
    static THREAD_READS: Cell<u64> = const { Cell::new(0) };
}

/// Reads the calling thread has charged so far, to any device's stats: the difference over
/// one call is what that call read, whatever other threads (readers beside it, an engine's
/// background work) read meanwhile.
pub fn thread_reads() -> u64 {
    THREAD_READS.with(Cell::get)
}

/// Power-of-two size classes: class i holds IOs of 2^i ..= 2^(i+1)-1 bytes (class 0 also holds 0).
pub const SIZE_CLASSES: usize = 40;

#[derive(Debug)]
pub struct IoStats {
    model: Affine,
    dam_block: u64,
    reads: AtomicU64,
    writes: AtomicU64,
    syncs: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    dam_ios: AtomicU64,
    affine_ns: AtomicU64,
    read_hist: [AtomicU64; SIZE_CLASSES],
    write_hist: [AtomicU64; SIZE_CLASSES],
}

/// A copy of the counters at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IoSnapshot {
    pub reads: u64,
    pub writes: u64,
    pub syncs: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// IOs counted in the DAM model: each IO costs ceil(bytes / B) block transfers.
    pub dam_ios: u64,
    /// Sum of s + t·bytes over every read and write, in nanoseconds.
    pub affine_ns: u64,
    pub read_hist: Vec<u64>,
    pub write_hist: Vec<u64>,
}

fn size_class(bytes: u64) -> usize {
    if bytes == 0 {
        0
    } else {
        (63 - bytes.leading_zeros() as usize).min(SIZE_CLASSES - 1)
    }
}

impl IoStats {
    pub fn new(model: Affine, dam_block: u64) -> IoStats {
        IoStats {
            model,
            dam_block: dam_block.max(1),
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            bytes_read: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
            dam_ios: AtomicU64::new(0),
            affine_ns: AtomicU64::new(0),
            read_hist: std::array::from_fn(|_| AtomicU64::new(0)),
            write_hist: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    pub fn model(&self) -> Affine {
        self.model
    }

    fn charge(&self, bytes: u64) {
        self.dam_ios
            .fetch_add(bytes.div_ceil(self.dam_block).max(1), Relaxed);
        self.affine_ns
            .fetch_add((self.model.cost(bytes) * 1e9).round() as u64, Relaxed);
    }

    pub fn record_read(&self, bytes: u64) {
        THREAD_READS.with(|n| n.set(n.get() + 1));
        self.reads.fetch_add(1, Relaxed);
        self.bytes_read.fetch_add(bytes, Relaxed);
        self.read_hist[size_class(bytes)].fetch_add(1, Relaxed);
        self.charge(bytes);
    }

    pub fn record_write(&self, bytes: u64) {
        self.writes.fetch_add(1, Relaxed);
        self.bytes_written.fetch_add(bytes, Relaxed);
        self.write_hist[size_class(bytes)].fetch_add(1, Relaxed);
        self.charge(bytes);
    }

    pub fn record_sync(&self) {
        self.syncs.fetch_add(1, Relaxed);
    }

    pub fn reads(&self) -> u64 {
        self.reads.load(Relaxed)
    }

    pub fn snapshot(&self) -> IoSnapshot {
        IoSnapshot {
            reads: self.reads.load(Relaxed),
            writes: self.writes.load(Relaxed),
            syncs: self.syncs.load(Relaxed),
            bytes_read: self.bytes_read.load(Relaxed),
            bytes_written: self.bytes_written.load(Relaxed),
            dam_ios: self.dam_ios.load(Relaxed),
            affine_ns: self.affine_ns.load(Relaxed),
            read_hist: self.read_hist.iter().map(|c| c.load(Relaxed)).collect(),
            write_hist: self.write_hist.iter().map(|c| c.load(Relaxed)).collect(),
        }
    }
}

impl IoSnapshot {
    /// Counters summed across devices (the data file and the log, say).
    pub fn plus(&self, other: &IoSnapshot) -> IoSnapshot {
        let add = |a: &[u64], b: &[u64]| -> Vec<u64> {
            (0..a.len().max(b.len()))
                .map(|i| a.get(i).copied().unwrap_or(0) + b.get(i).copied().unwrap_or(0))
                .collect()
        };
        IoSnapshot {
            reads: self.reads + other.reads,
            writes: self.writes + other.writes,
            syncs: self.syncs + other.syncs,
            bytes_read: self.bytes_read + other.bytes_read,
            bytes_written: self.bytes_written + other.bytes_written,
            dam_ios: self.dam_ios + other.dam_ios,
            affine_ns: self.affine_ns + other.affine_ns,
            read_hist: add(&self.read_hist, &other.read_hist),
            write_hist: add(&self.write_hist, &other.write_hist),
        }
    }

    /// (lower bound of the size class in bytes, count) for every non-empty class.
    pub fn histogram(hist: &[u64]) -> Vec<(u64, u64)> {
        hist.iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(i, &n)| (if i == 0 { 0 } else { 1u64 << i }, n))
            .collect()
    }
}

impl Sub for &IoSnapshot {
    type Output = IoSnapshot;

    /// The IO done between two snapshots of the same counters (`later - earlier`).
    fn sub(self, earlier: &IoSnapshot) -> IoSnapshot {
        let diff = |a: &[u64], b: &[u64]| -> Vec<u64> {
            a.iter().zip(b).map(|(x, y)| x.saturating_sub(*y)).collect()
        };
        IoSnapshot {
            reads: self.reads.saturating_sub(earlier.reads),
            writes: self.writes.saturating_sub(earlier.writes),
            syncs: self.syncs.saturating_sub(earlier.syncs),
            bytes_read: self.bytes_read.saturating_sub(earlier.bytes_read),
            bytes_written: self.bytes_written.saturating_sub(earlier.bytes_written),
            dam_ios: self.dam_ios.saturating_sub(earlier.dam_ios),
            affine_ns: self.affine_ns.saturating_sub(earlier.affine_ns),
            read_hist: diff(&self.read_hist, &earlier.read_hist),
            write_hist: diff(&self.write_hist, &earlier.write_hist),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread's read count holds its own reads only, across stats, however many another
    /// thread charges to the same stats meanwhile.
    #[test]
    fn a_threads_reads_are_its_own() {
        let (a, b) = (
            IoStats::new(Affine::default_ssd(), 4096),
            IoStats::new(Affine::default_ssd(), 4096),
        );
        let before = thread_reads();
        std::thread::scope(|s| {
            s.spawn(|| {
                let mine = thread_reads();
                for _ in 0..1000 {
                    a.record_read(10);
                }
                assert_eq!(thread_reads() - mine, 1000);
            });
            a.record_read(10);
            b.record_read(10);
            a.record_write(10);
        });
        assert_eq!(thread_reads() - before, 2);
        assert_eq!(a.reads(), 1001);
    }

    #[test]
    fn counts_bytes_classes_and_costs() {
        let s = IoStats::new(Affine::new(100e-6, 1e-9), 4096);
        s.record_read(4096);
        let before = s.snapshot();
        s.record_read(65536);
        s.record_write(5000);
        s.record_sync();
        let d = &s.snapshot() - &before;
        assert_eq!((d.reads, d.writes, d.syncs), (1, 1, 1));
        assert_eq!((d.bytes_read, d.bytes_written), (65536, 5000));
        assert_eq!(d.dam_ios, 16 + 2);
        // 2 × 100 µs + 70536 ns of transfer
        assert_eq!(d.affine_ns, 200_000 + 65_536 + 5_000);
        assert_eq!(IoSnapshot::histogram(&d.read_hist), vec![(65536, 1)]);
        assert_eq!(IoSnapshot::histogram(&d.write_hist), vec![(4096, 1)]);
    }
}
