//! The SDA's IO for flushes and merges; every decision is `policy`'s.
//!
//! - A flush writes the buffer's entries as arrays of level 0 (or above, by size): W is every
//!   live version at or below a buffered entry's version; entries live at none (their version
//!   was deleted) are dropped; the rest is split into dense pieces, one array each.
//! - A merge reads its two input arrays whole (one read each, or none for an array the block
//!   cache holds whole: the smallest levels, cached as written), sorts
//!   their entries together, keeps the newest write of each (key, version), and writes the
//!   entries live at some version of W1 ∪ W2, less the tombstones that hide nothing there or
//!   in any other array (`drop_unread`), as dense pieces, each one extent; then frees the
//!   inputs. Each piece goes to the level of its size, or the inputs' level if that is
//!   higher.
//! - Pieces are written together, up to `PIECE_BATCH` bytes an IO, in extents adjacent where
//!   a hole (or the end of the file) takes them together (`BlockSink::write_run`): a flush at
//!   1,000 versions makes a small piece per leaf written to.
//!
//! - A reclaim (after version deletes, `policy::next_reclaim`) is a merge of one array: read
//!   whole, its entries live at some version of its unchanged W written as dense pieces at its
//!   level, the input freed.
//!
//! Debug builds check every written piece's density (with density amplification on) and,
//! after the merges, stratification.

use std::collections::{BTreeSet, HashMap};

use super::array::{build_blocks, Entry};
use super::merger::TreeEvent;
use super::policy::{self, level_for, ArrayInfo};
use super::*;
use crate::storage::{BlockSink, Extent, Sealed};

impl Sda {
    /// Write the buffer out as arrays.
    pub(super) fn flush(&mut self) -> Result<()> {
        debug_assert!(
            self.frozen.is_none(),
            "a flush before the one frozen is installed"
        );
        let w_set = self.w_set_of(self.buffer.versions());
        let entries = self.buffer.take();
        self.buffered_bytes = 0;
        self.counters.flushes += 1;
        self.write_pieces(&entries, &w_set, 0)?;
        Ok(())
    }

    /// The W of a flush of the writes of `written`: every live version that reads them.
    pub(super) fn w_set_of(&self, written: impl Iterator<Item = Version>) -> Vec<Version> {
        let mut w_set = BTreeSet::new();
        for x in written {
            w_set.extend(self.tree.live_subtree(x));
        }
        w_set.into_iter().collect()
    }

    /// The version tree as it is now, shared with work on the engine's threads (one copy
    /// until the tree next changes).
    pub(super) fn tree_now(&mut self) -> Arc<VersionTree> {
        self.tree_copy
            .get_or_insert_with(|| Arc::new(self.tree.clone()))
            .clone()
    }

    /// Merge intersecting arrays, lowest level first, until the levels are stratified, then
    /// rewrite the arrays version deletes left with too much unreachable: here, on the writer,
    /// or with merges on their own thread, on both (`settle_both`).
    pub(super) fn merge_due(&mut self) -> Result<()> {
        self.reap_flush(true)?;
        if self.background {
            self.settle_both()?;
            debug_assert!(policy::stratified(&self.levels), "levels not stratified");
            return Ok(());
        }
        self.reap(true)?;
        if !self.unsettled {
            return Ok(());
        }
        while let Some((level, i, j)) = policy::next_merge(&self.levels) {
            self.merge_inline(level, i, j)?;
        }
        self.reclaim_due()?;
        debug_assert!(policy::stratified(&self.levels), "levels not stratified");
        self.unsettled = false;
        self.lag = 0;
        Ok(())
    }

    /// Merge arrays i and j (i < j) of `level` here, on the writer.
    pub(super) fn merge_inline(&mut self, level: usize, i: usize, j: usize) -> Result<()> {
        let b = self.levels[level].remove(j);
        let a = self.levels[level].remove(i);
        let work = self.merge_work(&a, &b)?;
        let merged = work.run()?;
        self.counters.merge_read_bytes += a.bytes + b.bytes;
        self.install_merged(level, merged, &[])?;
        self.free_array(a.id);
        self.free_array(b.id);
        Ok(())
    }

