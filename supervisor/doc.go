// Package supervisor owns the supervisor process of one sandbox (`stockade
// supervisor --spec FILE`, started by a gateway's driver):
//
//	supervisor process
//	├── boundary (actors/boundary)   proxy, dns, conn/N, query/N on the sandbox's listeners
//	└── session                      Hello, heartbeats, WorkloadExited to the gateway
//
// As root it first holds its sandbox's host id range (sandbox/idrange:
// the spec must name one; another sandbox's claim on it fails the start,
// naming that sandbox) and moves the workspace's files out of earlier
// ranges (ids.go). It creates the sandbox's namespaces and workload
// through sandbox/nsrun, serves the boundary on the listeners nsrun hands
// out (identity resolves
// among the sandbox's own processes through the sock_diag socket made in
// its network namespace), and keeps a session with the gateway: a lost
// gateway does not stop the workload; the session says Hello again until a
// gateway answers. The workload's output reaches workload.log through
// the sandbox's init, which drains, cuts and rate-limits it inside the
// sandbox's cgroup; the supervisor writes what init let through, capped
// and rotated, and the markers of what was dropped (workloadlog.go).
// SIGTERM stops the workload gracefully; when the
// supervisor dies, the sandbox's init dies and the kernel kills the rest.
// A sandbox that cannot start however often it is retried (a missing
// command, a hard_requirement path) ends the process with
// contract.ExitSupervisorCannotStart, its last output line the message.
package supervisor
