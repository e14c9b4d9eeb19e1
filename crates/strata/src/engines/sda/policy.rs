//! The SDA's policy, pure (no IO): which array goes to which level, which two arrays merge
//! next, which entries a merge keeps, and how a merged array that is not dense enough splits
//! (density amplification). `merge.rs` does the IO these decisions call for.
//!
//! - Doubling: an array of n entries belongs at level ⌊log2(n / base)⌋ (0 below base); a new
//!   array is placed at the higher of that and its sources' level, so it never moves down
//!   (no merge/split ping-pong).
//! - Stratification: the arrays of one level have pairwise disjoint version sets W. Two that
//!   intersect merge (`next_merge`, lowest level first); the merge's pieces partition
//!   W1 ∪ W2, so each merge strictly shrinks the level's Σ|W| and merging terminates.
//! - Liveness: entry e of (k, x) is live at w ∈ W when, among the array's entries of k, it is
//!   the first (`Entry::order`) whose version is an ancestor-or-self of w. A merge keeps only
//!   entries live at some w of its W: the rest are hidden from every version the array
//!   serves (a deleted version's, a rewrite's older copy), and are reclaimed there.
//! - Tombstones: a merge also drops the tombstones that hide no value it keeps
//!   (`bare_tombstones`) when no array outside it may hold an entry of their key at their
//!   version or an ancestor (`merge::Outside`: the versions that wrote each array, its key
//!   range and filter). Such an entry, older, would come back: to the versions reading the
//!   array now, or to those a later merge unites with it. `Sda::compact` holds every entry,
//!   so there nothing is outside.
//! - Density: every w ∈ W sees at least `DENSITY` of the array's entries. `split` cuts W into
//!   subtree pieces that each are dense, copying the shared ancestors' entries into each.
//! - Reclamation: a version delete can leave an array with entries of versions that are no
//!   ancestor-or-self of any version it still serves (a deleted leaf's writes, a removed
//!   ghost's); no read at a version of W reaches them (`unreachable`, from the array's count of
//!   entries per version). Once they are `RECLAIM` of its entries, the array is rewritten on
//!   its own (`next_reclaim`), keeping what W reads, at its level: its W is unchanged, so
//!   stratification is too. Each rewrite frees at least `RECLAIM` of what it writes, so a
//!   deleted entry costs at most 1 / `RECLAIM` entries rewritten.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::array::Entry;
use crate::engine::versions::{Version, VersionTree};
use crate::storage::NodeId;

/// The least fraction of an array's entries that each version of its W sees (seed 003: 1/3).
pub const DENSITY_NUM: usize = 1;
pub const DENSITY_DEN: usize = 3;

/// Reclaim an array once this fraction of its entries is unreachable (1/8: after the
/// rewrite at most an eighth of an array is waste that a delete left behind).
pub const RECLAIM_NUM: u64 = 1;
pub const RECLAIM_DEN: u64 = 8;

/// An array as the manifest knows it.
#[derive(Clone, Debug, PartialEq)]
pub struct ArrayInfo {
    pub id: NodeId,
    pub entries: u64,
    pub bytes: u64,
    /// The live versions this array serves, ascending.
    pub versions: Vec<Version>,
    /// How many of its entries each version wrote (the version of the entry), ascending by
    /// version; fixed for the array's life. Empty for arrays of manifests before version 3
    /// (unknown: never reclaimed on their own, only by ordinary merges).
    pub by_version: Vec<(Version, u64)>,
    /// Entries no version of W can reach (`unreachable`); kept in memory, recomputed at open
    /// and after each version delete.
    pub dead: u64,
    /// How many of its entries are tombstones, if known: counted as a flush or merge writes
    /// the array, not kept in the manifest (None after an open). A merge of arrays known to
    /// hold none skips the look for tombstones it could drop (`merge::Outside`).
    pub tombstones: Option<u64>,
}

