//! The real-process crash test: a writer process is killed with SIGKILL at random moments, round
//! after round, on a database in a real directory that is never wiped, and what every reopen
//! finds is checked against a model of the batches the writer acknowledged.
//!
//! The test binary is its own writer: each test re-executes `current_exe()` with
//! `--exact <its own name>` and `STRATA_KILL_CHILD` set, and the same test function, seeing that
//! variable, plays the child. Without it the child role is never taken, so a normal run only
//! runs parents. One round:
//!
//! 1. Half of the rounds, the parent first opens the directory itself (recovery in this
//!    process), settles what came back, runs `Db::check`, and closes or just drops the handle.
//! 2. The parent writes its model (the contents every acknowledged batch so far produced) next
//!    to the database and spawns the child, telling it which batch was in flight when the last
//!    child died (it may or may not have reached the log).
//! 3. The child opens the database (recovery of the previous crash, or creation), compares the
//!    whole contents with the model with and without the in-flight batch, reports which one it
//!    found (`recovered`), runs `Db::check`, and then writes batches forever, deterministic from
//!    (seed, round, batch number): puts of small and out-of-line values, overwrites, deletes,
//!    range deletes, `AddU64` upserts, and in every batch an upsert of `~applied` by one and a
//!    put of `~last`, so a batch applied twice or in part cannot match any allowed state. Most
//!    batches are written with `Durability::Sync`, some groups with `Durability::None` and then
//!    `Db::sync`. After each write returns it prints `acked <round> <n>`: a returned write is in
//!    the operating system's hands, and a process crash (unlike a power cut) keeps it.
//! 4. The parent kills it (SIGKILL) at a moment drawn from the round's plan: a few milliseconds
//!    after the spawn (during start-up, open or recovery), just after the open (during the
//!    verification or the first writes), after a number of acknowledged batches, or after a
//!    delay of up to most of a second; then it reads every line the child managed to print.
//!
//! Allowed after a kill: the model after every acknowledged batch, plus the one batch in flight
//! (the child starts batch n + 1 only after printing the ack of batch n) wholly or not at all.
//! The model then continues from what came back. A directory in which no child ever finished
//! opening may hold no database at all.
//!
//! Engines: the Bε-tree with its tiny geometry and the B+-tree with 4 KiB nodes, both with a
//! 128 KiB cache and a checkpoint every 32 KiB of log (background checkpoints, log rotations and
//! evictions many times a second), and `Options::default()` (the built-in Bε-tree geometry: the
//! child is pointed at a profile path that does not exist). The key space grows with the round,
//! so the database keeps growing across rounds.
//!
//! The default tests run a few dozen rounds per engine; `long_*` are `#[ignore]`d and run 200
//! (`cargo test -p strata --test kill -- --ignored --nocapture`). `STRATA_KILL_ROUNDS` sets the
//! number of rounds and `STRATA_KILL_SEED` the seed of every test run; each test prints its seed
//! first and a summary last. A seed replays the batches and the kill plans, not the exact
//! instants of the kills (they are real time), and a failing run keeps its directory and prints
//! where it is.

mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use common::Rng;
use strata::{AddU64, Db, Durability, Error, Op, Options, WriteBatch};

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

/// Set in a child: "seed round pending_round pending_lo pending_hi".
const CHILD_ENV: &str = "STRATA_KILL_CHILD";
/// Set in a child: the round's work directory (the database is `db/` in it, the model
/// `model.bin`).
const DIR_ENV: &str = "STRATA_KILL_DIR";
const SEED_ENV: &str = "STRATA_KILL_SEED";
const ROUNDS_ENV: &str = "STRATA_KILL_ROUNDS";
/// Set: print a line per round (the plan, where the kill landed, what was settled).
const VERBOSE_ENV: &str = "STRATA_KILL_VERBOSE";
/// Protocol lines start with this; libtest may print its own text before it on the same line.
const MARK: &str = "@kill ";
/// A child that is somehow left alone stops writing after this long.
const CHILD_LIFETIME: Duration = Duration::from_secs(60);
/// A round whose plan has not killed the child by then kills it anyway.
const ROUND_LIMIT: Duration = Duration::from_secs(20);

#[derive(Clone, Copy, Debug)]
enum Setup {
    BetreeTiny,
    Btree4k,
    Default,
}

