//! Point and range queries at a version v: the buffer, then every array whose W holds v (at
//! most one per level, by stratification). For each key the candidates are the entries whose
//! version is v or an ancestor; the answer is the one with the largest version (the nearest
//! ancestor, since numbers grow downwards), the newest seq among equals; a tombstone answers
//! "absent".
//!
//! A point query reads one block per array, and only if the array's filter lets the key
//! through. A range query reads the blocks of each array that overlap the range and resolves
//! every key in it before taking `limit` (simple, and exact; a cursor merge that stops early
//! is future work, docs/versioned.md).

use std::collections::HashSet;

use super::array::Entry;
use super::*;
use crate::kv::within;

/// The best candidate so far for one key: (version, seq, value).
type Best = (Version, u64, Option<Vec<u8>>);

fn consider(best: &mut Option<Best>, version: Version, seq: u64, value: &Option<Vec<u8>>) {
    if best
        .as_ref()
        .is_none_or(|&(bv, bs, _)| (version, seq) > (bv, bs))
    {
        *best = Some((version, seq, value.clone()));
    }
}

impl Sda {
    fn serving(&self, v: Version) -> Vec<NodeId> {
        self.arrays()
            .filter(|a| a.serves(v))
            .map(|a| a.id)
            .collect()
    }

    pub(super) fn point(&mut self, v: Version, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.tree.check_live(v)?;
        let ancestry = self.tree.ancestry(v);
        let mut best = None;
        // Nearest first: the first buffered version found is the buffer's best.
        let mut probe = (key.to_vec(), Reverse(0));
        for &x in &ancestry {
            probe.1 = Reverse(x);
            if let Some((seq, value)) = self.buffer.get(&probe) {
                consider(&mut best, x, *seq, value);
                break;
            }
        }
        let ancestry: HashSet<Version> = ancestry.into_iter().collect();
        for id in self.serving(v) {
            let head = self.head(id)?;
            let first = head.firsts.first().unwrap_or_default();
            if key < first || key > head.largest.as_slice() || !head.filter.may_hold(key) {
                continue;
            }
            let block = head.read_block(&self.pager, id, head.block_for(key))?;
            // Entries of a key sort by version descending: the first visible is the nearest.
            if let Some(e) = block
                .iter()
                .find(|e| e.key == key && ancestry.contains(&e.version))
            {
                consider(&mut best, e.version, e.seq, &e.value);
            }
        }
        Ok(best.and_then(|(_, _, value)| value))
    }

    pub(super) fn range(
        &mut self,
        v: Version,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        reverse: bool,
        limit: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<()> {
        self.tree.check_live(v)?;
        let ancestry: HashSet<Version> = self.tree.ancestry(v).into_iter().collect();
        let mut best: BTreeMap<Vec<u8>, Option<Best>> = BTreeMap::new();
        let mut take = |e: &Entry| {
            if ancestry.contains(&e.version) && within(&e.key, lo, hi) {
                consider(
                    best.entry(e.key.clone()).or_default(),
                    e.version,
                    e.seq,
                    &e.value,
                );
            }
        };
        for ((key, Reverse(version)), (seq, value)) in &self.buffer {
            take(&Entry {
                key: key.clone(),
                version: *version,
                seq: *seq,
                value: value.clone(),
            });
        }
        for id in self.serving(v) {
            let head = self.head(id)?;
            let start = match lo {
                Bound::Included(k) | Bound::Excluded(k) => head.block_for(k),
                Bound::Unbounded => 0,
            };
            for i in start..head.blocks.len() {
                let past = match hi {
                    Bound::Included(k) => head.firsts.get(i) > k,
                    Bound::Excluded(k) => head.firsts.get(i) >= k,
                    Bound::Unbounded => false,
                };
                if past {
                    break;
                }
                for e in head.read_block(&self.pager, id, i)? {
                    take(&e);
                }
            }
        }
        let found = best
            .into_iter()
            .filter_map(|(k, b)| b.and_then(|(_, _, value)| value).map(|v| (k, v)));
        if reverse {
            out.extend(found.rev().take(limit));
        } else {
            out.extend(found.take(limit));
        }
        Ok(())
    }
}
