package transport

import (
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/stockade-dev/stockade/trust"
)

// MaxMessageBytes bounds one gRPC message (a batch) an endpoint accepts.
const MaxMessageBytes = 4 << 20

// writerQueue is the initial length of the queue of messages to one peer.
// The queue doubles when full, so this bounds nothing; protoactor's
// default (1,000,000 entries, 16 MB) is allocated for every peer a process
// sends to, by one actor for all of them in turn. A gateway that takes
// over 20 sandboxes opened 20 such queues one after the other, and the
// last sandbox's first message waited 1.7 s for them on a loaded machine.
const writerQueue = 256

// Config configures one endpoint.
type Config struct {
	// Host and Port to listen on (port 0 picks one).
	Host string
	Port int
	// Cert is this process's certificate (its identity).
	Cert tls.Certificate
	// Verifier checks peers, both ways. Its Accept decides which peers may
	// connect to this endpoint.
	Verifier *trust.Verifier
	// Dial checks the peers this process dials (nil: Verifier). Clients and
	// supervisors dial only gateway nodes.
	Dial *trust.Verifier
	// Rules authorize each message.
	Rules Rules
	Log   zerolog.Logger
	// Refused counts refusals when Admission is nil (nil: a fresh set);
	// an Admission counts in its own (Admission.Refusals).
	Refused *Refusals
	// Admission decides which connections the endpoint accepts, and logs
	// and counts refusals with a bound on the log (nil: one of Limits,
	// counting in Refused, closed with the endpoint). A process that
	// shares one among its listeners passes it here.
	Admission *Admission
	// Limits are the Admission's limits when Admission is nil.
	Limits Limits
	// ConnectRetries is how often a connection to a peer is tried, 2 s
	// apart, before what was queued for it is dropped (0: 2, a quick
	// answer for a client or supervisor whose gateway is gone or refuses
	// it). A gateway node sets more: a node that restarts on its address
	// is back within seconds, and a reply queued for it meanwhile must
	// reach it, not be dropped in the retry loop's last sleep.
	ConnectRetries int
}

// Endpoint is a started remote endpoint.
type Endpoint struct {
	*remote.Remote
	adm *Admission
	own bool // adm was made by Start: Shutdown closes it
}

// Shutdown stops the endpoint (remote.Remote.Shutdown), logs the count of
// refusals its log left out, and releases what its Admission holds when
// Start made it.
func (e *Endpoint) Shutdown(graceful bool) {
	e.Remote.Shutdown(graceful)
	if e.own {
		e.adm.FlushLog()
		_ = e.adm.Close()
	}
}

// Admission is the endpoint's Admission.
func (e *Endpoint) Admission() *Admission { return e.adm }

