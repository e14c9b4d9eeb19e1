// runner.go: the harness, a port of crates/strata-bench/src/runner.rs. It drives one engine
// through a Spec in a directory, phase by phase, picking the same records in the same order as
// the Rust harness, checking every read against the value last committed, and measuring each
// phase from outside the engine (measure.go). The result serialises to the JSON of runner.rs's
// RunResult and PhaseResult.
//
// As in runner.rs, the clock runs only inside the engine's calls (commits, reads, scans, read
// views, the flush): making keys and values and checking what a read returned are outside it,
// so both drivers time the same work. With spec.Flush a writing phase ends with Store.Flush,
// timed apart; with spec.ReadGroup point reads share a read view per group (a mixed round's
// reads per round), ended before any write.
package main

import (
	"bytes"
	"fmt"
	"os"
	"time"
)

// Config is how the harness configures an engine (strata_bench::store::Config).
type Config struct {
	// The cache budget, in bytes (each engine's own notion of a cache).
	CacheBytes uint64
	// Commits are durable before Write returns.
	Sync bool
	// How many records the workload will hold, for engines that size themselves up front.
	ExpectedRecords uint64
}

// Write is one write of a batch: a put, or a delete when Delete is set.
type Write struct {
	Key    []byte
	Value  []byte
	Delete bool
}

// Store is an open database (strata_bench::store::Store).
type Store interface {
	// Write commits the writes as one atomic batch.
	Write(batch []Write) error
	// Get appends the value of key to out[:0]; found is false when the key is absent.
	Get(key, out []byte) (value []byte, found bool, err error)
	// Scan visits up to limit records from the first key >= start, in order; how many there were.
	Scan(start []byte, limit int) (int, error)
	// Flush makes everything committed durable in the engine's own files (not only its log)
	// with the engine's own call, and returns once it is.
	Flush() error
	// BeginReads starts a group of reads (and scans) that may share one read view; EndReads
	// ends it, before any write. Engines whose reads need no transaction do nothing.
	BeginReads() error
	EndReads() error
	// EngineBytesWritten is the engine's own count of bytes written, where it keeps one.
	EngineBytesWritten() *uint64
	// Close closes cleanly (what a reopen or the end of a run does).
	Close() error
}

// Engine is an engine the harness can open (strata_bench::store::Engine).
type Engine interface {
	Name() string
	Version() string
	Settings(cfg Config) string
	Open(dir string, cfg Config) (Store, error)
}

// PhaseResult is the measures of one phase; see runner.rs for each field's meaning.
type PhaseResult struct {
	Phase               string  `json:"phase"`
	Ops                 uint64  `json:"ops"`
	Secs                float64 `json:"secs"`
	FlushSecs           float64 `json:"flush_secs"`
	WallSecs            float64 `json:"wall_secs"`
	OpsPerSec           float64 `json:"ops_per_sec"`
	AckedOpsPerSec      float64 `json:"acked_ops_per_sec"`
	ReadP50Us           float64 `json:"read_p50_us"`
	ReadP99Us           float64 `json:"read_p99_us"`
	Commits             uint64  `json:"commits"`
	CommitP50Us         float64 `json:"commit_p50_us"`
	CommitP99Us         float64 `json:"commit_p99_us"`
	LogicalBytesWritten uint64  `json:"logical_bytes_written"`
	ProcessBytesWritten uint64  `json:"process_bytes_written"`
	StorageBytesWritten uint64  `json:"storage_bytes_written"`
	ProcessBytesRead    uint64  `json:"process_bytes_read"`
	FlushBytesWritten   uint64  `json:"flush_bytes_written"`
	EngineBytesWritten  *uint64 `json:"engine_bytes_written"`
	DeviceBytesWritten  *uint64 `json:"device_bytes_written"`
	DeviceReads         *uint64 `json:"device_reads"`
	DiskBytes           uint64  `json:"disk_bytes"`
	LiveBytes           uint64  `json:"live_bytes"`
	WrongReads          uint64  `json:"wrong_reads"`
	RssAnonBytes        uint64  `json:"rss_anon_bytes"`
	CachedBytes         uint64  `json:"cached_bytes"`
	MemoryBytes         uint64  `json:"memory_bytes"`
}

