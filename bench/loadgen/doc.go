// Package loadgen owns the load generation behind `make bench`: a local
// upstream (a TCP echo server and a TCP sink) and three client loads run
// against it, either directly or through an HTTP CONNECT proxy:
//
//   - Tunnels: C workers for a fixed time; each iteration opens a connection,
//     optionally sends CONNECT and reads the 200, echoes a small payload and
//     closes. It reports tunnels per second and per-tunnel latency.
//   - Bulk: one connection pushing bytes to the sink for a fixed time; it
//     reports the throughput.
//   - Hold: N tunnels opened and kept open together for a fixed time (the
//     memory a proxy needs per open tunnel is measured meanwhile).
//
// Everything is bounded in time and meant for 127.0.0.0/8 addresses only.
package loadgen
