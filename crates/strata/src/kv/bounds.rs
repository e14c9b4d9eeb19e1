//! Key bounds: whether a key lies inside a scan's (`lo`, `hi`), and where a paged scan goes
//! next. One copy for every engine and the facade's iterator.

use std::ops::Bound;

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

#[cfg(test)]
mod tests {
    use super::*;
    use Bound::*;

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
