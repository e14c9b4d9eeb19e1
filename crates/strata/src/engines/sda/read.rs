//! Point and range queries at a version v: the buffer, then every array whose W holds v (at
//! most one per level by stratification once merges are done; while a merge runs on its
//! thread, checkpoints' flushes may leave any number at level 0, and nothing here counts on
//! the bound). For each key the candidates are the entries whose
//! version is v or an ancestor; the answer is the one with the largest version (the nearest
//! ancestor, since numbers grow downwards), the newest seq among equals; a tombstone answers
//! "absent".
//!
//! A point query reads one block per array, and only if the array's filter lets the key
//! through. A range query is a merge of cursors, one per array and one per version of v's
//! ancestry with buffered writes (the buffer is indexed by version: other branches' writes
//! are never walked). A cursor walks its array's blocks in the scan's direction (a key's
//! entries share a block, so a cursor's block holds every entry of its front key), reading
//! them in runs, one IO each, of consecutive blocks (an array is one sequential extent: this
//! is where the SDA's layout pays on a range): `SCAN_RUN_BYTES` first, each later run half as
//! long again as the one before, up to `MAX_RUN_GROWTH` times the first; a block is
//! checked and parsed in place (`BlockView`, no copy of its entries) only when the cursor
//! reaches it. The merge takes the nearest key of all fronts, resolves it from every source
//! and hands the answer to the caller's visitor borrowed (the key from one buffer reused, the
//! value where it lies): nothing is allocated per answer. It stops when the visitor says so,
//! so a scan reads about the answers' worth of blocks per array plus the rest of its last
//! run, not the whole range. Only the blocks the bounds fall in compare entries with them.
//! The last run read from each array is kept (`Recent`, as many runs as there are levels,
//! plus one), so that the next page of a paged scan, which starts inside it, reads it again
//! neither whole nor at 2 blocks: its next run doubles the kept one.

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::sync::Mutex;

use super::array::BlockView;
use super::buffer::Writes;
use super::cache::BlockCache;
use super::*;
use crate::kv::{above_lo, below_hi};

/// Bytes of a range scan's first run of blocks from an array, read with one IO: about the size
/// at which a read's transfer time matches its setup time on the disk strata is measured on
/// (fio, O_DIRECT random reads at queue depth 1: s ≈ 55 µs, t ≈ 0.75 µs per KiB, s/t ≈ 73
/// KiB). Smaller runs wait on more IOs; larger ones read more past where a scan stops.
/// `strata bench versioned` at 1,000 versions (ranges of 1,000 at 16 KiB blocks): runs of 64
/// KiB throughout gave 1.91M range elements/s (median of 3) against 1.60M for runs growing
/// 32, 64, 128 KiB, reading 14% fewer blocks.
pub(super) const SCAN_RUN_BYTES: usize = 64 << 10;

/// How many times its first run a scan's run of one array may grow to (for long scans, whose
/// larger reads go faster: 850 against 640 MB/s for 128 against 64 KiB at queue depth 1).
pub(super) const MAX_RUN_GROWTH: usize = 4;

/// How a scan reads: runs of `first` blocks, growing by half of the run they follow up to
/// `MAX_RUN_GROWTH` times `first`; at most `keep` runs kept.
#[derive(Clone, Copy)]
pub(super) struct Reads {
    pub first: usize,
    pub keep: usize,
}

impl Reads {
    /// Blocks of the run after one of `prev` blocks (`None`: the first).
    fn run(self, prev: Option<usize>) -> usize {
        prev.map_or(self.first, |n| {
            (n + n.div_ceil(2)).clamp(self.first, MAX_RUN_GROWTH * self.first)
        })
    }
}

/// Blocks `first..first + blocks.len()` of one array, read with one IO; each is checked and
/// decoded when a cursor first reaches it (a run's last blocks may never be).
struct Run {
    id: NodeId,
    first: usize,
    bytes: Arc<Vec<u8>>,
    blocks: Vec<Option<Arc<BlockView>>>,
}

impl Run {
    fn last(&self) -> usize {
        self.first + self.blocks.len() - 1
    }
}

/// The runs of blocks read last by range scans, newest at the back.
#[derive(Default)]
pub(super) struct Recent {
    runs: VecDeque<Run>,
}