impl Setup {
    fn options(self) -> Options {
        match self {
            Setup::BetreeTiny => Options::default()
                .betree(4 << 10, 4, 1 << 10)
                .cache_bytes(128 << 10)
                .checkpoint_wal_bytes(32 << 10),
            Setup::Btree4k => Options::default()
                .btree(4 << 10)
                .cache_bytes(128 << 10)
                .checkpoint_wal_bytes(32 << 10),
            Setup::Default => Options::default(),
        }
        .merge_operator(AddU64)
    }
}

#[test]
fn betree_tiny() {
    kill_test(Setup::BetreeTiny, "betree_tiny", 30);
}

#[test]
fn btree_4k() {
    kill_test(Setup::Btree4k, "btree_4k", 30);
}

#[test]
fn default_options() {
    kill_test(Setup::Default, "default_options", 30);
}

#[test]
#[ignore = "long: 200 rounds"]
fn long_betree_tiny() {
    kill_test(Setup::BetreeTiny, "long_betree_tiny", 200);
}

#[test]
#[ignore = "long: 200 rounds"]
fn long_btree_4k() {
    kill_test(Setup::Btree4k, "long_btree_4k", 200);
}

#[test]
#[ignore = "long: 200 rounds"]
fn long_default_options() {
    kill_test(Setup::Default, "long_default_options", 200);
}

fn kill_test(setup: Setup, name: &'static str, rounds: u64) {
    if std::env::var_os(CHILD_ENV).is_some() {
        child(setup);
        return;
    }
    let rounds = env_u64(ROUNDS_ENV).unwrap_or(rounds);
    let seed = env_u64(SEED_ENV).unwrap_or_else(random_seed);
    eprintln!(
        "kill {name}: seed {seed:#x}; replay: {SEED_ENV}={seed:#x} cargo test -p strata \
         --test kill -- --exact {name} --include-ignored --nocapture"
    );
    Parent::new(setup, name, seed).run(rounds);
}

// ------------------------------------------------------------------------------------------
// The batches and the model

/// Keys `k000000`.. drawn from a space that grows with the round.
fn key(i: u64) -> Vec<u8> {
    format!("k{i:06}").into_bytes()
}

fn key_space(round: u64) -> u64 {
    (400 + 150 * round).min(30_000)
}

/// Batch `n` (from 1) of round `round`: a function of the seed, the round and n only.
fn batch(seed: u64, round: u64, n: u64) -> WriteBatch {
    let mut r = Rng::new(seed ^ (round << 40) ^ n);
    let space = key_space(round);
    let mut b = WriteBatch::new();
    for _ in 0..r.range(1, 9) {
        let i = r.range(0, space);
        match r.range(0, 100) {
            0..=44 => {
                // Mostly small values; a few over a quarter of a 4 KiB node (out of line in
                // the B+-tree) and a few of several nodes.
                let len = match r.range(0, 100) {
                    0..=69 => r.range(0, 100),
                    70..=94 => r.range(100, 1500),
                    _ => r.range(3000, 12_000),
                };
                b.put(key(i), common::value(r.next_u64(), len as usize));
            }
            45..=59 => {
                b.delete(key(i));
            }
            60..=64 => {
                b.delete_range(key(i), key(i + r.range(1, 40)));
            }
            65..=84 => {
                // Operands of 1..8 bytes: AddU64 reads missing bytes as zero.
                let x = r.next_u64().to_le_bytes();
                b.upsert(key(i), &x[..r.range(1, 9) as usize]);
            }
            _ => {
                b.upsert(
                    format!("c{:02}", r.range(0, 16)),
                    r.range(1, 1 << 20).to_le_bytes(),
                );
            }
        }
    }
    b.upsert(b"~applied", 1u64.to_le_bytes());
    b.put(b"~last", format!("{round} {n}"));
    b
}

fn le_u64(b: &[u8]) -> u64 {
    let mut x = [0u8; 8];
    let n = b.len().min(8);
    x[..n].copy_from_slice(&b[..n]);
    u64::from_le_bytes(x)
}

