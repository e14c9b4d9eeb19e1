//! Drains and merges of runs on a thread of their own. A drain applies a leaf's runs to the
//! leaf: out of memory it is most of the writer's CPU (49% of the samples loading 1M keys into a
//! 32 MiB cache), and the commits it lands in are the slow ones. A merge of a leaf's newest
//! small runs into one (`policy::Flush::Merge`) reads them back: at 10M keys and 256 MiB it was
//! in most of the mixed phase's commits over 3 ms. With `Options::background_merges` (the
//! default) the writer hands both to a thread and goes on.
//!
//! - **Offload** (`offload`): the flushed segment becomes one more run, so the parent is
//!   relieved at once and every message the drain takes is still in the tree, where queries
//!   find it. A flush drains here only into a leaf the cache does not hold whole (one it holds
//!   takes the flush at once, inline), so the leaf's block on the device is current: out of
//!   the cache, or in it clean with a few basements (`NodeStore::on_device`; a leaf changed
//!   and not yet written is drained inline). The thread reads that block and checks it (owner
//!   and checksums); the writer only watches the leaf in the cache (`NodeStore::watch`: any
//!   change marks a clean node dirty first). Runs the cache holds whole are copied; the others
//!   the thread reads from the device itself and checks: a run that left the cache was written
//!   first, and it is not freed while the drain holds it. The thread applies the messages,
//!   oldest first, to the leaf (`leaf::Settle`, which needs nothing of the tree).
//! - **Within the cache's budget.** What a queued drain holds (its messages decoded, its new
//!   leaf) is taken from the cache's budget until its install (`Job::charge`), as the
//!   LSM-tree's memtable is; a drain that would take the queued ones past half the budget
//!   drains inline.
//! - **A bounded queue** (`MAX_QUEUED`). While a leaf's drain is queued, flushes into it spill
//!   as runs up to twice the run budget's bytes and count (`held_room`), past which the writer
//!   waits for it (a stall, counted and timed); a leaf elsewhere that must drain when the queue
//!   is full drains inline, as without the thread.
//! - **Install** (`install`), by the writer: at the start of a write (`reap`: no flush is
//!   under way; the parent is found again from the root by a key of the leaf's), or in a
//!   stall, where the flush holds the parent; not by reads, whose failures do not poison the
//!   database (a write's do, and the log replays). The result is kept only if the parent still
//!   lists the leaf with those runs first and the leaf is untouched (neither marked dirty
//!   nor freed since it was watched). Then the runs spilled meanwhile are applied to the new
//!   leaf too (a leaf that splits or merges must have no runs: its pieces would not see them),
//!   all the runs are freed, the leaf replaced and its shape fixed, as an inline drain does.
//!   A leaf that outgrew its node comes back from the thread already cut into pieces
//!   (`shape::cut_leaf`), which the install puts beside it (`put_pieces`); with runs spilled
//!   meanwhile, the pieces are joined, the runs applied, and the writer splits the leaf.
//!   Every read an install needs comes before its first change, so a failed install leaves the
//!   tree as it was. A drain whose leaf or runs changed is dropped and nothing changed: the
//!   runs still hold its messages.
//! - **Merges** (`offload_merge`) go the same way: the segment is spilled, the runs from the
//!   merge's index on are handed over (copied or read on the thread), and the thread merges them
//!   and builds the new run's filter. The install puts the merged run in place of exactly those
//!   runs, if they are still the leaf's from that index on (runs spilled meanwhile stay after
//!   it, newer); else it is dropped. Merges and drains share the queue, one job a leaf.
//! - **Upserts** read and write blobs through the pager: a drain whose copied runs hold one
//!   runs inline at once, and one whose runs read on the thread hold one comes back to be
//!   drained by the writer at install.
//! - **Yielding to the log's syncs** (`offer_core`): while the log's fdatasync is in flight
//!   (`Engine::yield_to_syncs`, a flag `Db` hands to the log), the thread yields its core
//!   before each read and between basements it rebuilds. The syncing thread, woken by its IO
//!   onto this thread's core, otherwise waited for the end of a slice of milliseconds while the
//!   other core sat idle.
//! - A checkpoint asked for (close, `Db::checkpoint`) installs the queued drains first; a
//!   drain dropped unfinished (the engine going away) loses nothing, its runs being in the
//!   tree like any.
//!
//! Invariant: while a job is queued, its leaf and its runs change only by its install: flushes
//! add newer runs after them (or wait), no merge or drain of the leaf's starts; a merge with a
//! sibling leaf that takes them makes the install drop the job. A drain's runs are the leaf's
//! first; a merge's are the leaf's from its index on when it was handed over.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Instant;

use super::flush::{merge_msgs, run_filter};
use super::leaf::{Settle, Settled};
use super::shape::cut_leaf;
use super::*;
use crate::storage::alloc::Extent;

/// Drains handed to the thread and not yet installed, at most.
pub(super) const MAX_QUEUED: usize = 4;

/// The share of the cache's budget that queued drains may hold: each holds its runs' messages
/// and, once done, its new leaf, and what they hold is taken from the cache's budget while
/// they are queued (`Job::charge`), so that the engine's memory stays within it.
const QUEUED_SHARE: usize = 2;

