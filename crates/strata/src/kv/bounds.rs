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

/// Entries in a range iterator's first page from either end.
pub const FIRST_PAGE: usize = 256;

/// The most entries in one page: each page from an end is twice the last, up to this. A short
/// range resolves little past what it takes, and a long one does not pay an engine's fixed
/// cost per page too often: a Bε-tree's scan resolves the leaf it is in (about 8K entries and
/// as many buffered messages at 1 MiB nodes) once per page, and a full scan of 1M keys loaded
/// at 16 MiB took 16 s in pages of 256 against 3.7 s in these.
pub const MAX_PAGE: usize = 4096;

/// A range read a page at a time from either end, as `Db::range` and `VersionedDb::range_at`
/// iterate. Invariants: `lo`/`hi` bound what is left to fetch, past every key either end has
/// returned, so the two ends never return a key twice; once `done`, nothing more is returned.
pub struct Paged {
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    front: VecDeque<Entry>,
    back: VecDeque<Entry>,
    /// The size of the next page from the front and from the back.
    pages: [usize; 2],
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
            pages: [FIRST_PAGE; 2],
            done: false,
        }
    }

    /// The next entry from the front (or the back, `reverse`), fetching a page of up to
    /// `limit` entries with `fetch(lo, hi, reverse, limit)` when that end's buffer is empty
    /// (`FIRST_PAGE`, doubling with each page from that end up to `MAX_PAGE`). An error ends
    /// the range.
    pub fn step(
        &mut self,
        reverse: bool,
        fetch: impl FnOnce(&Bound<Vec<u8>>, &Bound<Vec<u8>>, bool, usize) -> Result<Vec<Entry>>,
    ) -> Option<Result<Entry>> {
        if self.done {
            return None;
        }
        let (buf, page) = if reverse {
            (&mut self.back, &mut self.pages[1])
        } else {
            (&mut self.front, &mut self.pages[0])
        };
        if buf.is_empty() {
            let limit = *page;
            *page = (limit * 2).min(MAX_PAGE);
            match fetch(&self.lo, &self.hi, reverse, limit) {
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
    fn page(
        all: &[u8],
        lo: &Bound<Vec<u8>>,
        hi: &Bound<Vec<u8>>,
        rev: bool,
        _: usize,
    ) -> Vec<Entry> {
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
            match p.step(rev, |lo, hi, r, n| Ok(page(&all, lo, hi, r, n))) {
                Some(Ok((k, _))) => got.push(k[0]),
                Some(Err(e)) => panic!("{e}"),
                None => break,
            }
        }
        got.sort();
        assert_eq!(got, [2, 3, 4, 5, 6]);
        let mut p = Paged::new(Unbounded, Unbounded);
        let failed = p.step(false, |_, _, _, _| {
            Err(crate::error::Error::InvalidOptions("test".into()))
        });
        assert!(matches!(failed, Some(Err(_))));
        assert!(p
            .step(false, |lo, hi, r, n| Ok(page(&all, lo, hi, r, n)))
            .is_none());
    }

    #[test]
    fn pages_from_each_end_double_up_to_the_most() {
        let all: Vec<u8> = (0..=255).collect();
        let mut p = Paged::new(Unbounded, Unbounded);
        let mut asked = [Vec::new(), Vec::new()];
        for i in 0..40 {
            let rev = i % 2 == 1;
            // Each fetch returns one entry, so every step fetches.
            p.step(rev, |lo, hi, r, n| {
                asked[r as usize].push(n);
                let mut one = page(&all, lo, hi, r, n);
                one.truncate(1);
                Ok(one)
            });
        }
        let want: Vec<usize> = (0..20)
            .map(|i| (FIRST_PAGE << i.min(8)).min(MAX_PAGE))
            .collect();
        assert_eq!(asked[0], want);
        assert_eq!(asked[1], want);
        assert_eq!(*asked[0].last().unwrap(), MAX_PAGE);
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
