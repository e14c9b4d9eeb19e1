//! SimDevice: a device in memory with a virtual clock and injected faults, for deterministic tests
//! and for experiments whose IO counts must be exact.
//!
//! Each device keeps two images: `current`, what reads see (the page cache), and `durable`, what
//! survives a power cut. Writes and length changes since the last `sync` are kept as a list and
//! applied to `durable` when `sync` is called. The devices of one `SimEnv` share a fault plan and
//! lose power together, as the files of one database on one disk would.
//!
//! Crashes:
//! - a process crash leaves `current` as it is: the next open reads what the page cache holds,
//!   synced or not. `kill_at_io(n)` stops the process at IO number n: that IO and every later one
//!   fails without effect, as if the process had died there (the test then drops the `Db`);
//! - a power cut keeps the durable image plus some of the unsynced changes. `crash` keeps none;
//!   `power_cut(seed)` keeps what a kernel's writeback and a drive's cache could have left: each
//!   4 KiB page independently holds the state after some prefix of the writes made to it since
//!   the last sync (any subset of pages, each at any point of its own history, sometimes with
//!   the next write torn at a 512-byte sector), and the file's length is its length after some
//!   prefix of the unsynced operations, so a truncation or an extension may or may not have
//!   landed whatever happened to the data (a truncation that did not land keeps the writes
//!   made after it into the space it freed from landing: that space was never the file's).
//!
//! Faults: fail the Nth IO (once, or that one and every later one), and tear the Nth write: only a
//! prefix of its 512-byte sectors reaches the durable image, the write reports an error and the
//! disk is dead (every IO fails, a read already under way on another thread too) until
//! `clear_faults()` or a power cut, as after a power cut in mid-write. A sync that fails once
//! loses what it was to make durable, as Linux's fdatasync does after a writeback error (the
//! pages are marked clean and the error is reported once): reads still see those writes, a
//! later sync succeeds without them, and a power cut loses them. One that fails for good is a
//! process's death, which leaves the page cache to be written back as it is. Length
//! changes count as IOs (they are a system call that can fail or be the last thing a dying
//! process did); reading the length does not.
//!
//! Cost model (`SimModel`): each IO costs the affine s + t·x seconds of virtual time, times an
//! optional seeded noise factor. Calls through the `Device` trait are served one at a time, so
//! their costs add up whatever threads issue them. Parallelism is modelled only for IOs submitted
//! together with `SimDevice::read_batch`: a batch of k IOs with costs cᵢ and sizes xᵢ takes
//! max(max cᵢ, Σcᵢ / P, Σxᵢ / bandwidth): no IO finishes faster than alone, P slots work at once
//! (the PDAM in its fluid form, so P may be fractional), and the transfers share one channel.
//! That keeps every run deterministic: the clock depends only on the order of calls and the seed.
//! `SimPreset` holds the devices of seed 000 (Tables 1 and 2) and the machine strata was built on.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use super::device::Device;
use crate::error::{Error, Result};
use crate::model::{Affine, SplitMix64};

pub const SECTOR: usize = 512;
/// The unit a power cut keeps or loses: a page of the page cache.
pub const PAGE: usize = 4096;

/// What an IO does, for faults aimed at one kind of IO on one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoKind {
    Read,
    Write,
    Sync,
    SetLen,
}

#[derive(Debug, Default)]
struct Faults {
    /// Kill the process at the nth IO of this kind on the named device (counting down).
    kill_on: Option<(String, IoKind, u64)>,
    /// IOs (reads, writes, syncs) issued so far across the environment.
    ios: u64,
    writes: u64,
    fail_at: Option<u64>,
    fail_sticky: bool,
    tear: Option<(u64, usize)>,
    dead: bool,
}

/// Shared by every device of a `SimEnv`: fault plan and virtual clock.
#[derive(Debug)]
pub struct SimDisk {
    faults: Mutex<Faults>,
    clock: Mutex<SimClock>,
    /// Run once by the next read between its admission and its copy: where another thread's
    /// IO can come in between (tests of that window).
    #[cfg(test)]
    after_admit: Mutex<Option<Hook>>,
}

#[cfg(test)]
struct Hook(Box<dyn FnOnce() + Send>);

#[cfg(test)]
impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hook")
    }
}

#[derive(Debug)]
struct SimClock {
    model: SimModel,
    now_s: f64,
    /// Real time each sync sleeps, so concurrent callers overlap as on a real disk.
    sync_wall: std::time::Duration,
    rng: SplitMix64,
}

impl SimClock {
    /// One IO's cost with its noise drawn. The bandwidth limit binds a single IO too (it never
    /// does on a preset whose t is at least 1/bandwidth; it does on a throttled one).
    fn io_cost(&mut self, bytes: u64) -> f64 {
        let channel = self
            .model
            .bandwidth_bytes_per_s
            .map_or(0.0, |bw| bytes as f64 / bw);
        let base = self.model.affine.cost(bytes).max(channel);
        if self.model.noise > 0.0 {
            // Bounded noise: the factor stays positive for any noise below 1/√3.
            base * (1.0 + self.model.noise * self.rng.unit_noise()).max(0.05)
        } else {
            base
        }
    }
}

