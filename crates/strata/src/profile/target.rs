//! What the profiler measures: a `Target` is scratch space plus a clock. The same benchmark code
//! (`bench`) runs on a real file opened with O_DIRECT and timed by the wall clock (`FileTarget`)
//! and on a SimDevice timed by its virtual clock (`SimTarget`); only concurrent reads differ,
//! because real threads race on a real device while the simulator prices a batch of outstanding
//! IOs by its model (see storage/sim.rs).
//!
//! Invariants: the scratch file is created new, unlinked as soon as it is open (so it disappears
//! when the process ends however it ends, and never clobbers a user's file), fully written before
//! it is read (ext4 serves unwritten extents without touching the device), and read only at 4 KiB
//! aligned offsets with aligned buffers, so O_DIRECT reads go straight to the device (the block
//! size benchmark's `read_block` reads smaller blocks at multiples of their size, down to the
//! smallest read O_DIRECT takes on the file system).

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::Instant;

use crate::error::{Error, Result};
use crate::model::SplitMix64;
use crate::storage::device::{AlignedBuf, Device, FileDevice, DIRECT_ALIGN};
use crate::storage::sim::{SimDevice, SimDisk, SimModel, SimPreset};

/// Result of a concurrent-read run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Concurrent {
    /// Reads completed by all threads together.
    pub ios: u64,
    /// From the first thread's start to the last thread's end.
    pub elapsed_s: f64,
}

pub trait Target: Sync {
    /// What is being measured, for the profile and messages.
    fn describe(&self) -> String;
    /// Bytes of scratch space; reads stay below this (the fsync benchmark appends past it).
    fn span(&self) -> u64;
    /// Seconds on this target's clock (wall or virtual) since some fixed point.
    fn now_s(&self) -> f64;
    fn read(&self, buf: &mut [u8], offset: u64) -> Result<()>;
    /// The smallest read, a power of two of at most 4 KiB, that the target makes as one IO of
    /// that size: a real file under O_DIRECT reads in units of its device's logical block.
    fn smallest_read(&self) -> u64 {
        DIRECT_ALIGN as u64
    }
    /// One read of `buf.len()` bytes at `offset`, both multiples of `smallest_read()`, made as
    /// one IO of that size (`read` rounds a real file's reads out to 4 KiB).
    fn read_block(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.read(buf, offset)
    }
    fn write(&self, data: &[u8], offset: u64) -> Result<()>;
    fn sync(&self) -> Result<()>;
    /// `threads` clients each reading random `block`-byte blocks back to back until `budget_s`
    /// has passed and each has done at least `min_per_thread` reads (and, where the clock is
    /// virtual, at most `max_per_thread`).
    fn concurrent_reads(
        &self,
        threads: u32,
        block: u64,
        budget_s: f64,
        min_per_thread: u64,
        max_per_thread: u64,
        seed: u64,
    ) -> Result<Concurrent>;
}

/// A random `size`-byte-readable offset in `span`, 4 KiB aligned.
pub fn random_offset(rng: &mut SplitMix64, span: u64, size: u64) -> u64 {
    let a = DIRECT_ALIGN as u64;
    let slots = (span.saturating_sub(size)) / a + 1;
    rng.below(slots) * a
}

/// A scratch file on a real file system, read and written with O_DIRECT.
pub struct FileTarget {
    dev: FileDevice,
    dir: PathBuf,
    span: u64,
    epoch: Instant,
    /// The smallest O_DIRECT read the file system took when the target was made.
    smallest: u64,
}

/// Headroom left free on the file system besides the scratch file.
const FREE_MARGIN: u64 = 256 << 20;
/// The largest read of the affine benchmark must fit in the span twice over.
pub const MIN_SCRATCH: u64 = 64 << 20;