impl Recent {
    /// Block `i` of array `id`, from here or read (and kept, within `reads.keep` runs). A read
    /// takes a run of blocks from `i` towards `bound` (inclusive; below `i` when `reverse`):
    /// `reads.run` of the array's run it follows (the one ending just before `i` in the scan's
    /// direction, as the next page of a scan finds it), or its first.
    /// A block of an array the cache keeps (`level` resident) is taken from the cache if
    /// there, and put there once parsed.
    #[allow(clippy::too_many_arguments)]
    fn block(
        &mut self,
        pager: &Pager,
        cache: &Mutex<BlockCache>,
        head: &Head,
        (id, level): (NodeId, usize),
        i: usize,
        bound: usize,
        reverse: bool,
        reads: Reads,
    ) -> Result<Arc<BlockView>> {
        let cached = {
            let mut cache = lock(cache);
            let cached = cache.keeps(level);
            if let Some(b) = cached.then(|| cache.get(id, i)).flatten() {
                return Ok(b);
            }
            cached
        };
        let at = match self.plan(id, i, bound, reverse, reads) {
            Ok(at) => at,
            Err((first, last)) => {
                let bytes = head.read_run(pager, id, first, last)?;
                self.keep_run(id, first, last, bytes, reads.keep)
            }
        };
        let r = &mut self.runs[at];
        if let Some(b) = &r.blocks[i - r.first] {
            return Ok(b.clone());
        }
        let b = Arc::new(head.run_block(pager, id, &r.bytes, r.first, i)?);
        r.blocks[i - r.first] = Some(b.clone());
        if cached {
            let len = head.blocks[i].part.len as usize;
            lock(cache).admit(id, level, i, Arc::new(b.detached(len)));
        }
        Ok(b)
    }

    /// Where block `i` of array `id` is kept (`Ok`, an index in `runs`), or else the run of
    /// blocks to read for it (`Err((first, last))`), as `block` says.
    fn plan(
        &self,
        id: NodeId,
        i: usize,
        bound: usize,
        reverse: bool,
        reads: Reads,
    ) -> std::result::Result<usize, (usize, usize)> {
        if let Some(at) = self
            .runs
            .iter()
            .position(|r| r.id == id && (r.first..=r.last()).contains(&i))
        {
            return Ok(at);
        }
        let follows = self.runs.iter().find(|r| {
            r.id == id
                && if reverse {
                    r.first == i + 1
                } else {
                    r.last() + 1 == i
                }
        });
        let n = reads.run(follows.map(|r| r.blocks.len()));
        Err(if reverse {
            (i.saturating_sub(n - 1).max(bound), i)
        } else {
            (i, (i + n - 1).min(bound))
        })
    }

    /// Keep blocks `first..=last` of array `id`, read as `bytes`; the index in `runs`.
    fn keep_run(
        &mut self,
        id: NodeId,
        first: usize,
        last: usize,
        bytes: Vec<u8>,
        keep: usize,
    ) -> usize {
        // The array's earlier runs are behind the scan: one run per array is kept, so a
        // scan's cursors (one per level) do not evict each other's.
        self.runs.retain(|r| r.id != id);
        while self.runs.len() >= keep.max(1) {
            self.runs.pop_front();
        }
        self.runs.push_back(Run {
            id,
            first,
            bytes: Arc::new(bytes),
            blocks: vec![None; last + 1 - first],
        });
        self.runs.len() - 1
    }

    /// Read the first runs of a scan's cursors together, as one batch of IOs outstanding at
    /// once (`Pager::read_parts`): each cursor's first block, unless cached or kept, with the
    /// run `block` would read for it. Every cursor reads its first block on the scan's first
    /// step, so this reads nothing the scan would not; it only stops the cursors' first IOs,
    /// one per level, from waiting on each other.
    fn prefetch(
        &mut self,
        pager: &Pager,
        cache: &Mutex<BlockCache>,
        cursors: &[Cursor],
        reads: Reads,
    ) -> Result<()> {
        let mut plans = Vec::new();
        for c in cursors {
            let (id, level) = c.id;
            let Some(i) = c.next else { continue };
            let in_cache = {
                let cache = lock(cache);
                cache.keeps(level) && cache.contains(id, i)
            };
            if in_cache {
                continue;
            }
            match self.plan(id, i, c.last, c.reverse, reads) {
                Err((first, last)) => plans.push((c, first, last)),
                // Kept already: moved to the back, so the runs read now do not evict it.
                Ok(at) => {
                    if let Some(r) = self.runs.remove(at) {
                        self.runs.push_back(r);
                    }
                }
            }
        }
        if plans.len() < 2 || plans.len() > reads.keep {
            return Ok(());
        }
        let reqs: Vec<_> = plans
            .iter()
            .map(|(c, first, last)| c.head.run_extent(c.id.0, *first, *last))
            .collect();
        let runs = pager.read_parts(&reqs)?;
        for ((c, first, last), bytes) in plans.into_iter().zip(runs) {
            self.keep_run(c.id.0, first, last, bytes, reads.keep);
        }
        Ok(())
    }

