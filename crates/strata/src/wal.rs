//! The write-ahead log: one record per write batch, appended to one device.
//!
//! ```text
//! | xxh3 u64 | payload len u32 | seq u64 | payload |     checksum over bytes 8 .. 20 + len
//! ```
//! Sequence numbers are consecutive. Replay applies the records whose sequence number is above
//! the checkpoint's, in order, and stops at the first record that is cut short, fails its
//! checksum or breaks the sequence: that is the torn tail of a crash. A damaged record followed
//! by a valid later record is not a tail but corruption, reported with its offset, as is a log
//! whose first record leaves a gap after the checkpoint.
//!
//! Group commit: appends happen under the `Db`'s write lock; syncing happens after it is
//! released. A writer that needs durability returns at once if a finished sync covered its
//! record; if no sync is running it becomes the leader and syncs everything written so far;
//! otherwise it sleeps until the running sync ends and checks again. So writers that arrive
//! during one fdatasync share the next. No lock is held during the fdatasync itself, and once an
//! fdatasync fails every later one reports failure (its pages may be lost: retrying could
//! falsely report durability).
//!
//! After a checkpoint the log is truncated to nothing: it never holds more than the records since
//! the last checkpoint.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use xxhash_rust::xxh3::xxh3_64;

use crate::error::{Error, Result};
use crate::storage::Device;

const HEADER: usize = 20;

#[derive(Debug)]
pub struct Wal {
    dev: Arc<dyn Device>,
    /// Where the next record goes.
    tail: Mutex<u64>,
    /// Highest sequence number whose record is completely written.
    written: AtomicU64,
    sync: Mutex<SyncState>,
    sync_done: Condvar,
}

