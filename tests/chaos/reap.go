//go:build linux

package chaos

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leaderrun/leaderrun/tests/testsupport"
)

// Orphans of the suite's jobs (an escaped writer, a fork storm's relays, the
// guard of a killed leaderrun) are re-parented to the nearest child
// subreaper or else to PID 1, which in some containers and VMs never reaps:
// every one of them would stay a zombie until the machine restarts, and a
// fork storm that outlives its job makes hundreds a second. ReapOrphans
// makes the test process that subreaper and reaps, among its children, the
// zombies of the given programs only (matched by their command name); the
// processes the test starts itself are reaped by their own Wait.

// ReapOrphans starts reaping; call the returned function to stop.
func ReapOrphans(exes ...string) (stop func()) {
	comms := map[string]bool{}
	for _, e := range exes {
		base := e[strings.LastIndexByte(e, '/')+1:]
		if len(base) > 15 {
			base = base[:15] // the kernel's comm is at most 15 bytes
		}
		comms[base] = true
	}
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			reapZombies(comms)
			select {
			case <-quit:
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		close(quit)
		wg.Wait()
		reapZombies(comms)
	}
}

// reapZombies collects the zombie children of this process whose command
// name is in comms.
func reapZombies(comms map[string]bool) {
	self := os.Getpid()
	for _, pid := range testsupport.Pids() {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 2 || f[0] != "Z" || f[1] != strconv.Itoa(self) || !comms[s[open+1:end]] {
			continue
		}
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	}
}