    /// Bytes of the runs kept.
    pub(super) fn bytes(&self) -> usize {
        self.runs.iter().map(|r| r.bytes.len()).sum()
    }

    /// Forget the blocks of a freed array.
    pub(super) fn forget(&mut self, id: NodeId) {
        self.runs.retain(|r| r.id != id);
    }
}

/// The best candidate so far for one key of a point query: (version, seq, value).
type Best = (Version, u64, Option<Vec<u8>>);

/// Keep (version, seq, value) if it is nearer than the best so far (the value copied only then).
fn consider(best: &mut Option<Best>, version: Version, seq: u64, value: Option<&[u8]>) {
    if best
        .as_ref()
        .is_none_or(|&(bv, bs, _)| (version, seq) > (bv, bs))
    {
        *best = Some((version, seq, value.map(<[u8]>::to_vec)));
    }
}

impl Sda {
    /// How scans read: a first run of `SCAN_RUN_BYTES`, but no more than 1/64 of the memory
    /// (a scan keeps a run per level it reads, and each may grow to `MAX_RUN_GROWTH` times
    /// it); one run kept per level a scan reads, and one more.
    pub(super) fn reads(&self) -> Reads {
        let bytes = SCAN_RUN_BYTES.min(self.cfg.cache_bytes / 64);
        Reads {
            first: (bytes / self.cfg.block_bytes).max(1),
            keep: self.levels.len() + 1,
        }
    }

    /// The arrays serving `v` (one per level, but for level 0 while a merge runs), with their
    /// levels.
    fn serving(&self, v: Version) -> Vec<(NodeId, usize)> {
        let mut out = Vec::new();
        for (level, arrays) in self.levels.iter().enumerate() {
            out.extend(arrays.iter().filter(|a| a.serves(v)).map(|a| (a.id, level)));
        }
        out
    }

    pub(super) fn point(&self, v: Version, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.tree.check_live(v)?;
        let ancestry = self.tree.ancestry(v);
        let mut best = None;
        // Nearest first: the first buffered version found holds the buffers' best (the
        // buffer's write, newer, over the frozen one's: `consider` takes the newer seq).
        for &x in &ancestry {
            let mut found = false;
            for buffer in self.buffers() {
                if let Some((seq, value)) = buffer.get(x, key) {
                    consider(&mut best, x, *seq, value.as_deref());
                    found = true;
                }
            }
            if found {
                break;
            }
        }
        let ancestry = Ancestry::from(ancestry);
        self.fit_cache();
        for (id, level) in self.serving(v) {
            let head = self.head(id)?;
            if !head.may_hold(key) {
                continue;
            }
            let i = head.block_for(key);
            let (cached, hit) = {
                let mut cache = lock(&self.cache);
                let cached = cache.keeps(level);
                (cached, cached.then(|| cache.get(id, i)).flatten())
            };
            let block = match hit {
                Some(b) => b,
                None => {
                    let b = Arc::new(head.read_block(&self.pager, id, i)?);
                    if cached {
                        lock(&self.cache).admit(id, level, i, b.clone());
                    }
                    b
                }
            };
            // Entries of a key sort by version descending: the first visible is the nearest.
            if let Some(i) = (0..block.len())
                .find(|&i| block.key(i) == key && ancestry.contains(&block.version(i)))
            {
                consider(&mut best, block.version(i), block.seq(i), block.value(i));
            }
        }
        Ok(best.and_then(|(_, _, value)| value))
    }

