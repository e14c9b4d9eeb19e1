// measure.go: what the driver reads from outside an engine, a port of
// crates/strata-bench/src/measure.rs, so that Pebble and bbolt are measured exactly as the Rust
// engines are (Linux only; elsewhere the readings are absent or zero):
//   - the process's IO counters (/proc/self/io): bytes handed to write calls (wchar, the WA
//     numerator), bytes the kernel charged for writing to storage (write_bytes less
//     cancelled_write_bytes; it over-counts page rewrites under large folios, see measure.rs)
//     and bytes read from storage;
//   - the block device's counters (/sys/dev/block/M:m/stat) of the filesystem holding the
//     database, whole-device;
//   - allocated bytes of a directory tree (st_blocks, so holes do not count);
//   - peak, current and anonymous resident memory (VmHWM, VmRSS, RssAnon in /proc/self/status);
//   - the bytes of a directory's files held in the OS page cache (mincore over a read-only map
//     of each file, as fincore does), so an engine living in the page cache is charged for it;
//   - dropping the OS page cache of a directory's files (fdatasync, then POSIX_FADV_DONTNEED);
//   - latency samples summarised as nearest-rank quantiles.
package main

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ProcIo holds the /proc/self/io counters, or zeros where there are none.
type ProcIo struct {
	ReadBytes  uint64
	WriteBytes uint64
	Wchar      uint64
}

func procIoNow() ProcIo {
	text, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return ProcIo{}
	}
	field := func(name string) uint64 {
		for _, line := range strings.Split(string(text), "\n") {
			if rest, ok := strings.CutPrefix(line, name); ok {
				if v, ok := strings.CutPrefix(rest, ":"); ok {
					n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
					if err == nil {
						return n
					}
					return 0
				}
			}
		}
		return 0
	}
	return ProcIo{
		ReadBytes:  field("read_bytes"),
		WriteBytes: satSub(field("write_bytes"), field("cancelled_write_bytes")),
		Wchar:      field("wchar"),
	}
}

func (p ProcIo) since(before ProcIo) ProcIo {
	return ProcIo{
		ReadBytes:  satSub(p.ReadBytes, before.ReadBytes),
		WriteBytes: satSub(p.WriteBytes, before.WriteBytes),
		Wchar:      satSub(p.Wchar, before.Wchar),
	}
}

func satSub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// BlockStat holds a block device's cumulative counters.
type BlockStat struct {
	Reads        uint64
	BytesRead    uint64
	Writes       uint64
	BytesWritten uint64
}

// blockStatOf reads the counters of the device holding path, if Linux reports on it.
func blockStatOf(path string) (BlockStat, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return BlockStat{}, false
	}
	dev := uint64(st.Dev)
	name := "/sys/dev/block/" + strconv.FormatUint(uint64(unix.Major(dev)), 10) + ":" +
		strconv.FormatUint(uint64(unix.Minor(dev)), 10) + "/stat"
	text, err := os.ReadFile(name)
	if err != nil {
		return BlockStat{}, false
	}
	var f []uint64
	for _, w := range strings.Fields(string(text)) {
		n, err := strconv.ParseUint(w, 10, 64)
		if err != nil {
			n = 0
		}
		f = append(f, n)
	}
	// Fields: reads, reads merged, sectors read, ms reading, writes, writes merged, sectors
	// written, ... (Documentation/block/stat.rst); sectors are 512 bytes.
	if len(f) < 7 {
		return BlockStat{}, false
	}
	return BlockStat{Reads: f[0], BytesRead: f[2] * 512, Writes: f[4], BytesWritten: f[6] * 512}, true
}

func (b BlockStat) since(before BlockStat) BlockStat {
	return BlockStat{
		Reads:        satSub(b.Reads, before.Reads),
		BytesRead:    satSub(b.BytesRead, before.BytesRead),
		Writes:       satSub(b.Writes, before.Writes),
		BytesWritten: satSub(b.BytesWritten, before.BytesWritten),
	}
}

