// Package actors is the root of stockade's actor tree. Each subpackage is
// one branch, with its actors, their messages and their seams together:
//
//	gateway process
//	  actors/gateway    gateway (root) -> api, hello, relay-listener, sandboxes
//	  actors/sandbox    sandboxes -> sandbox/NAME -> session/N (-> relay/N)
//	                    seams: Store, driver.Driver, Clock (seams.go); fakes in sandboxtest, clock.Fake
//	  actors/relay      relay-listener and the relay/N actor splicing a pair
//	supervisor process (package supervisor)
//	  actors/boundary   boundary -> proxy -> conn/N, dns -> query/N
//	shared
//	  actors/supervise  strategies that log and count every directive
//	  actors/dispatch   the worker pool mailboxes run on
//
// DESIGN.md's "Actor tree and directives" is the contract; ARCHITECTURE.md
// says where this tree differs and why. Messages that cross a process are
// protobuf, in messages/; process-local ones live in each package's
// messages.go.
package actors
