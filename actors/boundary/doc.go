// Package boundary owns the boundary's branch of the actor tree, as
// DESIGN.md draws it for the supervisor process:
//
//	boundary                 one-for-one, restart (10 in 10 s); keeps the listeners' fds
//	├── proxy                restart; accepts, spawns one conn actor per connection
//	│   └── conn/N           stop on failure: client gets 403 or close, audited
//	└── dns                  restart; reads UDP (batches) and TCP, spawns query actors
//	    └── query/N          one UDP read or one TCP query; a panic in a query:
//	                         that query gets SERVFAIL, audited; the rest answered
//
// A connection actor sequences read request -> identity -> decision ->
// dial -> tunnel in its own Receive (reads and dial are bounded), then
// relays the client's bytes on its worker and the upstream's on one
// goroutine, so a panic in any step ends only that actor. The Stopping
// handler of a conn actor answers a client that got no answer yet: a
// failure in the identity step is a denial with identity_unavailable, any
// other failure boundary_fault. A batch actor answers each query under its
// own recover (see dns_batch.go).
package boundary
