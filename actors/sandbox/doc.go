// Package sandbox owns the gateway's sandbox branch of the actor tree:
//
//	sandboxes              one-for-one, restart (10 in 10 s); routes by name, caches status
//	└── sandbox/NAME       restart: state reloaded from the store
//	    └── session        stop on failure; a lost session is a Terminated -> Error/SessionLost
//
// The sandbox actor owns its lifecycle.Machine (actors/sandbox/lifecycle):
// every verb and event is one machine step; the step's snapshot is written
// to the store (fsync'd) before the verb is acknowledged; the step's
// Action is carried out through the process driver; its Timer is armed on
// the actor's own scheduler (protoactor's backoff strategy is not used:
// recovery backoff is the machine's).
package sandbox