impl ArrayInfo {
    pub fn serves(&self, v: Version) -> bool {
        self.versions.binary_search(&v).is_ok()
    }

    fn meets(&self, other: &ArrayInfo) -> bool {
        let (mut i, mut j) = (0, 0);
        while i < self.versions.len() && j < other.versions.len() {
            match self.versions[i].cmp(&other.versions[j]) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => return true,
            }
        }
        false
    }
}

/// How many entries of `a` no version of its W reaches: those of versions that are no
/// ancestor-or-self of any of them (removed from the tree, or above none of W).
pub fn unreachable(a: &ArrayInfo, tree: &VersionTree) -> u64 {
    let mut reach: HashSet<Version> = HashSet::new();
    for &w in &a.versions {
        for x in tree.ancestry(w) {
            if !reach.insert(x) {
                break; // the rest of the chain is in already
            }
        }
    }
    a.by_version
        .iter()
        .filter(|(x, _)| !reach.contains(x))
        .map(|(_, n)| n)
        .sum()
}

/// Entries per version of `entries`, ascending by version.
pub fn count_by_version<'a>(versions: impl Iterator<Item = &'a Version>) -> Vec<(Version, u64)> {
    let mut m: BTreeMap<Version, u64> = BTreeMap::new();
    for &v in versions {
        *m.entry(v).or_default() += 1;
    }
    m.into_iter().collect()
}

/// An array whose unreachable entries have reached `RECLAIM` of it, lowest level first: its
/// (level, index).
pub fn next_reclaim(levels: &[Vec<ArrayInfo>]) -> Option<(usize, usize)> {
    levels.iter().enumerate().find_map(|(l, arrays)| {
        arrays
            .iter()
            .position(|a| a.dead > 0 && a.dead * RECLAIM_DEN >= a.entries * RECLAIM_NUM)
            .map(|i| (l, i))
    })
}

/// The level an array of `entries` belongs at.
pub fn level_for(entries: u64, base: u32) -> usize {
    let ratio = entries / base.max(1) as u64;
    if ratio == 0 {
        0
    } else {
        ratio.ilog2() as usize
    }
}

/// The lowest level holding two arrays whose version sets intersect, and their indices: the
/// first array (i) that meets a later one, with the first such later one (j). One pass over
/// the level's version sets (a level may hold hundreds of arrays when there are hundreds of
/// leaves, so comparing every pair is too slow).
pub fn next_merge(levels: &[Vec<ArrayInfo>]) -> Option<(usize, usize, usize)> {
    next_merge_except(levels, &[])
}

/// `next_merge` among the arrays whose ids are not in `busy` (a running merge's inputs).
pub fn next_merge_except(
    levels: &[Vec<ArrayInfo>],
    busy: &[NodeId],
) -> Option<(usize, usize, usize)> {
    for (l, arrays) in levels.iter().enumerate() {
        // For each version, the arrays holding it, ascending.
        let mut holders: HashMap<Version, Vec<usize>> = HashMap::new();
        for (i, a) in arrays.iter().enumerate() {
            if busy.contains(&a.id) {
                continue;
            }
            for &v in &a.versions {
                holders.entry(v).or_default().push(i);
            }
        }
        if holders.values().all(|h| h.len() < 2) {
            continue;
        }
        for (i, a) in arrays.iter().enumerate() {
            if busy.contains(&a.id) {
                continue;
            }
            let j = a
                .versions
                .iter()
                .filter_map(|v| {
                    let h = &holders[v];
                    h.get(h.partition_point(|&x| x <= i)).copied()
                })
                .min();
            if let Some(j) = j {
                debug_assert!(arrays[i].meets(&arrays[j]));
                return Some((l, i, j));
            }
        }
    }
    None
}

/// Whether no level holds two arrays with intersecting version sets.
pub fn stratified(levels: &[Vec<ArrayInfo>]) -> bool {
    next_merge(levels).is_none()
}

