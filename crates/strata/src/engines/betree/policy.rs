//! The run budget: when a flush into a leaf that is not in memory is spilled as a run beside
//! it, and when it drains the leaf's runs into it instead. A pure decision (no IO, no state),
//! apart from the flusher that acts on it, so it can be tested and priced on its own; the model
//! takes the same two limits as inputs (`tune/pairing.rs` pairs them).
//!
//! Why: a leaf that is not resident would be read whole and written whole for about B/F bytes
//! of messages, about F bytes written per byte flushed. A run writes those bytes once, and the
//! leaf is rewritten once for up to `RUN_BUDGET` node sizes of runs.

use crate::storage::block::PAGE;

/// Spilled runs a leaf may collect before a flush drains them into it: a point query probes
/// each run's filter, and about one probe in a hundred that misses still reads a chunk.
pub const MAX_RUNS: usize = 16;

/// Bits per key of a run's filter. A point query probes every run of its leaf, and each false
/// positive costs a chunk read (or a whole small run's) where the leaf needed one basement: at
/// 10 bits (0.8%) the runs of a leaf holding 7 of them, the common case loading 1M keys into a
/// 32 MiB cache, let 5–6% of point queries through for nothing; at 16 bits (0.07%, the same 7
/// probes, so old runs read the same way) 0.5%, for 6 more bytes of head per 8 keys.
pub const RUN_FILTER_BITS: usize = 16;

/// A leaf's runs may hold up to this many node sizes before a flush drains them. A drain
/// rewrites the leaf, so the leaf level writes about 1 + (leaf bytes / this) bytes per byte
/// flushed into it. Loading 10M to 20M keys, 2 node sizes (with 16 runs) wrote about 15% less
/// in all than 1 (with 8), and 4 (with 32) about 8% less again, at the price of more data in
/// runs for scans to merge (docs/performance.md, "Step 3").
pub const RUN_BUDGET: f64 = 2.0;

/// Whether a flush of `incoming` bytes into a leaf that is not in memory, which already has
/// `runs` runs of `run_bytes` bytes in all, may be spilled as one more run (else the flush
/// drains the runs and the incoming messages into the leaf).
///
/// A run is a block of its own: written now and read again at the drain, it pays only if it
/// takes fewer pages than the leaf it spares. So a leaf of one page (seed 001's 4 KiB nodes)
/// takes its flushes directly; there, runs also filled the parent's head with their entries
/// and filters, and seed 001's random inserts did 3.2x the IOs with them.
pub fn may_spill(runs: usize, run_bytes: usize, incoming: usize, node_size: usize) -> bool {
    let pages = |b: usize| b.div_ceil(PAGE as usize);
    runs < MAX_RUNS
        && (run_bytes + incoming) as f64 <= RUN_BUDGET * node_size as f64
        && pages(incoming) < pages(node_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spills_until_the_count_or_the_bytes_run_out() {
        let node = 1 << 20;
        assert!(may_spill(0, 0, 64 << 10, node));
        assert!(may_spill(MAX_RUNS - 1, 0, 1, node));
        assert!(!may_spill(MAX_RUNS, 0, 1, node), "the count is full");
        // Exactly the budget fits; one byte more drains.
        let budget = (RUN_BUDGET * node as f64) as usize;
        assert!(may_spill(3, budget - 100, 100, node));
        assert!(!may_spill(3, budget - 100, 101, node));
        // A flush larger than the whole budget always drains.
        assert!(!may_spill(0, 0, budget + 1, node));
    }

    #[test]
    fn a_run_must_take_fewer_pages_than_its_leaf() {
        let page = PAGE as usize;
        // A one-page leaf never gets runs, however small the flush.
        assert!(!may_spill(0, 0, 1, page));
        assert!(!may_spill(0, 0, 200, page));
        // Two pages: a flush within one page spills, one past it drains.
        assert!(may_spill(0, 0, page, 2 * page));
        assert!(!may_spill(0, 0, page + 1, 2 * page));
    }
}
