// Package trust is stockade's public-key infrastructure: the certificate
// authority a gateway keeps in its state directory, the certificates it issues
// to gateway nodes, sandbox supervisors and clients, and the mutual TLS 1.3
// configuration every endpoint uses to talk to the others.
//
// A certificate speaks for exactly one [Identity], encoded as a single URI
// subject alternative name "stockade://ROLE/NAME". Host names play no part in
// verification: endpoints listen on ephemeral ports, and a peer is who its
// certificate's identity says, provided the certificate chains to the CA, is
// within its validity period, is not revoked and is accepted by the
// [Verifier]'s policy. Both sides of a connection run the same [Verifier] at
// every handshake (session resumption is disabled), and refusals are reported
// as [*PeerError] with a stable reason.
//
// Private key files are guarded as sshd guards its keys: [CheckKeyFile]
// refuses a key that other users can access or that another user owns.
//
// The package uses only the standard library and holds no package-level
// mutable state.
package trust
