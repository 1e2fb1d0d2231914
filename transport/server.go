package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime/debug"
	"strings"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/trust"
)

// PeerHeader is the message header that carries the authenticated peer's
// identity ("role:name") to handlers. The transport sets it on every
// envelope it admits and drops whatever headers the peer sent.
const PeerHeader = "stockade-peer"

// PeerAddrHeader carries the peer's network address (host:port of its
// connection) beside PeerHeader.
const PeerAddrHeader = "stockade-peer-addr"

// ViaHeader carries the identity of the gateway node that forwarded a
// message (Forward) to this one; PeerHeader and PeerAddrHeader then name
// the original caller. Only the transport sets it, on an envelope a peer
// of trust.RoleGateway forwarded; from any other peer it is dropped.
const ViaHeader = "stockade-via"

// Peer returns the authenticated identity of a remote message's sender;
// ok is false for a message sent inside this process (no header).
func Peer(ctx actor.Context) (trust.Identity, bool) {
	h := ctx.MessageHeader()
	if h == nil {
		return trust.Identity{}, false
	}
	v := h.Get(PeerHeader)
	if v == "" {
		return trust.Identity{}, false
	}
	id, err := trust.ParseIdentity(v)
	return id, err == nil
}

// authInfo is the handshake's result: grpc's TLS info plus the identity.
type authInfo struct {
	credentials.TLSInfo
	id trust.Identity
}

// serverCreds wraps grpc's TLS credentials: a failed handshake (plain
// text, no certificate, another CA, revoked, a role this endpoint does not
// accept) is logged and counted; a good one carries the peer's identity,
// and its connection is established within its identity's cap
// (Admission.establish), closed by the sweep once v says its certificate
// is revoked.
type serverCreds struct {
	credentials.TransportCredentials
	g *guard
	v *trust.Verifier // the verifier of the TLS configuration
}

func (c *serverCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	privileged, done, ok := c.g.adm.admit(raw)
	if !ok {
		return nil, nil, errRefusedAtAccept
	}
	defer done()
	conn, ai, err := c.TransportCredentials.ServerHandshake(raw)
	if errors.Is(err, io.EOF) {
		// Closed before a word (a reachability check): nothing to refuse.
		c.g.log.Debug().Str("peer_addr", raw.RemoteAddr().String()).Msg("connection closed before the TLS handshake")
		return nil, nil, err
	}
	if err != nil {
		c.g.adm.HandshakeFailed(raw, err)
		return nil, nil, err
	}
	info, ok := ai.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		_ = conn.Close()
		return nil, nil, errors.New("transport: handshake without a peer certificate")
	}
	leaf := info.State.PeerCertificates[0]
	id, err := trust.IdentityOf(leaf)
	if err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("transport: %w", err)
	}
	live, err := c.g.adm.establish(conn, id, leaf, c.v, !privileged)
	if err != nil {
		return nil, nil, err
	}
	return live, authInfo{TLSInfo: info, id: id}, nil
}

// errRefusedAtAccept: the Admission closed the connection (counted and
// logged there).
var errRefusedAtAccept = errors.New("transport: connection refused at accept")

func (c *serverCreds) Clone() credentials.TransportCredentials {
	return &serverCreds{TransportCredentials: c.TransportCredentials.Clone(), g: c.g, v: c.v}
}

// guard authorizes what arrives at one endpoint.
type guard struct {
	rules   Rules
	log     zerolog.Logger
	adm     *Admission // counts and logs refusals
	refused *Refusals  // adm's
	// sys is the endpoint's actor system: its address (set by
	// remote.Start before the first stream is served) and its reply
	// addresses (NewFuture).
	sys *actor.ActorSystem
}

// refuse counts a refusal and logs it within the log's bound.
func (g *guard) refuse(reason, peerID, addr, target, typeName string, err error) {
	g.adm.refuse(reason, "", peerID, addr, target, typeName, err)
}

// peerOf returns the identity and address of a stream's peer.
func peerOf(ctx context.Context) (trust.Identity, string, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return trust.Identity{}, "", false
	}
	ai, ok := p.AuthInfo.(authInfo)
	if !ok {
		return trust.Identity{}, p.Addr.String(), false
	}
	return ai.id, p.Addr.String(), true
}

// unary answers every unary method (protoactor's ListProcesses and
// GetProcessDiagnostics panic "implement me") with Unimplemented.
func (g *guard) unary(ctx context.Context, _ any, info *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
	id, addr, _ := peerOf(ctx)
	g.refuse(ReasonUnimplemented, id.String(), addr, info.FullMethod, "", nil)
	return nil, status.Errorf(codes.Unimplemented, "%s is not served", info.FullMethod)
}

