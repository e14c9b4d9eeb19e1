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
/// push most deletes down, and the leaves they empty must merge away.
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
        full.leaf_nodes, full.height, after.leaf_nodes, after.height, after.buffered_messages
    );
    assert!(full.leaf_nodes > 50, "{full:?}");
    assert!(
        after.leaf_nodes * 4 < full.leaf_nodes,
        "leaves did not merge: {after:?}"
    );
    let report = db.check().unwrap();
    assert_eq!(report.keys, n / 32);
}

#[test]
fn point_queries_read_one_small_partition_per_uncached_level() {
    let env = SimEnv::new();
    let node = 64 << 10;
    let opts = Options::default()
        .betree(node, 8, 4 << 10)
        .cache_bytes(512 << 10)
        .durability(Durability::None);
    let db = Db::open_in(&env, opts.clone()).unwrap();
    let n = 60_000u64;
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
    // evicted too costs two.
    assert!(
        worst <= 2 * height,
        "a query read {worst} times, height {height}"
    );
    assert!(
        bytes_per_read < node as f64 / 4.0,
        "{bytes_per_read} bytes per read, node {node}"
    );
}
