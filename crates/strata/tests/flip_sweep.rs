//! Byte-flip sweep over real database files of every engine configuration: a database of a few
//! thousand keys (values out of line, runs, several levels) is built on a simulated disk and
//! closed; then, one trial at a time, one bit of one file is flipped, the database is reopened,
//! every key ever written is read, the whole key space is scanned both ways and `Db::check` runs.
//!
//! Every byte of the data file is classified by the layout of docs/format.md (superblock slots,
//! translation table, node blocks by kind, their partitions, padding, free space), and every
//! byte of the log by the record it belongs to. A trial must end in exactly one of:
//! - detected: every error is `Error::Corruption` naming the flipped file and one of: the
//!   damaged block's extent offset, the damaged partition's offset (a Bε-tree basement, segment
//!   or run chunk, which carry their own checksums), the damaged superblock slot, the damaged
//!   log record's offset, or the flipped byte itself; every answer given before or beside the
//!   errors is right;
//! - harmless: no error, every answer equal to the model;
//! - dropped by the torn-tail rule: damage in the log's last record is indistinguishable from
//!   a torn write, so replay stops before it and the database holds the model as of the batch
//!   before (docs/format.md, "The write-ahead log");
//!
//! never a wrong answer or a panic. Moreover the layout decides which: a byte the newest
//! checkpoint references under a checksum is "live" and its flip must be detected (`check`
//! reads every block); any other byte is "dead" (padding, free space, the older superblock, the
//! unchecksummed tail of the newest) and its flip must be harmless.
//!
//! The default tests run a few hundred flips per engine (a stride over each file plus random
//! offsets in every region kind, fixed seeds) and print the table (`--nocapture`);
//! `flip_sweep_large` (ignored) runs many more.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};

use common::keys::rum_key;
use common::*;
use strata::salvage::{salvage_in, Effect};
use strata::storage::{Device, SimEnv};
use strata::{AddU64, Db, Durability, Error, MergeOperator, Op, Options, WriteBatch};

type Map = BTreeMap<Vec<u8>, Vec<u8>>;
type Files = BTreeMap<String, Vec<u8>>;

const WAL_1: &str = "strata.wal.1";
// The kinds written today (segments and basements in the shaped encoding); 32, 29 and 30
// (compact) and 18, 19 and 20 (fixed) are still read.
const KIND_BE_LEAF: u8 = 33;
const KIND_BE_INTERNAL: u8 = 34;
const KIND_RUN: u8 = 35;

/// One engine configuration under test.
struct Config {
    name: &'static str,
    opts: Options,
    /// Keys inserted before the database is closed.
    keys: u32,
    /// Length of the values stored out of line (every 30th value or so).
    big: usize,
    /// Region kinds the built file must contain, so the sweep covers them.
    kinds: &'static [&'static str],
}

fn base() -> Options {
    Options::default()
        .merge_operator(AddU64)
        .durability(Durability::Sync)
        // Several checkpoints during the load: free space, an older superblock, rotations.
        .checkpoint_wal_bytes(128 << 10)
}

fn btree() -> Config {
    Config {
        name: "B+-tree 4 KiB",
        opts: base().btree(4 << 10).cache_bytes(64 << 10),
        keys: 3000,
        big: 1500,
        kinds: &[
            "superblock (newest)",
            "table",
            "B+-tree leaf",
            "B+-tree internal",
            "blob",
            "padding",
            "free space",
        ],
    }
}

fn betree_small() -> Config {
    Config {
        // 8 KiB nodes: a leaf of one page takes no runs (`betree::policy`), and runs are
        // among the regions swept.
        name: "Bε-tree 8 KiB/4/1 KiB",
        opts: base().betree(8 << 10, 4, 1 << 10).cache_bytes(64 << 10),
        keys: 3000,
        big: 1500,
        kinds: &[
            "superblock (newest)",
            "table",
            "Bε leaf head",
            "Bε basement",
            "Bε internal head",
            "Bε segment",
            "Bε run head",
            "Bε run chunk",
            "blob",
            "padding",
        ],
    }
}

fn betree_large_basements() -> Config {
    let g = strata::LARGE_BASEMENTS_BETREE;
    Config {
        name: "Bε-tree, large basements (1 MiB/16/64 KiB)",
        opts: base()
            .betree(g.node_size, g.fanout, g.basement)
            .cache_bytes(4 << 20),
        keys: 20_000,
        big: 20_000,
        kinds: &[
            "superblock (newest)",
            "table",
            "Bε leaf head",
            "Bε basement",
            "Bε internal head",
            "Bε segment",
            "blob",
            "padding",
        ],
    }
}

// ------------------------------------------------------------------------------------------
// The model and the workload

