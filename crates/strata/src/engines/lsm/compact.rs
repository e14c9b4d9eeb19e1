//! Flushes and merges: the IO that carries out what `policy` decides, and the thread merges
//! run on.
//!
//! - A flush writes the memtable out as a new run, the newest of level 0, on the writer.
//! - A merge runs on a thread of its own (`merge.rs`), one at a time, while the writer goes on
//!   with flushes and reads. The writer starts one when the policy finds it due (`start`) and
//!   installs its output when it is done (`reap`): inputs out of the manifest in memory,
//!   outputs in, inputs freed. While one runs the policy picks nothing else (only flushes add
//!   runs, to level 0, newer than anything merging), so its inputs stay put and its `bottom`
//!   stays true. Moves that need no IO (a table moved down untouched, lazy leveling's
//!   deepening, dynamic levels' growth at the top) happen at once, on the writer.
//! - Write stalls: when level 0 holds `policy::stall_runs` runs, a write waits for merges until
//!   it holds fewer; each wait is counted and timed (`stats`: `stalls`, `stall_ms`), so level 0
//!   is bounded.
//! - A checkpoint begun in the background (the log's rotation) does not wait for a merge: its
//!   manifest names the inputs, and the merge's output, in no manifest yet, is garbage if the
//!   process dies. A checkpoint asked for (`Engine::checkpoint`: `Db::checkpoint`, close) runs
//!   every merge due first (`drain`), so the durable point it gives covers them, as RocksDB's
//!   flush and wait for compactions does; then, leveled, it samples what newer versions
//!   above the last level shadow and merges them down onto their older copies when that pays
//!   (`settle_at_rest`, `policy::settle_target`), so that a tree at rest keeps few of them.

use std::thread::JoinHandle;
use std::time::Instant;

use super::format::Counters;
use super::merge::{zero_bottom_seq, Output, Src, Work, Written};
use super::policy::{pick, stalled, Action, Job};
use super::*;
use crate::kv::merging::reduce;

/// The merge running on its own thread.
pub(super) struct InFlight {
    job: Job,
    /// Its input runs (the target's tables it replaces last), installed by id.
    runs: Vec<Vec<TableInfo>>,
    thread: JoinHandle<Result<Output>>,
}

impl Lsm {
    /// Bloom filter bits per key for a table of level `level`: the configured bits everywhere,
    /// or Monkey's share for that level given the levels' current sizes.
    pub(super) fn filter_bits_for(&self, level: usize) -> f64 {
        if !self.cfg.monkey {
            return self.cfg.filter_bits;
        }
        policy::monkey_bits(&self.levels, &self.cfg, level)
    }

    /// Enter tables written through a `BlockSink` in the pager's table and the pool.
    fn adopt(&mut self, tables: Vec<Written>) -> Result<Vec<TableInfo>> {
        let mut infos = Vec::with_capacity(tables.len());
        for w in tables {
            self.store.pager_mut().adopt_written(w.info.id, w.ext);
            self.store.adopt(w.info.id, w.table)?;
            infos.push(w.info);
        }
        Ok(infos)
    }

    /// Write the memtable out as the newest run of level 0. On an error nothing has changed:
    /// the memtable stays and the tables written so far are given back.
    pub(super) fn flush(&mut self) -> Result<()> {
        let bottom = self.levels.iter().all(Level::is_empty);
        let ranges = if bottom {
            Vec::new()
        } else {
            self.mem.ranges().to_vec()
        };
        let sink = self.store.pager().block_sink();
        let mut out = Output::new(sink, &self.cfg, self.filter_bits_for(0), ranges);
        for (key, msgs) in self.mem.keys() {
            // Nothing lies below the first run: what the memtable settles is final.
            let kept;
            let msgs = if bottom {
                let mut k = reduce(key, msgs.to_vec(), None, self.merge.as_deref(), true);
                zero_bottom_seq(&mut k);
                kept = k;
                &kept
            } else {
                msgs
            };
            if let Err(e) = out.add(key, msgs) {
                return Err(out.abandon(e));
            }
        }
        let out = out.finish()?;
        let written = out.written;
        let tables = self.adopt(out.tables)?;
        self.mem = Memtable::default();
        self.counters.flushes += 1;
        self.counters.flush_bytes += written;
        if !tables.is_empty() {
            if self.levels.is_empty() {
                self.levels.push(Level::default());
            }
            self.levels[0].runs.insert(0, tables);
        }
        Ok(())
    }

