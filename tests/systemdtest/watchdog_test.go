package systemdtest

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestWatchdogRestartsFrozenLeader freezes leaderrun (SIGSTOP, as a hung
// process or a paused host would be). It sends no more WATCHDOG=1; systemd's
// watchdog aborts it and the unit restarts. The job must be dead by the
// guard's kill point (TTL - safety margin after leaderrun's last renewal,
// so at most that long after the freeze) and by the end of the watchdog's
// action; the restarted leaderrun leads again with a higher epoch.
func TestWatchdogRestartsFrozenLeader(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { testWatchdog(t, b) })
	}
}

func testWatchdog(t *testing.T, b backend) {
	const ttl, margin = 15 * time.Second, time.Second // the defaults the unit runs with
	shared := b.setup(t)
	m := leaderMachine(t)
	m.Configure("billing", shared, nil)
	epoch, child := m.start("billing")

	mainPID, _ := strconv.Atoi(m.Show("leaderrun@billing", "MainPID"))
	hostMain, hostChild := m.HostPID(mainPID), m.HostPID(child)
	if hostMain == 0 || hostChild == 0 {
		t.Fatalf("host PIDs of leaderrun %d / child %d not found", mainPID, child)
	}
	frozen := time.Now()
	if err := syscall.Kill(hostMain, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(hostMain, syscall.SIGCONT) })

	// Watch the job (the child's whole process group), leaderrun and the
	// unit closely: which ended when. The watchdog's action is over when
	// systemd has aborted leaderrun, killed what was left of the unit and
	// left the active state (to restart it).
	var childDead, mainDead, unitDown time.Duration
	jobOutlivedUnit := false
	deadline := frozen.Add(time.Minute)
	for (childDead == 0 || mainDead == 0 || unitDown == 0) && time.Now().Before(deadline) {
		if childDead == 0 && !GroupAlive(hostChild) {
			childDead = time.Since(frozen)
		}
		if mainDead == 0 && !Alive(hostMain) {
			mainDead = time.Since(frozen)
		}
		if unitDown == 0 {
			if s := m.Show("leaderrun@billing", "ActiveState"); s != "active" && s != "deactivating" {
				unitDown = time.Since(frozen)
				jobOutlivedUnit = GroupAlive(hostChild) // looked at after systemd said so
				if !jobOutlivedUnit && childDead == 0 {
					childDead = unitDown
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("after the freeze: job dead at %v, leaderrun dead at %v, unit down at %v",
		childDead.Round(time.Millisecond), mainDead.Round(time.Millisecond), unitDown.Round(time.Millisecond))
	if childDead == 0 || mainDead == 0 || unitDown == 0 {
		t.Fatalf("within 1m of the freeze: job dead %v, leaderrun dead %v, unit down %v", childDead, mainDead, unitDown)
	}
	if childDead > ttl-margin {
		t.Errorf("job died %v after the freeze, after the guard's kill point (%v)", childDead, ttl-margin)
	}
	if jobOutlivedUnit {
		t.Errorf("the job was alive after the watchdog's action ended (%v after the freeze)", unitDown)
	}

	j := m.Journal("leaderrun@billing")
	if !strings.Contains(j, "Watchdog timeout") {
		t.Errorf("the journal does not show the watchdog firing:\n%s", j)
	}
	// WatchdogSignal=SIGABRT: the Go runtime writes every goroutine's stack.
	t.Logf("journal: %d lines, %d goroutine stacks", strings.Count(j, "\n"), strings.Count(j, "\ngoroutine "))
	again, _ := m.leading("billing", time.Minute)
	if again <= epoch {
		t.Errorf("after the restart: epoch %d, was %d", again, epoch)
	}
	if n, _ := strconv.Atoi(m.Show("leaderrun@billing", "NRestarts")); n < 1 {
		t.Errorf("NRestarts=%d", n)
	}
	t.Logf("restarted %v after the freeze with epoch %d (was %d)", time.Since(frozen).Round(time.Millisecond), again, epoch)
}
