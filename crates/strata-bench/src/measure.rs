//! What the harness reads from outside an engine, so that every engine is measured the same way
//! whatever it reports about itself (Linux only; elsewhere the readings are absent):
//! - the process's IO counters (`/proc/self/io`): bytes it handed to write system calls
//!   (`wchar`), bytes the kernel charged it for writing to storage (`write_bytes` less
//!   `cancelled_write_bytes`), and bytes read from storage. `wchar` is the write-amplification
//!   numerator: the storage charge is made per page-cache folio dirtied, and with the large
//!   folios of recent kernels a 4 KiB rewrite of a file first written sequentially is charged
//!   for the whole folio (32× was seen here), which would inflate engines that rewrite pages;
//! - the block device's counters (`/sys/dev/block/M:m/stat`) for the filesystem holding the
//!   database: completed reads and sectors written, whole-device, so other processes and the
//!   filesystem's journal show up in them too;
//! - allocated bytes of a directory tree (st_blocks, so sparse holes do not count);
//! - peak, current and anonymous resident memory (`/proc/self/status`);
//! - the bytes of a directory's files held in the OS page cache (`mincore` over a read-only
//!   map of each file, what `fincore` prints), so that an engine living in the page cache is
//!   charged for it as one living in its own heap is;
//! - dropping the OS page cache of a directory's files (fdatasync, then POSIX_FADV_DONTNEED),
//!   for cold-cache reads without root.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// `/proc/self/io`, or zeros where there is none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcIo {
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Bytes passed to write(2), pwrite(2) and the like, whatever the page cache makes of them.
    pub wchar: u64,
}

impl ProcIo {
    pub fn now() -> ProcIo {
        let Ok(text) = fs::read_to_string("/proc/self/io") else {
            return ProcIo::default();
        };
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        ProcIo {
            read_bytes: field("read_bytes"),
            write_bytes: field("write_bytes").saturating_sub(field("cancelled_write_bytes")),
            wchar: field("wchar"),
        }
    }

    pub fn since(&self, before: &ProcIo) -> ProcIo {
        ProcIo {
            read_bytes: self.read_bytes.saturating_sub(before.read_bytes),
            write_bytes: self.write_bytes.saturating_sub(before.write_bytes),
            wchar: self.wchar.saturating_sub(before.wchar),
        }
    }
}

/// A block device's cumulative counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockStat {
    pub reads: u64,
    pub bytes_read: u64,
    pub writes: u64,
    pub bytes_written: u64,
}

impl BlockStat {
    /// The counters of the device holding `path`, if it is a block device Linux reports on.
    pub fn of(path: &Path) -> Option<BlockStat> {
        let dev = fs::metadata(path).ok()?.dev();
        let (major, minor) = (libc::major(dev), libc::minor(dev));
        let text = fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/stat")).ok()?;
        let f: Vec<u64> = text
            .split_whitespace()
            .map(|w| w.parse().unwrap_or(0))
            .collect();
        // Fields: reads, reads merged, sectors read, ms reading, writes, writes merged,
        // sectors written, ... (Documentation/block/stat.rst); sectors are 512 bytes.
        (f.len() >= 7).then(|| BlockStat {
            reads: f[0],
            bytes_read: f[2] * 512,
            writes: f[4],
            bytes_written: f[6] * 512,
        })
    }

    pub fn since(&self, before: &BlockStat) -> BlockStat {
        BlockStat {
            reads: self.reads.saturating_sub(before.reads),
            bytes_read: self.bytes_read.saturating_sub(before.bytes_read),
            writes: self.writes.saturating_sub(before.writes),
            bytes_written: self.bytes_written.saturating_sub(before.bytes_written),
        }
    }
}

/// Bytes allocated on disk to the files under `dir` (holes do not count).
pub fn allocated_bytes(dir: &Path) -> u64 {
    walk(dir, &mut |_, meta| meta.blocks() * 512)
}

/// Apparent size of the files under `dir`.
pub fn file_bytes(dir: &Path) -> u64 {
    walk(dir, &mut |_, meta| meta.len())
}

/// Sum `f` over the regular files under `dir`.
fn walk(dir: &Path, f: &mut dyn FnMut(&Path, &fs::Metadata) -> u64) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    let mut total = 0;
    for e in entries.flatten() {
        let path = e.path();
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            total += walk(&path, f);
        } else if meta.is_file() {
            total += f(&path, &meta);
        }
    }
    total
}

/// Write back and drop the OS page cache of every file under `dir`, so the next reads of them
/// go to the device. Best effort: a file that cannot be opened is left as it is.
pub fn drop_page_cache(dir: &Path) {
    walk(dir, &mut |path, _| {
        if let Ok(file) = fs::File::open(path) {
            use std::os::fd::AsRawFd;
            let _ = file.sync_data();
            // SAFETY: a valid open descriptor; fadvise only advises the kernel.
            unsafe {
                libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
            }
        }
        0
    });
}

/// Resident memory of this process: (peak, current) in bytes.
pub fn rss() -> (u64, u64) {
    let [peak, current] = status_kib(["VmHWM:", "VmRSS:"]);
    (peak, current)
}

/// Anonymous resident memory of this process (`RssAnon`): heaps, caches and memtables, but not
/// file pages mapped into it (an mmap engine's data, the program's own code), which
/// `cached_bytes` counts for the database's files.
pub fn rss_anon() -> u64 {
    let [anon] = status_kib(["RssAnon:"]);
    anon
}

