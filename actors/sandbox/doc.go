// Package sandbox owns the gateway's sandbox branch of the actor tree:
//
//	sandboxes              one-for-one, restart (10 in 10 s); routes by name, caches status
//	└── sandbox/NAME       restart: state reloaded from the store
//	    ├── session/N      stop on failure; a lost session is a Terminated -> Error/SessionLost
//	    │   └── relay/N    stop on failure (package actors/relay)
//	    └── logs/N         stop on failure; one `sandbox logs` stream
//
// The sandbox actor owns its lifecycle.Machine (actors/sandbox/lifecycle):
// every verb and event is one machine step. A verb is persist-then-apply:
// the step is taken on a copy, written to the store, and only then made
// live and acknowledged; a failed write answers Unavailable and changes
// nothing. The step's Action is carried out through the driver; its Timer
// is armed on the Clock (protoactor's backoff strategy is not used:
// recovery backoff is the machine's).
//
// As root (Env.IDs), each sandbox gets its own host uid/gid range where
// its record is made, kept in the record; a record without one (an
// earlier version's) or with one outside the pool gets one at its next
// start (ids.go).
//
// Seams (seams.go): the Store (records with a revision; every write is
// conditional on the revision read, so a stale actor cannot overwrite a
// newer record), the driver.Driver (supervisor processes and files), the
// Clock. Nothing in Receive blocks without a deadline; stops, waits and
// file removal run off the actor and report back (messages.go). The tests
// run the real actors on the real bbolt store with the fakes of
// package sandboxtest, without root.
package sandbox
