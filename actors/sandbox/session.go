package sandbox

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/actors/relay"

	"github.com/stockade-dev/stockade/messages"
)

// heartbeatEvery is the supervisor's heartbeat period; a session with no
// heartbeat for three periods is lost.
const heartbeatEvery = time.Second

// sessionActor is sandbox/NAME/session/N, the gateway's end of one
// supervisor session. It forwards the supervisor's messages to the sandbox
// actor and stops itself when heartbeats stop; the sandbox actor watches it
// and turns that Terminated into Error/SessionLost.
type sessionActor struct {
	sandbox *actor.PID
	remote  *actor.PID // the supervisor's session actor
	log     zerolog.Logger
	relays  int
}

func (s *sessionActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		ctx.SetReceiveTimeout(3 * heartbeatEvery)
	case *messages.Heartbeat:
		ctx.Send(s.sandbox, m)
		ctx.Respond(&messages.HeartbeatAck{Seq: m.Seq})
	case *messages.WorkloadExited:
		ctx.Send(s.sandbox, m)
		ctx.Respond(&messages.HeartbeatAck{})
	case *messages.BoundaryFailed:
		ctx.Send(s.sandbox, m)
	case *relay.Pair:
		s.relays++
		if _, err := ctx.SpawnNamed(relay.ActorProps(m, s.log), relay.ChildName(s.relays)); err != nil {
			s.log.Error().Err(err).Msg("spawn relay")
			_ = m.Client.Close()
			_ = m.Supervisor.Close()
		}
	case *actor.ReceiveTimeout:
		ctx.Stop(ctx.Self())
	}
}