    /// Hand each entry of `v` within (`lo`, `hi`) to `visit`, in the scan's direction, until
    /// it returns false (`VersionedEngine::scan_with`). Per answer nothing is allocated: the
    /// nearest front key is copied into one buffer reused, and the winning value is handed
    /// over where it lies (a block of a cursor, or the buffer).
    ///
    /// The kept runs (`Recent`) are the scan's while it walks: taken out at the start and put
    /// back at the end, so that scans side by side read without waiting for each other (one
    /// starting meanwhile finds none kept).
    pub(super) fn scan(
        &self,
        v: Version,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        reverse: bool,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        let mut recent = std::mem::take(&mut *lock(&self.recent));
        let walked = self.walk(&mut recent, v, lo, hi, reverse, visit);
        let bytes = recent.bytes();
        *lock(&self.recent) = recent;
        self.recent_bytes
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
        walked
    }

    /// `scan` with the kept runs in hand.
    fn walk(
        &self,
        recent: &mut Recent,
        v: Version,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        reverse: bool,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        self.tree.check_live(v)?;
        if empty_range(lo, hi) {
            return Ok(());
        }
        let chain = self.tree.ancestry(v);
        self.fit_cache();
        let mut cursors = Vec::new();
        for (id, level) in self.serving(v) {
            let head = self.head(id)?;
            if let Some(c) = Cursor::new((id, level), head, lo, hi, reverse) {
                cursors.push(c);
            }
        }
        // The buffer's writes within the bounds of the versions v sees, one source per such
        // version that has any (the buffer holds every leaf's writes; the others' are never
        // walked), in the scan's direction.
        // With a flush running, the frozen buffer's writes are sources too (older by seq).
        let mut buffered: Vec<(Version, std::iter::Peekable<Writes>)> = chain
            .iter()
            .flat_map(|&x| {
                self.buffers()
                    .filter(move |b| b.holds(x))
                    .map(move |b| (x, b.range(x, lo, hi, reverse).peekable()))
            })
            .collect();
        let ancestry = Ancestry::from(chain);
        let reads = self.reads();
        let (pager, cache) = (&self.pager, &self.cache);
        recent.prefetch(pager, cache, &cursors, reads)?;
        // The order keys come in: a key before another in the scan's direction is `first`.
        let first = if reverse {
            Ordering::Greater
        } else {
            Ordering::Less
        };
        let mut key = Vec::new();
        // The cursors at the nearest key, in order. Not a bitmask: one array per level
        // serves a version once merges are done, but checkpoints flush without waiting for
        // a running merge, so level 0 may hold any number of arrays meanwhile.
        let mut at_key: Vec<usize> = Vec::new();
        loop {
            // Every cursor at its front (a spent one dropped: it has nothing more), then the
            // nearest front key, copied once into `key`, and the cursors at it, each front
            // compared once.
            let mut i = 0;
            while i < cursors.len() {
                if cursors[i].ready || cursors[i].front(pager, recent, cache, reads, &ancestry)? {
                    i += 1;
                } else {
                    cursors.swap_remove(i);
                }
            }
            let mut nearest: Option<&[u8]> = None;
            for (_, src) in &mut buffered {
                if let Some(&(k, _)) = src.peek() {
                    if nearest.is_none_or(|x| k.as_slice().cmp(x) == first) {
                        nearest = Some(k.as_slice());
                    }
                }
            }
            at_key.clear();
            for (ci, c) in cursors.iter().enumerate() {
                let k = c.current_key();
                match nearest.map(|x| k.cmp(x)) {
                    Some(Ordering::Equal) => at_key.push(ci),
                    Some(o) if o != first => {}
                    _ => {
                        nearest = Some(k);
                        at_key.clear();
                        at_key.push(ci);
                    }
                }
            }
            let Some(k) = nearest else {
                return Ok(());
            };
            key.clear();
            key.extend_from_slice(k);
            // The nearest write of `key` v sees: (version, seq, where its value lies).
            let mut best: Option<(Version, u64, Found)> = None;
            for (x, src) in &mut buffered {
                if let Some((_, (seq, value))) = src.next_if(|(k, _)| **k == key) {
                    take(&mut best, *x, *seq, Found::Buffer(value.as_deref()));
                }
            }
            for &ci in &at_key {
                let c = &mut cursors[ci];
                // Every entry of the key the scan sees (nearest first forward, last in
                // reverse). A key's entries share a block: no read is needed to pass them, and
                // the block passed stays the cursor's until its next `front`.
                loop {
                    let (b, i) = (&c.block, c.index());
                    take(&mut best, b.version(i), b.seq(i), Found::Block(ci, i));
                    c.step();
                    if !c.seen_in_block(&ancestry) || c.current_key() != key.as_slice() {
                        break;
                    }
                }
            }
            let value = match best {
                Some((_, _, Found::Buffer(value))) => value,
                Some((_, _, Found::Block(ci, i))) => cursors[ci].block.value(i),
                None => None,
            };
            if let Some(value) = value {
                if !visit(&key, value) {
                    return Ok(());
                }
            }
        }
    }
}

