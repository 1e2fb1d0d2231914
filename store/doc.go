// Package store owns the gateway's embedded state: one bbolt file under the
// state dir holding, per sandbox, its spec (policy content and version,
// workdir, argv, restart policy, creation time), the intent the user asked
// for, the last observed lifecycle, the supervisor and workload pids and
// the instance id.
//
// Every write is one bbolt read-write transaction, fsync'd before it
// returns, so a verb acknowledged after Put survives a SIGKILL of the
// gateway. Records are JSON with a schema version. The file is flock'd by
// one gateway at a time; a second one gets an error naming the holder's
// pid. Before each write the optional fault.Injector is asked at PointWrite
// (the chaos harness's "store write error").
package store