/// `/proc/self/status` fields given in kB there, in bytes (0 where there is none), from one
/// reading of the file so that they agree with each other.
fn status_kib<const N: usize>(names: [&str; N]) -> [u64; N] {
    let Ok(text) = fs::read_to_string("/proc/self/status") else {
        return [0; N];
    };
    names.map(|name| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |k| k * 1024)
    })
}

/// Bytes of the files under `dir` that sit in the OS page cache now (whole pages). Mapping a
/// file read-only and asking `mincore` reads nothing and does not fault pages in.
pub fn cached_bytes(dir: &Path) -> u64 {
    walk(dir, &mut |path, meta| file_cached_bytes(path, meta.len()))
}

fn file_cached_bytes(path: &Path, len: u64) -> u64 {
    use std::os::fd::AsRawFd;
    if len == 0 {
        return 0;
    }
    let Ok(file) = fs::File::open(path) else {
        return 0;
    };
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    let Ok(len) = usize::try_from(len) else {
        return 0;
    };
    // SAFETY: a fresh read-only shared map of an open file, unmapped below; nothing reads it.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return 0;
    }
    let mut vec = vec![0u8; len.div_ceil(page as usize)];
    // SAFETY: `addr..addr + len` is the map made above and `vec` has a byte per page of it.
    let ok = unsafe { libc::mincore(addr, len, vec.as_mut_ptr()) } == 0;
    // SAFETY: the map made above, no longer used.
    unsafe { libc::munmap(addr, len) };
    if !ok {
        return 0;
    }
    vec.iter().filter(|&&b| b & 1 == 1).count() as u64 * page
}

/// Latency samples in nanoseconds, summarised as percentiles.
#[derive(Default)]
pub struct Latencies(Vec<u64>);

impl Latencies {
    pub fn record(&mut self, ns: u64) {
        self.0.push(ns);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Take another's samples too.
    pub fn extend(&mut self, other: Latencies) {
        self.0.extend(other.0);
    }

    /// The q-quantile (0 ≤ q ≤ 1) in microseconds, nearest-rank; 0 with no samples.
    pub fn quantile_us(&mut self, q: f64) -> f64 {
        if self.0.is_empty() {
            return 0.0;
        }
        self.0.sort_unstable();
        let rank = ((q * self.0.len() as f64).ceil() as usize).clamp(1, self.0.len());
        self.0[rank - 1] as f64 / 1000.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn quantiles_are_nearest_rank() {
        let mut l = Latencies::default();
        assert_eq!(l.quantile_us(0.5), 0.0);
        for ns in (1..=100).rev() {
            l.record(ns * 1000);
        }
        assert_eq!(l.quantile_us(0.5), 50.0);
        assert_eq!(l.quantile_us(0.99), 99.0);
        assert_eq!(l.quantile_us(1.0), 100.0);
    }

    #[test]
    fn allocated_bytes_count_blocks_not_holes() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = fs::File::create(dir.path().join("a")).unwrap();
        f.write_all(&vec![7u8; 64 << 10]).unwrap();
        f.sync_all().unwrap();
        fs::create_dir(dir.path().join("sub")).unwrap();
        let sparse = fs::File::create(dir.path().join("sub/b")).unwrap();
        sparse.set_len(1 << 30).unwrap();
        let allocated = allocated_bytes(dir.path());
        assert!((64 << 10..(1 << 20)).contains(&allocated), "{allocated}");
        assert_eq!(file_bytes(dir.path()), (64 << 10) + (1 << 30));
        drop_page_cache(dir.path());
    }

    #[test]
    fn cached_bytes_follow_the_page_cache() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = fs::File::create(dir.path().join("c")).unwrap();
        f.write_all(&vec![3u8; 1 << 20]).unwrap();
        f.sync_all().unwrap();
        fs::File::create(dir.path().join("empty")).unwrap();
        // Just written: the pages are in the cache (a tmpfs keeps them there for good).
        assert_eq!(cached_bytes(dir.path()), 1 << 20);
        drop_page_cache(dir.path());
        let after = cached_bytes(dir.path());
        let tmpfs = after == 1 << 20;
        assert!(tmpfs || after < 64 << 10, "{after} bytes still cached");
        // Reading a quarter of the file brings (at least) that quarter back.
        if !tmpfs {
            let mut buf = vec![0u8; 256 << 10];
            use std::io::Read;
            fs::File::open(dir.path().join("c"))
                .unwrap()
                .read_exact(&mut buf)
                .unwrap();
            assert!(cached_bytes(dir.path()) >= 256 << 10);
        }
        assert!(rss_anon() > 0 || !Path::new("/proc/self/status").exists());
    }

    #[test]
    fn process_counters_see_a_synced_write() {
        let dir = tempfile::tempdir().unwrap();
        let before = ProcIo::now();
        let mut f = fs::File::create(dir.path().join("w")).unwrap();
        f.write_all(&vec![1u8; 1 << 20]).unwrap();
        f.sync_all().unwrap();
        let d = ProcIo::now().since(&before);
        // Only a filesystem on a block device charges the writer (tmpfs does not).
        if Path::new("/proc/self/io").exists() && BlockStat::of(dir.path()).is_some() {
            // Other tests' threads share the process counters, so only a lower bound holds.
            assert!(d.write_bytes >= 1 << 20, "{d:?}");
            assert!(d.wchar >= 1 << 20, "{d:?}");
        }
    }
}