/// The oracle: apply a batch's operations in order (`AddU64` written out again here).
fn apply(m: &mut Map, b: &WriteBatch) {
    for op in b.ops() {
        match op {
            Op::Put { key, value } => {
                m.insert(key.clone(), value.clone());
            }
            Op::Delete { key } => {
                m.remove(key);
            }
            Op::Upsert { key, operand } => {
                let sum = m.get(key).map_or(0, |v| le_u64(v));
                let sum = sum.wrapping_add(le_u64(operand));
                m.insert(key.clone(), sum.to_le_bytes().to_vec());
            }
            Op::DeleteRange { start, end } => {
                let gone: Vec<Vec<u8>> = m
                    .range(start.clone()..end.clone())
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in gone {
                    m.remove(&k);
                }
            }
        }
    }
}

/// Batches `lo..=hi` of `round` were in flight at a kill: a prefix of them may be in the database.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Pending {
    round: u64,
    lo: u64,
    hi: u64,
}

/// Settle what came back: advance `model` (the state before the pending batches) through the
/// pending batches until it equals `got`, and return the last batch applied (`lo - 1` when none
/// was there). On no match, `model` is left advanced through all of them and the error says how
/// the contents differ.
fn settle(model: &mut Map, pending: Option<Pending>, seed: u64, got: &Map) -> Result<u64, String> {
    let Some(p) = pending else {
        return if *model == *got {
            Ok(0)
        } else {
            Err(format!("no batch was in flight; {}", diff(model, got)))
        };
    };
    let before = model.get(&b"~applied"[..]).map(|v| le_u64(v));
    for k in p.lo - 1..=p.hi {
        if k >= p.lo {
            apply(model, &batch(seed, p.round, k));
        }
        if *model == *got {
            return Ok(k);
        }
    }
    Err(format!(
        "batches {}..={} of round {} were in flight and no prefix of them matches; the model \
         counted {before:?} batches before them; against all of them applied: {}",
        p.lo,
        p.hi,
        p.round,
        diff(model, got)
    ))
}

fn show(b: &[u8]) -> String {
    if b.len() > 24 {
        format!("{}..({} B)", b[..16].escape_ascii(), b.len())
    } else {
        b.escape_ascii().to_string()
    }
}

/// A short account of how `got` differs from `want`, with what `~applied` and `~last` say.
fn diff(want: &Map, got: &Map) -> String {
    let mut missing = 0;
    let mut extra = 0;
    let mut changed = 0;
    let mut first = String::new();
    let mut note = |what: &str, k: &[u8], n: &mut usize| {
        *n += 1;
        if *n <= 3 {
            let _ = write!(first, " {what} {};", show(k));
        }
    };
    for (k, v) in want {
        match got.get(k) {
            None => note("missing", k, &mut missing),
            Some(g) if g != v => note("different", k, &mut changed),
            Some(_) => {}
        }
    }
    for k in got.keys() {
        if !want.contains_key(k) {
            note("unexpected", k, &mut extra);
        }
    }
    let counter = |m: &Map| m.get(&b"~applied"[..]).map(|v| le_u64(v));
    let last = |m: &Map| {
        m.get(&b"~last"[..])
            .map(|v| String::from_utf8_lossy(v).into_owned())
    };
    format!(
        "{missing} keys missing, {extra} unexpected, {changed} different ({} model keys, {} found);\
         {first} ~applied: model {:?}, found {:?}; ~last (round, batch): model {:?}, found {:?}",
        want.len(),
        got.len(),
        counter(want),
        counter(got),
        last(want),
        last(got)
    )
}

fn write_model(path: &Path, m: &Map) {
    let mut out = Vec::new();
    out.extend_from_slice(&(m.len() as u64).to_le_bytes());
    for (k, v) in m {
        out.extend_from_slice(&(k.len() as u32).to_le_bytes());
        out.extend_from_slice(k);
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(v);
    }
    std::fs::write(path, out).expect("write the model");
}

fn read_model(path: &Path) -> Map {
    let b = std::fs::read(path).expect("read the model");
    let mut at = 8;
    let bytes = |at: &mut usize| {
        let n = u32::from_le_bytes(b[*at..*at + 4].try_into().unwrap()) as usize;
        *at += 4 + n;
        b[*at - n..*at].to_vec()
    };
    let mut m = Map::new();
    for _ in 0..u64::from_le_bytes(b[..8].try_into().unwrap()) {
        let k = bytes(&mut at);
        let v = bytes(&mut at);
        m.insert(k, v);
    }
    assert_eq!(at, b.len(), "model file length");
    m
}

