// Package sandbox is the root of the tree that holds the sandbox process mechanics (namespaces, init, Landlock); it has no code of its own.
package sandbox
