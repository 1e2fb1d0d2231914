// Package e2e owns the end-to-end tests of stockade: a real gateway
// process, real supervisor processes in namespaces, real workloads (sh,
// curl, getent) and the real CLI, all on this machine's loopback. It has no
// code of its own beyond test helpers.
package e2e