// ------------------------------------------------------------------------------------------
// The child

fn say(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{MARK}{line}").expect("stdout");
    out.flush().expect("stdout");
}

fn child(setup: Setup) {
    // Die with the parent: a writer must never outlive the test that kills it.
    // SAFETY: prctl(PR_SET_PDEATHSIG) only sets a flag of this process.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) };
    let spec: Vec<u64> = std::env::var(CHILD_ENV)
        .expect("child spec")
        .split(' ')
        .map(|s| s.parse().expect("child spec field"))
        .collect();
    let [seed, round, p_round, p_lo, p_hi] = spec[..] else {
        panic!("bad {CHILD_ENV}: {spec:?}");
    };
    let pending = (p_lo <= p_hi).then_some(Pending {
        round: p_round,
        lo: p_lo,
        hi: p_hi,
    });
    let work = PathBuf::from(std::env::var_os(DIR_ENV).expect("work directory"));

    say(format_args!("open {round}"));
    let opening = Instant::now();
    let db = Db::open(work.join("db"), setup.options())
        .unwrap_or_else(|e| panic!("child {round}: open: {e}"));
    say(format_args!(
        "opened {round} {}",
        opening.elapsed().as_micros()
    ));

    let mut model = read_model(&work.join("model.bin"));
    let got = common::dump(&db);
    let k = settle(&mut model, pending, seed, &got)
        .unwrap_or_else(|e| panic!("child {round}: recovered contents: {e}"));
    say(format_args!("recovered {round} {k}"));
    let report = db
        .check()
        .unwrap_or_else(|e| panic!("child {round}: check: {e}"));
    assert_eq!(
        report.keys,
        model.len() as u64,
        "child {round}: checked keys"
    );

    say(format_args!("writing {round}"));
    let mut rng = Rng::new(seed ^ round.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let start = Instant::now();
    let mut unsynced_left = 0;
    for n in 1.. {
        if unsynced_left == 0 && rng.chance(1, 8) {
            unsynced_left = rng.range(1, 6);
        }
        let b = batch(seed, round, n);
        if unsynced_left > 0 {
            db.write_with(b, Durability::None)
                .unwrap_or_else(|e| panic!("child {round}: batch {n}: {e}"));
        } else {
            db.write_with(b, Durability::Sync)
                .unwrap_or_else(|e| panic!("child {round}: batch {n}: {e}"));
        }
        let m = db.metrics();
        say(format_args!(
            "acked {round} {n} {} {}",
            m.engine.checkpoints, m.engine.cache.evictions
        ));
        if unsynced_left > 0 {
            unsynced_left -= 1;
            if unsynced_left == 0 {
                db.sync()
                    .unwrap_or_else(|e| panic!("child {round}: sync after {n}: {e}"));
                say(format_args!("synced {round} {n}"));
            }
        }
        if start.elapsed() > CHILD_LIFETIME {
            say(format_args!("abandoned {round}"));
            std::process::exit(3);
        }
    }
}

// ------------------------------------------------------------------------------------------
// The parent

/// When the parent kills the round's child.
#[derive(Clone, Copy, Debug)]
enum Plan {
    /// This long after the spawn.
    Delay(Duration),
    /// This long after the child says it is opening the database (aimed inside the open, at
    /// recovery, from how long the last open took).
    InOpen(Duration),
    /// This long after the child says it has opened the database.
    AfterOpen(Duration),
    /// As soon as this many batches are acknowledged.
    AfterAcks(u64),
}

/// How far a child got before it died.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Started,
    Opening,
    Verifying,
    Writing,
}

#[derive(Default)]
struct Stats {
    kills: u64,
    /// Kills by the phase the child was in: start-up, open, verification, writes.
    killed_in: [u64; 4],
    acked: u64,
    /// Settlements of an in-flight batch, and how many found it there.
    in_flight: u64,
    in_flight_found: u64,
    parent_opens: u64,
    child_checks: u64,
    /// Kills that left both log files with records (a background checkpoint in flight).
    checkpoint_in_flight: u64,
    /// The highest checkpoint sequence a child reported, and evictions summed over children.
    checkpoints: u64,
    evictions: u64,
}

