//! Shared test vectors for the record generator: the Go driver in `compare/go` ports `gen.rs`,
//! and both sides check themselves against `compare/go/testdata/vectors.json`, so Pebble and
//! bbolt provably load and read the very records strata's engines do.
//!
//! The file holds, for a few (order, key size, value size, seed), the keys and values (versions
//! 0 and 2) of some record indices in hex; uniform `below` draws and zipfian ranks and scattered
//! picks from given stream states (with ζ(n), and a digest of many draws to catch a rare
//! floating-point disagreement); splitmix64 outputs; the per-phase stream states; and workload
//! specs as serde writes them.
//!
//! `STRATA_WRITE_VECTORS=1 cargo test -p strata-bench --test vectors` rewrites the file from
//! this code instead of checking it.

use serde_json::{json, Value};
use strata_bench::gen::{mix, Order, Records, Rng, Zipf};
use strata_bench::workload::{Dist, Mix, Phase, Spec};

const PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../compare/go/testdata/vectors.json"
);

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn records() -> Value {
    let combos: [(Order, usize, usize, u64); 6] = [
        (Order::Random, 16, 100, 1),
        (Order::Random, 24, 13, 42),
        (Order::Random, 8, 1, u64::MAX),
        (Order::Sequential, 10, 0, 7),
        (Order::Sequential, 4, 33, 3),
        (Order::Sequential, 16, 100, 1),
    ];
    let indices = [0u64, 1, 2, 255, 256, 999_999, 1 << 31, u32::MAX as u64];
    let sets: Vec<Value> = combos
        .iter()
        .map(|&(order, key_size, value_size, seed)| {
            let r = Records::new(order, key_size, value_size, seed, 1000).unwrap();
            let cases: Vec<Value> = indices
                .iter()
                .map(|&i| {
                    let (mut k, mut v0, mut v2) = (Vec::new(), Vec::new(), Vec::new());
                    r.key(i, &mut k);
                    r.value_version(i, 0, &mut v0);
                    r.value_version(i, 2, &mut v2);
                    json!({ "index": i, "key": hex(&k), "value_v0": hex(&v0), "value_v2": hex(&v2) })
                })
                .collect();
            json!({
                "order": order.name(),
                "key_size": key_size,
                "value_size": value_size,
                "seed": seed,
                "cases": cases,
            })
        })
        .collect();
    Value::Array(sets)
}

fn below() -> Value {
    let cases = [
        (0u64, 1u64),
        (1, 2),
        (mix(7), 3),
        (Rng::for_reads(7).next_u64(), 100),
        (u64::MAX, 1_000_003),
        (12345, u64::MAX),
        (1 << 63, 1 << 63),
    ];
    let out: Vec<Value> = cases
        .iter()
        .map(|&(state, n)| {
            let mut rng = Rng::new(state);
            let draws: Vec<u64> = (0..16).map(|_| rng.below(n)).collect();
            json!({ "state": state, "n": n, "draws": draws })
        })
        .collect();
    Value::Array(out)
}

