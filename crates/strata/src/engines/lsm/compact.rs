//! Flushes and merges: the IO that carries out what `policy` decides.
//!
//! - A flush writes the memtable out as a new run, the newest of level 0.
//! - A merge reads its input tables whole (one read per table, bypassing the pool), merges them
//!   by key (`kv::merging::next_group`), keeps of each key what `kv::merging::reduce` keeps, and
//!   writes the output as tables of about `table_bytes`, each in one write. Range deletes are
//!   carried into the output clipped to each table's share of the keys (dropped at the bottom).
//! - Then the manifest in memory changes: inputs out, outputs in, inputs freed. Nothing is
//!   durable until the next checkpoint commits the manifest (see `mod.rs`).

use super::policy::{pick, Action, Job};
use super::read::{Ctx, RunCursor};
use super::*;
use crate::kv::merging::{next_group, reduce, Cursor};

/// Tables being written for one new run.
struct Output {
    block_bytes: usize,
    table_bytes: usize,
    filter_bits: f64,
    builder: table::Builder,
    /// Range deletes not yet given to a table (their starts at or above the last cut).
    ranges: Vec<Msg>,
    tables: Vec<TableInfo>,
    written: u64,
}

impl Output {
    fn new(cfg: &Config, filter_bits: f64, ranges: Vec<Msg>) -> Output {
        Output {
            block_bytes: cfg.block_bytes,
            table_bytes: cfg.table_bytes,
            filter_bits,
            builder: table::Builder::new(cfg.block_bytes),
            ranges,
            tables: Vec::new(),
            written: 0,
        }
    }

    /// Add one key's messages (sorted by seq), cutting a table first if the current one is full.
    fn add(&mut self, store: &mut NodeStore<Table>, key: &[u8], msgs: &[Msg]) -> Result<()> {
        if msgs.is_empty() {
            return Ok(());
        }
        if self.builder.bytes() >= self.table_bytes {
            self.cut(store, Some(key))?;
        }
        self.builder.add(msgs);
        Ok(())
    }

    /// Finish the current table: it takes the range deletes below `next` (the next table's
    /// first key; all of them when none follows), clipped there.
    fn cut(&mut self, store: &mut NodeStore<Table>, next: Option<&[u8]>) -> Result<()> {
        let mut mine = Vec::new();
        let mut rest = Vec::new();
        for r in std::mem::take(&mut self.ranges) {
            let Body::DeleteRange(end) = &r.body else {
                unreachable!("ranges only")
            };
            match next {
                Some(n) if r.key.as_slice() >= n => rest.push(r),
                Some(n) if end.as_slice() > n => {
                    mine.push(Msg {
                        key: r.key.clone(),
                        seq: r.seq,
                        body: Body::DeleteRange(n.to_vec()),
                    });
                    rest.push(Msg {
                        key: n.to_vec(),
                        seq: r.seq,
                        body: Body::DeleteRange(end.clone()),
                    });
                }
                _ => mine.push(r),
            }
        }
        self.ranges = rest;
        let builder = std::mem::replace(&mut self.builder, table::Builder::new(self.block_bytes));
        let puts = builder.puts();
        let id = store.pager_mut().new_id();
        let Some((t, sealed)) = builder.finish(mine, self.filter_bits, id) else {
            return Ok(());
        };
        store.pager_mut().write_sealed(id, sealed)?;
        let bytes = store.pager().extent(id).map_or(0, |e| e.len);
        self.written += bytes;
        self.tables.push(TableInfo {
            id,
            bytes,
            points: t.points,
            puts,
            ranges: t.ranges.len() as u32,
            smallest: t.smallest.clone(),
            largest: t.largest.clone(),
        });
        store.adopt(id, t)?;
        Ok(())
    }

    fn finish(mut self, store: &mut NodeStore<Table>) -> Result<(Vec<TableInfo>, u64)> {
        match self.cut(store, None) {
            Ok(()) => Ok((self.tables, self.written)),
            Err(e) => Err(self.abandon(store, e)),
        }
    }

    /// After a failed read or write: free the tables written so far (no manifest names them),
    /// so that the engine is as it was before the flush or merge began.
    fn abandon(self, store: &mut NodeStore<Table>, e: Error) -> Error {
        for t in self.tables {
            store.free(t.id);
        }
        e
    }
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