struct Parent {
    setup: Setup,
    name: &'static str,
    seed: u64,
    work: Option<tempfile::TempDir>,
    rng: Rng,
    /// The contents after every batch known to be in the database.
    model: Map,
    pending: Option<Pending>,
    /// Some open has finished creating the database.
    created: bool,
    /// How long the last child's open took that finished.
    last_open: Duration,
    verbose: bool,
    stats: Stats,
}

impl Drop for Parent {
    /// A failing run leaves its directory behind for a look.
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Some(dir) = self.work.take() {
                eprintln!(
                    "kill {}: seed {:#x}: the database is kept at {}",
                    self.name,
                    self.seed,
                    dir.keep().display()
                );
            }
        }
    }
}

impl Parent {
    fn new(setup: Setup, name: &'static str, seed: u64) -> Parent {
        let work = tempfile::Builder::new()
            .prefix("strata-kill-")
            .tempdir()
            .expect("tempdir");
        Parent {
            setup,
            name,
            seed,
            work: Some(work),
            rng: Rng::new(seed ^ 0x6b69_6c6c),
            model: Map::new(),
            pending: None,
            created: false,
            last_open: Duration::from_millis(2),
            verbose: std::env::var_os(VERBOSE_ENV).is_some(),
            stats: Stats::default(),
        }
    }

    fn work(&self) -> &Path {
        self.work.as_ref().expect("work directory").path()
    }

    fn run(mut self, rounds: u64) {
        let started = Instant::now();
        for round in 0..rounds {
            if round > 0 && self.rng.chance(1, 2) {
                let close = self.rng.chance(1, 3);
                self.reopen(round, close);
            }
            let plan = self.plan();
            self.round(round, plan);
        }
        let db = self.reopen(rounds, false);
        let m = db.map(|db| db.metrics());
        let s = &self.stats;
        assert_eq!(
            s.kills, rounds,
            "seed {:#x}: every round ends in a kill",
            self.seed
        );
        assert!(
            s.acked > 0,
            "seed {:#x}: no batch was acknowledged",
            self.seed
        );
        if let Setup::BetreeTiny | Setup::Btree4k = self.setup {
            // The small setups exist to crash around checkpoints and evictions.
            if rounds >= 10 {
                assert!(
                    s.checkpoints > 1 && s.evictions > 0,
                    "seed {:#x}",
                    self.seed
                );
            }
        }
        eprintln!(
            "kill {}: seed {:#x}: {rounds} rounds, {} kills (start-up {}, open {}, \
             verification {}, writes {}; {} with a checkpoint in flight), {} batches acked, \
             batch in flight found {} of {} times, {} parent reopens, {} child checks, \
             {} checkpoints, {} evictions; at the end {} keys ({} KiB of keys and values), data {} KiB \
             ({} KiB referenced, {} KiB free, {} runs), log {} KiB; {:.1} s",
            self.name,
            self.seed,
            s.kills,
            s.killed_in[0],
            s.killed_in[1],
            s.killed_in[2],
            s.killed_in[3],
            s.checkpoint_in_flight,
            s.acked,
            s.in_flight_found,
            s.in_flight,
            s.parent_opens,
            s.child_checks,
            s.checkpoints,
            s.evictions,
            self.model.len(),
            self.model.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>() >> 10,
            m.as_ref().map_or(0, |m| m.data_file_bytes >> 10),
            m.as_ref().map_or(0, |m| m.engine.referenced_bytes >> 10),
            m.as_ref().map_or(0, |m| m.engine.free_bytes >> 10),
            m.as_ref().map_or(0, |m| m.engine.detail("runs")),
            m.as_ref().map_or(0, |m| m.wal_file_bytes >> 10),
            started.elapsed().as_secs_f64()
        );
    }

    fn plan(&mut self) -> Plan {
        let ms = |r: &mut Rng, lo, hi| Duration::from_millis(r.range(lo, hi));
        let open_us = self.last_open.as_micros() as u64 + 1;
        let r = &mut self.rng;
        match r.range(0, 100) {
            0..=4 => Plan::Delay(ms(r, 0, 5)),
            5..=19 => Plan::InOpen(Duration::from_micros(r.range(0, open_us))),
            20..=34 => Plan::AfterOpen(Duration::from_micros(r.range(0, 4000))),
            35..=69 => Plan::AfterAcks(r.range(1, 200)),
            _ => Plan::Delay(ms(r, 50, 800)),
        }
    }

