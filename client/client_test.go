package client

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/internal/logx"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/transport"
	"github.com/stockade-dev/stockade/trust"
)

func keyPair(t testing.TB, ca *trust.CA, id trust.Identity) tls.Certificate {
	t.Helper()
	certPEM, keyPEM, _, err := ca.IssueKeyPair(id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := trust.KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// TestRequestFailsWhenTheGatewayGoes: a request pending at a gateway that
// goes away fails as unreachable at once, not after its timeout.
func TestRequestFailsWhenTheGatewayGoes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	ca, _, err := trust.LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	node := keyPair(t, ca, trust.Identity{Role: trust.RoleGateway, Name: "test"})
	pool, _ := trust.Pool(ca.CertPEM)
	sys := actor.NewActorSystem(logx.ActorSystemOption(zerolog.Nop()))
	rem, err := transport.Start(sys, transport.Config{Host: "127.0.0.1", Port: port, Cert: node,
		Verifier: &trust.Verifier{CAs: pool, Accept: trust.AcceptRoles(trust.RoleClient)}, Rules: transport.GatewayRules(), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan struct{}, 1)
	// An API actor that never answers.
	if _, err := sys.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
		if _, ok := c.Message().(*messages.ListRequest); ok {
			got <- struct{}{}
		}
	}), transport.APIActor); err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	certPEM, keyPEM, _, err := ca.IssueKeyPair(trust.Identity{Role: trust.RoleClient, Name: "alice"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Dial(addr, &Config{Name: "alice", CA: string(ca.CertPEM), Cert: string(certPEM), Key: string(keyPEM)}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	errc := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := c.Request(context.Background(), &messages.ListRequest{})
		errc <- err
	}()
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the gateway")
	}
	rem.Shutdown(false)
	sys.Shutdown()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrUnreachable) {
			t.Fatalf("err %v, want ErrUnreachable", err)
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Fatalf("failed after %s: waited for the timeout", d)
		}
		t.Logf("failed after %s: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(25 * time.Second):
		t.Fatal("request still pending 25 s after the gateway went away (timeout is 30 s)")
	}
}
