package transport

import (
	"context"

	"google.golang.org/grpc"
)

// retireFailedConn is the stream interceptor of every connection an
// endpoint dials. protoactor's endpoint writer dials a new gRPC ClientConn
// for each connect attempt and forgets the one whose stream failed
// without closing it; gRPC keeps such a conn redialling its address in the
// background for the life of the process and, once a peer is back on that
// address, connected and idle. Measured in the chaos harness before this:
// a gateway restart left every supervisor and client with a second,
// stream-less connection into the new gateway (3 goroutines there each),
// and a killed supervisor left the gateway redialling its gone address.
// Closing the conn when its stream cannot be made, or when it fails or
// ends, retires it; the writer's own later Close of the same conn is then
// a no-op (an error protoactor logs, lowered to debug by logx).
func retireFailedConn(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		_ = cc.Close()
		return nil, err
	}
	return &retiringStream{ClientStream: s, cc: cc}, nil
}

// retiringStream closes its conn when a send or receive fails or the
// stream ends (a remoting stream is the conn's only one).
type retiringStream struct {
	grpc.ClientStream
	cc *grpc.ClientConn
}

func (s *retiringStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if err != nil {
		_ = s.cc.Close()
	}
	return err
}

func (s *retiringStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		_ = s.cc.Close()
	}
	return err
}
