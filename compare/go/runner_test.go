// runner_test.go: a tiny end-to-end run of each engine through every kind of phase: what it
// loaded it reads back (zero wrong reads), and the measures add up.
package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func smallSpec() *Spec {
	return &Spec{
		Name: "small", Records: 3000, KeySize: 16, ValueSize: 100, Order: Random, Batch: 100,
		Sync: true, CacheBytes: 4 << 20, Seed: 1, Flush: true, ReadGroup: 100,
		Phases: []Phase{
			{Kind: KindLoad},
			{Kind: KindReads, Ops: 2000, Dist: Uniform},
			{Kind: KindMixed, Ops: 2000, Dist: Zipfian, ScanLen: 20,
				Mix: Mix{Read: 40, Update: 20, Insert: 10, Scan: 10, ReadModifyWrite: 20}},
			{Kind: KindReopen},
			{Kind: KindReads, Ops: 500, Dist: Latest, Cold: true},
			{Kind: KindScans, Ops: 100, Len: 50, Dist: Uniform},
			{Kind: KindDeletes, Ops: 1000},
			{Kind: KindReads, Ops: 1000, Dist: Uniform},
		},
	}
}

func TestEnginesReadBackWhatTheyLoaded(t *testing.T) {
	for _, name := range []string{"pebble", "bbolt"} {
		t.Run(name, func(t *testing.T) {
			spec := smallSpec()
			r, err := run(engines[name], spec, filepath.Join(t.TempDir(), "db"), nil)
			if err != nil {
				t.Fatal(err)
			}
			if r.Engine != name || !strings.Contains(r.Version, " v") || r.Settings == "" {
				t.Errorf("engine %q, version %q, settings %q", r.Engine, r.Version, r.Settings)
			}
			var labels []string
			for _, p := range r.Phases {
				labels = append(labels, p.Phase)
				if p.WrongReads != 0 {
					t.Errorf("%d wrong reads in %s", p.WrongReads, p.Phase)
				}
			}
			want := "load reads mixed reopen reads-cold scans deletes reads"
			if got := strings.Join(labels, " "); got != want {
				t.Fatalf("phases %s", got)
			}
			load := r.Phases[0]
			if load.Ops != 3000 || load.Commits != 30 || load.LogicalBytesWritten != 3000*116 {
				t.Errorf("load: %+v", load)
			}
			if load.DiskBytes == 0 || load.LiveBytes != 3000*116 || load.OpsPerSec <= 0 {
				t.Errorf("load: %+v", load)
			}
			mixed := r.Phases[2]
			// 200 inserts expected (10%), each a new live record.
			if mixed.Ops != 2000 || mixed.Commits != 20 || mixed.LiveBytes <= load.LiveBytes {
				t.Errorf("mixed: %+v", mixed)
			}
			if mixed.ReadP50Us <= 0 || mixed.ReadP99Us < mixed.ReadP50Us || mixed.CommitP99Us < mixed.CommitP50Us {
				t.Errorf("mixed latencies: %+v", mixed)
			}
			if d := r.Phases[6]; d.Ops != 1000 || d.LiveBytes != mixed.LiveBytes-1000*116 {
				t.Errorf("deletes: %+v", d)
			}
			if r.PeakRssBytes == 0 || r.Secs <= 0 {
				t.Errorf("run: rss %d, secs %v", r.PeakRssBytes, r.Secs)
			}
			// The result prints with the Rust field names, unknown Options as null.
			out, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			for _, field := range []string{`"engine_bytes_written":null`, `"ops_per_sec":`, `"peak_rss_bytes":`, `"kind":"mixed"`} {
				if !strings.Contains(string(out), field) {
					t.Errorf("no %s in %s", field, out)
				}
			}
		})
	}
}

// The same spec makes the same choices on both engines: the same logical bytes and live bytes.
func TestEnginesSeeTheSameWorkload(t *testing.T) {
	var results []*RunResult
	for _, name := range []string{"pebble", "bbolt"} {
		spec := smallSpec()
		spec.Sync = false
		r, err := run(engines[name], spec, filepath.Join(t.TempDir(), "db"), nil)
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, r)
	}
	for i := range results[0].Phases {
		a, b := results[0].Phases[i], results[1].Phases[i]
		if a.LogicalBytesWritten != b.LogicalBytesWritten || a.LiveBytes != b.LiveBytes || a.Commits != b.Commits {
			t.Errorf("phase %s: pebble %+v, bbolt %+v", a.Phase, a, b)
		}
	}
}

// A flush ends each writing phase and is in the phase's figures: Pebble's writes its memtable
// as a table (every record once more), and the durable rate pays for it. bbolt writes at commit.
func TestTheFlushIsTimedAndCounted(t *testing.T) {
	for _, name := range []string{"pebble", "bbolt"} {
		spec := smallSpec()
		spec.Phases = []Phase{{Kind: KindLoad}}
		r, err := run(engines[name], spec, filepath.Join(t.TempDir(), "db"), nil)
		if err != nil {
			t.Fatal(err)
		}
		load := r.Phases[0]
		logical := load.LogicalBytesWritten
		if load.FlushSecs <= 0 || load.OpsPerSec >= load.AckedOpsPerSec {
			t.Errorf("%s: flush %v s, %v ops/s against %v acknowledged", name, load.FlushSecs,
				load.OpsPerSec, load.AckedOpsPerSec)
		}
		if load.FlushBytesWritten > load.ProcessBytesWritten {
			t.Errorf("%s: the flush's bytes are part of the phase's: %+v", name, load)
		}
		if _, err := os.Stat("/proc/self/io"); err == nil && name == "pebble" && load.FlushBytesWritten < logical {
			t.Errorf("pebble: the flush wrote %d bytes for %d in the memtable", load.FlushBytesWritten, logical)
		}
		if r.DiskBytesAtRest == 0 || r.LiveBytesAtRest != logical {
			t.Errorf("%s: at rest %d bytes, %d live", name, r.DiskBytesAtRest, r.LiveBytesAtRest)
		}
		if load.MemoryBytes == 0 || load.MemoryBytes != load.RssAnonBytes+load.CachedBytes {
			t.Errorf("%s: memory %+v", name, load)
		}
	}
}
