// pebble.go: the Pebble adapter (github.com/cockroachdb/pebble/v2). Each Write is one Batch,
// committed with pebble.Sync when the spec asks for synced commits (the WAL is fsync'd before
// Commit returns) and pebble.NoSync otherwise; the block cache is spec.cache_bytes; compression
// is off on every level; a 10 bits/key bloom filter on every level, as RocksDB and fjall have
// here (Pebble's default has none); every other option keeps Pebble's default. Reads are
// DB.Get, scans an Iterator. The flush is DB.Flush (the memtable written as a table, waited
// for); Pebble has no call that waits for compactions, so those that trail it are counted in
// the phases after it.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
)

const pebbleModule = "github.com/cockroachdb/pebble/v2"

// pebbleBloomBitsPerKey is the filter RocksDB gets in this comparison (and fjall's below L0).
const pebbleBloomBitsPerKey = 10

type pebbleEngine struct{}

func (pebbleEngine) Name() string    { return "pebble" }
func (pebbleEngine) Version() string { return engineVersion(pebbleModule) }

func pebbleOptions(cfg Config) *pebble.Options {
	opts := &pebble.Options{CacheSize: int64(min(cfg.CacheBytes, 1<<62)), Logger: quietLogger{}}
	opts.ApplyCompressionSettings(func() pebble.DBCompressionSettings { return pebble.DBCompressionNone })
	// Set on L0; EnsureDefaults gives every lower level the level above's filter.
	opts.Levels[0].FilterPolicy = bloom.FilterPolicy(pebbleBloomBitsPerKey)
	opts.EnsureDefaults()
	return opts
}

func (pebbleEngine) Settings(cfg Config) string {
	o := pebbleOptions(cfg)
	commit := "one Batch per write, committed with pebble.Sync (WAL fsync'd before Commit returns)"
	if !cfg.Sync {
		commit = "one Batch per write, committed with pebble.NoSync (WAL not fsync'd)"
	}
	return fmt.Sprintf("block cache %d MiB (default 8 MiB; memtables are memory beyond it); "+
		"compression off (NoCompression on every level; default Snappy; values are "+
		"incompressible); bloom filter %d bits/key on every level (default none; as RocksDB and "+
		"fjall have here); %s; buffered IO (Pebble's only mode); point reads one by one (no read "+
		"transaction needed); flush: DB.Flush (Pebble has no wait for compactions); "+
		"other options Pebble's defaults (memtable %d MiB, L0 compaction threshold %d, "+
		"L0 stop-writes threshold %d, LBase max %d MiB, format major version %d, WAL bytes-per-sync %d)",
		cfg.CacheBytes>>20, pebbleBloomBitsPerKey, commit, o.MemTableSize>>20, o.L0CompactionThreshold,
		o.L0StopWritesThreshold, o.LBaseMaxBytes>>20, o.FormatMajorVersion, o.WALBytesPerSync)
}

func (pebbleEngine) Open(dir string, cfg Config) (Store, error) {
	db, err := pebble.Open(dir, pebbleOptions(cfg))
	if err != nil {
		return nil, err
	}
	opts := pebble.NoSync
	if cfg.Sync {
		opts = pebble.Sync
	}
	return &pebbleStore{db: db, writeOpts: opts}, nil
}

// quietLogger drops Pebble's informational messages (WAL replay on every open) and keeps its
// errors, on stderr; stdout carries only the result.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any) {}
func (quietLogger) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pebble: "+format+"\n", args...)
}
func (quietLogger) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pebble: "+format+"\n", args...)
	os.Exit(1)
}

type pebbleStore struct {
	db        *pebble.DB
	writeOpts *pebble.WriteOptions
}

func (s *pebbleStore) Write(batch []Write) error {
	b := s.db.NewBatch()
	defer b.Close()
	for _, w := range batch {
		var err error
		if w.Delete {
			err = b.Delete(w.Key, nil)
		} else {
			err = b.Set(w.Key, w.Value, nil)
		}
		if err != nil {
			return err
		}
	}
	return b.Commit(s.writeOpts)
}

func (s *pebbleStore) Get(key, out []byte) ([]byte, bool, error) {
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return out[:0], false, nil
	}
	if err != nil {
		return out[:0], false, err
	}
	out = append(out[:0], v...)
	return out, true, closer.Close()
}

func (s *pebbleStore) Scan(start []byte, limit int) (int, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: start})
	if err != nil {
		return 0, err
	}
	n := 0
	for valid := it.SeekGE(start); valid && n < limit; valid = it.Next() {
		if _, err := it.ValueAndErr(); err != nil {
			it.Close()
			return n, err
		}
		n++
	}
	if err := it.Error(); err != nil {
		it.Close()
		return n, err
	}
	return n, it.Close()
}

func (s *pebbleStore) Flush() error { return s.db.Flush() }

// Pebble's DB.Get needs no read transaction.
func (s *pebbleStore) BeginReads() error { return nil }
func (s *pebbleStore) EndReads() error   { return nil }

// Pebble keeps metrics of its own, but not one count of every byte it writes (WAL, flushes,
// compactions, manifest): the process's counter is the measure for it.
func (s *pebbleStore) EngineBytesWritten() *uint64 { return nil }

func (s *pebbleStore) Close() error { return s.db.Close() }