fn apply(model: &mut Map, batch: &WriteBatch) {
    for op in batch.ops() {
        match op {
            Op::Put { key, value } => {
                model.insert(key.clone(), value.clone());
            }
            Op::Delete { key } => {
                model.remove(key);
            }
            Op::Upsert { key, operand } => {
                match AddU64.merge(key, model.get(key).map(|v| &v[..]), operand) {
                    Some(v) => {
                        model.insert(key.clone(), v);
                    }
                    None => {
                        model.remove(key);
                    }
                }
            }
            Op::DeleteRange { start, end } => {
                let doomed: Vec<Vec<u8>> = model
                    .range(start.clone()..end.clone())
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in doomed {
                    model.remove(&k);
                }
            }
        }
    }
}

/// A batch of `ops` random operations: mostly new keys, then overwrites, deletes, counter
/// upserts and small range deletes; about one value in 30 is `big` bytes (out of line).
fn random_batch(rng: &mut Rng, ops: u64, next: &mut u32, model: &Map, big: usize) -> WriteBatch {
    let mut b = WriteBatch::new();
    let existing = |rng: &mut Rng| -> Option<Vec<u8>> {
        let n = model.len() as u64;
        (n > 0).then(|| model.keys().nth(rng.range(0, n) as usize).unwrap().clone())
    };
    for _ in 0..ops {
        let len = if rng.chance(1, 30) {
            big
        } else {
            rng.range(20, 150) as usize
        };
        let r = rng.range(0, 100);
        let old = existing(rng);
        match (r, old) {
            (75..=84, Some(k)) => {
                b.put(k, value(rng.next_u64(), len));
            }
            (85..=91, Some(k)) => {
                b.delete(k);
            }
            (92..=96, _) => {
                let k = format!("ctr{:03}", rng.range(0, 50));
                b.upsert(k, rng.range(1, 1000).to_le_bytes());
            }
            (97.., Some(k)) if k.len() == 16 => {
                // About a thousandth of the key space from an existing key.
                let lo = u64::from_be_bytes(k[..8].try_into().unwrap());
                let hi = lo.saturating_add(1 << 54).to_be_bytes();
                b.delete_range(k, hi);
            }
            _ => {
                b.put(rum_key(*next as u64), value(rng.next_u64(), len));
                *next += 1;
            }
        }
    }
    b
}

fn snapshot(env: &SimEnv) -> Files {
    env.files()
        .names()
        .into_iter()
        .map(|n| {
            let bytes = env.files().get(&n).unwrap().contents();
            (n, bytes)
        })
        .collect()
}

/// A fresh simulated disk holding `files`, durable.
fn env_of(files: &Files) -> SimEnv {
    let env = SimEnv::new();
    for (name, bytes) in files {
        let dev = env.files().get_or_create(name);
        if !bytes.is_empty() {
            dev.write_at(bytes, 0).unwrap();
        }
        dev.sync().unwrap();
    }
    env
}

/// The two images a sweep damages, and what they must read back as.
struct Built {
    /// After `close`: the data file of a checkpoint, the log holding only its marker.
    closed: Files,
    /// The closed database reopened, a few more synced batches, then a process crash: the
    /// log holds their records.
    crashed: Files,
    /// `states[j]`: the contents after j of those batches (`states[0]` is the closed one).
    states: Vec<Map>,
    /// Every key ever written, for reads that must find nothing.
    ever: BTreeSet<Vec<u8>>,
    /// The sequence number of the first batch after the close (its checkpoint's + 1).
    crashed_first_seq: u64,
}

fn build(cfg: &Config, seed: u64) -> Built {
    let env = SimEnv::new();
    let db = Db::open_in(&env, cfg.opts.clone()).unwrap();
    let mut rng = Rng::new(seed);
    let mut model = Map::new();
    let mut ever = BTreeSet::new();
    let mut next = 0;
    while next < cfg.keys {
        let ops = rng.range(20, 200);
        let b = random_batch(&mut rng, ops, &mut next, &model, cfg.big);
        apply(&mut model, &b);
        ever.extend(b.ops().iter().map(|op| op.key().to_vec()));
        db.write(b).unwrap();
    }
    db.close().unwrap();
    let closed = snapshot(&env);
    let db = Db::open_in(&env, cfg.opts.clone()).unwrap();
    let mut states = vec![model.clone()];
    for _ in 0..6 {
        let b = random_batch(&mut rng, 8, &mut next, &model, cfg.big);
        apply(&mut model, &b);
        ever.extend(b.ops().iter().map(|op| op.key().to_vec()));
        db.write(b).unwrap();
        states.push(model.clone());
    }
    drop(db);
    let crashed = snapshot(&env);
    // Both images read back whole and pass the checker before anything is damaged.
    for (files, want) in [(&closed, &states[0]), (&crashed, &model)] {
        let db = Db::open_in(&env_of(files), cfg.opts.clone()).unwrap();
        db.check().unwrap();
        assert_eq!(&dump(&db), want, "{}: the undamaged image", cfg.name);
    }
    let crashed_first_seq = newest_superblock(&closed[DATA]).wal_seq + 1;
    Built {
        closed,
        crashed,
        states,
        ever,
        crashed_first_seq,
    }
}

// ------------------------------------------------------------------------------------------
// The layout: every byte of each file, classified