#[derive(Debug, Default)]
struct SyncState {
    /// Highest sequence number known durable.
    synced: u64,
    /// A leader is in fdatasync now.
    running: bool,
    failed: Option<String>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Wal {
    /// Replay the log on `dev`: `apply(seq, offset, payload)` for each record after `after_seq`.
    /// Returns the log, ready to append, and the last sequence number seen.
    pub fn open(
        dev: Arc<dyn Device>,
        after_seq: u64,
        mut apply: impl FnMut(u64, u64, &[u8]) -> Result<()>,
    ) -> Result<(Wal, u64)> {
        let len = dev.len()?;
        let mut buf = vec![0u8; len as usize];
        if len > 0 {
            dev.read_at(&mut buf, 0)?;
        }
        let name = dev.name().to_string();
        let mut off = 0usize;
        let mut last = after_seq;
        let mut expect: Option<u64> = None;
        while let Some((seq, plen)) = record_at(&buf, off, |s| expect.is_none_or(|e| e == s)) {
            if expect.is_none() && seq > after_seq + 1 {
                return Err(Error::corruption(
                    &name,
                    off as u64,
                    format!("log starts at sequence {seq} but the checkpoint covers only up to {after_seq}"),
                ));
            }
            if seq > after_seq {
                apply(seq, off as u64, &buf[off + HEADER..off + HEADER + plen])?;
            }
            last = last.max(seq);
            expect = Some(seq + 1);
            off += HEADER + plen;
        }
        if off < buf.len() {
            // Either the torn tail of a crash, or damage in the middle: a later record that is
            // valid and continues past what we replayed means the latter.
            let most = last + (buf.len() / HEADER) as u64;
            if (off + 1..buf.len()).any(|p| record_at(&buf, p, |s| s > last && s <= most).is_some())
            {
                return Err(Error::corruption(
                    &name,
                    off as u64,
                    "damaged log record followed by valid ones",
                ));
            }
            dev.set_len(off as u64)?;
        }
        let wal = Wal {
            dev,
            tail: Mutex::new(off as u64),
            written: AtomicU64::new(last),
            sync: Mutex::new(SyncState {
                synced: last,
                ..Default::default()
            }),
            sync_done: Condvar::new(),
        };
        Ok((wal, last))
    }

    /// Append one record; called with the `Db`'s write lock held, so appends are ordered.
    pub fn append(&self, seq: u64, payload: &[u8]) -> Result<()> {
        let mut rec = Vec::with_capacity(HEADER + payload.len());
        rec.extend_from_slice(&[0u8; 8]);
        rec.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        rec.extend_from_slice(&seq.to_le_bytes());
        rec.extend_from_slice(payload);
        let sum = xxh3_64(&rec[8..]);
        rec[..8].copy_from_slice(&sum.to_le_bytes());
        let mut tail = lock(&self.tail);
        self.dev.write_at(&rec, *tail)?;
        *tail += rec.len() as u64;
        self.written.store(seq, Ordering::Release);
        Ok(())
    }

    /// Return once the record with sequence number `seq` is durable.
    pub fn sync_through(&self, seq: u64) -> Result<()> {
        let mut st = lock(&self.sync);
        loop {
            if let Some(why) = &st.failed {
                return Err(Error::io(
                    format!("sync {}", self.dev.name()),
                    std::io::Error::other(format!("an earlier log sync failed: {why}")),
                ));
            }
            if st.synced >= seq {
                return Ok(());
            }
            if st.running {
                st = self.sync_done.wait(st).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            st.running = true;
            drop(st);
            let target = self.written.load(Ordering::Acquire);
            let result = self.dev.sync();
            st = lock(&self.sync);
            st.running = false;
            match &result {
                Ok(()) => st.synced = st.synced.max(target),
                Err(e) => st.failed = Some(e.to_string()),
            }
            self.sync_done.notify_all();
            result?;
        }
    }

    /// A checkpoint now covers every record up to `seq`: empty the log.
    pub fn reset(&self, seq: u64) -> Result<()> {
        let mut tail = lock(&self.tail);
        self.dev.set_len(0)?;
        self.dev.sync()?;
        *tail = 0;
        let mut st = lock(&self.sync);
        st.synced = st.synced.max(seq);
        self.sync_done.notify_all();
        Ok(())
    }

    pub fn size(&self) -> u64 {
        *lock(&self.tail)
    }

    pub fn device(&self) -> &Arc<dyn Device> {
        &self.dev
    }
}

/// The (seq, payload length) of a valid record at `off` whose sequence number `accept`s, if any.
/// The sequence number is tested before the checksum, which keeps scans over garbage cheap.
fn record_at(buf: &[u8], off: usize, accept: impl Fn(u64) -> bool) -> Option<(u64, usize)> {
    let h = buf.get(off..off + HEADER)?;
    let plen = u32::from_le_bytes(h[8..12].try_into().unwrap()) as usize;
    let seq = u64::from_le_bytes(h[12..20].try_into().unwrap());
    if !accept(seq) {
        return None;
    }
    let body = buf.get(off + 8..off + HEADER + plen)?;
    (xxh3_64(body) == u64::from_le_bytes(h[..8].try_into().unwrap())).then_some((seq, plen))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{SimDevice, SimDisk};

    fn replay(dev: &Arc<SimDevice>, after: u64) -> Result<Vec<(u64, Vec<u8>)>> {
        let mut seen = Vec::new();
        Wal::open(dev.clone(), after, |s, _, p| {
            seen.push((s, p.to_vec()));
            Ok(())
        })?;
        Ok(seen)
    }

    fn log_of(n: u64) -> Arc<SimDevice> {
        let dev = Arc::new(SimDevice::new("wal", SimDisk::new(Default::default(), 0.0)));
        let (w, _) = Wal::open(dev.clone(), 0, |_, _, _| Ok(())).unwrap();
        for s in 1..=n {
            w.append(s, format!("record {s}").as_bytes()).unwrap();
        }
        dev
    }

    #[test]
    fn replays_after_the_checkpoint_and_drops_a_torn_tail() {
        let dev = log_of(3);
        assert_eq!(
            replay(&dev, 1)
                .unwrap()
                .iter()
                .map(|r| r.0)
                .collect::<Vec<_>>(),
            vec![2, 3]
        );
        let len = dev.len().unwrap();
        dev.set_len(len - 3).unwrap();
        assert_eq!(
            replay(&dev, 0).unwrap().len(),
            2,
            "cut record is a torn tail"
        );
        assert_eq!(dev.len().unwrap(), 2 * (HEADER as u64 + 8), "tail trimmed");
    }

    #[test]
    fn damage_before_valid_records_is_corruption() {
        let dev = log_of(3);
        dev.corrupt_byte(HEADER as u64 + 2, 1);
        let e = replay(&dev, 0).unwrap_err();
        assert!(matches!(e, Error::Corruption { offset: 0, .. }), "{e}");
        let dev = log_of(3);
        // Damage in the last record alone is indistinguishable from a torn write.
        dev.corrupt_byte(2 * (HEADER as u64 + 8) + HEADER as u64 + 1, 1);
        assert_eq!(replay(&dev, 0).unwrap().len(), 2);
    }

    #[test]
    fn a_gap_after_the_checkpoint_is_corruption() {
        let dev = Arc::new(SimDevice::new("wal", SimDisk::new(Default::default(), 0.0)));
        let (w, _) = Wal::open(dev.clone(), 0, |_, _, _| Ok(())).unwrap();
        w.append(5, b"x").unwrap();
        assert!(replay(&dev, 3).unwrap_err().is_corruption());
        assert_eq!(replay(&dev, 4).unwrap().len(), 1);
    }
}
