//! The buffer pool: decoded nodes held within a byte budget, in front of the pager.
//!
//! - A `Pin` is a reference-counted handle; while any pin to a node exists the node is not
//!   evicted (eviction takes only entries whose sole owner is the pool), so "used a node after it
//!   was evicted" cannot be written.
//! - Eviction is CLOCK: a hand sweeps the entries, clearing reference bits and evicting the first
//!   unpinned entry whose bit is already clear. A dirty victim is written back (copy-on-write,
//!   through the pager) before it is dropped. A clean victim whose block a checkpoint placed but
//!   has not written yet is written first, since it will be read back from there.
//! - Every entry is charged `StoredNode::charge()` bytes. Engines that load a node one partition
//!   at a time (the Bε-tree) grow a resident node and call `recharge`; the pool evicts to make
//!   room as for any other growth, and before evicting a clean node whole it asks the node to
//!   `shed` its partitions (partial eviction), keeping the small header resident.
//! - The budget holds after every `evict_to_budget`, except for nodes pinned at that moment (an
//!   operation's root-to-leaf path): `peak_bytes` records the largest residency seen there.
//! - Readers may share the store (`get_shared`, `&self`, with no writer meanwhile): the pool's
//!   state is behind a lock of its own, a miss reads without holding it, and their eviction
//!   drops clean nodes only, stopping at a dirty victim for the next `evict_to_budget`; past
//!   twice the budget (`READERS_OVERSHOOT`: a walk holding the database's lock all along, so
//!   that no writer settles the pool meanwhile) it passes dirty victims by instead. Lock
//!   order: a node's lock may be held while the pool's is taken; the pool's is held while an
//!   unpinned node's is taken, and no one can pin that node then (pins come from the index).
//! - Write-back in batches, for engines that ask for it (`set_writeback_batch`: the B+-tree,
//!   whose dirty leaves leave the cache one per insert once the tree outgrows it): a dirty
//!   victim is written together with the dirty, unpinned, unreferenced nodes the hand reaches
//!   next, in the engine's key order (`StoredNode::order_key`), into adjacent extents where the
//!   free space allows, one write per run (`Pager::write_sealed_run`). Only the victim leaves
//!   memory; the others stay, clean, and the hand evicts them without IO. A checkpoint writes
//!   its dirty nodes the same way, whatever the engine. Either way each node still goes to a
//!   fresh extent (copy-on-write), so the commit protocol is unchanged.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};

use super::pager::{BlockWrite, Commit, NodeId, Pager, Sealed};
use crate::error::{Error, Result};

/// A node type the pool can hold, load and write back.
pub trait StoredNode: Send + Sync + Sized + 'static {
    /// Bytes of memory this node holds, charged against the budget.
    fn charge(&self) -> usize;
    /// Read node `id`: as much of it as must be resident (engines that load partitions on
    /// demand read only the node's header here).
    fn load(pager: &Pager, id: NodeId) -> Result<Self>;
    /// Read only what a node needs before its partitions are fetched one at a time, however
    /// small the node (`load` may read a small node whole): for callers that will want one
    /// partition of it. Nodes without partitions load as `load` does.
    fn load_head(pager: &Pager, id: NodeId) -> Result<Self> {
        Self::load(pager, id)
    }
    /// Frame the node as a block for writing back (the pool writes it, now or, for a
    /// checkpoint, later: see `Sealed::shares`). Called on dirty nodes only; the node's
    /// partitions are located in the sealed block, wherever the pager then places it.
    fn seal(&mut self, id: NodeId) -> Sealed;
    /// Drop what can be read again (clean partitions) but stay resident; whether anything was
    /// dropped. Called on clean, unpinned nodes before they are evicted whole.
    fn shed(&mut self) -> bool {
        false
    }
    /// Where the node lies in the engine's key order (a B+-tree node's first key), so that
    /// nodes written back together are laid out in that order; nodes that say nothing go in
    /// id order.
    fn order_key(&self) -> Vec<u8> {
        Vec::new()
    }
}

