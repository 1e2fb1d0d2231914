package transport_test

import (
	"encoding/hex"
	"math/bits"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc/codes"

	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/transport"
	"github.com/stockade-dev/stockade/transport/transporttest"
	"github.com/stockade-dev/stockade/trust"
)

var supB = trust.Identity{Role: trust.RoleSupervisor, Name: "b"}

// result is a future's outcome, read in the background.
type result struct {
	res any
	err error
}

func await(f *actor.Future) <-chan result {
	ch := make(chan result, 1)
	go func() { res, err := f.Result(); ch <- result{res, err} }()
	return ch
}

// TestReplyBoundToItsRequest: the gateway asks supervisor a (a request to
// a's session, whose reply address a sees). Supervisor b's certificate
// answers that reply address first: refused (reply_from), counted,
// logged, and the request stays open; so is a dead letter from b, and a
// client's reply. Then a's own answer completes the request, and the
// reply address is gone.
func TestReplyBoundToItsRequest(t *testing.T) {
	g := useGateway(t)
	// a's session actor stands in this process (the request's delivery is
	// not what is tested): it keeps the reply address it was given.
	asked := make(chan *actor.PID, 1)
	session, err := g.sys.Root.SpawnNamed(actor.PropsFromFunc(func(ctx actor.Context) {
		if _, ok := ctx.Message().(*messages.SetPolicy); ok {
			asked <- ctx.Sender()
		}
	}), "test/session-a")
	if err != nil {
		t.Fatal(err)
	}
	defer g.sys.Root.Stop(session)
	f := transport.Request(g.sys.Root, session, &messages.SetPolicy{Sandbox: "a", Version: 2}, time.Minute, supA)
	done := await(f)
	replyTo := <-asked
	if !strings.HasPrefix(replyTo.Id, "reply$") || replyTo.Address != g.addr {
		t.Fatalf("reply address %v, want a reply$ address of the gateway's endpoint %s", replyTo, g.addr)
	}
	for _, tc := range []struct {
		name   string
		as     trust.Identity
		batch  func() *remote.MessageBatch
		reason string
	}{
		{"supervisor b answers", supB, func() *remote.MessageBatch {
			return transporttest.Batch(replyTo, &messages.Reply{Status: messages.Status_STATUS_OK, Message: "from b"}, nil)
		}, transport.ReasonReplyFrom},
		{"supervisor b's dead letter", supB, func() *remote.MessageBatch {
			return transporttest.Batch(replyTo, &actor.DeadLetterResponse{Target: replyTo}, nil)
		}, transport.ReasonReplyFrom},
		{"a client answers", alice, func() *remote.MessageBatch {
			return transporttest.Batch(replyTo, &messages.Reply{Message: "from alice"}, nil)
		}, transport.ReasonTarget},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := g.refused.Get(tc.reason)
			err := g.as(t, tc.as).Send(tc.batch(), acceptWait)
			g.wantRefused(t, err, codes.PermissionDenied, tc.reason, before)
			select {
			case r := <-done:
				t.Fatalf("the request to a was completed by %s: %v, %v", tc.as, r.res, r.err)
			default:
			}
		})
	}
	eventually(t, func() bool {
		log := g.log.String()
		return strings.Contains(log, `"reason":"reply_from"`) && strings.Contains(log, `"peer":"supervisor:b"`)
	}, "the refused reply is not logged with its reason and peer")
	// a answers: the request completes with a's reply.
	if err := g.as(t, supA).Send(transporttest.Batch(replyTo, &messages.Reply{Status: messages.Status_STATUS_OK, Message: "from a"}, nil), acceptWait); err != nil {
		t.Fatalf("a's own reply refused: %v", err)
	}
	select {
	case r := <-done:
		if rep, ok := r.res.(*messages.Reply); r.err != nil || !ok || rep.Message != "from a" {
			t.Fatalf("the request completed with %v, %v; want a's Reply", r.res, r.err)
		}
	case <-time.After(waitFor):
		t.Fatal("a's reply did not complete the request")
	}
	if _, ok := g.sys.ProcessRegistry.GetLocal(replyTo.Id); ok {
		t.Fatal("the reply address is still registered after its answer")
	}
	// A late answer to it (a's again) goes to dead letters: not refused.
	if err := g.as(t, supA).Send(transporttest.Batch(replyTo, &messages.Reply{Message: "late"}, nil), acceptWait); err != nil {
		t.Fatalf("a late reply from a: %v, want it taken (and dropped)", err)
	}
	g.nothingDelivered(t)
}