/// How a simulated disk prices IO.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SimModel {
    /// Cost of one IO alone: s + t·x.
    pub affine: Affine,
    /// PDAM parallelism P: how many IOs of a batch the device serves at once (≥ 1, may be
    /// fractional).
    pub parallelism: f64,
    /// Transfer limit shared by the IOs of a batch, bytes per second; None means no limit
    /// beyond each IO's own 1/t.
    pub bandwidth_bytes_per_s: Option<f64>,
    /// Cost of one sync (fdatasync), seconds.
    pub sync_s: f64,
    /// Relative standard deviation of each IO's cost; 0 prices every IO exactly.
    pub noise: f64,
    /// Seed of the noise.
    pub seed: u64,
}

impl SimModel {
    /// A sequential affine disk: no parallelism, no noise (what `SimDisk::new` builds).
    pub fn affine(affine: Affine, sync_s: f64) -> SimModel {
        SimModel {
            affine,
            parallelism: 1.0,
            bandwidth_bytes_per_s: None,
            sync_s,
            noise: 0.0,
            seed: 0,
        }
    }

    pub fn with_noise(mut self, noise: f64, seed: u64) -> SimModel {
        self.noise = noise.clamp(0.0, 0.5);
        self.seed = seed;
        self
    }

    /// Seconds a batch of IOs of these sizes takes when submitted together, without noise.
    pub fn batch_s(&self, sizes: &[u64]) -> f64 {
        let costs: Vec<f64> = sizes.iter().map(|&b| self.affine.cost(b)).collect();
        self.batch_of(&costs, sizes)
    }

    fn batch_of(&self, costs: &[f64], sizes: &[u64]) -> f64 {
        let longest = costs.iter().copied().fold(0.0, f64::max);
        let slots = costs.iter().sum::<f64>() / self.parallelism.max(1.0);
        let channel = self
            .bandwidth_bytes_per_s
            .map_or(0.0, |bw| sizes.iter().sum::<u64>() as f64 / bw);
        longest.max(slots).max(channel)
    }
}

/// Where a preset's figures come from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PresetSource {
    /// Seed 000 Table 2 (HDDs): s in seconds, t in seconds per 4 KiB, P = 1.
    Table2 { s: f64, t_per_4k: f64 },
    /// Seed 000 Table 1 (SSDs): P and the saturation bandwidth P·B/step in MB/s, measured with
    /// B = 64 KiB reads. The table gives no s and t; we assume a single IO transfers at the
    /// saturation bandwidth (t = 1/bandwidth) and that parallelism exactly hides the setup, so
    /// step = s + tB = P·B/bandwidth and s = (P − 1)·B/bandwidth.
    Table1 { p: f64, mb_per_s: f64 },
    /// A disk throttled by the kernel's block-IO limits (cgroup io.max): every IO costs at
    /// least 1/IOPS, and the bytes flow at most at the bandwidth, so an IO of x bytes costs
    /// max(1/IOPS, x/bandwidth); not an affine device (issue 19).
    Throttled { iops: f64, bytes_per_s: f64 },
    /// Measured figures: s, t, P, saturation bandwidth, fsync.
    Measured {
        s: f64,
        t: f64,
        p: f64,
        bytes_per_s: f64,
        sync_s: f64,
    },
}

/// A named simulated device.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SimPreset {
    pub name: &'static str,
    pub description: &'static str,
    pub source: PresetSource,
}

/// The block size of seed 000's PDAM benchmark (and of Table 1's bandwidths).
pub const PDAM_BLOCK: u64 = 64 << 10;

pub const PRESETS: &[SimPreset] = &[
    SimPreset {
        name: "samsung-860-pro",
        description: "SSD, seed 000 Table 1: P 3.3, 530 MB/s",
        source: PresetSource::Table1 {
            p: 3.3,
            mb_per_s: 530.0,
        },
    },
    SimPreset {
        name: "samsung-970-pro",
        description: "NVMe SSD, seed 000 Table 1: P 5.5, 2500 MB/s",
        source: PresetSource::Table1 {
            p: 5.5,
            mb_per_s: 2500.0,
        },
    },
    SimPreset {
        name: "silicon-power-s55",
        description: "SSD, seed 000 Table 1: P 2.9, 260 MB/s",
        source: PresetSource::Table1 {
            p: 2.9,
            mb_per_s: 260.0,
        },
    },
    SimPreset {
        name: "sandisk-ultra-ii",
        description: "SSD, seed 000 Table 1: P 4.6, 520 MB/s",
        source: PresetSource::Table1 {
            p: 4.6,
            mb_per_s: 520.0,
        },
    },
    SimPreset {
        name: "seagate-2tb-2002",
        description: "HDD, seed 000 Table 2: s 18 ms, t 21 µs/4K",
        source: PresetSource::Table2 {
            s: 0.018,
            t_per_4k: 0.000021,
        },
    },
    SimPreset {
        name: "seagate-250gb-2006",
        description: "HDD, seed 000 Table 2: s 15 ms, t 33 µs/4K",
        source: PresetSource::Table2 {
            s: 0.015,
            t_per_4k: 0.000033,
        },
    },
    SimPreset {
        name: "hitachi-1tb-2009",
        description: "HDD, seed 000 Table 2: s 13 ms, t 41 µs/4K",
        source: PresetSource::Table2 {
            s: 0.013,
            t_per_4k: 0.000041,
        },
    },
    SimPreset {
        name: "wd-black-1tb-2011",
        description: "HDD, seed 000 Table 2: s 12 ms, t 35 µs/4K",
        source: PresetSource::Table2 {
            s: 0.012,
            t_per_4k: 0.000035,
        },
    },
    SimPreset {
        name: "wd-red-6tb-2018",
        description: "HDD, seed 000 Table 2: s 16 ms, t 26 µs/4K",
        source: PresetSource::Table2 {
            s: 0.016,
            t_per_4k: 0.000026,
        },
    },
    SimPreset {
        name: "throttled-100iops-100mbs",
        description: "a disk throttled to 100 IOPS and 100 MB/s by the kernel's block-IO limits: \
                      an IO of x bytes costs max(10 ms, x / 100 MB/s)",
        source: PresetSource::Throttled {
            iops: 100.0,
            bytes_per_s: 100e6,
        },
    },
    SimPreset {
        name: "this-machine",
        description: "the SSD strata was built on, as fio measured it: s 120 µs, t 0.94 ns/B, \
                      P 3, 1.3 GiB/s, fsync 4 ms",
        source: PresetSource::Measured {
            s: 120e-6,
            t: 0.94e-9,
            p: 3.0,
            bytes_per_s: 1.3 * (1u64 << 30) as f64,
            sync_s: 4e-3,
        },
    },
];