// stream authorizes every message of a Receive stream before protoactor
// reads it, and recovers a panic of the handler (that stream ends, the
// process lives).
func (g *guard) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	id, addr, ok := peerOf(ss.Context())
	if !ok {
		g.refuse(ReasonHandshake, "", addr, info.FullMethod, "", errors.New("no authenticated peer"))
		return status.Error(codes.Unauthenticated, "no authenticated peer")
	}
	defer func() {
		if r := recover(); r != nil {
			g.refused.add(ReasonPanic)
			g.log.Error().Str("peer", id.String()).Str("peer_addr", addr).Interface("panic", r).
				Str("stack", string(debug.Stack())).Msg("remote stream handler panicked; stream closed")
			err = status.Error(codes.Internal, "internal error")
		}
	}()
	return handler(srv, &checkedStream{ServerStream: ss, g: g, peer: id, addr: addr})
}

// checkedStream authorizes each received RemoteMessage.
type checkedStream struct {
	grpc.ServerStream
	g    *guard
	peer trust.Identity
	addr string
}

func (s *checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		if status.Code(err) == codes.ResourceExhausted {
			s.g.refuse(ReasonTooLarge, s.peer.String(), s.addr, "", "", err)
		}
		return err
	}
	rm, ok := m.(*remote.RemoteMessage)
	if !ok {
		s.g.refuse(ReasonMalformed, s.peer.String(), s.addr, "", fmt.Sprintf("%T", m), nil)
		return status.Error(codes.InvalidArgument, "unexpected message")
	}
	switch t := rm.MessageType.(type) {
	case *remote.RemoteMessage_ConnectRequest:
		return nil
	case *remote.RemoteMessage_MessageBatch:
		if reason, target, typeName, err := s.check(t.MessageBatch); reason != "" {
			s.g.refuse(reason, s.peer.String(), s.addr, target, typeName, err)
			return status.Errorf(codes.PermissionDenied, "refused: %s", reason)
		}
		return nil
	default:
		s.g.refuse(ReasonMalformed, s.peer.String(), s.addr, "", fmt.Sprintf("%T", rm.MessageType), nil)
		return status.Error(codes.InvalidArgument, "unexpected message")
	}
}

// check validates a batch (every index protoactor will follow) and
// authorizes each envelope; then it stamps the caller's identity on each
// (stamp).
func (s *checkedStream) check(b *remote.MessageBatch) (reason, target, typeName string, err error) {
	peerHost, _, _ := net.SplitHostPort(s.addr)
	self := s.g.sys.Address()
	for _, e := range b.Envelopes {
		switch {
		case e == nil:
			return ReasonMalformed, "", "", errors.New("nil envelope")
		case e.Target < 0 || int(e.Target) >= len(b.Targets) || b.Targets[e.Target] == nil:
			return ReasonMalformed, "", "", fmt.Errorf("target index %d of %d", e.Target, len(b.Targets))
		case e.Sender < 0 || int(e.Sender) > len(b.Senders) || (e.Sender > 0 && b.Senders[e.Sender-1] == nil):
			return ReasonMalformed, "", "", fmt.Errorf("sender index %d of %d", e.Sender, len(b.Senders))
		case e.TypeId < 0 || int(e.TypeId) >= len(b.TypeNames):
			return ReasonMalformed, "", "", fmt.Errorf("type index %d of %d", e.TypeId, len(b.TypeNames))
		case e.SerializerId != 0:
			return ReasonMalformed, "", "", fmt.Errorf("serializer %d (only protobuf is served)", e.SerializerId)
		}
		target, typeName = b.Targets[e.Target].Id, b.TypeNames[e.TypeId]
		// protoactor delivers to the target PID as given: one on another
		// address would be forwarded there by this process (a relay).
		if a := b.Targets[e.Target].Address; a != self {
			return ReasonTarget, target, typeName, fmt.Errorf("target address %q is not this endpoint's %s", a, self)
		}
		if r := s.g.rules.check(s.peer, target, typeName); r != "" {
			return r, target, typeName, nil
		}
		header, callerHost, r, err := s.stamp(e.MessageHeader, peerHost, target, typeName)
		if r != "" {
			return r, target, typeName, err
		}
		if strings.HasPrefix(target, replyPrefix) {
			caller, _ := trust.ParseIdentity(header[PeerHeader]) // stamped: well formed
			if r, err := s.g.replyFrom(target, caller); r != "" {
				return r, target, typeName, err
			}
		}
		// A reply address must be the caller's own host (the peer's, or
		// the original caller's of a forwarded message, which the
		// forwarding node checked against its connection): the peer
		// cannot make this process dial somewhere else; and not this
		// endpoint's own address, which protoactor resolves to a local
		// actor: the reply would reach any local actor, past the rules and
		// without a peer header (trusted as local by Caller). A forwarding
		// node may also ask for the answer itself, on its own host (it
		// relays it to the caller, and fails the request at once if this
		// node dies).
		if e.Sender > 0 {
			a := b.Senders[e.Sender-1].Address
			relayed := s.peer.Role == trust.RoleGateway && callerHost != peerHost
			if h, _, err := net.SplitHostPort(a); err != nil || (h != callerHost && !(relayed && h == peerHost)) || a == self {
				return ReasonSender, target, typeName, fmt.Errorf("reply address %q is not the caller's (host %s)", a, callerHost)
			}
		}
		e.MessageHeader = &remote.MessageHeader{HeaderData: header}
	}
	return "", "", "", nil
}

