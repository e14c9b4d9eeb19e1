//! The stratified doubling array (seed 003's SDA, the simplest stratified B-tree): a versioned
//! dictionary on the shared substrate. Writes go to a small in-memory buffer; a full buffer is
//! flushed as arrays of level 0; arrays of one level whose version sets intersect merge, and
//! a merged array that is not dense enough is split by subtrees of versions (docs/versioned.md).
//!
//! An array is an immutable sorted run of (key, version, seq, value | tombstone) entries
//! (`array`), tagged in the manifest with the set W of live versions it serves. Invariants
//! (checked by `check`; density and stratification also in debug builds after every merge):
//! - coverage: for every live version v and key k, the entry a read at v must return (the
//!   nearest ancestor-or-self's newest write of k) is in the buffer or in an array whose W
//!   holds v; so a read consults only those arrays, at most one per level;
//! - stratification: the arrays of one level have disjoint W (`policy`);
//! - density: every version of an array's W sees at least a third of its entries;
//! - doubling: an array sits at the level of its size or above, never below;
//! - W holds live versions only; an array whose W empties is freed at once; one that a
//!   version delete left with an eighth or more of its entries unreachable (by its counts of
//!   entries per version, kept in the manifest) is rewritten by the next `settle` or
//!   checkpoint (`policy::next_reclaim`);
//! - every array is referenced by exactly one manifest entry; arrays freed by a merge are
//!   released by the pager once a checkpoint no longer needs them (copy-on-write).
//!
//! Durability is the facade's (`VersionedDb`): its log holds what the buffer holds and every
//! version-tree change. A checkpoint flushes the buffer and commits the manifest (the tree and
//! the levels); arrays written between checkpoints are referenced only by the next manifest,
//! so a crash before it leaves them unreferenced and the log replays their writes.
//!
//! Merges run between operations (`settle`), on a thread of their own, the writer running
//! some beside it once two flushes' merges are pending (`merger`;
//! `VersionedOptions::background_merges`, the default), or all on the writer's. With
//! the thread, a checkpoint does not wait for merges: its manifest may hold a level's arrays
//! whose W meet (a running merge's inputs, or a pair not merged yet), which the next open
//! merges; `finish_merges` (a close) runs them all first. Inline, a checkpoint runs every
//! merge due first. With the thread, a full buffer is flushed on a thread of its own too,
//! frozen and read beside the next one until its arrays are in (`flusher`); a checkpoint
//! waits for that flush. Files, one concern each: `config`, `format`
//! (metadata and manifest), `array` (an array on disk, its builder, its blocks parsed in
//! place), `buffer` (the write buffer, by version), `policy` (levels, merges, liveness,
//! splits: pure), `merge` (flush and merge IO, a merge's work owned so it can run anywhere),
//! `merger` (merges on their own thread), `flusher` (flushes on theirs), `read` (point and
//! range queries), `cache` (the
//! block cache of the smallest levels), `check`, `dump`, `salvage` (the tolerant read and
//! the import a salvage makes).

pub(crate) mod array;
mod buffer;
mod cache;
mod check;
mod config;
mod dump;
mod flusher;
mod format;
mod merge;
mod merger;
pub(crate) mod policy;
mod read;
mod salvage;

pub use config::Config;

use std::collections::HashMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::engine::versioned::{VersionedEngine, VersionedReads};
use crate::engine::versions::{Version, VersionTree};
use crate::engine::{CheckReport, EngineStats};
use crate::error::{Error, Result};
use crate::storage::{Checkpoint, Commit, Device, NodeId, Pager};
use array::Head;
use buffer::Buffer;
use format::Counters;
use policy::ArrayInfo;

/// The first byte of the engine metadata in the superblock.
pub const ENGINE_TAG: u8 = 4;

/// No SDA has more levels: level 48 holds arrays of 2^48 level-0 arrays.
pub const MAX_LEVELS: usize = 48;

pub struct Sda {
    pager: Pager,
    cfg: Config,
    tree: VersionTree,
    buffer: Buffer,
    buffered_bytes: usize,
    levels: Vec<Vec<ArrayInfo>>,
    /// Heads of arrays read so far (their filter and block index), by id, and their memory.
    /// Readers side by side (`VersionedReads`) share these three; none of their locks is
    /// held across a device read, and none is taken while another is held.
    heads: Mutex<Heads>,
    /// Blocks range scans read last (`read::Recent`). A scan takes them out for its walk and
    /// puts its own back, so scans side by side each keep their runs while they last; the
    /// last to finish leaves its runs for the next page.
    recent: Mutex<read::Recent>,
    /// Bytes of the runs `recent` held when a scan last put them back (`fit_cache` reads it
    /// while a scan has them out).
    recent_bytes: AtomicUsize,
    /// Blocks of the smallest levels, in the memory `cfg.cache_bytes` leaves (`cache`).
    cache: Mutex<cache::BlockCache>,
    manifest: NodeId,
    next_seq: u64,
    counters: Counters,
    /// Whether a merge or a reclaim may be due: set by whatever adds an array or removes a
    /// version from a W (a clone adds a version only beside one already there, so it makes
    /// no two arrays of a level meet), cleared once `merge_due` finds nothing left. Spares
    /// `settle`, called after every write, a look at every level's sets.
    unsettled: bool,
    /// How new arrays encode their entries: always varint, but for tests that make arrays of
    /// the first format to see them read and merged.
    encoding: array::Encoding,
    /// Merges run on a thread of their own (`merger`), else inline on the writer.
    background: bool,
    /// A copy of `tree` shared with merges (`merge::MergeWork`), made when the first merge
    /// after a change to the tree asks for it: with 1,000 versions a copy per merge cost more
    /// than many of the merges.
    tree_copy: Option<Arc<VersionTree>>,
    /// The merge thread, and the merge running on it.
    worker: Option<merger::Worker<merge::MergeWork, merge::Merged>>,
    inflight: Option<merger::InFlight>,
    /// The flush thread, and the buffer it is flushing (`flusher`).
    flusher: Option<merger::Worker<flusher::FlushWork, merge::Cut>>,
    frozen: Option<flusher::Frozen>,
    /// Flushes run on their own thread, and the freezes that waited for the one before.
    background_flushes: u64,
    flush_waits: u64,
    flush_wait_nanos: u64,
    /// Merges run on their own thread, and the flushes that waited for merges (`merger`).
    background_merges: u64,
    stalls: u64,
    /// Merges the writer ran between flushes beside the thread's (`merger::pace`).
    paced_merges: u64,
    stall_nanos: u64,
    /// Flushes since the levels were last stratified with no merge running (`merger`).
    lag: u32,
    /// Bytes written since the writer last looked for a merge of its own (`merger::pace`).
    paced: usize,
    /// Tombstones merges dropped as hiding nothing, since the open.
    dropped_tombstones: u64,
    /// Tests: merges installed with tree changes replayed on them.
    #[cfg(test)]
    replayed: u64,
}

/// The heads of arrays read so far, and the memory they take (`Head::charge`), kept as they
/// come and go.
#[derive(Default)]
struct Heads {
    by_id: HashMap<NodeId, Arc<Head>>,
    bytes: usize,
}

impl Heads {
    fn keep(&mut self, id: NodeId, h: Arc<Head>) {
        self.bytes += h.charge();
        if let Some(old) = self.by_id.insert(id, h) {
            self.bytes -= old.charge();
        }
    }
}

