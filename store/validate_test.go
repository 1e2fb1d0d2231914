package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/stockade-dev/stockade/actors/sandbox/lifecycle"
)

// TestStoredRecordsAreUntrusted plays whoever can write the state file: it
// puts records under keys and with fields no gateway writes, straight into
// bbolt, and wants Get and List to refuse each (ErrInvalid, naming the
// key), return the good records, and leave the bad ones as they were.
func TestStoredRecordsAreUntrusted(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	good := testRecord(1)
	if _, err := s.Put(ctx, good); err != nil {
		t.Fatal(err)
	}
	bad := map[string]func(r *Record){
		// The finding: a name that is a path, in the key and the record.
		"../../victim": func(r *Record) { r.Spec.Name = "../../victim"; r.Lifecycle.Phase = lifecycle.PhaseDeleting },
		"a/b":          func(r *Record) { r.Spec.Name = "a/b" },
		"..":           func(r *Record) { r.Spec.Name = ".." },
		"ctl\x1b":      func(r *Record) { r.Spec.Name = "ctl\x1b" },
		// A good key whose record names another sandbox (or a path).
		"decoy": func(r *Record) { r.Spec.Name = "../decoy" },
		"other": func(r *Record) { r.Spec.Name = "sb-00001" },
		// A uid that is a path: the logs directory is named after it.
		"uid": func(r *Record) { r.Spec.Name = "uid"; r.Spec.UID = "../../../etc" },
		// A pid that kill(2) reads as a process group.
		"pgrp": func(r *Record) { r.Spec.Name = "pgrp"; r.SupervisorPID = -1 },
		// No phase (PhaseNone), no intent, limits create refuses, a host
		// that is a path, a supervisor address that is not one.
		"nophase": func(r *Record) { r.Spec.Name = "nophase"; r.Lifecycle.Phase = lifecycle.PhaseNone },
		"limits":  func(r *Record) { r.Spec.Name = "limits"; r.Spec.Limits.Pids = -5 },
		"host":    func(r *Record) { r.Spec.Name = "host"; r.Host = "../h" },
		"addr":    func(r *Record) { r.Spec.Name = "addr"; r.SupervisorAddr = "evil" },
	}
	raw := map[string][]byte{}
	for key, mutate := range bad {
		r := testRecord(2)
		mutate(&r)
		r.Schema = SchemaVersion
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		raw[key] = b
	}
	if err := s.db.Update(func(tx *bolt.Tx) error {
		for k, v := range raw {
			if err := tx.Bucket(sandboxesBucket()).Put([]byte(k), v); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for key := range bad {
		if _, err := s.Get(ctx, key); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), strconv.Quote(key)) {
			t.Errorf("Get(%q) = %v, want ErrInvalid naming the key", key, err)
		}
	}
	recs, err := s.List(ctx)
	if len(recs) != 1 || recs[0].Name() != good.Spec.Name {
		t.Errorf("List returned %d records (%v), want only %s", len(recs), names(recs), good.Spec.Name)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("List error %v, want ErrInvalid", err)
	}
	for key := range bad {
		if err == nil || !strings.Contains(err.Error(), strconv.Quote(key)) {
			t.Errorf("List's error does not name %q: %v", key, err)
		}
	}
	// Nothing changed: the refused records are still there, byte for byte.
	if err := s.db.View(func(tx *bolt.Tx) error {
		for k, v := range raw {
			if got := tx.Bucket(sandboxesBucket()).Get([]byte(k)); !bytes.Equal(got, v) {
				t.Errorf("record %q changed: %q", k, got)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// And the store never writes one either.
	for key, mutate := range bad {
		r := testRecord(3)
		mutate(&r)
		if _, err := s.Put(ctx, r); err == nil {
			t.Errorf("Put of the record stored under %q succeeded", key)
		}
	}
}

func names(recs []Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Name())
	}
	return out
}
