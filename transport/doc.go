// Package transport is protoactor remote over mutual TLS 1.3 with
// authorization per message: the one way stockade processes (gateway
// nodes, supervisors, clients) talk to each other.
//
// protoactor remote delivers any message to any actor id, system messages
// included, and some of its gRPC methods panic. This package closes that
// at the transport:
//
//   - a connection is admitted at accept only within its listener's
//     limits (Admission: a handshake deadline, a cap on connections in
//     their handshake per source, the peer socket's owner for a local
//     peer, and in all, a reserve of descriptors; root and the process's
//     own user are held by the reserve's lower half only); the rest are
//     closed at once, counted and logged, and the log of every refusal is
//     bounded;
//   - the TLS handshake admits only certificates of the gateway's CA that
//     are not revoked and whose identity (trust.Identity) this endpoint
//     accepts; a refused handshake is logged and counted;
//   - a connection past its handshake counts against its identity's cap
//     of established connections (root's and the process's own user's
//     sockets excepted); one with no gRPC stream is closed after a while
//     (Limits.IdleTimeout); and a sweep closes the connections (and, with
//     Admission.Track, the relays) whose certificate was revoked since
//     their handshake;
//   - a gRPC stream interceptor reads every MessageBatch before protoactor
//     does: indices in range, the proto serializer only, and each envelope's
//     (peer role, target actor id, message type) allowed by the endpoint's
//     Rules. A refused batch is logged with the peer's identity and the
//     target, counted (stockade_remote_refused_total{reason}), and its
//     stream is closed; nothing of it is delivered;
//   - every accepted envelope is stamped with the peer's identity in the
//     PeerHeader message header (whatever header the peer sent is
//     dropped), so handlers check the caller again (Peer). The one
//     exception is a cluster of gateway nodes (ClusterRules): a node
//     forwards a caller's message to the node that owns the sandbox
//     (Forward) with the PeerHeader it stamped, which the owner's
//     endpoint keeps when the peer is a gateway node, adding ViaHeader
//     (Forwarded); the owner answers the caller directly;
//   - unary and stream recover interceptors: no input from the wire panics
//     the process; the unimplemented methods answer Unimplemented.
//
// A request that crosses processes gets its reply address from NewFuture
// (Request): a random 128-bit id that takes a reply only from the identity
// the request went to; protoactor's own futures, named from a counter,
// take nothing from a peer. A process that talks over the transport makes
// its actor system with NewActorSystem: its generated ids start at a
// random point, so a process restarted on its address never completes a
// new request with a reply queued for its last incarnation.
//
// Rules name the well-known actor ids (APIActor, HelloActor,
// SupervisorSession, the gateway's session actors) and, per role, the
// message types each may receive. No system message (Stop, PoisonPill,
// Watch, Unwatch, Terminated, ...) is admitted from a remote peer: stockade
// never watches or stops a remote actor; liveness is the session's
// heartbeats.
package transport
