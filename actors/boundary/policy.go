package boundary

import (
	"context"

	"github.com/stockade-dev/stockade/boundary/dnsproxy"
	"github.com/stockade-dev/stockade/policy"
)

// PolicyDecider adapts the versioned policy engine to the boundary's
// Decider: each decision runs on the version current when it starts.
func PolicyDecider(e *policy.Engine) Decider { return engineDecider{e} }

type engineDecider struct{ e *policy.Engine }

func (d engineDecider) DecideConnect(ctx context.Context, q ConnectQuery) ConnectVerdict {
	v := d.e.DecideNetwork(ctx, policy.NetworkInput{
		Host: q.Host, Port: uint16(q.Port), Exe: q.Exe, Ancestors: q.Ancestors, IdentityNone: q.IdentityNone,
	})
	return ConnectVerdict{Allow: v.Allow, Reason: v.Reason, Policy: v.Policy, PolicyName: v.PolicyName, Message: v.Message,
		Version: v.Version, AllowedIPs: v.AllowedIPs, ExactHost: v.ExactHost}
}

func (d engineDecider) DecideDNS(ctx context.Context, name string, qtype uint16) dnsproxy.Verdict {
	v := d.e.DecideDNS(ctx, policy.DNSInput{Name: name, QType: qtype})
	return dnsproxy.Verdict{Allow: v.Allow, Reason: v.Reason, Policy: v.Policy, PolicyName: v.PolicyName, Version: v.Version, Message: v.Message}
}