/// A lock on state readers share; a reader that panicked left nothing half changed that the
/// next one cannot use (maps and counters), so a poisoned lock is taken as it is.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a buffered entry costs against `buffer_bytes`.
fn entry_bytes(key: &[u8], value: &Option<Vec<u8>>) -> usize {
    key.len() + value.as_ref().map_or(0, |v| v.len()) + 32
}

impl Sda {
    pub fn create(mut pager: Pager, cfg: Config) -> Result<Sda> {
        cfg.check()?;
        let manifest = pager.new_id();
        let mut t = Sda::from_parts(
            pager,
            cfg,
            manifest,
            1,
            (Counters::default(), VersionTree::new(), Vec::new()),
        );
        t.checkpoint(0)?;
        Ok(t)
    }

    pub fn open(pager: Pager, cp: &Checkpoint) -> Result<Sda> {
        let (cfg, manifest, next_seq, version) =
            format::decode_meta(&cp.engine_meta, pager.file_name())?;
        let parts = pager.read_decoded(manifest, array::KIND_MANIFEST, "SDA manifest", |p| {
            format::decode_manifest(p, version)
        })?;
        Ok(Sda::from_parts(pager, cfg, manifest, next_seq, parts))
    }

    fn from_parts(
        pager: Pager,
        cfg: Config,
        manifest: NodeId,
        next_seq: u64,
        (counters, tree, levels): format::Manifest,
    ) -> Sda {
        let mut levels = levels;
        for a in levels.iter_mut().flatten() {
            a.dead = policy::unreachable(a, &tree);
        }
        Sda {
            pager,
            cfg,
            tree,
            buffer: Buffer::default(),
            buffered_bytes: 0,
            levels,
            heads: Mutex::default(),
            recent: Mutex::default(),
            recent_bytes: AtomicUsize::new(0),
            cache: Mutex::default(),
            manifest,
            next_seq,
            counters,
            unsettled: true,
            encoding: array::Encoding::Varint,
            background: false,
            tree_copy: None,
            worker: None,
            inflight: None,
            flusher: None,
            frozen: None,
            background_flushes: 0,
            flush_waits: 0,
            flush_wait_nanos: 0,
            background_merges: 0,
            stalls: 0,
            paced_merges: 0,
            stall_nanos: 0,
            lag: 0,
            paced: 0,
            dropped_tombstones: 0,
            #[cfg(test)]
            replayed: 0,
        }
    }

    /// Run merges on a thread of their own (`merger`), or inline on the writer (the engine's
    /// default, so that a test sees every merge at the point it is due;
    /// `VersionedOptions::background_merges` turns them on).
    pub fn background(mut self, on: bool) -> Sda {
        self.background = on;
        self
    }

    pub fn config(&self) -> Config {
        self.cfg
    }

    /// Memory for heads, kept runs and cached blocks from now on (an open's choice: the
    /// superblock does not keep it).
    pub fn set_cache_bytes(&mut self, bytes: usize) {
        self.cfg.cache_bytes = bytes;
        self.fit_cache();
    }

    /// Fit the block cache to what the heads and the kept runs leave of `cache_bytes`: the
    /// smallest levels whose arrays all fit stay resident (`cache::resident_levels`).
    fn fit_cache(&self) {
        let taken = lock(&self.heads).bytes + self.recent_bytes.load(Relaxed);
        let budget = self.cfg.cache_bytes.saturating_sub(taken);
        lock(&self.cache).set_resident(cache::resident_levels(&self.levels, budget as u64));
    }

    /// The block cache, to a caller holding the engine alone.
    fn cache_mut(&mut self) -> &mut cache::BlockCache {
        self.cache.get_mut().unwrap_or_else(|e| e.into_inner())
    }

    /// Merge everything into the fewest dense arrays (`merge::compact_all`); what no live
    /// version reads is gone afterwards.
    pub fn compact(&mut self) -> Result<()> {
        self.merge_due()?;
        self.compact_all()
    }

    fn write(&mut self, v: Version, key: &[u8], value: Option<Vec<u8>>) -> Result<()> {
        self.tree.check_writable(v)?;
        self.buffered_bytes += entry_bytes(key, &value);
        self.paced += entry_bytes(key, &value);
        let old = self.buffer.insert(v, key, (self.next_seq, value));
        if let Some((_, old)) = old {
            self.buffered_bytes -= entry_bytes(key, &old);
        }
        self.next_seq += 1;
        Ok(())
    }

    fn arrays(&self) -> impl Iterator<Item = &ArrayInfo> {
        self.levels.iter().flatten()
    }

    /// The head of array `id`, read once and kept.
    fn head(&self, id: NodeId) -> Result<Arc<Head>> {
        if let Some(h) = lock(&self.heads).by_id.get(&id) {
            return Ok(h.clone());
        }
        // Read without the lock; two readers may both read it, and the first kept stays.
        let h = Arc::new(Head::load(&self.pager, id)?);
        let mut heads = lock(&self.heads);
        if let Some(kept) = heads.by_id.get(&id) {
            return Ok(kept.clone());
        }
        heads.keep(id, h.clone());
        Ok(h)
    }

    fn keep_head(&mut self, id: NodeId, h: Arc<Head>) {
        self.heads
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .keep(id, h);
    }

    /// Forget array `id`: its extent is reused once no durable checkpoint needs it.
    fn free_array(&mut self, id: NodeId) {
        let heads = self.heads.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(h) = heads.by_id.remove(&id) {
            heads.bytes -= h.charge();
        }
        let recent = self.recent.get_mut().unwrap_or_else(|e| e.into_inner());
        recent.forget(id);
        self.recent_bytes.store(recent.bytes(), Relaxed);
        self.cache_mut().forget(id);
        self.pager.free(id);
    }
}

impl VersionedReads for Sda {
    fn version_tree(&self) -> &VersionTree {
        &self.tree
    }

    /// Heads, kept runs and cached blocks stay within `cache_bytes` as reads go (`fit_cache`);
    /// nothing is left for the writer to evict.
    fn over_budget(&self) -> bool {
        false
    }

    fn get_at_shared(&self, v: Version, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.point(v, key)
    }

    fn scan_with_shared(
        &self,
        v: Version,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        reverse: bool,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        self.scan(v, lo, hi, reverse, visit)
    }
}

