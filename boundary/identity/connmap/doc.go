// Package connmap records in the kernel which process connected each TCP
// connection, so that the boundary's identity lookup can skip the
// sock_diag request and the /proc fd scan for connections made on this
// machine.
//
// A sock_ops program, attached to the root of the cgroup v2 hierarchy,
// runs when any process's connect() sends its SYN (BPF_SOCK_OPS_TCP_CONNECT_CB,
// in that process's context). It writes the connecting process's tgid and
// uid and the CLOCK_BOOTTIME of the connect into an LRU hash map keyed by
// the network namespace's cookie and the connection's two addresses and
// ports; where the kernel has BTF, also the socket's inode and what the
// process runs (its executable's device and inode, and the code and stack
// addresses its exec chose), so the lookup sees an exec made between the
// connect and itself. Take looks the accepted connection up and removes it (one
// bpf(2) call). The program is made of instructions assembled here (no C
// compiler, no object file) and is detached when the Map is closed or its
// process dies (a bpf link, never pinned).
//
// Loading needs CAP_BPF and CAP_NET_ADMIN (root) and a cgroup v2
// hierarchy (on a cgroup v1 machine, the empty v2 hierarchy mounted beside
// it, /sys/fs/cgroup/unified, is enough: every process is in its root).
// Open fails with the reason otherwise, and callers fall back to
// sock_diag and /proc.
package connmap
