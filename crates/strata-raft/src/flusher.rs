//! The flusher: one thread that makes strata's log durable for everyone waiting on it.
//!
//! Writers put their batch into the `Db` with `Durability::None` (ordered, visible, not yet on
//! stable storage) and then hand the flusher a completion. The flusher takes every completion
//! waiting, calls `Db::sync` once, and runs them all with its result: group commit across Raft
//! appends, vote and mark writes, without blocking the async runtime on an fsync.
//!
//! Invariant: a completion runs only after a `Db::sync` that started after the completion was
//! queued, hence after its writer's batch was in strata's log; `Db::sync` makes every write so
//! far durable, so the completion's batch is durable when it runs.

use std::io;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use strata::Db;

pub type Completion = Box<dyn FnOnce(io::Result<()>) + Send>;

pub struct Flusher {
    tx: Mutex<Option<mpsc::Sender<Completion>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Flusher {
    pub fn start(db: Arc<Db>) -> io::Result<Flusher> {
        let (tx, rx) = mpsc::channel::<Completion>();
        let thread = std::thread::Builder::new()
            .name("strata-raft-flush".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    let mut batch = vec![first];
                    batch.extend(rx.try_iter());
                    let synced = db.sync().map_err(|e| io::Error::other(e.to_string()));
                    for done in batch {
                        done(match &synced {
                            Ok(()) => Ok(()),
                            Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
                        });
                    }
                }
            })?;
        Ok(Flusher {
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Run `done` once everything written to the `Db` so far is durable.
    pub fn after_sync(&self, done: Completion) {
        let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        match tx.as_ref() {
            Some(tx) => {
                if let Err(mpsc::SendError(done)) = tx.send(done) {
                    done(Err(io::Error::other("the flusher thread has stopped")));
                }
            }
            None => done(Err(io::Error::other("the flusher is shut down"))),
        }
    }

    /// Wait until everything written to the `Db` so far is durable.
    pub async fn sync(&self) -> io::Result<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.after_sync(Box::new(move |r| {
            let _ = tx.send(r);
        }));
        rx.await
            .unwrap_or_else(|_| Err(io::Error::other("the flusher dropped a sync request")))
    }
}

impl Drop for Flusher {
    /// Stop the thread and wait for it, so that its handle on the `Db` is gone when the store
    /// is: a reopen in the same process then finds the database unlocked.
    fn drop(&mut self) {
        self.tx.get_mut().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = self
            .thread
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            let _ = t.join();
        }
    }
}