#[derive(Clone, Debug)]
struct Region {
    start: u64,
    end: u64,
    kind: &'static str,
    /// Checksummed and referenced by the newest checkpoint (or a log record): a flip must be
    /// detected. Otherwise it must be harmless.
    live: bool,
    /// Either outcome is right: the newest superblock when the older one covers the same log
    /// position (a checkpoint with no writes since the one before, as `close` after a
    /// background checkpoint makes): falling back to the older loses nothing.
    either: bool,
    /// Offsets a `Corruption` error may name besides the flipped byte.
    anchors: Vec<u64>,
    /// For a log record: its sequence number, and whether it is the last record of the log.
    record: Option<(u64, bool)>,
}

fn region(start: u64, end: u64, kind: &'static str, live: bool, anchors: Vec<u64>) -> Region {
    Region {
        start,
        end,
        kind,
        live,
        either: false,
        anchors,
        record: None,
    }
}

fn u32_le(b: &[u8], at: usize) -> u64 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as u64
}

/// Cover [start, end) with `inner` (sorted, disjoint, inside it) and `gap` regions between.
fn fill(start: u64, end: u64, mut inner: Vec<Region>, gap: &'static str, out: &mut Vec<Region>) {
    inner.sort_by_key(|r| r.start);
    let mut at = start;
    for r in inner {
        assert!(r.start >= at && r.end <= end, "regions overlap: {r:?}");
        if r.start > at {
            out.push(region(at, r.start, gap, false, vec![]));
        }
        at = r.end;
        out.push(r);
    }
    if at < end {
        out.push(region(at, end, gap, false, vec![]));
    }
}

/// The regions of one extent holding a block: the checksummed part, the partitions of a
/// Bε-tree node (from its head's directory), and padding.
fn block_regions(data: &[u8], e: Entry, out: &mut Vec<Region>) {
    let blk = block_at(data, e.offset);
    let head_end = e.offset + (BLOCK_HEADER + blk.payload.len()) as u64;
    let p = blk.payload;
    let mut inner = Vec::new();
    let head_kind = match blk.kind {
        KIND_TABLE => "table",
        KIND_BLOB => "blob",
        KIND_LEAF => "B+-tree leaf",
        KIND_INTERNAL => "B+-tree internal",
        KIND_BE_LEAF => "Bε leaf head",
        KIND_BE_INTERNAL => "Bε internal head",
        KIND_RUN => "Bε run head",
        k => panic!("block kind {k} at {}", e.offset),
    };
    inner.push(region(e.offset, head_end, head_kind, true, vec![e.offset]));
    // Partition directories: (entry size, where offset and length sit in an entry).
    let dir = match blk.kind {
        KIND_BE_INTERNAL => Some((28usize, 8usize, "Bε segment")),
        KIND_BE_LEAF => Some((20, 0, "Bε basement")),
        KIND_RUN => Some((20, 0, "Bε run chunk")),
        _ => None,
    };
    if let Some((size, field, kind)) = dir {
        let n = u32_le(p, 0) as usize;
        for i in 0..n {
            let at = 4 + size * i + field;
            let (off, len) = (u32_le(p, at), u32_le(p, at + 4));
            let start = e.offset + off;
            inner.push(region(
                start,
                start + len,
                kind,
                true,
                vec![e.offset, start],
            ));
        }
    }
    fill(e.offset, e.offset + e.len, inner, "padding", out);
}

fn data_regions(data: &[u8]) -> Vec<Region> {
    let newest = newest_superblock(data);
    let mut out = Vec::new();
    for slot in 0..2u64 {
        let off = slot * SB_SIZE;
        if off == newest.slot_offset {
            let body_end = off + 16 + newest.body_len as u64;
            let mut r = region(off, body_end, "superblock (newest)", true, vec![off]);
            let older = superblock(data, 1 - slot);
            r.either = older.is_some_and(|o| o.wal_seq == newest.wal_seq);
            out.push(r);
            out.push(region(
                body_end,
                off + SB_SIZE,
                "superblock slack",
                false,
                vec![],
            ));
        } else {
            out.push(region(
                off,
                off + SB_SIZE,
                "superblock (older)",
                false,
                vec![],
            ));
        }
    }
    let mut extents = table(data);
    extents.push(Entry {
        id: u64::MAX,
        offset: newest.table_offset,
        len: newest.table_len,
    });
    extents.sort_by_key(|e| e.offset);
    let mut inner = Vec::new();
    for e in extents {
        block_regions(data, e, &mut inner);
    }
    fill(DATA_START, data.len() as u64, inner, "free space", &mut out);
    out
}

