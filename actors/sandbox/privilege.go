package sandbox

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/policy"
	"github.com/stockade-dev/stockade/sandbox/cgroup"
	"github.com/stockade-dev/stockade/store"
)

// What a client that is not an admin may not ask for, beyond its role's
// table (package access):
//
//   - Limits: no limit (-1 or none) for any of a sandbox's limits, and a
//     limit above the gateway's default (Env.limits). The gateway's
//     defaults are an operator's maximums: it may ask for less, or leave a
//     limit to the default. A larger sandbox is an admin's to create (and
//     to grant to an operator).
//   - Policy: stockade.allow_ptrace turned on, at create or policy set (a
//     policy set that keeps it on, where an admin turned it on, is the
//     operator's to make).
//   - Names granted to another client (an operator's --sandbox): only an
//     admin, or the name's only grantee, creates them. A grant names a
//     sandbox name, not one creation: a sandbox deleted and created again
//     under that name is granted again, and since only an admin or its
//     grantee may create it, no other operator can slip its own in.
//   - More sandboxes than Env.MaxSandboxesPerClient created by it at
//     once (the uid pool and the disk are shared).

// DefaultMaxSandboxesPerClient is how many sandboxes one client that is
// not an admin may have at once by default (gateway run
// --max-sandboxes-per-client).
const DefaultMaxSandboxesPerClient = 32

// maxPerClient is the quota in force (0: none).
func (e *Env) maxPerClient() int {
	switch {
	case e.MaxSandboxesPerClient < 0:
		return 0
	case e.MaxSandboxesPerClient == 0:
		return DefaultMaxSandboxesPerClient
	}
	return e.MaxSandboxesPerClient
}

// limitField is one of a sandbox's limits as the CLI names it.
type limitField struct {
	flag       string
	none       string // how the flag says "no limit"
	asked, def float64
	bytes      bool
}

