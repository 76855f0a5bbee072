// Package exitcode is the one table of leaderrun's exit codes (DESIGN §4).
// They follow GNU timeout: leaderrun's own outcomes sit just below the
// shell's 126 and 127, so a script can tell them from most of a job's.
package exitcode

const (
	// Lost: leadership was lost and the job was stopped.
	Lost = 123
	// NotHeld: not leader within --acquire-timeout, or --no-wait while
	// another holder leads.
	NotHeld = 124
	// Internal: leaderrun's own failure: usage, configuration, or the
	// backend refused (ACL, authentication, TLS).
	Internal = 125
	// NotExecutable: the command exists but cannot be executed.
	NotExecutable = 126
	// NotFound: the command, or its #! interpreter, was not found.
	NotFound = 127
	// SignalBase plus N: the job was ended by signal N.
	SignalBase = 128

	// CheckNotLeader is `leaderrun check`'s answer when the epoch no
	// longer leads (0 when it does, Internal on error).
	CheckNotLeader = 1

	// ControlNotDone is the answer of step-down and pause when what they
	// asked did not happen in time: nobody else took the key, a leader
	// kept it (0 when done, Internal on bad input).
	ControlNotDone = 1

	// StatusNeverUsed is `leaderrun status`'s answer when nobody leads the
	// key and the backend has no trace of it ever being used where it
	// looked: a mistyped key or the wrong server, prefix or lock directory
	// (0 for a key that was used and is free now, Internal on error).
	StatusNeverUsed = 3
)
