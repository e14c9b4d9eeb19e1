//! Flushes on a thread of their own (with background merges): the put that fills the write
//! buffer freezes it and hands it to the flush thread, and goes on with an empty one. Before,
//! that put wrote the buffer's arrays itself: the slowest puts (16–39 ms at 1,000 versions and
//! a 4 MiB buffer), and, under `VersionedDb`'s lock, the longest waits of readers beside it.
//!
//! - **Freeze** (`flush_in_background`): the buffer moves into an `Arc` shared by reads and the
//!   thread, with its W (every live version that reads its writes, as an inline flush takes)
//!   and a copy of the version tree; the thread copies its entries out and writes the dense
//!   pieces (`merge::make_pieces`) to fresh extents (`BlockSink`).
//! - **Reads** consult the frozen buffer beside the buffer (`Sda::buffers`): its writes are
//!   older than the buffer's, and the nearest version, then the newest seq, wins, wherever
//!   an answer lies.
//! - **Tree changes** while it runs are recorded (`merger::TreeEvent`) and replayed on its
//!   arrays at install, as a merge's are.
//! - **Install** (`reap_flush`): the arrays enter level 0 (or the level of their size) and
//!   the frozen buffer goes. It happens between operations once the thread is done; a
//!   checkpoint, `finish_merges`, a stall before a flush, the next freeze and a close's moves
//!   wait for it first, so a manifest never leaves writes that only memory holds, and a flush
//!   inline never passes one frozen.
//! - A failed flush changed nothing in the levels; its error poisons the database as an inline
//!   flush's would (the log still holds its writes). A flush running when the engine goes
//!   away is waited for and its arrays given back (`abandon_flush`).
//!
//! Invariant: at most one buffer is frozen; its writes are older (by seq) than every write in
//! the buffer, and newer than every entry in the arrays.
//!
//! Memory: the frozen buffer is a second buffer's worth while it lasts.

use std::sync::Arc;
use std::time::Instant;

use super::merge::{make_pieces, Cut};
use super::merger::{TreeEvent, Worker};
use super::*;
use crate::storage::BlockSink;

/// What the flush thread needs, owned.
pub(super) struct FlushWork {
    buffer: Arc<Buffer>,
    w_set: Vec<Version>,
    /// The version tree when the buffer froze: liveness is decided by it.
    tree: Arc<VersionTree>,
    cfg: Config,
    encoding: array::Encoding,
    sink: BlockSink,
}

impl FlushWork {
    fn run(self) -> Result<Cut> {
        let entries = self.buffer.entries();
        make_pieces(
            &entries,
            &self.w_set,
            &self.tree,
            &self.cfg,
            self.encoding,
            &self.sink,
        )
    }
}

/// A full buffer with the flush thread: read beside the buffer until its arrays are installed.
pub(super) struct Frozen {
    pub(super) buffer: Arc<Buffer>,
    pub(super) events: Vec<TreeEvent>,
    /// Its result, once received.
    done: Option<Result<Cut>>,
}

impl Sda {
    /// The buffer, then the frozen one if a flush is running: what a read consults before the
    /// arrays.
    pub(super) fn buffers(&self) -> impl Iterator<Item = &Buffer> {
        std::iter::once(&self.buffer).chain(self.frozen.as_ref().map(|f| &*f.buffer))
    }

    /// Freeze the buffer and hand it to the flush thread, once the flush before it is
    /// installed (waiting for it is counted and timed).
    pub(super) fn flush_in_background(&mut self) -> Result<()> {
        if self.frozen.is_some() {
            let began = Instant::now();
            self.reap_flush(true)?;
            self.flush_waits += 1;
            self.flush_wait_nanos += began.elapsed().as_nanos() as u64;
        }
        let w_set = self.w_set_of(self.buffer.versions());
        let buffer = Arc::new(std::mem::take(&mut self.buffer));
        self.buffered_bytes = 0;
        let work = FlushWork {
            buffer: buffer.clone(),
            w_set,
            tree: self.tree_now(),
            cfg: self.cfg,
            encoding: self.encoding,
            sink: self.pager.block_sink(),
        };
        if self.flusher.is_none() {
            self.flusher = Some(Worker::start("strata-sda-flush", FlushWork::run)?);
        }
        self.flusher.as_mut().expect("started above").send(work);
        self.frozen = Some(Frozen {
            buffer,
            events: Vec::new(),
            done: None,
        });
        self.background_flushes += 1;
        Ok(())
    }

    /// Install the running flush once it is done (with `wait`, once it is); whether one was.
    pub(super) fn reap_flush(&mut self, wait: bool) -> Result<bool> {
        let Some(f) = self.frozen.as_mut() else {
            return Ok(false);
        };
        if f.done.is_none() {
            let w = self.flusher.as_mut().expect("a flush runs on it");
            f.done = w.result(wait);
        }
        if f.done.is_none() {
            return Ok(false);
        }
        let f = self.frozen.take().expect("matched above");
        let cut = f.done.expect("checked above")?;
        self.counters.flushes += 1;
        self.install_cut(0, cut, &f.events)?;
        Ok(true)
    }

    /// Wait for the running flush and give its arrays back (the engine is going away; the
    /// log holds its writes).
    pub(super) fn abandon_flush(&mut self) {
        if let Some(f) = self.frozen.take() {
            let done = match f.done {
                Some(d) => Some(d),
                None => self.flusher.as_mut().and_then(|w| w.result(true)),
            };
            if let Some(Ok(cut)) = done {
                cut.discard(&self.pager.block_sink());
            }
        }
    }
}
