//! fjall: an LSM-tree (the `lsm-tree` crate) with a shared journal, pure Rust.
//!
//! The database lives in `DIR`, with one keyspace. Each `write` is one `WriteBatch`, committed
//! with `PersistMode::SyncAll`, the mode fjall's README and examples use to make data "definitely
//! durable" (fsync of the journal before `commit` returns); with no syncs, the batch goes to the
//! OS buffers (fjall's default). The block cache is the config's budget. Compression is off for
//! data blocks and the journal: the workload's values are incompressible, and the other engines
//! compress nothing either. The flush rotates the memtable and waits until it is written as a
//! table (`Keyspace::rotate_memtable_and_wait`), then syncs the journal; fjall has no call that
//! waits for compactions, so those that trail it are counted in the phases after it.

use std::hint::black_box;
use std::path::Path;

use ::fjall::config::CompressionPolicy;
use ::fjall::{CompressionType, Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use strata_bench::store::{Config, Result, Store, Subject, Write};

/// The fjall adapter ("fjall").
pub struct Fjall;

impl Subject for Fjall {
    fn name(&self) -> &str {
        "fjall"
    }

    fn version(&self) -> String {
        format!(
            "fjall {} (lsm-tree {})",
            env!("STRATA_COMPARE_FJALL"),
            env!("STRATA_COMPARE_LSM_TREE")
        )
    }

    fn settings(&self, cfg: &Config) -> String {
        let durability = if cfg.sync {
            "each batch one WriteBatch with durability PersistMode::SyncAll (journal fsync'd \
             before commit returns)"
        } else {
            "each batch one WriteBatch, flushed to OS buffers only (fjall's default)"
        };
        format!(
            "one keyspace; {durability}; block cache {} MiB (default 32 MiB; memtables are \
             memory beyond it); compression none for data blocks (default: LZ4 from level 2) \
             and the journal (default LZ4; values are incompressible); buffered file IO (its \
             only mode); leveled compaction, 64 MiB memtable, bloom filters (0.01% FPR at L0, \
             10 bits/key below) and worker threads at fjall's defaults; point reads one by one \
             (no read transaction needed); flush: rotate the memtable and wait for its table, \
             then sync the journal (fjall has no wait for compactions)",
            cfg.cache_bytes >> 20
        )
    }

    fn open(&self, dir: &Path, cfg: &Config) -> Result<Box<dyn Store>> {
        let db = Database::builder(dir)
            .cache_size(cfg.cache_bytes)
            .journal_compression(CompressionType::None)
            .open()?;
        let keyspace = db.keyspace("kv", || {
            KeyspaceCreateOptions::default()
                .data_block_compression_policy(CompressionPolicy::all(CompressionType::None))
        })?;
        Ok(Box::new(FjallStore {
            db,
            keyspace,
            sync: cfg.sync,
        }))
    }
}

struct FjallStore {
    db: Database,
    keyspace: Keyspace,
    sync: bool,
}

impl Store for FjallStore {
    fn write(&mut self, batch: &[Write]) -> Result<()> {
        let durability = self.sync.then_some(PersistMode::SyncAll);
        let mut b = self.db.batch().durability(durability);
        for w in batch {
            match &w.value {
                Some(v) => b.insert(&self.keyspace, w.key.as_slice(), v.as_slice()),
                None => b.remove(&self.keyspace, w.key.as_slice()),
            }
        }
        b.commit()?;
        Ok(())
    }

    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        match self.keyspace.get(key)? {
            Some(v) => {
                out.clear();
                out.extend_from_slice(&v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn scan(&mut self, start: &[u8], limit: usize) -> Result<usize> {
        let mut n = 0;
        for guard in self.keyspace.range(start..).take(limit) {
            let (k, v) = guard.into_inner()?;
            black_box((k.len(), v.len()));
            n += 1;
        }
        Ok(n)
    }

    fn flush(&mut self) -> Result<()> {
        self.keyspace.rotate_memtable_and_wait()?;
        self.db.persist(PersistMode::SyncAll)?;
        Ok(())
    }

    fn close(self: Box<Self>) -> Result<()> {
        let FjallStore { db, keyspace, .. } = *self;
        // What dropping the database does anyway, here with its error reported.
        db.persist(PersistMode::SyncAll)?;
        drop(keyspace);
        // Dropping the last handle stops the background workers and releases the lock file.
        drop(db);
        Ok(())
    }
}
