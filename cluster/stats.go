package cluster

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Stats counts what a node's membership did; it is a prometheus.Collector
// (the gateway serves it on --metrics). Safe for concurrent use.
type Stats struct {
	fencedWrites atomic.Int64
	claims       atomic.Int64
	selfFences   atomic.Int64
	leaseLosses  atomic.Int64
	refused      atomic.Int64
}

// NewStats returns zeroed counters.
func NewStats() *Stats { return &Stats{} }

// FencedWrites counts record writes refused by the fencing check (at etcd,
// or before it because the node's lease was not renewed in time).
func (s *Stats) FencedWrites() int64 { return s.fencedWrites.Load() }

// Claims counts the sandboxes the node claimed (creates not included).
func (s *Stats) Claims() int64 { return s.claims.Load() }

// SelfFences counts the times the node stopped driving because its lease
// was not renewed in time.
func (s *Stats) SelfFences() int64 { return s.selfFences.Load() }

// LeaseLosses counts the leases etcd expired under the node (it joined
// again with a new one).
func (s *Stats) LeaseLosses() int64 { return s.leaseLosses.Load() }

// Refused counts the etcd keys under the cluster's prefix the node refused
// to act on (a name that is not a sandbox's, a record that does not
// validate): written by someone who is not a node.
func (s *Stats) Refused() int64 { return s.refused.Load() }

func statsDescs() map[string]*prometheus.Desc {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return map[string]*prometheus.Desc{
		"fenced":  d("stockade_cluster_fenced_writes_total", "Record writes of this node refused by the fencing check (not the owner, or its lease not renewed in time)."),
		"claims":  d("stockade_cluster_claims_total", "Sandboxes this node claimed from a lost or absent owner."),
		"fences":  d("stockade_cluster_self_fences_total", "Times this node stopped driving its sandboxes because its lease was not renewed in time."),
		"lleases": d("stockade_cluster_lease_losses_total", "Leases etcd expired under this node (it joined again)."),
		"refused": d("stockade_cluster_refused_keys_total", "Keys under the cluster's prefix this node refused to act on (not what a node writes)."),
	}
}

// Describe implements prometheus.Collector.
func (s *Stats) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range statsDescs() {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (s *Stats) Collect(ch chan<- prometheus.Metric) {
	d := statsDescs()
	ch <- prometheus.MustNewConstMetric(d["fenced"], prometheus.CounterValue, float64(s.FencedWrites()))
	ch <- prometheus.MustNewConstMetric(d["claims"], prometheus.CounterValue, float64(s.Claims()))
	ch <- prometheus.MustNewConstMetric(d["fences"], prometheus.CounterValue, float64(s.SelfFences()))
	ch <- prometheus.MustNewConstMetric(d["lleases"], prometheus.CounterValue, float64(s.LeaseLosses()))
	ch <- prometheus.MustNewConstMetric(d["refused"], prometheus.CounterValue, float64(s.Refused()))
}