// walk sums f over the regular files under dir (symlinks are not followed).
func walk(dir string, f func(path string, st *syscall.Stat_t) uint64) uint64 {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var total uint64
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		var st syscall.Stat_t
		if err := syscall.Lstat(path, &st); err != nil {
			continue
		}
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFDIR:
			total += walk(path, f)
		case syscall.S_IFREG:
			total += f(path, &st)
		}
	}
	return total
}

// allocatedBytes is the bytes allocated on disk to the files under dir (holes do not count).
func allocatedBytes(dir string) uint64 {
	return walk(dir, func(_ string, st *syscall.Stat_t) uint64 { return uint64(st.Blocks) * 512 })
}

// fileBytes is the apparent size of the files under dir.
func fileBytes(dir string) uint64 {
	return walk(dir, func(_ string, st *syscall.Stat_t) uint64 { return uint64(st.Size) })
}

// dropPageCache writes back and drops the OS page cache of every file under dir, so the next
// reads of them go to the device. Best effort: a file that cannot be opened is left as it is.
func dropPageCache(dir string) {
	walk(dir, func(path string, _ *syscall.Stat_t) uint64 {
		f, err := os.Open(path)
		if err != nil {
			return 0
		}
		defer f.Close()
		fd := int(f.Fd())
		_ = unix.Fdatasync(fd)
		_ = unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED)
		return 0
	})
}

// rss is the resident memory of this process: (peak, current) in bytes.
func rss() (uint64, uint64) {
	f := statusKib("VmHWM:", "VmRSS:")
	return f[0], f[1]
}

// rssAnon is the anonymous resident memory of this process (RssAnon): heaps, caches and
// memtables, but not file pages mapped into it, which cachedBytes counts for the database.
func rssAnon() uint64 { return statusKib("RssAnon:")[0] }

// statusKib reads /proc/self/status once and gives the named fields (in kB there) in bytes,
// 0 for a field that is not there.
func statusKib(names ...string) []uint64 {
	out := make([]uint64, len(names))
	text, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(text), "\n") {
		for i, name := range names {
			if rest, ok := strings.CutPrefix(line, name); ok {
				v := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB"))
				if n, err := strconv.ParseUint(v, 10, 64); err == nil {
					out[i] = n * 1024
				}
			}
		}
	}
	return out
}

// cachedBytes is the bytes of the files under dir in the OS page cache now (whole pages).
// Mapping a file read-only and asking mincore reads nothing and faults no page in.
func cachedBytes(dir string) uint64 {
	page := uint64(os.Getpagesize())
	return walk(dir, func(path string, st *syscall.Stat_t) uint64 {
		if st.Size <= 0 {
			return 0
		}
		f, err := os.Open(path)
		if err != nil {
			return 0
		}
		defer f.Close()
		m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			return 0
		}
		defer unix.Munmap(m)
		vec := make([]byte, (uint64(st.Size)+page-1)/page)
		// x/sys/unix has no wrapper for mincore(2) on Linux.
		_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])),
			uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0])))
		if errno != 0 {
			return 0
		}
		var n uint64
		for _, b := range vec {
			n += uint64(b & 1)
		}
		return n * page
	})
}

// Latencies holds latency samples in nanoseconds.
type Latencies struct{ ns []uint64 }

func (l *Latencies) record(ns uint64) { l.ns = append(l.ns, ns) }

// quantileUs is the q-quantile (0 <= q <= 1) in microseconds, nearest-rank; 0 with no samples.
func (l *Latencies) quantileUs(q float64) float64 {
	n := len(l.ns)
	if n == 0 {
		return 0
	}
	slices.Sort(l.ns)
	rank := f64ToU64(math.Ceil(q * float64(n)))
	rank = max(1, min(rank, uint64(n)))
	return float64(l.ns[rank-1]) / 1000.0
}