/// Where the best candidate for a key lies: a buffered write's value (None: a tombstone), or
/// entry `.1` of the block cursor `.0` holds.
#[derive(Clone, Copy)]
enum Found<'a> {
    Buffer(Option<&'a [u8]>),
    Block(usize, usize),
}

/// Keep (version, seq, where) if it is nearer than the best so far.
fn take<'a>(
    best: &mut Option<(Version, u64, Found<'a>)>,
    version: Version,
    seq: u64,
    at: Found<'a>,
) {
    if best
        .as_ref()
        .is_none_or(|&(bv, bs, _)| (version, seq) > (bv, bs))
    {
        *best = Some((version, seq, at));
    }
}

/// A version and its ancestors, the versions whose entries a read at it sees, asked about for
/// every entry a scan passes: a bitset by version number while the version is below
/// `BITSET_BELOW` (at most 8 KiB, one bit test per entry), else sorted for a binary search.
enum Ancestry {
    Bits(Vec<u64>),
    Sorted(Vec<Version>),
}

/// Versions below this get the bitset (8 KiB of bits at most).
const BITSET_BELOW: Version = 1 << 16;

impl Ancestry {
    /// From a version's ancestry chain (`VersionTree::ancestry`: the version first, and every
    /// ancestor's number below it).
    fn from(mut chain: Vec<Version>) -> Ancestry {
        match chain.first() {
            Some(&v) if v < BITSET_BELOW => {
                let mut bits = vec![0u64; v as usize / 64 + 1];
                for x in chain {
                    bits[x as usize / 64] |= 1 << (x % 64);
                }
                Ancestry::Bits(bits)
            }
            _ => {
                chain.sort_unstable();
                Ancestry::Sorted(chain)
            }
        }
    }

    fn contains(&self, x: &Version) -> bool {
        match self {
            Ancestry::Bits(bits) => bits
                .get((*x / 64) as usize)
                .is_some_and(|w| w & (1 << (x % 64)) != 0),
            Ancestry::Sorted(a) => a.binary_search(x).is_ok(),
        }
    }
}

