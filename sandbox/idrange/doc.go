// Package idrange owns the host uid/gid ranges of sandboxes when the
// gateway runs as root (DESIGN.md, "Network boundary"): each sandbox's ids
// 0..65535 map to a range of its own, 65,536 host ids from a pool reserved
// for stockade, so no host user holds a sandbox's ids, no two sandboxes
// share theirs, and the kernel's per-user quotas (inotify, user
// namespaces, processes) are each sandbox's own.
//
//   - Range and the pool: a pool is FIRST-LAST, both ends on 65,536
//     boundaries, below 2^31 and above the 16-bit ids; a range is one
//     65,536-aligned slot of it (the upper 16 bits name the sandbox, the
//     lower 16 are the id inside, as systemd-nspawn allocates).
//     DefaultPool is 1879048192-2147352575 (0x70000000-0x7FFDFFFF, 4,094
//     ranges): the block systemd's UID conventions leave unused between
//     the container ranges systemd-nspawn and systemd-nsresourced pick
//     from (524288-1879048191) and systemd's foreign-image range
//     (2147352576-2147418111), below the ids that break code treating
//     uid_t as signed, and more than a billion ids above the ranges
//     useradd writes to /etc/subuid (100000 up to SUB_UID_MAX, 600100000
//     by default).
//   - CheckHost refuses a pool that overlaps any range in /etc/subuid or
//     /etc/subgid, or holds the uid of a user in /etc/passwd or the gid of
//     a group in /etc/group: such a host user could signal, trace or own
//     what a sandbox runs (it would also own the sandbox's user namespace).
//     The error names the file, the line and the fix.
//   - Claims are the host-wide registry: one file per range under a
//     directory on /run (DefaultClaimDir), naming the sandbox (state dir,
//     name, workspace) that has the range. Allocate creates it (O_EXCL),
//     so two gateways with different state dirs, or two cluster nodes of
//     one host, never pick one range; a running supervisor holds an
//     open-file-description lock on it (Hold), and a second holder fails
//     closed with an error naming the first. A claim whose lock is free
//     and whose workspace is gone is stale and may be taken again.
//   - Allocator picks a free range at random (skipping the ranges of the
//     store's records, those it reserved, and those claimed on the host);
//     random, so gateways that do not see each other's records seldom even
//     try one range.
//   - Shift moves a workspace's files from earlier ranges (the single range
//     every sandbox of earlier versions ran as, 100000-165535) into the
//     sandbox's own, by offset, walking by descriptors and never following
//     a link; the workspace's root is moved last, so a root already in the
//     new range means the shift is complete.
package idrange
