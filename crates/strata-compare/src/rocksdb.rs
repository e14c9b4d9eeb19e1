//! RocksDB through `rust-rocksdb` (feature `rocksdb`, off by default: its bundled C++ build
//! takes about 17 minutes here and needs libclang, `apt-get install libclang-dev`).
//!
//! The database lives in `DIR`, default column family. Each `write` is one `WriteBatch`
//! written with `WriteOptions::set_sync(cfg.sync)`: with sync the WAL is fdatasync'd before the
//! write returns (RocksDB's durable setting; the default is no sync). Block-based tables with an
//! LRU block cache of the config's budget and a 10-bit-per-key bloom filter (whole-key, full
//! filter blocks); compression none at every level, since the values are incompressible and the
//! crate is built without compression libraries. Everything else is RocksDB's default
//! (leveled compaction, 64 MiB write buffer, 2 background jobs, buffered IO). The flush is
//! `DB::flush` (memtables to SST files, waited for) and then `DB::wait_for_compact`, so the
//! compactions the load set off are inside the measured window.

use std::hint::black_box;
use std::path::Path;

use ::rocksdb::{
    BlockBasedOptions, Cache, DBCompressionType, Options, WaitForCompactOptions, WriteBatch,
    WriteOptions, DB,
};
use strata_bench::store::{Config, Result, Store, Subject, Write};

/// The RocksDB adapter ("rocksdb").
pub struct RocksDb;

impl Subject for RocksDb {
    fn name(&self) -> &str {
        "rocksdb"
    }

    fn version(&self) -> String {
        // librocksdb-sys versions read "0.19.0+11.8.1": the part after '+' is RocksDB's.
        format!(
            "rocksdb {} (librocksdb-sys {})",
            env!("STRATA_COMPARE_ROCKSDB"),
            env!("STRATA_COMPARE_LIBROCKSDB_SYS")
        )
    }

    fn settings(&self, cfg: &Config) -> String {
        let durability = if cfg.sync {
            "each batch one WriteBatch with WriteOptions::set_sync(true) (WAL fdatasync'd \
             before the write returns)"
        } else {
            "each batch one WriteBatch with WriteOptions::set_sync(false) (WAL to OS buffers)"
        };
        format!(
            "default column family; {durability}; LRU block cache {} MiB (default 32 MiB; \
             memtables are memory beyond it); bloom filter 10 bits/key (default none; what \
             RocksDB's tuning guide and every LSM peer here use for point reads); compression \
             none (default Snappy; values are incompressible); buffered IO (default); 64 MiB \
             write buffer, leveled compaction, 2 background jobs at their defaults; point \
             reads one by one (no read transaction needed); flush: DB::flush, then \
             DB::wait_for_compact",
            cfg.cache_bytes >> 20
        )
    }

    fn open(&self, dir: &Path, cfg: &Config) -> Result<Box<dyn Store>> {
        let cache = Cache::new_lru_cache(cfg.cache_bytes as usize);
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&cache);
        table.set_bloom_filter(10.0, false);
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.set_compression_type(DBCompressionType::None);
        opts.set_bottommost_compression_type(DBCompressionType::None);
        opts.set_block_based_table_factory(&table);
        let db = DB::open(&opts, dir)?;
        let mut write_options = WriteOptions::default();
        write_options.set_sync(cfg.sync);
        Ok(Box::new(RocksStore {
            db,
            write_options,
            _cache: cache,
        }))
    }
}

struct RocksStore {
    db: DB,
    write_options: WriteOptions,
    /// The block cache the table options point at; kept alive with the database.
    _cache: Cache,
}

impl Store for RocksStore {
    fn write(&mut self, batch: &[Write]) -> Result<()> {
        let mut b = WriteBatch::default();
        for w in batch {
            match &w.value {
                Some(v) => b.put(&w.key, v),
                None => b.delete(&w.key),
            }
        }
        self.db.write_opt(b, &self.write_options)?;
        Ok(())
    }

    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        match self.db.get_pinned(key)? {
            Some(v) => {
                out.clear();
                out.extend_from_slice(&v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn scan(&mut self, start: &[u8], limit: usize) -> Result<usize> {
        let mut it = self.db.raw_iterator();
        it.seek(start);
        let mut n = 0;
        while n < limit && it.valid() {
            black_box((it.key().map(<[u8]>::len), it.value().map(<[u8]>::len)));
            n += 1;
            it.next();
        }
        it.status()?;
        Ok(n)
    }

    fn flush(&mut self) -> Result<()> {
        // Memtables to SST files (FlushOptions' default waits), then every compaction queued.
        self.db.flush()?;
        self.db
            .wait_for_compact(&WaitForCompactOptions::default())?;
        Ok(())
    }

    fn close(self: Box<Self>) -> Result<()> {
        // Dropping the handle closes the database (synced batches are already in the WAL; an
        // unsynced run's WAL writes are in the OS buffers, which a clean close keeps).
        drop(self);
        Ok(())
    }
}
