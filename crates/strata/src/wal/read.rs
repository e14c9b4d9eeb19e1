//! Reading the log: parsing one record, and scanning a whole file at open to find where its
//! valid records end (`Scan`), which `Wal::open` judges before it applies or trims anything
//! (see the format and the rules for what lies past the end in `wal`'s header).

use xxhash_rust::xxh3::xxh3_64;

use super::{Kind, Record, HEADER, MAX_SEQ, RELEASED};
use crate::error::{Error, Result};
use crate::storage::Device;

pub(super) struct Parsed {
    pub(super) kind: Kind,
    pub(super) seq: u64,
    pub(super) durable: u64,
    pub(super) len: usize,
}

/// The sequence number of the first valid record of a log file, if it has one, and whether it
/// is a checkpoint marker (which comes after a batch of the same number).
/// A released file (`released`) has none.
pub(super) fn first_record(dev: &dyn Device) -> Result<Option<(u64, bool)>> {
    let mut head = [0u8; HEADER];
    let len = dev.len()?;
    if len < HEADER as u64 {
        return Ok(None);
    }
    dev.read_at(&mut head, 0)?;
    if released(&head) {
        return Ok(None);
    }
    let body_len = u32::from_le_bytes(head[8..12].try_into().unwrap()) as u64;
    if HEADER as u64 + body_len > len {
        return Ok(None);
    }
    let mut rec = vec![0u8; HEADER + body_len as usize];
    dev.read_at(&mut rec, 0)?;
    Ok(parse(&rec, 0, |_| true).map(|r| (r.seq, r.kind == Kind::Checkpoint)))
}

/// What replay should do before the log takes new records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reopened {
    /// Append to the newer file as it is.
    Ready,
    /// The older file holds records the checkpoint does not cover (a crash came before a
    /// background checkpoint was durable): checkpoint, then `reset`, before the next `rotate`
    /// reuses that file.
    CheckpointFirst,
    /// The log ends below the checkpoint: `reset` (the checkpoint covers every record in
    /// both files) before appending.
    Restart,
}

/// One log file read whole: its consecutive valid records from the start, and where they end.
pub(super) struct Scan {
    pub(super) name: String,
    pub(super) buf: Vec<u8>,
    pub(super) records: Vec<Located>,
    /// Where the valid records end; bytes past it are damage or the tail of a crash.
    pub(super) end: usize,
}

pub(super) struct Located {
    pub(super) off: usize,
    pub(super) kind: Kind,
    pub(super) seq: u64,
    pub(super) len: usize,
}

impl Scan {
    pub(super) fn of(dev: &dyn Device) -> Result<Scan> {
        let len = dev.len()?;
        let mut buf = vec![0u8; len as usize];
        if len > 0 {
            dev.read_at(&mut buf, 0)?;
        }
        let mut records: Vec<Located> = Vec::new();
        if released(&buf) {
            // A durable checkpoint covers all of it: nothing to replay, nothing to judge.
            let end = buf.len();
            return Ok(Scan {
                name: dev.name().to_string(),
                buf,
                records,
                end,
            });
        }
        let mut off = 0usize;
        while let Some(r) = parse(&buf, off, |s| records.last().is_none_or(|p| p.seq + 1 == s)) {
            records.push(Located {
                off,
                kind: r.kind,
                seq: r.seq,
                len: r.len,
            });
            off += HEADER + r.len;
        }
        Ok(Scan {
            name: dev.name().to_string(),
            buf,
            records,
            end: off,
        })
    }

    pub(super) fn last(&self) -> Option<u64> {
        self.records.last().map(|r| r.seq)
    }

    /// Past the valid records: corruption if a later valid record proves that the damage is
    /// not the tail of a crash: it was appended after the next expected record had been synced
    /// (its durable watermark covers it), or it is the next expected record itself (records
    /// are written back to back, so what lies before it is damage, a marker or records).
    /// Otherwise it is the tail of a crash: a torn write, or unsynced records that never
    /// reached the disk, possibly out of order. `floor` is the sequence number the records
    /// before this file reach (the checkpoint's, and the older file's).
    pub(super) fn judge_tail(&self, floor: u64) -> Result<()> {
        if self.end >= self.buf.len() {
            return Ok(());
        }
        let last = self.last().unwrap_or(0).max(floor);
        let next = last + 1;
        let most = last + (self.buf.len() / HEADER) as u64;
        let proof = (self.end + 1..self.buf.len())
            .filter_map(|p| parse(&self.buf, p, |s| s > last && s <= most))
            .any(|r| r.durable >= next || r.seq == next);
        if proof {
            return Err(Error::corruption(
                &self.name,
                self.end as u64,
                format!("log record {next} is damaged but a later record shows it was synced"),
            ));
        }
        Ok(())
    }

    /// The first record must not leave a gap after the checkpoint; a marker past it is for
    /// `apply` to judge.
    pub(super) fn check_start(&self, after_seq: u64) -> Result<()> {
        match self.records.first() {
            Some(first) if first.kind == Kind::Batch && first.seq > after_seq + 1 => {
                Err(self.gap_error(after_seq, first))
            }
            _ => Ok(()),
        }
    }

    pub(super) fn gap_error(&self, reach: u64, first: &Located) -> Error {
        Error::corruption(
            &self.name,
            first.off as u64,
            format!(
                "log starts at sequence {} but the checkpoint and the older log reach only {reach}",
                first.seq
            ),
        )
    }

    /// Hand every record after `after_seq` to `apply`, in order.
    pub(super) fn replay(
        &self,
        after_seq: u64,
        apply: &mut impl FnMut(Record<'_>) -> Result<()>,
    ) -> Result<()> {
        for r in self.records.iter().filter(|r| r.seq > after_seq) {
            apply(Record {
                kind: r.kind,
                file: &self.name,
                seq: r.seq,
                offset: r.off as u64,
                payload: &self.buf[r.off + HEADER..r.off + HEADER + r.len],
            })?;
        }
        Ok(())
    }
}

/// The valid record at `off` whose sequence number `accept`s, if any. The sequence number is
/// tested before the checksum, which keeps scans over garbage cheap.
pub(super) fn parse(buf: &[u8], off: usize, accept: impl Fn(u64) -> bool) -> Option<Parsed> {
    let h = buf.get(off..off + HEADER)?;
    let len = u32::from_le_bytes(h[8..12].try_into().unwrap()) as usize;
    let seq = u64::from_le_bytes(h[16..24].try_into().unwrap());
    // Sequence numbers stay below 2^63 (the superblock refuses more), so the arithmetic on
    // them never overflows, whatever a forged record says.
    if seq > MAX_SEQ || !accept(seq) {
        return None;
    }
    let body = buf.get(off + 8..(off + HEADER).checked_add(len)?)?;
    if xxh3_64(body) != u64::from_le_bytes(h[..8].try_into().unwrap()) {
        return None;
    }
    let kind = match h[12] {
        0 => Kind::Batch,
        1 => Kind::Checkpoint,
        _ => return None,
    };
    Some(Parsed {
        kind,
        seq,
        durable: u64::from_le_bytes(h[24..32].try_into().unwrap()),
        len,
    })
}

/// Whether `buf` begins with the head `Wal::release` writes: the file is obsolete, every record
/// in it covered by a durable checkpoint.
pub(crate) fn released(buf: &[u8]) -> bool {
    let Some(h) = buf.get(..HEADER) else {
        return false;
    };
    h[12] == RELEASED
        && h[8..12] == [0; 4]
        && xxh3_64(&h[8..]) == u64::from_le_bytes(h[..8].try_into().unwrap())
}
