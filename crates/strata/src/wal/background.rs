//! A checkpoint made durable on a thread of its own, for both facades (`Db`, `VersionedDb`).
//!
//! The writer has begun it: the engine sealed its state and the pager wrote the translation
//! table (`Pager::begin_commit`, returning a `Commit`). `Checkpointing::start` then moves the
//! log to its other file (`Wal::rotate`: the records the checkpoint covers stay synced in the
//! file left behind, so a checkpoint that never becomes durable loses nothing) and hands the
//! commit to a thread, which writes what it holds, syncs, writes the superblock
//! (`Commit::make_durable`), and then marks the file left behind obsolete (`release`). The
//! facade finishes it under its state lock once the thread is done (`join`, then the engine's
//! `finish_checkpoint`, which lets the extents only the previous checkpoint referenced be
//! reused).
//!
//! Invariant: at most one in flight. The next rotation writes over the file this one left
//! behind, so the facade joins it before it begins another (and before a checkpoint on the
//! caller's thread, a check that reads every block, or a close).

use std::thread::JoinHandle;

use super::{release, Wal};
use crate::error::{Error, Result};
use crate::storage::Commit;

/// The thread making a checkpoint durable. It hands the commit back even when it failed:
/// blocks it did not write are still read back from their places until the facade, holding
/// its lock, drops the commit and poisons the database.
pub struct Checkpointing(JoinHandle<(Commit, Result<()>)>);

impl Checkpointing {
    /// Move the log on past `seq`, the last record `commit` covers, and make the commit
    /// durable on a thread of its own.
    pub fn start(wal: &Wal, seq: u64, commit: Commit) -> Result<Checkpointing> {
        wal.rotate(seq)?;
        let left_behind = wal.left_behind();
        let thread = std::thread::Builder::new()
            .name("strata-checkpoint".into())
            .spawn(move || {
                let mut commit = commit;
                // Released before `finish_checkpoint` lets the older checkpoint's extents be
                // reused (see `release`).
                let made = commit
                    .make_durable()
                    .and_then(|_| release(&*left_behind, seq));
                (commit, made)
            })
            .map_err(|e| Error::io("start a checkpoint thread", e))?;
        Ok(Checkpointing(thread))
    }

    /// Complete the checkpoint in `slot`, if any, once its thread is done (or, with `wait`,
    /// after waiting for it): `then` gets the durable commit (the engine's
    /// `finish_checkpoint`). An error is the thread's or `then`'s; a failed commit is dropped
    /// here, under the caller's lock, which then poisons the database before letting go.
    pub fn finish(
        slot: &mut Option<Checkpointing>,
        wait: bool,
        then: impl FnOnce(Commit) -> Result<()>,
    ) -> Result<()> {
        match slot {
            Some(t) if wait || t.0.is_finished() => {}
            _ => return Ok(()),
        }
        slot.take().expect("matched above").join().and_then(then)
    }

    /// Wait for the thread: the commit, durable, for the engine's `finish_checkpoint`; or the
    /// error that kept it from being (the commit is dropped here, under the caller's lock).
    pub fn join(self) -> Result<Commit> {
        match self.0.join() {
            Ok((commit, made)) => made.map(|_| commit),
            Err(_) => Err(Error::io(
                "make a checkpoint durable",
                std::io::Error::other("the checkpoint thread panicked"),
            )),
        }
    }
}
