// workload.go: the workload spec, a port of crates/strata-bench/src/workload.rs. The JSON form
// is serde's: a Spec object with its phases as objects internally tagged by "kind" (snake_case
// names), so a spec written by the Rust harness reads here unchanged and is printed back with
// the results in the same form.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Dist is how a phase picks loaded records: "uniform", "zipfian" or "latest".
type Dist string

const (
	Uniform Dist = "uniform"
	Zipfian Dist = "zipfian"
	Latest  Dist = "latest"
)

func (d *Dist) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	switch Dist(s) {
	case Uniform, Zipfian, Latest:
		*d = Dist(s)
		return nil
	}
	return fmt.Errorf("unknown variant `%s`, expected one of `uniform`, `zipfian`, `latest`", s)
}

func (o *Order) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	switch Order(s) {
	case Sequential, Random:
		*o = Order(s)
		return nil
	}
	return fmt.Errorf("unknown variant `%s`, expected `sequential` or `random`", s)
}

// Mix holds the percentages of each operation in a mixed round; they sum to 100.
type Mix struct {
	Read            uint32 `json:"read"`
	Update          uint32 `json:"update"`
	Insert          uint32 `json:"insert"`
	Scan            uint32 `json:"scan"`
	ReadModifyWrite uint32 `json:"read_modify_write"`
}

func (m Mix) total() uint64 {
	return uint64(m.Read) + uint64(m.Update) + uint64(m.Insert) + uint64(m.Scan) + uint64(m.ReadModifyWrite)
}

// The phase kinds.
const (
	KindLoad    = "load"
	KindReopen  = "reopen"
	KindReads   = "reads"
	KindMixed   = "mixed"
	KindScans   = "scans"
	KindDeletes = "deletes"
)

// Phase is one step of a spec; which fields mean something depends on Kind:
// reads {ops, dist, cold}, mixed {ops, mix, dist, scan_len}, scans {ops, len, dist},
// deletes {ops}; load and reopen have none.
type Phase struct {
	Kind    string
	Ops     uint64
	Dist    Dist
	Cold    bool
	Mix     Mix
	ScanLen uint64
	Len     uint64
}

const defaultScanLen = 100

// label is the phase's name in tables: "load", "reads", "reads-cold", "mixed", ...
func (p Phase) label() string {
	if p.Kind == KindReads && p.Cold {
		return "reads-cold"
	}
	return p.Kind
}

type phaseJSON struct {
	Kind    *string `json:"kind"`
	Ops     *uint64 `json:"ops"`
	Dist    *Dist   `json:"dist"`
	Cold    *bool   `json:"cold"`
	Mix     *Mix    `json:"mix"`
	ScanLen *uint64 `json:"scan_len"`
	Len     *uint64 `json:"len"`
}

func (p *Phase) UnmarshalJSON(b []byte) error {
	var j phaseJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	if j.Kind == nil {
		return fmt.Errorf("missing field `kind` in a phase")
	}
	*p = Phase{Kind: *j.Kind}
	missing := func(name string) error {
		return fmt.Errorf("missing field `%s` in a %s phase", name, *j.Kind)
	}
	needOps := func() error {
		if j.Ops == nil {
			return missing("ops")
		}
		p.Ops = *j.Ops
		return nil
	}
	needDist := func() error {
		if j.Dist == nil {
			return missing("dist")
		}
		p.Dist = *j.Dist
		return nil
	}
	switch p.Kind {
	case KindLoad, KindReopen:
		return nil
	case KindReads:
		if j.Cold != nil {
			p.Cold = *j.Cold
		}
		if err := needOps(); err != nil {
			return err
		}
		return needDist()
	case KindMixed:
		p.ScanLen = defaultScanLen
		if j.ScanLen != nil {
			p.ScanLen = *j.ScanLen
		}
		if j.Mix == nil {
			return missing("mix")
		}
		p.Mix = *j.Mix
		if err := needOps(); err != nil {
			return err
		}
		return needDist()
	case KindScans:
		if j.Len == nil {
			return missing("len")
		}
		p.Len = *j.Len
		if err := needOps(); err != nil {
			return err
		}
		return needDist()
	case KindDeletes:
		return needOps()
	}
	return fmt.Errorf("unknown phase kind `%s`, expected one of `load`, `reopen`, `reads`, `mixed`, `scans`, `deletes`", p.Kind)
}

func (p Phase) MarshalJSON() ([]byte, error) {
	switch p.Kind {
	case KindLoad, KindReopen:
		return json.Marshal(struct {
			Kind string `json:"kind"`
		}{p.Kind})
	case KindReads:
		return json.Marshal(struct {
			Kind string `json:"kind"`
			Ops  uint64 `json:"ops"`
			Dist Dist   `json:"dist"`
			Cold bool   `json:"cold"`
		}{p.Kind, p.Ops, p.Dist, p.Cold})
	case KindMixed:
		return json.Marshal(struct {
			Kind    string `json:"kind"`
			Ops     uint64 `json:"ops"`
			Mix     Mix    `json:"mix"`
			Dist    Dist   `json:"dist"`
			ScanLen uint64 `json:"scan_len"`
		}{p.Kind, p.Ops, p.Mix, p.Dist, p.ScanLen})
	case KindScans:
		return json.Marshal(struct {
			Kind string `json:"kind"`
			Ops  uint64 `json:"ops"`
			Len  uint64 `json:"len"`
			Dist Dist   `json:"dist"`
		}{p.Kind, p.Ops, p.Len, p.Dist})
	case KindDeletes:
		return json.Marshal(struct {
			Kind string `json:"kind"`
			Ops  uint64 `json:"ops"`
		}{p.Kind, p.Ops})
	}
	return nil, fmt.Errorf("unknown phase kind %q", p.Kind)
}

