//! Deterministic records for `strata load` and the benchmark workloads. Record i's key and value
//! are pure functions of the seed and i (and, for a rewritten value, its version), so a read pass
//! (or a later run, or the Go driver in `compare/go`) can regenerate any record from its index and
//! check what the database returns.
//!
//! - Sequential keys: the big-endian counter i, left-padded with zeros to the key size (or cut to
//!   its low bytes when the key size is below 8, which needs i < 256^key_size).
//! - Random keys: the first 8 bytes are splitmix64(a + i·γ) for a seed-derived a and odd γ. The
//!   map from i is a bijection on u64, so distinct indices give distinct keys; further bytes come
//!   from a splitmix64 stream started at those 8 bytes.
//! - Values: incompressible bytes from a splitmix64 stream whose start depends on (seed, i); the
//!   value a record is rewritten with in version v > 0 starts at that start plus v·γ·γ.
//! - Skewed choices: YCSB's zipfian generator (Gray et al., "Quickly generating billion-record
//!   synthetic databases", SIGMOD 1994), with the rank scrambled by splitmix64 so that the hot
//!   records are spread over the key space rather than being the first ones loaded.

use serde::{Deserialize, Serialize};

/// The golden-ratio increment of splitmix64.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;
/// Salts that give keys, values and read indices independent streams from one seed.
const KEY_SALT: u64 = 0x6b65_7973;
const VALUE_SALT: u64 = 0x7661_6c75_6573;
const READ_SALT: u64 = 0x0072_6561_6473;

/// The splitmix64 output function: a bijection on u64 with good avalanche.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A splitmix64 stream.
pub struct Rng(u64);

impl Rng {
    pub fn new(state: u64) -> Rng {
        Rng(state)
    }