/// For each version of `w_set` (ascending), the indices of the entries (`entries` in
/// `Entry::order`) live at it. Versions that see nothing are left out.
pub fn live_sets(
    entries: &[Entry],
    w_set: &[Version],
    tree: &VersionTree,
) -> Vec<(Version, Vec<usize>)> {
    // W by depth-first label: the versions of W at or below x are those whose label lies in
    // x's span, one binary search away. A key's entries come deepest version first (numbers
    // grow downwards) and newest first, so each entry is live at the versions of its span
    // that no entry before it in its key took. A key written once at a leaf costs a search,
    // not a look at every version of W (a flush at 1,000 versions has hundreds).
    let spans = tree.spans();
    let mut by_label: Vec<(u32, usize)> = w_set
        .iter()
        .enumerate()
        .map(|(wi, &w)| (spans.span(w).0, wi))
        .collect();
    by_label.sort_unstable();
    let below = |x: Version| {
        let (enter, exit) = spans.span(x);
        let lo = by_label.partition_point(|&(l, _)| l < enter);
        let hi = by_label.partition_point(|&(l, _)| l < exit);
        lo..hi.max(lo)
    };
    let mut live: Vec<Vec<usize>> = vec![Vec::new(); w_set.len()];
    // Which key last took each version of W (by its place in `by_label`), so that a key of
    // several entries gives each version to the first that reaches it.
    let mut taken_by: Vec<usize> = vec![usize::MAX; by_label.len()];
    let mut start = 0;
    while start < entries.len() {
        let mut end = start + 1;
        while end < entries.len() && entries[end].key == entries[start].key {
            end += 1;
        }
        for (i, e) in entries.iter().enumerate().take(end).skip(start) {
            for k in below(e.version) {
                if end - start == 1 || taken_by[k] != start {
                    taken_by[k] = start;
                    live[by_label[k].1].push(i);
                }
            }
        }
        start = end;
    }
    by_version(w_set, live)
}

/// `live_sets`' answer from its lists, one per version of `w_set`: the versions that see
/// something, with theirs.
fn by_version(w_set: &[Version], live: Vec<Vec<usize>>) -> Vec<(Version, Vec<usize>)> {
    w_set
        .iter()
        .copied()
        .zip(live)
        .filter(|(_, l)| !l.is_empty())
        .collect()
}

/// Of the `kept` entries (a merge's, after liveness), the tombstones that hide no kept value:
/// none of their key's kept values is at a proper ancestor of the tombstone's version.
/// Without them a read of these entries finds only other such tombstones or nothing, the same
/// answer; whether one may go also depends on the arrays outside the merge
/// (`merge::drop_unread`). Returns their indices.
pub fn bare_tombstones(
    entries: &[Entry],
    kept: &BTreeSet<usize>,
    tree: &VersionTree,
) -> BTreeSet<usize> {
    let mut out = BTreeSet::new();
    let mut start = 0;
    while start < entries.len() {
        let mut end = start + 1;
        while end < entries.len() && entries[end].key == entries[start].key {
            end += 1;
        }
        let values: Vec<Version> = (start..end)
            .filter(|i| kept.contains(i) && entries[*i].value.is_some())
            .map(|i| entries[i].version)
            .collect();
        for (i, e) in entries.iter().enumerate().take(end).skip(start) {
            let x = e.version;
            if kept.contains(&i)
                && e.value.is_none()
                && !values
                    .iter()
                    .any(|&y| y != x && tree.is_ancestor_or_self(y, x))
            {
                out.insert(i);
            }
        }
        start = end;
    }
    out
}

/// One output array of a split: the versions it serves and the entries it holds (indices,
/// ascending).
#[derive(Clone, Debug, PartialEq)]
pub struct Piece {
    pub versions: Vec<Version>,
    pub entries: Vec<usize>,
}

/// Whether each version's live count is at least `DENSITY` of `total`.
fn dense(min_live: usize, total: usize) -> bool {
    min_live * DENSITY_DEN >= total * DENSITY_NUM
}

