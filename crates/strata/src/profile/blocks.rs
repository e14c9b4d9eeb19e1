//! Seed 002's experiment: random reads at queue depth 1 of each block size, from the smallest
//! the target reads as one IO (512 B on most disks under O_DIRECT) up to 64 KiB, with offsets
//! drawn two ways: uniformly over the scratch span, and from a power law that puts most reads
//! near its start. The seed found the distribution worth 25% on a rotating disk and nothing on
//! an SSD; `tune` turns these points into its table of point queries per second by block size.
//!
//! Invariants: every offset is a multiple of the block size (so a block never straddles a
//! device block it need not touch) and the block lies inside the span; each size and
//! distribution is measured in `passes` passes, alternating the order of the distributions, and
//! its latency is the median of the passes' means (the drift between passes is the real disk's,
//! docs/models.md "Profiling a real disk"); offsets come from a seeded generator.

use serde::{Deserialize, Serialize};

use super::bench::{stats, Progress};
use super::target::Target;
use crate::error::Result;
use crate::model::SplitMix64;
use crate::storage::device::AlignedBuf;

/// Where a read's offset comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offsets {
    /// Every block of the span equally likely.
    Uniform,
    /// Block ⌊n·u⁴⌋ of the span's n for uniform u: P(block < x·n) = x^¼, so half the reads fall
    /// in the first sixteenth of the span and a tenth in the first ten-thousandth.
    Power,
}

/// The power law's exponent (see `Offsets::Power`).
const POWER: i32 = 4;

impl Offsets {
    /// An offset of a `size`-byte block in `span`, a multiple of `size`.
    pub fn pick(self, rng: &mut SplitMix64, span: u64, size: u64) -> u64 {
        let blocks = (span / size).max(1);
        let i = match self {
            Offsets::Uniform => rng.below(blocks),
            Offsets::Power => {
                let u = rng.next_f64().powi(POWER);
                ((u * blocks as f64) as u64).min(blocks - 1)
            }
        };
        i * size
    }
}

/// One block size: the mean latency of a read under each distribution.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BlockPoint {
    pub bytes: u64,
    /// Reads made, both distributions together.
    pub ios: u64,
    pub uniform_s: f64,
    pub power_s: f64,
}

/// The block sizes of the seed's table: powers of two from 512 B to 64 KiB.
pub fn block_sizes() -> Vec<u64> {
    std::iter::successors(Some(512u64), |&x| Some(x * 2))
        .take_while(|&x| x <= 64 << 10)
        .collect()
}

/// Measure every size of `sizes` the target can read as one IO (at least its
/// `smallest_read()`), `passes` times each, for `budget_s` of the target's clock per size,
/// distribution and pass (and between `min_ios` and `max_ios` reads).
pub fn measure(
    t: &dyn Target,
    sizes: &[u64],
    passes: u32,
    budget_s: f64,
    (min_ios, max_ios): (u64, u64),
    seed: u64,
    progress: &dyn Progress,
) -> Result<Vec<BlockPoint>> {
    let smallest = t.smallest_read();
    let sizes: Vec<u64> = sizes
        .iter()
        .copied()
        .filter(|&s| s >= smallest && s <= t.span() / 2)
        .collect();
    let passes = passes.max(1);
    progress.phase("block sizes", passes as u64 * sizes.len() as u64);
    let mut rng = SplitMix64::new(seed ^ 0xB10C);
    let mut means = vec![[Vec::new(), Vec::new()]; sizes.len()];
    let mut ios = vec![0u64; sizes.len()];
    for pass in 0..passes {
        for (i, &size) in sizes.iter().enumerate() {
            let mut buf = AlignedBuf::zeroed(size as usize);
            let order = if pass % 2 == 0 {
                [Offsets::Uniform, Offsets::Power]
            } else {
                [Offsets::Power, Offsets::Uniform]
            };
            for d in order {
                // One read untimed: the first IO of a size may pay for a cold path.
                t.read_block(buf.as_mut_slice(), d.pick(&mut rng, t.span(), size))?;
                let (mut n, mut total) = (0u64, 0.0);
                let start = t.now_s();
                loop {
                    let off = d.pick(&mut rng, t.span(), size);
                    let t0 = t.now_s();
                    t.read_block(buf.as_mut_slice(), off)?;
                    total += t.now_s() - t0;
                    n += 1;
                    if n >= max_ios || (n >= min_ios && t.now_s() - start >= budget_s) {
                        break;
                    }
                }
                means[i][(d == Offsets::Power) as usize].push(total / n as f64);
                ios[i] += n;
            }
            progress.step(&format!("{size} B"));
        }
    }
    Ok(sizes
        .iter()
        .zip(means)
        .zip(ios)
        .map(|((&bytes, [uniform, power]), ios)| BlockPoint {
            bytes,
            ios,
            uniform_s: stats(uniform).1,
            power_s: stats(power).1,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::target::SimTarget;
    use crate::profile::Silent;
    use crate::storage::sim::SimPreset;

    #[test]
    fn offsets_are_block_multiples_inside_the_span_and_the_power_law_is_skewed() {
        let mut rng = SplitMix64::new(1);
        let (span, size) = (1u64 << 20, 4096);
        let mut low = [0u32; 2];
        for d in [Offsets::Uniform, Offsets::Power] {
            for _ in 0..10_000 {
                let off = d.pick(&mut rng, span, size);
                assert_eq!(off % size, 0);
                assert!(off + size <= span);
                if off < span / 16 {
                    low[(d == Offsets::Power) as usize] += 1;
                }
            }
        }
        // A sixteenth of the span: 1/16 of uniform reads, half of the power law's.
        assert!((500..750).contains(&low[0]), "uniform {}", low[0]);
        assert!((4_700..5_300).contains(&low[1]), "power {}", low[1]);
    }

    #[test]
    fn a_simulated_disk_gives_its_model_at_every_size_from_512_bytes() {
        let p = SimPreset::find("samsung-860-pro").unwrap();
        let t = SimTarget::new("sim", p.model());
        let chunk = vec![0u8; 4 << 20];
        for off in (0..t.span()).step_by(chunk.len()) {
            t.write(&chunk, off).unwrap();
        }
        let sizes = block_sizes();
        let points = measure(&t, &sizes, 2, 0.05, (16, 2_000), 7, &Silent).unwrap();
        assert_eq!(
            points.iter().map(|p| p.bytes).collect::<Vec<_>>(),
            sizes,
            "the simulator reads 512 B blocks"
        );
        let m = p.model().affine;
        for pt in &points {
            let want = m.cost(pt.bytes);
            for got in [pt.uniform_s, pt.power_s] {
                assert!(
                    (got / want - 1.0).abs() < 0.01,
                    "{} B: {got} vs {want}",
                    pt.bytes
                );
            }
            assert!(pt.ios >= 4 * 16);
        }
    }
}