    /// Apply what a settlement found: batches `lo..=k` of the pending round are in.
    fn settled(&mut self, k: u64) {
        if let Some(p) = self.pending.take() {
            self.stats.in_flight += 1;
            self.stats.in_flight_found += u64::from(k >= p.lo);
        }
    }

    /// Open the database in this process, settle and check it, then close it (a foreground
    /// checkpoint) or drop it (the log stays for the next recovery). The final reopen hands
    /// the database back open.
    fn reopen(&mut self, round: u64, close: bool) -> Option<Db> {
        self.stats.parent_opens += 1;
        let seed = self.seed;
        let opts = self.setup.options().create_if_missing(false);
        let db = match Db::open(self.work().join("db"), opts) {
            Ok(db) => db,
            // Cut short before its first superblock, or never started: the child makes it.
            Err(Error::NotADatabase { .. }) if !self.created => {
                assert!(self.model.is_empty() && self.pending.is_none());
                return None;
            }
            Err(e) => panic!("seed {seed:#x}: parent reopen before round {round}: {e}"),
        };
        self.created = true;
        let got = common::dump(&db);
        let k = settle(&mut self.model, self.pending, seed, &got)
            .unwrap_or_else(|e| panic!("seed {seed:#x}: parent reopen before round {round}: {e}"));
        self.settled(k);
        let report = db
            .check()
            .unwrap_or_else(|e| panic!("seed {seed:#x}: parent check before round {round}: {e}"));
        assert_eq!(
            report.keys,
            self.model.len() as u64,
            "seed {seed:#x}: checked keys"
        );
        if close {
            db.close()
                .unwrap_or_else(|e| panic!("seed {seed:#x}: close before round {round}: {e}"));
            return None;
        }
        Some(db)
    }

    fn round(&mut self, round: u64, plan: Plan) {
        let seed = self.seed;
        let work = self.work().to_path_buf();
        write_model(&work.join("model.bin"), &self.model);
        let p = self.pending.unwrap_or(Pending {
            round: 0,
            lo: 1,
            hi: 0,
        });
        let mut child = Command::new(std::env::current_exe().expect("current_exe"))
            .args(["--exact", self.name, "--include-ignored", "--nocapture"])
            .env(
                CHILD_ENV,
                format!("{seed} {round} {} {} {}", p.round, p.lo, p.hi),
            )
            .env(DIR_ENV, &work)
            .env("STRATA_PROFILE", work.join("no-such-profile.json"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the writer");
        let spawned = Instant::now();
        let (tx, rx) = mpsc::channel();
        let stdout = child.stdout.take().expect("stdout");
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                if tx.send(line.expect("child stdout")).is_err() {
                    return;
                }
            }
        });
        let mut stderr = child.stderr.take().expect("stderr");
        let err_reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });

        let mut seen = Seen {
            round,
            phase: Phase::Started,
            acked: 0,
            recovered: None,
            evictions: 0,
            other: Vec::new(),
            open_took: None,
        };
        let mut deadline = match plan {
            Plan::Delay(d) => spawned + d,
            _ => spawned + ROUND_LIMIT,
        };
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    let was = seen.phase;
                    seen.line(line, &mut self.stats);
                    match plan {
                        Plan::InOpen(d) if was < Phase::Opening && seen.phase >= Phase::Opening => {
                            deadline = Instant::now() + d;
                        }
                        Plan::AfterOpen(d)
                            if was < Phase::Verifying && seen.phase >= Phase::Verifying =>
                        {
                            deadline = Instant::now() + d;
                        }
                        Plan::AfterAcks(n) if seen.acked >= n => break,
                        _ => {}
                    }
                }
                Err(RecvTimeoutError::Timeout) => break,
                // The child ended by itself: its status says how, below.
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        let _ = child.kill();
        let status = child.wait().expect("wait for the writer");
        // Whatever it printed before it died counts: those batches were acknowledged, and the
        // last line says how far it got.
        for line in rx.iter() {
            seen.line(line, &mut self.stats);
        }
        let killed_in = seen.phase;
        reader.join().expect("stdout reader");
        let err = err_reader.join().expect("stderr reader");
        // A child that failed an assertion just before the kill landed is still a failure.
        if status.signal() != Some(libc::SIGKILL) || err.contains("panicked") {
            panic!(
                "seed {seed:#x}: round {round}: the writer failed ({status}) in phase {:?}\n\
                 --- its stdout:\n{}\n--- its stderr:\n{err}",
                seen.phase,
                seen.other.join("\n")
            );
        }
        self.stats.kills += 1;
        // Both log files hold records only between a rotation and the end of the background
        // checkpoint that made it: the kill caught that checkpoint in flight.
        let log_len =
            |name: &str| std::fs::metadata(work.join("db").join(name)).map_or(0, |m| m.len());
        if log_len("strata.wal") > 0 && log_len("strata.wal.1") > 0 {
            self.stats.checkpoint_in_flight += 1;
        }
        self.stats.killed_in[killed_in as usize] += 1;
        self.stats.evictions += seen.evictions;
        self.stats.acked += seen.acked;
        if let Some(took) = seen.open_took {
            self.last_open = took;
        }
        if self.verbose {
            eprintln!(
                "kill {}: round {round}: {plan:?}: killed after {:.1} ms while {killed_in:?}, \
                 open took {:?}, settled {:?} of {:?}, {} acked",
                self.name,
                spawned.elapsed().as_secs_f64() * 1e3,
                seen.open_took,
                seen.recovered,
                self.pending,
                seen.acked
            );
        }

        if seen.phase >= Phase::Verifying {
            self.created = true;
        }
        if let Some(k) = seen.recovered {
            // The child settled the in-flight batch against the same model; follow it.
            if let Some(p) = self.pending {
                assert!(
                    k + 1 >= p.lo && k <= p.hi,
                    "seed {seed:#x}: settled at {k}, {p:?}"
                );
                for n in p.lo..=k {
                    apply(&mut self.model, &batch(seed, p.round, n));
                }
            }
            self.settled(k);
        }
        if seen.phase == Phase::Writing {
            assert!(
                seen.recovered.is_some(),
                "a child writes only after settling"
            );
            for n in 1..=seen.acked {
                apply(&mut self.model, &batch(seed, round, n));
            }
            self.pending = Some(Pending {
                round,
                lo: seen.acked + 1,
                hi: seen.acked + 1,
            });
        }
    }
}