    /// Between operations: install a finished merge, wait for merges while level 0 is at its
    /// stall bound, and start the next merge due. Inline (`background` off), run every merge
    /// due, each a stall.
    pub(super) fn merge_in_background(&mut self) -> Result<()> {
        let began = Instant::now();
        if !self.background {
            if self.drain()? {
                self.stalls += 1;
                self.stall_nanos += began.elapsed().as_nanos() as u64;
            }
            return Ok(());
        }
        self.reap(false)?;
        if stalled(&self.levels, &self.cfg) {
            while stalled(&self.levels, &self.cfg) {
                if self.inflight.is_none() && !self.start()? {
                    break;
                }
                self.reap(true)?;
            }
            self.stalls += 1;
            self.stall_nanos += began.elapsed().as_nanos() as u64;
        }
        self.start()?;
        Ok(())
    }

    /// Run every merge due, waiting for each; returns whether there was any.
    pub(super) fn drain(&mut self) -> Result<bool> {
        let done = |c: &Counters| c.merges + c.trivial_moves;
        let before = done(&self.counters);
        self.reap(true)?;
        while self.start()? {
            self.reap(true)?;
        }
        Ok(done(&self.counters) != before)
    }

    /// Unless a merge is running: carry out the moves due that need no IO, then start the next
    /// merge due on its own thread. Returns whether a merge is running. Inline, carry out every
    /// merge due here.
    fn start(&mut self) -> Result<bool> {
        if self.inflight.is_some() {
            return Ok(true);
        }
        loop {
            let Some(action) = pick(&self.levels, &self.cfg, &self.cursors) else {
                policy::trim(&mut self.levels);
                return Ok(false);
            };
            let job = match action {
                Action::Deepen(level) => {
                    policy::deepen(&mut self.levels, level);
                    self.counters.trivial_moves += 1;
                    continue;
                }
                Action::Grow => {
                    policy::grow(&mut self.levels, &mut self.cursors);
                    continue;
                }
                Action::Merge(job) => job,
            };
            policy::advance_cursor(&self.levels, &mut self.cursors, &self.cfg, &job);
            if job.trivial || !self.background {
                self.run_inline(job)?;
                continue;
            }
            let runs = policy::inputs(&self.levels, &job);
            let work = self.work(&job, &runs)?;
            let thread = std::thread::Builder::new()
                .name("strata-lsm-merge".into())
                .spawn(move || work.run())
                .map_err(|e| Error::io("start a merge thread", e))?;
            self.inflight = Some(InFlight { job, runs, thread });
            return Ok(true);
        }
    }

    /// Carry out `job` here, on the writer (no merge may be running).
    fn run_inline(&mut self, job: Job) -> Result<()> {
        if job.trivial {
            self.counters.trivial_moves += 1;
            policy::move_down(&mut self.levels, &job);
            return Ok(());
        }
        let runs = policy::inputs(&self.levels, &job);
        let out = self.work(&job, &runs)?.run()?;
        self.install(job, runs, out)
    }

    /// For `policy::settle_target`: of each level above the last, one block of each table
    /// (its middle one) read and every key in it looked for in the older runs below it;
    /// `shadows[i][j]` is then level i's bytes times the share of its sampled keys whose
    /// nearest older copy is in level j (j = i = 0: an older run of level 0). A table of 4 MiB
    /// holds about a thousand 4 KiB blocks, so this reads about a thousandth of the levels
    /// above the last, and a block per sampled key found (a filter's yes is confirmed).
    fn sample_shadows(&mut self) -> Result<Vec<Vec<u64>>> {
        let n = self.levels.len();
        let mut shadows = vec![vec![0u64; n]; n];
        let Some(last) = self.levels.iter().rposition(|l| !l.is_empty()) else {
            return Ok(shadows);
        };
        for (i, row) in shadows.iter_mut().enumerate() {
            for r in 0..self.levels[i].runs.len() {
                if i == last && r + 1 == self.levels[i].runs.len() {
                    break; // the oldest run of all shadows nothing
                }
                for t in self.levels[i].runs[r].clone() {
                    let pin = self.store.get(t.id)?;
                    let blocks = pin.read().blocks.len();
                    if blocks == 0 {
                        continue;
                    }
                    let block = blocks / 2;
                    let points = super::read::load_points(&self.store, &pin, block)?;
                    drop(pin);
                    let mut found = vec![0u64; n];
                    let mut keys = 0u64;
                    let mut prev: Option<&[u8]> = None;
                    for m in &points {
                        if prev == Some(m.key.as_slice()) {
                            continue;
                        }
                        prev = Some(&m.key);
                        keys += 1;
                        if let Some(j) = self.held_below(&m.key, i, r + 1)? {
                            found[j] += 1;
                        }
                    }
                    for (cell, f) in row.iter_mut().zip(&found) {
                        *cell += t.bytes * f / keys.max(1);
                    }
                }
            }
        }
        Ok(shadows)
    }

