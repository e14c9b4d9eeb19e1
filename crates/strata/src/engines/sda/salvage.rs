//! The SDA's side of salvage (`crate::salvage`): every entry still readable from its arrays,
//! read block by block, so that one damaged block costs only its own keys; and a new SDA given
//! a version tree and entries (`import`), which a salvage writes as arrays. Only the damage
//! list and the new engine are written.
//!
//! A block that fails (its checksum, or its parse) is recorded with its file and offset, the
//! array, and the keys from its first to the next block's first (or through the array's
//! largest); a head that fails costs its whole array, keys unknown. Their entries are lost: a version that read one may read an older
//! entry of its key in the copy (an ancestor's, or an older write), or, for a lost tombstone,
//! the value it hid.

use super::*;
use crate::engine::salvage::Damage;
use array::Entry;

impl Sda {
    /// Every entry the arrays still give, in no particular order; what does not read goes to
    /// `damage`. Only the device's reads are tried: nothing is written.
    pub(crate) fn salvage_entries(&mut self, damage: &mut Vec<Damage>) -> Result<Vec<Entry>> {
        let arrays: Vec<ArrayInfo> = self.arrays().cloned().collect();
        let mut out = Vec::new();
        for a in arrays {
            let head = match Head::load(&self.pager, a.id) {
                Ok(h) => h,
                Err(e) if e.is_corruption() => {
                    damage.push(Damage::new("SDA array head", Some(a.id), e).keys(None, None));
                    continue;
                }
                Err(e) => return Err(e),
            };
            for i in 0..head.blocks.len() {
                match head.read_block(&self.pager, a.id, i) {
                    Ok(view) => out.extend(view.to_entries()),
                    Err(e) if e.is_corruption() => {
                        // Up to the next block's first key, or past the array's largest.
                        let hi = match head.firsts.iter().nth(i + 1) {
                            Some(next) => next.to_vec(),
                            None => [head.largest.as_slice(), &[0]].concat(),
                        };
                        let d = Damage::new("SDA array block", Some(a.id), e)
                            .keys(Some(head.firsts.get(i)), Some(&hi));
                        damage.push(d);
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(out)
    }

    /// Fill a new, empty SDA with `tree` and `entries` (a salvage's, any order, any number
    /// per (key, version)): the newest write of each (key, version) that a live version reads,
    /// written as dense arrays; the tombstones that hide nothing go. Later writes get sequence
    /// numbers above every entry's, so they win.
    pub(crate) fn import(&mut self, tree: VersionTree, entries: Vec<Entry>) -> Result<()> {
        if !self.levels.is_empty() || !self.buffer.is_empty() {
            return Err(Error::InvalidOptions(
                "an SDA is imported into only when new".into(),
            ));
        }
        self.tree = tree;
        self.tree_copy = None;
        if let Some(top) = entries.iter().map(|e| e.seq).max() {
            self.next_seq = self.next_seq.max(top + 1);
        }
        self.write_all(entries, 0)?;
        self.merge_due()
    }
}
