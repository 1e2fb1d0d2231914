// Package actors is the root of stockade's actor tree. Each subpackage is one
// branch of the tree drawn in DESIGN.md ("Actor tree and directives"):
//
//	actors/supervise  strategies that log and count every directive
//	actors/boundary   boundary -> proxy -> conn/N, dns -> query/N
//
// An actor's messages, state and supervision live next to it in its
// package; messages that cross a process are protobuf, in messages/.
package actors
