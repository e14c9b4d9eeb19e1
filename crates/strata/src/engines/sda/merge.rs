//! The SDA's IO for flushes and merges; every decision is `policy`'s.
//!
//! - A flush writes the buffer's entries as arrays of level 0 (or above, by size): W is every
//!   live version at or below a buffered entry's version; entries live at none (their version
//!   was deleted) are dropped; the rest is split into dense pieces, one array each.
//! - A merge reads its two input arrays whole (one read each, or none for an array the block
//!   cache holds whole: the smallest levels, cached as written), sorts
//!   their entries together, keeps the newest write of each (key, version), and writes the
//!   entries live at some version of W1 ∪ W2 as dense pieces, each one extent in one write;
//!   then frees the inputs. Each piece goes to the level of its size, or the inputs' level if
//!   that is higher.
//!
//! - A reclaim (after version deletes, `policy::next_reclaim`) is a merge of one array: read
//!   whole, its entries live at some version of its unchanged W written as dense pieces at its
//!   level, the input freed.
//!
//! Debug builds check every written piece's density (with density amplification on) and,
//! after the merges, stratification.

use std::collections::BTreeSet;

use super::array::{build_blocks, Entry};
use super::policy::{self, level_for, ArrayInfo};
use super::*;

impl Sda {
    /// Write the buffer out as arrays.
    pub(super) fn flush(&mut self) -> Result<()> {
        let entries = self.buffer.take();
        self.buffered_bytes = 0;
        let written: BTreeSet<Version> = entries.iter().map(|e| e.version).collect();
        let mut w_set = BTreeSet::new();
        for x in written {
            w_set.extend(self.tree.live_subtree(x));
        }
        let w_set: Vec<Version> = w_set.into_iter().collect();
        self.counters.flushes += 1;
        self.write_pieces(&entries, &w_set, 0)?;
        Ok(())
    }

    /// Merge intersecting arrays, lowest level first, until the levels are stratified.
    pub(super) fn merge_due(&mut self) -> Result<()> {
        if !self.unsettled {
            return Ok(());
        }
        while let Some((level, i, j)) = policy::next_merge(&self.levels) {
            let b = self.levels[level].remove(j);
            let a = self.levels[level].remove(i);
            let mut entries = Vec::with_capacity((a.entries + b.entries) as usize);
            for input in [&a, &b] {
                entries.extend(self.read_entries(input)?);
                self.counters.merge_read_bytes += input.bytes;
            }
            entries.sort_by(|x, y| x.order(y));
            // The newest write of a (key, version) sorts first; older ones are hidden.
            let before = entries.len();
            entries
                .dedup_by(|later, first| later.key == first.key && later.version == first.version);
            self.counters.dropped += (before - entries.len()) as u64;
            let mut w_set = a.versions.clone();
            w_set.extend(&b.versions);
            w_set.sort_unstable();
            w_set.dedup();
            self.counters.merges += 1;
            self.write_pieces(&entries, &w_set, level)?;
            self.free_array(a.id);
            self.free_array(b.id);
        }
        // Its pieces partition the same W at the same level: nothing new to merge.
        while let Some((level, i)) = policy::next_reclaim(&self.levels) {
            let a = self.levels[level].remove(i);
            let entries = self.read_entries(&a)?;
            self.counters.merge_read_bytes += a.bytes;
            self.counters.reclaims += 1;
            self.write_pieces(&entries, &a.versions, level)?;
            self.free_array(a.id);
        }
        debug_assert!(policy::stratified(&self.levels), "levels not stratified");
        self.unsettled = false;
        Ok(())
    }