/// The thread and the drains handed to it.
pub(super) struct Drainer {
    to: Sender<Task>,
    /// Behind a lock only so that the tree can be shared by readers (`Sync`); the writer,
    /// holding the tree alone, takes it without waiting (`Mutex::get_mut`).
    from: Mutex<Receiver<Done>>,
    thread: Option<JoinHandle<()>>,
    /// Per leaf handed over, what its drain took.
    queued: HashMap<NodeId, Job>,
    /// Results received while the writer could not install them (in a stall, only the
    /// awaited one is installed), installed at the next `reap`.
    ready: Vec<Done>,
    /// The cache's budget when the thread started; the cache gets it less `charged`.
    base: usize,
    /// What the queued drains hold, by their charges.
    charged: usize,
    /// Tests: `reap` without `wait` installs nothing, so that a test decides when.
    #[cfg(test)]
    hold: bool,
}

/// What a job took, to check at install that the tree still holds it.
struct Job {
    /// The runs it takes, oldest first: a drain the leaf's first runs, a merge the newest ones
    /// when it was handed over (from `Kind::Merge::from` on).
    runs: Vec<NodeId>,
    /// A key in the leaf's range, to find its parent again from the root.
    key: Vec<u8>,
    kind: Kind,
    /// The memory the job holds until its install, taken from the cache's budget: its
    /// messages decoded (about twice their encoding) and what it makes of them (a new leaf,
    /// or one merged run).
    charge: usize,
}

impl Job {
    fn new(runs: Vec<NodeId>, key: Vec<u8>, kind: Kind, charge: usize) -> Job {
        Job {
            runs,
            key,
            kind,
            charge,
        }
    }
}

enum Kind {
    /// A drain of a leaf the thread reads, watched in the cache (`NodeStore::watch`): whether
    /// it is untouched, once the job is dequeued.
    Drain { untouched: bool },
    /// A merge of the leaf's runs from this index on into one (`policy::Flush::Merge`).
    Merge { from: usize },
}

/// Work for the thread: a drain (its leaf's block, current on the device, and its runs,
/// oldest first) or, without a leaf, a merge of the runs into one.
struct Task {
    child: NodeId,
    leaf: Option<Extent>,
    runs: Vec<RunSrc>,
}

/// A run as the thread gets it.
enum RunSrc {
    /// A run the cache holds whole: its messages, copied by the writer.
    Copied(Vec<Msg>),
    /// A run the cache does not hold whole: its block is on the device (eviction and
    /// shedding write a block before they let it go), read and checked by the thread.
    OnDevice { id: NodeId, ext: Extent },
}

/// What the thread made of a job.
enum Outcome {
    /// The new leaf, cut into pieces when it outgrew a node (`shape::cut_leaf`: the first
    /// piece's separator is empty), and what it changed outside it.
    Applied(Vec<(Vec<u8>, Leaf)>, Settled),
    /// The merged run, its filter, and the messages it made obsolete (whose blobs the
    /// install frees).
    Merged(Segment, Filter, Vec<Msg>),
    /// A run read on the thread holds an upsert, whose merge may read and write blobs
    /// through the pager, or needs the merge operator: the writer does the job at install.
    Upserts,
}

/// A job's result.
struct Done {
    child: NodeId,
    out: Result<Outcome>,
}

/// The block of node `id` at `ext`, its header (owner and checksum) and every part's checksum
/// checked.
fn read_block(dev: &dyn Device, id: NodeId, ext: Extent) -> Result<Block> {
    let file = dev.name();
    let mut whole = vec![0u8; ext.len as usize];
    dev.read_at(&mut whole, ext.offset)?;
    let (k, head) = crate::storage::block::open(&whole, id, file, ext.offset)?;
    let mut node = Block::decode_head(k, head)
        .map_err(|what| Error::corruption(file, ext.offset, format!("node {id}: {what}")))?;
    node.install_all(file, ext.offset, id, &whole, true)?;
    Ok(node)
}

/// A run's messages, oldest first, from its block at `ext` (checked as `read_block` does).
pub(super) fn read_run(dev: &dyn Device, id: NodeId, ext: Extent) -> Result<Vec<Msg>> {
    let Block::Run(run) = read_block(dev, id, ext)? else {
        return Err(Error::corruption(
            dev.name(),
            ext.offset,
            format!("node {id} is listed as a run but is not one"),
        ));
    };
    let mut msgs: Vec<Msg> = Vec::new();
    for c in run.chunks {
        let seg = c.data.expect("installed above");
        msgs.extend(seg.into_by_seq());
    }
    msgs.sort_by_key(|m| m.seq);
    Ok(msgs)
}

/// Yield the core while the log syncs: the syncing thread, woken by its IO onto this core, would
/// otherwise wait for the end of this thread's slice (milliseconds) while it applies a leaf.
pub(super) fn offer_core(syncing: &AtomicBool) {
    if syncing.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::yield_now();
    }
}

/// The thread's work on one job: the runs' messages, oldest first, applied to the leaf (a
/// drain) or merged into one run.
fn work(
    geo: Geometry,
    dev: &dyn Device,
    task: Task,
    scratch: &mut Scratch,
    syncing: &AtomicBool,
) -> Result<Outcome> {
    let leaf = match task.leaf {
        None => None,
        Some(ext) => match read_block(dev, task.child, ext)? {
            Block::Leaf(leaf) => Some(leaf),
            _ => {
                return Err(Error::corruption(
                    dev.name(),
                    ext.offset,
                    format!("node {} is listed as a leaf but is not one", task.child),
                ))
            }
        },
    };
    offer_core(syncing);
    let mut msgs = Vec::new();
    for r in task.runs {
        match r {
            RunSrc::Copied(m) => msgs.extend(m),
            RunSrc::OnDevice { id, ext } => {
                offer_core(syncing);
                let m = read_run(dev, id, ext)?;
                if m.iter().any(|m| matches!(m.body, Body::Upsert(_))) {
                    return Ok(Outcome::Upserts);
                }
                msgs.extend(m);
            }
        }
    }
    match leaf {
        Some(mut leaf) => {
            let mut s = Settle::new(geo, None, None).yielding_to(syncing);
            s.apply(&mut leaf, msgs)?;
            // A split of a leaf that took three node sizes of messages copies it whole, twice:
            // milliseconds that the install would spend on the writer.
            Ok(Outcome::Applied(cut_leaf(leaf, &geo), s.out))
        }
        None => {
            let (seg, dropped) = merge_msgs(msgs, None, scratch);
            let filter = run_filter(&seg);
            Ok(Outcome::Merged(seg, filter, dropped))
        }
    }
}