/// What the parent learnt from one child's lines.
struct Seen {
    round: u64,
    phase: Phase,
    acked: u64,
    /// The last pending batch the child found in the database, once it settled.
    recovered: Option<u64>,
    /// The child's evictions since its open, as of its last ack.
    evictions: u64,
    /// Lines that are not the protocol's (libtest's, a panic's), for a failure message.
    other: Vec<String>,
    /// How long the child's open took, by its own clock.
    open_took: Option<Duration>,
}

impl Seen {
    fn line(&mut self, line: String, stats: &mut Stats) {
        let Some(at) = line.find(MARK) else {
            self.other.push(line);
            return;
        };
        let f: Vec<&str> = line[at + MARK.len()..].split(' ').collect();
        let num = |i: usize| -> u64 { f[i].parse().expect("protocol number") };
        assert_eq!(num(1), self.round, "protocol line of another round: {line}");
        match f[0] {
            "open" => self.phase = Phase::Opening,
            "opened" => {
                self.open_took = Some(Duration::from_micros(num(2)));
                self.phase = Phase::Verifying;
            }
            "recovered" => self.recovered = Some(num(2)),
            "writing" => {
                stats.child_checks += 1;
                self.phase = Phase::Writing;
            }
            "acked" => {
                assert_eq!(num(2), self.acked + 1, "acks in order: {line}");
                self.acked = num(2);
                stats.checkpoints = stats.checkpoints.max(num(3));
                self.evictions = num(4);
            }
            "synced" | "abandoned" => {}
            _ => panic!("unknown protocol line {line}"),
        }
    }
}

fn env_u64(name: &str) -> Option<u64> {
    let s = std::env::var(name).ok()?;
    let s = s.trim();
    let parsed = match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    Some(parsed.unwrap_or_else(|_| panic!("{name}={s} is not a number")))
}

fn random_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64;
    Rng::new(t ^ (u64::from(std::process::id()) << 32)).next_u64()
}
