//! The write-ahead log: one record per write batch, appended to one device.
//!
//! ```text
//! 0      8             12     13    16      24        32
//! | xxh3 | payload len | kind | 0 0 0 | seq | durable | payload |   checksum over 8 .. 32 + len
//! ```
//! `kind` is 0 for a write batch and 1 for a checkpoint marker; `durable` is the highest
//! sequence number known to be on stable storage when the record was appended.
//!
//! Sequence numbers are consecutive. The log lives in two files and is appended to one of them.
//! A checkpoint that is made durable in the background moves it to the other (`rotate`): the
//! records so far are synced where they are, and the other file starts over with a marker
//! carrying the checkpoint's sequence number, so the log itself says which checkpoint it
//! continues; a checkpoint taken on the caller's thread starts the current file over (`reset`).
//!
//! Files are overwritten, not emptied: a file starts over at offset 0 and keeps its length
//! (until `trim`, at close). An fdatasync of a record written inside the file's length has no
//! metadata to commit, where one that extends the file makes ext4 commit its journal, and with
//! it wait for the data file's newly allocated blocks (data=ordered): on the team's VM, 105 µs
//! against 225 µs at the median, and shorter tails beside the data file's write-out
//! (docs/performance.md). What lies past the tail is records of an earlier round of the file,
//! all numbered at most the marker, so the scan below stops at them (the sequence breaks) and
//! never takes them for a crash's proof (they are numbered below what it looks for). Each MiB
//! appended is handed to the device to write out without waiting (`WRITE_OUT_EVERY`), so a
//! log nothing syncs meanwhile does not leave its whole length to a checkpoint's sync.
//! Replay reads the older file (the one whose first record is older) and then the newer, as one
//! sequence; it applies the records above the checkpoint's sequence number, in order, and
//! stops at the first record that is cut short, fails its checksum or breaks the sequence. What
//! lies past that point is:
//! - corruption, reported with the record's offset, if a later valid record was appended after
//!   the damaged one had been synced (its `durable` covers it): acknowledged data is missing;
//! - otherwise the tail of a crash (a torn write, or unsynced records that never reached the
//!   disk, possibly out of order): the log is truncated there.
//!
//! A first record that leaves a gap after the checkpoint, and a marker newer than the checkpoint
//! (the superblock of a later checkpoint is damaged), are corruption too.
//!
//! Group commit: appends happen under the `Db`'s write lock; fdatasync happens on the log's own
//! sync thread. A writer that needs durability asks for a sync as soon as its record is written
//! (`request_sync`) and goes on to apply its batch to the engine while the sync runs, then waits
//! (`sync_through`) until a finished sync covers its record. If the sync thread has not begun
//! by the time the writer waits, the writer runs the sync itself: a woken thread can sit for
//! milliseconds in the run queue of a core busy with a drain or a kernel thread while the
//! writer's own core goes idle, and the writer is about to sleep anyway. One sync runs at a
//! time, and a flag given by the `Db` (`raise_while_syncing`) is up while it runs, for the
//! engine's background threads to yield to. Each sync covers everything written when it
//! starts, so writers that arrive during one fdatasync share the next. No lock is held during
//! the fdatasync itself, and once an fdatasync fails every later wait reports failure (its
//! pages may be lost: retrying could falsely report durability). That holds for the syncs a
//! rotation, a reset or a retraction runs on the writer's thread too (`sync_or_latch`): a
//! writer waiting meanwhile for an earlier record must not be acknowledged by the next sync.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use xxhash_rust::xxh3::xxh3_64;

use crate::error::{Error, Result};
use crate::storage::Device;

mod background;
mod read;

pub use background::Checkpointing;
pub(crate) use read::released;
pub use read::Reopened;
use read::{first_record, Scan};

pub const HEADER: usize = 32;
/// The kind byte of the head `release` writes over an obsolete file's first record.
const RELEASED: u8 = 2;
/// The largest sequence number a record may carry.
pub const MAX_SEQ: u64 = i64::MAX as u64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Batch = 0,
    Checkpoint = 1,
}

/// One record as replay sees it.
pub struct Record<'a> {
    pub kind: Kind,
    /// The log file it is in, for messages.
    pub file: &'a str,
    pub seq: u64,
    pub offset: u64,
    pub payload: &'a [u8],
}

#[derive(Debug)]
pub struct Wal {
    shared: Arc<Shared>,
    /// The other log file: the one appended to before the last rotation.
    previous: Mutex<Arc<dyn Device>>,
    /// `reset` released `previous`, and no rotation has swapped it in since: nothing to do
    /// for the next `reset` (a `VersionedDb` only ever resets).
    previous_released: AtomicBool,
    syncer: Option<JoinHandle<()>>,
}

/// What the appending writers and the sync thread share.
#[derive(Debug)]
struct Shared {
    /// The log file being appended to; it changes only under the `Db`'s write lock.
    dev: Mutex<Arc<dyn Device>>,
    /// Where the next record goes, and what of the file the page cache was told to drop.
    tail: Mutex<Tail>,
    /// Highest sequence number whose record is completely written.
    written: AtomicU64,
    sync: Mutex<SyncState>,
    /// Signalled when a sync ends (waiters re-check) and when one is wanted (the sync thread
    /// wakes).
    sync_done: Condvar,
    sync_wanted: Condvar,
    /// Up while an fdatasync of `sync_once` runs (`Wal::raise_while_syncing`).
    syncing: std::sync::OnceLock<Arc<AtomicBool>>,
}

/// The OS page: the unit the kernel reads before a write that covers only part of a page it
/// does not hold.
const OS_PAGE: u64 = 4096;

/// `len` rounded up to whole pages: a range that ends inside a page keeps that page cached.
fn pages(len: u64) -> u64 {
    len.div_ceil(OS_PAGE) * OS_PAGE
}

/// Synced records are dropped from the page cache in steps of this many bytes.
const FORGET_EVERY: u64 = 1 << 20;

/// Appended records not yet synced are handed to the device to write out in steps of this many
/// bytes (`Device::start_write_out`, without waiting): a log nothing syncs meanwhile
/// (`Durability::None`) then reaches its checkpoint's sync mostly written, not with tens of
/// MiB for that one fdatasync to write (55 ms for 64 MiB at a `VersionedDb`'s checkpoint, on
/// the put that made it), and the device gets it in steps rather than in the kernel's bursts.
const WRITE_OUT_EVERY: u64 = 1 << 20;

/// The current file's tail, and its pages in the OS page cache. A log is written once and read
/// only at open, so its synced pages are dropped as it goes (`Device::forget`), and a file is
/// dropped whole when a round in it ends: the log keeps about `FORGET_EVERY` of the page cache,
/// not the files' length. The price is that a page of an earlier round is not in the cache
/// when a record reaches it, and a write covering part of it would make the kernel read it
/// first, on the commit's path (60 µs a record on the team's VM); so an append whose last page
/// is such a page fills the rest of it with zeros (`pad`). The device writes whole pages
/// either way.
#[derive(Debug, Default)]
struct Tail {
    /// Where the next record goes.
    at: u64,
    /// The file's length when this round began: pages below it hold an earlier round's bytes.
    recycled: u64,
    /// Pages below this offset have been dropped from the cache.
    forgotten: u64,
    /// Bytes below this offset have been handed to the device to write out (`append`), or
    /// synced.
    started: u64,
    /// Counts the rounds (rotations, resets), so that a late sync drops nothing of a new one.
    round: u64,
}

