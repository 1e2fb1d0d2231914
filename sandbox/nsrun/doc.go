// Package nsrun owns the namespace runtime of one sandbox: the processes,
// namespaces, mounts, Landlock domain and descriptors that put a workload
// behind the policy boundary (DESIGN.md, "Network boundary"). It has no
// actors and no policy; the supervisor drives it.
//
// Three stages, all the same binary (a running Go process never calls
// unshare, and never enters a user or mount namespace; its one setns is
// the root parent's into init's network namespace, below):
//
//   - Parent (the supervisor): Start re-execs the binary (through
//     /proc/self/fd, so a mapped uid needs no access to its directory) as the
//     init stage in new user, pid, network, mount, UTS and IPC namespaces.
//     As root the sandbox's ids 0..HostIDCount-1 map to its own host range
//     from HostIDBase (required; package idrange allocates them), the
//     clone runs on a thread whose effective uid and gid are HostIDBase,
//     so the user namespace is owned by the sandbox's uid and the kernel
//     charges the sandbox's per-user counts (inotify, namespaces) there,
//     not to host root (userns.go), and the workspace directory is chowned
//     to the sandbox user and handed over as a detached mount (open_tree);
//     unprivileged, only RunAsUser/RunAsGroup map, to the caller's own
//     uid/gid (setgroups denied). Host root is never mapped. As root, before
//     it sends init the config (init starts nothing before that), it makes
//     the proxy listener itself inside init's network namespace: setns on a
//     locked thread (unlocked only once back in its own namespace), lo up,
//     then the net package's listener with keep-alive off; a listener
//     adopted from a descriptor would turn keep-alive on for every
//     accepted connection, four system calls per tunnel.
//   - Init (pid 1 of the sandbox): sets its user namespace's per-uid
//     inotify limits (user.max_inotify_instances and _watches) to half a
//     host user's, brings lo up with one RTM_NEWLINK, creates
//     the proxy listener (127.0.0.1:3128) unless the parent made it, the
//     DNS UDP socket and TCP listener (127.0.0.1:53) and a
//     NETLINK_SOCK_DIAG socket inside the sandbox's network namespace. It
//     makes / rprivate and builds a new root on a tmpfs, since /sandbox
//     must be a mount point and the host's / is never written: the host's
//     top-level directories bound as they are (recursively), fresh /proc
//     and /sys (only lo), private tmpfs on /tmp, /var/tmp, /dev/shm and
//     /run, the workspace on /sandbox, Hidden directories covered by an
//     empty read-only tmpfs, and a generated
//     resolv.conf (nameserver 127.0.0.1) moved onto /etc/resolv.conf with
//     move_mount, which covers a symlink itself rather than its target.
//     Every mount the workload can write in (the workspace, each tmpfs, a
//     bind of or around a read-write path; an image's root when there are
//     images: hardenMount) is nosuid,nodev; read-only system binds keep the
//     host's flags (see bindAttr for why /usr's setuid programs stay
//     inert). Bind sources and mount points are opened component by
//     component (resolver): a symlink is followed only where the workload
//     cannot write, so neither a bind nor a mount is redirected by a link
//     it planted in its workspace, its tmpfs or a read-write path; an
//     absolute link in the new root stays in it. It pivots into the root,
//     detaches the old one and makes the root tmpfs read-only. It then starts
//     the exec stage, hands the descriptors (three or four), the warnings
//     and the workload's pid to the parent over a SOCK_SEQPACKET socketpair
//     (SCM_RIGHTS), reaps every orphan, reports the workload's exit status,
//     serves Exec requests (below), and exits when the parent's end of the
//     socketpair closes; the kernel then kills every process of the pid
//     namespace. Init stays outside Landlock and ignores the signals a
//     workload could send it.
//   - Exec: empties the inheritable and ambient capability sets, cuts the
//     bounding set to Docker's default (never CAP_SYS_ADMIN or
//     CAP_NET_ADMIN), drops supplementary groups, sets RunAsGroup and
//     RunAsUser, enters Workdir, sets no_new_privs, applies Landlock from
//     the Filesystem spec (each path opened like a mount point: a link the
//     workload could have made is not followed, and the path is skipped
//     with a warning, or fails the start in HardRequirement mode), marks
//     every descriptor above stderr
//     close-on-exec (close_range) and execs the workload with HTTP(S)_PROXY
//     pointing at the proxy. A failure before execve (a missing binary, a
//     hard_requirement path) fails Start with the cause; one no retry can
//     heal (the command missing or not executable, a missing workdir or
//     hard_requirement path) is marked ErrCannotStart across the stages,
//     its text naming the path and the fix (CannotStartReason).
//
// With Spec.Output, init takes the workload's stdout and stderr (pump.go):
// they are pipes init made, which a goroutine each reads without pause
// and cuts into lines (package linelimit: pieces of at most 16 KiB, an
// unfinished line after 200 ms), letting lines through at the line rate
// and byte rate the Output gives, both streams together. Init is in the
// sandbox's cgroup from before its start (Spec.Cgroup), so a flood is the
// sandbox's CPU and memory. What passes goes to the parent as frames
// (output.go) on a pipe only init holds (descriptor 5, close-on-exec; the
// workload cannot open init's descriptors through /proc: that takes
// ptrace access to init), with the counts of what was dropped, by reason,
// at most ten times a second; the parent's Sandbox reads them into
// Output.Sink. Init keeps at most 256 KiB for a parent that falls behind
// and drops (and counts) the rest: the workload never waits. When its
// channel closes, init kills the sandbox's other processes, passes on
// what their pipes held and its last counts (within a second each for the
// reading and the writing), then exits; Close returns once the sink has
// had it all. Exec'd processes keep the descriptors the parent gave.
//
// Filesystem.BaselineReadOnly and BaselineReadWrite (the caller's baseline,
// e.g. policy.Baseline) are bound and allowed besides the policy's lists; a
// missing baseline path is skipped silently. Spec.ProxyLoopback takes
// loopback names out of the workload's NO_PROXY.
//
// Sandbox.Exec runs another process in a running sandbox without setns:
// the parent sends init a request (an ID, argv, env, workdir, session and
// controlling-terminal flags) with the process's stdin, stdout and stderr
// as SCM_RIGHTS, and init starts it through the same exec stage as the
// workload, with the workload's config but for argv, env and workdir, so it
// is confined exactly like the workload. Init answers with the start (its
// pid as SCM_CREDENTIALS, which the kernel translates to the host's
// numbering) or the failure, then the exit status it reaped, all keyed by
// the ID; any number of Execs may be in flight. Signals go through init,
// which holds a pidfd for each process. A failed request concerns only its
// caller. Exec'd processes end with the sandbox (Close, Kill, init's
// death), not with the workload; once the workload has exited Exec refuses.
//
// Landlock is applied with the raw system calls to the exec stage's locked
// thread, which is the one that execs, so the workload inherits the domain;
// go-landlock would restrict every thread through libcap's psx, which links
// cgo into the whole binary. From ABI 6 the domain also scopes signals and
// abstract unix sockets, so the workload can neither signal nor ptrace init.
//
// The binary's main must call MaybeRunStage first; a test binary calls it
// from TestMain.
//
// RunAsUser defaults to 0: root of the sandbox's user namespace, which is an
// unprivileged uid on the host (HostIDBase as root), without the capabilities that
// could undo the sandbox (and Landlock forbids mount changes). A policy's
// run_as_user is resolved to a number by the caller.
//
// Kernel: open_tree/move_mount (5.2), openat2 (5.6), close_range with
// CLOSE_RANGE_CLOEXEC (5.11), mount_setattr (5.12); Landlock (5.13) is
// required only by HardRequirement.
package nsrun
