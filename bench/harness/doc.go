// Package harness owns the drivers behind `make bench` and `make
// bench-soak`.
//
// Run (bench/cmd/benchtable) builds stockade and the load generator,
// starts stockade's standalone boundary and its peers (tinyproxy for the
// HTTP CONNECT proxy, dnsmasq for DNS, and gofloor, a minimal Go CONNECT
// proxy, for the CPU a Go proxy costs at least; the boundary runs with its
// defaults, so as root with its connect records), and a second standalone
// boundary with --identity none (serve-noidentity, for what exact identity
// costs) on 127.0.0.1 and, as root, a
// gateway with one sandbox whose workload runs the loads inside it
// through its supervisor's boundary, and, beside it, the standalone
// boundary loaded from a cgroup made like the sandbox's (serve-cgroup, to
// compare the two under the same load); it reads each server's RSS idle and
// with 1,000 tunnels held open, runs every measurement several times
// (loadgen tunnels and bulk loads, dnsperf, the Go benchmarks of policy
// and identity) interleaving the systems, takes medians and renders one
// table with targets and pass/miss.
//
// Soak (bench/cmd/benchsoak) runs a tunnels load through the standalone
// boundary for minutes, samples its RSS at a fixed interval and judges
// the growth by SoakRule.
//
// It installs nothing: missing tools are reported with the Debian package
// that provides them. Every server, load generator and command it starts
// (not the version probes) is in a session of its own
// (so its own process group and, under the kernel's autogroup, its own
// scheduling group, as a service or a gateway's supervisor is) and is
// killed when Run or Soak returns, on error and on cancellation
// too; the sandbox is deleted and any supervisor of the harness's own
// gateway state dir is killed.
package harness