/// The records of both log files, each as a header region and a payload region.
fn log_regions(files: &Files) -> BTreeMap<&'static str, Vec<Region>> {
    let mut out = BTreeMap::new();
    let mut last: Option<(&'static str, u64, u64)> = None;
    for name in [WAL, WAL_1] {
        let bytes = files.get(name).cloned().unwrap_or_default();
        let recs = wal_records(&bytes);
        let end = recs
            .last()
            .map_or(0, |r| r.offset + (WAL_HEADER + r.len) as u64);
        assert_eq!(end, bytes.len() as u64, "{name}: nothing but whole records");
        let mut v = Vec::new();
        for r in recs {
            let marker = bytes[r.offset as usize + 12] == 1;
            let head = r.offset + WAL_HEADER as u64;
            let mut h = region(r.offset, head, "log record header", true, vec![r.offset]);
            let body_kind = if marker {
                "log marker"
            } else {
                "log record payload"
            };
            let mut b = region(head, head + r.len as u64, body_kind, true, vec![r.offset]);
            if marker {
                h.kind = "log marker";
            }
            h.record = Some((r.seq, false));
            b.record = Some((r.seq, false));
            v.push(h);
            if r.len > 0 {
                v.push(b);
            }
            if last.is_none_or(|(_, s, _)| r.seq > s || (r.seq == s && !marker)) {
                last = Some((name, r.seq, r.offset));
            }
        }
        out.insert(name, v);
    }
    if let Some((name, seq, offset)) = last {
        for r in out.get_mut(name).unwrap() {
            if r.anchors == [offset] {
                r.record = Some((seq, true));
            }
        }
    }
    out
}

// ------------------------------------------------------------------------------------------
// One trial

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Detected,
    Harmless,
    /// The log's damaged last record was dropped, as a torn write would be.
    TornTail,
    /// Detected, but reported in the log rather than at the damaged superblock: a known
    /// shortcoming of wal.rs (see `known_misplaced`).
    Misplaced,
}

/// A damaged newest superblock makes open fall back to the older checkpoint; when the log then
/// starts with the marker of the newer checkpoint, `Wal::open`'s check for a gap after the
/// checkpoint fires before the `Db`'s check for a newer marker, so the error names the log at
/// offset 0 instead of the damaged slot. Detected, never silent, but misplaced; the fix belongs
/// in wal.rs (`flip_regressions::damaged_newest_superblock_is_named_not_the_log`).
fn known_misplaced(r: &Region, e: &Error) -> bool {
    r.kind == "superblock (newest)"
        && matches!(e, Error::Corruption { file, offset: 0, what }
            if file.starts_with(WAL) && what.contains("log starts at sequence"))
}

/// What a reopened database answered, against the states it may legitimately hold.
struct Observation {
    errors: Vec<Error>,
    wrong: Vec<String>,
    /// Index into the acceptable states of the one the answers matched.
    state: usize,
}

/// Open the files as damaged and ask everything: every key ever written, a forward and a
/// reverse scan, and `check`. `states` are the acceptable contents, preferred first.
fn observe(env: &SimEnv, opts: &Options, states: &[&Map], ever: &BTreeSet<Vec<u8>>) -> Observation {
    let mut obs = Observation {
        errors: Vec::new(),
        wrong: Vec::new(),
        state: 0,
    };
    let db = match Db::open_in(env, opts.clone()) {
        Ok(db) => db,
        Err(e) => {
            obs.errors.push(e);
            return obs;
        }
    };
    // The forward scan picks the state: the one it equals (when it completes), or the first
    // whose prefix it is.
    let mut seen = Vec::new();
    for kv in db.iter().unwrap() {
        match kv {
            Ok(kv) => seen.push(kv),
            Err(e) => {
                obs.errors.push(e);
                break;
            }
        }
    }
    let complete = obs.errors.is_empty();
    let fits = |m: &Map| {
        (!complete || m.len() == seen.len())
            && m.iter()
                .zip(&seen)
                .all(|((k, v), (sk, sv))| k == sk && v == sv)
            && seen.len() <= m.len()
    };
    match states.iter().position(|m| fits(m)) {
        Some(i) => obs.state = i,
        None => obs.wrong.push(format!(
            "the forward scan returned {} items that are no state's ({} expected)",
            seen.len(),
            states[0].len()
        )),
    }
    let want = states[obs.state];
    let mut it = db.iter().unwrap();
    let mut expect = want.iter().rev();
    loop {
        match it.next_back() {
            Some(Ok((k, v))) => {
                if expect.next() != Some((&k, &v)) {
                    obs.wrong.push(format!("reverse scan: wrong item {k:?}"));
                    break;
                }
            }
            Some(Err(e)) => {
                obs.errors.push(e);
                break;
            }
            None => {
                if expect.next().is_some() {
                    obs.wrong
                        .push("reverse scan ended early without an error".into());
                }
                break;
            }
        }
    }
    for k in ever {
        match db.get(k) {
            Ok(got) => {
                if got.as_ref() != want.get(k) {
                    obs.wrong.push(format!(
                        "get {k:?}: {} bytes, want {}",
                        got.map_or(-1, |v| v.len() as i64),
                        want.get(k).map_or(-1, |v| v.len() as i64)
                    ));
                }
            }
            Err(e) => obs.errors.push(e),
        }
    }
    if let Err(e) = db.check() {
        obs.errors.push(e);
    }
    obs
}