/// `StoredNode::load` for nodes kept as one checksummed block: read it whole and decode it.
pub fn load_block<N>(
    pager: &Pager,
    id: NodeId,
    decode: impl FnOnce(u8, &[u8]) -> std::result::Result<N, String>,
) -> Result<N> {
    let (kind, payload) = pager.read_block(id)?;
    decode(kind, &payload).map_err(|what| {
        let at = pager.extent(id).map_or(0, |e| e.offset);
        Error::corruption(pager.file_name(), at, format!("node {id}: {what}"))
    })
}

/// Readers, who may not write back, leave a dirty victim to the writer's next eviction only
/// while the pool holds at most this many times its budget (see the module comment).
const READERS_OVERSHOOT: usize = 2;

/// The pool's index hashes node ids, which are small consecutive integers, with one
/// multiplication: std's SipHash, built to resist chosen keys, cost about a tenth of the
/// instructions of a warm Bε-tree read (two lookups: root and leaf).
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

#[derive(Debug)]
pub struct NodeCell<N> {
    id: NodeId,
    node: RwLock<N>,
    dirty: AtomicBool,
    /// The block a checkpoint placed for this node, while its thread has yet to write it: a
    /// clean node is read back from there, so it is written before the node gives up memory.
    placed: Mutex<Weak<BlockWrite>>,
}

/// A dirty node sealed for writing back, and where it goes in the key order.
struct Keyed<N> {
    key: Vec<u8>,
    cell: Arc<NodeCell<N>>,
    sealed: Sealed,
}

/// A pinned node: it stays in the pool while this handle lives.
#[derive(Debug)]
pub struct Pin<N>(Arc<NodeCell<N>>);

impl<N> Clone for Pin<N> {
    fn clone(&self) -> Self {
        Pin(self.0.clone())
    }
}

impl<N> Pin<N> {
    pub fn id(&self) -> NodeId {
        self.0.id
    }
    pub fn read(&self) -> RwLockReadGuard<'_, N> {
        self.0.node.read().unwrap_or_else(|e| e.into_inner())
    }
    pub fn write(&self) -> RwLockWriteGuard<'_, N> {
        self.0.node.write().unwrap_or_else(|e| e.into_inner())
    }
}

struct Entry<N> {
    cell: Arc<NodeCell<N>>,
    charge: usize,
    referenced: bool,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct CacheStats {
    pub budget_bytes: u64,
    pub resident_bytes: u64,
    /// Largest residency after an eviction pass (the budget plus whatever was pinned then).
    pub peak_bytes: u64,
    pub entries: u64,
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    /// Clean nodes that gave up their partitions but stayed resident.
    pub sheds: u64,
    pub writebacks: u64,
    /// Writes those write-backs took (fewer than write-backs when they go in batches).
    pub writeback_ios: u64,
    /// Dirty nodes a checkpoint wrote, and the writes it took.
    pub checkpoint_nodes: u64,
    pub checkpoint_ios: u64,
}

pub struct NodeStore<N> {
    pager: Pager,
    /// The pool's own state, behind a lock so that readers sharing the store (`get_shared`)
    /// can load and evict side by side; a writer, holding the store alone (`&mut`), reaches
    /// it without locking (`Mutex::get_mut`).
    pool: Mutex<Pool<N>>,
}

struct Pool<N> {
    budget: usize,
    slots: Vec<Option<Entry<N>>>,
    free_slots: Vec<usize>,
    index: HashMap<NodeId, usize, BuildHasherDefault<IdHasher>>,
    hand: usize,
    resident: usize,
    /// Bytes of charge a dirty victim's write-back may take along (0: the victim alone).
    writeback_batch: usize,
    /// Nodes watched for changes (`watch`), and whether one came.
    watched: HashMap<NodeId, bool, BuildHasherDefault<IdHasher>>,
    stats: CacheStats,
}

/// What eviction may do with the pager: write dirty victims back (a writer's, `&mut`), or
/// only drop clean ones (readers', sharing it).
enum Io<'a> {
    Any(&'a mut Pager),
    CleanOnly(&'a Pager),
}

impl Io<'_> {
    fn pager(&self) -> &Pager {
        match self {
            Io::Any(p) => p,
            Io::CleanOnly(p) => p,
        }
    }
}

impl<N: StoredNode> NodeStore<N> {
    pub fn new(pager: Pager, budget: usize) -> NodeStore<N> {
        NodeStore {
            pager,
            pool: Mutex::new(Pool {
                budget,
                slots: Vec::new(),
                free_slots: Vec::new(),
                index: HashMap::default(),
                hand: 0,
                resident: 0,
                writeback_batch: 0,
                watched: HashMap::default(),
                stats: CacheStats {
                    budget_bytes: budget as u64,
                    ..Default::default()
                },
            }),
        }
    }