// RunResult is one engine's run of a spec.
type RunResult struct {
	Engine   string        `json:"engine"`
	Version  string        `json:"version"`
	Settings string        `json:"settings"`
	Spec     Spec          `json:"spec"`
	Phases   []PhaseResult `json:"phases"`
	// Peak and final resident memory of the process (VmHWM, VmRSS).
	PeakRssBytes uint64  `json:"peak_rss_bytes"`
	RssBytes     uint64  `json:"rss_bytes"`
	Secs         float64 `json:"secs"`
	// Bytes the closed database occupies after the last phase, and the live logical bytes.
	DiskBytesAtRest uint64 `json:"disk_bytes_at_rest"`
	LiveBytesAtRest uint64 `json:"live_bytes_at_rest"`
}

// Progress is told the phase's label, operations done and the phase's total.
type Progress func(label string, done, total uint64)

// run runs spec on engine in dir (created if missing; must not hold another database).
func run(engine Engine, spec *Spec, dir string, progress Progress) (*RunResult, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	cfg := Config{CacheBytes: spec.CacheBytes, Sync: spec.Sync, ExpectedRecords: spec.Records}
	fail := func(what string, err error) error {
		return fmt.Errorf("%s: %s: %w", engine.Name(), what, err)
	}
	started := time.Now()
	store, err := engine.Open(dir, cfg)
	if err != nil {
		return nil, fail("open", err)
	}
	records, err := spec.records()
	if err != nil {
		store.Close()
		return nil, err
	}
	h := &harness{spec: spec, records: records, store: store, versions: map[uint64]uint64{}}
	var phases []PhaseResult
	for n, phase := range spec.Phases {
		r, err := h.phase(engine, cfg, dir, phase, uint64(n), progress)
		if err != nil {
			if h.store != nil {
				h.store.Close()
			}
			return nil, fail(phase.label(), err)
		}
		phases = append(phases, r)
	}
	if err := h.store.Close(); err != nil {
		return nil, fail("close", err)
	}
	peak, current := rss()
	return &RunResult{
		DiskBytesAtRest: allocatedBytes(dir),
		LiveBytesAtRest: h.live() * (spec.KeySize + spec.ValueSize),
		Engine:          engine.Name(),
		Version:         engine.Version(),
		Settings:        engine.Settings(cfg),
		Spec:            *spec,
		Phases:          phases,
		PeakRssBytes:    peak,
		RssBytes:        current,
		Secs:            time.Since(started).Seconds(),
	}, nil
}

// harness is the harness's view of the database: which records are live, and each one's
// version.
type harness struct {
	spec    *Spec
	records *Records
	store   Store
	// Records rewritten since the load, with their latest committed version.
	versions map[uint64]uint64
	// Live records are firstLive..next (deletes take the oldest).
	firstLive uint64
	next      uint64
	key       []byte
	value     []byte
	expected  []byte
}

// tally holds the counters of one phase while it runs.
type tally struct {
	ops uint64
	// Time inside the engine's calls.
	busy time.Duration
	// A read view is open (Store.BeginReads).
	inGroup     bool
	reads       Latencies
	commits     Latencies
	commitCount uint64
	logical     uint64
	wrong       uint64
}

func (h *harness) reopen(engine Engine, cfg Config, dir string, cold bool) error {
	err := h.store.Close()
	h.store = nil
	if err != nil {
		return err
	}
	if cold {
		dropPageCache(dir)
	}
	h.store, err = engine.Open(dir, cfg)
	if err == nil && cold {
		// Opening may rewrite files (Pebble replays its log into new tables), which puts them
		// back in the page cache.
		dropPageCache(dir)
	}
	return err
}

func (h *harness) live() uint64 { return h.next - h.firstLive }

