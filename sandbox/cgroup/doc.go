// Package cgroup owns a sandbox's resource limits: one control group per
// sandbox, made under the supervisor's own group (so it stays inside
// whatever limits the host put there), with pids, memory (swap included)
// and cpu limits, on cgroup v1 (one hierarchy per controller, as on these
// machines) or v2 (the unified hierarchy). It reads the group's use and
// its OOM kills. No actors, no policy: the supervisor wires it.
//
// The group is named after the sandbox and its state dir (SandboxGroup:
// stable across supervisor restarts, distinct between gateways on one
// host). The supervisor removes it on its way out; one it left behind (a
// supervisor killed, as a delete does) is removed by name (RemoveNamed)
// by the gateway's driver when the sandbox is deleted. A
// supervisor that cannot make a group (an unprivileged gateway without a
// delegated cgroup) gets an error wrapping ErrNotEnforced and runs the
// sandbox without limits, saying so.
package cgroup