impl VersionedEngine for Sda {
    fn name(&self) -> &'static str {
        "sda"
    }

    fn versions(&self) -> &VersionTree {
        &self.tree
    }

    fn shared(&self) -> &dyn VersionedReads {
        self
    }

    fn clone_version(&mut self, v: Version) -> Result<Version> {
        let w = self.tree.clone_version(v)?;
        self.tree_copy = None;
        self.tree_changed(merger::TreeEvent::Clone(v, w));
        // The clone sees what `v` sees, so it joins every array serving `v` (densities are
        // unchanged); `w` is the largest version, so the sets stay sorted.
        for a in self.levels.iter_mut().flatten() {
            if a.serves(v) {
                a.versions.push(w);
            }
        }
        Ok(w)
    }

    fn put_at(&mut self, v: Version, key: &[u8], value: &[u8]) -> Result<()> {
        self.write(v, key, Some(value.to_vec()))
    }

    fn delete_at(&mut self, v: Version, key: &[u8]) -> Result<()> {
        self.write(v, key, None)
    }

    fn delete_version(&mut self, v: Version) -> Result<()> {
        let removed = self.tree.delete(v)?;
        self.tree_copy = None;
        self.tree_changed(merger::TreeEvent::Delete(v));
        self.unsettled = true;
        let mut freed = Vec::new();
        for level in &mut self.levels {
            for a in level.iter_mut() {
                if a.serves(v) {
                    a.versions.retain(|&x| x != v);
                    // Only an array that served `v` can lose readers of its entries; a
                    // merge reclaims them once they are enough (`policy::next_reclaim`).
                    a.dead = policy::unreachable(a, &self.tree);
                }
            }
            level.retain(|a| {
                if a.versions.is_empty() {
                    freed.push(a.id);
                }
                !a.versions.is_empty()
            });
        }
        for id in freed {
            // A running merge's input is freed when the merge is installed.
            if !self.merging(id) {
                self.free_array(id);
            }
        }
        // Buffered writes of versions the tree removed are unreachable: drop them now.
        if !removed.is_empty() {
            self.buffer.remove_versions(&removed);
            self.buffered_bytes = self
                .buffer
                .iter()
                .map(|(k, _, (_, val))| entry_bytes(k, val))
                .sum();
        }
        Ok(())
    }

    fn begin_checkpoint(&mut self, wal_seq: u64) -> Result<Commit> {
        // The manifest must hold every write the checkpoint covers: the frozen buffer's too.
        self.reap_flush(true)?;
        if !self.buffer.is_empty() {
            self.flush()?;
            self.lag += 1;
        }
        if self.background {
            // Merges need not be done: the manifest lists the arrays as they stand, a running
            // merge's inputs among them (its output, unreferenced, is garbage to a crash), and
            // an open merges what is due. Waiting for them here held the writer for as long
            // as the cascade a flush starts. But an input a version delete took out of the
            // levels stays in the pager's table until the install frees it: a manifest must
            // not leave it there unreachable, so that merge is waited for.
            if self
                .busy()
                .iter()
                .any(|&id| !self.arrays().any(|a| a.id == id))
            {
                self.reap(true)?;
            }
            self.merge_step()?;
        } else {
            self.merge_due()?;
        }
        let manifest = format::encode_manifest(&self.counters, &self.tree, &self.levels);
        self.pager
            .write_block(self.manifest, array::KIND_MANIFEST, &manifest)?;
        let meta = format::encode_meta(&self.cfg, self.manifest, self.next_seq);
        self.pager.begin_commit(wal_seq, meta, Vec::new())
    }

    fn finish_checkpoint(&mut self, c: Commit) -> Result<()> {
        self.pager.finish_commit(c)
    }

    fn finish_merges(&mut self) -> Result<()> {
        self.merge_due()
    }

    fn relocate_tail(&mut self) -> Result<u64> {
        // A running merge or flush writes its output into extents it took from the allocator,
        // which may be in the tail the next checkpoint gives back: it is installed first.
        self.reap(true)?;
        self.reap_flush(true)?;
        self.pager.relocate_tail()
    }

    fn release_free(&mut self) -> Result<u64> {
        self.reap(true)?;
        self.reap_flush(true)?;
        self.pager.release_free()
    }

    fn settle(&mut self) -> Result<()> {
        if !self.background {
            if self.buffered_bytes >= self.cfg.buffer_bytes {
                self.flush()?;
            }
            return self.merge_due();
        }
        if self.buffered_bytes >= self.cfg.buffer_bytes {
            self.before_flush()?;
            self.flush_in_background()?;
            self.lag += 1;
        }
        self.merge_step()?;
        self.pace()
    }

    fn stats(&self) -> EngineStats {
        let c = &self.counters;
        let cache = lock(&self.cache);
        let entries: u64 = self.arrays().map(|a| a.entries).sum();
        EngineStats {
            engine: "sda",
            node_size: self.cfg.block_bytes as u64,
            geometry_origin: "given in the options",
            live_keys: entries,
            live_bytes: self.arrays().map(|a| a.bytes).sum(),
            height: self.levels.len() as u32,
            leaf_nodes: self.arrays().count() as u64,
            detail: vec![
                ("levels", self.levels.len() as u64),
                ("arrays", self.arrays().count() as u64),
                ("entries", entries),
                ("buffered_entries", self.buffer.len() as u64),
                ("live_versions", self.tree.live().count() as u64),
                ("flushes", c.flushes),
                ("merges", c.merges),
                ("reclaims", c.reclaims),
                (
                    "unreachable_entries",
                    self.arrays().map(|a| a.dead).sum::<u64>(),
                ),
                ("splits", c.splits),
                ("dropped_entries", c.dropped),
                ("dropped_tombstones", self.dropped_tombstones),
                ("merge_read_bytes", c.merge_read_bytes),
                ("merge_write_bytes", c.merge_write_bytes),
                ("background_merges", self.background_merges),
                ("background_flushes", self.background_flushes),
                ("flush_waits", self.flush_waits),
                ("flush_wait_ms", self.flush_wait_nanos / 1_000_000),
                ("stalls", self.stalls),
                ("paced_merges", self.paced_merges),
                ("stall_ms", self.stall_nanos / 1_000_000),
                ("cached_levels", cache.resident() as u64),
                ("cached_bytes", cache.bytes() as u64),
                ("cache_hits", cache.hits),
                ("cache_misses", cache.misses),
            ],
            checkpoints: self.pager.last_checkpoint().seq,
            checkpoint_wal_seq: self.pager.last_checkpoint().wal_seq,
            referenced_bytes: self.pager.referenced_bytes(),
            free_bytes: self.pager.free_bytes(),
            ..EngineStats::default()
        }
    }

    fn dump(&mut self, levels: u32) -> Result<crate::engine::dump::Dump> {
        self.dump_levels(levels)
    }

    fn check(&mut self) -> Result<CheckReport> {
        // The levels are stratified only once no merge is running or due.
        self.merge_due()?;
        self.verify()
    }

    fn device(&self) -> &Arc<dyn Device> {
        self.pager.device()
    }
}

