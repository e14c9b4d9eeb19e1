//! The oracle suite: random sequences of operations against a `Db`, compared with a
//! `BTreeMap` oracle, with checkpoints, clean reopens, process crashes and power losses mixed in.
//!
//! It is written once for every engine. An engine (with its geometry) is one line in the
//! `model_suite!` invocation at the bottom: the line names a module and gives the `Options` it
//! runs with, and the macro expands it into the whole suite for that line:
//!
//! - `prop_{sim,file}_{sync,none}`: proptest, 256 sequences of up to 200 operations on a
//!   simulated disk or in a temporary directory, with `Durability::Sync` or `Durability::None`;
//!   keys from a small alphabet (overwrites and deletes hit), the empty key, values of 0..300
//!   bytes and now and then 5,000..70,000, bulk fills of up to 1,500 keys (so trees grow past
//!   one leaf, cache budgets overflow and ranges span several iterator pages);
//! - `long_{sim,file}_{sync,none}`: one deterministic run of 20,000 operations whose phases grow
//!   the data set to thousands of keys and drain it again, so nodes split and merge at every
//!   level, get evicted and go out of line;
//! - `io_errors_{sticky,once}_{sync,none}` and `torn_writes_{sync,none}`: random operations on a
//!   simulated disk that fails IO number n (for good, or once) or tears write number n; after a
//!   failed write the database must refuse writes (`Poisoned`, or the IO error while the disk
//!   is failing), and after a power loss it must reopen into a state the crash semantics allow,
//!   the failed batch wholly present or wholly absent.
//!
//! Crash semantics that are asserted:
//! - a clean reopen (close + open) and a process crash (drop without close; the files keep
//!   everything written) lose nothing that was acknowledged;
//! - after a power loss on a simulated disk (drop without close, then `Place::power_loss`: every
//!   unsynced write lost, or a random subset of pages kept, `SimEnv::power_cut`), with
//!   `Durability::Sync` every acknowledged batch is present; with `Durability::None` the contents
//!   equal the oracle after some prefix of the acknowledged batches, at least up to the last
//!   durable point (checkpoint, close, `Db::sync`, a write made with `Durability::Sync`), and
//!   the oracle continues from the state that came back; a batch is never half applied;
//! - real files have no power-loss simulation, so there a "crash" is a process crash.
//!
//! Also after every write: the engine's key count matches and the cache is within its budget
//! (nothing is pinned between calls); after every checkpoint: every byte of the data file is
//! superblock, referenced extent, table or free space; after every reopen: `Db::check` passes
//! and the whole contents match. Engine-independent tests at the end: the range API's syntax
//! forms, iterators consumed from both ends across pages, synced writers on several threads
//! racing a failing disk, and iterators racing a writer.
//!
//! Proptest seeds are random; a failure prints the shrunk sequence, and `PROPTEST_RNG_SEED`
//! replays a run.

mod common;

use std::cell::Cell;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::ops::Bound;
use std::rc::Rc;

use common::{Place, Rng};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use strata::{AddU64, Db, Durability, Error, LsmConfig, LsmPolicy, Options, WriteBatch};

// ------------------------------------------------------------------------------------------
// Operations

/// A key; printed as a byte string so that shrunk failures are readable.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key(Vec<u8>);

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.len() > 24 {
            write!(
                f,
                "b\"{}..\"({})",
                self.0[..16].escape_ascii(),
                self.0.len()
            )
        } else {
            write!(f, "b\"{}\"", self.0.escape_ascii())
        }
    }
}

/// A value, named by a seed and a length; `bytes()` makes its contents.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Val {
    seed: u32,
    len: u32,
}

impl Val {
    fn bytes(&self) -> Vec<u8> {
        common::value(self.seed as u64, self.len as usize)
    }
}

impl fmt::Debug for Val {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}#{}", self.len, self.seed)
    }
}

#[derive(Clone, Debug)]
enum W {
    Put(Key, Val),
    Del(Key),
    /// Add to the key's value as a little-endian u64 (the suites register `AddU64`).
    Upsert(Key, u64),
    /// Delete [start, end).
    DelRange(Key, Key),
}

/// How a range is consumed: bit i of the mask says whether step i takes from the back (1) or
/// the front (0); `Take` stops after n items from one end and drops the iterator.
#[derive(Clone, Copy, Debug)]
enum Scan {
    Pattern(u64),
    Take { n: usize, back: bool },
}

#[derive(Clone, Debug)]
enum Op {
    Put(Key, Val),
    Delete(Key),
    /// `Db::upsert`.
    Upsert(Key, u64),
    /// `Db::delete_range`.
    DeleteRange(Key, Key),
    /// A `WriteBatch` through `Db::write`.
    Batch(Vec<W>),
    /// A `WriteBatch` through `Db::write_with(.., Durability::Sync)`.
    SyncedBatch(Vec<W>),
    /// One batch of `n` puts of keys like `b0427` (a letter and four digits, so they fall
    /// between the short keys) with values of up to 200 bytes, all derived from `seed`: grows
    /// the tree past one leaf and the cache past its budget.
    Fill {
        n: u16,
        seed: u32,
    },
    Get(Key),
    Range(Bound<Key>, Bound<Key>, Scan),
    Checkpoint,
    Sync,
    /// `close()` then open.
    Reopen,
    /// Drop without close, then open: a process crash; the files keep what was written.
    ProcessCrash,
    /// Drop without close, power loss (simulated disk only), then open.
    Crash,
}

impl Op {
    fn writes(&self) -> Option<Vec<W>> {
        match self {
            Op::Put(k, v) => Some(vec![W::Put(k.clone(), *v)]),
            Op::Delete(k) => Some(vec![W::Del(k.clone())]),
            Op::Upsert(k, n) => Some(vec![W::Upsert(k.clone(), *n)]),
            Op::DeleteRange(a, b) => Some(vec![W::DelRange(a.clone(), b.clone())]),
            Op::Batch(ws) | Op::SyncedBatch(ws) => Some(ws.clone()),
            Op::Fill { n, seed } => Some(fill(*n, *seed)),
            _ => None,
        }
    }
}

fn fill(n: u16, seed: u32) -> Vec<W> {
    let mut r = Rng::new(seed as u64);
    (0..n)
        .map(|_| {
            let k = format!("{}{:04}", *r.pick(b"abc") as char, r.range(0, 10_000));
            let v = Val {
                seed: r.next_u64() as u32,
                len: r.range(0, 200) as u32,
            };
            W::Put(Key(k.into_bytes()), v)
        })
        .collect()
}

fn key_strategy() -> impl Strategy<Value = Key> {
    prop_oneof![
        1 => Just(Vec::new()),
        12 => prop::collection::vec(prop::sample::select(&b"abc"[..]), 1..=3),
        4 => prop::collection::vec(prop::sample::select(&b"abcd"[..]), 4..=12),
    ]
    .prop_map(Key)
}

fn val_strategy() -> impl Strategy<Value = Val> {
    (
        any::<u32>(),
        prop_oneof![30 => 0u32..300, 1 => 5_000u32..70_000],
    )
        .prop_map(|(seed, len)| Val { seed, len })
}

fn operand_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![3 => 0u64..1000, 1 => any::<u64>()]
}

fn w_strategy() -> impl Strategy<Value = W> {
    prop_oneof![
        3 => (key_strategy(), val_strategy()).prop_map(|(k, v)| W::Put(k, v)),
        2 => key_strategy().prop_map(W::Del),
        1 => (key_strategy(), operand_strategy()).prop_map(|(k, n)| W::Upsert(k, n)),
        1 => (key_strategy(), key_strategy()).prop_map(|(a, b)| W::DelRange(a, b)),
    ]
}

fn bound_strategy() -> impl Strategy<Value = Bound<Key>> {
    prop_oneof![
        1 => Just(Bound::Unbounded),
        2 => key_strategy().prop_map(Bound::Included),
        2 => key_strategy().prop_map(Bound::Excluded),
    ]
}

