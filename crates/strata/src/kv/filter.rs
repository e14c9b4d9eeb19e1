//! A Bloom filter over the keys of a spilled run (see `node::RunRef`), so that a point query
//! reads a run from disk only when the run may hold a message for its key.
//!
//! Ten bits per key and seven probes: about 1% false positives. Probes are derived from one
//! xxh3 of the key by double hashing (Kirsch and Mitzenmacher), so a lookup hashes once.
//! An empty filter answers "maybe" for every key: a run holding a range delete has none, since
//! a range cannot be probed by key.

use xxhash_rust::xxh3::xxh3_64;

const BITS_PER_KEY: usize = 10;
const PROBES: u32 = 7;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Filter {
    bits: Vec<u8>,
}

fn probes(key: &[u8], nbits: u64) -> impl Iterator<Item = u64> {
    let h = xxh3_64(key);
    let (a, b) = (h & 0xffff_ffff, (h >> 32) | 1);
    (0..PROBES as u64).map(move |i| a.wrapping_add(i.wrapping_mul(b)) % nbits)
}

impl Filter {
    /// A filter over `keys` (duplicates are harmless).
    pub fn build<'a>(keys: impl ExactSizeIterator<Item = &'a [u8]>) -> Filter {
        let nbits = (keys.len() * BITS_PER_KEY).max(64).next_multiple_of(8);
        let mut bits = vec![0u8; nbits / 8];
        for k in keys {
            for p in probes(k, nbits as u64) {
                bits[(p / 8) as usize] |= 1 << (p % 8);
            }
        }
        Filter { bits }
    }

    /// The filter that lets every key through.
    pub fn any() -> Filter {
        Filter::default()
    }

    pub fn from_bytes(bits: Vec<u8>) -> Filter {
        Filter { bits }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bits
    }

    /// False only when `key` is certainly not among the keys it was built over.
    pub fn may_hold(&self, key: &[u8]) -> bool {
        if self.bits.is_empty() {
            return true;
        }
        let nbits = self.bits.len() as u64 * 8;
        probes(key, nbits).all(|p| self.bits[(p / 8) as usize] & (1 << (p % 8)) != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_every_key_it_was_built_over_and_few_others() {
        let keys: Vec<Vec<u8>> = (0..5_000u32).map(|i| i.to_be_bytes().to_vec()).collect();
        let f = Filter::build(keys.iter().map(|k| k.as_slice()));
        assert!(keys.iter().all(|k| f.may_hold(k)));
        let false_pos = (5_000..105_000u32)
            .filter(|i| f.may_hold(&i.to_be_bytes()))
            .count();
        // 10 bits per key and 7 probes give about 0.8%; allow up to 2%.
        assert!(false_pos < 2_000, "{false_pos} false positives in 100,000");
        let back = Filter::from_bytes(f.bytes().to_vec());
        assert_eq!(back, f);
    }

    #[test]
    fn an_empty_filter_lets_everything_through() {
        assert!(Filter::any().may_hold(b"anything"));
    }
}