impl Drop for Sda {
    fn drop(&mut self) {
        self.abandon_flush();
        self.abandon_merge();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::versioned::VersionedMap;
    use crate::engine::versions::ROOT;
    use crate::storage::sim::{SimDevice, SimDisk};
    use std::ops::Bound::{Excluded, Included, Unbounded};

    fn fresh(cfg: Config) -> Sda {
        let disk = SimDisk::new(Default::default(), 0.0);
        Sda::create(Pager::create(Arc::new(SimDevice::new("data", disk))), cfg).unwrap()
    }

    fn reopen(t: Sda, seq: u64) -> Sda {
        let mut t = t;
        t.checkpoint(seq).unwrap();
        let dev = t.device().clone();
        let cache = t.config().cache_bytes;
        let background = t.background;
        drop(t);
        let (pager, cp) = Pager::open(dev).unwrap();
        let mut t = Sda::open(pager, &cp).unwrap().background(background);
        t.set_cache_bytes(cache);
        t
    }

    /// A small deterministic generator (xorshift), so that a failure replays.
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// Random writes, clones and version deletes with a tiny buffer and tiny levels (flushes,
    /// merges and splits all the time), checkpoints and reopens, every read compared with the
    /// reference map, and `check` along the way.
    #[test]
    fn matches_the_reference_through_merges_splits_and_reopens() {
        let s = against_the_reference(Config::tiny(), 4000, false);
        assert!(s.detail("merges") > 50, "{s:?}");
        assert!(s.detail("splits") > 0, "{s:?}");
        assert!(s.detail("dropped_entries") > 0, "{s:?}");
        // Ordinary merges dropped tombstones (`merge::drop_unread`), compactions aside.
        assert!(s.detail("tombstones_merges_dropped") > 10, "{s:?}");
    }

    /// Without density amplification (seed 003 §8's third line) the answers are the same;
    /// merges write one array each, and the setting survives a reopen.
    #[test]
    fn without_density_amplification_reads_are_the_same_and_nothing_splits() {
        let cfg = Config {
            density_amplification: false,
            ..Config::tiny()
        };
        let s = against_the_reference(cfg, 1500, false);
        assert!(s.detail("merges") > 20, "{s:?}");
        assert_eq!(s.detail("splits"), 0, "{s:?}");
    }

    /// The same with merges on a thread of their own (`merger`): reads meet a running merge's
    /// inputs beside the arrays flushed meanwhile and those the writer merged between its
    /// writes, and clones and version deletes made while it runs are replayed on its output.
    #[test]
    fn matches_the_reference_with_merges_on_their_own_thread() {
        let s = against_the_reference(Config::tiny(), 4000, true);
        assert!(s.detail("background_merges_in_all") > 50, "{s:?}");
        assert!(s.detail("replayed_merges") > 5, "{s:?}");
        // The writer ran merges between its writes beside the thread's (`merger::pace`).
        assert!(s.detail("paced_merges_in_all") > 50, "{s:?}");
        assert!(s.detail("tombstones_merges_dropped") > 10, "{s:?}");
        assert!(s.detail("splits") > 0, "{s:?}");
    }

    /// The reference run from 32 more seeds, 20,000 steps each, merges inline and on their
    /// thread (`cargo test -p strata --release --lib -- --ignored many_seeds`).
    #[test]
    #[ignore]
    fn matches_the_reference_from_many_seeds() {
        let mut tombstones = 0;
        for seed in 1..=32u64 {
            for background in [false, true] {
                let s = against_the_reference_from(
                    seed.wrapping_mul(0x2545_f491_4f6c_dd1d),
                    Config::tiny(),
                    20_000,
                    background,
                );
                tombstones += s.detail("tombstones_merges_dropped");
            }
        }
        assert!(
            tombstones > 1_000,
            "{tombstones} tombstones dropped by merges"
        );
    }

    /// `steps` random operations checked against the reference; the final stats.
    fn against_the_reference(cfg: Config, steps: u64, background: bool) -> EngineStats {
        let s = against_the_reference_from(0x9e37_79b9_7f4a_7c15, cfg, steps, background);
        // Its 16 KiB hold the heads and a few levels: reads and merges found blocks cached
        // (and every answer was the reference's). With merges on their own thread the levels
        // hold other arrays at other moments, and fewer are cached (50-odd hits).
        let least = if background { 20 } else { 100 };
        let hits = s.detail("cache_hits_in_all");
        assert!(hits > least, "{hits} cache hits");
        s
    }

    /// `against_the_reference` with the generator's seed given.
    fn against_the_reference_from(
        seed: u64,
        cfg: Config,
        steps: u64,
        background: bool,
    ) -> EngineStats {
        let mut t = fresh(cfg).background(background);
        let (mut replayed, mut background_merges, mut tombstones, mut paced) = (0, 0, 0, 0);
        let mut m = VersionedMap::new();
        let mut rng = Rng(seed);
        let mut cache_hits = 0;
        for step in 0..steps {
            let live: Vec<Version> = m.versions().live().collect();
            let v = live[rng.below(live.len() as u64) as usize];
            let key = format!("k{:02}", rng.below(40)).into_bytes();
            match rng.below(100) {
                0..=59 => {
                    let val = format!("{step}").into_bytes();
                    let want = m.put_at(v, &key, &val).map_err(|e| e.to_string());
                    let got = t.put_at(v, &key, &val).map_err(|e| e.to_string());
                    assert_eq!(got, want);
                }
                60..=74 => {
                    let want = m.delete_at(v, &key).map_err(|e| e.to_string());
                    assert_eq!(t.delete_at(v, &key).map_err(|e| e.to_string()), want);
                }
                75..=78 => {
                    assert_eq!(t.clone_version(v).unwrap(), m.clone_version(v).unwrap());
                }
                79..=80 if live.len() > 2 => {
                    m.delete_version(v).unwrap();
                    t.delete_version(v).unwrap();
                }
                81..=85 => {
                    let hi = format!("k{:02}", rng.below(40)).into_bytes();
                    let (lo, hi) = (Included(key.as_slice()), Excluded(hi.as_slice()));
                    let mut got = Vec::new();
                    t.scan_at(v, lo, hi, step % 2 == 1, usize::MAX, &mut got)
                        .unwrap();
                    let mut want = m.range_at(v, lo, hi).unwrap();
                    if step % 2 == 1 {
                        want.reverse();
                    }
                    assert_eq!(got, want, "range at {v}, step {step}");
                }
                _ => {}
            }
            assert_eq!(
                t.get_at(v, &key).ok(),
                m.get_at(v, &key).ok(),
                "step {step}"
            );
            t.settle().unwrap();
            if step % 500 == 499 {
                cache_hits += t.stats().detail("cache_hits");
                replayed += t.replayed;
                background_merges += t.background_merges;
                tombstones += t.dropped_tombstones;
                paced += t.paced_merges;
                t = reopen(t, step);
                assert_eq!(t.config(), cfg, "the configuration survives a reopen");
                t.check().unwrap();
                if step % 1000 == 999 {
                    // Fully merged, exactly what some live version reads is stored. (Its
                    // tombstones are not counted with those ordinary merges dropped.)
                    let before = t.dropped_tombstones;
                    t.compact().unwrap();
                    t.dropped_tombstones = before;
                    t.check().unwrap();
                    assert_eq!(stored(&mut t), m.needed(), "step {step}");
                }
                for &x in &live {
                    if m.versions().is_live(x) {
                        let mut got = Vec::new();
                        t.scan_at(x, Unbounded, Unbounded, false, usize::MAX, &mut got)
                            .unwrap();
                        assert_eq!(got, m.range_at(x, Unbounded, Unbounded).unwrap());
                    }
                }
            }
        }
        let mut s = t.stats();
        s.detail.push(("cache_hits_in_all", cache_hits));
        // Counted since the last reopen: add the runs before.
        s.detail.push(("replayed_merges", replayed + t.replayed));
        s.detail.push((
            "background_merges_in_all",
            background_merges + t.background_merges,
        ));
        s.detail.push((
            "tombstones_merges_dropped",
            tombstones + t.dropped_tombstones,
        ));
        s.detail
            .push(("paced_merges_in_all", paced + t.paced_merges));
        s
    }

    /// Distinct (key, version) pairs stored in the arrays.
    fn stored(t: &mut Sda) -> std::collections::BTreeSet<(Vec<u8>, Version)> {
        let mut out = std::collections::BTreeSet::new();
        for x in t.arrays().cloned().collect::<Vec<_>>() {
            let head = t.head(x.id).unwrap();
            for e in head.read_all(&t.pager, x.id).unwrap() {
                out.insert((e.key, e.version));
            }
        }
        out
    }

    #[test]
    fn a_deleted_leafs_arrays_go_at_once_and_merges_drop_its_entries() {
        let mut t = fresh(Config::tiny());
        for k in 0..10u32 {
            t.put_at(ROOT, &k.to_be_bytes(), b"root").unwrap();
        }
        let a = t.clone_version(ROOT).unwrap();
        let b = t.clone_version(ROOT).unwrap();
        for k in 0..40u32 {
            t.put_at(a, &(100 + k).to_be_bytes(), b"a").unwrap();
        }
        t.compact().unwrap();
        t.check().unwrap();
        // The root and `b` see 10 of the 50 entries: `a` got an array of its own.
        let only_a = t.arrays().filter(|x| x.versions == [a]).count();
        assert_eq!(only_a, 1, "{:?}", t.levels);
        let arrays = t.stats().detail("arrays");
        t.delete_version(a).unwrap();
        assert_eq!(t.stats().detail("arrays"), arrays - 1, "freed at once");
        assert!(t.arrays().all(|x| !x.serves(a)));
        t.check().unwrap();
        assert_eq!(
            t.get_at(b, &3u32.to_be_bytes()).unwrap(),
            Some(b"root".to_vec())
        );
        assert!(matches!(t.get_at(a, b"x"), Err(Error::BadVersion { .. })));
        assert!(stored(&mut t).iter().all(|(_, v)| *v != a));
    }

    /// 2,000 keys (20-byte values) at the root, compacted into one array of 256-byte blocks,
    /// on a simulated disk whose IOs the test counts.
    fn one_array_of_2000_keys() -> (Arc<SimDisk>, Sda) {
        let disk = SimDisk::new(Default::default(), 0.0);
        let cfg = Config {
            buffer_bytes: 64 << 10,
            level0_entries: 64,
            block_bytes: 256,
            // Scans' first runs of 1/64 of it: two blocks.
            cache_bytes: 32 << 10,
            ..Config::tiny()
        };
        let pager = Pager::create(Arc::new(SimDevice::new("data", disk.clone())));
        let mut t = Sda::create(pager, cfg).unwrap();
        for k in 0..2000u32 {
            t.put_at(ROOT, &k.to_be_bytes(), &[k as u8; 20]).unwrap();
        }
        t.compact().unwrap();
        assert_eq!(t.arrays().count(), 1);
        (disk, t)
    }

    /// A range scan reads an array's blocks in runs, one IO each, each half as long again as
    /// the one before, up to `read::MAX_RUN_GROWTH` times the first, both ways; a scan paged
    /// 256 entries at a time, each page starting after the last one's key, resumes inside the
    /// kept run and keeps growing, so it reads no more than the scan in one go.
    #[test]
    fn range_scans_read_blocks_in_growing_runs() {
        let (disk, mut t) = one_array_of_2000_keys();
        let id = t.arrays().next().unwrap().id;
        let blocks = t.head(id).unwrap().blocks.len();
        assert!(blocks > 200, "{blocks} blocks");
        // Runs of 2, 3, 5, then 8 blocks.
        assert_eq!(t.reads().first, 2);
        let runs = 4 + (blocks - 18).div_ceil(8);
        let want: Vec<(Vec<u8>, Vec<u8>)> = (0..2000u32)
            .map(|k| (k.to_be_bytes().to_vec(), vec![k as u8; 20]))
            .collect();
        for reverse in [false, true] {
            *t.recent.get_mut().unwrap() = read::Recent::default();
            let ios = disk.ios();
            let mut got = Vec::new();
            t.scan_at(ROOT, Unbounded, Unbounded, reverse, usize::MAX, &mut got)
                .unwrap();
            if reverse {
                got.reverse();
            }
            assert_eq!(got, want);
            assert_eq!((disk.ios() - ios) as usize, runs, "reverse {reverse}");
        }
        *t.recent.get_mut().unwrap() = read::Recent::default();
        let ios = disk.ios();
        let mut got: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        loop {
            let lo = got.last().map_or(Unbounded, |(k, _)| Excluded(k.clone()));
            let mut page = Vec::new();
            t.scan_at(
                ROOT,
                lo.as_ref().map(Vec::as_slice),
                Unbounded,
                false,
                256,
                &mut page,
            )
            .unwrap();
            if page.is_empty() {
                break;
            }
            got.extend(page);
        }
        assert_eq!(got, want);
        assert_eq!((disk.ios() - ios) as usize, runs, "paged");
    }

    /// A visitor that returns false is not called again, and the scan reads no further than
    /// the block it stopped in: one run of 2 blocks of an array of hundreds, either way;
    /// bounds inside blocks are honoured at both ends.
    #[test]
    fn a_visitor_that_stops_stops_the_scan() {
        let (disk, mut t) = one_array_of_2000_keys();
        for reverse in [false, true] {
            *t.recent.get_mut().unwrap() = read::Recent::default();
            let ios = disk.ios();
            let mut seen = Vec::new();
            t.scan_with(ROOT, Unbounded, Unbounded, reverse, &mut |k, x| {
                assert_eq!(x, [k[3]; 20]);
                seen.push(u32::from_be_bytes(k.try_into().unwrap()));
                seen.len() < 3
            })
            .unwrap();
            let want = if reverse {
                vec![1999, 1998, 1997]
            } else {
                vec![0, 1, 2]
            };
            assert_eq!(seen, want, "reverse {reverse}");
            assert_eq!(disk.ios() - ios, 1, "one run read, reverse {reverse}");
            // Bounds that cut blocks: every key of [500, 1500) once, in order.
            let (lo, hi) = (500u32.to_be_bytes(), 1500u32.to_be_bytes());
            let mut seen = Vec::new();
            t.scan_with(ROOT, Included(&lo), Excluded(&hi), reverse, &mut |k, _| {
                seen.push(u32::from_be_bytes(k.try_into().unwrap()));
                true
            })
            .unwrap();
            let mut want: Vec<u32> = (500..1500).collect();
            if reverse {
                want.reverse();
            }
            assert_eq!(seen, want, "reverse {reverse}");
        }
        // A bad version is refused before the visitor is called.
        let mut called = false;
        let got = t.scan_with(7, Unbounded, Unbounded, false, &mut |_, _| {
            called = true;
            true
        });
        assert!(matches!(got, Err(Error::BadVersion { version: 7, .. })));
        assert!(!called);
    }

    /// A version delete schedules the rewrite of an array it left holding entries no live
    /// version reaches: a leaf's writes merged with those its parent and sibling read go
    /// without any further write, and the space referenced falls by their share.
    #[test]
    fn a_version_delete_reclaims_what_no_live_version_reaches() {
        let cfg = Config {
            buffer_bytes: 64 << 10,
            level0_entries: 64,
            block_bytes: 1024,
            ..Config::tiny()
        };
        let mut t = fresh(cfg);
        let mut m = VersionedMap::new();
        let put = |t: &mut Sda, m: &mut VersionedMap, v: Version, k: u32| {
            let (key, val) = (k.to_be_bytes(), [k as u8; 100]);
            t.put_at(v, &key, &val).unwrap();
            m.put_at(v, &key, &val).unwrap();
        };
        for k in 0..300 {
            put(&mut t, &mut m, ROOT, k);
        }
        let a = t.clone_version(ROOT).unwrap();
        let b = t.clone_version(ROOT).unwrap();
        m.clone_version(ROOT).unwrap();
        m.clone_version(ROOT).unwrap();
        for k in 0..300 {
            put(&mut t, &mut m, a, 1000 + k);
            put(&mut t, &mut m, b, 2000 + k);
        }
        // One array of 900 entries serving all three: the root sees a third of it.
        t.compact().unwrap();
        assert_eq!(t.arrays().count(), 1, "{:?}", t.levels);
        let referenced = |t: &mut Sda, seq| {
            // After two checkpoints no durable one references what was freed before them.
            t.checkpoint(seq).unwrap();
            t.checkpoint(seq + 1).unwrap();
            t.stats().referenced_bytes
        };
        let before = referenced(&mut t, 1);
        t.delete_version(a).unwrap();
        m.delete_version(a).unwrap();
        assert_eq!(t.stats().detail("unreachable_entries"), 300);
        t.settle().unwrap();
        let s = t.stats();
        assert_eq!(s.detail("reclaims"), 1, "{s:?}");
        assert_eq!(s.detail("unreachable_entries"), 0, "{s:?}");
        assert_eq!(s.detail("entries"), 600, "{s:?}");
        let after = referenced(&mut t, 3);
        // A third of the entries went; the manifest and the table stay.
        assert!(
            after * 100 <= before * 70 && after * 100 >= before * 55,
            "referenced {before} bytes before the delete, {after} after"
        );
        assert_eq!(stored(&mut t), m.needed());
        t.check().unwrap();
        for v in [ROOT, b] {
            let mut got = Vec::new();
            t.scan_at(v, Unbounded, Unbounded, false, usize::MAX, &mut got)
                .unwrap();
            assert_eq!(got, m.range_at(v, Unbounded, Unbounded).unwrap());
        }
        // Deleting the internal root leaves a ghost `b` reads through: nothing to reclaim.
        t.delete_version(ROOT).unwrap();
        t.settle().unwrap();
        assert_eq!(t.stats().detail("reclaims"), 1);
        assert_eq!(t.stats().detail("unreachable_entries"), 0);
        // The counts per version survive a reopen, and so does what they say.
        let t = reopen(t, 5);
        assert_eq!(t.stats().detail("entries"), 600);
        assert!(t
            .arrays()
            .all(|x| x.by_version.iter().map(|c| c.1).sum::<u64>() == x.entries));
    }

    /// Seed 003 §8's space phase on a small instance: 100-byte pairs at random leaves of 16
    /// versions (clones of a random leaf, 1/3, or internal version, 2/3), then half of the
    /// leaves deleted and two checkpoints: the SDA references at most 1.5× the pairs its live
    /// versions wrote. Then as many new puts as the deleted leaves held, with checkpoints along
    /// the way (as the log's size makes them): they go into the space the deletes freed, so
    /// the file (referenced and free) does not grow.
    #[test]
    fn space_after_deleting_half_the_leaves_is_bounded_and_reused() {
        let cfg = Config {
            buffer_bytes: 32 << 10,
            level0_entries: 31,
            block_bytes: 4096,
            ..Config::default()
        };
        let mut t = fresh(cfg);
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let (mut leaves, mut internal) = (vec![ROOT], Vec::<Version>::new());
        let mut writes: HashMap<Version, u64> = HashMap::new();
        let mut seq = 0;
        let put = |t: &mut Sda, rng: &mut Rng, v: Version| {
            let mut key = [0u8; 16];
            key[..8].copy_from_slice(&rng.below(u64::MAX).to_be_bytes());
            key[8..].copy_from_slice(&rng.below(u64::MAX).to_be_bytes());
            t.put_at(v, &key, &[key[0]; 84]).unwrap();
            t.settle().unwrap();
        };
        for i in 0..8000u64 {
            if i > 0 && i % 500 == 0 {
                let v = if internal.is_empty() || rng.below(3) == 0 {
                    let v = leaves.swap_remove(rng.below(leaves.len() as u64) as usize);
                    internal.push(v);
                    v
                } else {
                    internal[rng.below(internal.len() as u64) as usize]
                };
                leaves.push(t.clone_version(v).unwrap());
            }
            let v = leaves[rng.below(leaves.len() as u64) as usize];
            put(&mut t, &mut rng, v);
            *writes.entry(v).or_default() += 1;
        }
        let mut freed = 0;
        for _ in 0..leaves.len() / 2 {
            let v = leaves.swap_remove(rng.below(leaves.len() as u64) as usize);
            t.delete_version(v).unwrap();
            freed += writes.remove(&v).unwrap_or(0);
        }
        t.settle().unwrap();
        for _ in 0..2 {
            seq += 1;
            t.checkpoint(seq).unwrap();
        }
        t.check().unwrap();
        let live = writes.values().sum::<u64>() * 100;
        let s = t.stats();
        let file = s.referenced_bytes + s.free_bytes;
        assert!(
            s.referenced_bytes * 2 <= live * 3,
            "{} bytes referenced for {live} bytes of live pairs",
            s.referenced_bytes
        );
        assert!(freed > 1000 && s.free_bytes > freed * 100, "{freed} {s:?}");
        for i in 0..freed {
            let v = leaves[rng.below(leaves.len() as u64) as usize];
            put(&mut t, &mut rng, v);
            if i % 500 == 499 {
                seq += 1;
                t.checkpoint(seq).unwrap();
            }
        }
        seq += 1;
        t.checkpoint(seq).unwrap();
        let s2 = t.stats();
        assert!(
            s2.referenced_bytes >= s.referenced_bytes + freed * 100,
            "the new pairs are stored: {s:?} then {s2:?}"
        );
        assert_eq!(
            s2.referenced_bytes + s2.free_bytes,
            file,
            "the file grew: {s:?} then {s2:?}"
        );
    }

    /// Arrays of the first, fixed-width entry encoding (written before superblock version 4)
    /// are read beside varint ones, merged with them, and rewritten as varint arrays; every
    /// answer stays the reference's.
    #[test]
    fn arrays_of_the_first_encoding_are_read_and_merged() {
        let mut t = fresh(Config::tiny());
        t.encoding = array::Encoding::Fixed;
        let mut m = VersionedMap::new();
        let mut rng = Rng(0x51_7cc1_b727_220a);
        let step = |t: &mut Sda, m: &mut VersionedMap, rng: &mut Rng, i: u64| {
            let live: Vec<Version> = m.versions().live().collect();
            let v = live[rng.below(live.len() as u64) as usize];
            let key = format!("k{:02}", rng.below(40)).into_bytes();
            if rng.below(20) == 0 {
                assert_eq!(t.clone_version(v).unwrap(), m.clone_version(v).unwrap());
            } else if m.versions().check_writable(v).is_ok() {
                t.put_at(v, &key, &i.to_be_bytes()).unwrap();
                m.put_at(v, &key, &i.to_be_bytes()).unwrap();
            }
            t.settle().unwrap();
        };
        let encodings = |t: &mut Sda| {
            let ids: Vec<NodeId> = t.arrays().map(|a| a.id).collect();
            let mut out: Vec<array::Encoding> = ids
                .into_iter()
                .map(|id| t.head(id).unwrap().encoding)
                .collect();
            out.dedup();
            out
        };
        let same = |t: &mut Sda, m: &VersionedMap| {
            for v in m.versions().live().collect::<Vec<_>>() {
                let mut got = Vec::new();
                t.scan_at(v, Unbounded, Unbounded, false, usize::MAX, &mut got)
                    .unwrap();
                assert_eq!(got, m.range_at(v, Unbounded, Unbounded).unwrap(), "at {v}");
            }
        };
        for i in 0..300 {
            step(&mut t, &mut m, &mut rng, i);
        }
        t.checkpoint(1).unwrap();
        assert_eq!(encodings(&mut t), [array::Encoding::Fixed]);
        // Reopened, the engine writes varint arrays beside the old ones.
        let mut t = reopen(t, 2);
        same(&mut t, &m);
        for i in 300..340 {
            step(&mut t, &mut m, &mut rng, i);
        }
        t.checkpoint(3).unwrap();
        let mut both = encodings(&mut t);
        both.sort_by_key(|e| *e == array::Encoding::Varint);
        both.dedup();
        assert_eq!(both, [array::Encoding::Fixed, array::Encoding::Varint]);
        same(&mut t, &m);
        t.check().unwrap();
        t.compact().unwrap();
        assert_eq!(encodings(&mut t), [array::Encoding::Varint]);
        same(&mut t, &m);
        t.check().unwrap();
    }

    /// A deleted internal version's entries stay while a live descendant reads them, and go
    /// in the merge after its last reader is deleted; a rewrite's older copy goes in the first
    /// merge that sees both.
    #[test]
    fn merges_keep_what_live_versions_read_and_nothing_else() {
        let mut t = fresh(Config::tiny());
        let mut m = VersionedMap::new();
        for k in 0..30u32 {
            t.put_at(ROOT, &k.to_be_bytes(), b"old").unwrap();
            t.settle().unwrap();
            t.put_at(ROOT, &k.to_be_bytes(), b"new").unwrap();
            m.put_at(ROOT, &k.to_be_bytes(), b"new").unwrap();
        }
        let a = t.clone_version(ROOT).unwrap();
        m.clone_version(ROOT).unwrap();
        let c = t.clone_version(a).unwrap();
        m.clone_version(a).unwrap();
        for k in 0..5u32 {
            t.put_at(c, &k.to_be_bytes(), b"c").unwrap();
            m.put_at(c, &k.to_be_bytes(), b"c").unwrap();
        }
        t.delete_version(ROOT).unwrap();
        m.delete_version(ROOT).unwrap();
        t.delete_version(a).unwrap();
        m.delete_version(a).unwrap();
        t.compact().unwrap();
        t.check().unwrap();
        // The ghost root's entries that `c` reads stay (25: `c` rewrote 5); one copy each.
        assert_eq!(stored(&mut t), m.needed());
        assert_eq!(m.needed().len(), 30);
        let mut got = Vec::new();
        t.scan_at(c, Unbounded, Unbounded, false, usize::MAX, &mut got)
            .unwrap();
        assert_eq!(got, m.range_at(c, Unbounded, Unbounded).unwrap());
        t.delete_version(c).unwrap();
        m.delete_version(c).unwrap();
        assert!(m.needed().is_empty());
        t.compact().unwrap();
        assert!(stored(&mut t).is_empty());
        assert_eq!(t.stats().detail("arrays"), 0);
    }

    /// A full compaction drops the tombstones that hide nothing kept, and keeps those that
    /// hide a value some live version still reads.
    #[test]
    fn full_merges_drop_tombstones_that_hide_nothing() {
        let mut t = fresh(Config::tiny());
        let mut m = VersionedMap::new();
        t.put_at(ROOT, b"k1", b"root").unwrap();
        m.put_at(ROOT, b"k1", b"root").unwrap();
        let a = t.clone_version(ROOT).unwrap();
        m.clone_version(ROOT).unwrap();
        t.delete_at(a, b"k1").unwrap();
        t.delete_at(a, b"k9").unwrap();
        m.delete_at(a, b"k1").unwrap();
        m.delete_at(a, b"k9").unwrap();
        t.compact().unwrap();
        t.check().unwrap();
        // The root still reads k1, so a's tombstone of k1 stays; the one of k9 hides nothing.
        let kept = stored(&mut t);
        assert!(kept.contains(&(b"k1".to_vec(), a)));
        assert!(!kept.contains(&(b"k9".to_vec(), a)));
        assert_eq!(kept, m.needed());
        // Once the root is deleted its value is read by nobody, and the tombstone goes too.
        t.delete_version(ROOT).unwrap();
        m.delete_version(ROOT).unwrap();
        t.compact().unwrap();
        assert!(stored(&mut t).is_empty());
        assert!(m.needed().is_empty());
        assert_eq!(t.get_at(a, b"k1").unwrap(), None);
    }

    /// Shrunk from the reference run with merges dropping every tombstone that hid nothing in
    /// the merge itself (15 operations; one version shows it): a tombstone merged with the
    /// array flushed beside it hides nothing there, but an older array at a level above holds
    /// the value it deletes. Dropped, that value came back. It stays until the merge that
    /// meets the value, which drops both, with no `compact`.
    #[test]
    fn a_tombstone_stays_while_an_array_outside_its_merge_holds_what_it_hides() {
        let mut t = fresh(Config {
            buffer_bytes: 1 << 20,
            ..Config::tiny()
        });
        let key = |k: u32| format!("k{k:02}").into_bytes();
        let flush = |t: &mut Sda| {
            t.flush().unwrap();
            t.merge_due().unwrap();
        };
        // Eight keys: one array at level 1 (8 entries of 4 a level-0 array).
        for k in 0..8 {
            t.put_at(ROOT, &key(k), b"old").unwrap();
        }
        flush(&mut t);
        // A key, then the delete of k00: two arrays of level 0, merged.
        t.put_at(ROOT, &key(9), b"x").unwrap();
        flush(&mut t);
        t.delete_at(ROOT, &key(0)).unwrap();
        flush(&mut t);
        assert_eq!(t.levels[0].len(), 1, "{:?}", t.levels);
        assert_eq!(t.levels[1].len(), 1, "{:?}", t.levels);
        assert_eq!(t.get_at(ROOT, &key(0)).unwrap(), None);
        assert!(stored(&mut t).contains(&(key(0), ROOT)));
        assert_eq!(t.dropped_tombstones, 0);
        // Six more keys: level 0 grows to 8 entries, moves up, and meets the value.
        for k in 10..16 {
            t.put_at(ROOT, &key(k), b"new").unwrap();
        }
        flush(&mut t);
        assert_eq!(t.get_at(ROOT, &key(0)).unwrap(), None);
        assert_eq!(t.dropped_tombstones, 1, "{:?}", t.levels);
        let keys: Vec<Vec<u8>> = stored(&mut t).into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys.len(), 14, "{keys:?}");
        assert!(!keys.contains(&key(0)));
        t.check().unwrap();
    }