    /// The stream the read pass draws record indices from.
    pub fn for_reads(seed: u64) -> Rng {
        Rng(mix(seed ^ READ_SALT))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GAMMA);
        mix(self.0)
    }

    /// Uniform in 0..n (n > 0), by multiply-high.
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Append `len` bytes of the stream to `out`.
    pub fn extend(&mut self, out: &mut Vec<u8>, len: usize) {
        let end = out.len() + len;
        while out.len() < end {
            let word = self.next_u64().to_le_bytes();
            let take = (end - out.len()).min(8);
            out.extend_from_slice(&word[..take]);
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Order {
    /// Keys in ascending order (a big-endian counter).
    Sequential,
    /// Keys in pseudo-random order (a hash of the seed and the counter).
    Random,
}

impl Order {
    pub fn name(self) -> &'static str {
        match self {
            Order::Sequential => "sequential",
            Order::Random => "random",
        }
    }
}

/// The generator of `count` records with fixed key and value sizes.
pub struct Records {
    order: Order,
    key_size: usize,
    value_size: usize,
    key_base: u64,
    value_base: u64,
}

impl Records {
    /// Refuses sizes for which `count` distinct keys cannot be guaranteed.
    pub fn new(
        order: Order,
        key_size: usize,
        value_size: usize,
        seed: u64,
        count: u64,
    ) -> Result<Records, String> {
        if key_size == 0 {
            return Err("the key size must be at least 1 byte".into());
        }
        if key_size > strata::MAX_KEY_LEN {
            return Err(format!(
                "a key size of {key_size} bytes exceeds the maximum of {}",
                strata::MAX_KEY_LEN
            ));
        }
        if value_size > strata::MAX_VALUE_LEN {
            return Err(format!(
                "a value size of {value_size} bytes exceeds the maximum of {}",
                strata::MAX_VALUE_LEN
            ));
        }
        if key_size < 8 {
            match order {
                Order::Random => {
                    return Err(format!(
                        "random keys need a key size of at least 8 bytes to be distinct, not \
                         {key_size}"
                    ))
                }
                Order::Sequential if count > 1u64 << (8 * key_size) => {
                    return Err(format!(
                        "{count} sequential keys do not fit in {key_size}-byte keys"
                    ))
                }
                Order::Sequential => {}
            }
        }
        Ok(Records {
            order,
            key_size,
            value_size,
            key_base: mix(seed ^ KEY_SALT),
            value_base: mix(seed ^ VALUE_SALT),
        })
    }

    /// Replace `out` with the key of record i.
    pub fn key(&self, i: u64, out: &mut Vec<u8>) {
        out.clear();
        match self.order {
            Order::Sequential => {
                let be = i.to_be_bytes();
                if self.key_size >= 8 {
                    out.resize(self.key_size - 8, 0);
                    out.extend_from_slice(&be);
                } else {
                    out.extend_from_slice(&be[8 - self.key_size..]);
                }
            }
            Order::Random => {
                let head = mix(self.key_base.wrapping_add(i.wrapping_mul(GAMMA)));
                out.extend_from_slice(&head.to_be_bytes());
                Rng::new(head).extend(out, self.key_size - 8);
            }
        }
    }

    /// Replace `out` with the value of record i as first loaded.
    pub fn value(&self, i: u64, out: &mut Vec<u8>) {
        self.value_version(i, 0, out)
    }

    /// Replace `out` with the value record i holds after its `version`-th rewrite.
    pub fn value_version(&self, i: u64, version: u64, out: &mut Vec<u8>) {
        let start = mix(self.value_base.wrapping_add(i.wrapping_mul(GAMMA)))
            .wrapping_add(version.wrapping_mul(GAMMA.wrapping_mul(GAMMA)));
        out.clear();
        Rng::new(start).extend(out, self.value_size);
    }

    pub fn key_size(&self) -> usize {
        self.key_size
    }

    pub fn value_size(&self) -> usize {
        self.value_size
    }
}

/// YCSB's zipfian distribution over ranks 0..n (rank 0 most popular), with constant θ.
pub struct Zipf {
    n: u64,
    theta: f64,
    alpha: f64,
    zeta_n: f64,
    eta: f64,
}

impl Zipf {
    /// YCSB's default skew.
    pub const THETA: f64 = 0.99;

    /// Costs O(n) once, for ζ(n).
    pub fn new(n: u64, theta: f64) -> Zipf {
        assert!(n > 0 && theta > 0.0 && theta < 1.0);
        let zeta = |n: u64| (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zeta_n = zeta(n);
        let zeta_2 = zeta(2.min(n));
        let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta_2 / zeta_n);
        Zipf {
            n,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zeta_n,
            eta,
        }
    }

    /// A rank in 0..n; small ranks are the popular ones.
    pub fn rank(&self, rng: &mut Rng) -> u64 {
        let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let uz = u * self.zeta_n;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(self.n - 1);
        }
        let r = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.n - 1)
    }

    /// A record index in 0..n whose popularity follows the distribution, with the popular
    /// records scattered (rank r maps to a hash of r, reduced to 0..n).
    pub fn scattered(&self, rng: &mut Rng) -> u64 {
        let r = self.rank(rng);
        ((mix(r ^ KEY_SALT) as u128 * self.n as u128) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn keys(r: &Records, n: u64) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| {
                let mut k = Vec::new();
                r.key(i, &mut k);
                k
            })
            .collect()
    }

    #[test]
    fn sequential_keys_are_ordered_counters() {
        let r = Records::new(Order::Sequential, 10, 0, 1, 1000).unwrap();
        let ks = keys(&r, 1000);
        assert_eq!(ks[0], [0u8; 10]);
        assert_eq!(ks[258], [0, 0, 0, 0, 0, 0, 0, 0, 1, 2]);
        assert!(ks.windows(2).all(|w| w[0] < w[1]));
        let short = Records::new(Order::Sequential, 2, 0, 1, 65536).unwrap();
        assert_eq!(keys(&short, 300)[258], [1, 2]);
        assert!(Records::new(Order::Sequential, 2, 0, 1, 65537).is_err());
    }

    #[test]
    fn random_keys_are_distinct_deterministic_and_seeded() {
        let r = Records::new(Order::Random, 16, 0, 42, 1 << 16).unwrap();
        let ks = keys(&r, 1 << 16);
        assert!(ks.iter().all(|k| k.len() == 16));
        assert_eq!(ks.iter().collect::<HashSet<_>>().len(), ks.len());
        assert!(ks.windows(2).any(|w| w[0] > w[1]), "not in ascending order");
        assert_eq!(keys(&r, 10), ks[..10]);
        let other = Records::new(Order::Random, 16, 0, 43, 10).unwrap();
        assert_ne!(keys(&other, 10), ks[..10]);
        assert!(Records::new(Order::Random, 7, 0, 42, 10).is_err());
        assert!(Records::new(Order::Random, 0, 0, 42, 10).is_err());
    }

    #[test]
    fn values_are_per_record_and_look_random() {
        let r = Records::new(Order::Random, 16, 1000, 42, 10).unwrap();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        r.value(3, &mut a);
        r.value(3, &mut b);
        assert_eq!((a.len(), &a), (1000, &b));
        r.value(4, &mut b);
        assert_ne!(a, b);
        let distinct = a.iter().collect::<HashSet<_>>().len();
        assert!(distinct > 200, "only {distinct} distinct byte values");
    }

    #[test]
    fn rewritten_values_differ_from_the_first() {
        let r = Records::new(Order::Random, 16, 100, 42, 10).unwrap();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        r.value(3, &mut a);
        r.value_version(3, 0, &mut b);
        assert_eq!(a, b);
        r.value_version(3, 1, &mut b);
        assert_ne!(a, b);
    }

    #[test]
    fn zipf_is_skewed_towards_low_ranks() {
        let z = Zipf::new(10_000, Zipf::THETA);
        let mut rng = Rng::new(5);
        let mut counts = vec![0u32; 10_000];
        for _ in 0..200_000 {
            counts[z.rank(&mut rng) as usize] += 1;
        }
        // With θ = 0.99, rank 0 draws about 1/ζ(n) ≈ 10% of the samples and rank r about
        // 1/(r+1)^θ of that.
        assert!(counts[0] > 15_000 && counts[0] < 25_000, "{}", counts[0]);
        assert!(counts[0] > 5 * counts[9]);
        let top_100: u32 = counts[..100].iter().sum();
        assert!(top_100 > 100_000, "top 100 ranks drew {top_100}");
        assert!(counts[5_000..].iter().sum::<u32>() > 0);
        let mut scattered = std::collections::HashSet::new();
        for _ in 0..1000 {
            scattered.insert(z.scattered(&mut rng));
        }
        assert!(scattered.iter().all(|&i| i < 10_000));
    }

    #[test]
    fn below_stays_in_range() {
        let mut rng = Rng::for_reads(7);
        assert!((0..10_000).all(|_| rng.below(13) < 13));
    }
}
