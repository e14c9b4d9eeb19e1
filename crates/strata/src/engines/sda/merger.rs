//! Merges on a thread of their own, so that a load uses the second core: the writer starts
//! one between operations (`settle`) and installs it once done; one runs at a time.
//!
//! - **Start** (`start_merge`): the next merge due (`policy::next_merge`) is handed to the
//!   merge thread (`Worker`, started with the first merge and kept) with everything it needs
//!   owned (`merge::MergeWork`: the inputs' entries where the block cache holds them, else
//!   their heads and extents, read on the thread; a copy of the version tree; a `BlockSink`
//!   for fresh extents). The inputs stay in the levels meanwhile, serving reads: a read
//!   consults every array whose W holds its version, so two of a level sharing a version
//!   answer correctly (the nearest version, then the newest seq, wins).
//! - **Tree changes**: while a merge runs, a version-tree change is recorded (`TreeEvent`)
//!   as well as applied to the levels: a clone adds the new version to every array serving
//!   its parent, a delete removes one. An input a delete leaves serving nothing leaves the
//!   levels at once but is freed only at install: its extent must not be reused while the
//!   thread reads it.
//! - **Install** (`reap`): the inputs leave the levels and are freed, the outputs get the
//!   recorded tree changes replayed on their W (the same steps, so they end as if they had
//!   been in the levels all along; one whose W empties is given back unwritten to the table)
//!   and enter the levels. Liveness was decided by the tree as it was when the merge began, so
//!   entries only deleted versions read stay, counted unreachable, for a reclaim.
//! - **Bounded lag** (`MAX_LAG`): the writer may flush twice while the merges its flushes
//!   made due are still running or waiting, and runs none itself meanwhile (left to the
//!   thread, they batch better). After the second (`pace`), every 1/256 of a buffer's writes
//!   it runs merges due that take neither of the running merge's inputs, until they have read
//!   8 bytes per byte written (at least one merge when one is due; none larger than the
//!   buffer or 1 MiB), so that both cores work on them while it fills the next buffer. A
//!   third flush then first waits until the levels are stratified again, running meanwhile
//!   whatever is left (a stall, counted and timed); without the pacing that stall ran the
//!   writer's whole share of the cascade, hundreds of merges, in one put. `compact`, `check`
//!   and a close
//!   (`finish_merges`) wait for the running merge, run every merge due inline, and find the
//!   levels stratified; a checkpoint does not wait (its manifest lists the running merge's
//!   inputs, and the next open merges what is due).
//! - A merge that fails changed nothing in the levels; its error poisons the database as an
//!   inline merge's would. A merge running when the engine goes away is waited for and its
//!   arrays given back (`abandon_merge`); never installed, they are garbage the next open
//!   would reclaim anyway.
//!
//! Invariant: while a merge runs, its two inputs are neither merged, reclaimed nor freed by
//! anything else.

use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Instant;

use super::merge::{MergeWork, Merged};
use super::*;

/// Flushes the writer may make while the merges of the ones before are still due: each adds
/// to a read at most one array per version it wrote, until the merges catch up.
pub(super) const MAX_LAG: u32 = 2;

/// How often, in a buffer's worth of writes, the writer looks for a merge to run (`pace`).
const PACE_STEPS: usize = 256;

/// The largest merge `pace` runs, in bytes read, unless the buffer is larger.
const PACE_MIN_CAP: usize = 1 << 20;

/// Merge bytes the writer runs per byte written while it paces (`pace`).
const PACE_RATE: usize = 8;

/// A version-tree change made while a merge ran.
#[derive(Clone, Copy, Debug)]
pub(super) enum TreeEvent {
    /// The version cloned, and the new one.
    Clone(Version, Version),
    Delete(Version),
}

/// The merge running on its own thread.
pub(super) struct InFlight {
    level: usize,
    inputs: [NodeId; 2],
    /// Their bytes, counted as read at install.
    read: u64,
    events: Vec<TreeEvent>,
    /// Its result, once received.
    done: Option<Result<Merged>>,
}

