//! A Bloom filter over the keys of a sorted run (the Bε-tree's spilled runs, the LSM-tree's
//! tables), so that a point query reads a run from disk only when the run may hold a message
//! for its key.
//!
//! `build_bits` keeps the default seven probes at any bits per key (ten: about 0.8% false
//! positives; the Bε-tree's runs take 16, about 0.07%), for readers that store only the bytes
//! (`from_bytes`). `build_with` takes
//! any bits per key (the LSM-tree gives each level its own, after Monkey) and uses the probe
//! count that minimises false positives for it, b·ln 2; the caller records the probe count
//! beside the bytes. Probes are derived from one xxh3 of the key by double hashing (Kirsch and
//! Mitzenmacher), so a lookup hashes once. An empty filter answers "maybe" for every key: a
//! Bε-tree run holding a range delete has none, since a range cannot be probed by key.

use xxhash_rust::xxh3::xxh3_64;

const PROBES: u32 = 7;

/// The most probes a filter takes (about 43 bits per key would want more).
pub const MAX_PROBES: u32 = 30;

#[derive(Clone, Debug, PartialEq)]
pub struct Filter {
    bits: Vec<u8>,
    probes: u32,
}

impl Default for Filter {
    fn default() -> Filter {
        Filter {
            bits: Vec::new(),
            probes: PROBES,
        }
    }
}

fn probes_of(h: u64, nbits: u64, n: u32) -> impl Iterator<Item = u64> {
    let (a, b) = (h & 0xffff_ffff, (h >> 32) | 1);
    (0..n as u64).map(move |i| a.wrapping_add(i.wrapping_mul(b)) % nbits)
}