impl SimPreset {
    /// Whether the preset follows the affine model (s + t·x); a throttled one does not.
    pub fn is_affine(&self) -> bool {
        !matches!(self.source, PresetSource::Throttled { .. })
    }

    pub fn find(name: &str) -> Option<&'static SimPreset> {
        PRESETS.iter().find(|p| p.name.eq_ignore_ascii_case(name))
    }

    pub fn names() -> Vec<&'static str> {
        PRESETS.iter().map(|p| p.name).collect()
    }

    /// The preset's cost model, without noise. Syncs cost one setup where the seed does not
    /// measure them (it never does).
    pub fn model(&self) -> SimModel {
        match self.source {
            PresetSource::Table2 { s, t_per_4k } => {
                SimModel::affine(Affine::new(s, t_per_4k / 4096.0), s)
            }
            PresetSource::Table1 { p, mb_per_s } => {
                let bw = mb_per_s * 1e6;
                let s = (p - 1.0) * PDAM_BLOCK as f64 / bw;
                SimModel {
                    affine: Affine::new(s, 1.0 / bw),
                    parallelism: p,
                    bandwidth_bytes_per_s: Some(bw),
                    sync_s: s,
                    noise: 0.0,
                    seed: 0,
                }
            }
            PresetSource::Throttled { iops, bytes_per_s } => SimModel {
                // The IO floor as the setup; a transfer cost small enough to vanish under the
                // bandwidth limit, which sets the cost of large IOs.
                affine: Affine::new(1.0 / iops, 1e-12),
                parallelism: 1.0,
                bandwidth_bytes_per_s: Some(bytes_per_s),
                sync_s: 1.0 / iops,
                noise: 0.0,
                seed: 0,
            },
            PresetSource::Measured {
                s,
                t,
                p,
                bytes_per_s,
                sync_s,
            } => SimModel {
                affine: Affine::new(s, t),
                parallelism: p,
                bandwidth_bytes_per_s: Some(bytes_per_s),
                sync_s,
                noise: 0.0,
                seed: 0,
            },
        }
    }
}

impl SimDisk {
    pub fn new(model: Affine, sync_s: f64) -> Arc<SimDisk> {
        SimDisk::with_model(SimModel::affine(model, sync_s))
    }

    /// A disk priced by a full `SimModel` (parallelism, shared bandwidth, noise).
    pub fn with_model(model: SimModel) -> Arc<SimDisk> {
        Arc::new(SimDisk {
            faults: Mutex::new(Faults::default()),
            clock: Mutex::new(SimClock {
                rng: SplitMix64::new(model.seed),
                model,
                now_s: 0.0,
                sync_wall: std::time::Duration::ZERO,
            }),
            #[cfg(test)]
            after_admit: Mutex::new(None),
        })
    }

    /// The window between a read's admission and its copy of the image (`after_admit`).
    fn admitted(&self) {
        #[cfg(test)]
        if let Some(Hook(f)) = self.after_admit.lock().unwrap().take() {
            f();
        }
    }

    fn clock(&self) -> MutexGuard<'_, SimClock> {
        self.clock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Replace the whole cost model; the noise restarts from the model's seed.
    pub fn set_sim_model(&self, model: SimModel) {
        let mut c = self.clock();
        c.rng = SplitMix64::new(model.seed);
        c.model = model;
    }

    pub fn sim_model(&self) -> SimModel {
        self.clock().model.clone()
    }

    fn faults(&self) -> MutexGuard<'_, Faults> {
        self.faults.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Fail IO number `n` (counting from 1 from now); with `sticky`, every IO after it fails too.
    pub fn fail_io_after(&self, n: u64, sticky: bool) {
        let mut f = self.faults();
        f.fail_at = Some(f.ios + n.max(1));
        f.fail_sticky = sticky;
    }

