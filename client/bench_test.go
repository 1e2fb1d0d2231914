package client

import (
	"context"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/internal/logx"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/transport"
	"github.com/stockade-dev/stockade/trust"
)

// benchGateway is an API actor answering a list of 10 sandboxes, on an
// endpoint with mTLS (the product) or plain protoactor remote (the same
// build without: the baseline of the ratio).
type benchGateway struct {
	addr string
	stop func()
	cfg  *Config // the client's configuration (mTLS)
}

func startBenchGateway(b *testing.B, mtls bool) *benchGateway {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	sys := actor.NewActorSystem(logx.ActorSystemOption(zerolog.Nop()))
	g := &benchGateway{addr: "127.0.0.1:" + strconv.Itoa(port)}
	var rem interface{ Shutdown(graceful bool) }
	if mtls {
		ca, _, err := trust.LoadOrCreateCA(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		pool, _ := trust.Pool(ca.CertPEM)
		rem, err = transport.Start(sys, transport.Config{Host: "127.0.0.1", Port: port, Cert: keyPair(b, ca, trust.Identity{Role: trust.RoleGateway, Name: "bench"}),
			Verifier: &trust.Verifier{CAs: pool, Accept: trust.AcceptRoles(trust.RoleClient)}, Rules: transport.GatewayRules(), Log: zerolog.Nop()})
		if err != nil {
			b.Fatal(err)
		}
		certPEM, keyPEM, _, err := ca.IssueKeyPair(trust.Identity{Role: trust.RoleClient, Name: "bench"}, time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		g.cfg = &Config{Name: "bench", CA: string(ca.CertPEM), Cert: string(certPEM), Key: string(keyPEM)}
	} else {
		plain := remote.NewRemote(sys, remote.Configure("127.0.0.1", port))
		plain.Start()
		rem = plain
	}
	reply := &messages.Reply{Status: messages.Status_STATUS_OK}
	for i := range 10 {
		reply.Sandboxes = append(reply.Sandboxes, &messages.SandboxStatus{Name: "box-" + strconv.Itoa(i), Phase: "Ready", Message: "running"})
	}
	if _, err := sys.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
		if _, ok := c.Message().(*messages.ListRequest); ok {
			c.Respond(reply)
		}
	}), transport.APIActor); err != nil {
		b.Fatal(err)
	}
	g.stop = func() { rem.Shutdown(false); sys.Shutdown() }
	return g
}

// plainClient is the baseline client: protoactor remote without TLS.
type plainClient struct {
	sys *actor.ActorSystem
	rem *remote.Remote
	api *actor.PID
}

func dialPlain(b *testing.B, addr string) *plainClient {
	sys := actor.NewActorSystem(logx.ActorSystemOption(zerolog.Nop()))
	rem := remote.NewRemote(sys, remote.Configure("127.0.0.1", 0))
	rem.Start()
	return &plainClient{sys: sys, rem: rem, api: actor.NewPID(addr, transport.APIActor)}
}

func (p *plainClient) list(b *testing.B) {
	res, err := p.sys.Root.RequestFuture(p.api, &messages.ListRequest{}, 10*time.Second).Result()
	if r, ok := res.(*messages.Reply); err != nil || !ok || len(r.Sandboxes) != 10 {
		b.Fatalf("list: %v %v", res, err)
	}
}

func (p *plainClient) close() { p.rem.Shutdown(false); p.sys.Shutdown() }

func mtlsList(b *testing.B, c *Client) {
	r, err := c.Request(context.Background(), &messages.ListRequest{})
	if err != nil || len(r.Sandboxes) != 10 {
		b.Fatalf("list: %v %v", r, err)
	}
}

// report adds p50/p99 of both variants and their ratio.
func report(b *testing.B, tls, plain []time.Duration) {
	p := func(d []time.Duration, q int) float64 {
		slices.Sort(d)
		return float64(d[len(d)*q/100].Nanoseconds())
	}
	b.ReportMetric(p(tls, 50), "mtls-p50-ns")
	b.ReportMetric(p(tls, 99), "mtls-p99-ns")
	b.ReportMetric(p(plain, 50), "plain-p50-ns")
	b.ReportMetric(p(plain, 99), "plain-p99-ns")
	b.ReportMetric(p(tls, 50)/p(plain, 50), "x-p50-mtls/plain")
}

// BenchmarkRequestMTLSvsPlain: one API request (a list of 10 sandboxes)
// over a persistent connection, with mTLS and without, interleaved so that
// both see the same machine.
func BenchmarkRequestMTLSvsPlain(b *testing.B) {
	gt, gp := startBenchGateway(b, true), startBenchGateway(b, false)
	defer gt.stop()
	defer gp.stop()
	c, err := Dial(gt.addr, gt.cfg, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	p := dialPlain(b, gp.addr)
	defer p.close()
	mtlsList(b, c) // connections up
	p.list(b)
	var tls, plain []time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		mtlsList(b, c)
		t1 := time.Now()
		p.list(b)
		tls, plain = append(tls, t1.Sub(t0)), append(plain, time.Since(t1))
	}
	report(b, tls, plain)
}

// BenchmarkCommandMTLSvsPlain: what one CLI command does after the process
// starts: connect (for mTLS: the handshake check and the client's own
// endpoint), one list, close; with mTLS and without, interleaved.
func BenchmarkCommandMTLSvsPlain(b *testing.B) {
	gt, gp := startBenchGateway(b, true), startBenchGateway(b, false)
	defer gt.stop()
	defer gp.stop()
	var tls, plain []time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		c, err := Dial(gt.addr, gt.cfg, zerolog.Nop())
		if err != nil {
			b.Fatal(err)
		}
		mtlsList(b, c)
		c.Close()
		t1 := time.Now()
		p := dialPlain(b, gp.addr)
		p.list(b)
		p.close()
		tls, plain = append(tls, t1.Sub(t0)), append(plain, time.Since(t1))
	}
	report(b, tls, plain)
}
