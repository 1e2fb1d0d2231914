package policy

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/metrics"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/topdown"
	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/policy/reason"
)

// DefaultCacheSize is the default bound of each version's decision cache.
const DefaultCacheSize = 4096

// NetworkInput is what a network decision is about. Host is normalised by
// the engine (lower case, trailing dot removed).
type NetworkInput struct {
	Host string
	Port uint16
	// Exe is the peer's /proc/<pid>/exe; Ancestors its parent chain.
	Exe       string
	Ancestors []string
	// IdentityNone: the peer has no identity (--identity none). Binaries
	// are ignored (endpoint-only matching) and the message says so.
	IdentityNone bool
}

// DNSInput is what a DNS decision is about. Name is normalised like Host.
type DNSInput struct {
	Name  string
	QType uint16
}

// Decision is the engine's answer. A Decision may be shared with the
// decision cache: treat it, AllowedIPs included, as read-only.
type Decision struct {
	Allow  bool
	Reason reason.Code
	// Policy is the network_policies key of the matched policy, "-" if
	// none (OpenShell reports the key too).
	Policy string
	// PolicyName is that policy's name field when it differs from its key
	// (empty otherwise, and when no policy matched).
	PolicyName string
	Message    string
	// Version is the policy version that decided (0: no policy).
	Version uint64
	// For an allowed network decision, the boundary's destination check:
	// a private (RFC 1918) destination needs AllowedIPs unless ExactHost.
	// AllowedIPs is the union over the allowing endpoints; ExactHost is true
	// when any allowing endpoint names the host exactly (not by wildcard).
	AllowedIPs []netip.Prefix
	ExactHost  bool
}

// Option configures an Engine.
type Option func(*Engine)

// WithLogger sets the logger (default zerolog.Nop()).
func WithLogger(l zerolog.Logger) Option { return func(e *Engine) { e.log = l } }

// WithFaults sets the fault injector consulted (fault.PolicyDecide) at the
// start of every uncached decision (default fault.Nop{}).
func WithFaults(f fault.Injector) Option { return func(e *Engine) { e.faults = f } }

// WithCacheSize bounds each version's decision cache; 0 disables caching.
func WithCacheSize(n int) Option { return func(e *Engine) { e.cacheSize = max(n, 0) } }

// withoutIndex makes OPA answer every decision (no decision index): the
// reference side of the differential test and the OPA-only benchmark.
func withoutIndex() Option { return func(e *Engine) { e.noIndex = true } }

// Engine answers network and DNS decisions for the current policy version.
// Load swaps in a new version atomically; a decision runs to its end on the
// snapshot it started with. All methods are safe for concurrent use.
type Engine struct {
	log       zerolog.Logger
	faults    fault.Injector
	cacheSize int
	noIndex   bool
	compiler  *ast.Compiler
	moduleErr error
	keys      *inputKeys

	loadMu  sync.Mutex // serialises Load so versions follow load order
	version uint64     // last version handed out; guarded by loadMu
	cur     atomic.Pointer[snapshot]
}

// snapshot is one immutable policy version.
type snapshot struct {
	version uint64
	policy  *Policy
	*compiled
	cache    *decisionCache
	noCancel topdown.Cancel
}

// NewEngine returns an Engine with no policy: every decision denies
// policy_unavailable until a Load succeeds.
func NewEngine(opts ...Option) *Engine {
	e := &Engine{log: zerolog.Nop(), faults: fault.Nop{}, cacheSize: DefaultCacheSize, keys: newInputKeys()}
	for _, o := range opts {
		o(e)
	}
	e.compiler, e.moduleErr = compileModule()
	return e
}

// Load parses, validates and compiles a policy. A valid policy becomes
// version N+1 atomically and the version is returned. An invalid one
// returns its ErrorList (or a compile error) and the current version stays.
func (e *Engine) Load(file string, data []byte) (uint64, error) {
	return e.load(file, data, 0)
}

