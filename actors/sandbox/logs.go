package sandbox

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/actors/supervise"
	"github.com/stockade-dev/stockade/errdefs"
	"github.com/stockade-dev/stockade/logs"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/transport"
	"github.com/stockade-dev/stockade/trust"
)

// Logs streams (`sandbox logs`): a LogsRequest reaches the sandbox actor
// (api -> sandboxes -> sandbox/NAME), which spawns a child logs/ID that
// serves it: a goroutine of its own reads the sandbox's log directory
// (package logs) and hands the child batches, the child sends them to the
// client's stream actor (the request's sender) and counts the client's
// acknowledgements (LogsAck, routed like the request). At most
// logsWindow batches are unacknowledged: the reader waits for credit, so
// a slow client holds the stream back instead of filling memory.
const (
	logsWindow       = 4
	logsBatchEntries = 500
	logsBatchBytes   = 256 << 10
	// logsPoll is how often a follow looks for new lines.
	logsPoll = 250 * time.Millisecond
	// logsKeepalive: a follow with nothing new sends an empty batch this
	// often (the client knows the stream is alive, and acknowledges it).
	logsKeepalive = 10 * time.Second
	// logsAckTimeout ends a stream whose client has not acknowledged
	// anything for this long (its client keeps acknowledging every 10 s).
	logsAckTimeout = 30 * time.Second
	// logsMaxStreams bounds a sandbox's streams at once of clients that
	// are not admins, logsPerClient those of one such client (so that a
	// viewer cannot hold them all), and logsMaxAdminStreams the admins'
	// (and this process's), counted apart: the others cannot shut admins
	// out.
	logsMaxStreams      = 16
	logsPerClient       = 4
	logsMaxAdminStreams = 16
	// logsChild prefixes the children's names: logs/ID, ID a random
	// decimal (supervise.Kind counts their failures as "logs").
	logsChild = "logs/"
)

// streamHolder is who holds a logs stream.
type streamHolder struct {
	by    string // "client:bob"
	admin bool
}

// logs serves a LogsRequest (a new stream) or a LogsAck (to its stream)
// for this sandbox, from by. The caller checked that by may read it.
func (a *sandboxActor) logs(ctx actor.Context, by Caller) {
	switch m := ctx.Message().(type) {
	case *messages.LogsRequest:
		a.logsRequest(ctx, m, by)
	case *messages.LogsAck:
		if _, err := strconv.ParseUint(m.Stream, 10, 63); err != nil {
			return
		}
		want := ctx.Self().Id + "/" + logsChild + m.Stream
		for _, c := range ctx.Children() {
			if c.Id == want {
				ctx.Forward(c)
				return
			}
		}
		// An ended stream: nothing to acknowledge.
	}
}

