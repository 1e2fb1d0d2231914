// Package transporttest is an attacker's toolkit against a stockade remote
// endpoint (package transport): it speaks protoactor's wire protocol
// (remote.Remoting over gRPC) directly, so a test can send what protoactor
// itself never would — plaintext, no or a foreign certificate, the unary
// methods protoactor leaves unimplemented, out-of-range indices, system
// messages, oversized batches, forged headers and reply addresses — and
// check that the endpoint refuses it and keeps serving.
//
// It is used by the in-process tests of package transport and by the
// end-to-end tests against real gateway and supervisor processes; its API
// is kept stable for both.
//
// The TLS configurations it builds are an attacker's: they never verify
// the server (InsecureSkipVerify), on purpose. Do not use them for
// anything but tests.
package transporttest