    /// The pool, held alone.
    fn pool(&mut self) -> &mut Pool<N> {
        self.pool.get_mut().unwrap_or_else(|e| e.into_inner())
    }

    /// The pool, locked (readers sharing the store).
    fn locked(&self) -> MutexGuard<'_, Pool<N>> {
        self.pool.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn pager(&self) -> &Pager {
        &self.pager
    }

    /// Change the budget (an LSM-tree's pool gets what its memtable leaves of one memory
    /// budget); the next `evict_to_budget` keeps to it.
    pub fn set_budget(&mut self, budget: usize) {
        let pool = self.pool();
        pool.budget = budget;
        pool.stats.budget_bytes = budget as u64;
    }

    /// Write dirty victims back with up to `bytes` of charge of the nodes the hand reaches
    /// next (see the module comment); 0 writes each victim alone.
    pub fn set_writeback_batch(&mut self, bytes: usize) {
        self.pool().writeback_batch = bytes;
    }

    pub fn pager_mut(&mut self) -> &mut Pager {
        &mut self.pager
    }

    pub fn stats(&self) -> CacheStats {
        let pool = self.locked();
        CacheStats {
            resident_bytes: pool.resident as u64,
            entries: pool.index.len() as u64,
            ..pool.stats.clone()
        }
    }

    /// Pin node `id`, loading it if it is not resident.
    pub fn get(&mut self, id: NodeId) -> Result<Pin<N>> {
        self.get_by(id, |p| N::load(p, id))
    }

    /// `get`, reading only the node's head on a miss (`StoredNode::load_head`).
    pub fn get_head(&mut self, id: NodeId) -> Result<Pin<N>> {
        self.get_by(id, |p| N::load_head(p, id))
    }

    /// `get`, taking on a miss, with no IO, the node `make` gives: what `load_head` would read
    /// of the clean node `id`, known to the caller from elsewhere.
    pub fn get_or_make(&mut self, id: NodeId, make: impl FnOnce() -> N) -> Result<Pin<N>> {
        self.get_by(id, |_| Ok(make()))
    }

    fn get_by(&mut self, id: NodeId, load: impl FnOnce(&Pager) -> Result<N>) -> Result<Pin<N>> {
        if let Some(pin) = self.pool().hit(id) {
            return Ok(pin);
        }
        self.pool().stats.misses += 1;
        let node = load(&self.pager)?;
        let pin = self.pool().insert(id, node, false);
        self.evict_to_budget()?;
        Ok(pin)
    }

    /// `get` for readers sharing the store (`&self`, with no writer meanwhile: the caller
    /// holds what keeps writers out). A miss reads without holding the pool's lock, so
    /// readers' IOs overlap; if another reader loaded the node meanwhile, its copy is taken.
    /// Eviction then drops only clean nodes, and stops at a dirty victim: that waits for the
    /// next writer's `evict_to_budget`, so the pool may stay above its budget until then.
    pub fn get_shared(&self, id: NodeId) -> Result<Pin<N>> {
        self.get_shared_by(id, |p| N::load(p, id))
    }

    /// `get_head` for readers sharing the store (`get_shared`).
    pub fn get_head_shared(&self, id: NodeId) -> Result<Pin<N>> {
        self.get_shared_by(id, |p| N::load_head(p, id))
    }

    /// `get_or_make` for readers sharing the store (`get_shared`).
    pub fn get_or_make_shared(&self, id: NodeId, make: impl FnOnce() -> N) -> Result<Pin<N>> {
        self.get_shared_by(id, |_| Ok(make()))
    }