    /// Tear write number `n` (from now): only its first `sectors` sectors land durably.
    pub fn tear_write_after(&self, n: u64, sectors: usize) {
        let mut f = self.faults();
        f.tear = Some((f.writes + n.max(1), sectors));
    }

    /// A process crash at IO number `n` (from now): that IO and every later one fails and
    /// changes nothing, until `clear_faults` (or a power cut) lets the next process in.
    pub fn kill_at_io(&self, n: u64) {
        self.fail_io_after(n, true);
    }

    /// A process crash at the `nth` IO of `kind` on device `name` (from now; 1 is the next), as
    /// `kill_at_io` does for an IO index: aimed at a step of the protocol, such as "the second
    /// sync of the data file", whatever other threads do meanwhile.
    pub fn kill_at(&self, name: &str, kind: IoKind, nth: u64) {
        self.faults().kill_on = Some((name.to_string(), kind, nth.max(1)));
    }

    /// IOs issued on this disk so far (reads, writes, syncs, length changes).
    pub fn ios(&self) -> u64 {
        self.faults().ios
    }

    pub fn clear_faults(&self) {
        let mut f = self.faults();
        f.fail_at = None;
        f.kill_on = None;
        f.tear = None;
        f.dead = false;
    }

    pub fn is_dead(&self) -> bool {
        self.faults().dead
    }

    /// Every IO from here on fails (a process's death, or a dead disk), not only one.
    fn failing_for_good(&self) -> bool {
        let f = self.faults();
        f.dead || (f.fail_sticky && f.fail_at.is_some())
    }

    /// Seconds of simulated device time spent so far.
    pub fn clock_s(&self) -> f64 {
        self.clock().now_s
    }

    /// Change the affine costs and the sync cost; parallelism, bandwidth and noise stay.
    pub fn set_model(&self, model: Affine, sync_s: f64) {
        let mut c = self.clock();
        c.model.affine = model;
        c.model.sync_s = sync_s;
    }

    /// Make every sync take `wall` of real time (for tests of concurrent commit).
    pub fn set_sync_latency(&self, wall: std::time::Duration) {
        self.clock().sync_wall = wall;
    }

    fn sync_latency(&self) -> std::time::Duration {
        self.clock().sync_wall
    }

    fn tick(&self, bytes: Option<u64>) {
        let mut c = self.clock();
        c.now_s += match bytes {
            Some(b) => c.io_cost(b),
            None => c.model.sync_s,
        };
    }

    /// Charge IOs submitted together: see the module comment.
    fn tick_batch(&self, sizes: &[u64]) {
        let mut c = self.clock();
        let costs: Vec<f64> = sizes.iter().map(|&b| c.io_cost(b)).collect();
        c.now_s += c.model.batch_of(&costs, sizes);
    }

    /// Decide the fate of the next IO: Ok(None) proceed, Ok(Some(k)) tear after k sectors, Err fail.
    fn admit(&self, dev: &str, kind: IoKind, what: &str) -> Result<Option<usize>> {
        let is_write = kind == IoKind::Write;
        let mut f = self.faults();
        if f.dead {
            return Err(dead(what));
        }
        f.ios += 1;
        if let Some((name, k, left)) = &mut f.kill_on {
            if name == dev && *k == kind {
                *left -= 1;
                if *left == 0 {
                    f.kill_on = None;
                    f.fail_at = Some(f.ios);
                    f.fail_sticky = true;
                }
            }
        }
        if let Some(at) = f.fail_at {
            if f.ios == at || (f.fail_sticky && f.ios > at) {
                return Err(injected(what, "injected IO error"));
            }
        }
        if is_write {
            f.writes += 1;
            if let Some((at, sectors)) = f.tear {
                if f.writes == at {
                    f.tear = None;
                    f.dead = true;
                    return Ok(Some(sectors));
                }
            }
        }
        Ok(None)
    }
}

/// Every IO of a disk a torn write killed, until the next process.
fn dead(what: &str) -> Error {
    injected(what, "the simulated disk is dead after a torn write")
}

fn injected(what: &str, why: &str) -> Error {
    Error::io(what.to_string(), io::Error::other(why.to_string()))
}

#[derive(Debug)]
enum Pending {
    Write(u64, Vec<u8>),
    SetLen(u64),
}

#[derive(Debug, Default)]
struct Images {
    current: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<Pending>,
}

fn put(image: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let end = offset as usize + data.len();
    if image.len() < end {
        image.resize(end, 0);
    }
    image[offset as usize..end].copy_from_slice(data);
}

#[derive(Debug)]
pub struct SimDevice {
    name: String,
    disk: Arc<SimDisk>,
    images: Mutex<Images>,
}

impl SimDevice {
    pub fn new(name: &str, disk: Arc<SimDisk>) -> SimDevice {
        SimDevice {
            name: name.to_string(),
            disk,
            images: Mutex::new(Images::default()),
        }
    }

    fn images(&self) -> MutexGuard<'_, Images> {
        self.images.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lose everything written since the last sync.
    pub fn crash(&self) {
        let mut im = self.images();
        im.pending.clear();
        im.current = im.durable.clone();
    }