/// A thread of the engine's own that runs jobs one at a time, in order: the merge thread and
/// the flush thread (`flusher`), each started with its first job and kept. Most merges are
/// small (levels 0 and 1 hold hundreds of arrays with hundreds of leaf versions), and a thread
/// started for each cost about as much as the smallest of them.
pub(super) struct Worker<J, R> {
    to: Option<Sender<J>>,
    /// Behind a lock only so that the engine is `Sync` (readers share it); the writer alone
    /// receives, through `&mut`.
    from: Mutex<Receiver<Result<R>>>,
    thread: Option<JoinHandle<()>>,
}

impl<J: Send + 'static, R: Send + 'static> Worker<J, R> {
    pub(super) fn start(name: &str, run: fn(J) -> Result<R>) -> Result<Worker<J, R>> {
        let (to, jobs) = channel::<J>();
        let (done, from) = channel();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                for job in jobs {
                    if done.send(run(job)).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| Error::io(format!("start thread {name}"), e))?;
        Ok(Worker {
            to: Some(to),
            from: Mutex::new(from),
            thread: Some(thread),
        })
    }

    /// Hand the thread a job.
    pub(super) fn send(&mut self, job: J) {
        self.to
            .as_ref()
            .expect("taken only at drop")
            .send(job)
            .unwrap_or_else(|_| unreachable!("the thread lives as long as the worker"));
    }

    /// The running job's result: waiting for it, or None if it is not done.
    pub(super) fn result(&mut self, wait: bool) -> Option<Result<R>> {
        let from = self.from.get_mut().unwrap_or_else(|e| e.into_inner());
        let got = if wait {
            from.recv().map_err(|_| TryRecvError::Disconnected)
        } else {
            from.try_recv()
        };
        match got {
            Ok(r) => Some(r),
            Err(TryRecvError::Empty) => None,
            // The thread is gone with the job: it panicked; so does the writer.
            Err(TryRecvError::Disconnected) => {
                let thread = self.thread.take().expect("joined only here or at drop");
                match thread.join() {
                    Err(panic) => std::panic::resume_unwind(panic),
                    Ok(()) => unreachable!("the thread ends only when the writer does"),
                }
            }
        }
    }
}