    fn get_shared_by(&self, id: NodeId, load: impl FnOnce(&Pager) -> Result<N>) -> Result<Pin<N>> {
        if let Some(pin) = self.locked().hit(id) {
            return Ok(pin);
        }
        let node = load(&self.pager)?;
        let mut pool = self.locked();
        pool.stats.misses += 1;
        // Another reader may have loaded it while this one read: one copy stays.
        let pin = match pool.index.get(&id) {
            Some(&slot) => Pin(pool.slots[slot].as_ref().expect("indexed").cell.clone()),
            None => pool.insert(id, node, false),
        };
        pool.evict(Io::CleanOnly(&self.pager))?;
        Ok(pin)
    }

    /// Node `id` as it stands, for checkers: the resident copy, or else the one on the device,
    /// read without entering the pool. A check then neither evicts, writes back nor moves the
    /// clock (a dirty node is always resident), so that debug builds, which check after every
    /// operation, keep the pool as release builds do.
    pub fn inspect<R>(&self, id: NodeId, f: impl FnOnce(&N) -> R) -> Result<R> {
        let resident = {
            let pool = self.locked();
            pool.index
                .get(&id)
                .map(|&slot| Pin(pool.slots[slot].as_ref().expect("indexed").cell.clone()))
        };
        match resident {
            Some(pin) => Ok(f(&pin.read())),
            None => Ok(f(&N::load(&self.pager, id)?)),
        }
    }

    /// Whether the pool holds more than its budget.
    pub fn over_budget(&self) -> bool {
        let pool = self.locked();
        pool.resident > pool.budget
    }

    /// Whether node `id` is resident (no IO, no pin).
    pub fn is_resident(&self, id: NodeId) -> bool {
        self.locked().index.contains_key(&id)
    }

    /// Whether node `id`'s block on the device (at the pager's extent for it) is the node as
    /// the pool has it: not resident (a node leaves memory only written), or resident, clean
    /// and not waiting for a checkpoint to write its placed block.
    pub fn on_device(&self, id: NodeId) -> bool {
        let pool = self.locked();
        let Some(&slot) = pool.index.get(&id) else {
            return true;
        };
        let cell = &pool.slots[slot]
            .as_ref()
            .expect("indexed slot is occupied")
            .cell;
        !cell.dirty.load(Ordering::Relaxed)
            && cell
                .placed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .upgrade()
                .is_none()
    }

    /// Watch node `id` for changes: whoever reads its block elsewhere (another thread) can
    /// later ask whether the tree's node is still that block (`unwatch`). Every change to a
    /// clean node goes through `mark_dirty`, so a node not marked dirty or freed since is as
    /// it was.
    pub fn watch(&mut self, id: NodeId) {
        self.pool().watched.insert(id, false);
    }

    /// Stop watching node `id`: whether it was neither marked dirty nor freed since `watch`.
    pub fn unwatch(&mut self, id: NodeId) -> bool {
        self.pool().watched.remove(&id) == Some(false)
    }

    /// Add a new node; it is dirty until written.
    pub fn create(&mut self, node: N) -> Result<Pin<N>> {
        let id = self.pager.new_id();
        let pin = self.pool().insert(id, node, true);
        self.evict_to_budget()?;
        Ok(pin)
    }

    /// Add node `id`, already written whole to its extent (clean): a block built and written
    /// in one go, such as an LSM table.
    pub fn adopt(&mut self, id: NodeId, node: N) -> Result<Pin<N>> {
        let pin = self.pool().insert(id, node, false);
        self.evict_to_budget()?;
        Ok(pin)
    }

    /// Record that a pinned node changed: it must be written back, and its size may differ.
    pub fn mark_dirty(&mut self, pin: &Pin<N>) {
        pin.0.dirty.store(true, Ordering::Relaxed);
        self.pool().touched(pin.id());
        self.recharge(pin);
    }

