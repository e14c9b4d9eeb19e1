//! The extent allocator of the data file: 4 KiB-aligned extents of any size, best fit.
//!
//! Invariant that makes copy-on-write safe: space referenced by the last committed checkpoint is
//! never handed out again before the next checkpoint commits. An extent allocated since the last
//! commit is referenced by nothing durable, so freeing it makes it reusable at once; any other
//! freed extent waits in `pending` until a checkpoint that no longer references it is durable.
//! A commit runs in two steps so that its syncs can happen off the writer's path: `begin_commit`
//! sets aside what the checkpoint being written stops referencing (and from then on treats
//! everything allocated so far as referenced), `commit_done` releases that once the checkpoint
//! is durable. Free space is not stored on disk: on open it is everything between the superblocks
//! and the end of the file that the committed translation table does not reference.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::block::PAGE;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Extent {
    pub offset: u64,
    pub len: u64,
}

impl Extent {
    pub fn end(&self) -> u64 {
        self.offset + self.len
    }
}

/// The share of the file that holes may take before a run of blocks written back together
/// stops going to the end of the file and fills holes instead (`Allocator::alloc_run`).
pub const RUN_SLACK: f64 = 0.25;

#[derive(Debug)]
pub struct Allocator {
    /// One past the last byte any extent may occupy; the file need not be longer.
    end: u64,
    by_offset: BTreeMap<u64, u64>,
    by_size: BTreeSet<(u64, u64)>,
    /// The bytes in `by_offset`.
    free_total: u64,
    fresh: HashSet<u64>,
    pending: Vec<Extent>,
    /// Freed before the checkpoint being committed began: reusable once it is durable.
    committing: Vec<Extent>,
}

impl Allocator {
    pub fn new(base: u64) -> Allocator {
        Allocator {
            end: base,
            by_offset: BTreeMap::new(),
            by_size: BTreeSet::new(),
            free_total: 0,
            fresh: HashSet::new(),
            pending: Vec::new(),
            committing: Vec::new(),
        }
    }

    /// Rebuild from the extents a committed checkpoint references.
    pub fn from_used(base: u64, used: impl IntoIterator<Item = Extent>) -> Allocator {
        let mut used: Vec<Extent> = used.into_iter().collect();
        used.sort();
        let mut a = Allocator::new(base);
        let mut cursor = base;
        for e in used {
            if e.offset > cursor {
                a.insert_free(cursor, e.offset - cursor);
            }
            cursor = cursor.max(e.end());
        }
        a.end = cursor;
        a
    }

    pub fn round(len: u64) -> u64 {
        len.div_ceil(PAGE).max(1) * PAGE
    }

    pub fn alloc(&mut self, len: u64) -> Extent {
        let len = Self::round(len);
        let found = self.by_size.range((len, 0)..).next().copied();
        let ext = match found {
            Some((size, off)) => {
                self.remove_free(off, size);
                if size > len {
                    self.insert_free(off + len, size - len);
                }
                Extent { offset: off, len }
            }
            None => {
                let e = Extent {
                    offset: self.end,
                    len,
                };
                self.end += len;
                e
            }
        };
        self.fresh.insert(ext.offset);
        ext
    }

    /// Extents for blocks of `lens` bytes written back together, in order, as few runs of
    /// adjacent extents as the free space allows (each run one write). A block that does not
    /// fit where the one before it ended opens a new run: in the smallest hole that takes all
    /// the blocks left; else, while holes are at most `RUN_SLACK` of the space below the end,
    /// at the end of the file for all of them; else in the smallest hole that takes this
    /// block (best fit, as `alloc`), or at the end if none does. Copy-on-write leaves
    /// node-sized holes scattered over the file, so runs need room beyond them: the slack
    /// bounds what they cost in space, and past it holes are filled before the file grows.
    /// Each extent is fresh on its own, so one freed early is reused at once.
    pub fn alloc_run(&mut self, lens: &[u64]) -> Vec<Extent> {
        self.alloc_run_within(lens, RUN_SLACK)
    }

    /// `alloc_run` with the share of holes allowed before runs fill them given: with 0, the
    /// file grows for a run only where no hole takes its block.
    pub fn alloc_run_within(&mut self, lens: &[u64], slack: f64) -> Vec<Extent> {
        let lens: Vec<u64> = lens.iter().map(|&l| Self::round(l)).collect();
        let mut rest: u64 = lens.iter().sum();
        let mut out = Vec::with_capacity(lens.len());
        // The open run: where the next block goes, where its room ends, and whether that room
        // is a hole taken out of the free map (its remainder goes back).
        let mut run: Option<(u64, u64, bool)> = None;
        for &len in &lens {
            let at = match run {
                Some((at, limit, _)) if at + len <= limit => at,
                _ => {
                    self.close_run(run);
                    let slack = self.free_total as f64 <= slack * self.end as f64;
                    let hole = self
                        .by_size
                        .range((rest, 0)..)
                        .next()
                        .or_else(|| {
                            if slack {
                                None
                            } else {
                                self.by_size.range((len, 0)..).next()
                            }
                        })
                        .copied();
                    match hole {
                        Some((size, off)) => {
                            self.remove_free(off, size);
                            run = Some((off, off + size, true));
                            off
                        }
                        None => {
                            let room = if slack { rest } else { len };
                            run = Some((self.end, self.end + room, false));
                            self.end += room;
                            self.end - room
                        }
                    }
                }
            };
            out.push(Extent { offset: at, len });
            self.fresh.insert(at);
            rest -= len;
            if let Some(r) = run.as_mut() {
                r.0 = at + len;
            }
        }
        self.close_run(run);
        out
    }