// TestReplyTimeoutAndDeadLetter: a bound request times out as
// protoactor's own do (ErrTimeout, and its reply address is unregistered);
// a dead letter from the identity asked completes it with ErrDeadLetter;
// a reply from inside the process is taken.
func TestReplyTimeoutAndDeadLetter(t *testing.T) {
	g := useGateway(t)
	f, replyTo := transport.NewFuture(g.sys, 200*time.Millisecond, supA)
	if _, err := f.Result(); err != actor.ErrTimeout {
		t.Fatalf("Result = %v, want actor.ErrTimeout", err)
	}
	eventually(t, func() bool { _, ok := g.sys.ProcessRegistry.GetLocal(replyTo.Id); return !ok }, "the reply address outlived its timeout")

	f, replyTo = transport.NewFuture(g.sys, time.Minute, supA)
	if err := g.as(t, supA).Send(transporttest.Batch(replyTo, &actor.DeadLetterResponse{Target: replyTo}, nil), acceptWait); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Result(); err != actor.ErrDeadLetter {
		t.Fatalf("Result = %v, want actor.ErrDeadLetter", err)
	}

	f, replyTo = transport.NewFuture(g.sys, time.Minute, transport.AnyGateway())
	g.sys.Root.Send(replyTo, &messages.Reply{Message: "local"})
	if res, err := f.Result(); err != nil || res.(*messages.Reply).Message != "local" {
		t.Fatalf("a local reply: %v, %v", res, err)
	}
}

// TestReplyIDsUnpredictable: consecutive reply addresses share nothing a
// peer could use to guess the next from one it saw (a supervisor sees
// the ids of the requests sent to it): each is 128 bits, consecutive ones
// differ in about half their bits, none repeats. The same test on
// protoactor's own futures (a counter) finds them predictable.
func TestReplyIDsUnpredictable(t *testing.T) {
	t.Parallel()
	sys := transport.NewActorSystem(quietOption())
	defer sys.Shutdown()
	const n = 2000
	var ours, theirs []string
	for range n {
		f, replyTo := transport.NewFuture(sys, time.Minute, supA)
		ours = append(ours, replyTo.Id)
		sys.Root.Send(replyTo, &messages.Reply{}) // complete it: unregistered
		_, _ = f.Result()
		theirs = append(theirs, actor.NewFuture(sys, time.Minute).PID().Id)
	}
	bitsOf := func(id string) []byte {
		b, err := hex.DecodeString(strings.TrimPrefix(id, "reply$"))
		if err != nil || len(b) != 16 || !strings.HasPrefix(id, "reply$") {
			return nil
		}
		return b
	}
	// predictable reports why ids could be guessed from their
	// predecessors ("" when nothing was found).
	predictable := func(ids []string) string {
		seen := map[string]bool{}
		total, least := 0, 128
		for i, id := range ids {
			if seen[id] {
				return "an id repeats: " + id
			}
			seen[id] = true
			b := bitsOf(id)
			if b == nil {
				return "not 128 bits of hex after reply$: " + id
			}
			if i == 0 {
				continue
			}
			p := bitsOf(ids[i-1])
			d := 0
			for j := range b {
				d += bits.OnesCount8(b[j] ^ p[j])
			}
			total += d
			least = min(least, d)
		}
		// Independent random ids differ in 64 bits on average (standard
		// deviation 5.7; of 2000 pairs, none is 6 deviations off).
		if mean := float64(total) / float64(len(ids)-1); mean < 60 || mean > 68 || least < 30 {
			return "consecutive ids differ in too few bits"
		}
		return ""
	}
	if why := predictable(ours); why != "" {
		t.Fatalf("NewFuture's reply addresses are predictable: %s (first %v)", why, ours[:3])
	}
	if predictable(theirs) == "" {
		t.Fatalf("the test finds protoactor's counter ids unpredictable (first %v): it cannot fail", theirs[:3])
	}
}