/// A flip that went wrong, with what reproduces it.
struct Failure {
    config: &'static str,
    file: &'static str,
    offset: u64,
    xor: u8,
    kind: &'static str,
    what: String,
}

/// Flip `xor` at `offset` of `file` in `image`, observe, and judge against the region.
#[allow(clippy::too_many_arguments)]
fn trial(
    cfg: &Config,
    image: &Files,
    file: &'static str,
    offset: u64,
    xor: u8,
    r: &Region,
    built: &Built,
    final_state: &Map,
) -> Result<Outcome, Failure> {
    let fail = |what: String| Failure {
        config: cfg.name,
        file,
        offset,
        xor,
        kind: r.kind,
        what,
    };
    let env = env_of(image);
    env.files().get(file).unwrap().corrupt_byte(offset, xor);
    // A damaged log record may be dropped by the torn-tail rule: the state before its batch.
    let first_batch_seq = built.crashed_first_seq;
    let mut states = vec![final_state];
    if let Some((seq, true)) = r.record {
        if seq >= first_batch_seq {
            states.push(&built.states[(seq - first_batch_seq) as usize]);
        }
    }
    let obs = catch_unwind(AssertUnwindSafe(|| {
        observe(&env, &cfg.opts, &states, &built.ever)
    }))
    .map_err(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        fail(format!("panic: {msg}"))
    })?;
    if let Some(w) = obs.wrong.first() {
        return Err(fail(format!(
            "wrong answer: {w} (errors: {:?})",
            obs.errors.first()
        )));
    }
    let mut misplaced = false;
    for e in &obs.errors {
        if known_misplaced(r, e) {
            misplaced = true;
            continue;
        }
        let placed = match e {
            Error::Corruption {
                file: f,
                offset: at,
                ..
            } => f == file && (*at == offset || r.anchors.contains(at)),
            _ => false,
        };
        if !placed {
            return Err(fail(format!("error not at the damage: {e}")));
        }
    }
    let outcome = match (obs.errors.is_empty(), obs.state) {
        (false, _) if misplaced => Outcome::Misplaced,
        (false, _) => Outcome::Detected,
        (true, 0) => Outcome::Harmless,
        (true, _) => Outcome::TornTail,
    };
    match (r.live, outcome) {
        (true, Outcome::Harmless) if !r.either => Err(fail(
            "a flip of a live, checksummed byte went unnoticed".into(),
        )),
        (false, Outcome::Detected | Outcome::TornTail | Outcome::Misplaced) => Err(fail(format!(
            "a flip of a dead byte changed something: {:?}",
            obs.errors.first()
        ))),
        _ => Ok(outcome),
    }
}

