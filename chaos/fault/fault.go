// Package fault owns stockade's fault-injection seam: named points in the
// code where a test or the chaos harness can make the next call fail with an
// error, a panic or a delay. Production code asks an Injector at each point;
// the zero Injector (Nop) never injects anything and costs one interface
// call. This is the one documented seam where fakes enter real code paths.
package fault

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Point names a place in the code where a fault can be injected.
type Point string

// The named injection points. Keep in sync with DESIGN.md's chaos section.
const (
	// IdentityLookup is the peer identity lookup of a mediated connection.
	IdentityLookup Point = "identity.lookup"
	// PolicyDecide is the policy decision of a connection or DNS query.
	PolicyDecide Point = "policy.decide"
	// DNSUpstream is the upstream resolution of an allowed DNS name.
	DNSUpstream Point = "dns.upstream"
	// DNSQuery is the start of a DNS query actor's work.
	DNSQuery Point = "dns.query"
	// ProxyAccept is the start of a proxy connection actor's work.
	ProxyAccept Point = "proxy.accept"
	// ProxyListen is the proxy listener actor: its start and each accepted
	// connection. An armed error makes the listener fail and restart until
	// its budget is spent (BoundaryFailed).
	ProxyListen Point = "proxy.listen"
	// SessionSilence is asked on each tick of the supervisor's session
	// actor; when it fires, that tick sends nothing (no heartbeat, no
	// Hello): error:N cuts the session for about N seconds.
	SessionSilence Point = "session.silence"
	// StoreWrite is asked before every gateway store write (error: the
	// write fails, nothing is written).
	StoreWrite Point = "store.write"
	// APIRequest is each client request the gateway's API actor takes
	// (a panic there is the API actor failing).
	APIRequest Point = "api.request"
	// StoreCommitted is asked right after a store write committed; kill
	// there is "the gateway died between its write and anything after".
	StoreCommitted Point = "store.committed"
	// SupervisorStart is asked by the gateway before it starts a
	// supervisor process; error makes that start fail (StartFailed).
	SupervisorStart Point = "supervisor.start"
)

// Kind says what an injected fault does.
type Kind int

// Fault kinds. Values are explicit and stable (they appear in reports).
const (
	KindNone  Kind = 0
	KindError Kind = 1
	KindPanic Kind = 2
	KindDelay Kind = 3
	// KindKill sends SIGKILL to this process: a crash at that exact point.
	KindKill Kind = 4
)

// String returns the kind's name.
func (k Kind) String() string {
	switch k {
	case KindNone:
		return "none"
	case KindError:
		return "error"
	case KindPanic:
		return "panic"
	case KindDelay:
		return "delay"
	case KindKill:
		return "kill"
	default:
		return fmt.Sprintf("kind(%d)", int(k))
	}
}

// ErrInjected is wrapped by every injected error.
var ErrInjected = errors.New("injected fault")

// Injector decides whether a fault fires at a point. Inject returns nil when
// nothing fires, an error wrapping ErrInjected for KindError, sleeps for
// KindDelay and panics for KindPanic.
type Injector interface {
	Inject(p Point) error
}

// Nop never injects anything.
type Nop struct{}

// Inject implements Injector.
func (Nop) Inject(Point) error { return nil }

// Rule arms a point with a fault. Skip lets that many calls pass first;
// Count limits how many times it then fires (0 = every time until
// disarmed).
type Rule struct {
	Kind  Kind
	Count int
	Skip  int
	Delay time.Duration
}

// Set is a concurrency-safe Injector whose rules tests and the chaos harness
// change at run time. It also counts how many faults fired per point.
type Set struct {
	mu    sync.Mutex
	rules map[Point]*Rule
	fired map[Point]int
}

// NewSet returns an empty Set.
func NewSet() *Set {
	return &Set{rules: map[Point]*Rule{}, fired: map[Point]int{}}
}

// Arm sets the rule for a point, replacing any earlier one.
func (s *Set) Arm(p Point, r Rule) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rc := r
	s.rules[p] = &rc
}

// Apply parses a rule (ParseRule's syntax) and arms it, or disarms its
// point for KIND off. It returns how often the point fired before.
func (s *Set) Apply(rule string) (fired int, err error) {
	p, r, err := ParseRule(rule)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fired = s.fired[p]
	if r.Kind == KindNone {
		delete(s.rules, p)
	} else {
		s.rules[p] = &r
	}
	return fired, nil
}

// Disarm removes the rule for a point.
func (s *Set) Disarm(p Point) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.rules, p)
}

// Fired returns how many faults fired at a point so far.
func (s *Set) Fired(p Point) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fired[p]
}

// Inject implements Injector.
func (s *Set) Inject(p Point) error {
	s.mu.Lock()
	r, ok := s.rules[p]
	if !ok || r.Kind == KindNone {
		s.mu.Unlock()
		return nil
	}
	if r.Skip > 0 {
		r.Skip--
		s.mu.Unlock()
		return nil
	}
	kind, delay := r.Kind, r.Delay
	if r.Count > 0 {
		r.Count--
		if r.Count == 0 {
			delete(s.rules, p)
		}
	}
	s.fired[p]++
	s.mu.Unlock()
	switch kind {
	case KindError:
		return fmt.Errorf("%s: %w", p, ErrInjected)
	case KindPanic:
		panic(fmt.Sprintf("injected panic at %s", p))
	case KindDelay:
		time.Sleep(delay)
	case KindKill:
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // never returns: the process is gone
	}
	return nil
}

// ParseRule parses "POINT=KIND[:COUNT][@SKIP]" as used by --fault flags,
// e.g. "identity.lookup=panic", "dns.upstream=error:3",
// "dns.upstream=delay/2s:1" or "store.committed=kill:1@4" (the fifth
// write kills the process). KIND is error, panic, delay/DURATION, kill or
// off.
func ParseRule(s string) (Point, Rule, error) {
	point, rest, ok := strings.Cut(s, "=")
	if !ok || point == "" || rest == "" {
		return "", Rule{}, fmt.Errorf("fault %q: want POINT=KIND[:COUNT][@SKIP], e.g. identity.lookup=panic", s)
	}
	var r Rule
	rest, skip, hasSkip := strings.Cut(rest, "@")
	kindStr, countStr, hasCount := strings.Cut(rest, ":")
	kindStr, delayStr, hasDelay := strings.Cut(kindStr, "/")
	switch kindStr {
	case "error":
		r.Kind = KindError
	case "panic":
		r.Kind = KindPanic
	case "kill":
		r.Kind = KindKill
	case "delay":
		r.Kind = KindDelay
	case "off":
		r.Kind = KindNone
	default:
		return "", Rule{}, fmt.Errorf("fault %q: kind %q is not one of error, panic, delay/DURATION, kill, off", s, kindStr)
	}
	if hasDelay != (r.Kind == KindDelay) {
		return "", Rule{}, fmt.Errorf("fault %q: only delay takes a duration, and it needs one (delay/2s)", s)
	}
	if hasDelay {
		d, err := time.ParseDuration(delayStr)
		if err != nil || d <= 0 {
			return "", Rule{}, fmt.Errorf("fault %q: delay %q is not a positive duration", s, delayStr)
		}
		r.Delay = d
	}
	num := func(what, v string) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("fault %q: %s %q is not a non-negative integer", s, what, v)
		}
		return n, nil
	}
	var err error
	if hasCount {
		if r.Count, err = num("count", countStr); err != nil {
			return "", Rule{}, err
		}
	}
	if hasSkip {
		if r.Skip, err = num("skip", skip); err != nil {
			return "", Rule{}, err
		}
	}
	return Point(point), r, nil
}
