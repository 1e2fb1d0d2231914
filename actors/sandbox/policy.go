package sandbox

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade-dev/stockade/actors/sandbox/lifecycle"
	"github.com/stockade-dev/stockade/audit"
	"github.com/stockade-dev/stockade/errdefs"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/policy"
	"github.com/stockade-dev/stockade/policy/reason"
	"github.com/stockade-dev/stockade/store"
	"github.com/stockade-dev/stockade/transport"
)

// pushTimeout bounds how long `policy set` waits for the supervisor.
const pushTimeout = 5 * time.Second

// policyRequest gets or sets (hot reload) the sandbox's policy, asked for
// by by. A set is saved first (the next supervisor starts with it, and
// the record names who set it), audited, then pushed to the running
// supervisor; a supervisor that misses the push gets it when it says
// Hello with an older version.
func (a *sandboxActor) policyRequest(ctx actor.Context, m *messages.PolicyRequest, caller Caller) {
	by := caller.String()
	if len(m.Policy) == 0 {
		ctx.Respond(a.policyGet(m.Rev))
		return
	}
	if a.m.Phase() == lifecycle.PhaseDeleting {
		ctx.Respond(errdefs.Reply(errdefs.Refused("sandbox %s is Deleting: policy set works in every other phase", a.name)))
		return
	}
	pol, err := checkPolicy(m.File, m.Policy)
	if err != nil {
		ctx.Respond(errdefs.Reply(err))
		return
	}
	if !a.checkPolicySet(ctx, m, pol, caller) {
		return
	}
	// Persist, then apply: the new version goes into a copy of the record,
	// which replaces the live one only once it is on disk.
	rec := a.rec
	spec := &rec.Spec
	old := store.PolicyRev{Version: spec.PolicyVersion, Policy: spec.Policy, Until: time.Now(), By: spec.PolicyBy}
	spec.PolicyHistory = append(slices.Clone(spec.PolicyHistory), old)
	if n := len(spec.PolicyHistory); n > store.PolicyHistoryLen {
		spec.PolicyHistory = spec.PolicyHistory[n-store.PolicyHistoryLen:]
	}
	spec.Policy, spec.PolicyVersion, spec.PolicyBy = string(m.Policy), spec.PolicyVersion+1, by
	rec.Lifecycle = a.m.Snapshot()
	rev, err := a.put(rec)
	if err != nil {
		ctx.Respond(errdefs.Reply(errdefs.Unavailable("sandbox %s: policy not set: %w (the current version stays; retry)", a.name, err)))
		a.conflicted(err)
		return
	}
	rec.Revision = rev
	a.rec = rec
	spec = &a.rec.Spec
	a.env.Log.Info().Str("sandbox", a.name).Uint64("policy_version", spec.PolicyVersion).Str("by", by).Msg("policy saved")
	a.recordPolicy(old.Version, spec.PolicyVersion, by)
	ctx.Send(ctx.Parent(), &statusUpdate{status: a.status()})
	v := spec.PolicyVersion
	if a.supRemote == nil {
		ctx.Respond(&messages.Reply{Status: messages.Status_STATUS_OK, PolicyVersion: v,
			Message: fmt.Sprintf("sandbox %s: policy version %d saved; no supervisor runs now: it applies when one starts", a.name, v)})
		return
	}
	client := ctx.Sender()
	f := transport.Request(ctx, a.supRemote, a.setPolicy(), pushTimeout, a.supervisorID())
	ctx.ReenterAfter(f, func(res any, err error) {
		r, ok := res.(*messages.Reply)
		switch {
		case err == nil && ok && r.Status == messages.Status_STATUS_OK:
			ctx.Send(client, &messages.Reply{Status: messages.Status_STATUS_OK, PolicyVersion: v,
				Message: fmt.Sprintf("sandbox %s: policy version %d live (network rules now; filesystem, landlock and stockade.allow_ptrace at the next start)", a.name, v)})
		case err == nil && ok:
			refused := errdefs.Reply(errdefs.Internal("sandbox %s: policy version %d saved but the supervisor refused it: %s", a.name, v, r.Message))
			refused.PolicyVersion = v
			ctx.Send(client, refused)
		default:
			ctx.Send(client, &messages.Reply{Status: messages.Status_STATUS_OK, PolicyVersion: v,
				Message: fmt.Sprintf("sandbox %s: policy version %d saved; the supervisor did not confirm (%v): it gets it when its session is back", a.name, v, err)})
		}
	})
}

// checkPolicy validates a policy file's content (file names it in the
// positions; default policy.yaml) and returns it parsed; the error lists
// every problem with its line:col.
func checkPolicy(file string, data []byte) (*policy.Policy, error) {
	if file == "" {
		file = "policy.yaml"
	}
	pol, err := policy.Parse(file, data)
	if err != nil {
		var list policy.ErrorList
		if errors.As(err, &list) {
			return nil, errdefs.Invalid("invalid policy:\n%v", list)
		}
		return nil, errdefs.Invalid("invalid policy: %w", err)
	}
	return pol, nil
}

func (a *sandboxActor) setPolicy() *messages.SetPolicy {
	return &messages.SetPolicy{Sandbox: a.name, Instance: a.rec.InstanceID, Policy: []byte(a.rec.Spec.Policy), Version: a.rec.Spec.PolicyVersion}
}

func (a *sandboxActor) policyGet(rev uint64) *messages.Reply {
	spec := a.rec.Spec
	if rev == 0 || rev == spec.PolicyVersion {
		return &messages.Reply{Status: messages.Status_STATUS_OK, PolicyVersion: spec.PolicyVersion, Policy: []byte(spec.Policy)}
	}
	kept := []string{}
	for _, h := range spec.PolicyHistory {
		if h.Version == rev {
			return &messages.Reply{Status: messages.Status_STATUS_OK, PolicyVersion: h.Version, Policy: []byte(h.Policy)}
		}
		kept = append(kept, fmt.Sprint(h.Version))
	}
	kept = append(kept, fmt.Sprint(spec.PolicyVersion))
	return errdefs.Reply(errdefs.NotFound("sandbox %s has no policy version %d (kept: %s)", a.name, rev, strings.Join(kept, ", ")))
}

// recordPolicy audits a policy change (a lifecycle event: `sandbox logs`
// shows it among the transitions) with who set it.
func (a *sandboxActor) recordPolicy(from, to uint64, by string) {
	if a.audit == nil {
		return
	}
	e := audit.NewDecisionAt(a.env.Clock.Now(), audit.ClassLifecycle, true, reason.None)
	e.ActivityName = "PolicySet"
	e.Sandbox = a.name
	e.Policy.Version = to
	e.Message = fmt.Sprintf("policy version %d -> %d by %s", from, to, by)
	e.Unmapped = map[string]string{"by": by}
	a.audit.Record(e)
}