    /// Rewrite, one at a time, the arrays version deletes left with too much unreachable.
    /// Its pieces partition the same W at the same level: nothing new to merge.
    pub(super) fn reclaim_due(&mut self) -> Result<()> {
        while let Some((level, i)) = policy::next_reclaim(&self.levels) {
            let a = self.levels[level].remove(i);
            let entries = self.read_entries(&a)?;
            self.counters.merge_read_bytes += a.bytes;
            self.counters.reclaims += 1;
            self.write_pieces(&entries, &a.versions, level)?;
            self.free_array(a.id);
        }
        Ok(())
    }

    /// What merging arrays `a` and `b` needs, owned, so that it can run on another thread:
    /// their entries where the block cache holds them whole, else their heads and extents.
    pub(super) fn merge_work(&mut self, a: &ArrayInfo, b: &ArrayInfo) -> Result<MergeWork> {
        let inputs = vec![self.source(a)?, self.source(b)?];
        // Arrays this process wrote know their tombstones: most merges have none to drop.
        let outside = if [a, b].iter().any(|x| x.tombstones != Some(0)) {
            Some(self.outside(&[a.id, b.id])?)
        } else {
            None
        };
        let mut w_set = a.versions.clone();
        w_set.extend(&b.versions);
        w_set.sort_unstable();
        w_set.dedup();
        Ok(MergeWork {
            inputs,
            w_set,
            tree: self.tree_now(),
            outside,
            cfg: self.cfg,
            encoding: self.encoding,
            sink: self.pager.block_sink(),
        })
    }

    /// Every array but `inputs`, for a merge of them to ask whether a tombstone it holds
    /// may hide an entry elsewhere (`Outside::may_hide`): the arrays in the levels, and the
    /// running merge's inputs that a version delete took out of them (their entries come
    /// back in its output). Heads not read yet are read now (once: they are kept), since
    /// without its filter an array may hold any key: after an open, the largest arrays'
    /// would otherwise keep every tombstone until a merge or a read came to them.
    fn outside(&mut self, inputs: &[NodeId]) -> Result<Outside> {
        let mut wanted: Vec<(NodeId, Option<Vec<Version>>)> = self
            .arrays()
            .filter(|x| !inputs.contains(&x.id))
            .map(|x| {
                // No counts (an array of a version 2 manifest): any version may have written it.
                let writers = (!x.by_version.is_empty())
                    .then(|| x.by_version.iter().map(|&(v, _)| v).collect());
                (x.id, writers)
            })
            .collect();
        for id in self.busy() {
            if !inputs.contains(&id) && !self.arrays().any(|x| x.id == id) {
                wanted.push((id, None));
            }
        }
        let mut arrays = Vec::with_capacity(wanted.len());
        for (id, writers) in wanted {
            // A damaged head is no reason to fail this merge: that array may hold any key.
            let head = match self.head(id) {
                Ok(h) => Some(h),
                Err(e) if e.is_corruption() => None,
                Err(e) => return Err(e),
            };
            arrays.push(Other { writers, head });
        }
        Ok(Outside { arrays })
    }

    /// Put a merge's arrays in the levels at `level` or above, after replaying on them the
    /// version-tree changes made since the merge began (`events`, oldest first).
    pub(super) fn install_merged(
        &mut self,
        level: usize,
        merged: Merged,
        events: &[TreeEvent],
    ) -> Result<()> {
        self.counters.merges += 1;
        self.counters.dropped += merged.hidden;
        self.dropped_tombstones += merged.tombstones;
        self.install_cut(level, merged.cut, events)
    }