fn scan_strategy() -> impl Strategy<Value = Scan> {
    prop_oneof![
        3 => Just(Scan::Pattern(0)),
        2 => Just(Scan::Pattern(!0)),
        2 => any::<u64>().prop_map(Scan::Pattern),
        1 => (0usize..6, any::<bool>()).prop_map(|(n, back)| Scan::Take { n, back }),
    ]
}

/// Operations for the model runs.
fn op_strategy(restarts: Restarts) -> BoxedStrategy<Op> {
    let base = prop_oneof![
        30 => (key_strategy(), val_strategy()).prop_map(|(k, v)| Op::Put(k, v)),
        12 => key_strategy().prop_map(Op::Delete),
        6 => (key_strategy(), operand_strategy()).prop_map(|(k, n)| Op::Upsert(k, n)),
        3 => (key_strategy(), key_strategy()).prop_map(|(a, b)| Op::DeleteRange(a, b)),
        10 => prop::collection::vec(w_strategy(), 0..8).prop_map(Op::Batch),
        2 => prop::collection::vec(w_strategy(), 1..4).prop_map(Op::SyncedBatch),
        12 => key_strategy().prop_map(Op::Get),
        10 => (bound_strategy(), bound_strategy(), scan_strategy())
            .prop_map(|(lo, hi, s)| Op::Range(lo, hi, s)),
        2 => Just(Op::Checkpoint),
        2 => Just(Op::Sync),
        1 => (0u16..1500, any::<u32>()).prop_map(|(n, seed)| Op::Fill { n, seed }),
    ];
    match restarts {
        Restarts::All => prop_oneof![
            80 => base,
            2 => Just(Op::Reopen),
            2 => Just(Op::ProcessCrash),
            3 => Just(Op::Crash),
        ]
        .boxed(),
        Restarts::None => base.boxed(),
    }
}

/// Which ways of restarting the database a generated sequence uses.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Restarts {
    All,
    /// No operation drops the `Db` (the fault-injection runs end with their own crash).
    None,
}

// ------------------------------------------------------------------------------------------
// The oracle and the harness

type Map = BTreeMap<Vec<u8>, Rc<[u8]>>;

fn apply(map: &mut Map, ws: &[W]) {
    for w in ws {
        match w {
            W::Put(k, v) => {
                map.insert(k.0.clone(), v.bytes().into());
            }
            W::Del(k) => {
                map.remove(&k.0);
            }
            W::Upsert(k, n) => {
                let sum = common::add_u64(map.get(&k.0).map(|v| &v[..]), *n);
                map.insert(k.0.clone(), sum.into());
            }
            W::DelRange(a, b) => common::remove_range(map, &a.0, &b.0),
        }
    }
}

fn batch_of(ws: &[W]) -> WriteBatch {
    let mut b = WriteBatch::new();
    for w in ws {
        match w {
            W::Put(k, v) => b.put(&k.0, v.bytes()),
            W::Del(k) => b.delete(&k.0),
            W::Upsert(k, n) => b.upsert(&k.0, n.to_le_bytes()),
            W::DelRange(lo, hi) => b.delete_range(&lo.0, &hi.0),
        };
    }
    b
}

fn in_range(k: &[u8], lo: &Bound<Key>, hi: &Bound<Key>) -> bool {
    let above = match lo {
        Bound::Included(l) => k >= l.0.as_slice(),
        Bound::Excluded(l) => k > l.0.as_slice(),
        Bound::Unbounded => true,
    };
    let below = match hi {
        Bound::Included(h) => k <= h.0.as_slice(),
        Bound::Excluded(h) => k < h.0.as_slice(),
        Bound::Unbounded => true,
    };
    above && below
}

fn same(map: &Map, got: &BTreeMap<Vec<u8>, Vec<u8>>) -> bool {
    map.len() == got.len()
        && map
            .iter()
            .zip(got)
            .all(|((k1, v1), (k2, v2))| k1 == k2 && v1[..] == v2[..])
}

/// A short description of how `got` differs from `want`, for failure messages.
fn diff(want: &Map, got: &BTreeMap<Vec<u8>, Vec<u8>>) -> String {
    let mut out = Vec::new();
    for (k, v) in want {
        match got.get(k) {
            None => out.push(format!("missing {:?}", k.escape_ascii().to_string())),
            Some(g) if g[..] != v[..] => out.push(format!(
                "{:?}: value of {} bytes, want {}",
                k.escape_ascii().to_string(),
                g.len(),
                v.len()
            )),
            _ => {}
        }
    }
    for k in got.keys() {
        if !want.contains_key(k) {
            out.push(format!("unexpected {:?}", k.escape_ascii().to_string()));
        }
    }
    out.truncate(8);
    format!(
        "{} keys vs {} wanted: {}",
        got.len(),
        want.len(),
        out.join(", ")
    )
}

/// Counts of what happened, so that each test can assert it exercised what it claims to.
#[derive(Default, Debug)]
struct Seen {
    ops: Cell<u64>,
    acked_writes: Cell<u64>,
    auto_checkpoints: Cell<u64>,
    reopens: Cell<u64>,
    power_losses: Cell<u64>,
    /// Power losses after which the database came back at an older durable prefix.
    rolled_back: Cell<u64>,
    faults_hit: Cell<u64>,
    failed_writes: Cell<u64>,
    failed_batch_survived: Cell<u64>,
    max_height: Cell<u32>,
    max_blobs: Cell<u64>,
    /// Most live keys at once, by the oracle (an engine's own count leaves out buffered keys).
    max_keys: Cell<u64>,
    evictions: Cell<u64>,
    /// Most merges of a Bε-tree leaf's small runs seen within one opening.
    run_merges: Cell<u64>,
    /// Most Bε-tree drains run on the drain thread and installed within one opening.
    drains_offloaded: Cell<u64>,
}

fn bump(c: &Cell<u64>) {
    c.set(c.get() + 1);
}

struct Run<'a> {
    place: &'a Place,
    opts: Options,
    db: Option<Db>,
    /// Everything acknowledged.
    cur: Map,
    /// The state at the last durable point, when it differs from `cur` (None: it equals `cur`).
    base: Option<Map>,
    /// Batches acknowledged since the last durable point, in order, with their log sequence
    /// numbers.
    since: Vec<(u64, Vec<W>)>,
    checkpoints: u64,
    seen: &'a Seen,
}

