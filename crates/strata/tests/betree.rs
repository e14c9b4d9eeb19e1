//! Bε-tree behaviour the generic model test cannot see: that merges shrink the tree once
//! deletes reach the leaves, and the IO shape of queries (one partial read per uncached level,
//! each far smaller than a node).

use strata::storage::SimEnv;
use strata::{Db, Durability, Options};

fn key(i: u64) -> Vec<u8> {
    format!("{:016x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).into_bytes()
}

/// Deletes are messages too: they shrink the tree only when flushes carry them to the leaves.
/// With fanout 16 the buffers hold about a tenth of the data, so deleting 97% of the keys must
/// push most deletes down, and the leaves they empty must merge away: the tree shrinks, and
/// its leaves hold on average at least the B/4 under which a leaf merges. How far it shrinks
/// depends on how many deletes a segment holds: with the fixed message encoding (27 bytes a
/// delete here) 128 leaves became 20 with 2,343 deletes still buffered; with the compact one
/// (21 bytes) 49, with 8,187 buffered, whose keys the leaves still hold.
#[test]
fn deleting_most_keys_merges_leaves() {
    let env = SimEnv::new();
    let opts = Options::default()
        .betree(64 << 10, 16, 4 << 10)
        .cache_bytes(64 << 20)
        .durability(Durability::None);
    let db = Db::open_in(&env, opts).unwrap();
    let n = 40_000u64;
    for i in 0..n {
        db.put(key(i), [7u8; 100]).unwrap();
    }
    let full = db.metrics().engine;
    for i in 0..n - n / 32 {
        db.delete(key(i)).unwrap();
    }
    let after = db.metrics().engine;
    eprintln!(
        "full: {} leaves, height {}; after deletes: {} leaves, height {}, {} buffered",
        full.leaf_nodes,
        full.height,
        after.leaf_nodes,
        after.height,
        after.detail("buffered_messages")
    );
    assert!(full.leaf_nodes > 50, "{full:?}");
    assert!(
        after.leaf_nodes * 2 < full.leaf_nodes,
        "leaves did not merge: {after:?}"
    );
    assert!(
        after.live_bytes / after.leaf_nodes >= (64 << 10) / 4,
        "leaves left small: {after:?}"
    );
    let report = db.check().unwrap();
    assert_eq!(report.keys, n / 32);
}

/// Nodes above the whole-read threshold (64 KiB) are read a partition at a time: a point query
/// costs about one small read per uncached level.
#[test]
fn point_queries_read_one_small_partition_per_uncached_level() {
    let env = SimEnv::new();
    let node = 256 << 10;
    let opts = Options::default()
        .betree(node, 4, 4 << 10)
        .cache_bytes(1 << 20)
        .durability(Durability::None);
    let db = Db::open_in(&env, opts.clone()).unwrap();
    let n = 100_000u64;
    for i in 0..n {
        db.put(key(i), [i as u8; 100]).unwrap();
    }
    db.close().unwrap();
    let db = Db::open_in(&env, opts).unwrap();
    let height = db.metrics().engine.height as u64;
    assert!(height >= 3, "height {height}");
    // Warm up: headers become resident, partitions come and go.
    for i in 0..3000u64 {
        db.get(key(i * 7919 % n)).unwrap().unwrap();
    }
    let before = db.metrics();
    let mut worst = 0;
    let queries = 3000u64;
    for i in 0..queries {
        let r0 = db.metrics().point_query_reads;
        let got = db.get(key((i * 104_729 + 13) % n)).unwrap().unwrap();
        assert_eq!(got.len(), 100);
        worst = worst.max(db.metrics().point_query_reads - r0);
    }
    let after = db.metrics();
    let io = &after.data_io - &before.data_io;
    let reads = after.point_query_reads - before.point_query_reads;
    let per_query = reads as f64 / queries as f64;
    let bytes_per_read = io.bytes_read as f64 / io.reads.max(1) as f64;
    eprintln!("height {height}: {per_query:.2} reads per query (worst {worst}), {bytes_per_read:.0} bytes per read, node {node}");
    assert!(
        per_query <= height as f64,
        "{per_query} reads per query for height {height}"
    );
    // Headers stay resident, so a level costs one partition read; a level whose header was
    // evicted too costs two, and so does a run whose filter answers "maybe" (the key's newest
    // message is there, or one probe in a hundred misleads): its head and one chunk.
    assert!(
        worst <= 2 * height + 2,
        "a query read {worst} times, height {height}"
    );
    assert!(
        bytes_per_read < node as f64 / 4.0,
        "{bytes_per_read} bytes per read, node {node}"
    );
}

/// A point query whose key is in a run of more than 16 KiB reads one chunk of it, not the whole
/// run: the run's head, read once, is kept by the parent (`RunRef::dir`), so it is not read
/// again however often the pool sheds the run. Here runs are about 32 KiB (512 KiB nodes,
/// fanout 16), and the keys queried are the ones overwritten last, whose newest messages sit
/// in runs: read whole, each would cost about 32 KiB.
#[test]
fn a_point_query_reads_one_chunk_of_a_large_run() {
    let env = SimEnv::new();
    let opts = Options::default()
        .betree(512 << 10, 16, 4 << 10)
        .cache_bytes(2 << 20)
        .durability(Durability::None);
    let db = Db::open_in(&env, opts.clone()).unwrap();
    let n = 100_000u64;
    for i in 0..n {
        db.put(key(i), [1u8; 100]).unwrap();
    }
    for i in 0..n / 5 {
        db.put(key(i), [2u8; 100]).unwrap();
    }
    db.close().unwrap();
    let db = Db::open_in(&env, opts).unwrap();
    let stats = db.metrics().engine;
    assert!(stats.detail("runs") >= 8, "{stats:?}");
    // The first pass reads each run's head once; the second, only chunks and basements.
    for pass in 0..2 {
        let before = db.metrics();
        for i in 0..n / 5 {
            assert_eq!(db.get(key(i)).unwrap().unwrap(), vec![2u8; 100]);
        }
        let after = db.metrics();
        let io = &after.data_io - &before.data_io;
        let per_query =
            (after.point_query_reads - before.point_query_reads) as f64 / (n / 5) as f64;
        let bytes_per_read = io.bytes_read as f64 / io.reads.max(1) as f64;
        eprintln!(
            "pass {pass}: {per_query:.3} reads per query, {bytes_per_read:.0} bytes per read, \
             {} runs, height {}",
            stats.detail("runs"),
            stats.height
        );
        assert!(bytes_per_read < 8192.0, "{bytes_per_read} bytes per read");
        if pass == 1 {
            assert!(
                per_query <= stats.height as f64,
                "{per_query} reads per query"
            );
        }
    }
}

/// Sequential inserts go straight to the rightmost leaf (the path's buffers stay empty, the
/// leaf is resident): nothing is buffered, splits climb the path, and every key reads back.
/// Random inserts into the same geometry do buffer.
#[test]
fn sequential_inserts_take_the_rightmost_leaf_path() {
    let opts = Options::default()
        .betree(16 << 10, 8, 2 << 10)
        .cache_bytes(4 << 20)
        .durability(Durability::None);
    let env = SimEnv::new();
    let db = Db::open_in(&env, opts.clone()).unwrap();
    let n = 30_000u64;
    for i in 0..n {
        db.put(format!("{i:010}"), [i as u8; 50]).unwrap();
    }
    let seq = db.metrics().engine;
    eprintln!(
        "sequential: height {}, {} leaves, {} buffered",
        seq.height,
        seq.leaf_nodes,
        seq.detail("buffered_messages")
    );
    assert!(seq.height >= 3, "{seq:?}");
    assert_eq!(
        seq.detail("buffered_messages"),
        0,
        "sequential inserts were buffered"
    );
    assert_eq!(seq.live_keys, n);
    assert_eq!(db.check().unwrap().keys, n);
    for i in (0..n).step_by(997) {
        assert_eq!(db.get(format!("{i:010}")).unwrap().unwrap(), [i as u8; 50]);
    }
    // Overwrites and deletes of existing keys are not appends: they are buffered as usual.
    db.put(format!("{:010}", 5), b"again").unwrap();
    assert!(db.metrics().engine.detail("buffered_messages") > 0);
    assert_eq!(db.get(format!("{:010}", 5)).unwrap().unwrap(), b"again");
    drop(db);

    let env = SimEnv::new();
    let db = Db::open_in(&env, opts).unwrap();
    for i in 0..n {
        db.put(key(i), [i as u8; 50]).unwrap();
    }
    let rnd = db.metrics().engine;
    assert!(
        rnd.detail("buffered_messages") > 0,
        "random inserts should buffer: {rnd:?}"
    );
    assert_eq!(db.check().unwrap().keys, n);
}

/// The fast path mixed with everything else, against a BTreeMap: appends interleaved with
/// overwrites, deletes, upserts and range deletes of earlier keys, gets, and reopens.
#[test]
fn appends_mixed_with_other_writes_match_an_oracle() {
    use std::collections::BTreeMap;
    let opts = Options::default()
        .betree(8 << 10, 4, 1 << 10)
        .cache_bytes(2 << 20)
        .durability(Durability::None)
        .merge_operator(strata::AddU64);
    let env = SimEnv::new();
    let mut db = Db::open_in(&env, opts.clone()).unwrap();
    let mut oracle: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut top = 0u64;
    for step in 0..20_000u64 {
        let r = next() % 100;
        let old = format!("k{:08}", next() % (top + 1)).into_bytes();
        if r < 60 {
            top += 1 + next() % 3;
            let k = format!("k{top:08}").into_bytes();
            let v = vec![(step % 251) as u8; (next() % 80) as usize];
            db.put(&k, &v).unwrap();
            oracle.insert(k, v);
        } else if r < 70 {
            let v = step.to_le_bytes().to_vec();
            db.put(&old, &v).unwrap();
            oracle.insert(old, v);
        } else if r < 78 {
            db.delete(&old).unwrap();
            oracle.remove(&old);
        } else if r < 86 {
            let add = next() % 100;
            db.upsert(&old, add.to_le_bytes()).unwrap();
            let base = oracle.get(&old).map_or(0, |v| {
                let mut b = [0u8; 8];
                b[..v.len().min(8)].copy_from_slice(&v[..v.len().min(8)]);
                u64::from_le_bytes(b)
            });
            oracle.insert(old, base.wrapping_add(add).to_le_bytes().to_vec());
        } else if r < 88 {
            let end = format!("k{:08}", old_plus(&old, next() % 40)).into_bytes();
            db.delete_range(&old, &end).unwrap();
            let doomed: Vec<_> = oracle
                .range(old.clone()..end)
                .map(|(k, _)| k.clone())
                .collect();
            for k in doomed {
                oracle.remove(&k);
            }
        } else if r < 99 {
            assert_eq!(
                db.get(&old).unwrap(),
                oracle.get(&old).cloned(),
                "step {step}"
            );
        } else {
            db.close().unwrap();
            db = Db::open_in(&env, opts.clone()).unwrap();
        }
    }
    let all: Vec<_> = db.iter().unwrap().map(|r| r.unwrap()).collect();
    assert!(
        all == oracle.clone().into_iter().collect::<Vec<_>>(),
        "contents differ"
    );
    assert_eq!(db.check().unwrap().keys, oracle.len() as u64);
}

fn old_plus(k: &[u8], d: u64) -> u64 {
    std::str::from_utf8(&k[1..])
        .unwrap()
        .parse::<u64>()
        .unwrap()
        + d
}

/// Flushes into leaves that are not in the cache become runs (the leaf is left as it is) until
/// the runs reach the leaf's size, then one flush drains them into the leaf. Reads see the runs'
/// messages, range deletes and overwrites included; the check accounts for every run; and a
/// crash keeps every acknowledged batch.
#[test]
fn uncached_leaves_take_flushes_as_runs_that_survive_a_crash() {
    use std::collections::BTreeMap;
    use strata::WriteBatch;
    let env = SimEnv::new();
    let opts = Options::default()
        .betree(64 << 10, 8, 4 << 10)
        .cache_bytes(512 << 10)
        .checkpoint_wal_bytes(1 << 20);
    let db = Db::open_in(&env, opts.clone()).unwrap();
    let mut oracle: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let (mut most_runs, mut spilled) = (0, false);
    for b in 0..120u64 {
        let mut batch = WriteBatch::new();
        for i in b * 500..(b + 1) * 500 {
            // Every third batch overwrites or deletes earlier keys, which may sit in runs.
            let k = if b % 3 == 2 { key(i / 7) } else { key(i) };
            if i % 11 == 0 && b % 3 == 2 {
                batch.delete(&k);
                oracle.remove(&k);
            } else {
                let v = vec![(i % 251) as u8; 100];
                batch.put(&k, &v);
                oracle.insert(k, v);
            }
        }
        if b % 40 == 39 {
            // A range delete spills with the rest (its run has no filter).
            let (lo, hi) = (b"1".to_vec(), b"12".to_vec());
            batch.delete_range(&lo, &hi);
            let doomed: Vec<_> = oracle.range(lo..hi).map(|(k, _)| k.clone()).collect();
            doomed.iter().for_each(|k| {
                oracle.remove(k);
            });
        }
        db.write(batch).unwrap();
        let runs = db.metrics().engine.detail("runs");
        spilled |= runs > 0;
        most_runs = most_runs.max(runs);
    }
    let stats = db.metrics().engine;
    eprintln!("at most {most_runs} runs; at the end {stats:?}");
    assert!(spilled && stats.leaf_nodes > 20, "{stats:?}");
    for (k, v) in oracle.iter().step_by(13) {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
    check_runs_then_crash(&env, db, opts, oracle);
}

/// The check accounts for every key and run; then power fails with runs in place (written or
/// not), and every acknowledged batch is back.
fn check_runs_then_crash(
    env: &SimEnv,
    db: Db,
    opts: Options,
    oracle: std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
) {
    let stats = db.metrics().engine;
    let report = db.check().unwrap();
    assert_eq!(
        (report.keys, report.detail("runs")),
        (oracle.len() as u64, stats.detail("runs"))
    );
    assert!(stats.detail("runs") > 0, "{stats:?}");
    env.crash();
    drop(db);
    let db = Db::open_in(env, opts).unwrap();
    let all: Vec<_> = db.iter().unwrap().map(|r| r.unwrap()).collect();
    assert!(
        all == oracle.into_iter().collect::<Vec<_>>(),
        "contents differ"
    );
    db.check().unwrap();
}

/// When a leaf's count of runs fills before their bytes reach the budget, its newest small runs
/// are merged into one run rather than drained into the leaf (runs of runs): merges happen,
/// drains wait, reads see every message (overwrites, deletes, range deletes and merge operands
/// among them), the check accounts for every run, and a crash keeps every acknowledged batch.
/// Both with the merges on the writer and on the drain thread (`betree::drainer`).
#[test]
fn a_full_count_of_small_runs_is_merged_into_one_run() {
    for on_thread in [false, true] {
        full_count_merged(on_thread);
    }
}

fn full_count_merged(on_thread: bool) {
    use std::collections::BTreeMap;
    use strata::WriteBatch;
    let env = SimEnv::new();
    // Flushes of B/F = 2 KiB: 16 runs take 32 KiB of the 128 KiB budget.
    let opts = Options::default()
        .betree(64 << 10, 32, 1 << 10)
        .cache_bytes(128 << 10)
        .background_merges(on_thread)
        .checkpoint_wal_bytes(1 << 20)
        .merge_operator(strata::AddU64);
    let db = Db::open_in(&env, opts.clone()).unwrap();
    let mut oracle: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut merges = 0;
    for b in 0..240u64 {
        let mut batch = WriteBatch::new();
        for i in b * 400..(b + 1) * 400 {
            // Every third batch rewrites keys of the two before it, still in segments and runs.
            let k = if b % 3 == 2 {
                key(i - 400 * (1 + i % 2))
            } else {
                key(i)
            };
            if b % 3 == 2 && i % 9 == 0 {
                batch.delete(&k);
                oracle.remove(&k);
            } else if b % 3 == 2 && i % 9 == 1 && oracle.contains_key(&k) {
                // A counter: the merge operator adds to the value's first 8 bytes.
                batch.upsert(&k, 1u64.to_le_bytes());
                let v = oracle.get_mut(&k).unwrap();
                let n = u64::from_le_bytes(v[..8].try_into().unwrap()) + 1;
                *v = n.to_le_bytes().to_vec();
            } else {
                let mut v = (i % 251).to_le_bytes().to_vec();
                v.resize(40, b'v');
                batch.put(&k, &v);
                oracle.insert(k, v);
            }
        }
        if b % 50 == 49 {
            let (lo, hi) = (b"2".to_vec(), b"21".to_vec());
            batch.delete_range(&lo, &hi);
            let doomed: Vec<_> = oracle.range(lo..hi).map(|(k, _)| k.clone()).collect();
            doomed.iter().for_each(|k| {
                oracle.remove(k);
            });
        }
        db.write(batch).unwrap();
        merges = db.metrics().engine.detail("run_merges");
    }
    let stats = db.metrics().engine;
    eprintln!("{merges} merges; at the end {stats:?}");
    assert!(merges > 10, "{stats:?}");
    let offloaded = stats.detail("merges_offloaded");
    if on_thread {
        assert!(offloaded > 10, "{stats:?}");
    } else {
        assert_eq!(offloaded, 0, "{stats:?}");
    }
    for (k, v) in oracle.iter().step_by(7) {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v), "{k:?}");
    }
    check_runs_then_crash(&env, db, opts, oracle);
}