    /// Write the memtable out as the newest run of level 0. On an error nothing has changed:
    /// the memtable stays and the tables written so far are freed.
    pub(super) fn flush(&mut self) -> Result<()> {
        let bottom = self.levels.iter().all(Level::is_empty);
        let ranges = if bottom {
            Vec::new()
        } else {
            self.mem.ranges().to_vec()
        };
        let mut out = Output::new(&self.cfg, self.filter_bits_for(0), ranges);
        for (key, msgs) in self.mem.keys() {
            // Nothing lies below the first run: what the memtable settles is final.
            let kept;
            let msgs = if bottom {
                kept = reduce(key, msgs.to_vec(), None, self.merge.as_deref(), true);
                &kept
            } else {
                msgs
            };
            if let Err(e) = out.add(&mut self.store, key, msgs) {
                return Err(out.abandon(&mut self.store, e));
            }
        }
        let (tables, written) = out.finish(&mut self.store)?;
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

    /// Run every merge the policy finds due; returns whether there was any.
    pub(super) fn compact_due(&mut self) -> Result<bool> {
        let mut ran = false;
        while let Some(action) = pick(&self.levels, &self.cfg, &self.cursors) {
            ran = true;
            match action {
                Action::Deepen(level) => {
                    let run = self.levels[level].runs.remove(0);
                    self.level_mut(level + 1).runs.insert(0, run);
                    self.counters.trivial_moves += 1;
                }
                Action::Merge(job) => self.merge_job(job)?,
            }
        }
        self.levels.truncate(
            self.levels
                .iter()
                .rposition(|l| !l.is_empty())
                .map_or(0, |i| i + 1),
        );
        Ok(ran)
    }

    fn level_mut(&mut self, i: usize) -> &mut Level {
        while self.levels.len() <= i {
            self.levels.push(Level::default());
        }
        &mut self.levels[i]
    }

    /// The tables `ids` of level `level`, in the order of `ids`.
    fn find_tables(&self, level: usize, ids: &[NodeId]) -> Vec<TableInfo> {
        ids.iter()
            .filter_map(|id| {
                self.levels
                    .get(level)?
                    .runs
                    .iter()
                    .flatten()
                    .find(|t| t.id == *id)
                    .cloned()
            })
            .collect()
    }

    /// Take the tables `ids` out of level `level` (emptied runs go too).
    fn drop_tables(&mut self, level: usize, ids: &[NodeId]) {
        if let Some(l) = self.levels.get_mut(level) {
            for run in &mut l.runs {
                run.retain(|t| !ids.contains(&t.id));
            }
            l.runs.retain(|r| !r.is_empty());
        }
    }

    /// Put `tables` (in key order) into the target level's first run, in key order.
    fn place_in_run(&mut self, target: usize, tables: Vec<TableInfo>) {
        let level = self.level_mut(target);
        if level.runs.is_empty() {
            level.runs.push(Vec::new());
        }
        let run = &mut level.runs[0];
        run.extend(tables);
        run.sort_by(|a, b| a.smallest.cmp(&b.smallest));
    }

    fn merge_job(&mut self, job: Job) -> Result<()> {
        if self.cfg.policy == Policy::Leveled && job.level > 0 {
            let last = job.inputs[0][0];
            let largest = self
                .tables()
                .find(|t| t.id == last)
                .map(|t| t.largest.clone());
            if let Some(largest) = largest {
                while self.cursors.len() <= job.level {
                    self.cursors.push(Vec::new());
                }
                self.cursors[job.level] = largest;
            }
        }
        let inputs: Vec<Vec<TableInfo>> = job
            .inputs
            .iter()
            .map(|ids| self.find_tables(job.level, ids))
            .collect();
        let input_ids: Vec<NodeId> = job.inputs.concat();
        if job.trivial {
            self.counters.trivial_moves += 1;
            self.drop_tables(job.level, &input_ids);
            let tables: Vec<TableInfo> = inputs.into_iter().flatten().collect();
            self.place_in_run(job.target, tables);
            return Ok(());
        }
        let mut runs = inputs;
        let into = job.into.clone().unwrap_or_default();
        if !into.is_empty() {
            runs.push(self.find_tables(job.target, &into));
        }
        // Nothing changes until the output is written: a failed read or write leaves the
        // levels as they were, and frees what was written.
        match self.merge_runs(&runs, &job) {
            Ok((tables, written)) => {
                self.drop_tables(job.level, &input_ids);
                self.drop_tables(job.target, &into);
                self.install(&job, runs, tables, written);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Merge `runs` into tables of a new run.
    fn merge_runs(&mut self, runs: &[Vec<TableInfo>], job: &Job) -> Result<(Vec<TableInfo>, u64)> {
        // Every range delete of the inputs, for shadowing and to carry down.
        let mut ranges: Vec<Msg> = Vec::new();
        for t in runs.iter().flatten().filter(|t| t.ranges > 0) {
            let pin = self.store.get(t.id)?;
            ranges.extend(pin.read().ranges.iter().cloned());
        }
        let filter_bits = self.filter_bits_for(job.target);
        let mut out = Output::new(
            &self.cfg,
            filter_bits,
            if job.bottom {
                Vec::new()
            } else {
                ranges.clone()
            },
        );
        let empty = Memtable::default();
        let mut cursors: Vec<Box<dyn Cursor<Ctx<'_>>>> = runs
            .iter()
            .map(|r| {
                Box::new(RunCursor::new(
                    r,
                    Bound::Unbounded,
                    Bound::Unbounded,
                    false,
                    true,
                )) as Box<dyn Cursor<Ctx<'_>>>
            })
            .collect();
        let mut ctx = Ctx {
            store: &mut self.store,
            mem: &empty,
            lost: None,
        };
        loop {
            let (key, mut msgs) = match next_group(&mut cursors, &mut ctx, false) {
                Ok(Some(group)) => group,
                Ok(None) => break,
                Err(e) => return Err(out.abandon(ctx.store, e)),
            };
            msgs.sort_unstable_by_key(|m| m.seq);
            let shadow = ranges
                .iter()
                .filter(|r| r.covers(&key))
                .map(|r| r.seq)
                .max();
            let kept = reduce(&key, msgs, shadow, self.merge.as_deref(), job.bottom);
            if let Err(e) = out.add(ctx.store, &key, &kept) {
                return Err(out.abandon(ctx.store, e));
            }
        }
        drop(cursors);
        out.finish(&mut self.store)
    }

    /// Put a merge's output in place of its inputs, and free the inputs.
    fn install(
        &mut self,
        job: &Job,
        runs: Vec<Vec<TableInfo>>,
        tables: Vec<TableInfo>,
        written: u64,
    ) {
        let read: u64 = runs.iter().flatten().map(|t| t.bytes).sum();
        for t in runs.iter().flatten() {
            self.store.free(t.id);
        }
        self.counters.merges += 1;
        self.counters.merge_read_bytes += read;
        self.counters.merge_write_bytes += written;
        self.largest_merge = self.largest_merge.max(read + written);
        if !tables.is_empty() {
            match job.into {
                Some(_) => self.place_in_run(job.target, tables),
                None => self.level_mut(job.target).runs.insert(0, tables),
            }
        }
    }
}