impl<'a> Run<'a> {
    fn new(place: &'a Place, opts: Options, seen: &'a Seen) -> Run<'a> {
        let mut r = Run {
            place,
            opts,
            db: None,
            cur: Map::new(),
            base: None,
            since: Vec::new(),
            checkpoints: 0,
            seen,
        };
        r.open();
        r
    }

    fn db(&self) -> &Db {
        self.db.as_ref().expect("database is open")
    }

    fn open(&mut self) {
        let db = self
            .place
            .open(self.opts.clone())
            .unwrap_or_else(|e| panic!("open failed: {e}"));
        db.check()
            .unwrap_or_else(|e| panic!("check after open: {e}"));
        self.checkpoints = db.metrics().engine.checkpoints;
        self.db = Some(db);
        self.note_shape();
    }

    fn note_shape(&self) {
        let m = self.db().metrics();
        let s = self.seen;
        s.max_height.set(s.max_height.get().max(m.engine.height));
        s.max_blobs.set(s.max_blobs.get().max(m.engine.blobs));
        s.max_keys.set(s.max_keys.get().max(self.cur.len() as u64));
        s.evictions
            .set(s.evictions.get().max(m.engine.cache.evictions));
        s.run_merges
            .set(s.run_merges.get().max(m.engine.detail("run_merges")));
        s.drains_offloaded.set(
            s.drains_offloaded
                .get()
                .max(m.engine.detail("drains_offloaded")),
        );
    }

    /// Right after a checkpoint every byte of the data file is accounted for: the superblocks,
    /// the extents the table references, the table itself, and free space (no leaks).
    fn check_space(&self) {
        let m = self.db().metrics();
        let data = self.place.read(common::DATA).expect("data file");
        let table = common::newest_superblock(&data).table_len;
        assert_eq!(
            m.data_file_bytes,
            common::DATA_START + m.engine.referenced_bytes + m.engine.free_bytes + table,
            "data file of {} bytes: referenced {}, free {}, table {}",
            m.data_file_bytes,
            m.engine.referenced_bytes,
            m.engine.free_bytes,
            table
        );
    }

    fn durable_point(&mut self) {
        self.base = None;
        self.since.clear();
    }

    fn acked(&mut self, ws: Vec<W>, synced: bool) {
        bump(&self.seen.acked_writes);
        if self.opts.durability == Durability::None && !synced {
            if self.base.is_none() {
                self.base = Some(self.cur.clone());
            }
            apply(&mut self.cur, &ws);
            let seq = self.db().metrics().write_seq;
            self.since.push((seq, ws));
        } else {
            apply(&mut self.cur, &ws);
            self.durable_point();
        }
        self.note_checkpoint();
    }

    /// A checkpoint that `write` started by itself makes everything up to its log sequence
    /// number durable (it is made durable in the background, so later writes may not be). Also
    /// checks the engine's key count and the cache budget (nothing is pinned between calls,
    /// so the pool must be within its budget).
    fn note_checkpoint(&mut self) {
        let m = self.db().metrics();
        if m.engine.detail("buffered_messages") == 0 {
            assert_eq!(m.engine.live_keys, self.cur.len() as u64, "live key count");
        }
        assert!(
            m.engine.cache.resident_bytes <= m.engine.cache.budget_bytes,
            "cache over budget between operations: {:?}",
            m.engine.cache
        );
        let c = m.engine.checkpoints;
        if c > self.checkpoints {
            self.checkpoints = c;
            bump(&self.seen.auto_checkpoints);
            let covered = m.engine.checkpoint_wal_seq;
            let n = self.since.iter().take_while(|(s, _)| *s <= covered).count();
            if n == self.since.len() {
                self.durable_point();
            } else {
                let base = self.base.as_mut().expect("batches since a durable point");
                for (_, ws) in self.since.drain(..n) {
                    apply(base, &ws);
                }
            }
        }
    }

    /// The states a power loss may leave, oldest first: the last durable point, then each
    /// acknowledged batch since applied in turn.
    fn candidates(&self) -> Vec<Map> {
        let mut m = self.base.clone().unwrap_or_else(|| self.cur.clone());
        let mut out = vec![m.clone()];
        for (_, ws) in &self.since {
            apply(&mut m, ws);
            out.push(m.clone());
        }
        out
    }

    /// Compare the whole database with `want` and run the checker.
    fn verify_all(&self, what: &str) {
        let db = self.db();
        let report = db
            .check()
            .unwrap_or_else(|e| panic!("{what}: check failed: {e}"));
        let got = common::dump(db);
        assert!(same(&self.cur, &got), "{what}: {}", diff(&self.cur, &got));
        assert_eq!(report.keys, self.cur.len() as u64, "{what}: checked keys");
    }

    /// Reopen after a power loss (or a process crash on real files) and settle on what came
    /// back, which must be one of `allowed`.
    fn recover(&mut self, allowed: Vec<Map>, what: &str) {
        self.open();
        let got = common::dump(self.db());
        let Some(i) = allowed.iter().rposition(|m| same(m, &got)) else {
            panic!(
                "{what}: recovered contents match none of the {} allowed states; \
                 against the newest: {}; against the oldest: {}",
                allowed.len(),
                diff(allowed.last().unwrap(), &got),
                diff(&allowed[0], &got)
            );
        };
        if !same(&self.cur, &got) {
            bump(&self.seen.rolled_back);
        }
        self.cur = allowed.into_iter().nth(i).unwrap();
        self.durable_point();
        self.verify_all(what);
    }

    fn check_range(&self, lo: &Bound<Key>, hi: &Bound<Key>, scan: Scan) -> Result<(), Error> {
        let mut want: VecDeque<(&Vec<u8>, &Rc<[u8]>)> = self
            .cur
            .iter()
            .filter(|(k, _)| in_range(k, lo, hi))
            .collect();
        let own = |b: &Bound<Key>| b.as_ref().map(|k| k.0.clone());
        let mut it = self.db().range((own(lo), own(hi)))?;
        let ctx = || format!("range {lo:?}..{hi:?} {scan:?}");
        // One step from either end: Ok(false) once both the iterator and the oracle are done.
        let mut step =
            |it: &mut strata::RangeIter<'_>, back: bool, i: u32| -> strata::Result<bool> {
                let got = if back { it.next_back() } else { it.next() };
                let exp = if back {
                    want.pop_back()
                } else {
                    want.pop_front()
                };
                match (got, exp) {
                    (None, None) => Ok(false),
                    (Some(Err(e)), _) => Err(e),
                    (Some(Ok((k, v))), Some((wk, wv))) => {
                        assert_eq!(&k, wk, "{} step {i}", ctx());
                        assert!(v[..] == wv[..], "{} value of {k:?}", ctx());
                        Ok(true)
                    }
                    (got, exp) => panic!(
                        "{} step {i}: got {:?}, want {:?}",
                        ctx(),
                        got.map(|r| r.map(|kv| kv.0)),
                        exp.map(|kv| kv.0)
                    ),
                }
            };
        match scan {
            Scan::Pattern(mask) => {
                let mut i = 0u32;
                while step(&mut it, (mask >> (i % 64)) & 1 == 1, i)? {
                    i += 1;
                }
                assert!(
                    it.next().is_none(),
                    "{}: front resumed after the end",
                    ctx()
                );
                assert!(
                    it.next_back().is_none(),
                    "{}: back resumed after the end",
                    ctx()
                );
            }
            Scan::Take { n, back } => {
                for i in 0..n {
                    if !step(&mut it, back, i as u32)? {
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    /// Run one operation. Errors from the database are returned (the fault runs expect them);
    /// wrong answers panic.
    fn step(&mut self, op: &Op) -> Result<(), Error> {
        bump(&self.seen.ops);
        match op {
            Op::Put(k, v) => {
                self.db().put(&k.0, v.bytes())?;
                self.acked(vec![W::Put(k.clone(), *v)], false);
            }
            Op::Delete(k) => {
                self.db().delete(&k.0)?;
                self.acked(vec![W::Del(k.clone())], false);
            }
            Op::Upsert(k, n) => {
                self.db().upsert(&k.0, n.to_le_bytes())?;
                self.acked(vec![W::Upsert(k.clone(), *n)], false);
            }
            Op::DeleteRange(a, b) => {
                self.db().delete_range(&a.0, &b.0)?;
                self.acked(vec![W::DelRange(a.clone(), b.clone())], false);
            }
            Op::Batch(ws) => {
                self.db().write(batch_of(ws))?;
                self.acked(ws.clone(), false);
            }
            Op::Fill { n, seed } => {
                let ws = fill(*n, *seed);
                self.db().write(batch_of(&ws))?;
                self.acked(ws, false);
            }
            Op::SyncedBatch(ws) => {
                self.db().write_with(batch_of(ws), Durability::Sync)?;
                self.acked(ws.clone(), true);
            }
            Op::Get(k) => {
                let got = self.db().get(&k.0)?;
                let want = self.cur.get(&k.0);
                assert!(
                    got.as_deref() == want.map(|v| &v[..]),
                    "get {k:?}: got {:?} bytes, want {:?} bytes",
                    got.map(|v| v.len()),
                    want.map(|v| v.len())
                );
            }
            Op::Range(lo, hi, scan) => self.check_range(lo, hi, *scan)?,
            Op::Checkpoint => {
                self.db().checkpoint()?;
                self.checkpoints = self.db().metrics().engine.checkpoints;
                self.durable_point();
                self.check_space();
            }
            Op::Sync => {
                self.db().sync()?;
                self.durable_point();
            }
            Op::Reopen => {
                self.note_shape();
                self.db.take().unwrap().close()?;
                bump(&self.seen.reopens);
                self.durable_point();
                self.open();
                self.verify_all("after close and reopen");
            }
            Op::ProcessCrash => {
                self.note_shape();
                drop(self.db.take());
                bump(&self.seen.reopens);
                self.open();
                self.verify_all("after a process crash");
            }
            Op::Crash => {
                self.note_shape();
                drop(self.db.take());
                bump(&self.seen.reopens);
                if self.place.power_loss() {
                    bump(&self.seen.power_losses);
                    let allowed = self.candidates();
                    self.recover(allowed, "after a power loss");
                } else {
                    self.open();
                    self.verify_all("after a crash (real files keep what was written)");
                }
            }
        }
        Ok(())
    }

    /// The end of a sequence: everything must still be there, and survive a clean reopen.
    fn finish(mut self) {
        self.verify_all("at the end of the sequence");
        self.db.take().unwrap().close().expect("close");
        self.open();
        self.verify_all("after the final reopen");
    }
}

// ------------------------------------------------------------------------------------------
// Drivers

/// Cases per proptest run; each case is a fresh database and up to 200 operations. 160 keeps
/// the whole suite (eight engine configurations) near four minutes on two cores;
/// `STRATA_ORACLE_CASES` sets another count for a deeper run.
fn prop_cases() -> u32 {
    std::env::var("STRATA_ORACLE_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(160)
}

fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 4096,
        max_shrink_time: 120_000,
        ..Config::default()
    }
}

/// A runner whose cases come from a seed: `STRATA_ORACLE_SEED` (hex) to replay a failure,
/// else one drawn from the clock. A failure names it (`replay`), so that a case CI found can
/// be run again here (the same cases and shrinking; threads' timing aside).
fn runner() -> (TestRunner, u64) {
    let seed = std::env::var("STRATA_ORACLE_SEED")
        .ok()
        .map(|s| {
            u64::from_str_radix(s.trim_start_matches("0x"), 16)
                .expect("STRATA_ORACLE_SEED is hexadecimal")
        })
        .unwrap_or_else(|| {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("the clock is past 1970");
            t.as_nanos() as u64 ^ (std::process::id() as u64) << 32
        });
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
    (TestRunner::new_with_rng(config(prop_cases()), rng), seed)
}

/// How to run a failed test's cases again.
fn replay(name: &str, seed: u64) -> String {
    format!(
        "replay: STRATA_ORACLE_SEED={seed:x} STRATA_ORACLE_CASES={} cargo test -p strata --test \
         oracle {name}",
        prop_cases()
    )
}

fn run_prop(name: &str, opts: Options, sim: bool, restarts: Restarts, seen: &Seen) {
    let strategy = prop::collection::vec(op_strategy(restarts), 1..200);
    let (mut runner, seed) = runner();
    let result = runner.run(&strategy, |ops| {
        let place = Place::new(sim);
        let mut run = Run::new(&place, opts.clone(), seen);
        for (i, op) in ops.iter().enumerate() {
            if let Err(e) = run.step(op) {
                return Err(TestCaseError::fail(format!("op {i} {op:?} failed: {e}")));
            }
        }
        run.finish();
        Ok(())
    });
    if let Err(e) = result {
        panic!("{name}: {e}\n{}", replay(name, seed));
    }
    eprintln!("{name}: {seen:?}");
}

fn model_prop(name: &str, opts: Options, sim: bool, durability: Durability, restarts: Restarts) {
    let seen = Seen::default();
    run_prop(
        name,
        opts.clone().durability(durability),
        sim,
        restarts,
        &seen,
    );
    assert!(
        seen.acked_writes.get() > 1000 && seen.reopens.get() > 50,
        "{seen:?}"
    );
    if sim {
        assert!(seen.power_losses.get() > 20, "{seen:?}");
    }
    if sim && durability == Durability::None {
        assert!(
            seen.rolled_back.get() > 0,
            "power losses lost unsynced writes"
        );
    }
}

// --- the long deterministic run

/// Generates operations with state: keys often taken from the live set, and phases that grow
/// the data set and then shrink it again, so that the tree splits and merges throughout.
/// Phases of the long run: three rounds of 3,400 operations that grow the data set and 600 that
/// trim it, 2,000 more that grow it, then 6,000 that drain it to (almost) nothing.
#[derive(Clone, Copy, PartialEq)]
enum Phase {
    Grow,
    Trim,
    Drain,
}

fn phase(step: u64) -> Phase {
    match step {
        14_000.. => Phase::Drain,
        12_000.. => Phase::Grow,
        s if s % 4_000 < 3_400 => Phase::Grow,
        _ => Phase::Trim,
    }
}

struct LongGen {
    rng: Rng,
    step: u64,
}

const ALPHABET: &[u8] = b"abcdefgh";

impl LongGen {
    fn new_key(&mut self) -> Key {
        let r = &mut self.rng;
        if r.chance(1, 300) {
            return Key(Vec::new());
        }
        let len = if r.chance(1, 400) {
            r.range(100, 4097) as usize
        } else {
            r.range(1, 13) as usize
        };
        Key((0..len).map(|_| *r.pick(ALPHABET)).collect())
    }

    fn existing_key(&mut self, live: &Map) -> Key {
        let probe = self.new_key();
        match live.range(probe.0.clone()..).next() {
            Some((k, _)) => Key(k.clone()),
            None => live.keys().next().map(|k| Key(k.clone())).unwrap_or(probe),
        }
    }

    fn key(&mut self, live: &Map, existing_pct: u64) -> Key {
        if self.rng.chance(existing_pct, 100) {
            self.existing_key(live)
        } else {
            self.new_key()
        }
    }

    fn val(&mut self) -> Val {
        let r = &mut self.rng;
        let len = if r.chance(1, 60) {
            r.range(5_000, 70_001)
        } else {
            r.range(0, 300)
        };
        Val {
            seed: r.next_u64() as u32,
            len: len as u32,
        }
    }

    fn bound(&mut self, live: &Map) -> Bound<Key> {
        match self.rng.range(0, 5) {
            0 => Bound::Unbounded,
            1 | 2 => Bound::Included(self.key(live, 50)),
            _ => Bound::Excluded(self.key(live, 50)),
        }
    }

    fn next(&mut self, live: &Map) -> Op {
        self.step += 1;
        let phase = phase(self.step);
        let growing = phase == Phase::Grow;
        // Per mille: single puts, single deletes, deletes of a run of consecutive keys.
        let (put, del, run_del) = match phase {
            Phase::Grow => (550, 30, 2),
            Phase::Trim => (100, 250, 5),
            Phase::Drain => (50, 400, 50),
        };
        let roll = self.rng.range(0, 1000);
        let mut at = 0;
        let mut hit = |w: u64| {
            at += w;
            roll < at
        };
        if hit(put) {
            let k = self.key(live, if growing { 15 } else { 50 });
            Op::Put(k, self.val())
        } else if hit(del) {
            Op::Delete(self.key(live, 90))
        } else if hit(60) {
            let n = self.rng.range(0, if growing { 40 } else { 12 });
            let ws = (0..n)
                .map(|_| {
                    if self.rng.chance(if growing { 3 } else { 1 }, 4) {
                        let k = self.key(live, 15);
                        W::Put(k, self.val())
                    } else {
                        W::Del(self.key(live, 90))
                    }
                })
                .collect();
            Op::Batch(ws)
        } else if hit(30) {
            // Counters on live or new keys: upserts that meet values, tombstones and nothing.
            Op::Upsert(self.key(live, 60), self.rng.range(0, 1000))
        } else if hit(run_del / 2 + 1) {
            // A range delete from a live key to a key some way past it.
            let from = self.existing_key(live);
            let to = live
                .range(from.0.clone()..)
                .nth(self.rng.range(1, 60) as usize);
            Op::DeleteRange(
                from,
                Key(to.map_or_else(|| b"~".to_vec(), |(k, _)| k.clone())),
            )
        } else if hit(run_del) {
            // Delete a run of consecutive live keys at once: whole leaves empty and merge.
            let from = self.existing_key(live);
            let n = self.rng.range(5, 80) as usize;
            Op::Batch(
                live.range(from.0..)
                    .take(n)
                    .map(|(k, _)| W::Del(Key(k.clone())))
                    .collect(),
            )
        } else if hit(100) {
            Op::Get(self.key(live, 70))
        } else if hit(60) {
            let (lo, hi) = if self.rng.chance(1, 8) {
                (Bound::Unbounded, Bound::Unbounded)
            } else {
                (self.bound(live), self.bound(live))
            };
            let scan = match self.rng.range(0, 5) {
                0 | 1 => Scan::Pattern(0),
                2 => Scan::Pattern(!0),
                3 => Scan::Pattern(self.rng.next_u64()),
                _ => Scan::Take {
                    n: self.rng.range(0, 300) as usize,
                    back: self.rng.chance(1, 2),
                },
            };
            Op::Range(lo, hi, scan)
        } else if hit(8) {
            let k = self.key(live, 30);
            Op::SyncedBatch(vec![W::Put(k, self.val())])
        } else if hit(4) {
            Op::Checkpoint
        } else if hit(4) {
            Op::Sync
        } else if hit(2) {
            Op::Reopen
        } else if hit(2) {
            Op::ProcessCrash
        } else if hit(3) {
            Op::Crash
        } else {
            Op::Get(self.key(live, 50))
        }
    }
}

fn model_long(name: &str, opts: Options, sim: bool, durability: Durability, seed: u64) {
    let seen = Seen::default();
    let place = Place::new(sim);
    let opts = opts.durability(durability);
    let mut run = Run::new(&place, opts.clone(), &seen);
    let mut gen = LongGen {
        rng: Rng::new(seed),
        step: 0,
    };
    for i in 0..20_000u64 {
        let op = gen.next(&run.cur);
        if let Err(e) = run.step(&op) {
            panic!("{name}: op {i} {op:?} failed: {e}");
        }
        if i % 250 == 249 {
            run.note_shape();
        }
    }
    let final_height = run.db().metrics().engine.height;
    run.verify_all("at the end of the long run");
    let m = run.db().metrics();
    run.finish();
    eprintln!("{name}: {seen:?}; final {m:?}");
    assert!(seen.max_keys.get() > 4_000, "{seen:?}");
    let node_size = match opts.engine {
        strata::EngineOptions::BTree { node_size }
        | strata::EngineOptions::BeTree { node_size, .. } => node_size,
        // Auto tuned the geometry when the database was made; its metrics say what it chose.
        strata::EngineOptions::Auto => m.engine.node_size as usize,
        strata::EngineOptions::Lsm(_) => {
            // An LSM-tree keeps every value inline and has levels, not a height that shrinks:
            // what its run must have shown is flushes and merges into several levels.
            assert!(m.engine.detail("merges") > 10, "{m:?}");
            assert!(seen.max_height.get() >= 2, "{seen:?}");
            return;
        }
    };
    assert!(seen.max_blobs.get() > 0, "large values went out of line");
    if let strata::EngineOptions::BeTree { fanout, .. } = opts.engine {
        // Flushes of under an eighth of a node into leaves the cache cannot keep: the count
        // of runs fills before their bytes, and full counts are merged.
        if fanout > 16 && opts.cache_bytes < 4 * node_size {
            assert!(seen.run_merges.get() > 0, "{seen:?}");
        }
        // Flushes of a quarter of a node or more into leaves the cache cannot keep: runs fill
        // their byte budget and drain, on the drain thread (`betree::drainer`) when half the
        // cache holds one held aside (three times two node sizes of runs, and the leaf).
        if fanout <= 16 && opts.cache_bytes < 16 * node_size && 14 * node_size <= opts.cache_bytes {
            assert!(seen.drains_offloaded.get() > 0, "{seen:?}");
        }
    }
    if node_size <= 4096 {
        assert!(seen.max_height.get() >= 3, "{seen:?}");
    }
    // Deletes shrink the tree at once only where nothing is buffered; a Bε-tree's deletes wait
    // in its buffers (its merges are tested in betree.rs).
    if node_size <= 4096 && m.engine.detail("buffered_messages") == 0 {
        assert!(
            final_height < seen.max_height.get(),
            "the tree shrank again: {final_height} vs {}",
            seen.max_height.get()
        );
    }
    if opts.cache_bytes <= 64 << 10 {
        assert!(seen.evictions.get() > 0);
    }
}

// --- fault injection

#[derive(Clone, Copy, Debug)]
enum Fault {
    /// Fail IO number n from now, and every IO after it if sticky.
    Fail { n: u64, sticky: bool },
    /// Tear write number n from now after `sectors` sectors; the disk is dead until the crash.
    Tear { n: u64, sectors: usize },
}

fn is_read(op: &Op) -> bool {
    matches!(op, Op::Get(_) | Op::Range(..))
}

fn fault_case(opts: &Options, warmup: &[Op], ops: &[Op], fault: Fault, seen: &Seen) {
    let place = Place::sim();
    let env = place.env().clone();
    let mut run = Run::new(&place, opts.clone(), seen);
    for op in warmup {
        run.step(op)
            .unwrap_or_else(|e| panic!("warm-up {op:?}: {e}"));
    }
    match fault {
        Fault::Fail { n, sticky } => env.disk().fail_io_after(n, sticky),
        Fault::Tear { n, sectors } => env.disk().tear_write_after(n, sectors),
    }
    let transient = matches!(fault, Fault::Fail { sticky: false, .. });
    let mut failed: Option<Vec<W>> = None;
    for op in ops {
        let Err(e) = run.step(op) else { continue };
        bump(&seen.faults_hit);
        if transient && is_read(op) {
            // A read that failed once changes nothing: the database stays usable and correct.
            // The failed IO may have been a write-back of the read's settle, which leaves the
            // pool above its budget until some operation settles it (an empty batch does
            // not): the next read must succeed and does, before the budget is checked again.
            if matches!(e, Error::Io { .. }) {
                run.db()
                    .get(b"after a failed read")
                    .unwrap_or_else(|e| panic!("a read after {op:?} failed once: {e}"));
            }
            continue;
        }
        assert!(
            matches!(e, Error::Io { .. } | Error::Poisoned { .. }),
            "{op:?} failed with an unexpected error: {e:?}"
        );
        let db = run.db();
        let again = db.put(b"after the failure", b"x");
        match (&again, transient, is_read(op)) {
            // The disk works again: only poisoning can refuse the write.
            (Err(Error::Poisoned { .. }), true, false) => {}
            (Err(Error::Poisoned { .. } | Error::Io { .. }), false, _) => {}
            _ => panic!("after {op:?} failed ({e}), a write returned {again:?}"),
        }
        if !is_read(op) {
            bump(&seen.failed_writes);
            assert!(
                matches!(db.get(b"x"), Err(Error::Poisoned { .. })),
                "a failed write poisons reads too"
            );
            assert!(matches!(
                db.range::<&[u8], _>(..),
                Err(Error::Poisoned { .. })
            ));
        }
        failed = op.writes();
        break;
    }
    drop(run.db.take());
    place.power_loss();
    let mut allowed = run.candidates();
    if let Some(ws) = &failed {
        let mut with = run.cur.clone();
        apply(&mut with, ws);
        allowed.push(with);
    }
    run.recover(allowed, &format!("after {fault:?} and a power loss"));
    if let Some(ws) = &failed {
        let mut with = Map::new();
        apply(&mut with, ws);
        if with.iter().all(|(k, v)| run.cur.get(k) == Some(v)) && !with.is_empty() {
            bump(&seen.failed_batch_survived);
        }
    }
    // The recovered database takes writes again and survives another reopen.
    run.step(&Op::Put(Key(b"again".to_vec()), Val { seed: 1, len: 10 }))
        .expect("write after recovery");
    run.step(&Op::Reopen).expect("reopen after recovery");
}

fn model_faults(name: &str, opts: Options, durability: Durability, kind: &str) {
    let opts = opts.durability(durability);
    let seen = Seen::default();
    let fault = match kind {
        "sticky" => (1u64..80)
            .prop_map(|n| Fault::Fail { n, sticky: true })
            .boxed(),
        "once" => (1u64..80)
            .prop_map(|n| Fault::Fail { n, sticky: false })
            .boxed(),
        _ => (1u64..60, 0usize..10)
            .prop_map(|(n, sectors)| Fault::Tear { n, sectors })
            .boxed(),
    };
    let strategy = (
        prop::collection::vec(op_strategy(Restarts::None), 0..40),
        prop::collection::vec(op_strategy(Restarts::None), 1..200),
        fault,
    );
    let (mut runner, seed) = runner();
    let result = runner.run(&strategy, |(warmup, ops, fault)| {
        fault_case(&opts, &warmup, &ops, fault, &seen);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{name}: {e}\n{}", replay(name, seed));
    }
    eprintln!("{name}: {seen:?}");
    let cases = prop_cases() as u64;
    assert!(
        seen.faults_hit.get() > cases * 2 / 3,
        "most cases hit their fault: {seen:?}"
    );
    assert!(seen.failed_writes.get() > cases / 3, "{seen:?}");
}

// ------------------------------------------------------------------------------------------
// Small deterministic checks of the range API forms the generated runs do not spell out.

#[test]
fn range_syntax_forms_and_inverted_ranges() {
    let place = Place::sim();
    let db = place.open(Options::default().btree(4096)).unwrap();
    let keys: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"a".to_vec(),
        b"ab".to_vec(),
        b"b".to_vec(),
        b"ba".to_vec(),
        b"c".to_vec(),
    ];
    for k in &keys {
        db.put(k, k).unwrap();
    }
    let got = |it: strata::RangeIter<'_>| -> Vec<Vec<u8>> { it.map(|r| r.unwrap().0).collect() };
    let want = |f: &dyn Fn(&[u8]) -> bool| -> Vec<Vec<u8>> {
        keys.iter().filter(|k| f(k)).cloned().collect()
    };
    assert_eq!(got(db.range::<&[u8], _>(..).unwrap()), keys);
    assert_eq!(
        got(db.range(b"ab".as_slice()..).unwrap()),
        want(&|k| k >= b"ab".as_slice())
    );
    assert_eq!(
        got(db.range(..b"b".as_slice()).unwrap()),
        want(&|k| k < b"b".as_slice())
    );
    assert_eq!(
        got(db.range(..=b"b".as_slice()).unwrap()),
        want(&|k| k <= b"b".as_slice())
    );
    assert_eq!(
        got(db.range(b"a".as_slice()..b"ba".as_slice()).unwrap()),
        want(&|k| k >= b"a".as_slice() && k < b"ba".as_slice())
    );
    assert_eq!(
        got(db.range(b"a".as_slice()..=b"ba".as_slice()).unwrap()),
        want(&|k| k >= b"a".as_slice() && k <= b"ba".as_slice())
    );
    assert_eq!(
        got(db.range(b"".as_slice()..=b"".as_slice()).unwrap()),
        vec![b"".to_vec()],
        "the empty key is a key like any other"
    );
    // Empty and inverted ranges: nothing, from either end, and no panic.
    assert!(got(db.range(b"b".as_slice()..b"b".as_slice()).unwrap()).is_empty());
    #[allow(clippy::reversed_empty_ranges)]
    let inverted = b"c".as_slice()..b"a".as_slice();
    assert!(got(db.range(inverted.clone()).unwrap()).is_empty());
    assert!(db.range(inverted).unwrap().next_back().is_none());
    let excl = (
        Bound::Excluded(b"b".as_slice()),
        Bound::Excluded(b"b".as_slice()),
    );
    assert!(got(db.range::<&[u8], _>(excl).unwrap()).is_empty());
    let excl_incl = (
        Bound::Excluded(b"b".as_slice()),
        Bound::Included(b"b".as_slice()),
    );
    assert!(db
        .range::<&[u8], _>(excl_incl)
        .unwrap()
        .next_back()
        .is_none());
    let rev: Vec<Vec<u8>> = db
        .range(b"a".as_slice()..)
        .unwrap()
        .rev()
        .map(|r| r.unwrap().0)
        .collect();
    assert_eq!(
        rev,
        want(&|k| k >= b"a".as_slice())
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
    );
}

/// Ranges longer than one page of the iterator (256 entries), consumed from both ends at once,
/// so the two ends meet inside pages fetched at different times.
#[test]
fn range_pages_meet_from_both_ends() {
    let place = Place::sim();
    let db = place.open(Options::default().btree(4096)).unwrap();
    let mut oracle = BTreeMap::new();
    for i in 0..1500u32 {
        let k = format!("k{:05}", i * 7 % 1500).into_bytes();
        let v = common::value(i as u64, (i % 97) as usize);
        db.put(&k, &v).unwrap();
        oracle.insert(k, v);
    }
    for (front_per_back, lo, hi) in [
        (1usize, 0usize, 1500usize),
        (3, 10, 1300),
        (0, 200, 1499),
        (7, 0, 600),
    ] {
        let lo_k = format!("k{lo:05}").into_bytes();
        let hi_k = format!("k{hi:05}").into_bytes();
        let mut want: VecDeque<_> = oracle.range(lo_k.clone()..hi_k.clone()).collect();
        let mut it = db.range(lo_k..hi_k).unwrap();
        let mut n = 0usize;
        loop {
            let back = front_per_back == 0 || n % (front_per_back + 1) == front_per_back;
            let (got, exp) = if back {
                (it.next_back(), want.pop_back())
            } else {
                (it.next(), want.pop_front())
            };
            match (got, exp) {
                (None, None) => break,
                (Some(Ok((k, v))), Some((wk, wv))) => {
                    assert_eq!((&k, &v), (wk, wv), "step {n}");
                }
                (g, e) => panic!("step {n}: {:?} vs {:?}", g.map(|r| r.unwrap().0), e),
            }
            n += 1;
        }
        assert_eq!(n, hi - lo);
    }
}

// ------------------------------------------------------------------------------------------
// Concurrency: synced writers racing a failing disk, and iterators racing writers.

/// Several threads write with `Durability::Sync` (sharing log syncs) while the disk fails for
/// good at a random IO. Every write acknowledged to any thread survives the power loss that
/// follows; a thread's failed write is either wholly there or not; nothing else appears.
#[test]
fn concurrent_synced_writers_and_a_failing_disk() {
    let mut rng = Rng::new(0xc0c0);
    let mut hit = 0;
    for round in 0..24u64 {
        let place = Place::sim();
        let env = place.env().clone();
        env.disk()
            .set_sync_latency(std::time::Duration::from_micros(100));
        let opts = Options::default()
            .btree(4096)
            .cache_bytes(64 << 10)
            .checkpoint_wal_bytes(if round % 2 == 0 { 8 << 10 } else { 64 << 20 });
        let db = place.open(opts.clone()).unwrap();
        let n = rng.range(20, 700);
        env.disk().fail_io_after(n, true);
        let threads = 4usize;
        let results: Vec<(Vec<u32>, Option<u32>)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let db = &db;
                    s.spawn(move || {
                        let mut acked = Vec::new();
                        for i in 0..150u32 {
                            let k = format!("t{t}-{i:04}");
                            match db.put(&k, common::value((t as u64) << 32 | i as u64, 60)) {
                                Ok(()) => acked.push(i),
                                Err(e) => {
                                    assert!(
                                        matches!(e, Error::Io { .. } | Error::Poisoned { .. }),
                                        "{e:?}"
                                    );
                                    return (acked, Some(i));
                                }
                            }
                        }
                        (acked, None)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        if results.iter().any(|r| r.1.is_some()) {
            hit += 1;
            assert!(
                db.put(b"after", b"x").is_err(),
                "writes refused after a failure"
            );
        }
        drop(db);
        env.crash();
        let db = place.open(opts).unwrap();
        db.check().unwrap();
        let got = common::dump(&db);
        let mut allowed = 0;
        for (t, (acked, failed)) in results.iter().enumerate() {
            for i in acked {
                let k = format!("t{t}-{i:04}").into_bytes();
                assert_eq!(
                    got.get(&k),
                    Some(&common::value((t as u64) << 32 | *i as u64, 60)),
                    "round {round}: acknowledged {k:?} lost"
                );
            }
            allowed += acked.len();
            if let Some(i) = failed {
                if got.contains_key(format!("t{t}-{i:04}").as_bytes()) {
                    allowed += 1;
                }
            }
        }
        assert_eq!(got.len(), allowed, "round {round}: unexpected keys");
    }
    assert!(hit > 12, "most rounds hit the failure: {hit}");
}

/// Iterators are not snapshots, but they see each key at most once, in order, and every key
/// that exists throughout the scan, with its value, while another thread inserts and deletes
/// keys all around (so leaves split and merge, and checkpoints run, between the pages of the
/// scan).
#[test]
fn ranges_during_concurrent_writes() {
    let place = Place::sim();
    let db = place
        .open(
            Options::default()
                .btree(4096)
                .cache_bytes(64 << 10)
                .durability(Durability::None)
                .checkpoint_wal_bytes(8 << 10),
        )
        .unwrap();
    let stable = |i: u32| format!("k{i:05}").into_bytes();
    let volatile = |i: u32, j: u32| format!("k{i:05}-{j}").into_bytes();
    for i in 0..2_000u32 {
        db.put(stable(i), common::value(i as u64, 50)).unwrap();
    }
    let done = std::sync::atomic::AtomicBool::new(false);
    let writes = std::sync::atomic::AtomicU64::new(0);
    let bump_writes = || writes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut rng = Rng::new(7);
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                bump_writes();
                let i = rng.range(0, 2_000) as u32;
                let j = rng.range(0, 8) as u32;
                if rng.chance(1, 2) {
                    db.put(volatile(i, j), volatile(i, j)).unwrap();
                } else {
                    // Delete a run of volatile keys, so leaves underflow and merge.
                    for i in i..(i + 40).min(2_000) {
                        for j in 0..8 {
                            db.delete(volatile(i, j)).unwrap();
                            bump_writes();
                        }
                    }
                }
            }
        });
        while writes.load(std::sync::atomic::Ordering::Relaxed) < 100 {
            std::thread::yield_now();
        }
        // At least 200 scans, and on until the writer has done 20,000 operations meanwhile.
        for round in 0..20_000u32 {
            if round >= 200 && writes.load(std::sync::atomic::Ordering::Relaxed) >= 20_000 {
                break;
            }
            let reverse = round % 2 == 1;
            let (a, b) = (round % 40 * 37, 2_000 - round % 40 * 23);
            let lo = stable(a);
            let hi = stable(b);
            let it = db.range(lo.clone()..hi.clone()).unwrap();
            let items: Vec<(Vec<u8>, Vec<u8>)> = if reverse {
                it.rev().map(|r| r.unwrap()).collect()
            } else {
                it.map(|r| r.unwrap()).collect()
            };
            for w in items.windows(2) {
                let in_order = if reverse {
                    w[0].0 > w[1].0
                } else {
                    w[0].0 < w[1].0
                };
                assert!(in_order, "round {round}: {:?} then {:?}", w[0].0, w[1].0);
            }
            let mut stable_seen = 0;
            for (k, v) in &items {
                assert!(k >= &lo && k < &hi, "outside the range: {k:?}");
                if k.len() == 6 {
                    let i: u32 = std::str::from_utf8(&k[1..]).unwrap().parse().unwrap();
                    assert_eq!(v, &common::value(i as u64, 50), "{k:?}");
                    stable_seen += 1;
                } else {
                    assert_eq!(v, k, "a volatile key holds its own name");
                }
            }
            let want = (a..b).count();
            assert_eq!(stable_seen, want, "round {round}: every stable key, once");
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let writes = writes.into_inner();
    assert!(
        writes > 10_000,
        "the writer ran alongside the scans: {writes} writes"
    );
    db.check().unwrap();
}

// ------------------------------------------------------------------------------------------
// The suite, once per engine configuration.

macro_rules! model_suite {
    ($($name:ident => $opts:expr;)*) => {$(
        mod $name {
            use super::*;

            fn opts() -> Options {
                $opts
            }
            fn name(test: &str) -> String {
                format!("{}::{test}", stringify!($name))
            }

            #[test]
            fn prop_sim_sync() {
                model_prop(&name("prop_sim_sync"), opts(), true, Durability::Sync, Restarts::All);
            }
            #[test]
            fn prop_sim_none() {
                model_prop(&name("prop_sim_none"), opts(), true, Durability::None, Restarts::All);
            }
            #[test]
            fn prop_file_sync() {
                model_prop(&name("prop_file_sync"), opts(), false, Durability::Sync, Restarts::All);
            }
            #[test]
            fn prop_file_none() {
                model_prop(&name("prop_file_none"), opts(), false, Durability::None, Restarts::All);
            }
            #[test]
            fn long_sim_sync() {
                model_long(&name("long_sim_sync"), opts(), true, Durability::Sync, 0x5eed_0001);
            }
            // The other two long runs cover sim and file, synced and not; this pairing runs
            // with --ignored.
            #[test]
            #[ignore]
            fn long_sim_none() {
                model_long(&name("long_sim_none"), opts(), true, Durability::None, 0x5eed_0002);
            }
            // The other two long runs cover sim and file, synced and not; this pairing runs
            // with --ignored.
            #[test]
            #[ignore]
            fn long_file_sync() {
                model_long(&name("long_file_sync"), opts(), false, Durability::Sync, 0x5eed_0003);
            }
            #[test]
            fn long_file_none() {
                model_long(&name("long_file_none"), opts(), false, Durability::None, 0x5eed_0004);
            }
            #[test]
            fn io_errors_sticky_sync() {
                model_faults(&name("io_errors_sticky_sync"), opts(), Durability::Sync, "sticky");
            }
            #[test]
            fn io_errors_sticky_none() {
                model_faults(&name("io_errors_sticky_none"), opts(), Durability::None, "sticky");
            }
            #[test]
            fn io_errors_once_sync() {
                model_faults(&name("io_errors_once_sync"), opts(), Durability::Sync, "once");
            }
            #[test]
            fn io_errors_once_none() {
                model_faults(&name("io_errors_once_none"), opts(), Durability::None, "once");
            }
            #[test]
            fn torn_writes_sync() {
                model_faults(&name("torn_writes_sync"), opts(), Durability::Sync, "tear");
            }
            #[test]
            fn torn_writes_none() {
                model_faults(&name("torn_writes_none"), opts(), Durability::None, "tear");
            }
        }
    )*};
}

model_suite! {
    // B+-tree, smallest nodes and the smallest cache: evictions everywhere, values over 1 KiB
    // out of line, and a checkpoint every 8 KiB of log.
    btree_4k_tiny_cache => Options::default()
        .btree(4 << 10)
        .cache_bytes(64 << 10)
        .checkpoint_wal_bytes(8 << 10)
        .merge_operator(AddU64);
    // B+-tree, large nodes and a cache that holds everything; checkpoints only when asked.
    btree_64k_large_cache => Options::default()
        .btree(64 << 10)
        .cache_bytes(64 << 20)
        .merge_operator(AddU64);
    // Bε-tree, tiny geometry (8 KiB nodes, fanout 4, 1 KiB basements) and the smallest cache:
    // flushes, splits, merges, partial and whole evictions on almost every operation, and runs
    // (a leaf of one page, 4 KiB, would take none: `betree::policy`).
    betree_8k_tiny_cache => Options::default()
        .betree(8 << 10, 4, 1 << 10)
        .cache_bytes(64 << 10)
        .checkpoint_wal_bytes(8 << 10)
        .merge_operator(AddU64);
    // Bε-tree, 32 KiB nodes with fanout 32 and a cache of two nodes: flushes of 1 KiB into
    // leaves that are not resident, so the count of runs fills before their bytes do and a
    // leaf's small runs are merged into one (`betree::policy::Flush::Merge`; a few times per
    // long run here, hundreds of times in betree.rs's
    // `a_full_count_of_small_runs_is_merged_into_one_run`).
    betree_32k_merged_runs => Options::default()
        .betree(32 << 10, 32, 1 << 10)
        .cache_bytes(64 << 10)
        .checkpoint_wal_bytes(16 << 10)
        .merge_operator(AddU64);
    // Bε-tree, 8 KiB nodes with fanout 4 and a cache of 15 nodes, room for two drains held
    // aside: leaves out of the cache drain from their runs on the drain thread, and installs
    // meet splits, merges, crashes and reopens (`betree::drainer`).
    betree_8k_drains => Options::default()
        .betree(8 << 10, 4, 1 << 10)
        .cache_bytes(120 << 10)
        .checkpoint_wal_bytes(16 << 10)
        .merge_operator(AddU64);
    // Bε-tree, 64 KiB nodes with fanout 8 and a cache that holds everything.
    betree_64k_large_cache => Options::default()
        .betree(64 << 10, 8, 4 << 10)
        .cache_bytes(64 << 20)
        .merge_operator(AddU64);
    // LSM-tree, leveled with T = 2, the smallest memtable and tables of 1 KiB blocks, a
    // checkpoint (and so a flush) every 8 KiB of log: merges on almost every checkpoint.
    lsm_leveled_tiny => Options::default()
        .lsm(tiny_lsm(LsmPolicy::Leveled))
        .cache_bytes(64 << 10)
        .checkpoint_wal_bytes(8 << 10)
        .merge_operator(AddU64);
    // LSM-tree, tiered with T = 3.
    lsm_tiered_tiny => Options::default()
        .lsm(tiny_lsm(LsmPolicy::Tiered))
        .cache_bytes(64 << 10)
        .checkpoint_wal_bytes(8 << 10)
        .merge_operator(AddU64);
    // LSM-tree, lazy leveling with T = 3.
    lsm_lazy_tiny => Options::default()
        .lsm(tiny_lsm(LsmPolicy::LazyLeveled))
        .cache_bytes(64 << 10)
        .checkpoint_wal_bytes(8 << 10)
        .merge_operator(AddU64);
    // LSM-tree, the default shape and a cache that holds everything; checkpoints only when
    // asked.
    lsm_default_large_cache => Options::default()
        .lsm(LsmConfig::default())
        .cache_bytes(64 << 20)
        .merge_operator(AddU64);
}

/// The smallest LSM-tree: 64 KiB memtable and tables, 1 KiB blocks, T = 2 (3 when tiered), two
/// level-0 runs, no Monkey for the leveled one.
fn tiny_lsm(policy: LsmPolicy) -> LsmConfig {
    let t = if policy == LsmPolicy::Leveled { 2 } else { 3 };
    LsmConfig {
        l0_runs: 2,
        memtable_bytes: 64 << 10,
        table_bytes: 64 << 10,
        block_bytes: 1 << 10,
        monkey: policy != LsmPolicy::Leveled,
        ..LsmConfig::with(policy, t)
    }
}

/// A shrunk failure of `lsm_leveled_tiny::prop_sim_sync`, kept as a named regression: after an
/// explicit checkpoint that followed a power loss and a scan, the pool of a leveled LSM-tree
/// was over its budget at the next write. The checkpoint samples a block of every table above
/// the last level (`settle_at_rest`), and those blocks came in through the pool with nothing
/// evicting after them; it now evicts. Merges run in the background here, so whether this
/// sequence ends over budget depends on their timing: it did not fail again when replayed.
#[test]
fn lsm_leveled_tiny_a_checkpoint_after_a_scan_leaves_the_pool_within_budget() {
    fn k(b: &[u8]) -> Key {
        Key(b.to_vec())
    }
    let ops = vec![
        Op::Fill {
            n: 1104,
            seed: 679554008,
        },
        Op::Batch(vec![W::DelRange(k(b"ba"), k(b"caaa"))]),
        Op::Fill {
            n: 418,
            seed: 1121371450,
        },
        Op::DeleteRange(k(b""), k(b"c")),
        Op::Delete(k(b"")),
        Op::Delete(k(b"")),
        Op::Put(k(b"ab"), Val { seed: 0, len: 0 }),
        Op::Put(k(b"ab"), Val { seed: 0, len: 135 }),
        Op::Batch(vec![
            W::DelRange(k(b"b"), k(b"ca")),
            W::Put(k(b"ac"), Val { seed: 0, len: 294 }),
        ]),
        Op::Put(k(b""), Val { seed: 0, len: 0 }),
        Op::Fill {
            n: 823,
            seed: 77889046,
        },
        Op::Put(k(b"ba"), Val { seed: 0, len: 223 }),
        Op::Delete(k(b"aa")),
        Op::Put(
            k(b"aabdddb"),
            Val {
                seed: 1904981173,
                len: 69975,
            },
        ),
        Op::Batch(vec![
            W::Del(k(b"acc")),
            W::Put(
                k(b"abddda"),
                Val {
                    seed: 2377105443,
                    len: 103,
                },
            ),
            W::DelRange(k(b"caa"), k(b"")),
            W::Put(
                k(b"b"),
                Val {
                    seed: 1941402711,
                    len: 98,
                },
            ),
            W::Del(k(b"baa")),
            W::Del(k(b"aadbbbccd")),
        ]),
        Op::Put(
            k(b"ccc"),
            Val {
                seed: 1943218535,
                len: 15386,
            },
        ),
        Op::Put(
            k(b"c"),
            Val {
                seed: 3450347373,
                len: 24652,
            },
        ),
        Op::Put(
            k(b"cac"),
            Val {
                seed: 276958550,
                len: 132,
            },
        ),
        Op::Put(
            k(b"dbdabadbada"),
            Val {
                seed: 3023089213,
                len: 82,
            },
        ),
        Op::Delete(k(b"b")),
        Op::Put(
            k(b"aba"),
            Val {
                seed: 3280500165,
                len: 286,
            },
        ),
        Op::Checkpoint,
        Op::Put(
            k(b"a"),
            Val {
                seed: 440960627,
                len: 282,
            },
        ),
        Op::Batch(vec![
            W::DelRange(k(b"ab"), k(b"bac")),
            W::Del(k(b"b")),
            W::Upsert(k(b"bb"), 8120922351298949981),
            W::Put(
                k(b"c"),
                Val {
                    seed: 3092133751,
                    len: 272,
                },
            ),
        ]),
        Op::Crash,
        Op::Range(
            Bound::Included(k(b"aa")),
            Bound::Included(k(b"bbb")),
            Scan::Pattern(18446744073709551615),
        ),
        Op::Checkpoint,
        Op::Batch(vec![]),
    ];
    let opts = Options::default()
        .lsm(tiny_lsm(LsmPolicy::Leveled))
        .cache_bytes(64 << 10)
        .checkpoint_wal_bytes(8 << 10)
        .merge_operator(AddU64)
        .durability(Durability::Sync);
    let seen = Seen::default();
    let place = Place::new(true);
    let mut run = Run::new(&place, opts, &seen);
    for (i, op) in ops.iter().enumerate() {
        run.step(op)
            .unwrap_or_else(|e| panic!("op {i} {op:?} failed: {e}"));
    }
    run.finish();
}
