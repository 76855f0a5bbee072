//go:build linux

package cmdline

import (
	"os"
	"runtime"
	"runtime/debug"
)

const (
	// maxProcs is how many threads run leaderrun's Go code at once. A
	// leaderrun process waits on timers and sockets; the runtime's default,
	// one per CPU, gave each further CPU its own allocation caches, GC
	// worker and threads: 0.6 MiB more anonymous memory at 8 and 1.4 MiB at
	// 32 than at 2, the count every test and benchmark runs with
	// (docs/BENCHMARKS.md, "PSS with 10 instances").
	maxProcs = 2
	// gcPercent is the heap growth that starts a collection, where the
	// runtime's default is 100: a standby that allocates per renewal (the
	// DynamoDB client most) keeps less garbage resident between
	// collections, for collections of a heap of a few MiB.
	gcPercent = 50
)

// runtimeSettings is the GOMAXPROCS and GOGC leaderrun sets, 0 for
// leaving it as it is: the operator's GOMAXPROCS or GOGC, from the
// environment, stands (the runtime has applied it already).
func runtimeSettings(getenv func(string) (string, bool), cpus int) (procs, gc int) {
	if v, ok := getenv("GOMAXPROCS"); (!ok || v == "") && cpus > maxProcs {
		procs = maxProcs
	}
	if v, ok := getenv("GOGC"); !ok || v == "" {
		gc = gcPercent
	}
	return procs, gc
}

// applyRuntimeSettings sets runtimeSettings for this process.
func applyRuntimeSettings() {
	procs, gc := runtimeSettings(os.LookupEnv, runtime.GOMAXPROCS(0))
	if procs > 0 {
		runtime.GOMAXPROCS(procs)
	}
	if gc > 0 {
		debug.SetGCPercent(gc)
	}
}
