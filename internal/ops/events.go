//go:build linux

package ops

import (
	"syscall"

	"github.com/leaderrun/leaderrun/supervise"
)

// Chain returns Events that call a's callback and then b's for every event,
// so several observers (metrics, systemd, a test) can watch one supervisor.
// A callback missing on one side is simply skipped.
func Chain(a, b supervise.Events) supervise.Events {
	return supervise.Events{
		Campaigning:    chain0(a.Campaigning, b.Campaigning),
		Acquired:       chain2(a.Acquired, b.Acquired),
		Renewed:        chain1(a.Renewed, b.Renewed),
		RenewFailed:    chain1(a.RenewFailed, b.RenewFailed),
		ChildStarted:   chain1(a.ChildStarted, b.ChildStarted),
		ChildExited:    chain1(a.ChildExited, b.ChildExited),
		ChildSignalled: chain1[syscall.Signal](a.ChildSignalled, b.ChildSignalled),
		Stopping:       chain2(a.Stopping, b.Stopping),
		HandingOver:    chain0(a.HandingOver, b.HandingOver),
		Released:       chain0(a.Released, b.Released),
		HeldBack:       chain2(a.HeldBack, b.HeldBack),
		JobReady:       chain1(a.JobReady, b.JobReady),
		JobStatus:      chain1(a.JobStatus, b.JobStatus),
		Tick:           chain0(a.Tick, b.Tick),
	}
}

func chain0(f, g func()) func() {
	switch {
	case f == nil:
		return g
	case g == nil:
		return f
	}
	return func() { f(); g() }
}

func chain1[T any](f, g func(T)) func(T) {
	switch {
	case f == nil:
		return g
	case g == nil:
		return f
	}
	return func(x T) { f(x); g(x) }
}

func chain2[T, U any](f, g func(T, U)) func(T, U) {
	switch {
	case f == nil:
		return g
	case g == nil:
		return f
	}
	return func(x T, y U) { f(x, y); g(x, y) }
}