impl<J, R> Drop for Worker<J, R> {
    fn drop(&mut self) {
        drop(self.to.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Sda {
    /// Between operations: install the running merge if it is done, and hand the next merge
    /// due to the thread if none runs. When nothing is due or running, rewrite inline what
    /// version deletes left unreachable (rare): the levels are then settled.
    pub(super) fn merge_step(&mut self) -> Result<()> {
        self.reap_flush(false)?;
        self.reap(false)?;
        if !self.unsettled || self.inflight.is_some() {
            return Ok(());
        }
        if let Some((level, i, j)) = policy::next_merge(&self.levels) {
            return self.start_merge(level, i, j);
        }
        self.reclaim_due()?;
        self.unsettled = false;
        self.lag = 0;
        Ok(())
    }

    /// The running merge's inputs.
    pub(super) fn busy(&self) -> Vec<NodeId> {
        self.inflight
            .as_ref()
            .map_or(Vec::new(), |f| f.inputs.to_vec())
    }

    /// Before a flush: once `MAX_LAG` flushes have gone without the levels settling, wait
    /// until they do, running here meanwhile the merges due that the running one does not
    /// hold up, large ones too, so that both cores work on them. Counted and timed as a stall.
    pub(super) fn before_flush(&mut self) -> Result<()> {
        if self.lag < MAX_LAG {
            return Ok(());
        }
        let began = Instant::now();
        self.settle_both()?;
        self.stalls += 1;
        self.stall_nanos += began.elapsed().as_nanos() as u64;
        Ok(())
    }

    /// Once the lag has run out, run here, a little every `1 / PACE_STEPS` of a buffer's
    /// writes, the merges due that the running one does not hold up: what would be one stall
    /// at the next flush is spread over the writes that fill its buffer. Only then: merges
    /// left lazy until a flush or two have landed batch better (a merged pair often moves up a
    /// level and leaves the next arrival alone), and run one by one after each flush the same
    /// load took 1.3x as long with 1.6x the merge bytes.
    pub(super) fn pace(&mut self) -> Result<()> {
        let quantum = (self.cfg.buffer_bytes / PACE_STEPS).max(1);
        if self.paced < quantum {
            return Ok(());
        }
        self.paced = 0;
        // A merge the size of a flush at most (of 1 MiB at least: a small array is rounded up
        // to whole extents); larger ones are left to the thread and the stall.
        let cap = self.cfg.buffer_bytes.max(PACE_MIN_CAP) as u64;
        let mut done = 0u64;
        while self.lag >= MAX_LAG && self.unsettled && done < (PACE_RATE * quantum) as u64 {
            let Some((level, i, j)) = policy::next_merge_except(&self.levels, &self.busy()) else {
                break;
            };
            let bytes = self.levels[level][i].bytes + self.levels[level][j].bytes;
            if bytes > cap {
                break;
            }
            self.merge_inline(level, i, j)?;
            self.paced_merges += 1;
            done += bytes;
            self.merge_step()?;
        }
        Ok(())
    }

    /// Run every merge due, the thread taking the next one while the writer runs those that
    /// do not take its inputs, until the levels are stratified and nothing runs.
    pub(super) fn settle_both(&mut self) -> Result<()> {
        // The frozen buffer's arrays first: they are what the levels must take in.
        self.reap_flush(true)?;
        loop {
            self.merge_step()?;
            if !self.unsettled {
                return Ok(());
            }
            match policy::next_merge_except(&self.levels, &self.busy()) {
                Some((level, i, j)) => self.merge_inline(level, i, j)?,
                None => {
                    self.reap(true)?;
                }
            }
        }
    }

    /// Start merging arrays i and j of `level` on a thread of their own.
    fn start_merge(&mut self, level: usize, i: usize, j: usize) -> Result<()> {
        debug_assert!(self.inflight.is_none());
        let (a, b) = (self.levels[level][i].clone(), self.levels[level][j].clone());
        let work = self.merge_work(&a, &b)?;
        if self.worker.is_none() {
            self.worker = Some(Worker::start("strata-sda-merge", MergeWork::run)?);
        }
        self.worker.as_mut().expect("started above").send(work);
        self.inflight = Some(InFlight {
            level,
            inputs: [a.id, b.id],
            read: a.bytes + b.bytes,
            events: Vec::new(),
            done: None,
        });
        self.background_merges += 1;
        Ok(())
    }

    /// Install the running merge once it is done (with `wait`, once it is); whether one was.
    /// A failed merge changed nothing: its error is returned.
    pub(super) fn reap(&mut self, wait: bool) -> Result<bool> {
        let Some(f) = self.inflight.as_mut() else {
            return Ok(false);
        };
        if f.done.is_none() {
            let w = self.worker.as_mut().expect("a merge runs on it");
            f.done = w.result(wait);
        }
        if f.done.is_none() {
            return Ok(false);
        }
        let f = self.inflight.take().expect("matched above");
        let merged = f.done.expect("checked above")?;
        // A version delete may have taken an input out of the levels already (unfreed).
        for id in f.inputs {
            let at = self.levels[f.level].iter().position(|a| a.id == id);
            if let Some(at) = at {
                self.levels[f.level].remove(at);
            }
        }
        self.counters.merge_read_bytes += f.read;
        self.install_merged(f.level, merged, &f.events)?;
        for id in f.inputs {
            self.free_array(id);
        }
        Ok(true)
    }

    /// Record a version-tree change for the running merge and the running flush, if any.
    pub(super) fn tree_changed(&mut self, e: TreeEvent) {
        if let Some(f) = &mut self.inflight {
            f.events.push(e);
        }
        if let Some(f) = &mut self.frozen {
            f.events.push(e);
        }
    }

    /// Whether array `id` is an input of the running merge (not to be freed before it ends).
    pub(super) fn merging(&self, id: NodeId) -> bool {
        self.inflight
            .as_ref()
            .is_some_and(|f| f.inputs.contains(&id))
    }

    /// Wait for the running merge and give its arrays back unread (the engine is going away).
    pub(super) fn abandon_merge(&mut self) {
        if let Some(f) = self.inflight.take() {
            let done = match f.done {
                Some(d) => Some(d),
                None => self.worker.as_mut().and_then(|w| w.result(true)),
            };
            if let Some(Ok(merged)) = done {
                merged.discard(&self.pager.block_sink());
            }
        }
    }
}