func (a *sandboxActor) logsRequest(ctx actor.Context, m *messages.LogsRequest, by Caller) {
	to := ctx.Sender()
	if to == nil {
		a.env.Log.Warn().Str("sandbox", a.name).Msg("logs request without a sender: nowhere to stream to")
		return
	}
	if m.Tail < 0 || m.Tail > logs.MaxTail {
		ctx.Respond(errdefs.Reply(errdefs.Invalid("-n %d: use 0 (all) to %d", m.Tail, logs.MaxTail)))
		return
	}
	if m.SinceUnixMs < 0 {
		ctx.Respond(errdefs.Reply(errdefs.Invalid("since %d: use a time after 1970 (unix ms), or 0 for all", m.SinceUnixMs)))
		return
	}
	if err := a.logsRoom(ctx, by); err != nil {
		ctx.Respond(errdefs.Reply(err))
		return
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := strconv.FormatUint(binary.BigEndian.Uint64(b[:])>>1, 10)
	owner, remote := transport.Peer(ctx)
	o := logs.Options{AuditOnly: m.AuditOnly, Tail: int(m.Tail), Follow: m.Follow}
	if m.SinceUnixMs > 0 {
		o.Since = time.UnixMilli(m.SinceUnixMs)
	}
	dir, err := a.env.LogDir(a.name, a.rec.Spec.UID)
	if err != nil {
		ctx.Respond(errdefs.Reply(errdefs.Internal("sandbox %s: logs: %w", a.name, err)))
		return
	}
	log := a.env.Log.With().Str("sandbox", a.name).Str("logs_stream", id).Logger()
	s := &logStream{name: a.name, id: id, dir: dir, opts: o, to: to, owner: owner, ownerRemote: remote, log: log,
		ackTimeout: logsAckTimeout}
	leaf := supervise.OneForOne(0, 0, supervise.StopOnFailure, supervise.WithLogger(a.env.Log))
	props := actor.PropsFromProducer(func() actor.Actor { return s },
		actor.WithSupervisor(leaf), actor.WithReceiverMiddleware(supervise.PanicStack(a.env.Log)))
	pid, err := ctx.SpawnNamed(props, logsChild+id)
	if err != nil {
		ctx.Respond(errdefs.Reply(errdefs.Internal("sandbox %s: start a logs stream: %w", a.name, err)))
		return
	}
	a.logStreams[pid.Id] = streamHolder{by: by.String(), admin: by.Admin()}
	log.Debug().Str("client", owner.String()).Bool("follow", m.Follow).Int32("tail", m.Tail).Msg("logs stream started")
}

// logsRoom reports whether by may open one more logs stream of this
// sandbox: nil, or why not (its own streams at logsPerClient: Refused; the
// sandbox's for its kind of client at their cap: Unavailable). It forgets
// the streams that ended.
func (a *sandboxActor) logsRoom(ctx actor.Context, by Caller) error {
	prefix := ctx.Self().Id + "/" + logsChild
	live := map[string]bool{}
	var admins, others, mine int
	for _, c := range ctx.Children() {
		if !strings.HasPrefix(c.Id, prefix) {
			continue
		}
		live[c.Id] = true
		h := a.logStreams[c.Id]
		switch {
		case h.admin:
			admins++
		default:
			others++
		}
		if h.by == by.String() {
			mine++
		}
	}
	if a.logStreams == nil {
		a.logStreams = map[string]streamHolder{}
	}
	for id := range a.logStreams {
		if !live[id] {
			delete(a.logStreams, id)
		}
	}
	switch {
	case by.Admin() && admins >= logsMaxAdminStreams:
		return errdefs.Unavailable("sandbox %s already serves %d logs streams to admins: end one (its client), or retry later", a.name, admins)
	case by.Admin():
		return nil
	case mine >= logsPerClient:
		return errdefs.Refused("%s already holds %d logs streams of sandbox %s, the most for a client that is not an admin: end one of them first", by, mine, a.name)
	case others >= logsMaxStreams:
		return errdefs.Unavailable("sandbox %s already serves %d logs streams to clients that are not admins: end one (its client), or retry later (admins have streams of their own)", a.name, others)
	}
	return nil
}

// logStream is sandbox/NAME/logs/ID: one client's stream.
type logStream struct {
	name, id string
	dir      string
	opts     logs.Options
	to       *actor.PID // the client's stream actor
	// owner: acknowledgements must come from the client that asked.
	owner       trust.Identity
	ownerRemote bool
	log         zerolog.Logger
	ackTimeout  time.Duration // logsAckTimeout

	seq, acked uint64
	lastAck    time.Time
	ended      bool          // the last batch was sent (or the client closed)
	why        string        // why the stream ends early (logs)
	credit     chan struct{} // one per batch the reader may still read
	done       chan struct{} // closed when the stream stops: the reader ends
	unsub      func()        // ends the watch on the client's endpoint
	cancel     scheduler.CancelFunc
}

// logsRead is what the reader hands the stream: one batch's entries, or
// the end (err: why early).
type logsRead struct {
	entries []logs.Entry
	end     bool
	err     error
}

// logsCheck is the stream's liveness tick; logsClientGone says the
// connection to the client's endpoint ended.
type (
	logsCheck      struct{}
	logsClientGone struct{}
)

func (s *logStream) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		s.lastAck = time.Now()
		s.credit = make(chan struct{}, logsWindow)
		for range logsWindow {
			s.credit <- struct{}{}
		}
		s.done = make(chan struct{})
		sys, self := ctx.ActorSystem(), ctx.Self()
		s.unsub = transport.OnEndpointEnded(sys, s.to.Address, func() { sys.Root.Send(self, &logsClientGone{}) })
		s.cancel = scheduler.NewTimerScheduler(ctx).SendRepeatedly(time.Second, time.Second, self, &logsCheck{})
		go readLogs(s.dir, s.opts, s.credit, s.done, func(r *logsRead) { sys.Root.Send(self, r) })
	case *logsRead:
		if s.ended {
			return
		}
		b := &messages.LogsBatch{Stream: s.id, Entries: entriesProto(m.entries), End: m.end, Status: messages.Status_STATUS_OK}
		if m.err != nil {
			b.End, b.Status, b.Message = true, messages.Status_STATUS_INTERNAL, fmt.Sprintf("sandbox %s: %v", s.name, m.err)
			s.log.Error().Err(m.err).Msg("logs stream failed")
		}
		s.send(ctx, b)
	case *messages.LogsAck:
		if id, remote := transport.Peer(ctx); remote != s.ownerRemote || id != s.owner {
			s.log.Warn().Str("peer", id.String()).Str("owner", s.owner.String()).Msg("logs acknowledgement refused: not from the stream's client")
			return
		}
		if m.Close {
			s.ended = true // the client is gone or done: nothing more to send
			s.stop(ctx, "the client closed it")
			return
		}
		if m.Seq > s.seq {
			return // acknowledges what was never sent
		}
		s.lastAck = time.Now()
		for ; s.acked < m.Seq; s.acked++ {
			select {
			case s.credit <- struct{}{}:
			default:
			}
		}
	case *logsCheck:
		if silent := time.Since(s.lastAck); silent > s.ackTimeout {
			s.why = fmt.Sprintf("no acknowledgement for %s", silent.Round(time.Second))
			s.send(ctx, &messages.LogsBatch{Stream: s.id, End: true, Status: messages.Status_STATUS_UNAVAILABLE,
				Message: fmt.Sprintf("sandbox %s: the gateway ended this logs stream: no acknowledgement for %s", s.name, s.ackTimeout)})
		}
	case *logsClientGone:
		s.ended = true
		s.stop(ctx, "the connection to the client ended")
	case *actor.Stopping:
		close(s.done)
		if s.cancel != nil {
			s.cancel()
		}
		if s.unsub != nil {
			s.unsub()
		}
		if s.ended {
			return
		}
		// Stopped with its sandbox actor: the sandbox was deleted, or the
		// gateway is stopping (or the sandbox actor restarts).
		b := &messages.LogsBatch{Stream: s.id, Seq: s.seq + 1, End: true, Status: messages.Status_STATUS_UNAVAILABLE,
			Message: fmt.Sprintf("sandbox %s: the gateway stopped serving this logs stream (it is stopping, or the sandbox's actor restarted): run logs again", s.name)}
		if _, err := os.Stat(s.dir); errors.Is(err, os.ErrNotExist) {
			b.Status, b.Message = messages.Status_STATUS_OK, fmt.Sprintf("sandbox %s was deleted", s.name)
		}
		s.log.Info().Str("why", b.Message).Uint64("batches", s.seq).Msg("logs stream ended")
		ctx.Send(s.to, b)
	}
}