    /// Put arrays made on a thread of their own (a merge's, a flush's) in the levels at
    /// `level` or above, after replaying on their W the version-tree changes made since the
    /// work began (`events`, oldest first).
    pub(super) fn install_cut(
        &mut self,
        level: usize,
        mut cut: Cut,
        events: &[TreeEvent],
    ) -> Result<()> {
        if !events.is_empty() {
            #[cfg(test)]
            {
                self.replayed += 1;
            }
            for m in &mut cut.made {
                for e in events {
                    match *e {
                        // As `clone_version` does to the arrays in the levels.
                        TreeEvent::Clone(v, w) if m.info.serves(v) => m.info.versions.push(w),
                        TreeEvent::Delete(v) => m.info.versions.retain(|&x| x != v),
                        TreeEvent::Clone(..) => {}
                    }
                }
                m.info.dead = policy::unreachable(&m.info, &self.tree);
            }
            // An array whose versions were all deleted meanwhile holds nothing to read.
            let sink = self.pager.block_sink();
            cut.made.retain(|m| {
                if m.info.versions.is_empty() {
                    sink.discard(m.ext);
                }
                !m.info.versions.is_empty()
            });
        }
        self.place(cut, level)
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
        self.counters.merges += 1;
        self.write_all(entries, level)?;
        for input in inputs {
            self.free_array(input.id);
        }
        self.merge_due()
    }

    /// Write everything there is (every entry, in any order, any number per (key, version);
    /// `compact_all`'s, an import's): the newest write of each (key, version) that a live
    /// version reads, less the tombstones that hide nothing, as dense pieces at `level` or
    /// above. Nothing is outside, so no tombstone can hide anything there.
    pub(super) fn write_all(&mut self, mut entries: Vec<Entry>, level: usize) -> Result<()> {
        entries.sort_by(|x, y| x.order(y));
        let before = entries.len();
        entries.dedup_by(|later, first| later.key == first.key && later.version == first.version);
        let w_set: Vec<Version> = self.tree.live().collect();
        let (entries, tombstones) = drop_unread(entries, &w_set, &self.tree, &Outside::default());
        self.counters.dropped += (before - entries.len()) as u64;
        self.dropped_tombstones += tombstones;
        self.write_pieces(&entries, &w_set, level)
    }

    /// Write the entries live at some version of `w_set` as dense pieces, placed at `level` or
    /// above.
    pub(super) fn write_pieces(
        &mut self,
        entries: &[Entry],
        w_set: &[Version],
        level: usize,
    ) -> Result<()> {
        let sink = self.pager.block_sink();
        let cut = make_pieces(entries, w_set, &self.tree, &self.cfg, self.encoding, &sink)?;
        self.place(cut, level)
    }

    /// Enter arrays written by `make_pieces` in the table and the levels, each at `level` or
    /// the level of its size if that is higher. Nothing is entered if one would need more
    /// than `MAX_LEVELS` (all are given back).
    fn place(&mut self, cut: Cut, level: usize) -> Result<()> {
        self.unsettled = true;
        self.counters.dropped += cut.dropped;
        self.counters.merge_write_bytes += cut.written;
        if cut.made.len() > 1 {
            self.counters.splits += 1;
        }
        let level0 = self.cfg.level0_entries;
        let at = |m: &Made| level.max(level_for(m.info.entries, level0));
        if let Some(m) = cut.made.iter().find(|m| at(m) >= MAX_LEVELS) {
            let e = Error::InvalidOptions(format!(
                "an SDA array of {} entries needs more than {MAX_LEVELS} levels",
                m.info.entries
            ));
            let sink = self.pager.block_sink();
            for m in cut.made {
                sink.discard(m.ext);
            }
            return Err(e);
        }
        for m in cut.made {
            let at = at(&m);
            let Made {
                ext,
                head,
                blocks,
                info,
            } = m;
            let id = info.id;
            self.pager.adopt_written(id, ext);
            let head = Arc::new(head);
            self.keep_head(id, head.clone());
            if self.levels.len() <= at {
                self.levels.resize_with(at + 1, Vec::new);
            }
            self.levels[at].push(info);
            // An array of a resident level is cached as written: the small levels are
            // rewritten all the time, and waiting for reads to fill them would keep them cold.
            self.fit_cache();
            let cache = self.cache_mut();
            if cache.keeps(at) {
                for (i, bytes) in blocks.into_iter().enumerate() {
                    let view = head
                        .block_view(i, bytes)
                        .expect("a block just built parses");
                    cache.admit(id, at, i, Arc::new(view));
                }
            }
        }
        Ok(())
    }

