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

// ExitSupervisorCannotStart is the exit status of a `stockade supervisor`
// whose sandbox cannot start however often it is retried: the command does
// not exist or cannot be executed in the sandbox (execve ENOENT, EACCES,
// ENOEXEC), the working directory is missing, or a hard_requirement
// filesystem path is missing (or the kernel has no Landlock). The last line
// of its output (supervisor.log) is the message, naming the path and the
// fix. The gateway's driver reports such an exit as driver.ErrCannotStart
// and the sandbox goes to Error/StartFailed without retries. 78 is
// sysexits' EX_CONFIG: nothing a retry can change.
const ExitSupervisorCannotStart = 78