impl Tail {
    /// A new round in a file of `len` bytes, from its start.
    fn start_over(&mut self, len: u64) {
        *self = Tail {
            at: 0,
            recycled: len,
            forgotten: 0,
            started: 0,
            round: self.round + 1,
        };
    }

    /// Zeros to write after a record from `start` to `end`: up to the end of its last page
    /// when that page is not the one it starts in (which the append before left in the cache)
    /// and holds an earlier round's bytes (not in the cache), as far as the file's length.
    fn pad(&self, start: u64, end: u64) -> usize {
        let last = (end - 1) / OS_PAGE;
        let open = (!start.is_multiple_of(OS_PAGE)).then_some(start / OS_PAGE);
        if end.is_multiple_of(OS_PAGE) || open == Some(last) || last * OS_PAGE >= self.recycled {
            return 0;
        }
        ((last + 1) * OS_PAGE)
            .min(self.recycled)
            .saturating_sub(end) as usize
    }
}

#[derive(Debug, Default)]
struct SyncState {
    /// Highest sequence number known durable.
    synced: u64,
    /// Highest sequence number a writer wants durable.
    requested: u64,
    /// A sync is under way, on the sync thread or on a waiting writer's.
    running: bool,
    failed: Option<String>,
    stop: bool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Wal {
    /// Replay the two log files, the older first, calling `apply` for each record after
    /// `after_seq` (markers included, so the caller can judge them). Returns the log, ready to
    /// append to the newer file, the last sequence number seen, and what the caller must do
    /// before the next `rotate` (`Reopened`). Both files are judged before anything is applied
    /// or changed, so damage is reported in the file and at the offset where it is, with
    /// nothing trimmed; whatever replay found is made durable before returning.
    pub fn open(
        logs: [Arc<dyn Device>; 2],
        after_seq: u64,
        mut apply: impl FnMut(Record<'_>) -> Result<()>,
    ) -> Result<(Wal, u64, Reopened)> {
        let [a, b] = logs;
        let (first_a, first_b) = (first_record(&*a)?, first_record(&*b)?);
        // The file begun later starts with a higher sequence number, or with a marker for the
        // checkpoint that covers the other's last record (a rotation writes its marker before
        // any record); a file that starts with nothing valid is the older.
        let (older, newer) = if first_b > first_a { (a, b) } else { (b, a) };
        let old = Scan::of(&*older)?;
        old.judge_tail(after_seq)?;
        old.check_start(after_seq)?;
        let older_last = old.last().unwrap_or(0);
        let reach = after_seq.max(older_last);
        let new = Scan::of(&*newer)?;
        new.judge_tail(reach)?;
        if let Some(first) = new.records.first() {
            // A batch must follow the last record reached; a marker continues after the record
            // of its own number, so that record must have been reached.
            let gap = first.seq > reach + 1;
            let marker_ahead = first.kind == Kind::Checkpoint && first.seq > reach;
            if (gap || marker_ahead) && old.end < old.buf.len() {
                // The older file was complete and synced before the newer one began: the
                // missing records were where it is cut short.
                return Err(Error::corruption(
                    &old.name,
                    old.end as u64,
                    format!(
                        "log records {}..={} are missing: the older log file is damaged here",
                        reach + 1,
                        if gap { first.seq - 1 } else { first.seq }
                    ),
                ));
            }
            if gap && first.kind == Kind::Batch {
                return Err(new.gap_error(reach, first));
            }
            // A marker past the records reached: `apply` judges it (the superblock of a newer
            // checkpoint, durable once, is damaged).
        }
        old.replay(after_seq, &mut apply)?;
        new.replay(reach, &mut apply)?;
        // What replay made visible must not vanish in a later power cut; a torn tail goes.
        if new.end < new.buf.len() {
            newer.set_len(new.end as u64)?;
        }
        if new.last().is_some_and(|l| l > after_seq) || new.end < new.buf.len() {
            newer.sync()?;
        }
        let last = reach.max(new.last().unwrap_or(0));
        let reopened = if older_last > after_seq {
            Reopened::CheckpointFirst
        } else if new.last().is_some_and(|l| l < last) {
            // The newer file ends below the checkpoint (a power cut came after the checkpoint's
            // superblock and before the log was emptied): a record appended after it would
            // break its sequence.
            Reopened::Restart
        } else {
            Reopened::Ready
        };
        // The checkpoint covers the older file, which still holds records: a crash came after
        // a background checkpoint's superblock and before the release of the file it left
        // behind. Release it now, before the engine reuses the extents only the checkpoint
        // before referenced, as the checkpoint's thread would have (see `release`).
        let released = reopened == Reopened::Ready && old.last().is_some();
        if released {
            release(&*older, after_seq)?;
        }
        // Replay read both files through the page cache: nothing there is read again.
        older.forget(0, pages(older.len()?));
        let newer_len = newer.len()?;
        newer.forget(0, pages(newer_len));
        let shared = Arc::new(Shared {
            dev: Mutex::new(newer),
            tail: Mutex::new(Tail {
                at: new.end as u64,
                recycled: newer_len,
                started: new.end as u64,
                ..Tail::default()
            }),
            written: AtomicU64::new(last),
            sync: Mutex::new(SyncState {
                synced: last,
                requested: last,
                ..Default::default()
            }),
            sync_done: Condvar::new(),
            sync_wanted: Condvar::new(),
            syncing: std::sync::OnceLock::new(),
        });
        let for_thread = shared.clone();
        let syncer = std::thread::Builder::new()
            .name("strata-wal-sync".into())
            .spawn(move || for_thread.sync_loop())
            .map_err(|e| Error::io("start the log's sync thread", e))?;
        Ok((
            Wal {
                shared,
                previous: Mutex::new(older),
                previous_released: AtomicBool::new(released),
                syncer: Some(syncer),
            },
            last,
            reopened,
        ))
    }

    /// Append one record; called with the `Db`'s write lock held, so appends are ordered.
    /// Returns the offset the record starts at.
    pub fn append(&self, kind: Kind, seq: u64, payload: &[u8]) -> Result<u64> {
        let sh = &*self.shared;
        let durable = lock(&sh.sync).synced;
        let mut rec = encode(kind as u8, seq, durable, payload);
        let mut tail = lock(&sh.tail);
        let start = tail.at;
        let end = start + rec.len() as u64;
        rec.resize(rec.len() + tail.pad(start, end), 0);
        let dev = sh.current();
        dev.write_at(&rec, start)?;
        tail.at = end;
        // Whole pages only: the last one is still being filled, and one written out and then
        // dirtied again can make the next append wait for its writeback.
        let whole = end / OS_PAGE * OS_PAGE;
        if whole >= tail.started + WRITE_OUT_EVERY {
            dev.start_write_out(tail.started, whole - tail.started);
            tail.started = whole;
        }
        sh.written.fetch_max(seq, Ordering::Release);
        Ok(start)
    }

    /// Take back the last record (it starts at `offset`): its batch failed and was never
    /// acknowledged, so replay must not meet it. The cut is synced: the record may already be
    /// on disk (its sync was requested before the batch failed), and it must not come back
    /// after a power cut.
    pub fn retract(&self, offset: u64, seq: u64) -> Result<()> {
        let sh = &*self.shared;
        let mut tail = lock(&sh.tail);
        {
            let mut st = lock(&sh.sync);
            st.requested = st.requested.min(seq - 1);
        }
        sh.written.store(seq - 1, Ordering::Release);
        tail.at = offset;
        tail.recycled = tail.recycled.min(offset);
        tail.started = tail.started.min(offset);
        let dev = sh.current();
        dev.set_len(offset)?;
        sh.sync_or_latch(&*dev)
    }

    /// Start a sync that covers the record with sequence number `seq`, if none has yet, and
    /// return without waiting for it.
    pub fn request_sync(&self, seq: u64) {
        let mut st = lock(&self.shared.sync);
        if st.synced < seq && st.requested < seq {
            st.requested = seq;
            self.shared.sync_wanted.notify_one();
        }
    }

    /// Return once the record with sequence number `seq` is durable.
    pub fn sync_through(&self, seq: u64) -> Result<()> {
        let sh = &*self.shared;
        let mut st = lock(&sh.sync);
        loop {
            if let Some(why) = &st.failed {
                return Err(Error::io(
                    format!("sync {}", sh.current().name()),
                    std::io::Error::other(format!("a log sync failed: {why}")),
                ));
            }
            if st.synced >= seq {
                return Ok(());
            }
            if st.requested < seq {
                st.requested = seq;
            }
            if st.running {
                st = sh.sync_done.wait(st).unwrap_or_else(|e| e.into_inner());
            } else {
                // The sync thread has not begun: run it here rather than sleep while it waits
                // for a core.
                st = sh.sync_once(st);
            }
        }
    }

    /// A durable checkpoint now covers every record up to `seq`: release the other file and
    /// start the current one over with a marker for that checkpoint, written over its first
    /// bytes (files keep their length: see "Files are overwritten" above). A power cut in here
    /// may leave each file old or begun with its new head over old bytes; every record in
    /// either is at most `seq`, so replay skips them, and a log that then ends below `seq` is
    /// restarted at open (`Reopened::Restart`).
    pub fn reset(&self, seq: u64) -> Result<()> {
        let sh = &*self.shared;
        if !self.previous_released.load(Ordering::Acquire) {
            release(&**lock(&self.previous), seq)?;
            self.previous_released.store(true, Ordering::Release);
        }
        {
            let mut tail = lock(&sh.tail);
            let dev = sh.current();
            let len = dev.len()?;
            dev.forget(0, pages(len));
            tail.start_over(len);
        }
        {
            let mut st = lock(&sh.sync);
            st.synced = st.synced.max(seq);
        }
        self.append(Kind::Checkpoint, seq, &[])?;
        sh.sync_or_latch(&*sh.current())?;
        sh.sync_done.notify_all();
        Ok(())
    }

    /// A checkpoint covering every record up to `seq` (all appended) has begun: make those
    /// records durable and go on in the other file, started over with a marker for the
    /// checkpoint written over its first bytes. Replay reads the file left behind first, so
    /// nothing is lost if the checkpoint never becomes durable. The other file must hold
    /// nothing the last durable checkpoint does not cover: the `Db` begins no checkpoint
    /// while the one before is not durable.
    pub fn rotate(&self, seq: u64) -> Result<()> {
        let sh = &*self.shared;
        let written = sh.written.load(Ordering::Acquire);
        sh.sync_or_latch(&*sh.current())?;
        {
            let mut st = lock(&sh.sync);
            st.synced = st.synced.max(written);
        }
        sh.sync_done.notify_all();
        let mut previous = lock(&self.previous);
        let mut tail = lock(&sh.tail);
        {
            let mut current = lock(&sh.dev);
            std::mem::swap(&mut *current, &mut *previous);
        }
        self.previous_released.store(false, Ordering::Release);
        // The file left behind is synced whole; the one taken up was dropped when left.
        previous.forget(0, pages(tail.at.max(tail.recycled)));
        tail.start_over(sh.current().len()?);
        drop(tail);
        drop(previous);
        self.append(Kind::Checkpoint, seq, &[])?;
        // Before any record in this file is acknowledged, the marker that orders the files.
        sh.sync_or_latch(&*sh.current())
    }

    /// The file the last `rotate` left behind, for the checkpoint's thread to `release` once
    /// the checkpoint is durable.
    pub fn left_behind(&self) -> Arc<dyn Device> {
        lock(&self.previous).clone()
    }

    /// Give the files' space back: cut the current file at its tail and empty the other, for
    /// a closed database to take no more room than its records. Only after a checkpoint covers
    /// every record in the other file (a `reset`): a power cut that reverts or half-applies
    /// either cut leaves bytes replay skips or records it has already seen.
    pub fn trim(&self) -> Result<()> {
        let sh = &*self.shared;
        let mut tail = lock(&sh.tail);
        sh.current().set_len(tail.at)?;
        tail.recycled = tail.at;
        lock(&self.previous).set_len(0)
    }

    /// Raise `flag` while each of the sync thread's (or a waiting writer's) fdatasyncs runs;
    /// the first flag given stays.
    pub fn raise_while_syncing(&self, flag: Arc<AtomicBool>) {
        let _ = self.shared.syncing.set(flag);
    }

    #[cfg(test)]
    pub(crate) fn syncing_flag(&self) -> Option<&Arc<AtomicBool>> {
        self.shared.syncing.get()
    }

    /// Bytes in the current log file since its last reset or rotation.
    pub fn size(&self) -> u64 {
        lock(&self.shared.tail).at
    }

    /// Bytes both log files hold.
    pub fn file_bytes(&self) -> u64 {
        let len = |d: &Arc<dyn Device>| d.len().unwrap_or(0);
        len(&self.shared.current()) + len(&lock(&self.previous))
    }
}

/// One record (or the released head), checksummed, with room for the zeros `append` may pad
/// it with (no reallocation and copy of the record on the commit's path).
fn encode(kind: u8, seq: u64, durable: u64, payload: &[u8]) -> Vec<u8> {
    let mut rec = Vec::with_capacity(HEADER + payload.len() + OS_PAGE as usize);
    rec.extend_from_slice(&[0u8; 8]);
    rec.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    rec.extend_from_slice(&[kind, 0, 0, 0]);
    rec.extend_from_slice(&seq.to_le_bytes());
    rec.extend_from_slice(&durable.to_le_bytes());
    rec.extend_from_slice(payload);
    let sum = xxh3_64(&rec[8..]);
    rec[..8].copy_from_slice(&sum.to_le_bytes());
    rec
}

/// A durable checkpoint covering `seq` covers every record of the log file `dev`: mark it
/// obsolete, durably, by writing a released head over its first record. Replay then reads it as
/// holding nothing, so that a newer file's marker past the checkpoint in use still proves a
/// newer superblock damaged (its records would otherwise reach the marker), and nothing stale
/// in it is judged. Called before the extents only older checkpoints referenced are reused.
/// A power cut that tears the head leaves a file with nothing valid at its start, which
/// replay reads as the older and empty; one that reverts it leaves records the checkpoint
/// covers.
pub fn release(dev: &dyn Device, seq: u64) -> Result<()> {
    let mut head = encode(RELEASED, seq, seq, &[]);
    // Its page is not in the cache (`Tail`): write it whole.
    let len = dev.len()?;
    head.resize((len.min(OS_PAGE) as usize).max(head.len()), 0);
    dev.write_at(&head, 0)?;
    dev.sync()?;
    dev.forget(0, pages(len.max(OS_PAGE)));
    Ok(())
}

impl Shared {
    fn current(&self) -> Arc<dyn Device> {
        lock(&self.dev).clone()
    }

    /// The sync thread: whenever a writer wants a record durable that is not yet, fdatasync
    /// everything written so far, then wake the waiters.
    fn sync_loop(&self) {
        let mut st = lock(&self.sync);
        loop {
            if st.stop {
                return;
            }
            if st.failed.is_some() || st.running || st.requested <= st.synced {
                st = self.sync_wanted.wait(st).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            st = self.sync_once(st);
        }
    }

    /// An fdatasync of `dev` outside `sync_once` (a rotation's, a reset's, a retraction's): a
    /// failure is latched as `sync_once`'s are, and the writers waiting are woken to see it. A
    /// later sync of the same file may succeed without the pages this one lost.
    fn sync_or_latch(&self, dev: &dyn Device) -> Result<()> {
        dev.sync().inspect_err(|e| {
            lock(&self.sync).failed.get_or_insert_with(|| e.to_string());
            self.sync_done.notify_all();
        })
    }

    /// One fdatasync of everything written so far, with `st` released while it runs; on the
    /// sync thread or on a waiting writer's, never two at once.
    fn sync_once<'a>(&'a self, mut st: MutexGuard<'a, SyncState>) -> MutexGuard<'a, SyncState> {
        st.running = true;
        drop(st);
        // The record count first: a rotation swaps the file only after syncing the old one
        // and before any record goes to the new one, so the file read next covers `target`.
        let target = self.written.load(Ordering::Acquire);
        // What the sync covers of the file, for dropping it from the cache after.
        let (dev, round, upto) = {
            let tail = lock(&self.tail);
            (self.current(), tail.round, tail.at)
        };
        let flag = self.syncing.get();
        flag.inspect(|f| f.store(true, Ordering::Relaxed));
        let result = dev.sync();
        flag.inspect(|f| f.store(false, Ordering::Relaxed));
        let synced = result.is_ok();
        let mut st = lock(&self.sync);
        st.running = false;
        match result {
            Ok(()) => st.synced = st.synced.max(target),
            Err(e) => st.failed = Some(e.to_string()),
        }
        // Never chase a request for a record that is not (or no longer) written.
        let written = self.written.load(Ordering::Acquire);
        st.requested = st.requested.min(written.max(st.synced));
        self.sync_done.notify_all();
        // Writers may have asked for more while this ran.
        self.sync_wanted.notify_one();
        if synced {
            drop(st);
            self.forget_synced(&*dev, round, upto);
            st = lock(&self.sync);
        }
        st
    }

    /// The records below `upto` in round `round` of `dev` are synced: nothing there is left to
    /// write out (`append`), and their pages are dropped from the cache, in steps of
    /// `FORGET_EVERY`, all but the page `upto` lies in (the next record goes on in it).
    fn forget_synced(&self, dev: &dyn Device, round: u64, upto: u64) {
        let to = upto / OS_PAGE * OS_PAGE;
        let from = {
            let mut tail = lock(&self.tail);
            if tail.round != round {
                return;
            }
            tail.started = tail.started.max(upto);
            if to < tail.forgotten + FORGET_EVERY {
                return;
            }
            std::mem::replace(&mut tail.forgotten, to)
        };
        dev.forget(from, to - from);
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        lock(&self.shared.sync).stop = true;
        self.shared.sync_wanted.notify_all();
        if let Some(t) = self.syncer.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{SimDevice, SimDisk};

    fn sim(name: &str) -> Arc<SimDevice> {
        Arc::new(SimDevice::new(name, SimDisk::new(Default::default(), 0.0)))
    }

    type Replayed = Vec<(u64, Vec<u8>)>;

    /// Replay the pair of files: sequence numbers and payloads, and whether the older file is
    /// still needed.
    fn replay_pair(a: &Arc<SimDevice>, b: &Arc<SimDevice>, after: u64) -> Result<(Replayed, bool)> {
        let mut seen = Vec::new();
        let (_, _, reopened) = Wal::open([a.clone(), b.clone()], after, |r| {
            seen.push((r.seq, r.payload.to_vec()));
            Ok(())
        })?;
        Ok((seen, reopened == Reopened::CheckpointFirst))
    }

    fn replay(dev: &Arc<SimDevice>, after: u64) -> Result<Replayed> {
        Ok(replay_pair(dev, &sim("other"), after)?.0)
    }

    fn new_log() -> (Arc<SimDevice>, Wal) {
        let dev = sim("wal");
        let (w, _, _) = Wal::open([dev.clone(), sim("other")], 0, |_| Ok(())).unwrap();
        (dev, w)
    }

    /// Appended records are handed to the device to write out every `WRITE_OUT_EVERY` bytes,
    /// each span from where the one before ended, so a log nothing syncs meanwhile reaches its
    /// checkpoint's sync mostly written; a reset starts them over at the file's start.
    #[test]
    fn appends_are_started_out_as_the_log_grows() {
        let d = Cached::new("wal");
        let (w, _, _) = Wal::open([d.clone(), sim("other")], 0, |_| Ok(())).unwrap();
        let payload = vec![7u8; 10_000];
        let first = w.append(Kind::Batch, 1, &payload).unwrap();
        for seq in 2..=350 {
            w.append(Kind::Batch, seq, &payload).unwrap();
        }
        let spans = lock(&d.spans).clone();
        assert_eq!(spans.len(), 3, "{spans:?}");
        assert_eq!(spans[0].0, first);
        for (s, next) in spans.iter().zip(&spans[1..]) {
            assert_eq!(s.0 + s.1, next.0, "{spans:?}");
            assert_eq!(next.0 % OS_PAGE, 0, "whole pages: {spans:?}");
        }
        for &(_, len) in &spans {
            assert!(
                (WRITE_OUT_EVERY..WRITE_OUT_EVERY + 16_384).contains(&len),
                "{spans:?}"
            );
        }
        let (at, len) = spans[2];
        assert!(w.size() - (at + len) < WRITE_OUT_EVERY);
        w.reset(350).unwrap();
        lock(&d.spans).clear();
        for seq in 351..=460 {
            w.append(Kind::Batch, seq, &payload).unwrap();
        }
        assert_eq!(
            lock(&d.spans)[0].0,
            0,
            "a new round starts at the file's start"
        );
        // What a sync covered is not written out again: with a sync every 50 records (0.5
        // MB), no MiB goes unsynced.
        lock(&d.spans).clear();
        for seq in 461..=760 {
            w.append(Kind::Batch, seq, &payload).unwrap();
            if seq % 50 == 0 {
                w.sync_through(seq).unwrap();
            }
        }
        assert_eq!(*lock(&d.spans), [], "synced records written out");
    }

    /// Records 1..=n of 8 payload bytes each, synced after each when `sync`.
    fn log_of(n: u64, sync: bool) -> Arc<SimDevice> {
        let (dev, w) = new_log();
        for s in 1..=n {
            w.append(Kind::Batch, s, format!("record {s}").as_bytes())
                .unwrap();
            if sync {
                w.sync_through(s).unwrap();
            }
        }
        dev
    }

    const REC: u64 = HEADER as u64 + 8;

    #[test]
    fn replays_after_the_checkpoint_and_drops_a_torn_tail() {
        let dev = log_of(3, true);
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
        assert_eq!(dev.len().unwrap(), 2 * REC, "tail trimmed");
    }

    #[test]
    fn damage_to_a_synced_record_before_valid_ones_is_corruption() {
        let dev = log_of(3, true);
        dev.corrupt_byte(REC + 2, 1);
        let e = replay(&dev, 0).unwrap_err();
        assert!(
            matches!(e, Error::Corruption { offset, .. } if offset == REC),
            "{e}"
        );
        // Damage in the last record alone is indistinguishable from a torn write.
        let dev = log_of(3, true);
        dev.corrupt_byte(2 * REC + HEADER as u64 + 1, 1);
        assert_eq!(replay(&dev, 0).unwrap().len(), 2);
    }

    #[test]
    fn a_hole_left_by_unsynced_records_is_a_crash_tail() {
        // Records 2 and 3 were never synced; 2 never reached the disk but 3 did.
        let dev = log_of(3, false);
        dev.corrupt_byte(REC + 2, 1);
        assert_eq!(replay(&dev, 0).unwrap().len(), 1);
        assert_eq!(dev.len().unwrap(), REC);
    }

    #[test]
    fn a_gap_after_the_checkpoint_is_corruption() {
        let (dev, w) = new_log();
        w.append(Kind::Batch, 5, b"x").unwrap();
        assert!(replay(&dev, 3).unwrap_err().is_corruption());
        assert_eq!(replay(&dev, 4).unwrap().len(), 1);
    }

    #[test]
    fn reset_leaves_a_marker_and_retract_removes_the_last_record() {
        let (dev, w) = new_log();
        w.append(Kind::Batch, 1, b"a").unwrap();
        w.reset(1).unwrap();
        let off = w.append(Kind::Batch, 2, b"b").unwrap();
        w.append(Kind::Batch, 3, b"c").unwrap();
        w.retract(off + HEADER as u64 + 1, 3).unwrap();
        let mut kinds = Vec::new();
        Wal::open([dev.clone(), sim("other")], 0, |r| {
            kinds.push((r.kind, r.seq));
            Ok(())
        })
        .unwrap();
        assert_eq!(kinds, vec![(Kind::Checkpoint, 1), (Kind::Batch, 2)]);
    }

    #[test]
    fn a_file_started_over_keeps_its_length_and_its_old_records_are_never_replayed() {
        let (a, b) = (sim("a"), sim("b"));
        let (w, _, _) = Wal::open([a.clone(), b.clone()], 0, |_| Ok(())).unwrap();
        // Records past the first page, which the release below writes over whole.
        let long = [7u8; 100];
        for s in 1..=100 {
            w.append(Kind::Batch, s, &long).unwrap();
        }
        w.rotate(100).unwrap();
        w.append(Kind::Batch, 101, b"b").unwrap();
        w.sync_through(101).unwrap();
        release(&*w.left_behind(), 100).unwrap();
        let a_len = a.len().unwrap();
        assert!(a_len > 3 * OS_PAGE);
        // Back to `a`: started over at its start, shorter records over the old ones.
        w.rotate(101).unwrap();
        for s in 102..=104 {
            w.append(Kind::Batch, s, b"short").unwrap();
        }
        w.sync_through(104).unwrap();
        assert_eq!(a.len().unwrap(), a_len, "written over, not cut or grown");
        assert_eq!(w.size(), REC - 8 + 3 * (HEADER as u64 + 5));
        let seqs = |v: Replayed| v.into_iter().map(|r| r.0).collect::<Vec<_>>();
        let stale = |dev: &SimDevice| {
            let buf = dev.durable_contents();
            (1..buf.len())
                .filter(|&p| read::parse(&buf, p, |q| q <= 100).is_some())
                .count()
        };
        // What a power cut leaves, before and after the checkpoint at 101 is durable: the
        // first round's records past the first page still lie whole past the tail of `a`, and
        // are neither replayed nor taken for proof of lost records.
        assert!(stale(&a) > 50, "the earlier round is still there");
        for after in [100, 101] {
            let (a0, b0) = (sim("a0"), sim("b0"));
            a0.write_at(&a.durable_contents(), 0).unwrap();
            b0.write_at(&b.durable_contents(), 0).unwrap();
            let (seen, _) = replay_pair(&a0, &b0, after).unwrap();
            let want: Vec<u64> = (after + 1..=104).collect();
            assert_eq!(seqs(seen), want);
        }
        // Appending goes on after the last record, not after the old ones.
        w.append(Kind::Batch, 105, b"next").unwrap();
        w.sync_through(105).unwrap();
        drop(w);
        assert_eq!(
            seqs(replay_pair(&a, &b, 101).unwrap().0),
            vec![102, 103, 104, 105]
        );
        // `trim` gives the space back once a checkpoint covers everything.
        let (w, last, _) = Wal::open([a.clone(), b.clone()], 105, |_| Ok(())).unwrap();
        assert_eq!(last, 105);
        w.reset(105).unwrap();
        w.trim().unwrap();
        assert_eq!(w.file_bytes(), HEADER as u64);
        drop(w);
        assert!(replay_pair(&a, &b, 105).unwrap().0.is_empty());
    }

    /// The first record a replay of the pair from the start hands to `apply`.
    fn first_replayed(a: &Arc<SimDevice>, b: &Arc<SimDevice>) -> Option<(Kind, u64)> {
        let mut first = None;
        Wal::open([a.clone(), b.clone()], 0, |r| {
            first.get_or_insert((r.kind, r.seq));
            Ok(())
        })
        .unwrap();
        first
    }

    /// A pair of files: record 1 in `a`, then a rotation (`b` starts with marker 1).
    fn rotated_once() -> (Arc<SimDevice>, Arc<SimDevice>) {
        let (a, b) = (sim("a"), sim("b"));
        let (w, _, _) = Wal::open([a.clone(), b.clone()], 0, |_| Ok(())).unwrap();
        w.append(Kind::Batch, 1, b"one").unwrap();
        w.rotate(1).unwrap();
        (a, b)
    }

    #[test]
    fn rotation_keeps_the_older_file_until_its_checkpoint_is_durable() {
        let (a, b) = (sim("a"), sim("b"));
        let (w, _, _) = Wal::open([a.clone(), b.clone()], 0, |_| Ok(())).unwrap();
        w.append(Kind::Batch, 1, b"one").unwrap();
        w.append(Kind::Batch, 2, b"two").unwrap();
        w.rotate(2).unwrap();
        w.append(Kind::Batch, 3, b"three").unwrap();
        w.sync_through(3).unwrap();
        let seqs = |v: Replayed| v.into_iter().map(|r| r.0).collect::<Vec<_>>();
        // A power cut before the checkpoint is durable: both files, the older first. Records
        // 1 and 2 were never waited for, but the rotation made them durable.
        let (a0, b0) = (sim("a0"), sim("b0"));
        a0.write_at(&a.durable_contents(), 0).unwrap();
        b0.write_at(&b.durable_contents(), 0).unwrap();
        let (seen, needed) = replay_pair(&b0, &a0, 0).unwrap();
        assert_eq!((seqs(seen), needed), (vec![1, 2, 3], true));
        // After it: the older file's records are covered.
        let (seen, needed) = replay_pair(&a0, &b0, 2).unwrap();
        assert_eq!((seqs(seen), needed), (vec![3], false));
        // The checkpoint is durable: the older file is released, its length kept.
        let len = a.len().unwrap();
        release(&*w.left_behind(), 2).unwrap();
        assert_eq!(a.len().unwrap(), len);
        assert!(
            read::released(&a.durable_contents()),
            "the release is synced"
        );
        drop(w);
        assert_eq!(seqs(replay_pair(&a, &b, 2).unwrap().0), vec![3]);
        // The checkpoint's superblock lost after the release: the marker, newer than the
        // checkpoint, goes to `apply` (the `Db` reports the damaged superblock). Unreleased,
        // the older file's records 1 and 2 would have reached it and hidden it.
        assert_eq!(first_replayed(&a, &b), Some((Kind::Checkpoint, 2)));
        // A file that starts with a batch is older than one that starts with the marker of the
        // checkpoint covering that batch.
        let (a, b) = rotated_once();
        for (x, y) in [(&a, &b), (&b, &a)] {
            assert_eq!(seqs(replay_pair(x, y, 0).unwrap().0), vec![1]);
        }
    }

    /// A power cut came after a background checkpoint's superblock and before its thread
    /// released the file it left behind: the open releases it, since the engine is about to
    /// reuse what only the checkpoint before referenced, and a damaged newer superblock must
    /// still show in the marker (the test above, from the release on).
    #[test]
    fn an_older_file_the_checkpoint_covers_is_released_at_open() {
        let (a, b) = (sim("a"), sim("b"));
        let (w, _, _) = Wal::open([a.clone(), b.clone()], 0, |_| Ok(())).unwrap();
        w.append(Kind::Batch, 1, b"one").unwrap();
        w.append(Kind::Batch, 2, b"two").unwrap();
        w.rotate(2).unwrap();
        w.append(Kind::Batch, 3, b"three").unwrap();
        w.sync_through(3).unwrap();
        drop(w);
        a.crash();
        b.crash();
        assert!(!read::released(&a.durable_contents()));
        let (w, last, reopened) = Wal::open([a.clone(), b.clone()], 2, |_| Ok(())).unwrap();
        assert_eq!((last, reopened), (3, Reopened::Ready));
        assert!(
            read::released(&a.durable_contents()),
            "the covered file is released, durably"
        );
        drop(w);
        assert_eq!(first_replayed(&a, &b), Some((Kind::Checkpoint, 2)));
        // A file the checkpoint does not cover stays as it is (`CheckpointFirst`).
        let (a, b) = rotated_once();
        let (_, _, reopened) = Wal::open([a.clone(), b.clone()], 0, |_| Ok(())).unwrap();
        assert_eq!(reopened, Reopened::CheckpointFirst);
        assert!(!read::released(&a.durable_contents()));
    }

    /// A sync the writer runs itself (a rotation's, a retraction's) fails once: it lost the
    /// pages it was to make durable (the simulated disk does as Linux does), so a writer
    /// waiting for an earlier record must be told, not acknowledged by the next sync, which
    /// succeeds without them.
    #[test]
    fn a_failed_sync_on_the_writers_thread_fails_every_later_wait() {
        for step in ["rotate", "retract"] {
            let disk = SimDisk::new(Default::default(), 0.0);
            let a = Arc::new(SimDevice::new("a", disk.clone()));
            let b = Arc::new(SimDevice::new("b", disk.clone()));
            let (w, _, _) = Wal::open([a.clone(), b.clone()], 0, |_| Ok(())).unwrap();
            w.append(Kind::Batch, 1, b"one").unwrap();
            let at = w.append(Kind::Batch, 2, b"two").unwrap();
            match step {
                "rotate" => {
                    disk.fail_io_after(1, false);
                    assert!(w.rotate(2).is_err());
                }
                _ => {
                    // The retraction's cut of the file, then its sync.
                    disk.fail_io_after(2, false);
                    assert!(w.retract(at, 2).is_err());
                }
            }
            assert!(
                !a.durable_contents().windows(3).any(|x| x == b"one"),
                "{step}: the failed sync lost record 1"
            );
            let waited = w.sync_through(1);
            assert!(
                matches!(waited, Err(Error::Io { .. })),
                "{step}: a wait after the failed sync: {waited:?}"
            );
            // The file itself syncs again, without the lost record.
            a.sync().unwrap();
            assert!(!a.durable_contents().windows(3).any(|x| x == b"one"));
        }
    }

    #[test]
    fn a_log_ending_below_the_checkpoint_is_restarted_and_a_gap_names_its_file() {
        // Records 1..3 in one file; a checkpoint covers 5 (records 4 and 5 were unsynced and
        // lost, the checkpoint is durable): appending 6 after 3 would break the sequence.
        let dev = log_of(3, true);
        let (w, last, reopened) = Wal::open([dev.clone(), sim("b")], 5, |_| Ok(())).unwrap();
        assert_eq!((last, reopened), (5, Reopened::Restart));
        w.reset(5).unwrap();
        w.append(Kind::Batch, 6, b"six").unwrap();
        drop(w);
        assert_eq!(
            replay(&dev, 5).unwrap().len(),
            1,
            "record 6 follows the marker"
        );
        // An older file cut short before the newer one's marker: the damage is in the older
        // file, where its valid records end, and neither file is changed.
        let (a, b) = (sim("a"), sim("b"));
        let (w, _, _) = Wal::open([a.clone(), b.clone()], 0, |_| Ok(())).unwrap();
        for s in 1..=3 {
            w.append(Kind::Batch, s, b"rec").unwrap();
        }
        w.rotate(3).unwrap();
        drop(w);
        a.corrupt_byte(2 * (HEADER as u64 + 3) + 1, 1);
        let before = (a.contents(), b.contents());
        match Wal::open([a.clone(), b.clone()], 0, |_| Ok(())) {
            Err(Error::Corruption { file, offset, .. }) => {
                assert_eq!((file.as_str(), offset), ("a", 2 * (HEADER as u64 + 3)));
            }
            other => panic!("{:?}", other.err()),
        }
        assert!(before == (a.contents(), b.contents()), "nothing changed");
    }

    #[test]
    fn sequence_numbers_past_the_limit_are_not_records() {
        // A forged record numbered u64::MAX after a checkpoint at the limit, and one at the
        // limit after a valid record: no arithmetic overflows, the forged records are garbage.
        let (dev, w) = new_log();
        w.append(Kind::Batch, MAX_SEQ, b"last").unwrap();
        w.append(Kind::Batch, u64::MAX, b"forged").unwrap();
        drop(w);
        assert_eq!(replay(&dev, MAX_SEQ - 1).unwrap().len(), 1);
        let (dev, w) = new_log();
        w.append(Kind::Batch, u64::MAX, b"forged").unwrap();
        drop(w);
        assert!(replay(&dev, MAX_SEQ).unwrap().is_empty());
    }

    #[test]
    fn a_requested_sync_runs_on_the_sync_thread_without_a_waiter() {
        let (dev, w) = new_log();
        w.append(Kind::Batch, 1, b"a").unwrap();
        w.request_sync(1);
        // Nobody waits: the sync thread alone must make the record durable.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            // What a power cut would leave: the durable image, replayed on a fresh device.
            let copy = sim("copy");
            copy.write_at(&dev.durable_contents(), 0).unwrap();
            if replay(&copy, 0).unwrap().len() == 1 {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "never synced");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // A request for a record that was taken back is dropped, not chased forever.
        w.append(Kind::Batch, 2, b"b").unwrap();
        let off = w.size() - (HEADER as u64 + 1);
        w.retract(off, 2).unwrap();
        w.request_sync(2);
        w.sync_through(1).unwrap();
        drop(w); // joins the sync thread
    }

    /// A log device that models the OS page cache: which pages it holds, and the reads a
    /// buffered write covering part of a page it does not hold would make (none past the
    /// file's end, which the kernel fills with zeros); and the spans it was asked to start
    /// writing out.
    #[derive(Debug)]
    struct Cached {
        dev: Arc<SimDevice>,
        pages: Mutex<std::collections::BTreeSet<u64>>,
        reads_before_write: AtomicU64,
        /// The spans it was asked to start writing out.
        spans: Mutex<Vec<(u64, u64)>>,
    }

    impl Cached {
        fn new(name: &str) -> Arc<Cached> {
            Arc::new(Cached {
                dev: sim(name),
                pages: Mutex::new(Default::default()),
                reads_before_write: AtomicU64::new(0),
                spans: Mutex::new(Vec::new()),
            })
        }
    }

    impl Device for Cached {
        fn name(&self) -> &str {
            self.dev.name()
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
            let end = offset + buf.len() as u64;
            lock(&self.pages).extend(offset / OS_PAGE..end.div_ceil(OS_PAGE));
            self.dev.read_at(buf, offset)
        }
        fn write_at(&self, data: &[u8], offset: u64) -> Result<()> {
            let (len, end) = (self.dev.len()?, offset + data.len() as u64);
            let mut pages = lock(&self.pages);
            for p in offset / OS_PAGE..end.div_ceil(OS_PAGE) {
                let whole = offset <= p * OS_PAGE && (p + 1) * OS_PAGE <= end;
                if !whole && !pages.contains(&p) && p * OS_PAGE < len {
                    self.reads_before_write.fetch_add(1, Ordering::SeqCst);
                }
                pages.insert(p);
            }
            self.dev.write_at(data, offset)
        }
        fn sync(&self) -> Result<()> {
            self.dev.sync()
        }
        fn start_write_out(&self, offset: u64, len: u64) {
            lock(&self.spans).push((offset, len));
        }
        fn forget(&self, offset: u64, len: u64) {
            let mut pages = lock(&self.pages);
            // Whole pages only, as posix_fadvise drops them.
            let gone: Vec<u64> = pages
                .range(offset.div_ceil(OS_PAGE)..(offset + len) / OS_PAGE)
                .copied()
                .collect();
            for p in gone {
                pages.remove(&p);
            }
        }
        fn len(&self) -> Result<u64> {
            self.dev.len()
        }
        fn set_len(&self, len: u64) -> Result<()> {
            self.dev.set_len(len)
        }
    }

    #[test]
    fn a_file_written_over_is_never_read_before_a_write_and_its_synced_pages_leave_the_cache() {
        let (a, b) = (Cached::new("a"), Cached::new("b"));
        let devs = [a.clone() as Arc<dyn Device>, b.clone() as Arc<dyn Device>];
        let (w, _, _) = Wal::open(devs, 0, |_| Ok(())).unwrap();
        // Sizes from a few bytes to several pages, so records end anywhere in a page.
        let mut x = 12345u64;
        let mut size = move || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            1 + (x >> 33) as usize % 12_000
        };
        let mut seq = 0;
        let mut round = |w: &Wal, records: usize| {
            for _ in 0..records {
                seq += 1;
                w.append(Kind::Batch, seq, &vec![seq as u8; size()])
                    .unwrap();
                w.sync_through(seq).unwrap();
            }
            seq
        };
        // The first round in `a` grows it; the second, in `b`, releases `a` once "durable".
        let s = round(&w, 600);
        w.rotate(s).unwrap();
        let s = round(&w, 400);
        release(&*w.left_behind(), s).unwrap();
        let a_len = a.len().unwrap();
        assert!(a_len > 3 * FORGET_EVERY);
        assert!(
            lock(&a.pages).is_empty(),
            "a released file leaves the cache"
        );
        // Back in `a`, over the first round's bytes: shorter, so all of it lies inside.
        w.rotate(s).unwrap();
        let last = round(&w, 300);
        assert_eq!(
            a.len().unwrap(),
            a_len,
            "written over, neither cut nor grown"
        );
        assert_eq!(
            a.reads_before_write.load(Ordering::SeqCst),
            0,
            "no write covered part of a page the cache did not hold"
        );
        let held = lock(&a.pages).len() as u64 * OS_PAGE;
        assert!(
            held <= FORGET_EVERY + 4 * 12_000,
            "{held} bytes of the log cached"
        );
        // And the round replays whole, the earlier round's records past it ignored.
        drop(w);
        let (a0, b0) = (sim("a0"), sim("b0"));
        a0.write_at(&a.dev.durable_contents(), 0).unwrap();
        b0.write_at(&b.dev.durable_contents(), 0).unwrap();
        let (seen, _) = replay_pair(&a0, &b0, s).unwrap();
        assert_eq!(
            seen.iter().map(|r| r.0).collect::<Vec<_>>(),
            (s + 1..=last).collect::<Vec<_>>()
        );
        assert!(seen.iter().all(|(q, p)| p.iter().all(|&c| c == *q as u8)));
    }

    #[test]
    fn padding_stops_at_the_page_a_record_ends_in_and_the_files_length() {
        let tail = |recycled| Tail {
            recycled,
            ..Tail::default()
        };
        let t = tail(10 * OS_PAGE);
        // Ends in the page it starts in, which the append before left cached: none.
        assert_eq!(t.pad(100, 200), 0);
        // Starts a page, or ends past the page it starts in: up to that page's end.
        assert_eq!(t.pad(0, 32), OS_PAGE as usize - 32);
        assert_eq!(t.pad(100, OS_PAGE + 10), OS_PAGE as usize - 10);
        // Ends on a page boundary: nothing to read.
        assert_eq!(t.pad(100, 2 * OS_PAGE), 0);
        // Past the earlier round's bytes the kernel reads nothing: none.
        assert_eq!(t.pad(100, 10 * OS_PAGE + 10), 0);
        // A file whose length ends inside the page: up to the length, never past it.
        let t = tail(OS_PAGE + 1000);
        assert_eq!(t.pad(100, OS_PAGE + 10), 990);
        assert_eq!(t.pad(100, OS_PAGE + 2000), 0);
    }

    /// A log device that notes which thread ran each sync and how many ran at once.
    #[derive(Debug)]
    struct Watched {
        dev: Arc<SimDevice>,
        syncs_on: Mutex<Vec<Option<String>>>,
        in_sync: AtomicU64,
        most_at_once: AtomicU64,
        /// The flag given to `raise_while_syncing`, and what it read at each sync.
        flag: Arc<AtomicBool>,
        flag_at_sync: Mutex<Vec<bool>>,
    }

    impl Device for Watched {
        fn name(&self) -> &str {
            self.dev.name()
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
            self.dev.read_at(buf, offset)
        }
        fn write_at(&self, data: &[u8], offset: u64) -> Result<()> {
            self.dev.write_at(data, offset)
        }
        fn sync(&self) -> Result<()> {
            let now = self.in_sync.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_at_once.fetch_max(now, Ordering::SeqCst);
            let name = std::thread::current().name().map(str::to_string);
            lock(&self.syncs_on).push(name);
            lock(&self.flag_at_sync).push(self.flag.load(Ordering::SeqCst));
            // Long enough for writers to pile up behind it.
            std::thread::sleep(std::time::Duration::from_micros(200));
            let r = self.dev.sync();
            self.in_sync.fetch_sub(1, Ordering::SeqCst);
            r
        }
        fn len(&self) -> Result<u64> {
            self.dev.len()
        }
        fn set_len(&self, len: u64) -> Result<()> {
            self.dev.set_len(len)
        }
    }

    fn watched() -> Arc<Watched> {
        Arc::new(Watched {
            dev: sim("wal"),
            syncs_on: Mutex::new(Vec::new()),
            in_sync: AtomicU64::new(0),
            most_at_once: AtomicU64::new(0),
            flag: Arc::new(AtomicBool::new(false)),
            flag_at_sync: Mutex::new(Vec::new()),
        })
    }

    fn watched_log() -> (Arc<Watched>, Wal) {
        let dev = watched();
        let (w, _, _) = Wal::open(
            [dev.clone() as Arc<dyn Device>, sim("other")],
            0,
            |_| Ok(()),
        )
        .unwrap();
        (dev, w)
    }

    #[test]
    fn resets_release_the_other_file_once_until_a_rotation_brings_it_back() {
        let (dev, a) = (watched(), sim("a"));
        // Neither file has a record: the second given is the older, the one `reset` releases.
        let (w, _, _) = Wal::open(
            [a.clone() as Arc<dyn Device>, dev.clone() as Arc<dyn Device>],
            0,
            |_| Ok(()),
        )
        .unwrap();
        let syncs = || lock(&dev.syncs_on).len();
        w.append(Kind::Batch, 1, b"a").unwrap();
        w.reset(1).unwrap();
        assert_eq!(syncs(), 1, "released, durably");
        assert!(read::released(&dev.dev.durable_contents()));
        w.append(Kind::Batch, 2, b"b").unwrap();
        w.reset(2).unwrap();
        assert_eq!(syncs(), 1, "still released: nothing wrote it");
        // A rotation writes into it; the next reset releases the other one, `a`.
        w.rotate(2).unwrap();
        assert!(!read::released(&dev.dev.contents()));
        w.append(Kind::Batch, 3, b"c").unwrap();
        w.reset(3).unwrap();
        assert!(read::released(&a.durable_contents()));
    }

    #[test]
    fn a_writer_whose_sync_has_not_begun_runs_it_itself() {
        let (dev, w) = watched_log();
        let me = std::thread::current().name().map(str::to_string);
        w.append(Kind::Batch, 1, b"a").unwrap();
        // No request went to the sync thread: the waiter must not sleep on it.
        w.sync_through(1).unwrap();
        assert_eq!(
            *lock(&dev.syncs_on),
            vec![me],
            "the sync ran on the waiting thread"
        );
        let copy = sim("copy");
        copy.write_at(&dev.dev.durable_contents(), 0).unwrap();
        assert_eq!(
            replay(&copy, 0).unwrap().len(),
            1,
            "and made the record durable"
        );
    }

    #[test]
    fn the_flag_given_is_up_during_each_sync_and_down_between() {
        let (dev, w) = watched_log();
        w.raise_while_syncing(dev.flag.clone());
        for seq in 1..=3 {
            w.append(Kind::Batch, seq, b"a").unwrap();
            w.request_sync(seq);
            w.sync_through(seq).unwrap();
            assert!(
                !dev.flag.load(Ordering::SeqCst),
                "down once sync {seq} is over"
            );
        }
        let seen = lock(&dev.flag_at_sync).clone();
        assert!(!seen.is_empty() && seen.iter().all(|&up| up), "{seen:?}");
    }

    #[test]
    fn writers_and_the_sync_thread_share_syncs_one_at_a_time_and_cover_every_record() {
        let (dev, w) = watched_log();
        let w = Arc::new(w);
        // Appends are ordered by the caller's lock, as `Db`'s write lock orders them.
        let order = Arc::new(Mutex::new(0u64));
        let writers: Vec<_> = (0..4)
            .map(|_| {
                let (w, order, dev) = (w.clone(), order.clone(), dev.clone());
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        let seq = {
                            let mut last = lock(&order);
                            *last += 1;
                            w.append(Kind::Batch, *last, b"payload").unwrap();
                            w.request_sync(*last);
                            *last
                        };
                        w.sync_through(seq).unwrap();
                        // Acknowledged: what a power cut leaves now must hold it.
                        let copy = sim("copy");
                        copy.write_at(&dev.dev.durable_contents(), 0).unwrap();
                        let seen = replay(&copy, 0).unwrap();
                        assert!(
                            seen.iter().any(|(s, _)| *s == seq),
                            "record {seq} not durable"
                        );
                    }
                })
            })
            .collect();
        for t in writers {
            t.join().unwrap();
        }
        assert_eq!(
            dev.most_at_once.load(Ordering::SeqCst),
            1,
            "two syncs overlapped"
        );
        let syncs = lock(&dev.syncs_on).len();
        assert!(syncs < 200, "{syncs} syncs for 200 records: none shared");
    }
}