// LoadVersion is Load with the version chosen by the caller (the gateway
// owns a sandbox's policy revisions); it must be newer than the current.
func (e *Engine) LoadVersion(file string, data []byte, version uint64) (uint64, error) {
	if version == 0 {
		return 0, fmt.Errorf("policy %s: version 0 is not a version", file)
	}
	return e.load(file, data, version)
}

func (e *Engine) load(file string, data []byte, version uint64) (uint64, error) {
	pol, err := Parse(file, data)
	if err != nil {
		e.log.Warn().Str("file", file).Err(err).Msg("policy rejected; keeping the current version")
		return 0, err
	}
	return e.install(pol, version)
}

// install compiles a parsed policy (once: its queries and decision index)
// and makes it the current version.
func (e *Engine) install(pol *Policy, version uint64) (uint64, error) {
	file := pol.File
	if e.moduleErr != nil {
		return 0, e.moduleErr
	}
	e.loadMu.Lock()
	defer e.loadMu.Unlock()
	c, err := compile(context.Background(), e.compiler, pol, !e.noIndex)
	if err != nil {
		err = fmt.Errorf("policy %s: %w", file, err)
		e.log.Error().Err(err).Msg("policy compile failed; keeping the current version")
		return 0, err
	}
	if c.indexErr != nil {
		e.log.Warn().Str("file", file).Err(c.indexErr).Msg("no decision index for this policy; OPA decides alone")
	}
	switch {
	case version == 0:
		e.version++
	case version <= e.version:
		return 0, fmt.Errorf("policy %s: version %d is not newer than the current %d", file, version, e.version)
	default:
		e.version = version
	}
	e.cur.Store(&snapshot{version: e.version, policy: pol, compiled: c, cache: newDecisionCache(e.cacheSize), noCancel: topdown.NewCancel()})
	e.log.Info().Str("file", file).Uint64("version", e.version).
		Int("network_policies", len(pol.NetworkPolicies)).Int("endpoints", pol.EndpointCount()).
		Int("not_enforced", len(pol.notices)).Msg("policy loaded")
	return e.version, nil
}

// Version returns the current policy version, 0 when none is loaded.
func (e *Engine) Version() uint64 {
	if s := e.cur.Load(); s != nil {
		return s.version
	}
	return 0
}

// Current returns the current parsed policy and its version (nil, 0 when
// none is loaded). The policy is shared: do not modify it.
func (e *Engine) Current() (*Policy, uint64) {
	if s := e.cur.Load(); s != nil {
		return s.policy, s.version
	}
	return nil, 0
}

// DecideNetwork decides whether a connection to Host:Port from Exe (or any
// ancestor) is allowed. It fails closed: no policy -> policy_unavailable;
// an injected fault or an evaluation error (e.g. ctx already done) ->
// boundary_fault, not cached. An injected panic propagates to the caller.
func (e *Engine) DecideNetwork(ctx context.Context, in NetworkInput) Decision {
	in.Host = normalizeName(in.Host)
	return e.decide(ctx, cacheKey{host: in.Host, port: in.Port, exe: in.Exe, ancestors: in.Ancestors, identityNone: in.IdentityNone})
}

// DecideDNS decides whether a DNS name may be resolved: it must be an
// endpoint host of some policy, or match a host pattern (host-less
// allowed_ips endpoints make no name eligible). Failure modes
// are those of DecideNetwork.
func (e *Engine) DecideDNS(ctx context.Context, in DNSInput) Decision {
	in.Name = normalizeName(in.Name)
	return e.decide(ctx, cacheKey{dns: true, host: in.Name, port: in.QType})
}

