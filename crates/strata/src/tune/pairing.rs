//! The model keeps its own copies of the engines' encoding sizes and policies (it sits below
//! them and takes parameters as inputs); the tuner is the one place that pairs the two, and
//! these tests fail when an engine's format or policy moves away from what the model assumes.

use crate::engines::betree;
use crate::engines::btree::node::{self as bnode, leaf_entry_len, sep_len};
use crate::kv::msg::{Body, Msg};
use crate::kv::Val;
use crate::model::predict;
use crate::storage::block;

#[test]
fn the_substrate_page_and_block_header() {
    assert_eq!(predict::PAGE, block::PAGE);
    assert_eq!(predict::BLOCK_HEADER, block::BLOCK_HEADER);
}

#[test]
fn the_btree_encoding_sizes() {
    assert_eq!(predict::BT_LEAF_FIXED, bnode::LEAF_FIXED as f64);
    assert_eq!(predict::BT_INTERNAL_FIXED, bnode::INTERNAL_FIXED as f64);
    for (k, v) in [(0usize, 0usize), (16, 100), (5, 3000)] {
        let val = Val::Inline(vec![1; v]);
        let entry = leaf_entry_len(&vec![0; k], &val) as f64;
        assert_eq!(entry, predict::BT_LEAF_ENTRY + (k + v) as f64);
        assert_eq!(
            sep_len(&vec![0; k]) as f64,
            predict::BT_SEPARATOR + k as f64
        );
    }
}

#[test]
fn the_betree_message_size_and_run_budget() {
    for (k, v) in [(0usize, 0usize), (16, 100)] {
        // The model's copy assumes a sequence number of 4 varint bytes.
        let m = Msg {
            key: vec![0; k],
            seq: 1 << 24,
            body: Body::Put(Val::Inline(vec![1; v])),
        };
        assert_eq!(
            m.encoded_len() as f64,
            predict::BE_MESSAGE_OVERHEAD + (k + v) as f64
        );
    }
    assert_eq!(predict::RUN_BUDGET, betree::RUN_BUDGET);
    assert_eq!(predict::WHOLE_READ_MAX, betree::node::WHOLE_READ_MAX as f64);
    assert_eq!(
        predict::RUN_WHOLE_CHUNKS,
        betree::node::RUN_WHOLE_CHUNKS as f64
    );
    assert_eq!(
        betree::node::run_read_whole_max(64 << 10),
        betree::node::WHOLE_READ_MAX
    );
    assert_eq!(predict::MAX_RUNS, betree::MAX_RUNS as u64);
    assert_eq!(predict::SMALL_RUN_SHARE, betree::SMALL_RUN_SHARE as f64);
    let w = super::Workload::new(1000).input(1 << 20, 1 << 20);
    assert_eq!(
        (w.run_budget, w.max_runs),
        (betree::RUN_BUDGET, betree::MAX_RUNS as u64)
    );
}

#[test]
fn the_betree_cache_charges() {
    use crate::engines::betree::basement::Basement;
    use crate::engines::betree::node::{BASEMENT_OVERHEAD, MESSAGE_OVERHEAD};
    // A leaf's entry costs its encoding plus what the flat basement keeps beside it.
    let (n, k, v) = (100usize, 16usize, 100usize);
    let val = Val::Inline(vec![1; v]);
    let entry = crate::engines::betree::basement::entry_len(&[0; 16], &val);
    let mut b = Basement::with_capacity(n, n * entry);
    for i in 0..n {
        let mut key = vec![0u8; k];
        key[..8].copy_from_slice(&(i as u64).to_be_bytes());
        b.push(&key, &val);
    }
    assert_eq!(
        b.heap_bytes() as f64,
        n as f64
            * (predict::be_leaf_entry_overhead(k as f64, v as f64)
                + (k + v) as f64
                + predict::BE_LEAF_ENTRY_HEAP)
    );
    assert_eq!(predict::BE_BASEMENT_CACHE, BASEMENT_OVERHEAD as f64);
    // The entry's lengths, priced as the basement encodes them, across the varints' steps.
    for (k, v) in [
        (0, 0),
        (16, 100),
        (63, 127),
        (64, 128),
        (300, 16_383),
        (8, 16_384),
    ] {
        let entry =
            crate::engines::betree::basement::entry_len(&vec![0; k], &Val::Inline(vec![0; v]));
        assert_eq!(
            entry as f64,
            predict::be_leaf_entry_overhead(k as f64, v as f64) + (k + v) as f64,
            "key {k} value {v}"
        );
    }
    assert_eq!(predict::CACHE_ENTRY, MESSAGE_OVERHEAD as f64);
}

#[test]
fn the_lsm_shape_entry_size_and_cache_charge() {
    use crate::engines::lsm::{policy, table, Config, Policy};
    use crate::model::lsm;
    let m = Msg {
        key: vec![0; 16],
        seq: 7,
        body: Body::Put(Val::Inline(vec![1; 100])),
    };
    // A message at a restart of a format-2 block (no prefix shared), beside the block's own
    // trailer (a restart offset, the two counts).
    let mut w = crate::engines::lsm::block::Writer::default();
    w.add(&m);
    assert_eq!(w.len() as f64 - 12.0, lsm::ENTRY_OVERHEAD + 116.0);
    // The model caches blocks at their size on disk: so does the engine's charge.
    let mut b = table::Builder::new(4096);
    b.add(std::slice::from_ref(&m));
    let (mut t, _) = b.finish(Vec::new(), 10.0, 1).expect("one message");
    let head = crate::storage::StoredNode::charge(&t);
    let len = t.blocks[0].loc.len as usize;
    t.blocks[0].data = Some(std::sync::Arc::new(vec![0; len]));
    assert_eq!(crate::storage::StoredNode::charge(&t), head + len);
    for p in [Policy::Leveled, Policy::Tiered, Policy::LazyLeveled] {
        let cfg = Config::with(p, 7);
        let inp = policy::model_input(&cfg, 1_000_000, 131.0);
        for i in 1..6 {
            assert_eq!(
                inp.level_capacity(i as u32),
                cfg.level_capacity(i) as f64,
                "{p:?} {i}"
            );
        }
    }
    // Dynamic levels: the model's steady shape, laid out as tables (the levels above the last
    // a hair under full), is one the engine's policy sizes alike and leaves as it is.
    let cfg = Config {
        memtable_bytes: 1 << 20,
        ..Config::with(Policy::Leveled, 10)
    };
    assert!(cfg.dynamic_levels);
    let inp = policy::model_input(&cfg, 10_000_000, 131.0);
    let sizes = inp.level_bytes();
    assert!(sizes.len() >= 3, "{sizes:?}");
    let mut levels = vec![policy::Level::default()];
    for (i, &bytes) in sizes.iter().enumerate() {
        let under = if i + 1 < sizes.len() { 0.999 } else { 1.0 };
        let t = policy::TableInfo {
            id: i as u64 + 1,
            bytes: (bytes * under) as u64,
            points: 0,
            puts: 0,
            ranges: 0,
            smallest: vec![0],
            largest: vec![9],
        };
        levels.push(policy::Level {
            runs: vec![vec![t]],
        });
    }
    let caps = policy::capacities(&levels, &cfg);
    for (i, &bytes) in sizes[..sizes.len() - 1].iter().enumerate() {
        let cap = caps[i + 1] as f64;
        assert!(
            (cap / bytes - 1.0).abs() < 1e-3,
            "level {}: {cap} vs {bytes}",
            i + 1
        );
    }
    assert_eq!(policy::pick(&levels, &cfg, &[]), None, "{sizes:?}");
}
