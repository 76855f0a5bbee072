//go:build linux

package e2e

import (
	"os"
	"strconv"
	"syscall"
	"time"
)

// markedKey is a fresh key, the mark the children of its leaderruns carry
// (HOLDERS_TEST_MARK, which slotChildren and leaderChild look for) and the
// environment that sets it.
func markedKey(prefix string) (key, mark string, env []string) {
	key = newKey(prefix)
	mark = key + "-" + strconv.Itoa(os.Getpid())
	return key, mark, []string{"HOLDERS_TEST_MARK=" + mark}
}

// stopAll sends SIGTERM to every leaderrun, then waits for each.
func stopAll(procs ...*Proc) {
	for _, p := range procs {
		p.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		p.Wait(20 * time.Second)
	}
}
