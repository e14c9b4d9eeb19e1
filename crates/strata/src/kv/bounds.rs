//! Key bounds: whether a key lies inside a scan's (`lo`, `hi`), where a paged scan goes next,
//! and the two-ended paging the facades' range iterators share. One copy for every engine and
//! both facades.

use std::collections::VecDeque;
use std::ops::Bound;

use crate::error::Result;

/// `key` is not below `lo`.
pub fn above_lo(key: &[u8], lo: Bound<&[u8]>) -> bool {
    match lo {
        Bound::Included(l) => key >= l,
        Bound::Excluded(l) => key > l,
        Bound::Unbounded => true,
    }
}

/// `key` is not beyond `hi`.
pub fn below_hi(key: &[u8], hi: Bound<&[u8]>) -> bool {
    match hi {
        Bound::Included(h) => key <= h,
        Bound::Excluded(h) => key < h,
        Bound::Unbounded => true,
    }
}

/// `key` lies inside (`lo`, `hi`).
pub fn within(key: &[u8], lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> bool {
    above_lo(key, lo) && below_hi(key, hi)
}

/// Where a paged scan goes after a leaf whose fence (the nearest pivot beyond the leaf in the
/// scan's direction) is `fence`, or `None` when the scan is done: the page is full, this was
/// the last leaf that way, or the next leaf lies wholly outside (`lo`, `hi`).
pub fn next_cursor(
    fence: Option<Vec<u8>>,
    lo: Bound<&[u8]>,
    hi: Bound<&[u8]>,
    reverse: bool,
    full: bool,
) -> Option<Bound<Vec<u8>>> {
    let f = fence?;
    // Keys of the leaves to the left are < f; those to the right are >= f.
    let outside = if reverse {
        matches!(lo, Bound::Included(l) | Bound::Excluded(l) if f.as_slice() <= l)
    } else {
        !below_hi(&f, hi)
    };
    if full || outside {
        return None;
    }
    Some(if reverse {
        Bound::Excluded(f)
    } else {
        Bound::Included(f)
    })
}

/// A key-value pair as a range iterator yields it.
pub type Entry = (Vec<u8>, Vec<u8>);

/// A range read a page at a time from either end, as `Db::range` and `VersionedDb::range_at`
/// iterate. Invariants: `lo`/`hi` bound what is left to fetch, past every key either end has
/// returned, so the two ends never return a key twice; once `done`, nothing more is returned.
pub struct Paged {
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    front: VecDeque<Entry>,
    back: VecDeque<Entry>,
    done: bool,
}

impl Paged {
    pub fn new(lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> Paged {
        let own = |b: Bound<&[u8]>| b.map(<[u8]>::to_vec);
        Paged {
            lo: own(lo),
            hi: own(hi),
            front: VecDeque::new(),
            back: VecDeque::new(),
            done: false,
        }
    }

    /// The next entry from the front (or the back, `reverse`), fetching a page with
    /// `fetch(lo, hi, reverse)` when that end's buffer is empty. An error ends the range.
    pub fn step(
        &mut self,
        reverse: bool,
        fetch: impl FnOnce(&Bound<Vec<u8>>, &Bound<Vec<u8>>, bool) -> Result<Vec<Entry>>,
    ) -> Option<Result<Entry>> {
        if self.done {
            return None;
        }
        let buf = if reverse {
            &mut self.back
        } else {
            &mut self.front
        };
        if buf.is_empty() {
            match fetch(&self.lo, &self.hi, reverse) {
                Ok(page) => *buf = page.into(),
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
        let Some((k, v)) = buf.pop_front() else {
            self.done = true;
            return None;
        };
        // The other end may have returned this key since the page was fetched.
        let (lo, hi) = (
            self.lo.as_ref().map(Vec::as_slice),
            self.hi.as_ref().map(Vec::as_slice),
        );
        if !within(&k, lo, hi) {
            self.done = true;
            return None;
        }
        if reverse {
            self.hi = Bound::Excluded(k.clone());
        } else {
            self.lo = Bound::Excluded(k.clone());
        }
        Some(Ok((k, v)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Bound::*;

    /// Pages of at most 2 from a sorted list, as an engine's scan would give them.
    fn page(all: &[u8], lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>, rev: bool) -> Vec<Entry> {
        let (l, h) = (
            lo.as_ref().map(Vec::as_slice),
            hi.as_ref().map(Vec::as_slice),
        );
        let mut keys: Vec<Entry> = all
            .iter()
            .map(|&b| (vec![b], vec![b]))
            .filter(|(k, _)| within(k, l, h))
            .collect();
        if rev {
            keys.reverse();
        }
        keys.truncate(2);
        keys
    }

    #[test]
    fn both_ends_meet_without_a_key_twice_and_an_error_ends_the_range() {
        let all = [1u8, 2, 3, 4, 5, 6, 7];
        let mut p = Paged::new(Included(&[2u8][..]), Excluded(&[7u8][..]));
        let mut got = Vec::new();
        for i in 0.. {
            let rev = i % 3 == 1;
            match p.step(rev, |lo, hi, r| Ok(page(&all, lo, hi, r))) {
                Some(Ok((k, _))) => got.push(k[0]),
                Some(Err(e)) => panic!("{e}"),
                None => break,
            }
        }
        got.sort();
        assert_eq!(got, [2, 3, 4, 5, 6]);
        let mut p = Paged::new(Unbounded, Unbounded);
        let failed = p.step(false, |_, _, _| {
            Err(crate::error::Error::InvalidOptions("test".into()))
        });
        assert!(matches!(failed, Some(Err(_))));
        assert!(p
            .step(false, |lo, hi, r| Ok(page(&all, lo, hi, r)))
            .is_none());
    }

    #[test]
    fn bounds_and_cursors() {
        assert!(within(b"b", Included(b"b"), Excluded(b"c")));
        assert!(!within(b"c", Included(b"b"), Excluded(b"c")));
        assert!(!within(b"b", Excluded(b"b"), Unbounded));
        assert!(within(b"z", Unbounded, Included(b"z")));
        // Forward: the next leaf starts at the fence.
        assert_eq!(
            next_cursor(Some(b"m".to_vec()), Unbounded, Excluded(b"z"), false, false),
            Some(Included(b"m".to_vec()))
        );
        assert_eq!(
            next_cursor(Some(b"m".to_vec()), Unbounded, Excluded(b"m"), false, false),
            None
        );
        assert!(
            next_cursor(Some(b"m".to_vec()), Unbounded, Included(b"m"), false, false).is_some()
        );
        // Backward: the previous leaf holds keys below the fence.
        assert_eq!(
            next_cursor(Some(b"m".to_vec()), Included(b"m"), Unbounded, true, false),
            None
        );
        assert_eq!(
            next_cursor(Some(b"m".to_vec()), Included(b"a"), Unbounded, true, false),
            Some(Excluded(b"m".to_vec()))
        );
        assert_eq!(next_cursor(None, Unbounded, Unbounded, false, false), None);
        assert_eq!(
            next_cursor(Some(b"m".to_vec()), Unbounded, Unbounded, false, true),
            None
        );
    }
}