func (h *harness) phase(engine Engine, cfg Config, dir string, phase Phase, index uint64, progress Progress) (PhaseResult, error) {
	label := phase.label()
	if phase.Kind == KindReads && phase.Cold {
		if err := h.reopen(engine, cfg, dir, true); err != nil {
			return PhaseResult{}, err
		}
	}
	// Each phase draws from its own stream, whatever ran before it.
	rng := newRng(mix(h.spec.Seed ^ ((index + 1) << 32)))
	device, haveDevice := blockStatOf(dir)
	procBefore := procIoNow()
	engineBefore := h.store.EngineBytesWritten()
	started := time.Now()
	t := &tally{}
	report := func(done, total uint64) {
		if progress != nil {
			progress(label, done, total)
		}
	}
	var err error
	group := h.spec.ReadGroup
	switch phase.Kind {
	case KindLoad:
		err = h.load(t, report)
	case KindReopen:
		start := time.Now()
		err = h.reopen(engine, cfg, dir, false)
		t.busy += time.Since(start)
	case KindReads:
		chooser := newChooser(phase.Dist, h.firstLive, h.live())
		for i := uint64(0); i < phase.Ops && err == nil; i++ {
			if group > 0 && i%group == 0 {
				if err = h.endReads(t); err == nil {
					err = h.beginReads(t)
				}
				if err != nil {
					break
				}
			}
			err = h.read(chooser.pick(rng), t)
			if i%1024 == 0 {
				report(i, phase.Ops)
			}
		}
		if err == nil {
			err = h.endReads(t)
		}
		t.ops = phase.Ops
	case KindScans:
		chooser := newChooser(phase.Dist, h.firstLive, h.live())
		for i := uint64(0); i < phase.Ops && err == nil; i++ {
			err = h.scan(chooser.pick(rng), phase.Len, t)
			if i%256 == 0 {
				report(i, phase.Ops)
			}
		}
		t.ops = phase.Ops
	case KindMixed:
		err = h.mixed(phase.Ops, phase.Mix, phase.Dist, phase.ScanLen, rng, t, report)
	case KindDeletes:
		err = h.deletes(phase.Ops, t, report)
	default:
		err = fmt.Errorf("unknown phase kind %q", phase.Kind)
	}
	if err != nil {
		return PhaseResult{}, err
	}
	var flushSecs float64
	var flushBytes uint64
	writes := phase.Kind == KindLoad || phase.Kind == KindMixed || phase.Kind == KindDeletes
	if h.spec.Flush && writes {
		before := procIoNow()
		start := time.Now()
		if err := h.store.Flush(); err != nil {
			return PhaseResult{}, err
		}
		flushSecs = time.Since(start).Seconds()
		flushBytes = procIoNow().since(before).Wchar
	}
	wallSecs := time.Since(started).Seconds()
	secs := t.busy.Seconds()
	// After a reopen the engine's counter restarts; only a phase on one store compares.
	var engineBytes *uint64
	if engineAfter := h.store.EngineBytesWritten(); phase.Kind != KindReopen && engineBefore != nil && engineAfter != nil {
		d := satSub(*engineAfter, *engineBefore)
		engineBytes = &d
	}
	proc := procIoNow().since(procBefore)
	var devWritten, devReads *uint64
	if haveDevice {
		if after, ok := blockStatOf(dir); ok {
			d := after.since(device)
			devWritten, devReads = &d.BytesWritten, &d.Reads
		}
	}
	perSec := func(s float64) float64 {
		if s > 0 {
			return float64(t.ops) / s
		}
		return 0
	}
	anon := rssAnon()
	cached := cachedBytes(dir)
	return PhaseResult{
		Phase:               label,
		Ops:                 t.ops,
		Secs:                secs,
		FlushSecs:           flushSecs,
		WallSecs:            wallSecs,
		OpsPerSec:           perSec(secs + flushSecs),
		AckedOpsPerSec:      perSec(secs),
		ReadP50Us:           t.reads.quantileUs(0.50),
		ReadP99Us:           t.reads.quantileUs(0.99),
		Commits:             t.commitCount,
		CommitP50Us:         t.commits.quantileUs(0.50),
		CommitP99Us:         t.commits.quantileUs(0.99),
		LogicalBytesWritten: t.logical,
		ProcessBytesWritten: proc.Wchar,
		StorageBytesWritten: proc.WriteBytes,
		ProcessBytesRead:    proc.ReadBytes,
		FlushBytesWritten:   flushBytes,
		EngineBytesWritten:  engineBytes,
		DeviceBytesWritten:  devWritten,
		DeviceReads:         devReads,
		DiskBytes:           allocatedBytes(dir),
		LiveBytes:           h.live() * (h.spec.KeySize + h.spec.ValueSize),
		WrongReads:          t.wrong,
		RssAnonBytes:        anon,
		CachedBytes:         cached,
		MemoryBytes:         anon + cached,
	}, nil
}

