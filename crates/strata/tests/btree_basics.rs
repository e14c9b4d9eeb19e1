//! Direct checks of the B+-tree through `Db`: many keys in tiny nodes (so splits, merges and
//! evictions happen constantly), large values out of line, reopen, and the invariant checker.

use std::collections::BTreeMap;

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
