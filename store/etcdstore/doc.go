// Package etcdstore keeps the gateway's sandbox records in etcd, behind the
// same Store seam as the embedded bbolt store (package store): Get, List,
// Put and Delete with the same semantics and errors (store.ErrNotFound,
// store.ErrConflict).
//
// One key per sandbox, Config.Prefix + name, whose value is the record's
// JSON with its schema version, as the bbolt store writes it, but without
// the revision: a record's Revision is etcd's ModRevision of its key, set
// on every read. Put and Delete are single etcd transactions conditioned
// on that revision (ModRevision(key) == rec.Revision, or CreateRevision(key)
// == 0 for a record not written yet), so a writer holding a stale read can
// never overwrite or delete a newer record: the fencing a cluster of
// gateways needs. List is one prefix range read (one consistent snapshot).
//
// Every call is bounded by its context: against an unreachable etcd a call
// returns when the context's deadline passes (the client waits for a
// connection until then), with an error naming the endpoints and the
// sandbox.
package etcdstore