/// Salvage the data file with one bit flipped, and hold the copy to the rules of
/// `tests/salvage.rs`: the source unchanged; the copy passes `check`; a report of nothing lost
/// means exactly the model, and a harmless flip must cost nothing; otherwise every key copied
/// has the model's value except in ranges reported stale, and every key left out lies in a
/// range reported lost or stale. When the copy comes from an older checkpoint (the log names a
/// newer one), its values are that checkpoint's, which the model does not hold: only the first
/// two rules apply.
fn salvage_check(
    cfg: &Config,
    image: &Files,
    offset: u64,
    xor: u8,
    model: &Map,
    outcome: Outcome,
) -> Result<(), String> {
    let env = env_of(image);
    env.files().get(DATA).unwrap().corrupt_byte(offset, xor);
    let before = snapshot(&env);
    let dst = SimEnv::new();
    let report = catch_unwind(AssertUnwindSafe(|| {
        salvage_in(&env, &dst, cfg.opts.clone())
    }))
    .map_err(|_| "panicked".to_string())?
    .map_err(|e| format!("failed: {e}"))?;
    if snapshot(&env) != before {
        return Err("wrote its source".into());
    }
    let db = Db::open_in(&dst, cfg.opts.clone().create_if_missing(false))
        .map_err(|e| format!("the copy does not open: {e}"))?;
    db.check()
        .map_err(|e| format!("the copy fails check: {e}"))?;
    let copy = dump(&db);
    // Complete: everything, exactly. (A detected flip may cost a salvage nothing: a blob a
    // newer message hides is checked by `check` but read by no one.)
    if report.is_complete() {
        if &copy != model {
            return Err(format!("claims to be complete but is not:\n{report}"));
        }
        return Ok(());
    }
    if outcome == Outcome::Harmless {
        return Err(format!("a harmless flip cost something:\n{report}"));
    }
    if report.log.newer_checkpoint.is_some() || !report.log.missing.is_empty() {
        return Ok(());
    }
    let covered = |k: &[u8], stale_only: bool| {
        report.damage.iter().any(|d| {
            (d.effect == Effect::Stale || (!stale_only && d.effect == Effect::Lost))
                && d.range.as_ref().is_some_and(|r| r.contains(k))
        })
    };
    for (k, v) in &copy {
        if model.get(k) != Some(v) && !covered(k, true) {
            return Err(format!(
                "copied {k:?} with a value the source does not hold:\n{report}"
            ));
        }
    }
    for k in model.keys() {
        if !copy.contains_key(k) && !covered(k, false) {
            return Err(format!(
                "left {k:?} out, and no damage covers it:\n{report}"
            ));
        }
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------
// The sweep

/// How many flips: a stride over each file plus random offsets in every region kind.
#[derive(Clone, Copy)]
struct Plan {
    /// Flips spread evenly over the data file.
    data_stride: u64,
    /// Random flips in each region kind of the data file.
    per_kind: u64,
    /// Flips in each log record region kind (random within the kind).
    log_per_kind: u64,
    seed: u64,
    /// Also salvage every damaged data file (`salvage_check`).
    salvage: bool,
}

#[derive(Default, Clone, Copy)]
struct Count {
    tried: u64,
    detected: u64,
    harmless: u64,
    torn: u64,
    misplaced: u64,
}

struct Sweep {
    rows: BTreeMap<(&'static str, &'static str), Count>,
    failures: Vec<Failure>,
}

fn pick(regions: &[Region], offset: u64) -> &Region {
    let i = regions.partition_point(|r| r.end <= offset);
    let r = &regions[i];
    assert!(r.start <= offset && offset < r.end);
    r
}

fn sweep(cfg: &Config, plan: Plan) -> Sweep {
    let t = std::time::Instant::now();
    let built = build(cfg, plan.seed);
    println!("{}: built in {:.1} s", cfg.name, t.elapsed().as_secs_f64());
    let final_state = built.states.last().unwrap().clone();
    let mut rng = Rng::new(plan.seed ^ 0x5eed);
    let mut out = Sweep {
        rows: BTreeMap::new(),
        failures: Vec::new(),
    };
    let run = |out: &mut Sweep,
               image: &Files,
               file: &'static str,
               offset: u64,
               r: &Region,
               want: &Map,
               rng: &mut Rng| {
        let xor = 1u8 << rng.range(0, 8);
        let c = out.rows.entry((file_label(file), r.kind)).or_default();
        c.tried += 1;
        let judged = trial(cfg, image, file, offset, xor, r, &built, want).and_then(|o| {
            if plan.salvage && file == DATA {
                salvage_check(cfg, image, offset, xor, want, o).map_err(|what| Failure {
                    config: cfg.name,
                    file,
                    offset,
                    xor,
                    kind: r.kind,
                    what: format!("salvage: {what}"),
                })?;
            }
            Ok(o)
        });
        match judged {
            Ok(Outcome::Detected) => c.detected += 1,
            Ok(Outcome::Harmless) => c.harmless += 1,
            Ok(Outcome::TornTail) => c.torn += 1,
            Ok(Outcome::Misplaced) => c.misplaced += 1,
            Err(f) => out.failures.push(f),
        }
    };

    // The data file of the closed image.
    let data = &built.closed[DATA];
    let regions = data_regions(data);
    for k in cfg.kinds {
        assert!(
            regions.iter().any(|r| r.kind == *k),
            "{}: the built file has no {k}",
            cfg.name
        );
    }
    let len = data.len() as u64;
    let step = (len / plan.data_stride).max(1);
    let closed_state = built.states[0].clone();
    let mut offset = rng.range(0, step);
    while offset < len {
        let r = pick(&regions, offset).clone();
        run(
            &mut out,
            &built.closed,
            DATA,
            offset,
            &r,
            &closed_state,
            &mut rng,
        );
        offset += step;
    }
    let kinds: BTreeSet<&'static str> = regions.iter().map(|r| r.kind).collect();
    for kind in kinds {
        let of_kind: Vec<&Region> = regions.iter().filter(|r| r.kind == kind).collect();
        let bytes: u64 = of_kind.iter().map(|r| r.end - r.start).sum();
        for _ in 0..plan.per_kind {
            // Uniform over the bytes of this kind.
            let mut at = rng.range(0, bytes);
            let r = of_kind
                .iter()
                .find(|r| {
                    let n = r.end - r.start;
                    if at < n {
                        true
                    } else {
                        at -= n;
                        false
                    }
                })
                .unwrap();
            let r = (*r).clone();
            run(
                &mut out,
                &built.closed,
                DATA,
                r.start + at,
                &r,
                &closed_state,
                &mut rng,
            );
        }
    }

    // The log files of the crashed image.
    for (file, regions) in log_regions(&built.crashed) {
        let kinds: BTreeSet<&'static str> = regions.iter().map(|r| r.kind).collect();
        for kind in kinds {
            let of_kind: Vec<&Region> = regions.iter().filter(|r| r.kind == kind).collect();
            for _ in 0..plan.log_per_kind {
                let r = (*of_kind[rng.range(0, of_kind.len() as u64) as usize]).clone();
                let at = rng.range(r.start, r.end);
                run(
                    &mut out,
                    &built.crashed,
                    file,
                    at,
                    &r,
                    &final_state,
                    &mut rng,
                );
            }
        }
    }
    out
}

fn file_label(name: &str) -> &'static str {
    match name {
        DATA => "data",
        WAL => "wal",
        _ => "wal.1",
    }
}

fn report(cfg: &Config, s: &Sweep, secs: f64) {
    println!("\nflip sweep: {} ({secs:.1} s)", cfg.name);
    println!(
        "| file | region | flips | detected | harmless | torn tail | detected, named the log |\n\
         |---|---|---:|---:|---:|---:|---:|"
    );
    let mut total = Count::default();
    for ((file, kind), c) in &s.rows {
        println!(
            "| {file} | {kind} | {} | {} | {} | {} | {} |",
            c.tried, c.detected, c.harmless, c.torn, c.misplaced
        );
        total.tried += c.tried;
        total.detected += c.detected;
        total.harmless += c.harmless;
        total.torn += c.torn;
        total.misplaced += c.misplaced;
    }
    println!(
        "| all | | {} | {} | {} | {} | {} |",
        total.tried, total.detected, total.harmless, total.torn, total.misplaced
    );
    for f in s.failures.iter().take(20) {
        println!(
            "FAILED {}: {} byte {} ^ {:#04x} ({}): {}",
            f.config, f.file, f.offset, f.xor, f.kind, f.what
        );
    }
}

fn run_sweep(cfg: Config, plan: Plan) {
    let t = std::time::Instant::now();
    let s = sweep(&cfg, plan);
    report(&cfg, &s, t.elapsed().as_secs_f64());
    assert!(
        s.failures.is_empty(),
        "{}: {} flips gave a wrong answer, a panic or a misplaced error (see the table)",
        cfg.name,
        s.failures.len()
    );
}

const QUICK: Plan = Plan {
    data_stride: 100,
    per_kind: 8,
    log_per_kind: 5,
    seed: 1,
    salvage: true,
};

#[test]
fn flip_sweep_btree() {
    run_sweep(btree(), QUICK);
}

#[test]
fn flip_sweep_betree_small() {
    run_sweep(betree_small(), QUICK);
}

#[test]
fn flip_sweep_betree_large_basements() {
    run_sweep(
        betree_large_basements(),
        Plan {
            data_stride: 40,
            per_kind: 5,
            salvage: false,
            ..QUICK
        },
    );
}

/// The large sweep: every configuration, many more flips, other seeds.
#[test]
#[ignore = "minutes: cargo test -p strata --test flip_sweep -- --ignored --nocapture"]
fn flip_sweep_large() {
    // Seeds whose built files hold every region kind of every configuration: seed 2's
    // B+-tree file has no free space left once closed, and its sweep refused to start.
    for seed in [3, 4] {
        let plan = Plan {
            data_stride: 2000,
            per_kind: 150,
            log_per_kind: 60,
            seed,
            salvage: true,
        };
        run_sweep(btree(), plan);
        run_sweep(betree_small(), plan);
        let fewer = Plan {
            data_stride: 600,
            per_kind: 80,
            ..plan
        };
        run_sweep(betree_large_basements(), fewer);
    }
}

// ------------------------------------------------------------------------------------------
// Regressions: what the sweep found, each reproduced by one flip

/// A closed B+-tree of 50 keys, checkpointed, half of them then deleted or rewritten, closed
/// again: built on one thread (no background checkpoint), so its layout is always the same.
/// With deletes the file shrinks below the older checkpoint's table; without, it stays.
fn two_checkpoints(deletes: bool) -> (SimEnv, Options) {
    let opts = Options::default()
        .btree(4096)
        .cache_bytes(64 << 10)
        .checkpoint_wal_bytes(1 << 30)
        .durability(Durability::None);
    let env = SimEnv::new();
    let db = Db::open_in(&env, opts.clone()).unwrap();
    for i in 0..50 {
        db.put(format!("k{i:05}"), [7u8; 100]).unwrap();
    }
    db.checkpoint().unwrap();
    for i in 0..25 {
        if deletes {
            db.delete(format!("k{i:05}")).unwrap();
        } else {
            db.put(format!("k{i:05}"), [8u8; 100]).unwrap();
        }
    }
    // Exactly two checkpoints: `close` may add a third that moves the file's tail down.
    db.checkpoint().unwrap();
    drop(db);
    (env, opts)
}

/// The newest superblock and the older one of a data file, and the file's length.
fn slots(env: &SimEnv) -> (Superblock, Superblock, u64) {
    let data = env.files().get(DATA).unwrap().contents();
    let newest = newest_superblock(&data);
    let older = superblock(&data, 1 - newest.slot_offset / SB_SIZE).expect("both slots valid");
    (newest, older, data.len() as u64)
}

/// Catches: a damaged newest superblock of a closed database reported at the older
/// checkpoint's translation table ("lies outside the file") instead of at the damaged slot.
///
/// Open falls back to the older slot, but the newest checkpoint's commit had released the older
/// one's extents and trimmed the file's free tail, so the older table is gone. Found by
/// `flip_sweep_btree` (byte 80 ^ 0x08). Fixed in `Pager::open`: when a slot that is not blank
/// failed to decode and the other slot's table cannot be read, the damaged slot is reported.
#[test]
fn damaged_newest_superblock_is_reported_at_its_slot() {
    let (env, opts) = two_checkpoints(true);
    let (newest, older, len) = slots(&env);
    assert!(
        older.table_offset + older.table_len > len,
        "the scenario: the older checkpoint's table was trimmed away"
    );
    let data = env.files().get(DATA).unwrap();
    for pos in [20u64, 33, 80] {
        data.corrupt_byte(newest.slot_offset + pos, 0x08);
        match Db::open_in(&env, opts.clone()) {
            Err(Error::Corruption { file, offset, .. }) => {
                assert_eq!(
                    (file.as_str(), offset),
                    (DATA, newest.slot_offset),
                    "byte {pos}"
                )
            }
            Err(e) => panic!("byte {pos}: {e}"),
            Ok(_) => panic!("byte {pos}: opened"),
        }
        data.corrupt_byte(newest.slot_offset + pos, 0x08);
    }
}

/// Open the database of `two_checkpoints(false)` (whose older checkpoint is still whole) with
/// one bit of the newest superblock flipped.
fn open_with_newest_superblock_flipped(pos: u64) -> Error {
    let (env, opts) = two_checkpoints(false);
    let (newest, older, len) = slots(&env);
    assert!(
        older.table_offset + older.table_len <= len,
        "the older table is there"
    );
    env.files()
        .get(DATA)
        .unwrap()
        .corrupt_byte(newest.slot_offset + pos, 0x40);
    match Db::open_in(&env, opts) {
        Err(e) => e,
        Ok(_) => panic!("a checkpoint older than the log's marker was opened"),
    }
}

/// Catches: a damaged newest superblock whose older checkpoint is still readable reported at
/// offset 0 of the log ("log starts at sequence 76 but the checkpoint covers only up to 50",
/// say) rather than at the damaged slot. `Wal::open` checked the first record for a gap after
/// the checkpoint before handing it to the caller, so the `Db`'s own check (a checkpoint marker
/// newer than the superblock in use: the newer superblock is damaged) never saw the marker; a
/// marker past the checkpoint now goes to the caller. Found by `flip_sweep_betree_large_basements`
/// (data byte 4146 ^ 0x40).
#[test]
fn damaged_newest_superblock_is_named_not_the_log() {
    let e = open_with_newest_superblock_flipped(50);
    match e {
        Error::Corruption { file, offset, .. } => {
            assert_eq!(file, DATA, "the damaged superblock, not the log");
            assert!(offset == 0 || offset == SB_SIZE);
        }
        other => panic!("{other}"),
    }
}

/// What the sweep accepts today in place of the test above: detected, in the log.
#[test]
fn damaged_newest_superblock_is_detected() {
    assert!(open_with_newest_superblock_flipped(50).is_corruption());
}

/// A closed database reopened, one synced batch written, then a process crash: the log holds
/// the checkpoint's marker and that one record.
fn marker_then_one_batch() -> (SimEnv, Options) {
    let opts = Options::default()
        .btree(4096)
        .durability(Durability::Sync)
        .cache_bytes(64 << 10);
    let env = SimEnv::new();
    let db = Db::open_in(&env, opts.clone()).unwrap();
    db.put(b"a", b"1").unwrap();
    db.close().unwrap();
    let db = Db::open_in(&env, opts.clone()).unwrap();
    db.put(b"b", b"2").unwrap(); // synced: acknowledged
    drop(db);
    let wal = env.files().get(WAL).unwrap().contents();
    let recs = wal_records(&wal);
    assert_eq!(recs.len(), 2, "marker and one batch");
    (env, opts)
}

/// Catches: damage to the checkpoint marker at the start of the log, followed by a single
/// synced batch, silently lost that batch. Replay stopped at the first bad record (the marker)
/// and looked for proof that acknowledged data follows: a later record whose durable watermark
/// covers the next sequence number. The only later record was the batch itself, whose
/// watermark is the checkpoint's, so the rest of the file was taken for a torn tail and
/// truncated. Yet the record found is exactly the one expected next: records are written back
/// to back, so what lies before it is damage, never a crash's tail, and it is now reported.
/// Found by reasoning over the sweep's log rows (the sweep's logs hold six batches, where the
/// watermark proof reports corruption instead).
#[test]
fn damaged_marker_before_one_synced_batch_keeps_the_batch() {
    let (env, opts) = marker_then_one_batch();
    env.files().get(WAL).unwrap().corrupt_byte(3, 0x10);
    match Db::open_in(&env, opts) {
        Ok(db) => assert_eq!(db.get(b"b").unwrap().as_deref(), Some(&b"2"[..])),
        Err(e) => assert!(e.to_string().contains(WAL), "reported in the log: {e}"),
    }
}
