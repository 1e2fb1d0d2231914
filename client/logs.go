package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade-dev/stockade/errdefs"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/transport"
)

const (
	// streamIdle: a stream that has sent nothing for this long (a follow
	// with nothing new sends an empty batch every 10 s) is lost.
	streamIdle = 35 * time.Second
	// streamKeepalive is how often the client repeats its last
	// acknowledgement while the caller is busy with a batch (a slow
	// terminal): the gateway ends a stream after 30 s without one.
	streamKeepalive = 10 * time.Second
	// streamInbox bounds what the stream's actor holds for the caller:
	// more than the gateway sends unacknowledged.
	streamInbox = 32
)

// Logs asks the gateway for the logs req names and calls each with every
// batch, in order; a batch is acknowledged once each returns (the gateway
// sends only a few ahead). The gateway answers on an actor of this
// client's own (transport.ClientStreamPrefix + a random id), which takes
// messages from gateway nodes only.
//
// Logs returns nil after the last batch of a stream that ended (all of
// it was sent, or a follow's sandbox was deleted: the batch's message
// says so); an *errdefs.Error of the status's kind when the gateway
// refused the request or ended the stream early; an error wrapping ErrUnreachable or ErrRefused when
// the gateway went away or stopped answering; each's error; or ctx's
// error once ctx is done. In the last two cases the stream is closed at
// the gateway.
func (c *Client) Logs(ctx context.Context, req *messages.LogsRequest, each func(*messages.LogsBatch) error) error {
	idb := make([]byte, 16)
	if _, err := rand.Read(idb); err != nil {
		return fmt.Errorf("logs: stream id: %w", err)
	}
	in := make(chan any, streamInbox)
	full := make(chan struct{})
	var fullOnce sync.Once
	pid, err := c.sys.Root.SpawnNamed(actor.PropsFromFunc(func(actx actor.Context) {
		switch m := actx.Message().(type) {
		case *messages.LogsBatch, *messages.Reply, *actor.DeadLetterResponse:
			select {
			case in <- m:
			default: // never blocks the actor; the gateway sent more than it may
				fullOnce.Do(func() { close(full) })
			}
		}
	}), transport.ClientStreamPrefix+hex.EncodeToString(idb))
	if err != nil {
		return fmt.Errorf("logs: start this client's stream actor: %w", err)
	}
	defer c.sys.Root.Stop(pid)

	lost := make(chan struct{})
	defer transport.OnEndpointEnded(c.sys, c.addr, func() { close(lost) })()

	// acked is the stream's id and last acknowledged batch, repeated by
	// the keepalive while each is busy.
	var mu sync.Mutex
	var stream string
	var acked uint64
	ack := func(closing bool) {
		mu.Lock()
		a := &messages.LogsAck{Name: req.Name, Stream: stream, Seq: acked, Close: closing}
		mu.Unlock()
		if a.Stream != "" {
			c.sys.Root.Send(c.api, a)
		}
	}
	stopKeepalive := make(chan struct{})
	defer close(stopKeepalive)
	go func() {
		t := time.NewTicker(streamKeepalive)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				ack(false)
			case <-stopKeepalive:
				return
			}
		}
	}()

	c.sys.Root.RequestWithCustomSender(c.api, req, pid)
	wait := c.timeout
	if dl, ok := ctx.Deadline(); ok {
		wait = time.Until(dl)
	}
	idle := time.NewTimer(wait)
	defer idle.Stop()
	next := uint64(1)
	for {
		var m any
		select {
		case m = <-in:
		case <-full:
			ack(true)
			return fmt.Errorf("logs: the gateway %s sent more batches than it may have unacknowledged: run logs again", c.addr)
		case <-c.refused:
			return c.refusedErr
		case <-lost:
			return fmt.Errorf("%w: %s: the connection to the gateway ended (did it stop or restart?): run logs again", ErrUnreachable, c.addr)
		case <-ctx.Done():
			ack(true)
			return ctx.Err()
		case <-idle.C:
			ack(true)
			return fmt.Errorf("%w: %s: the logs stream sent nothing for %s", ErrUnreachable, c.addr, wait.Round(time.Second))
		}
		switch m := m.(type) {
		case *messages.Reply:
			if err := errdefs.FromReply(m); err != nil {
				return err
			}
			return errdefs.Internal("logs: the gateway answered OK instead of a stream")
		case *actor.DeadLetterResponse:
			return fmt.Errorf("%w: %s: the gateway has no %s actor (is it a stockade gateway of this version?)", ErrUnreachable, c.addr, transport.APIActor)
		case *messages.LogsBatch:
			mu.Lock()
			if stream == "" {
				stream = m.Stream
			}
			same := m.Stream == stream
			mu.Unlock()
			if !same {
				continue // not this stream's
			}
			if m.Seq != next {
				ack(true)
				return fmt.Errorf("logs: batch %d of the stream arrived, want %d (lost in transit): run logs again", m.Seq, next)
			}
			next++
			if err := each(m); err != nil {
				ack(true)
				return err
			}
			if m.End {
				if m.Status == messages.Status_STATUS_UNSPECIFIED {
					return nil
				}
				return errdefs.FromReply(&messages.Reply{Status: m.Status, Message: m.Message})
			}
			mu.Lock()
			acked = m.Seq
			mu.Unlock()
			ack(false)
			wait = streamIdle
			idle.Reset(wait)
		}
	}
}