    /// Key `k` of leaf `i` in `writes_at_leaves`.
    fn leaf_key(i: usize, k: usize) -> Vec<u8> {
        format!("{i:03}-{k}").into_bytes()
    }

    /// An SDA of 4 KiB blocks on a simulated disk, with `leaves` leaves under the root and
    /// `keys` puts buffered at each (`leaf_key`), nothing flushed yet.
    fn writes_at_leaves(leaves: usize, keys: usize) -> (Arc<SimDisk>, Sda, Vec<Version>) {
        let cfg = Config {
            buffer_bytes: 1 << 20,
            block_bytes: 4096,
            level0_entries: 1 << 12,
            ..Config::tiny()
        };
        let disk = SimDisk::new(Default::default(), 0.0);
        let dev = Arc::new(SimDevice::new("data", disk.clone()));
        let mut t = Sda::create(Pager::create(dev), cfg).unwrap();
        let vs: Vec<Version> = (0..leaves)
            .map(|_| t.clone_version(ROOT).unwrap())
            .collect();
        for (i, &v) in vs.iter().enumerate() {
            for k in 0..keys {
                t.put_at(v, &leaf_key(i, k), b"value").unwrap();
            }
        }
        (disk, t, vs)
    }

    /// A flush at many leaves makes a small piece for each; they are written together, a few
    /// hundred KiB an IO (`BlockSink::write_run`), not one IO each, and read back.
    #[test]
    fn a_flush_writes_its_many_pieces_in_a_few_ios() {
        let (disk, mut t, leaves) = writes_at_leaves(64, 10);
        let before = disk.ios();
        t.flush().unwrap();
        let ios = disk.ios() - before;
        let pieces: usize = t.levels.iter().map(Vec::len).sum();
        assert_eq!(pieces, 64);
        assert!(ios <= 2, "{ios} IOs for {pieces} pieces");
        for (i, &v) in leaves.iter().enumerate() {
            assert_eq!(
                t.get_at(v, &leaf_key(i, 9)).unwrap().as_deref(),
                Some(&b"value"[..])
            );
            assert_eq!(t.get_at(v, &leaf_key((i + 1) % 64, 9)).unwrap(), None);
        }
        t.check().unwrap();
    }

