//! Deterministic records for `strata load`. Record i's key and value are pure functions of the
//! seed and i, so a read pass (or a later run) can regenerate any loaded record from its index
//! and check what the database returns.
//!
//! - Sequential keys: the big-endian counter i, left-padded with zeros to the key size (or cut to
//!   its low bytes when the key size is below 8, which needs i < 256^key_size).
//! - Random keys: the first 8 bytes are splitmix64(a + i·γ) for a seed-derived a and odd γ. The
//!   map from i is a bijection on u64, so distinct indices give distinct keys; further bytes come
//!   from a splitmix64 stream started at those 8 bytes.
//! - Values: incompressible bytes from a splitmix64 stream whose start depends on (seed, i).

use clap::ValueEnum;

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

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
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
            return Err("--key-size must be at least 1 byte".into());
        }
        if key_size > strata::MAX_KEY_LEN {
            return Err(format!(
                "--key-size of {key_size} bytes exceeds the maximum of {}",
                strata::MAX_KEY_LEN
            ));
        }
        if value_size > strata::MAX_VALUE_LEN {
            return Err(format!(
                "--value-size of {value_size} bytes exceeds the maximum of {}",
                strata::MAX_VALUE_LEN
            ));
        }
        if key_size < 8 {
            match order {
                Order::Random => {
                    return Err(format!(
                        "random keys need --key-size of at least 8 bytes to be distinct, not \
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

    /// Replace `out` with the value of record i.
    pub fn value(&self, i: u64, out: &mut Vec<u8>) {
        let start = mix(self.value_base.wrapping_add(i.wrapping_mul(GAMMA)));
        out.clear();
        Rng::new(start).extend(out, self.value_size);
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
    fn below_stays_in_range() {
        let mut rng = Rng::for_reads(7);
        assert!((0..10_000).all(|_| rng.below(13) < 13));
    }
}