fn statvfs(dir: &Path) -> Result<libc::statvfs> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| Error::InvalidOptions(format!("{} contains a NUL byte", dir.display())))?;
    // SAFETY: `c` is a valid NUL-terminated path and `st` a properly sized out-parameter.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    if rc != 0 {
        return Err(Error::io(
            format!("statvfs {}", dir.display()),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(st)
}

fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut u = 0;
    let mut v = bytes as f64;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

impl FileTarget {
    /// Create a scratch file of `size` bytes (rounded down to 4 KiB) in `dir`. Clear errors for a
    /// missing directory, a read-only or full file system, and one without O_DIRECT.
    pub fn create(dir: &Path, size: u64) -> Result<FileTarget> {
        let shown = dir.display().to_string();
        let bad = |why: String| Error::InvalidOptions(why);
        match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(bad(format!("{shown} is not a directory"))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(bad(format!("directory {shown} does not exist")))
            }
            Err(e) => return Err(Error::io(format!("stat {shown}"), e)),
        }
        let size = size / DIRECT_ALIGN as u64 * DIRECT_ALIGN as u64;
        if size < MIN_SCRATCH {
            return Err(bad(format!(
                "a scratch file of {} is too small: the benchmark reads up to 16 MiB at random \
                 offsets and needs at least {}",
                human(size),
                human(MIN_SCRATCH)
            )));
        }
        let st = statvfs(dir)?;
        if st.f_flag & libc::ST_RDONLY != 0 {
            return Err(bad(format!(
                "{shown} is on a read-only file system; profile a writable directory"
            )));
        }
        let free = st.f_bavail as u64 * st.f_frsize as u64;
        if free < size + FREE_MARGIN {
            return Err(bad(format!(
                "{shown} has {} free but the scratch file needs {} (plus {} headroom); use a \
                 smaller --size or another --dir",
                human(free),
                human(size),
                human(FREE_MARGIN)
            )));
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = dir.join(format!(
            ".strata-profile-{}-{nanos}.scratch",
            std::process::id()
        ));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EROFS) => bad(format!(
                    "cannot create a scratch file in {shown}: {e}; is the directory writable?"
                )),
                _ => Error::io(format!("create {}", path.display()), e),
            })?;
        // From here on the file must not outlive this function unless it is returned: unlink it
        // at once; the open descriptors keep its blocks until they close.
        let opened = (|| {
            // Reserve the space up front, so a full disk fails now and the file is laid out in
            // few extents. File systems without fallocate get a plain length and are filled below.
            // SAFETY: a valid descriptor and in-range arguments.
            let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, size as libc::off_t) };
            if rc != 0 {
                let e = std::io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::ENOSPC) => {
                        return Err(bad(format!(
                            "{shown} has no room for a scratch file of {}",
                            human(size)
                        )))
                    }
                    Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => file
                        .set_len(size)
                        .map_err(|e| Error::io(format!("truncate {}", path.display()), e))?,
                    _ => return Err(Error::io(format!("fallocate {}", path.display()), e)),
                }
            }
            FileDevice::open(&path, false, true)
        })();
        let _ = std::fs::remove_file(&path);
        drop(file);
        let dev = opened?;
        // The smallest read O_DIRECT takes here: the device's logical block (512 B on most
        // disks, 4 KiB on some); a smaller one is refused with EINVAL.
        let smallest = [512u64, 1024, 2048]
            .into_iter()
            .find(|&b| {
                let mut buf = AlignedBuf::zeroed(b as usize);
                dev.read_direct_at(buf.as_mut_slice(), b).is_ok()
            })
            .unwrap_or(DIRECT_ALIGN as u64);
        Ok(FileTarget {
            dev,
            dir: dir.to_path_buf(),
            span: size,
            epoch: Instant::now(),
            smallest,
        })
    }
}

impl Target for FileTarget {
    fn describe(&self) -> String {
        format!(
            "file system of {} (O_DIRECT, {} scratch file)",
            self.dir.display(),
            human(self.span)
        )
    }

    fn span(&self) -> u64 {
        self.span
    }

