package sandbox

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade-dev/stockade/access"
	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/logs"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/transport"
)

// logsClient is a client's stream actor, in process: it records what the
// gateway sends it.
type logsClient struct {
	w       *world
	pid     *actor.PID
	batches chan *messages.LogsBatch
	replies chan *messages.Reply
}

func (w *world) logsClient(id string) *logsClient {
	w.t.Helper()
	c := &logsClient{w: w, batches: make(chan *messages.LogsBatch, 64), replies: make(chan *messages.Reply, 4)}
	pid, err := w.sys.Root.SpawnNamed(actor.PropsFromFunc(func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case *messages.LogsBatch:
			c.batches <- m
		case *messages.Reply:
			c.replies <- m
		}
	}), transport.ClientStreamPrefix+id)
	if err != nil {
		w.t.Fatal(err)
	}
	c.pid = pid
	return c
}

// ask sends req with the stream actor as its sender (as client.Logs does).
func (c *logsClient) ask(req *messages.LogsRequest) {
	c.w.sys.Root.RequestWithCustomSender(c.w.boxes, req, c.pid)
}

// next waits for the next batch (5 s).
func (c *logsClient) next() *messages.LogsBatch {
	c.w.t.Helper()
	select {
	case b := <-c.batches:
		return b
	case r := <-c.replies:
		c.w.t.Fatalf("a Reply instead of a batch: %v", r)
	case <-time.After(5 * time.Second):
		c.w.t.Fatal("no batch within 5 s")
	}
	return nil
}

// none checks that no batch arrives for a while.
func (c *logsClient) none(what string) {
	c.w.t.Helper()
	select {
	case b := <-c.batches:
		c.w.t.Fatalf("%s: batch %d arrived (%d entries, end %v)", what, b.Seq, len(b.Entries), b.End)
	case <-time.After(400 * time.Millisecond):
	}
}

func (c *logsClient) ack(name, stream string, seq uint64) {
	c.w.sys.Root.Send(c.w.boxes, &messages.LogsAck{Name: name, Stream: stream, Seq: seq})
}

// writeWorkload appends n workload lines ("line I") to name's log dir.
func (w *world) writeWorkload(name string, from, n int) {
	w.t.Helper()
	uid := w.get(name).Sandbox.Uid
	if uid == "" {
		w.t.Fatalf("sandbox %s: get has no uid", name)
	}
	dir := testenv.Path(w.t)(w.env.LogDir(name, uid))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		w.t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, contract.WorkloadLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		w.t.Fatal(err)
	}
	defer f.Close()
	var b strings.Builder
	for i := from; i < from+n; i++ {
		l, _ := json.Marshal(map[string]any{"t": time.Now().UnixMilli(), "s": "out", "l": fmt.Sprintf("line %d", i)})
		b.Write(append(l, '\n'))
	}
	if _, err := f.WriteString(b.String()); err != nil {
		w.t.Fatal(err)
	}
}

// workloadLines are the texts of a batch's workload entries.
func workloadLines(b *messages.LogsBatch) []string {
	var out []string
	for _, e := range b.Entries {
		if e.Source == "workload" {
			out = append(out, e.Text)
		}
	}
	return out
}

// TestLogsStreamFlowControl: a logs request goes sandboxes -> sandbox ->
// its logs child, which streams batches to the requester; no more than
// logsWindow are unacknowledged, an acknowledgement from another caller
// than the requester counts for nothing, and the last batch says end.
func TestLogsStreamFlowControl(t *testing.T) {
	w := newWorld(t)
	w.ready("box")
	const n = 6 * logsBatchEntries // more batches than the window
	w.writeWorkload("box", 0, n)
	c := w.logsClient("01")
	c.ask(&messages.LogsRequest{Name: "box"})
	var got []string
	var stream string
	for i := 1; i <= logsWindow; i++ {
		b := c.next()
		if b.Seq != uint64(i) || b.End {
			t.Fatalf("batch %d: seq %d end %v", i, b.Seq, b.End)
		}
		stream = b.Stream
		got = append(got, workloadLines(b)...)
	}
	c.none("no acknowledgement yet")

	// Another client (one that may read logs) acknowledging this stream:
	// ignored.
	w.clients.Set("mallory", access.Grant{Role: access.Viewer})
	w.sys.Root.Send(w.boxes, &actor.MessageEnvelope{Header: map[string]string{transport.PeerHeader: "client:mallory"},
		Message: &messages.LogsAck{Name: "box", Stream: stream, Seq: logsWindow}})
	c.none("acknowledged by another client")
	if !contains(w.log.String(), "not from the stream's client") {
		t.Fatalf("the foreign acknowledgement was not logged:\n%s", w.log)
	}

	// The requester's: one more batch per acknowledged batch.
	c.ack("box", stream, 1)
	b := c.next()
	got = append(got, workloadLines(b)...)
	c.none("one acknowledged, one sent")
	seq := b.Seq
	for !b.End {
		c.ack("box", stream, seq)
		b = c.next()
		if b.Seq != seq+1 {
			t.Fatalf("batch %d after %d", b.Seq, seq)
		}
		seq = b.Seq
		got = append(got, workloadLines(b)...)
	}
	if b.Status != messages.Status_STATUS_OK {
		t.Fatalf("end: %v %s", b.Status, b.Message)
	}
	if len(got) != n || got[0] != "line 0" || got[n-1] != fmt.Sprintf("line %d", n-1) {
		t.Fatalf("%d workload lines (first %q), want %d in order", len(got), got[0], n)
	}
	for i, l := range got {
		if l != fmt.Sprintf("line %d", i) {
			t.Fatalf("line %d is %q", i, l)
		}
	}
}