/// The density of a piece: each of its versions' live counts against its entries.
pub fn piece_is_dense(piece: &Piece, live: &BTreeMap<Version, usize>) -> bool {
    let min = piece.versions.iter().map(|v| live[v]).min().unwrap_or(0);
    dense(min, piece.entries.len())
}

/// A piece being grown: its versions and the union of their live entries.
type Partial = (Vec<Version>, BTreeSet<usize>);

/// Split W (the versions of `live`, from `live_sets`) into dense pieces (seed 003's density
/// amplification, the greedy of the reference digest): visit W's versions children first; a
/// version's piece is itself with its children's uncut pieces; while that is not dense, cut
/// off the child piece with the most entries as an output of its own. A single version's piece
/// is always dense (it sees all of it), so every output is dense. Pieces of the roots of W's
/// forest are outputs too.
pub fn split(live: &[(Version, Vec<usize>)], tree: &VersionTree) -> Vec<Piece> {
    let w_set: BTreeSet<Version> = live.iter().map(|(v, _)| *v).collect();
    let counts: BTreeMap<Version, usize> = live.iter().map(|(v, l)| (*v, l.len())).collect();
    // Each version's nearest proper ancestor within W.
    let up = |v: Version| {
        tree.ancestry(v)
            .into_iter()
            .skip(1)
            .find(|a| w_set.contains(a))
    };
    let mut waiting: BTreeMap<Version, Vec<Partial>> = BTreeMap::new();
    let mut out = Vec::new();
    // A child's number is above its parent's: descending order visits children first.
    for (v, own) in live.iter().rev() {
        let mut children = waiting.remove(v).unwrap_or_default();
        let piece = loop {
            let mut versions = vec![*v];
            let mut entries: BTreeSet<usize> = own.iter().copied().collect();
            for (cv, ce) in &children {
                versions.extend(cv);
                entries.extend(ce);
            }
            let min = versions.iter().map(|x| counts[x]).min().unwrap_or(0);
            if dense(min, entries.len()) || children.is_empty() {
                break (versions, entries);
            }
            let biggest = (0..children.len())
                .max_by_key(|&i| children[i].1.len())
                .expect("not empty");
            let (cv, ce) = children.swap_remove(biggest);
            out.push(to_piece(cv, ce));
        };
        match up(*v) {
            Some(p) => waiting.entry(p).or_default().push(piece),
            None => out.push(to_piece(piece.0, piece.1)),
        }
    }
    debug_assert!(waiting.is_empty());
    out
}

