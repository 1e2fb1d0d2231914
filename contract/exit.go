package contract

// Exit codes of the CLI (README.md, "Exit codes"). A workload's own exit
// status passes through `sandbox exec` unchanged.
const (
	ExitOK          = 0 // done
	ExitFailure     = 1 // the verb failed (the message says why)
	ExitUsage       = 2 // bad flags or arguments
	ExitNotFound    = 3 // no such sandbox (or policy revision)
	ExitRefused     = 4 // not in this phase, or not allowed
	ExitUnreachable = 5 // no gateway, or it did not answer
)
