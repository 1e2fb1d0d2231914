package boundary

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockade-dev/stockade/boundary/identity"
)

var (
	statsDesc = prometheus.NewDesc("stockade_boundary_events_total",
		"Boundary events: conns and queries received, decisions allowed and denied, malformed requests, failed leaf actors, conn and query actors spawned.",
		[]string{"event"}, nil)
	idleDesc = prometheus.NewDesc("stockade_boundary_idle_conn_actors",
		"Conn actors waiting for their next connection.", nil, nil)
)

// Describe implements prometheus.Collector.
func (s *Stats) Describe(ch chan<- *prometheus.Desc) { ch <- statsDesc; ch <- idleDesc }

// Collect implements prometheus.Collector.
func (s *Stats) Collect(ch chan<- prometheus.Metric) {
	for _, e := range []struct {
		name string
		v    int64
	}{
		{"conn", s.Conns.Load()}, {"query", s.Queries.Load()}, {"allowed", s.Allowed.Load()},
		{"denied", s.Denied.Load()}, {"malformed", s.Malformed.Load()}, {"fault", s.Faults.Load()},
		{"conn_actor", s.ConnActors.Load()}, {"query_actor", s.QueryActors.Load()},
	} {
		ch <- prometheus.MustNewConstMetric(statsDesc, prometheus.CounterValue, float64(e.v), e.name)
	}
	ch <- prometheus.MustNewConstMetric(idleDesc, prometheus.GaugeValue, float64(s.IdleConns.Load()))
}

var identityDesc = prometheus.NewDesc("stockade_identity_connections_total",
	"Connections the boundary's resolver identified, by how: from the connect recorded in the kernel (record) or through sock_diag and the processes' descriptors (sock_diag).",
	[]string{"source"}, nil)

// IdentitySources collects a resolver's identity.Sources (a
// prometheus.Collector): whether the connect records answer, for an
// operator.
type IdentitySources func() identity.Sources

// Describe implements prometheus.Collector.
func (f IdentitySources) Describe(ch chan<- *prometheus.Desc) { ch <- identityDesc }

// Collect implements prometheus.Collector.
func (f IdentitySources) Collect(ch chan<- prometheus.Metric) {
	s := f()
	ch <- prometheus.MustNewConstMetric(identityDesc, prometheus.CounterValue, float64(s.Records), "record")
	ch <- prometheus.MustNewConstMetric(identityDesc, prometheus.CounterValue, float64(s.SockDiag), "sock_diag")
}
