//! The run budget: when a flush into a leaf that is not in memory is spilled as a run beside
//! it, when the leaf's small runs are merged into one, and when it drains the leaf's runs into
//! it instead. A pure decision (no IO, no state), apart from the flusher that acts on it, so it
//! can be tested and priced on its own; the model takes the same limits as inputs
//! (`tune/pairing.rs` pairs them).
//!
//! Why: a leaf that is not resident would be read whole and written whole for about B/F bytes
//! of messages, about F bytes written per byte flushed. A run writes those bytes once, and the
//! leaf is rewritten once for up to `RUN_BUDGET` node sizes of runs. The count of runs a point
//! query probes is bounded too (`MAX_RUNS`); when it binds first, the small runs are merged
//! into one (one more write of their bytes) so that the drain still waits for the byte budget:
//! runs of runs, as an LSM's tiers, instead of a leaf rewritten for a sixteenth of its size.

use crate::storage::block::PAGE;

/// Runs a leaf may have: a flush that finds the count full merges the newest small runs into
/// one, or drains them all into the leaf. A point query probes each run's filter, and about one
/// probe in a hundred that misses still reads a chunk.
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

/// A run smaller than this share of a node size is small: the count's merge takes it.
/// Merged runs are larger (16 flushes of B/F, at F up to 128), so a byte is merged about once
/// before its drain.
pub const SMALL_RUN_SHARE: usize = 8;

/// A run is a block of whole pages, and one that passes a page boundary by a few messages pays
/// a page for them: a flush of B/F (16 KiB at 1 MiB nodes and fanout 64) took five pages for
/// a little over four. When the last page of a spill of `payload` bytes of messages, with
/// `overhead` bytes of block and head beside them (`Run::overhead`), would be at most half
/// used, the spill takes the messages that fill the pages before it (the budget returned) and
/// its last keys wait in the parent for the next flush; else it takes them all (None).
///
/// A spill of two pages or less is left whole: on the simulator (tests/tune.rs, 256 KiB nodes,
/// fanout 64, 4 KiB flushes) fitting two-page runs into one cut the bytes written per insert
/// from 505 to 410 but raised the device reads per point query from 0.95 to 0.98, past what
/// the model's account of runs predicts; not examined further.
pub fn fit_run(payload: usize, overhead: usize) -> Option<usize> {
    let page = PAGE as usize;
    let pages = (payload + overhead).div_ceil(page);
    if pages <= 2 {
        return None;
    }
    let last = payload + overhead - (pages - 1) * page;
    // Heads of long keys can take the pages themselves: then there is no budget to fill.
    let budget = ((pages - 1) * page).checked_sub(overhead)?;
    (last <= page / 2 && budget > 0).then_some(budget)
}

/// What a flush into a leaf that is not in memory does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flush {
    /// Write the incoming messages as one more run.
    Spill,
    /// Merge the runs from this index on (all small, the newest) and the incoming messages into
    /// one run in their place.
    Merge(usize),
    /// Drain the runs and the incoming messages into the leaf.
    Drain,
}