    /// Give back what a run left of the hole it was cut from.
    fn close_run(&mut self, run: Option<(u64, u64, bool)>) {
        if let Some((at, limit, true)) = run {
            if at < limit {
                self.insert_free(at, limit - at);
            }
        }
    }

    /// The lowest free extent of at least `len` bytes wholly below `limit`, taken; `None` when no
    /// hole there fits. For moving blocks down out of the file's tail.
    pub fn alloc_below(&mut self, len: u64, limit: u64) -> Option<Extent> {
        let len = Self::round(len);
        let (off, size) = self
            .by_offset
            .range(..limit)
            .map(|(&o, &l)| (o, l))
            .find(|&(o, l)| l >= len && o + len <= limit)?;
        self.remove_free(off, size);
        if size > len {
            self.insert_free(off + len, size - len);
        }
        self.fresh.insert(off);
        Some(Extent { offset: off, len })
    }

    /// Give an extent back; it is reused now if nothing durable can reference it, else after commit.
    pub fn free(&mut self, ext: Extent) {
        if self.fresh.remove(&ext.offset) {
            self.release(ext);
        } else {
            self.pending.push(ext);
        }
    }

    /// A checkpoint is being written: what it no longer references (`pending`, and `also`, the
    /// previous checkpoint's table) becomes reusable when it is durable; what is allocated now
    /// it references, so freeing that must wait for the checkpoint after it.
    pub fn begin_commit(&mut self, also: Option<Extent>) {
        debug_assert!(self.committing.is_empty(), "one commit at a time");
        self.committing = std::mem::take(&mut self.pending);
        self.committing.extend(also);
        self.fresh.clear();
    }

    /// The checkpoint `begin_commit` started is durable: what it stopped referencing may be reused.
    pub fn commit_done(&mut self) {
        for e in std::mem::take(&mut self.committing) {
            self.release(e);
        }
    }

    /// One past the last allocated byte; the file can be truncated here after a commit.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// The free extents, in file order.
    pub fn free_extents(&self) -> Vec<Extent> {
        self.by_offset
            .iter()
            .map(|(&offset, &len)| Extent { offset, len })
            .collect()
    }

    pub fn free_bytes(&self) -> u64 {
        self.free_total
    }

    pub fn pending_bytes(&self) -> u64 {
        self.pending
            .iter()
            .chain(&self.committing)
            .map(|e| e.len)
            .sum()
    }

    fn release(&mut self, ext: Extent) {
        let (mut off, mut len) = (ext.offset, ext.len);
        if let Some((&poff, &plen)) = self.by_offset.range(..off).next_back() {
            if poff + plen == off {
                self.remove_free(poff, plen);
                off = poff;
                len += plen;
            }
        }
        if let Some(&nlen) = self.by_offset.get(&(off + len)) {
            self.remove_free(off + len, nlen);
            len += nlen;
        }
        if off + len == self.end {
            self.end = off;
        } else {
            self.insert_free(off, len);
        }
    }

    fn insert_free(&mut self, off: u64, len: u64) {
        self.free_total += len;
        self.by_offset.insert(off, len);
        self.by_size.insert((len, off));
    }