    /// At a checkpoint asked for, once every merge due has run (leveled): merge the levels
    /// above down into the level `policy::settle_target` names, if any, in one merge, then
    /// run whatever that makes due. So a tree flushed or closed after a batch of updates does
    /// not keep them above the versions they replaced.
    pub(super) fn settle_at_rest(&mut self) -> Result<()> {
        debug_assert!(self.inflight.is_none());
        if self.cfg.policy != Policy::Leveled {
            return Ok(());
        }
        let shadows = self.sample_shadows()?;
        // The sample's blocks came through the pool, which must be within its budget again
        // when the checkpoint returns (nothing is pinned between operations).
        self.store.evict_to_budget()?;
        let Some(target) = policy::settle_target(&self.levels, &self.cfg, &shadows) else {
            return Ok(());
        };
        self.rest_merges += 1;
        self.run_inline(policy::settle_job(&self.levels, target))?;
        self.drain()?;
        self.store.evict_to_budget()
    }

    /// What the merge of `runs` into `job.target` needs, taken now.
    fn work(&mut self, job: &Job, runs: &[Vec<TableInfo>]) -> Result<Work> {
        // Every range delete of the inputs, for shadowing and to carry down: in the heads,
        // which the pool holds.
        let mut ranges: Vec<Msg> = Vec::new();
        for t in runs.iter().flatten().filter(|t| t.ranges > 0) {
            let pin = self.store.get(t.id)?;
            ranges.extend(pin.read().ranges.iter().cloned());
        }
        let pager = self.store.pager();
        let mut srcs = Vec::with_capacity(runs.len());
        for run in runs {
            let mut v = Vec::with_capacity(run.len());
            for t in run {
                let ext = pager
                    .extent(t.id)
                    .ok_or_else(|| self.corrupt(t.id, "table not in the pager's table".into()))?;
                v.push(Src {
                    info: t.clone(),
                    ext,
                });
            }
            srcs.push(v);
        }
        Ok(Work {
            runs: srcs,
            ranges,
            bottom: job.bottom,
            cfg: self.cfg,
            filter_bits: self.filter_bits_for(job.target),
            merge: self.merge.clone(),
            sink: pager.block_sink(),
        })
    }

    /// Install the running merge's output once it is done (with `wait`, once it is); returns
    /// whether one was installed. A failed merge changed nothing: its error is returned.
    pub(super) fn reap(&mut self, wait: bool) -> Result<bool> {
        match &self.inflight {
            Some(f) if wait || f.thread.is_finished() => {}
            _ => return Ok(false),
        }
        let InFlight { job, runs, thread } = self.inflight.take().expect("matched above");
        let out = match thread.join() {
            Ok(out) => out?,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        self.install(job, runs, out)?;
        Ok(true)
    }

    /// Put a merge's output in place of its inputs, and free the inputs.
    fn install(&mut self, job: Job, runs: Vec<Vec<TableInfo>>, out: Output) -> Result<()> {
        let written = out.written;
        let tables = self.adopt(out.tables)?;
        let read: u64 = runs.iter().flatten().map(|t| t.bytes).sum();
        for t in runs.iter().flatten() {
            self.store.free(t.id);
        }
        self.counters.merges += 1;
        self.counters.merge_read_bytes += read;
        self.counters.merge_write_bytes += written;
        self.largest_merge = self.largest_merge.max(read + written);
        policy::install(&mut self.levels, &job, tables);
        Ok(())
    }

    /// Wait for the running merge and drop its output unread (the engine is going away).
    pub(super) fn abandon_merge(&mut self) {
        if let Some(f) = self.inflight.take() {
            if let Ok(Ok(out)) = f.thread.join() {
                let sink = self.store.pager().block_sink();
                for w in out.tables {
                    sink.discard(w.ext);
                }
            }
        }
    }
}
