//! redb: a copy-on-write B-tree in one file, pure Rust.
//!
//! One table of `&[u8] → &[u8]` in `DIR/data.redb`. Each `write` is one write transaction,
//! committed with redb's default `Durability::Immediate` (the commit returns once the data and
//! the new root are fsync'd) or `Durability::None` when the config asks for no syncs. A group of
//! reads (`begin_reads`) shares one read transaction and its open table, as an application
//! reading many keys would; outside a group each read and scan has its own. redb writes its
//! pages at commit, so there is nothing to flush.

use std::hint::black_box;
use std::path::Path;

use ::redb::{
    Builder, Database, Durability, ReadOnlyTable, ReadTransaction, ReadableDatabase,
    TableDefinition,
};
use strata_bench::store::{Config, Result, Store, Subject, Write};

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");

/// The redb adapter ("redb").
pub struct Redb;

impl Subject for Redb {
    fn name(&self) -> &str {
        "redb"
    }

    fn version(&self) -> String {
        format!("redb {}", env!("STRATA_COMPARE_REDB"))
    }

    fn settings(&self, cfg: &Config) -> String {
        let durability = if cfg.sync {
            "each batch one write transaction, Durability::Immediate (redb's default: fsync \
             before commit returns)"
        } else {
            "each batch one write transaction, Durability::None (no fsync)"
        };
        format!(
            "one table &[u8]→&[u8]; {durability}; cache {} MiB (Builder::set_cache_size; \
             default 1 GiB), plus the OS page cache (buffered file IO, redb's only mode); 4 KiB \
             pages; no compression (redb has none); point reads in groups under one read \
             transaction; flush: nothing (pages are written at commit); other settings default",
            cfg.cache_bytes >> 20
        )
    }

    fn open(&self, dir: &Path, cfg: &Config) -> Result<Box<dyn Store>> {
        let db = Builder::new()
            .set_cache_size(cfg.cache_bytes as usize)
            .create(dir.join("data.redb"))?;
        // Create the table (durably) so that read transactions always find it.
        let tx = db.begin_write()?;
        tx.open_table(TABLE)?;
        tx.commit()?;
        Ok(Box::new(RedbStore {
            group: None,
            db,
            sync: cfg.sync,
        }))
    }
}

type Table = ReadOnlyTable<&'static [u8], &'static [u8]>;

struct RedbStore {
    /// The open table and read transaction of the current group of reads.
    group: Option<(Table, ReadTransaction)>,
    db: Database,
    sync: bool,
}

impl RedbStore {
    /// Run `f` on the group's table, or on one opened in a read transaction of its own.
    fn reading<R>(&self, f: impl FnOnce(&Table) -> Result<R>) -> Result<R> {
        match &self.group {
            Some((table, _)) => f(table),
            None => {
                let tx = self.db.begin_read()?;
                let table = tx.open_table(TABLE)?;
                f(&table)
            }
        }
    }
}

impl Store for RedbStore {
    fn write(&mut self, batch: &[Write]) -> Result<()> {
        let mut tx = self.db.begin_write()?;
        if !self.sync {
            tx.set_durability(Durability::None)?;
        }
        {
            let mut table = tx.open_table(TABLE)?;
            for w in batch {
                match &w.value {
                    Some(v) => {
                        table.insert(w.key.as_slice(), v.as_slice())?;
                    }
                    None => {
                        table.remove(w.key.as_slice())?;
                    }
                }
            }
        }
        tx.commit()?;
        Ok(())
    }

    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.reading(|table| match table.get(key)? {
            Some(v) => {
                out.clear();
                out.extend_from_slice(v.value());
                Ok(true)
            }
            None => Ok(false),
        })
    }

    fn scan(&mut self, start: &[u8], limit: usize) -> Result<usize> {
        self.reading(|table| {
            let mut n = 0;
            for item in table.range(start..)?.take(limit) {
                let (k, v) = item?;
                black_box((k.value().len(), v.value().len()));
                n += 1;
            }
            Ok(n)
        })
    }

    fn begin_reads(&mut self) -> Result<()> {
        let tx = self.db.begin_read()?;
        let table = tx.open_table(TABLE)?;
        self.group = Some((table, tx));
        Ok(())
    }

    fn end_reads(&mut self) -> Result<()> {
        // The table goes first (a tuple drops in order), then the transaction it holds.
        self.group = None;
        Ok(())
    }

    fn close(mut self: Box<Self>) -> Result<()> {
        self.end_reads()?;
        self.db.close()?;
        Ok(())
    }
}