    fn now_s(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    fn read(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.dev.read_at(buf, offset)
    }

    fn smallest_read(&self) -> u64 {
        self.smallest
    }

    fn read_block(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.dev.read_direct_at(buf, offset)
    }

    fn write(&self, data: &[u8], offset: u64) -> Result<()> {
        self.dev.write_at(data, offset)
    }

    fn sync(&self) -> Result<()> {
        self.dev.sync()
    }

    fn concurrent_reads(
        &self,
        threads: u32,
        block: u64,
        budget_s: f64,
        min_per_thread: u64,
        _max_per_thread: u64,
        seed: u64,
    ) -> Result<Concurrent> {
        let barrier = Barrier::new(threads as usize);
        let results: Vec<Result<(u64, Instant, Instant)>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|i| {
                    let barrier = &barrier;
                    scope.spawn(move || -> Result<(u64, Instant, Instant)> {
                        let mut buf = AlignedBuf::zeroed(block as usize);
                        let mut rng = SplitMix64::new(seed ^ (i as u64 + 1).wrapping_mul(0x9E37));
                        barrier.wait();
                        let start = Instant::now();
                        let mut n = 0;
                        loop {
                            let off = random_offset(&mut rng, self.span, block);
                            self.dev.read_at(buf.as_mut_slice(), off)?;
                            n += 1;
                            if n >= min_per_thread && start.elapsed().as_secs_f64() >= budget_s {
                                break;
                            }
                        }
                        Ok((n, start, Instant::now()))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a reader thread panicked"))
                .collect()
        });
        let mut ios = 0;
        let (mut first, mut last): (Option<Instant>, Option<Instant>) = (None, None);
        for r in results {
            let (n, s, e) = r?;
            ios += n;
            first = Some(first.map_or(s, |f| f.min(s)));
            last = Some(last.map_or(e, |l| l.max(e)));
        }
        let elapsed_s = match (first, last) {
            (Some(f), Some(l)) => (l - f).as_secs_f64(),
            _ => 0.0,
        };
        Ok(Concurrent { ios, elapsed_s })
    }
}

/// A simulated device: an in-memory SimDevice of `span` bytes priced by a `SimModel`.
pub struct SimTarget {
    disk: Arc<SimDisk>,
    dev: SimDevice,
    name: String,
    span: u64,
}

/// Scratch span of a simulated target: enough for 16 MiB reads at varied offsets, small enough
/// to keep in memory.
pub const SIM_SPAN: u64 = 32 << 20;

impl SimTarget {
    pub fn new(name: &str, model: SimModel) -> SimTarget {
        let disk = SimDisk::with_model(model);
        SimTarget {
            dev: SimDevice::new("profile.scratch", disk.clone()),
            disk,
            name: name.to_string(),
            span: SIM_SPAN,
        }
    }

    /// A target for a named preset (seed 000 Tables 1 and 2, or this machine), with seeded
    /// relative noise on every IO.
    pub fn preset(name: &str, noise: f64, seed: u64) -> Result<SimTarget> {
        let p = SimPreset::find(name).ok_or_else(|| {
            Error::InvalidOptions(format!(
                "no simulated device called {name:?}; presets: {}",
                SimPreset::names().join(", ")
            ))
        })?;
        Ok(SimTarget::new(
            &format!("simulated {} ({})", p.name, p.description),
            p.model().with_noise(noise, seed),
        ))
    }

    pub fn disk(&self) -> &Arc<SimDisk> {
        &self.disk
    }
}

impl Target for SimTarget {
    fn describe(&self) -> String {
        self.name.clone()
    }

    fn span(&self) -> u64 {
        self.span
    }

    fn now_s(&self) -> f64 {
        self.disk.clock_s()
    }

    fn read(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.dev.read_at(buf, offset)
    }

    /// The simulator prices any size; 512 B is the smallest a real disk reads.
    fn smallest_read(&self) -> u64 {
        512
    }

    fn write(&self, data: &[u8], offset: u64) -> Result<()> {
        self.dev.write_at(data, offset)
    }

    fn sync(&self) -> Result<()> {
        self.dev.sync()
    }

    /// Closed-loop clients on a simulated device: each round every thread has one read
    /// outstanding, and the round costs the disk's batch price (flat up to P threads, then
    /// linear), so the run is deterministic.
    fn concurrent_reads(
        &self,
        threads: u32,
        block: u64,
        budget_s: f64,
        min_per_thread: u64,
        max_per_thread: u64,
        seed: u64,
    ) -> Result<Concurrent> {
        let mut rng = SplitMix64::new(seed);
        let mut bufs = vec![vec![0u8; block as usize]; threads as usize];
        let start = self.now_s();
        let mut rounds = 0;
        loop {
            let mut reqs: Vec<(u64, &mut [u8])> = bufs
                .iter_mut()
                .map(|b| (random_offset(&mut rng, self.span, block), b.as_mut_slice()))
                .collect();
            self.dev.read_batch(&mut reqs)?;
            rounds += 1;
            let done = rounds >= min_per_thread && self.now_s() - start >= budget_s;
            if done || rounds >= max_per_thread.max(min_per_thread) {
                break;
            }
        }
        Ok(Concurrent {
            ios: rounds * threads as u64,
            elapsed_s: self.now_s() - start,
        })
    }
}