    fn remove_free(&mut self, off: u64, len: u64) {
        self.free_total -= len;
        self.by_offset.remove(&off);
        self.by_size.remove(&(len, off));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_below_takes_the_lowest_hole_that_fits_under_the_limit() {
        let used = [0u64, 3, 4, 8].map(|p| Extent {
            offset: 8192 + p * 4096,
            len: 4096,
        });
        // Holes: pages 1-2 (8 KiB) and 5-7 (12 KiB); the file ends after page 8.
        let mut a = Allocator::from_used(8192, used);
        assert_eq!(
            a.alloc_below(12288, 8192 + 8 * 4096).map(|e| e.offset),
            Some(8192 + 5 * 4096)
        );
        assert_eq!(
            a.alloc_below(4096, 8192 + 8 * 4096).map(|e| e.offset),
            Some(8192 + 4096)
        );
        assert_eq!(
            a.alloc_below(8192, 8192 + 8 * 4096),
            None,
            "the 4 KiB left is too small"
        );
        assert_eq!(
            a.alloc_below(4096, 8192 + 2 * 4096),
            None,
            "nothing free below the limit"
        );
    }

    #[test]
    fn freed_durable_space_waits_for_commit() {
        let mut a = Allocator::from_used(
            8192,
            [Extent {
                offset: 8192,
                len: 8192,
            }],
        );
        assert_eq!(a.end(), 16384);
        a.free(Extent {
            offset: 8192,
            len: 8192,
        });
        let e = a.alloc(4096);
        assert_eq!(
            e.offset, 16384,
            "space the checkpoint references is not reused before commit"
        );
        a.begin_commit(None);
        a.commit_done();
        assert_eq!(
            a.alloc(5000),
            Extent {
                offset: 8192,
                len: 8192
            }
        );
    }

    #[test]
    fn space_freed_while_a_commit_is_in_flight_waits_for_the_next() {
        let mut a = Allocator::new(8192);
        let old = a.alloc(4096);
        let kept = a.alloc(4096);
        a.begin_commit(None);
        a.commit_done();
        // `old` is durable; free it, then begin a commit that no longer references it.
        a.free(old);
        a.begin_commit(None);
        // `kept` is referenced by the commit in flight; `scratch` by nothing durable.
        a.free(kept);
        let scratch = a.alloc(4096);
        assert_eq!(scratch.offset, 16384, "nothing reusable yet");
        a.free(scratch);
        assert_eq!(a.alloc(4096), scratch, "fresh space is reused at once");
        assert_eq!(a.pending_bytes(), 8192);
        a.commit_done();
        assert_eq!(a.alloc(4096), old, "released when the commit is durable");
        assert_eq!(a.pending_bytes(), 4096, "`kept` waits for the next commit");
        a.begin_commit(None);
        a.commit_done();
        assert_eq!(a.alloc(4096), kept);
    }

    #[test]
    fn fresh_space_is_reused_at_once_and_coalesces() {
        let mut a = Allocator::new(8192);
        let x = a.alloc(4096);
        let y = a.alloc(4096);
        let z = a.alloc(4096);
        a.free(x);
        a.free(y);
        assert_eq!(a.free_bytes(), 8192, "neighbours coalesce");
        assert_eq!(a.alloc(8192).offset, x.offset);
        a.free(z);
        assert_eq!(a.end(), z.offset, "free space at the tail shrinks the end");
    }

    #[test]
    fn a_run_takes_one_hole_when_one_fits_and_fills_holes_past_the_slack() {
        let page = |p: u64| 8192 + p * 4096;
        let used = [0u64, 3, 11].map(|p| Extent {
            offset: page(p),
            len: 4096,
        });
        // Holes: pages 1-2 and 4-10, 36 KiB of the 56 below the end (after page 11).
        let mut a = Allocator::from_used(8192, used);
        let run = a.alloc_run(&[4096, 5000, 4096]);
        assert_eq!(
            run.iter().map(|e| (e.offset, e.len)).collect::<Vec<_>>(),
            [(page(4), 4096), (page(5), 8192), (page(7), 4096)],
            "the smallest hole that takes them all, adjacent, in order"
        );
        // Left: pages 1-2 and 8-10, more than the slack: no hole takes four pages, so each
        // block goes where it fits best, and the next continues there.
        let run = a.alloc_run(&[4096; 4]);
        assert_eq!(
            run.iter().map(|e| e.offset).collect::<Vec<_>>(),
            [page(1), page(2), page(8), page(9)]
        );
        // Page 10 is left, within the slack: a run that fits no hole goes to the end whole.
        let run = a.alloc_run(&[4096, 8192]);
        assert_eq!((run[0].offset, run[1].offset), (page(12), page(13)));
        assert_eq!((a.free_bytes(), a.end()), (4096, page(15)));
        // Each piece is fresh on its own: freed, it is free at once.
        a.free(run[0]);
        assert_eq!(a.free_bytes(), 8192);
    }

    /// With no slack (`BlockSink::write_run`'s small arrays), a run fills holes first, as
    /// best fit does, and the file grows only for a block no hole takes.
    #[test]
    fn a_run_without_slack_fills_holes_before_the_file_grows() {
        let page = |p: u64| 8192 + p * 4096;
        let used = [0u64, 3, 11].map(|p| Extent {
            offset: page(p),
            len: 4096,
        });
        // Holes: pages 1-2 and 4-10; the file ends after page 11.
        let mut a = Allocator::from_used(8192, used);
        let run = a.alloc_run_within(&[4096, 8192], 0.0);
        assert_eq!((run[0].offset, run[1].offset), (page(4), page(5)));
        // Left: pages 1-2 and 7-10. No hole takes 24 KiB: the first block goes where it fits
        // best, the other two into the hole that takes both.
        let run = a.alloc_run_within(&[8192; 3], 0.0);
        assert_eq!(
            run.iter().map(|e| e.offset).collect::<Vec<_>>(),
            [page(1), page(7), page(9)]
        );
        assert_eq!((a.free_bytes(), a.end()), (0, page(12)));
        // No hole left: the end.
        assert_eq!(a.alloc_run_within(&[4096], 0.0)[0].offset, page(12));
    }

    #[test]
    fn rebuild_finds_gaps() {
        let used = [
            Extent {
                offset: 8192,
                len: 4096,
            },
            Extent {
                offset: 20480,
                len: 4096,
            },
        ];
        let mut a = Allocator::from_used(8192, used);
        assert_eq!(a.free_bytes(), 8192);
        assert_eq!(a.alloc(8192).offset, 12288);
    }
}