func (f limitField) format(v float64) string {
	if f.bytes {
		return cgroup.FormatBytes(int64(v))
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// limitFields are asked and def, field by field.
func limitFields(asked, def store.Limits) []limitField {
	return []limitField{
		{flag: "--pids", none: "-1", asked: float64(asked.Pids), def: float64(def.Pids)},
		{flag: "--memory", none: "none", asked: float64(asked.MemoryBytes), def: float64(def.MemoryBytes), bytes: true},
		{flag: "--cpus", none: "-1", asked: asked.CPUs, def: def.CPUs},
		{flag: "--io-bps", none: "none", asked: float64(asked.IOBps), def: float64(def.IOBps), bytes: true},
		{flag: "--log-size", none: "none", asked: float64(asked.LogBytes), def: float64(def.LogBytes), bytes: true},
		{flag: "--log-rate", none: "-1", asked: float64(asked.LogLinesPerSec), def: float64(def.LogLinesPerSec)},
		{flag: "--log-burst", none: "-1", asked: float64(asked.LogBurst), def: float64(def.LogBurst)},
	}
}

// adminOnlyLimits lists the limits of asked only an admin may ask for,
// with why, given the gateway's defaults def: no limit, or above def (where
// def has a limit).
func adminOnlyLimits(asked, def store.Limits) []string {
	var out []string
	for _, f := range limitFields(asked, def) {
		switch {
		case f.asked < 0:
			out = append(out, fmt.Sprintf("%s %s (no limit)", f.flag, f.none))
		case f.asked > 0 && f.def > 0 && f.asked > f.def:
			out = append(out, fmt.Sprintf("%s %s (above the gateway's default, %s)", f.flag, f.format(f.asked), f.format(f.def)))
		}
	}
	return out
}

// defaultsText lists the defaults def as an operator's maximums.
func defaultsText(def store.Limits) string {
	var parts []string
	for _, f := range limitFields(def, def) {
		v := "no limit"
		if f.def > 0 {
			v = f.format(f.def)
		}
		parts = append(parts, f.flag+" "+v)
	}
	return strings.Join(parts, ", ")
}

// ptraceAsk is the admin-only setting of a policy that turns
// stockade.allow_ptrace on (none when it does not, or was on already).
func ptraceAsk(pol *policy.Policy, wasOn bool) []string {
	if pol == nil || !pol.Stockade.AllowPtrace || wasOn {
		return nil
	}
	return []string{"stockade.allow_ptrace: true (the sandbox's processes may then ptrace and write each other's memory: the binaries rule cannot tell who speaks)"}
}

// allowsPtrace reports whether a stored policy turns
// stockade.allow_ptrace on (false for one that does not parse).
func allowsPtrace(stored string) bool {
	pol, err := policy.Parse("policy.yaml", []byte(stored))
	return err == nil && pol.Stockade.AllowPtrace
}

// checkCreate refuses what by, a caller that is not an admin, may not
// create (the comment at the top of this file): admin-only limits or
// policy, a name granted to another client, a quota used up. The refusal
// is logged within the gateway's bound and answered Refused (exit 4); it
// reports whether the create may go on.
func (a *sandboxesActor) checkCreate(ctx actor.Context, m *messages.CreateRequest, pol *policy.Policy, asked store.Limits, by Caller) bool {
	if by.Admin() {
		return true
	}
	req, _ := RequestOf(m)
	auth := a.env.authority()
	def := a.env.limits()
	asks := append(adminOnlyLimits(asked, def), ptraceAsk(pol, false)...)
	instead := "ask for at most the gateway's defaults, or leave a flag unset for its default (" + defaultsText(def) +
		"), and no stockade.allow_ptrace; or have an admin client create the sandbox (and grant it to this client)"
	if err := by.Grant.CheckAdminOnly(by.String(), "create sandbox "+m.Name, asks, instead); err != nil {
		auth.Refuse(ctx, by, req, err)
		return false
	}
	if a.env.Clients != nil {
		holders := slices.DeleteFunc(a.env.Clients.GrantedTo(m.Name), func(n string) bool { return n == by.ID.Name })
		if len(holders) > 0 {
			auth.Refuse(ctx, by, req, fmt.Errorf("%s may not create sandbox %s: that name is granted to client %s (stockade client list shows grants), so only an admin client, or a client that is its only grantee, may create it; pick another name",
				by, m.Name, strings.Join(holders, ", client ")))
			return false
		}
	}
	if max := a.env.maxPerClient(); max > 0 {
		if names := a.createdBy(by.String()); len(names) >= max {
			auth.Refuse(ctx, by, req, fmt.Errorf("%s already has %d sandboxes (%s), this gateway's most for a client that is not an admin (gateway run --max-sandboxes-per-client): delete one first, or have an admin client create it",
				by, len(names), strings.Join(names, ", ")))
			return false
		}
	}
	return true
}

// createdBy names the sandboxes by created that this node knows of: its
// own actors' (creates in flight included) and, in a cluster, the view's.
func (a *sandboxesActor) createdBy(by string) []string {
	var names []string
	for name, creator := range a.creators {
		if creator == by {
			names = append(names, name)
		}
	}
	if a.env.Cluster != nil {
		for _, loc := range a.env.Cluster.List() {
			if loc.Record.Spec.CreatedBy == by {
				names = append(names, loc.Record.Spec.Name)
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// checkPolicySet refuses a policy set by a caller that is not an admin
// that turns stockade.allow_ptrace on; it reports whether the set may go
// on.
func (a *sandboxActor) checkPolicySet(ctx actor.Context, m *messages.PolicyRequest, pol *policy.Policy, by Caller) bool {
	if by.Admin() {
		return true
	}
	asks := ptraceAsk(pol, allowsPtrace(a.rec.Spec.Policy))
	err := by.Grant.CheckAdminOnly(by.String(), "set the policy of sandbox "+a.name, asks,
		"set a policy without stockade.allow_ptrace (the current version stays), or have an admin client set it")
	if err != nil {
		req, _ := RequestOf(m)
		req.Sandbox, req.CreatedBy = a.name, a.rec.Spec.CreatedBy
		a.env.authority().Refuse(ctx, by, req, err)
		return false
	}
	return true
}