// Start starts sys's remote endpoint over mutual TLS with cfg's rules. A
// listen failure is an error (protoactor panics on it).
//
// A connection's TLS handshake and HTTP/2 preface must end within the
// Admission's HandshakeTimeout; what is accepted while it is over a cap
// or within the descriptor reserve is closed at once (Admission.Admit).
func Start(sys *actor.ActorSystem, cfg Config) (ep *Endpoint, err error) {
	adm, own := cfg.Admission, cfg.Admission == nil
	if own {
		adm = NewAdmission(cfg.Limits, cfg.Refused, cfg.Log)
	}
	dial := cfg.Dial
	if dial == nil {
		dial = cfg.Verifier
	}
	g := &guard{rules: cfg.Rules, log: cfg.Log, adm: adm, refused: adm.refused, sys: sys}
	host := cfg.Host
	if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
		host = "[" + host + "]" // protoactor joins host and port with a bare ":"
	}
	creds := &serverCreds{TransportCredentials: credentials.NewTLS(trust.ServerConfig(cfg.Cert, cfg.Verifier)), g: g, v: cfg.Verifier}
	rc := remote.Configure(host, cfg.Port,
		remote.WithServerOptions(grpc.Creds(creds), grpc.MaxRecvMsgSize(MaxMessageBytes), grpc.ConnectionTimeout(adm.HandshakeTimeout()),
			grpc.KeepaliveParams(serverKeepalive(adm.Limits())),
			grpc.ChainUnaryInterceptor(g.unary), grpc.ChainStreamInterceptor(g.stream)),
		remote.WithDialOptions(grpc.WithTransportCredentials(credentials.NewTLS(trust.ClientConfig(cfg.Cert, dial))),
			grpc.WithChainStreamInterceptor(retireFailedConn)))
	// By default one quick retry: a peer that refuses our certificate or
	// is gone is reported (EndpointTerminatedEvent) in seconds, not after
	// 5 x 2 s.
	rc.MaxRetryCount = 2
	rc.EndpointWriterQueueSize = writerQueue
	if cfg.ConnectRetries > 0 {
		rc.MaxRetryCount = cfg.ConnectRetries
	}
	rem := remote.NewRemote(sys, rc)
	defer func() {
		if r := recover(); r != nil {
			if own {
				_ = adm.Close()
			}
			ep, err = nil, fmt.Errorf("start remote endpoint on %s: %v", net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)), r)
		}
	}()
	rem.Start()
	return &Endpoint{Remote: rem, adm: adm, own: own}, nil
}

// serverKeepalive is an endpoint's gRPC keepalive: a connection with no
// stream for l.IdleTimeout is closed (MaxConnectionIdle: a GOAWAY, then
// the close once its last stream is gone; a peer that does not answer the
// GOAWAY's ping waits 5 s more). protoactor's connections never meet it:
// the endpoint writer opens its Receive stream as soon as it dials and
// keeps it until it drops the connection, and every message to that peer
// (a logs stream's included) rides that one stream, however quiet. A
// connection that lives past it is one that never opened a stream.
//
// The server's pings stay gRPC's (one after two hours without a frame
// read, 20 s to answer): any HTTP/2 peer answers them, so they would not
// end an idle attacker's connection, and sooner ones would cut a peer
// that is paused (a node stopped by SIGSTOP, a CLI suspended with ^Z).
// A peer whose host is gone is found by TCP keepalive (Go's default on
// every accepted connection: probes after 15 s of silence).
func serverKeepalive(l Limits) keepalive.ServerParameters {
	return keepalive.ServerParameters{MaxConnectionIdle: l.IdleTimeout}
}

// LocalIPFor returns the local address this host uses to reach addr: where
// a client or supervisor listens so that the gateway can answer it (no
// packet is sent).
func LocalIPFor(addr string) (string, error) {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return "", fmt.Errorf("route to %s: %w", addr, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String(), nil
}

// Refusals counts refused handshakes and messages by reason; it is the
// prometheus collector of stockade_remote_refused_total{reason}.
type Refusals struct {
	mu sync.Mutex
	m  map[string]int64
}

// NewRefusals returns an empty set.
func NewRefusals() *Refusals { return &Refusals{m: map[string]int64{}} }

func (r *Refusals) add(reason string) {
	r.mu.Lock()
	r.m[reason]++
	r.mu.Unlock()
}

// Get returns the count of one reason.
func (r *Refusals) Get(reason string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[reason]
}

// Total returns the count of every reason.
func (r *Refusals) Total() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for _, v := range r.m {
		n += v
	}
	return n
}

var refusedDesc = prometheus.NewDesc("stockade_remote_refused_total",
	"Remote handshakes and messages refused by the transport, by reason.", []string{"reason"}, nil)

// Describe implements prometheus.Collector.
func (r *Refusals) Describe(ch chan<- *prometheus.Desc) { ch <- refusedDesc }

// Collect implements prometheus.Collector.
func (r *Refusals) Collect(ch chan<- prometheus.Metric) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, v := range r.m {
		ch <- prometheus.MustNewConstMetric(refusedDesc, prometheus.CounterValue, float64(v), k)
	}
}