    /// Re-measure a resident node's charge (after it grew or shrank).
    pub fn recharge(&self, pin: &Pin<N>) {
        // Measured before the pool is locked: no node lock is taken under the pool's.
        let charge = pin.read().charge();
        let mut pool = self.locked();
        if let Some(&slot) = pool.index.get(&pin.id()) {
            let e = pool.slots[slot].as_mut().expect("indexed slot is occupied");
            let old = std::mem::replace(&mut e.charge, charge);
            pool.resident = pool.resident - old + charge;
        }
    }

    /// Re-charge a resident node one part of which went from `before` to `after` bytes of
    /// charge: `recharge` without measuring the whole node (a wide node has many parts).
    /// Readers sharing the store call it holding the node's write lock, so that the node's
    /// charge and the pool's account of it change together (a node's lock may be held while
    /// the pool's is taken, never the other way round for a pinned node); the caller checks
    /// the account there (`charge_of`).
    pub fn recharge_by(&self, pin: &Pin<N>, before: usize, after: usize) {
        let mut guard = self.locked();
        let pool = &mut *guard;
        if let Some(&slot) = pool.index.get(&pin.id()) {
            let e = pool.slots[slot].as_mut().expect("indexed slot is occupied");
            e.charge = e.charge - before + after;
            pool.resident = pool.resident - before + after;
        }
    }

    /// The charge the pool holds for node `id`, if resident.
    pub fn charge_of(&self, id: NodeId) -> Option<usize> {
        let pool = self.locked();
        let &slot = pool.index.get(&id)?;
        pool.slots[slot].as_ref().map(|e| e.charge)
    }

    /// Drop node `id` from the pool and the table.
    pub fn free(&mut self, id: NodeId) {
        let pool = self.pool();
        pool.touched(id);
        if let Some(slot) = pool.index.remove(&id) {
            let e = pool.slots[slot].take().expect("indexed slot is occupied");
            pool.resident -= e.charge;
            pool.free_slots.push(slot);
        }
        self.pager.free(id);
    }

    /// Evict unpinned nodes, CLOCK order, until the residency is within budget, writing dirty
    /// victims back.
    pub fn evict_to_budget(&mut self) -> Result<()> {
        let pool = self.pool.get_mut().unwrap_or_else(|e| e.into_inner());
        pool.evict(Io::Any(&mut self.pager))
    }

    /// Start a checkpoint: seal every dirty node and write the table. A node whose block shares
    /// its bytes with the node (the Bε-tree's basements) is only placed: the returned commit
    /// writes it when made durable, possibly on another thread (and eviction writes it first if
    /// the node leaves memory before that). Other nodes are written now.
    pub fn begin_checkpoint(&mut self, wal_seq: u64, engine_meta: Vec<u8>) -> Result<Commit> {
        let dirty: Vec<Arc<NodeCell<N>>> = self
            .pool()
            .slots
            .iter()
            .flatten()
            .filter(|e| e.cell.dirty.load(Ordering::Relaxed))
            .map(|e| e.cell.clone())
            .collect();
        let mut later = Vec::new();
        let mut now = Vec::new();
        for cell in dirty {
            let k = seal_keyed(cell);
            if k.sealed.shares() {
                let cell = k.cell;
                let block = Arc::new(self.pager.place_sealed(cell.id, k.sealed));
                *cell.placed.lock().unwrap_or_else(|e| e.into_inner()) = Arc::downgrade(&block);
                later.push(block);
                cell.dirty.store(false, Ordering::Relaxed);
            } else {
                now.push(k);
            }
        }
        let (nodes, ios) = write_in_order(&mut self.pager, now)?;
        let stats = &mut self.pool().stats;
        stats.checkpoint_nodes += nodes;
        stats.checkpoint_ios += ios;
        self.pager.begin_commit(wal_seq, engine_meta, later)
    }

    pub fn dirty_bytes(&self) -> usize {
        self.locked()
            .slots
            .iter()
            .flatten()
            .filter(|e| e.cell.dirty.load(Ordering::Relaxed))
            .map(|e| e.charge)
            .sum()
    }
}

impl<N: StoredNode> Pool<N> {
    /// Pin node `id` if resident, marking it referenced.
    fn hit(&mut self, id: NodeId) -> Option<Pin<N>> {
        let &slot = self.index.get(&id)?;
        let e = self.slots[slot].as_mut().expect("indexed slot is occupied");
        e.referenced = true;
        self.stats.hits += 1;
        Some(Pin(e.cell.clone()))
    }

