// Package sandboxtest holds fakes of the sandbox actor's seams (see
// actors/sandbox/seams.go): a Driver whose supervisors are Go values a
// test ends, holds or fails at will (its Clock seam's fake is
// internal/clock's Fake), and Clients, the client records a test grants
// roles in (with RequestAs, to send as a client would arrive). The actor's
// store in tests is the real bbolt store (store.Open in a temp dir) with a
// fault.Set at its write point.
package sandboxtest
