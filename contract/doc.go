// Package contract holds what the processes of stockade (gateway,
// supervisor, client, boundary) and its users agree on, in one light
// package with no dependencies beyond the standard library: the state
// dir's layout, the well-known actor names, the relay preamble, the
// heartbeat period and the CLI's exit codes. A change here is a change of
// a contract: README.md documents each of them for users.
package contract
