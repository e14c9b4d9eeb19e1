//! The SDA's block cache: parsed blocks (`BlockView`) of the arrays of the smallest levels,
//! kept within the memory the engine's heads and range runs leave of `Config::cache_bytes`.
//!
//! Which blocks: a range at version v reads one array per level (stratification), so every
//! level costs a range at least one IO, and a small level costs it as much as a large one.
//! Keeping the smallest levels whole therefore saves the most IOs per byte: the cache holds
//! the levels `0..resident` where `resident` is the most levels, smallest first, whose arrays'
//! charge all fits (`resident_levels`). Arrays of those levels enter the cache as a merge or a
//! flush writes them (their blocks are at hand: small levels are rewritten all the time, and
//! filling them by reads would keep them cold), and blocks a read parses after a reopen. An
//! array leaves when it is freed or when its level stops fitting.
//!
//! Invariant: every cached block belongs to a live array of a level below `resident`, and the
//! cache's charge is at most the charge of those levels' arrays (so within the budget the
//! levels were fitted to). Blocks are immutable (an array never changes), so a cached block
//! is never stale while its array lives.

use std::collections::HashMap;
use std::sync::Arc;

use super::array::BlockView;
use super::policy::ArrayInfo;
use crate::storage::NodeId;

/// What an array costs the cache when all of it is cached: its bytes and each entry's place
/// (`BlockView::charge`).
pub(super) fn array_charge(a: &ArrayInfo) -> u64 {
    a.bytes + a.entries * BlockView::ENTRY_CHARGE as u64
}

/// The most levels, smallest first, whose arrays' charge together is at most `budget`.
pub(super) fn resident_levels(levels: &[Vec<ArrayInfo>], budget: u64) -> usize {
    let mut total = 0u64;
    for (n, level) in levels.iter().enumerate() {
        total += level.iter().map(array_charge).sum::<u64>();
        if total > budget {
            return n;
        }
    }
    levels.len()
}

#[derive(Default)]
pub(super) struct BlockCache {
    blocks: HashMap<(NodeId, usize), Arc<BlockView>>,
    /// Per cached array: its level and the charge of its cached blocks.
    arrays: HashMap<NodeId, (usize, usize)>,
    bytes: usize,
    /// Levels below this are cached.
    resident: usize,
    pub(super) hits: u64,
    pub(super) misses: u64,
}

impl BlockCache {
    /// Whether blocks of an array at `level` are kept.
    pub(super) fn keeps(&self, level: usize) -> bool {
        level < self.resident
    }

    /// Block `i` of array `id`, if cached (counted as a hit or a miss).
    pub(super) fn get(&mut self, id: NodeId, i: usize) -> Option<Arc<BlockView>> {
        let b = self.blocks.get(&(id, i)).cloned();
        if b.is_some() {
            self.hits += 1;
        } else {
            self.misses += 1;
        }
        b
    }

    /// Whether block `i` of array `id` is cached (not counted as a hit or a miss).
    pub(super) fn contains(&self, id: NodeId, i: usize) -> bool {
        self.blocks.contains_key(&(id, i))
    }

    /// Every block of array `id` (of `blocks`), in order, if all are cached.
    pub(super) fn all_of(&self, id: NodeId, blocks: usize) -> Option<Vec<Arc<BlockView>>> {
        (0..blocks)
            .map(|i| self.blocks.get(&(id, i)).cloned())
            .collect()
    }

    /// Keep block `i` of array `id` at `level`, if that level is resident. The view must
    /// hold its own bytes (`BlockView::detached`), not a run's.
    pub(super) fn admit(&mut self, id: NodeId, level: usize, i: usize, view: Arc<BlockView>) {
        if !self.keeps(level) {
            return;
        }
        let charge = view.charge();
        if self.blocks.insert((id, i), view).is_none() {
            self.bytes += charge;
            self.arrays.entry(id).or_insert((level, 0)).1 += charge;
        }
    }

    /// Drop the blocks of array `id` (freed, or its level no longer resident).
    pub(super) fn forget(&mut self, id: NodeId) {
        if let Some((_, bytes)) = self.arrays.remove(&id) {
            self.bytes -= bytes;
            self.blocks.retain(|&(a, _), _| a != id);
        }
    }

    /// Keep levels `0..resident` from now on, dropping the arrays of the levels above.
    pub(super) fn set_resident(&mut self, resident: usize) {
        if resident < self.resident {
            let gone: Vec<NodeId> = self
                .arrays
                .iter()
                .filter(|(_, &(level, _))| level >= resident)
                .map(|(&id, _)| id)
                .collect();
            if !gone.is_empty() {
                let gone: std::collections::HashSet<NodeId> = gone.into_iter().collect();
                self.blocks.retain(|(a, _), _| !gone.contains(a));
                for id in gone {
                    self.bytes -= self.arrays.remove(&id).map_or(0, |(_, b)| b);
                }
            }
        }
        self.resident = resident;
    }

    pub(super) fn resident(&self) -> usize {
        self.resident
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(id: NodeId, bytes: u64, entries: u64) -> ArrayInfo {
        ArrayInfo {
            id,
            entries,
            bytes,
            versions: vec![0],
            by_version: Vec::new(),
            dead: 0,
            tombstones: None,
        }
    }

    /// Levels fit smallest first while their total charge does; a level that does not fit
    /// stops the count even if a larger one after it would (it never does: levels double).
    #[test]
    fn the_smallest_levels_that_fit_are_resident() {
        let e = BlockView::ENTRY_CHARGE as u64;
        let levels = vec![
            vec![info(1, 1000, 10), info(2, 1000, 10)],
            vec![info(3, 4000, 40)],
            vec![],
            vec![info(4, 16000, 160)],
        ];
        let l01 = 2000 + 20 * e + 4000 + 40 * e;
        assert_eq!(resident_levels(&levels, 0), 0);
        assert_eq!(resident_levels(&levels, 2000 + 20 * e - 1), 0);
        assert_eq!(resident_levels(&levels, 2000 + 20 * e), 1);
        assert_eq!(resident_levels(&levels, l01), 3, "an empty level fits");
        assert_eq!(resident_levels(&levels, l01 + 16000 + 160 * e), 4);
        assert_eq!(resident_levels(&[], 0), 0);
    }

    fn view(bytes: usize) -> Arc<BlockView> {
        Arc::new(BlockView::unparsed(vec![0; bytes]))
    }

    /// Blocks of resident levels are kept and charged; a freed array or a level that stops
    /// being resident takes its blocks out, and the charge with them.
    #[test]
    fn blocks_come_and_go_with_their_arrays_and_levels() {
        let mut c = BlockCache::default();
        c.admit(1, 0, 0, view(100));
        assert_eq!(
            (c.bytes(), c.get(1, 0).is_some()),
            (0, false),
            "nothing is resident"
        );
        c.set_resident(2);
        c.admit(1, 0, 0, view(100));
        c.admit(1, 0, 1, view(50));
        c.admit(1, 0, 1, view(50));
        c.admit(2, 1, 0, view(30));
        c.admit(3, 2, 0, view(30));
        assert_eq!(c.bytes(), 180);
        assert_eq!(c.all_of(1, 2).map(|v| v.len()), Some(2));
        assert!(c.all_of(1, 3).is_none());
        assert!(c.get(3, 0).is_none());
        c.forget(1);
        assert_eq!(c.bytes(), 30);
        assert!(c.get(1, 0).is_none());
        c.set_resident(1);
        assert_eq!(c.bytes(), 0);
        assert!(c.get(2, 0).is_none());
        assert_eq!((c.hits, c.misses), (0, 4));
    }
}