// decide answers the decision key (its full input) from the current
// snapshot's cache, or on a miss from the decision index, or from OPA
// when the version has no index.
func (e *Engine) decide(ctx context.Context, key cacheKey) Decision {
	s := e.cur.Load()
	if s == nil {
		return Decision{Reason: reason.PolicyUnavailable, Policy: "-", Message: "no valid policy is loaded; everything is denied"}
	}
	if d, ok := s.cache.get(&key); ok {
		return d
	}
	if err := e.faults.Inject(fault.PolicyDecide); err != nil {
		return s.fault(key, err)
	}
	if d, bad := s.controlChar(key); bad { // on a miss only: the hit path stays a lookup
		s.cache.put(&key, d)
		return d
	}
	// Decisions take microseconds: the context is checked once here (OPA
	// runs without its per-evaluation cancellation goroutine, see eval).
	if err := ctx.Err(); err != nil {
		return s.fault(key, fmt.Errorf("policy version %d: %w", s.version, err))
	}
	raw, err := e.answer(ctx, s, &key)
	if err != nil {
		e.log.Error().Err(err).Uint64("version", s.version).Str("decision", key.String()).Msg("policy evaluation failed")
		return s.fault(key, err)
	}
	d := s.finish(raw)
	s.cache.put(&key, d)
	return d
}

// answer is the decision object for key: the index's, or OPA's.
func (e *Engine) answer(ctx context.Context, s *snapshot, key *cacheKey) (rawDecision, error) {
	if key.dns {
		if s.index != nil {
			return s.index.dns(key.host), nil
		}
		return s.eval(ctx, s.dns, e.keys.dnsInput(DNSInput{Name: key.host, QType: key.port}))
	}
	in := NetworkInput{Host: key.host, Port: key.port, Exe: key.exe, Ancestors: key.ancestors, IdentityNone: key.identityNone}
	if s.index != nil {
		return s.index.network(&in), nil
	}
	return s.eval(ctx, s.network, e.keys.networkInput(in))
}

// controlChar denies a name holding a control character (NUL included):
// no policy host has one, and a pattern must not match across it
// (OpenShell fails such a decision closed).
func (s *snapshot) controlChar(key cacheKey) (Decision, bool) {
	name, bad := key.host, false
	for i := 0; i < len(name) && !bad; i++ { // bytes: control characters are ASCII
		bad = name[i] < 0x20 || name[i] == 0x7f
	}
	if !bad {
		return Decision{}, false
	}
	code := reason.EndpointNotAllowed
	if key.dns {
		code = reason.PolicyDNSIneligible
	}
	return Decision{Reason: code, Policy: "-", Version: s.version,
		Message: fmt.Sprintf("%q holds a control character; no policy host matches it", name)}, true
}

func (s *snapshot) fault(key cacheKey, err error) Decision {
	return Decision{Reason: reason.BoundaryFault, Policy: "-", Version: s.version,
		Message: fmt.Sprintf("policy decision for %s failed, denying: %v", key, err)}
}

// inputKeys are the input's object keys, built once per engine and shared
// read-only by every evaluation (OPA never mutates input terms).
type inputKeys struct {
	network, host, port, suffix, exec, path, ancestors, identity, mode, none, dns, name, qtype *ast.Term
}

func newInputKeys() *inputKeys {
	s := ast.StringTerm
	return &inputKeys{
		network: s("network"), host: s("host"), port: s("port"), suffix: s("suffix"),
		exec: s("exec"), path: s("path"), ancestors: s("ancestors"),
		identity: s("identity"), mode: s("mode"), none: s("none"),
		dns: s("dns"), name: s("name"), qtype: s("qtype"),
	}
}

func (k *inputKeys) networkInput(in NetworkInput) ast.Object {
	anc := make([]*ast.Term, len(in.Ancestors))
	for i, a := range in.Ancestors {
		anc[i] = ast.StringTerm(a)
	}
	items := [][2]*ast.Term{
		{k.network, ast.ObjectTerm(
			[2]*ast.Term{k.host, ast.StringTerm(in.Host)},
			[2]*ast.Term{k.port, ast.IntNumberTerm(int(in.Port))},
			[2]*ast.Term{k.suffix, ast.StringTerm(suffixOf(in.Host))},
		)},
		{k.exec, ast.ObjectTerm(
			[2]*ast.Term{k.path, ast.StringTerm(in.Exe)},
			[2]*ast.Term{k.ancestors, ast.ArrayTerm(anc...)},
		)},
	}
	if in.IdentityNone {
		items = append(items, [2]*ast.Term{k.identity, ast.ObjectTerm([2]*ast.Term{k.mode, k.none})})
	}
	return ast.NewObject(items...)
}