    /// A flush whose second batch of pieces fails to write gives back the pieces its first
    /// batch wrote: the allocator ends where it began, with the same bytes free.
    #[test]
    fn a_flush_that_fails_in_a_later_batch_gives_back_what_it_wrote() {
        // 100 leaves, a 4 KiB piece each: two batches.
        let (disk, mut t, _) = writes_at_leaves(100, 1);
        let (end, free) = (t.pager.allocated_end(), t.pager.free_bytes());
        let before = disk.ios();
        // The second IO from now fails.
        disk.fail_io_after(2, false);
        assert!(t.flush().is_err());
        assert_eq!(
            disk.ios() - before,
            2,
            "the first batch written, the second failed"
        );
        assert_eq!((t.pager.allocated_end(), t.pager.free_bytes()), (end, free));
        assert_eq!(t.levels.iter().map(Vec::len).sum::<usize>(), 0);
    }

    /// With merges on their thread, the writer runs none of its own while the lag lasts: a
    /// flush's merges wait for the thread, and batch better for it. Once `MAX_LAG` flushes
    /// have landed unsettled, the writes after the last run those due that the thread's merge
    /// does not hold up (`merger::pace`), so the next flush finds none left to stall on. (The
    /// lag is set by hand, not waited for: the thread may settle everything between flushes;
    /// and each flush, on a thread of its own, is waited for.)
    #[test]
    fn the_writer_paces_the_merges_due_once_the_lag_runs_out() {
        let cfg = Config {
            buffer_bytes: 3000,
            level0_entries: 1 << 12,
            ..Config::tiny()
        };
        let mut t = fresh(cfg).background(true);
        let leaves: Vec<Version> = (0..3).map(|_| t.clone_version(ROOT).unwrap()).collect();
        let mut n = 0u32;
        let mut put = |t: &mut Sda| {
            let v = leaves[n as usize % leaves.len()];
            t.put_at(v, &n.to_be_bytes(), b"a value").unwrap();
            n += 1;
            t.settle().unwrap();
        };
        // Until a put freezes the buffer; then the flush thread's arrays installed (the test
        // does not race the thread) and one more put, whose settle takes them in as the first
        // settle after the thread is done would.
        let mut until_flush = |t: &mut Sda| {
            let frozen = t.background_flushes;
            while t.background_flushes == frozen {
                put(t);
            }
            t.reap_flush(true).unwrap();
            put(t);
        };
        // A settled start: one array for each leaf at level 0.
        until_flush(&mut t);
        t.finish_merges().unwrap();
        assert_eq!(t.levels[0].len(), 3);
        // Within the lag: the next flush makes three pairs due; the thread takes one, and the
        // writer leaves the other two to it.
        until_flush(&mut t);
        assert_eq!(t.lag, 1);
        assert!(policy::next_merge_except(&t.levels, &t.busy()).is_some());
        assert_eq!(t.paced_merges, 0, "the writer merged within the lag");
        // The same with the lag run out: the flush's own settle runs a pair the thread does
        // not hold, and the writes after it whatever else is due.
        t.finish_merges().unwrap();
        t.lag = merger::MAX_LAG - 1;
        until_flush(&mut t);
        assert!(t.paced_merges > 0);
        let flushes = t.counters.flushes;
        for _ in 0..10 {
            put(&mut t);
        }
        assert_eq!(t.counters.flushes, flushes);
        assert_eq!(policy::next_merge_except(&t.levels, &t.busy()), None);
        assert_eq!(t.stalls, 0);
        t.check().unwrap();
    }

