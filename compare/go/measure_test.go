// measure_test.go: the outside measures: nearest-rank quantiles, allocated bytes, the process
// counters.
package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestQuantilesAreNearestRank(t *testing.T) {
	var l Latencies
	if q := l.quantileUs(0.5); q != 0 {
		t.Errorf("no samples: %v", q)
	}
	for ns := uint64(100); ns >= 1; ns-- {
		l.record(ns * 1000)
	}
	for _, c := range []struct{ q, want float64 }{{0.5, 50}, {0.99, 99}, {1, 100}, {0, 1}, {0.001, 1}} {
		if got := l.quantileUs(c.q); got != c.want {
			t.Errorf("q=%v: %v, want %v", c.q, got, c.want)
		}
	}
	var one Latencies
	one.record(1500)
	if got := one.quantileUs(0.99); got != 1.5 {
		t.Errorf("one sample: %v", got)
	}
}

func TestAllocatedBytesCountBlocksNotHoles(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a"), make([]byte, 64<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "sub", "b"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	dropPageCache(dir)
	if a := allocatedBytes(dir); a < 64<<10 || a >= 1<<20 {
		t.Errorf("allocated %d", a)
	}
	if n := fileBytes(dir); n != 64<<10+1<<30 {
		t.Errorf("file bytes %d", n)
	}
}

func TestProcessCountersSeeASyncedWrite(t *testing.T) {
	dir := t.TempDir()
	before := procIoNow()
	f, err := os.Create(filepath.Join(dir, "w"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	f.Sync()
	f.Close()
	d := procIoNow().since(before)
	_, onDevice := blockStatOf(dir)
	if _, err := os.Stat("/proc/self/io"); err == nil && onDevice && d.WriteBytes < 1<<20 {
		t.Errorf("the process counter saw %d bytes written", d.WriteBytes)
	}
	if peak, cur := rss(); (peak == 0 || cur == 0 || cur > peak) && peak != 0 {
		t.Errorf("rss: peak %d, current %d", peak, cur)
	}
}