    /// Every entry of array `a`, from the cache if it holds all of its blocks (a merge of
    /// small levels then reads nothing), else read whole with one IO.
    fn read_entries(&mut self, a: &ArrayInfo) -> Result<Vec<Entry>> {
        self.source(a)?.entries(&**self.pager.device())
    }

    /// Where array `a`'s entries come from: the cache if it holds all of its blocks, else the
    /// device, its head and extent taken now.
    fn source(&mut self, a: &ArrayInfo) -> Result<Source> {
        let head = self.head(a.id)?;
        if let Some(views) = self.cache_mut().all_of(a.id, head.blocks.len()) {
            return Ok(Source::Given(
                views.iter().flat_map(|v| v.to_entries()).collect(),
            ));
        }
        let ext = self.pager.extent(a.id).ok_or_else(|| {
            Error::corruption(
                self.pager.file_name(),
                0,
                format!("SDA array {} is not in the pager's table", a.id),
            )
        })?;
        Ok(Source::Read {
            id: a.id,
            ext,
            head,
        })
    }
}

/// An array written to a fresh extent (`make_pieces`), not yet in the table or the levels.
pub(super) struct Made {
    ext: Extent,
    head: Head,
    /// Its blocks' bytes, for the block cache.
    blocks: Vec<Arc<Vec<u8>>>,
    /// Its entry in the levels, the level aside (`dead` is 0: every entry is live at a version
    /// of its W when it is made).
    info: ArrayInfo,
}

/// Arrays made of one set of entries.
pub(super) struct Cut {
    made: Vec<Made>,
    /// Entries live at no version of the W they were cut for.
    dropped: u64,
    /// Bytes written.
    written: u64,
}