impl Filter {
    /// A filter of about `bits_per_key` bits per key with the best probe count for it; none
    /// (every key passes) below half a bit per key, where a filter saves almost no reads.
    /// A filter over `keys` (duplicates are harmless) at `bits_per_key` bits, probed the
    /// default number of times (seven, the best for ten bits), so that a reader
    /// that knows only the bytes (`from_bytes`) probes it right: more bits at the same probes
    /// is a lower false-positive rate (16 bits: about 0.07%, against 0.8% at 10).
    pub fn build_bits<'a>(
        keys: impl ExactSizeIterator<Item = &'a [u8]>,
        bits_per_key: usize,
    ) -> Filter {
        let nbits = (keys.len() * bits_per_key).max(64).next_multiple_of(8);
        Filter::fill(keys.map(Filter::hash), nbits, PROBES)
    }

    pub fn build_with<'a>(
        keys: impl ExactSizeIterator<Item = &'a [u8]>,
        bits_per_key: f64,
    ) -> Filter {
        Filter::build_hashed(keys.map(Filter::hash), bits_per_key)
    }

    /// `build_with` over the keys' `Filter::hash`es: a builder that sees each key once keeps
    /// eight bytes a key instead of a copy of it.
    pub fn build_hashed(hashes: impl ExactSizeIterator<Item = u64>, bits_per_key: f64) -> Filter {
        if bits_per_key < 0.5 || hashes.len() == 0 {
            return Filter::any();
        }
        let nbits = ((hashes.len() as f64 * bits_per_key).ceil() as usize)
            .max(64)
            .next_multiple_of(8);
        let k = (bits_per_key * std::f64::consts::LN_2).round() as u32;
        Filter::fill(hashes, nbits, k.clamp(1, MAX_PROBES))
    }

    fn fill(hashes: impl Iterator<Item = u64>, nbits: usize, n: u32) -> Filter {
        let mut bits = vec![0u8; nbits / 8];
        for h in hashes {
            for p in probes_of(h, nbits as u64, n) {
                bits[(p / 8) as usize] |= 1 << (p % 8);
            }
        }
        Filter { bits, probes: n }
    }

    /// The filter that lets every key through.
    pub fn any() -> Filter {
        Filter::default()
    }

    /// A filter of the default probe count from its bytes.
    pub fn from_bytes(bits: Vec<u8>) -> Filter {
        Filter::from_parts(bits, PROBES)
    }

    /// A filter from its bytes and probe count (`probes` must be 1 to `MAX_PROBES`).
    pub fn from_parts(bits: Vec<u8>, probes: u32) -> Filter {
        Filter { bits, probes }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bits
    }

    pub fn probes(&self) -> u32 {
        self.probes
    }

    /// False only when `key` is certainly not among the keys it was built over.
    pub fn may_hold(&self, key: &[u8]) -> bool {
        self.may_hold_hash(Filter::hash(key))
    }

    /// The hash a key's probes come from: computed once for a key that meets many filters
    /// (a Bε-tree leaf's runs), then `may_hold_hash` for each.
    pub fn hash(key: &[u8]) -> u64 {
        xxh3_64(key)
    }

    /// `may_hold` for the key whose `Filter::hash` is `h`.
    pub fn may_hold_hash(&self, h: u64) -> bool {
        if self.bits.is_empty() {
            return true;
        }
        let nbits = self.bits.len() as u64 * 8;
        probes_of(h, nbits, self.probes).all(|p| self.bits[(p / 8) as usize] & (1 << (p % 8)) != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_bits_at_the_default_probes_read_back_from_bytes_with_fewer_false_positives() {
        let keys: Vec<Vec<u8>> = (0..5_000u32).map(|i| i.to_be_bytes().to_vec()).collect();
        let rate = |f: &Filter| {
            (5_000..205_000u32)
                .filter(|i| f.may_hold(&i.to_be_bytes()))
                .count() as f64
                / 200_000.0
        };
        let ten = Filter::build_bits(keys.iter().map(|k| k.as_slice()), 10);
        let built = Filter::build_bits(keys.iter().map(|k| k.as_slice()), 16);
        // A reader knows only the bytes: it must probe the same way.
        let read = Filter::from_bytes(built.bytes().to_vec());
        assert!(keys.iter().all(|k| read.may_hold(k)));
        let (r10, r16) = (rate(&ten), rate(&read));
        assert!(r10 > 0.004 && r10 < 0.012, "10 bits: {r10}");
        assert!(r16 < 0.002, "16 bits: {r16}");
    }

    #[test]
    fn holds_every_key_it_was_built_over_and_few_others() {
        let keys: Vec<Vec<u8>> = (0..5_000u32).map(|i| i.to_be_bytes().to_vec()).collect();
        let f = Filter::build_bits(keys.iter().map(|k| k.as_slice()), 10);
        assert!(keys.iter().all(|k| f.may_hold(k)));
        let false_pos = (5_000..105_000u32)
            .filter(|i| f.may_hold(&i.to_be_bytes()))
            .count();
        // 10 bits per key and 7 probes give about 0.8%; allow up to 2%.
        assert!(false_pos < 2_000, "{false_pos} false positives in 100,000");
        let back = Filter::from_bytes(f.bytes().to_vec());
        assert_eq!(back, f);
    }

    /// False positives of `build_with` at `bits` per key, in 100,000 absent keys.
    fn false_positives(bits: f64) -> usize {
        let keys: Vec<Vec<u8>> = (0..5_000u32).map(|i| i.to_be_bytes().to_vec()).collect();
        let f = Filter::build_with(keys.iter().map(|k| k.as_slice()), bits);
        assert!(keys.iter().all(|k| f.may_hold(k)));
        let back = Filter::from_parts(f.bytes().to_vec(), f.probes());
        assert_eq!(back, f);
        (5_000..105_000u32)
            .filter(|i| f.may_hold(&i.to_be_bytes()))
            .count()
    }

    #[test]
    fn more_bits_per_key_give_fewer_false_positives_near_the_formula() {
        // exp(-b ln²2): 2 bits 38%, 5 bits 9.0%, 10 bits 0.82%, 16 bits 0.046%.
        let fp: Vec<usize> = [2.0, 5.0, 10.0, 16.0].map(false_positives).to_vec();
        assert!(fp.windows(2).all(|w| w[0] > w[1]), "{fp:?}");
        assert!((30_000..46_000).contains(&fp[0]), "{fp:?}");
        assert!((7_000..11_500).contains(&fp[1]), "{fp:?}");
        assert!((500..1_300).contains(&fp[2]), "{fp:?}");
        assert!(fp[3] < 150, "{fp:?}");
        assert_eq!(false_positives(0.2), 100_000, "no filter under half a bit");
    }

    #[test]
    fn built_from_hashes_is_built_from_keys() {
        let keys: Vec<Vec<u8>> = (0..3_000u32).map(|i| i.to_be_bytes().to_vec()).collect();
        for bits in [0.2, 3.0, 10.0, 17.5] {
            let f = Filter::build_with(keys.iter().map(|k| k.as_slice()), bits);
            let h = Filter::build_hashed(keys.iter().map(|k| Filter::hash(k)), bits);
            assert_eq!(f, h, "{bits} bits");
        }
    }

    #[test]
    fn an_empty_filter_lets_everything_through() {
        assert!(Filter::any().may_hold(b"anything"));
    }
}