func (k *inputKeys) dnsInput(in DNSInput) ast.Object {
	return ast.NewObject([2]*ast.Term{k.dns, ast.ObjectTerm(
		[2]*ast.Term{k.name, ast.StringTerm(in.Name)},
		[2]*ast.Term{k.qtype, ast.IntNumberTerm(int(in.QType))},
		[2]*ast.Term{k.suffix, ast.StringTerm(suffixOf(in.Name))},
	)})
}

// eval runs a prepared query and reads its decision object straight from
// the AST (no JSON round trip).
func (s *snapshot) eval(ctx context.Context, q rego.PreparedEvalQuery, input ast.Value) (rawDecision, error) {
	// The caller checked ctx: OPA's per-evaluation cancellation goroutine
	// is replaced by s.noCancel (never cancelled), and metrics are off.
	rs, err := q.Eval(ctx, rego.EvalParsedInput(input), rego.EvalGenerateJSON(keepAST),
		rego.EvalMetrics(metrics.NoOp()), rego.EvalExternalCancel(s.noCancel))
	if err != nil {
		return rawDecision{}, fmt.Errorf("policy version %d: %w", s.version, err)
	}
	if len(rs) != 1 || len(rs[0].Expressions) != 1 {
		return rawDecision{}, fmt.Errorf("policy version %d: decision undefined", s.version)
	}
	t, _ := rs[0].Expressions[0].Value.(*ast.Term)
	var obj ast.Object
	if t != nil {
		obj, _ = t.Value.(ast.Object)
	}
	if obj == nil {
		return rawDecision{}, fmt.Errorf("policy version %d: decision is %v, not an object", s.version, t)
	}
	allow, ok1 := member[ast.Boolean](obj, "allow")
	code, ok2 := member[ast.String](obj, "reason")
	name, ok3 := member[ast.String](obj, "policy")
	msg, ok4 := member[ast.String](obj, "message")
	ids, ok5 := member[*ast.Array](obj, "endpoints")
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return rawDecision{}, fmt.Errorf("policy version %d: malformed decision %v", s.version, obj)
	}
	d := rawDecision{allow: bool(allow), reason: reason.Code(code), policy: string(name), message: string(msg), ids: make([]int, ids.Len())}
	for i := range d.ids {
		num, _ := ids.Elem(i).Value.(ast.Number)
		n, ok := num.Int()
		if !ok || n < 0 || n >= len(s.endpoints) {
			return rawDecision{}, fmt.Errorf("policy version %d: decision names unknown endpoint %v", s.version, ids.Elem(i))
		}
		d.ids[i] = n
	}
	return d, nil
}

// finish turns the decision object (OPA's or the index's) into a
// Decision: the policy's name beside its key, and the destination check
// of the allowing endpoints (each endpoint once, in the order named).
func (s *snapshot) finish(r rawDecision) Decision {
	d := Decision{Allow: r.allow, Reason: r.reason, Policy: r.policy, PolicyName: s.names[r.policy], Message: r.message, Version: s.version}
	for i, n := range r.ids {
		if slices.Contains(r.ids[:i], n) {
			continue
		}
		ep := s.endpoints[n]
		d.ExactHost = d.ExactHost || ep.exact
		if i == 0 {
			d.AllowedIPs = ep.allowedIPs // shared, read-only
			continue
		}
		for _, p := range ep.allowedIPs {
			if !slices.Contains(d.AllowedIPs, p) { // each range once
				d.AllowedIPs = append(slices.Clip(d.AllowedIPs), p)
			}
		}
	}
	return d
}

func keepAST(t *ast.Term, _ *rego.EvalContext) (any, error) { return t, nil }

// normalizeName lower-cases a host or DNS name and drops one trailing dot.
func normalizeName(s string) string {
	return strings.ToLower(strings.TrimSuffix(s, "."))
}