    /// A queue at one version (each put followed, a thousand puts later, by the delete of its
    /// key): merges drop each tombstone with the value it meets, so the space follows the
    /// thousand live keys, without `compact`; through reopens too, whose arrays come from the
    /// manifest with neither their heads read nor their tombstones counted.
    #[test]
    fn a_queue_of_puts_and_deletes_keeps_its_space_without_compaction() {
        for reopens in [false, true] {
            let mut t = fresh(Config {
                buffer_bytes: 16 << 10,
                level0_entries: 32,
                block_bytes: 1024,
                ..Config::tiny()
            });
            let key = |k: u32| k.to_be_bytes();
            let mut dropped = 0;
            for k in 0..50_000u32 {
                t.put_at(ROOT, &key(k), &[7; 20]).unwrap();
                if k >= 1000 {
                    t.delete_at(ROOT, &key(k - 1000)).unwrap();
                }
                t.settle().unwrap();
                if reopens && k % 10_000 == 9_999 {
                    dropped += t.dropped_tombstones;
                    t = reopen(t, k as u64);
                }
            }
            t.checkpoint(1).unwrap();
            dropped += t.dropped_tombstones;
            // 1,414 entries without reopens and 2,525 with them; 53,207 when only `compact`
            // dropped tombstones, and 44,064 with reopens when a merge did not read the heads
            // of the arrays outside it (`Sda::outside`).
            let s = t.stats();
            let most = if reopens { 3_000 } else { 2_000 };
            assert!(s.detail("entries") < most, "reopens {reopens}: {s:?}");
            assert!(dropped > 45_000, "reopens {reopens}: {dropped} dropped");
            assert_eq!(t.get_at(ROOT, &key(48_999)).unwrap(), None);
            assert_eq!(t.get_at(ROOT, &key(49_000)).unwrap(), Some(vec![7; 20]));
        }
    }

