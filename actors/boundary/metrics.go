package boundary

import "github.com/prometheus/client_golang/prometheus"

var statsDesc = prometheus.NewDesc("stockade_boundary_events_total",
	"Boundary events: conns and queries received, decisions allowed and denied, malformed requests, failed leaf actors.",
	[]string{"event"}, nil)

// Describe implements prometheus.Collector.
func (s *Stats) Describe(ch chan<- *prometheus.Desc) { ch <- statsDesc }

// Collect implements prometheus.Collector.
func (s *Stats) Collect(ch chan<- prometheus.Metric) {
	for _, e := range []struct {
		name string
		v    int64
	}{
		{"conn", s.Conns.Load()}, {"query", s.Queries.Load()}, {"allowed", s.Allowed.Load()},
		{"denied", s.Denied.Load()}, {"malformed", s.Malformed.Load()}, {"fault", s.Faults.Load()},
	} {
		ch <- prometheus.MustNewConstMetric(statsDesc, prometheus.CounterValue, float64(e.v), e.name)
	}
}
