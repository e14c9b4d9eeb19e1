//! `check`: every array read whole from the device (not the head cache) and verified against
//! its head and its manifest entry (entries in all and per version), then the structure's invariants: the version sets hold
//! live versions only (each seeing something of the array), stratification, density (unless
//! the configuration turns density amplification off), and that the translation table holds
//! exactly the manifest and the arrays.

use std::collections::{BTreeMap, HashSet};

use super::array::{Entry, Head};
use super::policy;
use super::*;
use crate::engine::check_reachable;

impl Sda {
    pub(super) fn verify(&mut self) -> Result<CheckReport> {
        let mut report = CheckReport::default();
        let mut reachable = HashSet::from([self.manifest]);
        report.blocks_verified += 1;
        self.pager.read_block(self.manifest)?;
        let arrays: Vec<ArrayInfo> = self.arrays().cloned().collect();
        for a in &arrays {
            let bad = |what: String| {
                Error::corruption(
                    self.pager.file_name(),
                    self.pager.offset_of(a.id),
                    format!("SDA array {}: {what}", a.id),
                )
            };
            reachable.insert(a.id);
            let head = Head::load(&self.pager, a.id)?;
            let entries = head.read_all(&self.pager, a.id)?;
            report.blocks_verified += 1 + head.blocks.len() as u64;
            if entries.len() as u64 != a.entries {
                return Err(bad(format!(
                    "{} entries, the manifest says {}",
                    entries.len(),
                    a.entries
                )));
            }
            self.check_entries(&head, &entries).map_err(bad)?;
            // Carried over from a version 2 manifest, an array has no counts to compare.
            let by_version = policy::count_by_version(entries.iter().map(|e| &e.version));
            if !a.by_version.is_empty() && a.by_version != by_version {
                return Err(bad(format!(
                    "entries per version {by_version:?}, the manifest says {:?}",
                    a.by_version
                )));
            }
            if let Some(v) = a.versions.iter().find(|&&v| !self.tree.is_live(v)) {
                return Err(bad(format!("serves version {v}, which is not live")));
            }
            let live = policy::live_sets(&entries, &a.versions, &self.tree);
            let counts: BTreeMap<Version, usize> =
                live.iter().map(|(v, l)| (*v, l.len())).collect();
            let piece = policy::Piece {
                versions: a.versions.clone(),
                entries: (0..entries.len()).collect(),
            };
            let dense = !self.cfg.density_amplification || policy::piece_is_dense(&piece, &counts);
            if counts.len() < a.versions.len() || !dense {
                return Err(bad(format!(
                    "below density 1/{}: live counts {counts:?} of {} entries",
                    policy::DENSITY_DEN,
                    entries.len()
                )));
            }
            report.keys += entries.len() as u64;
            report.leaf_nodes += 1;
        }
        if !policy::stratified(&self.levels) {
            return Err(Error::corruption(
                self.pager.file_name(),
                self.pager.offset_of(self.manifest),
                "SDA manifest: two arrays of one level serve a common version",
            ));
        }
        check_reachable(&self.pager, &reachable)?;
        report.height = self.levels.len() as u32;
        report.detail = vec![("arrays", arrays.len() as u64)];
        Ok(report)
    }

    /// The entries' order, one per (key, version), a key's entries in one block, block first
    /// keys and the filter.
    fn check_entries(&self, head: &Head, entries: &[Entry]) -> std::result::Result<(), String> {
        for w in entries.windows(2) {
            if w[0].order(&w[1]) != std::cmp::Ordering::Less
                || (w[0].key == w[1].key && w[0].version == w[1].version)
            {
                return Err(format!("entries out of order at key {:?}", w[1].key));
            }
        }
        let mut at = 0;
        for (i, b) in head.blocks.iter().enumerate() {
            let block = &entries[at..at + b.entries as usize];
            if block.first().map(|e| e.key.as_slice()) != Some(head.firsts.get(i)) {
                return Err(format!("block {i} does not start with its first key"));
            }
            if at > 0 && entries[at - 1].key == block[0].key {
                return Err(format!("a key's entries span blocks {} and {i}", i - 1));
            }
            at += b.entries as usize;
        }
        if entries.last().map(|e| &e.key) != Some(&head.largest) {
            return Err("the largest key is not the last".into());
        }
        if let Some(e) = entries.iter().find(|e| !head.filter.may_hold(&e.key)) {
            return Err(format!("the filter misses key {:?}", e.key));
        }
        Ok(())
    }
}
