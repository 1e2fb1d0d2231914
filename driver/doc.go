// Package driver is the seam between a sandbox actor and the node it runs
// on: how a gateway starts, adopts (after its own restart), watches and
// stops the supervisor process of a sandbox, and removes a sandbox's files.
// The sandbox actor knows only the Driver interface; driver/process is the
// embedded default (a local process per sandbox), and the actor's tests use
// a fake (actors/sandbox/sandboxtest). A cluster node uses the same
// interface for the sandboxes it owns.
package driver
