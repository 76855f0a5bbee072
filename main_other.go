//go:build !linux

// leaderrun needs Linux: process groups with PR_SET_PDEATHSIG, a child
// subreaper and cgroup v2 are what stop a job on time and make sure all of
// it is gone. On any other system this file is the whole program,
// so that a build succeeds and says so instead of failing deep inside a
// package.
package main

import (
	"fmt"
	"os"
	"runtime"
)

func main() {
	fmt.Fprintf(os.Stderr, "leaderrun: runs on Linux only (this is %s/%s): it needs process groups with PR_SET_PDEATHSIG, a child subreaper and cgroup v2 to stop a job on time\n", runtime.GOOS, runtime.GOARCH)
	os.Exit(125)
}