/// ζ(n) as gen.rs computes it (the same expression, summed in index order).
fn zeta(n: u64, theta: f64) -> f64 {
    (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>()
}

/// A fold of many draws into one number.
fn digest(draws: impl Iterator<Item = u64>) -> u64 {
    draws.fold(0, |h, d| mix(h ^ d))
}

const DIGEST_DRAWS: u64 = 100_000;

fn zipf() -> Value {
    let cases = [
        (1u64, Zipf::THETA, 5u64),
        (2, Zipf::THETA, 6),
        (3, Zipf::THETA, 7),
        (10, Zipf::THETA, 8),
        (1000, Zipf::THETA, 9),
        (1000, 0.5, 10),
        (100_000, Zipf::THETA, 11),
        (1_000_000, Zipf::THETA, mix(1 ^ (2 << 32))),
    ];
    let out: Vec<Value> = cases
        .iter()
        .map(|&(n, theta, state)| {
            let z = Zipf::new(n, theta);
            let mut rng = Rng::new(state);
            let ranks: Vec<u64> = (0..32).map(|_| z.rank(&mut rng)).collect();
            let mut rng = Rng::new(state);
            let scattered: Vec<u64> = (0..32).map(|_| z.scattered(&mut rng)).collect();
            let mut rng = Rng::new(state);
            let ranks_digest = digest((0..DIGEST_DRAWS).map(|_| z.rank(&mut rng)));
            let mut rng = Rng::new(state);
            let scattered_digest = digest((0..DIGEST_DRAWS).map(|_| z.scattered(&mut rng)));
            json!({
                "n": n,
                "theta": theta,
                "state": state,
                "zeta_n": zeta(n, theta),
                "ranks": ranks,
                "scattered": scattered,
                "digest_draws": DIGEST_DRAWS,
                "ranks_digest": ranks_digest,
                "scattered_digest": scattered_digest,
            })
        })
        .collect();
    Value::Array(out)
}

fn mixes() -> Value {
    let inputs = [0u64, 1, 0x9E37_79B9_7F4A_7C15, u64::MAX, 1 << 32];
    Value::Array(
        inputs
            .iter()
            .map(|&x| json!({ "input": x, "output": mix(x) }))
            .collect(),
    )
}

/// The stream each phase draws from (runner.rs: `mix(seed ^ (index + 1) << 32)`, where `<<`
/// binds tighter than `^`), and its first draw.
fn phase_streams() -> Value {
    let mut out = Vec::new();
    for seed in [0u64, 1, 42, u64::MAX] {
        for index in [0u64, 1, 5] {
            let state = mix(seed ^ (index + 1) << 32);
            assert_eq!(state, mix(seed ^ ((index + 1) << 32)));
            let first = Rng::new(state).next_u64();
            out.push(json!({ "seed": seed, "index": index, "state": state, "first": first }));
        }
    }
    Value::Array(out)
}

/// Specs as serde writes them, for the Go side's parser and printer: the presets, and one with
/// every kind of phase.
fn specs() -> Value {
    let mut every = Spec::rum(3000);
    every.name = "every-phase".into();
    every.order = Order::Sequential;
    every.sync = false;
    every.seed = u64::MAX;
    every.phases = vec![
        Phase::Load,
        Phase::Reopen,
        Phase::Reads {
            ops: 10,
            dist: Dist::Latest,
            cold: true,
        },
        Phase::Mixed {
            ops: 20,
            mix: Mix {
                read: 40,
                update: 20,
                insert: 10,
                scan: 10,
                read_modify_write: 20,
            },
            dist: Dist::Zipfian,
            scan_len: 7,
        },
        Phase::Scans {
            ops: 5,
            len: 50,
            dist: Dist::Uniform,
        },
        Phase::Deletes { ops: 100 },
    ];
    let mut specs = vec![Spec::rum(1_000_000), every];
    specs.extend("abcdef".chars().map(|c| Spec::ycsb(c, 1000, 500).unwrap()));
    Value::Array(
        specs
            .iter()
            .map(|s| serde_json::to_value(s).unwrap())
            .collect(),
    )
}

fn vectors() -> Value {
    json!({
        "comment": "Written by crates/strata-bench/tests/vectors.rs (STRATA_WRITE_VECTORS=1); \
                    checked by that test and by compare/go's gen_test.go. Keys and values in hex.",
        "mix": mixes(),
        "phase_streams": phase_streams(),
        "records": records(),
        "below": below(),
        "zipf": zipf(),
        "specs": specs(),
    })
}

/// The file's text: one line per vector, for readable diffs.
fn render(vectors: &Value) -> String {
    let sections: Vec<String> = vectors
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, value)| {
            let body = match value {
                Value::Array(items) => {
                    let lines: Vec<String> = items.iter().map(|v| format!("    {v}")).collect();
                    format!("[\n{}\n  ]", lines.join(",\n"))
                }
                other => other.to_string(),
            };
            format!("  {}: {body}", Value::from(name.as_str()))
        })
        .collect();
    format!("{{\n{}\n}}\n", sections.join(",\n"))
}

#[test]
fn the_generator_matches_the_shared_vectors() {
    let computed = vectors();
    if std::env::var("STRATA_WRITE_VECTORS").is_ok_and(|v| v == "1") {
        std::fs::write(PATH, render(&computed)).unwrap_or_else(|e| panic!("writing {PATH}: {e}"));
        eprintln!("wrote {PATH}");
        return;
    }
    let text = std::fs::read_to_string(PATH)
        .unwrap_or_else(|e| panic!("reading {PATH}: {e} (STRATA_WRITE_VECTORS=1 writes it)"));
    let stored: Value = serde_json::from_str(&text).unwrap();
    for (section, want) in computed.as_object().unwrap() {
        assert_eq!(
            stored.get(section),
            Some(want),
            "section {section:?} of {PATH} differs from what gen.rs computes"
        );
    }
}