    /// A power cut that keeps a random part of what was written since the last sync (see the
    /// module comment); `crash` is the case that keeps nothing.
    ///
    /// The length is the length after a random prefix of the unsynced operations (the
    /// metadata that landed). Each page keeps a random prefix of the writes made to it, except
    /// writes made after a truncation that did not land and that cut below the page: those
    /// went to space the truncation freed, which cannot be durable while the truncation is not.
    /// A truncation that landed discards what lay past it, so bytes it cut away that no kept
    /// write rewrote read as zeros if the length reaches them again.
    pub fn power_cut(&self, rng: &mut SplitMix64) {
        let mut guard = self.images();
        let im = &mut *guard;
        let pending = std::mem::take(&mut im.pending);
        let mut image = std::mem::take(&mut im.durable);
        let cut = rng.below(pending.len() as u64 + 1) as usize;
        let mut len = image.len() as u64;
        for p in &pending[..cut] {
            len = match p {
                Pending::Write(off, data) => len.max(off + data.len() as u64),
                Pending::SetLen(l) => *l,
            };
        }
        // Each page's writes that may land, in order, and whether a truncation that did not
        // land has closed it to later writes.
        let page = PAGE as u64;
        let mut pages: BTreeMap<u64, (Vec<usize>, bool)> = BTreeMap::new();
        let mut running = image.len() as u64;
        for (i, p) in pending.iter().enumerate() {
            match p {
                Pending::Write(off, data) => {
                    let end = off + data.len() as u64;
                    running = running.max(end);
                    for pg in off / page..end.div_ceil(page) {
                        let (writes, closed) = pages.entry(pg).or_default();
                        if !*closed {
                            writes.push(i);
                        }
                    }
                }
                Pending::SetLen(l) => {
                    let before = std::mem::replace(&mut running, *l);
                    if *l < before && i >= cut {
                        for pg in l / page..before.div_ceil(page) {
                            pages.entry(pg).or_default().1 = true;
                        }
                    }
                }
            }
        }
        // Which writes land on each page: a prefix, sometimes with the next one torn at a
        // sector.
        let mut lands: BTreeMap<(usize, u64), Option<u64>> = BTreeMap::new();
        for (pg, (writes, _)) in &pages {
            let keep = rng.below(writes.len() as u64 + 1) as usize;
            for &i in &writes[..keep] {
                lands.insert((i, *pg), None);
            }
            if keep < writes.len() && rng.below(4) == 0 {
                let sectors = rng.below((PAGE / SECTOR) as u64);
                lands.insert((writes[keep], *pg), Some(sectors));
            }
        }
        for (i, p) in pending.iter().enumerate() {
            match p {
                Pending::SetLen(l) if i < cut => {
                    let from = (*l as usize).min(image.len());
                    image[from..].fill(0);
                }
                Pending::SetLen(_) => {}
                Pending::Write(off, data) => {
                    let end = off + data.len() as u64;
                    for pg in off / page..end.div_ceil(page) {
                        let Some(torn) = lands.get(&(i, pg)) else {
                            continue;
                        };
                        let from = (pg * page).max(*off);
                        let mut to = ((pg + 1) * page).min(end);
                        if let Some(sectors) = torn {
                            to = to.min(pg * page + sectors * SECTOR as u64);
                        }
                        if from < to {
                            put(
                                &mut image,
                                from,
                                &data[(from - off) as usize..(to - off) as usize],
                            );
                        }
                    }
                }
            }
        }
        image.resize(len as usize, 0);
        im.current = image.clone();
        im.durable = image;
    }

    /// Flip bits of one byte in both images, as media corruption would.
    pub fn corrupt_byte(&self, offset: u64, xor: u8) {
        let mut guard = self.images();
        let im = &mut *guard;
        for image in [&mut im.current, &mut im.durable] {
            if let Some(b) = image.get_mut(offset as usize) {
                *b ^= xor;
            }
        }
    }

    /// A copy of what reads see now.
    pub fn contents(&self) -> Vec<u8> {
        self.images().current.clone()
    }

    /// A copy of what a power cut now would leave: the contents as of the last sync.
    pub fn durable_contents(&self) -> Vec<u8> {
        self.images().durable.clone()
    }

    /// Read several ranges as IOs outstanding at the same time (as from that many threads): the
    /// virtual clock advances once, by the batch cost of the disk's model. Each IO still meets
    /// the fault plan.
    pub fn read_batch(&self, reqs: &mut [(u64, &mut [u8])]) -> Result<()> {
        let mut sizes = Vec::with_capacity(reqs.len());
        for (offset, buf) in reqs.iter() {
            let what = format!("read {} bytes at {offset} of {}", buf.len(), self.name);
            self.disk.admit(&self.name, IoKind::Read, &what)?;
            sizes.push(buf.len() as u64);
        }
        self.disk.tick_batch(&sizes);
        self.disk.admitted();
        let im = self.images();
        // A write torn on another thread since these reads were admitted cut the power: they
        // never complete (the image they would copy is already what the crash leaves).
        if self.disk.is_dead() {
            return Err(dead(&format!(
                "read {} ranges of {}",
                reqs.len(),
                self.name
            )));
        }
        for (offset, buf) in reqs.iter_mut() {
            let end = *offset as usize + buf.len();
            if end > im.current.len() {
                return Err(Error::io(
                    format!("read {} bytes at {offset} of {}", buf.len(), self.name),
                    io::Error::from(io::ErrorKind::UnexpectedEof),
                ));
            }
            buf.copy_from_slice(&im.current[*offset as usize..end]);
        }
        Ok(())
    }
}

