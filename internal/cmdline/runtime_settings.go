//go:build linux

package cmdline

import (
	"os"
	"runtime"
)

// maxProcs is how many threads run leaderrun's Go code at once. A
// leaderrun process waits on timers and sockets. The runtime's default,
// one per CPU, gave each further CPU its own allocation caches, GC worker
// and threads: 0.6 MiB more anonymous memory at 8 and 1.4 MiB at 32 than
// at 2 (docs/BENCHMARKS.md, "PSS with 10 instances"). And with a second
// one, each renewal's answer was handed from the thread that read it to
// another woken for the purpose, and back: an idle etcd leader and
// standby woke 130-190 times a minute with 2, 50-70 with 1
// (docs/results/bench-2026-12-07-wakeups-2.md). The guard runs on one.
const maxProcs = 1

// runtimeProcs is the GOMAXPROCS leaderrun sets, 0 for leaving it as it
// is: the operator's GOMAXPROCS, from the environment, stands (the
// runtime has applied it already), and so does a smaller default (fewer
// CPUs, or a container's CPU limit).
func runtimeProcs(getenv func(string) (string, bool), procs int) int {
	if v, ok := getenv("GOMAXPROCS"); (!ok || v == "") && procs > maxProcs {
		return maxProcs
	}
	return 0
}

// applyRuntimeSettings sets runtimeProcs for this process; the child's
// environment is not touched.
func applyRuntimeSettings() {
	if n := runtimeProcs(os.LookupEnv, runtime.GOMAXPROCS(0)); n > 0 {
		runtime.GOMAXPROCS(n)
	}
}
