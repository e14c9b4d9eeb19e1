//! LMDB through `heed`: a copy-on-write B+-tree in a memory map, with LMDB's C library bundled
//! by `lmdb-master-sys`.
//!
//! The environment lives in `DIR` (`data.mdb`, `lock.mdb`) with the unnamed database of raw
//! bytes. Every commit is synced (LMDB's default: it writes the dirty pages, fsyncs, then writes
//! and fsyncs the meta page); `NO_SYNC` when the config asks for no syncs. `NO_READ_AHEAD`
//! (MDB_NORDAHEAD) is set: LMDB documents it for random reads on data larger than memory, and
//! without it the first faults of a cold read read the whole file ahead, so the "cold" phase
//! measured a warm map. Each `write` is one write transaction. A group of reads
//! (`begin_reads`) shares one read transaction, as an application reading many keys would;
//! outside a group each read and scan has its own. LMDB writes its pages at commit, so there is
//! nothing to flush.

use std::hint::black_box;
use std::ops::Bound;
use std::path::Path;

use heed::types::Bytes;
use heed::{CommitOrAbort, Database, Env, EnvFlags, EnvOpenOptions, RoTxn, WithTls};
use strata_bench::store::{Config, Result, Store, Subject, Write};

/// Address space reserved per expected record. The map is sparse (the file grows only as pages
/// are written, without `WRITE_MAP`), so this is generous on purpose: 116-byte records take
/// about 200 bytes in half-full leaves, and the mixed phase adds records and free pages.
const MAP_BYTES_PER_RECORD: u64 = 16 << 10;
const MIN_MAP_BYTES: u64 = 1 << 30;
/// 64-bit address space is plentiful, but keep the request reasonable.
const MAX_MAP_BYTES: u64 = 1 << 40;

/// The map size for a workload of `expected_records`, a whole number of MiB (LMDB wants a
/// multiple of the OS page size).
pub fn map_size(expected_records: u64) -> usize {
    let want = expected_records
        .saturating_mul(MAP_BYTES_PER_RECORD)
        .clamp(MIN_MAP_BYTES, MAX_MAP_BYTES);
    (want.div_ceil(1 << 20) << 20) as usize
}

/// The LMDB adapter ("lmdb").
pub struct Lmdb;

impl Subject for Lmdb {
    fn name(&self) -> &str {
        "lmdb"
    }

    fn version(&self) -> String {
        format!(
            "heed {} (lmdb-master-sys {}, {})",
            env!("STRATA_COMPARE_HEED"),
            env!("STRATA_COMPARE_LMDB_SYS"),
            heed::lmdb_version().string
        )
    }

    fn settings(&self, cfg: &Config) -> String {
        let durability = if cfg.sync {
            "default env flags: each batch one write transaction, synced at commit"
        } else {
            "EnvFlags::NO_SYNC: each batch one write transaction, no fsync"
        };
        format!(
            "unnamed database of Bytes; {durability}; map size {} MiB (sparse; the default 10 MiB \
             cannot hold the data); MDB_NORDAHEAD (default off; LMDB's documented setting for \
             random reads on data larger than memory, so a cold read faults in its pages, not \
             the file); no cache of its own: reads go through the OS page cache via mmap, so \
             the {} MiB budget does not apply (the memory column counts those pages); no \
             compression (LMDB has none); point reads in groups under one read transaction; \
             flush: nothing (pages are written at commit); other flags default",
            map_size(cfg.expected_records) >> 20,
            cfg.cache_bytes >> 20
        )
    }

    fn open(&self, dir: &Path, cfg: &Config) -> Result<Box<dyn Store>> {
        let mut options = EnvOpenOptions::new();
        options.map_size(map_size(cfg.expected_records));
        let mut flags = EnvFlags::NO_READ_AHEAD;
        if !cfg.sync {
            flags |= EnvFlags::NO_SYNC;
        }
        // SAFETY: NO_READ_AHEAD only advises the kernel about the map; NO_SYNC gives up
        // durability of recent commits on a system crash, which is what an unsynced run asks
        // for. Neither can corrupt memory.
        unsafe {
            options.flags(flags);
        }
        // SAFETY: this process opens the environment once at a time (heed refuses a second open
        // of the same path), no other process touches the directory, and the map is never
        // modified outside LMDB.
        let env = unsafe { options.open(dir)? };
        let wtxn = env.write_txn()?;
        let db = env
            .create_databases_and_commit(wtxn, |opener, wtxn| -> heed::Result<_> {
                let db = opener.create_database::<Bytes, Bytes>(wtxn, None)?;
                Ok(CommitOrAbort::<_, ()>::Commit(db))
            })?
            .unwrap_commit();
        Ok(Box::new(LmdbStore {
            group: None,
            env,
            db,
        }))
    }
}

struct LmdbStore {
    /// The read transaction of the current group of reads (dropped before the env).
    group: Option<RoTxn<'static, WithTls>>,
    env: Env,
    db: Database<'static, Bytes, Bytes>,
}

impl LmdbStore {
    /// Run `f` in the group's read transaction, or in one of its own outside a group.
    fn reading<R>(&self, f: impl FnOnce(&RoTxn<WithTls>) -> heed::Result<R>) -> Result<R> {
        Ok(match &self.group {
            Some(txn) => f(txn)?,
            None => f(&self.env.read_txn()?)?,
        })
    }
}

impl Store for LmdbStore {
    fn write(&mut self, batch: &[Write]) -> Result<()> {
        let mut wtxn = self.env.write_txn()?;
        for w in batch {
            match &w.value {
                Some(v) => self.db.put(&mut wtxn, &w.key, v)?,
                None => {
                    self.db.delete(&mut wtxn, &w.key)?;
                }
            }
        }
        wtxn.commit()?;
        Ok(())
    }

    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        if key.is_empty() {
            // LMDB cannot hold an empty key (it refuses it with MDB_BAD_VALSIZE).
            return Ok(false);
        }
        let db = self.db;
        self.reading(|rtxn| {
            Ok(match db.get(rtxn, key)? {
                Some(v) => {
                    out.clear();
                    out.extend_from_slice(v);
                    true
                }
                None => false,
            })
        })
    }

    fn scan(&mut self, start: &[u8], limit: usize) -> Result<usize> {
        // LMDB refuses an empty key even as a bound; every key is ≥ the empty one.
        let from = match start {
            [] => Bound::Unbounded,
            _ => Bound::Included(start),
        };
        let range = (from, Bound::Unbounded);
        let db = self.db;
        self.reading(|rtxn| {
            let mut n = 0;
            for item in db.range(rtxn, &range)?.take(limit) {
                let (k, v) = item?;
                black_box((k.len(), v.len()));
                n += 1;
            }
            Ok(n)
        })
    }

    fn begin_reads(&mut self) -> Result<()> {
        self.group = Some(self.env.clone().static_read_txn()?);
        Ok(())
    }

    fn end_reads(&mut self) -> Result<()> {
        // A read transaction ends by being dropped (mdb_txn_abort).
        self.group = None;
        Ok(())
    }

    fn close(self: Box<Self>) -> Result<()> {
        let LmdbStore { group, env, db: _ } = *self;
        drop(group);
        // The environment closes when its last handle goes; wait for that, so that a reopen of
        // the same directory in this process finds it closed.
        env.prepare_for_closing().wait();
        Ok(())
    }
}