// beginReads opens a read view for the reads that follow, if the spec groups reads and none is
// open.
func (h *harness) beginReads(t *tally) error {
	if h.spec.ReadGroup == 0 || t.inGroup {
		return nil
	}
	start := time.Now()
	err := h.store.BeginReads()
	t.busy += time.Since(start)
	t.inGroup = err == nil
	return err
}

// endReads closes the open read view, if any (before a write, and at the end of a group).
func (h *harness) endReads(t *tally) error {
	if !t.inGroup {
		return nil
	}
	start := time.Now()
	err := h.store.EndReads()
	t.busy += time.Since(start)
	t.inGroup = false
	return err
}

func (h *harness) commit(batch []Write, t *tally) error {
	// A read view never spans a write.
	if err := h.endReads(t); err != nil {
		return err
	}
	if len(batch) == 0 {
		return nil
	}
	start := time.Now()
	if err := h.store.Write(batch); err != nil {
		return err
	}
	took := time.Since(start)
	t.busy += took
	t.commits.record(uint64(took.Nanoseconds()))
	t.commitCount++
	for _, w := range batch {
		t.logical += uint64(len(w.Key))
		if !w.Delete {
			t.logical += uint64(len(w.Value))
		}
	}
	return nil
}

// putOf is the put of record's version-th value.
func (h *harness) putOf(record, version uint64) Write {
	return Write{
		Key:   h.records.key(record, nil),
		Value: h.records.valueVersion(record, version, nil),
	}
}

func (h *harness) load(t *tally, report func(uint64, uint64)) error {
	total := h.spec.Records
	batch := make([]Write, 0, min(h.spec.Batch, 1<<20))
	var done uint64
	for done < total {
		n := min(h.spec.Batch, total-done)
		batch = batch[:0]
		for i := uint64(0); i < n; i++ {
			batch = append(batch, h.putOf(h.next+i, 0))
		}
		if err := h.commit(batch, t); err != nil {
			return err
		}
		h.next += n
		done += n
		report(done, total)
	}
	t.ops = total
	return nil
}

func (h *harness) deletes(ops uint64, t *tally, report func(uint64, uint64)) error {
	ops = min(ops, h.live())
	var batch []Write
	var done uint64
	for done < ops {
		n := min(h.spec.Batch, ops-done)
		batch = batch[:0]
		for i := uint64(0); i < n; i++ {
			batch = append(batch, Write{Key: h.records.key(h.firstLive+i, nil), Delete: true})
		}
		if err := h.commit(batch, t); err != nil {
			return err
		}
		for i := uint64(0); i < n; i++ {
			delete(h.versions, h.firstLive+i)
		}
		h.firstLive += n
		done += n
		report(done, ops)
	}
	t.ops = ops
	return nil
}