/// Write the entries (in `Entry::order`, one per (key, version)) live at some version of
/// `w_set` as dense pieces (`policy::split`; one array for all of them without density
/// amplification), each one array in one write through `sink`. On an error the arrays
/// already written are given back. Pure but for the writes, so that a merge can run it on a
/// thread of its own.
pub(super) fn make_pieces(
    entries: &[Entry],
    w_set: &[Version],
    tree: &VersionTree,
    cfg: &Config,
    encoding: array::Encoding,
    sink: &BlockSink,
) -> Result<Cut> {
    let live = policy::live_sets(entries, w_set, tree);
    let kept: BTreeSet<usize> = live.iter().flat_map(|(_, l)| l.iter().copied()).collect();
    let pieces = if cfg.density_amplification {
        policy::split(&live, tree)
    } else if kept.is_empty() {
        Vec::new()
    } else {
        // One array for the versions that see anything of it, dense or not.
        vec![policy::Piece {
            versions: live.iter().map(|(v, _)| *v).collect(),
            entries: kept.iter().copied().collect(),
        }]
    };
    #[cfg(debug_assertions)]
    if cfg.density_amplification {
        let counts = live.iter().map(|(v, l)| (*v, l.len())).collect();
        for p in &pieces {
            assert!(
                policy::piece_is_dense(p, &counts),
                "a piece below density: {p:?}"
            );
        }
    }
    let mut cut = Cut {
        made: Vec::with_capacity(pieces.len()),
        dropped: (entries.len() - kept.len()) as u64,
        written: 0,
    };
    // Pieces are written together, `PIECE_BATCH` at a time (the last piece may take a batch
    // past it; `BlockSink::write_run`): a flush at 1,000 versions makes a small piece per
    // leaf, one IO each before.
    let mut batch: Vec<(Sealed, Made)> = Vec::new();
    let mut batched = 0;
    let n = pieces.len();
    for (i, p) in pieces.into_iter().enumerate() {
        let out: Vec<&Entry> = p.entries.iter().map(|&i| &entries[i]).collect();
        let id = sink.new_id();
        let (head, sealed, blocks) =
            build_blocks(&out, cfg.block_bytes, cfg.filter_bits, id, encoding);
        batched += sealed.bytes();
        let made = Made {
            ext: Extent { offset: 0, len: 0 },
            head,
            blocks,
            info: ArrayInfo {
                id,
                entries: out.len() as u64,
                bytes: 0,
                versions: p.versions,
                by_version: policy::count_by_version(out.iter().map(|e| &e.version)),
                dead: 0,
                tombstones: Some(out.iter().filter(|e| e.value.is_none()).count() as u64),
            },
        };
        batch.push((sealed, made));
        if batched >= PIECE_BATCH || i + 1 == n {
            let (sealed, made): (Vec<Sealed>, Vec<Made>) =
                std::mem::take(&mut batch).into_iter().unzip();
            batched = 0;
            let exts = match sink.write_run(sealed) {
                Ok(exts) => exts,
                Err(e) => {
                    for m in cut.made {
                        sink.discard(m.ext);
                    }
                    return Err(e);
                }
            };
            for (mut m, ext) in made.into_iter().zip(exts) {
                cut.written += ext.len;
                m.ext = ext;
                m.info.bytes = ext.len;
                cut.made.push(m);
            }
        }
    }
    Ok(cut)
}

/// Bytes of pieces written together (`make_pieces`).
const PIECE_BATCH: u64 = 256 << 10;

/// Where a merge's input comes from.
pub(super) enum Source {
    /// Its entries, taken from the block cache.
    Given(Vec<Entry>),
    /// Read whole from the device.
    Read {
        id: NodeId,
        ext: Extent,
        head: Arc<Head>,
    },
}

impl Source {
    fn entries(self, dev: &dyn Device) -> Result<Vec<Entry>> {
        match self {
            Source::Given(e) => Ok(e),
            Source::Read { id, ext, head } => head.read_all_at(dev, id, ext),
        }
    }
}

/// A merge of two arrays, owned: what it needs of the engine, taken when it starts.
pub(super) struct MergeWork {
    inputs: Vec<Source>,
    w_set: Vec<Version>,
    /// The version tree when the merge began: liveness is decided by it, and the changes
    /// made since are replayed on the output at install (`Sda::install_merged`).
    tree: Arc<VersionTree>,
    /// The other arrays, for the tombstones the merge could drop; None when neither input
    /// holds one.
    outside: Option<Outside>,
    cfg: Config,
    encoding: array::Encoding,
    sink: BlockSink,
}

/// What a merge made.
pub(super) struct Merged {
    cut: Cut,
    /// Entries hidden by a newer write of their (key, version).
    hidden: u64,
    /// Tombstones dropped as hiding nothing (counted in `cut.dropped` too).
    tombstones: u64,
}

impl Merged {
    /// Give the arrays back unwritten to the table (a merge never installed).
    pub(super) fn discard(self, sink: &BlockSink) {
        self.cut.discard(sink)
    }
}

impl Cut {
    /// Give the arrays back unwritten to the table (never installed).
    pub(super) fn discard(self, sink: &BlockSink) {
        for m in self.made {
            sink.discard(m.ext);
        }
    }
}

