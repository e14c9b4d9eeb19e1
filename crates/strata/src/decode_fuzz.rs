//! Property tests for every decoder of bytes strata reads back: Bε-tree node heads (runs and
//! their Bloom filters included), segments, basements and whole Bε-tree extents; B+-tree leaf
//! and internal payloads; blocks, superblocks and the translation table; both engines'
//! metadata; write batches (the log's payload) and the log itself through `Db::open_in`; the
//! device profile's JSON.
//!
//! Inputs are valid encodings made by the real encoders (so that damage reaches deep into a
//! decoder), damaged: bit flips, bytes overwritten, 2-, 4- and 8-byte fields set to huge or
//! boundary values, cut short, extended with garbage, with a range taken out; and pure random
//! bytes. Where a checksum guards the bytes, some inputs have it recomputed after the damage
//! (as a bug or a forger would), or the decoder behind it would never see them. Each decoder
//! gets a deterministic sweep over its smallest seeds (every truncation, every bit flip, every
//! field of every width set to its extremes) and a proptest run; the counts are printed.
//!
//! For each input the decoder must return (a panic fails the test); an error must name what
//! is wrong, and a `Corruption` the file and offset it was given; what it accepts must keep
//! the invariants its module states and re-encode to the same thing; and no single allocation
//! it makes may exceed `bound`, so that no count or length field can make it reserve more than
//! its input accounts for.
//!
//! Why a unit-test module: the decoders are crate-private. The allocation check needs a
//! counting `#[global_allocator]`, and one declared here serves the whole unit-test binary; it
//! therefore counts per thread and only while a test has armed it (`largest_alloc`), so the
//! other unit tests, running on other threads, are neither measured nor disturbed (they pay
//! one thread-local read per allocation). Requests of 1 GiB and more are mapped with
//! `MAP_NORESERVE`, so that a decoder reserving gigabytes from a corrupt count fails its
//! assertion here, with a shrunk input, instead of aborting the whole binary.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::BTreeSet;
use std::ops::Bound;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use xxhash_rust::xxh3::xxh3_64;

use crate::engine::Engine;
use crate::engines::betree::basement::Basement;
use crate::engines::betree::node::{Block as BeNode, Part, RunRef};
use crate::engines::betree::{BeTree, Geometry, Origin};
use crate::engines::btree::node::Node as BNode;
use crate::engines::btree::BTree;
use crate::error::Error;
use crate::kv::msg::{Encoding, Msg, Segment};
use crate::kv::Val;
use crate::kv::{AddU64, MergeOperator};
use crate::kv::{Op, WriteBatch};
use crate::profile::DeviceProfile;
use crate::storage::alloc::Extent;
use crate::storage::block::{self, BLOCK_HEADER};
use crate::storage::pager::{decode_superblock, read_table, Checkpoint, DATA_START};
use crate::storage::{Device, Pager, SimDevice, SimDisk, SimEnv};
use crate::{Db, Durability, Options};

// ------------------------------------------------------------------------------------------
// The counting allocator

struct Counting;

#[global_allocator]
static COUNTING: Counting = Counting;

thread_local! {
    /// Whether this thread's allocations are measured now, and the largest one since armed.
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

/// Requests from this size on are mapped without reserving memory: a decoder that asks for
/// gigabytes gets address space it never touches, and its test fails on the recorded size.
const HUGE: usize = 1 << 30;

fn note(size: usize) {
    let _ = ARMED.try_with(|armed| {
        if armed.get() {
            let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
        }
    });
}

fn mapped(l: Layout) -> bool {
    l.size() >= HUGE && l.align() <= 4096
}

unsafe fn map(size: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping aliases nothing.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        p.cast()
    }
}

