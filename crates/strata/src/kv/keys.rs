//! A sorted node's keys, with each key's first 8 bytes kept beside it as a big-endian integer,
//! and the shortest separator between two nodes' keys.
//!
//! Keys are separate heap allocations, so a binary search over them misses the cache on every
//! probe; searching the contiguous `heads` first touches one small array and dereferences a key
//! only when two heads tie. Heads order consistently with keys: zero-padding a key to 8 bytes
//! never reverses an inequality, it can only turn one into a tie.

use std::cmp::Ordering;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Keys {
    keys: Vec<Vec<u8>>,
    heads: Vec<u64>,
}

pub fn head(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(b)
}

/// The shortest key s with `left < s <= right`, used as a leaf separator to keep internal nodes
/// small (suffix truncation).
pub fn shortest_separator(left: &[u8], right: &[u8]) -> Vec<u8> {
    debug_assert!(left < right);
    let common = left.iter().zip(right).take_while(|(a, b)| a == b).count();
    right[..(common + 1).min(right.len())].to_vec()
}

impl Keys {
    pub fn with_capacity(n: usize) -> Keys {
        Keys {
            keys: Vec::with_capacity(n),
            heads: Vec::with_capacity(n),
        }
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn get(&self, i: usize) -> &[u8] {
        &self.keys[i]
    }

    pub fn first(&self) -> Option<&[u8]> {
        self.keys.first().map(|k| k.as_slice())
    }

    pub fn last(&self) -> Option<&[u8]> {
        self.keys.last().map(|k| k.as_slice())
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &[u8]> + ExactSizeIterator {
        self.keys.iter().map(|k| k.as_slice())
    }

    fn cmp_at(&self, i: usize, key: &[u8], h: u64) -> Ordering {
        match self.heads[i].cmp(&h) {
            Ordering::Equal => self.keys[i].as_slice().cmp(key),
            o => o,
        }
    }

    /// Ok(i) if `key` is at i, else Err(where it would go).
    pub fn search(&self, key: &[u8]) -> Result<usize, usize> {
        let h = head(key);
        let (mut lo, mut hi) = (0, self.keys.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.cmp_at(mid, key, h) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    /// How many keys are <= `key` (with `inclusive`) or < `key`.
    pub fn rank(&self, key: &[u8], inclusive: bool) -> usize {
        match self.search(key) {
            Ok(i) => i + inclusive as usize,
            Err(i) => i,
        }
    }

    pub fn insert(&mut self, i: usize, key: Vec<u8>) {
        self.heads.insert(i, head(&key));
        self.keys.insert(i, key);
    }

    pub fn push(&mut self, key: Vec<u8>) {
        self.heads.push(head(&key));
        self.keys.push(key);
    }

    pub fn pop(&mut self) -> Option<Vec<u8>> {
        self.heads.pop();
        self.keys.pop()
    }

    pub fn remove(&mut self, i: usize) -> Vec<u8> {
        self.heads.remove(i);
        self.keys.remove(i)
    }

    pub fn replace(&mut self, i: usize, key: Vec<u8>) -> Vec<u8> {
        self.heads[i] = head(&key);
        std::mem::replace(&mut self.keys[i], key)
    }

    pub fn split_off(&mut self, at: usize) -> Keys {
        Keys {
            keys: self.keys.split_off(at),
            heads: self.heads.split_off(at),
        }
    }

    pub fn into_vec(self) -> Vec<Vec<u8>> {
        self.keys
    }

    pub fn append(&mut self, other: &mut Keys) {
        self.keys.append(&mut other.keys);
        self.heads.append(&mut other.heads);
    }
}

impl From<Vec<Vec<u8>>> for Keys {
    fn from(keys: Vec<Vec<u8>>) -> Keys {
        let heads = keys.iter().map(|k| head(k)).collect();
        Keys { keys, heads }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separators_are_short_and_between() {
        assert_eq!(shortest_separator(b"abc", b"abd"), b"abd");
        assert_eq!(shortest_separator(b"ab", b"abzz"), b"abz");
        assert_eq!(shortest_separator(b"apple", b"banana"), b"b");
        assert_eq!(shortest_separator(b"", b"\x00"), b"\x00");
    }

    #[test]
    fn search_agrees_with_plain_comparison_on_tricky_keys() {
        let mut sorted: Vec<Vec<u8>> = vec![
            vec![],
            vec![0],
            vec![0, 0],
            b"a".to_vec(),
            b"a\0".to_vec(),
            b"a\0\0\0\0\0\0\0\0".to_vec(),
            b"abcdefgh".to_vec(),
            b"abcdefgh\0".to_vec(),
            b"abcdefghi".to_vec(),
            b"abcdefgi".to_vec(),
            vec![0xff; 9],
        ];
        sorted.sort();
        let mut k = Keys::default();
        for s in &sorted {
            k.push(s.clone());
        }
        for (i, s) in sorted.iter().enumerate() {
            assert_eq!(k.search(s), Ok(i));
            let mut probe = s.clone();
            probe.push(0);
            assert_eq!(k.search(&probe), sorted.binary_search(&probe), "{probe:?}");
            assert_eq!(k.rank(s, true), i + 1);
            assert_eq!(k.rank(s, false), i);
        }
    }
}
