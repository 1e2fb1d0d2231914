// Package boundary is the root of the egress boundary's mechanics, the parts
// that do not depend on actors:
//
//	boundary/proxy     HTTP CONNECT and absolute-URI parsing, responses,
//	                   destination checks, byte tunnels (splice)
//	boundary/dnsproxy  DNS answers: eligibility, upstreams, static hosts
//	boundary/identity  peer process identity by exact sock_diag requests
//
// The actors that run these per connection and per query live in
// actors/boundary.
package boundary
