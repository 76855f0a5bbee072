//go:build linux

package contain

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// sweepNice is the nice value a sweep runs at where leaderrun may raise its
// priority (root, or an RLIMIT_NICE that allows it).
const sweepNice = -20

// raisePriority runs the calling goroutine, on a thread of its own, at
// sweepNice until the returned func is called, which puts the thread's nice
// value back. A sweep that must outrun other processes' forks (it lists
// every pid handed out while it reads /proc) and whose scans count only if
// no pid was handed out twice during two of them, loses that race on a host
// whose cores are all busy at its own priority: descheduled for a few
// hundred milliseconds, a scan could not tell that the pids had not gone
// round meanwhile (DESIGN §1.9). Where the priority cannot be raised the
// sweep runs as it is.
func raisePriority() (restore func()) {
	runtime.LockOSThread()
	tid := unix.Gettid()
	// The raw system call answers 20 - nice.
	prio, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	if err != nil || 20-prio <= sweepNice || unix.Setpriority(unix.PRIO_PROCESS, tid, sweepNice) != nil {
		runtime.UnlockOSThread()
		return func() {}
	}
	return func() {
		if unix.Setpriority(unix.PRIO_PROCESS, tid, 20-prio) == nil {
			runtime.UnlockOSThread()
		}
		// Not put back: the thread stays locked to this goroutine rather
		// than lend its priority to others.
	}
}