impl MergeWork {
    /// Read the inputs, sort their entries together, keep the newest write of each (key,
    /// version), and write what the versions of W read as dense pieces.
    pub(super) fn run(self) -> Result<Merged> {
        let mut entries = Vec::new();
        for input in self.inputs {
            entries.extend(input.entries(&**self.sink.device())?);
        }
        entries.sort_by(|x, y| x.order(y));
        // The newest write of a (key, version) sorts first; older ones are hidden.
        let before = entries.len();
        entries.dedup_by(|later, first| later.key == first.key && later.version == first.version);
        let hidden = (before - entries.len()) as u64;
        let (mut unread, mut tombstones) = (0, 0);
        if let Some(outside) = &self.outside {
            if entries.iter().any(|e| e.value.is_none()) {
                let before = entries.len();
                (entries, tombstones) = drop_unread(entries, &self.w_set, &self.tree, outside);
                unread = (before - entries.len()) as u64;
            }
        }
        let mut cut = make_pieces(
            &entries,
            &self.w_set,
            &self.tree,
            &self.cfg,
            self.encoding,
            &self.sink,
        )?;
        cut.dropped += unread;
        Ok(Merged {
            cut,
            hidden,
            tombstones,
        })
    }
}

/// The arrays outside a merge, as a tombstone in it sees them.
#[derive(Default)]
pub(super) struct Outside {
    arrays: Vec<Other>,
}

/// One array outside a merge.
struct Other {
    /// The versions that wrote its entries; None: unknown (no counts per version).
    writers: Option<Vec<Version>>,
    /// Its head; None: not read yet, so any key may be in it.
    head: Option<Arc<Head>>,
}

impl Outside {
    /// Whether some array outside may hold an entry of `key` at `ancestry` (a version and its
    /// ancestors, as `VersionTree::ancestry` lists them): one the tombstone of `key` at that
    /// version hides. Such an entry must keep its tombstone even where the merge sees nothing
    /// beneath it: a later merge may bring the two arrays together, under a W that holds a
    /// version the tombstone hid the entry from (arrays of a level merge whenever their W
    /// meet, and merged W are unions). Entries written after the tombstone are never hidden
    /// by it: an ancestor is an internal version, which takes no writes, and a write at the
    /// tombstone's own version is newer, so it wins anyway.
    fn may_hide(&self, key: &[u8], ancestry: &[Version]) -> bool {
        self.arrays.iter().any(|o| {
            let wrote = o
                .writers
                .as_ref()
                .is_none_or(|w| w.iter().any(|v| ancestry.contains(v)));
            wrote && o.head.as_ref().is_none_or(|h| h.may_hold(key))
        })
    }
}

/// `entries` (in `Entry::order`, one per (key, version)) less those no merge of them keeps:
/// the entries live at no version of `w_set`, and the tombstones that hide no kept value
/// (`policy::bare_tombstones`) and nothing `outside` may hold (`Outside::may_hide`; Castle's
/// rule where that can be known). Removed together, so that nothing a dropped tombstone hid
/// comes back. Returns the rest and how many tombstones went.
pub(super) fn drop_unread(
    entries: Vec<Entry>,
    w_set: &[Version],
    tree: &VersionTree,
    outside: &Outside,
) -> (Vec<Entry>, u64) {
    let live = policy::live_sets(&entries, w_set, tree);
    let kept: BTreeSet<usize> = live.iter().flat_map(|(_, l)| l.iter().copied()).collect();
    let mut ancestries: HashMap<Version, Vec<Version>> = HashMap::new();
    let bare: BTreeSet<usize> = policy::bare_tombstones(&entries, &kept, tree)
        .into_iter()
        .filter(|&i| {
            let e = &entries[i];
            let ancestry = ancestries
                .entry(e.version)
                .or_insert_with(|| tree.ancestry(e.version));
            !outside.may_hide(&e.key, ancestry)
        })
        .collect();
    let out = entries
        .into_iter()
        .enumerate()
        .filter(|(i, _)| kept.contains(i) && !bare.contains(i))
        .map(|(_, e)| e)
        .collect();
    (out, bare.len() as u64)
}
