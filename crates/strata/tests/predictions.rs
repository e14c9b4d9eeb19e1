//! Measured IO against the model's predictions (seed 000 Lemma 5, Lemma 8 / Theorem 9, and the
//! engine's account of a load): the amortised bytes a random insert writes to the data file,
//! for both trees, on a simulated disk whose IO counts are exact.

use strata::model::predict::{self, PredictInput};
use strata::model::Affine;
use strata::storage::SimEnv;
use strata::{Db, Durability, Options};

fn key(i: u64) -> Vec<u8> {
    format!("{:016x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).into_bytes()
}

/// Insert `n` random keys (16-byte keys, 100-byte values) and return data-file bytes written
/// per insert, after the writes of a final checkpoint.
fn measured_write_bytes(opts: Options, n: u64) -> f64 {
    let env = SimEnv::new();
    let db = Db::open_in(&env, opts.durability(Durability::None)).unwrap();
    let before = db.metrics().data_io.bytes_written;
    for i in 0..n {
        db.put(key(i), [i as u8; 100]).unwrap();
    }
    db.checkpoint().unwrap();
    (db.metrics().data_io.bytes_written - before) as f64 / n as f64
}

#[test]
fn insert_write_bytes_match_the_prediction_within_2x() {
    let n = 200_000u64;
    let cache = 2u64 << 20;
    let wal = 64u64 << 20;
    let m = Affine::default_ssd();
    for (name, opts, node, fanout, basement) in [
        (
            "betree",
            Options::default().betree(256 << 10, 16, 16 << 10),
            256u64 << 10,
            Some(16),
            16u64 << 10,
        ),
        (
            "btree",
            Options::default().btree(16 << 10),
            16 << 10,
            None,
            0,
        ),
    ] {
        let opts = opts.cache_bytes(cache as usize).checkpoint_wal_bytes(wal);
        let measured = measured_write_bytes(opts, n);
        let mut inp = PredictInput::new(node, n, 16, 100, cache);
        inp.fanout = fanout;
        if basement > 0 {
            inp.basement_bytes = basement;
        }
        inp.inserts_per_checkpoint = predict::checkpoint_inserts(wal, 16, 100);
        // The Bε-tree spills flushes into uncached leaves as runs, so it writes less than
        // Theorem 9's account (every flush rewrites its child), which stays an upper bound; the
        // engine's own account of a load (`betree_load`) is what it should match.
        let (predicted, bound) = if fanout.is_some() {
            let load = predict::betree_load(&inp, &m);
            let kv = 116.0;
            (
                (load.leaves + load.internal) * kv,
                predict::betree_paper(&inp, &m).insert.write_bytes,
            )
        } else {
            (predict::btree(&inp, &m).insert.write_bytes, f64::INFINITY)
        };
        eprintln!("{name}: {measured:.0} bytes written per insert, predicted {predicted:.0}");
        assert!(
            measured <= 2.0 * predicted && measured >= predicted / 2.0,
            "{name}: measured {measured:.0} B per insert, predicted {predicted:.0}"
        );
        assert!(
            measured <= bound,
            "{name}: measured {measured:.0} B per insert, above Theorem 9's {bound:.0}"
        );
    }
}