    /// Merge every array (and the buffer) into the fewest dense arrays, at the deepest level:
    /// afterwards the stored entries are those some live version reads, less the tombstones
    /// with no value beneath them (each stored once per piece that needs it).
    pub(super) fn compact_all(&mut self) -> Result<()> {
        if !self.buffer.is_empty() {
            self.flush()?;
        }
        let inputs: Vec<ArrayInfo> = self.levels.iter_mut().flat_map(std::mem::take).collect();
        let level = self.levels.len().saturating_sub(1);
        let mut entries = Vec::new();
        for input in &inputs {
            entries.extend(self.read_entries(input)?);
            self.counters.merge_read_bytes += input.bytes;
        }
        entries.sort_by(|x, y| x.order(y));
        let before = entries.len();
        entries.dedup_by(|later, first| later.key == first.key && later.version == first.version);
        self.counters.dropped += (before - entries.len()) as u64;
        let w_set: Vec<Version> = self.tree.live().collect();
        // Everything is here: what no live version reads goes first, then the tombstones that
        // hide nothing any more (`policy::bare_tombstones`).
        let live = policy::live_sets(&entries, &w_set, &self.tree);
        let kept: BTreeSet<usize> = live.iter().flat_map(|(_, l)| l.iter().copied()).collect();
        let bare = policy::bare_tombstones(&entries, &kept, &self.tree);
        let before = entries.len();
        let entries: Vec<Entry> = entries
            .into_iter()
            .enumerate()
            .filter(|(i, _)| kept.contains(i) && !bare.contains(i))
            .map(|(_, e)| e)
            .collect();
        self.counters.dropped += (before - entries.len()) as u64;
        self.counters.merges += 1;
        self.write_pieces(&entries, &w_set, level)?;
        for input in inputs {
            self.free_array(input.id);
        }
        self.merge_due()
    }

    /// Write the entries live at some version of `w_set` as dense pieces, placed at `level` or
    /// above.
    fn write_pieces(&mut self, entries: &[Entry], w_set: &[Version], level: usize) -> Result<()> {
        self.unsettled = true;
        let live = policy::live_sets(entries, w_set, &self.tree);
        let kept: BTreeSet<usize> = live.iter().flat_map(|(_, l)| l.iter().copied()).collect();
        let pieces = if self.cfg.density_amplification {
            policy::split(&live, &self.tree)
        } else if kept.is_empty() {
            Vec::new()
        } else {
            // One array for the versions that see anything of it, dense or not.
            vec![policy::Piece {
                versions: live.iter().map(|(v, _)| *v).collect(),
                entries: kept.iter().copied().collect(),
            }]
        };
        self.counters.dropped += (entries.len() - kept.len()) as u64;
        if pieces.len() > 1 {
            self.counters.splits += 1;
        }
        #[cfg(debug_assertions)]
        if self.cfg.density_amplification {
            let counts = live.iter().map(|(v, l)| (*v, l.len())).collect();
            for p in &pieces {
                assert!(
                    policy::piece_is_dense(p, &counts),
                    "a piece below density: {p:?}"
                );
            }
        }
        for p in pieces {
            let out: Vec<Entry> = p.entries.iter().map(|&i| entries[i].clone()).collect();
            let id = self.pager.new_id();
            let (head, sealed, blocks) = build_blocks(
                &out,
                self.cfg.block_bytes,
                self.cfg.filter_bits,
                id,
                self.encoding,
            );
            self.pager.write_sealed(id, sealed)?;
            let bytes = self.pager.extent(id).map_or(0, |e| e.len);
            self.counters.merge_write_bytes += bytes;
            let head = Arc::new(head);
            self.keep_head(id, head.clone());
            let info = ArrayInfo {
                id,
                entries: out.len() as u64,
                bytes,
                versions: p.versions,
                by_version: policy::count_by_version(out.iter().map(|e| &e.version)),
                // Every entry kept is live at a version of the piece.
                dead: 0,
            };
            let at = level.max(level_for(info.entries, self.cfg.level0_entries));
            if at >= MAX_LEVELS {
                return Err(Error::InvalidOptions(format!(
                    "an SDA array of {} entries needs more than {MAX_LEVELS} levels",
                    info.entries
                )));
            }
            if self.levels.len() <= at {
                self.levels.resize_with(at + 1, Vec::new);
            }
            self.levels[at].push(info);
            // An array of a resident level is cached as written: the small levels are
            // rewritten all the time, and waiting for reads to fill them would keep them cold.
            self.fit_cache();
            if self.cache.keeps(at) {
                for (i, bytes) in blocks.into_iter().enumerate() {
                    let view = head
                        .block_view(i, bytes)
                        .expect("a block just built parses");
                    self.cache.admit(id, at, i, Arc::new(view));
                }
            }
        }
        Ok(())
    }

    /// Every entry of array `a`, from the cache if it holds all of its blocks (a merge of
    /// small levels then reads nothing), else read whole with one IO.
    fn read_entries(&mut self, a: &ArrayInfo) -> Result<Vec<Entry>> {
        let head = self.head(a.id)?;
        if let Some(views) = self.cache.all_of(a.id, head.blocks.len()) {
            return Ok(views.iter().flat_map(|v| v.to_entries()).collect());
        }
        head.read_all(&self.pager, a.id)
    }
}
