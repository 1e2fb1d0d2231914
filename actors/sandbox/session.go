package sandbox

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/actors/relay"
	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/trust"
)

// sessionActor is sandbox/NAME/session/N, the gateway's end of one
// supervisor session. It forwards the supervisor's messages to the sandbox
// actor and stops itself when they stop for three heartbeat periods; the
// sandbox actor watches it and turns that Terminated into
// Error/SessionLost. Liveness is the supervisor's messages only, not a
// receive timeout: relays and their Terminated notices arrive here too, and
// a busy sandbox with a silent supervisor must still lose its session.
type sessionActor struct {
	sandbox  *actor.PID
	name     string     // the sandbox: the supervisor's certificate must name it
	remote   *actor.PID // the supervisor's session actor
	log      zerolog.Logger
	relays   int
	lastWord time.Time
	cancel   scheduler.CancelFunc
}

// checkAlive is the session actor's own liveness tick.
type checkAlive struct{}

func (s *sessionActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		s.lastWord = time.Now()
		s.cancel = scheduler.NewTimerScheduler(ctx).SendRepeatedly(contract.HeartbeatEvery/4, contract.HeartbeatEvery/4, ctx.Self(), &checkAlive{})
	case *actor.Stopping:
		if s.cancel != nil {
			s.cancel()
		}
	case *checkAlive:
		if silent := time.Since(s.lastWord); silent > contract.SessionLostAfter {
			s.log.Warn().Dur("silent_for", silent).Msg("session lost: no heartbeat from the supervisor")
			ctx.Stop(ctx.Self())
		}
	case *messages.Heartbeat, *messages.WorkloadExited, *messages.BoundaryFailed:
		if !allowed(ctx, s.log, trust.RoleSupervisor, s.name) {
			return
		}
		s.fromSupervisor(ctx)
	case *relay.Pair:
		s.relays++
		if _, err := ctx.SpawnNamed(relay.ActorProps(m, s.log), relay.ChildName(s.relays)); err != nil {
			s.log.Error().Err(err).Msg("spawn relay")
			_ = m.Client.Close()
			_ = m.Supervisor.Close()
		}
		ctx.Respond(&relay.Taken{})
	}
}

// fromSupervisor takes one of the supervisor's messages: it is alive.
func (s *sessionActor) fromSupervisor(ctx actor.Context) {
	s.lastWord = time.Now()
	switch m := ctx.Message().(type) {
	case *messages.Heartbeat:
		ctx.Send(s.sandbox, m)
		ctx.Respond(&messages.HeartbeatAck{Seq: m.Seq})
	case *messages.WorkloadExited:
		ctx.Send(s.sandbox, m)
		ctx.Respond(&messages.HeartbeatAck{})
	case *messages.BoundaryFailed:
		ctx.Send(s.sandbox, m)
	}
}