// Spec is what every engine in a comparison is asked to do.
type Spec struct {
	Name      string `json:"name"`
	Records   uint64 `json:"records"`
	KeySize   uint64 `json:"key_size"`
	ValueSize uint64 `json:"value_size"`
	Order     Order  `json:"order"`
	// Operations per write batch (load, deletes) and per mixed round.
	Batch uint64 `json:"batch"`
	// Every batch commit is durable (synced) before the next starts.
	Sync bool `json:"sync"`
	// The cache budget each engine is configured with, in bytes.
	CacheBytes uint64  `json:"cache_bytes"`
	Seed       uint64  `json:"seed"`
	Phases     []Phase `json:"phases"`
	// Each writing phase ends with the engine's durable flush, timed and counted with it.
	Flush bool `json:"flush"`
	// Point reads per read view (a read transaction) on engines whose reads need one; a mixed
	// round's reads share one view, ended before the round commits. 0: one per read.
	ReadGroup uint64 `json:"read_group"`
}

type specJSON struct {
	Name       *string  `json:"name"`
	Records    *uint64  `json:"records"`
	KeySize    *uint64  `json:"key_size"`
	ValueSize  *uint64  `json:"value_size"`
	Order      *Order   `json:"order"`
	Batch      *uint64  `json:"batch"`
	Sync       *bool    `json:"sync"`
	CacheBytes *uint64  `json:"cache_bytes"`
	Seed       *uint64  `json:"seed"`
	Phases     *[]Phase `json:"phases"`
	Flush      *bool    `json:"flush"`
	ReadGroup  *uint64  `json:"read_group"`
}

// parseSpec reads a spec as serde would: every field is required but flush and read_group,
// which default to false and 0 (#[serde(default)]).
func parseSpec(b []byte) (*Spec, error) {
	var j specJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&j); err != nil {
		return nil, fmt.Errorf("the spec does not parse: %w", err)
	}
	var missing []string
	check := func(present bool, name string) {
		if !present {
			missing = append(missing, name)
		}
	}
	check(j.Name != nil, "name")
	check(j.Records != nil, "records")
	check(j.KeySize != nil, "key_size")
	check(j.ValueSize != nil, "value_size")
	check(j.Order != nil, "order")
	check(j.Batch != nil, "batch")
	check(j.Sync != nil, "sync")
	check(j.CacheBytes != nil, "cache_bytes")
	check(j.Seed != nil, "seed")
	check(j.Phases != nil, "phases")
	if len(missing) > 0 {
		return nil, fmt.Errorf("the spec does not parse: missing field `%s`", missing[0])
	}
	spec := &Spec{
		Name: *j.Name, Records: *j.Records, KeySize: *j.KeySize, ValueSize: *j.ValueSize,
		Order: *j.Order, Batch: *j.Batch, Sync: *j.Sync, CacheBytes: *j.CacheBytes,
		Seed: *j.Seed, Phases: *j.Phases,
	}
	if j.Flush != nil {
		spec.Flush = *j.Flush
	}
	if j.ReadGroup != nil {
		spec.ReadGroup = *j.ReadGroup
	}
	return spec, nil
}

// records is the spec's record generator, sized for inserts beyond the load.
func (s *Spec) records() (*Records, error) {
	if s.KeySize > maxKeyLen {
		return nil, fmt.Errorf("a key size of %d bytes exceeds the maximum of %d", s.KeySize, maxKeyLen)
	}
	if s.ValueSize > maxValueLen {
		return nil, fmt.Errorf("a value size of %d bytes exceeds the maximum of %d", s.ValueSize, maxValueLen)
	}
	count := s.Records * 2
	if s.Records > (^uint64(0))/2 {
		count = ^uint64(0)
	}
	return newRecords(s.Order, int(s.KeySize), int(s.ValueSize), s.Seed, count)
}

// validate refuses specs that cannot run: empty batches, no records for phases that read,
// mixes that do not sum to 100, key sizes that cannot hold distinct keys.
func (s *Spec) validate() error {
	if s.Batch == 0 {
		return fmt.Errorf("the batch size must be at least 1")
	}
	if _, err := s.records(); err != nil {
		return err
	}
	needsRecords := false
	for _, p := range s.Phases {
		switch p.Kind {
		case KindReads, KindMixed, KindScans:
			needsRecords = true
		}
	}
	if needsRecords && s.Records == 0 {
		return fmt.Errorf("reads, scans and mixed phases need at least one record")
	}
	for _, p := range s.Phases {
		switch {
		case p.Kind == KindMixed && p.Mix.total() != 100:
			return fmt.Errorf("the mixed phase's percentages sum to %d, not 100", p.Mix.total())
		case p.Kind == KindDeletes && p.Ops > s.Records:
			return fmt.Errorf("cannot delete %d of %d records", p.Ops, s.Records)
		}
	}
	return nil
}
