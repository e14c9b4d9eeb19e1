//! Salvage: copy out every entry still readable. A key's messages carry sequence numbers, so
//! they resolve the same whatever run they are found in: the walk merges every table it can
//! read and skips, recording as damage, a table head or a block it cannot. When the manifest
//! itself is unreadable, every table block in the translation table is taken as a run of its
//! own (the table lists only the tables of the last checkpoint, so nothing freed comes back).

use super::*;
use crate::engine::salvage::Effect;
use crate::kv::merging::{next_group, resolve};

impl Lsm {
    /// Open for salvage: as `open`, but a manifest that does not read is recorded and replaced
    /// by every table block of the translation table, one run each.
    pub fn open_tolerant(
        pager: Pager,
        cp: &Checkpoint,
        cache_bytes: usize,
        merge: Option<Arc<dyn MergeOperator>>,
    ) -> Result<Lsm> {
        let (cfg, manifest, next_seq) = format::decode_meta(&cp.engine_meta, pager.file_name())?;
        let read = Lsm::read_manifest(&pager, manifest);
        let (levels, counters, damage) = match read {
            Ok((levels, counters)) => (levels, counters, None),
            Err(e) => {
                let runs = pager
                    .ids()
                    .into_iter()
                    .filter(|&id| id != manifest)
                    .filter_map(|id| {
                        let (kind, head) = pager.read_head(id).ok()?;
                        let t = Table::decode_head(kind, &head).ok()?;
                        Some(vec![TableInfo {
                            id,
                            bytes: pager.extent(id).map_or(0, |e| e.len),
                            points: t.points,
                            puts: 0,
                            ranges: t.ranges.len() as u32,
                            smallest: t.smallest,
                            largest: t.largest,
                        }])
                    })
                    .collect();
                (vec![Level { runs }], Counters::default(), Some(e))
            }
        };
        let mut t = Lsm::open_parts(
            pager,
            cfg,
            manifest,
            next_seq,
            levels,
            counters,
            cache_bytes,
            merge,
        );
        t.manifest_damage = damage;
        Ok(t)
    }

    pub(super) fn rescue(&mut self, out: &mut Sink<'_>, lost: &mut Vec<Damage>) -> Result<()> {
        if let Some(e) = self.manifest_damage.take() {
            lost.push(Damage::new("manifest", Some(self.manifest), e).effect(Effect::None));
        }
        let mut cursors = self.cursors(Bound::Unbounded, Bound::Unbounded, false);
        let mut ctx = read::Ctx {
            store: read::Tables::Alone(&mut self.store),
            mem: &self.mem,
            lost: Some(lost),
        };
        let ranges =
            read::ranges_within(&self.levels, &mut ctx, Bound::Unbounded, Bound::Unbounded)?;
        while let Some((key, mut msgs)) = next_group(&mut cursors, &mut ctx, false)? {
            let covering = read::covering(&ranges, &key);
            let value = resolve(&key, &mut msgs, &covering, self.merge.as_deref(), |_| {
                Err(Error::InvalidOptions("an out-of-line value".into()))
            });
            match value {
                Ok(Some(v)) => out(&key, &v)?,
                Ok(None) => {}
                // An upsert with no operator to apply it: the key cannot be copied.
                Err(e) => ctx
                    .lost
                    .as_deref_mut()
                    .expect("salvage records damage")
                    .push(Damage::new("value", None, e).key(&key)),
            }
        }
        Ok(())
    }
}
