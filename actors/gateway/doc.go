// Package gateway owns the gateway node's root of the actor tree
// (DESIGN.md, "Actor tree and directives"):
//
//	gateway (root)     one-for-one, restart, 10 in 10 s then Run returns an error
//	├── api            restart; serves remote clients, checks the client token
//	└── sandboxes      one-for-one (package actors/sandbox)
//	    └── sandbox/NAME
//
// Run starts the remote endpoint on the API address, writes the client
// token (0600) into the state dir, opens the store and spawns the tree.
package gateway
