// Package etcdproc runs a real etcd (Debian's etcd-server, v3.4) as a child
// process: one member on free ports of 127.0.0.1 with a data dir, optionally
// serving its clients over TLS. It waits for /health with a deadline,
// retries a start whose port is briefly taken, and can kill the member,
// restart it on the same data dir and ports ("existing" cluster state),
// pause and continue it with signals, and stop it (SIGTERM, 10 s, SIGKILL).
//
// The package takes a context and no testing.TB, and does not import
// "testing": the chaos run, linked into the stockade binary, uses it, and so
// does internal/etcdtest, the tests' thin wrapper.
package etcdproc
