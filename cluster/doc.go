// Package cluster is a gateway node's membership in a cluster of nodes
// that keep their state in etcd: the node's lease, the live nodes, who owns
// which sandbox, placement, and the fenced store the node's sandbox actors
// write through.
//
// Keys, under a prefix (default "/stockade/"):
//
//	nodes/NODE        NodeInfo (JSON), bound to NODE's lease: NODE is live
//	owners/SANDBOX    the owning node's name, bound to its lease; the key's
//	                  CreateRevision is the owner's fencing token
//	sandboxes/SANDBOX the sandbox's record (store/etcdstore)
//	clients/SERIAL    a client certificate the cluster issued (revocations)
//
// Ownership is etcd's, not the node's belief: an owner key exists only
// while its node renews its lease, and every record write of an owner is
// one transaction conditioned on the owner key still having the token the
// node got when it claimed it. A node that lost its lease (killed, paused,
// cut off) can therefore never write again; and a node stops driving its
// sandboxes on its own (self-fencing) a third of a TTL before its lease can
// expire at etcd, counted from when it sent its last successful renewal.
//
// Placement is rendezvous hashing over the live nodes of the sandbox's host
// (its workspace and supervisor live there): every node computes the same
// winner from the same view, with no coordination, and a node's death
// moves only its own sandboxes. Claims are create-if-absent transactions,
// so two nodes whose views differ for a moment never both own a sandbox.
//
// The node reads the whole prefix once and watches it from the revision
// after that read, so no change between the read and the watch is missed
// (protoactor's etcd provider started its watch without the read's
// revision and activated grains twice).
package cluster