/// The plan for a flush of `incoming` bytes into a leaf that is not in memory, whose runs,
/// oldest first, have the sizes `runs`.
///
/// A run is a block of its own: written now and read again at the drain, it pays only if it
/// takes fewer pages than the leaf it spares. So a leaf of one page (seed 001's 4 KiB nodes)
/// takes its flushes directly; there, runs also filled the parent's head with their entries
/// and filters, and seed 001's random inserts did 3.2x the IOs with them.
pub fn plan(runs: &[u32], incoming: usize, node_size: usize) -> Flush {
    let pages = |b: usize| b.div_ceil(PAGE as usize);
    let run_bytes: usize = runs.iter().map(|&b| b as usize).sum();
    if pages(incoming) >= pages(node_size)
        || (run_bytes + incoming) as f64 > RUN_BUDGET * node_size as f64
    {
        return Flush::Drain;
    }
    if runs.len() < MAX_RUNS {
        return Flush::Spill;
    }
    // A fitted spill (`fit_run`) is up to half a page short of its flush: a run is small when
    // it is under the share by more than that, so that flushes of about B/8 (fanout 8) count
    // the same fitted or not.
    let small = (node_size / SMALL_RUN_SHARE).saturating_sub(PAGE as usize / 2);
    let from = runs.len()
        - runs
            .iter()
            .rev()
            .take_while(|&&b| (b as usize) < small)
            .count();
    // Merging fewer than two runs would not lower the count.
    if runs.len() - from >= 2 {
        Flush::Merge(from)
    } else {
        Flush::Drain
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODE: usize = 1 << 20;

    #[test]
    fn spills_until_the_count_or_the_bytes_run_out() {
        assert_eq!(plan(&[], 64 << 10, NODE), Flush::Spill);
        assert_eq!(plan(&[1; MAX_RUNS - 1], 1, NODE), Flush::Spill);
        // Exactly the budget fits; one byte more drains.
        let budget = (RUN_BUDGET * NODE as f64) as usize;
        let runs = [(budget - 100) as u32, 0, 0];
        assert_eq!(plan(&runs, 100, NODE), Flush::Spill);
        assert_eq!(plan(&runs, 101, NODE), Flush::Drain);
        // A flush larger than the whole budget always drains.
        assert_eq!(plan(&[], budget + 1, NODE), Flush::Drain);
    }

    #[test]
    fn a_full_count_merges_the_newest_small_runs() {
        let small = (16 << 10) as u32;
        let big = (NODE / SMALL_RUN_SHARE) as u32;
        // All small: all of them are merged.
        assert_eq!(plan(&[small; MAX_RUNS], 16 << 10, NODE), Flush::Merge(0));
        // Large runs first (merged earlier), then small ones: only the small suffix.
        let mut runs = vec![big; 3];
        runs.extend([small; MAX_RUNS - 3]);
        assert_eq!(plan(&runs, 16 << 10, NODE), Flush::Merge(3));
        // A small run older than a large one stays: a merge takes the newest runs only, so
        // the runs stay ordered by age.
        let mut runs = vec![small, big];
        runs.extend([small; MAX_RUNS - 2]);
        assert_eq!(plan(&runs, 16 << 10, NODE), Flush::Merge(2));
        // One small run left to merge lowers nothing: drain.
        let mut runs = vec![big; MAX_RUNS - 1];
        runs.push(1);
        assert_eq!(plan(&runs, 1, NODE), Flush::Drain);
    }

    #[test]
    fn a_spill_past_a_page_boundary_by_a_little_keeps_its_last_keys_back() {
        let page = PAGE as usize;
        // 16 KiB of messages and 200 bytes beside them: 4 pages hold 16184 of them.
        assert_eq!(fit_run(16 << 10, 200), Some(4 * page - 200));
        // Exactly full pages, or a last page more than half used: all of it.
        assert_eq!(fit_run(4 * page - 200, 200), None);
        assert_eq!(fit_run(4 * page + page / 2, 200), None);
        assert_eq!(
            fit_run(4 * page + page / 2 - 200, 200),
            Some(4 * page - 200)
        );
        // Within one page there is nothing to save, and two pages are left whole.
        assert_eq!(fit_run(100, 200), None);
        assert_eq!(fit_run(page, 0), None);
        assert_eq!(fit_run(page + 100, 0), None);
        assert_eq!(fit_run(2 * page + 100, 0), Some(2 * page));
        // Nothing at all, and an overhead larger than the pages before the last: no budget.
        assert_eq!(fit_run(0, 0), None);
        assert_eq!(fit_run(100, 3 * page), None);
    }

    #[test]
    fn a_run_must_take_fewer_pages_than_its_leaf() {
        let page = PAGE as usize;
        // A one-page leaf never gets runs, however small the flush.
        assert_eq!(plan(&[], 1, page), Flush::Drain);
        assert_eq!(plan(&[], 200, page), Flush::Drain);
        // Two pages: a flush within one page spills, one past it drains.
        assert_eq!(plan(&[], page, 2 * page), Flush::Spill);
        assert_eq!(plan(&[], page + 1, 2 * page), Flush::Drain);
    }
}
