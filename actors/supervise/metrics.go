package supervise

import "github.com/prometheus/client_golang/prometheus"

var directivesDesc = prometheus.NewDesc("stockade_supervisor_directives_total",
	"Supervision directives applied to failing actors, by actor kind and directive.",
	[]string{"kind", "directive"}, nil)

// Describe implements prometheus.Collector.
func (c *Counters) Describe(ch chan<- *prometheus.Desc) { ch <- directivesDesc }

// Collect implements prometheus.Collector.
func (c *Counters) Collect(ch chan<- prometheus.Metric) {
	for k, v := range c.Snapshot() {
		ch <- prometheus.MustNewConstMetric(directivesDesc, prometheus.CounterValue, float64(v), k.Kind, k.Directive)
	}
}
