package client

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/internal/logx"
	"github.com/stockade-dev/stockade/messages"
)

// TestRequestFailsWhenTheGatewayGoes: a request pending at a gateway that
// goes away fails as unreachable at once, not after its timeout.
func TestRequestFailsWhenTheGatewayGoes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	sys := actor.NewActorSystem(logx.ActorSystemOption(zerolog.Nop()))
	rem := remote.NewRemote(sys, remote.Configure("127.0.0.1", port))
	if err := StartRemote(rem); err != nil {
		t.Fatal(err)
	}
	got := make(chan struct{}, 1)
	// An API actor that never answers.
	if _, err := sys.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
		if _, ok := c.Message().(*messages.ListRequest); ok {
			got <- struct{}{}
		}
	}), APIActor); err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	c, err := Dial(addr, "tok", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	errc := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := c.Request(context.Background(), &messages.ListRequest{Token: "tok"})
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