    /// The dump lists every array once, at its level, with its W and key range; a level
    /// limit shows the lowest levels only.
    #[test]
    fn the_dump_shows_every_array_with_the_versions_it_serves() {
        let mut t = fresh(Config::tiny());
        for k in 0..60u32 {
            t.put_at(ROOT, &k.to_be_bytes(), b"root").unwrap();
            t.settle().unwrap();
        }
        let a = t.clone_version(ROOT).unwrap();
        for k in 0..30u32 {
            t.put_at(a, &(100 + k).to_be_bytes(), b"a").unwrap();
            t.settle().unwrap();
        }
        t.merge_due().unwrap();
        let d = t.dump(0).unwrap();
        assert_eq!(d.height as usize, t.levels.len());
        let want: Vec<(u32, NodeId, Vec<Version>)> = t
            .levels
            .iter()
            .enumerate()
            .flat_map(|(l, arrays)| {
                arrays
                    .iter()
                    .map(move |x| (l as u32, x.id, x.versions.clone()))
            })
            .collect();
        let got: Vec<(u32, NodeId, Vec<Version>)> = d
            .nodes
            .iter()
            .map(|n| (n.level, n.id, n.versions.clone()))
            .collect();
        assert_eq!(got, want);
        assert!(want.len() > 2, "{want:?}");
        assert!(d
            .nodes
            .iter()
            .all(|n| n.kind == "array" && n.range.is_some()));
        let top = t.dump(1).unwrap();
        assert_eq!(top.nodes.len(), t.levels[0].len());
        assert!(top.notes[0].contains("write buffer"), "{:?}", top.notes);
    }
}