impl Counting {
    unsafe fn alloc_uncounted(&self, l: Layout, zeroed: bool) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc`'s contract; mappings come zeroed.
        unsafe {
            match (mapped(l), zeroed) {
                (true, _) => map(l.size()),
                (false, true) => System.alloc_zeroed(l),
                (false, false) => System.alloc(l),
            }
        }
    }
}

// SAFETY: every request is served by `System` or by a fresh mapping of its size, and each is
// returned to where it came from, told apart by its layout.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note(l.size());
        unsafe { self.alloc_uncounted(l, false) }
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        note(l.size());
        unsafe { self.alloc_uncounted(l, true) }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from `alloc` with this layout, which says where it came from.
        unsafe {
            if mapped(l) {
                libc::munmap(p.cast(), l.size());
            } else {
                System.dealloc(p, l);
            }
        }
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        unsafe {
            let new = Layout::from_size_align_unchecked(new_size, l.align());
            if !mapped(l) && !mapped(new) {
                return System.realloc(p, l, new_size);
            }
            // Between the two sources: by hand.
            let q = self.alloc_uncounted(new, false);
            if !q.is_null() {
                std::ptr::copy_nonoverlapping(p, q, l.size().min(new_size));
                self.dealloc(p, l);
            }
            q
        }
    }
}

/// Run `f` and return what it returned with the largest single allocation it made on this
/// thread.
fn largest_alloc<R>(f: impl FnOnce() -> R) -> (R, usize) {
    struct Disarm;
    impl Drop for Disarm {
        fn drop(&mut self) {
            ARMED.with(|a| a.set(false));
        }
    }
    LARGEST.with(|l| l.set(0));
    ARMED.with(|a| a.set(true));
    let disarm = Disarm;
    let r = f();
    drop(disarm);
    (r, LARGEST.with(|l| l.get()))
}

/// Fixed costs that do not grow with the input: error messages, a hash table's first buckets,
/// a cache's bookkeeping.
const SLACK: usize = 64 << 10;

/// The largest single allocation allowed for `n` input bytes to a decoder that turns every
/// `min_len` encoded bytes into at most one `item`-byte element: an array of those elements
/// (reserved for exactly as many as the input can hold), or a copy of the input (twice, for a
/// buffer that grows by doubling), plus `SLACK`.
///
/// Not a flat 2n: decoded elements are wider than their encoding (a message is a `Msg` of
/// about 60 bytes for as few as 11 encoded, an operation an `Op` of 48 for 2), so an honest
/// decoder's arrays reach a few times its input. What the bound rules out is an array sized
/// by a count the input cannot back: a count of u32::MAX asks for gigabytes.
fn bound(n: usize, item: usize, min_len: usize) -> usize {
    (2 * n).max(item * (n / min_len + 1)) + SLACK
}

fn assert_alloc(what: &str, n: usize, largest: usize, bound: usize) {
    assert!(
        largest <= bound,
        "{what}: one allocation of {largest} bytes for {n} input bytes (bound {bound})"
    );
}

// ------------------------------------------------------------------------------------------
// Damage

#[derive(Clone, Debug)]
enum Mutation {
    Flip(usize, u8),
    Set(usize, u8),
    /// A little-endian field (at, width in bytes, value): huge lengths and counts.
    Field(usize, usize, u64),
    Truncate(usize),
    Extend(Vec<u8>),
    /// Take out `len` bytes at `at`.
    Remove(usize, usize),
}

impl Mutation {
    fn apply(&self, b: &mut Vec<u8>) {
        let len = b.len();
        match *self {
            Mutation::Flip(at, bit) if len > 0 => b[at % len] ^= 1 << (bit % 8),
            Mutation::Set(at, v) if len > 0 => b[at % len] = v,
            Mutation::Field(at, w, v) if len >= w => {
                let i = at % (len - w + 1);
                b[i..i + w].copy_from_slice(&v.to_le_bytes()[..w]);
            }
            Mutation::Truncate(n) => b.truncate(n % (len + 1)),
            Mutation::Extend(ref g) => b.extend_from_slice(g),
            Mutation::Remove(at, n) if len > 0 => {
                let i = at % len;
                b.drain(i..(i + n).min(len));
            }
            _ => {}
        }
    }
}

fn field_value() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(u64::MAX),
        Just(u32::MAX as u64),
        Just(u16::MAX as u64),
        Just(0u64),
        Just(1u64 << 31),
        0u64..70_000,
        // Lengths just too short for what they should hold.
        1u64..32,
        any::<u64>(),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<usize>(), any::<u8>()).prop_map(|(a, b)| Mutation::Flip(a, b)),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(a, b)| Mutation::Set(a, b)),
        3 => (any::<usize>(), prop_oneof![Just(2usize), Just(4), Just(8)], field_value())
            .prop_map(|(a, w, v)| Mutation::Field(a, w, v)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
        1 => prop::collection::vec(any::<u8>(), 1..64).prop_map(Mutation::Extend),
        1 => (any::<usize>(), 1usize..32).prop_map(|(a, n)| Mutation::Remove(a, n)),
    ]
}

/// One of `seeds`, damaged one to four times (mostly), or random bytes.
fn damaged(seeds: &'static [Vec<u8>]) -> impl Strategy<Value = Vec<u8>> {
    assert!(!seeds.is_empty());
    let from_seed =
        (0..seeds.len(), prop::collection::vec(mutation(), 1..5)).prop_map(move |(i, ms)| {
            let mut b = seeds[i].clone();
            ms.iter().for_each(|m| m.apply(&mut b));
            b
        });
    prop_oneof![
        6 => from_seed,
        1 => prop::collection::vec(any::<u8>(), 0..700),
    ]
}

/// Every truncation, every bit flip (of the first 2 KiB), every 1-, 2-, 4- and 8-byte field set
/// to 0, 1 and its maximum, and garbage appended: `check` each, and return how many.
fn sweep(seed: &[u8], mut check: impl FnMut(&[u8])) -> usize {
    let mut n = 0;
    let mut run = |b: &[u8]| {
        check(b);
        n += 1;
    };
    for len in 0..seed.len() {
        run(&seed[..len]);
    }
    let mut b = seed.to_vec();
    for i in 0..seed.len().min(2048) {
        for bit in 0..8 {
            b[i] ^= 1 << bit;
            run(&b);
            b[i] ^= 1 << bit;
        }
    }
    for w in [1usize, 2, 4, 8] {
        for i in 0..=seed.len().saturating_sub(w) {
            for v in [0u64, 1, u64::MAX >> (64 - 8 * w)] {
                b[i..i + w].copy_from_slice(&v.to_le_bytes()[..w]);
                run(&b);
                b[i..i + w].copy_from_slice(&seed[i..i + w]);
            }
        }
    }
    for tail in [&[0u8][..], &[0xff; 7], &[0; 64], &[0x5a; 300]] {
        let mut long = seed.to_vec();
        long.extend_from_slice(tail);
        run(&long);
    }
    n
}

/// Run `check` on `input`, and if it panics, say on what input.
fn guarded(what: &str, input: &[u8], check: impl FnOnce(&[u8])) {
    if let Err(e) = catch_unwind(AssertUnwindSafe(|| check(input))) {
        let shown = &input[..input.len().min(256)];
        eprintln!(
            "{what}: failed on {} bytes: {shown:02x?}{}",
            input.len(),
            if input.len() > 256 { " ..." } else { "" }
        );
        resume_unwind(e);
    }
}

fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 2048,
        ..Config::default()
    }
}

/// Run `check` on `cases` inputs from `strategy`; panics (with the shrunk input) on a failure.
fn prop<T: std::fmt::Debug>(
    what: &str,
    cases: u32,
    strategy: impl Strategy<Value = T>,
    check: impl Fn(&T),
) {
    let mut runner = TestRunner::new(config(cases));
    if let Err(e) = runner.run(&strategy, |input| {
        check(&input);
        Ok(())
    }) {
        panic!("{what}: {e}");
    }
}

/// Sweep the smallest `sweep_seeds` of `seeds`, then check `cases` proptest inputs damaged
/// from them (or random), and print the counts.
fn fuzz(what: &str, seeds: &'static [Vec<u8>], sweep_seeds: usize, cases: u32, check: fn(&[u8])) {
    let mut swept = 0;
    // The smallest seeds that are not trivially small.
    let mut by_len: Vec<&Vec<u8>> = seeds.iter().filter(|s| s.len() >= 48).collect();
    if by_len.is_empty() {
        by_len = seeds.iter().collect();
    }
    by_len.sort_by_key(|s| s.len());
    for seed in by_len.into_iter().take(sweep_seeds) {
        swept += sweep(seed, |b| guarded(what, b, check));
    }
    prop(what, cases, damaged(seeds), |b: &Vec<u8>| check(b));
    eprintln!("{what}: {swept} swept + {cases} proptest inputs");
}

fn assert_corruption(e: &Error, file: &str, offset: Option<u64>) {
    match e {
        Error::Corruption {
            file: f,
            offset: o,
            what,
        } => {
            assert_eq!(f, file, "{e}");
            assert!(!what.is_empty(), "{e}");
            if let Some(want) = offset {
                assert_eq!(*o, want, "{e}");
            }
        }
        other => panic!("expected corruption in {file}, got {other:?}"),
    }
}

// ------------------------------------------------------------------------------------------
// Seeds: real encodings

struct Corpus {
    btree_file: Vec<u8>,
    betree_file: Vec<u8>,
    /// Keys the files hold, to look up.
    keys: Vec<Vec<u8>>,
    btree_meta: Vec<u8>,
    betree_meta: Vec<u8>,
    /// B+-tree payloads as kind byte + payload; Bε-tree heads likewise.
    btree_nodes: Vec<Vec<u8>>,
    betree_heads: Vec<Vec<u8>>,
    /// Whole extents of Bε-tree nodes, and of every block of both files with its owner id
    /// (8 bytes, then the extent).
    betree_extents: Vec<Vec<u8>>,
    blocks: Vec<Vec<u8>>,
    /// Segments and basements as a tree writes them (shaped).
    segments: Vec<Vec<u8>>,
    /// The same segments in the compact and fixed encodings that older internal nodes and runs
    /// hold, and the basements in the compact one of older leaves.
    compact_segments: Vec<Vec<u8>>,
    fixed_segments: Vec<Vec<u8>>,
    basements: Vec<Vec<u8>>,
    compact_basements: Vec<Vec<u8>>,
    superblocks: Vec<Vec<u8>>,
    batches: Vec<Vec<u8>>,
}

fn sim_device() -> Arc<SimDevice> {
    Arc::new(SimDevice::new(
        "strata.data",
        SimDisk::new(Default::default(), 0.0),
    ))
}

/// A device holding `bytes` (unsynced: reads see them all the same).
fn device_with(bytes: &[u8]) -> Arc<SimDevice> {
    let dev = sim_device();
    dev.write_at(bytes, 0).unwrap();
    dev
}

fn merge() -> Option<Arc<dyn MergeOperator>> {
    Some(Arc::new(AddU64))
}

fn key(i: u32) -> Vec<u8> {
    format!("key{:05}", i * 7 % 1000).into_bytes()
}

/// Puts (some values large enough for a blob), upserts, deletes and range deletes.
fn populate(t: &mut dyn Engine, n: u32) {
    for i in 0..n {
        let v = vec![b'a' + (i % 26) as u8; if i % 37 == 0 { 2000 } else { i as usize % 90 }];
        t.put(&key(i), &v).unwrap();
        if i % 11 == 0 {
            t.upsert(&key(i / 2), &(i as u64).to_le_bytes()).unwrap();
        }
        if i % 13 == 0 {
            t.delete(&key(i / 3)).unwrap();
        }
        if i % 150 == 149 {
            t.delete_range(&key(i / 4), &key(i / 4 + 2)).unwrap();
        }
        t.settle().unwrap();
    }
}

fn corpus() -> &'static Corpus {
    static CORPUS: OnceLock<Corpus> = OnceLock::new();
    CORPUS.get_or_init(build_corpus)
}

fn build_corpus() -> Corpus {
    let bdev = sim_device();
    let mut bt = BTree::create(Pager::create(bdev.clone()), 4096, 1 << 20, merge()).unwrap();
    populate(&mut bt, 600);
    bt.checkpoint(1).unwrap();
    drop(bt);

    let edev = sim_device();
    let geo = Geometry {
        node_size: 16 << 10,
        fanout: 4,
        basement: 1024,
    };
    let mut be = BeTree::create(
        Pager::create(edev.clone()),
        geo,
        Origin::Explicit,
        48 << 10,
        merge(),
    )
    .unwrap();
    populate(&mut be, 3000);
    let stats = be.stats();
    assert!(
        stats.detail("runs") > 0 && stats.detail("buffered_messages") > 0 && stats.height > 2,
        "the Bε-tree seed should have runs, buffered messages and some height: {stats:?}"
    );
    be.checkpoint(1).unwrap();
    drop(be);

    let mut c = Corpus {
        btree_file: bdev.contents(),
        betree_file: edev.contents(),
        keys: (0..1000)
            .map(key)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect(),
        btree_meta: Vec::new(),
        betree_meta: Vec::new(),
        btree_nodes: Vec::new(),
        betree_heads: Vec::new(),
        betree_extents: Vec::new(),
        blocks: Vec::new(),
        segments: Vec::new(),
        compact_segments: Vec::new(),
        fixed_segments: Vec::new(),
        basements: Vec::new(),
        compact_basements: Vec::new(),
        superblocks: Vec::new(),
        batches: Vec::new(),
    };
    for (dev, is_betree) in [(bdev, false), (edev, true)] {
        let file = dev.contents();
        for slot in [0usize, 4096] {
            c.superblocks.push(file[slot..slot + 4096].to_vec());
        }
        let (pager, cp) = Pager::open(dev).unwrap();
        if is_betree {
            c.betree_meta = cp.engine_meta;
        } else {
            c.btree_meta = cp.engine_meta;
        }
        for id in pager.ids() {
            let ext = pager.extent(id).unwrap();
            let whole = pager.read_part(id, 0, ext.len as usize).unwrap();
            let (k, head) = block::open(&whole, id, "strata.data", ext.offset).unwrap();
            let mut owned = id.to_le_bytes().to_vec();
            owned.extend_from_slice(&whole);
            c.blocks.push(owned);
            let mut tagged = vec![k];
            tagged.extend_from_slice(head);
            if !is_betree {
                c.btree_nodes.push(tagged);
                continue;
            }
            if k == block::kind::BLOB {
                continue;
            }
            c.betree_heads.push(tagged);
            c.betree_extents.push(whole.clone());
            let node = BeNode::decode_head(k, head).unwrap();
            for i in 0..node.parts() {
                let loc = node.loc(i).unwrap();
                let part = whole[loc.off as usize..(loc.off + loc.len) as usize].to_vec();
                match node {
                    BeNode::Leaf(_) => c.basements.push(part),
                    _ => c.segments.push(part),
                }
            }
        }
    }
    let mut b = WriteBatch::new();
    c.batches.push(b.encode());
    b.put(b"k", b"v")
        .delete(b"gone")
        .upsert(b"n", 7u64.to_le_bytes());
    c.batches.push(b.encode());
    b.delete_range(b"a", b"c").put(b"", vec![9u8; 300]);
    c.batches.push(b.encode());
    b.put(vec![b'x'; crate::MAX_KEY_LEN], b"at the key limit");
    c.batches.push(b.encode());
    // The first encoding (u32 lengths), which logs written before hold.
    c.batches.push(b.encode_first());
    // Kept to a few dozen of each kind, spread over their sizes.
    for v in [
        &mut c.btree_nodes,
        &mut c.betree_heads,
        &mut c.betree_extents,
        &mut c.blocks,
        &mut c.segments,
        &mut c.basements,
    ] {
        v.sort_by_key(|s| s.len());
        v.dedup();
        let step = v.len().div_ceil(40).max(1);
        *v = v.iter().step_by(step).cloned().collect();
    }
    for s in &c.segments {
        let seg = Segment::decode(s, Encoding::Shaped).unwrap();
        for (enc, out) in [
            (Encoding::Fixed, &mut c.fixed_segments),
            (Encoding::Compact, &mut c.compact_segments),
        ] {
            let mut bytes = Vec::new();
            seg.encode_in(enc, &mut bytes);
            out.push(bytes);
        }
    }
    for b in &c.basements {
        let mut compact = Vec::new();
        Basement::decode(b, Encoding::Shaped)
            .unwrap()
            .encode(&mut compact);
        c.compact_basements.push(compact);
    }
    c
}

macro_rules! seeds {
    ($field:ident) => {{
        static S: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
        S.get_or_init(|| corpus().$field.clone()).as_slice()
    }};
}

// ------------------------------------------------------------------------------------------
// Reseal: recompute a checksum after damage, so that the decoder behind it sees the damage

/// Recompute the checksum of the block at the start of `b`, if its header is whole.
fn reseal_block(b: &mut [u8]) {
    if b.len() < BLOCK_HEADER {
        return;
    }
    let end = BLOCK_HEADER + block::declared_len(b);
    if end <= b.len() {
        let sum = xxh3_64(&b[8..end]);
        b[..8].copy_from_slice(&sum.to_le_bytes());
    }
}

/// Recompute the partition checksums in a Bε-tree node's head, then the head's own.
fn reseal_node(b: &mut [u8]) {
    if b.len() < BLOCK_HEADER || BLOCK_HEADER + block::declared_len(b) > b.len() {
        return;
    }
    let head = &b[BLOCK_HEADER..BLOCK_HEADER + block::declared_len(b)];
    if let Ok(node) = BeNode::decode_head(b[20], head) {
        // Directory entries: offset, length, xxh3, count (after the child's id in an
        // internal node's head).
        let (entry, at_sum) = if matches!(node, BeNode::Internal(_)) {
            (28, 16)
        } else {
            (20, 8)
        };
        for i in 0..node.parts() {
            let loc = node.loc(i).unwrap();
            let (off, end) = (loc.off as usize, loc.off as usize + loc.len as usize);
            if end <= b.len() {
                let sum = xxh3_64(&b[off..end]);
                let at = BLOCK_HEADER + 4 + entry * i + at_sum;
                b[at..at + 8].copy_from_slice(&sum.to_le_bytes());
            }
        }
    }
    reseal_block(b);
}

fn reseal_superblock(b: &mut [u8]) {
    if b.len() < 64 {
        return;
    }
    let body = u32::from_le_bytes(b[16..20].try_into().unwrap()) as usize;
    if 16 + body <= b.len() {
        let sum = xxh3_64(&b[16..16 + body]);
        b[8..16].copy_from_slice(&sum.to_le_bytes());
    }
}

/// `damaged`, with its checksums recomputed by `reseal` on four inputs in five.
fn resealed(seeds: &'static [Vec<u8>], reseal: fn(&mut [u8])) -> impl Strategy<Value = Vec<u8>> {
    (damaged(seeds), 0..5u8).prop_map(move |(mut b, r)| {
        if r > 0 {
            reseal(&mut b);
        }
        b
    })
}

// ------------------------------------------------------------------------------------------
// The decoders' checks

fn check_segment(input: &[u8]) {
    check_segment_in(input, Encoding::Shaped)
}

fn check_compact_segment(input: &[u8]) {
    check_segment_in(input, Encoding::Compact)
}

fn check_fixed_segment(input: &[u8]) {
    check_segment_in(input, Encoding::Fixed)
}

fn check_segment_in(input: &[u8], enc: Encoding) {
    let (res, largest) = largest_alloc(|| Segment::decode(input, enc));
    let n = input.len();
    // A compact message takes as few as 3 bytes (tag, sequence, key length), a fixed one 11,
    // one of a shape 1 (a sequence number, with an empty key and value).
    let min = match enc {
        Encoding::Compact => 3,
        Encoding::Fixed => 11,
        Encoding::Shaped => 1,
    };
    assert_alloc("segment", n, largest, bound(n, size_of::<Msg>(), min));
    match res {
        Ok(s) => {
            let points = s.points();
            assert!(points
                .windows(2)
                .all(|w| (&w[0].key, w[0].seq) < (&w[1].key, w[1].seq)));
            assert!(points.iter().all(|m| !m.is_range()));
            assert!(s.ranges().iter().all(Msg::is_range));
            for m in points {
                assert!(s.lookup(&m.key).any(|x| x == m), "lookup misses {m:?}");
                // A point query searches the raw bytes instead: the same answer.
                let want: Vec<Msg> = s.lookup(&m.key).cloned().collect();
                let raw = crate::kv::msg::RawSegment::new(input, enc).expect("it decodes");
                assert_eq!(raw.lookup(&m.key), Ok(want.clone()), "raw lookup of {m:?}");
                // And a one-time walk of the bytes (a run's chunk read for one query).
                let walked = crate::kv::msg::lookup_encoded(input, &m.key, enc);
                assert_eq!(walked, Ok(want), "walk of {m:?}");
            }
            let mut out = Vec::new();
            s.encode_in(enc, &mut out);
            assert_eq!(out, input, "re-encoded differently");
            // Whatever it was read from, its accounting is the compact encoding's.
            let mut compact = Vec::new();
            s.encode(&mut compact);
            assert_eq!(s.bytes(), compact.len());
        }
        Err(what) => {
            assert!(!what.is_empty());
            // Indexing or searching bytes that do not decode may fail, but says why and never
            // panics.
            let key = input.get(..8).unwrap_or(input);
            if let Err(what) = crate::kv::msg::lookup_encoded(input, key, enc) {
                assert!(!what.is_empty());
            }
            match crate::kv::msg::RawSegment::new(input, enc) {
                Ok(raw) => {
                    if let Err(what) = raw.lookup(key) {
                        assert!(!what.is_empty());
                    }
                }
                Err(what) => assert!(!what.is_empty()),
            }
        }
    }
}

/// A basement of the shaped kind: the same entries as read compact, written back the same.
fn check_basement(input: &[u8]) {
    check_basement_in(input, Encoding::Shaped)
}

fn check_compact_basement(input: &[u8]) {
    check_basement_fixed(input);
    check_basement_in(input, Encoding::Compact)
}

fn check_basement_in(input: &[u8], enc: Encoding) {
    let (res, largest) = largest_alloc(|| Basement::decode(input, enc));
    let n = input.len();
    // Its entries' bytes in one copy (shaped: with their lengths, 2 to 4 bytes more an entry
    // than read), and an 8-byte head per entry of 2 bytes or more (shaped: 1).
    let min = if enc == Encoding::Shaped { 1 } else { 2 };
    assert_alloc("basement", n, largest, bound(n, 8, min));
    match res {
        Ok(b) => {
            for i in 0..b.len() {
                if i > 0 {
                    assert!(b.key(i - 1) < b.key(i));
                }
                assert_eq!(b.search(b.key(i)), Ok(i));
                let _ = b.val(i).logical_len();
            }
            let out = if enc == Encoding::Shaped {
                let (mut out, body) = b.shaped();
                out.extend_from_slice(&body.bytes());
                out
            } else {
                assert_eq!(b.encoded_len(), n);
                let mut out = Vec::new();
                b.encode(&mut out);
                out
            };
            assert_eq!(out, input, "re-encoded differently");
        }
        Err(what) => assert!(!what.is_empty()),
    }
}

/// The same bytes read as a basement of the older, fixed encoding: re-encoded compact, the
/// same entries come back.
fn check_basement_fixed(input: &[u8]) {
    let (res, largest) = largest_alloc(|| Basement::decode(input, Encoding::Fixed));
    let n = input.len();
    // Read as a B+-tree leaf's entries are (a key and a value slot per entry of 7 bytes or
    // more), then re-encoded, no longer than they were.
    let item = size_of::<Vec<u8>>().max(size_of::<Val>());
    assert_alloc("fixed basement", n, largest, bound(n, item, 7));
    match res {
        Ok(b) => {
            let mut out = Vec::new();
            b.encode(&mut out);
            assert!(out.len() <= n);
            assert_eq!(Basement::decode(&out, Encoding::Compact), Ok(b));
        }
        Err(what) => assert!(!what.is_empty()),
    }
}

/// Input: a kind byte, then the payload.
fn check_btree_node(input: &[u8]) {
    let Some((&kind, p)) = input.split_first() else {
        return;
    };
    let (res, largest) = largest_alloc(|| BNode::decode(kind, p));
    let item = size_of::<Vec<u8>>().max(size_of::<Val>());
    assert_alloc("B+-tree node", p.len(), largest, bound(p.len(), item, 7));
    match res {
        Ok(node) => {
            let (keys, bytes) = match &node {
                BNode::Leaf(l) => (&l.keys, l.bytes),
                BNode::Internal(i) => {
                    assert_eq!(i.children.len(), i.keys.len() + 1);
                    (&i.keys, i.bytes)
                }
            };
            let keys: Vec<&[u8]> = keys.iter().collect();
            assert!(
                keys.windows(2).all(|w| w[0] < w[1]),
                "keys out of order accepted"
            );
            assert_eq!(bytes, p.len());
            let mut out = Vec::new();
            assert_eq!(node.encode(&mut out), kind);
            assert_eq!(out, p, "re-encoded differently");
        }
        Err(what) => assert!(!what.is_empty()),
    }
}

fn head_item() -> usize {
    size_of::<Part<Segment>>()
        .max(size_of::<Part<Basement>>())
        .max(size_of::<RunRef>())
        .max(size_of::<Vec<u8>>() + 8)
}

/// The invariants of a decoded Bε-tree head, and that it encodes to a head that decodes the
/// same.
fn check_head_invariants(node: &BeNode) {
    let parts = node.parts();
    assert!(parts > 0);
    let pivots = match node {
        BeNode::Internal(n) => {
            assert_eq!(n.children.len(), parts);
            assert_eq!(n.runs.len(), parts);
            for r in n.runs.iter().flatten() {
                let _ = r.filter.may_hold(b"probe");
            }
            &n.pivots
        }
        BeNode::Leaf(l) => &l.pivots,
        BeNode::Run(r) => &r.pivots,
    };
    assert_eq!(pivots.len(), parts - 1);
    let p: Vec<&[u8]> = pivots.iter().collect();
    assert!(p.windows(2).all(|w| w[0] < w[1]), "pivots out of order");
    let mut out = Vec::new();
    let k = node.encode_head(&mut out);
    let mut again = Vec::new();
    BeNode::decode_head(k, &out)
        .unwrap()
        .encode_head(&mut again);
    assert_eq!(out, again, "the head re-encodes differently");
}

/// Input: a kind byte, then the head.
fn check_betree_head(input: &[u8]) {
    let Some((&kind, p)) = input.split_first() else {
        return;
    };
    let (res, largest) = largest_alloc(|| BeNode::decode_head(kind, p));
    assert_alloc(
        "Bε-tree head",
        p.len(),
        largest,
        bound(p.len(), head_item(), 20),
    );
    match res {
        Ok(node) => check_head_invariants(&node),
        Err(what) => assert!(!what.is_empty()),
    }
}

/// A whole Bε-tree extent: the block, its head, and every partition installed from it.
fn check_betree_extent(input: &[u8]) {
    static PAGER: OnceLock<Pager> = OnceLock::new();
    let pager = PAGER.get_or_init(|| Pager::create(sim_device()));
    // The owner is the one the block names: a wrong owner is `check_block`'s to try.
    let owner = input
        .get(8..16)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap()));
    let (res, largest) = largest_alloc(|| {
        let (k, head) = block::open(input, owner, "strata.data", 0)?;
        let mut node = BeNode::decode_head(k, head)
            .map_err(|what| Error::corruption("strata.data", 0, what))?;
        node.install_from(pager, owner, input, true)?;
        Ok::<_, Error>(node)
    });
    let n = input.len();
    let item = size_of::<Msg>().max(head_item());
    assert_alloc("Bε-tree extent", n, largest, bound(n, item, 3));
    match res {
        Ok(node) => {
            check_head_invariants(&node);
            assert!((0..node.parts()).all(|i| node.loaded(i)));
        }
        Err(e) => assert_corruption(&e, "strata.data", None),
    }
}

fn check_batch(input: &[u8]) {
    let (res, largest) = largest_alloc(|| WriteBatch::decode(input));
    let n = input.len();
    assert_alloc("write batch", n, largest, bound(n, size_of::<Op>(), 2));
    match res {
        Ok(b) => {
            // The current encoding (the head's top bit) has one reading; a batch of the first
            // is written back in the current one.
            if input[3] & 0x80 != 0 {
                assert_eq!(b.encode(), input, "re-encoded differently");
            } else {
                assert_eq!(WriteBatch::decode(&b.encode()).unwrap(), b);
            }
            // Replay applies a decoded batch without validating it again.
            b.validate().unwrap();
        }
        Err(what) => assert!(!what.is_empty()),
    }
}

/// Input: the owner id (8 bytes), then the block.
fn check_block(input: &[u8]) {
    if input.len() < 8 {
        return;
    }
    let (owner, b) = input.split_at(8);
    let owner = u64::from_le_bytes(owner.try_into().unwrap());
    let (res, largest) = largest_alloc(|| block::open(b, owner, "strata.data", 8192));
    assert_alloc("block", b.len(), largest, bound(b.len(), 0, 1));
    match res {
        Ok((_, payload)) => {
            assert_eq!(payload.len(), block::declared_len(b));
            assert_eq!(&b[BLOCK_HEADER..BLOCK_HEADER + payload.len()], payload);
            let sum = xxh3_64(&b[8..BLOCK_HEADER + payload.len()]);
            assert_eq!(u64::from_le_bytes(b[..8].try_into().unwrap()), sum);
        }
        Err(e) => assert_corruption(&e, "strata.data", Some(8192)),
    }
}

fn check_superblock(input: &[u8]) {
    let (res, largest) = largest_alloc(|| decode_superblock(input, "strata.data", 4096));
    assert_alloc("superblock", input.len(), largest, bound(input.len(), 0, 1));
    match res {
        Ok(_) => {}
        Err(Error::UnsupportedVersion { file, found, .. }) => {
            assert_eq!(file, "strata.data");
            assert!(found > crate::storage::pager::FORMAT_VERSION);
        }
        Err(e) => assert_corruption(&e, "strata.data", Some(4096)),
    }
}

/// The table's location, as the newest superblock of `file` records it.
fn table_of(file: &[u8]) -> Extent {
    let newest = [0usize, 4096]
        .into_iter()
        .filter(|&s| file[s..s + 8] == crate::storage::pager::MAGIC)
        .max_by_key(|&s| u64::from_le_bytes(file[s + 24..s + 32].try_into().unwrap()))
        .unwrap();
    let at = |i: usize| u64::from_le_bytes(file[newest + i..newest + i + 8].try_into().unwrap());
    Extent {
        offset: at(48),
        len: at(56),
    }
}

/// A data file whose translation table may be damaged, read by `read_table` at `ext` and then
/// by a pager over the whole file.
fn check_table(file: &[u8], ext: Extent) {
    let dev = device_with(file);
    let n = file.len();
    // A hash table of k entries takes up to 16k/7 buckets of an entry and a control byte.
    let item = 3 * (size_of::<(u64, Extent)>() + 1);
    let (res, largest) = largest_alloc(|| read_table(&*dev, ext, n as u64));
    assert_alloc("translation table", n, largest, bound(n, item, 24));
    match res {
        Ok(table) => {
            for e in table.values() {
                assert!(e.offset >= DATA_START && e.offset % 4096 == 0 && e.len > 0);
                assert!(e.offset + e.len <= n as u64);
            }
        }
        Err(e) => assert_corruption(&e, "strata.data", None),
    }
    check_pager(file);
}

/// Open a pager on `file` and read every block it maps, whole, by its head and in part.
fn check_pager(file: &[u8]) {
    let dev = device_with(file);
    let n = file.len();
    let item = 3 * (size_of::<(u64, Extent)>() + 1);
    let ((), largest) = largest_alloc(|| {
        let pager = match Pager::open(dev) {
            Ok((pager, _)) => pager,
            Err(Error::NotADatabase { .. } | Error::UnsupportedVersion { .. }) => return,
            Err(e) => return assert_corruption(&e, "strata.data", None),
        };
        for id in pager.ids() {
            let len = pager.extent(id).unwrap().len;
            for r in [
                pager.read_block(id).map(|_| ()),
                pager.read_head(id).map(|_| ()),
                pager.read_part(id, 0, len.min(100) as usize).map(|_| ()),
                pager.read_part(id, len / 2, len as usize).map(|_| ()),
            ] {
                if let Err(e) = r {
                    assert_corruption(&e, "strata.data", None);
                }
            }
        }
    });
    assert_alloc("pager", n, largest, bound(n, item, 24));
}

/// Open the engine a data file holds and read it every way: point reads, scans both ways,
/// the checker, the statistics. Whatever the damage, every answer is a value or an error that
/// names the damage.
fn check_engine(file: &[u8], meta: Option<&[u8]>) {
    let dev = device_with(file);
    let keys = &corpus().keys;
    let n = file.len() + meta.map_or(0, <[u8]>::len);
    let ((), largest) = largest_alloc(|| {
        let fine = |e: &Error| match e {
            Error::NotADatabase { .. } | Error::UnsupportedVersion { .. } => {}
            e => assert_corruption(e, "strata.data", None),
        };
        let (pager, mut cp) = match Pager::open(dev) {
            Ok(p) => p,
            Err(e) => return fine(&e),
        };
        if let Some(m) = meta {
            cp = Checkpoint {
                engine_meta: m.to_vec(),
                ..cp
            };
        }
        let engine: Result<Box<dyn Engine>, Error> = match cp.engine_meta.first() {
            Some(&crate::engines::btree::ENGINE_TAG) => {
                BTree::open(pager, &cp, 256 << 10, merge()).map(|t| Box::new(t) as _)
            }
            Some(&crate::engines::betree::ENGINE_TAG) => {
                BeTree::open(pager, &cp, 256 << 10, merge()).map(|t| Box::new(t) as _)
            }
            _ => return,
        };
        let mut engine = match engine {
            Ok(e) => e,
            Err(e) => return fine(&e),
        };
        let probes: Vec<&[u8]> = keys.iter().step_by(97).map(|k| k.as_slice()).collect();
        for k in probes.into_iter().chain([&b"zzz"[..]]) {
            if let Err(e) = engine.get(k) {
                fine(&e);
            }
        }
        let mut out = Vec::new();
        for reverse in [false, true] {
            out.clear();
            let r = engine.scan(Bound::Unbounded, Bound::Unbounded, reverse, 100, &mut out);
            if let Err(e) = r {
                fine(&e);
            }
        }
        if let Err(e) = engine.check() {
            fine(&e);
        }
        let _ = engine.stats();
    });
    // Decoded messages are the widest expansion of the bytes read.
    assert_alloc("engine", n, largest, bound(n, size_of::<Msg>(), 3));
}

// ------------------------------------------------------------------------------------------
// Properties, one per decoder

#[test]
fn segments() {
    fuzz("segment", seeds!(segments), 3, 1500, check_segment);
}

#[test]
fn fixed_segments() {
    fuzz(
        "fixed segment",
        seeds!(fixed_segments),
        3,
        1000,
        check_fixed_segment,
    );
}

#[test]
fn compact_segments() {
    fuzz(
        "compact segment",
        seeds!(compact_segments),
        3,
        1000,
        check_compact_segment,
    );
}

#[test]
fn basements() {
    fuzz("basement", seeds!(basements), 3, 1500, check_basement);
}

#[test]
fn compact_basements() {
    fuzz(
        "compact basement",
        seeds!(compact_basements),
        3,
        1000,
        check_compact_basement,
    );
}

#[test]
fn betree_heads() {
    fuzz(
        "Bε-tree head",
        seeds!(betree_heads),
        4,
        1500,
        check_betree_head,
    );
}

#[test]
fn betree_extents() {
    let what = "Bε-tree extent";
    let seeds = seeds!(betree_extents);
    let mut swept = 0;
    for seed in seeds.iter().take(2) {
        // The first KiB swept (the head, and partitions of small nodes), the rest kept.
        let p = seed.len().min(1024);
        swept += sweep(&seed[..p], |b| {
            let mut whole = b.to_vec();
            if b.len() >= p {
                whole.extend_from_slice(&seed[p..]);
            }
            reseal_node(&mut whole);
            guarded(what, &whole, check_betree_extent);
        });
    }
    let cases = 600;
    prop(what, cases, resealed(seeds, reseal_node), |b| {
        guarded(what, b, check_betree_extent)
    });
    eprintln!("{what}: {swept} swept + {cases} proptest inputs");
}

#[test]
fn btree_nodes() {
    fuzz(
        "B+-tree node",
        seeds!(btree_nodes),
        4,
        1500,
        check_btree_node,
    );
}

#[test]
fn write_batches() {
    fuzz("write batch", seeds!(batches), 3, 1500, check_batch);
}

#[test]
fn blocks() {
    let what = "block";
    let seeds = seeds!(blocks);
    let mut swept = 0;
    for seed in seeds.iter().take(2) {
        swept += sweep(seed, |b| guarded(what, b, check_block));
    }
    let cases = 1000;
    let strategy = (damaged(seeds), any::<bool>()).prop_map(|(mut b, reseal)| {
        if reseal && b.len() > 8 {
            reseal_block(&mut b[8..]);
        }
        b
    });
    prop(what, cases, strategy, |b| guarded(what, b, check_block));
    eprintln!("{what}: {swept} swept + {cases} proptest inputs");
}

#[test]
fn superblocks() {
    let what = "superblock";
    let seeds = seeds!(superblocks);
    let mut swept = 0;
    for seed in seeds.iter().take(2) {
        swept += sweep(&seed[..128], |b| {
            let mut sb = seed.clone();
            let k = b.len().min(128);
            sb[..k].copy_from_slice(&b[..k]);
            if b.len() < 128 {
                sb.truncate(b.len());
            }
            reseal_superblock(&mut sb);
            guarded(what, &sb, check_superblock);
        });
    }
    let cases = 1000;
    prop(what, cases, resealed(seeds, reseal_superblock), |b| {
        guarded(what, b, check_superblock)
    });
    eprintln!("{what}: {swept} swept + {cases} proptest inputs");
}

/// The translation table of either file damaged (its block resealed or not), then read by
/// `read_table` and a pager.
#[test]
fn translation_tables() {
    let what = "translation table";
    let c = corpus();
    let mut swept = 0;
    for file in [&c.btree_file, &c.betree_file] {
        let ext = table_of(file);
        let (start, end) = (ext.offset as usize, (ext.offset + ext.len) as usize);
        // The block header, the count and the first two entries.
        let head = BLOCK_HEADER + 8 + 24 * 2;
        swept += sweep(&file[start..start + head], |b| {
            let mut f = file.clone();
            let k = b.len().min(head);
            f[start..start + k].copy_from_slice(&b[..k]);
            if b.len() < head {
                // Cut short: the payload ends early, the rest of the extent zeroed.
                f[start + b.len()..end].fill(0);
            }
            reseal_block(&mut f[start..end]);
            guarded(what, &f, |f| check_table(f, ext));
        });
    }
    let cases = 400;
    let tables: &'static [Vec<u8>] = {
        static T: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
        T.get_or_init(|| {
            [&c.btree_file, &c.betree_file]
                .iter()
                .map(|f| {
                    let e = table_of(f);
                    f[e.offset as usize..(e.offset + e.len) as usize].to_vec()
                })
                .collect()
        })
    };
    let strategy = (resealed(tables, reseal_block), any::<bool>(), 0..8u8);
    prop(what, cases, strategy, |(table, btree, ext_edit)| {
        let mut file = if *btree {
            c.btree_file.clone()
        } else {
            c.betree_file.clone()
        };
        let mut ext = table_of(&file);
        let start = ext.offset as usize;
        let end = start + table.len().min(file.len() - start);
        file[start..end].copy_from_slice(&table[..end - start]);
        // Now and then the table's location is wrong too.
        match *ext_edit {
            0 => ext.len = table.len() as u64,
            1 => ext.offset += 4096,
            2 => ext.len = u64::MAX,
            3 => ext.offset = u64::MAX - 4095,
            _ => {}
        }
        guarded(what, &file, |f| check_table(f, ext));
    });
    eprintln!("{what}: {swept} swept + {cases} proptest inputs");
}

/// Whole data files damaged anywhere (superblocks, table, nodes, blobs; each block or
/// superblock that was hit resealed or not), then opened and read by their engine.
#[test]
fn data_files() {
    let what = "data file";
    let c = corpus();
    // Damage lands in one region: a superblock, the table or one node's extent.
    let strategy = (
        any::<bool>(),
        any::<prop::sample::Index>(),
        prop::collection::vec(mutation(), 1..4),
        0..3u8,
    );
    let cases = 300;
    prop(what, cases, strategy, |(btree, region, ms, reseal)| {
        let mut file = if *btree {
            c.btree_file.clone()
        } else {
            c.betree_file.clone()
        };
        let regions = regions(&file);
        let (start, end, kind) = regions[region.index(regions.len())];
        let mut r = file[start..end].to_vec();
        ms.iter().for_each(|m| m.apply(&mut r));
        r.resize(end - start, 0);
        if *reseal > 0 {
            match kind {
                Region::Superblock => reseal_superblock(&mut r),
                Region::Block if *reseal == 1 => reseal_block(&mut r),
                Region::Block => reseal_node(&mut r),
            }
        }
        file[start..end].copy_from_slice(&r);
        guarded(what, &file, |f| check_engine(f, None));
    });
    eprintln!("{what}: {cases} proptest inputs");
}

#[derive(Clone, Copy, Debug)]
enum Region {
    Superblock,
    Block,
}

/// The superblocks and every extent the newest table maps, with the table's own.
fn regions(file: &[u8]) -> Vec<(usize, usize, Region)> {
    let mut out = vec![
        (0, 4096, Region::Superblock),
        (4096, 8192, Region::Superblock),
    ];
    let (pager, _) = Pager::open(device_with(file)).unwrap();
    let table = table_of(file);
    for e in pager
        .ids()
        .into_iter()
        .map(|id| pager.extent(id).unwrap())
        .chain([table])
    {
        out.push((e.offset as usize, e.end() as usize, Region::Block));
    }
    out
}

/// Engine metadata of both engines, damaged, with the rest of the file intact.
#[test]
fn engine_metadata() {
    let what = "engine metadata";
    let c = corpus();
    let metas: &'static [Vec<u8>] = {
        static M: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
        M.get_or_init(|| vec![c.btree_meta.clone(), c.betree_meta.clone()])
    };
    let mut swept = 0;
    for (meta, file) in [
        (&c.btree_meta, &c.btree_file),
        (&c.betree_meta, &c.betree_file),
    ] {
        // The sweep sets fields only: a truncation or bit flip in a counter is uninteresting.
        for w in [1usize, 4, 8] {
            for i in 0..=meta.len() - w {
                for v in [0u64, u64::MAX >> (64 - 8 * w)] {
                    let mut m = meta.clone();
                    m[i..i + w].copy_from_slice(&v.to_le_bytes()[..w]);
                    guarded(what, &m, |m| check_engine(file, Some(m)));
                    swept += 1;
                }
            }
        }
    }
    let cases = 300;
    prop(what, cases, damaged(metas), |m| {
        // The metadata's own tag says which file it belongs with.
        let file = if m.first() == Some(&2) {
            &c.betree_file
        } else {
            &c.btree_file
        };
        guarded(what, m, |m| check_engine(file, Some(m)));
    });
    eprintln!("{what}: {swept} swept + {cases} proptest inputs");
}

// ------------------------------------------------------------------------------------------
// The log, through the public path: a database whose log files hold damaged records

struct LogSeed {
    data: Vec<u8>,
    log: Vec<u8>,
    opts: Options,
}

fn log_seeds() -> &'static [LogSeed] {
    static S: OnceLock<Vec<LogSeed>> = OnceLock::new();
    S.get_or_init(|| {
        let small_betree = Options::default().betree(16 << 10, 4, 1024);
        [Options::default().btree(4096), small_betree]
            .into_iter()
            .map(|o| {
                let opts = o
                    .cache_bytes(256 << 10)
                    .durability(Durability::None)
                    .merge_operator(AddU64);
                let env = SimEnv::new();
                let db = Db::open_in(&env, opts.clone()).unwrap();
                for i in 0..12u32 {
                    let mut b = WriteBatch::new();
                    b.put(key(i), vec![i as u8; i as usize * 5]);
                    if i % 3 == 0 {
                        b.delete(key(i / 2)).upsert(key(1), 1u64.to_le_bytes());
                    }
                    if i == 7 {
                        b.delete_range(key(2), key(4));
                    }
                    db.write(b).unwrap();
                }
                // Dropped without a close: the log keeps the batches.
                drop(db);
                let file = |name: &str| env.files().get(name).unwrap().contents();
                LogSeed {
                    data: file("strata.data"),
                    log: file("strata.wal"),
                    opts,
                }
            })
            .collect()
    })
}

/// Recompute the checksum of every record whose header and payload lie in `log`.
fn reseal_log(log: &mut [u8]) {
    let mut off = 0;
    while off + 32 <= log.len() {
        let len = u32::from_le_bytes(log[off + 8..off + 12].try_into().unwrap()) as usize;
        let end = off + 32 + len;
        if end > log.len() {
            break;
        }
        let sum = xxh3_64(&log[off + 8..end]);
        log[off..off + 8].copy_from_slice(&sum.to_le_bytes());
        off = end;
    }
}

/// Open a database whose log is `log` (in the first file, or the second) and read it all.
fn check_log(seed: &LogSeed, log: &[u8], second_file: bool) {
    let env = SimEnv::new();
    let put = |name: &str, bytes: &[u8]| {
        let dev = env.files().get_or_create(name);
        dev.write_at(bytes, 0).unwrap();
        dev.sync().unwrap();
    };
    put("strata.data", &seed.data);
    let (name, other) = if second_file {
        ("strata.wal.1", "strata.wal")
    } else {
        ("strata.wal", "strata.wal.1")
    };
    put(name, log);
    put(other, &[]);
    let ((), largest) = largest_alloc(|| {
        // Damage in the log is reported in the log, or (a checkpoint marker newer than the
        // superblock) at the data file's newer superblock.
        let fine = |e: &Error| match e {
            Error::Corruption { file, what, .. } => {
                assert!(file == name || file == "strata.data", "{e}");
                assert!(!what.is_empty(), "{e}");
            }
            e => panic!("expected corruption, got {e:?}"),
        };
        let db = match Db::open_in(&env, seed.opts.clone()) {
            Ok(db) => db,
            Err(e) => return fine(&e),
        };
        for k in corpus().keys.iter().take(20) {
            db.get(k).unwrap();
        }
        assert!(db.iter().unwrap().all(|r| r.is_ok()));
        db.check().unwrap();
    });
    // Replay reads a log file whole, decodes its batches (an operation from 2 bytes) and
    // applies them; node-sized buffers (16 KiB at most here) fall in the slack.
    let n = seed.data.len() + log.len();
    assert_alloc("log replay", n, largest, bound(n, size_of::<Op>(), 2));
}

#[test]
fn logs() {
    let what = "log";
    let seeds = log_seeds();
    let logs: &'static [Vec<u8>] = {
        static L: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
        L.get_or_init(|| log_seeds().iter().map(|s| s.log.clone()).collect())
    };
    let mut swept = 0;
    for seed in seeds {
        // Intact, the log replays its batches.
        let env = SimEnv::new();
        for (name, bytes) in [("strata.data", &seed.data), ("strata.wal", &seed.log)] {
            env.files().get_or_create(name).write_at(bytes, 0).unwrap();
        }
        let db = Db::open_in(&env, seed.opts.clone()).unwrap();
        assert!(db.get(key(11)).unwrap().is_some());
        drop(db);
        // The first two records (the checkpoint's marker and a batch), swept with their
        // checksums recomputed.
        let record_end = |at: usize| {
            at + 32 + u32::from_le_bytes(seed.log[at + 8..at + 12].try_into().unwrap()) as usize
        };
        let two = record_end(record_end(0));
        swept += sweep(&seed.log[..two], |b| {
            let mut log = b.to_vec();
            log.extend_from_slice(&seed.log[two..]);
            reseal_log(&mut log);
            guarded(what, &log, |l| check_log(seed, l, false));
        });
    }
    let cases = 300;
    let strategy = (0..logs.len())
        .prop_flat_map(|i| (Just(i), resealed(&logs[i..=i], reseal_log), any::<bool>()));
    prop(what, cases, strategy, |(i, log, second)| {
        guarded(what, log, |l| check_log(&seeds[*i], l, *second));
    });
    eprintln!("{what}: {swept} swept + {cases} proptest inputs");
}

// ------------------------------------------------------------------------------------------
// The device profile

fn profile_seeds() -> &'static [Vec<u8>] {
    static S: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    S.get_or_init(|| {
        let builtin = DeviceProfile::builtin();
        // And one with measured points, which the tuner's tables read.
        let mut measured = builtin.clone();
        let model = measured.affine_model();
        for shift in [12, 16, 20] {
            let bytes = 1u64 << shift;
            measured.affine.points.push(crate::profile::AffinePoint {
                bytes,
                ios: 100,
                mean_s: model.cost(bytes),
                median_s: model.cost(bytes),
                stddev_s: 1e-6,
                fitted: true,
            });
            measured.affine.fitted_sizes.push(bytes);
        }
        for threads in [1u32, 2, 4, 8] {
            measured.pdam.points.push(crate::profile::PdamPoint {
                threads,
                ios: 1000,
                elapsed_s: 1.0,
                bytes_per_s: 1e9,
                completion_s: 10.0,
                passes_bytes_per_s: Vec::new(),
            });
        }
        vec![
            builtin.to_json().into_bytes(),
            measured.to_json().into_bytes(),
        ]
    })
}

/// Numbers a saved profile might hold, right or wrong.
const NUMBERS: &[&str] = &[
    "0",
    "-1",
    "1",
    "0.5",
    "1e308",
    "1e-308",
    "5e-324",
    "1e999",
    "-0",
    "1e-15",
    "1e15",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "NaN",
];

/// Replace the `i`th number in a JSON text with `with`.
fn replace_number(text: &str, i: usize, with: &str) -> String {
    let is_num = |c: char| c.is_ascii_digit() || "+-.eE".contains(c);
    let mut spans = Vec::new();
    let mut start = None;
    for (at, ch) in text.char_indices() {
        match (start, is_num(ch)) {
            (None, true) => start = Some(at),
            (Some(s), false) => {
                spans.push((s, at));
                start = None;
            }
            _ => {}
        }
    }
    let Some(&(s, e)) = spans.get(i % spans.len().max(1)) else {
        return text.to_string();
    };
    format!("{}{with}{}", &text[..s], &text[e..])
}

/// What the tuner reads of a profile: s, t and the measured points.
fn tuner_input(p: &DeviceProfile) -> (f64, f64, Vec<(u64, f64)>) {
    let points = p.affine.points.iter().map(|x| (x.bytes, x.mean_s));
    (p.affine.setup_s, p.affine.per_byte_s, points.collect())
}

fn check_profile(text: &str) {
    let (res, largest) = largest_alloc(|| DeviceProfile::from_json(text, "profile.json"));
    let n = text.len();
    assert_alloc("profile", n, largest, bound(n, 0, 1));
    match res {
        Ok(p) => {
            p.validate().unwrap();
            // What the tuner makes of it must be a geometry the engine accepts. The tuner
            // takes milliseconds, so it runs only when what it reads was changed.
            let seeds: Vec<_> = profile_seeds()
                .iter()
                .map(|s| {
                    tuner_input(&DeviceProfile::from_json(&String::from_utf8_lossy(s), "").unwrap())
                })
                .collect();
            if !seeds.contains(&tuner_input(&p)) {
                let w = crate::Workload::new(1 << 20);
                crate::tune::geometry(&p, &w).check().unwrap();
            }
        }
        Err(Error::InvalidOptions(why)) => assert!(why.contains("profile.json"), "{why}"),
        Err(e) => panic!("a bad profile gave {e:?}"),
    }
}

#[test]
fn profiles() {
    let what = "profile";
    let seeds = profile_seeds();
    let text = String::from_utf8(seeds[1].clone()).unwrap();
    let mut swept = 0;
    for i in 0..text.matches(':').count() {
        for with in NUMBERS {
            guarded(what, with.as_bytes(), |_| {
                check_profile(&replace_number(&text, i, with))
            });
            swept += 1;
        }
    }

    let cases = 300;
    let strategy = (
        damaged(seeds),
        any::<usize>(),
        prop::sample::select(NUMBERS),
        any::<bool>(),
    );
    prop(what, cases, strategy, |(bytes, i, with, as_number)| {
        let text = String::from_utf8_lossy(bytes);
        let text = if *as_number {
            replace_number(&seeds_text(), *i, with)
        } else {
            text.into_owned()
        };
        guarded(what, text.as_bytes(), |t| {
            check_profile(std::str::from_utf8(t).unwrap())
        });
    });
    eprintln!("{what}: {swept} swept + {cases} proptest inputs");
}

fn seeds_text() -> String {
    String::from_utf8(profile_seeds()[1].clone()).unwrap()
}

// ------------------------------------------------------------------------------------------
// Regressions: each bug the properties above or the audit beside them found, with its input

/// Decode `input` and return the error and the largest allocation made.
fn refused<T: std::fmt::Debug, E>(decode: impl FnOnce() -> Result<T, E>) -> (E, usize) {
    let (res, largest) = largest_alloc(decode);
    (res.expect_err("refused"), largest)
}

/// A count of u32::MAX reserved arrays for that many entries before the first was read: 48
/// GiB for a basement's offsets and heads. Found by the sweep (count 0x4001 in 66 bytes).
#[test]
fn a_basement_count_does_not_size_its_arrays() {
    let found = [1, 0x40, 0, 0, 8, 0, 0, 0x2f, 0, 0, 0, b'k', b'e', b'y'];
    for input in [&[0xff; 4][..], &found] {
        for enc in [Encoding::Compact, Encoding::Fixed, Encoding::Shaped] {
            let (_, largest) = refused(|| Basement::decode(input, enc));
            assert!(largest < 1024, "{largest} bytes");
        }
    }
}

/// The same in a B+-tree internal node (96 GiB of keys for u32::MAX children; found: 4107
/// children in 188 bytes) and leaf.
#[test]
fn a_btree_node_count_does_not_size_its_arrays() {
    let mut internal = u32::MAX.to_le_bytes().to_vec();
    internal.extend_from_slice(&1u64.to_le_bytes());
    let found = [
        0x0b, 0x10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 8, 0, b'k', b'e', b'y',
    ];
    for (kind, input) in [(17, &internal[..]), (17, &found), (16, &[0xff; 4])] {
        let (_, largest) = refused(|| BNode::decode(kind, input));
        assert!(largest < 1024, "{largest} bytes");
    }
}

/// The same in a Bε-tree internal node's head (520 GiB of directory for u32::MAX children;
/// found: 1026 children in 70 bytes).
#[test]
fn a_betree_head_count_does_not_size_its_arrays() {
    let found = [0x02, 0x04, 0, 0, 0x0c, 0, 0, 0, 0, 0, 0, 0, 0x5e, 0, 0, 0];
    for (kind, input) in [
        (19, &[0xff; 4][..]),
        (19, &found),
        (18, &[0xff; 4]),
        (20, &found),
    ] {
        let (_, largest) = refused(|| BeNode::decode_head(kind, input));
        assert!(largest < 1024, "{largest} bytes");
    }
}

/// Separators out of order were accepted, and a search would then route keys to the wrong
/// child. Found by the sweep: one bit of the first separator flipped ("key00073" to
/// "oey00073").
#[test]
fn btree_separators_out_of_order_are_corrupt() {
    let mut p = 3u32.to_le_bytes().to_vec();
    p.extend_from_slice(&1u64.to_le_bytes());
    for (sep, child) in [(&b"oey00073"[..], 2u64), (b"key00153", 3)] {
        p.extend_from_slice(&(sep.len() as u16).to_le_bytes());
        p.extend_from_slice(sep);
        p.extend_from_slice(&child.to_le_bytes());
    }
    assert!(BNode::decode(17, &p).unwrap_err().contains("order"));
}

/// A data file holding one blob, committed: its bytes and the table's extent.
fn one_blob_file() -> (Vec<u8>, Extent) {
    let dev = sim_device();
    let mut p = Pager::create(dev.clone());
    let id = p.new_id();
    p.write_block(id, block::kind::BLOB, b"blob").unwrap();
    p.commit(0, Vec::new()).unwrap();
    let file = dev.contents();
    let table = table_of(&file);
    (file, table)
}

/// `file` with its table replaced by a block holding `payload`.
fn with_table(file: &[u8], table: Extent, payload: &[u8]) -> Vec<u8> {
    let mut f = file.to_vec();
    let sealed = block::seal(u64::MAX, block::kind::TABLE, payload);
    let at = table.offset as usize;
    f[at..at + sealed.len()].copy_from_slice(&sealed);
    f
}

/// An entry count whose 24-byte entries overflow `usize` panicked (8 + 24·n, saturated, plus
/// 8). Found by the sweep: the count set to u64::MAX in a resealed table.
#[test]
fn a_table_count_that_overflows_is_corrupt() {
    let (file, table) = one_blob_file();
    for n in [u64::MAX, u64::MAX / 24 + 1] {
        let f = with_table(&file, table, &n.to_le_bytes());
        let e = read_table(&*device_with(&f), table, f.len() as u64).unwrap_err();
        assert_corruption(&e, "strata.data", Some(table.offset));
    }
}

/// A table entry whose extent is shorter than a block header made `read_head` (a Bε-tree
/// check, or a large node's load) index past its buffer. Found by the sweep: an entry's
/// length set to 1.
#[test]
fn an_extent_shorter_than_a_block_header_is_corrupt() {
    let (file, table) = one_blob_file();
    let mut payload = 1u64.to_le_bytes().to_vec();
    for v in [1u64, DATA_START, 1] {
        payload.extend_from_slice(&v.to_le_bytes());
    }
    let f = with_table(&file, table, &payload);
    let (pager, _) = Pager::open(device_with(&f)).unwrap();
    assert_corruption(
        &pager.read_head(1).unwrap_err(),
        "strata.data",
        Some(DATA_START),
    );
    assert_corruption(
        &pager.read_block(1).unwrap_err(),
        "strata.data",
        Some(DATA_START),
    );
}

/// Engine metadata with a height no tree has: u32::MAX made the B+-tree's next write
/// reserve a 64 GiB path, and 0 underflows when the root collapses. Found by the audit.
#[test]
fn engine_metadata_with_an_impossible_height_is_corrupt() {
    let c = corpus();
    for (meta, at, file) in [
        (&c.btree_meta, 54, &c.btree_file),
        (&c.betree_meta, 22, &c.betree_file),
    ] {
        for h in [0u32, 65, u32::MAX] {
            let mut m = meta.clone();
            m[at..at + 4].copy_from_slice(&h.to_le_bytes());
            let (pager, cp) = Pager::open(device_with(file)).unwrap();
            let cp = Checkpoint {
                engine_meta: m,
                ..cp
            };
            let e = match meta[0] {
                crate::engines::btree::ENGINE_TAG => BTree::open(pager, &cp, 1 << 20, None).err(),
                _ => BeTree::open(pager, &cp, 1 << 20, None).err(),
            };
            assert!(matches!(&e, Some(Error::Corruption { what, .. }) if what.contains("height")));
        }
    }
}

/// A logged batch is applied at replay without `validate`: one holding a key, or a range end,
/// over the key limit was applied, and the Bε-tree stores keys and range ends with u16
/// lengths. Found by the audit.
#[test]
fn a_logged_batch_over_the_limits_is_corrupt() {
    let long = vec![b'k'; crate::MAX_KEY_LEN + 1];
    let mut delete = WriteBatch::new();
    delete.delete(&long);
    let mut range = WriteBatch::new();
    range.delete_range(b"a", &long);
    for b in [delete, range] {
        assert!(WriteBatch::decode(&b.encode())
            .unwrap_err()
            .contains("exceeds"));
    }
}

/// A range end over the key limit passed `validate`: on a Bε-tree whose root buffered the
/// range delete (70,000-byte end), the next checkpoint wrote a segment its own decoder
/// refused ("65536 trailing bytes"), and every read after reopening failed. Found by the
/// audit.
#[test]
fn a_range_end_over_the_key_limit_is_refused() {
    let env = SimEnv::new();
    let db = Db::open_in(&env, Options::default().btree(4096)).unwrap();
    db.put(b"b", b"v").unwrap();
    let mut end = b"c".to_vec();
    end.resize(70_000, 0);
    let e = db.delete_range(b"a", &end).unwrap_err();
    assert!(matches!(e, Error::KeyTooLarge { len: 70_000, .. }), "{e:?}");
    assert_eq!(db.get(b"b").unwrap().as_deref(), Some(&b"v"[..]));
}

/// A database whose newest superblock is rewritten by `edit` (and resealed).
fn forged_db(edit: impl Fn(&mut [u8])) -> (SimEnv, Options) {
    let opts = Options::default().btree(4096).durability(Durability::None);
    let env = SimEnv::new();
    let db = Db::open_in(&env, opts.clone()).unwrap();
    db.put(b"k", b"v").unwrap();
    db.close().unwrap();
    let dev = env.files().get("strata.data").unwrap();
    let file = dev.contents();
    let seq = |s: usize| u64::from_le_bytes(file[s + 24..s + 32].try_into().unwrap());
    let newest = if seq(0) > seq(4096) { 0 } else { 4096 };
    let mut sb = file[newest..newest + 4096].to_vec();
    edit(&mut sb);
    reseal_superblock(&mut sb);
    dev.write_at(&sb, newest as u64).unwrap();
    (env, opts)
}

/// A superblock whose WAL sequence is u64::MAX (or whose checkpoint sequence or next node id
/// is out of reach) made log replay overflow (`wal.rs`: the sequence after the checkpoint's).
/// Found by probing the log through `Db::open_in`.
#[test]
fn superblock_counters_out_of_reach_are_corrupt() {
    for at in [24usize, 32, 40] {
        let (env, opts) = forged_db(|sb| sb[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes()));
        let e = Db::open_in(&env, opts).err().expect("refused");
        assert_corruption(&e, "strata.data", None);
    }
}

/// A profile whose 1/α = s/t is enormous made the tuner's brute-force check of Corollary 7
/// overflow (setup_s 1e308: `tune` line 287) or run for hours (per_byte_s 1e-15). Found by
/// the sweep.
#[test]
fn a_profile_with_an_enormous_half_bandwidth_is_refused() {
    for (s, t) in [(1e308, 0.94e-9), (120e-6, 1e-15)] {
        let mut p = DeviceProfile::builtin();
        p.affine.setup_s = s;
        p.affine.per_byte_s = t;
        let e = DeviceProfile::from_json(&p.to_json(), "profile.json").unwrap_err();
        assert!(
            matches!(&e, Error::InvalidOptions(why) if why.contains("1/α")),
            "{e:?}"
        );
    }
}