// stamp returns the header an admitted envelope is delivered with, which
// replaces whatever header the peer sent, and the host of its caller.
//
// The caller is the peer (PeerHeader and PeerAddrHeader of its
// connection), but for a message a gateway node forwarded: a peer of
// trust.RoleGateway whose envelope carries a PeerHeader (the one it
// stamped when it received the message from its caller) speaks for that
// caller. Its PeerHeader and PeerAddrHeader are kept, and ViaHeader names
// the forwarding node. The forwarded caller must be a client or a
// supervisor whom the rules admit for target and typeName, with a
// host:port address; else the envelope is refused (reason and err).
func (s *checkedStream) stamp(sent *remote.MessageHeader, peerHost, target, typeName string) (header map[string]string, callerHost, reason string, err error) {
	forwarded := sent.GetHeaderData()[PeerHeader]
	if s.peer.Role != trust.RoleGateway || forwarded == "" {
		return map[string]string{PeerHeader: s.peer.String(), PeerAddrHeader: s.addr}, peerHost, "", nil
	}
	caller, err := trust.ParseIdentity(forwarded)
	if err != nil {
		return nil, "", ReasonMalformed, fmt.Errorf("forwarded caller: %w", err)
	}
	if caller.Role == trust.RoleGateway {
		return nil, "", ReasonMalformed, fmt.Errorf("forwarded caller %s is a gateway node (a node speaks for itself)", caller)
	}
	addr := sent.GetHeaderData()[PeerAddrHeader]
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, "", ReasonMalformed, fmt.Errorf("forwarded caller %s: address %q: %w", caller, addr, err)
	}
	if host == "" {
		return nil, "", ReasonMalformed, fmt.Errorf("forwarded caller %s: address %q has no host", caller, addr)
	}
	if r := s.g.rules.check(caller, target, typeName); r != "" {
		return nil, "", r, fmt.Errorf("forwarded caller %s may not send this here", caller)
	}
	return map[string]string{PeerHeader: caller.String(), PeerAddrHeader: addr, ViaHeader: s.peer.String()}, host, "", nil
}

// PeerHost returns the host of a remote message's sender connection ("" for
// a local message).
func PeerHost(ctx actor.Context) string {
	h := ctx.MessageHeader()
	if h == nil {
		return ""
	}
	host, _, _ := net.SplitHostPort(h.Get(PeerAddrHeader))
	return host
}

// Caller reports whether the current message may come from a caller of
// role (and of name, when name is not empty): a message from inside this
// process (no peer header) may; a remote one only from that identity. The
// identity is returned for logs.
func Caller(ctx actor.Context, role trust.Role, name string) (trust.Identity, bool) {
	id, remote := Peer(ctx)
	if !remote {
		return id, true
	}
	return id, id.Role == role && (name == "" || id.Name == name)
}

// Authorize is Caller for handlers: it reports whether the current message
// may come from its sender (a local sender, or a remote one of role and,
// when name is not empty, of name); a refusal is logged and, to a
// requester, answered UNAUTHENTICATED.
func Authorize(ctx actor.Context, log zerolog.Logger, role trust.Role, name string) bool {
	id, ok := Caller(ctx, role, name)
	if !ok {
		Refuse(ctx, log, id)
	}
	return ok
}

// Refuse logs a message refused to peer id and answers a requester.
func Refuse(ctx actor.Context, log zerolog.Logger, id trust.Identity) {
	log.Warn().Str("peer", id.String()).Str("actor", ctx.Self().GetId()).
		Str("message_type", fmt.Sprintf("%T", ctx.Message())).Msg("message refused: wrong caller")
	if ctx.Sender() != nil {
		ctx.Respond(&messages.Reply{Status: messages.Status_STATUS_UNAUTHENTICATED, Message: "this caller may not send that here"})
	}
}
