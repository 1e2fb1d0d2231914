package etcdstore

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/stockade-dev/stockade/store"
)

// DefaultPrefix is the key prefix of the records when Config.Prefix is
// empty.
const DefaultPrefix = "/stockade/sandboxes/"

// DefaultDialTimeout is used when Config.DialTimeout is 0.
const DefaultDialTimeout = 5 * time.Second

// Config says where the records live.
type Config struct {
	// Endpoints are the etcd client URLs (http://host:port, or https://
	// with TLS).
	Endpoints []string
	// Prefix is prepended to each sandbox name to make its key; a "/" is
	// added if it does not end with one (DefaultPrefix when empty).
	Prefix string
	// TLS is the client's TLS configuration (nil: plain connections).
	TLS *tls.Config
	// DialTimeout bounds connecting (DefaultDialTimeout when 0).
	DialTimeout time.Duration
}

// Store is the sandbox records in etcd. Safe for concurrent use.
type Store struct {
	cli       *clientv3.Client
	prefix    string
	endpoints string
}

// Open connects to etcd and checks, within ctx, that it answers a read of
// the prefix.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	endpoints := strings.Join(cfg.Endpoints, ",")
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("etcdstore: open: no etcd endpoints")
	}
	prefix := cfg.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	dial := cfg.DialTimeout
	if dial <= 0 {
		dial = DefaultDialTimeout
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		TLS:         cfg.TLS,
		DialTimeout: dial,
		Logger:      zap.NewNop(), // errors are returned, not logged by the client
	})
	if err != nil {
		return nil, fmt.Errorf("etcdstore %s: open: %w", endpoints, err)
	}
	s := &Store{cli: cli, prefix: prefix, endpoints: endpoints}
	if _, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("etcdstore %s: open: read %s: %w", endpoints, prefix, err)
	}
	return s, nil
}

// Prefix returns the records' key prefix (ending with "/").
func (s *Store) Prefix() string { return s.prefix }

// Close closes the client's connections.
func (s *Store) Close() error {
	if err := s.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("etcdstore %s: close: %w", s.endpoints, err)
	}
	return nil
}

func (s *Store) key(name string) string { return s.prefix + name }

// Key returns the key of sandbox name's record.
func (s *Store) Key(name string) string { return s.key(name) }

// Client returns the store's etcd client (a cluster node shares it for its
// own keys and transactions).
func (s *Store) Client() *clientv3.Client { return s.cli }

// Encode returns a record's stored form: its schema set, its revision left
// out (the revision is the key's ModRevision, not part of the value).
func Encode(rec store.Record) ([]byte, error) {
	rec.Schema = store.SchemaVersion
	rec.Revision = 0
	data, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("encode sandbox %q: %w", rec.Spec.Name, err)
	}
	return data, nil
}

// DecodeKV decodes a record read from etcd under the key of sandbox name,
// its revision from the key's ModRevision. It is validated as
// store.Decode validates (store.ErrInvalid): anyone who can write etcd's
// keys wrote it.
func DecodeKV(name string, value []byte, modRevision int64) (store.Record, error) {
	var rec store.Record
	if err := store.Decode(name, value, &rec); err != nil {
		return store.Record{}, err
	}
	rec.Revision = uint64(modRevision)
	return rec, nil
}

// Put writes rec if the stored record's revision (its key's ModRevision) is
// rec.Revision (0: no record of that name yet), and returns the new
// revision. A different stored revision fails with an error wrapping
// store.ErrConflict and writes nothing.
func (s *Store) Put(ctx context.Context, rec store.Record) (uint64, error) {
	name := rec.Spec.Name
	if err := rec.Validate(""); err != nil {
		return 0, s.errorf("put", name, err)
	}
	want := rec.Revision
	if want > math.MaxInt64 {
		return 0, s.errorf("put", name, fmt.Errorf("%w (read revision %d is not an etcd revision)", store.ErrConflict, want))
	}
	data, err := Encode(rec)
	if err != nil {
		return 0, fmt.Errorf("etcdstore %s: %w", s.endpoints, err)
	}
	key := s.key(name)
	cond := clientv3.Compare(clientv3.ModRevision(key), "=", int64(want))
	if want == 0 {
		cond = clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	}
	resp, err := s.cli.Txn(ctx).If(cond).
		Then(clientv3.OpPut(key, string(data))).
		Else(clientv3.OpGet(key, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return 0, s.errorf("put", name, err)
	}
	if !resp.Succeeded {
		return 0, s.errorf("put", name, conflict(storedRevision(resp), want))
	}
	return uint64(resp.Header.Revision), nil
}

// Delete removes a sandbox's record if its revision is rev; deleting a
// missing one is not an error.
func (s *Store) Delete(ctx context.Context, name string, rev uint64) error {
	if rev > math.MaxInt64 {
		return s.errorf("delete", name, fmt.Errorf("%w (read revision %d is not an etcd revision)", store.ErrConflict, rev))
	}
	key := s.key(name)
	resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", int64(rev))).
		Then(clientv3.OpDelete(key)).
		Else(clientv3.OpGet(key, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return s.errorf("delete", name, err)
	}
	if resp.Succeeded {
		return nil
	}
	cur := storedRevision(resp)
	if cur == 0 {
		return nil // gone already
	}
	return s.errorf("delete", name, conflict(cur, rev))
}

// storedRevision reads the key's ModRevision from a failed transaction's
// Else get: 0 if the key does not exist.
func storedRevision(resp *clientv3.TxnResponse) int64 {
	if len(resp.Responses) == 1 {
		if r := resp.Responses[0].GetResponseRange(); r != nil && len(r.Kvs) > 0 {
			return r.Kvs[0].ModRevision
		}
	}
	return 0
}

func conflict(cur int64, want uint64) error {
	if cur == 0 {
		return fmt.Errorf("%w (no stored record, read revision %d)", store.ErrConflict, want)
	}
	return fmt.Errorf("%w (stored revision %d, read %d)", store.ErrConflict, cur, want)
}

// Get returns one sandbox's record, or an error wrapping store.ErrNotFound.
func (s *Store) Get(ctx context.Context, name string) (store.Record, error) {
	resp, err := s.cli.Get(ctx, s.key(name))
	if err != nil {
		return store.Record{}, s.errorf("get", name, err)
	}
	if len(resp.Kvs) == 0 {
		return store.Record{}, s.errorf("get", name, store.ErrNotFound)
	}
	rec, err := DecodeKV(name, resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
	if err != nil {
		return store.Record{}, s.errorf("get", name, err)
	}
	return rec, nil
}

// List returns every record in byte order of their names, read at one etcd
// revision. A record that cannot be decoded is left out and named in the
// error, which joins one error per such record; the others are still
// returned.
func (s *Store) List(ctx context.Context) ([]store.Record, error) {
	resp, err := s.cli.Get(ctx, s.prefix, clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("etcdstore %s: list %s: %w", s.endpoints, s.prefix, err)
	}
	var recs []store.Record
	var errs []error
	for _, kv := range resp.Kvs {
		name := strings.TrimPrefix(string(kv.Key), s.prefix)
		rec, err := DecodeKV(name, kv.Value, kv.ModRevision)
		if err != nil {
			errs = append(errs, s.errorf("list", name, err))
			continue
		}
		recs = append(recs, rec)
	}
	return recs, store.PartialList(errs)
}

func (s *Store) errorf(op, name string, err error) error {
	return fmt.Errorf("etcdstore %s: %s sandbox %q: %w", s.endpoints, op, name, err)
}