// TestLogsFollowAndDelete: a follow gets what is written after it started
// and ends when its sandbox is deleted; a recreated sandbox of the same
// name has logs of its own.
func TestLogsFollowAndDelete(t *testing.T) {
	w := newWorld(t)
	w.ready("box")
	w.writeWorkload("box", 0, 3)
	c := w.logsClient("02")
	c.ask(&messages.LogsRequest{Name: "box", Follow: true, Tail: 2})
	b := c.next()
	if got := workloadLines(b); strings.Join(got, ",") != "line 1,line 2" {
		t.Fatalf("tail 2: %q", got)
	}
	c.ack("box", b.Stream, b.Seq)
	w.writeWorkload("box", 3, 1)
	b = c.next()
	if got := workloadLines(b); len(got) != 1 || got[0] != "line 3" {
		t.Fatalf("followed: %q", got)
	}
	c.ack("box", b.Stream, b.Seq)
	if r := w.verb("box", messages.Verb_VERB_DELETE); r.Status != messages.Status_STATUS_OK {
		t.Fatalf("delete: %v", r)
	}
	for !b.End {
		c.ack("box", b.Stream, b.Seq)
		b = c.next()
	}
	t.Logf("the follow ended: %v %s", b.Status, b.Message)

	w.waitFor("box to be gone", func() bool { return w.get("box").Status == messages.Status_STATUS_NOT_FOUND })
	if r := w.create("box"); r.Status != messages.Status_STATUS_OK {
		t.Fatalf("create again: %v", r)
	}
	w.waitFor("the new box to answer", func() bool { return w.get("box").Status == messages.Status_STATUS_OK })
	c2 := w.logsClient("03")
	c2.ask(&messages.LogsRequest{Name: "box"})
	for b = c2.next(); ; b = c2.next() {
		if got := workloadLines(b); len(got) > 0 {
			t.Fatalf("the new sandbox shows the old one's lines: %q", got)
		}
		if b.End {
			break
		}
		c2.ack("box", b.Stream, b.Seq)
	}
}

// TestLogsRefusals: no such sandbox, a bad tail, and closing a stream.
func TestLogsRefusals(t *testing.T) {
	w := newWorld(t)
	c := w.logsClient("04")
	c.ask(&messages.LogsRequest{Name: "nope"})
	select {
	case r := <-c.replies:
		if r.Status != messages.Status_STATUS_NOT_FOUND {
			t.Fatalf("no such sandbox: %v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no answer for a missing sandbox")
	}
	w.ready("box")
	c.ask(&messages.LogsRequest{Name: "box", Tail: -1})
	select {
	case r := <-c.replies:
		if r.Status != messages.Status_STATUS_INVALID {
			t.Fatalf("tail -1: %v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no answer for a bad tail")
	}
	c.ask(&messages.LogsRequest{Name: "box", Follow: true})
	b := c.next()
	w.sys.Root.Send(w.boxes, &messages.LogsAck{Name: "box", Stream: b.Stream, Close: true})
	w.waitFor("the closed stream's actor to stop", func() bool {
		_, ok := w.sys.ProcessRegistry.Get(actor.NewPID(w.sys.Address(), w.sandboxPID("box").Id+"/"+logsChild+b.Stream))
		return !ok
	})
	w.writeWorkload("box", 0, 1)
	c.none("a closed stream")
}

// TestLogsStreamEndsWithoutAcknowledgements: a client that asked and then
// went silent (no acknowledgement, no close) does not hold a stream
// forever: it ends after the timeout (30 s in service), with a last batch
// that says why, and its reader stops.
func TestLogsStreamEndsWithoutAcknowledgements(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	c := w.logsClient("05")
	s := &logStream{name: "box", id: "1", dir: dir, opts: logs.Options{Follow: true}, to: c.pid,
		log: w.env.Log, ackTimeout: 1500 * time.Millisecond}
	pid, err := w.sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return s }), "box-logs")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var b *messages.LogsBatch
	select {
	case b = <-c.batches:
	case <-time.After(10 * time.Second):
		t.Fatal("no end within 10 s")
	}
	if !b.End || b.Status != messages.Status_STATUS_UNAVAILABLE || !strings.Contains(b.Message, "no acknowledgement") || time.Since(start) < s.ackTimeout {
		t.Fatalf("after %s: %+v", time.Since(start), b)
	}
	w.waitFor("the silent stream's actor to stop", func() bool { _, ok := w.sys.ProcessRegistry.Get(pid); return !ok })
	select {
	case <-s.done:
	default:
		t.Fatal("the reader was not told to stop")
	}
}
