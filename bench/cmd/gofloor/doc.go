// Command gofloor is the floor `make bench` measures the boundary against:
// an HTTP CONNECT proxy in Go with nothing of the boundary's path (no
// identity, policy, actors or audit), one goroutine per connection and
// net's splice relays, as a Go program can least do it. The boundary's
// CPU per tunnel over gofloor's is what its own path costs; gofloor's
// over tinyproxy's is what Go's runtime and net package cost against a C
// proxy on the same machine.
//
//	gofloor -listen 127.0.0.1:PORT
//
// It refuses what is not a CONNECT (400) and answers 502 when the dial
// fails. It is a bench peer, not a proxy to deploy: it lets any client
// reach any address.
package main
