package supervise

import (
	"fmt"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
)

// Counters counts directives taken per actor kind ("conn", "query",
// "proxy", ...). Safe for concurrent use.
type Counters struct {
	mu sync.Mutex
	m  map[Key]int64
}

// Key identifies a counter: the kind of actor and the directive taken.
type Key struct {
	Kind      string
	Directive string
}

// NewCounters returns empty counters.
func NewCounters() *Counters { return &Counters{m: map[Key]int64{}} }

// Add increments a counter.
func (c *Counters) Add(kind string, d actor.Directive) {
	c.mu.Lock()
	c.m[Key{kind, DirectiveName(d)}]++
	c.mu.Unlock()
}

// Get returns one counter.
func (c *Counters) Get(kind string, d actor.Directive) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[Key{kind, DirectiveName(d)}]
}

// Snapshot returns a copy of all counters.
func (c *Counters) Snapshot() map[Key]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[Key]int64, len(c.m))
	for k, v := range c.m {
		out[k] = v
	}
	return out
}

// String renders the counters as "kind.directive=N" sorted, for logs.
func (c *Counters) String() string {
	snap := c.Snapshot()
	keys := make([]string, 0, len(snap))
	for k, v := range snap {
		keys = append(keys, k.Kind+"."+k.Directive+"="+strconv.FormatInt(v, 10))
	}
	sort.Strings(keys)
	return strings.Join(keys, " ")
}

// DirectiveName returns a stable lower-case name of a directive.
func DirectiveName(d actor.Directive) string {
	switch d {
	case actor.ResumeDirective:
		return "resume"
	case actor.RestartDirective:
		return "restart"
	case actor.StopDirective:
		return "stop"
	case actor.EscalateDirective:
		return "escalate"
	default:
		return "directive(" + strconv.Itoa(int(d)) + ")"
	}
}

// Kind derives an actor kind from a PID id: the last path segment that is
// not a number ("boundary/proxy/conn/17" -> "conn").
func Kind(pid *actor.PID) string {
	if pid == nil {
		return "unknown"
	}
	parts := strings.Split(pid.Id, "/")
	for i := len(parts) - 1; i >= 0; i-- {
		if _, err := strconv.Atoi(parts[i]); err != nil && parts[i] != "" {
			return parts[i]
		}
	}
	return "unknown"
}

// Strategy is a one-for-one supervisor strategy that logs and counts every
// directive it takes. It is protoactor's one-for-one logic written out so
// that the directive logged is the one actually applied (a restart past its
// budget becomes a stop, and says so).
type Strategy struct {
	maxRestarts int
	window      time.Duration
	decide      actor.DeciderFunc
	log         zerolog.Logger
	counters    *Counters
	onGiveUp    func(child *actor.PID, reason any)
}

// Option configures a Strategy.
type Option func(*Strategy)

// WithLogger sets the logger directives go to.
func WithLogger(l zerolog.Logger) Option { return func(s *Strategy) { s.log = l } }

// WithCounters sets where directives are counted.
func WithCounters(c *Counters) Option { return func(s *Strategy) { s.counters = c } }

// WithOnGiveUp sets a callback run when a child exhausted its restart budget
// and is stopped instead (e.g. the gateway root exits non-zero).
func WithOnGiveUp(f func(child *actor.PID, reason any)) Option {
	return func(s *Strategy) { s.onGiveUp = f }
}

// OneForOne returns a strategy applying decide to a failing child only.
// A child restarted more than maxRestarts times within window is stopped.
func OneForOne(maxRestarts int, window time.Duration, decide actor.DeciderFunc, opts ...Option) *Strategy {
	s := &Strategy{maxRestarts: maxRestarts, window: window, decide: decide, log: zerolog.Nop(), counters: NewCounters()}
	for _, o := range opts {
		o(s)
	}
	return s
}

// StopOnFailure is the decider for leaves (conn/N, query/N, relay/N): a
// failing leaf is stopped, never restarted; its siblings are untouched.
func StopOnFailure(any) actor.Directive { return actor.StopDirective }

// RestartOnFailure is the decider for long-lived children (listeners,
// sandboxes): restart with state reloaded.
func RestartOnFailure(any) actor.Directive { return actor.RestartDirective }

// Counters returns the strategy's counters.
func (s *Strategy) Counters() *Counters { return s.counters }

// HandleFailure implements actor.SupervisorStrategy.
func (s *Strategy) HandleFailure(_ *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, rs *actor.RestartStatistics, reason any, message any) {
	d := s.decide(reason)
	gaveUp := false
	if d == actor.RestartDirective {
		rs.Fail()
		if s.maxRestarts == 0 || rs.NumberOfFailures(s.window) > s.maxRestarts {
			rs.Reset()
			d, gaveUp = actor.StopDirective, true
		}
	}
	kind := Kind(child)
	s.counters.Add(kind, d)
	ev := s.log.Warn()
	if gaveUp {
		ev = s.log.Error().Bool("restart_budget_exhausted", true)
	}
	ev.Str("child", child.GetId()).
		Str("kind", kind).
		Str("directive", DirectiveName(d)).
		Str("reason", fmt.Sprint(reason)).
		Str("message_type", fmt.Sprintf("%T", message)).
		Msg("supervisor directive")
	switch d {
	case actor.ResumeDirective:
		sup.ResumeChildren(child)
	case actor.RestartDirective:
		sup.RestartChildren(child)
	case actor.StopDirective:
		sup.StopChildren(child)
	case actor.EscalateDirective:
		sup.EscalateFailure(reason, message)
	}
	if gaveUp && s.onGiveUp != nil {
		s.onGiveUp(child, reason)
	}
}

// PanicStack returns a receiver middleware that logs the stack of a panic in
// an actor's Receive and re-panics with the same value, so supervision sees
// the original reason and operators see where it came from.
func PanicStack(log zerolog.Logger) actor.ReceiverMiddleware {
	return func(next actor.ReceiverFunc) actor.ReceiverFunc {
		return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
			defer func() {
				if r := recover(); r != nil {
					log.Error().
						Str("actor", c.Self().GetId()).
						Str("message_type", fmt.Sprintf("%T", env.Message)).
						Str("panic", fmt.Sprint(r)).
						Str("stack", string(debug.Stack())).
						Msg("actor panicked")
					panic(r)
				}
			}()
			next(c, env)
		}
	}
}