impl Device for SimDevice {
    fn name(&self) -> &str {
        &self.name
    }

    fn read_many(&self, reqs: &mut [(u64, &mut [u8])]) -> Result<()> {
        self.read_batch(reqs)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let what = format!("read {} bytes at {offset} of {}", buf.len(), self.name);
        self.disk.admit(&self.name, IoKind::Read, &what)?;
        self.disk.tick(Some(buf.len() as u64));
        self.disk.admitted();
        let im = self.images();
        // A write torn on another thread since this read was admitted cut the power: it never
        // completes (the image it would copy is already what the crash leaves).
        if self.disk.is_dead() {
            return Err(dead(&what));
        }
        let end = offset as usize + buf.len();
        if end > im.current.len() {
            return Err(Error::io(
                what,
                io::Error::from(io::ErrorKind::UnexpectedEof),
            ));
        }
        buf.copy_from_slice(&im.current[offset as usize..end]);
        Ok(())
    }

    fn write_at(&self, data: &[u8], offset: u64) -> Result<()> {
        let what = format!("write {} bytes at {offset} of {}", data.len(), self.name);
        let tear = self.disk.admit(&self.name, IoKind::Write, &what)?;
        self.disk.tick(Some(data.len() as u64));
        let mut im = self.images();
        if let Some(sectors) = tear {
            // Power is cut mid-write: a prefix reaches the platter, nothing else since sync does.
            let keep = (sectors * SECTOR).min(data.len());
            put(&mut im.durable, offset, &data[..keep]);
            im.pending.clear();
            im.current = im.durable.clone();
            return Err(injected(&what, "torn write (simulated power cut)"));
        }
        put(&mut im.current, offset, data);
        im.pending.push(Pending::Write(offset, data.to_vec()));
        Ok(())
    }

    /// A hole is zeros at once, in what is read and in what survives a crash alike: the
    /// strictest reading of a punch (the file system may make it durable at any moment), so
    /// a test that reopens after a close finds any live block punched by mistake.
    fn discard(&self, offset: u64, len: u64) -> Result<()> {
        let mut guard = self.images();
        let im = &mut *guard;
        for image in [&mut im.current, &mut im.durable] {
            let end = ((offset + len) as usize).min(image.len());
            if (offset as usize) < end {
                image[offset as usize..end].fill(0);
            }
        }
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        let what = format!("sync {}", self.name);
        if let Err(e) = self.disk.admit(&self.name, IoKind::Sync, &what) {
            if !self.disk.failing_for_good() {
                self.images().pending.clear();
            }
            return Err(e);
        }
        self.disk.tick(None);
        let wall = self.disk.sync_latency();
        if !wall.is_zero() {
            std::thread::sleep(wall);
        }
        let mut im = self.images();
        let pending = std::mem::take(&mut im.pending);
        for p in pending {
            match p {
                Pending::Write(off, data) => put(&mut im.durable, off, &data),
                Pending::SetLen(len) => im.durable.resize(len as usize, 0),
            }
        }
        Ok(())
    }

    fn len(&self) -> Result<u64> {
        Ok(self.images().current.len() as u64)
    }

    fn set_len(&self, len: u64) -> Result<()> {
        let what = format!("set the length of {} to {len}", self.name);
        self.disk.admit(&self.name, IoKind::SetLen, &what)?;
        let mut im = self.images();
        im.current.resize(len as usize, 0);
        im.pending.push(Pending::SetLen(len));
        Ok(())
    }
}

/// The named devices of one simulated database, sharing one disk.
#[derive(Debug)]
pub struct SimFiles {
    pub disk: Arc<SimDisk>,
    /// Held by the open `Db`, as the file lock is on real files.
    pub(crate) locked: std::sync::atomic::AtomicBool,
    devices: Mutex<BTreeMap<String, Arc<SimDevice>>>,
}

