//! `check`: every table read whole from the device (not the pool) and verified against its
//! checksums, its own head and its manifest entry; every run's tables in key order and
//! disjoint; each policy's shape; every block of the file reachable from the manifest.

use std::collections::HashSet;

use super::*;
use crate::engine::check_reachable;
use crate::storage::block;

impl Lsm {
    pub(super) fn verify(&mut self) -> Result<CheckReport> {
        let mut report = CheckReport {
            blocks_verified: 1,
            height: self.levels.len() as u32,
            ..CheckReport::default()
        };
        let mut reachable: HashSet<NodeId> = HashSet::from([self.manifest]);
        let (mut runs, mut blocks) = (0u64, 0u64);
        let levels = self.levels.clone();
        for (i, level) in levels.iter().enumerate() {
            let one_run = match self.cfg.policy {
                Policy::Leveled => i > 0,
                Policy::Tiered => false,
                Policy::LazyLeveled => i > 0 && i + 1 == levels.len(),
            };
            if one_run && level.runs.len() > 1 {
                return Err(self.corrupt(
                    self.manifest,
                    format!(
                        "level {i} holds {} runs; a {} level holds one",
                        level.runs.len(),
                        self.cfg.policy.name()
                    ),
                ));
            }
            for run in &level.runs {
                runs += 1;
                for (j, t) in run.iter().enumerate() {
                    if !reachable.insert(t.id) {
                        return Err(self.corrupt(t.id, format!("table {} is listed twice", t.id)));
                    }
                    if j > 0 && run[j - 1].largest > t.smallest {
                        return Err(self.corrupt(
                            t.id,
                            format!("table {} overlaps the table before it in its run", t.id),
                        ));
                    }
                    blocks += self.verify_table(t)?;
                    report.leaf_nodes += 1;
                }
            }
        }
        report.blocks_verified += report.leaf_nodes + blocks;
        check_reachable(self.store.pager(), &reachable)?;
        let mut cursors = self.cursors(Bound::Unbounded, Bound::Unbounded, false);
        let mut ctx = read::Ctx {
            store: read::Tables::Alone(&mut self.store),
            mem: &self.mem,
            lost: None,
        };
        let ranges =
            read::ranges_within(&self.levels, &mut ctx, Bound::Unbounded, Bound::Unbounded)?;
        while let Some((key, mut msgs)) =
            crate::kv::merging::next_group(&mut cursors, &mut ctx, false)?
        {
            let covering = read::covering(&ranges, &key);
            let merge = self.merge.as_deref();
            if crate::kv::merging::resolve(&key, &mut msgs, &covering, merge, |_| {
                Err(Error::InvalidOptions("an out-of-line value".into()))
            })?
            .is_some()
            {
                report.keys += 1;
            }
        }
        report.detail = vec![
            ("runs", runs),
            ("tables", report.leaf_nodes),
            ("blocks", blocks),
        ];
        Ok(report)
    }

    /// Verify one table; returns its block count.
    fn verify_table(&self, info: &TableInfo) -> Result<u64> {
        let pager = self.store.pager();
        let id = info.id;
        let ext = pager.extent(id).ok_or_else(|| {
            self.corrupt(id, format!("table {id} is not in the translation table"))
        })?;
        let whole = pager.read_part(id, 0, ext.len as usize)?;
        let (kind, head) = block::open(&whole, id, pager.file_name(), ext.offset)?;
        let bad = |what: String| self.corrupt(id, format!("table {id}: {what}"));
        let t = Table::decode_head(kind, head).map_err(bad)?;
        if (t.points, t.ranges.len() as u32, &t.smallest, &t.largest)
            != (info.points, info.ranges, &info.smallest, &info.largest)
            || ext.len != info.bytes
        {
            return Err(bad("differs from its manifest entry".into()));
        }
        let within = |k: &[u8]| t.smallest.as_slice() <= k && k <= t.largest.as_slice();
        for r in &t.ranges {
            let Body::DeleteRange(end) = &r.body else {
                unreachable!("decode keeps ranges only")
            };
            if !within(&r.key) || !within(end) || r.key >= *end || r.seq >= self.next_seq {
                return Err(bad(
                    "a range delete outside the table's keys or its sequence".into(),
                ));
            }
        }
        let mut prev: Option<Msg> = None;
        let (mut points, mut puts) = (0u64, 0u64);
        for i in 0..t.blocks.len() {
            let bytes = t
                .slice(&whole, i)
                .ok_or_else(|| bad(format!("block {i} lies outside the extent")))?;
            let msgs = t.decode_block(pager.file_name(), pager.offset_of(id), id, i, bytes)?;
            if let (Some(first), true) = (msgs.first(), i > 0) {
                // The pivot separates the blocks: above the last key before it (format 2 keeps
                // the shortest such prefix), at most the block's first key (format 1: equal).
                let pivot = t.pivots.get(i - 1);
                if first.key.as_slice() < pivot
                    || prev.as_ref().is_some_and(|p| p.key.as_slice() >= pivot)
                {
                    return Err(bad(format!("block {i} does not lie at its pivot")));
                }
            }
            for (j, m) in msgs.iter().enumerate() {
                let ordered = match &prev {
                    // A key's messages lie in one block.
                    Some(p) if j == 0 => p.key < m.key,
                    Some(p) => (&p.key, p.seq) < (&m.key, m.seq),
                    None => true,
                };
                if !ordered || !within(&m.key) || m.seq >= self.next_seq {
                    return Err(bad(format!(
                        "block {i}: a message out of order or out of range"
                    )));
                }
                if !t.filter.may_hold(&m.key) {
                    return Err(bad(format!(
                        "block {i}: the filter misses a key the table holds"
                    )));
                }
                points += 1;
                puts += matches!(m.body, Body::Put(_)) as u64;
                prev = Some(m.clone());
            }
        }
        if points != t.points || puts != info.puts {
            return Err(bad(format!(
                "{points} messages ({puts} puts) in its blocks, {} ({} puts) in its head and manifest",
                t.points, info.puts
            )));
        }
        Ok(t.blocks.len() as u64)
    }
}
