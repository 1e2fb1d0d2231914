// Package harness owns the driver behind `make bench`: it builds stockade
// and the load generator, starts stockade's standalone boundary and its
// peers (tinyproxy for the HTTP CONNECT proxy, dnsmasq for DNS) on
// 127.0.0.1, runs every measurement several times (loadgen tunnels and
// bulk loads, dnsperf, the Go benchmarks of policy and identity), takes
// medians and renders one table with targets and pass/miss.
//
// It installs nothing: missing tools are reported with the Debian package
// that provides them. Every process it starts is in its own process group
// and is killed when Run returns, on error and on cancellation too.
package harness
