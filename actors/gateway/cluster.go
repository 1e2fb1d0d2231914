package gateway

import (
	"github.com/stockade-dev/stockade/actors/sandbox"
	"github.com/stockade-dev/stockade/cluster"
)

// clusterView adapts a cluster node to the sandbox actors' Cluster seam.
type clusterView struct{ n *cluster.Node }

var _ sandbox.Cluster = clusterView{}

func (v clusterView) Self() string          { return v.n.Self().Node }
func (v clusterView) Owns(name string) bool { return v.n.Owns(name) }
func (v clusterView) Owned() []string       { return v.n.Owned() }

func (v clusterView) Place(name string) (string, string) {
	p := v.n.Place(name)
	return p.Node, p.API
}

func (v clusterView) Locate(name string) sandbox.Location { return location(v.n.Locate(name)) }

func (v clusterView) List() []sandbox.Location {
	all := v.n.Sandboxes()
	out := make([]sandbox.Location, len(all))
	for i, w := range all {
		out[i] = location(w)
	}
	return out
}

// Gateways are the live nodes' API addresses, this node's first.
func (v clusterView) Gateways() []string {
	self := v.n.Self()
	out := []string{self.API}
	for _, n := range v.n.Nodes() {
		if n.Node != self.Node && n.API != "" {
			out = append(out, n.API)
		}
	}
	return out
}

func location(w cluster.Whereabouts) sandbox.Location {
	l := sandbox.Location{Record: w.Record, Exists: w.Exists, HostAlive: w.HostAlive}
	if w.HasOwner {
		l.OwnerNode, l.OwnerAPI = w.Owner.Node, w.Owner.API
	} else if w.Owner.Node != "" {
		l.OwnerNode = w.Owner.Node // its node is gone; the key expires with its lease
	}
	return l
}

// ownershipOf converts a cluster event to the sandboxes actor's message.
func ownershipOf(e cluster.Event) *sandbox.Ownership {
	switch e.Kind {
	case cluster.Own:
		return &sandbox.Ownership{Kind: sandbox.Own, Sandbox: e.Sandbox}
	case cluster.Disown:
		return &sandbox.Ownership{Kind: sandbox.Disown, Sandbox: e.Sandbox}
	default:
		return &sandbox.Ownership{Kind: sandbox.Fenced}
	}
}
