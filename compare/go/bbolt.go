// bbolt.go: the bbolt adapter (go.etcd.io/bbolt). One file (DIR/bbolt.db) with one bucket; each
// Write is one db.Update transaction, fdatasync'd on commit by default (NoSync when the spec
// does not ask for synced commits). A group of reads (BeginReads) shares one read-only
// transaction (db.Begin(false)), as an application reading many keys would; outside a group
// each read and scan runs in its own db.View. bbolt has no cache setting: the file is mmap'd and
// cached by the OS page cache, so spec.cache_bytes does not apply (the memory column counts
// those pages). It writes its pages at commit, so there is nothing to flush. Every other option
// keeps bbolt's default.
package main

import (
	"fmt"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

const bboltModule = "go.etcd.io/bbolt"

var bboltBucket = []byte("strata")

type bboltEngine struct{}

func (bboltEngine) Name() string    { return "bbolt" }
func (bboltEngine) Version() string { return engineVersion(bboltModule) }

func bboltOptions(cfg Config) *bolt.Options {
	o := *bolt.DefaultOptions
	o.Timeout = 10 * time.Second
	o.NoSync = !cfg.Sync
	return &o
}

func (bboltEngine) Settings(cfg Config) string {
	o := bboltOptions(cfg)
	commit := "one db.Update transaction per write, fdatasync'd on commit (NoSync=false)"
	if !cfg.Sync {
		commit = "one db.Update transaction per write, not synced (NoSync=true)"
	}
	pageSize := o.PageSize
	pageNote := fmt.Sprintf("%d", pageSize)
	if pageSize == 0 {
		pageNote = "the OS page size"
	}
	return fmt.Sprintf("one bucket in one file; %s; point reads in groups under one read-only "+
		"transaction, other reads and scans in db.View; no cache setting (the file is mmap'd and "+
		"cached by the OS page cache, so the %d MiB cache budget does not apply; the memory column "+
		"counts those pages); flush: nothing (pages are written at commit); open timeout 10 s "+
		"(default none: waits forever for the file lock); other options bbolt's defaults (page "+
		"size %s, freelist type %q, NoFreelistSync=%v, NoGrowSync=%v, no read-ahead setting)",
		commit, cfg.CacheBytes>>20, pageNote, o.FreelistType, o.NoFreelistSync, o.NoGrowSync)
}

func (bboltEngine) Open(dir string, cfg Config) (Store, error) {
	db, err := bolt.Open(filepath.Join(dir, "bbolt.db"), 0o644, bboltOptions(cfg))
	if err != nil {
		return nil, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bboltBucket)
		return err
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return &bboltStore{db: db}, nil
}

type bboltStore struct {
	db *bolt.DB
	// The read-only transaction of the current group of reads, or nil.
	group *bolt.Tx
}

// view runs f in the group's transaction, or in a db.View of its own outside a group.
func (s *bboltStore) view(f func(tx *bolt.Tx) error) error {
	if s.group != nil {
		return f(s.group)
	}
	return s.db.View(f)
}

func (s *bboltStore) Write(batch []Write) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bboltBucket)
		for _, w := range batch {
			var err error
			if w.Delete {
				err = b.Delete(w.Key)
			} else {
				err = b.Put(w.Key, w.Value)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *bboltStore) Get(key, out []byte) ([]byte, bool, error) {
	found := false
	out = out[:0]
	err := s.view(func(tx *bolt.Tx) error {
		// The value lives in the mmap only for the transaction: copy it out.
		if v := tx.Bucket(bboltBucket).Get(key); v != nil {
			out = append(out, v...)
			found = true
		}
		return nil
	})
	return out, found, err
}

func (s *bboltStore) Scan(start []byte, limit int) (int, error) {
	n := 0
	err := s.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bboltBucket).Cursor()
		for k, _ := c.Seek(start); k != nil && n < limit; k, _ = c.Next() {
			n++
		}
		return nil
	})
	return n, err
}

func (s *bboltStore) Flush() error { return nil }

func (s *bboltStore) BeginReads() error {
	tx, err := s.db.Begin(false)
	if err != nil {
		return err
	}
	s.group = tx
	return nil
}

func (s *bboltStore) EndReads() error {
	if s.group == nil {
		return nil
	}
	// A read-only transaction ends with Rollback.
	err := s.group.Rollback()
	s.group = nil
	return err
}

// bbolt keeps no count of the bytes it writes: the process's counter is the measure for it.
func (s *bboltStore) EngineBytesWritten() *uint64 { return nil }

func (s *bboltStore) Close() error {
	if err := s.EndReads(); err != nil {
		s.db.Close()
		return err
	}
	return s.db.Close()
}
