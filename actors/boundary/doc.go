// Package boundary owns the boundary's branch of the actor tree, as
// DESIGN.md draws it for the supervisor process:
//
//	boundary                 one-for-one, restart (10 in 10 s); keeps the listeners' fds
//	├── proxy                restart; accepts, spawns one conn actor per connection
//	│   └── conn/N           stop on failure: client gets 403 or close, audited
//	└── dns                  restart; reads UDP and TCP, spawns one query actor per query
//	    └── query/N          stop on failure: client gets SERVFAIL, audited
//
// A connection actor sequences read request -> identity -> decision ->
// dial -> tunnel; blocking I/O runs in goroutines that report back as
// messages, so the actor's own steps (identity, decision) are where a panic
// lands, and that panic ends only that actor. The Stopping handler of a
// conn or query actor answers a client that got no answer yet: a failure in
// the identity step is a denial with identity_unavailable, any other
// failure boundary_fault.
package boundary
