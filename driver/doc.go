// Package driver is the root of the sandbox drivers: how a gateway starts,
// watches and stops the supervisor process of a sandbox. driver/process is
// the embedded default (a local process per sandbox).
package driver