/// Copy-on-write leaves the old copies of rewritten blocks behind as free extents; a closed
/// database gives their space back to the file system (holes), so what it takes on disk is
/// about what its live blocks take, and it reopens with every value intact.
#[test]
fn a_closed_database_gives_its_free_space_back() {
    use std::os::unix::fs::MetadataExt;
    for opts in [
        Options::default().betree(64 << 10, 16, 4 << 10),
        Options::default().btree(8 << 10),
    ] {
        let opts = opts.cache_bytes(1 << 20).durability(Durability::None);
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), opts.clone()).unwrap();
        let n = 20_000u64;
        // Three rounds over the same keys: most blocks are rewritten, each time elsewhere.
        for round in 0..3u8 {
            for i in 0..n {
                db.put(key(i), [round; 100]).unwrap();
            }
            db.checkpoint().unwrap();
        }
        db.close().unwrap();
        let data = dir.path().join("strata.data");
        let meta = std::fs::metadata(&data).unwrap();
        let db = Db::open(dir.path(), opts).unwrap();
        let st = db.metrics().engine;
        assert!(st.free_bytes > 0, "no free extent left to test: {st:?}");
        // Punched: the file holds its referenced blocks, the table and the superblocks, and
        // none of the free extents.
        let allocated = meta.blocks() * 512;
        assert!(
            allocated < meta.len() && allocated <= st.referenced_bytes + (256 << 10),
            "allocated {allocated}, length {}, referenced {}, free {}",
            meta.len(),
            st.referenced_bytes,
            st.free_bytes
        );
        for i in (0..n).step_by(97) {
            assert_eq!(db.get(key(i)).unwrap().as_deref(), Some(&[2u8; 100][..]));
        }
        assert_eq!(db.check().unwrap().keys, n);
    }
}