impl Drainer {
    fn start(
        geo: Geometry,
        dev: Arc<dyn Device>,
        base: usize,
        syncing: Arc<AtomicBool>,
    ) -> Result<Drainer> {
        let (to, tasks) = channel::<Task>();
        let (done, from) = channel::<Done>();
        let thread = std::thread::Builder::new()
            .name("strata-betree-drain".into())
            .spawn(move || {
                let mut scratch = Scratch::default();
                for task in tasks {
                    let child = task.child;
                    let out = work(geo, &*dev, task, &mut scratch, &syncing);
                    if done.send(Done { child, out }).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| Error::io("start a drain thread", e))?;
        Ok(Drainer {
            to,
            from: Mutex::new(from),
            thread: Some(thread),
            queued: HashMap::new(),
            ready: Vec::new(),
            base,
            charged: 0,
            #[cfg(test)]
            hold: false,
        })
    }

    fn results(&mut self) -> &mut Receiver<Done> {
        self.from.get_mut().unwrap_or_else(|e| e.into_inner())
    }

    /// The next result, waiting for it; a thread that stopped without one panicked.
    fn recv(&mut self) -> Done {
        match self.results().recv() {
            Ok(d) => d,
            Err(_) => self.panicked(),
        }
    }

    /// Hand `task` to the thread; a thread that stopped taking them panicked.
    fn send(&mut self, task: Task) {
        if self.to.send(task).is_err() {
            self.panicked()
        }
    }

    /// The thread's panic, carried on here.
    fn panicked(&mut self) -> ! {
        match self.thread.take().map(JoinHandle::join) {
            Some(Err(panic)) => std::panic::resume_unwind(panic),
            _ => unreachable!("the drain thread outlives its tasks"),
        }
    }

    /// Take leaf `child`'s drain out of the queue, and its charge off the cache's budget.
    fn dequeue(&mut self, child: NodeId, store: &mut NodeStore<Block>) -> Job {
        let mut job = self.queued.remove(&child).expect("queued");
        if let Kind::Drain { untouched } = &mut job.kind {
            *untouched = store.unwatch(child);
        }
        self.charged -= job.charge;
        store.set_budget(self.base - self.charged);
        job
    }
}

/// The thread ends when its queue closes; what it was doing is dropped unread.
impl Drop for Drainer {
    fn drop(&mut self) {
        let (to, _) = channel();
        drop(std::mem::replace(&mut self.to, to));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Counters, reported in `stats`.
#[derive(Debug, Default)]
pub(super) struct DrainStats {
    /// Drains run on the thread and installed.
    pub offloaded: u64,
    /// Drains of leaves run on the writer (resident leaves, upserts, the thread busy).
    pub inline: u64,
    /// Drains run on the thread and dropped: the leaf or its runs changed meanwhile.
    pub dropped: u64,
    /// Runs the thread read from the device (the cache did not hold them whole).
    pub runs_read: u64,
    /// Leaves the thread read from the device (the cache did not hold them).
    pub leaves_read: u64,
    /// Jobs handed back to the writer: a run it read held an upsert.
    pub upserts: u64,
    /// Merges of a leaf's runs run on the thread and installed, and dropped (the runs changed
    /// meanwhile).
    pub merges_offloaded: u64,
    pub merges_dropped: u64,
    /// Drained leaves that outgrew a node and were cut into pieces on the thread.
    pub cut_on_thread: u64,
    /// Flushes that waited for the running drain, and how long in all.
    pub stalls: u64,
    pub stall_us: u64,
}

/// Whether a leaf whose drain is running may take `incoming` bytes as one more run: within
/// twice the run budget's bytes and twice its count.
pub(super) fn held_room(runs: &[u32], incoming: usize, node_size: usize) -> bool {
    let bytes: usize = runs.iter().map(|&b| b as usize).sum::<usize>() + incoming;
    runs.len() < 2 * MAX_RUNS && bytes as f64 <= 2.0 * RUN_BUDGET * node_size as f64
}

/// The pieces `shape::cut_leaf` made, as one leaf again (their basements in order, the
/// separators between them as pivots).
fn join_pieces(pieces: Vec<(Vec<u8>, Leaf)>) -> Leaf {
    let mut pieces = pieces.into_iter();
    let (_, mut leaf) = pieces.next().expect("a leaf cuts into pieces");
    for (sep, piece) in pieces {
        leaf.pivots.push(sep);
        for k in piece.pivots.iter() {
            leaf.pivots.push(k.to_vec());
        }
        leaf.bases.extend(piece.bases);
    }
    leaf
}

impl BeTree {
    /// Whether leaf `id`'s drain is with the thread.
    pub(super) fn draining(&self, id: NodeId) -> bool {
        self.drainer
            .as_ref()
            .is_some_and(|d| d.queued.contains_key(&id))
    }

    /// Whether a drain can go to the thread now.
    pub(super) fn can_offload(&self) -> bool {
        self.background
            && self
                .drainer
                .as_ref()
                .is_none_or(|d| d.queued.len() < MAX_QUEUED)
    }

    /// Hand the drain of child j (a leaf) of a resident internal node to the thread: segment j
    /// becomes a run, and the leaf's runs go to the thread with the leaf.
    pub(super) fn offload(&mut self, parent: &Pin<Block>, j: usize, depth: u32) -> Result<()> {
        let child_id = internal(&parent.read()).children[j];
        if !self.store.on_device(child_id) {
            // Changed in the cache and not written since (a flush does not reach here for a
            // leaf the cache holds whole, so this is rare): the writer drains it.
            let child = self.store.get(child_id)?;
            return self.drain(parent, j, child, depth);
        }
        let ext = self.store.pager().extent(child_id).ok_or_else(|| {
            self.corrupt(
                child_id,
                format!("leaf {child_id} is not in the pager's table"),
            )
        })?;
        let charge = 3 * self.runs_and_segment_bytes(parent, j, 0) + ext.len as usize;
        if !self.room_for(charge)? {
            let child = self.store.get(child_id)?;
            return self.drain(parent, j, child, depth);
        }
        self.spill(parent, j)?;
        let ids = self.run_ids(parent, j, 0);
        let Some((runs, key)) = self.run_sources(&ids)? else {
            let child = self.store.get(child_id)?;
            return self.drain(parent, j, child, depth);
        };
        self.store.watch(child_id);
        self.drains.leaves_read += 1;
        let kind = Kind::Drain { untouched: true };
        let job = Job::new(ids, key, kind, charge);
        self.hand_over(child_id, Some(ext), runs, job);
        Ok(())
    }

    /// The ids of child j's runs from index `from` on.
    fn run_ids(&self, parent: &Pin<Block>, j: usize, from: usize) -> Vec<NodeId> {
        internal(&parent.read()).runs[j][from..]
            .iter()
            .map(|r| r.id)
            .collect()
    }

    /// Hand the merge of child j's runs from index `from` on and segment j
    /// (`policy::Flush::Merge`) to the thread: the segment becomes a run, merged with them
    /// there; the leaf is not touched.
    pub(super) fn offload_merge(
        &mut self,
        parent: &Pin<Block>,
        j: usize,
        from: usize,
    ) -> Result<()> {
        let charge = 3 * self.runs_and_segment_bytes(parent, j, from);
        if !self.room_for(charge)? {
            return self.merge_runs(parent, j, from);
        }
        self.spill(parent, j)?;
        let child_id = internal(&parent.read()).children[j];
        let ids = self.run_ids(parent, j, from);
        let Some((runs, key)) = self.run_sources(&ids)? else {
            return self.merge_runs(parent, j, from);
        };
        let kind = Kind::Merge { from };
        let job = Job::new(ids, key, kind, charge);
        self.hand_over(child_id, None, runs, job);
        Ok(())
    }

    /// The bytes of child j's runs from index `from` on and of segment j.
    fn runs_and_segment_bytes(&self, parent: &Pin<Block>, j: usize, from: usize) -> usize {
        let g = parent.read();
        let n = internal(&g);
        n.runs[j][from..]
            .iter()
            .map(|r| r.bytes as usize)
            .sum::<usize>()
            + n.segs[j].bytes
    }

    /// Whether a job holding `charge` bytes fits in the queued jobs' share of the cache's
    /// budget (checked before any run is copied for it). Starts the thread on first use.
    fn room_for(&mut self, charge: usize) -> Result<bool> {
        if self.drainer.is_none() {
            let dev = self.store.pager().device().clone();
            let base = self.store.stats().budget_bytes as usize;
            let syncing = self.syncing.clone();
            self.drainer = Some(Drainer::start(self.geo, dev, base, syncing)?);
        }
        let d = self.drainer.as_ref().expect("started above");
        Ok(d.charged + charge <= d.base / QUEUED_SHARE)
    }

    /// The runs `ids` as the thread gets them, and a key of the leaf's (from the newest run,
    /// the segment just spilled, in the cache); `None` when the job is the writer's: a run the
    /// cache holds holds an upsert (which may read and write blobs: here, through the tree's
    /// pager).
    fn run_sources(&mut self, ids: &[NodeId]) -> Result<Option<(Vec<RunSrc>, Vec<u8>)>> {
        // Runs the cache holds whole are copied here; the others the thread reads.
        let mut runs = Vec::with_capacity(ids.len());
        for &id in ids {
            if self.fully_resident(id)? {
                let msgs = self.load_run(id)?;
                if msgs.iter().any(|m| matches!(m.body, Body::Upsert(_))) {
                    return Ok(None);
                }
                runs.push(RunSrc::Copied(msgs));
            } else {
                let ext = self.store.pager().extent(id).ok_or_else(|| {
                    self.corrupt(id, format!("run {id} is not in the pager's table"))
                })?;
                runs.push(RunSrc::OnDevice { id, ext });
            }
        }
        let key = match runs.last() {
            Some(RunSrc::Copied(m)) if !m.is_empty() => m[0].key.clone(),
            _ => return Ok(None),
        };
        Ok(Some((runs, key)))
    }

    /// Send a job to the thread and queue it, its charge taken from the cache's budget.
    fn hand_over(&mut self, child: NodeId, leaf: Option<Extent>, runs: Vec<RunSrc>, job: Job) {
        let on_device = runs
            .iter()
            .filter(|r| matches!(r, RunSrc::OnDevice { .. }))
            .count();
        let d = self.drainer.as_mut().expect("started by room_for");
        d.send(Task { child, leaf, runs });
        d.charged += job.charge;
        d.queued.insert(child, job);
        self.drains.runs_read += on_device as u64;
        let budget = d.base - d.charged;
        self.store.set_budget(budget);
    }

    /// Wait for the drain of child j of a resident internal node, and install it: a stall,
    /// counted and timed. Other drains done meanwhile wait for the next `reap`.
    pub(super) fn await_drain(&mut self, parent: &Pin<Block>, j: usize) -> Result<()> {
        let start = Instant::now();
        let child = internal(&parent.read()).children[j];
        let d = self.drainer.as_mut().expect("a drain is queued");
        let done = match d.ready.iter().position(|r| r.child == child) {
            Some(i) => d.ready.swap_remove(i),
            None => loop {
                let r = d.recv();
                if r.child == child {
                    break r;
                }
                d.ready.push(r);
            },
        };
        let job = d.dequeue(child, &mut self.store);
        self.drains.stalls += 1;
        self.drains.stall_us += start.elapsed().as_micros() as u64;
        let depth = self.height - 1;
        self.install(parent, j, child, job, done.out, depth)
    }

    /// Between operations: install the drains that are done (with `wait`, every drain).
    pub(super) fn reap(&mut self, wait: bool) -> Result<()> {
        loop {
            let Some(d) = self.drainer.as_mut() else {
                return Ok(());
            };
            #[cfg(test)]
            if d.hold && !wait {
                return Ok(());
            }
            let done = match d.ready.pop() {
                Some(r) => r,
                None if d.queued.is_empty() => return Ok(()),
                None if wait => d.recv(),
                None => match d.results().try_recv() {
                    Ok(r) => r,
                    Err(_) => return Ok(()),
                },
            };
            let job = d.dequeue(done.child, &mut self.store);
            self.install_found(done.child, job, done.out)?;
        }
    }

    /// Install a drain between operations: its leaf's parent found again from the root (splits
    /// may have moved it), then the path fixed as a drain's would be.
    fn install_found(&mut self, child: NodeId, job: Job, out: Result<Outcome>) -> Result<()> {
        if self.height < 2 {
            self.drains.dropped += 1;
            return Ok(());
        }
        let mut path: Vec<(Pin<Block>, usize)> = Vec::new();
        let mut pin = self.store.get(self.root)?;
        for depth in 1..self.height {
            self.load_all(&pin)?;
            let (i, next) = match &*pin.read() {
                Block::Internal(n) => {
                    let i = n.child_for(&job.key);
                    (i, n.children[i])
                }
                _ => return Err(self.not_a_node(pin.id())),
            };
            if depth + 1 == self.height {
                self.install(&pin, i, child, job, out, depth)?;
                self.relieve(&pin, depth)?;
                break;
            }
            path.push((pin, i));
            pin = self.store.get(next)?;
        }
        // Splits climb the path as far as they go.
        let mut child = pin;
        while let Some((parent, i)) = path.pop() {
            self.fix_child(&parent, i, child)?;
            child = parent;
        }
        drop(child);
        self.fix_root()
    }

    /// Put a job's result in place, child j of a resident internal node at `depth`, if what it
    /// took is still there; else drop it. Everything that may fail (reads) comes before the
    /// first change, so a failure leaves the tree as it was, the job dropped.
    fn install(
        &mut self,
        parent: &Pin<Block>,
        j: usize,
        child: NodeId,
        job: Job,
        out: Result<Outcome>,
        depth: u32,
    ) -> Result<()> {
        match job.kind {
            Kind::Drain { untouched } => {
                self.install_drain(parent, j, child, &job.runs, untouched, out, depth)
            }
            Kind::Merge { from } => self.install_merge(parent, j, child, &job.runs, from, out),
        }
    }

    /// Put a merged run in place of the runs it took (still child j's from index `from` on,
    /// else the merge is dropped: a drain took them meanwhile).
    fn install_merge(
        &mut self,
        parent: &Pin<Block>,
        j: usize,
        child: NodeId,
        ids: &[NodeId],
        from: usize,
        out: Result<Outcome>,
    ) -> Result<()> {
        let to = from + ids.len();
        let listed = {
            let g = parent.read();
            let n = internal(&g);
            n.children.get(j) == Some(&child)
                && n.runs[j].len() >= to
                && n.runs[j][from..to]
                    .iter()
                    .zip(ids)
                    .all(|(r, &id)| r.id == id)
        };
        if !listed {
            self.drains.merges_dropped += 1;
            return Ok(());
        }
        let (seg, filter, dropped) = match out? {
            Outcome::Merged(seg, filter, dropped) => (seg, filter, dropped),
            Outcome::Upserts => {
                self.drains.upserts += 1;
                let mut msgs = Vec::new();
                for &id in ids {
                    msgs.extend(self.take_in_run(id)?);
                }
                let merge = self.merge.clone();
                let (seg, dropped) = merge_msgs(msgs, merge.as_deref(), &mut self.scratch);
                let filter = run_filter(&seg);
                (seg, filter, dropped)
            }
            Outcome::Applied(..) => unreachable!("a merge's task has no leaf"),
        };
        let kept = seg.len() as u64;
        let r = self.new_run(seg, filter)?;
        // From here on nothing fails.
        let taken: Vec<RunRef> = internal_mut(&mut parent.write()).runs[j]
            .splice(from..to, [r])
            .collect();
        for r in taken {
            self.store.free(r.id);
            self.runs -= 1;
            self.buffered -= r.count as u64;
        }
        self.buffered += kept;
        self.store.mark_dirty(parent);
        self.free_msgs(dropped);
        self.run_merges += 1;
        self.drains.merges_offloaded += 1;
        Ok(())
    }

    /// Put a drain's new leaf in place if its leaf and runs are as it found them.
    #[allow(clippy::too_many_arguments)]
    fn install_drain(
        &mut self,
        parent: &Pin<Block>,
        j: usize,
        child: NodeId,
        ids: &[NodeId],
        untouched: bool,
        out: Result<Outcome>,
        depth: u32,
    ) -> Result<()> {
        let listed = {
            let g = parent.read();
            let n = internal(&g);
            n.children.get(j) == Some(&child)
                && n.runs[j].len() >= ids.len()
                && n.runs[j].iter().zip(ids).all(|(r, &id)| r.id == id)
        };
        // Neither marked dirty nor freed since: the block the thread read is the leaf.
        if !listed || !untouched {
            self.drains.dropped += 1;
            return Ok(());
        }
        // A leaf out of the cache: its head is read (before anything changes), and the new leaf
        // replaces it whole.
        let pin = self.store.get_head(child)?;
        // The tree still holds what the drain took, so its runs' blocks were not freed and a
        // failed read of one is the device's or the file's: reported.
        let (mut pieces, mut settled) = match out? {
            Outcome::Applied(pieces, settled) => (pieces, settled),
            Outcome::Merged(..) => unreachable!("a drain's task has a leaf"),
            Outcome::Upserts => {
                self.drains.upserts += 1;
                return self.drain(parent, j, pin, depth);
            }
        };
        self.load_all(parent)?;
        // Runs spilled while the drain ran go in too: a leaf that splits or merges must have
        // none (its pieces would not see them). Applied to the drain's leaf before it is put
        // in place (an upsert's blobs through the pager: one written before a failure is
        // unreferenced, and the failed write poisons the database).
        let newer: Vec<NodeId> = internal(&parent.read()).runs[j][ids.len()..]
            .iter()
            .map(|r| r.id)
            .collect();
        let mut msgs = Vec::new();
        for id in newer {
            msgs.extend(self.take_in_run(id)?);
        }
        if !msgs.is_empty() {
            // Rare: the pieces are joined again, and the leaf split below as inline drains do.
            let mut leaf = join_pieces(pieces);
            let merge = self.merge.clone();
            let mut s = Settle::new(self.geo, merge.as_deref(), Some(self.store.pager_mut()));
            s.apply(&mut leaf, msgs)?;
            settled.absorb(s.out);
            pieces = vec![(Vec::new(), leaf)];
        }
        // From here on nothing fails.
        let taken = std::mem::take(&mut internal_mut(&mut parent.write()).runs[j]);
        for r in taken {
            self.store.free(r.id);
            self.runs -= 1;
            self.buffered -= r.count as u64;
        }
        self.store.mark_dirty(parent);
        let mut pieces = pieces.into_iter();
        let (_, first) = pieces.next().expect("a leaf cuts into pieces");
        *leaf_mut(&mut pin.write()) = first;
        self.store.mark_dirty(&pin);
        self.take_in(settled);
        self.drains.offloaded += 1;
        let rest: Vec<(Vec<u8>, Block)> = pieces.map(|(sep, l)| (sep, Block::Leaf(l))).collect();
        if !rest.is_empty() {
            self.drains.cut_on_thread += 1;
            self.put_pieces(parent, j, rest)?;
        }
        self.fix_child(parent, j, pin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree of 64 KiB nodes (flushes of 8 KiB, a run budget of 128 KiB) whose cache holds a
    /// few dozen nodes (room for two drains held aside, `QUEUED_SHARE`), so that leaves drain from runs, with a model of what it holds. Once a drain
    /// is with the thread, drains are installed only when the test says so (`Drainer::hold`).
    struct Load {
        tree: BeTree,
        model: BTreeMap<Vec<u8>, Vec<u8>>,
        seed: u64,
    }

    impl Load {
        fn new() -> Load {
            Load::with_merge(None)
        }

        fn with_merge(merge: Option<Arc<dyn MergeOperator>>) -> Load {
            Load::with(64 << 10, 8, merge)
        }

        /// Fanout 32: flushes of 2 KiB, so that the count of a leaf's runs binds before their
        /// bytes do and its small runs are merged (`policy::Flush::Merge`).
        fn merging() -> Load {
            Load::with(64 << 10, 32, None)
        }

        fn with(node: usize, fanout: usize, merge: Option<Arc<dyn MergeOperator>>) -> Load {
            let tree = sim_tree_with(node, fanout, Origin::Explicit, 32 * node, merge);
            Load {
                tree,
                model: BTreeMap::new(),
                seed: 0x9e37_79b9_7f4a_7c15,
            }
        }

        /// 200 random puts in one batch.
        fn batch(&mut self) {
            self.batch_with(0)
        }

        /// 200 operations in one batch, `upserts` of them adding 1 to counters among the keys
        /// put before (`AddU64`).
        fn batch_with(&mut self, upserts: usize) {
            let mut ops = Vec::new();
            for _ in 0..upserts {
                self.seed ^= self.seed << 13;
                self.seed ^= self.seed >> 7;
                self.seed ^= self.seed << 17;
                let at = format!("{:012x}", self.seed >> 16).into_bytes();
                let Some(key) = self.model.range(at..).next().map(|(k, _)| k.clone()) else {
                    continue;
                };
                let v = self.model.get_mut(&key).unwrap();
                let n = u64::from_le_bytes(v[..8].try_into().unwrap()).wrapping_add(1);
                *v = n.to_le_bytes().to_vec();
                ops.push(Op::Upsert {
                    key,
                    operand: 1u64.to_le_bytes().to_vec(),
                });
            }
            while ops.len() < 200 {
                self.seed ^= self.seed << 13;
                self.seed ^= self.seed >> 7;
                self.seed ^= self.seed << 17;
                let key = format!("{:012x}", self.seed >> 16).into_bytes();
                let mut value = self.seed.to_le_bytes().to_vec();
                value.resize(40, b'v');
                self.model.insert(key.clone(), value.clone());
                ops.push(Op::Put { key, value });
            }
            self.tree.apply_batch(ops).unwrap();
            self.tree.settle().unwrap();
        }

        /// Batches until a drain is with the thread; from then on the test decides when
        /// jobs are installed. The drain's leaf.
        fn until_offloaded(&mut self) -> NodeId {
            self.until_queued(|k| matches!(k, Kind::Drain { .. }))
        }

        /// Batches until a job of a kind `want` takes is with the thread, as
        /// `until_offloaded`. The job's leaf.
        fn until_queued(&mut self, want: impl Fn(&Kind) -> bool) -> NodeId {
            for _ in 0..4000 {
                self.batch();
                if let Some(d) = self.tree.drainer.as_mut() {
                    let found = d.queued.iter().find(|(_, j)| want(&j.kind));
                    if let Some((&child, _)) = found {
                        d.hold = true;
                        return child;
                    }
                }
            }
            panic!("no such job went to the thread: {:?}", self.tree.stats());
        }

        fn job(&self, child: NodeId) -> &Job {
            &self.tree.drainer.as_ref().unwrap().queued[&child]
        }

        /// Leaf `child`'s parent (found by `key`, a key of the leaf's), its index there, and
        /// the parent's depth.
        fn parent_of(&mut self, child: NodeId, key: &[u8]) -> (Pin<Block>, usize, u32) {
            let mut pin = self.tree.store.get(self.tree.root).unwrap();
            for depth in 1.. {
                let next = match &*pin.read() {
                    Block::Internal(n) => {
                        let i = n.child_for(key);
                        if n.children[i] == child {
                            return (pin.clone(), i, depth);
                        }
                        n.children[i]
                    }
                    _ => panic!("leaf {child} not found by its key"),
                };
                pin = self.tree.store.get(next).unwrap();
            }
            unreachable!()
        }

        /// How many runs leaf `child` has.
        fn runs_of(&mut self, child: NodeId, key: &[u8]) -> usize {
            let (parent, i, _) = self.parent_of(child, key);
            let n = internal(&parent.read()).runs[i].len();
            n
        }

        fn queued(&self) -> usize {
            self.tree.drainer.as_ref().map_or(0, |d| d.queued.len())
        }

        /// Every key reads back its value, and the tree passes its check.
        fn verify(&mut self) {
            for (k, v) in &self.model {
                assert_eq!(self.tree.get(k).unwrap().as_ref(), Some(v), "{k:?}");
            }
            let report = self.tree.check().unwrap();
            assert_eq!(report.keys, self.model.len() as u64);
        }
    }

    /// Regression: a drain installed with runs spilled into its leaf while it ran, where the
    /// leaf then split, left those runs with the first piece, and reads of the keys they held
    /// for the other pieces missed them (`strata bench rum` found 2,354 wrong reads). Here the
    /// writer goes on until the running drain's leaf has newer runs, then installs.
    #[test]
    fn runs_spilled_while_a_drain_runs_reach_every_piece_of_its_leaf() {
        let mut l = Load::new();
        let mut installed_with_newer = 0;
        for _ in 0..6 {
            let child = l.until_offloaded();
            let (taken, key) = (l.job(child).runs.len(), l.job(child).key.clone());
            // Writes go on (no install) until the leaf has a run newer than the drain's.
            for _ in 0..400 {
                if l.runs_of(child, &key) > taken {
                    installed_with_newer += 1;
                    break;
                }
                l.batch();
            }
            let before = l.tree.drains.offloaded;
            l.tree.reap(true).unwrap();
            assert_eq!(l.queued(), 0);
            assert!(l.tree.drains.offloaded + l.tree.drains.dropped > before);
            l.verify();
        }
        let d = &l.tree.drains;
        assert!(installed_with_newer >= 3, "{installed_with_newer}, {d:?}");
        assert!(d.offloaded >= 3 && d.runs_read > 0, "{d:?}");
    }

    /// With the log's sync flag up the whole time, the thread offers its core at every step
    /// and between basements, and its drains still finish and install: the tree stays whole.
    #[test]
    fn drains_finish_while_the_log_syncs() {
        let mut l = Load::new();
        let flag = l
            .tree
            .yield_to_syncs()
            .expect("the Bε-tree yields to syncs");
        flag.store(true, std::sync::atomic::Ordering::Relaxed);
        for _ in 0..4 {
            l.until_offloaded();
            l.tree.reap(true).unwrap();
            assert_eq!(l.queued(), 0);
            l.verify();
        }
        assert!(l.tree.drains.offloaded >= 3, "{:?}", l.tree.drains);
    }

    /// A drained leaf that outgrew its node comes back from the thread cut into pieces, and
    /// the install puts them in place beside it (the writer no longer copies the leaf to split
    /// it); the tree stays whole, and every key reads back.
    #[test]
    fn a_drained_leaf_that_outgrew_its_node_is_installed_in_pieces() {
        let mut l = Load::new();
        for _ in 0..40 {
            let child = l.until_offloaded();
            let leaves = l.tree.leaves;
            let cut = l.tree.drains.cut_on_thread;
            l.tree.reap(true).unwrap();
            assert_eq!(l.queued(), 0);
            if l.tree.drains.cut_on_thread > cut {
                // Pieces beyond the first are leaves of their own.
                assert!(l.tree.leaves > leaves, "leaf {child}: {:?}", l.tree.drains);
            }
            l.verify();
            if l.tree.drains.cut_on_thread >= 3 {
                return;
            }
        }
        panic!("no drained leaf was cut on the thread: {:?}", l.tree.drains);
    }

    /// A run the thread reads may hold an upsert, whose merge needs the pager (blobs): the
    /// thread hands the drain back and the writer drains the leaf itself at install.
    #[test]
    fn a_drain_whose_runs_hold_upserts_is_done_by_the_writer() {
        let mut l = Load::with_merge(Some(Arc::new(crate::kv::AddU64)));
        for _ in 0..100 {
            l.batch();
        }
        // A leaf drains once its runs pass two node sizes (`policy::plan`): here after some
        // 1,200 rounds, when leaves have taken 128 KiB of flushes.
        for round in 0..4000 {
            l.batch_with(if round % 20 == 0 { 100 } else { 0 });
            if l.tree.drains.upserts > 2 {
                break;
            }
        }
        l.tree.reap(true).unwrap();
        let d = &l.tree.drains;
        assert!(d.upserts > 0 && d.runs_read > 0, "{d:?}");
        l.verify();
    }

    /// A drain whose leaf changed while it ran is dropped at install and changes nothing: its
    /// runs still hold its messages, and a later drain takes them.
    #[test]
    fn a_drain_whose_leaf_changed_meanwhile_is_dropped() {
        let mut l = Load::new();
        let child = l.until_offloaded();
        let key = l.job(child).key.clone();
        // A key next to one the drain holds, in the leaf's range and in no message: given
        // to the leaf directly, as an inline drain or a merge with a sibling would change it.
        let mut fresh = key;
        fresh.push(0);
        let pin = l.tree.store.get(child).unwrap();
        l.tree.load_all(&pin).unwrap();
        let seq = l.tree.next_seq;
        l.tree.next_seq += 1;
        let m = Msg {
            key: fresh.clone(),
            seq,
            body: Body::Put(Val::Inline(b"fresh".to_vec())),
        };
        l.tree.apply_to_leaf(&pin, vec![m]).unwrap();
        drop(pin);
        l.model.insert(fresh, b"fresh".to_vec());
        let before = (l.tree.drains.dropped, l.tree.drains.offloaded);
        l.tree.reap(true).unwrap();
        // Other drains queued meanwhile may be installed too; this one is dropped.
        assert!(l.tree.drains.dropped > before.0, "{:?}", l.tree.drains);
        l.verify();
        l.tree.drainer.as_mut().unwrap().hold = false;
        for _ in 0..200 {
            l.batch();
        }
        l.tree.reap(true).unwrap();
        assert!(l.tree.drains.offloaded > before.1, "{:?}", l.tree.drains);
        l.verify();
    }

    /// A merge of a leaf's newest runs on the thread replaces exactly the runs it took: runs
    /// spilled into the leaf while it ran stay, newer than the merged one, and every key
    /// reads back.
    #[test]
    fn a_merge_on_the_thread_keeps_the_runs_spilled_while_it_ran() {
        let mut l = Load::merging();
        let mut installed_with_newer = 0;
        for _ in 0..4 {
            let child = l.until_queued(|k| matches!(k, Kind::Merge { .. }));
            let Kind::Merge { from } = l.job(child).kind else {
                unreachable!("a merge was asked for")
            };
            let (taken, key) = (l.job(child).runs.len(), l.job(child).key.clone());
            for _ in 0..400 {
                if l.runs_of(child, &key) > from + taken {
                    installed_with_newer += 1;
                    break;
                }
                l.batch();
            }
            let before = l.tree.drains.merges_offloaded + l.tree.drains.merges_dropped;
            l.tree.reap(true).unwrap();
            assert_eq!(l.queued(), 0);
            assert!(l.tree.drains.merges_offloaded + l.tree.drains.merges_dropped > before);
            l.verify();
        }
        let d = &l.tree.drains;
        assert!(installed_with_newer >= 2, "{installed_with_newer}, {d:?}");
        assert!(d.merges_offloaded >= 2, "{d:?}");
    }

    /// A merge whose runs a drain took meanwhile is dropped at install and changes nothing.
    #[test]
    fn a_merge_whose_runs_were_drained_meanwhile_is_dropped() {
        let mut l = Load::merging();
        let child = l.until_queued(|k| matches!(k, Kind::Merge { .. }));
        let key = l.job(child).key.clone();
        let (parent, j, depth) = l.parent_of(child, &key);
        let pin = l.tree.store.get(child).unwrap();
        l.tree.drain(&parent, j, pin, depth).unwrap();
        drop(parent);
        l.tree.reap(true).unwrap();
        // Other leaves' merges queued before it may be installed; this one is dropped.
        let d = &l.tree.drains;
        assert_eq!(d.merges_dropped, 1, "{d:?}");
        l.verify();
    }
}
