//! Direct checks of the B+-tree through `Db`: many keys in tiny nodes (so splits, merges and
//! evictions happen constantly), large values out of line, reopen, the invariant checker, and
//! dirty leaves written back in batches, in key order, once the tree outgrows the cache.

mod common;

use std::collections::BTreeMap;

use common::{leaf_keys, nodes, Place, DATA, KIND_LEAF};
use strata::storage::SimEnv;
use strata::{Db, Durability, Options};

fn key(i: u64) -> Vec<u8> {
    // A scrambled order, so inserts land all over the tree.
    format!("{:016x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).into_bytes()
}

#[test]
fn insert_delete_reopen_with_tiny_nodes_and_cache() {
    let env = SimEnv::new();
    let opts = Options::default()
        .btree(4096)
        .cache_bytes(64 << 10)
        .durability(Durability::None);
    let db = Db::open_in(&env, opts.clone()).unwrap();
    let mut oracle = BTreeMap::new();
    for i in 0..20_000u64 {
        let v = vec![(i % 251) as u8; (i % 300) as usize];
        db.put(key(i), &v).unwrap();
        oracle.insert(key(i), v);
    }
    let m = db.metrics();
    assert!(m.engine.height >= 3, "height {}", m.engine.height);
    assert!(m.engine.cache.evictions > 0);
    for i in (0..20_000u64).step_by(3) {
        db.delete(key(i)).unwrap();
        oracle.remove(&key(i));
    }
    // Delete a contiguous stretch too, so whole leaves empty and merge.
    let doomed: Vec<Vec<u8>> = oracle.keys().skip(100).take(5000).cloned().collect();
    for k in &doomed {
        db.delete(k).unwrap();
        oracle.remove(k);
    }
    db.check().unwrap();
    let all: Vec<_> = db.iter().unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(all, oracle.clone().into_iter().collect::<Vec<_>>());
    let rev: Vec<_> = db.iter().unwrap().rev().map(|r| r.unwrap().0).collect();
    assert_eq!(rev, oracle.keys().rev().cloned().collect::<Vec<_>>());
    db.close().unwrap();

    let db = Db::open_in(&env, opts).unwrap();
    let report = db.check().unwrap();
    assert_eq!(report.keys, oracle.len() as u64);
    for (k, v) in oracle.iter().step_by(7) {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
    assert_eq!(db.get(key(0)).unwrap(), None);
}

#[test]
fn large_values_and_keys_round_trip() {
    let env = SimEnv::new();
    let db = Db::open_in(&env, Options::default().btree(4096)).unwrap();
    let big = vec![0xabu8; 200_000];
    let long_key = vec![b'k'; 4096];
    db.put(b"big", &big).unwrap();
    db.put(&long_key, b"long key").unwrap();
    for i in 0..50u8 {
        db.put([b'x', i], vec![i; 3000]).unwrap();
        db.put([&long_key[..4000], &[i]].concat(), [i]).unwrap();
    }
    db.check().unwrap();
    assert_eq!(db.get(b"big").unwrap().unwrap(), big);
    db.put(b"big", b"small now").unwrap();
    assert_eq!(db.metrics().engine.blobs, 50, "the replaced blob was freed");
    db.close().unwrap();
    let db = Db::open_in(&env, Options::default()).unwrap();
    assert_eq!(db.get(&long_key).unwrap().unwrap(), b"long key");
    assert_eq!(db.get([b'x', 7]).unwrap().unwrap(), vec![7u8; 3000]);
    db.check().unwrap();
}

/// A load past a small cache: every insert that misses evicts a dirty leaf, and the pool
/// writes those back in batches, in adjacent extents while the file has room for runs, so the
/// writes are a fraction of the leaves written back (35,885 leaves in 13,843 writes when this
/// was written); and a 4 KiB leaf costs at most 4 KiB per insert, the B+-tree's write
/// amplification with the data beyond the cache.
#[test]
fn a_load_past_the_cache_writes_leaves_back_in_batches() {
    let place = Place::sim();
    let opts = Options::default()
        .btree(4096)
        .cache_bytes(1 << 20)
        .durability(Durability::None);
    let db = place.open(opts).unwrap();
    let n = 40_000u64;
    for i in 0..n {
        db.put(key(i), [7u8; 100]).unwrap();
    }
    let m = db.metrics();
    let c = &m.engine.cache;
    assert!(c.writebacks > n / 4, "the tree outgrew the cache: {c:?}");
    assert!(
        c.writeback_ios * 2 < c.writebacks,
        "write-backs coalesce: {} writes for {} leaves",
        c.writeback_ios,
        c.writebacks
    );
    // Each write-back is one 4 KiB leaf; nothing else writes the data file before a checkpoint.
    assert!(
        m.data_io.bytes_written <= c.writebacks * 4096 + 4 * 4096,
        "{} bytes for {} write-backs",
        m.data_io.bytes_written,
        c.writebacks
    );
    assert!(
        m.data_io.bytes_written < n * 4096,
        "under a leaf per insert: {} bytes",
        m.data_io.bytes_written
    );
    db.check().unwrap();
    db.close().unwrap();
    let db = place.open(Options::default()).unwrap();
    assert_eq!(db.check().unwrap().keys, n);
}

/// A checkpoint writes its dirty leaves in key order, as few writes as the free space allows:
/// with every leaf dirty and the file empty, the leaves lie in the file in key order.
#[test]
fn a_checkpoint_lays_dirty_leaves_out_in_key_order() {
    let place = Place::sim();
    let opts = Options::default()
        .btree(4096)
        .cache_bytes(64 << 20)
        .durability(Durability::None);
    let db = place.open(opts).unwrap();
    for i in 0..5_000u64 {
        db.put(key(i), [1u8; 60]).unwrap();
    }
    db.checkpoint().unwrap();
    let c = db.metrics().engine.cache;
    assert!(c.checkpoint_nodes > 50, "{c:?}");
    assert!(
        c.checkpoint_ios * 20 <= c.checkpoint_nodes,
        "{} writes for {} nodes",
        c.checkpoint_ios,
        c.checkpoint_nodes
    );
    drop(db);
    let data = place.read(DATA).unwrap();
    let mut leaves: Vec<(u64, Vec<u8>)> = nodes(&data)
        .into_iter()
        .filter(|(_, kind)| *kind == KIND_LEAF)
        .map(|(e, _)| (e.offset, leaf_keys(&data, e.offset)[0].clone()))
        .collect();
    assert!(leaves.len() > 50, "{} leaves", leaves.len());
    leaves.sort();
    assert!(
        leaves.windows(2).all(|w| w[0].1 < w[1].1),
        "leaves in file order are in key order"
    );
}