    fn insert(&mut self, id: NodeId, node: N, dirty: bool) -> Pin<N> {
        let charge = node.charge();
        let cell = Arc::new(NodeCell {
            id,
            node: RwLock::new(node),
            dirty: AtomicBool::new(dirty),
            placed: Mutex::new(Weak::new()),
        });
        let entry = Entry {
            cell: cell.clone(),
            charge,
            referenced: true,
        };
        let slot = match self.free_slots.pop() {
            Some(s) => {
                self.slots[s] = Some(entry);
                s
            }
            None => {
                self.slots.push(Some(entry));
                self.slots.len() - 1
            }
        };
        self.index.insert(id, slot);
        self.resident += charge;
        Pin(cell)
    }

    fn touched(&mut self, id: NodeId) {
        if !self.watched.is_empty() {
            if let Some(t) = self.watched.get_mut(&id) {
                *t = true;
            }
        }
    }

    fn write_back(&mut self, pager: &mut Pager, cell: &NodeCell<N>) -> Result<()> {
        pager.write_sealed(cell.id, seal(cell))?;
        cell.dirty.store(false, Ordering::Relaxed);
        self.stats.writebacks += 1;
        self.stats.writeback_ios += 1;
        Ok(())
    }

    /// Write back the dirty victim in `slot` with the dirty, unpinned, unreferenced nodes the
    /// hand reaches next (a quarter turn at most), up to `writeback_batch` bytes of charge.
    fn write_back_batch(&mut self, pager: &mut Pager, slot: usize) -> Result<()> {
        let n = self.slots.len();
        let mut cells = Vec::new();
        let mut charge = 0;
        for step in 0..(n / 4).max(1) {
            if charge >= self.writeback_batch {
                break;
            }
            let Some(e) = self.slots[(slot + step) % n].as_ref() else {
                continue;
            };
            let takes = step == 0
                || (Arc::strong_count(&e.cell) == 1
                    && !e.referenced
                    && e.cell.dirty.load(Ordering::Relaxed));
            if takes {
                charge += e.charge;
                cells.push(e.cell.clone());
            }
        }
        let sealed = cells.into_iter().map(seal_keyed).collect();
        let (nodes, ios) = write_in_order(pager, sealed)?;
        self.stats.writebacks += nodes;
        self.stats.writeback_ios += ios;
        Ok(())
    }