impl SimFiles {
    pub fn new(disk: Arc<SimDisk>) -> SimFiles {
        SimFiles {
            disk,
            locked: Default::default(),
            devices: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn get(&self, name: &str) -> Option<Arc<SimDevice>> {
        self.devices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    pub fn get_or_create(&self, name: &str) -> Arc<SimDevice> {
        let mut d = self.devices.lock().unwrap_or_else(|e| e.into_inner());
        d.entry(name.to_string())
            .or_insert_with(|| Arc::new(SimDevice::new(name, self.disk.clone())))
            .clone()
    }

    pub fn names(&self) -> Vec<String> {
        self.devices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// Power loss that keeps a random part of each device's unsynced writes (see
    /// `SimDevice::power_cut`), the same for the same seed; the disk works again.
    pub fn power_cut(&self, seed: u64) {
        let mut rng = SplitMix64::new(seed);
        for dev in self
            .devices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
        {
            dev.power_cut(&mut rng);
        }
        self.disk.clear_faults();
    }

    /// Power loss: every device loses its unsynced writes, and the disk works again.
    pub fn crash(&self) {
        for dev in self
            .devices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
        {
            dev.crash();
        }
        self.disk.clear_faults();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev() -> (Arc<SimDisk>, SimDevice) {
        let disk = SimDisk::new(Affine::new(100e-6, 1e-9), 1e-3);
        (disk.clone(), SimDevice::new("d", disk))
    }

    /// Found by the oracle (`betree_8k_drains::torn_writes_none`, once in ~500 runs): a read
    /// admitted just before a write on another thread tore copied the image the tear had rolled
    /// back to the last sync, and the engine met a block older than its table said.
    #[test]
    fn a_read_admitted_before_a_tear_elsewhere_fails_as_the_dead_disk_does() {
        let (disk, d) = dev();
        let d = Arc::new(d);
        d.write_at(b"old", 0).unwrap();
        d.sync().unwrap();
        d.write_at(b"new", 0).unwrap();
        for batch in [false, true] {
            disk.tear_write_after(1, 0);
            let other = d.clone();
            *disk.after_admit.lock().unwrap() = Some(Hook(Box::new(move || {
                assert!(other.write_at(b"torn", 100).is_err(), "the write tears");
            })));
            let mut b = [0u8; 3];
            let r = if batch {
                d.read_many(&mut [(0, &mut b[..])])
            } else {
                d.read_at(&mut b, 0)
            };
            assert!(r.is_err(), "read {b:?} from the image the tear left");
            assert_eq!(b, [0; 3], "nothing was copied");
            disk.clear_faults();
            d.write_at(b"new", 0).unwrap();
        }
    }

    #[test]
    fn crash_drops_unsynced_writes_and_length_changes() {
        let (_, d) = dev();
        d.write_at(b"durable", 0).unwrap();
        d.sync().unwrap();
        d.write_at(b"lost", 100).unwrap();
        d.set_len(3).unwrap();
        assert_eq!(d.len().unwrap(), 3);
        d.crash();
        assert_eq!(d.len().unwrap(), 7);
        let mut b = [0u8; 7];
        d.read_at(&mut b, 0).unwrap();
        assert_eq!(&b, b"durable");
    }

    #[test]
    fn a_power_cut_keeps_synced_data_and_some_history_of_each_page() {
        use std::collections::BTreeSet;
        let mut outcomes = BTreeSet::new();
        let mut lengths = BTreeSet::new();
        for seed in 0..400 {
            let (_, d) = dev();
            d.write_at(&[1u8; 3 * PAGE], 0).unwrap();
            d.sync().unwrap();
            d.write_at(&[2u8; PAGE], 0).unwrap();
            d.write_at(&[3u8; PAGE], 0).unwrap();
            d.write_at(&[4u8; 2 * PAGE], 3 * PAGE as u64).unwrap();
            d.set_len(4 * PAGE as u64).unwrap();
            d.power_cut(&mut SplitMix64::new(seed));
            let img = d.contents();
            assert_eq!(img, d.durable_contents(), "what survived is what reads see");
            lengths.insert(img.len());
            assert!([3, 4, 5].contains(&(img.len() / PAGE)), "len {}", img.len());
            // Synced pages 1 and 2 are never lost.
            assert!(img[PAGE..3 * PAGE].iter().all(|&b| b == 1), "seed {seed}");
            // Page 0 is at some point of its history, possibly torn at a sector.
            let sectors: Vec<u8> = img[..PAGE].chunks(SECTOR).map(|c| c[0]).collect();
            for (s, c) in img[..PAGE].chunks(SECTOR).enumerate() {
                assert!(c.iter().all(|&b| b == sectors[s]), "sector {s} torn inside");
            }
            assert!(sectors.windows(2).all(|w| w[0] >= w[1]), "{sectors:?}");
            outcomes.insert((sectors[0], sectors[7]));
        }
        // Every state of page 0 happens, whole or torn, and so does every length.
        for want in [(1, 1), (2, 2), (3, 3), (2, 1), (3, 2)] {
            assert!(
                outcomes.contains(&want),
                "{want:?} never seen: {outcomes:?}"
            );
        }
        assert_eq!(lengths.len(), 3, "{lengths:?}");
        // A truncation and a write after it: old contents, empty, or the new contents, never
        // the new write over the old contents (it went to space the truncation freed).
        let mut seen = BTreeSet::new();
        for seed in 0..200 {
            let (_, d) = dev();
            d.write_at(&[1u8; 2 * PAGE], 0).unwrap();
            d.sync().unwrap();
            d.set_len(0).unwrap();
            d.write_at(&[9u8; 32], 0).unwrap();
            d.power_cut(&mut SplitMix64::new(seed));
            let img = d.contents();
            let state = match (img.len(), img.first()) {
                (0, _) => "empty",
                (n, Some(1)) if n == 2 * PAGE && img.iter().all(|&b| b == 1) => "old",
                (32, Some(9)) if img.iter().all(|&b| b == 9) => "new",
                (32, Some(0)) if img.iter().all(|&b| b == 0) => "new length, data not yet",
                _ => panic!(
                    "seed {seed}: impossible state {:?}",
                    &img[..img.len().min(40)]
                ),
            };
            seen.insert(state);
        }
        assert_eq!(seen.len(), 4, "{seen:?}");
        // The same seed cuts the same way.
        let image = |seed| {
            let (_, d) = dev();
            for i in 0..20u8 {
                d.write_at(&[i; 100], i as u64 * 3000).unwrap();
            }
            d.power_cut(&mut SplitMix64::new(seed));
            d.contents()
        };
        assert_eq!(image(9), image(9));
    }

    #[test]
    fn a_killed_process_changes_nothing_after_its_last_io() {
        let (disk, d) = dev();
        d.write_at(b"before", 0).unwrap();
        disk.kill_at_io(1);
        assert!(d.set_len(0).is_err());
        assert!(d.write_at(b"after", 0).is_err());
        assert!(d.sync().is_err());
        disk.clear_faults();
        let mut b = [0u8; 6];
        d.read_at(&mut b, 0).unwrap();
        assert_eq!(&b, b"before", "the page cache keeps what the process wrote");
        assert_eq!(disk.ios(), 5, "every call was an IO, the failed ones too");
    }

    #[test]
    fn nth_io_fails_once_or_sticky() {
        let (disk, d) = dev();
        disk.fail_io_after(2, false);
        d.write_at(b"a", 0).unwrap();
        assert!(d.write_at(b"b", 1).is_err());
        d.write_at(b"c", 2).unwrap();
        disk.fail_io_after(1, true);
        assert!(d.sync().is_err());
        assert!(d.write_at(b"d", 3).is_err());
        disk.clear_faults();
        d.sync().unwrap();
    }

    #[test]
    fn torn_write_keeps_a_sector_prefix_and_kills_the_disk() {
        let (disk, d) = dev();
        d.write_at(&[1u8; 2048], 0).unwrap();
        d.sync().unwrap();
        disk.tear_write_after(1, 1);
        assert!(d.write_at(&[2u8; 2048], 0).is_err());
        assert!(d.write_at(b"x", 0).is_err(), "dead until crash");
        d.crash();
        disk.clear_faults();
        let mut b = vec![0u8; 2048];
        d.read_at(&mut b, 0).unwrap();
        assert!(b[..512].iter().all(|&x| x == 2));
        assert!(b[512..].iter().all(|&x| x == 1));
    }

    #[test]
    fn virtual_clock_charges_the_affine_model() {
        let (disk, d) = dev();
        d.write_at(&[0u8; 1000], 0).unwrap();
        d.sync().unwrap();
        let mut b = [0u8; 1000];
        d.read_at(&mut b, 0).unwrap();
        let expect = 2.0 * (100e-6 + 1000.0 * 1e-9) + 1e-3;
        assert!((disk.clock_s() - expect).abs() < 1e-12);
    }

    #[test]
    fn batches_overlap_up_to_p_and_share_the_channel() {
        let mut m = SimModel::affine(Affine::new(100e-6, 1e-9), 1e-3);
        m.parallelism = 4.0;
        let disk = SimDisk::with_model(m.clone());
        let d = SimDevice::new("d", disk.clone());
        d.write_at(&vec![0u8; 1 << 20], 0).unwrap();
        let before = disk.clock_s();
        let mut bufs = vec![vec![0u8; 4096]; 8];
        let mut reqs: Vec<(u64, &mut [u8])> = bufs
            .iter_mut()
            .enumerate()
            .map(|(i, b)| ((i as u64) * 4096, b.as_mut_slice()))
            .collect();
        d.read_batch(&mut reqs).unwrap();
        // 8 IOs on 4 slots: twice one IO's cost.
        let one = 100e-6 + 4096.0 * 1e-9;
        assert!((disk.clock_s() - before - 2.0 * one).abs() < 1e-12);
        // Two IOs on 4 slots take as long as one, never less.
        assert!((m.batch_s(&[4096, 4096]) - one).abs() < 1e-15);
        m.bandwidth_bytes_per_s = Some(1e6);
        assert!((m.batch_s(&[4096, 4096]) - 8192.0 / 1e6).abs() < 1e-15);
    }

    #[test]
    fn noise_is_seeded_and_centred() {
        let m = SimModel::affine(Affine::new(100e-6, 0.0), 0.0).with_noise(0.1, 7);
        let run = || {
            let disk = SimDisk::with_model(m.clone());
            let d = SimDevice::new("d", disk.clone());
            d.write_at(&[0u8; 4096], 0).unwrap();
            let start = disk.clock_s();
            let mut b = [0u8; 16];
            for _ in 0..4000 {
                d.read_at(&mut b, 0).unwrap();
            }
            (disk.clock_s() - start) / 4000.0
        };
        let (a, b) = (run(), run());
        assert_eq!(a, b, "same seed, same clock");
        assert!((a / 100e-6 - 1.0).abs() < 0.01, "mean cost {a}");
    }

    #[test]
    fn presets_follow_the_seed_tables() {
        let hdd = SimPreset::find("seagate-2tb-2002").unwrap().model();
        assert_eq!(hdd.affine.setup_s, 0.018);
        assert!((hdd.affine.alpha() * 4096.0 - 0.0012).abs() < 0.0001);
        let ssd = SimPreset::find("samsung-860-pro").unwrap().model();
        // Saturation with 64 KiB reads is Table 1's P·B: 530 MB/s.
        let step = ssd.affine.cost(PDAM_BLOCK);
        let sat = ssd.parallelism * PDAM_BLOCK as f64 / step;
        assert!((sat / 530e6 - 1.0).abs() < 1e-9);
        assert_eq!(SimPreset::names().len(), PRESETS.len());
    }
}
