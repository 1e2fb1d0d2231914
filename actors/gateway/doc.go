// Package gateway owns the gateway node's root of the actor tree
// (DESIGN.md, "Actor tree and directives"):
//
//	gateway (root)      one-for-one, restart; a child failing 10 times in 10 s stops Run
//	├── api             restart; serves remote clients (mTLS identity checked per message)
//	├── hello           restart; takes supervisors' Hello, for their own sandbox only
//	├── relay-listener  restart; pairs the two ends of an SSH relay (package actors/relay)
//	└── sandboxes       one-for-one (package actors/sandbox)
//	    └── sandbox/NAME
//
// Run opens the store and the PKI (pki.go: the CA in the state dir, a node
// certificate per start, client certificates on request), starts the
// remote endpoint on the API address (package transport), wires the
// sandbox actors to their seams (the bbolt store, the process driver, the
// system clock) and spawns the tree (treeProps).
package gateway
