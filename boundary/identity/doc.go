// Package identity owns peer identity for connections accepted by the
// boundary's proxy: which process (pid, executable, ancestor executables)
// holds the client end of an accepted TCP connection.
//
// The Netlink resolver maps the connection's 4-tuple to the client socket's
// inode with one exact NETLINK_SOCK_DIAG request (never a dump, never
// /proc/net/tcp), finds the owning pid by scanning /proc/<pid>/fd of the
// candidate processes (newest first, with an inode cache), then reads
// /proc/<pid>/exe and the exe of each ancestor along the ppid chain. As root
// it subscribes to the kernel's process events, which say when what it
// read of a process is stale; a caller that marks when it accepted a
// connection (Marker) lets the lookup rely on a drain of those events
// begun since. Each identity carries what its processes run (Exec), so a
// boundary can take it at accept and confirm it when the request is
// complete (Rechecker, image.go), and judge whether those processes run
// code the workload could have written: a preloaded library, a mapping
// from a writable path, a tracer (Inspector, tamper.go). The None
// resolver is endpoint-only mode: it identifies nothing and the caller
// ignores binaries.
package identity