fn to_piece(mut versions: Vec<Version>, entries: BTreeSet<usize>) -> Piece {
    versions.sort_unstable();
    Piece {
        versions,
        entries: entries.into_iter().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::versions::ROOT;

    fn e(k: u8, version: Version) -> Entry {
        Entry {
            key: vec![k],
            version,
            seq: 0,
            value: Some(vec![k]),
        }
    }

    fn info(id: NodeId, versions: &[Version]) -> ArrayInfo {
        ArrayInfo {
            id,
            entries: 4,
            bytes: 0,
            versions: versions.to_vec(),
            by_version: vec![(versions[0], 4)],
            dead: 0,
            tombstones: None,
        }
    }

    #[test]
    fn levels_double_and_intersecting_arrays_merge_lowest_first() {
        assert_eq!(
            (0..6).map(|n| level_for(n * 4, 4)).collect::<Vec<_>>(),
            vec![0, 0, 1, 1, 2, 2]
        );
        let levels = vec![
            vec![info(1, &[1, 2]), info(2, &[3])],
            vec![info(3, &[1]), info(4, &[0, 1])],
        ];
        assert_eq!(next_merge(&levels), Some((1, 0, 1)));
        assert!(!stratified(&levels));
        assert!(stratified(&levels[..1]));
    }

    /// `next_merge` finds what comparing every pair finds: the lowest level with two arrays
    /// that meet, the first array meeting a later one, and the first later one it meets.
    #[test]
    fn next_merge_is_the_first_meeting_pair_of_the_lowest_level() {
        let brute = |levels: &[Vec<ArrayInfo>]| {
            for (l, arrays) in levels.iter().enumerate() {
                for i in 0..arrays.len() {
                    for j in i + 1..arrays.len() {
                        if arrays[i].meets(&arrays[j]) {
                            return Some((l, i, j));
                        }
                    }
                }
            }
            None
        };
        let mut x = 7u64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut found = 0;
        for _ in 0..500 {
            let levels: Vec<Vec<ArrayInfo>> = (0..1 + next(3))
                .map(|_| {
                    (0..next(8))
                        .map(|id| {
                            let mut w: Vec<Version> = (0..1 + next(3)).map(|_| next(40)).collect();
                            w.sort_unstable();
                            w.dedup();
                            info(id, &w)
                        })
                        .collect()
                })
                .collect();
            let want = brute(&levels);
            found += want.is_some() as u32;
            assert_eq!(next_merge(&levels), want, "{levels:?}");
        }
        assert!(found > 100, "{found} of 500 had a merge");
    }

    /// Entries of versions above no version of W are unreachable; an array is reclaimed once
    /// they are an eighth of it, lowest level first.
    #[test]
    fn unreachable_entries_are_counted_and_an_eighth_triggers_a_reclaim() {
        let mut t = VersionTree::new();
        let a = t.clone_version(ROOT).unwrap(); // 1
        let b = t.clone_version(ROOT).unwrap(); // 2
        let c = t.clone_version(a).unwrap(); // 3, under a
        let mut x = info(9, &[ROOT, a, b, c]);
        x.entries = 16;
        x.by_version = vec![(ROOT, 8), (a, 2), (b, 4), (c, 2)];
        assert_eq!(unreachable(&x, &t), 0);
        // `a` deleted: a ghost that `c` reads through.
        t.delete(a).unwrap();
        x.versions = vec![ROOT, b, c];
        assert_eq!(unreachable(&x, &t), 0);
        // `c` deleted: `a` and `c` leave the tree; their 4 entries are unreachable.
        t.delete(c).unwrap();
        x.versions = vec![ROOT, b];
        assert_eq!(unreachable(&x, &t), 4);
        // `b` alone still reads the root's entries.
        let mut only_b = x.clone();
        only_b.versions = vec![b];
        assert_eq!(unreachable(&only_b, &t), 4);
        // 1 of 16 is under an eighth, 2 of 16 is not.
        let mut levels = vec![vec![info(1, &[ROOT])], vec![x.clone(), x.clone()]];
        levels[1][0].dead = 1;
        levels[1][0].entries = 16;
        assert_eq!(next_reclaim(&levels), None);
        levels[1][1].dead = 2;
        levels[1][1].entries = 16;
        assert_eq!(next_reclaim(&levels), Some((1, 1)));
        assert_eq!(
            count_by_version([3, 1, 3, 0].iter()),
            vec![(0, 1), (1, 1), (3, 2)]
        );
    }

    /// `live_sets` as first written: for each key and each version of W, a look at the key's
    /// entries for the first at an ancestor-or-self.
    fn live_sets_by_walk(
        entries: &[Entry],
        w_set: &[Version],
        tree: &VersionTree,
    ) -> Vec<(Version, Vec<usize>)> {
        let mut live: Vec<Vec<usize>> = vec![Vec::new(); w_set.len()];
        let mut start = 0;
        while start < entries.len() {
            let mut end = start + 1;
            while end < entries.len() && entries[end].key == entries[start].key {
                end += 1;
            }
            for (wi, &w) in w_set.iter().enumerate() {
                if let Some(i) =
                    (start..end).find(|&i| tree.is_ancestor_or_self(entries[i].version, w))
                {
                    live[wi].push(i);
                }
            }
            start = end;
        }
        by_version(w_set, live)
    }

    proptest::proptest! {
        /// The search by labels answers as the walk does: random trees (clones, deletes),
        /// random entries at any version (deleted ones too, and repeats of one version), W
        /// any subset of the live versions in any order.
        #[test]
        fn liveness_by_labels_is_the_walks(
            clones in proptest::collection::vec(0usize..64, 1..40),
            deletes in proptest::collection::vec(0usize..64, 0..8),
            writes in proptest::collection::vec((0u8..12, 0usize..64, 0u64..4), 0..120),
            pick in proptest::collection::vec(proptest::prelude::any::<bool>(), 64),
        ) {
            let mut t = VersionTree::new();
            let mut all = vec![ROOT];
            for c in clones {
                let v = all[c % all.len()];
                if let Ok(w) = t.clone_version(v) {
                    all.push(w);
                }
            }
            for d in deletes {
                let _ = t.delete(all[d % all.len()]);
            }
            let mut entries: Vec<Entry> = writes
                .iter()
                .map(|&(k, v, seq)| Entry {
                    seq,
                    ..e(k, all[v % all.len()])
                })
                .collect();
            entries.sort_by(|x, y| x.order(y));
            let mut w_set: Vec<Version> = t
                .live()
                .enumerate()
                .filter(|&(i, _)| pick[i % pick.len()])
                .map(|(_, v)| v)
                .collect();
            w_set.reverse();
            proptest::prop_assert_eq!(
                live_sets(&entries, &w_set, &t),
                live_sets_by_walk(&entries, &w_set, &t)
            );
        }
    }

    #[test]
    fn liveness_takes_the_nearest_entry_per_key_and_version() {
        let mut t = VersionTree::new();
        let a = t.clone_version(ROOT).unwrap(); // 1
        let b = t.clone_version(ROOT).unwrap(); // 2
                                                // key 1 written at root and rewritten at a; key 2 only at b.
        let entries = vec![e(1, a), e(1, ROOT), e(2, b)];
        let live = live_sets(&entries, &[ROOT, a, b], &t);
        assert_eq!(live, vec![(ROOT, vec![1]), (a, vec![0]), (b, vec![1, 2])]);
    }

    /// Two sibling leaves that each rewrote every key, under a root that wrote two: the root
    /// sees 2 of the union's 22 entries and either leaf 10, so each ends in an array of its
    /// own.
    #[test]
    fn a_sparse_array_splits_into_dense_subtree_pieces() {
        let mut t = VersionTree::new();
        let a = t.clone_version(ROOT).unwrap();
        let b = t.clone_version(ROOT).unwrap();
        let mut entries = Vec::new();
        for k in 0..10u8 {
            entries.push(e(k, b));
            entries.push(e(k, a));
            if k < 2 {
                entries.push(e(k, ROOT));
            }
        }
        entries.sort_by(|x, y| x.order(y));
        let live = live_sets(&entries, &[ROOT, a, b], &t);
        let counts: BTreeMap<Version, usize> = live.iter().map(|(v, l)| (*v, l.len())).collect();
        let pieces = split(&live, &t);
        let mut served: Vec<Version> = pieces.iter().flat_map(|p| p.versions.clone()).collect();
        served.sort_unstable();
        assert_eq!(served, vec![ROOT, a, b], "the pieces partition W");
        assert!(pieces.len() >= 2, "{pieces:?}");
        for p in &pieces {
            assert!(piece_is_dense(p, &counts), "{p:?}");
            // Each version's live entries are all in its piece.
            for v in &p.versions {
                let (_, l) = live.iter().find(|(x, _)| x == v).unwrap();
                assert!(l.iter().all(|i| p.entries.contains(i)));
            }
        }
        // A dense array stays whole.
        let one = live_sets(&entries, &[a], &t);
        assert_eq!(split(&one, &t).len(), 1);
    }
}