// send sends the next batch; after the last one the stream stops.
func (s *logStream) send(ctx actor.Context, b *messages.LogsBatch) {
	s.seq++
	b.Seq = s.seq
	ctx.Send(s.to, b)
	if b.End {
		s.ended = true
		why := s.why
		if why == "" {
			why = "sent"
			if b.Status != messages.Status_STATUS_OK {
				why = b.Message
			}
		}
		s.stop(ctx, why)
	}
}

// stop stops the stream, saying why.
func (s *logStream) stop(ctx actor.Context, why string) {
	s.log.Info().Str("why", why).Uint64("batches", s.seq).Msg("logs stream ended")
	ctx.Stop(ctx.Self())
}

// readLogs reads dir per o off the actor: one batch per credit, polling
// for new lines when following, until the end (not following), an error,
// or done.
func readLogs(dir string, o logs.Options, credit, done <-chan struct{}, send func(*logsRead)) {
	r, err := logs.Open(dir, o)
	if err != nil {
		send(&logsRead{end: true, err: err})
		return
	}
	defer r.Close()
	tick := time.NewTicker(logsPoll)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-credit:
		case <-done:
			return
		}
		for {
			es, end, err := r.Next(logsBatchEntries, logsBatchBytes)
			if err != nil {
				send(&logsRead{entries: es, end: true, err: err})
				return
			}
			if len(es) > 0 || end || time.Since(last) >= logsKeepalive {
				send(&logsRead{entries: es, end: end})
				if end {
					return
				}
				last = time.Now()
				break
			}
			select {
			case <-tick.C:
			case <-done:
				return
			}
		}
	}
}

// entriesProto converts entries for the wire.
func entriesProto(es []logs.Entry) []*messages.LogEntry {
	out := make([]*messages.LogEntry, len(es))
	for i, e := range es {
		out[i] = &messages.LogEntry{TimeUnixMs: e.Time.UnixMilli(), Source: e.Source, Stream: e.Stream, Text: e.Text, Event: e.Event}
	}
	return out
}