// read reads record r and checks it against its last committed version (the key and the
// expected value are made, and the check done, outside the clock).
func (h *harness) read(r uint64, t *tally) error {
	h.key = h.records.key(r, h.key)
	h.expected = h.records.valueVersion(r, h.versions[r], h.expected)
	start := time.Now()
	got, found, err := h.store.Get(h.key, h.value)
	if err != nil {
		return err
	}
	took := time.Since(start)
	t.busy += took
	t.reads.record(uint64(took.Nanoseconds()))
	if !found || !bytes.Equal(got, h.expected) {
		t.wrong++
	}
	h.value = got
	return nil
}

func (h *harness) scan(r, n uint64, t *tally) error {
	h.key = h.records.key(r, h.key)
	start := time.Now()
	seen, err := h.store.Scan(h.key, int(min(n, 1<<62)))
	if err != nil {
		return err
	}
	took := time.Since(start)
	t.busy += took
	t.reads.record(uint64(took.Nanoseconds()))
	// The scan starts at a live key, so it sees at least that one.
	if seen == 0 {
		t.wrong++
	}
	return nil
}

func (h *harness) mixed(ops uint64, m Mix, dist Dist, scanLen uint64, rng *Rng, t *tally, report func(uint64, uint64)) error {
	chooser := newChooser(dist, h.firstLive, h.live())
	var batch []Write
	// Versions written this round take effect when the round commits.
	pending := map[uint64]uint64{}
	var done uint64
	for done < ops {
		n := min(h.spec.Batch, ops-done)
		batch = batch[:0]
		clear(pending)
		var inserted uint64
		for j := uint64(0); j < n; j++ {
			roll := uint32(rng.below(100))
			edge := m.Read
			if roll < edge {
				// The round's reads share one view, opened at its first read.
				if err := h.beginReads(t); err != nil {
					return err
				}
				if err := h.read(chooser.pick(rng), t); err != nil {
					return err
				}
				continue
			}
			edge += m.Update
			if roll < edge {
				r := chooser.pick(rng)
				v := h.nextVersion(r, pending)
				pending[r] = v
				batch = append(batch, h.putOf(r, v))
				continue
			}
			edge += m.Insert
			if roll < edge {
				batch = append(batch, h.putOf(h.next+inserted, 0))
				inserted++
				continue
			}
			edge += m.Scan
			if roll < edge {
				if err := h.beginReads(t); err != nil {
					return err
				}
				if err := h.scan(chooser.pick(rng), scanLen, t); err != nil {
					return err
				}
				continue
			}
			r := chooser.pick(rng)
			if err := h.beginReads(t); err != nil {
				return err
			}
			if err := h.read(r, t); err != nil {
				return err
			}
			v := h.nextVersion(r, pending)
			pending[r] = v
			batch = append(batch, h.putOf(r, v))
		}
		if err := h.commit(batch, t); err != nil {
			return err
		}
		for r, v := range pending {
			h.versions[r] = v
		}
		h.next += inserted
		chooser.grow(h.live())
		done += n
		report(done, ops)
	}
	t.ops = ops
	return nil
}

func (h *harness) nextVersion(r uint64, pending map[uint64]uint64) uint64 {
	if v, ok := pending[r]; ok {
		return v + 1
	}
	return h.versions[r] + 1
}

// chooser picks live records by a distribution.
type chooser struct {
	dist  Dist
	first uint64
	live  uint64
	zipf  *Zipf
}

func newChooser(dist Dist, first, live uint64) *chooser {
	c := &chooser{dist: dist, first: first, live: live}
	if dist != Uniform && live > 0 {
		c.zipf = newZipf(live, zipfTheta)
	}
	return c
}

// grow makes newly inserted records choosable; the zipfian table keeps its initial size (as
// YCSB's does between its occasional resizes).
func (c *chooser) grow(live uint64) { c.live = live }

func (c *chooser) pick(rng *Rng) uint64 {
	switch {
	case c.zipf != nil && c.dist == Zipfian:
		return c.first + c.zipf.scattered(rng)
	case c.zipf != nil && c.dist == Latest:
		// The newest record is the most popular.
		return c.first + c.live - 1 - min(c.zipf.rank(rng), c.live-1)
	default:
		return c.first + rng.below(c.live)
	}
}