    /// Evict unpinned nodes, CLOCK order, until the residency is within budget; with
    /// `Io::CleanOnly`, only until the hand reaches a dirty victim (the budget may then not be
    /// reached).
    ///
    /// A node is unpinned when the pool holds its only reference. Pins are taken only from
    /// the index, under the pool's lock, which this holds: so no one can pin a victim, or hold
    /// its node's lock, while it is shed or written here.
    fn evict(&mut self, mut io: Io<'_>) -> Result<()> {
        let n = self.slots.len();
        let mut steps = 0;
        // Three turns of the hand: clear reference bits, shed partitions, evict whole nodes.
        while self.resident > self.budget && steps < 3 * n + 1 {
            steps += 1;
            self.hand = (self.hand + 1) % n.max(1);
            let slot = self.hand;
            let Some(e) = self.slots.get_mut(slot).and_then(|s| s.as_mut()) else {
                continue;
            };
            if Arc::strong_count(&e.cell) > 1 {
                continue;
            }
            if e.referenced {
                e.referenced = false;
                continue;
            }
            let cell = e.cell.clone();
            if !cell.dirty.load(Ordering::Relaxed) {
                write_placed(io.pager(), &cell)?;
                // Partial eviction first: a clean node gives up its partitions and keeps its
                // header for another round of the clock.
                let mut node = cell.node.write().unwrap_or_else(|e| e.into_inner());
                if node.shed() {
                    let charge = node.charge();
                    drop(node);
                    let e = self.slots[slot].as_mut().expect("slot checked above");
                    self.resident = self.resident - e.charge + charge;
                    e.charge = charge;
                    self.stats.sheds += 1;
                    continue;
                }
            }
            if cell.dirty.load(Ordering::Relaxed) {
                match &mut io {
                    // The hand stays on it: the writer's next eviction writes it back, so the
                    // victims are the ones CLOCK picks, whoever evicts.
                    Io::CleanOnly(_) if self.resident <= READERS_OVERSHOOT * self.budget => {
                        self.hand = (slot + n - 1) % n;
                        break;
                    }
                    // Past that, a read that holds its lock for long (a walk of a whole
                    // version) would keep all it loads: clean nodes go instead.
                    Io::CleanOnly(_) => continue,
                    Io::Any(pager) if self.writeback_batch > 0 => {
                        self.write_back_batch(pager, slot)?
                    }
                    Io::Any(pager) => self.write_back(pager, &cell)?,
                }
            }
            let e = self.slots[slot].take().expect("slot checked above");
            self.index.remove(&cell.id);
            self.free_slots.push(slot);
            self.resident -= e.charge;
            self.stats.evictions += 1;
        }
        self.stats.peak_bytes = self.stats.peak_bytes.max(self.resident as u64);
        Ok(())
    }
}

fn seal<N: StoredNode>(cell: &NodeCell<N>) -> Sealed {
    cell.node
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .seal(cell.id)
}

/// A dirty node sealed for writing, with its place in the key order.
fn seal_keyed<N: StoredNode>(cell: Arc<NodeCell<N>>) -> Keyed<N> {
    let mut node = cell.node.write().unwrap_or_else(|e| e.into_inner());
    let sealed = node.seal(cell.id);
    let key = node.order_key();
    drop(node);
    Keyed { key, cell, sealed }
}

/// If a checkpoint placed this clean node's block and has not written it yet, write it now
/// (the checkpoint's thread may write the same bytes too), so that it can be read back. The
/// block is let go only once written: after a failed write the node stays in memory until a
/// later eviction writes it.
fn write_placed<N>(pager: &Pager, cell: &NodeCell<N>) -> Result<()> {
    let mut placed = cell.placed.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(block) = placed.upgrade() {
        block.write_to(&**pager.device())?;
    }
    *placed = Weak::new();
    Ok(())
}

/// Write sealed nodes in key order as runs of adjacent blocks and mark them clean: (nodes,
/// writes). On an error none is marked clean (a node written before the error is written
/// again later, to another fresh extent).
fn write_in_order<N>(pager: &mut Pager, mut batch: Vec<Keyed<N>>) -> Result<(u64, u64)> {
    batch.sort_unstable_by(|a, b| (&a.key, a.cell.id).cmp(&(&b.key, b.cell.id)));
    let nodes = batch.len() as u64;
    let (cells, blocks): (Vec<_>, Vec<_>) = batch
        .into_iter()
        .map(|k| {
            let id = k.cell.id;
            (k.cell, (id, k.sealed))
        })
        .unzip();
    let ios = pager.write_sealed_run(blocks)?;
    for c in cells {
        c.dirty.store(false, Ordering::Relaxed);
    }
    Ok((nodes, ios as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::block::kind;
    use crate::storage::pager::Chunk;
    use crate::storage::sim::{SimDevice, SimDisk};

    /// A node whose sealed block shares its bytes, as the Bε-tree's basements do, so that a
    /// checkpoint places it and writes it later.
    struct Shared(Arc<Vec<u8>>);

    impl StoredNode for Shared {
        fn charge(&self) -> usize {
            self.0.len()
        }
        fn load(pager: &Pager, id: NodeId) -> Result<Self> {
            Ok(Shared(Arc::new(pager.read_head(id)?.1)))
        }
        fn seal(&mut self, id: NodeId) -> Sealed {
            Sealed::new(id, kind::BLOB, &self.0, vec![Chunk::Shared(self.0.clone())])
        }
    }

    /// A pool with no room, holding one node a checkpoint has placed but not written.
    fn placed_node() -> (Arc<SimDisk>, NodeStore<Shared>, NodeId, Commit) {
        let disk = SimDisk::new(Default::default(), 0.0);
        let dev = Arc::new(SimDevice::new("data", disk.clone()));
        let mut store = NodeStore::new(Pager::create(dev), 0);
        let id = store
            .create(Shared(Arc::new(b"placed".to_vec())))
            .unwrap()
            .id();
        let commit = store.begin_checkpoint(1, Vec::new()).unwrap();
        (disk, store, id, commit)
    }

    fn read_back(store: &mut NodeStore<Shared>, id: NodeId) -> Vec<u8> {
        assert!(!store.is_resident(id), "the node left memory");
        let pin = store
            .get(id)
            .expect("the node reads back from its placed block");
        let bytes = pin.read().0.to_vec();
        bytes
    }

    /// A node written as an owned copy: a checkpoint writes it at once.
    struct Plain(Vec<u8>);

    impl StoredNode for Plain {
        fn charge(&self) -> usize {
            self.0.len()
        }
        fn load(pager: &Pager, id: NodeId) -> Result<Self> {
            Ok(Plain(pager.read_head(id)?.1))
        }
        fn seal(&mut self, id: NodeId) -> Sealed {
            Sealed::new(id, kind::BLOB, &self.0, Vec::new())
        }
    }

    /// A reader's eviction leaves dirty victims to the writer while the pool is within twice
    /// its budget, and past that drops clean nodes instead: a long walk that no writer can
    /// interrupt to settle the pool stays within twice the budget (plus the node it loads).
    #[test]
    fn readers_leave_dirty_victims_to_the_writer_within_twice_the_budget() {
        let disk = SimDisk::new(Default::default(), 0.0);
        let dev = Arc::new(SimDevice::new("data", disk));
        let mut store = NodeStore::new(Pager::create(dev), 1 << 20);
        let clean: Vec<NodeId> = (0..40)
            .map(|_| store.create(Plain(vec![1; 100])).unwrap().id())
            .collect();
        let mut c = store.begin_checkpoint(1, Vec::new()).unwrap();
        c.make_durable().unwrap();
        store.pager_mut().finish_commit(c).unwrap();
        store.set_budget(0);
        store.evict_to_budget().unwrap();
        assert_eq!(store.stats().resident_bytes, 0);
        // Ten dirty nodes fill the budget.
        store.set_budget(1000);
        for _ in 0..10 {
            store.create(Plain(vec![2; 100])).unwrap();
        }
        assert_eq!(store.stats().resident_bytes, 1000);
        let mut most = 0;
        for &id in &clean {
            let pin = store.get_shared(id).unwrap();
            assert_eq!(pin.read().0, vec![1; 100]);
            drop(pin);
            most = most.max(store.stats().resident_bytes);
        }
        assert!(most > 1000, "readers left the dirty victims to the writer");
        assert!(
            most <= 2100,
            "a walk held {most} bytes for a budget of 1000"
        );
        // The writer's eviction writes the dirty victims back and keeps to the budget.
        store.evict_to_budget().unwrap();
        assert!(store.stats().resident_bytes <= 1000);
    }

    #[test]
    fn a_placed_block_whose_eviction_write_failed_is_written_by_the_next_eviction() {
        let (disk, mut store, id, _commit) = placed_node();
        disk.fail_io_after(1, false);
        assert!(matches!(store.evict_to_budget(), Err(Error::Io { .. })));
        assert!(store.is_resident(id), "a node whose write failed stays");
        store.evict_to_budget().unwrap();
        assert_eq!(read_back(&mut store, id), b"placed");
    }

    #[test]
    fn a_placed_block_a_failed_commit_left_unwritten_is_written_by_eviction() {
        let (disk, mut store, id, mut commit) = placed_node();
        disk.fail_io_after(1, false);
        assert!(matches!(commit.make_durable(), Err(Error::Io { .. })));
        store.evict_to_budget().unwrap();
        assert_eq!(read_back(&mut store, id), b"placed");
    }
}