/// Whether no key lies within (`lo`, `hi`).
fn empty_range(lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> bool {
    match (lo, hi) {
        (Bound::Included(l), Bound::Included(h)) => l > h,
        (Bound::Included(l) | Bound::Excluded(l), Bound::Included(h) | Bound::Excluded(h)) => {
            l >= h
        }
        _ => false,
    }
}

/// One array's entries within a scan's bounds that its version can see, a block at a time
/// in the scan's direction: the block being walked (shared with `Recent`, not copied) and the
/// place in it. Only the blocks the bounds fall in are checked against them, each entry
/// until one passes: the blocks between hold keys within the bounds only, and once an entry
/// lies past the far bound, so do all the cursor's later ones.
struct Cursor {
    /// The array and its level.
    id: (NodeId, usize),
    head: Arc<Head>,
    /// Blocks still to read: `next` first, towards `last` (inclusive), then none.
    next: Option<usize>,
    last: usize,
    reverse: bool,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    /// The blocks `lo` and `hi` fall in.
    lo_block: usize,
    hi_block: usize,
    /// Whether entries of `block` from the place on must still be checked against `lo`,
    /// against `hi`.
    check_lo: bool,
    check_hi: bool,
    block: Arc<BlockView>,
    /// Entries of `block` not yet passed: forward, `at..`; in reverse, `..at`.
    at: usize,
    /// Whether the entry at the place is one the scan sees (`seen_in_block` found it).
    ready: bool,
}

impl Cursor {
    /// None if no block of the array can hold a key of the bounds.
    fn new(
        id: (NodeId, usize),
        head: Arc<Head>,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        reverse: bool,
    ) -> Option<Cursor> {
        let first = head.firsts.get(0);
        let below = |k: &[u8]| k < first;
        let outside = match hi {
            Bound::Included(k) => below(k),
            Bound::Excluded(k) => k <= first,
            Bound::Unbounded => false,
        } || match lo {
            Bound::Included(k) => k > head.largest.as_slice(),
            Bound::Excluded(k) => k >= head.largest.as_slice(),
            Bound::Unbounded => false,
        };
        if outside {
            return None;
        }
        // Blocks before `block_for(k)` hold keys below its first key, which is at most k;
        // blocks after it, keys above k.
        let from = match lo {
            Bound::Included(k) | Bound::Excluded(k) => head.block_for(k),
            Bound::Unbounded => 0,
        };
        let to = match hi {
            Bound::Included(k) | Bound::Excluded(k) => head.block_for(k),
            Bound::Unbounded => head.blocks.len() - 1,
        };
        let (next, last) = if reverse { (to, from) } else { (from, to) };
        Some(Cursor {
            id,
            head,
            next: Some(next),
            last,
            reverse,
            lo: lo.map(<[u8]>::to_vec),
            hi: hi.map(<[u8]>::to_vec),
            lo_block: from,
            hi_block: to,
            check_lo: false,
            check_hi: false,
            block: Arc::new(BlockView::empty()),
            at: 0,
            ready: false,
        })
    }

    /// The index in `block` of the entry at the cursor's place (after `seen_in_block` said
    /// there is one).
    fn index(&self) -> usize {
        if self.reverse {
            self.at - 1
        } else {
            self.at
        }
    }

    /// The key of the entry at the cursor's place.
    fn current_key(&self) -> &[u8] {
        self.block.key(self.index())
    }

    /// Pass the entry at the cursor's place.
    fn step(&mut self) {
        self.ready = false;
        if self.reverse {
            self.at -= 1;
        } else {
            self.at += 1;
        }
    }

    /// Nothing more: the rest of the block and the blocks after it lie past the far bound.
    fn finish(&mut self) {
        self.next = None;
        self.at = if self.reverse { 0 } else { self.block.len() };
    }

    /// Pass the entries of the current block the scan cannot see (another branch's, or
    /// outside the bounds); whether one it sees is left in the block (then `ready`).
    fn seen_in_block(&mut self, ancestry: &Ancestry) -> bool {
        loop {
            let left = if self.reverse {
                self.at > 0
            } else {
                self.at < self.block.len()
            };
            if !left {
                return false;
            }
            let i = self.index();
            if self.check_lo || self.check_hi {
                let key = self.block.key(i);
                // The near bound passes entries until one is within it; the far one ends the
                // cursor at the first beyond it.
                if self.check_lo && !above_lo(key, self.lo.as_ref().map(Vec::as_slice)) {
                    if self.reverse {
                        self.finish();
                        return false;
                    }
                    self.step();
                    continue;
                }
                if self.check_hi && !below_hi(key, self.hi.as_ref().map(Vec::as_slice)) {
                    if !self.reverse {
                        self.finish();
                        return false;
                    }
                    self.step();
                    continue;
                }
                // Within both: so are the later entries, on the near bound's side.
                if self.reverse {
                    self.check_hi = false;
                } else {
                    self.check_lo = false;
                }
            }
            if ancestry.contains(&self.block.version(i)) {
                self.ready = true;
                return true;
            }
            self.step();
        }
    }

    /// Move to the next entry visible at the scan's version (in `ancestry`), reading blocks
    /// as needed; false once there is none.
    fn front(
        &mut self,
        pager: &Pager,
        recent: &mut Recent,
        cache: &Mutex<BlockCache>,
        reads: Reads,
        ancestry: &Ancestry,
    ) -> Result<bool> {
        if self.ready {
            return Ok(true);
        }
        while !self.seen_in_block(ancestry) {
            let Some(i) = self.next else {
                return Ok(false);
            };
            self.next = if i == self.last {
                None
            } else if self.reverse {
                Some(i - 1)
            } else {
                Some(i + 1)
            };
            self.block = recent.block(
                pager,
                cache,
                &self.head,
                self.id,
                i,
                self.last,
                self.reverse,
                reads,
            )?;
            self.at = if self.reverse { self.block.len() } else { 0 };
            self.check_lo = i == self.lo_block && self.lo != Bound::Unbounded;
            self.check_hi = i == self.hi_block && self.hi != Bound::Unbounded;
        }
        Ok(true)
    }
}
